//! A cancellation signal built on std alone, so this crate stays runtime-free.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

/// Fires when the request that owns it is cancelled (`notifications/cancelled`
/// on stdio, a closed connection over HTTP). Cloning shares the signal.
#[derive(Clone, Default)]
pub struct Cancellation(Arc<Inner>);

#[derive(Default)]
struct Inner {
    cancelled: AtomicBool,
    wakers: Mutex<Vec<Waker>>,
}

impl std::fmt::Debug for Cancellation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cancellation")
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}

impl Cancellation {
    /// A signal that has not fired.
    pub fn new() -> Self {
        Self::default()
    }

    /// Fires the signal; idempotent.
    pub fn cancel(&self) {
        self.0.cancelled.store(true, Ordering::SeqCst);
        let wakers = std::mem::take(&mut *self.lock());
        for w in wakers {
            w.wake();
        }
    }

    /// Whether the signal has fired.
    pub fn is_cancelled(&self) -> bool {
        self.0.cancelled.load(Ordering::SeqCst)
    }

    /// Resolves once the signal fires.
    pub fn cancelled(&self) -> Cancelled {
        Cancelled(self.clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Waker>> {
        self.0.wakers.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Future returned by [`Cancellation::cancelled`].
#[derive(Debug)]
pub struct Cancelled(Cancellation);

impl Future for Cancelled {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0.is_cancelled() {
            return Poll::Ready(());
        }
        {
            let mut wakers = self.0.lock();
            if !wakers.iter().any(|w| w.will_wake(cx.waker())) {
                wakers.push(cx.waker().clone());
            }
        }
        // Re-check after registering so a cancel between the two is not lost.
        if self.0.is_cancelled() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::Wake;

    struct Flag(AtomicBool);
    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    #[test]
    fn cancel_wakes_the_waiter() {
        let c = Cancellation::new();
        let flag = Arc::new(Flag(AtomicBool::new(false)));
        let waker = Waker::from(flag.clone());
        let mut cx = Context::from_waker(&waker);
        let mut fut = c.cancelled();
        assert!(Pin::new(&mut fut).poll(&mut cx).is_pending());
        c.clone().cancel();
        assert!(flag.0.load(Ordering::SeqCst));
        assert!(Pin::new(&mut fut).poll(&mut cx).is_ready());
        assert!(c.is_cancelled());
    }
}
