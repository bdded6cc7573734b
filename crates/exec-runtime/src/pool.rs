//! The command pool: spawn, wait, poll, kill, page output.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use ctm_workspace_fs::{FsError, Workspace};
use ring::rand::{SecureRandom, SystemRandom};
use rustix::process::{Pid, Signal};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;

use crate::buffer::{RetainedStream, Slice};
use crate::env::{EnvInherit, EnvSpec, build_env};
use crate::policy::{Gates, Refusal, classify};
use crate::runtime_dirs::{RetentionBudget, RuntimeDirs};
use crate::sandbox;

/// How long a finished command's readers may drain after it exits.
const EXIT_DRAIN: Duration = Duration::from_millis(50);
/// Quiet period that ends a wait after input was written.
const QUIET_AFTER_INPUT: Duration = Duration::from_millis(150);
/// Grace between TERM and KILL when a timeout fires.
const TIMEOUT_GRACE: Duration = Duration::from_secs(1);

/// Why an exec operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExecError {
    /// No such command (never existed, or evicted).
    #[error("command {0} was not found (it finished and was evicted, or never existed)")]
    NotFound(String),
    /// stdin of a pipe-mode command is closed after its `stdin` text.
    #[error("command {0} has no open stdin (pipe mode closes stdin after the initial text)")]
    Closed(String),
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
    #[error("the command could not be started: {0}")]
    Spawn(String),
    /// The runtime directory is missing.
    #[error("the runtime directory is unusable: {0}")]
    RuntimeDir(String),
    /// An `output_ref` that names no stream of a command.
    #[error("invalid output_ref {0:?}: expected command:<id>:stdout or command:<id>:stderr")]
    InvalidRef(String),
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
}

impl Delta {
    /// Whether the answer does not carry all new output.
    pub fn truncated(&self) -> bool {
        self.elided.is_some() || self.omitted_bytes > 0
    }
}

/// What one exec/poll answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The command.
    pub command_id: String,
    /// Its status now.
    pub status: Status,
    /// Exit code, once exited.
    pub exit_code: Option<i32>,
    /// Signal name, once ended by one.
    pub signal: Option<&'static str>,
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
pub struct KillOutcome {
    /// The verdict.
    pub status: KillStatus,
    /// Signals sent to the process group, in order.
    pub signals_sent: Vec<&'static str>,
    /// The final snapshot.
    pub snapshot: Snapshot,
}

/// One page of retained output.
#[derive(Debug, Clone, PartialEq, Eq)]
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
    /// Retention and pool budgets.
    pub budget: RetentionBudget,
}

/// A command to start.
#[derive(Debug, Clone, Default)]
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
}

type Writer = Box<dyn AsyncWrite + Send + Unpin>;

struct Cmd {
    id: String,
    pid: i32,
    tty: bool,
    started: Instant,
    state: Mutex<State>,
    changed: watch::Sender<u64>,
    stdin: tokio::sync::Mutex<Option<Writer>>,
}

impl Cmd {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn bump(&self) {
        self.changed.send_modify(|v| *v = v.wrapping_add(1));
    }

    fn exited(&self) -> bool {
        self.lock().exit.is_some()
    }

    fn signal_group(&self, sig: Signal) -> bool {
        Pid::from_raw(self.pid).is_some_and(|p| rustix::process::kill_process_group(p, sig).is_ok())
    }
}

struct Inner {
    cfg: ExecConfig,
    workspace: Workspace,
    dirs: Result<Arc<RuntimeDirs>, String>,
    inherited_env: Vec<(String, String)>,
    commands: Mutex<HashMap<String, Arc<Cmd>>>,
    rng: SystemRandom,
}

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

fn signal_name(sig: i32) -> &'static str {
    match sig {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        6 => "SIGABRT",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        _ => "SIGNAL",
    }
}

impl ExecRuntime {
    /// A pool for `workspace`, with commands' `HOME`/`TMPDIR` in `dirs`.
    pub fn new(
        cfg: ExecConfig,
        workspace: Workspace,
        dirs: Result<Arc<RuntimeDirs>, String>,
    ) -> Self {
        // Orphaned grandchildren are re-parented to us, so we can reap them.
        let _ = rustix::process::set_child_subreaper(Some(rustix::process::getpid()));
        Self {
            inner: Arc::new(Inner {
                cfg,
                workspace,
                dirs,
                inherited_env: std::env::vars().collect(),
                commands: Mutex::new(HashMap::new()),
                rng: SystemRandom::new(),
            }),
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

    /// Commands running now.
    pub fn active(&self) -> usize {
        self.commands().values().filter(|c| !c.exited()).count()
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
        map.retain(|_, c| c.lock().exit.is_none_or(|e| e.at.elapsed() < ttl));
        let mut finished: Vec<(Instant, String, usize)> = map
            .values()
            .filter_map(|c| {
                let s = c.lock();
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

    /// Checks the policy, starts `req`, and waits for it like [`Self::poll`].
    pub async fn exec(
        &self,
        req: ExecRequest,
        wait: Duration,
        cancel: impl Future<Output = ()>,
        max_output_bytes: usize,
    ) -> Result<Snapshot, ExecError> {
        self.prune();
        let dirs = self
            .inner
            .dirs
            .as_ref()
            .map_err(|e| ExecError::RuntimeDir(e.clone()))?
            .clone();
        let workdir = self
            .inner
            .workspace
            .resolve(&req.workdir)
            .map_err(ExecError::Workdir)?;
        // The child enters the directory through this handle (fchdir), never
        // by its path: a directory swapped for a symlink after the check
        // cannot move the command outside the workspace.
        let cwd_handle = self
            .inner
            .workspace
            .open_dir_handle(&workdir)
            .map_err(ExecError::Workdir)?;
        let cwd = self
            .inner
            .workspace
            .open_dir(&workdir)
            .map_err(ExecError::Workdir)?;
        let ws_root = self.inner.workspace.root().to_string_lossy().into_owned();
        let rt_root = dirs.root().to_string_lossy().into_owned();
        let env_pairs: Vec<(&str, &str)> = req
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let gates = self.inner.cfg.gates;
        if let Some(r) = classify(
            &req.cmd,
            &env_pairs,
            &[&ws_root, &rt_root, cwd.to_string_lossy().as_ref()],
        )
        .into_iter()
        .find(|r| !gates.allows(r.permission))
        {
            return Err(ExecError::Permission(r));
        }
        let max = self.inner.cfg.budget.max_active_commands;
        let active = self.active();
        if active >= max {
            return Err(ExecError::LimitReached { active, max });
        }
        let home = dirs.home().to_string_lossy().into_owned();
        let tmp = dirs.tmp().to_string_lossy().into_owned();
        let cache = dirs.cache().to_string_lossy().into_owned();
        let env = build_env(&EnvSpec {
            inherited: &self.inner.inherited_env,
            inherit: self.inner.cfg.inherit,
            filter_sensitive: gates.secret_env_filter,
            home: &home,
            tmp: &tmp,
            cache: &cache,
            tty: req.tty,
            caller: &req.env,
        });
        let writable = vec![
            self.inner.workspace.root().to_path_buf(),
            dirs.root().to_path_buf(),
        ];
        let cmd = self.spawn(&req, cwd_handle, &env, &writable)?;
        self.commands().insert(cmd.id.clone(), cmd.clone());
        self.watchdog(&cmd, req.timeout);
        let end = wait_for(&cmd, Instant::now() + wait, None, cancel).await;
        Ok(snapshot(&cmd, end, max_output_bytes))
    }

    fn spawn(
        &self,
        req: &ExecRequest,
        cwd: std::os::fd::OwnedFd,
        env: &BTreeMap<String, String>,
        writable: &[PathBuf],
    ) -> Result<Arc<Cmd>, ExecError> {
        let confine = self.inner.cfg.gates.landlock && sandbox::support().available;
        let mut ruleset = if confine {
            Some(sandbox::ruleset(writable).map_err(ExecError::Spawn)?)
        } else {
            None
        };
        let budget = self.inner.cfg.budget.buffer_bytes_per_stream;
        let (tx, _) = watch::channel(0u64);
        let new_cmd = |pid: i32, tty: bool, readers: u8, stdin: Option<Writer>| {
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
                }),
                changed: tx.clone(),
                stdin: tokio::sync::Mutex::new(stdin),
            })
        };
        let child_setup = move || -> std::io::Result<()> {
            rustix::process::fchdir(&cwd).map_err(std::io::Error::from)?;
            rustix::process::set_parent_process_death_signal(Some(Signal::KILL))
                .map_err(std::io::Error::from)?;
            if let Some(r) = ruleset.take() {
                sandbox::enforce(r)?;
            }
            Ok(())
        };
        if req.tty {
            let (pty, pts) = pty_process::open().map_err(|e| ExecError::Spawn(e.to_string()))?;
            let _ = pty.resize(pty_process::Size::new(40, 120));
            let command = pty_process::Command::new("/bin/sh")
                .arg("-c")
                .arg(&req.cmd)
                .env_clear()
                .envs(env);
            // SAFETY: the closure runs in the child between fork and exec; it
            // only makes three syscalls (fchdir, prctl, landlock_restrict_self)
            // on values prepared before the fork.
            #[allow(unsafe_code)]
            let command = unsafe { command.pre_exec(child_setup) };
            let child = command
                .spawn(pts)
                .map_err(|e| ExecError::Spawn(e.to_string()))?;
            let pid = child.id().and_then(|p| i32::try_from(p).ok()).unwrap_or(0);
            let (reader, writer) = pty.into_split();
            let cmd = new_cmd(pid, true, 1, Some(Box::new(writer)));
            spawn_reader(cmd.clone(), reader, Stream::Stdout);
            spawn_waiter(cmd.clone(), child);
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
            .arg("-c")
            .arg(&req.cmd)
            .env_clear()
            .envs(env)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .process_group(0)
            .kill_on_drop(false);
        // SAFETY: as above — three syscalls on values prepared before the fork.
        #[allow(unsafe_code)]
        unsafe {
            command.pre_exec(child_setup);
        }
        let mut child = command
            .spawn()
            .map_err(|e| ExecError::Spawn(e.to_string()))?;
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
        spawn_waiter(cmd.clone(), child);
        Ok(cmd)
    }

    fn watchdog(&self, cmd: &Arc<Cmd>, timeout: Duration) {
        let cmd = cmd.clone();
        let mut rx = cmd.changed.subscribe();
        tokio::spawn(async move {
            let deadline = tokio::time::Instant::now() + timeout;
            loop {
                if cmd.exited() {
                    return;
                }
                tokio::select! {
                    r = rx.changed() => if r.is_err() { return },
                    () = tokio::time::sleep_until(deadline) => break,
                }
            }
            if cmd.exited() {
                return;
            }
            cmd.lock().timed_out = true;
            cmd.signal_group(Signal::TERM);
            tokio::time::sleep(TIMEOUT_GRACE).await;
            if !cmd.exited() {
                cmd.signal_group(Signal::KILL);
            }
        });
    }

    /// Writes `chars` (if any) and waits for output, exit, the deadline or
    /// cancellation.
    pub async fn poll(
        &self,
        id: &str,
        chars: &str,
        wait: Duration,
        cancel: impl Future<Output = ()>,
        max_output_bytes: usize,
    ) -> Result<Snapshot, ExecError> {
        let cmd = self.get(id)?;
        let mut quiet = None;
        if !chars.is_empty() {
            if cmd.exited() {
                return Err(ExecError::Closed(id.to_owned()));
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
        let end = wait_for(&cmd, Instant::now() + wait, quiet, cancel).await;
        Ok(snapshot(&cmd, end, max_output_bytes))
    }

    /// Signals the group, waits, escalates to KILL, waits, sweeps survivors.
    pub async fn kill(
        &self,
        id: &str,
        signal: Signal,
        wait: Duration,
        kill_wait: Duration,
        max_output_bytes: usize,
    ) -> Result<KillOutcome, ExecError> {
        let cmd = self.get(id)?;
        let mut sent = Vec::new();
        if cmd.exited() {
            let snap = snapshot(&cmd, WaitEnd::Exited, max_output_bytes);
            return Ok(KillOutcome {
                status: KillStatus::Exited,
                signals_sent: sent,
                snapshot: snap,
            });
        }
        cmd.signal_group(signal);
        sent.push(signal_name(signal.as_raw()));
        let mut end = wait_for(&cmd, Instant::now() + wait, None, std::future::pending()).await;
        if !cmd.exited() && signal != Signal::KILL {
            cmd.signal_group(Signal::KILL);
            sent.push("SIGKILL");
            end = wait_for(
                &cmd,
                Instant::now() + kill_wait,
                None,
                std::future::pending(),
            )
            .await;
        }
        // A dead leader is not a dead group: sweep and reap survivors.
        if cmd.exited() {
            cmd.signal_group(Signal::KILL);
            reap_group(cmd.pid);
        }
        let snap = snapshot(&cmd, end, max_output_bytes);
        let status = match (snap.status, snap.signal) {
            (Status::Running, _) => KillStatus::Terminating,
            (_, Some("SIGKILL")) => KillStatus::Killed,
            (_, Some(_)) => KillStatus::Terminated,
            _ => KillStatus::Exited,
        };
        Ok(KillOutcome {
            status,
            signals_sent: sent,
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
            running: s.exit.is_none(),
        })
    }

    /// Ends every running command's process group (server shutdown).
    pub fn shutdown(&self) {
        for c in self.commands().values() {
            if !c.exited() {
                c.signal_group(Signal::KILL);
            }
        }
    }
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

fn spawn_waiter(cmd: Arc<Cmd>, mut child: tokio::process::Child) {
    tokio::spawn(async move {
        use std::os::unix::process::ExitStatusExt;
        let status = child.wait().await;
        {
            let mut s = cmd.lock();
            s.exit = Some(match status {
                Ok(st) => ExitInfo {
                    code: st.code(),
                    signal: st.signal(),
                    at: Instant::now(),
                },
                Err(_) => ExitInfo {
                    code: None,
                    signal: None,
                    at: Instant::now(),
                },
            });
        }
        // Reap grandchildren of this group that have already died.
        reap_group(cmd.pid);
        cmd.bump();
    });
}

/// Reaps exited members of a process group (we are their subreaper). Only
/// called after the leader itself was reaped, so tokio's own wait is never
/// robbed.
fn reap_group(pgid: i32) {
    let Some(pgid) = Pid::from_raw(pgid) else {
        return;
    };
    while let Ok(Some(_)) = rustix::process::waitpgid(pgid, rustix::process::WaitOptions::NOHANG) {}
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
        let (exit_at, readers, last) = {
            let s = cmd.lock();
            (s.exit.map(|e| e.at), s.readers_open, s.last_output)
        };
        let now = Instant::now();
        if let Some(at) = exit_at
            && (readers == 0 || now >= at + EXIT_DRAIN)
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
            wake = wake.min(at + EXIT_DRAIN);
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
    let (text, elided) = if available as usize <= max {
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
        (String::from_utf8_lossy(&bytes).into_owned(), None)
    } else {
        let half = max / 2;
        let head = buf.read(from, half).bytes;
        let tail_from = end - (max - half) as u64;
        let tail = buf.read(tail_from.max(buf.tail_start()), max - half).bytes;
        let head_s = utf8_prefix(&head);
        let tail_s = utf8_suffix(&tail);
        let gap_start = from + head_s.len() as u64;
        let gap_len = end - tail_s.len() as u64 - gap_start;
        let text = format!(
            "{head_s}\n[... {gap_len} bytes left out here; read them with read_output at offset {gap_start} ...]\n{tail_s}"
        );
        (text, Some((gap_start, gap_len)))
    };
    *cursor = end;
    Delta {
        text,
        start_offset: from,
        end_offset: end,
        new_bytes: end - start,
        omitted_bytes: omitted,
        elided,
    }
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

fn snapshot(cmd: &Cmd, wait_end: WaitEnd, max_output_bytes: usize) -> Snapshot {
    let mut s = cmd.lock();
    let st = &mut *s;
    let stdout = delta(&st.stdout, &mut st.cursor_out, max_output_bytes);
    let stderr = delta(&st.stderr, &mut st.cursor_err, max_output_bytes);
    let (status, exit_code, signal) = match st.exit {
        None => (Status::Running, None, None),
        Some(e) => {
            let sig = e.signal.map(signal_name);
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
        timed_out: st.timed_out,
        elapsed: cmd.started.elapsed(),
        stdout,
        stderr,
        tty: cmd.tty,
        wait_end,
    }
}
