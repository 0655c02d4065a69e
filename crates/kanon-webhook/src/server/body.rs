//! Review bodies: read within a budget shared by every connection.
//!
//! A body's bytes are reserved from the budget before it is read (its `Content-Length`, or the
//! body limit when it has none) and given back once its JSON has been read, so the bytes held
//! in bodies never pass the budget, however many clients send at once.
//!
//! When bodies wait for room, the smallest is served first (then the earliest): the reviews
//! kube-apiserver sends are a few kilobytes, and a client that fills the budget with bodies of
//! megabytes cannot make them wait behind its own. To make room for the first in line, bodies
//! that have stopped arriving (no byte for [`STALLED`]) or have been arriving for longer than
//! [`GRACE`] are given up, the most stalled first (their requests get 408 and their connections
//! close): a client that stalls or trickles its bodies cannot keep the budget from
//! kube-apiserver, whose bodies arrive at once. A body that still finds no room waits within
//! its review's deadline.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::sync::oneshot;

use super::eviction::Eviction;
use crate::metrics::Metrics;

/// How long a body may take before it can be given up to make room for another.
pub(super) const GRACE: Duration = Duration::from_secs(1);

/// How long a body may go without a byte before it can be given up to make room for another.
pub(super) const STALLED: Duration = Duration::from_millis(100);

/// How often a waiting body looks again for bodies past their grace to give way.
const RECHECK: Duration = Duration::from_millis(100);

/// The bytes every body being read or waiting to be parsed may take together.
pub(super) struct BodyBudget {
    capacity: usize,
    metrics: Arc<Metrics>,
    state: Mutex<State>,
}

struct State {
    used: usize,
    next: u64,
    readers: HashMap<u64, Arc<Reader>>,
    /// Bodies waiting for room, by (bytes, arrival): the smallest first.
    waiting: BTreeMap<(usize, u64), oneshot::Sender<Reservation>>,
}

/// One body's progress, for choosing which body gives way.
pub(super) struct Reader {
    started: Instant,
    reserved: usize,
    received: AtomicUsize,
    /// Microseconds after `started` the last bytes arrived.
    progressed: AtomicU64,
    /// Read whole: no longer a candidate to give way (it waits for its review's turn).
    done: AtomicBool,
    eviction: Eviction,
}

impl Reader {
    fn new(reserved: usize) -> Arc<Self> {
        Arc::new(Reader {
            started: Instant::now(),
            reserved,
            received: AtomicUsize::new(0),
            progressed: AtomicU64::new(0),
            done: AtomicBool::new(false),
            eviction: Eviction::default(),
        })
    }

    /// `received` bytes have arrived in all.
    fn progress(&self, received: usize) {
        self.received.store(received, Ordering::Relaxed);
        let micros = u64::try_from(self.started.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.progressed.store(micros, Ordering::Relaxed);
    }

    /// How long since the last bytes arrived (since the start, when none has).
    fn stalled_for(&self) -> Duration {
        let last = Duration::from_micros(self.progressed.load(Ordering::Relaxed));
        self.started.elapsed().saturating_sub(last)
    }
}

/// Bytes of the budget held for one body; dropping it gives them back (wherever it is
/// dropped: also a grant sent to a review that stopped waiting before it received it).
pub(super) struct Reservation {
    /// `None` once its bytes were given back by other means (see [`BodyBudget::settle`]).
    budget: Option<Arc<BodyBudget>>,
    id: u64,
    reader: Arc<Reader>,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if let Some(budget) = self.budget.take() {
            let mut state = budget.state();
            budget.give_back(&mut state, self.id, self.reader.reserved);
            budget.settle(&mut state);
        }
    }
}

/// A body's place in the line; leaving it (on time, or because its review was dropped
/// while it waited) takes the place out, so that no one makes room for a body no longer
/// there.
struct InLine<'a> {
    budget: &'a Arc<BodyBudget>,
    key: (usize, u64),
}

impl Drop for InLine<'_> {
    fn drop(&mut self) {
        let mut state = self.budget.state();
        if state.waiting.remove(&self.key).is_some() {
            self.budget.settle(&mut state);
        }
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
                waiting: BTreeMap::new(),
            }),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reserves `bytes` (at most the capacity), waiting until `deadline` at most.
    pub(super) async fn reserve(
        self: &Arc<Self>,
        bytes: usize,
        deadline: tokio::time::Instant,
    ) -> Result<Reservation, Busy> {
        let bytes = bytes.min(self.capacity);
        let (line, mut granted) = {
            let mut state = self.state();
            let id = state.next;
            state.next += 1;
            if state.waiting.is_empty() && state.used + bytes <= self.capacity {
                return Ok(self.take(&mut state, id, bytes));
            }
            let (give, granted) = oneshot::channel();
            state.waiting.insert((bytes, id), give);
            self.settle(&mut state);
            let line = InLine {
                budget: self,
                key: (bytes, id),
            };
            (line, granted)
        };
        loop {
            let recheck = tokio::time::Instant::now() + RECHECK;
            tokio::select! {
                grant = &mut granted => match grant {
                    Ok(reservation) => return Ok(reservation),
                    // Never dropped unsent while it waits; go and leave the line.
                    Err(_) => break,
                },
                () = tokio::time::sleep_until(recheck.min(deadline)) => {
                    if recheck >= deadline {
                        break;
                    }
                    // Bodies may have passed their grace since: make room again.
                    self.settle(&mut self.state());
                }
            }
        }
        // Out of time: leave the line, unless room came at the last moment.
        drop(line);
        granted.try_recv().map_err(|_| Busy {
            wanted: bytes,
            capacity: self.capacity,
        })
    }

    /// Takes `bytes` of the budget for body `id`.
    fn take(self: &Arc<Self>, state: &mut State, id: u64, bytes: usize) -> Reservation {
        state.used += bytes;
        let reader = Reader::new(bytes);
        state.readers.insert(id, reader.clone());
        self.metrics.body_bytes_reserved(state.used);
        Reservation {
            budget: Some(self.clone()),
            id,
            reader,
        }
    }

    /// Gives body `id`'s `bytes` back.
    fn give_back(&self, state: &mut State, id: u64, bytes: usize) {
        state.readers.remove(&id);
        state.used = state.used.saturating_sub(bytes);
    }

    /// Gives room to waiting bodies, smallest first, as long as they fit; then, when one still
    /// waits, tells slow bodies to give way for it. Called whenever room may have come.
    fn settle(self: &Arc<Self>, state: &mut State) {
        while let Some(entry) = state.waiting.first_entry() {
            let (bytes, id) = *entry.key();
            if state.used + bytes > self.capacity {
                break;
            }
            let give = entry.remove();
            if let Err(mut undelivered) = give.send(self.take(state, id, bytes)) {
                // Its review stopped waiting in the meantime: the bytes go back here, under
                // the lock already held, not by the reservation's own drop.
                undelivered.budget = None;
                self.give_back(state, id, bytes);
            }
        }
        self.metrics.body_bytes_reserved(state.used);
        if let Some(&(wanted, _)) = state.waiting.keys().next() {
            for reader in make_room(state, wanted, self.capacity) {
                reader.eviction.tell();
            }
        }
    }
}

/// The bodies to give up so that, with what is free, `wanted` fits: stalled ones and ones
/// past their grace, the most stalled first; none when even all of them would not do.
fn make_room(state: &State, wanted: usize, capacity: usize) -> Vec<Arc<Reader>> {
    let free = capacity.saturating_sub(state.used);
    // Bodies already told to give way are on their way out: their bytes count as free.
    let leaving: usize = state
        .readers
        .values()
        .filter(|r| r.eviction.is_told())
        .map(|r| r.reserved)
        .sum();
    let mut needed = wanted.saturating_sub(free + leaving);
    if needed == 0 {
        return Vec::new();
    }
    let mut candidates: Vec<(Duration, &Arc<Reader>)> = state
        .readers
        .values()
        .filter(|r| !r.done.load(Ordering::SeqCst) && !r.eviction.is_told())
        .map(|r| (r.stalled_for(), r))
        .filter(|(stalled, r)| *stalled >= STALLED || r.started.elapsed() > GRACE)
        .collect();
    candidates.sort_by_key(|(stalled, _)| std::cmp::Reverse(*stalled));
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
            () = reader.eviction.told() => return Err(BodyError::Evicted),
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
            reader.progress(buffer.len());
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

    fn soon() -> tokio::time::Instant {
        tokio::time::Instant::now() + Duration::from_millis(50)
    }

    #[tokio::test]
    async fn reservations_never_pass_the_budget() {
        let budget = BodyBudget::new(100, Metrics::new());
        let a = budget.reserve(60, far()).await.unwrap();
        // Too little left, and `a` is in its grace: waits, then gives up at the deadline.
        let busy = budget.reserve(60, soon()).await.err().unwrap();
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
        assert!(budget.state().waiting.is_empty());
        // More than the capacity is capped at it.
        let all = budget.reserve(1000, far()).await.unwrap();
        assert_eq!(all.reader.reserved, 100);
    }

    #[tokio::test]
    async fn the_smallest_waiting_body_is_served_first() {
        let budget = BodyBudget::new(100, Metrics::new());
        let full = budget.reserve(100, far()).await.unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        for (n, bytes) in [(0, 90), (1, 80), (2, 5)] {
            let (budget, tx) = (budget.clone(), tx.clone());
            tokio::spawn(async move {
                let reservation = budget.reserve(bytes, far()).await.unwrap();
                tx.send(n).unwrap();
                tokio::time::sleep(Duration::from_millis(30)).await;
                drop(reservation);
            });
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        drop(full);
        // The 5 bytes and the 80 fit together; then the 90, which came first.
        let order: Vec<i32> = [rx.recv().await, rx.recv().await, rx.recv().await]
            .into_iter()
            .flatten()
            .collect();
        assert_eq!(order, [2, 1, 0]);
    }

    #[tokio::test]
    async fn a_stalled_body_gives_way_to_the_one_waiting() {
        let budget = BodyBudget::new(100, Metrics::new());
        let slow = budget.reserve(60, far()).await.unwrap();
        let fast = budget.reserve(40, far()).await.unwrap();
        // The slow one stalls; the fast one keeps sending.
        slow.reader.progress(1);
        let sending = {
            let reader = fast.reader.clone();
            tokio::spawn(async move {
                for n in 0..100 {
                    reader.progress(n);
                    tokio::time::sleep(STALLED / 4).await;
                }
            })
        };
        tokio::time::sleep(STALLED * 2).await;
        let waiter = {
            let budget = budget.clone();
            tokio::spawn(async move { budget.reserve(50, far()).await })
        };
        tokio::time::timeout(Duration::from_secs(1), slow.reader.eviction.told())
            .await
            .expect("the slow body is told to give way");
        assert!(!fast.reader.eviction.is_told());
        // A bigger body arriving meanwhile does not take the room made for the waiting one.
        let late = {
            let budget = budget.clone();
            tokio::spawn(async move { budget.reserve(60, far()).await })
        };
        tokio::time::sleep(Duration::from_millis(10)).await;
        drop(slow);
        let served = waiter.await.unwrap().unwrap();
        assert_eq!(served.reader.reserved, 50);
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(!late.is_finished());
        sending.abort();
        drop((served, fast));
        assert_eq!(late.await.unwrap().unwrap().reader.reserved, 60);
    }

    #[tokio::test]
    async fn a_body_that_waits_gets_room_once_a_trickling_one_passes_its_grace() {
        let budget = BodyBudget::new(100, Metrics::new());
        let slow = budget.reserve(100, far()).await.unwrap();
        // A byte every little while: never stalled, but past its grace after a second.
        let trickle = {
            let reader = slow.reader.clone();
            tokio::spawn(async move {
                for n in 0..100 {
                    reader.progress(n);
                    tokio::time::sleep(STALLED / 4).await;
                }
            })
        };
        // It waits from before the slow body's grace ends, with nothing else happening.
        let started = Instant::now();
        let waiter = {
            let budget = budget.clone();
            tokio::spawn(async move { budget.reserve(10, far()).await.map(|_| ()) })
        };
        tokio::time::timeout(GRACE * 2, slow.reader.eviction.told())
            .await
            .expect("the slow body is told to give way once past its grace");
        assert!(started.elapsed() >= GRACE - Duration::from_millis(50));
        trickle.abort();
        drop(slow);
        waiter.await.unwrap().unwrap();
    }

    /// Polls `future` once, to put it in the line.
    async fn poll_once<F: std::future::Future>(future: &mut std::pin::Pin<Box<F>>) {
        std::future::poll_fn(|cx| {
            let _ = future.as_mut().poll(cx);
            std::task::Poll::Ready(())
        })
        .await;
    }

    #[tokio::test]
    async fn a_review_dropped_while_its_body_waits_leaves_nothing_behind() {
        let budget = BodyBudget::new(100, Metrics::new());
        let full = budget.reserve(100, far()).await.unwrap();
        // Dropped in the line: its place goes with it, and no body gives way for it.
        let mut gone = Box::pin(budget.reserve(10, far()));
        poll_once(&mut gone).await;
        assert_eq!(budget.state().waiting.len(), 1);
        drop(gone);
        assert!(budget.state().waiting.is_empty());
        // Dropped after room was sent to it, before it took it: the room comes back.
        let mut late = Box::pin(budget.reserve(60, far()));
        poll_once(&mut late).await;
        drop(full);
        assert_eq!(
            budget.state().used,
            60,
            "the room was sent to the waiting body"
        );
        drop(late);
        assert_eq!(budget.state().used, 0);
        assert!(budget.state().readers.is_empty());
    }

    #[tokio::test]
    async fn bodies_read_whole_or_in_their_grace_do_not_give_way() {
        let budget = BodyBudget::new(100, Metrics::new());
        let whole = budget.reserve(60, far()).await.unwrap();
        whole.reader.done.store(true, Ordering::SeqCst);
        tokio::time::sleep(GRACE + Duration::from_millis(50)).await;
        let young = budget.reserve(40, far()).await.unwrap();
        // Younger than STALLED: not yet given up, even with nothing received.
        let soon = tokio::time::Instant::now() + STALLED / 2;
        assert!(budget.reserve(30, soon).await.is_err());
        assert!(!whole.reader.eviction.is_told());
        assert!(!young.reader.eviction.is_told());
        // Leaving the line on time leaves nothing behind.
        assert!(budget.state().waiting.is_empty());
    }
}
