//! Resource, label and field selectors, through whole policies: each row compiles a
//! ClusterOverridePolicy with the selectors under test and checks whether a CREATE of the
//! object is mutated by it (via the policy index and `mutate`) and whether
//! `CompiledPolicy::selects_resource` agrees.

mod common;

use common::*;
use serde_json::{Value, json};

/// Whether a ClusterOverridePolicy with these `resourceSelectors` applies to a CREATE of
/// `object`. Checks that the index path (`mutate`) and `selects_resource` agree.
fn selects(selectors: Value, object: &Value) -> bool {
    let doc = cop(
        "sel",
        json!({"resourceSelectors": selectors, "overrideRules": [hit_rule("sel")]}),
    );
    let policy = compiled(&doc);
    let req = create(object);
    let direct = policy.selects_resource(&req.view(object));
    let set = kanon_engine::PolicySet::build(vec![policy]).unwrap();
    let decision = kanon_engine::block_on(set.mutate(&req, &kanon_engine::NoObjects));
    assert!(decision.allowed, "{decision:?}");
    let applied = match decision.applied_policies.as_slice() {
        [] => false,
        [one] if one == "ClusterOverridePolicy/sel" => true,
        other => panic!("unexpected applied policies {other:?}"),
    };
    let marked = decision.patched.as_ref().and_then(|o| o.get("hit-sel")) == Some(&json!(true));
    assert_eq!(
        applied, marked,
        "appliedPolicies and the patched object disagree: {decision:?}"
    );
    assert_eq!(
        applied, direct,
        "the index path and selects_resource disagree for {selectors:#}"
    );
    if !applied {
        assert!(
            decision.patch.0.is_empty(),
            "an unselected object gets no patch: {decision:?}"
        );
    }
    applied
}

/// Runs a table of `(description, selectors, expected)` rows against one object.
#[track_caller]
fn check_rows(object: &Value, rows: Vec<(&str, Value, bool)>) {
    let mut failures = Vec::new();
    for (what, selectors, want) in rows {
        let got = selects(selectors.clone(), object);
        if got != want {
            failures.push(format!(
                "{what}: expected {want}, got {got} for {selectors}"
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "selector rows failed:\n{}",
        failures.join("\n")
    );
}

fn web_pod() -> Value {
    let mut p = pod("default", "web", json!({"app": "web", "tier": "front"}));
    p["spec"]["nodeName"] = json!("node-1");
    p
}

// ---------------------------------------------------------------------------------------------
// 1. Resource selector precedence
// ---------------------------------------------------------------------------------------------

#[test]
fn api_version_and_kind_are_exact_and_case_sensitive() {
    // A custom resource's kind: kanon cannot know it, so a near miss is not an error, and
    // the match is exact.
    let widget = json!({
        "apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "w", "namespace": "default"}, "trace": [],
    });
    check_rows(
        &widget,
        vec![
            (
                "exact type",
                json!([{"apiVersion": "example.com/v1", "kind": "Widget"}]),
                true,
            ),
            (
                "kind lower case",
                json!([{"apiVersion": "example.com/v1", "kind": "widget"}]),
                false,
            ),
            (
                "kind upper case",
                json!([{"apiVersion": "example.com/v1", "kind": "WIDGET"}]),
                false,
            ),
            (
                "apiVersion upper case",
                json!([{"apiVersion": "Example.com/v1", "kind": "Widget"}]),
                false,
            ),
            (
                "other group",
                json!([{"apiVersion": "example.org/v1", "kind": "Widget"}]),
                false,
            ),
            (
                "other version",
                json!([{"apiVersion": "example.com/v2", "kind": "Widget"}]),
                false,
            ),
            (
                "plural resource name",
                json!([{"apiVersion": "example.com/v1", "kind": "widgets"}]),
                false,
            ),
            (
                "kind prefix",
                json!([{"apiVersion": "example.com/v1", "kind": "Widg"}]),
                false,
            ),
        ],
    );
    check_rows(
        &web_pod(),
        vec![
            (
                "exact type",
                json!([{"apiVersion": "v1", "kind": "Pod"}]),
                true,
            ),
            (
                "other kind",
                json!([{"apiVersion": "v1", "kind": "Namespace"}]),
                false,
            ),
        ],
    );
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "default"}, "trace": [],
    });
    check_rows(
        &deployment,
        vec![(
            "group/version",
            json!([{"apiVersion": "apps/v1", "kind": "Deployment"}]),
            true,
        )],
    );
}

/// The error a selector of `api_version`/`kind` gives, if any.
fn selector_error(api_version: &str, kind: &str) -> Option<String> {
    let doc = cop(
        "sel",
        json!({"resourceSelectors": [{"apiVersion": api_version, "kind": kind}],
               "overrideRules": [plaintext_rule(json!([{"op": "add", "path": "/metadata/labels", "value": {}}]))]}),
    );
    match kanon_engine::compile_document(&doc) {
        Ok(_) => None,
        Err(e) => {
            assert_eq!(e.errors.len(), 1, "{e}");
            assert_eq!(e.errors[0].field, "spec.resourceSelectors[0].kind");
            Some(e.errors[0].message.clone())
        }
    }
}

#[test]
fn a_built_in_kind_named_wrongly_is_an_error_saying_what_was_meant() {
    // Each of these would select nothing, and the policy would never apply.
    for (api_version, kind, said) in [
        ("v1", "pod", "did you mean `Pod` (v1)?"),
        ("v1", "POD", "did you mean `Pod` (v1)?"),
        ("apps/v1", "Pod", "`Pod` is served at `v1`"),
        ("v1", "Deployment", "`Deployment` is served at `apps/v1`"),
        (
            "apps/v1beta1",
            "Deployment",
            "`Deployment` is served at `apps/v1`",
        ),
        ("apps", "Deployment", "`Deployment` is served at `apps/v1`"),
        ("V1", "Pod", "`Pod` is served at `v1`"),
        (
            "apps/v1",
            "Deploymnet",
            "did you mean `Deployment` (apps/v1)?",
        ),
        ("v1", "pods", "did you mean `Pod` (v1)?"),
        ("apps/v1", "Gadget", "(it serves "),
        ("example.com", "Widget", "write `<group>/<version>`"),
    ] {
        let message = selector_error(api_version, kind)
            .unwrap_or_else(|| panic!("{api_version} {kind} should be an error"));
        assert!(
            message.contains(said)
                && (message.contains("Kubernetes v1.35") || message.contains("not an apiVersion")),
            "{api_version} {kind}: {message}"
        );
    }
    // Built-in kinds as served, and custom resources (whatever their spelling), are fine.
    for (api_version, kind) in [
        ("v1", "Pod"),
        ("apps/v1", "Deployment"),
        ("batch/v1", "CronJob"),
        ("example.com/v1", "pod"),
        ("serving.knative.dev/v1", "Service"),
    ] {
        assert_eq!(
            selector_error(api_version, kind),
            None,
            "{api_version} {kind}"
        );
    }
}

#[test]
fn namespace_of_the_selector() {
    check_rows(
        &web_pod(),
        vec![
            (
                "namespace unset",
                json!([{"apiVersion": "v1", "kind": "Pod"}]),
                true,
            ),
            (
                "namespace equal",
                json!([{"apiVersion": "v1", "kind": "Pod", "namespace": "default"}]),
                true,
            ),
            (
                "namespace differs",
                json!([{"apiVersion": "v1", "kind": "Pod", "namespace": "kube-system"}]),
                false,
            ),
            (
                "namespace differs in case",
                json!([{"apiVersion": "v1", "kind": "Pod", "namespace": "Default"}]),
                false,
            ),
            (
                "empty namespace is unset",
                json!([{"apiVersion": "v1", "kind": "Pod", "namespace": ""}]),
                true,
            ),
        ],
    );
    check_rows(
        &node("node-1"),
        vec![
            (
                "cluster-scoped, namespace unset",
                json!([{"apiVersion": "v1", "kind": "Node"}]),
                true,
            ),
            (
                "cluster-scoped, namespace set",
                json!([{"apiVersion": "v1", "kind": "Node", "namespace": "default"}]),
                false,
            ),
            (
                "cluster-scoped, namespace set, name equal",
                json!([{"apiVersion": "v1", "kind": "Node", "namespace": "default", "name": "node-1"}]),
                false,
            ),
        ],
    );
}

#[test]
fn name_alone_decides_when_set() {
    let never_labels = json!({"matchLabels": {"app": "db"}});
    let never_fields = json!({"matchFields": {"/spec/nodeName": "node-2"}});
    let always_labels = json!({"matchLabels": {"app": "web"}});
    let always_fields = json!({"matchFields": {"/spec/nodeName": "node-1"}});
    check_rows(
        &web_pod(),
        vec![
            (
                "name equal",
                json!([{"apiVersion": "v1", "kind": "Pod", "name": "web"}]),
                true,
            ),
            (
                "name differs",
                json!([{"apiVersion": "v1", "kind": "Pod", "name": "db"}]),
                false,
            ),
            (
                "name differs in case",
                json!([{"apiVersion": "v1", "kind": "Pod", "name": "Web"}]),
                false,
            ),
            (
                "name equal, labels would not match",
                json!([{"apiVersion": "v1", "kind": "Pod", "name": "web", "labelSelector": never_labels}]),
                true,
            ),
            (
                "name equal, fields would not match",
                json!([{"apiVersion": "v1", "kind": "Pod", "name": "web", "fieldSelector": never_fields}]),
                true,
            ),
            (
                "name equal, neither labels nor fields would match",
                json!([{"apiVersion": "v1", "kind": "Pod", "name": "web",
                        "labelSelector": never_labels, "fieldSelector": never_fields}]),
                true,
            ),
            (
                "name differs, labels and fields match",
                json!([{"apiVersion": "v1", "kind": "Pod", "name": "db",
                        "labelSelector": always_labels, "fieldSelector": always_fields}]),
                false,
            ),
            (
                "name equal, namespace differs",
                json!([{"apiVersion": "v1", "kind": "Pod", "name": "web", "namespace": "other"}]),
                false,
            ),
            (
                "name equal, namespace equal",
                json!([{"apiVersion": "v1", "kind": "Pod", "name": "web", "namespace": "default"}]),
                true,
            ),
            (
                "name equal, type differs",
                json!([{"apiVersion": "v1", "kind": "Service", "name": "web"}]),
                false,
            ),
            (
                "empty name is unset: labels decide (no match)",
                json!([{"apiVersion": "v1", "kind": "Pod", "name": "", "labelSelector": never_labels}]),
                false,
            ),
            (
                "empty name is unset: labels decide (match)",
                json!([{"apiVersion": "v1", "kind": "Pod", "name": "", "labelSelector": always_labels}]),
                true,
            ),
        ],
    );
}

#[test]
fn object_created_with_generate_name_has_no_name_to_match() {
    let mut p = pod("default", "", json!({"app": "web"}));
    p["metadata"].as_object_mut().unwrap().remove("name");
    p["metadata"]["generateName"] = json!("web-");
    check_rows(
        &p,
        vec![
            (
                "name set",
                json!([{"apiVersion": "v1", "kind": "Pod", "name": "web-"}]),
                false,
            ),
            (
                "labels",
                json!([{"apiVersion": "v1", "kind": "Pod", "labelSelector": {"matchLabels": {"app": "web"}}}]),
                true,
            ),
            (
                "type only",
                json!([{"apiVersion": "v1", "kind": "Pod"}]),
                true,
            ),
        ],
    );
}

#[test]
fn labels_and_fields_are_anded_when_no_name() {
    let labels_yes = json!({"matchLabels": {"app": "web"}});
    let labels_no = json!({"matchLabels": {"app": "db"}});
    let fields_yes = json!({"matchFields": {"/spec/nodeName": "node-1"}});
    let fields_no = json!({"matchFields": {"/spec/nodeName": "node-2"}});
    let sel = |l: Option<&Value>, f: Option<&Value>| {
        let mut s = json!({"apiVersion": "v1", "kind": "Pod"});
        if let Some(l) = l {
            s["labelSelector"] = l.clone();
        }
        if let Some(f) = f {
            s["fieldSelector"] = f.clone();
        }
        json!([s])
    };
    check_rows(
        &web_pod(),
        vec![
            ("label only, match", sel(Some(&labels_yes), None), true),
            ("label only, no match", sel(Some(&labels_no), None), false),
            ("field only, match", sel(None, Some(&fields_yes)), true),
            ("field only, no match", sel(None, Some(&fields_no)), false),
            (
                "label match AND field match",
                sel(Some(&labels_yes), Some(&fields_yes)),
                true,
            ),
            (
                "label match AND field no match",
                sel(Some(&labels_yes), Some(&fields_no)),
                false,
            ),
            (
                "label no match AND field match",
                sel(Some(&labels_no), Some(&fields_yes)),
                false,
            ),
            (
                "label no match AND field no match",
                sel(Some(&labels_no), Some(&fields_no)),
                false,
            ),
            ("neither: every object of the kind", sel(None, None), true),
        ],
    );
}

#[test]
fn neither_label_nor_field_selects_every_object_of_the_kind() {
    let selectors = json!([{"apiVersion": "v1", "kind": "Pod"}]);
    for object in [
        web_pod(),
        pod("kube-system", "other", json!({})),
        pod("default", "unlabelled", Value::Null),
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bare", "namespace": "x"}}),
    ] {
        assert!(selects(selectors.clone(), &object), "{object}");
    }
    for object in [node("n"), namespace("default", json!({}))] {
        assert!(!selects(selectors.clone(), &object), "{object}");
    }
}

#[test]
fn empty_resource_selectors_select_every_object() {
    let objects = [
        web_pod(),
        pod("kube-system", "x", json!({})),
        node("n"),
        namespace("default", json!({"a": "b"})),
        json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}),
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "a"}}),
    ];
    for object in &objects {
        assert!(selects(json!([]), object), "[] selects {object}");
    }
    // Omitting the field is the same as an empty list.
    let doc = cop("sel", json!({"overrideRules": [hit_rule("sel")]}));
    let set = set_of(&[doc]);
    for object in &objects {
        let d = mutate_create(&set, object);
        assert_eq!(
            d.applied_policies,
            vec!["ClusterOverridePolicy/sel"],
            "{object}"
        );
    }
}

#[test]
fn several_selectors_are_ored() {
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment"});
    check_rows(
        &web_pod(),
        vec![
            (
                "second matches",
                json!([deployment, {"apiVersion": "v1", "kind": "Pod", "name": "web"}]),
                true,
            ),
            (
                "first matches",
                json!([{"apiVersion": "v1", "kind": "Pod", "name": "web"}, deployment]),
                true,
            ),
            (
                "none matches",
                json!([deployment, {"apiVersion": "v1", "kind": "Pod", "name": "db"}]),
                false,
            ),
            (
                "both match",
                json!([{"apiVersion": "v1", "kind": "Pod"}, {"apiVersion": "v1", "kind": "Pod", "name": "web"}]),
                true,
            ),
            (
                "same type, one narrower selector fails, another passes",
                json!([
                    {"apiVersion": "v1", "kind": "Pod", "labelSelector": {"matchLabels": {"app": "db"}}},
                    {"apiVersion": "v1", "kind": "Pod", "labelSelector": {"matchLabels": {"tier": "front"}}},
                ]),
                true,
            ),
            (
                "same type, all narrower selectors fail",
                json!([
                    {"apiVersion": "v1", "kind": "Pod", "labelSelector": {"matchLabels": {"app": "db"}}},
                    {"apiVersion": "v1", "kind": "Pod", "namespace": "kube-system"},
                ]),
                false,
            ),
        ],
    );
}

// ---------------------------------------------------------------------------------------------
// 2. Label selectors
// ---------------------------------------------------------------------------------------------

fn by_labels(label_selector: Value) -> Value {
    json!([{"apiVersion": "v1", "kind": "Pod", "labelSelector": label_selector}])
}

fn expr(key: &str, operator: &str, values: &[&str]) -> Value {
    json!({"matchExpressions": [{"key": key, "operator": operator, "values": values}]})
}

fn expr_no_values(key: &str, operator: &str) -> Value {
    json!({"matchExpressions": [{"key": key, "operator": operator}]})
}

#[test]
fn label_selector_operators() {
    check_rows(
        &web_pod(),
        vec![
            (
                "matchLabels one, equal",
                by_labels(json!({"matchLabels": {"app": "web"}})),
                true,
            ),
            (
                "matchLabels one, differs",
                by_labels(json!({"matchLabels": {"app": "db"}})),
                false,
            ),
            (
                "matchLabels all equal",
                by_labels(json!({"matchLabels": {"app": "web", "tier": "front"}})),
                true,
            ),
            (
                "matchLabels one of two differs",
                by_labels(json!({"matchLabels": {"app": "web", "tier": "back"}})),
                false,
            ),
            (
                "matchLabels absent key",
                by_labels(json!({"matchLabels": {"zone": "a"}})),
                false,
            ),
            (
                "matchLabels value case",
                by_labels(json!({"matchLabels": {"app": "Web"}})),
                false,
            ),
            (
                "In, listed",
                by_labels(expr("app", "In", &["db", "web"])),
                true,
            ),
            (
                "In, not listed",
                by_labels(expr("app", "In", &["db"])),
                false,
            ),
            (
                "In, absent label",
                by_labels(expr("zone", "In", &["a"])),
                false,
            ),
            (
                "NotIn, not listed",
                by_labels(expr("app", "NotIn", &["db"])),
                true,
            ),
            (
                "NotIn, listed",
                by_labels(expr("app", "NotIn", &["db", "web"])),
                false,
            ),
            (
                "NotIn, absent label matches",
                by_labels(expr("zone", "NotIn", &["a"])),
                true,
            ),
            (
                "Exists, present",
                by_labels(expr_no_values("app", "Exists")),
                true,
            ),
            (
                "Exists, absent",
                by_labels(expr_no_values("zone", "Exists")),
                false,
            ),
            (
                "Exists, empty values list",
                by_labels(expr("app", "Exists", &[])),
                true,
            ),
            (
                "DoesNotExist, absent",
                by_labels(expr_no_values("zone", "DoesNotExist")),
                true,
            ),
            (
                "DoesNotExist, present",
                by_labels(expr_no_values("app", "DoesNotExist")),
                false,
            ),
            ("empty selector matches all", by_labels(json!({})), true),
            (
                "empty lists match all",
                by_labels(json!({"matchLabels": {}, "matchExpressions": []})),
                true,
            ),
            (
                "matchLabels AND matchExpressions, both hold",
                by_labels(json!({"matchLabels": {"app": "web"},
                                 "matchExpressions": [{"key": "tier", "operator": "In", "values": ["front"]}]})),
                true,
            ),
            (
                "matchLabels AND matchExpressions, expression fails",
                by_labels(json!({"matchLabels": {"app": "web"},
                                 "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["front"]}]})),
                false,
            ),
            (
                "matchLabels AND matchExpressions, matchLabels fails",
                by_labels(json!({"matchLabels": {"app": "db"},
                                 "matchExpressions": [{"key": "tier", "operator": "Exists"}]})),
                false,
            ),
            (
                "several expressions are AND-ed",
                by_labels(json!({"matchExpressions": [
                    {"key": "app", "operator": "Exists"},
                    {"key": "zone", "operator": "DoesNotExist"},
                    {"key": "tier", "operator": "In", "values": ["front", "back"]},
                ]})),
                true,
            ),
            (
                "several expressions, one fails",
                by_labels(json!({"matchExpressions": [
                    {"key": "app", "operator": "Exists"},
                    {"key": "tier", "operator": "DoesNotExist"},
                ]})),
                false,
            ),
        ],
    );
}

#[test]
fn label_selector_on_object_without_labels() {
    let mut no_labels = pod("default", "bare", Value::Null);
    no_labels["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("labels");
    let empty_labels = pod("default", "bare", json!({}));
    let null_labels = pod("default", "bare", Value::Null);
    for object in [no_labels, empty_labels, null_labels] {
        check_rows(
            &object,
            vec![
                ("empty selector", by_labels(json!({})), true),
                (
                    "matchLabels",
                    by_labels(json!({"matchLabels": {"app": "web"}})),
                    false,
                ),
                ("In", by_labels(expr("app", "In", &["web"])), false),
                ("NotIn", by_labels(expr("app", "NotIn", &["web"])), true),
                ("Exists", by_labels(expr_no_values("app", "Exists")), false),
                (
                    "DoesNotExist",
                    by_labels(expr_no_values("app", "DoesNotExist")),
                    true,
                ),
            ],
        );
    }
}

#[test]
fn label_keys_with_prefixes_and_dots() {
    let p = pod(
        "default",
        "web",
        json!({"app.kubernetes.io/name": "web", "example.com/tier.level": "1"}),
    );
    check_rows(
        &p,
        vec![
            (
                "prefixed key",
                by_labels(json!({"matchLabels": {"app.kubernetes.io/name": "web"}})),
                true,
            ),
            (
                "prefixed key, In",
                by_labels(expr("example.com/tier.level", "In", &["1", "2"])),
                true,
            ),
            (
                "key without its prefix",
                by_labels(json!({"matchLabels": {"name": "web"}})),
                false,
            ),
        ],
    );
}

#[test]
fn invalid_label_selectors_are_reported_by_field_path() {
    let at = "spec.resourceSelectors[0].labelSelector.matchExpressions";
    let rows: Vec<(Value, String, &str)> = vec![
        (
            expr("app", "Equals", &["web"]),
            format!("{at}[0].operator"),
            "unknown operator `Equals`",
        ),
        (
            expr("app", "in", &["web"]),
            format!("{at}[0].operator"),
            "unknown operator `in`",
        ),
        (
            expr("app", "", &["web"]),
            format!("{at}[0].operator"),
            "unknown operator",
        ),
        (
            expr("app", "In", &[]),
            format!("{at}[0].values"),
            "must be non-empty",
        ),
        (
            expr_no_values("app", "In"),
            format!("{at}[0].values"),
            "must be non-empty",
        ),
        (
            expr_no_values("app", "NotIn"),
            format!("{at}[0].values"),
            "must be non-empty",
        ),
        (
            expr("app", "Exists", &["web"]),
            format!("{at}[0].values"),
            "must be empty",
        ),
        (
            expr("app", "DoesNotExist", &["web"]),
            format!("{at}[0].values"),
            "must be empty",
        ),
        (
            expr_no_values("", "Exists"),
            format!("{at}[0].key"),
            "must not be empty",
        ),
        (
            json!({"matchExpressions": [
                {"key": "ok", "operator": "Exists"},
                {"key": "bad", "operator": "Exists", "values": ["x"]},
            ]}),
            format!("{at}[1].values"),
            "must be empty",
        ),
    ];
    for (label_selector, field, needle) in rows {
        let doc = cop(
            "bad",
            json!({"resourceSelectors": by_labels(label_selector), "overrideRules": [hit_rule("x")]}),
        );
        let errors = compile_errors(&doc);
        assert_error(&errors, &field, needle);
    }
    // Every bad expression is reported, not only the first.
    let doc = cop(
        "bad",
        json!({
            "resourceSelectors": by_labels(json!({"matchExpressions": [
                {"key": "a", "operator": "Bogus"},
                {"key": "b", "operator": "In"},
            ]})),
            "namespaceSelector": {"matchExpressions": [{"key": "c", "operator": "Exists", "values": ["x"]}]},
            "overrideRules": [hit_rule("x")],
        }),
    );
    let errors = compile_errors(&doc);
    assert_error(&errors, &format!("{at}[0].operator"), "Bogus");
    assert_error(&errors, &format!("{at}[1].values"), "non-empty");
    assert_error(
        &errors,
        "spec.namespaceSelector.matchExpressions[0].values",
        "must be empty",
    );
    assert_eq!(errors.len(), 3, "{errors:#?}");
}

// ---------------------------------------------------------------------------------------------
// 3. Field selectors
// ---------------------------------------------------------------------------------------------

fn field_object() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "web",
            "namespace": "default",
            "labels": {"app.kubernetes.io/name": "web"},
            "annotations": {"example.com/team": "core", "a~b": "tilde", "dotted.key": "dot"},
        },
        "spec": {
            "nodeName": "node-1",
            "replicas": 3,
            "ratio": 0.5,
            "priority": -1,
            "hostNetwork": true,
            "paused": false,
            "nothing": null,
            "empty": "",
            "securityContext": {"runAsUser": 1000},
            "containers": [{"name": "app", "image": "nginx"}],
        },
        "trace": [],
    })
}

fn by_fields(field_selector: Value) -> Value {
    json!([{"apiVersion": "v1", "kind": "Pod", "fieldSelector": field_selector}])
}

fn fexpr(field: &str, operator: &str, values: &[&str]) -> Value {
    by_fields(
        json!({"matchExpressions": [{"field": field, "operator": operator, "values": values}]}),
    )
}

fn fexpr_no_values(field: &str, operator: &str) -> Value {
    by_fields(json!({"matchExpressions": [{"field": field, "operator": operator}]}))
}

fn mf(pointer: &str, value: &str) -> Value {
    by_fields(json!({"matchFields": {pointer: value}}))
}

#[test]
fn match_fields() {
    check_rows(
        &field_object(),
        vec![
            ("string equal", mf("/spec/nodeName", "node-1"), true),
            ("string differs", mf("/spec/nodeName", "node-2"), false),
            ("absent field", mf("/spec/missing", "x"), false),
            ("absent parent", mf("/status/phase", "Running"), false),
            ("null field is absent", mf("/spec/nothing", "null"), false),
            ("empty string equal", mf("/spec/empty", ""), true),
            ("integer by JSON text", mf("/spec/replicas", "3"), true),
            ("integer, other text", mf("/spec/replicas", "3.0"), false),
            ("integer differs", mf("/spec/replicas", "4"), false),
            ("negative integer", mf("/spec/priority", "-1"), true),
            ("decimal by JSON text", mf("/spec/ratio", "0.5"), true),
            ("decimal, other text", mf("/spec/ratio", ".5"), false),
            ("true by JSON text", mf("/spec/hostNetwork", "true"), true),
            ("true, other case", mf("/spec/hostNetwork", "True"), false),
            ("false by JSON text", mf("/spec/paused", "false"), true),
            (
                "object never equals",
                mf("/spec/securityContext", "{\"runAsUser\":1000}"),
                false,
            ),
            (
                "nested",
                mf("/spec/securityContext/runAsUser", "1000"),
                true,
            ),
            ("array index", mf("/spec/containers/0/name", "app"), true),
            (
                "array index out of range",
                mf("/spec/containers/1/name", "app"),
                false,
            ),
            ("array never equals", mf("/spec/containers", "[]"), false),
            (
                "key with / escaped as ~1",
                mf("/metadata/labels/app.kubernetes.io~1name", "web"),
                true,
            ),
            (
                "key with / and dots",
                mf("/metadata/annotations/example.com~1team", "core"),
                true,
            ),
            (
                "key with ~ escaped as ~0",
                mf("/metadata/annotations/a~0b", "tilde"),
                true,
            ),
            (
                "key with dots",
                mf("/metadata/annotations/dotted.key", "dot"),
                true,
            ),
            (
                "unescaped / splits the key",
                mf("/metadata/annotations/example.com/team", "core"),
                false,
            ),
            (
                "several entries, all hold",
                by_fields(
                    json!({"matchFields": {"/spec/nodeName": "node-1", "/spec/replicas": "3"}}),
                ),
                true,
            ),
            (
                "several entries, one fails",
                by_fields(
                    json!({"matchFields": {"/spec/nodeName": "node-1", "/spec/replicas": "2"}}),
                ),
                false,
            ),
            ("empty field selector", by_fields(json!({})), true),
        ],
    );
}

#[test]
fn field_match_expressions() {
    check_rows(
        &field_object(),
        vec![
            (
                "In, listed",
                fexpr("/spec/nodeName", "In", &["node-2", "node-1"]),
                true,
            ),
            (
                "In, not listed",
                fexpr("/spec/nodeName", "In", &["node-2"]),
                false,
            ),
            ("In, absent", fexpr("/spec/missing", "In", &["x"]), false),
            (
                "In, null",
                fexpr("/spec/nothing", "In", &["null", ""]),
                false,
            ),
            (
                "In, number",
                fexpr("/spec/replicas", "In", &["1", "3"]),
                true,
            ),
            (
                "In, boolean",
                fexpr("/spec/hostNetwork", "In", &["true"]),
                true,
            ),
            (
                "In, object never equals",
                fexpr("/spec/securityContext", "In", &["{\"runAsUser\":1000}", ""]),
                false,
            ),
            (
                "In, array never equals",
                fexpr("/spec/containers", "In", &["[]", ""]),
                false,
            ),
            (
                "NotIn, not listed",
                fexpr("/spec/nodeName", "NotIn", &["node-2"]),
                true,
            ),
            (
                "NotIn, listed",
                fexpr("/spec/nodeName", "NotIn", &["node-1"]),
                false,
            ),
            (
                "NotIn, absent matches",
                fexpr("/spec/missing", "NotIn", &["x"]),
                true,
            ),
            (
                "NotIn, null matches",
                fexpr("/spec/nothing", "NotIn", &["null"]),
                true,
            ),
            (
                "NotIn, number listed",
                fexpr("/spec/replicas", "NotIn", &["3"]),
                false,
            ),
            (
                "NotIn, boolean listed",
                fexpr("/spec/paused", "NotIn", &["false"]),
                false,
            ),
            (
                "NotIn, object is none of the values",
                fexpr("/spec/securityContext", "NotIn", &["{\"runAsUser\":1000}"]),
                true,
            ),
            (
                "Exists, scalar",
                fexpr_no_values("/spec/nodeName", "Exists"),
                true,
            ),
            (
                "Exists, false boolean",
                fexpr_no_values("/spec/paused", "Exists"),
                true,
            ),
            (
                "Exists, empty string",
                fexpr_no_values("/spec/empty", "Exists"),
                true,
            ),
            (
                "Exists, object",
                fexpr_no_values("/spec/securityContext", "Exists"),
                true,
            ),
            (
                "Exists, array",
                fexpr_no_values("/spec/containers", "Exists"),
                true,
            ),
            (
                "Exists, absent",
                fexpr_no_values("/spec/missing", "Exists"),
                false,
            ),
            (
                "Exists, null",
                fexpr_no_values("/spec/nothing", "Exists"),
                false,
            ),
            (
                "DoesNotExist, absent",
                fexpr_no_values("/spec/missing", "DoesNotExist"),
                true,
            ),
            (
                "DoesNotExist, null",
                fexpr_no_values("/spec/nothing", "DoesNotExist"),
                true,
            ),
            (
                "DoesNotExist, present",
                fexpr_no_values("/spec/nodeName", "DoesNotExist"),
                false,
            ),
            (
                "DoesNotExist, object",
                fexpr_no_values("/spec/securityContext", "DoesNotExist"),
                false,
            ),
            (
                "slashed key, In",
                fexpr("/metadata/labels/app.kubernetes.io~1name", "In", &["web"]),
                true,
            ),
            (
                "slashed key, Exists",
                fexpr_no_values("/metadata/annotations/example.com~1team", "Exists"),
                true,
            ),
            (
                "dotted key, NotIn",
                fexpr("/metadata/annotations/dotted.key", "NotIn", &["dot"]),
                false,
            ),
            (
                "tilde key, In",
                fexpr("/metadata/annotations/a~0b", "In", &["tilde"]),
                true,
            ),
            (
                "kinitiras `value` alias, In",
                by_fields(
                    json!({"matchExpressions": [{"field": "/spec/nodeName", "operator": "In", "value": ["node-1"]}]}),
                ),
                true,
            ),
            (
                "kinitiras `value` alias, NotIn",
                by_fields(
                    json!({"matchExpressions": [{"field": "/spec/nodeName", "operator": "NotIn", "value": ["node-1"]}]}),
                ),
                false,
            ),
            (
                "expressions are AND-ed",
                by_fields(json!({"matchExpressions": [
                    {"field": "/spec/nodeName", "operator": "In", "values": ["node-1"]},
                    {"field": "/spec/missing", "operator": "DoesNotExist"},
                ]})),
                true,
            ),
            (
                "expressions are AND-ed, one fails",
                by_fields(json!({"matchExpressions": [
                    {"field": "/spec/nodeName", "operator": "In", "values": ["node-1"]},
                    {"field": "/spec/missing", "operator": "Exists"},
                ]})),
                false,
            ),
            (
                "matchFields AND matchExpressions, both hold",
                by_fields(json!({"matchFields": {"/spec/replicas": "3"},
                                 "matchExpressions": [{"field": "/spec/hostNetwork", "operator": "In", "values": ["true"]}]})),
                true,
            ),
            (
                "matchFields AND matchExpressions, matchFields fails",
                by_fields(json!({"matchFields": {"/spec/replicas": "2"},
                                 "matchExpressions": [{"field": "/spec/hostNetwork", "operator": "In", "values": ["true"]}]})),
                false,
            ),
            (
                "matchFields AND matchExpressions, expression fails",
                by_fields(json!({"matchFields": {"/spec/replicas": "3"},
                                 "matchExpressions": [{"field": "/spec/hostNetwork", "operator": "NotIn", "values": ["true"]}]})),
                false,
            ),
        ],
    );
}

#[test]
fn invalid_field_selectors_are_reported_by_field_path() {
    let at = "spec.resourceSelectors[0].fieldSelector";
    let rows: Vec<(Value, String, &str)> = vec![
        (
            json!({"matchExpressions": [{"field": "/spec/nodeName", "operator": "In", "values": ["a"], "value": ["b"]}]}),
            format!("{at}.matchExpressions[0].value"),
            "not both",
        ),
        (
            json!({"matchExpressions": [{"field": "spec.nodeName", "operator": "In", "values": ["a"]}]}),
            format!("{at}.matchExpressions[0].field"),
            "`spec.nodeName` is not a JSON pointer",
        ),
        (
            json!({"matchExpressions": [{"field": "spec.nodeName", "operator": "Exists"}]}),
            format!("{at}.matchExpressions[0].field"),
            "`/spec/nodeName`",
        ),
        (
            json!({"matchExpressions": [{"field": "/a~2b", "operator": "Exists"}]}),
            format!("{at}.matchExpressions[0].field"),
            "`~`",
        ),
        (
            json!({"matchFields": {"spec.nodeName": "node-1"}}),
            format!("{at}.matchFields[spec.nodeName]"),
            "not a JSON pointer",
        ),
        (
            json!({"matchExpressions": [{"field": "/spec/nodeName", "operator": "In"}]}),
            format!("{at}.matchExpressions[0].values"),
            "must be non-empty",
        ),
        (
            json!({"matchExpressions": [{"field": "/spec/nodeName", "operator": "NotIn", "values": []}]}),
            format!("{at}.matchExpressions[0].values"),
            "must be non-empty",
        ),
        (
            json!({"matchExpressions": [{"field": "/spec/nodeName", "operator": "Exists", "values": ["x"]}]}),
            format!("{at}.matchExpressions[0].values"),
            "must be empty",
        ),
        (
            json!({"matchExpressions": [{"field": "/spec/nodeName", "operator": "DoesNotExist", "value": ["x"]}]}),
            format!("{at}.matchExpressions[0].values"),
            "must be empty",
        ),
        (
            json!({"matchExpressions": [
                {"field": "/ok", "operator": "Exists"},
                {"field": "bad", "operator": "Exists"},
            ]}),
            format!("{at}.matchExpressions[1].field"),
            "not a JSON pointer",
        ),
    ];
    for (field_selector, field, needle) in rows {
        let doc = cop(
            "bad",
            json!({"resourceSelectors": by_fields(field_selector), "overrideRules": [hit_rule("x")]}),
        );
        let errors = compile_errors(&doc);
        assert_error(&errors, &field, needle);
    }
}

#[test]
fn unknown_field_operator_is_a_decode_error_with_path() {
    let doc = cop(
        "bad",
        json!({
            "resourceSelectors": by_fields(json!({"matchExpressions": [{"field": "/a", "operator": "Equals", "values": ["x"]}]})),
            "overrideRules": [hit_rule("x")],
        }),
    );
    let errors = compile_errors(&doc);
    assert_error(
        &errors,
        "spec.resourceSelectors[0].fieldSelector.matchExpressions[0].operator",
        "Equals",
    );
}

#[test]
fn a_broken_selector_still_meets_its_type_under_the_failure_policy() {
    // The selector does not compile, so the policy is invalid; a request of the selected type
    // meets the policy's failure policy instead of passing silently, other types are untouched.
    let doc = cop(
        "broken",
        json!({
            "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod",
                                   "fieldSelector": {"matchFields": {"spec.nodeName": "node-9"}}}],
            "overrideRules": [hit_rule("x")],
        }),
    );
    let set = set_of_any(&[doc]);
    let d = mutate_create(&set, &web_pod());
    assert!(!d.allowed, "{d:?}");
    assert_eq!(d.messages.len(), 1, "{d:?}");
    assert!(
        d.messages[0].starts_with("ClusterOverridePolicy/broken: "),
        "{d:?}"
    );
    assert!(
        d.messages[0]
            .contains("spec.resourceSelectors[0].fieldSelector.matchFields[spec.nodeName]"),
        "{d:?}"
    );
    assert!(d.patch.0.is_empty());

    let d = mutate_create(&set, &node("n"));
    assert!(
        d.allowed && d.messages.is_empty() && d.applied_policies.is_empty(),
        "{d:?}"
    );
}
