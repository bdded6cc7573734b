//! A process-wide bound on concurrent image decodes: each may hold about
//! 160 MB (40 MP of RGBA) plus its source, so `view_image` calls beyond the
//! bound wait their turn, within their wait budget.

use std::sync::Arc;
use std::time::Duration;

use ctm_protocol_eras::Cancellation;
use serde_json::json;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::envelope::{Category, ErrorCode, ToolError};

/// `view_image` calls that read and decode at once.
pub const MAX_CONCURRENT_DECODES: usize = 2;

/// The slots shared by every client of the server.
pub fn new_slots() -> Arc<Semaphore> {
    Arc::new(Semaphore::new(MAX_CONCURRENT_DECODES))
}

/// Waits for a slot, at most `wait`; the permit frees the slot when the
/// decode that holds it ends (move it into the blocking task).
pub async fn acquire(
    slots: &Arc<Semaphore>,
    wait: Duration,
    cancel: &Cancellation,
) -> Result<OwnedSemaphorePermit, ToolError> {
    tokio::select! {
        permit = tokio::time::timeout(wait, slots.clone().acquire_owned()) => match permit {
            Ok(Ok(p)) => Ok(p),
            // Never closed; a closed semaphore would be a server fault.
            Ok(Err(_)) | Err(_) => Err(busy(wait)),
        },
        () = cancel.cancelled() => Err(cancelled()),
    }
}

fn error(message: String, details: serde_json::Value, recovery: &str) -> ToolError {
    ToolError::new(ErrorCode::InternalError, message, details, recovery)
        .with_category(Category::Runtime)
        .with_retryable(true)
}

fn busy(wait: Duration) -> ToolError {
    error(
        format!(
            "every image decoder was busy for this call's whole wait budget ({} s); nothing was read",
            wait.as_secs()
        ),
        json!({"reason": "image_decoders_busy", "max_concurrent_decodes": MAX_CONCURRENT_DECODES, "waited_secs": wait.as_secs()}),
        "Other view_image calls were decoding large images the whole time: call again in a few seconds, or view fewer large images at once.",
    )
}

fn cancelled() -> ToolError {
    error(
        "the request was cancelled while it waited for an image decoder; nothing was read".into(),
        json!({"reason": "cancelled"}),
        "Call again if the image is still wanted.",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn callers_beyond_the_bound_wait_then_time_out_or_stop() {
        let slots = new_slots();
        let cancel = Cancellation::new();
        let short = Duration::from_millis(20);
        let held: Vec<_> = take_every_slot(&slots, &cancel).await;
        // Every slot is taken: the next caller waits its budget, then is told.
        let e = acquire(&slots, short, &cancel).await.unwrap_err();
        assert_eq!(e.details["reason"], "image_decoders_busy");
        assert_eq!(e.details["max_concurrent_decodes"], MAX_CONCURRENT_DECODES);
        assert!(e.retryable);
        let other = Cancellation::new();
        other.cancel();
        let e = acquire(&slots, Duration::from_secs(600), &other)
            .await
            .unwrap_err();
        assert_eq!(e.details["reason"], "cancelled");
        // A slot freed by a finished decode goes to the next caller.
        drop(held);
        let _next = acquire(&slots, short, &cancel).await.unwrap();
    }

    async fn take_every_slot(
        slots: &Arc<Semaphore>,
        cancel: &Cancellation,
    ) -> Vec<OwnedSemaphorePermit> {
        let mut held = Vec::new();
        for _ in 0..MAX_CONCURRENT_DECODES {
            held.push(
                acquire(slots, Duration::from_millis(20), cancel)
                    .await
                    .unwrap(),
            );
        }
        held
    }
}
