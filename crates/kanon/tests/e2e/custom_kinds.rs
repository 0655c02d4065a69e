//! Custom resources' schemas from the cluster: kanon watches CustomResourceDefinitions and
//! checks policies' paths in custom kinds as it does in built-in ones. A typo in a path of a
//! CRD's schema is a warning in the policy's status (and at `kubectl apply`) naming the nearest
//! field, and the status follows when the CRD changes.

use std::time::Duration;

use serde_json::{Value, json};

use crate::Scenario;
use crate::admission::policy;
use crate::env::{Env, text};

pub const SCENARIOS: &[Scenario] = &[(
    "custom_kinds::a_typo_in_a_custom_resource_path_is_a_status_warning_that_follows_the_crd",
    a_typo_in_a_custom_resource_path_is_a_status_warning_that_follows_the_crd,
)];

const CRD: &str = "widgets.example.com";
const POLICY: &str = "ck-widgets";

/// The `widgets.example.com` CRD, serving `example.com/v1 Widget` with these string fields in
/// its `spec`.
fn widgets(fields: &[&str]) -> Value {
    let properties: serde_json::Map<String, Value> = fields
        .iter()
        .map(|f| (f.to_string(), json!({"type": "string", "maxLength": 64})))
        .collect();
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD},
        "spec": {
            "group": "example.com",
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList"},
            "scope": "Namespaced",
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                "type": "object",
                "properties": {"spec": {"type": "object", "properties": properties}}
            }}}]
        }
    })
}

/// A ClusterValidatePolicy on Widgets whose condition reads `path`.
fn widget_policy(path: &str) -> Value {
    policy(
        "ClusterValidatePolicy",
        None,
        POLICY,
        json!({"resourceSelectors": [{"apiVersion": "example.com/v1", "kind": "Widget"}],
               "validateRules": [{"targetOperations": ["CREATE", "UPDATE"], "template": {"type": "condition",
                   "condition": {"cond": "Exist", "dataRef": {"from": "current", "path": path},
                                 "affectMode": "allow"}}}]}),
    )
}

/// Waits until the policy's status has `warnings` (absent when none) as `expected` wants; the
/// last status read.
fn wait_warnings(env: &Env, what: &str, expected: impl Fn(&Value) -> bool) -> Value {
    let mut last = Value::Null;
    env.wait_for(what, Duration::from_secs(30), || {
        last = env
            .policy("ClusterValidatePolicy", None, POLICY)
            .unwrap_or_default();
        let generation = last.pointer("/metadata/generation");
        generation.is_some()
            && last.pointer("/status/observedGeneration") == generation
            && expected(&last["status"]["warnings"])
    });
    last
}

fn a_typo_in_a_custom_resource_path_is_a_status_warning_that_follows_the_crd(env: &mut Env) {
    let _ = env.kubectl(&["delete", "crd", CRD, "--ignore-not-found", "--wait=true"]);
    env.delete_policy("ClusterValidatePolicy", None, POLICY);
    env.apply(&widgets(&["color", "size"]));
    let out = env.kubectl(&[
        "wait",
        "--for=condition=Established",
        "--timeout=30s",
        &format!("crd/{CRD}"),
    ]);
    assert!(out.status.success(), "CRD established: {}", text(&out));

    // A typo of the CRD's `color`: a warning naming it, in the status.
    env.apply_policy(&widget_policy("/spec/colour"))
        .unwrap_or_else(|e| panic!("applying the policy: {e}"));
    let expected = "spec.validateRules[0].template.condition.dataRef.path: `/spec/colour` does not exist in example.com/v1 Widget; did you mean `/spec/color`?";
    let status = wait_warnings(env, "the typo's warning in the status", |warnings| {
        *warnings == json!([expected])
    });
    assert_eq!(
        status["status"]["conditions"][0]["status"], "True",
        "a warning, not an error: {status}"
    );

    // kubectl shows the same check's warning when the policy is written (kanon knows the CRD
    // by now: the status above says so).
    let changed = widget_policy("/spec/sise");
    let out = env.kubectl_stdin(
        &["apply", "--server-side", "--force-conflicts", "-f", "-"],
        &changed.to_string(),
    );
    assert!(out.status.success(), "kubectl apply: {}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("did you mean `/spec/size`?"),
        "kubectl apply shows the warning: {}",
        text(&out)
    );
    wait_warnings(env, "the new typo's warning", |warnings| {
        warnings[0]
            .as_str()
            .is_some_and(|w| w.contains("did you mean `/spec/size`?"))
    });

    // The CRD changes so that the path is a real field: the warning goes, with no change to
    // the policy.
    let generation = env
        .policy("ClusterValidatePolicy", None, POLICY)
        .and_then(|p| p.pointer("/metadata/generation").cloned());
    env.apply(&widgets(&["color", "size", "sise"]));
    let status = wait_warnings(
        env,
        "the warning gone after the CRD changed",
        Value::is_null,
    );
    assert_eq!(
        status.pointer("/metadata/generation").cloned(),
        generation,
        "the policy itself did not change: {status}"
    );

    // And back: a CRD that loses the field brings the warning back.
    env.apply(&widgets(&["color", "size"]));
    wait_warnings(env, "the warning back after the CRD lost the field", |w| {
        w[0].as_str()
            .is_some_and(|w| w.contains("did you mean `/spec/size`?"))
    });

    // Without the CRD, Widgets are unknown and not judged.
    let out = env.kubectl(&["delete", "crd", CRD, "--wait=true"]);
    assert!(out.status.success(), "deleting the CRD: {}", text(&out));
    wait_warnings(env, "no warning once the CRD is gone", Value::is_null);
    env.delete_policy("ClusterValidatePolicy", None, POLICY);
}
