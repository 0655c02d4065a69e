//! Where an evaluation lets its caller take the thread back: between policies and between a
//! policy's steps, the engine asks the caller's [`Pause`] whether to stop for a moment, and if
//! so returns `Pending` once (waking itself at once) before going on. The engine keeps no clock
//! and knows no executor; the caller decides what a pause is for (the webhook moves a review
//! that has computed long enough off the threads that do I/O).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Whether the evaluation should pause where it stands (see the module's doc). A plain function:
/// what it reads (a clock, a thread-local) is the caller's.
#[derive(Clone, Copy)]
pub struct Pause(fn() -> bool);

impl Pause {
    /// A pause taken whenever `due` says so.
    pub fn new(due: fn() -> bool) -> Self {
        Pause(due)
    }

    pub(crate) fn due(&self) -> bool {
        (self.0)()
    }
}

impl std::fmt::Debug for Pause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Pause")
    }
}

/// Pending once, its task woken at once: the executor polls it again after whatever else, or
/// the caller moves it elsewhere.
pub(crate) struct YieldOnce(bool);

impl YieldOnce {
    pub(crate) fn new() -> Self {
        YieldOnce(false)
    }
}

impl Future for YieldOnce {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            return Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;

    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn a_yield_is_pending_once_and_wakes_its_task() {
        let woken = Arc::new(Count(AtomicUsize::new(0)));
        let waker = std::task::Waker::from(woken.clone());
        let mut cx = Context::from_waker(&waker);
        let mut once = YieldOnce::new();
        assert!(Pin::new(&mut once).poll(&mut cx).is_pending());
        assert_eq!(woken.0.load(Ordering::Relaxed), 1);
        assert!(Pin::new(&mut once).poll(&mut cx).is_ready());
    }
}
