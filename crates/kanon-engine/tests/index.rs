//! The policy index: candidates by type and namespace in evaluation order, policies with
//! empty selectors merged in, duplicates rejected.

mod common;

use common::*;
use kanon_api::PolicyKind;
use kanon_engine::{DuplicatePolicy, PolicyId, PolicySet};
use serde_json::{Value, json};

fn ids<'a>(it: impl Iterator<Item = &'a kanon_engine::CompiledPolicy>) -> Vec<String> {
    it.map(|p| p.id.to_string()).collect()
}

fn typed(api_version: &str, kind: &str) -> Value {
    json!([{"apiVersion": api_version, "kind": kind}])
}

/// Noise: many policies for other types, in every kind, spread over namespaces.
fn noise() -> Vec<Value> {
    let kinds = [
        ("apps/v1", "Deployment"),
        ("apps/v1", "StatefulSet"),
        ("v1", "Service"),
        ("v1", "ConfigMap"),
        ("batch/v1", "Job"),
        ("example.com/v1", "Pod"),
        ("v1beta1", "Pod"),
        ("v1", "PodTemplate"),
    ];
    let mut docs = Vec::new();
    for i in 0..200 {
        let (api_version, kind) = kinds[i % kinds.len()];
        let spec = json!({"resourceSelectors": typed(api_version, kind), "overrideRules": [trace_rule("noise")]});
        docs.push(cop(&format!("noise-{i:03}"), spec.clone()));
        docs.push(op(&format!("ns-{}", i % 7), &format!("noise-{i:03}"), spec));
        let vspec = json!({"resourceSelectors": typed(api_version, kind), "validateRules": [{}]});
        docs.push(cvp(&format!("noise-{i:03}"), vspec.clone()));
        docs.push(vp(
            &format!("ns-{}", i % 7),
            &format!("noise-{i:03}"),
            vspec,
        ));
    }
    docs
}

#[test]
fn candidates_among_many_policies_of_other_kinds() {
    let mut docs = noise();
    let pod_rule =
        || json!({"resourceSelectors": typed("v1", "Pod"), "overrideRules": [trace_rule("x")]});
    let any_rule = || json!({"overrideRules": [trace_rule("x")]});
    docs.push(cop("pod-b", pod_rule()));
    docs.push(cop("pod-a", pod_rule()));
    docs.push(cop("any-m", any_rule()));
    docs.push(op("default", "pod-ns", pod_rule()));
    docs.push(op("default", "any-ns", any_rule()));
    docs.push(op("other", "pod-other", pod_rule()));
    docs.push(cvp(
        "vpod",
        json!({"resourceSelectors": typed("v1", "Pod"), "validateRules": [{}]}),
    ));
    docs.push(vp("default", "vany", json!({"validateRules": [{}]})));
    // Reverse, so that input order is the opposite of evaluation order.
    docs.reverse();
    let set = set_of_any(&docs);
    assert_eq!(set.len(), docs.len());

    assert_eq!(
        ids(set.override_candidates("v1", "Pod", Some("default"))),
        [
            "ClusterOverridePolicy/any-m",
            "ClusterOverridePolicy/pod-a",
            "ClusterOverridePolicy/pod-b",
            "OverridePolicy/default/any-ns",
            "OverridePolicy/default/pod-ns",
        ]
    );
    assert_eq!(
        ids(set.override_candidates("v1", "Pod", Some("other"))),
        [
            "ClusterOverridePolicy/any-m",
            "ClusterOverridePolicy/pod-a",
            "ClusterOverridePolicy/pod-b",
            "OverridePolicy/other/pod-other"
        ]
    );
    assert_eq!(
        ids(set.override_candidates("v1", "Pod", None)),
        [
            "ClusterOverridePolicy/any-m",
            "ClusterOverridePolicy/pod-a",
            "ClusterOverridePolicy/pod-b"
        ]
    );
    // A type nobody names: only the any-type policies.
    assert_eq!(
        ids(set.override_candidates("v1", "Secret", Some("default"))),
        [
            "ClusterOverridePolicy/any-m",
            "OverridePolicy/default/any-ns"
        ]
    );
    assert_eq!(
        ids(set.override_candidates("v1", "Secret", Some("nowhere"))),
        ["ClusterOverridePolicy/any-m"]
    );
    // Validate candidates are separate.
    assert_eq!(
        ids(set.validate_candidates("v1", "Pod", Some("default"))),
        ["ClusterValidatePolicy/vpod", "ValidatePolicy/default/vany"]
    );
    assert_eq!(
        ids(set.validate_candidates("v1", "Pod", None)),
        ["ClusterValidatePolicy/vpod"]
    );
    // The noise types still have their own candidates.
    let deployments: Vec<String> =
        ids(set.override_candidates("apps/v1", "Deployment", Some("ns-0")));
    assert!(
        deployments
            .iter()
            .all(|id| id.contains("noise") || id.contains("any")),
        "{deployments:?}"
    );
    assert_eq!(
        deployments
            .iter()
            .filter(|id| id.starts_with("ClusterOverridePolicy/noise-"))
            .count(),
        25
    );
    assert!(deployments.contains(&"ClusterOverridePolicy/any-m".to_string()));
    let mut sorted = deployments.clone();
    sorted.sort_by_key(|id| !id.starts_with("Cluster"));
    assert_eq!(deployments, sorted, "cluster policies come first");

    // And evaluation only touches the candidates: a Pod in default gets exactly these.
    let object = pod("default", "web", json!({}));
    let d = mutate_create(&set, &object);
    assert!(d.allowed, "{d:?}");
    assert_eq!(
        d.applied_policies,
        [
            "ClusterOverridePolicy/any-m",
            "ClusterOverridePolicy/pod-a",
            "ClusterOverridePolicy/pod-b",
            "OverridePolicy/default/any-ns",
            "OverridePolicy/default/pod-ns",
        ]
    );
}

#[test]
fn empty_selector_policies_merge_in_order_with_typed_ones() {
    let typed_spec =
        json!({"resourceSelectors": typed("v1", "Pod"), "overrideRules": [trace_rule("t")]});
    let any_spec = json!({"overrideRules": [trace_rule("a")]});
    let set = set_of(&[
        cop("e-any", any_spec.clone()),
        cop("d-pod", typed_spec.clone()),
        cop("c-any", any_spec.clone()),
        cop("b-pod", typed_spec.clone()),
        cop("a-any", any_spec.clone()),
        op("ns", "z-any", any_spec.clone()),
        op("ns", "y-pod", typed_spec.clone()),
        op("ns", "x-any", any_spec),
    ]);
    assert_eq!(
        ids(set.override_candidates("v1", "Pod", Some("ns"))),
        [
            "ClusterOverridePolicy/a-any",
            "ClusterOverridePolicy/b-pod",
            "ClusterOverridePolicy/c-any",
            "ClusterOverridePolicy/d-pod",
            "ClusterOverridePolicy/e-any",
            "OverridePolicy/ns/x-any",
            "OverridePolicy/ns/y-pod",
            "OverridePolicy/ns/z-any",
        ]
    );
    // The traces show the same order at evaluation.
    let d = mutate_create(&set, &pod("ns", "p", json!({})));
    assert_eq!(
        d.patched.unwrap()["trace"],
        json!(["a", "t", "a", "t", "a", "a", "t", "a"])
    );
}

#[test]
fn a_policy_naming_several_types_is_a_candidate_once_for_each() {
    let set = set_of(&[
        cop(
            "multi",
            json!({
                "resourceSelectors": [
                    {"apiVersion": "v1", "kind": "Pod", "name": "a"},
                    {"apiVersion": "apps/v1", "kind": "Deployment"},
                    {"apiVersion": "v1", "kind": "Pod", "name": "b"},
                ],
                "overrideRules": [trace_rule("multi")],
            }),
        ),
        cop(
            "other",
            json!({"resourceSelectors": typed("v1", "Pod"), "overrideRules": [trace_rule("other")]}),
        ),
    ]);
    assert_eq!(
        ids(set.override_candidates("v1", "Pod", Some("x"))),
        ["ClusterOverridePolicy/multi", "ClusterOverridePolicy/other"]
    );
    assert_eq!(
        ids(set.override_candidates("apps/v1", "Deployment", Some("x"))),
        ["ClusterOverridePolicy/multi"]
    );
    assert!(ids(set.override_candidates("v1", "Service", Some("x"))).is_empty());
    // Matched by the second Pod selector: applied once.
    let d = mutate_create(&set, &pod("x", "b", json!({})));
    assert_eq!(d.patched.unwrap()["trace"], json!(["multi", "other"]));
}

#[test]
fn duplicate_policy_ids_are_rejected() {
    let spec = json!({"overrideRules": [trace_rule("x")]});
    let vspec = json!({"validateRules": [{}]});
    let rows: Vec<(Vec<Value>, Option<&str>)> = vec![
        (
            vec![cop("x", spec.clone()), cop("x", spec.clone())],
            Some("ClusterOverridePolicy/x"),
        ),
        (
            vec![op("ns", "x", spec.clone()), op("ns", "x", spec.clone())],
            Some("OverridePolicy/ns/x"),
        ),
        (
            vec![
                cvp("x", vspec.clone()),
                cvp("y", vspec.clone()),
                cvp("x", vspec.clone()),
            ],
            Some("ClusterValidatePolicy/x"),
        ),
        (
            vec![vp("ns", "x", vspec.clone()), vp("ns", "x", vspec.clone())],
            Some("ValidatePolicy/ns/x"),
        ),
        // Same name, different namespace or kind: distinct policies.
        (
            vec![op("a", "x", spec.clone()), op("b", "x", spec.clone())],
            None,
        ),
        (
            vec![
                cop("x", spec.clone()),
                op("x", "x", spec.clone()),
                cvp("x", vspec.clone()),
                vp("x", "x", vspec),
            ],
            None,
        ),
    ];
    for (docs, duplicate) in rows {
        let policies = docs.iter().map(compiled_even_if_invalid).collect();
        match (PolicySet::build(policies), duplicate) {
            (Err(e), Some(id)) => {
                assert_eq!(e, DuplicatePolicy(id.to_string()));
                assert_eq!(e.to_string(), format!("{id} is defined more than once"));
            }
            (Ok(set), None) => assert_eq!(set.len(), docs.len()),
            (Err(e), None) => panic!("unexpected duplicate: {e}"),
            (Ok(_), Some(id)) => panic!("{id} should be a duplicate"),
        }
    }
}

#[test]
fn policies_are_held_in_evaluation_order_and_found_by_id() {
    let spec = json!({"overrideRules": [trace_rule("x")]});
    let vspec = json!({"validateRules": [{}]});
    let set = set_of_any(&[
        vp("a", "v", vspec.clone()),
        cvp("c", vspec),
        op("b", "o", spec.clone()),
        op("a", "o", spec.clone()),
        cop("z", spec.clone()),
        cop("y", spec),
    ]);
    let order: Vec<String> = set.policies().iter().map(|p| p.id.to_string()).collect();
    assert_eq!(
        order,
        [
            "ClusterOverridePolicy/y",
            "ClusterOverridePolicy/z",
            "OverridePolicy/a/o",
            "OverridePolicy/b/o",
            "ClusterValidatePolicy/c",
            "ValidatePolicy/a/v",
        ]
    );
    assert!(!set.is_empty());
    let id = PolicyId::new(PolicyKind::OverridePolicy, Some("b".into()), "o");
    assert_eq!(
        set.get(&id).map(|p| p.id.to_string()).as_deref(),
        Some("OverridePolicy/b/o")
    );
    let missing = PolicyId::new(PolicyKind::OverridePolicy, Some("c".into()), "o");
    assert!(set.get(&missing).is_none());
    assert!(PolicySet::default().is_empty());
    assert!(PolicySet::build(Vec::new()).unwrap().is_empty());
}

#[test]
fn webhook_targets_are_the_types_and_operations_policies_select() {
    use kanon_api::Operation::{Connect, Create, Delete, Update};
    use kanon_engine::{Targets, WebhookKind};
    let pods = json!([{"apiVersion": "v1", "kind": "Pod"}]);
    let deployments = json!([{"apiVersion": "apps/v1", "kind": "Deployment"},
                             {"apiVersion": "v1", "kind": "Pod", "name": "x"}]);
    let label = json!({"overriders": {"plaintext": [{"op": "add", "path": "/metadata/labels/a", "value": "b"}]}});
    let check = json!({"program": "{}"});
    let set = set_of(&[
        cop(
            "pods-on-create",
            json!({"resourceSelectors": pods,
            "overrideRules": [{"targetOperations": ["CREATE"], "overriders": label["overriders"]}]}),
        ),
        cop(
            "deployments",
            json!({"resourceSelectors": deployments,
            "overrideRules": [{"targetOperations": ["UPDATE"], "overriders": label["overriders"]}]}),
        ),
        op(
            "shop",
            "pods-all",
            json!({"resourceSelectors": pods, "overrideRules": [label]}),
        ),
        cvp(
            "everything-on-delete",
            json!({"validateRules": [{"targetOperations": ["DELETE"], "program": check["program"]}]}),
        ),
        vp(
            "shop",
            "connect",
            json!({"resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
            "validateRules": [{"targetOperations": ["CONNECT", "CREATE"], "program": check["program"]}]}),
        ),
    ]);
    let key = |a: &str, k: &str| (a.to_string(), k.to_string());
    let workloads = |ops: &[kanon_api::Operation]| {
        kanon_engine::WORKLOADS
            .iter()
            .map(|w| (key(w.api_version, w.kind), ops.to_vec()))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        set.targets(WebhookKind::Mutating),
        Targets {
            types: [
                // CREATE from one policy, every operation from the namespaced one.
                (key("v1", "Pod"), vec![Create, Update, Delete, Connect]),
            ]
            .into_iter()
            // The Pod policies reach the pod templates workloads are written with (Deployment's
            // UPDATE from `deployments` among them).
            .chain(workloads(&[Create, Update]))
            .collect(),
            every_type: vec![],
        }
    );
    assert_eq!(
        set.targets(WebhookKind::Validating),
        Targets {
            types: [(key("v1", "Pod"), vec![Create, Connect])]
                .into_iter()
                .chain(workloads(&[Create]))
                .collect(),
            every_type: vec![Delete],
        }
    );
    assert!(
        PolicySet::build(Vec::new())
            .unwrap()
            .targets(WebhookKind::Mutating)
            .is_empty()
    );
}

#[test]
fn a_review_evaluates_something_only_when_a_policy_may_select_it() {
    use kanon_engine::WebhookKind::{Mutating, Validating};
    let rule =
        json!([{"targetOperations": ["CREATE"], "cel": {"validations": [{"expression": "true"}]}}]);
    let set = set_of(&[
        vp(
            "shop",
            "pods",
            json!({"resourceSelectors": typed("v1", "Pod"), "validateRules": rule}),
        ),
        cvp(
            "config",
            json!({"resourceSelectors": typed("v1", "ConfigMap"), "validateRules": rule}),
        ),
    ]);
    // The tenant's Pod policy: its namespace's Pods and the pod templates of its workloads.
    assert!(set.evaluates(Validating, "v1", "Pod", Some("shop")));
    assert!(set.evaluates(Validating, "apps/v1", "Deployment", Some("shop")));
    assert!(!set.evaluates(Validating, "v1", "Pod", Some("other")));
    assert!(!set.evaluates(Validating, "apps/v1", "Deployment", Some("other")));
    // The cluster's ConfigMap policy: every namespace's.
    assert!(set.evaluates(Validating, "v1", "ConfigMap", Some("other")));
    assert!(!set.evaluates(Validating, "v1", "Secret", Some("shop")));
    // No override policy at all.
    assert!(!set.evaluates(Mutating, "v1", "Pod", Some("shop")));
    // kanon's own objects are checked when written.
    assert!(set.evaluates(
        Validating,
        "policy.kanon.dev/v1alpha1",
        "ValidatePolicy",
        Some("x")
    ));
    assert!(!set.evaluates(
        Mutating,
        "policy.kanon.dev/v1alpha1",
        "ValidatePolicy",
        Some("x")
    ));
}
