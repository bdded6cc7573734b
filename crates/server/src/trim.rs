//! Gives freed heap back to the system once tool calls go quiet.
//!
//! A parallel search or walk allocates on many threads; glibc keeps what
//! they free in per-thread arenas, so a server that searched 500 MB sat at
//! three to seven times its idle RSS long after (issue 21). After calls end,
//! and once no call has ended for [`TRIM_DELAY`], `malloc_trim(0)` returns
//! the free pages of every arena. Calls that end meanwhile share one trim,
//! so a busy server trims at most about ten times a second, off the async
//! workers.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::Notify;

/// How long after the last call ends the heap is trimmed.
pub const TRIM_DELAY: Duration = Duration::from_millis(100);

/// Schedules trims; started on first use, inside the runtime.
#[derive(Default)]
pub struct Trimmer {
    ended: OnceLock<Arc<Notify>>,
}

impl Trimmer {
    /// A call ended: trim after [`TRIM_DELAY`] of quiet.
    pub fn call_ended(&self) {
        self.ended
            .get_or_init(|| {
                let ended = Arc::new(Notify::new());
                tokio::spawn(trim_after_calls(ended.clone()));
                ended
            })
            .notify_one();
    }
}

async fn trim_after_calls(ended: Arc<Notify>) {
    loop {
        ended.notified().await;
        // Every call that ends within the delay restarts it.
        while tokio::time::timeout(TRIM_DELAY, ended.notified())
            .await
            .is_ok()
        {}
        let _ = tokio::task::spawn_blocking(trim_heap).await;
    }
}

/// Above this size an allocation is its own mapping, unmapped when freed.
pub const MMAP_THRESHOLD: usize = 4 * 1024 * 1024;
/// Free memory at the top of an arena beyond this goes back at once.
pub const TRIM_THRESHOLD: usize = 4 * 1024 * 1024;

/// Fixes glibc's mmap threshold at [`MMAP_THRESHOLD`]. Left alone, glibc
/// raises it to the size of every mapped block that is freed (up to
/// 32 MiB), so after one large answer the next ones land in the arenas and
/// stay there: a server that had listed 49,000 files kept 30 MiB after a
/// trim, 14 MiB with the threshold fixed. Buffers of a read page (1 to
/// 2 MiB) stay below it and are reused, not mapped afresh.
///
/// Fixing it also stops glibc from moving the trim threshold along, so that
/// is set here too, to [`TRIM_THRESHOLD`]: a page's buffers (its text twice,
/// 2 MiB) are freed together, and with a threshold of 1 MiB each freed page
/// shrank its arena and the next page faulted its memory in again (a third
/// of the server's CPU per page: 2.0 ms against 1.3 ms with 4 MiB).
///
/// `malloc_trim` returns the free pages inside every arena but only the
/// main arena's top, so each further arena can keep up to the trim
/// threshold after work. With glibc's default of eight arenas per core
/// that was 22.6 MiB after the files bench at 4 MiB, with four per core
/// 20.7–25 MiB. The arenas are therefore limited to two per core
/// ([`arena_limit`]): 12.7 MiB after the same bench. Fewer cost speed:
/// with one per core `git_status` of 49,000 files was 12 % slower, with
/// one for all threads search was 40 % slower.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn tune_allocator() {
    let arenas = arena_limit();
    // SAFETY: mallopt sets allocator parameters; called before any thread
    // is started.
    #[expect(unsafe_code, reason = "glibc's mallopt has no safe wrapper")]
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD as libc::c_int);
        libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD as libc::c_int);
        libc::mallopt(libc::M_ARENA_MAX, arenas);
    }
}

/// Malloc arenas: two per core the process may use, at most 64 (what
/// stays after work is at most this many times [`TRIM_THRESHOLD`]).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn arena_limit() -> libc::c_int {
    let cores = std::thread::available_parallelism().map_or(2, usize::from);
    (2 * cores).clamp(2, 64) as libc::c_int
}

/// Other C libraries keep no such threshold.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn tune_allocator() {}

/// Returns the free pages of every malloc arena to the system.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn trim_heap() {
    // SAFETY: malloc_trim only walks the allocator's own free lists,
    // under each arena's lock; it takes no pointer from us.
    #[expect(unsafe_code, reason = "glibc's malloc_trim has no safe wrapper")]
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Other C libraries (musl) give freed pages back on their own.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn trim_heap() {}
