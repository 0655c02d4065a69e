//! What controllers make, in the audit's reports (issue 37 §3): a Deployment whose Pods a Pod
//! policy fails is listed once, its ReplicaSet and Pods (made from its template, found as it
//! was) counted in the summary only; a Pod nobody's controller made is listed as itself. The
//! report's tally is compact. `--report-passes` lists passes too, within the cap;
//! `--report-owned-results` lists the ReplicaSet and Pods again. Each setting changed is
//! written at the first audit of the restarted auditor.

use std::time::Duration;

use serde_json::{Value, json};

use crate::Scenario;
use crate::audit::{SYSTEM, auditor, summary, wait_report};
use crate::env::Env;

pub const SCENARIOS: &[Scenario] = &[(
    "audit::a_deployments_violation_is_listed_once_its_replica_set_and_pods_counted",
    a_deployments_violation_is_listed_once_its_replica_set_and_pods_counted,
)];

const OWNED: &str = "audit-owned";
const POLICY: &str = "audit-no-host-network";

/// Pods in the namespace may not use the host's network; in Audit mode.
fn policy() -> Value {
    json!({
        "apiVersion": "policy.kanon.dev/v1alpha1", "kind": "ClusterValidatePolicy",
        "metadata": {"name": POLICY},
        "spec": {
            "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod", "namespace": OWNED}],
            "validationActions": ["Audit"],
            "validateRules": [{"name": "no-host-network", "cel": {"validations": [{
                "expression": "!has(object.spec.hostNetwork) || !object.spec.hostNetwork",
                "message": "Pods may not use the host's network",
            }]}}],
        },
    })
}

fn deployment(name: &str, replicas: u32, host_network: bool) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": OWNED},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                         "spec": {"hostNetwork": host_network,
                                  "containers": [{"name": "app", "image": "registry.example/web:1"}]}},
        },
    })
}

/// `(kind, name, result)` of each result of the report, in its order.
fn listed(report: &Value) -> Vec<(String, String, String)> {
    report["results"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
            (
                text(&r["resources"][0]["kind"]),
                text(&r["resources"][0]["name"]),
                text(&r["result"]),
            )
        })
        .collect()
}

fn kinds_and_results(report: &Value) -> Vec<(String, String)> {
    listed(report)
        .into_iter()
        .map(|(kind, _, result)| (kind, result))
        .collect()
}

fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
    expected
        .iter()
        .map(|(kind, result)| (kind.to_string(), result.to_string()))
        .collect()
}

fn annotation(report: &Value, key: &str) -> Option<String> {
    report["metadata"]["annotations"][key]
        .as_str()
        .map(str::to_string)
}

/// Every finding counted: of the failing Deployment, its ReplicaSet and two Pods, and the bare
/// Pod; of the good Deployment, its ReplicaSet and Pod.
fn counts_everything(report: &Value) -> bool {
    summary(report, "fail") == 5 && summary(report, "pass") == 3
}

fn a_deployments_violation_is_listed_once_its_replica_set_and_pods_counted(env: &mut Env) {
    env.namespace(SYSTEM, json!({}));
    env.namespace(OWNED, json!({}));
    // Before the policy: admitted.
    env.apply(&deployment("web", 2, true));
    env.apply(&deployment("ok", 1, false));
    env.apply(&json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "debug", "namespace": OWNED},
        "spec": {"hostNetwork": true,
                 "containers": [{"name": "debug", "image": "registry.example/debug:1"}]},
    }));
    // kube-controller-manager makes the ReplicaSets and their Pods.
    let pods = env.api("v1", "Pod", "pods", Some(OWNED));
    env.wait_for("the Deployments' Pods", Duration::from_secs(60), || {
        env.runtime
            .block_on(pods.list(&Default::default()))
            .map(|l| l.items.len() == 4)
            .unwrap_or(false)
    });

    let mut first = auditor(env, "auditor-owned-a", &["--audit-interval", "2s"]);
    first.start();
    env.apply_policy(&policy()).expect("the policy is accepted");
    env.wait_policy_status("ClusterValidatePolicy", None, POLICY);
    // The Deployment's result stands for its ReplicaSet and Pods; the bare Pod is itself.
    let report = wait_report(
        env,
        &first,
        OWNED,
        "the Deployment listed once, beside the bare Pod",
        |r| counts_everything(r) && listed(r).len() == 2,
    );
    assert_eq!(
        listed(&report),
        [
            ("Deployment".into(), "web".into(), "fail".into()),
            ("Pod".into(), "debug".into(), "fail".into())
        ],
        "{report:#?}"
    );
    let web = &report["results"][0];
    assert_eq!(web["policy"], format!("ClusterValidatePolicy/{POLICY}"));
    assert_eq!(
        web["message"],
        "spec.template: Pods may not use the host's network"
    );
    // The ReplicaSet and two Pods failing are counted only (as the good ReplicaSet and Pod
    // passing are, passes not being listed).
    assert_eq!(
        annotation(&report, "audit.kanon.dev/owned-results").as_deref(),
        Some("3"),
        "{report:#?}"
    );
    let tally = annotation(&report, "audit.kanon.dev/tally").expect("a tally");
    assert!(
        tally.len() < 400 && tally.contains(r#""policies":{"ClusterValidatePolicy":["#),
        "a compact tally: {tally}"
    );
    first.stop();

    // `kanon audit` lists what the reports list, and says what it counted without listing.
    let (code, printed, stderr) = crate::audit::kanon_audit(env, &["-n", OWNED]);
    assert_eq!(code, Some(1), "{printed}{stderr}");
    let rows: Vec<&str> = printed.lines().filter(|l| l.starts_with("fail ")).collect();
    assert_eq!(rows.len(), 2, "{printed}");
    assert!(
        rows.iter()
            .any(|r| r.contains("Deployment") && r.contains(&format!("{OWNED}/web "))),
        "{printed}"
    );
    assert!(
        rows.iter().any(|r| r.contains(&format!("{OWNED}/debug "))),
        "{printed}"
    );
    assert!(!printed.contains("ReplicaSet"), "{printed}");
    assert!(
        printed.contains("3 results of objects a controller made from a workload above, found as the workload was, counted and not listed"),
        "{printed}"
    );
    let (_, printed, stderr) = crate::audit::kanon_audit(env, &["-n", OWNED, "-o", "reports"]);
    let printed_report: Value = kanon_engine::parse_documents(&printed, "kanon audit", false)
        .unwrap_or_else(|e| panic!("{e}: {stderr}"))
        .into_iter()
        .find(|r| r["metadata"]["namespace"] == OWNED)
        .unwrap_or_else(|| panic!("no report of {OWNED}: {printed}"));
    assert_eq!(listed(&printed_report), listed(&report), "{printed}");
    assert_eq!(
        annotation(&printed_report, "audit.kanon.dev/owned-results").as_deref(),
        Some("3")
    );

    // Passes listed too, within the cap: the good Deployment's stands for its ReplicaSet and Pod.
    let mut second = auditor(
        env,
        "auditor-owned-b",
        &["--audit-interval", "2s", "--report-passes"],
    );
    second.start();
    let report = wait_report(
        env,
        &second,
        OWNED,
        "the good Deployment's pass listed",
        |r| counts_everything(r) && listed(r).len() == 3,
    );
    assert_eq!(
        listed(&report),
        [
            ("Deployment".into(), "web".into(), "fail".into()),
            ("Pod".into(), "debug".into(), "fail".into()),
            ("Deployment".into(), "ok".into(), "pass".into())
        ],
        "{report:#?}"
    );
    assert_eq!(
        report["configuration"]["limits"]["statusFilter"],
        json!(["error", "fail", "warn", "skip", "pass"])
    );
    assert_eq!(
        annotation(&report, "audit.kanon.dev/owned-results").as_deref(),
        Some("5"),
        "{report:#?}"
    );
    second.stop();

    // The full list: the ReplicaSet and the Pods again, passes counted only.
    let mut third = auditor(
        env,
        "auditor-owned-c",
        &["--audit-interval", "2s", "--report-owned-results"],
    );
    third.start();
    let report = wait_report(env, &third, OWNED, "every object listed", |r| {
        counts_everything(r) && listed(r).len() == 5
    });
    assert_eq!(
        kinds_and_results(&report),
        pairs(&[
            ("Deployment", "fail"),
            ("ReplicaSet", "fail"),
            ("Pod", "fail"),
            ("Pod", "fail"),
            ("Pod", "fail"),
        ]),
        "{report:#?}"
    );
    let names: Vec<String> = listed(&report).into_iter().map(|(_, n, _)| n).collect();
    assert_eq!(names[0], "web");
    assert!(names[1].starts_with("web-"), "{names:?}");
    assert_eq!(names[2], "debug");
    assert!(
        names[3..].iter().all(|n| n.starts_with(&names[1])),
        "the ReplicaSet's Pods: {names:?}"
    );
    assert_eq!(annotation(&report, "audit.kanon.dev/owned-results"), None);
    assert_eq!(
        report["configuration"]["limits"]["statusFilter"],
        json!(["error", "fail", "warn", "skip"])
    );
    third.stop();

    env.delete_policy("ClusterValidatePolicy", None, POLICY);
    for name in ["web", "ok"] {
        let _ = env.kubectl(&["delete", "deployment", name, "-n", OWNED, "--wait=false"]);
    }
    let _ = env.kubectl(&["delete", "pod", "debug", "-n", OWNED, "--wait=false"]);
}
