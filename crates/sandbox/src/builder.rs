//! The namespace tier's sandbox built by our own binary, for hosts without
//! a system `bwrap` (issue "The namespace tier on every Linux host").
//!
//! The plan of a command's sandbox is one argument list ([`crate::namespace::argv`]),
//! in bubblewrap's option syntax; either a trusted system `bwrap` runs it, or
//! the host program, started as `<program> --ctm-namespace <the same
//! options> -- <entry>`, runs it here. Only the options the plan uses are
//! understood; anything else is refused, so the two builders cannot drift
//! apart silently.
//!
//! What happens, in the order bubblewrap does it (its documented behaviour;
//! none of its code):
//!
//! 1. The first process (outside) unshares a user namespace mapping only
//!    the caller's uid and gid (`setgroups` denied), with mount, PID, IPC,
//!    UTS, cgroup (when possible) and — when the network is closed —
//!    network namespaces; then forks the second, which is PID 1 of the new
//!    PID namespace, waits for it and exits with its status.
//! 2. PID 1 makes every mount private, mounts a tmpfs on `/tmp` as the
//!    scaffold, pivots into it (the host root is now `/oldroot`, whole,
//!    `/tmp` included) and builds `/newroot` from the plan: bind mounts made
//!    `nosuid,nodev` (and read-only, recursively, by `mount_setattr`), sized
//!    tmpfs mounts, a minimal `/dev` (the host's null, zero, full, random,
//!    urandom and tty nodes bound in, a devpts instance of its own), a
//!    `/proc` of the new PID namespace (with `sys`, `sysrq-trigger`, `irq`
//!    and `bus` read-only). It brings the loopback interface up, detaches
//!    the old root, pivots onto the new one and returns to the caller's
//!    directory.
//! 3. PID 1 forks the command's process, closes every descriptor and reaps
//!    until that process ends; then it exits with its status (128 + the
//!    signal when a signal ended it), and the kernel kills whatever the
//!    command left in the PID namespace.
//! 4. The command's process drops every capability (bounding, ambient,
//!    permitted), and either finishes the sandbox in-process (the entry:
//!    Landlock, seccomp, see [`crate::namespace`]) or execs the program.
//!
//! Both helper processes keep the signals the supervisor ignores ignored
//! and die with their parent (`PR_SET_PDEATHSIG`).

use std::ffi::{CString, OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The first argument that makes the host program the sandbox's builder.
pub const BUILDER_FLAG: &str = "--ctm-namespace";

/// The scaffold the new root is built in (inside the private mount
/// namespace; the host's `/tmp` is untouched).
const BASE: &str = "/tmp";

/// One step of the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Op {
    Bind {
        src: PathBuf,
        dst: PathBuf,
        read_only: bool,
        /// `--ro-bind-try`: a missing source is skipped.
        optional: bool,
    },
    Tmpfs {
        dst: PathBuf,
        size: Option<u64>,
    },
    RemountRo(PathBuf),
    Dev(PathBuf),
    Proc(PathBuf),
}

/// The parsed options.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Spec {
    unshare_net: bool,
    unshare_cgroup_try: bool,
    die_with_parent: bool,
    ops: Vec<Op>,
    /// The program and its arguments (after the options, or after `--`).
    command: Vec<OsString>,
}

fn parse(args: &[OsString]) -> Result<Spec, String> {
    let mut s = Spec::default();
    let mut size = None;
    let mut i = 0;
    let arg = |i: usize, what: &str| -> Result<&OsString, String> {
        args.get(i)
            .ok_or_else(|| format!("{what} needs an argument"))
    };
    while i < args.len() {
        let a = args[i].to_str().unwrap_or("");
        match a {
            // Always made; accepted for bubblewrap's syntax.
            "--unshare-user" | "--unshare-pid" | "--unshare-ipc" | "--unshare-uts" => {}
            "--unshare-cgroup-try" => s.unshare_cgroup_try = true,
            "--unshare-net" => s.unshare_net = true,
            "--die-with-parent" => s.die_with_parent = true,
            "--cap-drop" => {
                if arg(i + 1, a)? != "ALL" {
                    return Err("--cap-drop: only ALL is understood".into());
                }
                i += 1;
            }
            "--ro-bind" | "--ro-bind-try" | "--bind" => {
                s.ops.push(Op::Bind {
                    src: PathBuf::from(arg(i + 1, a)?),
                    dst: PathBuf::from(arg(i + 2, a)?),
                    read_only: a != "--bind",
                    optional: a == "--ro-bind-try",
                });
                i += 2;
            }
            "--size" => {
                let n = arg(i + 1, a)?
                    .to_str()
                    .and_then(|n| n.parse::<u64>().ok())
                    .ok_or("--size needs a number of bytes")?;
                size = Some(n);
                i += 1;
            }
            "--tmpfs" => {
                s.ops.push(Op::Tmpfs {
                    dst: PathBuf::from(arg(i + 1, a)?),
                    size: size.take(),
                });
                i += 1;
            }
            "--remount-ro" => {
                s.ops.push(Op::RemountRo(PathBuf::from(arg(i + 1, a)?)));
                i += 1;
            }
            "--dev" => {
                s.ops.push(Op::Dev(PathBuf::from(arg(i + 1, a)?)));
                i += 1;
            }
            "--proc" => {
                s.ops.push(Op::Proc(PathBuf::from(arg(i + 1, a)?)));
                i += 1;
            }
            "--" => {
                s.command = args[i + 1..].to_vec();
                break;
            }
            _ if a.starts_with("--") => return Err(format!("unknown option {a}")),
            _ => {
                s.command = args[i..].to_vec();
                break;
            }
        }
        if size.is_some() && a != "--size" {
            return Err("--size must come right before --tmpfs".into());
        }
        i += 1;
    }
    if s.command.is_empty() {
        return Err("no command to run".into());
    }
    for op in &s.ops {
        let (Op::Bind { dst, .. }
        | Op::Tmpfs { dst, .. }
        | Op::RemountRo(dst)
        | Op::Dev(dst)
        | Op::Proc(dst)) = op;
        if !dst.is_absolute() {
            return Err(format!("{} is not an absolute path", dst.display()));
        }
    }
    Ok(s)
}

/// Called by [`crate::enter_if_requested`] when the first argument is
/// [`BUILDER_FLAG`]: builds the sandbox and runs the command in it; never
/// returns.
pub fn run(args: &[OsString]) -> ! {
    let spec = match parse(args) {
        Ok(s) => s,
        Err(e) => fail(&format!("the sandbox plan: {e}")),
    };
    outside(&spec)
}

fn fail(what: &str) -> ! {
    eprintln!("coding-tools-mcp sandbox: {what}");
    // SAFETY: ends this process (no destructors needed: nothing is buffered).
    #[expect(unsafe_code, reason = "_exit from the sandbox builder")]
    unsafe {
        libc::_exit(1)
    }
}

fn errno_fail(what: &str) -> ! {
    fail(&format!("{what}: {}", std::io::Error::last_os_error()))
}

fn cstr(p: impl AsRef<OsStr>) -> CString {
    CString::new(p.as_ref().as_bytes()).unwrap_or_else(|_| fail("a path contains a NUL byte"))
}

/// Step 1, the process outside: namespaces, maps, PID 1, its status.
#[expect(
    unsafe_code,
    reason = "unshare, fork and waitpid of the sandbox builder"
)]
fn outside(spec: &Spec) -> ! {
    // SAFETY: system calls in a single-threaded process (the builder runs
    // before the host program starts any thread).
    unsafe {
        if spec.die_with_parent {
            let parent = libc::getppid();
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            if libc::getppid() != parent {
                libc::_exit(1);
            }
        }
        let uid = libc::geteuid();
        let gid = libc::getegid();
        let mut flags = libc::CLONE_NEWUSER
            | libc::CLONE_NEWNS
            | libc::CLONE_NEWPID
            | libc::CLONE_NEWIPC
            | libc::CLONE_NEWUTS;
        if spec.unshare_net {
            flags |= libc::CLONE_NEWNET;
        }
        if libc::unshare(flags) != 0 {
            errno_fail("cannot create the namespaces (unshare)");
        }
        write_file(c"/proc/self/setgroups", b"deny");
        write_file(c"/proc/self/uid_map", format!("{uid} {uid} 1\n").as_bytes());
        write_file(c"/proc/self/gid_map", format!("{gid} {gid} 1\n").as_bytes());
        if spec.unshare_cgroup_try {
            libc::unshare(libc::CLONE_NEWCGROUP);
        }
        // PID 1 cannot see its parent (outside its PID namespace): this
        // pipe's write end, held by the process outside, tells it whether
        // that process died before PID 1's parent-death signal was set.
        let mut alive = [0; 2];
        if libc::pipe2(alive.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            errno_fail("pipe");
        }
        let pid1 = libc::fork();
        if pid1 < 0 {
            errno_fail("fork of the sandbox's init");
        }
        if pid1 == 0 {
            libc::close(alive[1]);
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            let mut p = libc::pollfd {
                fd: alive[0],
                events: libc::POLLIN,
                revents: 0,
            };
            if libc::poll(&mut p, 1, 0) != 0 {
                // End of file: the process outside is gone.
                libc::_exit(1);
            }
            libc::close(alive[0]);
            init(spec);
        }
        // Only the wait is left: no capability, no /proc of ours a command
        // could open, nothing of the command's (its pipes close when its
        // own processes end) but the pipe's write end.
        settle_helper();
        let keep = alive[1] as u32;
        crate::process::close_range(0, keep - 1);
        close_from(keep + 1);
        let mut status = 0;
        loop {
            let r = libc::waitpid(pid1, &mut status, 0);
            if r == pid1 {
                break;
            }
            if r < 0 && *libc::__errno_location() != libc::EINTR {
                libc::_exit(1);
            }
        }
        libc::_exit(exit_code(status))
    }
}

use crate::holder::exit_code;

#[expect(unsafe_code, reason = "open/write/close of a /proc file")]
fn write_file(path: &std::ffi::CStr, data: &[u8]) {
    // SAFETY: system calls on a descriptor opened here.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            errno_fail(&format!("open {}", path.to_string_lossy()));
        }
        let n = libc::write(fd, data.as_ptr().cast(), data.len());
        if n != data.len() as isize {
            errno_fail(&format!("write {}", path.to_string_lossy()));
        }
        libc::close(fd);
    }
}

/// Closes every descriptor from `first` on (the supervisor's
/// `close_range`, with its fallback for kernels before 5.9).
fn close_from(first: u32) {
    // SAFETY: closes this single-threaded process's own descriptors.
    #[expect(unsafe_code, reason = "close_range of this process's descriptors")]
    unsafe {
        crate::process::close_range(first, u32::MAX);
    }
}

use crate::holder::{MOUNT_ATTR_NODEV, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY};

/// Sets mount flags on `path`'s mount (and, `recursive`, every mount
/// below it): only ever adds restrictions.
fn set_attr(path: &CString, attrs: u64, recursive: bool, what: &str) {
    if let Err(errno) = crate::holder::mount_setattr(path, attrs, recursive) {
        let e = std::io::Error::from_raw_os_error(errno);
        let hint = if errno == libc::ENOSYS {
            " (mount_setattr needs Linux 5.12 or later)"
        } else {
            ""
        };
        fail(&format!(
            "{what}: setting mount flags on {}: {e}{hint}",
            path.to_string_lossy()
        ));
    }
}

fn mount(
    src: Option<&CString>,
    dst: &CString,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
    what: &str,
) {
    let fstype = fstype.map(cstr);
    let data = data.map(cstr);
    let r = crate::holder::mount(
        src.map(CString::as_c_str),
        dst,
        fstype.as_deref(),
        flags,
        data.as_deref(),
    );
    if r.is_err() {
        errno_fail(&format!("{what}: mount on {}", dst.to_string_lossy()));
    }
}

/// `dst` inside the new root.
fn inside(dst: &Path) -> PathBuf {
    let mut p = PathBuf::from("/newroot");
    p.push(dst.strip_prefix("/").unwrap_or(dst));
    p
}

/// `src` of the host, as seen below the scaffold.
fn host(src: &Path) -> PathBuf {
    let mut p = PathBuf::from("/oldroot");
    p.push(src.strip_prefix("/").unwrap_or(src));
    p
}

/// Makes the mount point `dst` when it is missing: a directory, or an
/// empty file when it will hold a file.
fn ensure(dst: &Path, file: bool) {
    if std::fs::symlink_metadata(dst).is_ok() {
        return;
    }
    let made = if file {
        dst.parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| {
                std::fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(dst)
                    .map(drop)
            })
    } else {
        std::fs::create_dir_all(dst)
    };
    if let Err(e) = made {
        fail(&format!(
            "cannot make the mount point {}: {e}",
            dst.display()
        ));
    }
}

/// Step 2 and 3: PID 1 of the sandbox.
#[expect(
    unsafe_code,
    reason = "the sandbox's mounts, pivot_root, fork and wait"
)]
fn init(spec: &Spec) -> ! {
    // SAFETY: system calls in the single-threaded forked child.
    unsafe {
        let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
        mount(
            None,
            &cstr("/"),
            None,
            libc::MS_REC | libc::MS_PRIVATE,
            None,
            "private mounts",
        );
        mount(
            Some(&cstr("tmpfs")),
            &cstr(BASE),
            Some("tmpfs"),
            libc::MS_NOSUID | libc::MS_NODEV,
            Some("mode=0755"),
            "the scaffold",
        );
        if libc::chdir(cstr(BASE).as_ptr()) != 0 {
            errno_fail("chdir to the scaffold");
        }
        for d in [c"newroot", c"oldroot"] {
            if libc::mkdir(d.as_ptr(), 0o755) != 0 {
                errno_fail("mkdir in the scaffold");
            }
        }
        if libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c"oldroot".as_ptr()) != 0 {
            errno_fail("pivot_root into the scaffold");
        }
        if libc::chdir(c"/".as_ptr()) != 0 {
            errno_fail("chdir /");
        }
        let newroot = cstr("/newroot");
        // The new root starts as a mount of its own, so that the first
        // bind (the host root, usually) can cover it.
        mount(
            Some(&newroot),
            &newroot,
            None,
            libc::MS_BIND,
            None,
            "the new root",
        );
        for op in &spec.ops {
            apply(op);
        }
        if spec.unshare_net {
            loopback_up();
        }
        if libc::umount2(c"/oldroot".as_ptr(), libc::MNT_DETACH) != 0 {
            errno_fail("detach the host root");
        }
        if libc::chdir(newroot.as_ptr()) != 0 {
            errno_fail("chdir to the new root");
        }
        if libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()) != 0 {
            errno_fail("pivot_root into the new root");
        }
        if libc::umount2(c".".as_ptr(), libc::MNT_DETACH) != 0 {
            errno_fail("detach the scaffold");
        }
        if libc::chdir(cstr(&cwd).as_ptr()) != 0 && libc::chdir(c"/".as_ptr()) != 0 {
            errno_fail("chdir in the sandbox");
        }
        // The set-up is done. The command's process maps its own user
        // namespace with a copy of PID 1's capabilities (mapping uid 0
        // needs CAP_SETFCAP above it), then drops them, and goes on only
        // when PID 1 has dropped its own: this pipe's end of file.
        let mut gate = [0; 2];
        if libc::pipe2(gate.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            errno_fail("pipe");
        }
        let child = libc::fork();
        if child < 0 {
            errno_fail("fork of the command");
        }
        if child == 0 {
            libc::close(gate[1]);
            command(spec, gate[0]);
        }
        settle_helper();
        // The reaper holds nothing of the command's (and the gate opens).
        close_from(0);
        loop {
            let mut status = 0;
            let pid = libc::waitpid(-1, &mut status, 0);
            if pid == child {
                // Leaving ends every other process of the namespace.
                libc::_exit(exit_code(status));
            }
            if pid < 0 && *libc::__errno_location() != libc::EINTR {
                libc::_exit(1);
            }
        }
    }
}

fn apply(op: &Op) {
    match op {
        Op::Bind {
            src,
            dst,
            read_only,
            optional,
        } => {
            let from = host(src);
            let meta = match std::fs::metadata(&from) {
                Ok(m) => m,
                // Only a source that is not there is skipped: any other
                // failure (a loop, a permission) must not leave a
                // read-only bind out.
                Err(e) if *optional && e.kind() == std::io::ErrorKind::NotFound => return,
                Err(e) => fail(&format!("{}: {e}", src.display())),
            };
            let to = inside(dst);
            ensure(&to, !meta.is_dir());
            let to = cstr(&to);
            mount(
                Some(&cstr(&from)),
                &to,
                None,
                libc::MS_BIND | libc::MS_REC,
                None,
                "bind",
            );
            let mut attrs = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
            if *read_only {
                attrs |= MOUNT_ATTR_RDONLY;
            }
            set_attr(&to, attrs, true, "bind");
        }
        Op::Tmpfs { dst, size } => {
            let to = inside(dst);
            ensure(&to, false);
            let data = match size {
                Some(n) => format!("mode=0755,size={n}"),
                None => "mode=0755".into(),
            };
            mount(
                Some(&cstr("tmpfs")),
                &cstr(&to),
                Some("tmpfs"),
                libc::MS_NOSUID | libc::MS_NODEV,
                Some(&data),
                "tmpfs",
            );
        }
        Op::RemountRo(dst) => set_attr(&cstr(inside(dst)), MOUNT_ATTR_RDONLY, false, "remount"),
        Op::Dev(dst) => dev(&inside(dst)),
        Op::Proc(dst) => {
            let to = inside(dst);
            ensure(&to, false);
            mount(
                Some(&cstr("proc")),
                &cstr(&to),
                Some("proc"),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                None,
                "proc",
            );
            // What of /proc still reaches the host's kernel: read-only.
            for sub in ["sys", "sysrq-trigger", "irq", "bus"] {
                let p = to.join(sub);
                if std::fs::symlink_metadata(&p).is_ok() {
                    let p = cstr(&p);
                    mount(
                        Some(&p),
                        &p,
                        None,
                        libc::MS_BIND | libc::MS_REC,
                        None,
                        "proc",
                    );
                    set_attr(
                        &p,
                        MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
                        true,
                        "proc",
                    );
                }
            }
        }
    }
}

/// A minimal `/dev`: a tmpfs with the host's harmless device nodes bound
/// in, a devpts instance of the sandbox's own, and the usual links.
#[expect(unsafe_code, reason = "symlink(2)")]
fn dev(to: &Path) {
    ensure(to, false);
    mount(
        Some(&cstr("tmpfs")),
        &cstr(to),
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some("mode=0755"),
        "dev",
    );
    for node in ["null", "zero", "full", "random", "urandom", "tty"] {
        let from = host(&Path::new("/dev").join(node));
        let at = to.join(node);
        ensure(&at, true);
        let at = cstr(&at);
        mount(Some(&cstr(&from)), &at, None, libc::MS_BIND, None, "dev");
        set_attr(&at, MOUNT_ATTR_NOSUID, false, "dev");
    }
    for d in ["pts", "shm"] {
        ensure(&to.join(d), false);
    }
    mount(
        Some(&cstr("devpts")),
        &cstr(to.join("pts")),
        Some("devpts"),
        libc::MS_NOSUID | libc::MS_NOEXEC,
        Some("newinstance,ptmxmode=0666,mode=620"),
        "devpts",
    );
    let links: [(&str, &str); 5] = [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
        ("ptmx", "pts/ptmx"),
    ];
    for (name, target) in links {
        let at = cstr(to.join(name));
        // SAFETY: symlink(2) on NUL-terminated strings of this frame.
        if unsafe { libc::symlink(cstr(target).as_ptr(), at.as_ptr()) } != 0 {
            errno_fail("dev: symlink");
        }
    }
}

/// Brings `lo` up in the new network namespace (its 127.0.0.1 and ::1
/// come with it).
#[expect(unsafe_code, reason = "the SIOCGIFFLAGS/SIOCSIFFLAGS ioctls")]
fn loopback_up() {
    // SAFETY: ioctls on a socket opened here, with an ifreq of this frame.
    unsafe {
        let s = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if s < 0 {
            errno_fail("loopback: socket");
        }
        let mut req: libc::ifreq = std::mem::zeroed();
        for (i, b) in b"lo".iter().enumerate() {
            req.ifr_name[i] = *b as libc::c_char;
        }
        if libc::ioctl(s, libc::SIOCGIFFLAGS, &mut req) != 0 {
            errno_fail("loopback: SIOCGIFFLAGS");
        }
        req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        if libc::ioctl(s, libc::SIOCSIFFLAGS, &req) != 0 {
            errno_fail("loopback: SIOCSIFFLAGS");
        }
        libc::close(s);
    }
}

/// A helper process with nothing left to do but wait: no capability, not
/// dumpable (its /proc entries belong to no one the command is).
fn settle_helper() {
    if !crate::process::drop_all_capabilities() {
        fail("a sandbox helper kept a capability");
    }
    // SAFETY: prctl on this process.
    #[expect(unsafe_code, reason = "prctl(PR_SET_DUMPABLE)")]
    unsafe {
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
    }
}

/// Step 4: the command's process, in a user namespace of its own below the
/// sandbox's (mapping the same ids), so that it owns none of the
/// namespaces the sandbox is made of: were it ever to regain a capability,
/// that capability would not reach the sandbox's mounts.
#[expect(unsafe_code, reason = "unshare of the command's user namespace")]
fn command(spec: &Spec, gate: libc::c_int) -> ! {
    // SAFETY: system calls in the single-threaded forked child.
    unsafe {
        let uid = libc::geteuid();
        let gid = libc::getegid();
        if libc::unshare(libc::CLONE_NEWUSER) != 0 {
            errno_fail("the command's user namespace (unshare)");
        }
        write_file(c"/proc/self/setgroups", b"deny");
        write_file(c"/proc/self/uid_map", format!("{uid} {uid} 1\n").as_bytes());
        write_file(c"/proc/self/gid_map", format!("{gid} {gid} 1\n").as_bytes());
    }
    if !crate::process::drop_all_capabilities() {
        fail("the command kept a capability");
    }
    // SAFETY: read and close of the gate's descriptor.
    #[expect(unsafe_code, reason = "read(2) of the gate")]
    unsafe {
        let mut b = [0u8; 1];
        while libc::read(gate, b.as_mut_ptr().cast(), 1) != 0 {
            if *libc::__errno_location() != libc::EINTR {
                break;
            }
        }
        libc::close(gate);
    }
    let cmd = &spec.command;
    if cmd.get(1).map(OsString::as_os_str) == Some(OsStr::new(crate::namespace::ENTRY_FLAG)) {
        // The entry is this very program: finish the sandbox here rather
        // than exec it again.
        crate::namespace::run_entry(&cmd[2..]);
    }
    if cmd.get(1).map(OsString::as_os_str) == Some(OsStr::new(crate::holder::HOLD_FLAG)) {
        crate::holder::run_hold(&cmd[2..]);
    }
    let argv: Vec<CString> = cmd.iter().map(cstr).collect();
    let mut ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    // SAFETY: execv with NUL-terminated strings and a null-terminated array
    // owned by this frame.
    #[expect(unsafe_code, reason = "execv of the command")]
    unsafe {
        libc::execv(ptrs[0], ptrs.as_ptr());
    }
    errno_fail(&format!("cannot run {:?}", cmd[0]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn parses_what_the_plan_writes_and_refuses_the_rest() {
        let s = parse(&os(&[
            "--unshare-user",
            "--unshare-net",
            "--die-with-parent",
            "--cap-drop",
            "ALL",
            "--ro-bind",
            "/",
            "/",
            "--size",
            "1024",
            "--tmpfs",
            "/tmp",
            "--dev",
            "/dev",
            "--proc",
            "/proc",
            "--ro-bind-try",
            "/x",
            "/x",
            "--bind",
            "/w",
            "/w",
            "--tmpfs",
            "/h",
            "--remount-ro",
            "/h",
            "/bin/true",
            "--",
            "a",
        ]))
        .unwrap();
        assert!(s.unshare_net && s.die_with_parent && !s.unshare_cgroup_try);
        assert_eq!(s.command, os(&["/bin/true", "--", "a"]));
        assert_eq!(
            s.ops[1],
            Op::Tmpfs {
                dst: "/tmp".into(),
                size: Some(1024)
            }
        );
        assert_eq!(
            s.ops[4],
            Op::Bind {
                src: "/x".into(),
                dst: "/x".into(),
                read_only: true,
                optional: true
            }
        );
        assert_eq!(
            s.ops[6],
            Op::Tmpfs {
                dst: "/h".into(),
                size: None
            }
        );
        assert_eq!(s.ops[7], Op::RemountRo("/h".into()));
        for bad in [
            &["--setenv", "A", "B", "--", "x"][..],
            &["--cap-drop", "CAP_SYS_ADMIN", "--", "x"],
            &["--bind", "/a"],
            &["--size", "1", "--bind", "/a", "/a", "--", "x"],
            &["--bind", "a", "a", "--", "x"],
            &["--unshare-user"],
        ] {
            assert!(parse(&os(bad)).is_err(), "{bad:?}");
        }
    }
}
