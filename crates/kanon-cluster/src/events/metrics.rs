//! The Events recorder's metrics: Events created and series updated, occurrences counted into
//! an Event already written, and occurrences no Event records.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use super::event::Action;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ActionLabels {
    action: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

/// Why an occurrence is recorded in no Event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dropped {
    /// The queue from the reviews (or the audit) to the recorder was full.
    QueueFull,
    /// Too many writes were waiting for the apiserver.
    BacklogFull,
    /// The policy's share of new Events was spent (audit findings; a denial or warning is
    /// counted into the policy's combined Event instead).
    RateLimited,
    /// The recorder remembered as many Events as it may.
    CacheFull,
    /// The apiserver refused the Event or could not be reached.
    Failed,
}

impl Dropped {
    /// The metric's label.
    pub fn label(self) -> &'static str {
        match self {
            Dropped::QueueFull => "queue_full",
            Dropped::BacklogFull => "backlog_full",
            Dropped::RateLimited => "rate_limited",
            Dropped::CacheFull => "cache_full",
            Dropped::Failed => "failed",
        }
    }
}

/// The recorder's metrics; cheap to clone (shared).
#[derive(Clone, Debug, Default)]
pub struct EventMetrics {
    written: Family<ActionLabels, Counter>,
    series: Counter,
    aggregated: Family<ActionLabels, Counter>,
    dropped: Family<ReasonLabels, Counter>,
}

impl EventMetrics {
    /// Fresh metrics, not yet registered.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers the metrics in `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "kanon_events_written",
            "Kubernetes Events created, by action (denied, warned, audited)",
            self.written.clone(),
        );
        registry.register(
            "kanon_events_series_updates",
            "Series updates (count, last time) written to Events already created",
            self.series.clone(),
        );
        registry.register(
            "kanon_events_aggregated",
            "Occurrences counted into an Event's series instead of an Event of their own, by \
             action",
            self.aggregated.clone(),
        );
        registry.register(
            "kanon_events_dropped",
            "Occurrences recorded in no Event, by reason: queue_full, backlog_full, \
             rate_limited, cache_full, failed",
            self.dropped.clone(),
        );
    }

    /// Counts an Event created.
    pub fn written(&self, action: Action) {
        self.written
            .get_or_create(&ActionLabels {
                action: action.label(),
            })
            .inc();
    }

    /// Counts a series update written.
    pub fn series_updated(&self) {
        self.series.inc();
    }

    /// Counts an occurrence counted into an existing Event.
    pub fn aggregated(&self, action: Action) {
        self.aggregated
            .get_or_create(&ActionLabels {
                action: action.label(),
            })
            .inc();
    }

    /// Counts `n` occurrences recorded in no Event.
    pub fn dropped(&self, why: Dropped, n: u64) {
        self.dropped
            .get_or_create(&ReasonLabels {
                reason: why.label(),
            })
            .inc_by(n);
    }

    /// Events created with `action` so far.
    #[cfg(test)]
    pub(crate) fn written_count(&self, action: Action) -> u64 {
        self.written
            .get_or_create(&ActionLabels {
                action: action.label(),
            })
            .get()
    }

    /// Series updates written so far.
    #[cfg(test)]
    pub(crate) fn series_count(&self) -> u64 {
        self.series.get()
    }

    /// Occurrences of `action` aggregated so far.
    #[cfg(test)]
    pub(crate) fn aggregated_count(&self, action: Action) -> u64 {
        self.aggregated
            .get_or_create(&ActionLabels {
                action: action.label(),
            })
            .get()
    }

    /// Occurrences dropped for `why` so far.
    #[cfg(test)]
    pub(crate) fn dropped_count(&self, why: Dropped) -> u64 {
        self.dropped
            .get_or_create(&ReasonLabels {
                reason: why.label(),
            })
            .get()
    }
}
