//! Background audit against the real apiserver: objects that existed before a policy show up in
//! the namespace's OpenReports Report within one audit, and drop out when fixed, exempted or
//! deleted, with their policy or their namespace; `kanon audit` prints the same findings, and
//! narrows them by policy, namespace, kind and result; the reports stay under their cap with
//! more failing objects than it; a kanon restarted mid-audit resumes it from the checkpoint in
//! the audit Lease and finishes it.

use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

use crate::Scenario;
use crate::env::{Env, Kanon, Restarted, text};

pub const SCENARIOS: &[Scenario] = &[
    (
        "audit::existing_objects_are_reported_until_fixed_exempted_or_deleted",
        existing_objects_are_reported_until_fixed_exempted_or_deleted,
    ),
    (
        "audit::reports_stay_under_the_cap_and_a_restarted_auditor_finishes_the_audit",
        reports_stay_under_the_cap_and_a_restarted_auditor_finishes_the_audit,
    ),
    (
        "audit::a_missing_lease_namespace_is_named_once_and_the_audit_waits_for_it",
        a_missing_lease_namespace_is_named_once_and_the_audit_waits_for_it,
    ),
];

pub(crate) const SYSTEM: &str = "audit-system";
const SHOP: &str = "audit-shop";
const LAB: &str = "audit-lab";
const EXCEPTIONS: &str = "audit-exceptions";
/// The bulk namespaces: `audit-bulk-0` to `audit-bulk-5`.
const BULK: usize = 6;

/// ConfigMaps in the audit namespaces may not say `debug: "true"`.
fn policy(name: &str, namespaces: &[&str]) -> Value {
    let selectors: Vec<Value> = namespaces
        .iter()
        .map(|ns| json!({"apiVersion": "v1", "kind": "ConfigMap", "namespace": ns}))
        .collect();
    json!({
        "apiVersion": "policy.kanon.dev/v1alpha1", "kind": "ClusterValidatePolicy",
        "metadata": {"name": name, "annotations": {
            "policy.kanon.dev/severity": "medium",
            "policy.kanon.dev/category": "Hygiene",
        }},
        "spec": {
            "resourceSelectors": selectors,
            "validateRules": [{
                "name": "no-debug",
                "targetOperations": ["CREATE", "UPDATE"],
                "cel": {"validations": [{
                    "expression": "!has(object.data) || !('debug' in object.data) || object.data['debug'] != 'true'",
                    "message": "debug must be off",
                }]},
            }],
        },
    })
}

/// ConfigMaps in the shop need an `owner` label; a policy in Audit mode, which admits them and
/// records the failure.
fn owner_policy() -> Value {
    json!({
        "apiVersion": "policy.kanon.dev/v1alpha1", "kind": "ClusterValidatePolicy",
        "metadata": {"name": "audit-owner"},
        "spec": {
            "resourceSelectors": [{"apiVersion": "v1", "kind": "ConfigMap", "namespace": SHOP}],
            "validationActions": ["Audit"],
            "validateRules": [{
                "targetOperations": ["CREATE", "UPDATE"],
                "cel": {"validations": [{
                    "expression": "has(object.metadata.labels) && 'owner' in object.metadata.labels",
                    "message": "an owner label is needed",
                }]},
            }],
        },
    })
}

fn config_map(namespace: &str, name: &str, debug: bool, labels: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "data": {"debug": debug.to_string()},
    })
}

/// A kanon that only audits (its webhooks are not registered), every `interval`.
pub(crate) fn auditor(env: &Env, name: &str, args: &[&str]) -> Kanon {
    let mut kanon = env.replica(name);
    kanon.args = [
        "--no-status",
        "--namespace",
        SYSTEM,
        "--audit-identity",
        name,
    ]
    .iter()
    .chain(args)
    .map(|a| a.to_string())
    .collect();
    kanon
}

/// The Report `kanon` of `namespace`, if any.
pub(crate) fn report(env: &Env, namespace: &str) -> Option<Value> {
    env.get(
        "openreports.io/v1alpha1",
        "Report",
        "reports",
        Some(namespace),
        "kanon",
    )
}

/// The ClusterReport `kanon`, if any.
fn cluster_report(env: &Env) -> Option<Value> {
    env.get(
        "openreports.io/v1alpha1",
        "ClusterReport",
        "clusterreports",
        None,
        "kanon",
    )
}

pub(crate) fn summary(report: &Value, result: &str) -> i64 {
    report["summary"][result].as_i64().unwrap_or(0)
}

/// `(name, result)` of each result of a report.
pub(crate) fn results(report: &Value) -> Vec<(String, String)> {
    report["results"]
        .as_array()
        .map(|results| {
            results
                .iter()
                .map(|r| {
                    (
                        r["resources"][0]["name"].as_str().unwrap_or("").to_string(),
                        r["result"].as_str().unwrap_or("").to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

pub(crate) fn wait_report(
    env: &Env,
    auditor: &Kanon,
    namespace: &str,
    what: &str,
    mut check: impl FnMut(&Value) -> bool,
) -> Value {
    let limit = Duration::from_secs(60);
    let started = std::time::Instant::now();
    let mut last = None;
    while started.elapsed() < limit {
        last = report(env, namespace);
        if let Some(report) = &last
            && check(report)
        {
            return report.clone();
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    panic!(
        "{what}: not within {limit:?}; the report: {last:#?}\nthe auditor's log:\n{}",
        auditor.log_tail(40)
    );
}

fn existing_objects_are_reported_until_fixed_exempted_or_deleted(env: &mut Env) {
    for namespace in [SYSTEM, SHOP, LAB, EXCEPTIONS] {
        env.namespace(namespace, json!({}));
    }
    // Before the policy exists: admission lets them in.
    for object in [
        config_map(SHOP, "bad-1", true, json!({})),
        config_map(SHOP, "bad-2", true, json!({"legacy": "true"})),
        config_map(SHOP, "good", false, json!({})),
        config_map(LAB, "bad-3", true, json!({})),
    ] {
        env.apply(&object);
    }
    let mut auditor = auditor(
        env,
        "auditor-a",
        &[
            "--audit-interval",
            "2s",
            "--exception-namespace",
            EXCEPTIONS,
        ],
    );
    auditor.start();
    env.apply_policy(&policy("audit-no-debug", &[SHOP, LAB]))
        .expect("the policy is accepted");
    env.wait_policy_status("ClusterValidatePolicy", None, "audit-no-debug");
    // Admission refuses a new one now...
    let refused = env.create(&config_map(SHOP, "bad-new", true, json!({})));
    assert!(refused.is_err(), "a new failing ConfigMap is refused");

    // ...and the audit finds the old ones.
    // Passes: `good` and the namespace's kube-root-ca.crt.
    let shop = wait_report(env, &auditor, SHOP, "two failures in the shop", |r| {
        summary(r, "fail") == 2 && summary(r, "pass") == 2
    });
    assert_eq!(
        results(&shop),
        vec![
            ("bad-1".to_string(), "fail".to_string()),
            ("bad-2".to_string(), "fail".to_string())
        ],
        "{shop:#?}"
    );
    let first = &shop["results"][0];
    assert_eq!(first["policy"], "ClusterValidatePolicy/audit-no-debug");
    assert_eq!(first["rule"], "no-debug");
    assert_eq!(first["message"], "debug must be off");
    assert_eq!(first["severity"], "medium");
    assert_eq!(first["category"], "Hygiene");
    assert_eq!(first["source"], "kanon");
    assert_eq!(first["resources"][0]["kind"], "ConfigMap");
    assert!(
        first["resources"][0]["uid"]
            .as_str()
            .is_some_and(|u| !u.is_empty())
    );
    assert_eq!(
        shop["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "kanon"
    );
    wait_report(env, &auditor, LAB, "one failure in the lab", |r| {
        summary(r, "fail") == 1
    });
    // Cluster-scoped objects go to the ClusterReport.
    env.apply_policy(&json!({
        "apiVersion": "policy.kanon.dev/v1alpha1", "kind": "ClusterValidatePolicy",
        "metadata": {"name": "audit-namespace-owner"},
        "spec": {
            "resourceSelectors": [{"apiVersion": "v1", "kind": "Namespace", "name": SHOP}],
            "validationActions": ["Audit"],
            "validateRules": [{"cel": {"validations": [{
                "expression": "has(object.metadata.labels) && 'owner' in object.metadata.labels",
                "message": "a namespace needs an owner",
            }]}}],
        },
    }))
    .expect("the policy is accepted");
    env.wait_for(
        "the ClusterReport lists the namespace",
        Duration::from_secs(60),
        || {
            cluster_report(env).is_some_and(|r| {
                results(&r) == [(SHOP.to_string(), "fail".to_string())]
                    && r["results"][0]["resources"][0]["kind"] == "Namespace"
            })
        },
    );
    env.delete_policy("ClusterValidatePolicy", None, "audit-namespace-owner");
    env.wait_for(
        "the ClusterReport goes with its policy",
        Duration::from_secs(60),
        || cluster_report(env).is_none(),
    );

    // kubectl reads the reports by their short name, with the summary in columns.
    let out = env.kubectl(&["get", "reps", "-n", SHOP]);
    assert!(out.status.success(), "{}", text(&out));
    let table = text(&out);
    assert!(
        table.contains("FAIL") && table.lines().any(|l| l.starts_with("kanon ")),
        "{table}"
    );

    // `kanon audit` prints the same, writes nothing, and exits 1.
    let out = Command::new(env!("CARGO_BIN_EXE_kanon"))
        .args(["audit", "--kubeconfig"])
        .arg(env.control_plane().kubeconfig())
        .args(["--exception-namespace", EXCEPTIONS])
        .output()
        .expect("kanon audit runs");
    let printed = text(&out);
    assert_eq!(out.status.code(), Some(1), "{printed}");
    for name in ["audit-shop/bad-1", "audit-shop/bad-2", "audit-lab/bad-3"] {
        assert!(
            printed.lines().any(|l| l.starts_with("fail")
                && l.contains(name)
                && l.contains("debug must be off")),
            "{name} in:\n{printed}"
        );
    }
    assert!(!printed.contains("audit-shop/good"), "{printed}");
    filtered_audits_print_and_fail_on_what_they_keep(env);
    let out = Command::new(env!("CARGO_BIN_EXE_kanon"))
        .args(["audit", "-o", "reports", "--kubeconfig"])
        .arg(env.control_plane().kubeconfig())
        .output()
        .expect("kanon audit runs");
    let yaml = text(&out);
    assert!(
        yaml.contains("kind: Report") && yaml.contains("namespace: audit-shop"),
        "{yaml}"
    );

    // The metric counts what the last audit found.
    env.wait_for(
        "kanon_policy_results counts 3 failures",
        Duration::from_secs(10),
        || {
            auditor.metrics().lines().any(|l| {
                l.starts_with("kanon_policy_results{")
                    && l.contains("policy=\"ClusterValidatePolicy/audit-no-debug\"")
                    && l.contains("result=\"fail\"")
                    && l.ends_with(" 3")
            })
        },
    );

    // Fixing an object clears its result.
    let out = env.kubectl(&[
        "patch",
        "configmap",
        "bad-1",
        "-n",
        SHOP,
        "--type=merge",
        "-p",
        r#"{"data":{"debug":"false"}}"#,
    ]);
    assert!(out.status.success(), "{}", text(&out));
    wait_report(env, &auditor, SHOP, "bad-1 fixed", |r| {
        summary(r, "fail") == 1 && summary(r, "pass") == 3
    });

    // An exception clears it too: skipped, naming the exception.
    env.apply(&json!({
        "apiVersion": "policy.kanon.dev/v1alpha1", "kind": "PolicyException",
        "metadata": {"name": "legacy-config", "namespace": EXCEPTIONS},
        "spec": {
            "policies": [{"kind": "ClusterValidatePolicy", "name": "audit-no-debug"}],
            "resourceSelectors": [{"apiVersion": "v1", "kind": "ConfigMap", "namespace": SHOP,
                                   "labelSelector": {"matchLabels": {"legacy": "true"}}}],
            "reason": "the legacy app reads debug until it is rewritten",
        },
    }));
    let shop = wait_report(env, &auditor, SHOP, "bad-2 exempted", |r| {
        summary(r, "fail") == 0 && summary(r, "skip") == 1
    });
    assert!(
        shop["results"][0]["message"]
            .as_str()
            .is_some_and(|m| m.contains("PolicyException/audit-exceptions/legacy-config")),
        "{shop:#?}"
    );
    // `kanon audit` without the exception namespace does not honour it, and says so.
    let out = Command::new(env!("CARGO_BIN_EXE_kanon"))
        .args(["audit", "--kubeconfig"])
        .arg(env.control_plane().kubeconfig())
        .output()
        .expect("kanon audit runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("not honoured by this audit (no --exception-namespace was given)")
            && stderr.contains(&format!("--exception-namespace {EXCEPTIONS}")),
        "{stderr}"
    );

    // Admission results of Audit actions land in the same report, from the replica that
    // admits, without waiting for an audit: with the auditor stopped, the webhook's kanon
    // records a ConfigMap it admits under a policy in Audit mode.
    auditor.stop();
    {
        let restarted = Restarted::changed(env, |kanon| {
            kanon.args.retain(|a| a != "--no-audit");
            kanon.args.extend(
                [
                    "--namespace",
                    SYSTEM,
                    "--audit-interval",
                    "0",
                    "--audit-identity",
                    "webhook",
                ]
                .map(String::from),
            );
        });
        let env = &mut *restarted.env;
        env.apply_policy(&owner_policy())
            .expect("the policy is accepted");
        env.wait_policy_status("ClusterValidatePolicy", None, "audit-owner");
        env.apply(&config_map(SHOP, "late", false, json!({})));
        let shop = wait_report(
            env,
            &auditor,
            SHOP,
            "the admitted ConfigMap is recorded",
            |r| results(r).contains(&("late".to_string(), "fail".to_string())),
        );
        let late = shop["results"]
            .as_array()
            .and_then(|results| results.iter().find(|r| r["resources"][0]["name"] == "late"))
            .cloned()
            .unwrap_or_default();
        assert_eq!(
            late["policy"], "ClusterValidatePolicy/audit-owner",
            "{shop:#?}"
        );
        assert_eq!(late["message"], "an owner label is needed");
        // What the audit had found is still there.
        assert_eq!(summary(&shop, "skip"), 1, "{shop:#?}");
        env.delete_policy("ClusterValidatePolicy", None, "audit-owner");
    }
    auditor.start();

    // A deleted namespace's report goes with it, and is not written again.
    let out = env.kubectl(&["delete", "namespace", LAB, "--wait=true", "--timeout=60s"]);
    assert!(out.status.success(), "{}", text(&out));
    std::thread::sleep(Duration::from_secs(5));
    assert!(report(env, LAB).is_none(), "the lab's report is gone");

    // Deleting the policy removes its results, and the reports with nothing left.
    env.delete_policy("ClusterValidatePolicy", None, "audit-no-debug");
    env.wait_for(
        "the shop's report goes with the policy",
        Duration::from_secs(60),
        || report(env, SHOP).is_none(),
    );
    // The gauges follow the report's deletion, once the audit's last write is done.
    env.wait_for(
        "the deleted policy's series go",
        Duration::from_secs(10),
        || {
            !auditor
                .metrics()
                .contains("ClusterValidatePolicy/audit-no-debug")
        },
    );
    auditor.stop();
    let _ = env.kubectl(&[
        "delete",
        "policyexception",
        "legacy-config",
        "-n",
        EXCEPTIONS,
    ]);
}

/// `kanon audit` with `args`: its exit status, standard output and standard error.
pub(crate) fn kanon_audit(env: &Env, args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kanon"))
        .args(["audit", "--kubeconfig"])
        .arg(env.control_plane().kubeconfig())
        .args(args)
        .output()
        .expect("kanon audit runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// With bad-1 and bad-2 failing in the shop and bad-3 in the lab: `kanon audit`'s filters
/// narrow every output, and the exit status follows what they leave.
fn filtered_audits_print_and_fail_on_what_they_keep(env: &Env) {
    // The lab's failure alone, the policy named with its kind: still a failure.
    let policy = "ClusterValidatePolicy/audit-no-debug";
    let (code, printed, stderr) = kanon_audit(env, &["--policy", policy, "--namespace", LAB]);
    assert_eq!(code, Some(1), "{printed}{stderr}");
    assert!(
        printed.contains("audit-lab/bad-3") && !printed.contains("audit-shop/"),
        "{printed}"
    );

    // The shop's passes of the policy, named by a glob: the failures are left out, and with
    // them the exit status 1.
    let (code, printed, stderr) = kanon_audit(
        env,
        &[
            "-n",
            SHOP,
            "--kind",
            "configmap",
            "--result",
            "pass",
            "--policy",
            "audit-no-*",
        ],
    );
    assert_eq!(code, Some(0), "{printed}{stderr}");
    assert!(!printed.contains("bad-"), "{printed}");
    let rows: Vec<&str> = printed.lines().filter(|l| l.starts_with("pass")).collect();
    assert_eq!(rows.len(), 2, "good and kube-root-ca.crt pass:\n{printed}");
    assert!(
        rows.iter().any(|r| r.contains("audit-shop/good")),
        "{printed}"
    );
    // Columns sized to their content: each row's object starts under the header's OBJECT.
    let header = printed.lines().next().unwrap_or_default();
    assert!(header.starts_with("RESULT  KIND"), "{printed}");
    let at = header.find("OBJECT").expect("an OBJECT column");
    for row in &rows {
        assert!(
            row.get(at..).is_some_and(|r| r.starts_with("audit-shop/")),
            "{printed}"
        );
    }
    let counts: Vec<&str> = printed
        .lines()
        .find(|l| l.starts_with(policy))
        .map(|l| l.split_whitespace().collect())
        .unwrap_or_default();
    assert_eq!(counts, [policy, "2", "0", "0", "0", "0"], "{printed}");

    // JSON: only objects with a finding left; reports: only the lab's.
    let (_, printed, _) = kanon_audit(
        env,
        &[
            "-o", "json", "--policy", policy, "--result", "fail", "-n", LAB,
        ],
    );
    let objects: Vec<Value> = printed
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(objects.len(), 1, "{printed}");
    assert_eq!(objects[0]["object"]["name"], "bad-3", "{printed}");
    assert_eq!(objects[0]["findings"][0]["result"], "fail", "{printed}");
    let (_, yaml, _) = kanon_audit(env, &["-o", "reports", "--policy", policy, "-n", LAB]);
    assert!(
        yaml.contains("namespace: audit-lab") && !yaml.contains("namespace: audit-shop"),
        "{yaml}"
    );

    // A policy that does not exist is named, with the nearest one that does.
    let (_, _, stderr) = kanon_audit(env, &["--policy", "audit-no-debg", "--kind", "ConfigMap"]);
    assert!(
        stderr.contains(
            "warning: --policy audit-no-debg matches no validate policy; did you mean \
             `audit-no-debug`?"
        ),
        "{stderr}"
    );
}

/// The audit Lease's checkpoint.
fn checkpoint(env: &Env) -> Value {
    env.get(
        "coordination.k8s.io/v1",
        "Lease",
        "leases",
        Some(SYSTEM),
        "kanon-audit",
    )
    .and_then(|lease| {
        lease["metadata"]["annotations"]["audit.kanon.dev/checkpoint"]
            .as_str()
            .and_then(|text| serde_json::from_str(text).ok())
    })
    .unwrap_or(Value::Null)
}

fn leader(kanon: &Kanon) -> Option<u64> {
    kanon
        .metrics()
        .lines()
        .find(|l| l.starts_with("kanon_audit_leader "))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
}

fn scanned(kanon: &Kanon) -> u64 {
    kanon
        .metrics()
        .lines()
        .find(|l| l.starts_with("kanon_audit_objects_scanned_total "))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

fn bulk(i: usize) -> String {
    format!("audit-bulk-{i}")
}

fn reports_stay_under_the_cap_and_a_restarted_auditor_finishes_the_audit(env: &mut Env) {
    const PER_NAMESPACE: usize = 250;
    const CAP: i64 = 100;
    env.namespace(SYSTEM, json!({}));
    let namespaces: Vec<String> = (0..BULK).map(bulk).collect();
    let mut items = Vec::new();
    for namespace in &namespaces {
        env.namespace(namespace, json!({}));
        items.extend(
            (0..PER_NAMESPACE)
                .map(|i| config_map(namespace, &format!("cm-{i:04}"), true, json!({}))),
        );
    }
    let list = json!({"apiVersion": "v1", "kind": "List", "items": items});
    let out = env.kubectl_stdin(
        &["apply", "--server-side", "-f", "-"],
        &serde_json::to_string(&list).expect("JSON"),
    );
    assert!(out.status.success(), "{}", text(&out));
    let selected: Vec<&str> = namespaces.iter().map(String::as_str).collect();
    env.apply_policy(&policy("audit-bulk-no-debug", &selected))
        .expect("the policy is accepted");
    env.wait_policy_status("ClusterValidatePolicy", None, "audit-bulk-no-debug");

    // Slowly: 25 objects a page, 3 pages a second, so that the audit is under way when the
    // auditor is killed.
    let args = [
        "--audit-interval",
        "0",
        "--audit-page-size",
        "25",
        "--audit-qps",
        "3",
        "--report-max-results",
        "100",
        "--audit-checkpoint-interval",
        "2s",
    ];
    let mut first = auditor(env, "auditor-b", &args);
    first.start();
    // Another replica serves, but does not audit while the first holds the Lease.
    let mut other = auditor(env, "auditor-c", &args);
    other.start();
    env.wait_for(
        "the audit reaches the third bulk namespace",
        Duration::from_secs(90),
        || {
            checkpoint(env)["reading"]["namespace"]
                .as_str()
                .is_some_and(|namespace| namespace >= bulk(2).as_str())
        },
    );
    assert_eq!(leader(&first), Some(1));
    assert_eq!(leader(&other), Some(0));
    assert_eq!(scanned(&other), 0);
    other.stop();
    first.kill();
    let interrupted = checkpoint(env);
    assert!(interrupted["finished"].is_null(), "{interrupted:#?}");
    // What the first auditor finished is in the reports already.
    let done = report(env, &bulk(0)).expect("the first bulk namespace's report");
    assert_eq!(summary(&done, "fail"), PER_NAMESPACE as i64);

    // The same replica, restarted (a container restart keeps its Pod name), resumes.
    let mut second = auditor(env, "auditor-b", &args);
    second.start();
    env.wait_for("the audit finishes", Duration::from_secs(120), || {
        checkpoint(env)["finished"].as_i64().is_some()
    });
    let log = second.log_tail(200);
    assert!(log.contains("audit resumed"), "{log}");
    let read_again = scanned(&second);
    assert!(
        read_again > 0 && read_again < (BULK * PER_NAMESPACE) as u64,
        "the second auditor read {read_again} objects, not all {} again",
        BULK * PER_NAMESPACE
    );

    let mut total = 0;
    for namespace in &namespaces {
        let report = report(env, namespace).unwrap_or_else(|| panic!("{namespace}'s report"));
        assert_eq!(
            summary(&report, "fail"),
            PER_NAMESPACE as i64,
            "{namespace}: {:#?}",
            report["summary"]
        );
        let shown = report["results"].as_array().map_or(0, Vec::len) as i64;
        assert_eq!(shown, CAP, "{namespace}");
        assert_eq!(
            report["metadata"]["annotations"]["audit.kanon.dev/results-cut-from"],
            PER_NAMESPACE.to_string()
        );
        assert_eq!(report["configuration"]["limits"]["maxResults"], CAP);
        // Sorted: the first results are the first names.
        assert_eq!(report["results"][0]["resources"][0]["name"], "cm-0000");
        assert_eq!(report["results"][99]["resources"][0]["name"], "cm-0099");
        total += serde_json::to_string(&report).expect("JSON").len();
    }
    assert!(total < BULK * 64 * 1024, "the reports take {total} bytes");
    second.stop();

    // Restarted with a lower cap, auditing every 3 s: the existing reports are written again
    // under the new cap at the end of its first audit, though no finding changed.
    const LOWER: i64 = 40;
    let lower = LOWER.to_string();
    let mut third = auditor(
        env,
        "auditor-b",
        &["--audit-interval", "3s", "--report-max-results", &lower],
    );
    third.start();
    env.wait_for(
        "every report is cut to the new cap",
        Duration::from_secs(120),
        || {
            namespaces.iter().all(|namespace| {
                report(env, namespace).is_some_and(|report| {
                    report["results"].as_array().map_or(0, Vec::len) as i64 == LOWER
                        && report["configuration"]["limits"]["maxResults"] == LOWER
                })
            })
        },
    );
    // A report someone deletes is written again at the next audit, its findings unchanged.
    let out = env.kubectl(&["delete", "reports.openreports.io", "kanon", "-n", &bulk(0)]);
    assert!(out.status.success(), "{}", text(&out));
    env.wait_for(
        "the deleted report is written again",
        Duration::from_secs(120),
        || report(env, &bulk(0)).is_some(),
    );
    let again = report(env, &bulk(0)).expect("written again");
    assert_eq!(summary(&again, "fail"), PER_NAMESPACE as i64);
    assert_eq!(
        again["results"].as_array().map_or(0, Vec::len) as i64,
        LOWER
    );
    third.stop();

    env.delete_policy("ClusterValidatePolicy", None, "audit-bulk-no-debug");
    for namespace in &namespaces {
        let _ = env.kubectl(&["delete", "namespace", namespace, "--wait=false"]);
    }
}

fn a_missing_lease_namespace_is_named_once_and_the_audit_waits_for_it(env: &mut Env) {
    const LEASE_NAMESPACE: &str = "audit-lease-later";
    const NAMED: &str = "the namespace audit-lease-later of the audit Lease does not exist: create it (`kubectl create namespace audit-lease-later`)";
    let blocked = |kanon: &Kanon, value: u8| {
        kanon.metrics().contains(&format!(
            "kanon_audit_blocked{{missing=\"lease_namespace\"}} {value}"
        ))
    };
    let mut kanon = env.replica("auditor-waits");
    kanon.args = [
        "--no-status",
        "--namespace",
        LEASE_NAMESPACE,
        "--audit-identity",
        "auditor-waits",
        "--audit-interval",
        "0",
    ]
    .map(String::from)
    .to_vec();
    kanon.start();
    env.wait_for(
        "the audit says it waits for its Lease's namespace",
        Duration::from_secs(60),
        || blocked(&kanon, 1),
    );
    // Checked again every 10 s, said once.
    std::thread::sleep(Duration::from_secs(11));
    let log = kanon.log_tail(300);
    assert_eq!(
        log.lines().filter(|line| line.contains(NAMED)).count(),
        1,
        "{log}"
    );
    assert_eq!(leader(&kanon), Some(0), "{log}");

    env.namespace(LEASE_NAMESPACE, json!({}));
    env.wait_for(
        "the audit starts once the namespace exists",
        Duration::from_secs(60),
        || blocked(&kanon, 0) && leader(&kanon) == Some(1),
    );
    let log = kanon.log_tail(300);
    assert!(
        log.contains("the audit has what it needs and starts"),
        "{log}"
    );
    // No line carries the Rust form of an apiserver status.
    assert!(!log.contains("Status {"), "{log}");
    kanon.stop();
    let _ = env.kubectl(&["delete", "namespace", LEASE_NAMESPACE, "--wait=false"]);
}
