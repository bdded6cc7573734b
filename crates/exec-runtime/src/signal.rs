//! Signals by name: what a kill sends and what ended a command.

/// A POSIX signal. The named variants are the signals a command commonly
/// ends by; any other number is [`Signal::Other`]. Build one from a number
/// with [`Signal::from_raw`], which never yields `Other` for a named signal
/// (equality compares numbers, so `Other(9) == Kill` either way).
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Signal {
    /// SIGHUP (1).
    Hup,
    /// SIGINT (2).
    Int,
    /// SIGQUIT (3).
    Quit,
    /// SIGILL (4).
    Ill,
    /// SIGTRAP (5).
    Trap,
    /// SIGABRT (6).
    Abrt,
    /// SIGBUS (7).
    Bus,
    /// SIGFPE (8).
    Fpe,
    /// SIGKILL (9).
    Kill,
    /// SIGUSR1 (10).
    Usr1,
    /// SIGSEGV (11).
    Segv,
    /// SIGUSR2 (12).
    Usr2,
    /// SIGPIPE (13).
    Pipe,
    /// SIGALRM (14).
    Alrm,
    /// SIGTERM (15).
    Term,
    /// SIGXCPU (24).
    Xcpu,
    /// SIGXFSZ (25).
    Xfsz,
    /// SIGSYS (31).
    Sys,
    /// Any other signal number.
    Other(i32),
}

const NAMED: [(Signal, i32, &str); 18] = [
    (Signal::Hup, 1, "SIGHUP"),
    (Signal::Int, 2, "SIGINT"),
    (Signal::Quit, 3, "SIGQUIT"),
    (Signal::Ill, 4, "SIGILL"),
    (Signal::Trap, 5, "SIGTRAP"),
    (Signal::Abrt, 6, "SIGABRT"),
    (Signal::Bus, 7, "SIGBUS"),
    (Signal::Fpe, 8, "SIGFPE"),
    (Signal::Kill, 9, "SIGKILL"),
    (Signal::Usr1, 10, "SIGUSR1"),
    (Signal::Segv, 11, "SIGSEGV"),
    (Signal::Usr2, 12, "SIGUSR2"),
    (Signal::Pipe, 13, "SIGPIPE"),
    (Signal::Alrm, 14, "SIGALRM"),
    (Signal::Term, 15, "SIGTERM"),
    (Signal::Xcpu, 24, "SIGXCPU"),
    (Signal::Xfsz, 25, "SIGXFSZ"),
    (Signal::Sys, 31, "SIGSYS"),
];

impl Signal {
    /// The signal with number `raw`.
    pub fn from_raw(raw: i32) -> Self {
        NAMED
            .iter()
            .find(|(_, n, _)| *n == raw)
            .map_or(Self::Other(raw), |(s, _, _)| *s)
    }

    /// The signal's number.
    pub fn as_raw(self) -> i32 {
        match self {
            Self::Other(n) => n,
            named => NAMED
                .iter()
                .find(|(s, _, _)| std::mem::discriminant(s) == std::mem::discriminant(&named))
                .map_or(0, |(_, n, _)| *n),
        }
    }

    /// Stable name: `SIGTERM`, `SIGKILL`, ...; `SIGNAL` for a number
    /// without a named variant.
    pub fn as_str(self) -> &'static str {
        let raw = self.as_raw();
        NAMED
            .iter()
            .find(|(_, n, _)| *n == raw)
            .map_or("SIGNAL", |(_, _, name)| name)
    }

    /// The signal for system calls; `None` for a number the kernel does
    /// not name (a realtime or unknown signal).
    pub(crate) fn to_rustix(self) -> Option<rustix::process::Signal> {
        rustix::process::Signal::from_named_raw(self.as_raw())
    }
}

impl PartialEq for Signal {
    fn eq(&self, other: &Self) -> bool {
        self.as_raw() == other.as_raw()
    }
}

impl Eq for Signal {}

impl std::hash::Hash for Signal {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_raw().hash(state);
    }
}

impl std::fmt::Display for Signal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::Signal;

    #[test]
    fn names_and_numbers_round_trip() {
        for raw in 0..70 {
            assert_eq!(Signal::from_raw(raw).as_raw(), raw);
        }
        assert_eq!(Signal::from_raw(9), Signal::Kill);
        assert_eq!(Signal::Other(9), Signal::Kill);
        assert_eq!(Signal::Kill.as_str(), "SIGKILL");
        assert_eq!(Signal::Term.to_string(), "SIGTERM");
        assert_eq!(Signal::from_raw(17).as_str(), "SIGNAL");
        assert!(matches!(Signal::from_raw(34), Signal::Other(34)));
        assert_eq!(Signal::Int.to_rustix(), Some(rustix::process::Signal::INT));
    }
}
