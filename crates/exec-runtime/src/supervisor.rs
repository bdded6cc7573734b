//! One supervisor process per command, so that nothing a command starts
//! outlives it unnoticed.
//!
//! The process the server spawns does not run the command: it becomes a
//! *subreaper* in a session of its own and forks the command's shell. Every
//! descendant the command leaves behind — a double fork, a `setsid`, a
//! background `&` — is re-parented to that supervisor, never to init, so the
//! command's processes are exactly the supervisor's subtree. The supervisor
//! reports the shell's wait status on a pipe (with whether anything is left
//! running), reaps everything else, and exits only when its subtree is empty; the server ends a command by
//! signalling that subtree (found in `/proc`, each process addressed by a
//! pidfd so a recycled pid is never hit).
//!
//! The supervisor runs no sandbox itself (it never executes anything), and
//! the command's Landlock domain is created below it: with signal scoping
//! the command cannot signal its supervisor or the server.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

use crate::sandbox::ChildSandbox;
pub use ctm_sandbox::process::NsSetup;
use ctm_sandbox::process::{IGNORED, close_range, drop_all_capabilities};

use rustix::process::{Pid, Signal};

/// Everything the command's process needs to start, prepared in the
/// server (the child only reads it).
pub struct Launch {
    _strings: Vec<CString>,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
    cwd: OwnedFd,
    sandbox: Option<ChildSandbox>,
    new_session: bool,
    drop_capabilities: bool,
    /// The namespace tier: `argv` starts with `bwrap`, which finishes the
    /// sandbox; these descriptors (the ruleset, the entry program) must
    /// survive the exec.
    wrapped: Option<Vec<RawFd>>,
    /// A user and mount namespace the supervisor enters first, with the git
    /// seal's overlay mounted in it (bubblewrap's sandbox is made inside).
    ns: Option<NsSetup>,
    /// The workspace's shared namespaces, joined by the supervisor (the
    /// namespace tier without a builder per command; see `crate::holder`).
    joined: Option<crate::holder::Joined>,
    /// The server's process id, taken before the fork: the supervisor
    /// compares its parent with it once its death signal is armed (a server
    /// that died before that would otherwise go unnoticed: its parent is
    /// then already another process).
    server: libc::pid_t,
}

// SAFETY: the pointers point into `_strings`, owned by the same value and
// never changed after construction; the child only reads them.
#[expect(
    unsafe_code,
    reason = "Launch holds raw pointers into strings it owns (see SAFETY above)"
)]
unsafe impl Send for Launch {}
#[expect(
    unsafe_code,
    reason = "Launch holds raw pointers into strings it owns (see SAFETY above)"
)]
unsafe impl Sync for Launch {}

impl Launch {
    /// `/bin/sh -c cmd` with exactly `env`, entering `cwd`, confined by
    /// `sandbox` (the seccomp filter is inherited from the thread that
    /// forks); `new_session` for pipe commands (a PTY command's session was
    /// made with its terminal).
    ///
    /// With a `wrapper` (a `bwrap` argument list ending where `/bin/sh -c
    /// cmd` follows, and the descriptors it must inherit), the command is
    /// started through it, and the sandbox is finished inside by the
    /// wrapper's entry.
    pub fn new(
        cmd: &str,
        env: &BTreeMap<String, String>,
        cwd: OwnedFd,
        sandbox: Option<ChildSandbox>,
        new_session: bool,
        drop_capabilities: bool,
        wrapper: Option<(Vec<std::ffi::OsString>, Vec<RawFd>)>,
    ) -> Result<Self, String> {
        use std::os::unix::ffi::OsStringExt;
        let nul = |what: &str| format!("the {what} contains a NUL byte");
        let (prefix, keep) = match wrapper {
            Some((argv, keep)) => (argv, Some(keep)),
            None => (Vec::new(), None),
        };
        let mut strings = Vec::with_capacity(prefix.len() + 3 + env.len());
        for a in prefix {
            strings.push(CString::new(a.into_vec()).map_err(|_| nul("sandbox argument"))?);
        }
        strings.push(CString::new("/bin/sh").map_err(|_| nul("shell"))?);
        strings.push(CString::new("-c").map_err(|_| nul("shell"))?);
        strings.push(CString::new(cmd).map_err(|_| nul("command"))?);
        let argc = strings.len();
        for (k, v) in env {
            strings.push(CString::new(format!("{k}={v}")).map_err(|_| nul("environment"))?);
        }
        let ptrs = |range: std::ops::Range<usize>, s: &[CString]| {
            let mut v: Vec<*const libc::c_char> = s[range].iter().map(|c| c.as_ptr()).collect();
            v.push(std::ptr::null());
            v
        };
        let argv = ptrs(0..argc, &strings);
        let envp = ptrs(argc..strings.len(), &strings);
        Ok(Self {
            _strings: strings,
            argv,
            envp,
            cwd,
            sandbox,
            new_session,
            drop_capabilities,
            wrapped: keep,
            ns: None,
            joined: None,
            server: std::process::id() as libc::pid_t,
        })
    }

    /// The supervisor joins `joined`'s namespaces and the command runs
    /// there (instead of a wrapper or an own namespace).
    #[must_use]
    pub(crate) fn with_joined(mut self, joined: Option<crate::holder::Joined>) -> Self {
        self.joined = joined;
        self
    }

    /// The supervisor enters `ns` before it starts the command.
    #[must_use]
    pub fn with_namespace(mut self, ns: Option<NsSetup>) -> Self {
        self.ns = ns;
        self
    }
}

/// The errno of a command process that could not start, written by it into
/// the supervisor's memory (they share it until the exec).
static SETUP_ERRNO: AtomicI32 = AtomicI32::new(0);

/// The command's process: runs on its own stack in the supervisor's memory
/// (`CLONE_VM | CLONE_VFORK`: the supervisor waits until it execs or
/// exits), so no page table is copied for it.
extern "C" fn command_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `Launch` the supervisor passed, alive and
    // unchanged while it is suspended; only system calls follow.
    #[expect(
        unsafe_code,
        reason = "the clone entry point reads its argument and makes system calls"
    )]
    unsafe {
        let l = &*(arg as *const Launch);
        let fail = |errno: i32| -> ! {
            SETUP_ERRNO.store(errno.max(1), Ordering::SeqCst);
            libc::_exit(127)
        };
        // A PTY command gets a process group of its own as the terminal's
        // foreground group (SIGTTOU is still ignored here), so signals to
        // its groups never reach the supervisor.
        if !l.new_session && (libc::setpgid(0, 0) != 0 || libc::tcsetpgrp(0, libc::getpid()) != 0) {
            fail(*libc::__errno_location());
        }
        // Below bubblewrap the signals stay ignored: its two processes
        // (outside and init inside) must not die of a TERM or INT sent to
        // the command's group — that would SIGKILL the command with them
        // and no trap of the command's could run. The entry sets them back
        // to their defaults for the command.
        if l.wrapped.is_none() {
            for sig in IGNORED {
                libc::signal(sig, libc::SIG_DFL);
            }
        }
        if l.new_session && libc::setsid() < 0 {
            fail(*libc::__errno_location());
        }
        if libc::fchdir(l.cwd.as_raw_fd()) != 0 {
            fail(*libc::__errno_location());
        }
        if let Some(keep) = &l.wrapped {
            // bubblewrap needs its capabilities (as root) and may not run
            // Landlock-confined (it mounts): the entry it starts applies
            // both. `no_new_privs` already: nothing it runs gains any.
            for &fd in keep {
                if fd >= 0 && libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                    fail(*libc::__errno_location());
                }
            }
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                fail(*libc::__errno_location());
            }
        } else {
            if let Some(sb) = &l.sandbox
                && let Err(e) = sb.enforce()
            {
                fail(e);
            }
            if l.drop_capabilities && !drop_all_capabilities() {
                fail(libc::EPERM);
            }
        }
        libc::execve(l.argv[0], l.argv.as_ptr(), l.envp.as_ptr());
        fail(*libc::__errno_location())
    }
}

/// Runs in the process the server forked (the future supervisor), before
/// exec: makes it a subreaper in a session of its own, starts the command
/// process below it, and supervises; returns only on failure.
///
/// # Safety
/// Only between fork and exec of a child of this process: it calls only
/// async-signal-safe functions and system calls.
#[expect(
    unsafe_code,
    reason = "clone of the command process, between fork and exec"
)]
pub unsafe fn split(status_fd: RawFd, launch: &Launch) -> std::io::Result<()> {
    // SAFETY: system calls only, on values owned by this process; the
    // stack is a fresh private mapping used by the command process alone.
    unsafe {
        if launch.new_session && libc::setsid() < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if let Some(ns) = &launch.ns
            && let Err(errno) = ns.enter()
        {
            return Err(std::io::Error::from_raw_os_error(errno));
        }
        // Handlers the server installed mean nothing here.
        libc::signal(libc::SIGCHLD, libc::SIG_DFL);
        for sig in IGNORED {
            libc::signal(sig, libc::SIG_IGN);
        }
        // When the server dies — even by SIGKILL — or asks, this process
        // ends everything below it. (A thread of the server that ends is no
        // death: the parent process is still the same.) Installed before the
        // command exists, so no request can arrive unhandled.
        let server = launch.server;
        // Named for what it is (PID 1 wipes the argument strings it shares).
        libc::prctl(libc::PR_SET_NAME, c"ctm-supervisor".as_ptr(), 0, 0, 0);
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_kill_all as *const () as libc::sighandler_t;
        libc::sigemptyset(&mut action.sa_mask);
        action.sa_flags = 0; // no SA_RESTART: waitpid returns EINTR
        libc::sigaction(libc::SIGUSR2, &action, std::ptr::null_mut());
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGUSR2, 0, 0, 0);
        if libc::getppid() != server {
            // The server died before the death signal was armed.
            return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
        }
        if let Some(j) = &launch.joined {
            // PID 1 checks through this pidfd that we still live.
            let me = libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0) as RawFd;
            if me < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if let Err((_, errno)) = j.enter() {
                return Err(std::io::Error::from_raw_os_error(errno));
            }
            // PID 1 runs on this process's memory (no page table is copied
            // for it) and its own stack; this frame, which holds what it
            // reads, lives as long as this process (`supervise` never
            // returns).
            let top = ctm_sandbox::process::clone_stack()?;
            let start = InitStart {
                supervisor: me,
                launch,
                joined: j,
            };
            let init = libc::clone(
                start_init,
                top,
                libc::CLONE_VM | libc::SIGCHLD,
                (&raw const start).cast_mut().cast(),
            );
            if init < 0 {
                return Err(std::io::Error::last_os_error());
            }
            libc::close(me);
            // Orphans of the command go to that PID 1, not here: it is the
            // one child, and killing it ends the whole PID namespace.
            JOINED_INIT.store(init, Ordering::SeqCst);
            supervise(init, status_fd, server)
        }
        let top = ctm_sandbox::process::clone_stack()?;
        let shell = libc::clone(
            command_main,
            top,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            launch as *const Launch as *mut libc::c_void,
        );
        if shell < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // The command process has exec'd (or failed); its stack is ours again.
        let size = ctm_sandbox::process::CLONE_STACK_BYTES;
        libc::munmap(top.cast::<u8>().sub(size).cast(), size);
        let errno = SETUP_ERRNO.load(Ordering::SeqCst);
        if errno != 0 {
            let mut status = 0;
            libc::waitpid(shell, &mut status, 0);
            return Err(std::io::Error::from_raw_os_error(errno));
        }
        supervise(shell, status_fd, server)
    }
}

/// What PID 1 starts from (in the supervisor's memory).
struct InitStart<'a> {
    /// A pidfd of the supervisor.
    supervisor: RawFd,
    launch: &'a Launch,
    joined: &'a crate::holder::Joined,
}

/// PID 1 of the command's PID namespace, on the supervisor's memory.
#[expect(unsafe_code, reason = "the clone entry point of PID 1")]
extern "C" fn start_init(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the supervisor's `InitStart`, alive while the
    // supervisor lives (and PID 1 dies with it); `init` makes system calls only.
    unsafe {
        let s = &*arg.cast::<InitStart<'_>>();
        let (launch, j) = (s.launch, s.joined);
        crate::holder::init(s.supervisor, j.ids, |gate| joined_command(launch, j, gate))
    }
}

/// The command's process in a holder's namespaces (see `crate::holder`),
/// from PID 1's gate on: the process group, the signals, Landlock, seccomp,
/// then exec. System calls only.
#[expect(unsafe_code, reason = "the command's last steps before exec")]
fn joined_command(l: &Launch, j: &crate::holder::Joined, gate: RawFd) -> ! {
    use crate::holder::die;
    crate::holder::command_namespace(j, gate);
    // SAFETY: system calls on values prepared before the fork.
    unsafe {
        if !l.new_session && (libc::setpgid(0, 0) != 0 || libc::tcsetpgrp(0, libc::getpid()) != 0) {
            die(b"the command's process group", *libc::__errno_location());
        }
        for sig in IGNORED {
            libc::signal(sig, libc::SIG_DFL);
        }
        if l.new_session && libc::setsid() < 0 {
            die(b"the command's session", *libc::__errno_location());
        }
        if let Some(sb) = &l.sandbox
            && let Err(e) = sb.enforce_inside(&j.inside)
        {
            die(b"Landlock", e);
        }
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            die(b"no_new_privs", *libc::__errno_location());
        }
        if let Err(e) = crate::holder::command_seccomp(j) {
            die(b"seccomp", e);
        }
        // Nothing of the server's reaches the command: the holder's
        // namespace descriptors, the ruleset, the status pipe.
        if libc::syscall(
            libc::SYS_close_range,
            3u32,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC as libc::c_uint,
        ) != 0
        {
            die(b"closing inherited descriptors", *libc::__errno_location());
        }
        libc::execve(l.argv[0], l.argv.as_ptr(), l.envp.as_ptr());
        die(b"cannot run /bin/sh", *libc::__errno_location())
    }
}

/// PID 1 of the command's PID namespace, when the supervisor joined a
/// holder's namespaces (0 otherwise).
static JOINED_INIT: AtomicI32 = AtomicI32::new(0);

/// Set when the supervisor must end its subtree: the server died, or the
/// server asked (SIGUSR2, which the command cannot send it).
static KILL_ALL: AtomicBool = AtomicBool::new(false);

/// Also kills the children at once: a request that arrives after the main
/// loop looked at [`KILL_ALL`] and before it blocked in `waitpid` would
/// otherwise wait until some child ended on its own (a `sleep 300` kept its
/// supervisor waiting that long). `kill_children` only makes system calls,
/// so it is async-signal-safe; `errno` is kept for the interrupted call.
#[expect(unsafe_code, reason = "errno and kill_children in a signal handler")]
extern "C" fn on_kill_all(_: libc::c_int) {
    KILL_ALL.store(true, Ordering::SeqCst);
    // SAFETY: reads and restores this thread's errno; kill_children makes
    // only async-signal-safe system calls on a stack buffer.
    unsafe {
        let errno = *libc::__errno_location();
        kill_children();
        *libc::__errno_location() = errno;
    }
}

/// SIGKILLs every direct child (orphans of the subtree are re-parented
/// here, so rounds of this reach everything). Reads
/// `/proc/thread-self/children` into a stack buffer: no allocation.
#[expect(
    unsafe_code,
    reason = "system calls in the supervisor, which must not allocate"
)]
unsafe fn kill_children() {
    // SAFETY: system calls on a descriptor opened here, a stack buffer.
    unsafe {
        let init = JOINED_INIT.load(Ordering::SeqCst);
        if init > 0 {
            // This /proc is the sandbox's, not ours; PID 1 is the only
            // child, and its end is the end of everything below it.
            libc::kill(init, libc::SIGKILL);
            return;
        }
        let fd = libc::open(
            c"/proc/thread-self/children".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        );
        if fd < 0 {
            return;
        }
        let mut buf = [0u8; 4096];
        let mut pid: libc::pid_t = 0;
        loop {
            let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
            if n <= 0 {
                break;
            }
            for &b in &buf[..n as usize] {
                if b.is_ascii_digit() {
                    pid = pid
                        .saturating_mul(10)
                        .saturating_add(libc::pid_t::from(b - b'0'));
                } else {
                    if pid > 0 {
                        libc::kill(pid, libc::SIGKILL);
                    }
                    pid = 0;
                }
            }
        }
        if pid > 0 {
            libc::kill(pid, libc::SIGKILL);
        }
        libc::close(fd);
    }
}

/// The supervisor's whole life: hold no descriptor but the status pipe,
/// report the shell's status, reap until nothing is left, exit.
#[expect(unsafe_code, reason = "the supervisor's system calls, up to _exit")]
unsafe fn supervise(shell: libc::pid_t, status_fd: RawFd, server: libc::pid_t) -> ! {
    // SAFETY: system calls only; `_exit` never returns.
    unsafe {
        // Keep no copy of the command's pipes, the server's sockets, or
        // the spawn's error pipe: their ends must close when their owners do.
        if status_fd > 0 {
            close_range(0, status_fd as u32 - 1);
        }
        close_range(status_fd as u32 + 1, u32::MAX);
        let mut reported = false;
        loop {
            if KILL_ALL.load(Ordering::SeqCst) || libc::getppid() != server {
                kill_children();
            }
            // rustix's wait answers its error itself: PID 1 and the
            // command's process (before its exec) run on this process's
            // memory, so the C library's `errno` is theirs too.
            use rustix::process::{WaitOptions, wait};
            let (pid, status) = match wait(WaitOptions::empty()) {
                Ok(Some((pid, status))) => (pid.as_raw_nonzero().get(), status.as_raw()),
                Ok(None) | Err(rustix::io::Errno::INTR) => continue,
                Err(_) => break,
            };
            if pid == shell && !reported {
                // Reap what has already ended; then either nothing is left
                // (say so, and go) or background processes run on.
                let empty = loop {
                    match wait(WaitOptions::NOHANG) {
                        Ok(Some(_)) | Err(rustix::io::Errno::INTR) => {}
                        Ok(None) => break false,
                        Err(_) => break true,
                    }
                };
                let mut msg = [0u8; 8];
                msg[..4].copy_from_slice(&status.to_ne_bytes());
                msg[4..].copy_from_slice(&i32::from(empty).to_ne_bytes());
                libc::write(status_fd, msg.as_ptr().cast(), msg.len());
                reported = true;
                if empty {
                    libc::_exit(0);
                }
            }
        }
        libc::_exit(0)
    }
}

/// Decodes a wait status into (exit code, signal).
pub fn decode(status: i32) -> (Option<i32>, Option<i32>) {
    if libc::WIFEXITED(status) {
        (Some(libc::WEXITSTATUS(status)), None)
    } else if libc::WIFSIGNALED(status) {
        (None, Some(libc::WTERMSIG(status)))
    } else {
        (None, None)
    }
}

/// Sets `signals` back to their default action in this process (a host's
/// second stop signal then ends it at once, whatever its handlers do).
pub fn default_signal_dispositions(signals: &[crate::Signal]) {
    for sig in signals {
        // SAFETY: installs the default disposition; no handler code runs.
        #[expect(unsafe_code, reason = "signal(2) restores a default disposition")]
        unsafe {
            libc::signal(sig.as_raw(), libc::SIG_DFL);
        }
    }
}

/// pid -> (parent pid, zombie) of every process visible in `/proc`.
fn process_table() -> HashMap<i32, (i32, bool)> {
    let mut map = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return map;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        if let Some(row) = stat_of(pid) {
            map.insert(pid, row);
        }
    }
    map
}

/// (parent pid, zombie) from `/proc/<pid>/stat` (the name may hold spaces
/// and parentheses: the fields start after the last `)`).
#[expect(
    clippy::disallowed_methods,
    reason = "procfs, not workspace content: the process table is outside any workspace"
)]
fn stat_of(pid: i32) -> Option<(i32, bool)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    let zombie = fields.next()? == "Z";
    Some((fields.next()?.parse().ok()?, zombie))
}

fn parent_of(pid: i32) -> Option<i32> {
    stat_of(pid).map(|(ppid, _)| ppid)
}

/// Every live (not zombie) descendant of `root`, `root` excluded.
pub fn descendants(root: i32) -> Vec<i32> {
    let table = process_table();
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for (&pid, &(ppid, _)) in &table {
        children.entry(ppid).or_default().push(pid);
    }
    let mut out = Vec::new();
    let mut stack = vec![root];
    let mut seen = HashSet::new();
    while let Some(p) = stack.pop() {
        for &c in children.get(&p).map(Vec::as_slice).unwrap_or(&[]) {
            if seen.insert(c) {
                if !table.get(&c).is_some_and(|&(_, z)| z) {
                    out.push(c);
                }
                stack.push(c);
            }
        }
    }
    out
}

/// Sends `sig` to `pid` through a pidfd, after checking that the process
/// behind the pidfd still has a parent in `tree` (the pid was not recycled).
fn signal_checked(pid: i32, sig: Signal, tree: &HashSet<i32>) -> bool {
    let Some(p) = Pid::from_raw(pid) else {
        return false;
    };
    let Ok(fd) = rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()) else {
        return false;
    };
    if !parent_of(pid).is_some_and(|pp| tree.contains(&pp)) {
        return false;
    }
    rustix::process::pidfd_send_signal(&fd, sig).is_ok()
}

fn pgid_of(pid: i32) -> Option<i32> {
    rustix::process::getpgid(Pid::from_raw(pid))
        .ok()
        .map(Pid::as_raw_nonzero)
        .map(i32::from)
}

/// Signals what runs below `root`: each process group of the command as a
/// whole (a group signal races no `fork`: the kernel delivers it to children
/// forked meanwhile), and one by one any process that shares the
/// supervisor's own group. Returns how many processes were below `root`.
pub fn signal_tree(root: i32, sig: Signal) -> usize {
    let below = descendants(root);
    let own = pgid_of(root);
    let mut tree: HashSet<i32> = below.iter().copied().collect();
    tree.insert(root);
    // The command's own process first: a shell that sees its child die
    // first would exit normally (128+N) instead of by the signal.
    let mut groups: Vec<i32> = Vec::new();
    for &p in &below {
        match pgid_of(p) {
            Some(g) if Some(g) != own => {
                if !groups.contains(&g) {
                    if parent_of(p) == Some(root) {
                        groups.insert(0, g);
                    } else {
                        groups.push(g);
                    }
                } else if parent_of(p) == Some(root)
                    && let Some(i) = groups.iter().position(|x| *x == g)
                {
                    groups.remove(i);
                    groups.insert(0, g);
                }
            }
            _ => {
                signal_checked(p, sig, &tree);
            }
        }
    }
    for g in groups {
        if let Some(g) = Pid::from_raw(g) {
            let _ = rustix::process::kill_process_group(g, sig);
        }
    }
    below.len()
}

/// Kills everything below the supervisor `root`: asks it to (SIGUSR2: it
/// then SIGKILLs its children in rounds, and every orphan of the command
/// comes back to it as a child, so even a fork-and-exit loop ends), and
/// kills the command's process groups from here too, in rounds until three
/// scans in a row find nothing or 200 rounds. Returns how many processes
/// the first round found.
pub fn kill_tree(root: i32) -> usize {
    kill_trees(&[root])
}

/// [`kill_tree`] for several supervisors at once: every tree is signalled
/// before any is waited for, so ending 16 commands costs about what ending
/// one does (server shutdown has a budget of about 100 ms). Returns how
/// many processes the first round found, summed.
pub fn kill_trees(roots: &[i32]) -> usize {
    for &root in roots {
        // `root` is our child, not yet reaped: its pid cannot have been reused.
        if let Some(p) = Pid::from_raw(root) {
            let _ = rustix::process::kill_process(p, Signal::USR2);
        }
    }
    let first = roots.iter().map(|&r| signal_tree(r, Signal::KILL)).sum();
    let mut quiet = 0;
    for _ in 0..200 {
        std::thread::sleep(std::time::Duration::from_millis(1));
        let mut busy = false;
        for &root in roots {
            if !descendants(root).is_empty() {
                busy = true;
                signal_tree(root, Signal::KILL);
            }
        }
        if busy {
            quiet = 0;
            continue;
        }
        quiet += 1;
        if quiet == 3 {
            break;
        }
    }
    first
}
