//! The repeat-failure breaker of catalog 0.5: the third byte-identical call
//! of one that already failed twice the same deterministic way is refused
//! (`REPEATED_CALL_BLOCKED`) instead of run again.
//!
//! Keyed on the tool and a fingerprint of its arguments (members sorted,
//! `idempotency_key` left out), then on the error code. Counted: failures
//! that are not retryable, and the retryable ones whose retry must change
//! the call (a stale revision, a patch whose context is missing). Never
//! counted: failures that depend on time (a conflict, a full command
//! table), a reused idempotency key, and arguments the schema refuses. A
//! success of the same call clears its counts; a write to the workspace
//! (a mutation that changed files, a command seen finished) clears all of
//! them, since "this can never succeed" was judged against a tree that
//! changed.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

/// Identical failures answered before the next identical call is refused.
pub const REPEAT_FAILURE_LIMIT: u32 = 2;

/// Calls remembered (least recently used first out).
pub const BREAKER_CAPACITY: usize = 256;

/// Finished commands remembered, so each clears the counts once.
const FINISHED_COMMANDS: usize = 256;

/// Retryable codes whose retry has to carry other arguments: an identical
/// repeat of one is as certain to fail as a non-retryable failure.
const RETRY_CHANGES_THE_CALL: [&str; 4] = [
    "PATCH_CONTEXT_NOT_FOUND",
    "PATCH_CONTEXT_AMBIGUOUS",
    "REVISION_MISMATCH",
    "REVISION_REQUIRED",
];

/// Codes never counted.
const NEVER_COUNTED: [&str; 2] = ["IDEMPOTENCY_KEY_REUSED", "REPEATED_CALL_BLOCKED"];

/// A call: its tool and the fingerprint of its arguments.
type Call = (String, String);

/// Consecutive failures of one call, per error code.
type Counts = HashMap<&'static str, u32>;

#[derive(Default)]
struct State {
    /// Each call's counts, least recently used first.
    calls: VecDeque<(Call, Counts)>,
    /// Bumped by every reset: a call that began before one does not count.
    generation: u64,
    finished: VecDeque<String>,
}

/// See the module documentation.
#[derive(Default)]
pub struct Breaker {
    state: Mutex<State>,
}

impl Breaker {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The current generation, taken before a call runs.
    pub fn generation(&self) -> u64 {
        self.lock().generation
    }

    /// The calls tracked now.
    pub fn tracked(&self) -> usize {
        self.lock().calls.len()
    }

    /// The code this exact call has already failed with `limit` times.
    pub fn blocked(&self, tool: &str, fingerprint: &str) -> Option<&'static str> {
        let mut s = self.lock();
        let at = s
            .calls
            .iter()
            .position(|((t, f), _)| t == tool && f == fingerprint)?;
        let entry = s.calls.remove(at)?;
        let code = entry
            .1
            .iter()
            .find(|(_, n)| **n >= REPEAT_FAILURE_LIMIT)
            .map(|(c, _)| *c);
        s.calls.push_back(entry);
        code
    }

    /// Counts a failure; the consecutive count of its code (0: not counted).
    pub fn failure(
        &self,
        tool: &str,
        fingerprint: &str,
        code: &'static str,
        retryable: bool,
        generation: u64,
    ) -> u32 {
        if NEVER_COUNTED.contains(&code) || (retryable && !RETRY_CHANGES_THE_CALL.contains(&code)) {
            return 0;
        }
        let mut s = self.lock();
        if s.generation != generation {
            return 0;
        }
        let key = (tool.to_owned(), fingerprint.to_owned());
        let mut counts = match s.calls.iter().position(|(k, _)| *k == key) {
            Some(i) => s.calls.remove(i).map(|(_, c)| c).unwrap_or_default(),
            None => HashMap::new(),
        };
        let n = counts.entry(code).or_insert(0);
        *n += 1;
        let n = *n;
        s.calls.push_back((key, counts));
        while s.calls.len() > BREAKER_CAPACITY {
            s.calls.pop_front();
        }
        n
    }

    /// The same call just worked: its history goes.
    pub fn success(&self, tool: &str, fingerprint: &str, generation: u64) {
        let mut s = self.lock();
        if s.generation == generation {
            s.calls
                .retain(|((t, f), _)| !(t == tool && f == fingerprint));
        }
    }

    /// The workspace changed: every verdict is stale.
    pub fn reset(&self) {
        let mut s = self.lock();
        s.calls.clear();
        s.generation += 1;
    }

    /// A command was seen finished: the counts clear, once per command.
    pub fn command_finished(&self, command_id: &str) {
        let mut s = self.lock();
        if s.finished.iter().any(|c| c == command_id) {
            return;
        }
        s.finished.push_back(command_id.to_owned());
        while s.finished.len() > FINISHED_COMMANDS {
            s.finished.pop_front();
        }
        s.calls.clear();
        s.generation += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_third_identical_failure_is_refused() {
        let b = Breaker::default();
        let g = b.generation();
        assert_eq!(b.failure("read_file", "f", "NOT_FOUND", false, g), 1);
        assert_eq!(b.blocked("read_file", "f"), None);
        assert_eq!(b.failure("read_file", "f", "NOT_FOUND", false, g), 2);
        assert_eq!(b.blocked("read_file", "f"), Some("NOT_FOUND"));
        // Other arguments, another tool: their own counts.
        assert_eq!(b.blocked("read_file", "g"), None);
        assert_eq!(b.blocked("list_dir", "f"), None);
        b.success("read_file", "f", g);
        assert_eq!(b.blocked("read_file", "f"), None);
    }

    #[test]
    fn only_failures_a_retry_cannot_fix_count() {
        let b = Breaker::default();
        let g = b.generation();
        assert_eq!(b.failure("t", "f", "PATCH_CONFLICT", true, g), 0);
        assert_eq!(b.failure("t", "f", "IDEMPOTENCY_KEY_REUSED", false, g), 0);
        assert_eq!(b.failure("t", "f", "REVISION_MISMATCH", true, g), 1);
        // A failure of a call that began before a reset does not count.
        b.reset();
        assert_eq!(b.failure("t", "f", "REVISION_MISMATCH", true, g), 0);
        assert_eq!(b.tracked(), 0);
    }

    #[test]
    fn a_finished_command_clears_the_counts_once() {
        let b = Breaker::default();
        b.failure("t", "f", "NOT_FOUND", false, 0);
        b.command_finished("c1");
        assert_eq!(b.tracked(), 0);
        let g = b.generation();
        b.failure("t", "f", "NOT_FOUND", false, g);
        b.command_finished("c1");
        assert_eq!(b.tracked(), 1);
    }
}
