//! SECURITY.md §5 lists every metric family `/metrics` serves, and nothing else. The families
//! come from the registrations of the webhook, kanon-cluster and the certificates (read from
//! their sources, since a family with no sample yet is left out of an exposition), checked
//! against a real exposition of the registry `kanon serve` builds, with a sample in every
//! family a caller outside those crates can reach. The audit's families may be listed or not;
//! every family the table lists must be registered.

use std::collections::BTreeSet;
use std::time::Duration;

use kanon_cluster::audit::metrics::AuditMetrics;
use kanon_cluster::certificates::CertificateMetrics;
use kanon_cluster::{ClusterMetrics, LookupSource};
use kanon_engine::{LookupError, WebhookKind};
use kanon_webhook::metrics::{Metrics, ReviewShed, Shed};

const WEBHOOK: &str = include_str!("../../kanon-webhook/src/metrics/mod.rs");
const TRACES: &str = include_str!("../../kanon-webhook/src/trace/queue.rs");
const DECISIONS: &str = include_str!("../../kanon-webhook/src/decisions.rs");
const CLUSTER: &str = include_str!("../../kanon-cluster/src/metrics.rs");
const CERTIFICATES: &str = include_str!("../../kanon-cluster/src/certificates.rs");
const AUDIT: &str = include_str!("../../kanon-cluster/src/audit/metrics.rs");
const EVENTS: &str = include_str!("../../kanon-cluster/src/events/metrics.rs");
const SECURITY: &str = include_str!("../../../SECURITY.md");

/// The family names `source` registers: the first string literal after each `register(`
/// (counters without `_total`, as they are registered and exposed).
fn registered_in(source: &str) -> BTreeSet<String> {
    source
        .split("register(")
        .chain(source.split("register_with_unit("))
        .skip(1)
        .filter_map(|rest| rest.split('"').nth(1))
        .filter(|name| name.starts_with("kanon_"))
        .map(str::to_string)
        .collect()
}

/// The family names of an OpenMetrics exposition (`# TYPE name kind`).
fn exposed(exposition: &str) -> BTreeSet<String> {
    exposition
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// The families SECURITY.md §5's table lists (`_total` dropped, to match the registrations).
fn documented() -> BTreeSet<String> {
    let section = SECURITY
        .split("### 5. ")
        .nth(1)
        .and_then(|rest| rest.split("\n### ").next())
        .unwrap_or_default();
    section
        .lines()
        .filter(|line| line.starts_with("| `kanon_"))
        .filter_map(|line| line.split('|').nth(1))
        .flat_map(|cell| cell.split(','))
        .map(|name| name.trim().trim_matches('`'))
        .map(|name| name.strip_suffix("_total").unwrap_or(name).to_string())
        .collect()
}

/// A scrape of the registry as `kanon serve` builds it in a cluster, with a sample in every
/// family reachable from here.
fn scrape() -> String {
    let cluster = ClusterMetrics::new();
    let certificates = CertificateMetrics::new();
    let audit = AuditMetrics::new();
    let traces = kanon_webhook::trace::TraceMetrics::default();
    let decisions = kanon_webhook::decisions::DecisionLogMetrics::default();
    let events = kanon_cluster::events::EventMetrics::new();
    let metrics = Metrics::with(|registry| {
        cluster.register(registry);
        certificates.register(registry);
        audit.register(registry);
        traces.register(registry);
        decisions.register(registry);
        events.register(registry);
    });
    traces.dropped.inc();
    events.written(kanon_cluster::events::Action::Denied);
    events.aggregated(kanon_cluster::events::Action::Audited);
    events.dropped(kanon_cluster::events::metrics::Dropped::QueueFull, 1);
    decisions.written.inc();
    metrics.reload_failed("cluster");
    metrics.connections_open("webhook", 1);
    metrics.connection_shed("webhook", Shed::Refused);
    metrics.review_shed(WebhookKind::Validating, ReviewShed::SlowBody);
    metrics.body_bytes_reserved(1);
    let timed_out = LookupError::TimedOut {
        what: "v1/ConfigMap a/b".into(),
        after: Duration::from_millis(1),
    };
    cluster.lookup_hit(LookupSource::Objects);
    cluster.lookup_miss(
        LookupSource::Http,
        Duration::from_millis(1),
        &Ok::<(), _>(()),
    );
    cluster.lookup_error(LookupSource::Objects, &timed_out);
    cluster.compiled(false);
    cluster.set_invalid(0);
    cluster.watch_error("Namespace");
    cluster.status_write(true);
    metrics.encode()
}

#[test]
fn security_md_lists_every_metric_family_served() {
    let registered: BTreeSet<String> = [WEBHOOK, CLUSTER, CERTIFICATES, TRACES, DECISIONS, EVENTS]
        .into_iter()
        .flat_map(registered_in)
        .collect();
    let audit = registered_in(AUDIT);
    assert!(registered.len() > 20, "{registered:?}");
    assert!(!audit.is_empty());

    // The sources hold every family a scrape shows.
    let served = exposed(&scrape());
    assert!(served.len() > 15, "{served:?}");
    let unread: Vec<&String> = served
        .iter()
        .filter(|f| !registered.contains(*f) && !audit.contains(*f))
        .collect();
    assert!(
        unread.is_empty(),
        "served but not found registered: {unread:?}"
    );

    let documented = documented();
    let undocumented: Vec<&String> = registered.difference(&documented).collect();
    assert!(
        undocumented.is_empty(),
        "registered but not in SECURITY.md §5: {undocumented:?}"
    );
    let unserved: Vec<&String> = documented
        .iter()
        .filter(|f| !registered.contains(*f) && !audit.contains(*f))
        .collect();
    assert!(
        unserved.is_empty(),
        "in SECURITY.md §5 but not registered: {unserved:?}"
    );
}
