//! The policy set the server answers with, swapped whole when a source (a policy directory, or
//! the cluster's reflectors) produces a new one.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use kanon_engine::PolicySet;

/// The current policy set and whether it may be served (`/readyz`).
#[derive(Debug, Default)]
pub struct PolicyState {
    set: RwLock<Arc<PolicySet>>,
    ready: AtomicBool,
    generation: AtomicU64,
}

impl PolicyState {
    /// An empty, not-ready state.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// The policy set in force; requests hold it for their whole evaluation.
    pub fn current(&self) -> Arc<PolicySet> {
        match self.set.read() {
            Ok(set) => set.clone(),
            // A writer panicked mid-swap; the value is still a whole set.
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Puts `set` in force and marks the state ready.
    pub fn replace(&self, set: PolicySet) {
        let set = Arc::new(set);
        match self.set.write() {
            Ok(mut current) => *current = set,
            Err(poisoned) => *poisoned.into_inner() = set,
        }
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.ready.store(true, Ordering::SeqCst);
    }

    /// Whether a policy set has been loaded.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }

    /// How many times a set has been put in force.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }
}
