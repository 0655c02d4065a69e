//! A policy's life in the cluster: checked when written, its status, how fast a change takes
//! effect, and what a bad policy that got in while kanon was down does.

use std::time::{Duration, Instant};

use kube::api::PostParams;
use serde_json::{Value, json};

use crate::Scenario;
use crate::admission::{add_label, install, pod, policy};
use crate::env::{Env, repo, text};

pub const SCENARIOS: &[Scenario] = &[
    (
        "lifecycle::status_is_ready_with_the_rendered_programs",
        status_is_ready_with_the_rendered_programs,
    ),
    (
        "lifecycle::kubectl_get_shows_ready_for_all_four_kinds",
        kubectl_get_shows_ready_for_all_four_kinds,
    ),
    (
        "lifecycle::two_replicas_write_the_same_status_once",
        two_replicas_write_the_same_status_once,
    ),
    (
        "lifecycle::a_bad_policy_is_refused_at_kubectl_apply",
        a_bad_policy_is_refused_at_kubectl_apply,
    ),
    (
        "lifecycle::a_bad_policy_written_while_kanon_was_down_is_ready_false",
        a_bad_policy_written_while_kanon_was_down_is_ready_false,
    ),
    (
        "lifecycle::a_policy_change_takes_effect_within_a_second",
        a_policy_change_takes_effect_within_a_second,
    ),
];

fn status_is_ready_with_the_rendered_programs(env: &mut Env) {
    let document = policy(
        "ClusterOverridePolicy",
        None,
        "lc-status",
        json!({"resourceSelectors": [{"apiVersion": "v1", "kind": "Pod", "namespace": "lc-nowhere"}],
               "overrideRules": [add_label("tier", "one")]}),
    );
    install(env, &document);
    let status = env.wait_policy_status("ClusterOverridePolicy", None, "lc-status");
    let condition = &status["status"]["conditions"][0];
    assert_eq!(condition["type"], "Ready", "{status}");
    assert_eq!(condition["reason"], "Compiled", "{status}");
    assert_eq!(status["status"]["observedGeneration"], 1, "{status}");
    let rendered = &status["status"]["renderedPrograms"][0];
    assert_eq!(
        rendered["field"], "spec.overrideRules[0].overriders.template",
        "{status}"
    );
    assert!(
        rendered["program"]
            .as_str()
            .is_some_and(|p| p.contains("tier")),
        "{status}"
    );
    let first_transition = condition["lastTransitionTime"].clone();

    // A new generation is observed; the condition, still True, keeps its transition time.
    assert!(status["status"].get("warnings").is_none(), "{status}");
    // It also brings a likely mistake (a path Pods do not have): a warning in the status.
    let mut changed = document.clone();
    changed["spec"]["overrideRules"] = json!([add_label("tier", "two"),
        {"overriders": {"plaintext": [{"op": "add", "path": "/metadata/label/x", "value": "y"}]}}]);
    env.apply_policy(&changed).expect("updated");
    let mut status = Value::Null;
    env.wait_for("observedGeneration 2", Duration::from_secs(10), || {
        status = env
            .policy("ClusterOverridePolicy", None, "lc-status")
            .unwrap_or_default();
        status["status"]["observedGeneration"] == 2
    });
    assert_eq!(
        status["status"]["conditions"][0]["lastTransitionTime"], first_transition,
        "{status}"
    );
    assert_eq!(
        status["status"]["warnings"],
        json!([
            "spec.overrideRules[1].overriders.plaintext[0].path: `/metadata/label/x` does not exist in v1 Pod; did you mean `/metadata/labels/x`?"
        ]),
        "{status}"
    );
    // Written by kanon's field manager only, by server-side apply.
    let managers: Vec<&str> = status["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["subresource"] == "status")
        .filter_map(|m| m["manager"].as_str())
        .collect();
    assert_eq!(managers, ["kanon"], "{status}");
    // Nothing more is written once the status is right: the resourceVersion stays.
    let version = status["metadata"]["resourceVersion"].clone();
    std::thread::sleep(Duration::from_millis(1500));
    let again = env
        .policy("ClusterOverridePolicy", None, "lc-status")
        .unwrap_or_default();
    assert_eq!(
        again["metadata"]["resourceVersion"], version,
        "status rewritten: {again}"
    );
    env.delete_policy("ClusterOverridePolicy", None, "lc-status");
}

fn kubectl_get_shows_ready_for_all_four_kinds(env: &mut Env) {
    let ns = "lc-kinds";
    env.namespace(ns, json!({}));
    let nowhere =
        json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "nothing-is-called-this"}]);
    let condition = json!([{"template": {"type": "condition", "condition": {
        "cond": "Exist", "dataRef": {"from": "current", "path": "/data/forbidden"}}}}]);
    let documents = [
        policy(
            "ClusterOverridePolicy",
            None,
            "lc-kinds",
            json!({"resourceSelectors": nowhere, "overrideRules": [add_label("a", "b")]}),
        ),
        policy(
            "OverridePolicy",
            Some(ns),
            "lc-kinds",
            json!({"resourceSelectors": nowhere, "overrideRules": [add_label("a", "b")]}),
        ),
        policy(
            "ClusterValidatePolicy",
            None,
            "lc-kinds",
            json!({"resourceSelectors": nowhere, "validateRules": condition}),
        ),
        policy(
            "ValidatePolicy",
            Some(ns),
            "lc-kinds",
            json!({"resourceSelectors": nowhere, "validateRules": condition}),
        ),
    ];
    for d in &documents {
        install(env, d);
    }
    let out = env.kubectl(&["get", "cop,op,cvp,vp", "-A", "--no-headers"]);
    assert!(out.status.success(), "{}", text(&out));
    let shown = String::from_utf8_lossy(&out.stdout).into_owned();
    for short in [
        "clusteroverridepolicy.policy.kanon.dev/lc-kinds",
        "overridepolicy.policy.kanon.dev/lc-kinds",
        "clustervalidatepolicy.policy.kanon.dev/lc-kinds",
        "validatepolicy.policy.kanon.dev/lc-kinds",
    ] {
        let line = shown
            .lines()
            .find(|l| l.contains(short))
            .unwrap_or_else(|| panic!("{short} missing:\n{shown}"));
        assert!(
            line.split_whitespace().any(|w| w == "True"),
            "{short} not READY True: {line}"
        );
    }
    for d in &documents {
        let kind = d["kind"].as_str().unwrap_or_default();
        env.delete_policy(kind, d["metadata"]["namespace"].as_str(), "lc-kinds");
    }
}

fn a_bad_policy_is_refused_at_kubectl_apply(env: &mut Env) {
    let file = repo().join("examples/failures/cop-invalid.yaml");
    let out = env.kubectl(&["apply", "-f", &file.display().to_string()]);
    assert!(!out.status.success(), "an invalid policy was admitted");
    let shown = text(&out);
    assert!(
        shown.contains("denied the request") && shown.contains("is invalid"),
        "{shown}"
    );
    // Every error by field path, all at once.
    let paths = shown.matches("spec.").count();
    assert!(paths >= 2, "expected every error by field path: {shown}");
}

fn a_bad_policy_written_while_kanon_was_down_is_ready_false(env: &mut Env) {
    let ns = "lc-bad";
    env.namespace(ns, json!({}));
    let bad = |name: &str, failure: &str| {
        policy(
            "ClusterOverridePolicy",
            None,
            name,
            json!({
                "failurePolicy": failure,
                "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod", "namespace": ns}],
                "overrideRules": [{"overriders": {"plaintext": [
                    {"op": "add", "path": "metadata/labels/x", "value": "y"},
                ]}}],
            }),
        )
    };
    // With kanon down, its policy check is skipped (failurePolicy Ignore on that webhook), so a
    // bad policy gets in; its Pods are not created meanwhile (Fail).
    env.kanon.stop();
    let written = env.apply_policy(&bad("lc-bad-fail", "Fail"));
    let written_too = env.apply_policy(&bad("lc-bad-ignore", "Ignore"));
    env.kanon.start();
    written.expect("written while kanon was down");
    written_too.expect("written while kanon was down");

    for name in ["lc-bad-fail", "lc-bad-ignore"] {
        let status = env.wait_policy_status("ClusterOverridePolicy", None, name);
        let condition = &status["status"]["conditions"][0];
        assert_eq!(condition["status"], "False", "{status}");
        assert_eq!(condition["reason"], "Invalid", "{status}");
        assert!(
            condition["message"]
                .as_str()
                .is_some_and(|m| m.contains("spec.overrideRules[0].overriders.plaintext[0].path")),
            "{status}"
        );
    }
    let out = env.kubectl(&["get", "cop", "lc-bad-fail", "--no-headers"]);
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .any(|w| w == "False"),
        "{}",
        text(&out)
    );
    // Its failure policy decides: Fail denies naming the policy and its errors, Ignore warns.
    let refused = env
        .create(&pod(ns, "p", json!({})))
        .expect_err("denied by the invalid Fail policy");
    assert!(
        refused.contains("ClusterOverridePolicy/lc-bad-fail: the policy is invalid"),
        "{refused}"
    );
    env.delete_policy("ClusterOverridePolicy", None, "lc-bad-fail");
    env.wait_for("the Fail policy gone", Duration::from_secs(10), || {
        env.create_with(
            &pod(ns, "q", json!({})),
            &PostParams {
                dry_run: true,
                ..Default::default()
            },
        )
        .is_ok()
    });
    let out = env.kubectl_stdin(&["create", "-f", "-"], &pod(ns, "q", json!({})).to_string());
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains(
            "Warning: ClusterOverridePolicy/lc-bad-ignore: skipped (failurePolicy Ignore)"
        ),
        "{}",
        text(&out)
    );
    env.delete_policy("ClusterOverridePolicy", None, "lc-bad-ignore");
}

/// Median and worst of `samples`.
fn median_and_max(mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort();
    (samples[samples.len() / 2], samples[samples.len() - 1])
}

fn a_policy_change_takes_effect_within_a_second(env: &mut Env) {
    let ns = "lc-latency";
    env.namespace(ns, json!({}));
    let document = |value: &str| {
        policy(
            "ClusterOverridePolicy",
            None,
            "lc-latency",
            json!({"resourceSelectors": [{"apiVersion": "v1", "kind": "Pod", "namespace": ns}],
                   "overrideRules": [add_label("version", value)]}),
        )
    };
    install(env, &document("v0"));
    let dry_run = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let mut samples = Vec::new();
    for round in 1..=7 {
        let value = format!("v{round}");
        let written = Instant::now();
        env.apply_policy(&document(&value)).expect("updated");
        // A dry-run create shows what kanon does now, without storing anything.
        loop {
            let answered = env
                .create_with(&pod(ns, "probe", json!({})), &dry_run)
                .expect("dry run");
            if answered["metadata"]["labels"]["version"] == value.as_str() {
                break;
            }
            assert!(
                written.elapsed() < Duration::from_secs(10),
                "the change never took effect: {answered}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        samples.push(written.elapsed());
    }
    let (median, max) = median_and_max(samples.clone());
    eprintln!(
        "e2e: policy change -> effect through the apiserver: median {:.0} ms, max {:.0} ms over {} changes",
        median.as_secs_f64() * 1e3,
        max.as_secs_f64() * 1e3,
        samples.len()
    );
    assert!(
        max < Duration::from_secs(1),
        "a change took {max:?}: {samples:?}"
    );
    env.delete_policy("ClusterOverridePolicy", None, "lc-latency");
}

fn two_replicas_write_the_same_status_once(env: &mut Env) {
    let mut second = env.replica("second-replica");
    second.start();
    let document = |value: &str| {
        policy(
            "ClusterOverridePolicy",
            None,
            "lc-replicas",
            json!({"resourceSelectors": [{"apiVersion": "v1", "kind": "Pod", "namespace": "lc-nowhere"}],
                   "overrideRules": [add_label("replicas", value)]}),
        )
    };
    install(env, &document("a"));
    for (generation, value) in [(2, "b"), (3, "c")] {
        env.apply_policy(&document(value)).expect("updated");
        env.wait_for("both replicas' status", Duration::from_secs(10), || {
            env.policy("ClusterOverridePolicy", None, "lc-replicas")
                .is_some_and(|p| p["status"]["observedGeneration"] == generation)
        });
    }
    // Settled: one field manager for status, and no write after the last change.
    std::thread::sleep(Duration::from_millis(500));
    let settled = env
        .policy("ClusterOverridePolicy", None, "lc-replicas")
        .unwrap_or_default();
    std::thread::sleep(Duration::from_secs(2));
    let later = env
        .policy("ClusterOverridePolicy", None, "lc-replicas")
        .unwrap_or_default();
    assert_eq!(
        settled["metadata"]["resourceVersion"], later["metadata"]["resourceVersion"],
        "the replicas keep rewriting the status: {later}"
    );
    let managers: Vec<&str> = later["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["subresource"] == "status")
        .filter_map(|m| m["manager"].as_str())
        .collect();
    assert_eq!(managers, ["kanon"], "{later}");
    // Both replicas wrote (or found written) the status, and both serve.
    for (replica, metrics) in [("first", env.kanon.metrics()), ("second", second.metrics())] {
        assert!(
            metrics.contains("kanon_ready 1"),
            "{replica} not ready:\n{metrics}"
        );
    }
    second.stop();
    env.delete_policy("ClusterOverridePolicy", None, "lc-replicas");
}
