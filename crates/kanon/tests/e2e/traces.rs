//! One trace through kube-apiserver and kanon, read back from a real trace backend.
//!
//! Jaeger v2 (built from its Go module and cached like the control plane) receives OTLP from
//! both: a control plane of the scenario's own, whose kube-apiserver traces every request
//! (`--tracing-config-file`, sampling 1), and a kanon exporting over OTLP/gRPC. A Pod create
//! must then be one trace in which kanon's review spans sit under the apiserver's webhook calls,
//! with the policy and lookup spans beneath them; the background audit's pages are traces of
//! their own.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kanon_control_plane::kanon::{self as kit, Cluster};
use kanon_control_plane::{Jaeger, Options};
use serde_json::{Value, json};

use crate::env::Env;

pub const SCENARIOS: &[crate::Scenario] = &[(
    "traces::a_pod_create_is_one_trace_through_the_apiserver_and_kanon",
    a_pod_create_is_one_trace_through_the_apiserver_and_kanon,
)];

const NAMESPACE: &str = "traced";
const POLICY: &str = "traced-pods-have-a-team";

/// One span of a trace as Jaeger's query API returns it.
#[derive(Debug, Clone)]
struct Span {
    id: String,
    parent: Option<String>,
    name: String,
    service: String,
    tags: BTreeMap<String, String>,
}

/// The spans of one trace of Jaeger's `/api/traces` answer.
fn spans_of(trace: &Value) -> Vec<Span> {
    let services: BTreeMap<&str, &str> = trace["processes"]
        .as_object()
        .map(|processes| {
            processes
                .iter()
                .map(|(id, p)| (id.as_str(), p["serviceName"].as_str().unwrap_or("")))
                .collect()
        })
        .unwrap_or_default();
    trace["spans"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|span| Span {
            id: span["spanID"].as_str().unwrap_or("").to_string(),
            parent: span["references"]
                .as_array()
                .and_then(|refs| refs.iter().find(|r| r["refType"] == "CHILD_OF"))
                .and_then(|r| r["spanID"].as_str())
                .map(str::to_string),
            name: span["operationName"].as_str().unwrap_or("").to_string(),
            service: services
                .get(span["processID"].as_str().unwrap_or(""))
                .copied()
                .unwrap_or("")
                .to_string(),
            tags: span["tags"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|tag| {
                    let value = match &tag["value"] {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    (tag["key"].as_str().unwrap_or("").to_string(), value)
                })
                .collect(),
        })
        .collect()
}

/// What a failed check prints: each span with its parent, service and tags.
fn describe(spans: &[Span]) -> String {
    spans
        .iter()
        .map(|s| {
            format!(
                "{} ({}) id {} parent {:?} {:?}",
                s.name, s.service, s.id, s.parent, s.tags
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The chain of ancestors of `span`, nearest first.
fn ancestors<'a>(spans: &'a [Span], span: &Span) -> Vec<&'a Span> {
    let mut chain = Vec::new();
    let mut parent = span.parent.clone();
    while let Some(id) = parent {
        match spans.iter().find(|s| s.id == id) {
            Some(found) if chain.len() < 64 => {
                parent = found.parent.clone();
                chain.push(found);
            }
            _ => break,
        }
    }
    chain
}

fn a_pod_create_is_one_trace_through_the_apiserver_and_kanon(_env: &mut Env) {
    let binary = kanon_control_plane::ensure_jaeger(&mut std::io::stderr())
        .unwrap_or_else(|e| panic!("Jaeger is built: {e:#}"));
    let jaeger = Jaeger::start(&binary).unwrap_or_else(|e| panic!("Jaeger starts: {e:#}"));
    let cluster = Cluster::start(
        "traces",
        Options {
            tracing_endpoint: Some(jaeger.otlp_grpc_endpoint()),
            ..Options::default()
        },
    )
    .unwrap_or_else(|e| panic!("a traced control plane starts: {e:#}"));
    let mut kanon = cluster
        .kanon(env!("CARGO_BIN_EXE_kanon"), "traced")
        .unwrap_or_else(|e| panic!("{e:#}"))
        // Spans leave within 100 ms instead of the SDK's default 5 s.
        .with_env("OTEL_BSP_SCHEDULE_DELAY", "100");
    let otlp = format!("http://{}", jaeger.otlp_grpc_endpoint());
    kanon.args = [
        "--otlp-endpoint",
        &otlp,
        "--otlp-protocol",
        "grpc",
        // Reviews follow the apiserver's context; the audit's pages start traces of their own.
        "--trace-sampling-ratio",
        "1",
        "--cluster-name",
        "e2e-traces",
    ]
    .map(String::from)
    .to_vec();
    // Where the audit holds its Lease.
    cluster
        .apply(
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kanon-system"}}),
        )
        .unwrap_or_else(|e| panic!("{e:#}"));
    kanon
        .start()
        .unwrap_or_else(|e| panic!("kanon starts: {e:#}"));
    cluster
        .pod_namespace(NAMESPACE)
        .unwrap_or_else(|e| panic!("{e:#}"));
    let (mutating, validating) = kanon
        .pod_webhook_configurations("kanon-traces", "traces.kanon.dev", NAMESPACE)
        .unwrap_or_else(|e| panic!("{e:#}"));
    for configuration in [&mutating, &validating] {
        cluster
            .apply(configuration)
            .unwrap_or_else(|e| panic!("{e:#}"));
    }
    // A namespace selector makes the policy read the Pod's Namespace: a lookup within the
    // review.
    let policy = json!({
        "apiVersion": "policy.kanon.dev/v1alpha1",
        "kind": "ClusterValidatePolicy",
        "metadata": {"name": POLICY},
        "spec": {
            "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}},
            "validateRules": [{
                "targetOperations": ["CREATE"],
                "cel": {"validations": [{
                    "expression": "has(object.metadata.labels) && 'team' in object.metadata.labels",
                    "message": "a Pod needs a team label",
                }]},
            }],
        },
    });
    cluster.apply(&policy).unwrap_or_else(|e| panic!("{e:#}"));
    wait_in_force(&cluster, POLICY);

    let pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "traced", "namespace": NAMESPACE, "labels": {"team": "a"}},
        "spec": {"containers": [{"name": "c", "image": "registry.example/app:1"}]},
    });
    cluster.apply(&pod).unwrap_or_else(|e| panic!("{e:#}"));

    // The apiserver batches its spans for up to 5 s; kanon's leave within 100 ms.
    let deadline = Instant::now() + Duration::from_secs(60);
    let query = format!(
        "/api/traces?service=kanon&limit=50&lookback=1h&tags={}",
        urlencode(&json!({"kanon.request.namespace": NAMESPACE}).to_string())
    );
    let spans = loop {
        let found = jaeger
            .query(&query)
            .map(|answer| {
                answer["data"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(spans_of)
                    .find(|spans| {
                        let validated = spans.iter().any(|s| {
                            s.name == "POST /validate"
                                && s.tags.get("kanon.request.kind").map(String::as_str)
                                    == Some("Pod")
                        });
                        let webhook_call = spans.iter().any(|s| {
                            s.service == "apiserver" && s.name == "Call validating webhook"
                        });
                        validated && webhook_call
                    })
            })
            .unwrap_or_else(|e| panic!("{e:#}\nJaeger's log:\n{}", jaeger.log_tail(30)));
        if let Some(spans) = found {
            break spans;
        }
        assert!(
            Instant::now() < deadline,
            "no trace with kube-apiserver's webhook call and kanon's review of the Pod reached \
             Jaeger within 60 s; kanon's traces:\n{}\nkanon's log:\n{}\nJaeger's log:\n{}",
            jaeger
                .query("/api/traces?service=kanon&limit=5&lookback=1h")
                .map(|v| v.to_string())
                .unwrap_or_else(|e| format!("{e:#}")),
            kanon.log_tail(30),
            jaeger.log_tail(30)
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    let all = describe(&spans);

    for (review_name, call_name) in [
        ("POST /validate", "Call validating webhook"),
        ("POST /mutate", "Call mutating webhook"),
    ] {
        let review = spans
            .iter()
            .find(|s| {
                s.name == review_name
                    && s.tags.get("kanon.request.kind").map(String::as_str) == Some("Pod")
                    && s.tags.get("kanon.request.operation").map(String::as_str) == Some("CREATE")
            })
            .unwrap_or_else(|| panic!("no {review_name} span of kanon in the trace:\n{all}"));
        assert_eq!(review.service, "kanon", "{all}");
        // kanon's span is the child of the apiserver's HTTP client span, under its webhook
        // call for this very request (the apiserver's `UID` is the AdmissionReview's uid).
        let chain = ancestors(&spans, review);
        let parent = chain
            .first()
            .unwrap_or_else(|| panic!("{review_name} has no parent in the trace:\n{all}"));
        assert_eq!(parent.service, "apiserver", "{all}");
        let call = chain
            .iter()
            .find(|s| s.name == call_name)
            .unwrap_or_else(|| {
                panic!("{review_name} is not under the apiserver's {call_name}:\n{all}")
            });
        assert_eq!(
            call.tags.get("UID"),
            review.tags.get("kanon.request.uid"),
            "the apiserver's webhook call and kanon's review are of one request:\n{all}"
        );
        // The trace starts at the apiserver's handling of the create.
        let root = chain.last().unwrap_or(parent);
        assert_eq!(root.service, "apiserver", "{all}");
        assert_eq!(root.parent, None, "{all}");
    }

    let validate = spans
        .iter()
        .find(|s| s.name == "POST /validate")
        .unwrap_or_else(|| panic!("{all}"));
    assert_eq!(
        validate.tags.get("kanon.allowed").map(String::as_str),
        Some("true"),
        "{all}"
    );
    // The policy judged the Pod within the review.
    let judged = spans
        .iter()
        .find(|s| {
            s.name == format!("ClusterValidatePolicy/{POLICY}")
                && s.parent.as_deref() == Some(validate.id.as_str())
        })
        .unwrap_or_else(|| panic!("no span of {POLICY} under the validate review:\n{all}"));
    assert_eq!(judged.service, "kanon", "{all}");
    assert!(judged.tags.contains_key("kanon.outcome"), "{all}");
    // The Pod's Namespace, which the policy's selector reads, was looked up within a review.
    let lookup = spans
        .iter()
        .find(|s| {
            s.service == "kanon"
                && s.tags
                    .get("kanon.lookup.target")
                    .is_some_and(|t| t.contains("Namespace"))
        })
        .unwrap_or_else(|| panic!("no lookup span of the Namespace in the trace:\n{all}"));
    assert!(
        ancestors(&spans, lookup)
            .iter()
            .any(|s| s.name.starts_with("POST /")),
        "the lookup is under a review:\n{all}"
    );
    assert!(lookup.tags.contains_key("kanon.lookup.outcome"), "{all}");

    // The background audit reads the Pods a page at a time, each page a trace of its own.
    let deadline = Instant::now() + Duration::from_secs(60);
    let page = loop {
        let answer = jaeger
            .query(
                "/api/traces?service=kanon&limit=20&lookback=1h&operation=audit%20page%20v1%2FPod",
            )
            .unwrap_or_else(|e| panic!("{e:#}"));
        let page = answer["data"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(spans_of)
            .find(|s| s.name == "audit page v1/Pod");
        if let Some(page) = page {
            break page;
        }
        assert!(
            Instant::now() < deadline,
            "no audit page of Pods reached Jaeger within 60 s; kanon's log:\n{}",
            kanon.log_tail(30)
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(
        page.parent, None,
        "an audit page starts its own trace: {page:?}"
    );
    assert!(page.tags.contains_key("kanon.audit.objects"), "{page:?}");
    assert!(page.tags.contains_key("kanon.audit.judged"), "{page:?}");

    // The audit's report of the namespace names the cluster (`--cluster-name`).
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = cluster
            .kubectl(&[
                "get",
                "reports.openreports.io",
                "-n",
                NAMESPACE,
                "-l",
                "kanon.dev/cluster=e2e-traces",
                "-o",
                "name",
            ])
            .unwrap_or_else(|e| panic!("{e:#}"));
        if !String::from_utf8_lossy(&out.stdout).trim().is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no report labelled with the cluster's name within 60 s; kanon's log:\n{}",
            kanon.log_tail(30)
        );
        std::thread::sleep(Duration::from_millis(500));
    }

    let metrics = kanon.metrics().unwrap_or_else(|e| panic!("{e:#}"));
    assert!(
        metrics.contains("kanon_trace_spans_dropped_total 0"),
        "{metrics}"
    );
    kanon.stop();
    drop(cluster);
    jaeger.stop().unwrap_or_else(|e| panic!("{e:#}"));
}

/// Waits up to 60 s for kanon to report the ClusterValidatePolicy `name` in force.
fn wait_in_force(cluster: &Cluster, name: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = cluster
            .kubectl(&["get", "clustervalidatepolicy", name, "-o", "json"])
            .unwrap_or_else(|e| panic!("{e:#}"));
        let policy: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        match kit::policy_in_force(&policy) {
            Ok(true) => return,
            Ok(false) => {}
            Err(e) => panic!("{e:#}"),
        }
        assert!(
            Instant::now() < deadline,
            "{name} is not in force within 60 s: {policy}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Percent-encodes a query value.
fn urlencode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
