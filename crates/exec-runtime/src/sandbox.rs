//! Landlock confinement of commands (filesystem writes).

use std::path::PathBuf;
use std::sync::OnceLock;

use landlock::{
    ABI, Access, AccessFs, LandlockStatus, Ruleset, RulesetAttr, RulesetCreated,
    RulesetCreatedAttr, RulesetStatus, path_beneath_rules,
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

/// A ruleset for one command: read and execute everywhere; write only in
/// the workspace, the runtime directory and the usual devices.
pub fn ruleset(writable: &[PathBuf]) -> Result<RulesetCreated, String> {
    let abi = TARGET_ABI;
    let devices = [
        "/dev/null",
        "/dev/zero",
        "/dev/full",
        "/dev/random",
        "/dev/urandom",
        "/dev/tty",
        "/dev/ptmx",
        "/dev/pts",
        "/dev/shm",
    ];
    let existing_devices: Vec<&str> = devices
        .iter()
        .copied()
        .filter(|d| std::path::Path::new(d).exists())
        .collect();
    Ruleset::default()
        .handle_access(AccessFs::from_all(abi))
        .and_then(|r| r.create())
        .and_then(|r| r.add_rules(path_beneath_rules(["/"], AccessFs::from_read(abi))))
        .and_then(|r| {
            r.add_rules(path_beneath_rules(
                existing_devices,
                AccessFs::from_all(abi),
            ))
        })
        .and_then(|r| r.add_rules(path_beneath_rules(writable, AccessFs::from_all(abi))))
        .map_err(|e| e.to_string())
}

/// Applies `ruleset` to the calling (child) process; run between fork and exec.
pub fn enforce(ruleset: RulesetCreated) -> std::io::Result<()> {
    match ruleset.restrict_self() {
        Ok(s) if s.ruleset != RulesetStatus::NotEnforced => Ok(()),
        Ok(_) => Ok(()),
        Err(e) => Err(std::io::Error::other(e.to_string())),
    }
}
