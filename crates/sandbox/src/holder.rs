//! The namespace tier's namespaces, made once per workspace and joined by
//! each command (issue "The namespace tier on every Linux host, for a few
//! milliseconds a command").
//!
//! Building a sandbox — user, mount, network, IPC and UTS namespaces, a
//! dozen bind mounts, a `/dev`, a loopback interface — costs about 4 ms, and
//! an exec of the builder another. So the builder (built-in or a system
//! `bwrap`) runs once per workspace, with the plan of every command minus
//! what is each command's own: its entry is [`HOLD_FLAG`], which hands the
//! namespaces it is in to the server as descriptors and ends. The server
//! keeps them in a [`Holder`]; the namespaces live as long as it or any
//! command in them does.
//!
//! Each command's supervisor then joins them ([`Joined::enter`], system
//! calls between fork and exec): `setns` into the holder's user namespace
//! (the server's user owns it, so the join gives every capability in it,
//! and none outside), then its mount, network, IPC, UTS and cgroup
//! namespaces; a mount namespace and a PID namespace of the command's own
//! (`unshare`); in that mount namespace the command's git overlay, the
//! seal's binds as they are now, and an empty read-only cover over the
//! server's overlay layers. Its first child is PID 1 of the new PID
//! namespace ([`init`]): it mounts the command's `/proc`, starts the
//! command's process, drops its capabilities and reaps; when the command's
//! process ends it exits with its status, and the kernel ends whatever the
//! command left in the namespace, as before. The command's process maps a
//! user namespace of its own (the server's ids, mapped to what they are in
//! the holder's: bubblewrap's holder namespace has them as 0), drops every
//! capability, waits until PID 1 has dropped its own, applies Landlock and
//! seccomp, and execs.
//!
//! Shared by the workspace's commands, as in the Landlock tier: `/tmp`,
//! `/run`, `/dev/shm` (memory-bounded tmpfs mounts) and the loopback
//! network (a server one command starts, the next can reach). Each
//! command's own: its PID namespace and `/proc`, its mount namespace, its
//! git overlay and seal binds. A holder is made again when its plan
//! changes (another tier, a new read root).

use std::ffi::{CStr, CString, OsString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;

/// The entry's first argument that makes it a holder: `--ctm-hold <fd>`,
/// the socket to send the namespaces on.
pub const HOLD_FLAG: &str = "--ctm-hold";

/// The namespaces a holder sends, in this order (`/proc/self/ns/<name>`
/// and the `setns` type); the user namespace is the mount namespace's
/// owner.
const SPACES: [(&CStr, libc::c_int); 5] = [
    (c"/proc/self/ns/mnt", libc::CLONE_NEWNS),
    (c"/proc/self/ns/net", libc::CLONE_NEWNET),
    (c"/proc/self/ns/ipc", libc::CLONE_NEWIPC),
    (c"/proc/self/ns/uts", libc::CLONE_NEWUTS),
    (c"/proc/self/ns/cgroup", libc::CLONE_NEWCGROUP),
];

/// `ioctl(NS_GET_USERNS)`: the user namespace that owns a namespace.
const NS_GET_USERNS: libc::c_ulong = 0xb701;

/// The holder's whole work, inside the sandbox: opens the namespaces it is
/// in, sends them on the socket and exits. Never returns.
pub fn run_hold(args: &[OsString]) -> ! {
    let code = match hold(args) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("coding-tools-mcp sandbox holder: {e}");
            126
        }
    };
    std::process::exit(code)
}

#[expect(
    unsafe_code,
    reason = "open of /proc/self/ns files and sendmsg with SCM_RIGHTS"
)]
fn hold(args: &[OsString]) -> Result<(), String> {
    let socket: RawFd = args
        .first()
        .and_then(|a| a.to_str())
        .and_then(|a| a.parse().ok())
        .ok_or("no socket descriptor")?;
    let mut fds: Vec<RawFd> = Vec::with_capacity(SPACES.len());
    for (path, _) in SPACES {
        // SAFETY: open of a NUL-terminated literal.
        let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(format!(
                "open {}: {}",
                path.to_string_lossy(),
                std::io::Error::last_os_error()
            ));
        }
        fds.push(fd);
    }
    send_fds(socket, &fds).map_err(|e| format!("sending the namespaces: {e}"))
}

/// The tag every holder message carries.
const TAG: [u8; 8] = *b"ctm-hold";

/// A message of one buffer (`data`) with room for `fds` descriptors as
/// SCM_RIGHTS (`control`, sized here); `msghdr` points into both.
#[expect(unsafe_code, reason = "CMSG_SPACE and a zeroed msghdr")]
fn message(
    data: &mut [u8; 8],
    iov: &mut libc::iovec,
    control: &mut Vec<u8>,
    fds: usize,
) -> libc::msghdr {
    // SAFETY: CMSG_SPACE is arithmetic.
    let space = unsafe { libc::CMSG_SPACE((fds * std::mem::size_of::<RawFd>()) as u32) } as usize;
    control.resize(space, 0);
    *iov = libc::iovec {
        iov_base: data.as_mut_ptr().cast(),
        iov_len: data.len(),
    };
    // SAFETY: msghdr is plain data; all zero is a valid empty message.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    msg
}

#[expect(unsafe_code, reason = "sendmsg with an SCM_RIGHTS control message")]
fn send_fds(socket: RawFd, fds: &[RawFd]) -> std::io::Result<()> {
    let payload = std::mem::size_of_val(fds);
    let (mut tag, mut control) = (TAG, Vec::new());
    let mut iov = libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    };
    let msg = message(&mut tag, &mut iov, &mut control, fds.len());
    // SAFETY: `msg` points into buffers of this frame, alive for the call;
    // the control buffer has room for one header and `fds`.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(payload as u32) as _;
        std::ptr::copy_nonoverlapping(fds.as_ptr().cast::<u8>(), libc::CMSG_DATA(cmsg), payload);
        if libc::sendmsg(socket, &msg, 0) < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

#[expect(unsafe_code, reason = "recvmsg with an SCM_RIGHTS control message")]
fn recv_fds(socket: RawFd, want: usize) -> std::io::Result<Vec<OwnedFd>> {
    let (mut tag, mut control) = ([0u8; 8], Vec::new());
    let mut iov = libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    };
    let mut msg = message(&mut tag, &mut iov, &mut control, want);
    let mut got = Vec::new();
    // SAFETY: as in `send_fds`; every descriptor received is owned at once.
    unsafe {
        let n = libc::recvmsg(socket, &mut msg, libc::MSG_CMSG_CLOEXEC);
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg);
                let bytes = (*cmsg).cmsg_len as usize - (data as usize - cmsg as usize);
                for i in 0..bytes / std::mem::size_of::<RawFd>() {
                    let fd = std::ptr::read_unaligned(data.cast::<RawFd>().add(i));
                    got.push(OwnedFd::from_raw_fd(fd));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
        if n as usize != tag.len() || tag != TAG || msg.msg_flags & libc::MSG_CTRUNC != 0 {
            return Err(std::io::Error::other("not a holder's message"));
        }
    }
    if got.len() != want {
        return Err(std::io::Error::other(format!(
            "{} descriptors received, {want} expected",
            got.len()
        )));
    }
    Ok(got)
}

/// One workspace's namespaces, as descriptors (they live while these or a
/// process in them do).
#[derive(Debug)]
pub struct Holder {
    /// The plan they were made from: a command with another plan needs
    /// another holder.
    key: Vec<OsString>,
    user: OwnedFd,
    /// Mount first; a namespace the server itself is in is left out.
    spaces: Vec<(OwnedFd, libc::c_int)>,
}

impl Holder {
    /// Runs the builder (`argv`: the plan with the hold entry, whose socket
    /// descriptor is `child`'s number) and takes the namespaces it sends.
    #[expect(
        clippy::disallowed_methods,
        reason = "the sandbox builder is started by the exec runtime, once per workspace"
    )]
    pub fn build(
        key: Vec<OsString>,
        argv: &[OsString],
        keep: [RawFd; 2],
        ours: &OwnedFd,
    ) -> Result<Self, String> {
        use std::os::unix::process::CommandExt;
        let (program, args) = argv.split_first().ok_or("an empty plan")?;
        let mut command = std::process::Command::new(program);
        command
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        // SAFETY: fcntl and prctl between fork and exec.
        #[expect(unsafe_code, reason = "pre_exec runs code between fork and exec")]
        unsafe {
            command.pre_exec(move || {
                for fd in keep {
                    if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = command
            .spawn()
            .map_err(|e| format!("cannot start the sandbox builder: {e}"))?;
        let received = wait_readable(ours, 10_000).and_then(|()| recv_fds(ours.as_raw_fd(), 5));
        if received.is_err() {
            // A builder that hangs is not waited for.
            let _ = child.kill();
        }
        let out = child
            .wait_with_output()
            .map_err(|e| format!("waiting for the sandbox builder: {e}"))?;
        let mut fds = match received {
            Ok(f) => f,
            Err(e) => {
                let err = String::from_utf8_lossy(&out.stderr).trim().to_owned();
                return Err(format!(
                    "the sandbox builder sent no namespaces ({e}; {}): {err:?}",
                    out.status
                ));
            }
        };
        // SAFETY: an ioctl on a namespace descriptor we own; the new
        // descriptor is owned at once.
        #[expect(unsafe_code, reason = "the NS_GET_USERNS ioctl")]
        let user = unsafe {
            let fd = libc::ioctl(fds[0].as_raw_fd(), NS_GET_USERNS);
            if fd < 0 {
                return Err(format!(
                    "the mount namespace's owner: {}",
                    std::io::Error::last_os_error()
                ));
            }
            let fd = OwnedFd::from_raw_fd(fd);
            libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC);
            fd
        };
        let mut spaces = Vec::with_capacity(fds.len());
        for (fd, (name, kind)) in fds.drain(..).zip(SPACES) {
            // One the server is in already (no cgroup namespace was made)
            // is not joined: the same inode as ours.
            let own = Path::new(std::ffi::OsStr::from_bytes(name.to_bytes()));
            let same = match (rustix::fs::fstat(&fd), std::fs::metadata(own)) {
                (Ok(a), Ok(b)) => {
                    use std::os::unix::fs::MetadataExt;
                    a.st_ino == b.ino() && a.st_dev == b.dev()
                }
                _ => false,
            };
            if kind == libc::CLONE_NEWNS && same {
                return Err("the builder made no mount namespace".into());
            }
            if !same {
                spaces.push((fd, kind));
            }
        }
        Ok(Self { key, user, spaces })
    }

    /// Made from this plan.
    pub fn fits(&self, key: &[OsString]) -> bool {
        self.key == key
    }

    /// Makes every directory between a tmpfs the workspace's commands all
    /// write (`/tmp`, `/run`, `/dev/shm`) and each of `targets` (the
    /// sandbox's binds) a mount point in the holder's mount namespace —
    /// bound onto itself with what is below it — so that no command can
    /// rename or remove one and leave a tree of its own where the next
    /// command's seal mounts and working directory are made.
    #[expect(
        clippy::disallowed_methods,
        reason = "a one-time helper process of the exec runtime, per holder"
    )]
    pub fn fortify(&self, targets: &[&Path]) -> Result<(), String> {
        use std::os::unix::process::CommandExt;
        let shared = [Path::new("/tmp"), Path::new("/run"), Path::new("/dev/shm")];
        let mut dirs: Vec<&Path> = targets
            .iter()
            .flat_map(|t| t.ancestors().skip(1))
            .filter(|a| shared.iter().any(|r| a.starts_with(r) && a != r))
            .collect();
        dirs.sort_by_key(|d| (d.components().count(), d.to_path_buf()));
        dirs.dedup();
        if dirs.is_empty() {
            return Ok(());
        }
        let dirs: Vec<CString> = dirs
            .iter()
            .map(|d| CString::new(d.as_os_str().as_bytes()))
            .collect::<Result<_, _>>()
            .map_err(|e| e.to_string())?;
        let (user, mnt) = (
            self.user.as_raw_fd(),
            self.spaces
                .iter()
                .find(|(_, k)| *k == libc::CLONE_NEWNS)
                .map(|(fd, _)| fd.as_raw_fd())
                .ok_or("no mount namespace")?,
        );
        let mut command = std::process::Command::new("/bin/true");
        command
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        // SAFETY: setns and mount between fork and exec, on values
        // prepared before the fork.
        #[expect(unsafe_code, reason = "pre_exec runs code between fork and exec")]
        unsafe {
            command.pre_exec(move || {
                if libc::setns(user, libc::CLONE_NEWUSER) != 0
                    || libc::setns(mnt, libc::CLONE_NEWNS) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                for d in &dirs {
                    mount(Some(d), d, None, libc::MS_BIND | libc::MS_REC, None)
                        .map_err(std::io::Error::from_raw_os_error)?;
                }
                Ok(())
            });
        }
        let status = command
            .status()
            .map_err(|e| format!("fixing the sandbox's directories: {e}"))?;
        if !status.success() {
            return Err(format!("fixing the sandbox's directories: {status}"));
        }
        Ok(())
    }
}

/// A connected pair of `SOCK_SEQPACKET` UNIX sockets, close-on-exec.
#[expect(unsafe_code, reason = "socketpair(2); both descriptors owned at once")]
pub fn socket_pair() -> Result<(OwnedFd, OwnedFd), String> {
    let mut fds = [0; 2];
    // SAFETY: socketpair writes two descriptors into this array.
    unsafe {
        if libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        ) != 0
        {
            return Err(format!("socketpair: {}", std::io::Error::last_os_error()));
        }
        Ok((OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])))
    }
}

#[expect(unsafe_code, reason = "poll(2) of a socket we own")]
fn wait_readable(fd: &OwnedFd, ms: i32) -> std::io::Result<()> {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    loop {
        // SAFETY: one pollfd of this frame.
        match unsafe { libc::poll(&mut p, 1, ms) } {
            0 => return Err(std::io::Error::other("timed out")),
            n if n > 0 => return Ok(()),
            _ if errno() == libc::EINTR => {}
            _ => return Err(std::io::Error::last_os_error()),
        }
    }
}

/// A `setns`-able descriptor and its type.
type Space = (RawFd, libc::c_int);

/// What one command's supervisor does to run the command in a holder's
/// namespaces, prepared in the server (the forked processes only read it).
pub struct Joined {
    _holder: Arc<Holder>,
    user: RawFd,
    spaces: Vec<Space>,
    cwd: CString,
    /// (mount point, overlayfs options): the git seal's copy-on-write view.
    overlays: Vec<(CString, CString)>,
    /// The seal's mounts, in order.
    binds: Vec<(CString, SealMount)>,
    /// The server's overlay layers, covered by an empty read-only tmpfs.
    hide: Option<CString>,
    /// Directories that must be the host's own at these paths (the
    /// workspace, the runtime directory): device and inode.
    same: Vec<(CString, u64, u64)>,
    /// The server's user and group ids: the command's own user namespace
    /// maps them to what they are in the holder's (bubblewrap's is uid 0
    /// there: it sets up as root and maps back in a namespace of its own).
    pub ids: (u32, u32),
    /// Landlock rights for what exists only inside: read (`/proc`), write
    /// (`/tmp`, `/dev/shm`, no FIFOs), terminal (`/dev/pts`, and a PTY
    /// command's terminal, `/dev/tty` with the file rights).
    pub inside: Inside,
    seccomp: Option<&'static crate::seccomp::Program>,
}

/// One of the git seal's mounts in a command's mount namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SealMount {
    /// Bound onto itself (a mount point: no rename, no removal).
    MountPoint,
    /// Bound onto itself read-only.
    ReadOnly,
    /// Bound onto itself read-only when it is there (the older seal's
    /// list, `--ro-bind-try`).
    ReadOnlyIfThere,
    /// A missing directory git would read, made and covered by an empty
    /// read-only tmpfs (the seal without the overlay).
    EmptyDir,
}

impl From<crate::namespace::Bind> for SealMount {
    fn from(b: crate::namespace::Bind) -> Self {
        match b {
            crate::namespace::Bind::MountPoint => Self::MountPoint,
            crate::namespace::Bind::ReadOnly => Self::ReadOnly,
        }
    }
}

impl SealMount {
    /// The older seal's mount (without the overlay), as `namespace::argv`
    /// makes it.
    pub fn legacy(s: crate::namespace::Seal) -> Self {
        match s {
            crate::namespace::Seal::MountPoint => Self::MountPoint,
            crate::namespace::Seal::ReadOnly => Self::ReadOnlyIfThere,
            crate::namespace::Seal::EmptyDir => Self::EmptyDir,
        }
    }
}

/// Landlock rights for the sandbox's own mounts.
#[derive(Debug, Clone, Copy, Default)]
pub struct Inside {
    /// Landlock access rights for reading.
    pub read: u64,
    /// Landlock access rights for writing.
    pub write: u64,
    /// Rights on the command's terminal directory (`/dev/pts`).
    pub terminal: u64,
    /// Rights on the command's terminal itself.
    pub terminal_file: u64,
    /// The command runs on a terminal.
    pub tty: bool,
}

impl Joined {
    /// A command in `holder`'s namespaces.
    pub fn new(
        holder: Arc<Holder>,
        cwd: &Path,
        overlays: Vec<(CString, CString)>,
        binds: Vec<(SealMount, std::path::PathBuf)>,
        hide: Option<&Path>,
        same: &[&Path],
        inside: Inside,
    ) -> Result<Self, String> {
        let c = |p: &Path| {
            CString::new(p.as_os_str().as_bytes()).map_err(|_| "a path contains a NUL byte")
        };
        let ids = (
            rustix::process::geteuid().as_raw(),
            rustix::process::getegid().as_raw(),
        );
        let seccomp = match crate::seccomp::program_namespaced() {
            Ok(p) => Some(p),
            Err(e) if crate::seccomp::available().is_ok() => {
                return Err(format!("seccomp: the filter could not be built: {e}"));
            }
            Err(_) => None,
        };
        let mut checks = Vec::with_capacity(same.len());
        for p in same {
            use std::os::unix::fs::MetadataExt;
            let m = std::fs::metadata(p).map_err(|e| format!("{}: {e}", p.display()))?;
            checks.push((c(p)?, m.dev(), m.ino()));
        }
        let mut b = Vec::with_capacity(binds.len());
        for (kind, path) in binds {
            b.push((c(&path)?, kind));
        }
        Ok(Self {
            user: holder.user.as_raw_fd(),
            spaces: holder
                .spaces
                .iter()
                .map(|(fd, kind)| (fd.as_raw_fd(), *kind))
                .collect(),
            _holder: holder,
            cwd: c(cwd)?,
            overlays,
            binds: b,
            hide: hide.map(c).transpose()?,
            same: checks,
            ids,
            inside,
            seccomp,
        })
    }
}

// The errno of the failed step, with which step.
type Step = (&'static str, i32);

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(1)
}

/// `mount_setattr`'s read-only attribute.
pub const MOUNT_ATTR_RDONLY: u64 = 0x1;
/// `mount_setattr`'s no-set-id attribute.
pub const MOUNT_ATTR_NOSUID: u64 = 0x2;
/// `mount_setattr`'s no-devices attribute.
pub const MOUNT_ATTR_NODEV: u64 = 0x4;
const AT_RECURSIVE: libc::c_uint = 0x8000;

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// `mount_setattr` on `path`'s mount (and, `recursive`, every mount below
/// it): only ever adds restrictions. System call only; the errno.
#[expect(unsafe_code, reason = "the mount_setattr system call")]
pub fn mount_setattr(path: &CStr, attrs: u64, recursive: bool) -> Result<(), i32> {
    let attr = MountAttr {
        attr_set: attrs,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    let flags =
        libc::AT_SYMLINK_NOFOLLOW as libc::c_uint | if recursive { AT_RECURSIVE } else { 0 };
    // SAFETY: a system call on a NUL-terminated path and a struct of this
    // frame, with its size.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            path.as_ptr(),
            flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if r != 0 { Err(errno()) } else { Ok(()) }
}

/// `mount(2)`; system call only, the errno.
#[expect(unsafe_code, reason = "the mount system call")]
pub fn mount(
    src: Option<&CStr>,
    dst: &CStr,
    fstype: Option<&CStr>,
    flags: libc::c_ulong,
    data: Option<&CStr>,
) -> Result<(), i32> {
    // SAFETY: NUL-terminated strings (or null) alive for the call.
    let r = unsafe {
        libc::mount(
            src.map_or(std::ptr::null(), CStr::as_ptr),
            dst.as_ptr(),
            fstype.map_or(std::ptr::null(), CStr::as_ptr),
            flags,
            data.map_or(std::ptr::null(), |d| d.as_ptr().cast()),
        )
    };
    if r != 0 { Err(errno()) } else { Ok(()) }
}

fn bind(path: &CStr, read_only: bool) -> Result<(), i32> {
    mount(Some(path), path, None, libc::MS_BIND | libc::MS_REC, None)?;
    let mut attrs = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
    if read_only {
        attrs |= MOUNT_ATTR_RDONLY;
    }
    mount_setattr(path, attrs, true)
}

/// Makes the directory `path` when it is missing and covers it with an
/// empty read-only tmpfs (in the command's mount namespace only).
#[expect(unsafe_code, reason = "mkdir(2) of a NUL-terminated path")]
fn empty_dir(path: &CStr) -> Result<(), i32> {
    // SAFETY: a system call on a NUL-terminated string.
    if unsafe { libc::mkdir(path.as_ptr(), 0o755) } != 0 && errno() != libc::EEXIST {
        return Err(errno());
    }
    mount(
        Some(c"tmpfs"),
        path,
        Some(c"tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_RDONLY | libc::MS_NOSYMFOLLOW,
        Some(c"size=4096,mode=0755"),
    )
}

impl Joined {
    /// In the supervisor: joins the holder's namespaces and makes the
    /// command's mount namespace; the next child is PID 1 of a new PID
    /// namespace. System calls only (between fork and exec).
    #[expect(unsafe_code, reason = "setns and unshare between fork and exec")]
    pub fn enter(&self) -> Result<(), Step> {
        // SAFETY: system calls on descriptors the holder keeps open.
        unsafe {
            if libc::setns(self.user, libc::CLONE_NEWUSER) != 0 {
                return Err(("join the sandbox's user namespace", errno()));
            }
            for &(fd, kind) in &self.spaces {
                if libc::setns(fd, kind) != 0 {
                    return Err(("join the sandbox's namespaces", errno()));
                }
            }
            if libc::unshare(libc::CLONE_NEWNS | libc::CLONE_NEWPID) != 0 {
                return Err(("the command's mount and PID namespaces", errno()));
            }
        }
        let step = |what: &'static str| move |e: i32| (what, e);
        for (path, dev, ino) in &self.same {
            // SAFETY: stat into a struct of this frame.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            // SAFETY: a NUL-terminated path and that struct.
            if unsafe { libc::stat(path.as_ptr(), &mut st) } != 0 {
                return Err(("the sandbox's view of the workspace", errno()));
            }
            if st.st_dev != *dev || st.st_ino != *ino {
                return Err(("the sandbox's view of the workspace", libc::ESTALE));
            }
        }
        mount(None, c"/", None, libc::MS_REC | libc::MS_PRIVATE, None)
            .map_err(step("private mounts"))?;
        for (target, data) in &self.overlays {
            mount(
                Some(c"overlay"),
                target,
                Some(c"overlay"),
                libc::MS_NOSUID | libc::MS_NODEV,
                Some(data),
            )
            .map_err(step("the git overlay"))?;
        }
        for (path, kind) in &self.binds {
            let made = match kind {
                SealMount::MountPoint => bind(path, false),
                SealMount::ReadOnly | SealMount::ReadOnlyIfThere => bind(path, true),
                SealMount::EmptyDir => empty_dir(path),
            };
            match made {
                Ok(()) => {}
                Err(libc::ENOENT) if *kind == SealMount::ReadOnlyIfThere => {}
                // Anything else — one gone since the plan was made
                // included — fails the command rather than leaving a path
                // unsealed.
                Err(e) => return Err(("a seal mount", e)),
            }
        }
        if let Some(h) = &self.hide {
            mount(
                Some(c"tmpfs"),
                h,
                Some(c"tmpfs"),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_RDONLY,
                Some(c"size=4096,mode=0755"),
            )
            .map_err(step("cover the overlay layers"))?;
        }
        Ok(())
    }
}

/// PID 1 of the command's PID namespace: its `/proc`, the command's
/// process, then reaping until that ends. Never returns.
///
/// # Safety
/// Only in a forked child: system calls only.
#[expect(unsafe_code, reason = "the sandbox's PID 1: mounts, fork, waitpid")]
pub unsafe fn init(supervisor: RawFd, ids: (u32, u32), mut command: impl FnMut(RawFd)) -> ! {
    // SAFETY: system calls in a single-threaded forked child.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
        // The supervisor (its pidfd) may have died before that was set.
        let mut p = libc::pollfd {
            fd: supervisor,
            events: libc::POLLIN,
            revents: 0,
        };
        if supervisor < 0 || libc::poll(&mut p, 1, 0) != 0 {
            libc::_exit(1);
        }
        libc::close(supervisor);
        if let Err(e) = mount(
            Some(c"proc"),
            c"/proc",
            Some(c"proc"),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            None,
        ) {
            die(b"cannot mount the command's /proc", e);
        }
        // What of /proc still reaches the host's kernel: read-only.
        for sub in [
            c"/proc/sys",
            c"/proc/sysrq-trigger",
            c"/proc/irq",
            c"/proc/bus",
        ] {
            if libc::access(sub.as_ptr(), libc::F_OK) == 0
                && let Err(e) = bind(sub, true)
            {
                die(b"cannot make /proc read-only", e);
            }
        }
        // A copy of the server's memory: what `ps` shows of it (its
        // argument and environment strings) is wiped, and it is named for
        // what it is. (Its memory itself is unreadable to the command: not
        // dumpable, before the command's first instruction.)
        scrub_arguments();
        libc::prctl(libc::PR_SET_NAME, c"ctm-init".as_ptr(), 0, 0, 0);
        let mut gate = [0; 2];
        if libc::pipe2(gate.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            die(b"pipe", errno());
        }
        // The command's process shares this memory until its exec (no page
        // table is copied for it: a fork of a server-sized address space
        // cost about 0.3 ms) and starts in a user namespace of its own, whose
        // maps this process writes; it runs nothing of the command's before
        // the gate opens.
        let top = match crate::process::clone_stack() {
            Ok(top) => top,
            Err(e) => die(b"the command's stack", e.raw_os_error().unwrap_or(0)),
        };
        let (outer_uid, outer_gid) = (libc::geteuid(), libc::getegid());
        let mut start = Start {
            run: &mut command,
            gate: gate[0],
            close: gate[1],
        };
        let child = libc::clone(
            start_command,
            top,
            libc::CLONE_VM | libc::CLONE_NEWUSER | libc::SIGCHLD,
            (&raw mut start).cast(),
        );
        if child < 0 {
            die(
                b"the command's process in a user namespace of its own",
                errno(),
            );
        }
        let mut line = [0u8; 40];
        let mut gid_line = [0u8; 40];
        let (u, g) = (
            id_map(&mut line, ids.0, outer_uid),
            id_map(&mut gid_line, ids.1, outer_gid),
        );
        let mut path = ProcPath::new(child);
        let mapped = write_proc(path.of(b"setgroups"), b"deny")
            .and_then(|()| write_proc(path.of(b"uid_map"), &line[..u]))
            .and_then(|()| write_proc(path.of(b"gid_map"), &gid_line[..g]));
        if let Err(e) = mapped {
            die(b"cannot write the command's user namespace maps", e);
        }
        if !crate::process::drop_all_capabilities() {
            die(b"the sandbox's init kept a capability", libc::EPERM);
        }
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
        // The gate opens with one byte: an end of file (this process died
        // on the way) starts nothing.
        if libc::write(gate[1], b"g".as_ptr().cast(), 1) != 1 {
            die(b"the command's gate", errno());
        }
        // Holds nothing of the command's.
        crate::process::close_range(0, u32::MAX);
        loop {
            // rustix's wait answers its error itself: `errno` is shared
            // with the supervisor, whose memory this process runs on.
            use rustix::process::{WaitOptions, wait};
            match wait(WaitOptions::empty()) {
                // Leaving ends every other process of the namespace.
                Ok(Some((pid, status))) if pid.as_raw_nonzero().get() == child => {
                    libc::_exit(exit_code(status.as_raw()))
                }
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(_) => libc::_exit(1),
            }
        }
    }
}

/// What the command's process starts from (on PID 1's memory).
struct Start<'a> {
    run: &'a mut dyn FnMut(RawFd),
    /// The gate's reading end, and its writing end, which is PID 1's.
    gate: RawFd,
    close: RawFd,
}

/// The command's process, in its own user namespace: waits at the gate,
/// then runs the command's last steps, which exec or exit.
#[expect(unsafe_code, reason = "the clone entry point reads its argument")]
extern "C" fn start_command(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is PID 1's `Start`, which outlives this process's use
    // of the shared memory (PID 1 never returns from `init`).
    unsafe {
        let start = &mut *arg.cast::<Start<'_>>();
        libc::close(start.close);
        (start.run)(start.gate);
        libc::_exit(126)
    }
}

/// `/proc/<pid>/<name>` built without allocation.
struct ProcPath {
    buf: [u8; 64],
    dir: usize,
}

impl ProcPath {
    fn new(pid: libc::pid_t) -> Self {
        let mut buf = [0u8; 64];
        buf[..6].copy_from_slice(b"/proc/");
        let n = 6 + decimal(&mut buf[6..], pid.unsigned_abs());
        buf[n] = b'/';
        Self { buf, dir: n + 1 }
    }

    /// The path of `name` (at most 40 bytes) in the process's directory.
    fn of(&mut self, name: &[u8]) -> &CStr {
        let end = self.dir + name.len();
        self.buf[self.dir..end].copy_from_slice(name);
        self.buf[end] = 0;
        CStr::from_bytes_with_nul(&self.buf[..=end]).unwrap_or(c"/proc/self/fail")
    }
}

/// Zeroes this process's argument and environment strings (the ranges
/// `/proc/self/stat` names in its fields 48 to 51). System calls only.
#[expect(
    unsafe_code,
    reason = "reads /proc/self/stat and writes this process's own strings"
)]
fn scrub_arguments() {
    let mut buf = [0u8; 2048];
    // SAFETY: a read into a stack buffer; then writes into this process's
    // own argument and environment areas, which the kernel reports mapped.
    unsafe {
        let fd = libc::open(
            c"/proc/self/stat".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        );
        if fd < 0 {
            return;
        }
        let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
        libc::close(fd);
        if n <= 0 {
            return;
        }
        let line = &buf[..n as usize];
        // The fields after the name (which may hold anything) start at 3.
        let Some(close) = line.iter().rposition(|&b| b == b')') else {
            return;
        };
        let mut fields = [0usize; 4];
        for (i, field) in line[close + 1..]
            .split(|&b| b == b' ')
            .filter(|f| !f.is_empty())
            .enumerate()
        {
            let at = i + 3;
            if (48..=51).contains(&at) {
                let mut v = 0usize;
                for &d in field {
                    if d.is_ascii_digit() {
                        v = v.saturating_mul(10).saturating_add(usize::from(d - b'0'));
                    }
                }
                fields[at - 48] = v;
            }
        }
        for pair in [[fields[0], fields[1]], [fields[2], fields[3]]] {
            let [start, end] = pair;
            if start > 0 && end > start && end - start < (1 << 20) {
                std::ptr::write_bytes(start as *mut u8, 0, end - start);
            }
        }
    }
}

/// The command's process, up to its confinement: no capability in its
/// user namespace (PID 1 made it and wrote its maps), then the gate.
/// System calls only.
#[expect(unsafe_code, reason = "read and chdir in the command's process")]
pub fn command_namespace(j: &Joined, gate: RawFd) {
    if !crate::process::drop_all_capabilities() {
        die(b"the command kept a capability", libc::EPERM);
    }
    // SAFETY: system calls on a descriptor and a path of this process.
    unsafe {
        let mut b = [0u8; 1];
        let opened = loop {
            match libc::read(gate, b.as_mut_ptr().cast(), 1) {
                1 => break true,
                n if n < 0 && errno() == libc::EINTR => continue,
                _ => break false,
            }
        };
        if !opened {
            die(
                b"the sandbox's init ended before the command started",
                libc::ECHILD,
            );
        }
        libc::close(gate);
        if libc::chdir(j.cwd.as_ptr()) != 0 && libc::chdir(c"/".as_ptr()) != 0 {
            die(b"chdir in the sandbox", errno());
        }
    }
}

/// `v` in decimal at the start of `buf` (as many digits as fit); how many
/// bytes it wrote. No allocation.
fn decimal(buf: &mut [u8], v: u32) -> usize {
    let mut digits = [0u8; 10];
    let (mut d, mut v) = (0, v);
    loop {
        digits[d] = b'0' + (v % 10) as u8;
        d += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    let n = d.min(buf.len());
    for (i, slot) in buf[..n].iter_mut().enumerate() {
        *slot = digits[d - 1 - i];
    }
    n
}

/// `"<inside> <outside> 1\n"` into `buf`; its length. No allocation.
fn id_map(buf: &mut [u8; 40], inside: u32, outside: u32) -> usize {
    let mut n = 0;
    for (i, v) in [inside, outside].into_iter().enumerate() {
        if i > 0 {
            buf[n] = b' ';
            n += 1;
        }
        n += decimal(&mut buf[n..], v);
    }
    buf[n..n + 3].copy_from_slice(b" 1\n");
    n + 3
}

/// The command's seccomp filter (after Landlock); the errno on failure.
pub fn command_seccomp(j: &Joined) -> Result<(), i32> {
    match j.seccomp {
        Some(prog) => {
            crate::seccomp::enforce(prog).map_err(|e| e.raw_os_error().unwrap_or(libc::EPERM))
        }
        None => Ok(()),
    }
}

/// Writes `data` to the `/proc` file `path` (a user namespace's map) in
/// one `write`; the errno on failure. System calls only.
#[expect(unsafe_code, reason = "open/write/close of a /proc file")]
pub fn write_proc(path: &CStr, data: &[u8]) -> Result<(), i32> {
    // SAFETY: system calls on a descriptor opened here.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(errno());
        }
        let n = libc::write(fd, data.as_ptr().cast(), data.len());
        let e = errno();
        libc::close(fd);
        if n != data.len() as isize {
            return Err(e.max(1));
        }
    }
    Ok(())
}

/// An exit code that says what a wait status says (128 + signal, as a
/// shell and bubblewrap report a signalled child).
pub fn exit_code(status: libc::c_int) -> libc::c_int {
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status)
    } else {
        1
    }
}

/// Says on stderr which step failed and with which errno, and exits 126
/// (the code the entry used). No allocation.
#[expect(unsafe_code, reason = "write(2) and _exit in a forked child")]
pub fn die(what: &[u8], errno: i32) -> ! {
    let mut buf = [0u8; 160];
    let mut n = 0;
    for part in [b"coding-tools-mcp sandbox: ".as_slice(), what, b": errno "] {
        let take = part.len().min(buf.len() - n);
        buf[n..n + take].copy_from_slice(&part[..take]);
        n += take;
    }
    let end = buf.len() - 1;
    n += decimal(&mut buf[n..end], errno.unsigned_abs());
    buf[n] = b'\n';
    n += 1;
    // SAFETY: a write of a stack buffer, then _exit.
    unsafe {
        libc::write(2, buf.as_ptr().cast(), n);
        libc::_exit(126)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_maps_are_one_line_of_one_id() {
        let mut b = [0u8; 40];
        let n = id_map(&mut b, 65534, 0);
        assert_eq!(&b[..n], b"65534 0 1\n");
        let n = id_map(&mut b, 4_294_967_294, 1000);
        assert_eq!(&b[..n], b"4294967294 1000 1\n");
    }

    #[test]
    fn exit_codes_say_what_ended_the_command() {
        assert_eq!(exit_code(3 << 8), 3);
        assert_eq!(exit_code(libc::SIGKILL), 128 + 9);
    }
}
