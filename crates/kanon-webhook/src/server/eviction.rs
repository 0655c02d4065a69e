//! Telling a task to give up: a connection closed to make room for a new one, a body given up
//! for one that waits. Any thread may tell; the task awaits it beside its own work.

use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Notify;

/// Whether a task has been told to give up, and the means to wait for it.
#[derive(Debug, Default)]
pub(super) struct Eviction {
    told: AtomicBool,
    notify: Notify,
}

impl Eviction {
    /// Tells the task to give up (it may be waiting or not yet).
    pub(super) fn tell(&self) {
        self.told.store(true, Ordering::SeqCst);
        // Stores a permit when nobody waits, so a wait that starts later still ends.
        self.notify.notify_one();
    }

    /// Whether the task has been told.
    pub(super) fn is_told(&self) -> bool {
        self.told.load(Ordering::SeqCst)
    }

    /// Resolves once the task is told (at once if it was before).
    pub(super) async fn told(&self) {
        if self.is_told() {
            return;
        }
        self.notify.notified().await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_wait_ends_whether_told_before_or_during_it() {
        let before = Eviction::default();
        assert!(!before.is_told());
        before.tell();
        assert!(before.is_told());
        // Twice: the flag, not only the stored permit, ends later waits.
        for _ in 0..2 {
            tokio::time::timeout(Duration::from_secs(1), before.told())
                .await
                .expect("told before the wait");
        }
        let during = Arc::new(Eviction::default());
        let waiting = {
            let during = during.clone();
            tokio::spawn(async move { during.told().await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished());
        during.tell();
        tokio::time::timeout(Duration::from_secs(1), waiting)
            .await
            .expect("told during the wait")
            .unwrap();
    }
}
