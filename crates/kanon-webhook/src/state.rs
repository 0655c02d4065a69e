//! The policy set the server answers with, swapped whole when a source (a policy directory, or
//! the cluster's reflectors) publishes a new one through the [`Publisher`].

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use kanon_engine::{PolicyPublisher, PolicySet, WebhookKind};

use crate::metrics::Metrics;

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

/// The one way a source puts policies in force: swaps the set, marks the server ready, updates
/// `kanon_policies`, `kanon_ready` and `kanon_policy_reload_failures_total{source}`, and logs
/// each set (and each set that could not be built) the same way whatever the source.
#[derive(Debug, Clone)]
pub struct Publisher {
    state: Arc<PolicyState>,
    metrics: Arc<Metrics>,
    source: String,
}

impl Publisher {
    /// A publisher into `state` for the source named `source` (`directory`, `cluster`): the
    /// name labels its metrics and logs.
    pub fn new(state: Arc<PolicyState>, metrics: Arc<Metrics>, source: impl Into<String>) -> Self {
        Publisher {
            state,
            metrics,
            source: source.into(),
        }
    }

    /// The state it publishes into.
    pub fn state(&self) -> &Arc<PolicyState> {
        &self.state
    }
}

impl PolicyPublisher for Publisher {
    fn publish(&self, set: PolicySet, change: &str) {
        let count = set.len();
        let invalid = set.policies().iter().filter(|p| p.defect.is_some()).count();
        // Their series are never pushed into `other` by reviews of made-up kinds.
        let kinds: std::collections::BTreeSet<String> =
            [WebhookKind::Mutating, WebhookKind::Validating]
                .into_iter()
                .flat_map(|webhook| set.targets(webhook).types.into_keys())
                .map(|(_, kind)| kind)
                .collect();
        self.metrics.set_selected_kinds(kinds);
        self.state.replace(set);
        self.metrics.policies_loaded(count);
        self.metrics.set_ready(true);
        tracing::info!(
            source = %self.source,
            policies = count,
            invalid,
            generation = self.state.generation(),
            change,
            "{count} policies in force ({change})"
        );
    }

    fn reject(&self, problems: &[String]) {
        self.metrics.reload_failed(&self.source);
        self.metrics.set_ready(self.state.is_ready());
        let keeping = if self.state.is_ready() {
            "the last good set keeps serving"
        } else {
            "no policy set is in force: not ready"
        };
        tracing::error!(
            source = %self.source,
            problems = problems.len(),
            "policies not loaded ({keeping}):\n{}",
            problems.join("\n")
        );
    }
}
