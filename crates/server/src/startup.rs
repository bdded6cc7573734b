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
