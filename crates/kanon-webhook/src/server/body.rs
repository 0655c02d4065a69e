//! Review bodies: read within a budget shared by every connection.
//!
//! A body's bytes are reserved from the budget before it is read (its `Content-Length`, or the
//! body limit when it has none) and given back once its JSON has been read, so the bytes held
//! in bodies never pass the budget, however many clients send at once. When a body needs more
//! than is left, bodies that have been arriving for a while (longer than [`GRACE`]) at the
//! slowest rates are given up (their requests get 408 and their connections close) until it
//! fits: a client that trickles its body cannot keep the budget from kube-apiserver, whose
//! bodies arrive at once. A body that still does not fit waits, within its review's deadline.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::sync::Notify;

use crate::metrics::Metrics;

/// How long a body may take before it can be given up to make room for another.
pub(super) const GRACE: Duration = Duration::from_secs(1);

/// The bytes every body being read or waiting to be parsed may take together.
pub(super) struct BodyBudget {
    capacity: usize,
    metrics: Arc<Metrics>,
    state: Mutex<State>,
    released: Notify,
}

struct State {
    used: usize,
    next: u64,
    readers: HashMap<u64, Arc<Reader>>,
}

/// One body's progress, for choosing which body gives way.
pub(super) struct Reader {
    started: Instant,
    reserved: usize,
    received: AtomicUsize,
    /// Read whole: no longer a candidate to give way (it waits for its review's turn).
    done: AtomicBool,
    evicted: AtomicBool,
    eviction: Notify,
}

impl Reader {
    /// Bytes per second so far.
    fn rate(&self) -> f64 {
        self.received.load(Ordering::Relaxed) as f64 / self.started.elapsed().as_secs_f64()
    }

    async fn evicted(&self) {
        if self.evicted.load(Ordering::SeqCst) {
            return;
        }
        self.eviction.notified().await;
    }
}

/// Bytes of the budget held for one body; dropping it gives them back.
pub(super) struct Reservation {
    budget: Arc<BodyBudget>,
    id: u64,
    reader: Arc<Reader>,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let used = {
            let mut state = self.budget.state();
            state.readers.remove(&self.id);
            state.used = state.used.saturating_sub(self.reader.reserved);
            state.used
        };
        self.budget.metrics.body_bytes_reserved(used);
        self.budget.released.notify_waiters();
    }
}

/// The budget could not make room before the deadline.
#[derive(Debug)]
pub(super) struct Busy {
    /// Bytes asked for.
    pub wanted: usize,
    /// Bytes of the budget.
    pub capacity: usize,
}

impl BodyBudget {
    pub(super) fn new(capacity: usize, metrics: Arc<Metrics>) -> Arc<Self> {
        Arc::new(BodyBudget {
            capacity,
            metrics,
            state: Mutex::new(State {
                used: 0,
                next: 0,
                readers: HashMap::new(),
            }),
            released: Notify::new(),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reserves `bytes` (at most the capacity), giving up slow bodies to make room, waiting
    /// until `deadline` at most.
    pub(super) async fn reserve(
        self: &Arc<Self>,
        bytes: usize,
        deadline: tokio::time::Instant,
    ) -> Result<Reservation, Busy> {
        let bytes = bytes.min(self.capacity);
        loop {
            // Registered before the state is read, so a release in between is not missed.
            let released = self.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            let evictions = {
                let mut state = self.state();
                if state.used + bytes <= self.capacity {
                    state.used += bytes;
                    let id = state.next;
                    state.next += 1;
                    let reader = Arc::new(Reader {
                        started: Instant::now(),
                        reserved: bytes,
                        received: AtomicUsize::new(0),
                        done: AtomicBool::new(false),
                        evicted: AtomicBool::new(false),
                        eviction: Notify::new(),
                    });
                    state.readers.insert(id, reader.clone());
                    let used = state.used;
                    drop(state);
                    self.metrics.body_bytes_reserved(used);
                    return Ok(Reservation {
                        budget: self.clone(),
                        id,
                        reader,
                    });
                }
                make_room(&state, bytes, self.capacity)
            };
            for reader in &evictions {
                reader.evicted.store(true, Ordering::SeqCst);
                reader.eviction.notify_one();
            }
            if tokio::time::timeout_at(deadline, released).await.is_err() {
                return Err(Busy {
                    wanted: bytes,
                    capacity: self.capacity,
                });
            }
        }
    }
}

/// The slowest bodies past their grace whose bytes, with what is free, make room for
/// `wanted`; none when even all of them would not.
fn make_room(state: &State, wanted: usize, capacity: usize) -> Vec<Arc<Reader>> {
    let free = capacity.saturating_sub(state.used);
    // Bodies already told to give way are on their way out: their bytes count as free.
    let leaving: usize = state
        .readers
        .values()
        .filter(|r| r.evicted.load(Ordering::SeqCst))
        .map(|r| r.reserved)
        .sum();
    let mut needed = wanted.saturating_sub(free + leaving);
    if needed == 0 {
        return Vec::new();
    }
    let mut candidates: Vec<(f64, &Arc<Reader>)> = state
        .readers
        .values()
        .filter(|r| {
            !r.done.load(Ordering::SeqCst)
                && !r.evicted.load(Ordering::SeqCst)
                && r.started.elapsed() > GRACE
        })
        .map(|r| (r.rate(), r))
        .collect();
    candidates.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut chosen = Vec::new();
    for (_, reader) in candidates {
        chosen.push(reader.clone());
        needed = needed.saturating_sub(reader.reserved);
        if needed == 0 {
            return chosen;
        }
    }
    Vec::new()
}

/// Why a body could not be read whole.
pub(super) enum BodyError {
    /// Longer than the limit.
    TooLarge,
    /// Given up to make room for another body.
    Evicted,
    /// The connection failed.
    Read(hyper::Error),
}

/// Reads `body`, stopping as soon as it passes `limit` bytes or is given up.
pub(super) async fn read(
    mut body: Incoming,
    limit: usize,
    reservation: &Reservation,
) -> Result<Bytes, BodyError> {
    let reader = &reservation.reader;
    let mut buffer = BytesMut::new();
    loop {
        let frame = tokio::select! {
            biased;
            () = reader.evicted() => return Err(BodyError::Evicted),
            frame = body.frame() => frame,
        };
        let Some(frame) = frame else { break };
        let frame = frame.map_err(BodyError::Read)?;
        if let Ok(data) = frame.into_data() {
            if buffer.len() + data.len() > limit {
                return Err(BodyError::TooLarge);
            }
            if buffer.is_empty() {
                // Room for the whole body at once rather than by doubling, as reserved.
                buffer.reserve(reader.reserved.max(data.len()));
            }
            buffer.extend_from_slice(&data);
            reader.received.store(buffer.len(), Ordering::Relaxed);
        }
    }
    reader.done.store(true, Ordering::SeqCst);
    Ok(buffer.freeze())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn far() -> tokio::time::Instant {
        tokio::time::Instant::now() + Duration::from_secs(5)
    }

    #[tokio::test]
    async fn reservations_never_pass_the_budget() {
        let budget = BodyBudget::new(100, Metrics::new());
        let a = budget.reserve(60, far()).await.unwrap();
        // Too little left, and `a` is in its grace: waits, then gives up at the deadline.
        let soon = tokio::time::Instant::now() + Duration::from_millis(50);
        let busy = budget.reserve(60, soon).await.err().unwrap();
        assert_eq!((busy.wanted, busy.capacity), (60, 100));
        let b = budget.reserve(40, far()).await.unwrap();
        // Freed: the waiter gets its bytes.
        let waiter = {
            let budget = budget.clone();
            tokio::spawn(async move { budget.reserve(50, far()).await.map(|_| ()) })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished());
        drop(a);
        waiter.await.unwrap().unwrap();
        drop(b);
        assert_eq!(budget.state().used, 0);
        // More than the capacity is capped at it.
        let all = budget.reserve(1000, far()).await.unwrap();
        assert_eq!(all.reader.reserved, 100);
    }

    #[tokio::test]
    async fn a_slow_body_past_its_grace_gives_way() {
        let budget = BodyBudget::new(100, Metrics::new());
        let slow = budget.reserve(60, far()).await.unwrap();
        let fast = budget.reserve(40, far()).await.unwrap();
        slow.reader.received.store(1, Ordering::Relaxed);
        fast.reader.received.store(39, Ordering::Relaxed);
        tokio::time::sleep(GRACE + Duration::from_millis(50)).await;
        let waiter = {
            let budget = budget.clone();
            tokio::spawn(async move { budget.reserve(50, far()).await.map(|_| ()) })
        };
        tokio::time::timeout(Duration::from_secs(1), slow.reader.evicted())
            .await
            .expect("the slow body is told to give way");
        assert!(!fast.reader.evicted.load(Ordering::SeqCst));
        drop(slow);
        waiter.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn bodies_read_whole_or_in_their_grace_do_not_give_way() {
        let budget = BodyBudget::new(100, Metrics::new());
        let whole = budget.reserve(60, far()).await.unwrap();
        whole.reader.done.store(true, Ordering::SeqCst);
        tokio::time::sleep(GRACE + Duration::from_millis(50)).await;
        let young = budget.reserve(40, far()).await.unwrap();
        let soon = tokio::time::Instant::now() + Duration::from_millis(100);
        assert!(budget.reserve(30, soon).await.is_err());
        assert!(!whole.reader.evicted.load(Ordering::SeqCst));
        assert!(!young.reader.evicted.load(Ordering::SeqCst));
    }
}
