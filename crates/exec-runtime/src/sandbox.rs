//! Landlock confinement of commands: what they may read, write, execute,
//! connect to and signal.
//!
//! The ruleset is built in the server (it opens every root by path) and
//! applied in the command's process between fork and exec with raw system
//! calls, so nothing there allocates. `/proc/self` is added in the child
//! itself: opened in the server it would name the server's own `/proc` entry.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, LandlockStatus, Ruleset, RulesetAttr,
    RulesetCreated, RulesetCreatedAttr, Scope, path_beneath_rules,
};

/// The newest ABI this build asks for.
const TARGET_ABI: ABI = ABI::V6;

/// What the kernel offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LandlockSupport {
    /// Landlock can confine commands.
    pub available: bool,
    /// The ABI used (0 when unavailable).
    pub abi: u32,
    /// Why it is unavailable.
    pub reason: Option<String>,
}

impl LandlockSupport {
    /// Reads and writes are confined to the roots (ABI 1).
    pub fn filesystem(&self) -> bool {
        self.available
    }
    /// `O_TRUNC` outside the writable roots is refused too (ABI 3).
    pub fn truncate(&self) -> bool {
        self.available && self.abi >= 3
    }
    /// TCP `connect`/`bind` can be refused (ABI 4).
    pub fn tcp(&self) -> bool {
        self.available && self.abi >= 4
    }
    /// Device ioctls are refused where not granted (ABI 5).
    pub fn ioctl_dev(&self) -> bool {
        self.available && self.abi >= 5
    }
    /// Signals and abstract UNIX sockets are scoped to the command (ABI 6).
    pub fn scopes(&self) -> bool {
        self.available && self.abi >= 6
    }
}

fn abi_number(abi: ABI) -> u32 {
    // ABI is an ordered enum starting at V1.
    (0..=10u32)
        .find(|n| ABI::from(*n as i32) == abi)
        .unwrap_or(0)
}

/// Asks the kernel once, from a throwaway thread (Landlock confines only the
/// calling thread, which then ends): no command is run.
pub fn support() -> &'static LandlockSupport {
    static SUPPORT: OnceLock<LandlockSupport> = OnceLock::new();
    SUPPORT.get_or_init(|| {
        let probe = std::thread::spawn(|| -> Result<LandlockStatus, String> {
            let status = Ruleset::default()
                .handle_access(AccessFs::from_all(TARGET_ABI))
                .and_then(|r| r.create())
                .and_then(|r| {
                    r.add_rules(path_beneath_rules(["/"], AccessFs::from_all(TARGET_ABI)))
                })
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
    })
}

fn unavailable(why: &str) -> LandlockSupport {
    LandlockSupport {
        available: false,
        abi: 0,
        reason: Some(why.to_owned()),
    }
}

/// Devices every command may read and write (no ioctl).
pub const DEVICES: [&str; 5] = [
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
];

/// What one command may touch.
#[derive(Debug, Clone)]
pub struct SandboxSpec<'a> {
    /// Read and execute beneath these.
    pub read_roots: &'a [PathBuf],
    /// Everything but device nodes beneath these.
    pub write_roots: &'a [PathBuf],
    /// Refuse TCP connect and bind.
    pub deny_tcp: bool,
    /// The terminal of a PTY command (read, write and ioctl on it alone).
    pub terminal: Option<&'a Path>,
}

/// A ruleset prepared in the server, applied in the child with
/// [`ChildSandbox::enforce`].
#[derive(Debug)]
pub struct ChildSandbox {
    ruleset: Option<OwnedFd>,
}

/// `struct landlock_path_beneath_attr` (packed in the uapi).
#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

const LANDLOCK_RULE_PATH_BENEATH: libc::c_long = 1;
/// `LANDLOCK_ACCESS_FS_EXECUTE | READ_FILE | READ_DIR`.
const READ_ACCESS: u64 = 1 | 4 | 8;

impl ChildSandbox {
    /// Builds the ruleset for `spec`.
    pub fn prepare(spec: &SandboxSpec<'_>) -> Result<Self, String> {
        let abi = TARGET_ABI;
        let read = AccessFs::from_read(abi);
        // Everything but creating device nodes, and ioctl on devices.
        let write: BitFlags<AccessFs> = AccessFs::from_all(abi)
            & !(AccessFs::MakeChar | AccessFs::MakeBlock | AccessFs::IoctlDev);
        let device = AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate;
        let mut ruleset = Ruleset::default()
            .handle_access(AccessFs::from_all(abi))
            .map_err(|e| e.to_string())?;
        if spec.deny_tcp {
            ruleset = ruleset
                .handle_access(AccessNet::from_all(abi))
                .map_err(|e| e.to_string())?;
        }
        let created = ruleset
            .scope(Scope::from_all(abi))
            .and_then(|r| r.create())
            .and_then(|r| r.add_rules(path_beneath_rules(spec.read_roots, read)))
            .and_then(|r| r.add_rules(path_beneath_rules(DEVICES, device)))
            .and_then(|r| r.add_rules(path_beneath_rules(spec.write_roots, write)))
            .and_then(|r| match spec.terminal {
                Some(t) => r.add_rules(path_beneath_rules(
                    [t, Path::new("/dev/tty")],
                    device | AccessFs::IoctlDev,
                )),
                None => Ok(r),
            })
            .map_err(|e| e.to_string())?;
        let fd: Option<OwnedFd> = created.into();
        Ok(Self { ruleset: fd })
    }

    /// The ruleset's descriptor, to keep open across the fork.
    pub fn raw_fd(&self) -> Option<RawFd> {
        self.ruleset.as_ref().map(AsRawFd::as_raw_fd)
    }

    /// In the child: grants reading its own `/proc/self`, sets
    /// `no_new_privs` and restricts itself. Only system calls, no allocation.
    pub fn enforce(&self) -> std::io::Result<()> {
        let Some(fd) = self.raw_fd() else {
            return Ok(());
        };
        // SAFETY: plain system calls on a descriptor we own and a
        // NUL-terminated literal; the attribute lives on this stack frame.
        #[allow(unsafe_code)]
        unsafe {
            let me = libc::open(c"/proc/self".as_ptr(), libc::O_PATH | libc::O_CLOEXEC);
            if me >= 0 {
                let attr = PathBeneathAttr {
                    allowed_access: READ_ACCESS,
                    parent_fd: me,
                };
                // Best effort: a /proc that cannot be added stays closed.
                libc::syscall(
                    libc::SYS_landlock_add_rule,
                    fd,
                    LANDLOCK_RULE_PATH_BENEATH,
                    &attr as *const PathBeneathAttr,
                    0,
                );
                libc::close(me);
            }
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::syscall(libc::SYS_landlock_restrict_self, fd, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    }
}
