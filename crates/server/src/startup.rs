//! Start-up work that waits for the first answer: the leftover sweep, the
//! git seal's check and the sandbox's warm-up each take a core of a small
//! machine for a while, and on a 49,000-file workspace the sweep walks all
//! of it. They start [`QUIET`] after the first request has been answered
//! (its answer is written by then, and a client's next request or two —
//! `tools/list` after `initialize` — are served uncontended), or after
//! [`GRACE`] without one, whichever comes first.

use std::sync::{Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long background start-up waits for the first request at most.
pub const GRACE: Duration = Duration::from_millis(250);

/// How long after the first answer background start-up begins: the
/// namespace probe and the sweep started while the first answer was being
/// written slowed it by about 2 ms on a 49,000-file workspace.
pub const QUIET: Duration = Duration::from_millis(50);

static ANSWERED: Mutex<bool> = Mutex::new(false);
static WAKE: Condvar = Condvar::new();

/// Called once a request has been answered (every call after the first
/// costs one uncontended lock).
pub fn answered() {
    let mut done = ANSWERED.lock().unwrap_or_else(PoisonError::into_inner);
    if !*done {
        *done = true;
        WAKE.notify_all();
    }
}

/// Runs `job` on a thread of its own at the lowest priority, [`QUIET`]
/// after the first answer is given, or once [`GRACE`] has passed.
pub fn after_first_answer(
    name: &str,
    job: impl FnOnce() + Send + 'static,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            ctm_exec_runtime::background_priority();
            let until = Instant::now() + GRACE;
            let mut done = ANSWERED.lock().unwrap_or_else(PoisonError::into_inner);
            while !*done {
                let left = until.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                done = WAKE
                    .wait_timeout(done, left)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
            }
            let answered = *done;
            drop(done);
            if answered {
                std::thread::sleep(QUIET);
            }
            job();
        })
}

static INSTRUCTIONS_LATER: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Says the client's first request is neither `initialize` nor
/// `server/discover` (seen in the input before serving): the workspace's
/// instructions, which only those need, are then made after the first
/// answer instead of beside start-up, where on a 49,000-file workspace
/// their index took 0.5 ms of the first `tools/list` answer.
pub fn instructions_later() {
    INSTRUCTIONS_LATER.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Whether [`instructions_later`] was said.
pub fn instructions_wait() -> bool {
    INSTRUCTIONS_LATER.load(std::sync::atomic::Ordering::Relaxed)
}

/// Whether `first` (bytes of input) holds a whole first request whose
/// method needs no instructions.
pub fn first_request_needs_no_instructions(first: &[u8]) -> bool {
    let Some(end) = first.iter().position(|&b| b == b'\n') else {
        return false;
    };
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(&first[..end]) else {
        return false;
    };
    v.get("method")
        .and_then(serde_json::Value::as_str)
        .is_some_and(|m| m != "initialize" && m != "server/discover")
}

#[cfg(test)]
mod tests {
    use super::first_request_needs_no_instructions as no_instructions;

    #[test]
    fn only_a_whole_first_request_other_than_the_handshakes_defers() {
        assert!(no_instructions(
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}\n"
        ));
        assert!(no_instructions(
            b"{\"method\": \"tools/call\", \"id\": 1}\n{\"method\":\"initialize\"}\n"
        ));
        for first in [
            &b""[..],
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}",
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\"}\n",
            b"{\"method\":\"server/discover\",\"id\":1}\n",
            b"not json\n",
            b"[{\"method\":\"tools/list\"}]\n",
        ] {
            assert!(
                !no_instructions(first),
                "{}",
                String::from_utf8_lossy(first)
            );
        }
    }
}
