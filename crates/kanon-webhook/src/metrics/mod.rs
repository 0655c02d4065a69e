//! The webhook's Prometheus metrics, served as OpenMetrics text on `GET /metrics`.
//!
//! | metric | labels | what |
//! |---|---|---|
//! | `kanon_admission_requests_total` | `webhook`, `operation`, `kind`, `result` | reviews answered; `result` is `allowed`, `denied`, `patched`, `invalid` (HTTP 400), `too_large` (HTTP 413: the body's bytes), `over_budget` (HTTP 413: what its JSON takes once read, or its nesting) or `not_ready` (HTTP 503) |
//! | `kanon_admission_duration_seconds` | `webhook` | time to answer a review |
//! | `kanon_policy_evaluations_total` | `policy` | times a policy met a request |
//! | `kanon_policy_patches_total` | `policy` | times an override policy changed the object |
//! | `kanon_policy_rejections_total` | `policy` | times a validate policy found the object wanting |
//! | `kanon_exceptions_applied_total` | `exception`, `policy` | times a PolicyException exempted a request from a policy; the first [`MAX_EXCEPTION_SERIES`] (exception, policy) pairs counted have their own `exception` value, later pairs count as `other` |
//! | `kanon_policy_errors_total` | `policy`, `ignored`, `reason` | evaluation errors (`ignored` under `failurePolicy: Ignore`; `reason`: `timed_out`, `not_synced`, `not_found`, `cel`, `program`, ... as `RuleError::reason` names it) |
//! | `kanon_policies` | | policies in force |
//! | `kanon_ready` | | 1 when a policy set is in force (`/readyz`) |
//! | `kanon_policy_reload_failures_total` | `source` | policy sets that could not be loaded |
//! | `kanon_connections` | `listener` | connections open (`webhook`, `metrics`) |
//! | `kanon_connections_shed_total` | `listener`, `reason` | connections closed by the server's bounds: `evicted` (to make room for a new one), `refused` (no room), `header_timeout`, `write_timeout` |
//! | `kanon_reviews_shed_total` | `webhook`, `reason` | reviews not read: `body_budget` (no room to buffer the body in time, 503), `slow_body` (given up for a waiting body, 408), `body_timeout` (408) |
//! | `kanon_reviews_demoted_total` | `webhook` | reviews evaluated in the idle scheduling class because their namespace's recent reviews cost more than 10 ms of CPU each (a tenant's costly policies; see the server's evaluation pool) |
//! | `kanon_reviews_read_again_total` | `webhook`, `kind` | reviews read a second time, whole, because a mutation reached beyond the part of the object the first reading decoded (what the policies read): a policy that writes where nothing reads makes every review of its kind count here |
//! | `kanon_review_body_bytes` | | bytes of the body budget held by bodies being read or waiting to be read as JSON |
//!
//! `operation` and `kind` are empty when the review could not be read. `kind` comes from the
//! request, and anyone who reaches the webhook port can send a review, so its values are
//! bounded: the kinds the policies in force select, kanon's own policy kinds and Kubernetes'
//! built-in kinds always have their own value; any other plausible Kubernetes kind (ASCII letters and digits, starting
//! with a letter, at most 63) has its own value until [`MAX_OTHER_KIND_LABELS`] such kinds are
//! counted, and is counted as `other` after that, as is anything implausible. So reviews with
//! made-up kinds cannot push the kinds that matter out of the dashboards.

use std::collections::HashSet;
use std::sync::atomic::AtomicI64;
use std::sync::{Arc, PoisonError, RwLock};

use kanon_api::Operation;
use kanon_engine::WebhookKind;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::exemplar::HistogramWithExemplars;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::admission::{BadReview, Outcome, Reply};

mod exceptions;
mod kinds;
mod policies;

use exceptions::ExceptionSeries;
pub use exceptions::MAX_EXCEPTION_SERIES;
pub use kinds::MAX_OTHER_KIND_LABELS;
use kinds::{KindLabels, RESERVED_KINDS, kind_label};
use policies::{MAX_CACHED_POLICIES, PolicyCounters, PolicyHandles, address};

/// The content type of [`Metrics::encode`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Buckets of `kanon_admission_duration_seconds`: 100µs to 10s (kube-apiserver waits at most
/// 30s for a webhook, 10s by default).
const DURATION_BUCKETS: [f64; 16] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

/// Why the server closed a connection of its own accord.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shed {
    /// To make room for a new connection at the cap.
    Evicted,
    /// A new connection at the cap, with no room to make.
    Refused,
    /// The TLS handshake or a request head did not arrive in time.
    HeaderTimeout,
    /// The client did not read its answer in time.
    WriteTimeout,
}

impl Shed {
    fn label(self) -> &'static str {
        match self {
            Shed::Evicted => "evicted",
            Shed::Refused => "refused",
            Shed::HeaderTimeout => "header_timeout",
            Shed::WriteTimeout => "write_timeout",
        }
    }
}

/// Why a review was not read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReviewShed {
    /// No room in the body budget before the deadline.
    BodyBudget,
    /// Its body arrived so slowly it was given up for another.
    SlowBody,
    /// Its body did not arrive in time.
    BodyTimeout,
}

impl ReviewShed {
    fn label(self) -> &'static str {
        match self {
            ReviewShed::BodyBudget => "body_budget",
            ReviewShed::SlowBody => "slow_body",
            ReviewShed::BodyTimeout => "body_timeout",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    webhook: &'static str,
    operation: &'static str,
    kind: String,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WebhookKindLabels {
    webhook: &'static str,
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WebhookLabels {
    webhook: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PolicyLabels {
    policy: Arc<str>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PolicyErrorLabels {
    policy: Arc<str>,
    ignored: &'static str,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ExceptionLabels {
    exception: Arc<str>,
    policy: Arc<str>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SourceLabels {
    source: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ListenerLabels {
    listener: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShedLabels {
    listener: &'static str,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReviewShedLabels {
    webhook: &'static str,
    reason: &'static str,
}

fn duration_histogram() -> Histogram {
    Histogram::new(DURATION_BUCKETS)
}

fn duration_histogram_with_exemplars() -> HistogramWithExemplars<TraceLabels> {
    HistogramWithExemplars::new(DURATION_BUCKETS.iter().copied())
}

/// An exemplar's labels: the trace of a review that fell in a bucket.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TraceLabels {
    trace_id: String,
}

/// `kanon_admission_duration_seconds`: plain, or with the trace id of a review per bucket
/// (exemplars, which Grafana links to the trace) when traces are exported. The exemplar
/// histogram takes a lock per observation, so it is used only when there are traces to link.
#[derive(Debug)]
enum Durations {
    Plain(Family<WebhookLabels, Histogram, fn() -> Histogram>),
    Exemplars(
        Family<
            WebhookLabels,
            HistogramWithExemplars<TraceLabels>,
            fn() -> HistogramWithExemplars<TraceLabels>,
        >,
    ),
}

/// How [`Metrics`] are made besides their families.
#[derive(Debug, Clone, Default)]
pub struct MetricsOptions {
    /// Constant labels on every sample (a fleet's `cluster="…"`, so that dashboards can merge
    /// clusters).
    pub labels: Vec<(String, String)>,
    /// Whether review durations carry the trace id of a traced review as an exemplar (when
    /// traces are exported).
    pub trace_exemplars: bool,
}

/// The registry and every metric family kanon exports.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    duration: Durations,
    evaluations: Family<PolicyLabels, Counter>,
    patches: Family<PolicyLabels, Counter>,
    rejections: Family<PolicyLabels, Counter>,
    errors: Family<PolicyErrorLabels, Counter>,
    exceptions: Family<ExceptionLabels, Counter>,
    policies: Gauge<i64, AtomicI64>,
    ready: Gauge<i64, AtomicI64>,
    reload_failures: Family<SourceLabels, Counter>,
    connections: Family<ListenerLabels, Gauge<i64, AtomicI64>>,
    connections_shed: Family<ShedLabels, Counter>,
    reviews_shed: Family<ReviewShedLabels, Counter>,
    reviews_demoted: Family<WebhookLabels, Counter>,
    reviews_read_again: Family<WebhookKindLabels, Counter>,
    body_bytes: Gauge<i64, AtomicI64>,
    /// The `kind` label values.
    kinds: RwLock<KindLabels>,
    /// The (exception, policy) pairs with series of their own.
    exception_series: ExceptionSeries,
    /// Each policy's counters, found without hashing its label ([`PolicyCounters`]).
    policy_counters: PolicyCounters,
}

impl Metrics {
    /// A fresh registry with every family registered (and no sample yet).
    pub fn new() -> Arc<Self> {
        Self::with(|_| {})
    }

    /// [`Metrics::new`], with more families registered by `more` (e.g. the cluster runtime's),
    /// served on the same `/metrics`.
    pub fn with(more: impl FnOnce(&mut Registry)) -> Arc<Self> {
        Self::configured(MetricsOptions::default(), more)
    }

    /// [`Metrics::with`], made as `options` say.
    pub fn configured(options: MetricsOptions, more: impl FnOnce(&mut Registry)) -> Arc<Self> {
        let mut registry = Registry::with_labels(
            options
                .labels
                .into_iter()
                .map(|(key, value)| (key.into(), value.into())),
        );
        let requests = Family::<RequestLabels, Counter>::default();
        let evaluations = Family::<PolicyLabels, Counter>::default();
        let patches = Family::<PolicyLabels, Counter>::default();
        let rejections = Family::<PolicyLabels, Counter>::default();
        let errors = Family::<PolicyErrorLabels, Counter>::default();
        let exceptions = Family::<ExceptionLabels, Counter>::default();
        let policies = Gauge::<i64, AtomicI64>::default();
        let ready = Gauge::<i64, AtomicI64>::default();
        let reload_failures = Family::<SourceLabels, Counter>::default();
        let connections = Family::<ListenerLabels, Gauge<i64, AtomicI64>>::default();
        let connections_shed = Family::<ShedLabels, Counter>::default();
        let reviews_shed = Family::<ReviewShedLabels, Counter>::default();
        let reviews_demoted = Family::<WebhookLabels, Counter>::default();
        let reviews_read_again = Family::<WebhookKindLabels, Counter>::default();
        let body_bytes = Gauge::<i64, AtomicI64>::default();

        // Counters are registered without `_total`: the encoder appends it.
        registry.register(
            "kanon_admission_requests",
            "Admission reviews answered, by webhook, operation, kind and result",
            requests.clone(),
        );
        const DURATION_HELP: &str = "Time to answer an admission review";
        let duration = if options.trace_exemplars {
            let family = Family::new_with_constructor(
                duration_histogram_with_exemplars as fn() -> HistogramWithExemplars<TraceLabels>,
            );
            registry.register(
                "kanon_admission_duration_seconds",
                DURATION_HELP,
                family.clone(),
            );
            Durations::Exemplars(family)
        } else {
            let family = Family::new_with_constructor(duration_histogram as fn() -> Histogram);
            registry.register(
                "kanon_admission_duration_seconds",
                DURATION_HELP,
                family.clone(),
            );
            Durations::Plain(family)
        };
        registry.register(
            "kanon_policy_evaluations",
            "Times a policy met a request",
            evaluations.clone(),
        );
        registry.register(
            "kanon_policy_patches",
            "Times an override policy changed the object",
            patches.clone(),
        );
        registry.register(
            "kanon_policy_rejections",
            "Times a validate policy found the object wanting",
            rejections.clone(),
        );
        registry.register(
            "kanon_policy_errors",
            "Policy evaluation errors, by whether failurePolicy Ignore skipped them",
            errors.clone(),
        );
        registry.register(
            "kanon_exceptions_applied",
            "Times a PolicyException exempted a request from a policy",
            exceptions.clone(),
        );
        registry.register("kanon_policies", "Policies in force", policies.clone());
        registry.register(
            "kanon_ready",
            "1 when a policy set is in force and requests are served",
            ready.clone(),
        );
        registry.register(
            "kanon_policy_reload_failures",
            "Policy sets that could not be loaded, by source",
            reload_failures.clone(),
        );
        registry.register(
            "kanon_connections",
            "Connections open, by listener",
            connections.clone(),
        );
        registry.register(
            "kanon_connections_shed",
            "Connections the server closed of its own accord, by listener and reason",
            connections_shed.clone(),
        );
        registry.register(
            "kanon_reviews_shed",
            "Reviews whose body was not read, by webhook and reason",
            reviews_shed.clone(),
        );
        registry.register(
            "kanon_reviews_demoted",
            "Reviews evaluated in the idle scheduling class, their namespace's recent reviews being costly, by webhook",
            reviews_demoted.clone(),
        );
        registry.register(
            "kanon_reviews_read_again",
            "Reviews read again whole because a mutation reached beyond the part of the object decoded, by webhook and kind",
            reviews_read_again.clone(),
        );
        registry.register(
            "kanon_review_body_bytes",
            "Bytes of the body budget held by review bodies",
            body_bytes.clone(),
        );
        more(&mut registry);

        Arc::new(Metrics {
            registry,
            requests,
            duration,
            evaluations,
            patches,
            rejections,
            errors,
            exceptions,
            policies,
            ready,
            reload_failures,
            connections,
            connections_shed,
            reviews_shed,
            reviews_demoted,
            reviews_read_again,
            body_bytes,
            kinds: RwLock::new(KindLabels {
                selected: RESERVED_KINDS.iter().map(|k| k.to_string()).collect(),
                others: HashSet::new(),
            }),
            exception_series: ExceptionSeries::default(),
            policy_counters: PolicyCounters::default(),
        })
    }

    /// Records one answered review: its result, how long it took and, when it was evaluated,
    /// what each policy did. `operation` and `kind` are the request's, when it could be read.
    pub fn observe_review(
        &self,
        webhook: WebhookKind,
        reply: &Reply,
        operation: Option<Operation>,
        kind: Option<&str>,
        seconds: f64,
    ) {
        let webhook_name = webhook_label(webhook);
        let result = match &reply.outcome {
            Outcome::Invalid(BadReview::OverBudget(_)) => "over_budget",
            Outcome::Invalid(error) if error.http_status() == 413 => "too_large",
            Outcome::Invalid(_) => "invalid",
            Outcome::Decided(decision) if !decision.allowed => "denied",
            Outcome::Decided(decision)
                if operation
                    .is_some_and(|operation| decision.carries_patch(webhook, operation)) =>
            {
                "patched"
            }
            Outcome::Decided(_) | Outcome::Unevaluated => "allowed",
            Outcome::NotReady => "not_ready",
        };
        let kind = kind_label(&self.kinds, kind.unwrap_or_default());
        if reply.read_again {
            self.reviews_read_again
                .get_or_create(&WebhookKindLabels {
                    webhook: webhook_name,
                    kind: kind.clone(),
                })
                .inc();
        }
        self.requests
            .get_or_create(&RequestLabels {
                webhook: webhook_name,
                operation: operation.map_or("", operation_label),
                kind,
                result,
            })
            .inc();
        if seconds.is_finite() && seconds >= 0.0 {
            let labels = WebhookLabels {
                webhook: webhook_name,
            };
            match &self.duration {
                Durations::Plain(family) => family.get_or_create(&labels).observe(seconds),
                Durations::Exemplars(family) => family.get_or_create(&labels).observe(
                    seconds,
                    crate::trace::current_trace_id().map(|trace_id| TraceLabels { trace_id }),
                    None,
                ),
            }
        }
        let Outcome::Decided(decision) = &reply.outcome else {
            return;
        };
        self.record_policies(&decision.policy_results);
        // Exemptions are rare: counted by their labels each time.
        for applied in &decision.exceptions {
            self.exceptions
                .get_or_create(
                    &self
                        .exception_series
                        .labels(&applied.exception, &applied.policy),
                )
                .inc();
        }
    }

    /// Counts what each policy did, through the cached counters of each.
    fn record_policies(&self, results: &[kanon_engine::PolicyResult]) {
        let mut missing = Vec::new();
        {
            let cache = self
                .policy_counters
                .by_label
                .read()
                .unwrap_or_else(PoisonError::into_inner);
            for result in results {
                match cache.get(&address(&result.policy)) {
                    Some(handles) => handles.record(self, result.outcome),
                    None => missing.push(result),
                }
            }
        }
        if missing.is_empty() {
            return;
        }
        let mut cache = self
            .policy_counters
            .by_label
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        for result in missing {
            if cache.len() >= MAX_CACHED_POLICIES {
                cache.clear();
            }
            cache
                .entry(address(&result.policy))
                .or_insert_with(|| PolicyHandles::new(self, &result.policy))
                .record(self, result.outcome);
        }
    }

    /// Sets `kanon_policies`: how many policies are in force.
    pub fn policies_loaded(&self, count: usize) {
        self.policies.set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    /// Sets `kanon_ready`.
    pub fn set_ready(&self, ready: bool) {
        self.ready.set(i64::from(ready));
    }

    /// The kinds the policies in force select: each keeps its own `kind` label value, however
    /// many other kinds reviews carry. kanon's own policy kinds and Kubernetes' built-in kinds
    /// always do.
    pub fn set_selected_kinds(&self, kinds: impl IntoIterator<Item = String>) {
        let selected: HashSet<String> = kinds
            .into_iter()
            .chain(RESERVED_KINDS.iter().map(|k| k.to_string()))
            .collect();
        let mut labels = self.kinds.write().unwrap_or_else(PoisonError::into_inner);
        labels.others.retain(|kind| !selected.contains(kind));
        labels.selected = selected;
    }

    /// Sets `kanon_connections{listener}`.
    pub fn connections_open(&self, listener: &'static str, count: usize) {
        self.connections
            .get_or_create(&ListenerLabels { listener })
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    /// Counts a connection the server closed of its own accord.
    pub fn connection_shed(&self, listener: &'static str, reason: Shed) {
        self.connections_shed
            .get_or_create(&ShedLabels {
                listener,
                reason: reason.label(),
            })
            .inc();
    }

    /// Counts a review whose body was not read.
    pub fn review_shed(&self, webhook: WebhookKind, reason: ReviewShed) {
        self.reviews_shed
            .get_or_create(&ReviewShedLabels {
                webhook: webhook_label(webhook),
                reason: reason.label(),
            })
            .inc();
    }

    /// Counts a review evaluated in the idle class, its namespace being costly.
    pub fn review_demoted(&self, webhook: WebhookKind) {
        self.reviews_demoted
            .get_or_create(&WebhookLabels {
                webhook: webhook_label(webhook),
            })
            .inc();
    }

    /// Sets `kanon_review_body_bytes`.
    pub fn body_bytes_reserved(&self, bytes: usize) {
        self.body_bytes
            .set(i64::try_from(bytes).unwrap_or(i64::MAX));
    }

    /// Counts a policy set from `source` (`directory`, `cluster`) that could not be loaded.
    pub fn reload_failed(&self, source: &str) {
        self.reload_failures
            .get_or_create(&SourceLabels {
                source: source.to_string(),
            })
            .inc();
    }

    /// Every metric as OpenMetrics text ([`CONTENT_TYPE`]), ending with `# EOF`.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing to a String cannot fail; a metric that fails to encode is left out rather
        // than failing the scrape.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}

/// The operations a review can carry; anything else (never sent by kube-apiserver) is `other`.
fn operation_label(operation: Operation) -> &'static str {
    match operation {
        // A review names one operation; `*` only matches them.
        Operation::All => "other",
        operation => operation.as_str(),
    }
}

fn webhook_label(webhook: WebhookKind) -> &'static str {
    match webhook {
        WebhookKind::Mutating => "mutate",
        WebhookKind::Validating => "validate",
    }
}

#[cfg(test)]
mod tests;
