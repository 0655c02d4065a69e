//! Audit reports are always written, and only where a policy selects something (issue 34):
//! failure messages that echo large data are capped, a report with more results than fit its
//! size is cut saying so (and never left stale), a report kube-apiserver refuses is replaced by
//! one saying why, and a namespace no policy selects anything in keeps no report.

use std::time::Duration;

use serde_json::{Value, json};

use crate::Scenario;
use crate::audit::{SYSTEM, auditor, report, results, summary, wait_report};
use crate::env::{Env, text};

pub const SCENARIOS: &[Scenario] = &[(
    "audit_reports::reports_are_always_written_and_only_where_a_policy_selects",
    reports_are_always_written_and_only_where_a_policy_selects,
)];

/// 8 ConfigMaps whose failure message echoes 250 KB of their data, beside another policy's.
const ECHO: &str = "audit-echo";
/// One failing ConfigMap, then 1,200 more whose messages are 5 KiB.
const CROWD: &str = "audit-crowd";
/// An admission policy refuses kanon's report here.
const REFUSED: &str = "audit-refused";
/// ConfigMaps no policy selects.
const UNSELECTED: &str = "audit-unselected";

/// ConfigMaps with a `blob` in the echo namespace fail, their message (a template's, whose
/// length nothing but the report bounds) the blob itself.
fn echo_policy() -> Value {
    json!({
        "apiVersion": "policy.kanon.dev/v1alpha1", "kind": "ClusterValidatePolicy",
        "metadata": {"name": "audit-echo-blob"},
        "spec": {
            "resourceSelectors": [{"apiVersion": "v1", "kind": "ConfigMap", "namespace": ECHO}],
            "validationActions": ["Audit"],
            "validateRules": [{"name": "no-blob", "template": {"type": "condition", "condition": {
                "cond": "Exist", "dataRef": {"from": "current", "path": "/data/blob"},
                "message": "the blob says {{ object.data.blob }}",
            }}}],
        },
    })
}

/// ConfigMaps with a `blob` in the crowd and the refused namespaces fail, their message (a
/// CEL `messageExpression`'s, 5 KiB at most) the blob.
fn crowd_policy() -> Value {
    let selectors: Vec<Value> = [CROWD, REFUSED]
        .iter()
        .map(|ns| json!({"apiVersion": "v1", "kind": "ConfigMap", "namespace": ns}))
        .collect();
    json!({
        "apiVersion": "policy.kanon.dev/v1alpha1", "kind": "ClusterValidatePolicy",
        "metadata": {"name": "audit-crowd-blob"},
        "spec": {
            "resourceSelectors": selectors,
            "validationActions": ["Audit"],
            "validateRules": [{"name": "no-blob", "cel": {"validations": [{
                "expression": "!has(object.data) || !('blob' in object.data)",
                "messageExpression": "'the blob says ' + object.data['blob']",
            }]}}],
        },
    })
}

/// Another team's policy in the echo namespace: an owner label.
fn owner_policy() -> Value {
    json!({
        "apiVersion": "policy.kanon.dev/v1alpha1", "kind": "ClusterValidatePolicy",
        "metadata": {"name": "audit-echo-owner"},
        "spec": {
            "resourceSelectors": [{"apiVersion": "v1", "kind": "ConfigMap", "namespace": ECHO}],
            "validationActions": ["Audit"],
            "validateRules": [{"cel": {"validations": [{
                "expression": "has(object.metadata.labels) && 'owner' in object.metadata.labels",
                "message": "an owner label is needed",
            }]}}],
        },
    })
}

fn blob_map(namespace: &str, name: &str, bytes: usize) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": {"blob": "x".repeat(bytes)},
    })
}

fn apply_all(env: &Env, items: Vec<Value>) {
    let list = json!({"apiVersion": "v1", "kind": "List", "items": items});
    let out = env.kubectl_stdin(
        &["apply", "--server-side", "-f", "-"],
        &serde_json::to_string(&list).expect("JSON"),
    );
    assert!(out.status.success(), "{}", text(&out));
}

fn annotation(report: &Value, key: &str) -> Option<String> {
    report["metadata"]["annotations"][key]
        .as_str()
        .map(str::to_string)
}

/// Reports in `namespace` may hold no findings: only kanon's result saying why it could not
/// write one.
fn refusing_admission_policy() -> Vec<Value> {
    vec![
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": "audit-refused-reports"},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [{
                    "apiGroups": ["openreports.io"], "apiVersions": ["*"],
                    "operations": ["CREATE", "UPDATE"], "resources": ["reports"]}]},
                "validations": [{
                    "expression": "!has(object.results) || object.results.all(r, r.policy == 'kanon-audit')",
                    "message": "reports here may hold no findings",
                }],
            },
        }),
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": "audit-refused-reports"},
            "spec": {
                "policyName": "audit-refused-reports",
                "validationActions": ["Deny"],
                "matchResources": {"namespaceSelector": {"matchLabels": {
                    "kubernetes.io/metadata.name": REFUSED}}},
            },
        }),
    ]
}

fn counter(metrics: &str, prefix: &str) -> u64 {
    metrics
        .lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

fn reports_are_always_written_and_only_where_a_policy_selects(env: &mut Env) {
    for namespace in [SYSTEM, ECHO, CROWD, REFUSED, UNSELECTED] {
        env.namespace(namespace, json!({}));
    }
    let mut items: Vec<Value> = (0..8)
        .map(|i| blob_map(ECHO, &format!("echo-{i}"), 250_000))
        .collect();
    items.push(blob_map(CROWD, "crowd-0000", 5 * 1024));
    items.push(blob_map(REFUSED, "refused", 100));
    items.push(blob_map(UNSELECTED, "unselected", 100));
    apply_all(env, items);
    for document in refusing_admission_policy() {
        env.apply(&document);
    }
    // kube-apiserver enforces an admission policy once its informers have it.
    let probe = json!({
        "apiVersion": "openreports.io/v1alpha1", "kind": "Report",
        "metadata": {"name": "probe", "namespace": REFUSED},
        "summary": {"pass": 0, "fail": 1, "warn": 0, "error": 0, "skip": 0},
        "results": [{"policy": "probe", "result": "fail"}],
    })
    .to_string();
    env.wait_for(
        "the admission policy refuses reports",
        Duration::from_secs(30),
        || {
            let out = env.kubectl_stdin(&["create", "--dry-run=server", "-f", "-"], &probe);
            !out.status.success() && text(&out).contains("reports here may hold no findings")
        },
    );
    // A report of zeros an earlier kanon wrote where no policy selects anything.
    env.apply(&json!({
        "apiVersion": "openreports.io/v1alpha1", "kind": "Report",
        "metadata": {"name": "kanon", "namespace": UNSELECTED,
                     "labels": {"app.kubernetes.io/managed-by": "kanon"},
                     "annotations": {"audit.kanon.dev/tally": "{\"v1 ConfigMap\":{}}"}},
        "source": "kanon",
        "summary": {"pass": 0, "fail": 0, "warn": 0, "error": 0, "skip": 0},
    }));
    env.apply_policy(&echo_policy())
        .expect("the policy is accepted");
    env.apply_policy(&crowd_policy())
        .expect("the policy is accepted");
    env.apply_policy(&owner_policy())
        .expect("the policy is accepted");
    for name in ["audit-echo-blob", "audit-crowd-blob", "audit-echo-owner"] {
        env.wait_policy_status("ClusterValidatePolicy", None, name);
    }
    let mut auditor = auditor(
        env,
        "auditor-reports",
        &[
            "--audit-interval",
            "2s",
            "--audit-cpu",
            "1",
            "--audit-qps",
            "50",
        ],
    );
    auditor.start();

    // 2 MB of echoed messages: the report is written, every message capped and marked, and the
    // other policy's findings are there (kube-root-ca.crt has no owner either).
    let echo = wait_report(env, &auditor, ECHO, "the echo namespace's report", |r| {
        summary(r, "fail") == 17
    });
    let messages: Vec<&str> = echo["results"]
        .as_array()
        .map(|r| r.iter().filter_map(|r| r["message"].as_str()).collect())
        .unwrap_or_default();
    let echoed: Vec<&&str> = messages
        .iter()
        .filter(|m| m.starts_with("the blob says xxx"))
        .collect();
    assert_eq!(echoed.len(), 8, "{messages:?}");
    for message in echoed {
        assert!(message.len() <= 1024, "{} bytes", message.len());
        // Cut by the report's bound, unless the template's own output bound cut it shorter.
        assert!(
            message.ends_with(" bytes]") || message.len() < 1000,
            "{message}"
        );
    }
    assert_eq!(
        messages
            .iter()
            .filter(|m| **m == "an owner label is needed")
            .count(),
        9,
        "{messages:?}"
    );

    // A report kube-apiserver refuses is replaced by one that says why, its summary kept.
    let refused = wait_report(
        env,
        &auditor,
        REFUSED,
        "the refused report's replacement",
        |r| annotation(r, "audit.kanon.dev/not-written").is_some(),
    );
    let why = annotation(&refused, "audit.kanon.dev/not-written").unwrap_or_default();
    assert!(why.contains("reports here may hold no findings"), "{why}");
    assert_eq!(summary(&refused, "fail"), 1, "{refused:#?}");
    assert_eq!(
        refused["results"][0]["policy"], "kanon-audit",
        "{refused:#?}"
    );
    assert_eq!(refused["results"][0]["result"], "error", "{refused:#?}");
    env.wait_for(
        "the replacement is counted",
        Duration::from_secs(10),
        || {
            counter(
                &auditor.metrics(),
                "kanon_audit_report_cuts_total{cut=\"replaced\"}",
            ) >= 1
        },
    );

    // No report where no policy selects anything; the one of zeros written before goes.
    env.wait_for(
        "the unselected namespace's report of zeros goes",
        Duration::from_secs(60),
        || report(env, UNSELECTED).is_none(),
    );

    // The crowd: one failure, then 1,200 with 5 KiB messages. The report says so, cut to its
    // size, never left saying `fail: 1`.
    let crowd = wait_report(env, &auditor, CROWD, "one failure in the crowd", |r| {
        summary(r, "fail") == 1
    });
    assert_eq!(results(&crowd).len(), 1);
    apply_all(
        env,
        (1..=1200)
            .map(|i| blob_map(CROWD, &format!("crowd-{i:04}"), 5 * 1024))
            .collect(),
    );
    let crowd = wait_report(env, &auditor, CROWD, "1,201 failures in the crowd", |r| {
        summary(r, "fail") == 1201
    });
    let shown = results(&crowd).len();
    assert!((500..1000).contains(&shown), "{shown} results shown");
    assert_eq!(
        annotation(&crowd, "audit.kanon.dev/results-cut-from").as_deref(),
        Some("1201")
    );
    assert_eq!(
        annotation(&crowd, "audit.kanon.dev/results-cut-to-bytes").as_deref(),
        Some("1048576")
    );
    assert!(serde_json::to_string(&crowd).expect("JSON").len() < 1536 * 1024);
    assert!(
        counter(
            &auditor.metrics(),
            "kanon_audit_report_cuts_total{cut=\"results\"}"
        ) >= 1
    );
    // The unselected namespace still has none.
    assert!(report(env, UNSELECTED).is_none());
    auditor.stop();

    for name in ["audit-echo-blob", "audit-crowd-blob", "audit-echo-owner"] {
        env.delete_policy("ClusterValidatePolicy", None, name);
    }
    let _ = env.kubectl(&[
        "delete",
        "validatingadmissionpolicybinding,validatingadmissionpolicy",
        "audit-refused-reports",
        "--ignore-not-found",
    ]);
    for namespace in [ECHO, CROWD, REFUSED, UNSELECTED] {
        let _ = env.kubectl(&["delete", "namespace", namespace, "--wait=false"]);
    }
}
