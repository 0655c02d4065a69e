//! The memory objects read for references take, bounded in bytes: the reads in progress, the
//! cache, and what reviews still hold of reads the cache has let go, together.
//!
//! A read reserves what it may take at most before it starts (twice the bound on one read:
//! its body, then its objects decoded) and keeps, once done, what its objects take. Its
//! objects stay charged for as long as anyone holds them, the cache or a review (a review
//! waiting for its evaluation slot may hold a listing long after the cache dropped it), so
//! the bound is on what is held, not on what is cached. When a read finds no room, the cache
//! is emptied oldest first; then the read waits for reviews to let go, within its review's
//! deadline.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::fetch::{Fetched, Read};

/// What an entry takes besides its objects: the map's slot, the key, the `Arc`s.
const ENTRY_BYTES: usize = 256;

/// How often a read that found no room looks again for objects reviews have let go (nothing
/// tells when the last review drops a shared object).
const RECHECK: Duration = Duration::from_millis(20);

/// A read's objects and the memory charged for them, released when the last holder drops it.
#[derive(Debug)]
pub(super) struct Held {
    /// The object or the objects.
    pub(super) read: Read,
    _charge: OwnedSemaphorePermit,
}

impl Held {
    /// Whether anyone but the store holds the entry or one of its objects.
    fn in_use(self: &Arc<Self>) -> bool {
        Arc::strong_count(self) > 1 || self.read.objects().iter().any(|o| Arc::strong_count(o) > 1)
    }
}

/// The bounds of the store.
#[derive(Debug, Clone, Copy)]
pub(super) struct Limits {
    /// The most everything held takes, in bytes.
    pub(super) bytes: usize,
    /// What one read reserves while in progress.
    pub(super) reservation: usize,
    /// How long an entry is reused.
    pub(super) ttl: Duration,
    /// How many entries the cache keeps at most.
    pub(super) entries: usize,
}

struct State<K> {
    fresh: HashMap<K, (Instant, Arc<Held>)>,
    /// Entries the cache let go that reviews still hold.
    retired: Vec<Arc<Held>>,
}

/// The cache and the charge of everything read.
pub(super) struct Store<K> {
    limits: Limits,
    budget: Arc<Semaphore>,
    state: Mutex<State<K>>,
}

impl<K: Hash + Eq + Clone> Store<K> {
    /// An empty store; `limits.bytes` is raised to one reservation if below.
    pub(super) fn new(mut limits: Limits) -> Self {
        limits.reservation = limits.reservation.clamp(1, u32::MAX as usize);
        limits.bytes = limits.bytes.max(limits.reservation);
        Store {
            budget: Arc::new(Semaphore::new(limits.bytes)),
            limits,
            state: Mutex::new(State {
                fresh: HashMap::new(),
                retired: Vec::new(),
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State<K>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The entry of `key`, if cached within its TTL.
    pub(super) fn cached(&self, key: &K) -> Option<Arc<Held>> {
        let state = self.state();
        let (at, held) = state.fresh.get(key)?;
        (at.elapsed() < self.limits.ttl).then(|| held.clone())
    }

    /// Room for one read, made by emptying the cache if need be, else awaited (for as long
    /// as the caller waits).
    pub(super) async fn reserve(&self) -> OwnedSemaphorePermit {
        let wanted = self.limits.reservation as u32;
        loop {
            if let Ok(permit) = self.budget.clone().try_acquire_many_owned(wanted) {
                return permit;
            }
            self.make_room();
            // The semaphore is never closed; past `RECHECK`, look again.
            if let Ok(Ok(permit)) =
                tokio::time::timeout(RECHECK, self.budget.clone().acquire_many_owned(wanted)).await
            {
                return permit;
            }
        }
    }

    /// Lets go of what nobody else holds, then of cached entries, oldest first, until one
    /// read fits.
    fn make_room(&self) {
        let mut state = self.state();
        let ttl = self.limits.ttl;
        let state = &mut *state;
        state.retired.retain(Held::in_use);
        let expired: Vec<K> = state
            .fresh
            .iter()
            .filter(|(_, (at, _))| at.elapsed() >= ttl)
            .map(|(k, _)| k.clone())
            .collect();
        for key in expired {
            retire(state, &key);
        }
        while self.budget.available_permits() < self.limits.reservation {
            let Some(oldest) = oldest(&state.fresh) else {
                break;
            };
            retire(state, &oldest);
        }
    }

    /// Keeps what `fetched` holds charged (the rest of `reservation` is given back) and, when
    /// the cache keeps reads, caches it under `key`.
    pub(super) fn keep(
        &self,
        key: K,
        fetched: Fetched,
        mut reservation: OwnedSemaphorePermit,
    ) -> Arc<Held> {
        let bytes = (fetched.bytes + ENTRY_BYTES).min(reservation.num_permits());
        let charge = reservation.split(bytes).unwrap_or(reservation);
        let held = Arc::new(Held {
            read: fetched.read,
            _charge: charge,
        });
        let mut state = self.state();
        if self.limits.ttl.is_zero() || self.limits.entries == 0 {
            state.retired.push(held.clone());
            return held;
        }
        if state.fresh.len() >= self.limits.entries
            && !state.fresh.contains_key(&key)
            && let Some(oldest) = oldest(&state.fresh)
        {
            retire(&mut state, &oldest);
        }
        if let Some((_, replaced)) = state.fresh.insert(key, (Instant::now(), held.clone())) {
            state.retired.push(replaced);
        }
        held
    }

    /// What is charged now, in bytes: reads in progress, the cache and what reviews hold.
    #[cfg(test)]
    pub(super) fn charged(&self) -> usize {
        self.limits.bytes - self.budget.available_permits()
    }
}

fn oldest<K: Clone>(fresh: &HashMap<K, (Instant, Arc<Held>)>) -> Option<K> {
    fresh
        .iter()
        .min_by_key(|(_, (at, _))| *at)
        .map(|(k, _)| k.clone())
}

/// Takes `key` out of the cache; kept charged while a review holds it.
fn retire<K: Hash + Eq>(state: &mut State<K>, key: &K) {
    if let Some((_, held)) = state.fresh.remove(key)
        && held.in_use()
    {
        state.retired.push(held);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const MIB: usize = 1 << 20;

    fn store(bytes: usize, entries: usize) -> Store<u32> {
        Store::new(Limits {
            bytes,
            reservation: 2 * MIB,
            ttl: Duration::from_secs(60),
            entries,
        })
    }

    fn listing(bytes: usize) -> Fetched {
        Fetched {
            read: Read::Many(vec![Arc::new(json!({"data": "x".repeat(bytes)}))]),
            bytes,
        }
    }

    #[tokio::test]
    async fn the_cache_keeps_within_its_bytes_evicting_the_oldest() {
        let store = store(8 * MIB, 4096);
        for key in 0..20 {
            let reservation = store.reserve().await;
            assert!(store.charged() <= 8 * MIB);
            store.keep(key, listing(MIB), reservation);
            assert!(store.charged() <= 8 * MIB, "{}", store.charged());
        }
        // Room for the next read was made by letting the oldest go: the newest are cached.
        assert!(store.cached(&19).is_some() && store.cached(&0).is_none());
        let state = store.state();
        assert!(state.fresh.len() <= 7, "{}", state.fresh.len());
        assert!(state.retired.is_empty());
    }

    #[tokio::test]
    async fn what_a_review_holds_stays_charged_and_later_reads_wait_for_it() {
        let store = store(3 * MIB, 4096);
        let reservation = store.reserve().await;
        let held = store.keep(1, listing(3 * MIB / 2), reservation);
        // A review holds one of its objects, as the engine does after a listing.
        let object = held.read.objects()[0].clone();
        drop(held);
        // The next read cannot have room while the review holds the 1.5 MiB: it waits.
        assert!(
            tokio::time::timeout(Duration::from_millis(100), store.reserve())
                .await
                .is_err()
        );
        assert!(store.charged() >= 3 * MIB / 2);
        assert!(store.cached(&1).is_none(), "emptied to make room");
        drop(object);
        let reservation = tokio::time::timeout(Duration::from_secs(1), store.reserve())
            .await
            .expect("room once the review let go");
        assert_eq!(store.charged(), 2 * MIB);
        drop(reservation);
        assert_eq!(store.charged(), 0);
    }

    #[tokio::test]
    async fn a_read_keeps_only_what_its_objects_take_and_entries_stay_bounded() {
        let store = store(64 * MIB, 2);
        for key in 0..5 {
            let reservation = store.reserve().await;
            store.keep(key, listing(1000), reservation);
        }
        assert_eq!(store.charged(), 2 * (1000 + ENTRY_BYTES));
        assert!(store.cached(&4).is_some() && store.cached(&3).is_some());
        let uncached = Store::<u32>::new(Limits {
            ttl: Duration::ZERO,
            ..store.limits
        });
        let reservation = uncached.reserve().await;
        let held = uncached.keep(0, listing(1000), reservation);
        assert!(uncached.cached(&0).is_none());
        assert_eq!(uncached.charged(), 1000 + ENTRY_BYTES);
        drop(held);
        uncached.make_room();
        assert_eq!(uncached.charged(), 0);
    }
}
