//! The seccomp filter of commands: system calls no coding task needs and an
//! attacker would, refused with `EPERM` (compiled once by `bpf`, applied in
//! the command's process right before `exec`).

use std::collections::BTreeMap;
use std::sync::OnceLock;

mod bpf;

use bpf::{Cond, Entry, Op};

/// Terminal and file ioctls refused: push a byte into a terminal's input
/// queue (keystroke injection), console multiplexing (selection paste),
/// redirecting the console, changing the line discipline, and setting file
/// attribute flags (immutable, append-only).
const REFUSED_IOCTLS: [u64; 7] = [
    0x5412,      // TIOCSTI
    0x541C,      // TIOCLINUX
    0x541D,      // TIOCCONS
    0x5423,      // TIOCSETD
    0x4008_6602, // FS_IOC_SETFLAGS
    0x4004_6602, // FS_IOC32_SETFLAGS
    0x401C_5820, // FS_IOC_FSSETXATTR
];
const IPPROTO_MPTCP: u64 = 262;
const S_IFMT: u64 = 0o170_000;
const S_IFCHR: u64 = 0o020_000;
const S_IFBLK: u64 = 0o060_000;
const S_ISUID: u64 = 0o4000;
const S_ISGID: u64 = 0o2000;
/// `fchmodat2` (Linux 6.6), the same number on every architecture.
const SYS_FCHMODAT2: i64 = 452;

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
        // io_uring performs operations (sockets included) without passing
        // through this filter.
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        // Acting on another process's memory.
        libc::SYS_process_madvise,
        libc::SYS_process_mrelease,
        libc::SYS_kcmp,
    ];
    #[cfg(target_arch = "x86_64")]
    v.extend([libc::SYS_kexec_file_load]);
    v
}

/// What the filter refuses, for reports.
pub const REFUSED: &[&str] = &[
    "every system call of x86_64's x32 ABI (numbers with the x32 bit)",
    "ioctl TIOCSTI/TIOCLINUX/TIOCCONS/TIOCSETD, file attribute flags (chattr)",
    "limits, priorities, scheduling and memory placement of other processes",
    "raw and packet sockets; with the network closed, TCP/MPTCP/SCTP stream sockets and every family but UNIX, IP datagrams and netlink",
    "io_uring",
    "mknod of character and block devices",
    "set-user-ID and set-group-ID mode bits (chmod, fchmod, fchmodat, fchmodat2, open/openat/creat/mknod with such a mode), openat2 (answered ENOSYS: its mode cannot be inspected)",
    "ptrace and process_vm_readv/writev, pidfd_getfd",
    "mount, umount, the new mount API, pivot_root",
    "keyctl, add_key, request_key",
    "bpf, perf_event_open",
    "kernel modules, kexec, reboot, swapon/swapoff",
];

/// The rules of the filter (with `deny_tcp`, the TCP family refusals the
/// Landlock tier needs; with `local_families_only`, sockets of only the
/// UNIX, IP and netlink families).
fn entries(deny_tcp: bool, local_families_only: bool) -> Vec<Entry> {
    let eperm = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
    let cond = |arg: u8, op: Op, value: u64| Cond {
        arg,
        op,
        value: value as u32,
    };
    let mut rules: BTreeMap<i64, Vec<Vec<Cond>>> = BTreeMap::new();
    // The kernel reads the request as an unsigned int: compare the low 32 bits.
    rules.insert(
        libc::SYS_ioctl,
        REFUSED_IOCTLS
            .iter()
            .map(|&r| vec![cond(1, Op::Eq, r)])
            .collect(),
    );
    // Only the calling process itself (pid 0) may be the target.
    let not_self = |arg: u8| vec![cond(arg, Op::Ne, 0)];
    for nr in [
        libc::SYS_prlimit64,
        libc::SYS_sched_setaffinity,
        libc::SYS_sched_setscheduler,
        libc::SYS_sched_setparam,
        libc::SYS_sched_setattr,
        libc::SYS_migrate_pages,
        libc::SYS_move_pages,
    ] {
        rules.insert(nr, vec![not_self(0)]);
    }
    // setpriority(PRIO_PROCESS, 0, n) and ioprio_set(IOPRIO_WHO_PROCESS, 0, n) only.
    rules.insert(libc::SYS_setpriority, vec![not_self(0), not_self(1)]);
    rules.insert(
        libc::SYS_ioprio_set,
        vec![vec![cond(0, Op::Ne, 1)], not_self(1)],
    );
    let kind = |t: u64| cond(1, Op::MaskedEq(0xf), t);
    let family = |f: i32| cond(0, Op::Eq, f as u64);
    /// `SOCK_PACKET`: an `AF_INET` socket of this type is a packet socket.
    const SOCK_PACKET: u64 = 10;
    let mut sockets = vec![
        vec![family(libc::AF_PACKET)],
        vec![kind(SOCK_PACKET)],
        vec![family(libc::AF_INET), kind(libc::SOCK_RAW as u64)],
        vec![family(libc::AF_INET6), kind(libc::SOCK_RAW as u64)],
    ];
    if deny_tcp {
        // Landlock refuses TCP connect and bind; these reach the network
        // without them (MPTCP, TCP Fast Open's sendto, listen's autobind, SCTP).
        for f in [libc::AF_INET, libc::AF_INET6] {
            for t in [libc::SOCK_STREAM, libc::SOCK_SEQPACKET] {
                sockets.push(vec![family(f), kind(t as u64)]);
            }
        }
        sockets.push(vec![cond(2, Op::Eq, IPPROTO_MPTCP)]);
    }
    if deny_tcp || local_families_only {
        // Only local, IP and netlink (interface lookups) families: vsock,
        // Bluetooth, CAN, RDS, TIPC and the rest reach other hosts — a
        // network namespace does not hold vsock back, for one.
        sockets.push(
            [
                libc::AF_UNIX,
                libc::AF_INET,
                libc::AF_INET6,
                libc::AF_NETLINK,
            ]
            .map(|f| cond(0, Op::Ne, f as u64))
            .to_vec(),
        );
    }
    rules.insert(libc::SYS_socket, sockets);
    let device_modes = |arg: u8| {
        vec![
            vec![cond(arg, Op::MaskedEq(S_IFMT as u32), S_IFCHR)],
            vec![cond(arg, Op::MaskedEq(S_IFMT as u32), S_IFBLK)],
        ]
    };
    // No set-user-ID or set-group-ID file can be made: another account
    // running it, outside any sandbox, would get the server user's ids.
    let set_id = |arg: u8| {
        vec![
            vec![cond(arg, Op::MaskedEq(S_ISUID as u32), S_ISUID)],
            vec![cond(arg, Op::MaskedEq(S_ISGID as u32), S_ISGID)],
        ]
    };
    #[cfg(target_arch = "x86_64")]
    {
        let mut mknod = device_modes(1);
        mknod.extend(set_id(1));
        rules.insert(libc::SYS_mknod, mknod);
        rules.insert(libc::SYS_chmod, set_id(1));
        rules.insert(libc::SYS_creat, set_id(1));
        rules.insert(libc::SYS_open, set_id(2));
    }
    let mut mknodat = device_modes(2);
    mknodat.extend(set_id(2));
    rules.insert(libc::SYS_mknodat, mknodat);
    rules.insert(libc::SYS_fchmod, set_id(1));
    rules.insert(libc::SYS_fchmodat, set_id(2));
    rules.insert(SYS_FCHMODAT2, set_id(2));
    rules.insert(libc::SYS_openat, set_id(3));
    for nr in always_refused() {
        rules.insert(nr, Vec::new());
    }
    let mut entries: Vec<Entry> = rules
        .into_iter()
        .map(|(nr, rules)| Entry {
            nr: nr as u32,
            ret: eperm,
            rules,
        })
        .collect();
    // `openat2` answered `ENOSYS`: its mode lives in a struct a filter
    // cannot read, and callers fall back to `openat` on that answer (glibc
    // never uses it for `open`).
    entries.push(Entry {
        nr: libc::SYS_openat2 as u32,
        ret: libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32,
        rules: Vec::new(),
    });
    entries
}

/// A compiled filter.
pub type Program = Vec<libc::sock_filter>;

fn build(deny_tcp: bool, local_families_only: bool) -> Result<Program, String> {
    let arch = bpf::audit_arch()
        .ok_or_else(|| format!("no seccomp filter for {}", std::env::consts::ARCH))?;
    bpf::compile(arch, &entries(deny_tcp, local_families_only))
}

/// The compiled filter (with the network closed, or open), or why there is
/// none on this target.
pub fn program(deny_tcp: bool) -> &'static Result<Program, String> {
    static CLOSED: OnceLock<Result<Program, String>> = OnceLock::new();
    static OPEN: OnceLock<Result<Program, String>> = OnceLock::new();
    if deny_tcp {
        CLOSED.get_or_init(|| build(true, true))
    } else {
        OPEN.get_or_init(|| build(false, false))
    }
}

/// The filter of the namespace tier: TCP is the network namespace's
/// business (loopback only when the network is closed), but only the
/// UNIX, IP and netlink families, in every mode.
pub fn program_namespaced() -> &'static Result<Program, String> {
    static NAMESPACED: OnceLock<Result<Program, String>> = OnceLock::new();
    NAMESPACED.get_or_init(|| build(false, true))
}

/// Whether the kernel accepts the filter (asked once, from a throwaway
/// thread: a filter applies only to the thread that installs it).
pub fn available() -> &'static Result<(), String> {
    static AVAILABLE: OnceLock<Result<(), String>> = OnceLock::new();
    AVAILABLE.get_or_init(|| {
        let prog = program(true).clone()?;
        std::thread::spawn(move || enforce(&prog).map_err(|e| e.to_string()))
            .join()
            .unwrap_or_else(|_| Err("the seccomp check failed".into()))
    })
}

/// Installs the filter in the calling thread (with `no_new_privs`, which
/// an unprivileged filter needs); allocation-free, so it may run between
/// fork and exec.
#[expect(unsafe_code, reason = "prctl and the seccomp system call")]
pub fn enforce(prog: &Program) -> std::io::Result<()> {
    let Ok(len) = u16::try_from(prog.len()) else {
        return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
    };
    let fprog = libc::sock_fprog {
        len,
        filter: prog.as_ptr().cast_mut(),
    };
    // SAFETY: prctl with constant arguments; seccomp reads `fprog` and the
    // instructions it points at, both alive for the call.
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            0,
            &fprog as *const libc::sock_fprog,
        ) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

type Job = Box<dyn FnOnce() + Send>;

/// A thread that has installed the filter once and spawns commands: a
/// child inherits the filter of the thread that forks it, so no command
/// pays for installing it (the kernel prepares a filter's syscall cache when
/// it is attached: about 0.2 ms for this one).
struct Spawner {
    jobs: std::sync::Mutex<std::sync::mpsc::Sender<Job>>,
}

fn spawner(deny_tcp: bool) -> Option<&'static Spawner> {
    static CLOSED: OnceLock<Option<Spawner>> = OnceLock::new();
    static OPEN: OnceLock<Option<Spawner>> = OnceLock::new();
    let cell = if deny_tcp { &CLOSED } else { &OPEN };
    cell.get_or_init(|| {
        let prog = program(deny_tcp).as_ref().ok()?.clone();
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name(format!(
                "ctm-spawner-{}",
                if deny_tcp { "closed" } else { "open" }
            ))
            .spawn(move || {
                let ok = enforce(&prog).is_ok();
                let _ = ready_tx.send(ok);
                if ok {
                    for job in rx {
                        job();
                    }
                }
            })
            .ok()?;
        ready_rx.recv().ok()?.then(|| Spawner {
            jobs: std::sync::Mutex::new(tx),
        })
    })
    .as_ref()
}

/// Runs `spawn` on the thread that carries the filter (network closed or
/// open) and returns its result; `None` when there is no such thread (no
/// seccomp here), and the caller spawns unfiltered.
pub fn on_filtered_thread<T: Send + 'static>(
    deny_tcp: bool,
    spawn: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    let s = spawner(deny_tcp)?;
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let job: Job = Box::new(move || {
        let _ = tx.send(spawn());
    });
    s.jobs
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .send(job)
        .ok()?;
    rx.recv().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every program refuses x32 numbers right after its architecture
    /// check (asserted on the program: this kernel may answer ENOSYS to an
    /// x32 call with or without the filter).
    #[test]
    fn x32_numbers_are_refused_first() {
        for prog in [program(true), program(false), program_namespaced()] {
            let Ok(prog) = prog else {
                eprintln!("NOTE: no seccomp program on this target");
                return;
            };
            assert_eq!((prog[0].code, prog[0].k), (0x20, 4), "arch load");
            assert_eq!((prog[3].code, prog[3].k), (0x20, 0), "nr load");
            assert_eq!(
                (prog[4].code, prog[4].jt, prog[4].jf, prog[4].k),
                (0x35, 0, 1, bpf::X32_SYSCALL_BIT)
            );
            assert_eq!(
                (prog[5].code, prog[5].k),
                (0x06, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32)
            );
        }
    }
}

/// The filter as it was built with `seccompiler` (and its separate
/// `openat2` filter), kept as the oracle the compiled search must agree with.
#[cfg(test)]
mod oracle {
    use std::collections::BTreeMap;

    use seccompiler::{
        BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
        SeccompRule, TargetArch,
    };

    use super::bpf::interpret::{Data, run, run_stack};
    use super::{
        IPPROTO_MPTCP, REFUSED_IOCTLS, S_IFBLK, S_IFCHR, S_IFMT, S_ISGID, S_ISUID, SYS_FCHMODAT2,
        always_refused,
    };

    fn build(deny_tcp: bool, local_families_only: bool) -> Result<BpfProgram, String> {
        let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(|e| e.to_string())?;
        let cond = |arg: u8, op: SeccompCmpOp, value: u64| {
            SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value)
                .and_then(|c| SeccompRule::new(vec![c]))
                .map_err(|e| e.to_string())
        };
        let all = |conds: &[(u8, SeccompCmpOp, u64)]| {
            conds
                .iter()
                .map(|(arg, op, v)| {
                    SeccompCondition::new(*arg, SeccompCmpArgLen::Dword, op.clone(), *v)
                })
                .collect::<Result<Vec<_>, _>>()
                .and_then(SeccompRule::new)
                .map_err(|e| e.to_string())
        };
        let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
        // The kernel reads the request as an unsigned int: compare the low 32 bits.
        rules.insert(
            libc::SYS_ioctl,
            REFUSED_IOCTLS
                .iter()
                .map(|&r| cond(1, SeccompCmpOp::Eq, r))
                .collect::<Result<_, _>>()?,
        );
        // Only the calling process itself (pid 0) may be the target.
        let not_self = |arg: u8| cond(arg, SeccompCmpOp::Ne, 0);
        for nr in [
            libc::SYS_prlimit64,
            libc::SYS_sched_setaffinity,
            libc::SYS_sched_setscheduler,
            libc::SYS_sched_setparam,
            libc::SYS_sched_setattr,
            libc::SYS_migrate_pages,
            libc::SYS_move_pages,
        ] {
            rules.insert(nr, vec![not_self(0)?]);
        }
        // setpriority(PRIO_PROCESS, 0, n) and ioprio_set(IOPRIO_WHO_PROCESS, 0, n) only.
        rules.insert(libc::SYS_setpriority, vec![not_self(0)?, not_self(1)?]);
        rules.insert(
            libc::SYS_ioprio_set,
            vec![cond(0, SeccompCmpOp::Ne, 1)?, not_self(1)?],
        );
        let kind = |t: u64| (1, SeccompCmpOp::MaskedEq(0xf), t);
        /// `SOCK_PACKET`: an `AF_INET` socket of this type is a packet socket.
        const SOCK_PACKET: u64 = 10;
        let mut sockets = vec![
            all(&[(0, SeccompCmpOp::Eq, libc::AF_PACKET as u64)])?,
            all(&[kind(SOCK_PACKET)])?,
            all(&[
                (0, SeccompCmpOp::Eq, libc::AF_INET as u64),
                kind(libc::SOCK_RAW as u64),
            ])?,
            all(&[
                (0, SeccompCmpOp::Eq, libc::AF_INET6 as u64),
                kind(libc::SOCK_RAW as u64),
            ])?,
        ];
        if deny_tcp {
            // Landlock refuses TCP connect and bind; these reach the network
            // without them (MPTCP, TCP Fast Open's sendto, listen's autobind, SCTP).
            for family in [libc::AF_INET, libc::AF_INET6] {
                for t in [libc::SOCK_STREAM, libc::SOCK_SEQPACKET] {
                    sockets.push(all(&[
                        (0, SeccompCmpOp::Eq, family as u64),
                        kind(t as u64),
                    ])?);
                }
            }
            sockets.push(all(&[(2, SeccompCmpOp::Eq, IPPROTO_MPTCP)])?);
        }
        if deny_tcp || local_families_only {
            // Only local, IP and netlink (interface lookups) families: vsock,
            // Bluetooth, CAN, RDS, TIPC and the rest reach other hosts — a
            // network namespace does not hold vsock back, for one.
            sockets.push(all(&[
                (0, SeccompCmpOp::Ne, libc::AF_UNIX as u64),
                (0, SeccompCmpOp::Ne, libc::AF_INET as u64),
                (0, SeccompCmpOp::Ne, libc::AF_INET6 as u64),
                (0, SeccompCmpOp::Ne, libc::AF_NETLINK as u64),
            ])?);
        }
        rules.insert(libc::SYS_socket, sockets);
        let device_modes = |arg: u8| -> Result<Vec<SeccompRule>, String> {
            Ok(vec![
                cond(arg, SeccompCmpOp::MaskedEq(S_IFMT), S_IFCHR)?,
                cond(arg, SeccompCmpOp::MaskedEq(S_IFMT), S_IFBLK)?,
            ])
        };
        // No set-user-ID or set-group-ID file can be made: another account
        // running it, outside any sandbox, would get the server user's ids.
        let set_id = |arg: u8| -> Result<Vec<SeccompRule>, String> {
            Ok(vec![
                cond(arg, SeccompCmpOp::MaskedEq(S_ISUID), S_ISUID)?,
                cond(arg, SeccompCmpOp::MaskedEq(S_ISGID), S_ISGID)?,
            ])
        };
        #[cfg(target_arch = "x86_64")]
        {
            let mut mknod = device_modes(1)?;
            mknod.extend(set_id(1)?);
            rules.insert(libc::SYS_mknod, mknod);
            rules.insert(libc::SYS_chmod, set_id(1)?);
            rules.insert(libc::SYS_creat, set_id(1)?);
            rules.insert(libc::SYS_open, set_id(2)?);
        }
        let mut mknodat = device_modes(2)?;
        mknodat.extend(set_id(2)?);
        rules.insert(libc::SYS_mknodat, mknodat);
        rules.insert(libc::SYS_fchmod, set_id(1)?);
        rules.insert(libc::SYS_fchmodat, set_id(2)?);
        rules.insert(SYS_FCHMODAT2, set_id(2)?);
        rules.insert(libc::SYS_openat, set_id(3)?);
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
        BpfProgram::try_from(filter)
            .map_err(|e| e.to_string())
            .and_then(refuse_x32)
    }

    /// The x32 bit of a system call number (x86_64's other ABI).
    const X32_SYSCALL_BIT: u32 = 0x4000_0000;

    /// Refuses (`EPERM`) every system call number with the x32 bit, right
    /// after the architecture check: x32 calls arrive with x86_64's audit
    /// architecture and their own numbers, so on a kernel with x32 enabled
    /// they would pass every rule above, which names native numbers
    /// (libseccomp refuses them by default too). Elsewhere no call has a
    /// number that high.
    fn refuse_x32(mut prog: BpfProgram) -> Result<BpfProgram, String> {
        use seccompiler::sock_filter;
        const LD_W_ABS: u16 = 0x20;
        const JMP_JGE_K: u16 = 0x35;
        const RET_K: u16 = 0x06;
        /// `offsetof(struct seccomp_data, nr)` and `arch`.
        const NR: u32 = 0;
        const ARCH: u32 = 4;
        // seccompiler's program starts with the architecture check: load the
        // arch, compare, kill.
        let starts_with_arch = prog.len() > 3 && prog[0].code == LD_W_ABS && prog[0].k == ARCH;
        if !starts_with_arch {
            return Err("the seccomp program does not start with its architecture check".into());
        }
        let ins = |code, jt, jf, k| sock_filter { code, jt, jf, k };
        let prelude = [
            ins(LD_W_ABS, 0, 0, NR),
            ins(JMP_JGE_K, 0, 1, X32_SYSCALL_BIT),
            ins(RET_K, 0, 0, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32),
        ];
        prog.splice(3..3, prelude);
        Ok(prog)
    }

    fn openat2_filter() -> BpfProgram {
        let arch = TargetArch::try_from(std::env::consts::ARCH).unwrap();
        let filter = SeccompFilter::new(
            BTreeMap::from([(libc::SYS_openat2, Vec::new())]),
            SeccompAction::Allow,
            SeccompAction::Errno(libc::ENOSYS as u32),
            arch,
        )
        .unwrap();
        BpfProgram::try_from(filter).unwrap()
    }

    /// A small deterministic generator (xorshift), no dependency.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    /// Every system call number (and x32 and foreign-architecture ones),
    /// with arguments drawn from the values the rules name, their masked
    /// variants, high bits set and random words: the search answers what
    /// the two `seccompiler` filters answered.
    #[test]
    fn the_search_answers_as_the_rule_chain_did() {
        let Some(arch) = super::bpf::audit_arch() else {
            eprintln!("NOTE: no seccomp program on this architecture");
            return;
        };
        let mut interesting: Vec<u64> = vec![0, 1, 2, 3, 0xf, u64::from(u32::MAX), u64::MAX];
        interesting.extend(REFUSED_IOCTLS);
        interesting.extend([IPPROTO_MPTCP, S_IFCHR, S_IFBLK, S_IFMT, S_ISUID, S_ISGID]);
        interesting.extend([S_ISUID | 0o755, S_ISGID | 0o644, S_IFCHR | 0o600, 0o100_644]);
        for f in [
            libc::AF_UNIX,
            libc::AF_INET,
            libc::AF_INET6,
            libc::AF_NETLINK,
            libc::AF_PACKET,
            libc::AF_VSOCK,
        ] {
            interesting.push(f as u64);
        }
        for t in [
            libc::SOCK_STREAM,
            libc::SOCK_DGRAM,
            libc::SOCK_RAW,
            libc::SOCK_SEQPACKET,
            10,
        ] {
            interesting.push(t as u64);
            interesting.push(t as u64 | libc::SOCK_CLOEXEC as u64);
        }
        let with_high: Vec<u64> = interesting
            .iter()
            .map(|v| v | 0xdead_0000_0000_0000)
            .collect();
        interesting.extend(with_high);
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut checked = 0usize;
        for (deny_tcp, local) in [(true, true), (false, false), (false, true)] {
            let ours = super::build(deny_tcp, local).unwrap();
            let libc_form = |p: BpfProgram| -> Vec<libc::sock_filter> {
                p.iter()
                    .map(|i| libc::sock_filter {
                        code: i.code,
                        jt: i.jt,
                        jf: i.jf,
                        k: i.k,
                    })
                    .collect()
            };
            let theirs = libc_form(build(deny_tcp, local).unwrap());
            let theirs_openat2 = libc_form(openat2_filter());
            let mut nrs: Vec<u32> = (0..=470).collect();
            nrs.extend([
                X32_SYSCALL_BIT,
                X32_SYSCALL_BIT | 2,
                X32_SYSCALL_BIT | 257,
                u32::MAX,
            ]);
            for &nr in &nrs {
                for a in [arch, 0x4000_0003, 0] {
                    for round in 0..64 {
                        let mut args = [0u64; 6];
                        for v in &mut args {
                            *v = if round % 4 == 3 {
                                rng.next()
                            } else {
                                interesting[(rng.next() % interesting.len() as u64) as usize]
                            };
                        }
                        let d = Data { nr, arch: a, args };
                        let want = run_stack(&[&theirs, &theirs_openat2], &d);
                        assert_eq!(
                            run(&ours, &d),
                            want,
                            "{d:?} deny_tcp={deny_tcp} local={local}"
                        );
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked > 250_000, "{checked}");
    }
}
