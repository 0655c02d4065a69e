//! The webhook's Prometheus metrics, served as OpenMetrics text on `GET /metrics`.
//!
//! | metric | labels | what |
//! |---|---|---|
//! | `kanon_admission_requests_total` | `webhook`, `operation`, `kind`, `result` | reviews answered; `result` is `allowed`, `denied`, `patched`, `invalid` (HTTP 400), `too_large` (HTTP 413: the body's bytes), `over_budget` (HTTP 413: what its JSON takes once read, or its nesting) or `not_ready` (HTTP 503) |
//! | `kanon_admission_duration_seconds` | `webhook` | time to answer a review |
//! | `kanon_policy_evaluations_total` | `policy` | times a policy met a request |
//! | `kanon_policy_patches_total` | `policy` | times an override policy changed the object |
//! | `kanon_policy_rejections_total` | `policy` | times a validate policy found the object wanting |
//! | `kanon_policy_errors_total` | `policy`, `ignored`, `reason` | evaluation errors (`ignored` under `failurePolicy: Ignore`; `reason`: `timed_out`, `not_synced`, `not_found`, `cel`, `program`, ... as `RuleError::reason` names it) |
//! | `kanon_policies` | | policies in force |
//! | `kanon_ready` | | 1 when a policy set is in force (`/readyz`) |
//! | `kanon_policy_reload_failures_total` | `source` | policy sets that could not be loaded |
//! | `kanon_connections` | `listener` | connections open (`webhook`, `metrics`) |
//! | `kanon_connections_shed_total` | `listener`, `reason` | connections closed by the server's bounds: `evicted` (to make room for a new one), `refused` (no room), `header_timeout`, `write_timeout` |
//! | `kanon_reviews_shed_total` | `webhook`, `reason` | reviews not read: `body_budget` (no room to buffer the body in time, 503), `slow_body` (given up for a waiting body, 408), `body_timeout` (408) |
//! | `kanon_review_body_bytes` | | bytes of the body budget held by bodies being read or waiting to be read as JSON |
//!
//! `operation` and `kind` are empty when the review could not be read. `kind` comes from the
//! request, and anyone who reaches the webhook port can send a review, so its values are
//! bounded: the kinds the policies in force select, kanon's own policy kinds and Kubernetes'
//! built-in kinds always have their own value; any other plausible Kubernetes kind (ASCII letters and digits, starting
//! with a letter, at most 63) has its own value until [`MAX_OTHER_KIND_LABELS`] such kinds are
//! counted, and is counted as `other` after that, as is anything implausible. So reviews with
//! made-up kinds cannot push the kinds that matter out of the dashboards.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::AtomicI64;
use std::sync::{Arc, OnceLock, PoisonError, RwLock};

use kanon_api::Operation;
use kanon_engine::{PolicyOutcome, WebhookKind};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::admission::{BadReview, Outcome, Reply};

/// The content type of [`Metrics::encode`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Buckets of `kanon_admission_duration_seconds`: 100µs to 10s (kube-apiserver waits at most
/// 30s for a webhook, 10s by default).
const DURATION_BUCKETS: [f64; 16] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

/// At most this many distinct `kind` label values that no policy selects (besides `other`)
/// are counted: the bound on the series a review sender can create.
pub const MAX_OTHER_KIND_LABELS: usize = 64;

/// The `kind` label values: the kinds policies select, and the others counted so far.
#[derive(Debug, Default)]
struct KindLabels {
    selected: HashSet<String>,
    others: HashSet<String>,
}

/// Kinds that always have their own `kind` label value: kanon's own (its validating webhook
/// checks them whatever policies are installed) and Kubernetes 1.35's built-in kinds, which a
/// policy that selects every type (or the `all` webhook rules) sends kanon without naming them.
const RESERVED_KINDS: &[&str] = &[
    // kanon
    "ClusterOverridePolicy",
    "OverridePolicy",
    "ClusterValidatePolicy",
    "ValidatePolicy",
    // core
    "Binding",
    "ComponentStatus",
    "ConfigMap",
    "Endpoints",
    "Event",
    "LimitRange",
    "Namespace",
    "Node",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "Pod",
    "PodTemplate",
    "ReplicationController",
    "ResourceQuota",
    "Secret",
    "Service",
    "ServiceAccount",
    // subresources reviews carry
    "Eviction",
    "Scale",
    "TokenRequest",
    "PodAttachOptions",
    "PodExecOptions",
    "PodPortForwardOptions",
    "PodProxyOptions",
    "NodeProxyOptions",
    "ServiceProxyOptions",
    // workloads
    "ControllerRevision",
    "DaemonSet",
    "Deployment",
    "ReplicaSet",
    "StatefulSet",
    "CronJob",
    "Job",
    "HorizontalPodAutoscaler",
    // networking, policy, access
    "Ingress",
    "IngressClass",
    "IPAddress",
    "NetworkPolicy",
    "ServiceCIDR",
    "EndpointSlice",
    "PodDisruptionBudget",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    // storage
    "CSIDriver",
    "CSINode",
    "CSIStorageCapacity",
    "StorageClass",
    "VolumeAttachment",
    "VolumeAttributesClass",
    // the control plane's own
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
    "MutatingAdmissionPolicy",
    "MutatingAdmissionPolicyBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "CustomResourceDefinition",
    "APIService",
    "CertificateSigningRequest",
    "ClusterTrustBundle",
    "Lease",
    "LeaseCandidate",
    "FlowSchema",
    "PriorityLevelConfiguration",
    "RuntimeClass",
    "PriorityClass",
    "DeviceClass",
    "DeviceTaintRule",
    "ResourceClaim",
    "ResourceClaimTemplate",
    "ResourceSlice",
    "StorageVersion",
    "StorageVersionMigration",
    "TokenReview",
    "SelfSubjectReview",
    "SubjectAccessReview",
    "SelfSubjectAccessReview",
    "LocalSubjectAccessReview",
    "SelfSubjectRulesReview",
];

/// The `kind` label value of a request's kind: itself when policies select it, or when it is
/// a plausible kind already counted or still under [`MAX_OTHER_KIND_LABELS`]; else `other`.
fn kind_label(kinds: &RwLock<KindLabels>, kind: &str) -> String {
    if kind.is_empty() {
        return String::new();
    }
    let plausible = kind.len() <= 63
        && kind.starts_with(|c: char| c.is_ascii_alphabetic())
        && kind.chars().all(|c| c.is_ascii_alphanumeric());
    if !plausible {
        return "other".to_string();
    }
    {
        let kinds = kinds.read().unwrap_or_else(PoisonError::into_inner);
        if kinds.selected.contains(kind) || kinds.others.contains(kind) {
            return kind.to_string();
        }
        if kinds.others.len() >= MAX_OTHER_KIND_LABELS {
            return "other".to_string();
        }
    }
    let mut kinds = kinds.write().unwrap_or_else(PoisonError::into_inner);
    if kinds.others.len() >= MAX_OTHER_KIND_LABELS {
        return "other".to_string();
    }
    kinds.others.insert(kind.to_string());
    kind.to_string()
}

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
    exception: String,
    policy: String,
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

/// The registry and every metric family kanon exports.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    duration: Family<WebhookLabels, Histogram, fn() -> Histogram>,
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
    body_bytes: Gauge<i64, AtomicI64>,
    /// The `kind` label values.
    kinds: RwLock<KindLabels>,
    /// Each policy's counters, found without hashing its label ([`PolicyCounters`]).
    policy_counters: PolicyCounters,
}

/// At most this many policies' counters are cached (policy sets replaced many times): past it
/// the cache is emptied and refilled as policies meet requests. The counters themselves stay.
const MAX_CACHED_POLICIES: usize = 65_536;

/// Each policy's counters, found by the address of its label (the `Arc<str>` a policy result
/// shares with its compiled policy) rather than by hashing the label's text under a family's
/// lock, twice per policy and review. An entry holds its label, so no other label can take
/// that address while it is a key.
#[derive(Debug, Default)]
struct PolicyCounters {
    by_label: RwLock<HashMap<usize, PolicyHandles, BuildHasherDefault<AddressHasher>>>,
}

/// One policy's counters. `evaluations` exists from the first evaluation; the others from the
/// first time they count, so a policy that never patched has no `patches` series, as before.
#[derive(Debug)]
struct PolicyHandles {
    label: Arc<str>,
    evaluations: Counter,
    patches: OnceLock<Counter>,
    rejections: OnceLock<Counter>,
}

/// Hashes an address: it is already unique, only its low bits need spreading.
#[derive(Default)]
struct AddressHasher(u64);

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

fn address(label: &Arc<str>) -> usize {
    Arc::as_ptr(label).cast::<u8>() as usize
}

impl PolicyHandles {
    fn new(metrics: &Metrics, label: &Arc<str>) -> Self {
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

    fn record(&self, metrics: &Metrics, outcome: PolicyOutcome) {
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

impl Metrics {
    /// A fresh registry with every family registered (and no sample yet).
    pub fn new() -> Arc<Self> {
        Self::with(|_| {})
    }

    /// [`Metrics::new`], with more families registered by `more` (e.g. the cluster runtime's),
    /// served on the same `/metrics`.
    pub fn with(more: impl FnOnce(&mut Registry)) -> Arc<Self> {
        let mut registry = Registry::default();
        let requests = Family::<RequestLabels, Counter>::default();
        let duration = Family::<WebhookLabels, Histogram, fn() -> Histogram>::new_with_constructor(
            duration_histogram,
        );
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
        let body_bytes = Gauge::<i64, AtomicI64>::default();

        // Counters are registered without `_total`: the encoder appends it.
        registry.register(
            "kanon_admission_requests",
            "Admission reviews answered, by webhook, operation, kind and result",
            requests.clone(),
        );
        registry.register(
            "kanon_admission_duration_seconds",
            "Time to answer an admission review",
            duration.clone(),
        );
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
            body_bytes,
            kinds: RwLock::new(KindLabels {
                selected: RESERVED_KINDS.iter().map(|k| k.to_string()).collect(),
                others: HashSet::new(),
            }),
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
        self.requests
            .get_or_create(&RequestLabels {
                webhook: webhook_name,
                operation: operation.map_or("", operation_label),
                kind: kind_label(&self.kinds, kind.unwrap_or_default()),
                result,
            })
            .inc();
        if seconds.is_finite() && seconds >= 0.0 {
            self.duration
                .get_or_create(&WebhookLabels {
                    webhook: webhook_name,
                })
                .observe(seconds);
        }
        let Outcome::Decided(decision) = &reply.outcome else {
            return;
        };
        self.record_policies(&decision.policy_results);
        // Exemptions are rare: counted by their labels each time.
        for applied in &decision.exceptions {
            self.exceptions
                .get_or_create(&ExceptionLabels {
                    exception: applied.exception.to_string(),
                    policy: applied.policy.to_string(),
                })
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
mod tests {
    use super::*;
    use crate::admission::BadReview;
    use kanon_engine::{Decision, PolicyResult};
    use serde_json::json;

    fn decided(allowed: bool, patch: bool, results: Vec<PolicyResult>) -> Reply {
        let patch: json_patch::Patch = if patch {
            serde_json::from_value(json!([{"op": "add", "path": "/a", "value": 1}])).unwrap()
        } else {
            json_patch::Patch(Vec::new())
        };
        let decision = Decision {
            allowed,
            messages: if allowed {
                vec![]
            } else {
                vec!["no".to_string()]
            },
            warnings: vec![],
            audit_annotations: Default::default(),
            status_reason: None,
            applied_policies: results.iter().map(|r| r.policy.to_string()).collect(),
            patch,
            patched: None,
            policy_results: results,
            exceptions: vec![],
            findings: None,
        };
        Reply {
            status: 200,
            body: Vec::new(),
            uid: Some("u".into()),
            outcome: Outcome::Decided(Box::new(decision)),
            request: None,
        }
    }

    fn result(policy: &str, outcome: PolicyOutcome) -> PolicyResult {
        PolicyResult {
            policy: policy.into(),
            outcome,
        }
    }

    /// The value of the sample line `name{labels}` (labels as encoded, in order).
    fn sample(text: &str, series: &str) -> Option<f64> {
        text.lines().find_map(|line| {
            let (name, value) = line.rsplit_once(' ')?;
            (name == series).then(|| value.parse().unwrap())
        })
    }

    #[test]
    fn exemptions_are_counted_by_exception_and_policy() {
        let metrics = Metrics::new();
        let mut reply = decided(
            true,
            false,
            vec![result("ClusterValidatePolicy/p", PolicyOutcome::Exempted)],
        );
        if let Outcome::Decided(decision) = &mut reply.outcome {
            decision.exceptions.push(kanon_engine::AppliedException {
                exception: "PolicyException/ops/legacy".into(),
                policy: "ClusterValidatePolicy/p".into(),
                rules: vec![],
            });
        }
        metrics.observe_review(
            WebhookKind::Validating,
            &reply,
            Some(Operation::Create),
            Some("Pod"),
            0.0,
        );
        metrics.observe_review(
            WebhookKind::Validating,
            &reply,
            Some(Operation::Create),
            Some("Pod"),
            0.0,
        );
        let text = metrics.encode();
        assert_eq!(
            sample(
                &text,
                "kanon_exceptions_applied_total{exception=\"PolicyException/ops/legacy\",policy=\"ClusterValidatePolicy/p\"}"
            ),
            Some(2.0),
            "{text}"
        );
        // An exempted policy still met the request.
        assert_eq!(
            sample(
                &text,
                "kanon_policy_evaluations_total{policy=\"ClusterValidatePolicy/p\"}"
            ),
            Some(2.0),
            "{text}"
        );
    }

    #[test]
    fn kind_labels_are_a_bounded_set() {
        let metrics = Metrics::new();
        let allowed = decided(true, false, vec![]);
        let observe = |kind: &str| {
            metrics.observe_review(
                WebhookKind::Validating,
                &allowed,
                Some(Operation::Create),
                Some(kind),
                0.0,
            )
        };
        let kinds = |text: &str| -> HashSet<String> {
            text.lines()
                .filter(|l| l.starts_with("kanon_admission_requests_total{"))
                .filter_map(|l| l.split("kind=\"").nth(1)?.split('"').next())
                .map(str::to_string)
                .collect()
        };
        metrics.set_selected_kinds(["Widget".to_string()]);
        // What a sender chooses is not echoed: free text becomes `other`.
        observe("Pod");
        observe("password=hunter2 {\"x\"}");
        observe(&"K".repeat(64));
        for n in 0..MAX_OTHER_KIND_LABELS + 50 {
            observe(&format!("Kind{n}"));
        }
        // Kinds the policies select keep their own value after any number of junk kinds, and
        // so do kanon's own and the built-in ones, which no policy names when it selects every
        // type.
        observe("Widget");
        observe("Deployment");
        observe("ClusterValidatePolicy");
        let text = metrics.encode();
        assert!(!text.contains("hunter2"), "{text}");
        let seen = kinds(&text);
        for kind in [
            "Pod",
            "Widget",
            "Deployment",
            "ClusterValidatePolicy",
            "other",
        ] {
            assert!(seen.contains(kind), "{kind}: {seen:?}");
        }
        assert_eq!(seen.len(), MAX_OTHER_KIND_LABELS + 5, "{seen:?}");
        let other = sample(
            &text,
            r#"kanon_admission_requests_total{webhook="validate",operation="CREATE",kind="other",result="allowed"}"#,
        );
        // The free text, the 64-character kind and the 50 kinds past the bound.
        assert_eq!(other, Some(52.0));
        // A new policy set selects a kind that was counted as `other`: from then on it has
        // its own value.
        metrics.set_selected_kinds(["Gadget".to_string()]);
        observe("Gadget");
        assert!(kinds(&metrics.encode()).contains("Gadget"));
    }

    #[test]
    fn counts_reviews_by_result() {
        let metrics = Metrics::new();
        let ops = Some(Operation::Create);
        let pod = Some("Pod");
        metrics.observe_review(
            WebhookKind::Mutating,
            &decided(true, true, vec![]),
            ops,
            pod,
            0.001,
        );
        metrics.observe_review(
            WebhookKind::Mutating,
            &decided(true, true, vec![]),
            ops,
            pod,
            0.002,
        );
        metrics.observe_review(
            WebhookKind::Mutating,
            &decided(true, false, vec![]),
            ops,
            pod,
            0.0001,
        );
        // The validating webhook never patches.
        metrics.observe_review(
            WebhookKind::Validating,
            &decided(true, true, vec![]),
            ops,
            pod,
            0.1,
        );
        metrics.observe_review(
            WebhookKind::Validating,
            &decided(false, false, vec![]),
            Some(Operation::Update),
            Some("Deployment"),
            0.2,
        );
        metrics.observe_review(
            WebhookKind::Validating,
            &Reply::invalid(None, BadReview::Empty),
            None,
            None,
            0.0,
        );
        metrics.observe_review(
            WebhookKind::Mutating,
            &Reply::too_large(10),
            None,
            None,
            0.0,
        );

        let text = metrics.encode();
        let requests = |labels: &str| {
            sample(
                &text,
                &format!("kanon_admission_requests_total{{{labels}}}"),
            )
        };
        assert_eq!(
            requests(r#"webhook="mutate",operation="CREATE",kind="Pod",result="patched""#),
            Some(2.0)
        );
        assert_eq!(
            requests(r#"webhook="mutate",operation="CREATE",kind="Pod",result="allowed""#),
            Some(1.0)
        );
        assert_eq!(
            requests(r#"webhook="validate",operation="CREATE",kind="Pod",result="allowed""#),
            Some(1.0)
        );
        assert_eq!(
            requests(r#"webhook="validate",operation="UPDATE",kind="Deployment",result="denied""#),
            Some(1.0)
        );
        assert_eq!(
            requests(r#"webhook="validate",operation="",kind="",result="invalid""#),
            Some(1.0)
        );
        assert_eq!(
            requests(r#"webhook="mutate",operation="",kind="",result="too_large""#),
            Some(1.0)
        );
        assert_eq!(
            sample(
                &text,
                r#"kanon_admission_duration_seconds_count{webhook="mutate"}"#
            ),
            Some(4.0)
        );
        assert_eq!(
            sample(
                &text,
                r#"kanon_admission_duration_seconds_bucket{le="0.0001",webhook="mutate"}"#
            ),
            Some(2.0),
            "{text}"
        );
        assert_eq!(
            sample(
                &text,
                r#"kanon_admission_duration_seconds_count{webhook="validate"}"#
            ),
            Some(3.0)
        );
    }

    #[test]
    fn counts_what_each_policy_did() {
        let metrics = Metrics::new();
        let results = vec![
            result(
                "ClusterOverridePolicy/a",
                PolicyOutcome::Mutated { patched: true },
            ),
            result(
                "OverridePolicy/ns/b",
                PolicyOutcome::Mutated { patched: false },
            ),
            result("ClusterValidatePolicy/c", PolicyOutcome::Rejected),
            result("ValidatePolicy/ns/d", PolicyOutcome::Passed),
            result(
                "ClusterValidatePolicy/e",
                PolicyOutcome::Failed {
                    ignored: true,
                    reason: "timed_out",
                },
            ),
            result(
                "ClusterValidatePolicy/e",
                PolicyOutcome::Failed {
                    ignored: false,
                    reason: "cel",
                },
            ),
        ];
        metrics.observe_review(
            WebhookKind::Mutating,
            &decided(false, false, results),
            Some(Operation::Create),
            Some("Pod"),
            0.01,
        );
        let text = metrics.encode();
        let value = |series: &str| sample(&text, series);
        assert_eq!(
            value(r#"kanon_policy_evaluations_total{policy="ClusterOverridePolicy/a"}"#),
            Some(1.0)
        );
        assert_eq!(
            value(r#"kanon_policy_evaluations_total{policy="ValidatePolicy/ns/d"}"#),
            Some(1.0)
        );
        assert_eq!(
            value(r#"kanon_policy_evaluations_total{policy="ClusterValidatePolicy/e"}"#),
            Some(2.0)
        );
        assert_eq!(
            value(r#"kanon_policy_patches_total{policy="ClusterOverridePolicy/a"}"#),
            Some(1.0)
        );
        assert_eq!(
            value(r#"kanon_policy_patches_total{policy="OverridePolicy/ns/b"}"#),
            None
        );
        assert_eq!(
            value(r#"kanon_policy_rejections_total{policy="ClusterValidatePolicy/c"}"#),
            Some(1.0)
        );
        assert_eq!(
            value(
                r#"kanon_policy_errors_total{policy="ClusterValidatePolicy/e",ignored="true",reason="timed_out"}"#
            ),
            Some(1.0)
        );
        assert_eq!(
            value(
                r#"kanon_policy_errors_total{policy="ClusterValidatePolicy/e",ignored="false",reason="cel"}"#
            ),
            Some(1.0)
        );
        // An invalid review names no policy.
        metrics.observe_review(
            WebhookKind::Mutating,
            &Reply::invalid(None, BadReview::Empty),
            None,
            None,
            0.0,
        );
        assert_eq!(
            sample(
                &metrics.encode(),
                r#"kanon_policy_evaluations_total{policy="ClusterOverridePolicy/a"}"#
            ),
            Some(1.0)
        );
    }

    /// Counters are cached by the address of a policy's label: the same label (a policy met
    /// again, or the same policy in a newly loaded set, with a label of its own) counts in the
    /// one series of that policy, and a cache emptied when full loses no count.
    #[test]
    fn a_policy_counts_in_one_series_whatever_its_label_copy() {
        let metrics = Metrics::new();
        let shared: Arc<str> = Arc::from("ClusterOverridePolicy/a");
        let results = |label: &Arc<str>| {
            vec![PolicyResult {
                policy: label.clone(),
                outcome: PolicyOutcome::Mutated { patched: true },
            }]
        };
        let observe = |results: Vec<PolicyResult>| {
            metrics.observe_review(
                WebhookKind::Mutating,
                &decided(true, true, results),
                Some(Operation::Create),
                Some("Pod"),
                0.001,
            )
        };
        observe(results(&shared));
        observe(results(&shared));
        // The same policy reloaded: the same text in another allocation.
        observe(results(&Arc::from("ClusterOverridePolicy/a")));
        // Many other policies: the cache is emptied on the way.
        for i in 0..MAX_CACHED_POLICIES + 10 {
            observe(results(&Arc::from(format!("ClusterOverridePolicy/x{i}"))));
        }
        observe(results(&shared));
        let text = metrics.encode();
        for series in ["evaluations", "patches"] {
            assert_eq!(
                sample(
                    &text,
                    &format!(r#"kanon_policy_{series}_total{{policy="ClusterOverridePolicy/a"}}"#)
                ),
                Some(4.0),
                "{series}"
            );
        }
        let cached = metrics
            .policy_counters
            .by_label
            .read()
            .map(|cache| cache.len())
            .unwrap_or_default();
        assert!(cached <= MAX_CACHED_POLICIES, "{cached} cached");
    }

    #[test]
    fn gauges_and_reload_failures() {
        let metrics = Metrics::new();
        let text = metrics.encode();
        assert_eq!(sample(&text, "kanon_ready"), Some(0.0));
        assert_eq!(sample(&text, "kanon_policies"), Some(0.0));
        metrics.policies_loaded(7);
        metrics.set_ready(true);
        metrics.reload_failed("directory");
        metrics.reload_failed("directory");
        metrics.reload_failed("cluster");
        let text = metrics.encode();
        assert_eq!(sample(&text, "kanon_ready"), Some(1.0));
        assert_eq!(sample(&text, "kanon_policies"), Some(7.0));
        assert_eq!(
            sample(
                &text,
                r#"kanon_policy_reload_failures_total{source="directory"}"#
            ),
            Some(2.0)
        );
        assert_eq!(
            sample(
                &text,
                r#"kanon_policy_reload_failures_total{source="cluster"}"#
            ),
            Some(1.0)
        );
        metrics.set_ready(false);
        assert_eq!(sample(&metrics.encode(), "kanon_ready"), Some(0.0));
    }

    #[test]
    fn encoding_is_line_by_line_openmetrics() {
        let metrics = Metrics::new();
        metrics.observe_review(
            WebhookKind::Validating,
            &decided(
                false,
                false,
                vec![
                    result("ClusterValidatePolicy/c", PolicyOutcome::Rejected),
                    result(
                        "ClusterOverridePolicy/a",
                        PolicyOutcome::Mutated { patched: true },
                    ),
                    result(
                        "ClusterValidatePolicy/e",
                        PolicyOutcome::Failed {
                            ignored: false,
                            reason: "program",
                        },
                    ),
                ],
            ),
            Some(Operation::Create),
            Some("Pod"),
            0.003,
        );
        metrics.policies_loaded(1);
        metrics.set_ready(true);
        metrics.reload_failed("directory");
        let text = metrics.encode();
        // Families without a sample are left out; every family has one here.
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.last(), Some(&"# EOF"), "{text}");
        let mut types = std::collections::BTreeMap::new();
        for line in &lines[..lines.len() - 1] {
            if let Some(rest) = line.strip_prefix("# ") {
                let mut words = rest.splitn(3, ' ');
                let keyword = words.next().unwrap();
                let name = words.next().unwrap();
                assert!(
                    matches!(keyword, "HELP" | "TYPE" | "UNIT"),
                    "bad comment line {line:?}"
                );
                if keyword == "TYPE" {
                    types.insert(name.to_string(), words.next().unwrap().to_string());
                }
                continue;
            }
            // `name{labels} value` or `name value`.
            let (series, value) = line.rsplit_once(' ').expect(line);
            value
                .parse::<f64>()
                .unwrap_or_else(|_| panic!("bad value in {line:?}"));
            let name = series.split('{').next().unwrap();
            assert!(
                name.starts_with("kanon_")
                    && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
                "bad name in {line:?}"
            );
            let labels = &series[name.len()..];
            if !labels.is_empty() {
                let inner = labels
                    .strip_prefix('{')
                    .and_then(|l| l.strip_suffix('}'))
                    .unwrap_or_else(|| panic!("bad labels in {line:?}"));
                for pair in inner.split(',') {
                    let (key, value) = pair.split_once('=').expect(line);
                    assert!(key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
                    assert!(value.starts_with('"') && value.ends_with('"'), "{line:?}");
                }
            }
            assert!(
                types.keys().any(|family| name.starts_with(family.as_str())),
                "sample {line:?} before its TYPE"
            );
        }
        for (family, kind) in [
            ("kanon_admission_requests", "counter"),
            ("kanon_admission_duration_seconds", "histogram"),
            ("kanon_policy_evaluations", "counter"),
            ("kanon_policy_patches", "counter"),
            ("kanon_policy_rejections", "counter"),
            ("kanon_policy_errors", "counter"),
            ("kanon_policies", "gauge"),
            ("kanon_ready", "gauge"),
            ("kanon_policy_reload_failures", "counter"),
        ] {
            assert_eq!(
                types.get(family).map(String::as_str),
                Some(kind),
                "{family}"
            );
        }
    }
}
