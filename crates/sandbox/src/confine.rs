//! Landlock confinement of commands: what they may read, write, execute,
//! connect to and signal (the rulesets themselves are in `ruleset`).
//!
//! Without the crate's `landlock` feature nothing here confines: [`support`]
//! says so, no roots are opened, and commands run as they do on a kernel
//! without Landlock (seccomp and the namespace tier are unaffected).

use std::sync::OnceLock;

#[cfg(feature = "landlock")]
mod ruleset;
#[cfg(feature = "landlock")]
use ruleset::probe;
#[cfg(feature = "landlock")]
pub use ruleset::{ChildSandbox, SandboxRoots, confine_inside, file_access};

#[cfg(not(feature = "landlock"))]
mod without;
#[cfg(not(feature = "landlock"))]
use without::probe;
#[cfg(not(feature = "landlock"))]
pub use without::{ChildSandbox, SandboxRoots, confine_inside, file_access};

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

/// Asks the kernel once (see `probe`): no command is run.
pub fn support() -> &'static LandlockSupport {
    static SUPPORT: OnceLock<LandlockSupport> = OnceLock::new();
    SUPPORT.get_or_init(probe)
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
