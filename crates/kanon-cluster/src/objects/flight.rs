//! Reads of the same key at the same time share one read (single flight): sixteen reviews
//! that miss the cache for the same listing cause one LIST, and hold one copy of its objects.
//!
//! The read runs as long as one of its callers waits for it; when every caller has given up
//! (their reviews' deadlines passed), it is dropped with whatever it held, and the next caller
//! starts afresh.

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures::FutureExt;
use futures::future::{BoxFuture, Shared, WeakShared};

/// A read in flight, as every caller awaits it.
pub(super) type Flight<T> = Shared<BoxFuture<'static, T>>;

/// A read in flight as the map of reads holds it: its number, and a handle that does not keep
/// it running.
type Running<K, T> = HashMap<K, (u64, WeakShared<BoxFuture<'static, T>>)>;

/// The reads in flight, by key.
pub(super) struct Flights<K, T> {
    next: AtomicU64,
    running: Mutex<Running<K, T>>,
}

impl<K, T> Default for Flights<K, T> {
    fn default() -> Self {
        Flights {
            next: AtomicU64::new(0),
            running: Mutex::new(HashMap::new()),
        }
    }
}

impl<K, T> Flights<K, T>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    T: Clone + Send + Sync + 'static,
{
    /// The read of `key` in flight, or a new one from `start`; and whether it joined one.
    pub(super) fn join<F>(self: &Arc<Self>, key: &K, start: impl FnOnce() -> F) -> (Flight<T>, bool)
    where
        F: Future<Output = T> + Send + 'static,
    {
        let mut running = self.running();
        if let Some(flight) = running.get(key).and_then(|(_, weak)| weak.upgrade()) {
            return (flight, true);
        }
        // Keys whose callers all gave up are dropped here too, so the map stays as small as
        // the reads really running.
        if running.len() >= 64 {
            running.retain(|_, (_, weak)| weak.upgrade().is_some());
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let read = start();
        let flights = Arc::downgrade(self);
        let done_key = key.clone();
        let flight = async move {
            let output = read.await;
            if let Some(flights) = flights.upgrade() {
                let mut running = flights.running();
                if running.get(&done_key).is_some_and(|(at, _)| *at == id) {
                    running.remove(&done_key);
                }
            }
            output
        }
        .boxed()
        .shared();
        if let Some(weak) = flight.downgrade() {
            running.insert(key.clone(), (id, weak));
        }
        (flight, false)
    }

    fn running(&self) -> std::sync::MutexGuard<'_, Running<K, T>> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn sixteen_callers_of_one_key_share_one_read() {
        let flights: Arc<Flights<&str, Arc<Vec<u8>>>> = Arc::default();
        let reads = Arc::new(AtomicUsize::new(0));
        let calls = (0..16).map(|_| {
            let (flights, reads) = (flights.clone(), reads.clone());
            tokio::spawn(async move {
                let (flight, joined) = flights.join(&"configmaps in t", || async move {
                    reads.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    Arc::new(vec![0u8; 1 << 20])
                });
                (flight.await, joined)
            })
        });
        let answers = futures::future::join_all(calls).await;
        assert_eq!(reads.load(Ordering::SeqCst), 1);
        let answers: Vec<_> = answers.into_iter().map(|a| a.expect("a caller")).collect();
        assert_eq!(answers.iter().filter(|(_, joined)| !joined).count(), 1);
        // One copy: every caller holds the same allocation.
        assert!(answers.iter().all(|(a, _)| Arc::ptr_eq(a, &answers[0].0)));
        // Done, the key reads again; another key reads on its own.
        let (again, joined) = flights.join(&"configmaps in t", || async { Arc::new(vec![1]) });
        assert!(!joined);
        assert_eq!(*again.await, vec![1]);
        assert!(flights.running().is_empty());
    }

    #[tokio::test]
    async fn a_read_every_caller_gave_up_is_dropped_and_started_again() {
        let flights: Arc<Flights<&str, u32>> = Arc::default();
        let (flight, _) = flights.join(&"k", futures::future::pending::<u32>);
        // The caller gives up (its deadline passed): nothing keeps the read.
        assert!(
            tokio::time::timeout(Duration::from_millis(10), flight)
                .await
                .is_err()
        );
        let (flight, joined) = flights.join(&"k", || async { 7 });
        assert!(!joined);
        assert_eq!(flight.await, 7);
    }
}
