//! Evaluation slots: how many reviews compute at once (`max_concurrent_reviews`).
//!
//! A slot stands for a core's worth of work, so a review gives its slot back while it only
//! waits (a lookup, a program in a worker process) and takes one again to go on. Reviews
//! waiting on a slow lookup target therefore never hold up reviews that need no lookup.

use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::{AcquireError, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// One review's hold on the evaluation slots.
pub struct Slot {
    slots: Arc<Semaphore>,
    state: Mutex<Held>,
}

struct Held {
    permit: Option<OwnedSemaphorePermit>,
    /// Waits in progress: the slot is given back for the first and taken again after the last.
    waits: usize,
}

/// Ends a wait even when its future is dropped.
struct Waiting<'a>(&'a Slot);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut held = self.0.held();
        held.waits = held.waits.saturating_sub(1);
    }
}

impl Slot {
    /// Waits for a free slot among `slots`; an error once the semaphore is closed (shutdown).
    pub async fn acquire(slots: Arc<Semaphore>) -> Result<Slot, AcquireError> {
        let permit = slots.clone().acquire_owned().await?;
        Ok(Slot {
            slots,
            state: Mutex::new(Held {
                permit: Some(permit),
                waits: 0,
            }),
        })
    }

    fn held(&self) -> MutexGuard<'_, Held> {
        // The state stays consistent whatever panicked while it was held.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the review holds a slot now.
    #[cfg(test)]
    fn holding(&self) -> bool {
        self.held().permit.is_some()
    }

    /// Awaits `future` without the slot, then takes a slot again, waiting at most until
    /// `deadline` (past it the review goes on without one: the engine then stops at its
    /// deadline and the answer is quick).
    pub async fn away<F: Future>(&self, deadline: Instant, future: F) -> F::Output {
        let waiting = {
            let mut held = self.held();
            held.waits += 1;
            held.permit = None;
            Waiting(self)
        };
        let output = future.await;
        drop(waiting);
        let wanted = {
            let held = self.held();
            held.waits == 0 && held.permit.is_none()
        };
        if wanted
            && let Ok(Ok(permit)) =
                tokio::time::timeout_at(deadline, self.slots.clone().acquire_owned()).await
        {
            let mut held = self.held();
            if held.permit.is_none() {
                held.permit = Some(permit);
            }
        }
        output
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_waiting_review_lets_another_one_compute() {
        let slots = Arc::new(Semaphore::new(1));
        let first = Slot::acquire(slots.clone()).await.expect("a free slot");
        let deadline = Instant::now() + Duration::from_secs(5);
        let second = async {
            // Only possible once the first has given its slot back.
            let second = Slot::acquire(slots.clone())
                .await
                .expect("the slot given back");
            assert!(second.holding());
            drop(second);
        };
        // The first waits (as on a lookup) until the second has run.
        let (_, ()) = tokio::join!(
            first.away(deadline, tokio::time::sleep(Duration::from_millis(50))),
            second
        );
        assert!(first.holding(), "the slot is taken again after the wait");
        assert_eq!(slots.available_permits(), 0);
        drop(first);
        assert_eq!(slots.available_permits(), 1);
    }

    #[tokio::test]
    async fn the_slot_is_taken_again_only_by_the_deadline() {
        let slots = Arc::new(Semaphore::new(1));
        let first = Slot::acquire(slots.clone()).await.expect("a free slot");
        let deadline = Instant::now() + Duration::from_millis(100);
        let mut other = None;
        first
            .away(deadline, async {
                // Someone else takes the slot while the first waits, and keeps it.
                other = Some(
                    slots
                        .clone()
                        .acquire_owned()
                        .await
                        .expect("the slot given back"),
                );
            })
            .await;
        assert!(
            !first.holding(),
            "past the deadline the review goes on without a slot"
        );
        drop(other);
        drop(first);
        assert_eq!(slots.available_permits(), 1);
    }

    #[tokio::test]
    async fn nested_waits_give_the_slot_back_once() {
        let slots = Arc::new(Semaphore::new(2));
        let slot = Slot::acquire(slots.clone()).await.expect("a free slot");
        let deadline = Instant::now() + Duration::from_secs(5);
        slot.away(deadline, async {
            assert_eq!(slots.available_permits(), 2);
            slot.away(deadline, async {}).await;
            // The inner wait ended, the outer one goes on: still without a slot.
            assert!(!slot.holding());
        })
        .await;
        assert!(slot.holding());
        assert_eq!(slots.available_permits(), 1);
    }
}
