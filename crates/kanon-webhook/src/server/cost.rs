//! What the reviews of each flow (a namespace; see [`crate::slot`]) have cost lately: the CPU
//! time of their evaluations, averaged over the flow's last few reviews. A flow whose reviews
//! cost more than a book's threshold each is *costly* in that book. The evaluation pool keeps
//! two: flows costly past its inline share (1 ms) start their reviews on the pool rather than on
//! a worker; flows costly past the server's `costly_review_cpu` (the chart's 10 ms) compute in
//! the idle class, so that a tenant's costly policies compute on what the other namespaces'
//! reviews leave of the cores.
//!
//! Only flows that have been costly are remembered (at most [`MAX_FLOWS`]): a flow's record goes
//! once its average falls under half the threshold, so the book stays small whatever the number
//! of namespaces, and a tenant who mends its policies is back at the normal priority within a
//! few reviews.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// The most flows remembered at once; past it, a newly costly flow is not demoted.
const MAX_FLOWS: usize = 4096;

/// The flows' recent costs (see the module's doc).
pub(super) struct Costs {
    demote_above: Duration,
    flows: Mutex<HashMap<Box<str>, Duration>>,
    /// How many flows are remembered, read without the lock: while none is, a cheap review
    /// records nothing.
    remembered: AtomicUsize,
}

impl Costs {
    /// A book that calls a flow costly while its reviews average more than `demote_above`.
    pub(super) fn new(demote_above: Duration) -> Costs {
        Costs {
            demote_above,
            flows: Mutex::new(HashMap::new()),
            remembered: AtomicUsize::new(0),
        }
    }

    fn flows(&self) -> MutexGuard<'_, HashMap<Box<str>, Duration>> {
        // A plain map of numbers: consistent whatever panicked while it was held.
        self.flows.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether `flow`'s recent reviews cost more than the threshold each.
    pub(super) fn costly(&self, flow: &str) -> bool {
        if self.remembered.load(Ordering::Relaxed) == 0 {
            return false;
        }
        self.flows()
            .get(flow)
            .is_some_and(|cost| *cost > self.demote_above)
    }

    /// Records that a review of `flow` cost `cpu`.
    pub(super) fn record(&self, flow: &str, cpu: Duration) {
        if cpu <= self.demote_above && self.remembered.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut flows = self.flows();
        let room = flows.len() < MAX_FLOWS;
        match flows.get_mut(flow) {
            Some(average) => {
                // Each review weighs half: a costly flow is noticed at its first costly review
                // and forgiven within a few cheap ones.
                *average = (*average + cpu) / 2;
                if *average < self.demote_above / 2 {
                    flows.remove(flow);
                }
            }
            None if cpu > self.demote_above && room => {
                flows.insert(flow.into(), cpu);
            }
            None => {}
        }
        self.remembered.store(flows.len(), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_flow_is_costly_from_its_first_costly_review_until_cheap_ones_bring_it_down() {
        let costs = Costs::new(10 * MS);
        costs.record("cheap", MS);
        assert!(!costs.costly("cheap"));
        costs.record("tenant", 40 * MS);
        assert!(costs.costly("tenant"));
        assert!(!costs.costly("cheap"), "another flow is not touched");
        costs.record("tenant", MS); // (40 + 1) / 2
        assert!(costs.costly("tenant"));
        costs.record("tenant", MS); // 10.75
        assert!(costs.costly("tenant"));
        costs.record("tenant", MS); // 5.875: remembered, not costly
        assert!(!costs.costly("tenant"));
        costs.record("tenant", MS); // 3.4: forgotten
        assert_eq!(costs.remembered.load(Ordering::Relaxed), 0);
        costs.record("tenant", 11 * MS);
        assert!(
            costs.costly("tenant"),
            "costly again at its next costly review"
        );
    }

    #[test]
    fn the_book_is_bounded() {
        let costs = Costs::new(10 * MS);
        for flow in 0..MAX_FLOWS + 10 {
            costs.record(&flow.to_string(), 20 * MS);
        }
        assert_eq!(costs.flows().len(), MAX_FLOWS);
        assert!(costs.costly("0"));
        assert!(!costs.costly(&(MAX_FLOWS + 5).to_string()));
    }
}
