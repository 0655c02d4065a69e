//! Namespaces: OverridePolicies are confined to their own namespace; ClusterOverridePolicies'
//! namespaceSelector is judged against the Namespace's labels (from a Lookup), a Namespace by
//! its own labels, and cluster-scoped objects are not affected.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};

use common::*;
use kanon_api::Operation;
use kanon_engine::{NoObjects, ObjectStore, Request};
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------------
// Namespaced OverridePolicy
// ---------------------------------------------------------------------------------------------

fn applied_to(set: &kanon_engine::PolicySet, object: &Value) -> Vec<String> {
    let d = mutate_create(set, object);
    assert!(d.allowed, "{d:?}");
    d.applied_policies
}

#[test]
fn override_policy_only_matches_its_own_namespace() {
    let selector_variants = [
        json!([]),
        json!([{"apiVersion": "v1", "kind": "Pod"}]),
        json!([{"apiVersion": "v1", "kind": "Pod", "namespace": "team-a"}]),
        json!([{"apiVersion": "v1", "kind": "Pod", "name": "web"}]),
        json!([{"apiVersion": "v1", "kind": "Pod", "labelSelector": {}}]),
        json!([{"apiVersion": "v1", "kind": "Node"}, {"apiVersion": "v1", "kind": "Namespace"},
               {"apiVersion": "v1", "kind": "Pod"}]),
    ];
    for selectors in selector_variants {
        let doc = op(
            "team-a",
            "p",
            json!({"resourceSelectors": selectors, "overrideRules": [hit_rule("p")]}),
        );
        let policy = compiled(&doc);
        let set = set_of(&[doc]);
        let own = pod("team-a", "web", json!({}));
        let other = pod("team-b", "web", json!({}));
        let similar = pod("team-a-2", "web", json!({}));
        let rows = [
            (&own, true),
            (&other, false),
            (&similar, false),
            (&node("web"), false),
            (&namespace("team-a", json!({})), false),
        ];
        for (object, want) in rows {
            let got = applied_to(&set, object) == ["OverridePolicy/team-a/p"];
            assert_eq!(got, want, "selectors {selectors} on {object}");
            let req = create(object);
            assert_eq!(
                policy.selects_resource(&req.view(object)),
                want,
                "selects_resource: {selectors} on {object}"
            );
        }
    }
}

#[test]
fn override_policy_selector_naming_another_namespace_is_a_compile_error() {
    let doc = op(
        "team-a",
        "p",
        json!({
            "resourceSelectors": [
                {"apiVersion": "v1", "kind": "Pod", "namespace": "team-a"},
                {"apiVersion": "v1", "kind": "Pod", "namespace": "team-b"},
            ],
            "overrideRules": [hit_rule("p")],
        }),
    );
    let errors = compile_errors(&doc);
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert_error(
        &errors,
        "spec.resourceSelectors[1].namespace",
        "own namespace `team-a`, not `team-b`",
    );

    // Even when such a policy gets in, it never reaches the other namespace: there it does
    // nothing at all, and in its own namespace it meets its failure policy.
    let set = set_of_any(&[doc]);
    let d = mutate_create(&set, &pod("team-b", "web", json!({})));
    assert!(
        d.allowed && d.messages.is_empty() && d.applied_policies.is_empty() && d.patch.0.is_empty(),
        "{d:?}"
    );
    let d = mutate_create(&set, &pod("team-a", "web", json!({})));
    assert!(!d.allowed, "{d:?}");
    assert!(
        d.messages[0].starts_with("OverridePolicy/team-a/p: the policy is invalid"),
        "{d:?}"
    );

    // The same for ValidatePolicy.
    let doc = vp(
        "team-a",
        "v",
        json!({"resourceSelectors": [{"apiVersion": "v1", "kind": "Pod", "namespace": "kube-system"}],
               "validateRules": [{"program": "x"}]}),
    );
    assert_error(
        &compile_errors(&doc),
        "spec.resourceSelectors[0].namespace",
        "own namespace `team-a`",
    );
}

#[test]
fn namespaced_and_cluster_policies_combine_per_namespace() {
    let set = set_of(&[
        cop("cluster", json!({"overrideRules": [trace_rule("cluster")]})),
        op(
            "team-a",
            "a",
            json!({"overrideRules": [trace_rule("team-a")]}),
        ),
        op(
            "team-b",
            "b",
            json!({"overrideRules": [trace_rule("team-b")]}),
        ),
    ]);
    let rows = [
        (pod("team-a", "x", json!({})), json!(["cluster", "team-a"])),
        (pod("team-b", "x", json!({})), json!(["cluster", "team-b"])),
        (pod("team-c", "x", json!({})), json!(["cluster"])),
        (node("x"), json!(["cluster"])),
        (namespace("team-a", json!({})), json!(["cluster"])),
    ];
    for (object, trace) in rows {
        let d = mutate_create(&set, &object);
        assert_eq!(d.patched.as_ref().unwrap()["trace"], trace, "{object}");
    }
}

// ---------------------------------------------------------------------------------------------
// ClusterOverridePolicy namespaceSelector
// ---------------------------------------------------------------------------------------------

fn store() -> ObjectStore {
    let mut s = ObjectStore::new();
    s.insert(namespace("prod", json!({"env": "prod", "team": "a"})))
        .unwrap();
    s.insert(namespace("dev", json!({"env": "dev"}))).unwrap();
    s.insert(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bare"}}))
        .unwrap();
    s
}

fn ns_policy(name: &str, namespace_selector: Value, failure_policy: Option<&str>) -> Value {
    let mut spec =
        json!({"namespaceSelector": namespace_selector, "overrideRules": [hit_rule(name)]});
    if let Some(fp) = failure_policy {
        spec["failurePolicy"] = json!(fp);
    }
    cop(name, spec)
}

#[test]
fn namespace_selector_uses_the_namespace_labels_from_the_lookup() {
    let lookup = store();
    let rows: Vec<(Value, &str, bool)> = vec![
        (json!({"matchLabels": {"env": "prod"}}), "prod", true),
        (json!({"matchLabels": {"env": "prod"}}), "dev", false),
        (json!({"matchLabels": {"env": "prod"}}), "bare", false),
        (
            json!({"matchLabels": {"env": "prod", "team": "a"}}),
            "prod",
            true,
        ),
        (
            json!({"matchLabels": {"env": "prod", "team": "b"}}),
            "prod",
            false,
        ),
        (
            json!({"matchExpressions": [{"key": "env", "operator": "In", "values": ["dev", "prod"]}]}),
            "dev",
            true,
        ),
        (
            json!({"matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["prod"]}]}),
            "dev",
            true,
        ),
        (
            json!({"matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["prod"]}]}),
            "bare",
            true,
        ),
        (
            json!({"matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["prod"]}]}),
            "prod",
            false,
        ),
        (
            json!({"matchExpressions": [{"key": "env", "operator": "Exists"}]}),
            "bare",
            false,
        ),
        (
            json!({"matchExpressions": [{"key": "env", "operator": "DoesNotExist"}]}),
            "bare",
            true,
        ),
        (
            json!({"matchExpressions": [{"key": "env", "operator": "DoesNotExist"}]}),
            "dev",
            false,
        ),
        (json!({}), "bare", true),
        (json!({}), "prod", true),
    ];
    for (selector, ns, want) in rows {
        let set = set_of(&[ns_policy("p", selector.clone(), None)]);
        // The object's own labels play no part.
        let object = pod(ns, "web", json!({"env": "prod", "team": "a"}));
        let d = mutate_with(&set, &object, &lookup);
        assert!(d.allowed, "{selector} in {ns}: {d:?}");
        let got = d.applied_policies == ["ClusterOverridePolicy/p"];
        assert_eq!(got, want, "namespaceSelector {selector} in namespace {ns}");
    }
}

#[test]
fn namespace_selector_combines_with_resource_selectors() {
    let set = set_of(&[cop(
        "p",
        json!({
            "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod", "labelSelector": {"matchLabels": {"app": "web"}}}],
            "namespaceSelector": {"matchLabels": {"env": "prod"}},
            "overrideRules": [hit_rule("p")],
        }),
    )]);
    let lookup = store();
    let rows = [
        (pod("prod", "x", json!({"app": "web"})), true),
        (pod("prod", "x", json!({"app": "db"})), false),
        (pod("dev", "x", json!({"app": "web"})), false),
        // Not selected by type: the namespace is never looked up, so a missing one is no error.
        (
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "namespace": "ghost"}}),
            false,
        ),
        // Not selected by labels: likewise.
        (pod("ghost", "x", json!({"app": "db"})), false),
    ];
    for (object, want) in rows {
        let d = mutate_with(&set, &object, &lookup);
        assert!(d.allowed, "{object}: {d:?}");
        assert_eq!(
            d.applied_policies == ["ClusterOverridePolicy/p"],
            want,
            "{object}"
        );
    }
}

#[test]
fn a_namespace_is_judged_by_its_own_labels() {
    let mut lookup = ObjectStore::new();
    // The stored version says dev; the object under review says prod: the object decides.
    lookup
        .insert(namespace("flip", json!({"env": "dev"})))
        .unwrap();
    let set = set_of(&[ns_policy(
        "p",
        json!({"matchLabels": {"env": "prod"}}),
        None,
    )]);
    let rows = [
        (namespace("flip", json!({"env": "prod"})), true),
        (namespace("flip", json!({"env": "dev"})), false),
        (namespace("new", json!({"env": "prod"})), true),
        (namespace("new", json!({})), false),
    ];
    for (object, want) in rows {
        let d = mutate_with(&set, &object, &lookup);
        assert!(d.allowed, "{d:?}");
        assert_eq!(
            d.applied_policies == ["ClusterOverridePolicy/p"],
            want,
            "{object}"
        );
        // Nothing needs the lookup, so an empty one works the same.
        let d = mutate_with(&set, &object, &NoObjects);
        assert!(d.allowed, "{d:?}");
        assert_eq!(
            d.applied_policies == ["ClusterOverridePolicy/p"],
            want,
            "{object} without lookup"
        );
    }
    // On DELETE the old Namespace's labels decide (validate sees the old object).
    let old = namespace("flip", json!({"env": "prod"}));
    let req = Request::from_objects(Operation::Delete, None, Some(old)).unwrap();
    let cv = cvp(
        "v",
        json!({"namespaceSelector": {"matchLabels": {"env": "prod"}}, "validateRules": [{}]}),
    );
    let vset = set_of_any(&[cv]);
    let d = kanon_engine::block_on(vset.validate(&req, None, &NoObjects));
    assert!(
        !d.allowed,
        "the (invalid) policy selects the deleted prod Namespace: {d:?}"
    );
    // A dev Namespace is not selected; were its labels looked up, the empty lookup would
    // make that an error.
    let old = namespace("flip", json!({"env": "dev"}));
    let req = Request::from_objects(Operation::Delete, None, Some(old)).unwrap();
    let d = kanon_engine::block_on(vset.validate(&req, None, &NoObjects));
    assert!(
        d.allowed && d.messages.is_empty() && d.warnings.is_empty(),
        "{d:?}"
    );
}

#[test]
fn cluster_scoped_objects_are_not_affected_by_the_namespace_selector() {
    let set = set_of(&[ns_policy(
        "p",
        json!({"matchLabels": {"env": "never"}}),
        None,
    )]);
    for object in [
        node("n"),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "r"}}),
        // Only the core v1 Namespace is judged by its own labels.
        json!({"apiVersion": "example.com/v1", "kind": "Namespace", "metadata": {"name": "fake", "labels": {}}}),
    ] {
        let d = mutate_with(&set, &object, &NoObjects);
        assert!(d.allowed, "{d:?}");
        assert_eq!(d.applied_policies, ["ClusterOverridePolicy/p"], "{object}");
    }
}

#[test]
fn a_missing_namespace_is_an_evaluation_error_under_the_failure_policy() {
    let object = pod("ghost", "web", json!({}));
    let plain = cop("z-plain", json!({"overrideRules": [hit_rule("plain")]}));

    let set = set_of(&[
        ns_policy("needs-ns", json!({"matchLabels": {"env": "prod"}}), None),
        plain.clone(),
    ]);
    let d = mutate_with(&set, &object, &store());
    assert!(!d.allowed, "{d:?}");
    assert_eq!(d.messages.len(), 1, "{d:?}");
    let m = &d.messages[0];
    assert!(m.starts_with("ClusterOverridePolicy/needs-ns: "), "{m}");
    assert!(m.contains("namespaceSelector"), "{m}");
    assert!(m.contains("`ghost`"), "{m}");
    assert!(m.contains("not found"), "{m}");
    // The policy without a namespace selector is unaffected.
    assert_eq!(d.applied_policies, ["ClusterOverridePolicy/z-plain"]);

    let set = set_of(&[
        ns_policy(
            "needs-ns",
            json!({"matchLabels": {"env": "prod"}}),
            Some("Ignore"),
        ),
        plain,
    ]);
    let d = mutate_with(&set, &object, &store());
    assert!(d.allowed, "{d:?}");
    assert_eq!(d.warnings.len(), 1);
    assert!(
        d.warnings[0].starts_with("ClusterOverridePolicy/needs-ns: "),
        "{d:?}"
    );
    assert!(d.warnings[0].contains("`ghost`"), "{d:?}");
    assert_eq!(d.applied_policies, ["ClusterOverridePolicy/z-plain"]);
    let patched = d.patched.as_ref().unwrap();
    assert!(
        patched.get("hit-needs-ns").is_none() && patched.get("hit-plain").is_some(),
        "{patched}"
    );

    // An empty namespace selector selects every namespace without reading it, as in
    // Kubernetes (`MatchNamespaceSelector` returns early for an empty selector), so a missing
    // namespace is no error for it; likewise an empty `matchExpressions` list.
    for empty in [
        json!({}),
        json!({"matchLabels": {}, "matchExpressions": []}),
    ] {
        let set = set_of(&[ns_policy("empty-sel", empty, None)]);
        let counting = CountingLookup {
            calls: AtomicUsize::new(0),
            fail: true,
            inner: ObjectStore::new(),
        };
        let d = mutate_with(&set, &object, &counting);
        assert!(
            d.allowed && d.messages.is_empty() && d.warnings.is_empty(),
            "{d:?}"
        );
        assert_eq!(d.applied_policies, ["ClusterOverridePolicy/empty-sel"]);
        assert_eq!(
            counting.calls.load(AtomicOrdering::SeqCst),
            0,
            "an empty selector needs no lookup"
        );
    }
}

#[test]
fn the_namespace_is_looked_up_once_and_only_when_needed() {
    let lookup = CountingLookup {
        calls: AtomicUsize::new(0),
        fail: false,
        inner: store(),
    };
    // No policy with a namespace selector: no lookup.
    let set = set_of(&[cop("plain", json!({"overrideRules": [hit_rule("plain")]}))]);
    mutate_with(&set, &pod("prod", "x", json!({})), &lookup);
    assert_eq!(lookup.calls.load(AtomicOrdering::SeqCst), 0);
    // Three policies with namespace selectors: one lookup.
    let set = set_of(&[
        ns_policy("a", json!({"matchLabels": {"env": "prod"}}), None),
        ns_policy("b", json!({"matchLabels": {"env": "dev"}}), None),
        ns_policy("c", json!({}), None),
    ]);
    let d = mutate_with(&set, &pod("prod", "x", json!({})), &lookup);
    assert_eq!(
        d.applied_policies,
        ["ClusterOverridePolicy/a", "ClusterOverridePolicy/c"]
    );
    assert_eq!(lookup.calls.load(AtomicOrdering::SeqCst), 1);
}

#[test]
fn a_failing_lookup_is_an_evaluation_error_naming_the_cause() {
    let lookup = CountingLookup {
        calls: AtomicUsize::new(0),
        fail: true,
        inner: ObjectStore::new(),
    };
    let set = set_of(&[
        ns_policy("a", json!({"matchLabels": {"env": "prod"}}), None),
        ns_policy("b", json!({"matchLabels": {"env": "prod"}}), Some("Ignore")),
    ]);
    let d = mutate_with(&set, &pod("prod", "x", json!({})), &lookup);
    assert!(!d.allowed);
    assert_eq!(d.messages.len(), 1, "{d:?}");
    assert!(
        d.messages[0].starts_with("ClusterOverridePolicy/a: namespaceSelector: "),
        "{d:?}"
    );
    assert!(d.messages[0].contains("not synced yet"), "{d:?}");
    assert_eq!(d.warnings.len(), 1, "{d:?}");
    assert!(
        d.warnings[0].starts_with("ClusterOverridePolicy/b: "),
        "{d:?}"
    );
    assert!(d.warnings[0].contains("not synced yet"), "{d:?}");
    assert_eq!(
        lookup.calls.load(AtomicOrdering::SeqCst),
        1,
        "the failure is remembered for the request"
    );
}

#[test]
fn object_store_keys_objects_by_identity() {
    let mut s = ObjectStore::new();
    assert!(s.is_empty());
    s.insert(namespace("a", json!({"v": "1"}))).unwrap();
    s.insert(namespace("a", json!({"v": "2"}))).unwrap();
    s.insert(pod("a", "p", json!({}))).unwrap();
    s.insert(
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": ""}}),
    )
    .unwrap();
    assert_eq!(
        s.len(),
        3,
        "replacing keeps one entry; an empty namespace is cluster-scoped"
    );
    let ns = s.object("v1", "Namespace", None, "a").unwrap();
    assert_eq!(ns["metadata"]["labels"]["v"], "2");
    assert!(s.object("v1", "Namespace", Some("a"), "a").is_none());
    assert!(s.object("v1", "Pod", Some("a"), "p").is_some());
    assert!(s.object("v1", "Pod", None, "p").is_some());
    assert!(s.object("v1", "Pod", Some("b"), "p").is_none());
    for (object, missing) in [
        (
            json!({"kind": "Pod", "metadata": {"name": "p"}}),
            "apiVersion",
        ),
        (
            json!({"apiVersion": "v1", "metadata": {"name": "p"}}),
            "kind",
        ),
        (
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {}}),
            "metadata.name",
        ),
    ] {
        let e = s.insert(object).unwrap_err();
        assert_eq!(e.missing, missing);
        assert_eq!(e.to_string(), format!("object has no {missing}"));
    }
}

#[test]
fn a_cel_rule_reads_the_namespace_only_when_an_expression_names_it() {
    let lookup = CountingLookup {
        calls: AtomicUsize::new(0),
        fail: false,
        inner: store(),
    };
    let rule = |expression: &str, variables: Value| json!({"validateRules": [{"cel": {"variables": variables, "validations": [{"expression": expression}]}}]});
    let object = pod("prod", "x", json!({}));
    let judge = |set: &kanon_engine::PolicySet| {
        kanon_engine::block_on(set.validate(&create(&object), None, &lookup))
    };
    // Neither the validation nor a variable names it: not read.
    let set = set_of(&[cvp(
        "blind",
        rule(
            "object.metadata.name == variables.name",
            json!([{"name": "name", "expression": "object.metadata.name"}]),
        ),
    )]);
    assert!(judge(&set).allowed);
    assert_eq!(lookup.calls.load(AtomicOrdering::SeqCst), 0);
    // A comprehension variable of that name is not the namespace.
    let set = set_of(&[cvp(
        "shadowed",
        rule("[1].all(namespaceObject, namespaceObject == 1)", json!([])),
    )]);
    assert!(judge(&set).allowed);
    assert_eq!(lookup.calls.load(AtomicOrdering::SeqCst), 0);
    // Named by a variable the validation reads: read once, and seen.
    let set = set_of(&[cvp(
        "env",
        rule(
            "variables.env == 'prod'",
            json!([{"name": "env", "expression": "namespaceObject.metadata.labels.env"}]),
        ),
    )]);
    let d = judge(&set);
    assert!(d.allowed, "{d:?}");
    assert_eq!(lookup.calls.load(AtomicOrdering::SeqCst), 1);
}
