//! Idempotent retries of mutations: a caller names an attempt with a key,
//! and a retry of it (the answer was lost, the client timed out) replays the
//! recorded result instead of applying the change again.
//!
//! A slot is `(tool, key)`, bound to a fingerprint of the call's other
//! arguments. Only a successful write is recorded; a failure or a dry run
//! leaves the key free. Calls with one key in flight together run once: the
//! later ones wait for the first and replay it (or run, if it failed). The
//! store keeps the most recently used [`IdempotencyStore::capacity`]
//! records.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// Records kept by [`IdempotencyStore::default`].
pub const DEFAULT_IDEMPOTENCY_RECORDS: usize = 64;

/// Bytes of records kept by [`IdempotencyStore::default`] (as their
/// recorder measures them): a result larger than this is not kept.
pub const DEFAULT_IDEMPOTENCY_BYTES: usize = 16 * 1024 * 1024;

/// The longest key accepted (characters).
pub const MAX_IDEMPOTENCY_KEY_CHARS: usize = 128;

#[derive(Debug)]
enum Entry<R> {
    Running {
        fingerprint: String,
    },
    Done {
        fingerprint: String,
        result: R,
        bytes: usize,
    },
}

#[derive(Debug)]
struct Slot<R> {
    tool: String,
    key: String,
    entry: Entry<R>,
}

/// Recorded results of keyed calls, most recently used last.
#[derive(Debug)]
pub struct IdempotencyStore<R> {
    slots: Mutex<VecDeque<Slot<R>>>,
    settled: Condvar,
    capacity: usize,
    max_bytes: usize,
}

impl<R: Clone> Default for IdempotencyStore<R> {
    fn default() -> Self {
        Self::new(DEFAULT_IDEMPOTENCY_RECORDS)
    }
}

/// What a keyed call should do.
#[derive(Debug)]
pub enum Claim<'s, R: Clone> {
    /// Run it, then [`Ticket::record`] a success.
    Run(Ticket<'s, R>),
    /// It ran: answer this again, run nothing.
    Replay(R),
    /// The key was used with other arguments; its record stays.
    Reused,
    /// `stop` said to stop while another call with the key was running.
    Stopped,
}

/// The right to run a keyed call; dropped without a record, it frees the
/// key and wakes the calls waiting on it.
#[derive(Debug)]
pub struct Ticket<'s, R: Clone> {
    store: &'s IdempotencyStore<R>,
    tool: String,
    key: String,
    recorded: bool,
}

impl<R: Clone> IdempotencyStore<R> {
    /// A store keeping at most `capacity` records (at least one) of at
    /// most [`DEFAULT_IDEMPOTENCY_BYTES`] in all.
    pub fn new(capacity: usize) -> Self {
        Self::with_bytes(capacity, DEFAULT_IDEMPOTENCY_BYTES)
    }

    /// A store keeping at most `capacity` records of at most `max_bytes`
    /// in all.
    pub fn with_bytes(capacity: usize, max_bytes: usize) -> Self {
        Self {
            slots: Mutex::new(VecDeque::new()),
            settled: Condvar::new(),
            capacity: capacity.max(1),
            max_bytes,
        }
    }

    /// Records kept at most.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Records held now (finished calls).
    pub fn len(&self) -> usize {
        self.lock()
            .iter()
            .filter(|s| matches!(s.entry, Entry::Done { .. }))
            .count()
    }

    /// No record is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> MutexGuard<'_, VecDeque<Slot<R>>> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Claims `(tool, key)` for a call whose other arguments have
    /// `fingerprint`; waits while another call holds it, asking `stop`
    /// every few milliseconds whether to give up.
    pub fn claim(
        &self,
        tool: &str,
        key: &str,
        fingerprint: &str,
        stop: &dyn Fn() -> bool,
    ) -> Claim<'_, R> {
        let mut slots = self.lock();
        loop {
            let at = slots.iter().position(|s| s.tool == tool && s.key == key);
            match at.map(|i| &slots[i].entry) {
                None => {
                    slots.push_back(Slot {
                        tool: tool.to_owned(),
                        key: key.to_owned(),
                        entry: Entry::Running {
                            fingerprint: fingerprint.to_owned(),
                        },
                    });
                    return Claim::Run(Ticket {
                        store: self,
                        tool: tool.to_owned(),
                        key: key.to_owned(),
                        recorded: false,
                    });
                }
                Some(Entry::Done {
                    fingerprint: f,
                    result,
                    ..
                }) => {
                    if f != fingerprint {
                        return Claim::Reused;
                    }
                    let result = result.clone();
                    if let Some(i) = at
                        && let Some(slot) = slots.remove(i)
                    {
                        slots.push_back(slot);
                    }
                    return Claim::Replay(result);
                }
                Some(Entry::Running { fingerprint: f }) => {
                    if f != fingerprint {
                        return Claim::Reused;
                    }
                    if stop() {
                        return Claim::Stopped;
                    }
                    slots = self
                        .settled
                        .wait_timeout(slots, Duration::from_millis(20))
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
            }
        }
    }
}

impl<R: Clone> Ticket<'_, R> {
    /// Records the call's successful result for its retries; `bytes` is
    /// its size as the caller measures it. A result larger than the
    /// store's byte bound is not kept (a retry runs again), and the
    /// oldest records go past the bounds.
    pub fn record(mut self, result: R, bytes: usize) {
        if bytes > self.store.max_bytes {
            return;
        }
        let mut slots = self.store.lock();
        if let Some(s) = slots
            .iter_mut()
            .find(|s| s.tool == self.tool && s.key == self.key)
            && let Entry::Running { fingerprint } = &mut s.entry
        {
            let fingerprint = std::mem::take(fingerprint);
            s.entry = Entry::Done {
                fingerprint,
                result,
                bytes,
            };
        }
        self.recorded = true;
        let done = |s: &Slot<R>| match s.entry {
            Entry::Done { bytes, .. } => Some(bytes),
            Entry::Running { .. } => None,
        };
        loop {
            let (count, total) = slots
                .iter()
                .filter_map(done)
                .fold((0, 0usize), |(n, t), b| (n + 1, t.saturating_add(b)));
            if count <= self.store.capacity && total <= self.store.max_bytes {
                break;
            }
            let Some(i) = slots.iter().position(|s| done(s).is_some()) else {
                break;
            };
            slots.remove(i);
        }
        drop(slots);
        self.store.settled.notify_all();
    }
}

impl<R: Clone> Drop for Ticket<'_, R> {
    fn drop(&mut self) {
        if self.recorded {
            return;
        }
        let mut slots = self.store.lock();
        slots.retain(|s| {
            !(s.tool == self.tool && s.key == self.key && matches!(s.entry, Entry::Running { .. }))
        });
        drop(slots);
        self.store.settled.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn a_retry_replays_and_other_arguments_are_refused() {
        let store = IdempotencyStore::<u32>::new(2);
        match store.claim("t", "k", "f1", &|| false) {
            Claim::Run(t) => t.record(7, 1),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            store.claim("t", "k", "f1", &|| false),
            Claim::Replay(7)
        ));
        assert!(matches!(
            store.claim("t", "k", "f2", &|| false),
            Claim::Reused
        ));
        // Another tool has its own slot.
        assert!(matches!(
            store.claim("u", "k", "f2", &|| false),
            Claim::Run(_)
        ));
    }

    #[test]
    fn a_failure_leaves_the_key_free_and_records_are_bounded() {
        let store = IdempotencyStore::<u32>::new(2);
        drop(store.claim("t", "k", "f", &|| false));
        assert!(matches!(
            store.claim("t", "k", "f", &|| false),
            Claim::Run(_)
        ));
        for (k, v) in [("a", 1), ("b", 2), ("c", 3)] {
            if let Claim::Run(t) = store.claim("t", k, "f", &|| false) {
                t.record(v, 1);
            }
        }
        assert_eq!(store.len(), 2);
        assert!(matches!(
            store.claim("t", "a", "f", &|| false),
            Claim::Run(_)
        ));
        assert!(matches!(
            store.claim("t", "c", "f", &|| false),
            Claim::Replay(3)
        ));
    }

    #[test]
    fn records_are_bounded_by_bytes() {
        let store = IdempotencyStore::<u32>::with_bytes(64, 100);
        for (k, bytes) in [("a", 60), ("b", 60), ("big", 101)] {
            if let Claim::Run(t) = store.claim("t", k, "f", &|| false) {
                t.record(1, bytes);
            }
        }
        // "a" went for "b"; "big" was never kept (a retry runs again).
        assert!(matches!(
            store.claim("t", "a", "f", &|| false),
            Claim::Run(_)
        ));
        assert!(matches!(
            store.claim("t", "b", "f", &|| false),
            Claim::Replay(1)
        ));
        assert!(matches!(
            store.claim("t", "big", "f", &|| false),
            Claim::Run(_)
        ));
    }

    #[test]
    fn concurrent_calls_with_one_key_run_once() {
        let store = Arc::new(IdempotencyStore::<usize>::default());
        let runs = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (store, runs) = (store.clone(), runs.clone());
                std::thread::spawn(move || match store.claim("t", "k", "f", &|| false) {
                    Claim::Run(t) => {
                        std::thread::sleep(Duration::from_millis(50));
                        let n = runs.fetch_add(1, Ordering::SeqCst) + 1;
                        t.record(n, 1);
                        n
                    }
                    Claim::Replay(n) => n,
                    other => panic!("{other:?}"),
                })
            })
            .collect();
        let answers: Vec<usize> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert!(answers.iter().all(|n| *n == 1));
    }
}
