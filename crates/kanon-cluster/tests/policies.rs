//! The cluster's compiled policies, fed watch events by hand: only changed policies are
//! compiled, relists drop what was deleted meanwhile, bad objects are kept out or reported,
//! and a set is complete only once every kind has been listed.

use std::sync::Arc;

use kanon_api::PolicyKind;
use kanon_cluster::policies::{Applied, ClusterPolicies};
use kanon_engine::{NoObjects, PolicyId, Request, block_on};
use serde_json::{Value, json};

fn cop(name: &str, generation: i64, value: &str) -> Value {
    json!({
        "apiVersion": "policy.kanon.dev/v1alpha1",
        "kind": "ClusterOverridePolicy",
        "metadata": {"name": name, "uid": format!("uid-{name}"), "generation": generation},
        "spec": {"resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
                 "overrideRules": [{"overriders": {"plaintext": [
                     {"op": "add", "path": "/metadata/labels/x", "value": value}]}}]},
    })
}

fn id(kind: PolicyKind, namespace: Option<&str>, name: &str) -> PolicyId {
    PolicyId::new(kind, namespace.map(str::to_string), name)
}

fn synced() -> ClusterPolicies {
    let mut policies = ClusterPolicies::new();
    for kind in PolicyKind::ALL {
        policies.relist_started(kind);
        policies.relist_done(kind);
    }
    policies
}

fn label_of(policies: &ClusterPolicies) -> Option<Value> {
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": "p", "namespace": "default", "labels": {}}});
    let request = Request::from_objects(kanon_api::Operation::Create, Some(pod), None).unwrap();
    let decision = block_on(policies.set().mutate(&request, &NoObjects));
    decision
        .patched
        .and_then(|p| p.pointer("/metadata/labels/x").cloned())
}

#[test]
fn a_set_is_complete_only_once_every_kind_is_listed() {
    let mut policies = ClusterPolicies::new();
    for kind in &PolicyKind::ALL[..3] {
        policies.relist_started(*kind);
        policies.relist_done(*kind);
    }
    assert!(!policies.synced());
    policies.relist_started(PolicyKind::ValidatePolicy);
    assert!(!policies.synced(), "a listing under way is not synced");
    policies.relist_done(PolicyKind::ValidatePolicy);
    assert!(policies.synced());
}

#[test]
fn only_a_new_generation_is_compiled_and_compiled_policies_are_shared() {
    let mut policies = synced();
    let a = id(PolicyKind::ClusterOverridePolicy, None, "a");
    assert_eq!(
        policies.apply(PolicyKind::ClusterOverridePolicy, cop("a", 1, "one")),
        Applied::Compiled(a.clone())
    );
    assert_eq!(
        policies.take_changes().as_deref(),
        Some("ClusterOverridePolicy/a added")
    );
    assert_eq!(label_of(&policies), Some(json!("one")));
    let first = policies.get(&a).unwrap().compiled.clone().unwrap();

    // The same generation again (a status write, a label change): nothing compiled, but the
    // status seen is kept.
    let mut with_status = cop("a", 1, "one");
    with_status["status"] = json!({"observedGeneration": 1});
    assert_eq!(
        policies.apply(PolicyKind::ClusterOverridePolicy, with_status),
        Applied::Unchanged(a.clone())
    );
    assert_eq!(policies.take_changes(), None);
    let entry = policies.get(&a).unwrap();
    assert!(Arc::ptr_eq(entry.compiled.as_ref().unwrap(), &first));
    assert_eq!(
        entry.observed_status,
        Some(json!({"observedGeneration": 1}))
    );

    // Another policy: the first one's compiled form is reused in the new set.
    policies.apply(PolicyKind::ClusterOverridePolicy, cop("b", 1, "two"));
    let set = policies.set();
    assert!(set.policies().iter().any(|p| Arc::ptr_eq(p, &first)));

    // A new generation is compiled.
    assert_eq!(
        policies.apply(PolicyKind::ClusterOverridePolicy, cop("a", 2, "three")),
        Applied::Compiled(a.clone())
    );
    assert_eq!(
        policies.take_changes().as_deref(),
        Some("ClusterOverridePolicy/b added, ClusterOverridePolicy/a updated")
    );
    // `b` runs after `a` (by name) and has the last word.
    assert_eq!(label_of(&policies), Some(json!("two")));
    // Deleted and created again under the same name (a new uid): compiled anew.
    let mut again = cop("a", 2, "four");
    again["metadata"]["uid"] = json!("uid-new");
    assert_eq!(
        policies.apply(PolicyKind::ClusterOverridePolicy, again),
        Applied::Compiled(a)
    );
}

#[test]
fn a_relist_drops_what_was_deleted_meanwhile() {
    let mut policies = synced();
    policies.apply(PolicyKind::ClusterOverridePolicy, cop("stays", 1, "v"));
    policies.apply(PolicyKind::ClusterOverridePolicy, cop("goes", 1, "v"));
    let vp = json!({"apiVersion": "policy.kanon.dev/v1alpha1", "kind": "ValidatePolicy",
                    "metadata": {"name": "v", "namespace": "shop", "uid": "u", "generation": 1},
                    "spec": {"validateRules": []}});
    policies.apply(PolicyKind::ValidatePolicy, vp);
    policies.take_changes();
    // The watch of one kind restarts (the apiserver went away): it lists again.
    policies.relist_started(PolicyKind::ClusterOverridePolicy);
    assert_eq!(
        policies.apply(PolicyKind::ClusterOverridePolicy, cop("stays", 1, "v")),
        Applied::Unchanged(id(PolicyKind::ClusterOverridePolicy, None, "stays"))
    );
    policies.relist_done(PolicyKind::ClusterOverridePolicy);
    assert_eq!(
        policies.take_changes().as_deref(),
        Some("ClusterOverridePolicy/goes deleted")
    );
    let names: Vec<String> = policies.entries().map(|(id, _)| id.to_string()).collect();
    // Other kinds are untouched by that kind's relist.
    assert_eq!(
        names,
        ["ClusterOverridePolicy/stays", "ValidatePolicy/shop/v"]
    );
    // A delete event.
    assert!(policies.delete(
        PolicyKind::ValidatePolicy,
        &json!({"metadata": {"name": "v", "namespace": "shop"}})
    ));
    assert!(!policies.delete(
        PolicyKind::ValidatePolicy,
        &json!({"metadata": {"name": "v", "namespace": "shop"}})
    ));
    assert_eq!(policies.len(), 1);
}

#[test]
fn invalid_policies_are_kept_with_their_errors_and_unreadable_objects_left_out() {
    let mut policies = synced();
    let mut bad = cop("bad", 1, "v");
    bad["spec"]["overrideRules"][0]["overriders"]["plaintext"][0]["path"] = json!("no-slash");
    bad["spec"]["failurePolicy"] = json!("Fail");
    policies.apply(PolicyKind::ClusterOverridePolicy, bad);
    let entry = policies
        .get(&id(PolicyKind::ClusterOverridePolicy, None, "bad"))
        .unwrap();
    assert_eq!(entry.errors.len(), 1, "{:?}", entry.errors);
    assert_eq!(
        entry.errors[0].field,
        "spec.overrideRules[0].overriders.plaintext[0].path"
    );
    assert_eq!(policies.invalid(), 1);
    // In the set, so that its failure policy decides what matching requests get.
    assert_eq!(policies.set().len(), 1);
    let pod =
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "d"}});
    let request = Request::from_objects(kanon_api::Operation::Create, Some(pod), None).unwrap();
    let decision = block_on(policies.set().mutate(&request, &NoObjects));
    assert!(!decision.allowed);
    assert!(decision.messages[0].starts_with("ClusterOverridePolicy/bad: the policy is invalid"));

    // No name, or a namespaced kind without a namespace: reported, not kept.
    assert!(matches!(
        policies.apply(PolicyKind::ClusterOverridePolicy, json!({"metadata": {}})),
        Applied::Unreadable(_)
    ));
    assert_eq!(
        policies.apply(
            PolicyKind::OverridePolicy,
            json!({"metadata": {"name": "x"}})
        ),
        Applied::Unreadable("OverridePolicy x: has no namespace".into())
    );
    assert_eq!(policies.len(), 1);
}

/// The kinds of a cluster whose CRD `widgets.example.com` serves `Widget` with these spec
/// fields.
fn kinds_with_widgets(fields: &[&str]) -> kanon_engine::Kinds {
    let properties: serde_json::Map<String, Value> = fields
        .iter()
        .map(|f| (f.to_string(), json!({"type": "string"})))
        .collect();
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "names": {"kind": "Widget", "plural": "widgets"},
                 "scope": "Namespaced",
                 "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                     "type": "object", "properties": {"spec": {"type": "object", "properties": properties}}}}}]},
    });
    let builtin = kanon_schema::Schema::builtin().unwrap();
    let widgets = kanon_schema::CustomResource::from_crd(&crd).unwrap();
    let custom = kanon_schema::Schema::from_custom_resources(builtin, [&widgets]).unwrap();
    kanon_engine::Kinds::with_custom(builtin, Arc::new(custom))
}

/// A ClusterValidatePolicy on Widgets whose condition reads `path`.
fn widget_policy(name: &str, path: &str) -> Value {
    json!({
        "apiVersion": "policy.kanon.dev/v1alpha1",
        "kind": "ClusterValidatePolicy",
        "metadata": {"name": name, "uid": format!("uid-{name}"), "generation": 1},
        "spec": {"resourceSelectors": [{"apiVersion": "example.com/v1", "kind": "Widget"}],
                 "validateRules": [{"targetOperations": ["CREATE", "UPDATE"], "template": {"type": "condition",
                     "condition": {"cond": "Exist", "dataRef": {"from": "current", "path": path},
                                   "affectMode": "allow"}}}]},
    })
}

fn warnings_of(policies: &ClusterPolicies, id: &PolicyId) -> Vec<String> {
    policies
        .get(id)
        .map(|e| e.warnings.iter().map(ToString::to_string).collect())
        .unwrap_or_default()
}

#[test]
fn warnings_follow_the_custom_kinds_without_a_recompilation() {
    let mut policies = synced();
    policies.apply(
        PolicyKind::ClusterValidatePolicy,
        widget_policy("size", "/spec/szie"),
    );
    policies.apply(
        PolicyKind::ClusterValidatePolicy,
        widget_policy("other", "/spec/color"),
    );
    let size = id(PolicyKind::ClusterValidatePolicy, None, "size");
    let other = id(PolicyKind::ClusterValidatePolicy, None, "other");
    let _ = policies.take_changes();
    // Without the CRD, Widgets are not judged.
    assert!(warnings_of(&policies, &size).is_empty());
    let compiled_before = policies
        .get(&size)
        .and_then(|e| e.compiled.clone())
        .unwrap();

    // The CRD arrives: the typo is a warning naming the CRD's field; the other policy's path
    // exists, so only `size` changed.
    let changed = policies.set_kinds(kinds_with_widgets(&["size", "color"]));
    assert_eq!(changed, std::slice::from_ref(&size));
    assert_eq!(
        warnings_of(&policies, &size),
        [
            "spec.validateRules[0].template.condition.dataRef.path: `/spec/szie` does not exist in example.com/v1 Widget; did you mean `/spec/size`?"
        ]
    );
    let entry = policies.get(&size).unwrap();
    let status = kanon_cluster::status::desired_status(entry, None, "t0");
    assert_eq!(
        status["warnings"][0]
            .as_str()
            .map(|w| w.contains("did you mean `/spec/size`?")),
        Some(true),
        "{status}"
    );
    // Nothing was recompiled and the set did not change.
    assert!(Arc::ptr_eq(
        entry.compiled.as_ref().unwrap(),
        &compiled_before
    ));
    assert_eq!(policies.take_changes(), None);
    // The same kinds again change nothing.
    assert!(
        policies
            .set_kinds(kinds_with_widgets(&["size", "color"]))
            .is_empty()
    );

    // A policy written now is compiled with the custom kinds.
    policies.apply(
        PolicyKind::ClusterValidatePolicy,
        widget_policy("late", "/spec/colr"),
    );
    let late = id(PolicyKind::ClusterValidatePolicy, None, "late");
    assert_eq!(warnings_of(&policies, &late).len(), 1);

    // The CRD changes so that `other`'s path is gone and `szie` is spelt as the field is: the
    // warnings follow.
    let mut changed = policies.set_kinds(kinds_with_widgets(&["szie"]));
    changed.sort();
    assert_eq!(changed, [late.clone(), other.clone(), size.clone()]);
    assert!(warnings_of(&policies, &size).is_empty());
    assert!(warnings_of(&policies, &other)[0].contains("`/spec/color` does not exist"));
    let status = kanon_cluster::status::desired_status(policies.get(&size).unwrap(), None, "t0");
    assert!(status.get("warnings").is_none(), "{status}");
}
