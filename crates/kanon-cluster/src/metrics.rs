//! Metrics of kanon in a cluster, registered into the registry the webhook serves on
//! `/metrics` ([`ClusterMetrics::register`]).
//!
//! | metric | labels | what |
//! |---|---|---|
//! | `kanon_lookups_total` | `source`, `cache` | lookups made for policies; `cache` is `hit` or `miss` |
//! | `kanon_lookup_duration_seconds` | `source` | time to answer a lookup that missed the cache |
//! | `kanon_lookup_errors_total` | `source`, `reason` | failed lookups (`not_synced`, `timed_out`, `forbidden`, `unknown_type`, `unavailable`, `failed`) |
//! | `kanon_policy_compilations_total` | `result` | policies compiled from the cluster (`ready`, `invalid`) |
//! | `kanon_policies_invalid` | | policies in force that did not compile (`Ready=False`) |
//! | `kanon_policy_watch_errors_total` | `kind` | errors of the policy, namespace and CustomResourceDefinition watches (each retried) |
//! | `kanon_status_writes_total` | `result` | policy status writes (`written`, `failed`) |
//!
//! `source` is `k8s` (objects read through the apiserver), `namespace` (the namespace cache)
//! or `http`.

use std::sync::atomic::AtomicI64;
use std::time::Duration;

use kanon_engine::LookupError;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Where a lookup was answered from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LookupSource {
    /// Objects read through the apiserver (`k8s` and `owner` references).
    Objects,
    /// The Namespace metadata cache (`namespaceSelector`, `namespaceObject`).
    Namespaces,
    /// HTTP services.
    Http,
}

impl LookupSource {
    fn label(self) -> &'static str {
        match self {
            LookupSource::Objects => "k8s",
            LookupSource::Namespaces => "namespace",
            LookupSource::Http => "http",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LookupLabels {
    source: &'static str,
    cache: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SourceLabels {
    source: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    source: &'static str,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: String,
}

/// Buckets of `kanon_lookup_duration_seconds`: 100 µs to 30 s.
const LOOKUP_BUCKETS: [f64; 14] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0, 30.0,
];

fn lookup_histogram() -> Histogram {
    Histogram::new(LOOKUP_BUCKETS)
}

/// Every metric family of the cluster runtime. Cheap to clone: clones share the samples.
#[derive(Clone, Debug)]
pub struct ClusterMetrics {
    lookups: Family<LookupLabels, Counter>,
    lookup_duration: Family<SourceLabels, Histogram, fn() -> Histogram>,
    lookup_errors: Family<ErrorLabels, Counter>,
    compilations: Family<ResultLabels, Counter>,
    invalid: Gauge<i64, AtomicI64>,
    watch_errors: Family<KindLabels, Counter>,
    status_writes: Family<ResultLabels, Counter>,
}

impl Default for ClusterMetrics {
    fn default() -> Self {
        ClusterMetrics {
            lookups: Family::default(),
            lookup_duration: Family::new_with_constructor(lookup_histogram),
            lookup_errors: Family::default(),
            compilations: Family::default(),
            invalid: Gauge::default(),
            watch_errors: Family::default(),
            status_writes: Family::default(),
        }
    }
}

impl ClusterMetrics {
    /// Fresh families, not yet registered.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers every family into `registry`.
    pub fn register(&self, registry: &mut Registry) {
        // Counters are registered without `_total`: the encoder appends it.
        registry.register(
            "kanon_lookups",
            "Lookups made for policies, by source and whether the cache answered",
            self.lookups.clone(),
        );
        registry.register(
            "kanon_lookup_duration_seconds",
            "Time to answer a lookup that missed the cache",
            self.lookup_duration.clone(),
        );
        registry.register(
            "kanon_lookup_errors",
            "Failed lookups, by source and reason",
            self.lookup_errors.clone(),
        );
        registry.register(
            "kanon_policy_compilations",
            "Policies compiled from the cluster, by result",
            self.compilations.clone(),
        );
        registry.register(
            "kanon_policies_invalid",
            "Policies in force that did not compile (Ready=False)",
            self.invalid.clone(),
        );
        registry.register(
            "kanon_policy_watch_errors",
            "Errors of the policy and namespace watches, by kind (each is retried)",
            self.watch_errors.clone(),
        );
        registry.register(
            "kanon_status_writes",
            "Policy status writes, by result",
            self.status_writes.clone(),
        );
    }

    /// A lookup answered from a cache.
    pub fn lookup_hit(&self, source: LookupSource) {
        // On the lookup's trace span, when the review is traced (a no-op otherwise).
        tracing::Span::current().record("kanon.lookup.cache", "hit");
        self.lookups
            .get_or_create(&LookupLabels {
                source: source.label(),
                cache: "hit",
            })
            .inc();
    }

    /// A lookup that went to its source and took `elapsed`, with its result.
    pub fn lookup_miss<T>(
        &self,
        source: LookupSource,
        elapsed: Duration,
        result: &Result<T, LookupError>,
    ) {
        tracing::Span::current().record("kanon.lookup.cache", "miss");
        self.lookups
            .get_or_create(&LookupLabels {
                source: source.label(),
                cache: "miss",
            })
            .inc();
        self.lookup_duration
            .get_or_create(&SourceLabels {
                source: source.label(),
            })
            .observe(elapsed.as_secs_f64());
        if let Err(e) = result {
            self.lookup_error(source, e);
        }
    }

    /// A lookup that failed without reaching its source (refused, cache not synced).
    pub fn lookup_error(&self, source: LookupSource, error: &LookupError) {
        self.lookup_errors
            .get_or_create(&ErrorLabels {
                source: source.label(),
                reason: error.reason(),
            })
            .inc();
    }

    /// A policy compiled; `invalid` when it has errors.
    pub fn compiled(&self, invalid: bool) {
        let result = if invalid { "invalid" } else { "ready" };
        self.compilations
            .get_or_create(&ResultLabels { result })
            .inc();
    }

    /// How many policies in force are invalid.
    pub fn set_invalid(&self, count: usize) {
        self.invalid.set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    /// A watch of `kind` failed (and will be retried).
    pub fn watch_error(&self, kind: &str) {
        self.watch_errors
            .get_or_create(&KindLabels {
                kind: kind.to_string(),
            })
            .inc();
    }

    /// A status write, and whether it succeeded.
    pub fn status_write(&self, ok: bool) {
        let result = if ok { "written" } else { "failed" };
        self.status_writes
            .get_or_create(&ResultLabels { result })
            .inc();
    }
}
