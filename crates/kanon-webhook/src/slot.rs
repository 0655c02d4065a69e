//! Evaluation slots: how many reviews compute at once (`max_concurrent_reviews`), shared fairly
//! between tenants.
//!
//! A slot stands for a core's worth of work, so a review gives its slot back while it only
//! waits (a lookup, a program in a worker process) and takes one again to go on. Reviews
//! waiting on a slow lookup target therefore never hold up reviews that need no lookup.
//!
//! Slots are shared between *flows*: a review's flow is its namespace (cluster-scoped objects
//! share one), which is whose policies it meets besides the cluster's — a namespaced policy
//! selects only objects of its own namespace. A flow holds at most half the slots (at least
//! one), so a tenant whose costly policies keep its reviews computing cannot take every slot;
//! when a slot comes free it goes to the flows waiting in turn (round robin), each flow's
//! reviews in the order they came. One tenant's flood therefore waits behind itself, and
//! another namespace's review waits at most for one slot of the other half to come free.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::oneshot;
use tokio::time::Instant;

/// The evaluation slots, shared fairly between flows (see the module's doc).
pub struct Slots {
    capacity: usize,
    per_flow: usize,
    queues: Mutex<Queues>,
}

#[derive(Default)]
struct Queues {
    free: usize,
    closed: bool,
    /// Slots each flow holds.
    held: HashMap<Arc<str>, usize>,
    /// Reviews waiting, by flow.
    waiting: HashMap<Arc<str>, VecDeque<oneshot::Sender<Permit>>>,
    /// Flows with reviews waiting, in the order they are served.
    turns: VecDeque<Arc<str>>,
}

/// The slots are closed (the server is shutting down).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the evaluation slots are closed")]
pub struct Closed;

impl Slots {
    /// `capacity` slots (at least one), each flow holding at most half of them (at least one).
    pub fn new(capacity: usize) -> Arc<Slots> {
        let capacity = capacity.max(1);
        Arc::new(Slots {
            capacity,
            per_flow: (capacity / 2).max(1),
            queues: Mutex::new(Queues {
                free: capacity,
                ..Queues::default()
            }),
        })
    }

    fn queues(&self) -> MutexGuard<'_, Queues> {
        // The queues stay consistent whatever panicked while they were held.
        self.queues.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How many slots there are.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// How many slots are free.
    pub fn available(&self) -> usize {
        self.queues().free
    }

    /// Refuses every waiting and future review ([`Closed`]).
    pub fn close(&self) {
        let mut queues = self.queues();
        queues.closed = true;
        queues.waiting.clear();
        queues.turns.clear();
    }

    /// A slot for a review of `flow`: at once when one is free and the flow holds fewer than
    /// its share, else in its turn.
    async fn permit(self: &Arc<Self>, flow: &Arc<str>) -> Result<Permit, Closed> {
        let waiter = {
            let mut guard = self.queues();
            let queues = &mut *guard;
            if queues.closed {
                return Err(Closed);
            }
            let held = queues.held.get(flow).copied().unwrap_or(0);
            let queued = queues.waiting.get(flow).is_some_and(|w| !w.is_empty());
            if queues.free > 0 && held < self.per_flow && !queued {
                queues.free -= 1;
                *queues.held.entry(flow.clone()).or_default() += 1;
                return Ok(Permit::new(self.clone(), flow.clone()));
            }
            let (sender, receiver) = oneshot::channel();
            let waiting = queues.waiting.entry(flow.clone()).or_default();
            if waiting.is_empty() {
                queues.turns.push_back(flow.clone());
            }
            waiting.push_back(sender);
            receiver
        };
        // A review that stops waiting (its deadline) drops the receiver: the permit it may
        // have been sent meanwhile is dropped with it, and so given to the next.
        waiter.await.map_err(|_| Closed)
    }

    /// A slot given back by `flow`: to the next flow in turn that may take one.
    fn release(self: &Arc<Self>, flow: Arc<str>) {
        let mut returned = Some(flow);
        while let Some(flow) = returned.take() {
            let grant = {
                let mut guard = self.queues();
                let queues = &mut *guard;
                queues.free += 1;
                if let Some(held) = queues.held.get_mut(&flow) {
                    *held = held.saturating_sub(1);
                    if *held == 0 {
                        queues.held.remove(&flow);
                    }
                }
                queues.next(self.per_flow)
            };
            // Sent outside the lock: a permit that finds its review gone comes back here.
            if let Some((to, sender)) = grant
                && let Err(mut unwanted) = sender.send(Permit::new(self.clone(), to.clone()))
            {
                unwanted.armed = false;
                returned = Some(to);
            }
        }
    }
}

impl Queues {
    /// Takes a free slot for the first flow in turn below its share that has a review
    /// waiting; that flow goes to the back of the turns if more of its reviews wait.
    fn next(&mut self, per_flow: usize) -> Option<(Arc<str>, oneshot::Sender<Permit>)> {
        if self.free == 0 {
            return None;
        }
        for _ in 0..self.turns.len() {
            let flow = self.turns.pop_front()?;
            let held = self.held.get(&flow).copied().unwrap_or(0);
            let waiting = self.waiting.get_mut(&flow)?;
            if held >= per_flow {
                self.turns.push_back(flow);
                continue;
            }
            let sender = waiting.pop_front()?;
            if waiting.is_empty() {
                self.waiting.remove(&flow);
            } else {
                self.turns.push_back(flow.clone());
            }
            self.free -= 1;
            *self.held.entry(flow.clone()).or_default() += 1;
            return Some((flow, sender));
        }
        None
    }
}

/// One slot held by a flow; dropping it gives it back.
pub struct Permit {
    slots: Arc<Slots>,
    flow: Arc<str>,
    armed: bool,
}

impl Permit {
    fn new(slots: Arc<Slots>, flow: Arc<str>) -> Self {
        Permit {
            slots,
            flow,
            armed: true,
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if self.armed {
            self.slots.release(self.flow.clone());
        }
    }
}

/// One review's hold on the evaluation slots.
pub struct Slot {
    slots: Arc<Slots>,
    flow: Arc<str>,
    state: Mutex<Held>,
}

struct Held {
    permit: Option<Permit>,
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
    /// Waits for a slot among `slots` for a review of `flow` (its namespace; empty for a
    /// cluster-scoped object); an error once the slots are closed (shutdown).
    pub async fn acquire(slots: Arc<Slots>, flow: &str) -> Result<Slot, Closed> {
        let flow: Arc<str> = flow.into();
        let permit = slots.permit(&flow).await?;
        Ok(Slot {
            slots,
            flow,
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

    /// Awaits `future` without the slot, then takes a slot again (in the flow's turn), waiting
    /// at most until `deadline` (past it the review goes on without one: the engine then stops
    /// at its deadline and the answer is quick).
    pub async fn away<F: Future>(&self, deadline: Instant, future: F) -> F::Output {
        let (waiting, given_back) = {
            let mut held = self.held();
            held.waits += 1;
            (Waiting(self), held.permit.take())
        };
        drop(given_back);
        let output = future.await;
        drop(waiting);
        let wanted = {
            let held = self.held();
            held.waits == 0 && held.permit.is_none()
        };
        if wanted
            && let Ok(Ok(permit)) =
                tokio::time::timeout_at(deadline, self.slots.permit(&self.flow)).await
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
mod tests;
