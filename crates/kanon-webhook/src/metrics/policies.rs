//! Each policy's counters, kept at hand: a review meets every policy in force, and finding a
//! policy's series by its label's text would hash that text under a family's lock, twice per
//! policy and review.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Arc, OnceLock, RwLock};

use kanon_engine::PolicyOutcome;
use prometheus_client::metrics::counter::Counter;

use super::{Metrics, PolicyErrorLabels, PolicyLabels};

/// At most this many policies' counters are cached (policy sets replaced many times): past it
/// the cache is emptied and refilled as policies meet requests. The counters themselves stay.
pub(super) const MAX_CACHED_POLICIES: usize = 65_536;

/// Each policy's counters, found by the address of its label (the `Arc<str>` a policy result
/// shares with its compiled policy) rather than by hashing the label's text under a family's
/// lock, twice per policy and review. An entry holds its label, so no other label can take
/// that address while it is a key.
#[derive(Debug, Default)]
pub(super) struct PolicyCounters {
    pub(super) by_label: RwLock<HashMap<usize, PolicyHandles, BuildHasherDefault<AddressHasher>>>,
}

/// One policy's counters. `evaluations` exists from the first evaluation; the others from the
/// first time they count, so a policy that never patched has no `patches` series, as before.
#[derive(Debug)]
pub(super) struct PolicyHandles {
    label: Arc<str>,
    evaluations: Counter,
    patches: OnceLock<Counter>,
    rejections: OnceLock<Counter>,
}

/// Hashes an address: it is already unique, only its low bits need spreading.
#[derive(Default)]
pub(super) struct AddressHasher(u64);

impl Hasher for AddressHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(*b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_usize(&mut self, n: usize) {
        self.0 = (n as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

pub(super) fn address(label: &Arc<str>) -> usize {
    Arc::as_ptr(label).cast::<u8>() as usize
}

impl PolicyHandles {
    pub(super) fn new(metrics: &Metrics, label: &Arc<str>) -> Self {
        let labels = PolicyLabels {
            policy: label.clone(),
        };
        PolicyHandles {
            label: label.clone(),
            evaluations: metrics.evaluations.get_or_create(&labels).clone(),
            patches: OnceLock::new(),
            rejections: OnceLock::new(),
        }
    }

    pub(super) fn record(&self, metrics: &Metrics, outcome: PolicyOutcome) {
        self.evaluations.inc();
        let labels = || PolicyLabels {
            policy: self.label.clone(),
        };
        match outcome {
            PolicyOutcome::Mutated { patched: true } => {
                self.patches
                    .get_or_init(|| metrics.patches.get_or_create(&labels()).clone())
                    .inc();
            }
            PolicyOutcome::Mutated { patched: false }
            | PolicyOutcome::Passed
            | PolicyOutcome::Exempted => {}
            PolicyOutcome::Rejected => {
                self.rejections
                    .get_or_init(|| metrics.rejections.get_or_create(&labels()).clone())
                    .inc();
            }
            // Errors are rare: looked up by their labels each time, not kept per policy.
            PolicyOutcome::Failed { ignored, reason } => {
                let labels = PolicyErrorLabels {
                    policy: self.label.clone(),
                    ignored: if ignored { "true" } else { "false" },
                    reason,
                };
                metrics.errors.get_or_create(&labels).inc();
            }
        }
    }
}
