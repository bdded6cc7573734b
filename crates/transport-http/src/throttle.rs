//! Per-client fairness: connections held per address, and backoff after
//! failed credentials.
//!
//! Clients are keyed by address: an IPv4 address, or the /64 prefix of an
//! IPv6 one (a host usually owns a whole /64, so rotating addresses within
//! it gains nothing). An IPv4-mapped IPv6 address counts as its IPv4 one.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use ctm_auth::client_key;

/// Connections held per client key.
#[derive(Debug, Default)]
pub struct ConnectionCounts {
    held: Mutex<HashMap<IpAddr, usize>>,
}

/// One held connection; the count drops with it.
#[derive(Debug)]
pub struct ConnectionPermit {
    counts: Arc<ConnectionCounts>,
    key: IpAddr,
}

impl ConnectionCounts {
    /// A permit for one more connection from `ip`, unless it holds `max` already.
    pub fn acquire(self: &Arc<Self>, ip: IpAddr, max: usize) -> Option<ConnectionPermit> {
        let key = client_key(ip);
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let n = held.entry(key).or_insert(0);
        if *n >= max.max(1) {
            return None;
        }
        *n += 1;
        Some(ConnectionPermit {
            counts: self.clone(),
            key,
        })
    }
}

impl Drop for ConnectionPermit {
    fn drop(&mut self) {
        let mut held = self.counts.held.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = held.get_mut(&self.key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                held.remove(&self.key);
            }
        }
    }
}

/// Which credential failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Credential {
    /// A bearer token on `/mcp`.
    Bearer,
    /// The password of the OAuth authorize page.
    Password,
}

impl Credential {
    /// The name the trace uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Bearer => "bearer",
            Self::Password => "password",
        }
    }
}

/// Failures forgiven before any delay (typos).
pub const FREE_FAILURES: u32 = 5;
/// Longest delay between two attempts after failures.
pub const MAX_DELAY: Duration = Duration::from_secs(60);
/// Failures are forgotten after this long without one.
pub const FORGET_AFTER: Duration = Duration::from_secs(15 * 60);
/// Most keys tracked per credential kind. An entry still counting
/// failures is never evicted to admit a new key: when all are, a new key
/// is blocked (fail closed).
pub const MAX_TRACKED: usize = 4096;
/// Throttled attempts of one key are reported at most once per this long.
pub const REPORT_EVERY: Duration = Duration::from_secs(60);

/// What failures count under: a client address key (IPv4 address, IPv6
/// /64) and, for passwords, the digest of the OAuth `client_id` asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FailureKey {
    client: IpAddr,
    subject: Option<[u8; 32]>,
}

impl FailureKey {
    /// Failures of `ip`'s address key.
    pub fn address(ip: IpAddr) -> Self {
        Self {
            client: client_key(ip),
            subject: None,
        }
    }

    /// Failures of `ip`'s address key for one subject (a `client_id`).
    pub fn address_and(ip: IpAddr, subject: &str) -> Self {
        Self {
            client: client_key(ip),
            subject: Some(ctm_auth::credential_digest(subject.as_bytes())),
        }
    }

    /// The address key, as the trace shows it.
    pub fn client(&self) -> IpAddr {
        self.client
    }
}

/// Counts events and says when to report them: the first at once, then
/// the ones since at most once per [`REPORT_EVERY`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Tally {
    unreported: u32,
    reported_at: Option<Instant>,
}

impl Tally {
    /// Counts one event; `Some(n)` when a line reporting `n` events is due.
    pub fn note(&mut self, now: Instant) -> Option<u32> {
        self.unreported = self.unreported.saturating_add(1);
        let due = self
            .reported_at
            .is_none_or(|t| now.saturating_duration_since(t) >= REPORT_EVERY);
        due.then(|| {
            self.reported_at = Some(now);
            std::mem::take(&mut self.unreported)
        })
    }
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    failures: u32,
    last: Instant,
    blocked_until: Instant,
    throttled: Tally,
}

impl Entry {
    fn counting(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.last) < FORGET_AFTER
    }
}

/// What a failure did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failure {
    /// Failures counted for this key (within [`FORGET_AFTER`]); zero when
    /// the table was full and nothing could be recorded.
    pub failures: u32,
    /// How long the key must now wait before its next attempt is checked
    /// (zero within the free failures).
    pub delay: Duration,
}

/// An attempt that must wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Blocked {
    /// How long.
    pub wait: Duration,
    /// `Some(n)`: write one trace line for `n` throttled attempts (this one
    /// included); `None`: counted, reported later.
    pub report: Option<u32>,
}

/// Exponential backoff after failed credentials of one kind, per
/// [`FailureKey`]: the first [`FREE_FAILURES`] cost nothing, then each
/// further failure makes the key wait 1 s, 2 s, 4 s, ... up to
/// [`MAX_DELAY`]. The table holds [`MAX_TRACKED`] keys and fails closed:
/// an entry still counting failures is never evicted to admit a new key.
#[derive(Debug, Default)]
pub struct Backoff {
    entries: Mutex<HashMap<FailureKey, Entry>>,
    /// Attempts blocked because the table was full.
    overflow: Mutex<Tally>,
}

impl Backoff {
    /// Whether an attempt of `key` must wait. A key without an entry waits
    /// when the table is full of entries still counting (until the oldest
    /// is forgotten).
    pub fn check(&self, key: FailureKey, now: Instant) -> Option<Blocked> {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = entries.get_mut(&key) {
            return (e.blocked_until > now).then(|| Blocked {
                wait: e.blocked_until - now,
                report: e.throttled.note(now),
            });
        }
        let wait = room(&mut entries, now)?;
        drop(entries);
        let report = self
            .overflow
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .note(now);
        Some(Blocked { wait, report })
    }

    /// Records a failed attempt of `key`.
    pub fn fail(&self, key: FailureKey, now: Instant) -> Failure {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if !entries.contains_key(&key)
            && let Some(wait) = room(&mut entries, now)
        {
            return Failure {
                failures: 0,
                delay: wait,
            };
        }
        let e = entries.entry(key).or_insert(Entry {
            failures: 0,
            last: now,
            blocked_until: now,
            throttled: Tally::default(),
        });
        if !e.counting(now) {
            e.failures = 0;
        }
        e.failures = e.failures.saturating_add(1);
        e.last = now;
        let delay = match e.failures.checked_sub(FREE_FAILURES + 1) {
            None => Duration::ZERO,
            Some(n) => Duration::from_secs(1u64 << n.min(16)).min(MAX_DELAY),
        };
        e.blocked_until = now + delay;
        Failure {
            failures: e.failures,
            delay,
        }
    }

    /// Records a success: the key's failures are forgotten.
    pub fn succeed(&self, key: FailureKey) {
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&key);
    }
}

/// Makes room for one more key: forgets entries no longer counting. `None`
/// when there is room; else how long until the oldest entry is forgotten.
fn room(entries: &mut HashMap<FailureKey, Entry>, now: Instant) -> Option<Duration> {
    if entries.len() < MAX_TRACKED {
        return None;
    }
    entries.retain(|_, e| e.counting(now));
    if entries.len() < MAX_TRACKED {
        return None;
    }
    entries
        .values()
        .map(|e| FORGET_AFTER.saturating_sub(now.saturating_duration_since(e.last)))
        .min()
        .map(|w| w.max(Duration::from_secs(1)))
}

/// Password failures allowed server-wide, whatever their address, at once ...
pub const GLOBAL_PASSWORD_FAILURES: u32 = 20;
/// ... and then one per this long (20 a minute).
pub const GLOBAL_PASSWORD_EVERY: Duration = Duration::from_secs(3);

/// The server-wide budget of wrong passwords, on top of the per-key
/// backoff: it holds however many addresses a guesser rotates through.
/// Each attempt reserves one failure before the password is checked, and
/// gets it back unless the password was wrong, so concurrent attempts
/// cannot overdraw it.
#[derive(Debug)]
pub struct GlobalBudget {
    state: Mutex<(ctm_auth::TokenBucket, Tally)>,
}

impl Default for GlobalBudget {
    fn default() -> Self {
        Self::new(GLOBAL_PASSWORD_FAILURES, GLOBAL_PASSWORD_EVERY)
    }
}

impl GlobalBudget {
    /// A budget of `capacity` failures, one more every `every`.
    pub fn new(capacity: u32, every: Duration) -> Self {
        Self {
            state: Mutex::new((
                ctm_auth::TokenBucket::full(capacity, every, Instant::now()),
                Tally::default(),
            )),
        }
    }

    /// Reserves one failure for an attempt about to be checked.
    pub fn reserve(&self, now: Instant) -> Result<(), Blocked> {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.0.take(now).map_err(|wait| Blocked {
            wait,
            report: s.1.note(now),
        })
    }

    /// Returns a reservation whose attempt did not fail.
    pub fn release(&self) {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .0
            .refund();
    }
}

/// `auth_failure` trace lines written at once ...
pub const TRACE_BURST: u32 = 100;
/// ... and then one per this long (10 a second).
pub const TRACE_EVERY: Duration = Duration::from_millis(100);

/// A server-wide cap on `auth_failure` trace lines. Failures from rotating
/// addresses each have a fresh key, so aggregating per key alone does not
/// bound the trace; lines past the cap are counted instead, and the count
/// rides on the next line written.
#[derive(Debug)]
pub struct TraceBudget {
    state: Mutex<(ctm_auth::TokenBucket, u32)>,
}

impl Default for TraceBudget {
    fn default() -> Self {
        Self::new(TRACE_BURST, TRACE_EVERY)
    }
}

impl TraceBudget {
    /// `capacity` lines at once, then one per `every`.
    pub fn new(capacity: u32, every: Duration) -> Self {
        Self {
            state: Mutex::new((
                ctm_auth::TokenBucket::full(capacity, every, Instant::now()),
                0,
            )),
        }
    }

    /// `Some(n)` when a line may be written now, `n` being the lines
    /// suppressed since the last one; `None` (counted) when not.
    pub fn admit(&self, now: Instant) -> Option<u32> {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if s.0.take(now).is_ok() {
            Some(std::mem::take(&mut s.1))
        } else {
            s.1 = s.1.saturating_add(1);
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn connections_per_client() {
        let c = Arc::new(ConnectionCounts::default());
        let ip = ip("10.0.0.1");
        let other: IpAddr = "10.0.0.2".parse().unwrap();
        let held: Vec<_> = (0..3).map(|_| c.acquire(ip, 3).unwrap()).collect();
        assert!(c.acquire(ip, 3).is_none());
        assert!(c.acquire(other, 3).is_some());
        drop(held);
        assert!(c.acquire(ip, 3).is_some());
        assert!(c.held.lock().unwrap().is_empty());
    }

    #[test]
    fn backoff_doubles_and_is_per_key() {
        let b = Backoff::default();
        let k = FailureKey::address_and(ip("10.0.0.1"), "client-a");
        let other_client = FailureKey::address_and(ip("10.0.0.1"), "client-b");
        let other = FailureKey::address_and(ip("10.0.0.2"), "client-a");
        let t = Instant::now();
        for i in 1..=FREE_FAILURES {
            let f = b.fail(k, t);
            assert_eq!((f.failures, f.delay), (i, Duration::ZERO));
            assert_eq!(b.check(k, t), None);
        }
        let f = b.fail(k, t);
        assert_eq!(f.delay, Duration::from_secs(1));
        assert_eq!(
            b.check(k, t),
            Some(Blocked {
                wait: Duration::from_secs(1),
                report: Some(1)
            })
        );
        assert_eq!(b.check(other_client, t), None);
        assert_eq!(b.check(other, t), None);
        let t2 = t + Duration::from_secs(1);
        assert_eq!(b.check(k, t2), None);
        assert_eq!(b.fail(k, t2).delay, Duration::from_secs(2));
        let mut last = t2;
        for _ in 0..40 {
            last += MAX_DELAY;
            assert!(b.fail(k, last).delay <= MAX_DELAY);
        }
        // Forgotten after a quiet spell, and on success.
        let later = last + FORGET_AFTER;
        assert_eq!(b.fail(k, later).delay, Duration::ZERO);
        b.succeed(k);
        assert_eq!(b.fail(k, later).failures, 1);
    }

    /// See: attack review of issue 17, L4. Throttled attempts of one key
    /// make one report per REPORT_EVERY, carrying their count.
    #[test]
    fn attack_l4_throttled_attempts_are_reported_in_aggregate() {
        let b = Backoff::default();
        let k = FailureKey::address(ip("10.0.0.1"));
        let t = Instant::now();
        for _ in 0..FREE_FAILURES + 7 {
            b.fail(k, t);
        }
        let reports: Vec<u32> = (0..1000)
            .filter_map(|_| b.check(k, t).and_then(|x| x.report))
            .collect();
        assert_eq!(reports, vec![1]);
        // The next block, a window later, reports the 999 held back and itself.
        let t2 = t + REPORT_EVERY;
        assert!(b.fail(k, t2).delay > Duration::ZERO);
        assert_eq!(b.check(k, t2).and_then(|x| x.report), Some(1000));
        assert_eq!(b.check(k, t2).and_then(|x| x.report), None);
    }

    /// See: attack review of issue 17, M1. A full table never evicts an
    /// entry still counting to admit a new key: the new key is blocked.
    #[test]
    fn attack_m1_the_table_is_bounded_and_fails_closed() {
        let b = Backoff::default();
        let t = Instant::now();
        let keys: Vec<FailureKey> = (0..MAX_TRACKED as u32)
            .map(|i| FailureKey::address(IpAddr::from(i.to_be_bytes())))
            .collect();
        for k in &keys {
            b.fail(*k, t);
        }
        let t2 = t + Duration::from_secs(60);
        let newcomer = FailureKey::address(ip("203.0.113.9"));
        let blocked = b.check(newcomer, t2).unwrap();
        assert_eq!(blocked.wait, FORGET_AFTER - Duration::from_secs(60));
        assert_eq!(b.fail(newcomer, t2).failures, 0, "not recorded");
        // Every tracked key keeps its count: rounds of rotation gain nothing.
        for k in &keys {
            assert_eq!(b.fail(*k, t2).failures, 2);
        }
        assert!(b.entries.lock().unwrap().len() <= MAX_TRACKED);
        // Once entries are forgotten, there is room again.
        let t3 = t2 + FORGET_AFTER;
        assert_eq!(b.check(newcomer, t3), None);
        assert_eq!(b.fail(newcomer, t3).failures, 1);
    }

    /// See: attack review of issue 17, M1. The global budget holds across
    /// addresses, and reservations for attempts that did not fail return.
    #[test]
    fn attack_m1_global_budget_is_reserved_before_checking() {
        let g = GlobalBudget::new(3, Duration::from_secs(3));
        let t = Instant::now();
        for _ in 0..3 {
            g.reserve(t).unwrap();
        }
        let blocked = g.reserve(t).unwrap_err();
        assert_eq!(blocked.wait, Duration::from_secs(3));
        assert_eq!(blocked.report, Some(1));
        assert_eq!(g.reserve(t).unwrap_err().report, None);
        g.release();
        assert!(g.reserve(t).is_ok());
        assert!(g.reserve(t + Duration::from_secs(3)).is_ok());
    }

    /// See: attack review of issue 17, L4. Lines past the server-wide cap
    /// are counted, and the count is reported with the next line.
    #[test]
    fn attack_l4_trace_lines_are_capped_server_wide() {
        let b = TraceBudget::new(2, Duration::from_secs(1));
        let t = Instant::now();
        assert_eq!(b.admit(t), Some(0));
        assert_eq!(b.admit(t), Some(0));
        assert_eq!((0..500).filter_map(|_| b.admit(t)).count(), 0);
        assert_eq!(b.admit(t + Duration::from_secs(1)), Some(500));
        assert_eq!(b.admit(t + Duration::from_secs(1)), None);
    }
}
