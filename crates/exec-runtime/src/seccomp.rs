//! The seccomp filter of commands: system calls no coding task needs and an
//! attacker would, refused with `EPERM` (built once with `seccompiler`,
//! applied in the command's process right before `exec`).

use std::collections::BTreeMap;
use std::sync::OnceLock;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

/// Push a byte into a terminal's input queue (keystroke injection).
const TIOCSTI: u64 = 0x5412;
/// Console multiplexing, including selection paste into the input queue.
const TIOCLINUX: u64 = 0x541C;
const S_IFMT: u64 = 0o170_000;
const S_IFCHR: u64 = 0o020_000;
const S_IFBLK: u64 = 0o060_000;

/// Calls refused whatever their arguments.
fn always_refused() -> Vec<i64> {
    let mut v = vec![
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        libc::SYS_pidfd_getfd,
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_fsopen,
        libc::SYS_fsconfig,
        libc::SYS_fsmount,
        libc::SYS_fspick,
        libc::SYS_move_mount,
        libc::SYS_open_tree,
        libc::SYS_mount_setattr,
        libc::SYS_pivot_root,
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
        libc::SYS_bpf,
        libc::SYS_perf_event_open,
        libc::SYS_init_module,
        libc::SYS_finit_module,
        libc::SYS_delete_module,
        libc::SYS_kexec_load,
        libc::SYS_reboot,
        libc::SYS_swapon,
        libc::SYS_swapoff,
    ];
    #[cfg(target_arch = "x86_64")]
    v.extend([libc::SYS_kexec_file_load]);
    v
}

/// What the filter refuses, for reports.
pub const REFUSED: &[&str] = &[
    "ioctl TIOCSTI/TIOCLINUX",
    "mknod of character and block devices",
    "ptrace and process_vm_readv/writev, pidfd_getfd",
    "mount, umount, the new mount API, pivot_root",
    "keyctl, add_key, request_key",
    "bpf, perf_event_open",
    "kernel modules, kexec, reboot, swapon/swapoff",
];

fn build() -> Result<BpfProgram, String> {
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(|e| e.to_string())?;
    let cond = |arg: u8, op: SeccompCmpOp, value: u64| {
        SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value)
            .and_then(|c| SeccompRule::new(vec![c]))
            .map_err(|e| e.to_string())
    };
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    // The kernel reads the request as an unsigned int: compare the low 32 bits.
    rules.insert(
        libc::SYS_ioctl,
        vec![
            cond(1, SeccompCmpOp::Eq, TIOCSTI)?,
            cond(1, SeccompCmpOp::Eq, TIOCLINUX)?,
        ],
    );
    let device_modes = |arg: u8| -> Result<Vec<SeccompRule>, String> {
        Ok(vec![
            cond(arg, SeccompCmpOp::MaskedEq(S_IFMT), S_IFCHR)?,
            cond(arg, SeccompCmpOp::MaskedEq(S_IFMT), S_IFBLK)?,
        ])
    };
    #[cfg(target_arch = "x86_64")]
    rules.insert(libc::SYS_mknod, device_modes(1)?);
    rules.insert(libc::SYS_mknodat, device_modes(2)?);
    for nr in always_refused() {
        rules.insert(nr, Vec::new());
    }
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(|e| e.to_string())?;
    BpfProgram::try_from(filter).map_err(|e| e.to_string())
}

/// The compiled filter, or why there is none on this target.
pub fn program() -> &'static Result<BpfProgram, String> {
    static PROGRAM: OnceLock<Result<BpfProgram, String>> = OnceLock::new();
    PROGRAM.get_or_init(build)
}

/// Whether the kernel accepts the filter (asked once, from a throwaway
/// thread: a filter applies only to the thread that installs it).
pub fn available() -> &'static Result<(), String> {
    static AVAILABLE: OnceLock<Result<(), String>> = OnceLock::new();
    AVAILABLE.get_or_init(|| {
        let prog = program().clone()?;
        std::thread::spawn(move || seccompiler::apply_filter(&prog).map_err(|e| e.to_string()))
            .join()
            .unwrap_or_else(|_| Err("the seccomp check failed".into()))
    })
}

/// Installs the filter in the calling (child) process; allocation-free, so
/// it may run between fork and exec.
pub fn enforce(prog: &BpfProgram) -> std::io::Result<()> {
    seccompiler::apply_filter(prog).map_err(|e| std::io::Error::other(e.to_string()))
}
