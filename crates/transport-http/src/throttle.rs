//! Per-client fairness: connections held per address, and backoff after
//! failed credentials.
//!
//! Clients are keyed by address: an IPv4 address, or the /64 prefix of an
//! IPv6 one (a host usually owns a whole /64, so rotating addresses within
//! it gains nothing). An IPv4-mapped IPv6 address counts as its IPv4 one.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The key a client address counts under.
pub fn client_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let s = v6.segments();
            IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
        }
        v4 => v4,
    }
}

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
/// Most clients tracked; beyond, the entry blocked for the shortest time goes.
pub const MAX_TRACKED: usize = 4096;
/// Most known-good credential digests kept.
const MAX_GOOD: usize = 1024;

#[derive(Debug, Clone, Copy)]
struct Entry {
    failures: u32,
    last: Instant,
    blocked_until: Instant,
}

/// What a failure did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failure {
    /// Failures counted for this client (within [`FORGET_AFTER`]).
    pub failures: u32,
    /// How long the client must now wait before its next attempt (zero
    /// within the free failures).
    pub delay: Duration,
}

/// Exponential backoff after failed credentials, per client key and
/// credential kind: the first [`FREE_FAILURES`] cost nothing, then each
/// further failure makes the client wait 1 s, 2 s, 4 s, ... up to
/// [`MAX_DELAY`] before its next attempt is even checked. Credentials that
/// succeeded before stay usable during a block, so an attacker sharing an
/// address with a working client does not lock it out.
#[derive(Debug, Default)]
pub struct Backoff {
    entries: Mutex<HashMap<(Credential, IpAddr), Entry>>,
    good: Mutex<HashSet<[u8; 32]>>,
}

impl Backoff {
    /// How long `ip` must still wait before a `kind` attempt is checked.
    pub fn wait(&self, kind: Credential, ip: IpAddr, now: Instant) -> Option<Duration> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let e = entries.get(&(kind, client_key(ip)))?;
        (e.blocked_until > now).then(|| e.blocked_until - now)
    }

    /// Records a failed `kind` attempt from `ip`.
    pub fn fail(&self, kind: Credential, ip: IpAddr, now: Instant) -> Failure {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let key = (kind, client_key(ip));
        if !entries.contains_key(&key) && entries.len() >= MAX_TRACKED {
            entries.retain(|_, e| now.duration_since(e.last) < FORGET_AFTER);
            if entries.len() >= MAX_TRACKED
                && let Some(k) = entries
                    .iter()
                    .min_by_key(|(_, e)| e.blocked_until)
                    .map(|(k, _)| *k)
            {
                entries.remove(&k);
            }
        }
        let e = entries.entry(key).or_insert(Entry {
            failures: 0,
            last: now,
            blocked_until: now,
        });
        if now.duration_since(e.last) >= FORGET_AFTER {
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

    /// Records a success: the client's failures are forgotten, and the
    /// credential (its digest) is known good.
    pub fn succeed(&self, kind: Credential, ip: IpAddr, digest: Option<[u8; 32]>) {
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&(kind, client_key(ip)));
        if let Some(d) = digest {
            let mut good = self.good.lock().unwrap_or_else(|p| p.into_inner());
            if good.len() >= MAX_GOOD {
                good.clear();
            }
            good.insert(d);
        }
    }

    /// Whether a credential with this digest succeeded before.
    pub fn known_good(&self, digest: &[u8; 32]) -> bool {
        self.good
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(digest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys() {
        let v4: IpAddr = "10.1.2.3".parse().unwrap();
        assert_eq!(client_key(v4), v4);
        let mapped: IpAddr = "::ffff:10.1.2.3".parse().unwrap();
        assert_eq!(client_key(mapped), v4);
        let a: IpAddr = "2001:db8:1:2:3:4:5:6".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:ffff::1".parse().unwrap();
        assert_eq!(client_key(a), client_key(b));
    }

    #[test]
    fn connections_per_client() {
        let c = Arc::new(ConnectionCounts::default());
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        let other: IpAddr = "10.0.0.2".parse().unwrap();
        let held: Vec<_> = (0..3).map(|_| c.acquire(ip, 3).unwrap()).collect();
        assert!(c.acquire(ip, 3).is_none());
        assert!(c.acquire(other, 3).is_some());
        drop(held);
        assert!(c.acquire(ip, 3).is_some());
        assert!(c.held.lock().unwrap().is_empty());
    }

    #[test]
    fn backoff_doubles_and_is_per_client() {
        let b = Backoff::default();
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        let other: IpAddr = "10.0.0.2".parse().unwrap();
        let t = Instant::now();
        for i in 1..=FREE_FAILURES {
            let f = b.fail(Credential::Password, ip, t);
            assert_eq!((f.failures, f.delay), (i, Duration::ZERO));
            assert_eq!(b.wait(Credential::Password, ip, t), None);
        }
        let f = b.fail(Credential::Password, ip, t);
        assert_eq!(f.delay, Duration::from_secs(1));
        assert_eq!(
            b.wait(Credential::Password, ip, t),
            Some(Duration::from_secs(1))
        );
        assert_eq!(b.wait(Credential::Bearer, ip, t), None);
        assert_eq!(b.wait(Credential::Password, other, t), None);
        let t2 = t + Duration::from_secs(1);
        assert_eq!(b.wait(Credential::Password, ip, t2), None);
        assert_eq!(
            b.fail(Credential::Password, ip, t2).delay,
            Duration::from_secs(2)
        );
        let mut last = t2;
        for _ in 0..40 {
            last += MAX_DELAY;
            assert!(b.fail(Credential::Password, ip, last).delay <= MAX_DELAY);
        }
        // Forgotten after a quiet spell, and on success.
        let later = last + FORGET_AFTER;
        assert_eq!(
            b.fail(Credential::Password, ip, later).delay,
            Duration::ZERO
        );
        b.succeed(Credential::Password, ip, Some([1; 32]));
        assert!(b.known_good(&[1; 32]));
        assert_eq!(b.fail(Credential::Password, ip, later).failures, 1);
    }

    #[test]
    fn the_table_is_bounded() {
        let b = Backoff::default();
        let t = Instant::now();
        for i in 0..(MAX_TRACKED as u32 + 100) {
            b.fail(Credential::Bearer, IpAddr::from(i.to_be_bytes()), t);
        }
        assert!(b.entries.lock().unwrap().len() <= MAX_TRACKED);
    }
}
