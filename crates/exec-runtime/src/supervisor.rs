//! One supervisor process per command, so that nothing a command starts
//! outlives it unnoticed.
//!
//! The process the server spawns does not run the command: it becomes a
//! *subreaper* in a session of its own and forks the command's shell. Every
//! descendant the command leaves behind — a double fork, a `setsid`, a
//! background `&` — is re-parented to that supervisor, never to init, so the
//! command's processes are exactly the supervisor's subtree. The supervisor
//! reports the shell's wait status on a pipe, reaps everything else, and
//! exits only when its subtree is empty; the server ends a command by
//! signalling that subtree (found in `/proc`, each process addressed by a
//! pidfd so a recycled pid is never hit).
//!
//! The supervisor runs no sandbox itself (it never executes anything), and
//! the command's Landlock domain is created below it: with signal scoping
//! the command cannot signal its supervisor or the server.

use std::collections::{HashMap, HashSet};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::process::{Pid, Signal};

/// Signals the supervisor ignores (terminal and job control, and those a
/// kill sends to a whole group); the shell gets them back as default.
const IGNORED: [libc::c_int; 8] = [
    libc::SIGHUP,
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGTERM,
    libc::SIGTSTP,
    libc::SIGTTIN,
    libc::SIGTTOU,
    libc::SIGPIPE,
];

/// Runs in the process the server forked, before exec. Returns in the
/// command's shell (which goes on to exec); never returns in the supervisor.
///
/// `new_session`: pipe commands start a session here and another for the
/// shell; a PTY command's session (with its terminal) was made already, and
/// the shell stays in it, in the foreground group.
///
/// # Safety
/// Only between fork and exec of a child of this process: it forks again
/// and calls only async-signal-safe functions.
#[allow(unsafe_code)]
pub unsafe fn split(status_fd: RawFd, new_session: bool) -> std::io::Result<()> {
    // SAFETY: system calls only, on values owned by this process.
    unsafe {
        if new_session && libc::setsid() < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // Handlers the server installed mean nothing here.
        libc::signal(libc::SIGCHLD, libc::SIG_DFL);
        for sig in IGNORED {
            libc::signal(sig, libc::SIG_IGN);
        }
        let shell = libc::fork();
        if shell < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if shell == 0 {
            for sig in IGNORED {
                libc::signal(sig, libc::SIG_DFL);
            }
            if new_session && libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            return Ok(());
        }
        supervise(shell, status_fd)
    }
}

/// Set when the server is gone: the supervisor then ends its subtree.
static SERVER_GONE: AtomicBool = AtomicBool::new(false);

extern "C" fn on_parent_death(_: libc::c_int) {
    SERVER_GONE.store(true, Ordering::SeqCst);
}

/// SIGKILLs every direct child (orphans of the subtree are re-parented
/// here, so rounds of this reach everything). Reads
/// `/proc/thread-self/children` into a stack buffer: no allocation.
#[allow(unsafe_code)]
unsafe fn kill_children() {
    // SAFETY: system calls on a descriptor opened here, a stack buffer.
    unsafe {
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
#[allow(unsafe_code)]
unsafe fn supervise(shell: libc::pid_t, status_fd: RawFd) -> ! {
    // SAFETY: system calls only; `_exit` never returns.
    unsafe {
        // Keep no copy of the command's pipes, the server's sockets, or
        // the spawn's error pipe: their ends must close when their owners do.
        if status_fd > 0 {
            close_range(0, status_fd as u32 - 1);
        }
        close_range(status_fd as u32 + 1, u32::MAX);
        // When the server dies — even by SIGKILL — this process hears of it
        // and ends everything below it. (A thread of the server that ends is
        // no death: the parent process is still the same.)
        let server = libc::getppid();
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_parent_death as *const () as libc::sighandler_t;
        libc::sigemptyset(&mut action.sa_mask);
        action.sa_flags = 0; // no SA_RESTART: waitpid returns EINTR
        libc::sigaction(libc::SIGUSR2, &action, std::ptr::null_mut());
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGUSR2, 0, 0, 0);
        let mut reported = false;
        loop {
            if SERVER_GONE.load(Ordering::SeqCst) || libc::getppid() != server {
                kill_children();
            }
            let mut status: libc::c_int = 0;
            let pid = libc::waitpid(-1, &mut status, 0);
            if pid < 0 {
                if *libc::__errno_location() == libc::EINTR {
                    continue;
                }
                break;
            }
            if pid == shell && !reported {
                let bytes = status.to_ne_bytes();
                libc::write(status_fd, bytes.as_ptr().cast(), bytes.len());
                reported = true;
            }
        }
        libc::_exit(0)
    }
}

#[allow(unsafe_code)]
unsafe fn close_range(first: u32, last: u32) {
    if first > last {
        return;
    }
    // SAFETY: closes descriptors of this (forked, single-threaded) process.
    unsafe {
        if libc::syscall(libc::SYS_close_range, first, last, 0) != 0 {
            // Kernels before 5.9: close what is plausibly open.
            for fd in first..=last.min(65_535) {
                libc::close(fd as libc::c_int);
            }
        }
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

/// pid -> parent pid of every process visible in `/proc`.
fn parents() -> HashMap<i32, i32> {
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
        if let Some(ppid) = parent_of(pid) {
            map.insert(pid, ppid);
        }
    }
    map
}

/// The parent pid from `/proc/<pid>/stat` (the name may hold spaces and
/// parentheses: the fields start after the last `)`).
#[allow(
    clippy::disallowed_methods,
    reason = "procfs, not workspace content: the process table is outside any workspace"
)]
fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// Every descendant of `root` (not `root` itself).
pub fn descendants(root: i32) -> Vec<i32> {
    let map = parents();
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for (&pid, &ppid) in &map {
        children.entry(ppid).or_default().push(pid);
    }
    let mut out = Vec::new();
    let mut stack = vec![root];
    let mut seen = HashSet::new();
    while let Some(p) = stack.pop() {
        for &c in children.get(&p).map(Vec::as_slice).unwrap_or(&[]) {
            if seen.insert(c) {
                out.push(c);
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

/// Sends `sig` once to every process below `root`; how many were signalled.
pub fn signal_tree(root: i32, sig: Signal) -> usize {
    let below = descendants(root);
    let mut tree: HashSet<i32> = below.iter().copied().collect();
    tree.insert(root);
    below
        .iter()
        .filter(|&&p| signal_checked(p, sig, &tree))
        .count()
}

/// Stops every process below `root` (so none can fork while it is being
/// found), repeating until a pass finds nobody new, then kills them all.
/// Returns how many were killed.
pub fn kill_tree(root: i32) -> usize {
    let mut tree: HashSet<i32> = HashSet::from([root]);
    for _ in 0..64 {
        let below = descendants(root);
        let new: Vec<i32> = below.into_iter().filter(|p| !tree.contains(p)).collect();
        if new.is_empty() {
            break;
        }
        tree.extend(new.iter().copied());
        for p in new {
            signal_checked(p, Signal::STOP, &tree);
        }
    }
    let mut killed = 0;
    for &p in tree.iter().filter(|&&p| p != root) {
        if signal_checked(p, Signal::KILL, &tree) {
            killed += 1;
        }
    }
    killed
}
