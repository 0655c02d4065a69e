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

/// The kinds of a cluster with one CRD: `widgets.example.com`, serving `Widget` at
/// `example.com/v1`.
fn cluster_kinds() -> kanon_engine::Kinds {
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "names": {"kind": "Widget", "plural": "widgets"},
            "scope": "Namespaced",
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                "type": "object",
                "properties": {"spec": {"type": "object", "properties": {
                    "replicas": {"type": "integer"},
                    "color": {"type": "string", "enum": ["red", "blue"]}
                }}}
            }}}]
        }
    });
    let builtin = kanon_schema::Schema::builtin().unwrap();
    let widgets = kanon_schema::CustomResource::from_crd(&crd).unwrap();
    let custom = kanon_schema::Schema::from_custom_resources(builtin, [&widgets]).unwrap();
    kanon_engine::Kinds::with_custom(builtin, std::sync::Arc::new(custom))
}

/// Compiles `doc` knowing `kinds`: its errors and warnings, as `field: message`.
fn checked_with(doc: &Value, kinds: &kanon_engine::Kinds) -> (Vec<String>, Vec<String>) {
    let compiled = kanon_engine::compile_document_reporting_with(doc, kinds).unwrap();
    let text = |list: &[kanon_engine::FieldError]| list.iter().map(ToString::to_string).collect();
    (text(&compiled.errors), text(&compiled.policy.warnings))
}

fn widgets(api_version: &str, kind: &str) -> Value {
    json!([{"apiVersion": api_version, "kind": kind}])
}

#[test]
fn a_path_a_custom_kind_lacks_is_a_warning_naming_the_nearest_field() {
    let kinds = cluster_kinds();
    let doc = condition_on(widgets("example.com/v1", "Widget"), exists("/spec/replcas"));
    let (errors, warnings) = checked_with(&doc, &kinds);
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(
        warnings,
        [
            "spec.validateRules[0].template.condition.dataRef.path: `/spec/replcas` does not exist in example.com/v1 Widget; did you mean `/spec/replicas`?"
        ]
    );
    // The built-ins alone know nothing of Widgets: nothing to say.
    assert!(self::warnings(&doc).is_empty());
    // Real paths, ObjectMeta's included, are fine; so is one any selected kind has.
    for path in ["/spec/replicas", "/metadata/labels/app", "$.spec.color"] {
        let doc = condition_on(widgets("example.com/v1", "Widget"), exists(path));
        assert_eq!(checked_with(&doc, &kinds).1, Vec::<String>::new(), "{path}");
    }
    let both = json!([{"apiVersion": "apps/v1", "kind": "Deployment"},
                      {"apiVersion": "example.com/v1", "kind": "Widget"}]);
    let doc = condition_on(both.clone(), exists("/spec/template/spec/containers"));
    assert_eq!(checked_with(&doc, &kinds).1, Vec::<String>::new());
    let doc = condition_on(both, exists("/spec/replica"));
    let (_, warnings) = checked_with(&doc, &kinds);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains(
            "does not exist in any selected kind (apps/v1 Deployment, example.com/v1 Widget)"
        ),
        "{warnings:?}"
    );
}

#[test]
fn a_custom_kind_named_wrongly_is_a_warning_never_an_error() {
    let kinds = cluster_kinds();
    let kind_warning = |api_version: &str, kind: &str| {
        let doc = condition_on(widgets(api_version, kind), exists("/spec/anything"));
        let (errors, warnings) = checked_with(&doc, &kinds);
        assert!(errors.is_empty(), "{errors:?}");
        warnings
    };
    assert_eq!(
        kind_warning("example.com/v1", "widget"),
        [
            "spec.resourceSelectors[0].kind: no CustomResourceDefinition serves a kind `widget` at `example.com/v1` (kinds are case-sensitive); did you mean `Widget` (example.com/v1)?"
        ]
    );
    assert_eq!(
        kind_warning("example.com/v2", "Widget"),
        [
            "spec.resourceSelectors[0].kind: no CustomResourceDefinition serves `Widget` at `example.com/v2`: `Widget` is served at `example.com/v1`"
        ]
    );
    let found = kind_warning("Example.com/v1", "Widget");
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].contains("is served at `example.com/v1`"),
        "{found:?}"
    );
    // Nothing near in the group (perhaps a CRD still to come), or a group no CRD serves: not
    // judged, and the unknown kind leaves paths unjudged too.
    assert!(kind_warning("example.com/v1", "Gizmo").is_empty());
    assert!(kind_warning("other.io/v1", "Widgte").is_empty());
    // A built-in kind named wrongly stays an error.
    let doc = condition_on(widgets("apps/v1", "Deploymnet"), exists("/spec/x"));
    let (errors, _) = checked_with(&doc, &kinds);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains("did you mean `Deployment`"),
        "{errors:?}"
    );
}

#[test]
fn a_k8s_reference_to_a_custom_kind_is_checked_too() {
    let kinds = cluster_kinds();
    let reference = |kind: &str, path: &str| {
        condition_on(
            deployments(),
            json!({"cond": "Exist", "dataRef": {"from": "k8s", "path": path,
                   "k8s": {"apiVersion": "example.com/v1", "kind": kind, "name": "w", "namespace": "ns"}}}),
        )
    };
    let (errors, warnings) = checked_with(&reference("Widget", "/spec/colour"), &kinds);
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].starts_with("spec.validateRules[0].template.condition.dataRef.path: `/spec/colour` does not exist in example.com/v1 Widget; did you mean `/spec/color`?"),
        "{warnings:?}"
    );
    let (errors, warnings) = checked_with(&reference("Widgets", "/spec/color"), &kinds);
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].starts_with("spec.validateRules[0].template.condition.dataRef.k8s.kind:"),
        "{warnings:?}"
    );
}

#[test]
fn kinds_warnings_are_the_warnings_compile_with_gives() {
    let kinds = cluster_kinds();
    let builtin = kanon_engine::Kinds::builtin().unwrap();
    for doc in [
        condition_on(widgets("example.com/v1", "Widget"), exists("/spec/replcas")),
        condition_on(
            widgets("example.com/v1", "widget"),
            exists("/spec/replicas"),
        ),
        condition_on(deployments(), exists("/spec/replica")),
        cvp(
            "no-operations",
            json!({"resourceSelectors": widgets("example.com/v1", "Widget"),
                   "validateRules": [{"template": {"type": "condition", "condition": exists("/spec/x")}}]}),
        ),
    ] {
        let (object, _) = kanon_engine::PolicyObject::decode_reporting(&doc).unwrap();
        for kinds in [&kinds, &builtin] {
            let compiled = kanon_engine::compile_with(&object, kinds);
            assert_eq!(
                kanon_engine::kinds_warnings(&object, kinds),
                compiled.policy.warnings,
                "{doc}"
            );
        }
    }
}
