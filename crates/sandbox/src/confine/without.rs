//! A build without the `landlock` feature: no ruleset is ever made, so the
//! types that carry one have no values, and their methods cannot be called.

use std::os::fd::{OwnedFd, RawFd};
use std::path::PathBuf;

use super::{LandlockSupport, unavailable};

pub(super) fn probe() -> LandlockSupport {
    unavailable("this build of ctm-exec-runtime leaves out its `landlock` feature")
}

/// The Landlock roots of a server: never opened in this build.
#[derive(Debug)]
pub enum SandboxRoots {}

impl SandboxRoots {
    /// None: this build has no Landlock.
    pub fn open(
        _read_roots: &[PathBuf],
        _workspace: &[PathBuf],
        _runtime: &[PathBuf],
        _deny_tcp: bool,
    ) -> Option<Self> {
        None
    }

    /// Unreachable: there is no value to call it on.
    pub fn for_command(&self, _tty: bool) -> std::io::Result<ChildSandbox> {
        match *self {}
    }

    /// Unreachable: there is no value to call it on.
    pub fn write_access(&self) -> u64 {
        match *self {}
    }

    /// Unreachable: there is no value to call it on.
    pub fn terminal_access(&self) -> u64 {
        match *self {}
    }

    /// Unreachable: there is no value to call it on.
    pub fn refill(&self) {
        match *self {}
    }
}

/// One command's ruleset: never made in this build.
#[derive(Debug)]
pub enum ChildSandbox {}

impl ChildSandbox {
    /// Unreachable: there is no value to call it on.
    pub fn ruleset_fd(&self) -> RawFd {
        match *self {}
    }

    /// Unreachable: there is no value to call it on.
    pub fn read_access(&self) -> u64 {
        match *self {}
    }

    /// Unreachable: there is no value to call it on.
    pub fn enforce(&self) -> Result<(), i32> {
        match *self {}
    }

    /// Unreachable: there is no value to call it on.
    pub fn enforce_inside(&self, _inside: &crate::holder::Inside) -> Result<(), i32> {
        match *self {}
    }
}

/// No rights: this build makes no rule.
pub fn file_access(_access: u64) -> u64 {
    0
}

/// The server of this build never hands a ruleset to the namespace tier's
/// entry; one that arrives anyway is refused rather than ignored.
pub fn confine_inside(
    _ruleset: &OwnedFd,
    _read: u64,
    _write: u64,
    _terminal: u64,
    _tty: bool,
) -> Result<(), String> {
    Err("a Landlock ruleset was passed to a build without Landlock".into())
}
