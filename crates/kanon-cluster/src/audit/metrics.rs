//! The audit's metrics: what the last audit found per policy, how long audits take, how many
//! objects they read, whether this replica is the auditor, report writes.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::AtomicI64;
use std::time::Duration;

use kanon_api::ResultStatus;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::book::Tally;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PolicyResultLabels {
    policy: String,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MissingLabels {
    missing: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CutLabels {
    cut: &'static str,
}

/// How an audit ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CycleOutcome {
    /// It read every kind.
    Finished,
    /// Another replica took the Lease; it resumes the audit.
    Handed,
    /// It failed (the error is logged).
    Failed,
}

impl CycleOutcome {
    fn label(self) -> &'static str {
        match self {
            CycleOutcome::Finished => "finished",
            CycleOutcome::Handed => "handed_over",
            CycleOutcome::Failed => "failed",
        }
    }
}

/// The audit's metrics; cheap to clone (shared).
#[derive(Clone, Debug)]
pub struct AuditMetrics {
    results: Family<PolicyResultLabels, Gauge<i64, AtomicI64>>,
    duration: Histogram,
    cycles: Family<OutcomeLabels, Counter>,
    objects: Counter,
    leader: Gauge<i64, AtomicI64>,
    writes: Family<OutcomeLabels, Counter>,
    cuts: Family<CutLabels, Counter>,
    blocked: Family<MissingLabels, Gauge<i64, AtomicI64>>,
}

impl Default for AuditMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl AuditMetrics {
    /// Fresh metrics, not yet registered.
    pub fn new() -> Self {
        let cuts = Family::<CutLabels, Counter>::default();
        // Both series from the start, so that an alert on their increase sees the first one.
        for cut in ["results", "replaced"] {
            drop(cuts.get_or_create(&CutLabels { cut }));
        }
        AuditMetrics {
            results: Family::default(),
            duration: Histogram::new([1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 10800.0]),
            cycles: Family::default(),
            objects: Counter::default(),
            leader: Gauge::default(),
            writes: Family::default(),
            cuts,
            blocked: Family::default(),
        }
    }

    /// Registers every audit metric in `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "kanon_policy_results",
            "Findings of the last audit, by policy and result (pass, fail, warn, error, skip)",
            self.results.clone(),
        );
        registry.register(
            "kanon_audit_duration_seconds",
            "How long each audit of the existing objects took",
            self.duration.clone(),
        );
        registry.register(
            "kanon_audits",
            "Audits run by this replica, by how they ended",
            self.cycles.clone(),
        );
        registry.register(
            "kanon_audit_objects_scanned",
            "Existing objects judged by the audit",
            self.objects.clone(),
        );
        registry.register(
            "kanon_audit_leader",
            "1 while this replica holds the audit Lease (audits and writes reports)",
            self.leader.clone(),
        );
        registry.register(
            "kanon_audit_report_writes",
            "Report writes and deletions, by outcome",
            self.writes.clone(),
        );
        registry.register(
            "kanon_audit_blocked",
            "1 while the audit waits for something the cluster lacks, by what: lease_namespace \
             (the namespace of its Lease) or openreports_crds (the OpenReports CRDs)",
            self.blocked.clone(),
        );
        registry.register(
            "kanon_audit_report_cuts",
            "Reports written short, by cut: results (results cut to fit the size a report may \
             take) or replaced (replaced by a report saying why it could not be written)",
            self.cuts.clone(),
        );
    }

    /// Sets the findings per policy and result to `tallies` (policies not in it drop out).
    pub fn set_results(&self, tallies: &BTreeMap<Arc<str>, Tally>) {
        self.results.clear();
        for (policy, tally) in tallies {
            for result in ResultStatus::ALL {
                self.results
                    .get_or_create(&PolicyResultLabels {
                        policy: policy.to_string(),
                        result: result.as_str(),
                    })
                    .set(i64::try_from(tally.count(result)).unwrap_or(i64::MAX));
            }
        }
    }

    /// Counts an audit that ended `outcome` after `took`.
    pub fn cycle(&self, outcome: CycleOutcome, took: Duration) {
        self.cycles
            .get_or_create(&OutcomeLabels {
                outcome: outcome.label(),
            })
            .inc();
        if outcome == CycleOutcome::Finished {
            self.duration.observe(took.as_secs_f64());
        }
    }

    /// Counts `n` objects judged.
    pub fn scanned(&self, n: u64) {
        self.objects.inc_by(n);
    }

    /// Whether this replica holds the audit Lease.
    pub fn leading(&self, leading: bool) {
        self.leader.set(i64::from(leading));
    }

    /// Counts reports written with their results cut to fit their size, and reports replaced by
    /// one saying why they could not be written.
    pub fn cuts(&self, cut: usize, replaced: usize) {
        for (label, n) in [("results", cut), ("replaced", replaced)] {
            if n > 0 {
                self.cuts
                    .get_or_create(&CutLabels { cut: label })
                    .inc_by(n as u64);
            }
        }
    }

    /// Sets what the audit waits for: each of `labels` 1, the others it waited for before 0.
    pub fn blocked(&self, labels: &[&'static str]) {
        for missing in super::prerequisites::LABELS {
            self.blocked
                .get_or_create(&MissingLabels { missing })
                .set(i64::from(labels.contains(&missing)));
        }
    }

    /// Counts report writes that succeeded and failed.
    pub fn writes(&self, ok: usize, failed: usize) {
        for (outcome, n) in [("ok", ok), ("error", failed)] {
            if n > 0 {
                self.writes
                    .get_or_create(&OutcomeLabels { outcome })
                    .inc_by(n as u64);
            }
        }
    }
}
