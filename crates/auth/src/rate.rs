//! Rate limits shared by the authorization server and the HTTP transport:
//! the key a client address counts under, and a token bucket.

use std::net::{IpAddr, Ipv6Addr};
use std::time::{Duration, Instant};

/// The key a client address counts under: an IPv4 address, or the /64
/// prefix of an IPv6 one (a host usually owns a whole /64, so rotating
/// addresses within it gains nothing). An IPv4-mapped IPv6 address counts
/// as its IPv4 one.
pub fn client_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let s = v6.segments();
            IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
        }
        v4 => v4,
    }
}

/// A token bucket: `capacity` tokens, one more every `every`. Callers lock
/// it themselves (it lives inside their tables).
#[derive(Debug, Clone, Copy)]
pub struct TokenBucket {
    capacity: u32,
    every: Duration,
    tokens: u32,
    /// When the next token starts to accrue.
    since: Instant,
}

impl TokenBucket {
    /// A full bucket.
    pub fn full(capacity: u32, every: Duration, now: Instant) -> Self {
        Self {
            capacity: capacity.max(1),
            every: every.max(Duration::from_millis(1)),
            tokens: capacity.max(1),
            since: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        if self.tokens >= self.capacity {
            self.since = now;
            return;
        }
        let elapsed = now.saturating_duration_since(self.since);
        let earned = (elapsed.as_nanos() / self.every.as_nanos()).min(u128::from(self.capacity));
        // `earned` is at most `capacity`, a u32.
        let earned = u32::try_from(earned).unwrap_or(self.capacity);
        self.tokens = (self.tokens + earned).min(self.capacity);
        self.since = if self.tokens >= self.capacity {
            now
        } else {
            self.since + self.every * earned
        };
    }

    /// Takes a token, or says how long until one is there.
    pub fn take(&mut self, now: Instant) -> Result<(), Duration> {
        self.refill(now);
        if self.tokens > 0 {
            self.tokens -= 1;
            Ok(())
        } else {
            Err(self
                .every
                .saturating_sub(now.saturating_duration_since(self.since)))
        }
    }

    /// Gives back a token taken for an attempt that did not count.
    pub fn refund(&mut self) {
        self.tokens = (self.tokens + 1).min(self.capacity);
    }

    /// Whether the bucket is full at `now` (it then carries no state).
    pub fn is_full(&mut self, now: Instant) -> bool {
        self.refill(now);
        self.tokens >= self.capacity
    }

    /// Tokens left at `now`.
    pub fn available(&mut self, now: Instant) -> u32 {
        self.refill(now);
        self.tokens
    }
}

/// Whole seconds to announce in `Retry-After` for `wait` (at least 1).
pub fn retry_after_secs(wait: Duration) -> u64 {
    (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1)
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
    fn bucket_refills_one_token_per_period() {
        let t = Instant::now();
        let s = Duration::from_secs(1);
        let mut b = TokenBucket::full(3, s, t);
        for _ in 0..3 {
            assert_eq!(b.take(t), Ok(()));
        }
        assert_eq!(b.take(t), Err(s));
        assert_eq!(
            b.take(t + Duration::from_millis(400)),
            Err(Duration::from_millis(600))
        );
        assert_eq!(b.take(t + s), Ok(()));
        assert!(b.take(t + s).is_err());
        b.refund();
        assert_eq!(b.take(t + s), Ok(()));
        // A long pause refills to capacity, never beyond.
        assert_eq!(b.available(t + 100 * s), 3);
        assert!(b.is_full(t + 100 * s));
        assert_eq!(retry_after_secs(Duration::from_millis(1)), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(2500)), 3);
        assert_eq!(retry_after_secs(Duration::ZERO), 1);
    }
}
