//! A seccomp program laid out for the kernel's cost model: the system call
//! number is looked up by binary search, not along a chain.
//!
//! When a filter is attached the kernel works out, for every system call
//! number of the architecture, whether the filter allows it whatever its
//! arguments (the "constant action" cache) by running the program on that
//! number. Along a chain of comparisons each of those runs walks every rule
//! before it; the search walks about log2 of them. For our 60 rules that took
//! attaching from about 0.42 ms to well under 0.1 ms, on every command of the
//! namespace tier; the calls the cache cannot answer (`openat`, `ioctl`,
//! `socket`) also run fewer instructions each time.
//!
//! Semantics are those of a rule list: a call whose number has no entry is
//! allowed; an entry without conditions returns its action; otherwise the
//! entry's action is returned when all conditions of any one of its rules
//! hold, and the call is allowed when none does. Conditions compare the low
//! 32 bits of an argument, as the kernel reads an `int`.

use libc::sock_filter;

/// `BPF_LD | BPF_W | BPF_ABS`: load a 32-bit word of `seccomp_data`.
const LD_W_ABS: u16 = 0x20;
/// `BPF_ALU | BPF_AND | BPF_K`.
const AND_K: u16 = 0x54;
/// `BPF_JMP | BPF_JA`: unconditional jump by `k`.
const JA: u16 = 0x05;
/// `BPF_JMP | BPF_JEQ | BPF_K`.
const JEQ_K: u16 = 0x15;
/// `BPF_JMP | BPF_JGE | BPF_K`.
const JGE_K: u16 = 0x35;
/// `BPF_RET | BPF_K`.
const RET_K: u16 = 0x06;

/// Offsets in `struct seccomp_data`.
const NR: u32 = 0;
const ARCH: u32 = 4;
const ARGS: u32 = 16;

/// The x32 bit of a system call number (x86_64's other ABI).
pub const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// How a condition compares an argument's low 32 bits with its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Equal.
    Eq,
    /// Not equal.
    Ne,
    /// Equal after masking the argument with this mask.
    MaskedEq(u32),
}

/// One comparison of one argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cond {
    pub arg: u8,
    pub op: Op,
    pub value: u32,
}

/// What happens to one system call number.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub nr: u32,
    /// The value returned when it applies (`SECCOMP_RET_ERRNO | errno`).
    pub ret: u32,
    /// Empty: always. Otherwise: when every condition of one rule holds.
    pub rules: Vec<Vec<Cond>>,
}

/// The audit architecture of the build target, or `None` where we make no
/// program.
pub fn audit_arch() -> Option<u32> {
    match std::env::consts::ARCH {
        "x86_64" => Some(0xC000_003E),
        "aarch64" => Some(0xC000_00B7),
        "riscv64" => Some(0xC000_00F3),
        _ => None,
    }
}

fn ins(code: u16, jt: u8, jf: u8, k: u32) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

/// The program: the architecture check (any other kills the process, so a
/// foreign ABI's numbers are never judged by ours), x32 numbers refused
/// with `EPERM`, then the search over `entries` (any order; numbers must
/// be unique).
pub fn compile(arch: u32, entries: &[Entry]) -> Result<Vec<sock_filter>, String> {
    let mut sorted: Vec<&Entry> = entries.iter().collect();
    sorted.sort_by_key(|e| e.nr);
    if sorted.windows(2).any(|w| w[0].nr == w[1].nr) {
        return Err("a system call number has two entries".into());
    }
    if sorted.iter().any(|e| e.rules.iter().any(|r| r.is_empty())) {
        return Err("a rule without conditions (make the entry unconditional)".into());
    }
    if sorted
        .iter()
        .flat_map(|e| e.rules.iter().flatten())
        .any(|c| c.arg > 5)
    {
        return Err("a condition on an argument past the sixth".into());
    }
    let mut p = Program::default();
    p.code.extend([
        ins(LD_W_ABS, 0, 0, ARCH),
        ins(JEQ_K, 1, 0, arch),
        ins(RET_K, 0, 0, libc::SECCOMP_RET_KILL_PROCESS),
        ins(LD_W_ABS, 0, 0, NR),
        ins(JGE_K, 0, 1, X32_SYSCALL_BIT),
        ins(RET_K, 0, 0, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32),
    ]);
    if sorted.is_empty() {
        p.code.push(ins(RET_K, 0, 0, libc::SECCOMP_RET_ALLOW));
    } else {
        p.search(&sorted)?;
        for (at, entry) in std::mem::take(&mut p.pending) {
            let start = p.code.len();
            p.code[at].k = u32::try_from(start - at - 1).map_err(|e| e.to_string())?;
            p.rules(entry)?;
        }
    }
    if p.code.len() > usize::from(u16::MAX) || p.code.len() > 4096 {
        return Err("the seccomp program is longer than the kernel takes".into());
    }
    Ok(p.code)
}

#[derive(Default)]
struct Program<'a> {
    code: Vec<sock_filter>,
    /// `ja` instructions still to point at their entry's rules.
    pending: Vec<(usize, &'a Entry)>,
}

impl<'a> Program<'a> {
    /// The search over `es` (sorted, nonempty), the number in the
    /// accumulator: each node sends numbers from its middle entry's on to
    /// the right half; a leaf compares the one number left.
    fn search(&mut self, es: &[&'a Entry]) -> Result<(), String> {
        if let [e] = es {
            self.code.push(ins(JEQ_K, 0, 1, e.nr));
            if e.rules.is_empty() {
                self.code.push(ins(RET_K, 0, 0, e.ret));
            } else {
                self.pending.push((self.code.len(), e));
                self.code.push(ins(JA, 0, 0, 0));
            }
            self.code.push(ins(RET_K, 0, 0, libc::SECCOMP_RET_ALLOW));
            return Ok(());
        }
        let (left, right) = es.split_at(es.len() / 2);
        let node = self.code.len();
        if let Ok(skip) = u8::try_from(size(left)) {
            self.code.push(ins(JGE_K, skip, 0, right[0].nr));
            self.search(left)?;
        } else {
            // Past a conditional jump's reach: through a `ja`.
            self.code.push(ins(JGE_K, 0, 1, right[0].nr));
            self.code.push(ins(JA, 0, 0, 0));
            self.search(left)?;
            self.code[node + 1].k =
                u32::try_from(self.code.len() - node - 2).map_err(|_| "the program is too long")?;
        }
        self.search(right)
    }

    /// An entry's rules, one after the other: a condition that fails jumps
    /// to the next rule; past the last one the call is allowed.
    fn rules(&mut self, e: &Entry) -> Result<(), String> {
        for rule in &e.rules {
            let len: usize = rule.iter().map(|c| cond_len(c.op)).sum::<usize>() + 1;
            let mut left = len;
            for c in rule {
                self.code.push(ins(LD_W_ABS, 0, 0, arg_low(c.arg)));
                if let Op::MaskedEq(mask) = c.op {
                    self.code.push(ins(AND_K, 0, 0, mask));
                }
                left -= cond_len(c.op);
                // From the instruction after the jump to the rule's end.
                let next = u8::try_from(left).map_err(|_| "a rule is too long")?;
                self.code.push(match c.op {
                    Op::Eq | Op::MaskedEq(_) => ins(JEQ_K, 0, next, c.value),
                    Op::Ne => ins(JEQ_K, next, 0, c.value),
                });
            }
            self.code.push(ins(RET_K, 0, 0, e.ret));
        }
        self.code.push(ins(RET_K, 0, 0, libc::SECCOMP_RET_ALLOW));
        Ok(())
    }
}

/// The instructions `search` emits for `es`.
fn size(es: &[&Entry]) -> usize {
    if es.len() <= 1 {
        return 3 * es.len();
    }
    let (left, right) = es.split_at(es.len() / 2);
    let node = if size(left) > usize::from(u8::MAX) {
        2
    } else {
        1
    };
    node + size(left) + size(right)
}

fn cond_len(op: Op) -> usize {
    match op {
        Op::MaskedEq(_) => 3,
        Op::Eq | Op::Ne => 2,
    }
}

/// The offset of argument `arg`'s low 32 bits.
fn arg_low(arg: u8) -> u32 {
    let at = ARGS + 8 * u32::from(arg);
    if cfg!(target_endian = "little") {
        at
    } else {
        at + 4
    }
}

#[cfg(test)]
pub mod interpret {
    //! A classic-BPF interpreter for the instructions seccomp programs use,
    //! to compare programs on inputs.
    use libc::sock_filter;

    /// `struct seccomp_data`, as the filter sees it.
    #[derive(Clone, Copy, Debug)]
    pub struct Data {
        pub nr: u32,
        pub arch: u32,
        pub args: [u64; 6],
    }

    fn word(d: &Data, off: u32) -> u32 {
        let mut bytes = [0u8; 64];
        bytes[0..4].copy_from_slice(&d.nr.to_ne_bytes());
        bytes[4..8].copy_from_slice(&d.arch.to_ne_bytes());
        for (i, a) in d.args.iter().enumerate() {
            bytes[16 + 8 * i..24 + 8 * i].copy_from_slice(&a.to_ne_bytes());
        }
        let o = off as usize;
        u32::from_ne_bytes(bytes[o..o + 4].try_into().unwrap())
    }

    /// What `prog` returns for `d`.
    pub fn run(prog: &[sock_filter], d: &Data) -> u32 {
        let (mut a, mut pc) = (0u32, 0usize);
        loop {
            let i = prog[pc];
            pc += 1;
            match i.code {
                0x20 => a = word(d, i.k),
                0x54 => a &= i.k,
                0x05 => pc += i.k as usize,
                0x15 | 0x25 | 0x35 | 0x45 => {
                    let hit = match i.code {
                        0x15 => a == i.k,
                        0x25 => a > i.k,
                        0x35 => a >= i.k,
                        _ => a & i.k != 0,
                    };
                    pc += usize::from(if hit { i.jt } else { i.jf });
                }
                0x06 => return i.k,
                other => panic!("instruction {other:#x} not interpreted"),
            }
        }
    }

    /// What the kernel returns for a stack of filters (oldest first): the
    /// action of highest precedence; of equal ones the newest filter's.
    pub fn run_stack(progs: &[&[sock_filter]], d: &Data) -> u32 {
        let mut ret = libc::SECCOMP_RET_ALLOW;
        for p in progs.iter().rev() {
            let r = run(p, d);
            let action = |v: u32| (v & libc::SECCOMP_RET_ACTION_FULL) as i32;
            if action(r) < action(ret) {
                ret = r;
            }
        }
        ret
    }
}

#[cfg(test)]
mod tests {
    use super::interpret::{Data, run};
    use super::*;

    const EPERM: u32 = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;

    fn data(nr: u32, args: [u64; 6]) -> Data {
        Data {
            nr,
            arch: audit_arch().unwrap_or(0),
            args,
        }
    }

    #[test]
    fn rules_mean_what_a_rule_list_means() {
        let entries = vec![
            Entry {
                nr: 10,
                ret: EPERM,
                rules: vec![],
            },
            Entry {
                nr: 20,
                ret: EPERM,
                rules: vec![
                    vec![Cond {
                        arg: 0,
                        op: Op::Eq,
                        value: 7,
                    }],
                    vec![
                        Cond {
                            arg: 1,
                            op: Op::Ne,
                            value: 0,
                        },
                        Cond {
                            arg: 2,
                            op: Op::MaskedEq(0xf),
                            value: 3,
                        },
                    ],
                ],
            },
        ];
        let prog = compile(0xC000_003E, &entries).unwrap();
        let d = |nr, args| Data {
            nr,
            arch: 0xC000_003E,
            args,
        };
        assert_eq!(run(&prog, &d(10, [0; 6])), EPERM);
        assert_eq!(run(&prog, &d(11, [0; 6])), libc::SECCOMP_RET_ALLOW);
        assert_eq!(run(&prog, &d(9, [0; 6])), libc::SECCOMP_RET_ALLOW);
        assert_eq!(run(&prog, &d(20, [7, 0, 0, 0, 0, 0])), EPERM);
        // Only the low 32 bits count.
        assert_eq!(run(&prog, &d(20, [7 | 1 << 40, 0, 0, 0, 0, 0])), EPERM);
        assert_eq!(
            run(&prog, &d(20, [8, 0, 3, 0, 0, 0])),
            libc::SECCOMP_RET_ALLOW
        );
        assert_eq!(run(&prog, &d(20, [8, 1, 0x13, 0, 0, 0])), EPERM);
        assert_eq!(
            run(&prog, &d(20, [8, 1, 0x14, 0, 0, 0])),
            libc::SECCOMP_RET_ALLOW
        );
        assert_eq!(run(&prog, &d(X32_SYSCALL_BIT | 10, [0; 6])), EPERM);
        let foreign = Data {
            nr: 10,
            arch: 0x4000_0003,
            args: [0; 6],
        };
        assert_eq!(run(&prog, &foreign), libc::SECCOMP_RET_KILL_PROCESS);
    }

    #[test]
    fn any_number_of_entries_compiles_to_a_search() {
        for n in [1usize, 2, 3, 7, 64, 300] {
            let entries: Vec<Entry> = (0..n)
                .map(|i| Entry {
                    nr: (i * 3) as u32,
                    ret: EPERM,
                    rules: vec![],
                })
                .collect();
            let prog = compile(0xC000_003E, &entries).unwrap();
            for nr in 0..(n as u32 * 3 + 5) {
                let want = if nr % 3 == 0 && nr < n as u32 * 3 {
                    EPERM
                } else {
                    libc::SECCOMP_RET_ALLOW
                };
                assert_eq!(run(&prog, &data(nr, [0; 6])), want, "n={n} nr={nr}");
            }
        }
    }

    #[test]
    fn bad_entries_are_refused() {
        let e = |nr, rules| Entry {
            nr,
            ret: EPERM,
            rules,
        };
        assert!(compile(1, &[e(1, vec![]), e(1, vec![])]).is_err());
        assert!(compile(1, &[e(1, vec![vec![]])]).is_err());
        let far = Cond {
            arg: 6,
            op: Op::Eq,
            value: 0,
        };
        assert!(compile(1, &[e(1, vec![vec![far]])]).is_err());
    }
}
