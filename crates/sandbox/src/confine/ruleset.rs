//! The Landlock rulesets of commands (the crate's `landlock` feature).
//!
//! The roots are opened once per server; each command's process builds its
//! ruleset from those handles between fork and exec with raw system calls,
//! so nothing there allocates or looks a path up. `/proc/self` is added in
//! the child itself: opened in the server it would name the server's own
//! `/proc` entry.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

use super::{DEVICES, LandlockSupport, support, unavailable};
use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, LandlockStatus, Ruleset, RulesetAttr,
    RulesetCreated, RulesetCreatedAttr, Scope, path_beneath_rules,
};

/// The newest ABI this build asks for.
const TARGET_ABI: ABI = ABI::V6;

fn abi_number(abi: ABI) -> u32 {
    // ABI is an ordered enum starting at V1.
    (0..=10u32)
        .find(|n| ABI::from(*n as i32) == abi)
        .unwrap_or(0)
}

/// Asks the kernel from a throwaway thread (Landlock confines only the
/// calling thread, which then ends).
pub(super) fn probe() -> LandlockSupport {
    let probe = std::thread::spawn(|| -> Result<LandlockStatus, String> {
        let status = Ruleset::default()
            .handle_access(AccessFs::from_all(TARGET_ABI))
            .and_then(|r| r.create())
            .and_then(|r| r.add_rules(path_beneath_rules(["/"], AccessFs::from_all(TARGET_ABI))))
            .and_then(RulesetCreated::restrict_self)
            .map_err(|e| e.to_string())?;
        Ok(status.landlock)
    });
    match probe.join() {
        Ok(Ok(LandlockStatus::Available { effective_abi, .. })) => LandlockSupport {
            available: true,
            abi: abi_number(effective_abi),
            reason: None,
        },
        Ok(Ok(LandlockStatus::NotEnabled)) => {
            unavailable("Landlock is built into the kernel but not enabled")
        }
        Ok(Ok(LandlockStatus::NotImplemented)) => unavailable("the kernel has no Landlock"),
        Ok(Err(e)) => unavailable(&e),
        Err(_) => unavailable("the Landlock check failed"),
    }
}

/// The roots of one server, opened once (`O_PATH`), each with the rights it
/// grants; a command's ruleset is built from these handles in its own
/// process, with no path lookup and no allocation.
#[derive(Debug)]
pub struct SandboxRoots {
    rules: Vec<(OwnedFd, u64)>,
    tty: Option<OwnedFd>,
    abi: ABI,
    deny_tcp: bool,
    spare: std::sync::Mutex<Option<OwnedFd>>,
}

/// `struct landlock_ruleset_attr` (ABI 6 layout; older kernels accept the
/// larger struct when the fields they lack are zero).
#[repr(C)]
struct RulesetAttr6 {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

/// `struct landlock_path_beneath_attr` (packed in the uapi).
#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

const LANDLOCK_RULE_PATH_BENEATH: libc::c_long = 1;

fn open_path(p: &Path) -> Option<(OwnedFd, bool)> {
    use rustix::fs::{Mode, OFlags};
    let fd = rustix::fs::open(p, OFlags::PATH | OFlags::CLOEXEC, Mode::empty()).ok()?;
    let dir = rustix::fs::fstat(&fd)
        .map(|st| {
            rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Directory
        })
        .unwrap_or(true);
    Some((fd, dir))
}

impl SandboxRoots {
    /// Opens the roots that exist: read and execute beneath `read_roots`,
    /// everything but device nodes and device ioctls beneath `workspace`
    /// (the workspace, or the write paths of a workspace read-only to
    /// commands: without FIFOs either) and `runtime`,
    /// read and write of the standard devices; with `deny_tcp`, TCP connect
    /// and bind refused.
    /// None where the kernel has no Landlock.
    pub fn open(
        read_roots: &[PathBuf],
        workspace: &[PathBuf],
        runtime: &[PathBuf],
        deny_tcp: bool,
    ) -> Option<Self> {
        if !support().available {
            return None;
        }
        let kernel = support().abi.min(abi_number(TARGET_ABI));
        let abi = ABI::from(kernel as i32);
        let file = AccessFs::from_file(abi).bits();
        let read = AccessFs::from_read(abi).bits();
        // Everything but device nodes and device ioctls; and no FIFOs in
        // the workspace (the server's walkers and git would block opening
        // one planted as `.gitignore` or `.git/HEAD`), only in the runtime
        // directory.
        let write = (AccessFs::from_all(abi)
            & !(AccessFs::MakeChar | AccessFs::MakeBlock | AccessFs::IoctlDev))
            .bits();
        let no_fifo = write & !BitFlags::from(AccessFs::MakeFifo).bits();
        let device = (AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate).bits();
        let mut rules = Vec::new();
        // One rule per distinct root: a read root beneath another read root
        // (a PATH directory in /usr, the second spelling of a symlinked
        // root) adds nothing, and every rule costs each command a system call.
        let canonical: Vec<PathBuf> = read_roots
            .iter()
            .filter_map(|p| p.canonicalize().ok())
            .collect();
        let mut reads: Vec<&PathBuf> = Vec::new();
        for c in &canonical {
            if !canonical.iter().any(|o| o != c && c.starts_with(o)) && !reads.contains(&c) {
                reads.push(c);
            }
        }
        let reads: Vec<PathBuf> = reads.into_iter().cloned().collect();
        let groups: [(&[PathBuf], u64); 3] =
            [(&reads, read), (workspace, no_fifo), (runtime, write)];
        for (paths, access) in groups {
            for p in paths {
                if let Some((fd, dir)) = open_path(p) {
                    rules.push((fd, if dir { access } else { access & file }));
                }
            }
        }
        for d in DEVICES {
            if let Some((fd, _)) = open_path(Path::new(d)) {
                rules.push((fd, device & file));
            }
        }
        let tty = open_path(Path::new("/dev/tty")).map(|(fd, _)| fd);
        Some(Self {
            rules,
            tty,
            abi,
            deny_tcp,
            spare: std::sync::Mutex::new(None),
        })
    }

    /// The ruleset of one command, to finish and apply in its process: a
    /// spare built after the previous command (so not on this command's
    /// path), or one built now.
    pub fn for_command(&self, tty: bool) -> std::io::Result<ChildSandbox> {
        let fs = AccessFs::from_all(self.abi).bits();
        let terminal =
            (AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate | AccessFs::IoctlDev)
                .bits()
                & fs;
        let spare = self.spare.lock().unwrap_or_else(|p| p.into_inner()).take();
        let ruleset = match spare {
            Some(r) => r,
            None => self.build()?,
        };
        Ok(ChildSandbox {
            ruleset,
            // A PTY command: its own terminal (stdin) and /dev/tty, with ioctls.
            terminal: if tty {
                Some((self.tty.as_ref().map_or(-1, AsRawFd::as_raw_fd), terminal))
            } else {
                None
            },
            read: AccessFs::from_read(self.abi).bits() & fs,
        })
    }

    /// What a command may do beneath the runtime directory (everything but
    /// device nodes and device ioctls): its private `/tmp` gets the same.
    pub fn write_access(&self) -> u64 {
        (AccessFs::from_all(self.abi)
            & !(AccessFs::MakeChar | AccessFs::MakeBlock | AccessFs::IoctlDev))
            .bits()
    }

    /// What a command may do to a pseudo-terminal of its own.
    pub fn terminal_access(&self) -> u64 {
        (AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate | AccessFs::IoctlDev).bits()
            & AccessFs::from_all(self.abi).bits()
    }

    /// Builds the spare ruleset for the next command, if there is none.
    pub fn refill(&self) {
        let mut spare = self.spare.lock().unwrap_or_else(|p| p.into_inner());
        if spare.is_none() {
            *spare = self.build().ok();
        }
    }

    /// A ruleset with every root's rule; the command adds its own.
    fn build(&self) -> std::io::Result<OwnedFd> {
        use std::os::fd::FromRawFd;
        let abi = self.abi;
        let fs = AccessFs::from_all(abi).bits();
        let attr = RulesetAttr6 {
            handled_access_fs: fs,
            handled_access_net: if self.deny_tcp {
                AccessNet::from_all(abi).bits()
            } else {
                0
            },
            scoped: Scope::from_all(abi).bits(),
        };
        // SAFETY: landlock system calls with pointers to values on this
        // stack frame and descriptors `self` owns; the new descriptor is
        // owned at once.
        #[expect(unsafe_code, reason = "the landlock_create_ruleset system call")]
        unsafe {
            let fd = libc::syscall(
                libc::SYS_landlock_create_ruleset,
                &attr as *const RulesetAttr6,
                std::mem::size_of::<RulesetAttr6>(),
                0,
            );
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let ruleset = OwnedFd::from_raw_fd(fd as RawFd);
            for (root, access) in &self.rules {
                add_rule(ruleset.as_raw_fd(), root.as_raw_fd(), access & fs);
            }
            Ok(ruleset)
        }
    }
}

/// Adds a path-beneath rule; a rule the kernel refuses stays out (never
/// more access). System call only.
#[expect(unsafe_code, reason = "the landlock_add_rule system call")]
fn add_rule(ruleset: RawFd, parent: RawFd, access: u64) {
    if parent < 0 || access == 0 {
        return;
    }
    let rule = PathBeneathAttr {
        allowed_access: access,
        parent_fd: parent,
    };
    // SAFETY: the attribute lives on this stack frame for the call.
    unsafe {
        libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset,
            LANDLOCK_RULE_PATH_BENEATH,
            &rule as *const PathBeneathAttr,
            0,
        );
    }
}

/// The access right to make FIFOs.
fn make_fifo_access() -> u64 {
    BitFlags::from(AccessFs::MakeFifo).bits()
}

/// Adds a rule for the file or directory at `path` (opened `O_PATH`,
/// following links); nothing when it does not exist.
fn add_path_rule(ruleset: RawFd, path: &Path, access: u64) {
    if let Some((fd, dir)) = open_path(path) {
        let access = if dir {
            access
        } else {
            let abi = ABI::from(support().abi.min(abi_number(TARGET_ABI)) as i32);
            access & AccessFs::from_file(abi).bits()
        };
        add_rule(ruleset, fd.as_raw_fd(), access);
    }
}

/// Adds a rule for the open descriptor `fd`.
fn add_fd_rule(ruleset: RawFd, fd: RawFd, access: u64) {
    add_rule(ruleset, fd, access);
}

/// `no_new_privs`, then the ruleset applies to this process and all it
/// starts; the errno on failure.
fn restrict_self(ruleset: RawFd) -> Result<(), std::io::Error> {
    // SAFETY: system calls on a descriptor the caller holds.
    #[expect(
        unsafe_code,
        reason = "the prctl and landlock_restrict_self system calls"
    )]
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
            || libc::syscall(libc::SYS_landlock_restrict_self, ruleset, 0) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// One command's ruleset: the roots' rules, to which its process adds its
/// own `/proc/self` and (PTY) its terminal before restricting itself.
#[derive(Debug)]
pub struct ChildSandbox {
    ruleset: OwnedFd,
    terminal: Option<(RawFd, u64)>,
    read: u64,
}

impl ChildSandbox {
    /// The ruleset's descriptor (the namespace tier hands it to the
    /// sandbox's entry, which adds its own rules and applies it).
    pub fn ruleset_fd(&self) -> RawFd {
        self.ruleset.as_raw_fd()
    }

    /// Read access (for `/proc` inside the sandbox).
    pub fn read_access(&self) -> u64 {
        self.read
    }

    /// In the command's process, before exec: adds its own `/proc/self`
    /// and (PTY) its terminal to the prepared ruleset, sets `no_new_privs`
    /// and restricts itself. System calls only; on failure, the errno.
    pub fn enforce(&self) -> Result<(), i32> {
        let ruleset = self.ruleset.as_raw_fd();
        if let Some((tty, access)) = self.terminal {
            add_rule(ruleset, tty, access);
            add_rule(ruleset, 0, access);
        }
        // SAFETY: system calls on descriptors open for the call and a
        // NUL-terminated literal.
        #[expect(
            unsafe_code,
            reason = "open, close, prctl and landlock_restrict_self system calls"
        )]
        unsafe {
            let me = libc::open(c"/proc/self".as_ptr(), libc::O_PATH | libc::O_CLOEXEC);
            if me >= 0 {
                add_rule(ruleset, me, self.read);
                libc::close(me);
            }
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || libc::syscall(libc::SYS_landlock_restrict_self, ruleset, 0) != 0
            {
                return Err(*libc::__errno_location());
            }
        }
        Ok(())
    }
}

impl ChildSandbox {
    /// A command in a workspace's shared namespaces (see `crate::holder`),
    /// before exec: what exists only inside — its `/proc`, the sandbox's
    /// `/tmp`, `/dev/shm` and pseudo-terminals, a PTY command's terminal —
    /// joins the prepared ruleset as [`confine_inside`] adds it, then
    /// `no_new_privs` and the ruleset apply. System calls only (between fork
    /// and exec); the errno on failure.
    pub fn enforce_inside(&self, inside: &crate::holder::Inside) -> Result<(), i32> {
        let ruleset = self.ruleset.as_raw_fd();
        let no_fifo = inside.write & !make_fifo_access();
        // SAFETY: open and close of NUL-terminated literals, then the
        // prctl and landlock_restrict_self system calls.
        #[expect(
            unsafe_code,
            reason = "open, close, prctl and landlock_restrict_self system calls"
        )]
        unsafe {
            let rule = |path: &std::ffi::CStr, access: u64| {
                let fd = libc::open(path.as_ptr(), libc::O_PATH | libc::O_CLOEXEC);
                if fd >= 0 {
                    add_rule(ruleset, fd, access);
                    libc::close(fd);
                }
            };
            rule(c"/proc", inside.read);
            rule(c"/tmp", no_fifo);
            rule(c"/dev/shm", no_fifo);
            rule(c"/dev/pts", inside.terminal);
            if inside.tty {
                add_rule(ruleset, 0, inside.terminal);
                rule(c"/dev/tty", inside.terminal_file);
            }
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || libc::syscall(libc::SYS_landlock_restrict_self, ruleset, 0) != 0
            {
                return Err(*libc::__errno_location());
            }
        }
        Ok(())
    }
}

/// The rights of a rule on a file (not a directory) out of `access`.
pub fn file_access(access: u64) -> u64 {
    let abi = ABI::from(support().abi.min(abi_number(TARGET_ABI)) as i32);
    access & AccessFs::from_file(abi).bits()
}

/// In the namespace tier's entry, inside the sandbox: what exists only
/// there — this sandbox's /proc (its processes alone), its private /tmp and
/// /dev/shm, its pseudo-terminals — joins the command's ruleset, which then
/// applies. A rule covers what is mounted below its directory too, and the
/// workspace may be mounted below /tmp: so no FIFOs there (the workspace
/// allows none; `$TMPDIR` does).
pub fn confine_inside(
    ruleset: &OwnedFd,
    read: u64,
    write: u64,
    terminal: u64,
    tty: bool,
) -> Result<(), String> {
    let no_fifo = write & !make_fifo_access();
    for (path, access) in [
        ("/proc", read),
        ("/tmp", no_fifo),
        ("/dev/shm", no_fifo),
        ("/dev/pts", terminal),
    ] {
        add_path_rule(ruleset.as_raw_fd(), Path::new(path), access);
    }
    if tty {
        // A PTY command: its terminal (stdin) and /dev/tty, with ioctls.
        add_fd_rule(ruleset.as_raw_fd(), 0, terminal);
        add_path_rule(ruleset.as_raw_fd(), Path::new("/dev/tty"), terminal);
    }
    restrict_self(ruleset.as_raw_fd()).map_err(|e| format!("Landlock: {e}"))
}
