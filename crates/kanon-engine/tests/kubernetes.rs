//! Checks against Kubernetes' built-in kinds: paths no selected kind has and rules that judge
//! DELETE are warnings; `k8s` references to a built-in kind named wrongly are errors.

mod common;

use common::*;
use serde_json::{Value, json};

/// The warnings of a valid policy, as `field: message`.
fn warnings(doc: &Value) -> Vec<String> {
    compiled(doc)
        .warnings
        .iter()
        .map(ToString::to_string)
        .collect()
}

/// A ClusterValidatePolicy on `selectors` with one condition (CREATE and UPDATE only).
fn condition_on(selectors: Value, condition: Value) -> Value {
    cvp(
        "check",
        json!({"resourceSelectors": selectors, "validateRules": [{"targetOperations": ["CREATE", "UPDATE"],
               "template": {"type": "condition", "condition": condition}}]}),
    )
}

fn deployments() -> Value {
    json!([{"apiVersion": "apps/v1", "kind": "Deployment"}])
}

fn exists(path: &str) -> Value {
    json!({"cond": "Exist", "dataRef": {"from": "current", "path": path}, "affectMode": "allow"})
}

#[test]
fn a_path_no_selected_kind_has_is_a_warning_naming_the_nearest_field() {
    let found = warnings(&condition_on(deployments(), exists("/spec/replica")));
    assert_eq!(
        found,
        [
            "spec.validateRules[0].template.condition.dataRef.path: `/spec/replica` does not exist in apps/v1 Deployment; did you mean `/spec/replicas`?"
        ]
    );
    // Through a JSONPath, its wildcards and its unions. (Resource names are a map's keys, any
    // of which may exist: `limits.memry` is not a mistake kanon can see.)
    let found = warnings(&condition_on(
        deployments(),
        exists("$.spec.template.spec.containers[*].resoruces.limits.memory"),
    ));
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0]
            .contains("did you mean `/spec/template/spec/containers/0/resources/limits/memory`?"),
        "{found:?}"
    );
    let found = warnings(&condition_on(
        deployments(),
        exists("$.spec.template.spec['initContainer','containers'][*].image"),
    ));
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].contains("did you mean `/spec/template/spec/initContainers/0/image`?"),
        "{found:?}"
    );
    // A field with no near name lists what is there.
    let found = warnings(&condition_on(deployments(), exists("/spec/zzzzzzzz")));
    assert!(
        found[0].contains("/spec has `minReadySeconds`, `paused`"),
        "{found:?}"
    );
    // Into a scalar, or a list by name.
    let found = warnings(&condition_on(deployments(), exists("/spec/replicas/x")));
    assert!(found[0].contains("holds a single value"), "{found:?}");
    let found = warnings(&condition_on(
        deployments(),
        exists("/spec/template/spec/containers/app/image"),
    ));
    assert!(
        found[0].contains("is a list, indexed by number"),
        "{found:?}"
    );
}

#[test]
fn paths_that_exist_somewhere_they_may_are_not_warned_about() {
    for (selectors, path) in [
        (deployments(), "/spec/replicas"),
        (deployments(), "/metadata/labels/team"),
        (deployments(), "/metadata/annotations/a~1b"),
        (deployments(), "$.metadata.labels.*"),
        (deployments(), "$.spec.template.spec.containers[*].image"),
        (
            deployments(),
            "$.spec.template.spec.containers[?(@.name == 'app')].image",
        ),
        (deployments(), "$..image"),
        // Free-form places: anything below is fine.
        (
            json!([{"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition"}]),
            "/spec/versions/0/schema/openAPIV3Schema/properties/x",
        ),
        // In one selected kind of two.
        (
            json!([{"apiVersion": "v1", "kind": "Pod"}, {"apiVersion": "apps/v1", "kind": "Deployment"}]),
            "/spec/replicas",
        ),
        // A custom resource: its schema is unknown here.
        (
            json!([{"apiVersion": "example.com/v1", "kind": "Widget"}, {"apiVersion": "apps/v1", "kind": "Deployment"}]),
            "/spec/size",
        ),
        // No selector: every kind.
        (json!([]), "/spec/size"),
    ] {
        assert_eq!(
            warnings(&condition_on(selectors.clone(), exists(path))),
            Vec::<String>::new(),
            "{selectors} {path}"
        );
    }
}

#[test]
fn field_selectors_and_plaintext_paths_are_checked_too() {
    let doc = cop(
        "marks",
        json!({"resourceSelectors": [{"apiVersion": "v1", "kind": "Pod",
          "fieldSelector": {"matchFields": {"/spec/nodename": "n1"},
                            "matchExpressions": [{"field": "/spec/schedulerName", "operator": "Exists"}]}}],
        "overrideRules": [plaintext_rule(json!([
            {"op": "add", "path": "/spec/priorityClasName", "value": "low"},
            {"op": "copy", "from": "/metadata/labels", "path": "/metadata/annotations"},
        ]))]}),
    );
    let found = warnings(&doc);
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(
        found[0].starts_with("spec.resourceSelectors[0].fieldSelector.matchFields[/spec/nodename]: `/spec/nodename` does not exist in v1 Pod; did you mean `/spec/nodeName`?"),
        "{found:?}"
    );
    assert!(
        found[1].starts_with("spec.overrideRules[0].overriders.plaintext[0].path: `/spec/priorityClasName` does not exist in v1 Pod; did you mean `/spec/priorityClassName`?"),
        "{found:?}"
    );
}

#[test]
fn a_validate_rule_that_also_judges_delete_is_a_warning() {
    let rule = |ops: Value| {
        cvp(
            "check",
            json!({"resourceSelectors": deployments(), "validateRules": [{"targetOperations": ops,
                   "template": {"type": "condition", "condition": exists("/metadata/labels/team")}}]}),
        )
    };
    let found = warnings(&rule(json!([])));
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].starts_with(
            "spec.validateRules[0].targetOperations: is not set, so the rule judges DELETE too"
        ),
        "{found:?}"
    );
    assert!(warnings(&rule(json!(["CREATE", "UPDATE"]))).is_empty());
    assert!(warnings(&rule(json!(["CREATE", "UPDATE", "DELETE"]))).is_empty());
}

#[test]
fn a_k8s_reference_to_a_built_in_kind_named_wrongly_is_an_error() {
    let reference = |kind: &str, path: &str| {
        condition_on(
            deployments(),
            json!({"cond": "Exist", "dataRef": {"from": "k8s", "path": path,
                   "k8s": {"apiVersion": "v1", "kind": kind, "name": "registry"}}}),
        )
    };
    let e = kanon_engine::compile_document(&reference("configmap", "/data/x")).unwrap_err();
    assert_eq!(e.errors.len(), 1, "{e}");
    assert_eq!(
        e.errors[0].field,
        "spec.validateRules[0].template.condition.dataRef.k8s.kind"
    );
    assert!(
        e.errors[0]
            .message
            .contains("did you mean `ConfigMap` (v1)?"),
        "{e}"
    );
    // Its path is checked against the kind it names.
    let found = warnings(&reference("ConfigMap", "/datta/x"));
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].contains("`/datta/x` does not exist in v1 ConfigMap; did you mean `/data/x`?"),
        "{found:?}"
    );
    assert!(warnings(&reference("ConfigMap", "/data/x")).is_empty());
}
