//! The command pool: spawn, wait, poll, kill, page output.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use ctm_workspace_fs::{FsError, Workspace};
use ring::rand::{SecureRandom, SystemRandom};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;

use crate::buffer::{RetainedStream, Slice};
use crate::env::{EnvInherit, EnvPolicy, EnvSpec, build_env};
use crate::namespace::{self, SandboxConfig, TierChoice};
use crate::paths::{Reach, path_arguments_of, privileged_executable_of};
use crate::policy::{GateState, Gates, Permission, Reading, Refusal, classify_line};
use crate::roots::{Toolchains, discover};
use crate::runtime_dirs::RuntimeDirError;
use crate::runtime_dirs::{RetentionBudget, RuntimeDirs};
use crate::sandbox::{ChildSandbox, SandboxRoots};
use crate::shell::CommandLine;
use crate::signal::Signal;
use crate::supervisor::Launch;
use crate::{sandbox, seccomp, supervisor};

/// How long a finished command's readers may drain after it exits while
/// processes it left may still hold its output open.
const EXIT_DRAIN: Duration = Duration::from_millis(50);
/// How long they may take when nothing of the command is left: every
/// write end is closed, so end-of-file is on its way, however loaded the
/// machine (returning earlier would report an exit without its output).
const EXIT_DRAIN_TREE_GONE: Duration = Duration::from_secs(5);
/// Quiet period that ends a wait after input was written.
const QUIET_AFTER_INPUT: Duration = Duration::from_millis(150);
/// A PTY command's start returns once it has printed something and then
/// been quiet this long (a prompt is waiting for input).
pub const TTY_SETTLE: Duration = Duration::from_millis(50);
/// Grace between TERM and KILL when a timeout fires.
const TIMEOUT_GRACE: Duration = Duration::from_secs(1);

/// Why an exec operation failed.
///
/// Not `Clone` or `PartialEq`: the start and runtime-directory failures
/// carry their `io::Error` as the [`std::error::Error::source`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExecError {
    /// No such command (never existed, or evicted).
    #[error("command {0} was not found (it finished and was evicted, or never existed)")]
    NotFound(String),
    /// stdin of a pipe-mode command is closed after its `stdin` text.
    #[error("command {0} has no open stdin (pipe mode closes stdin after the initial text)")]
    Closed(String),
    /// The command has ended: nothing can be written to it.
    #[error("command {id} has ended ({how}); nothing can be written to it")]
    Ended {
        /// The command.
        id: String,
        /// How it ended: `exited with code 0`, `timed out (SIGTERM)`, ...
        how: String,
    },
    /// Too many commands running.
    #[error("{active} commands are running; the limit is {max}")]
    LimitReached {
        /// Running now.
        active: usize,
        /// The limit.
        max: usize,
    },
    /// The policy refused the command.
    #[error("the command needs the '{}' permission ({})", .0.permission.as_str(), .0.evidence)]
    Permission(Refusal),
    /// The working directory was refused.
    #[error("workdir: {0}")]
    Workdir(FsError),
    /// The process could not be started.
    #[error("the command could not be started: {source}")]
    Spawn {
        /// Why: the OS error of the pipe, terminal or fork, or what the
        /// sandbox could not set up.
        #[source]
        source: std::io::Error,
    },
    /// [`ExecRuntime::shutdown`] was called: no command starts any more.
    #[error("the command could not be started: the server is shutting down")]
    ShuttingDown,
    /// The runtime directory is missing (it could not be created when the
    /// runtime was built).
    #[error("the runtime directory is unusable: {0}")]
    RuntimeDir(#[source] Arc<RuntimeDirError>),
    /// An `output_ref` that names no stream of a command.
    #[error("invalid output_ref {0:?}: expected command:<id>:stdout or command:<id>:stderr")]
    InvalidRef(String),
    /// The command, an environment variable or a signal cannot be passed
    /// to a process (a NUL byte, a name with `=`, a signal number the
    /// kernel does not name).
    #[error("{0}")]
    Unrepresentable(String),
    /// A terminal was asked for (`tty`), and this build of the crate has no
    /// PTY support (its `pty` feature is off).
    #[error(
        "this build runs commands on pipes only: a terminal (tty) needs ctm-exec-runtime's `pty` feature"
    )]
    TtyUnavailable,
}

/// A count of what the pool holds ([`ExecRuntime::stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PoolStats {
    /// Commands with a process alive.
    pub active: usize,
    /// Commands whose output the pool holds (alive, or finished and
    /// readable until pruned).
    pub retained: usize,
    /// Bytes of output retained, both streams of every command.
    pub retained_bytes: u64,
}

/// How a command ended (or not yet).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Still running.
    Running,
    /// Exited with a code (any code).
    Exited,
    /// Ended by a signal.
    Terminated,
    /// Ended by its `timeout_ms` watchdog.
    Timeout,
}

impl Status {
    /// Stable name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Exited => "exited",
            Self::Terminated => "terminated",
            Self::Timeout => "timeout",
        }
    }
}

/// Which stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// stdout (and, under a PTY, everything).
    Stdout,
    /// stderr.
    Stderr,
}

impl Stream {
    /// Stable name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stdout => "stdout",
            Self::Stderr => "stderr",
        }
    }
}

/// The new output of one stream since the last answer.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Delta {
    /// The text (UTF-8, lossy), at most the byte budget: the start and the
    /// end of the new output, with a marker where the middle was left out.
    pub text: String,
    /// Absolute offset where the new output starts.
    pub start_offset: u64,
    /// Absolute offset where it ends (the stream's total).
    pub end_offset: u64,
    /// New bytes in all.
    pub new_bytes: u64,
    /// Bytes evicted before they could be returned.
    pub omitted_bytes: u64,
    /// The middle left out of `text`: (offset, length), pageable with read_output.
    pub elided: Option<(u64, u64)>,
    /// Bytes of `text` before the gap (all of it when nothing was left out).
    pub head_bytes: u64,
    /// Bytes of `text` after the gap.
    pub tail_bytes: u64,
    /// Bytes of the stream evicted from the retained buffer so far (no
    /// longer readable with `read_output`), whether or not this answer
    /// would have shown them.
    pub dropped_bytes: u64,
    /// Lines the stream has printed in all (a last line without a newline
    /// counts).
    pub lines: u64,
    /// The stream's last line that is not blank, trimmed (from what is
    /// retained; empty when there is none).
    pub last_line: String,
}

impl Delta {
    /// Whether the answer does not carry all new output.
    pub fn truncated(&self) -> bool {
        self.elided.is_some() || self.omitted_bytes > 0
    }
}

/// What one exec/poll answers.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Snapshot {
    /// The command.
    pub command_id: String,
    /// Its status now.
    pub status: Status,
    /// Exit code, once exited.
    pub exit_code: Option<i32>,
    /// The signal, once ended by one.
    pub signal: Option<Signal>,
    /// The signal's number, once ended by one.
    pub signal_number: Option<i32>,
    /// The watchdog ended it.
    pub timed_out: bool,
    /// Time since it started.
    pub elapsed: Duration,
    /// New stdout.
    pub stdout: Delta,
    /// New stderr.
    pub stderr: Delta,
    /// Run under a PTY.
    pub tty: bool,
    /// Why the wait ended.
    pub wait_end: WaitEnd,
    /// The command's shell has exited but processes it started still run
    /// (they count against the active-command limit until they end).
    pub background_running: bool,
    /// Safe mode's git seal: what came of the command's changes to the
    /// git directory, once its last process is gone.
    pub git_seal: Option<crate::gitseal::SealReport>,
}

/// Why a wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitEnd {
    /// The command exited.
    Exited,
    /// The deadline passed.
    Deadline,
    /// Output went quiet after input.
    Quiet,
    /// The caller cancelled.
    Cancelled,
}

/// A kill's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KillStatus {
    /// Ended by the requested signal (or another non-KILL signal).
    Terminated,
    /// Ended by SIGKILL.
    Killed,
    /// It had already exited, or exited normally.
    Exited,
    /// Still alive after escalation.
    Terminating,
}

impl KillStatus {
    /// Stable name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Terminated => "terminated",
            Self::Killed => "killed",
            Self::Exited => "exited",
            Self::Terminating => "terminating",
        }
    }
}

/// What `kill` did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct KillOutcome {
    /// The verdict.
    pub status: KillStatus,
    /// Signals sent to the command's processes, in order.
    pub signals_sent: Vec<Signal>,
    /// Processes the signals reached (the shell and everything it started).
    pub processes_signalled: usize,
    /// The command was running when the signals were sent and has ended
    /// since, however it ended (a program that catches TERM and exits 0
    /// counts).
    pub ended_by_kill: bool,
    /// The final snapshot.
    pub snapshot: Snapshot,
}

/// One page of retained output.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OutputPage {
    /// The stream.
    pub stream: Stream,
    /// The bytes served and where.
    pub slice: Slice,
    /// Bytes the stream ever produced.
    pub total_bytes: u64,
    /// Bytes of the frozen head.
    pub head_retained_bytes: u64,
    /// Bytes evicted between head and tail.
    pub evicted_gap_bytes: u64,
    /// Bytes of the stream held now (head and tail).
    pub retained_bytes: u64,
    /// Where the contiguous retained run that reaches the end starts: 0
    /// while nothing was evicted, else the tail's start.
    pub retained_start_offset: u64,
    /// Bytes evicted from stdout and from stderr so far.
    pub dropped_bytes: (u64, u64),
    /// Whether the command still runs (more may come).
    pub running: bool,
}

/// The runtime's configuration.
#[derive(Debug, Clone)]
pub struct ExecConfig {
    /// The gates of the permission mode.
    pub gates: Gates,
    /// Environment base set.
    pub inherit: EnvInherit,
    /// The operator's include/exclude patterns and fixed variables.
    pub env_policy: EnvPolicy,
    /// Retention and pool budgets.
    pub budget: RetentionBudget,
    /// Extra read roots from the operator (`--exec-allow-root`,
    /// `CODING_TOOLS_MCP_EXEC_ALLOW_ROOTS`).
    pub allow_roots: Vec<PathBuf>,
    /// The namespace tier: asked for or not, git sealing, its entry program.
    pub sandbox: SandboxConfig,
}

/// Whether commands may write the workspace (`--workspace-mutation`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum WorkspaceWrites {
    /// They may (the default).
    #[default]
    Unrestricted,
    /// They see it read-only but for these directories (absolute, beneath
    /// the workspace, checked by the caller; made when the first command
    /// starts): only the audited mutators of the host write the rest.
    /// Enforced by Landlock (both tiers) and by a read-only mount (the
    /// namespace tier).
    StructuredOnly {
        /// The directories commands may still write.
        write_paths: Vec<PathBuf>,
    },
}

impl WorkspaceWrites {
    /// The workspace is read-only to commands.
    pub fn structured_only(&self) -> bool {
        matches!(self, Self::StructuredOnly { .. })
    }

    /// The directories commands may write in a read-only workspace.
    pub fn write_paths(&self) -> &[PathBuf] {
        match self {
            Self::Unrestricted => &[],
            Self::StructuredOnly { write_paths } => write_paths,
        }
    }
}

impl ExecConfig {
    /// The gates of `mode` (network off), the core environment, and the
    /// defaults for the rest: what a host that only picks a mode needs.
    pub fn for_mode(mode: crate::policy::PermissionMode) -> Self {
        Self {
            gates: Gates::for_mode(mode, false),
            inherit: EnvInherit::Core,
            env_policy: EnvPolicy::default(),
            budget: RetentionBudget::default(),
            allow_roots: Vec::new(),
            sandbox: SandboxConfig::default(),
        }
    }
}

/// The sandbox commands of this runtime get, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TierReport {
    /// `namespace`, `landlock` or `none`.
    pub tier: &'static str,
    /// Why not the namespace tier (when it is not).
    pub reason: Option<String>,
    /// The one-line fix, when the host is the reason.
    pub fix: Option<String>,
    /// A network namespace with loopback only (namespace tier, network closed).
    pub private_network: bool,
    /// `.git`'s config, hooks and info are read-only to commands.
    pub git_sealed: bool,
}

/// Safe mode's git seal as it stands ([`ExecRuntime::git_seal_status`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct GitSealStatus {
    /// Nothing a command writes can make the user's git run a program.
    pub sealed: bool,
    /// `overlay` (the git directory copy-on-write, changes carried back
    /// validated), `read-only binds`, `none` or `off`.
    pub design: &'static str,
    /// What keeps the seal from being complete.
    pub gaps: Vec<String>,
    /// The seal is incomplete for a reason the operator should hear of (a
    /// missing tier or overlay, a path it cannot cover) — not merely
    /// because the workspace root is no repository.
    pub degraded: bool,
    /// What is protected, workspace-relative.
    pub protected: Vec<String>,
}

/// A command to start: [`ExecRequest::new`], then set the fields that
/// differ from the defaults.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ExecRequest {
    /// The shell command line.
    pub cmd: String,
    /// Workspace-relative working directory.
    pub workdir: String,
    /// Watchdog.
    pub timeout: Duration,
    /// Run under a PTY.
    pub tty: bool,
    /// Text for stdin (pipe mode: then EOF).
    pub stdin: String,
    /// Caller variables.
    pub env: BTreeMap<String, String>,
}

impl ExecRequest {
    /// `cmd` in the workspace root, under the default watchdog
    /// ([`ExecRequest::DEFAULT_TIMEOUT`]), on pipes, with empty stdin and no
    /// caller variables.
    pub fn new(cmd: impl Into<String>) -> Self {
        Self {
            cmd: cmd.into(),
            ..Self::default()
        }
    }

    /// The default watchdog: 30 seconds.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

    /// Runs in `workdir` (workspace-relative).
    #[must_use]
    pub fn with_workdir(mut self, workdir: impl Into<String>) -> Self {
        self.workdir = workdir.into();
        self
    }

    /// Ends the command (TERM, then KILL) once `timeout` has passed.
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Runs under a PTY (stdin stays open for [`ExecRuntime::poll`]).
    #[must_use]
    pub fn with_tty(mut self, tty: bool) -> Self {
        self.tty = tty;
        self
    }

    /// Writes `stdin` first (in pipe mode, then closes stdin).
    #[must_use]
    pub fn with_stdin(mut self, stdin: impl Into<String>) -> Self {
        self.stdin = stdin.into();
        self
    }

    /// Adds the caller's variables.
    #[must_use]
    pub fn with_env(mut self, env: BTreeMap<String, String>) -> Self {
        self.env = env;
        self
    }
}

impl Default for ExecRequest {
    /// An empty command line; see [`ExecRequest::new`].
    fn default() -> Self {
        Self {
            cmd: String::new(),
            workdir: ".".into(),
            timeout: Self::DEFAULT_TIMEOUT,
            tty: false,
            stdin: String::new(),
            env: BTreeMap::new(),
        }
    }
}

/// How long [`ExecRuntime::exec`] and [`ExecRuntime::poll`] wait, and how
/// much new output their [`Snapshot`] carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct WaitOptions {
    /// The longest wait for the command to exit (a PTY command's start and
    /// a write of input also end it when output goes quiet).
    pub wait: Duration,
    /// Most bytes of each stream's new output in the answer: the start and
    /// the end, with the middle left out ([`Delta::elided`]).
    pub max_output_bytes: usize,
}

impl WaitOptions {
    /// Waits at most `wait`.
    #[must_use]
    pub fn with_wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// Answers with at most `max_output_bytes` of each stream.
    #[must_use]
    pub fn with_max_output_bytes(mut self, max_output_bytes: usize) -> Self {
        self.max_output_bytes = max_output_bytes;
        self
    }
}

/// Most bytes of each stream in an answer by default (64 KiB).
pub const DEFAULT_MAX_OUTPUT_BYTES: usize = 64 * 1024;

impl Default for WaitOptions {
    /// Ten seconds, [`DEFAULT_MAX_OUTPUT_BYTES`].
    fn default() -> Self {
        Self {
            wait: Duration::from_secs(10),
            max_output_bytes: DEFAULT_MAX_OUTPUT_BYTES,
        }
    }
}

/// How [`ExecRuntime::kill`] ends a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct KillOptions {
    /// The first signal, sent to every process of the command.
    pub signal: Signal,
    /// How long to wait for them to end before escalating to KILL.
    pub wait: Duration,
    /// How long to wait after KILL.
    pub kill_wait: Duration,
    /// Most bytes of each stream's new output in the final snapshot.
    pub max_output_bytes: usize,
}

impl KillOptions {
    /// Sends `signal` first.
    #[must_use]
    pub fn with_signal(mut self, signal: Signal) -> Self {
        self.signal = signal;
        self
    }

    /// Waits `wait` after the first signal before KILL.
    #[must_use]
    pub fn with_wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// Waits `kill_wait` after KILL.
    #[must_use]
    pub fn with_kill_wait(mut self, kill_wait: Duration) -> Self {
        self.kill_wait = kill_wait;
        self
    }

    /// Answers with at most `max_output_bytes` of each stream.
    #[must_use]
    pub fn with_max_output_bytes(mut self, max_output_bytes: usize) -> Self {
        self.max_output_bytes = max_output_bytes;
        self
    }
}

impl Default for KillOptions {
    /// TERM, five seconds, KILL, two seconds, [`DEFAULT_MAX_OUTPUT_BYTES`].
    fn default() -> Self {
        Self {
            signal: Signal::Term,
            wait: Duration::from_secs(5),
            kill_wait: Duration::from_secs(2),
            max_output_bytes: DEFAULT_MAX_OUTPUT_BYTES,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct ExitInfo {
    code: Option<i32>,
    signal: Option<i32>,
    at: Instant,
}

struct State {
    stdout: RetainedStream,
    stderr: RetainedStream,
    cursor_out: u64,
    cursor_err: u64,
    exit: Option<ExitInfo>,
    timed_out: bool,
    readers_open: u8,
    last_output: Option<Instant>,
    /// The supervisor still runs: something of this command is alive.
    tree_alive: bool,
    /// What the git seal kept and refused, once carried back.
    seal_report: Option<crate::gitseal::SealReport>,
    /// Nothing of the command runs any more; its changes to the git
    /// directory are being carried back (a wait lasts until that is done).
    settling: bool,
}

type Writer = Box<dyn AsyncWrite + Send + Unpin>;

struct Cmd {
    id: String,
    /// The supervisor: every process of the command is below it.
    pid: i32,
    tty: bool,
    started: Instant,
    state: Mutex<State>,
    changed: watch::Sender<u64>,
    stdin: tokio::sync::Mutex<Option<Writer>>,
    /// Started below bubblewrap, which reports a shell killed by signal N
    /// as exit code 128+N.
    wrapped: bool,
    /// Started in the workspace's shared namespaces (`crate::holder`):
    /// when the supervisor reports PID 1's end, nothing of the command is
    /// left, and the answer need not wait for the supervisor's own exit.
    joined: std::sync::atomic::AtomicBool,
    /// Signals we sent the command (bit N: signal N).
    signalled: std::sync::atomic::AtomicU64,
    /// Git files that did not exist when the command started and that no
    /// mount can cover while missing (`.git/commondir`, `config.worktree`):
    /// whatever the command made there is removed when it is gone.
    git_watch: Vec<PathBuf>,
    /// The command's copy-on-write git directory, carried back when its
    /// last process is gone (and the lock that orders carry-backs).
    seal: Option<(crate::gitseal::SealJob, Arc<Mutex<()>>, Option<PathBuf>)>,
    /// Never-writable entries missing when the command started.
    missing_protected: Vec<PathBuf>,
    /// What the seal bound read-only for this command (workspace-relative).
    sealed_read_only: Vec<String>,
    /// Never-writable links and where they led (see `SealPlan::links`).
    sealed_links: Vec<(PathBuf, PathBuf)>,
    /// Safe mode: the repositories at and directly below the workspace
    /// root when the command started.
    repos_before: Option<std::collections::BTreeSet<PathBuf>>,
    workspace_root: PathBuf,
}

impl Cmd {
    /// The command's output says a write met a read-only file system.
    fn said_read_only(&self) -> bool {
        const NEEDLE: &[u8] = b"Read-only file system";
        let s = self.lock();
        [&s.stderr, &s.stdout].iter().any(|b| {
            let head = b.read(0, b.head_len() as usize).bytes;
            let tail_at = b.tail_start().max(b.head_len());
            let tail = b.read(tail_at, (b.total() - tail_at) as usize).bytes;
            [head, tail]
                .iter()
                .any(|x| memchr::memmem::find(x, NEEDLE).is_some())
        })
    }

    fn note_signal(&self, sig: rustix::process::Signal) {
        if let Ok(n) = u32::try_from(sig.as_raw())
            && n < 64
        {
            self.signalled
                .fetch_or(1 << n, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// The shell's end as the caller sees it: below bubblewrap, exit code
    /// 128+N after we sent signal N is that signal.
    fn unwrap_status(&self, code: Option<i32>, signal: Option<i32>) -> (Option<i32>, Option<i32>) {
        let sent = self.signalled.load(std::sync::atomic::Ordering::SeqCst);
        match code {
            Some(c) if self.wrapped && (129..192).contains(&c) && sent & (1 << (c - 128)) != 0 => {
                (None, Some(c - 128))
            }
            _ => (code, signal),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn bump(&self) {
        self.changed.send_modify(|v| *v = v.wrapping_add(1));
    }

    fn exited(&self) -> bool {
        self.lock().exit.is_some()
    }

    fn alive(&self) -> bool {
        self.lock().tree_alive
    }

    /// Waits until nothing of the command runs, or the deadline.
    async fn wait_gone(&self, deadline: Instant) -> bool {
        let mut rx = self.changed.subscribe();
        loop {
            if !self.alive() {
                return true;
            }
            tokio::select! {
                r = rx.changed() => if r.is_err() { return !self.alive() },
                () = tokio::time::sleep_until(tokio::time::Instant::from_std(deadline)) => return !self.alive(),
            }
        }
    }
}

struct Inner {
    cfg: ExecConfig,
    /// Whether commands may write the workspace.
    workspace_writes: WorkspaceWrites,
    /// Its write paths as made (see `made_write_paths`).
    made_write_paths: OnceLock<Vec<PathBuf>>,
    workspace: Workspace,
    dirs: Result<Arc<RuntimeDirs>, Arc<RuntimeDirError>>,
    inherited_env: Vec<(String, String)>,
    /// Where commands may read and run, and the toolchain variables; and
    /// the read roots the sandbox's private /tmp and /run would hide.
    /// Found off start-up's path (a background thread, or the first use).
    discovered: OnceLock<(Toolchains, Vec<PathBuf>)>,
    /// The sandbox's roots, opened at the first command (None: no Landlock
    /// in this mode or host).
    roots: OnceLock<Option<SandboxRoots>>,
    /// The tier, decided at the first command or report.
    tier: OnceLock<TierReport>,
    /// The namespace tier's entry program, held open (it is exec'd as
    /// `/proc/self/fd/N`, so a rebuilt or moved binary does not matter).
    helper: Option<OwnedFd>,
    /// Set by [`ExecRuntime::shutdown`]: no command starts any more.
    closed: std::sync::atomic::AtomicBool,
    commands: Mutex<HashMap<String, Arc<Cmd>>>,
    /// Commands past the active limit's check and not yet in `commands`
    /// (changed only under the `commands` lock, so the check and the
    /// reservation are one step).
    starting: std::sync::atomic::AtomicUsize,
    rng: SystemRandom,
    /// Whether the git seal's overlay can be made here (probed once).
    seal_probe: OnceLock<Result<PathBuf, String>>,
    /// Carry-backs into the real git directory, one at a time.
    seal_lock: Arc<Mutex<()>>,
    seal_count: std::sync::atomic::AtomicU64,
    /// The trusted git that indexes packs a command wrote.
    seal_git: OnceLock<Option<PathBuf>>,
    /// The namespace tier's shared namespaces (see `crate::holder`).
    holder: Mutex<HolderSlot>,
}

impl Inner {
    /// The toolchains and hidden read roots, found once.
    fn discovered(&self) -> &(Toolchains, Vec<PathBuf>) {
        self.discovered.get_or_init(|| {
            let mut toolchains = discover(&self.inherited_env, &self.cfg.allow_roots);
            let runtime: Vec<&Path> = self.dirs.as_ref().map(|d| d.root()).into_iter().collect();
            crate::roots::add_workspace_venvs(
                &mut toolchains,
                &self.workspace,
                &self.inherited_env,
                &runtime,
            );
            let hidden = toolchains
                .read_roots
                .iter()
                .filter_map(|r| r.canonicalize().ok())
                .filter(|r| r.starts_with("/tmp") || r.starts_with("/run"))
                .collect();
            (toolchains, hidden)
        })
    }
}

/// The workspace's current holder, or why commands build their own
/// sandbox each.
#[derive(Default)]
struct HolderSlot {
    current: Option<Arc<crate::holder::Holder>>,
    failed: Option<String>,
}

fn per_command() -> bool {
    static PER_COMMAND: OnceLock<bool> = OnceLock::new();
    *PER_COMMAND.get_or_init(|| {
        std::env::var_os(PER_COMMAND_VAR).is_some_and(|v| v != "0" && !v.is_empty())
    })
}

/// Set (to anything but `0`) in the server's environment: every command
/// builds its own sandbox, as before shared namespaces (slower; for
/// comparison, and as a way out should joining fail on a host).
pub const PER_COMMAND_VAR: &str = "CODING_TOOLS_MCP_SANDBOX_PER_COMMAND";

/// The workspace's command pool; clones share it.
#[derive(Clone)]
pub struct ExecRuntime {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ExecRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecRuntime").finish_non_exhaustive()
    }
}

/// Builds an [`ExecRuntime`]: the configuration, and what the runtime may
/// change in the host process (nothing unless asked).
#[derive(Debug, Clone)]
pub struct ExecRuntimeBuilder {
    cfg: ExecConfig,
    subreaper: bool,
    workspace_writes: WorkspaceWrites,
    warm_up: bool,
}

impl ExecRuntimeBuilder {
    /// A builder for runtimes with `cfg`.
    pub fn new(cfg: ExecConfig) -> Self {
        Self {
            cfg,
            subreaper: false,
            workspace_writes: WorkspaceWrites::default(),
            warm_up: true,
        }
    }

    /// Whether [`build`](Self::build) starts [`ExecRuntime::warm_up`] on a
    /// thread of its own at once (the default). A host that wants nothing
    /// beside its own start-up turns it off and calls `warm_up` when it is
    /// ready; otherwise the first command or report does the work.
    pub fn warm_up(&mut self, yes: bool) -> &mut Self {
        self.warm_up = yes;
        self
    }

    /// Whether commands may write the workspace (by default they may).
    pub fn workspace_writes(&mut self, writes: WorkspaceWrites) -> &mut Self {
        self.workspace_writes = writes;
        self
    }

    /// Makes the host process a child subreaper (`PR_SET_CHILD_SUBREAPER`)
    /// when the runtime is built, so the processes a command leaves behind
    /// are re-parented to the host and reaped there instead of by init; off
    /// by default, because it changes the whole process (a program that
    /// runs other children then reaps orphans of those as well).
    pub fn subreaper(&mut self, yes: bool) -> &mut Self {
        self.subreaper = yes;
        self
    }

    /// A pool for `workspace`, with commands' `HOME`/`TMPDIR` in `dirs`.
    /// Without a runtime directory the pool still reports and pages, and
    /// every [`ExecRuntime::exec`] fails with [`ExecError::RuntimeDir`].
    pub fn build(
        &self,
        workspace: Workspace,
        dirs: Result<Arc<RuntimeDirs>, Arc<RuntimeDirError>>,
    ) -> ExecRuntime {
        if self.subreaper {
            // Orphaned grandchildren are re-parented to us, so we can reap them.
            let _ = rustix::process::set_child_subreaper(Some(rustix::process::getpid()));
        }
        let rt = ExecRuntime::with_config(
            self.cfg.clone(),
            self.workspace_writes.clone(),
            workspace,
            dirs,
        );
        if self.warm_up {
            let inner = Arc::downgrade(&rt.inner);
            std::thread::spawn(move || {
                crate::background_priority();
                if let Some(inner) = inner.upgrade() {
                    (ExecRuntime { inner }).warm_up();
                }
            });
        }
        rt
    }
}

impl ExecRuntime {
    /// [`ExecRuntimeBuilder::new`].
    pub fn builder(cfg: ExecConfig) -> ExecRuntimeBuilder {
        ExecRuntimeBuilder::new(cfg)
    }

    fn with_config(
        cfg: ExecConfig,
        workspace_writes: WorkspaceWrites,
        workspace: Workspace,
        dirs: Result<Arc<RuntimeDirs>, Arc<RuntimeDirError>>,
    ) -> Self {
        // `vars()` would panic on a variable that is not UTF-8; such a
        // variable cannot be passed through the UTF-8 `env` either.
        let inherited_env: Vec<(String, String)> = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .collect();
        {
            let mut distrust: Vec<&Path> = vec![workspace.root()];
            if let Ok(d) = &dirs {
                distrust.push(d.root());
            }
            namespace::distrust_for_programs(&distrust);
        }
        let helper = cfg.sandbox.helper.as_deref().and_then(|p| {
            rustix::fs::open(
                p,
                rustix::fs::OFlags::PATH | rustix::fs::OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
            )
            .ok()
        });
        Self {
            inner: Arc::new(Inner {
                cfg,
                workspace_writes,
                made_write_paths: OnceLock::new(),
                workspace,
                dirs,
                inherited_env,
                discovered: OnceLock::new(),
                roots: OnceLock::new(),
                tier: OnceLock::new(),
                helper,
                closed: std::sync::atomic::AtomicBool::new(false),
                commands: Mutex::new(HashMap::new()),
                starting: std::sync::atomic::AtomicUsize::new(0),
                rng: SystemRandom::new(),
                seal_probe: OnceLock::new(),
                seal_lock: Arc::new(Mutex::new(())),
                seal_count: std::sync::atomic::AtomicU64::new(0),
                seal_git: OnceLock::new(),
                holder: Mutex::new(HolderSlot::default()),
            }),
        }
    }

    /// Does now what the first command would otherwise do first: finds the
    /// toolchains and read roots (a few hundred stats) and probes the
    /// namespace tier's builder. Each is done once, whoever asks first.
    pub fn warm_up(&self) {
        self.inner.discovered();
        let cfg = &self.inner.cfg;
        if cfg.gates.landlock
            && cfg.sandbox.tier != TierChoice::Landlock
            && self.inner.helper.is_some()
        {
            namespace::support();
        }
    }

    fn commands(&self) -> MutexGuard<'_, HashMap<String, Arc<Cmd>>> {
        self.inner
            .commands
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    fn get(&self, id: &str) -> Result<Arc<Cmd>, ExecError> {
        self.commands()
            .get(id)
            .cloned()
            .ok_or_else(|| ExecError::NotFound(id.to_owned()))
    }

    /// Commands with a process alive (a running shell, or what it left
    /// running in the background).
    pub fn active(&self) -> usize {
        self.commands().values().filter(|c| c.alive()).count()
    }

    /// Checks the active limit and takes a place under it in one step
    /// under the pool's lock: commands being started count (60 concurrent
    /// starts against a limit of 16 ran 17 when the check and the
    /// registration were apart).
    fn reserve_slot(&self, max: usize) -> Result<Slot<'_>, ExecError> {
        use std::sync::atomic::Ordering;
        let map = self.commands();
        let starting = self.inner.starting.load(Ordering::SeqCst);
        let active = map.values().filter(|c| c.alive()).count() + starting;
        if active >= max {
            return Err(ExecError::LimitReached { active, max });
        }
        self.inner.starting.fetch_add(1, Ordering::SeqCst);
        drop(map);
        Ok(Slot {
            rt: self,
            filled: false,
        })
    }

    /// What the pool holds now: commands alive, commands whose output is
    /// retained (alive or finished and not yet pruned), and the bytes of
    /// that output. One pass under the pool's lock.
    pub fn stats(&self) -> PoolStats {
        let map = self.commands();
        let mut stats = PoolStats {
            retained: map.len(),
            ..PoolStats::default()
        };
        for c in map.values() {
            let s = c.lock();
            if s.tree_alive {
                stats.active += 1;
            }
            stats.retained_bytes += (s.stdout.retained() + s.stderr.retained()) as u64;
        }
        stats
    }

    /// Where commands may read and execute, and the toolchain variables.
    pub fn toolchains(&self) -> &Toolchains {
        &self.inner.discovered().0
    }

    /// Which sandbox commands get (decided once, at the first command or
    /// report: it may probe bubblewrap).
    pub fn tier(&self) -> &TierReport {
        self.inner.tier.get_or_init(|| {
            let cfg = &self.inner.cfg;
            let report = |tier, reason: Option<String>, fix: Option<String>| TierReport {
                tier,
                reason,
                fix,
                private_network: false,
                git_sealed: false,
            };
            if !cfg.gates.landlock {
                return report("none", Some("dangerous mode: no sandbox".into()), None);
            }
            let landlock = if sandbox::support().available {
                "landlock"
            } else {
                "none"
            };
            if cfg.sandbox.tier == TierChoice::Landlock {
                return report(
                    landlock,
                    Some("the namespace tier is turned off (--sandbox landlock)".into()),
                    None,
                );
            }
            if self.inner.helper.is_none() {
                return report(
                    landlock,
                    Some("the host program provides no sandbox entry".into()),
                    None,
                );
            }
            let ns = namespace::support();
            if !ns.available() {
                return report(landlock, ns.reason.clone(), ns.fix.clone());
            }
            // Found before this runtime said where commands write: check again.
            if let Some(b) = &ns.bwrap {
                let mut w: Vec<&Path> = vec![self.inner.workspace.root()];
                if let Ok(d) = &self.inner.dirs {
                    w.push(d.root());
                }
                if namespace::inside_writable(b, &w) {
                    return report(
                        landlock,
                        Some(format!("{} lies where commands write: not used", b.display())),
                        Some("install bubblewrap where only root can write (apt-get install bubblewrap)".into()),
                    );
                }
            }
            TierReport {
                tier: "namespace",
                reason: None,
                fix: None,
                private_network: cfg.gates.network == GateState::Blocked,
                git_sealed: cfg.sandbox.seal_git,
            }
        })
    }

    /// The server's private directory of overlay layers (inside the
    /// runtime directory, hidden from commands), once the host has been
    /// found able to make the seal's overlay.
    fn seal_root(&self) -> Result<&Path, &str> {
        self.inner
            .seal_probe
            .get_or_init(|| {
                let dirs = self
                    .inner
                    .dirs
                    .as_ref()
                    .map_err(|e| format!("no runtime directory: {e}"))?;
                let root = dirs.root().join("seal");
                if !root.is_dir() {
                    use std::os::unix::fs::DirBuilderExt;
                    std::fs::DirBuilder::new()
                        .mode(0o700)
                        .create(&root)
                        .map_err(|e| format!("cannot make {}: {e}", root.display()))?;
                }
                crate::gitseal::probe_overlay(&root).map(|()| root)
            })
            .as_ref()
            .map(PathBuf::as_path)
            .map_err(String::as_str)
    }

    /// The git seal as it stands for the next command: whether it is
    /// complete, how it is made, and every gap.
    pub fn git_seal_status(&self) -> GitSealStatus {
        let off = |design: &'static str, why: String| GitSealStatus {
            sealed: false,
            design,
            gaps: vec![why],
            protected: Vec::new(),
            degraded: design != "off",
        };
        if !self.inner.cfg.sandbox.seal_git {
            return off("off", "the git seal is for safe mode".into());
        }
        if !self.namespace_tier() {
            return off(
                "none",
                format!(
                    "commands run in the {} tier, where .git and the files git runs are writable by commands ({})",
                    self.tier().tier,
                    self.tier().reason.clone().unwrap_or_default()
                ),
            );
        }
        let ws = self.inner.workspace.root();
        let plan = crate::gitseal::plan(ws);
        let mut gaps = plan.gaps.clone();
        let design = match (&plan.overlay, self.seal_root()) {
            (Some(_), Ok(_)) => "overlay",
            (Some(_), Err(why)) => {
                gaps.push(format!(
                    "the copy-on-write git directory cannot be made here ({why}); only config, hooks and info are bound read-only"
                ));
                "read-only binds"
            }
            (None, _) => "read-only binds",
        };
        let rel = |p: &Path| p.strip_prefix(ws).unwrap_or(p).display().to_string();
        let mut protected: Vec<String> = plan
            .overlay
            .iter()
            .map(|g| format!("{} (copy-on-write)", rel(g)))
            .collect();
        protected.extend(
            plan.binds
                .iter()
                .filter(|(k, _)| *k == ctm_sandbox::namespace::Bind::ReadOnly)
                .map(|(_, p)| rel(p)),
        );
        // A workspace that is no repository has nothing to seal yet: said
        // in `gaps`, not warned about.
        let degraded = gaps.len() > usize::from(plan.no_repository);
        GitSealStatus {
            sealed: gaps.is_empty(),
            design,
            gaps,
            protected,
            degraded,
        }
    }

    fn namespace_tier(&self) -> bool {
        self.tier().tier == "namespace"
    }

    /// The Landlock roots, opened at first use. In the namespace tier TCP
    /// is left to the network namespace (inside it only loopback exists, so
    /// a test server a command starts is reachable; the host's is not).
    fn roots(&self) -> Option<&SandboxRoots> {
        self.inner
            .roots
            .get_or_init(|| {
                let cfg = &self.inner.cfg;
                // `open` is None where the kernel (or this build) has no Landlock.
                cfg.gates
                    .landlock
                    .then(|| {
                        let writes = &self.inner.workspace_writes;
                        let mut read = self.inner.discovered().0.read_roots.clone();
                        let workspace = if writes.structured_only() {
                            read.push(self.inner.workspace.root().to_path_buf());
                            self.made_write_paths().to_vec()
                        } else {
                            vec![self.inner.workspace.root().to_path_buf()]
                        };
                        let runtime: Vec<PathBuf> = self
                            .inner
                            .dirs
                            .as_ref()
                            .ok()
                            .map(|d| d.root().to_path_buf())
                            .into_iter()
                            .collect();
                        SandboxRoots::open(
                            &read,
                            &workspace,
                            &runtime,
                            cfg.gates.network == GateState::Blocked && !self.namespace_tier(),
                        )
                    })
                    .flatten()
            })
            .as_ref()
    }

    /// Where commands may write: the workspace (or, when it is read-only
    /// to them, its write paths) and the runtime directory.
    pub fn write_roots(&self) -> Vec<PathBuf> {
        let mut v = write_roots_of(&self.inner.workspace, &self.inner.dirs);
        let writes = &self.inner.workspace_writes;
        if writes.structured_only() {
            // Those granted, once made; those asked for before.
            let granted = self
                .inner
                .made_write_paths
                .get()
                .map_or(writes.write_paths(), Vec::as_slice);
            v.remove(0);
            v.splice(0..0, granted.iter().cloned());
        }
        v
    }

    /// The write paths of a read-only workspace, made at the first
    /// command that needs them (once: not on every command's path).
    fn made_write_paths(&self) -> &[PathBuf] {
        self.inner.made_write_paths.get_or_init(|| {
            make_write_paths(
                &self.inner.workspace,
                self.inner.workspace_writes.write_paths(),
            )
        })
    }

    /// Whether commands may write the workspace.
    pub fn workspace_writes(&self) -> &WorkspaceWrites {
        &self.inner.workspace_writes
    }

    fn new_id(&self) -> String {
        let mut b = [0u8; 8];
        if self.inner.rng.fill(&mut b).is_err() {
            b = (Instant::now().elapsed().as_nanos() as u64 ^ u64::from(std::process::id()))
                .to_le_bytes();
        }
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    /// Drops finished commands past their TTL, past the count, or over the
    /// byte budget (oldest first).
    fn prune(&self) {
        let b = &self.inner.cfg.budget;
        let mut map = self.commands();
        let ttl = Duration::from_secs(b.retained_ttl_secs);
        map.retain(|_, c| {
            let s = c.lock();
            s.tree_alive || s.exit.is_none_or(|e| e.at.elapsed() < ttl)
        });
        let mut finished: Vec<(Instant, String, usize)> = map
            .values()
            .filter_map(|c| {
                let s = c.lock();
                if s.tree_alive {
                    return None;
                }
                s.exit.map(|e| {
                    (
                        e.at,
                        c.id.clone(),
                        s.stdout.retained() + s.stderr.retained(),
                    )
                })
            })
            .collect();
        finished.sort();
        let mut total: usize = map
            .values()
            .map(|c| {
                let s = c.lock();
                s.stdout.retained() + s.stderr.retained()
            })
            .sum();
        let mut count = finished.len();
        for (_, id, bytes) in finished {
            if count <= b.max_retained_commands && total <= b.max_total_bytes {
                break;
            }
            map.remove(&id);
            count -= 1;
            total -= bytes;
        }
    }

    /// Checks the policy, starts `req`, and waits for it like [`Self::poll`]
    /// (until it exits, `opts.wait` passes or `cancel` completes; a PTY
    /// command also until its output goes quiet).
    pub async fn exec(
        &self,
        req: ExecRequest,
        opts: WaitOptions,
        cancel: impl Future<Output = ()>,
    ) -> Result<Snapshot, ExecError> {
        if self.is_closed() {
            return Err(ExecError::ShuttingDown);
        }
        if req.tty && !cfg!(feature = "pty") {
            return Err(ExecError::TtyUnavailable);
        }
        if req.cmd.contains('\0') {
            return Err(ExecError::Unrepresentable(
                "the command contains a NUL byte, which no process argument can hold".into(),
            ));
        }
        if let Some(k) = req
            .env
            .iter()
            .find(|(k, v)| k.is_empty() || k.contains(['=', '\0']) || v.contains('\0'))
            .map(|(k, _)| k)
        {
            return Err(ExecError::Unrepresentable(format!(
                "env {k:?}: a name must be non-empty without '=' or NUL, a value without NUL"
            )));
        }
        self.prune();
        let dirs = self
            .inner
            .dirs
            .as_ref()
            .map_err(|e| ExecError::RuntimeDir(Arc::clone(e)))?
            .clone();
        let workdir = self
            .inner
            .workspace
            .resolve_lexically(&req.workdir)
            .map_err(ExecError::Workdir)?;
        // The child enters the directory through this handle (fchdir), never
        // by its path: a directory swapped for a symlink after the check
        // cannot move the command outside the workspace.
        let cwd_handle = self
            .inner
            .workspace
            .open_dir_handle(&workdir)
            .map_err(ExecError::Workdir)?;
        // Only for finding a relative executable: the checked path, lexically.
        let cwd = self.inner.workspace.root().join(workdir.relative());
        let env_pairs: Vec<(&str, &str)> = req
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let gates = self.inner.cfg.gates;
        let home = dirs.home();
        let env = self.command_env(&req, &dirs);
        // One reading of the command line for every gate.
        let mut line = CommandLine::lex(&req.cmd);
        // The call's `stdin` is the shell's standard input: a command that
        // reads it is fed as through a pipe (`sh` with a program there is
        // inline code).
        if !req.stdin.is_empty() {
            for c in line.commands.iter_mut().filter(|c| c.stdin_data.is_empty()) {
                c.piped = true;
            }
        }
        // And the programs it hands on, read once for the three gates.
        let reading = Reading::of(line);
        if gates.privileged_executable == GateState::Blocked
            && let Some(p) = privileged_executable_of(
                &reading,
                env.get("PATH").map(String::as_str).unwrap_or_default(),
                &cwd,
            )
        {
            return Err(ExecError::Permission(Refusal {
                permission: Permission::PrivilegedExecutable,
                evidence: format!("{} is setuid/setgid", p.display()),
                path: Some(p.display().to_string()),
                inline: None,
            }));
        }
        if gates.filesystem_escape == GateState::Blocked {
            let reach = Reach {
                private_system_dirs: self.namespace_tier(),
                workspace: &self.inner.workspace,
                workdir: workdir.relative(),
                runtime: dirs.root(),
                home: &home,
                read_roots: &self.inner.discovered().0.read_roots,
            };
            if let Some(a) = path_arguments_of(&reading)
                .into_iter()
                .find(|a| !reach.allows(a))
            {
                return Err(ExecError::Permission(Refusal {
                    permission: Permission::FilesystemEscape,
                    evidence: a.text.clone(),
                    path: Some(a.text),
                    inline: None,
                }));
            }
        }
        if let Some(r) = classify_line(&reading, &env_pairs)
            .into_iter()
            .find(|r| !gates.allows(r.permission))
        {
            return Err(ExecError::Permission(r));
        }
        let max = self.inner.cfg.budget.max_active_commands;
        let slot = self.reserve_slot(max)?;
        let cmd = self.spawn(&req, cwd_handle, &env)?;
        slot.fill(&cmd);
        // Started while the server began to shut down (after `shutdown`
        // looked at the commands): it ends now, not never. (If the process
        // exits first, the supervisor's parent-death signal ends it.)
        if self.is_closed() {
            kill_tree(cmd.pid).await;
            return Err(ExecError::ShuttingDown);
        }
        // The next command's ruleset, built while this one starts.
        if let Some(r) = self.roots() {
            r.refill();
        }
        self.watchdog(&cmd, req.timeout);
        let settle = req.tty.then_some(TTY_SETTLE);
        let end = wait_for(&cmd, Instant::now() + opts.wait, settle, cancel).await;
        Ok(snapshot(&cmd, end, opts.max_output_bytes))
    }

    fn command_env(&self, req: &ExecRequest, dirs: &RuntimeDirs) -> BTreeMap<String, String> {
        let home = dirs.home().to_string_lossy().into_owned();
        let tmp = dirs.tmp().to_string_lossy().into_owned();
        let cache = dirs.cache().to_string_lossy().into_owned();
        let gates = self.inner.cfg.gates;
        let mut toolchain = self.inner.discovered().0.env.clone();
        if gates.network == GateState::Blocked && toolchain.iter().any(|(k, _)| k == "RUSTUP_HOME")
        {
            // A missing toolchain is an error here, never a download.
            toolchain.push(("RUSTUP_AUTO_INSTALL".into(), "0".into()));
        }
        build_env(&EnvSpec {
            inherited: &self.inner.inherited_env,
            inherit: self.inner.cfg.inherit,
            filter_sensitive: gates.secret_env_filter,
            home: &home,
            tmp: &tmp,
            cache: &cache,
            tty: req.tty,
            toolchain: &toolchain,
            policy: &self.inner.cfg.env_policy,
            caller: &req.env,
        })
    }

    fn sandbox(&self, tty: bool) -> Result<Option<ChildSandbox>, ExecError> {
        self.roots()
            .map(|r| r.for_command(tty))
            .transpose()
            .map_err(|e| ExecError::Spawn {
                source: std::io::Error::new(e.kind(), LandlockRuleset(e)),
            })
    }

    /// How the namespace tier's sandbox is set up: `per workspace` (made
    /// once, joined by each command; also before the first command), or
    /// `per command: <why>`.
    pub fn namespace_setup(&self) -> String {
        if per_command() {
            return format!("per command: {PER_COMMAND_VAR} is set");
        }
        let slot = self.inner.holder.lock().unwrap_or_else(|p| p.into_inner());
        match &slot.failed {
            Some(why) => format!("per command: {why}"),
            None => "per workspace".into(),
        }
    }

    /// The workspace's shared namespaces for commands of `plan` (made now
    /// when there are none, or none of this plan); `None`: each command
    /// builds its own sandbox (asked so, or joining failed here, said once
    /// in the log).
    fn holder(&self, plan: &namespace::Plan<'_>) -> Option<Arc<crate::holder::Holder>> {
        if per_command() {
            return None;
        }
        // What every command of the workspace shares: the plan without
        // the command's own parts.
        let mut shared = plan.clone();
        shared.hide = None;
        shared.seal_binds = &[];
        shared.legacy_git_seal = false;
        shared.ruleset_fd = -1;
        shared.read_access = 0;
        shared.write_access = 0;
        shared.terminal_access = 0;
        shared.tty = false;
        shared.hold = Some(-1);
        let key = namespace::argv(&shared);
        let mut slot = self.inner.holder.lock().unwrap_or_else(|p| p.into_inner());
        if slot.failed.is_some() {
            return None;
        }
        if let Some(h) = &slot.current
            && h.fits(&key)
        {
            return Some(h.clone());
        }
        let made = (|| {
            use std::os::fd::AsRawFd;
            let (ours, theirs) = crate::holder::socket_pair()?;
            shared.hold = Some(theirs.as_raw_fd());
            let argv = namespace::argv(&shared);
            let holder = crate::holder::Holder::build(
                key,
                &argv,
                [shared.helper_fd, theirs.as_raw_fd()],
                &ours,
            )?;
            drop(theirs);
            let mut targets: Vec<&Path> = vec![plan.workspace];
            targets.extend(plan.runtime);
            targets.extend(plan.hidden_roots.iter().map(PathBuf::as_path));
            holder.fortify(&targets)?;
            let holder = Arc::new(holder);
            self.probe_joined(&holder)?;
            Ok::<_, String>(holder)
        })();
        match made {
            Ok(h) => {
                slot.current = Some(h.clone());
                Some(h)
            }
            Err(e) => {
                tracing::warn!(
                    "the namespace tier's shared namespaces could not be used ({e}); each command builds its own sandbox"
                );
                slot.failed = Some(e);
                slot.current = None;
                None
            }
        }
    }

    /// Runs `exit 0` in `holder`'s namespaces the way a command runs.
    #[expect(
        clippy::disallowed_methods,
        reason = "the one probe of a holder's namespaces belongs to the exec runtime"
    )]
    fn probe_joined(&self, holder: &Arc<crate::holder::Holder>) -> Result<(), String> {
        use std::os::fd::AsRawFd;
        use std::os::unix::process::CommandExt;
        let joined = crate::holder::Joined::new(
            holder.clone(),
            Path::new("/"),
            Vec::new(),
            Vec::new(),
            None,
            &[],
            crate::holder::Inside::default(),
        )?;
        let cwd = rustix::fs::open(
            "/",
            rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .map_err(|e| e.to_string())?;
        let launch = Launch::new("exit 0", &BTreeMap::new(), cwd, None, true, true, None)?
            .with_joined(Some(joined));
        let (status_r, status_w) =
            rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(|e| e.to_string())?;
        let status_fd = status_w.as_raw_fd();
        let mut command = std::process::Command::new("/bin/sh");
        command
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        // SAFETY: as in `spawn`: system calls on values prepared before the fork.
        #[expect(unsafe_code, reason = "pre_exec runs code between fork and exec")]
        unsafe {
            command.pre_exec(move || supervisor::split(status_fd, &launch));
        }
        let child = command
            .spawn()
            .map_err(|e| format!("joining the namespaces: {e}"))?;
        drop(status_w);
        let mut msg = [0u8; 8];
        let n = rustix::io::read(&status_r, &mut msg).unwrap_or(0);
        let out = child.wait_with_output().map_err(|e| e.to_string())?;
        let status = (n == 8).then(|| i32::from_ne_bytes([msg[0], msg[1], msg[2], msg[3]]));
        match status.map(supervisor::decode) {
            Some((Some(0), None)) => Ok(()),
            got => Err(format!(
                "a command in them ended with {got:?}: {:?}",
                String::from_utf8_lossy(&out.stderr).trim()
            )),
        }
    }

    fn spawn(
        &self,
        req: &ExecRequest,
        cwd: std::os::fd::OwnedFd,
        env: &BTreeMap<String, String>,
    ) -> Result<Arc<Cmd>, ExecError> {
        use std::os::fd::AsRawFd;
        let gates = self.inner.cfg.gates;
        let ns = self.namespace_tier();
        // The seccomp filter comes from the thread that forks (see
        // `seccomp::on_filtered_thread`): installed once, inherited by all.
        // Not in the namespace tier: bubblewrap must mount and unshare; the
        // sandbox's entry installs it after.
        let filtered = !ns && gates.landlock && seccomp::available().is_ok();
        let deny_tcp = gates.network == GateState::Blocked;
        let runtime = tokio::runtime::Handle::current();
        let spawn_on =
            move |f: Box<dyn FnOnce() -> std::io::Result<tokio::process::Child> + Send>| {
                if filtered {
                    let runtime = runtime.clone();
                    seccomp::on_filtered_thread(deny_tcp, move || {
                        let _in_runtime = runtime.enter();
                        f()
                    })
                    .unwrap_or_else(|| Err(std::io::Error::other("the spawner thread is gone")))
                } else {
                    f()
                }
            };
        // The supervisor reports the shell's wait status on this pipe.
        let (status_r, status_w) =
            rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(spawn_error)?;
        let status_fd = status_w.as_raw_fd();
        let budget = self.inner.cfg.budget.buffer_bytes_per_stream;
        let ws_root = self.inner.workspace.root().to_path_buf();
        // A workspace read-only to commands needs no seal of its `.git`.
        let read_only = self.inner.workspace_writes.structured_only();
        let seal_plan = (ns && self.inner.cfg.sandbox.seal_git && !read_only)
            .then(|| crate::gitseal::plan(&ws_root));
        let (seal_job, mut ns_setup) = match (&seal_plan, self.seal_root()) {
            (Some(plan), Ok(root)) if plan.overlay.is_some() => {
                let n = self
                    .inner
                    .seal_count
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let git_dir = plan.overlay.clone().unwrap_or_default();
                let job = crate::gitseal::SealJob::new(root, n, &git_dir).map_err(spawn_error)?;
                let data = job.mount_data();
                (Some(job), Some((git_dir, data)))
            }
            _ => (None, None),
        };
        let legacy_seal = seal_plan.is_some() && seal_job.is_none();
        let git_watch = if legacy_seal {
            namespace::watched_when_missing(&ws_root)
        } else {
            Vec::new()
        };
        // The server's overlay layers are covered in every namespace-tier
        // command of safe mode, with an overlay or without (a command that
        // makes the workspace a repository switches the next ones to it).
        let hide = seal_job
            .as_ref()
            .and_then(|j| j.scratch.parent().map(Path::to_path_buf))
            .or_else(|| {
                (ns && self.inner.cfg.sandbox.seal_git)
                    .then(|| self.seal_root().ok().map(Path::to_path_buf))
                    .flatten()
            });
        let seal_binds = seal_plan
            .as_ref()
            .map(|p| p.binds.clone())
            .unwrap_or_default();
        // Safe mode, either tier: what a command creates where IDEs, agents
        // and git look without asking is named in its result.
        let watching = self.inner.cfg.sandbox.seal_git;
        let missing_protected = match &seal_plan {
            Some(p) => p.missing_protected.clone(),
            None if watching => crate::gitseal::NEVER_WRITABLE
                .iter()
                .map(|n| ws_root.join(n))
                .filter(|p| std::fs::symlink_metadata(p).is_err())
                .collect(),
            None => Vec::new(),
        };
        let repos_before = watching.then(|| crate::gitseal::shallow_repos(&ws_root));
        let sealed_links = seal_plan
            .as_ref()
            .map(|p| p.links.clone())
            .unwrap_or_default();
        let sealed_read_only: Vec<String> = seal_binds
            .iter()
            .filter(|(k, _)| *k == ctm_sandbox::namespace::Bind::ReadOnly)
            .filter_map(|(_, p)| p.strip_prefix(&ws_root).ok())
            .map(|p| p.display().to_string())
            .collect();
        let seal_git = seal_job.is_some().then(|| {
            self.inner
                .seal_git
                .get_or_init(|| {
                    let rt = self
                        .inner
                        .dirs
                        .as_ref()
                        .ok()
                        .map(|d| d.root().to_path_buf());
                    namespace::trusted_program("git", None).ok().filter(|g| {
                        let mut w: Vec<&Path> = vec![&ws_root];
                        if let Some(r) = &rt {
                            w.push(r);
                        }
                        !namespace::inside_writable(g, &w)
                    })
                })
                .clone()
        });
        let mut seal = seal_job.map(|j| (j, self.inner.seal_lock.clone(), seal_git.flatten()));
        let (tx, _) = watch::channel(0u64);
        let mut new_cmd = |pid: i32, tty: bool, readers: u8, stdin: Option<Writer>| {
            Arc::new(Cmd {
                id: self.new_id(),
                pid,
                tty,
                started: Instant::now(),
                state: Mutex::new(State {
                    stdout: RetainedStream::new(budget),
                    stderr: RetainedStream::new(budget),
                    cursor_out: 0,
                    cursor_err: 0,
                    exit: None,
                    timed_out: false,
                    readers_open: readers,
                    last_output: None,
                    tree_alive: true,
                    seal_report: None,
                    settling: false,
                }),
                changed: tx.clone(),
                stdin: tokio::sync::Mutex::new(stdin),
                wrapped: ns,
                joined: std::sync::atomic::AtomicBool::new(false),
                signalled: std::sync::atomic::AtomicU64::new(0),
                git_watch: git_watch.clone(),
                seal: seal.take(),
                missing_protected: missing_protected.clone(),
                sealed_read_only: sealed_read_only.clone(),
                sealed_links: sealed_links.clone(),
                repos_before: repos_before.clone(),
                workspace_root: ws_root.clone(),
            })
        };
        let tty = req.tty;
        // (`exec` refused a tty request already when there is no `pty` feature.)
        #[cfg(feature = "pty")]
        let terminal = if tty {
            Some(pty_process::open().map_err(|e| spawn_error(std::io::Error::other(e)))?)
        } else {
            None
        };
        let sandbox = self.sandbox(tty)?;
        let mut joined = None;
        let wrapper = match (ns, &self.inner.helper) {
            (true, Some(helper)) => {
                let support = namespace::support();
                if !support.available() {
                    return Err(spawn_error(std::io::Error::other(
                        "the namespace tier is not available",
                    )));
                }
                let bwrap = support.bwrap.as_deref();
                let runtime = self
                    .inner
                    .dirs
                    .as_ref()
                    .ok()
                    .map(|d| d.root().to_path_buf());
                let (read, write, terminal) = self.roots().map_or((0, 0, 0), |r| {
                    (
                        sandbox.as_ref().map_or(0, |s| s.read_access()),
                        r.write_access(),
                        r.terminal_access(),
                    )
                });
                let ruleset_fd = sandbox.as_ref().map_or(-1, |s| s.ruleset_fd());
                let write_paths = self.made_write_paths();
                let plan = namespace::Plan {
                    bwrap,
                    workspace: self.inner.workspace.root(),
                    workspace_read_only: read_only,
                    write_paths,
                    runtime: runtime.as_deref(),
                    hidden_roots: &self.inner.discovered().1,
                    unshare_net: gates.network == GateState::Blocked,
                    legacy_git_seal: legacy_seal,
                    seal_binds: &seal_binds,
                    hide: hide.as_deref(),
                    helper_fd: helper.as_raw_fd(),
                    ruleset_fd,
                    read_access: read,
                    write_access: write,
                    terminal_access: terminal,
                    tty,
                    hold: None,
                };
                match self.holder(&plan) {
                    Some(holder) => {
                        let at = rustix::fs::readlink(
                            format!("/proc/self/fd/{}", cwd.as_raw_fd()),
                            Vec::new(),
                        )
                        .map_err(spawn_error)?;
                        let overlays = ns_setup
                            .take()
                            .map(|(target, data)| {
                                Ok::<_, std::ffi::NulError>(vec![(
                                    std::ffi::CString::new(
                                        target.into_os_string().into_encoded_bytes(),
                                    )?,
                                    std::ffi::CString::new(data)?,
                                )])
                            })
                            .transpose()
                            .map_err(|e| spawn_error(std::io::Error::other(e)))?
                            .unwrap_or_default();
                        let inside = crate::holder::Inside {
                            read,
                            write,
                            terminal,
                            terminal_file: sandbox::file_access(terminal),
                            tty,
                        };
                        joined = Some(
                            crate::holder::Joined::new(
                                holder,
                                Path::new(
                                    <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(
                                        at.as_bytes(),
                                    ),
                                ),
                                overlays,
                                // As `namespace::argv` orders them: the seal's
                                // binds, then (no overlay) the older list.
                                seal_binds
                                    .iter()
                                    .map(|(k, p)| ((*k).into(), p.clone()))
                                    .chain(
                                        if legacy_seal {
                                            namespace::git_seal(&ws_root)
                                        } else {
                                            Vec::new()
                                        }
                                        .into_iter()
                                        .map(|(k, p)| (crate::holder::SealMount::legacy(k), p)),
                                    )
                                    .collect(),
                                hide.as_deref(),
                                &std::iter::once(ws_root.as_path())
                                    .chain(runtime.as_deref())
                                    .collect::<Vec<_>>(),
                                inside,
                            )
                            .map_err(|e| spawn_error(std::io::Error::other(e)))?,
                        );
                        None
                    }
                    None => Some((namespace::argv(&plan), vec![ruleset_fd, helper.as_raw_fd()])),
                }
            }
            _ => None,
        };
        let ns_setup = ns_setup
            .map(|m| supervisor::NsSetup::new(vec![m]))
            .transpose()
            .map_err(|e| spawn_error(std::io::Error::other(e)))?;
        // A command that cannot start in the shared namespaces (one
        // changed under them) leaves them: the next command makes new ones.
        let joined_used = joined.is_some();
        let failed = |e: std::io::Error| {
            if joined_used {
                self.inner
                    .holder
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .current = None;
            }
            spawn_error(e)
        };
        let launch = Launch::new(&req.cmd, env, cwd, sandbox, !tty, gates.landlock, wrapper)
            .map_err(|why| spawn_error(std::io::Error::other(why)))?
            .with_namespace(ns_setup)
            .with_joined(joined);
        let child_setup = move || -> std::io::Result<()> {
            // SAFETY: we are between fork and exec; `split` starts the
            // command process and supervises it, returning only on failure.
            #[expect(
                unsafe_code,
                reason = "supervisor::split runs only between fork and exec"
            )]
            unsafe {
                supervisor::split(status_fd, &launch)
            }
        };
        #[cfg(feature = "pty")]
        if let Some((pty, pts)) = terminal {
            let _ = pty.resize(pty_process::Size::new(40, 120));
            // The supervisor runs no program: the command process execs
            // `/bin/sh -c` with the `Launch`'s arguments and environment.
            let command = pty_process::Command::new("/bin/sh");
            // SAFETY: the closure runs in the child between fork and exec and
            // makes only system calls on values prepared before the fork.
            #[expect(unsafe_code, reason = "pre_exec runs code between fork and exec")]
            let command = unsafe { command.pre_exec(child_setup) };
            let child = spawn_on(Box::new(move || {
                command.spawn(pts).map_err(std::io::Error::other)
            }))
            .map_err(failed)?;
            drop(status_w);
            let pid = child.id().and_then(|p| i32::try_from(p).ok()).unwrap_or(0);
            let (reader, writer) = pty.into_split();
            let cmd = new_cmd(pid, true, 1, Some(Box::new(writer)));
            spawn_reader(cmd.clone(), reader, Stream::Stdout);
            cmd.joined
                .store(joined_used, std::sync::atomic::Ordering::Relaxed);
            spawn_waiter(cmd.clone(), child, status_r);
            if !req.stdin.is_empty() {
                let c = cmd.clone();
                let text = req.stdin.clone();
                tokio::spawn(async move {
                    if let Some(w) = c.stdin.lock().await.as_mut() {
                        let _ = w.write_all(text.as_bytes()).await;
                        let _ = w.flush().await;
                    }
                });
            }
            return Ok(cmd);
        }
        let mut command = tokio::process::Command::new("/bin/sh");
        command
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(false);
        // SAFETY: as above — system calls on values prepared before the fork.
        #[expect(unsafe_code, reason = "pre_exec runs code between fork and exec")]
        unsafe {
            command.pre_exec(child_setup);
        }
        let mut child = spawn_on(Box::new(move || command.spawn())).map_err(failed)?;
        drop(status_w);
        let pid = child.id().and_then(|p| i32::try_from(p).ok()).unwrap_or(0);
        let cmd = new_cmd(pid, false, 2, None);
        if let Some(out) = child.stdout.take() {
            spawn_reader(cmd.clone(), out, Stream::Stdout);
        }
        if let Some(err) = child.stderr.take() {
            spawn_reader(cmd.clone(), err, Stream::Stderr);
        }
        if let Some(mut stdin) = child.stdin.take() {
            let text = req.stdin.clone();
            tokio::spawn(async move {
                if !text.is_empty() {
                    let _ = stdin.write_all(text.as_bytes()).await;
                }
                // Dropping the handle delivers EOF.
            });
        }
        cmd.joined
            .store(joined_used, std::sync::atomic::Ordering::Relaxed);
        spawn_waiter(cmd.clone(), child, status_r);
        Ok(cmd)
    }

    fn watchdog(&self, cmd: &Arc<Cmd>, timeout: Duration) {
        let cmd = cmd.clone();
        let mut rx = cmd.changed.subscribe();
        tokio::spawn(async move {
            let deadline = tokio::time::Instant::now() + timeout;
            // The timeout bounds everything the command started, background
            // processes included.
            loop {
                if !cmd.alive() {
                    return;
                }
                tokio::select! {
                    r = rx.changed() => if r.is_err() { return },
                    () = tokio::time::sleep_until(deadline) => break,
                }
            }
            if !cmd.alive() {
                return;
            }
            {
                let mut s = cmd.lock();
                if s.exit.is_none() {
                    s.timed_out = true;
                }
            }
            cmd.note_signal(rustix::process::Signal::TERM);
            supervisor::signal_tree(cmd.pid, rustix::process::Signal::TERM);
            if !cmd.wait_gone(Instant::now() + TIMEOUT_GRACE).await {
                cmd.note_signal(rustix::process::Signal::KILL);
                kill_tree(cmd.pid).await;
            }
        });
    }

    /// Writes `chars` (if any) and waits until the command exits,
    /// `opts.wait` passes or `cancel` completes (after input, also until
    /// output goes quiet); answers with the output new since the last
    /// answer.
    pub async fn poll(
        &self,
        id: &str,
        chars: &str,
        opts: WaitOptions,
        cancel: impl Future<Output = ()>,
    ) -> Result<Snapshot, ExecError> {
        let cmd = self.get(id)?;
        let mut quiet = None;
        if !chars.is_empty() {
            if cmd.exited() {
                let s = snapshot_peek(&cmd);
                return Err(ExecError::Ended {
                    id: id.to_owned(),
                    how: s,
                });
            }
            let mut guard = cmd.stdin.lock().await;
            let Some(w) = guard.as_mut() else {
                return Err(ExecError::Closed(id.to_owned()));
            };
            w.write_all(chars.as_bytes())
                .await
                .map_err(|_| ExecError::Closed(id.to_owned()))?;
            let _ = w.flush().await;
            quiet = Some(QUIET_AFTER_INPUT);
        }
        let end = wait_for(&cmd, Instant::now() + opts.wait, quiet, cancel).await;
        Ok(snapshot(&cmd, end, opts.max_output_bytes))
    }

    /// Signals every process of the command, waits for all of them to
    /// end, escalates to KILL for what is left, and waits again. A command
    /// whose shell has exited may still have background processes: they are
    /// ended the same way.
    pub async fn kill(&self, id: &str, opts: KillOptions) -> Result<KillOutcome, ExecError> {
        let KillOptions {
            signal,
            wait,
            kill_wait,
            max_output_bytes,
        } = opts;
        let cmd = self.get(id)?;
        let Some(first) = signal.to_rustix() else {
            return Err(ExecError::Unrepresentable(format!(
                "signal {} has no name this system can send",
                signal.as_raw()
            )));
        };
        let mut sent = Vec::new();
        let mut reached = 0;
        if !cmd.alive() {
            let snap = snapshot(&cmd, WaitEnd::Exited, max_output_bytes);
            return Ok(KillOutcome {
                status: KillStatus::Exited,
                signals_sent: sent,
                processes_signalled: 0,
                ended_by_kill: false,
                snapshot: snap,
            });
        }
        let leader_was_running = !cmd.exited();
        cmd.note_signal(first);
        if signal == Signal::Kill {
            reached += kill_tree(cmd.pid).await;
        } else {
            reached += supervisor::signal_tree(cmd.pid, first);
        }
        sent.push(signal);
        let mut gone = cmd.wait_gone(Instant::now() + wait).await;
        if !gone {
            cmd.note_signal(rustix::process::Signal::KILL);
            reached += kill_tree(cmd.pid).await;
            if signal != Signal::Kill {
                sent.push(Signal::Kill);
            }
            gone = cmd.wait_gone(Instant::now() + kill_wait).await;
        }
        let end = if cmd.exited() {
            // Let the readers drain what the last moments printed.
            wait_for(&cmd, Instant::now(), None, std::future::pending()).await
        } else {
            WaitEnd::Deadline
        };
        let snap = snapshot(&cmd, end, max_output_bytes);
        let status = match (gone, snap.status, snap.signal) {
            (false, _, _) | (_, Status::Running, _) => KillStatus::Terminating,
            _ if !leader_was_running => KillStatus::Exited,
            (_, _, Some(Signal::Kill)) => KillStatus::Killed,
            (_, _, Some(_)) => KillStatus::Terminated,
            _ => KillStatus::Exited,
        };
        Ok(KillOutcome {
            ended_by_kill: leader_was_running && status != KillStatus::Terminating,
            status,
            signals_sent: sent,
            processes_signalled: reached,
            snapshot: snap,
        })
    }

    /// A page of retained output by absolute offset.
    pub fn read_output(
        &self,
        id: &str,
        stream: Stream,
        offset: u64,
        limit: usize,
    ) -> Result<OutputPage, ExecError> {
        let cmd = self.get(id)?;
        let s = cmd.lock();
        let buf = match stream {
            Stream::Stdout => &s.stdout,
            Stream::Stderr => &s.stderr,
        };
        Ok(OutputPage {
            stream,
            slice: buf.read(offset, limit),
            total_bytes: buf.total(),
            head_retained_bytes: buf.head_len(),
            evicted_gap_bytes: buf.evicted_gap(),
            retained_bytes: buf.retained() as u64,
            retained_start_offset: if buf.evicted_gap() > 0 {
                buf.tail_start()
            } else {
                0
            },
            dropped_bytes: (s.stdout.evicted_gap(), s.stderr.evicted_gap()),
            running: s.exit.is_none(),
        })
    }

    fn is_closed(&self) -> bool {
        self.inner.closed.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Kills every process of every command (server shutdown) and starts
    /// none after; returns how many were killed. A command being started
    /// right now is not in the table yet: its `exec` sees the runtime
    /// closed once it has added it (between the spawn and the table there
    /// is no await) and kills it itself.
    pub fn shutdown(&self) -> usize {
        self.inner
            .closed
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let roots: Vec<i32> = self
            .commands()
            .values()
            .filter(|c| c.alive())
            .map(|c| c.pid)
            .collect();
        supervisor::kill_trees(&roots)
    }
}

/// A place under the active limit, taken by [`ExecRuntime::reserve_slot`]:
/// filled by the started command, or given back when the start fails.
struct Slot<'a> {
    rt: &'a ExecRuntime,
    filled: bool,
}

impl Slot<'_> {
    fn fill(mut self, cmd: &Arc<Cmd>) {
        let mut map = self.rt.commands();
        map.insert(cmd.id.clone(), cmd.clone());
        self.rt
            .inner
            .starting
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        self.filled = true;
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        if !self.filled {
            let _map = self.rt.commands();
            self.rt
                .inner
                .starting
                .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        }
    }
}

fn spawn_error(e: impl Into<std::io::Error>) -> ExecError {
    ExecError::Spawn { source: e.into() }
}

/// A Landlock ruleset could not be made for a command (the OS error is
/// the source).
#[derive(Debug, thiserror::Error)]
#[error("the Landlock ruleset: {0}")]
struct LandlockRuleset(#[source] std::io::Error);

/// The workspace first, then the runtime directory (if there is one).
/// Makes the write paths of a read-only workspace that are missing, each
/// beneath the root through the workspace boundary (a link a command put on
/// the way is not followed out of it); keeps those that are directories
/// beneath the root after that (a link in place of one is left out: its
/// target would become writable).
fn make_write_paths(ws: &Workspace, paths: &[PathBuf]) -> Vec<PathBuf> {
    paths
        .iter()
        .filter(|p| {
            let made = p
                .strip_prefix(ws.root())
                .ok()
                .and_then(|rel| rel.to_str())
                .and_then(|rel| ws.resolve_lexically(rel).ok())
                .and_then(|wp| ws.open_parent(&wp, true).ok());
            if let Some((dir, name)) = made {
                let _ = rustix::fs::mkdirat(&dir, &name, rustix::fs::Mode::from_raw_mode(0o755));
            }
            std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir())
                && p.canonicalize().is_ok_and(|c| c == **p)
        })
        .cloned()
        .collect()
}

fn write_roots_of(
    ws: &Workspace,
    dirs: &Result<Arc<RuntimeDirs>, Arc<RuntimeDirError>>,
) -> Vec<PathBuf> {
    let mut v = vec![ws.root().to_path_buf()];
    if let Ok(d) = dirs {
        v.push(d.root().to_path_buf());
    }
    v
}

/// [`supervisor::kill_tree`] off the async workers (it sleeps between rounds).
async fn kill_tree(pid: i32) -> usize {
    tokio::task::spawn_blocking(move || supervisor::kill_tree(pid))
        .await
        .unwrap_or(0)
}

fn spawn_reader(cmd: Arc<Cmd>, mut r: impl AsyncRead + Send + Unpin + 'static, stream: Stream) {
    tokio::spawn(async move {
        let mut buf = vec![0u8; 32 * 1024];
        loop {
            match r.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    {
                        let mut s = cmd.lock();
                        match stream {
                            Stream::Stdout => s.stdout.push(&buf[..n]),
                            Stream::Stderr => s.stderr.push(&buf[..n]),
                        }
                        s.last_output = Some(Instant::now());
                    }
                    cmd.bump();
                }
            }
        }
        cmd.lock().readers_open -= 1;
        cmd.bump();
    });
}

fn spawn_waiter(cmd: Arc<Cmd>, mut child: tokio::process::Child, status: std::os::fd::OwnedFd) {
    tokio::spawn(async move {
        use std::os::unix::process::ExitStatusExt;
        // The shell's wait status, and whether nothing else was left running.
        let mut raw = [0u8; 8];
        let shell = match tokio::net::unix::pipe::Receiver::from_owned_fd(status) {
            Ok(mut rx) => rx.read_exact(&mut raw).await.ok().map(|_| {
                let word =
                    |i: usize| i32::from_ne_bytes([raw[i], raw[i + 1], raw[i + 2], raw[i + 3]]);
                (word(0), word(4) != 0)
            }),
            Err(_) => None,
        };
        if let Some((st, empty)) = shell {
            let (code, signal) = supervisor::decode(st);
            let (code, signal) = cmd.unwrap_status(code, signal);
            {
                let mut s = cmd.lock();
                s.exit = Some(ExitInfo {
                    code,
                    signal,
                    at: Instant::now(),
                });
                let checks = cmd.seal.is_some() || cmd.repos_before.is_some();
                if empty && !checks {
                    // The supervisor is exiting with nothing below it.
                    s.tree_alive = false;
                } else if checks && (empty || cmd.wrapped) {
                    // Gone (below bubblewrap nothing outlives the shell: its
                    // init ends the rest, which may take a moment under
                    // load), but the carry-back is still to come: the
                    // answer waits for it.
                    s.settling = true;
                }
            }
            cmd.bump();
        }
        // In the shared namespaces PID 1's end is the end of every process
        // of the command (the kernel ends its PID namespace with it): the
        // overlay's upper layer has no writer left, so the carry-back and
        // the answer need not wait for the supervisor's exit (which tears
        // the command's mount namespace down: about 0.4 ms); its layers are
        // removed after it.
        let early = cmd.joined.load(std::sync::atomic::Ordering::Relaxed)
            && shell.is_some_and(|(_, empty)| empty);
        let sup = if early {
            None
        } else {
            Some(child.wait().await)
        };
        if cmd.seal.is_some() || cmd.repos_before.is_some() {
            let c = cmd.clone();
            let report = tokio::task::spawn_blocking(move || {
                let mut r = match c.seal.as_ref() {
                    Some((job, lock, git)) => {
                        let r = {
                            let _one = lock.lock().unwrap_or_else(|p| p.into_inner());
                            crate::gitseal::carry_back(job, git.as_deref())
                        };
                        if !early {
                            job.remove();
                        }
                        r
                    }
                    None => crate::gitseal::SealReport::default(),
                };
                r.created_protected =
                    crate::gitseal::created_since(&c.workspace_root, &c.missing_protected);
                r.created_protected.extend(crate::gitseal::replaced_links(
                    &c.workspace_root,
                    &c.sealed_links,
                ));
                if !c.sealed_read_only.is_empty() && c.said_read_only() {
                    r.read_only = c.sealed_read_only.clone();
                }
                if let Some(before) = &c.repos_before {
                    r.created_repositories = crate::gitseal::shallow_repos(&c.workspace_root)
                        .difference(before)
                        .filter_map(|p| p.strip_prefix(&c.workspace_root).ok())
                        .map(|p| p.display().to_string())
                        .collect();
                }
                for (path, why) in &r.not_kept {
                    tracing::warn!(command = %c.id, path = %path, why, "git seal: a change to the git directory was not kept");
                }
                (r != crate::gitseal::SealReport::default()).then_some(r)
            })
            .await
            .ok()
            .flatten();
            // `settling` stays set until the tree is marked gone below: a
            // waiter that saw it cleared with the tree still marked alive
            // would answer after the short drain, output unread and
            // `background_running` wrongly true (seen under load).
            cmd.lock().seal_report = report;
        }
        for path in &cmd.git_watch {
            let Ok(meta) = std::fs::symlink_metadata(path) else {
                continue;
            };
            tracing::warn!(
                path = %path.display(),
                "a command created this git file (it would steer the user's git to a config the command wrote); removed"
            );
            let _ = if meta.is_dir() {
                std::fs::remove_dir_all(path)
            } else {
                std::fs::remove_file(path)
            };
        }
        {
            let mut s = cmd.lock();
            if s.exit.is_none() {
                // The supervisor ended before the shell reported: take its end.
                let sup = sup.as_ref().and_then(|r| r.as_ref().ok());
                s.exit = Some(ExitInfo {
                    code: sup.and_then(|st| st.code()),
                    signal: sup.and_then(|st| st.signal()),
                    at: Instant::now(),
                });
            }
            s.tree_alive = false;
            s.settling = false;
        }
        cmd.bump();
        if early {
            let _ = child.wait().await;
            if cmd.seal.is_some() {
                let c = cmd.clone();
                let _ = tokio::task::spawn_blocking(move || {
                    if let Some((job, _, _)) = c.seal.as_ref() {
                        job.remove();
                    }
                })
                .await;
            }
        }
    });
}

async fn wait_for(
    cmd: &Cmd,
    deadline: Instant,
    quiet: Option<Duration>,
    cancel: impl Future<Output = ()>,
) -> WaitEnd {
    let mut rx = cmd.changed.subscribe();
    let mut cancel = std::pin::pin!(cancel);
    let started = Instant::now();
    loop {
        let (exit_at, readers, last, alive, settling) = {
            let s = cmd.lock();
            (
                s.exit.map(|e| e.at),
                s.readers_open,
                s.last_output,
                s.tree_alive,
                s.settling,
            )
        };
        let now = Instant::now();
        // The shell's status arrives just before its supervisor exits: wait
        // (briefly) for both, so a command with nothing left in the
        // background is never reported as having some.
        let drain = if alive && !settling {
            EXIT_DRAIN
        } else {
            EXIT_DRAIN_TREE_GONE
        };
        if let Some(at) = exit_at
            && ((readers == 0 && !alive) || now >= at + drain)
        {
            return WaitEnd::Exited;
        }
        if now >= deadline {
            return WaitEnd::Deadline;
        }
        if let (Some(q), Some(l)) = (quiet, last)
            && l > started
            && now >= l + q
        {
            return WaitEnd::Quiet;
        }
        let mut wake = deadline;
        if let Some(at) = exit_at {
            wake = wake.min(at + drain);
        }
        if let (Some(q), Some(l)) = (quiet, last)
            && l > started
        {
            wake = wake.min(l + q);
        }
        tokio::select! {
            r = rx.changed() => if r.is_err() { return WaitEnd::Exited },
            () = tokio::time::sleep_until(tokio::time::Instant::from_std(wake)) => {}
            () = &mut cancel => return WaitEnd::Cancelled,
        }
    }
}

fn delta(buf: &RetainedStream, cursor: &mut u64, max: usize) -> Delta {
    let start = *cursor;
    let end = buf.total();
    let mut omitted = 0;
    let mut from = start;
    if from >= buf.head_len() && from < buf.tail_start() {
        omitted = buf.tail_start() - from;
        from = buf.tail_start();
    }
    let available = end - from;
    let (text, elided, head_bytes, tail_bytes) = if available as usize <= max {
        let s = buf.read(from, available as usize);
        let mut bytes = s.bytes;
        // A head/tail boundary inside the range: read the tail part too.
        if (bytes.len() as u64) < available
            && let Some(n) = s.next_offset
        {
            let more = buf.read(n, (end - n) as usize);
            omitted += n - (from + bytes.len() as u64);
            bytes.extend(more.bytes);
        }
        let n = bytes.len() as u64;
        (String::from_utf8_lossy(&bytes).into_owned(), None, n, 0)
    } else {
        let half = max / 2;
        let head = buf.read(from, half).bytes;
        // The last bytes that run contiguously up to the end: across the
        // head when nothing was evicted (all output may still sit in the
        // head), from the tail's start at most when something was.
        let tail_from = end - (max - half) as u64;
        let tail_from = if buf.evicted_gap() > 0 {
            tail_from.max(buf.tail_start())
        } else {
            tail_from
        };
        let tail = buf.read(tail_from, max - half).bytes;
        let head_s = utf8_prefix(&head);
        let tail_s = utf8_suffix(&tail);
        let gap_start = from + head_s.len() as u64;
        let gap_len = end - tail_s.len() as u64 - gap_start;
        let text =
            format!("{head_s}\n[... {gap_len} bytes left out at offset {gap_start} ...]\n{tail_s}");
        (
            text,
            Some((gap_start, gap_len)),
            head_s.len() as u64,
            tail_s.len() as u64,
        )
    };
    *cursor = end;
    Delta {
        text,
        start_offset: from,
        end_offset: end,
        new_bytes: end - start,
        omitted_bytes: omitted,
        elided,
        head_bytes,
        tail_bytes,
        dropped_bytes: buf.evicted_gap(),
        lines: buf.lines(),
        last_line: last_line(buf),
    }
}

/// The last line of `buf` that is not blank, trimmed, from its last 4 KiB
/// (and never across the evicted gap).
fn last_line(buf: &RetainedStream) -> String {
    const WINDOW: u64 = 4096;
    let end = buf.total();
    let mut from = end.saturating_sub(WINDOW);
    if buf.evicted_gap() > 0 {
        from = from.max(buf.tail_start());
    }
    let bytes = buf.read(from, (end - from) as usize).bytes;
    String::from_utf8_lossy(&bytes)
        .lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty())
        .unwrap_or_default()
        .to_owned()
}

fn utf8_prefix(b: &[u8]) -> String {
    match std::str::from_utf8(b) {
        Ok(s) => s.to_owned(),
        Err(e) if e.error_len().is_none() => {
            String::from_utf8_lossy(&b[..e.valid_up_to()]).into_owned()
        }
        Err(_) => String::from_utf8_lossy(b).into_owned(),
    }
}

fn utf8_suffix(b: &[u8]) -> String {
    let mut start = 0;
    while start < b.len().min(4) && (b[start] & 0b1100_0000) == 0b1000_0000 {
        start += 1;
    }
    String::from_utf8_lossy(&b[start..]).into_owned()
}

/// How a command ended, in words (without consuming its output).
fn snapshot_peek(cmd: &Cmd) -> String {
    let s = cmd.lock();
    match s.exit {
        None => "running".into(),
        Some(e) => {
            let by = e.signal.map(Signal::from_raw);
            match (s.timed_out, e.code, by) {
                (true, _, Some(sig)) => format!("timed out, ended by {sig}"),
                (true, code, None) => format!("timed out, exit code {}", code.unwrap_or(-1)),
                (false, _, Some(sig)) => format!("killed by {sig}"),
                (false, Some(code), None) => format!("exited with code {code}"),
                (false, None, None) => "ended".into(),
            }
        }
    }
}

fn snapshot(cmd: &Cmd, wait_end: WaitEnd, max_output_bytes: usize) -> Snapshot {
    let mut s = cmd.lock();
    let st = &mut *s;
    let stdout = delta(&st.stdout, &mut st.cursor_out, max_output_bytes);
    let stderr = delta(&st.stderr, &mut st.cursor_err, max_output_bytes);
    let (status, exit_code, signal) = match st.exit {
        None => (Status::Running, None, None),
        Some(e) => {
            let sig = e.signal.map(Signal::from_raw);
            let status = if st.timed_out {
                Status::Timeout
            } else if e.signal.is_some() {
                Status::Terminated
            } else {
                Status::Exited
            };
            (status, e.code, sig)
        }
    };
    Snapshot {
        command_id: cmd.id.clone(),
        status,
        exit_code,
        signal,
        signal_number: st.exit.and_then(|e| e.signal),
        timed_out: st.timed_out,
        elapsed: cmd.started.elapsed(),
        stdout,
        stderr,
        tty: cmd.tty,
        wait_end,
        background_running: st.exit.is_some() && st.tree_alive && !st.settling,
        git_seal: st.seal_report.clone(),
    }
}
