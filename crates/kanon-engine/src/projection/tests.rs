use std::sync::Arc;

use serde_json::json;

use super::*;
use crate::policy::{CompiledPolicy, PolicyRules, read_by};
use crate::set::PolicySet;
use crate::targets::WebhookKind;

fn policy(rule: serde_json::Value, selector: serde_json::Value) -> Arc<CompiledPolicy> {
    let document = json!({
        "apiVersion": "policy.kanon.dev/v1alpha1",
        "kind": "ClusterValidatePolicy",
        "metadata": {"name": format!("p-{}", rule.to_string().len())},
        "spec": {"resourceSelectors": [selector], "validateRules": [rule]},
    });
    Arc::new(crate::compile_document(&document).expect("compiles"))
}

fn cel(expression: &str) -> serde_json::Value {
    json!({"cel": {"validations": [{"expression": expression}]}})
}

fn pods() -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Pod"})
}

#[test]
fn kanon_keeps_the_objects_type_and_metadata_but_its_managed_fields() {
    let base = Projection::base();
    assert_eq!(base.select("apiVersion"), Selected::Whole);
    assert_eq!(base.select("spec"), Selected::Skip);
    let Selected::Within(metadata) = base.select("metadata") else {
        panic!("metadata is projected");
    };
    assert_eq!(metadata.select("labels"), Selected::Whole);
    assert_eq!(metadata.select("ownerReferences"), Selected::Whole);
    assert_eq!(metadata.select("managedFields"), Selected::Skip);
    let mut read = base.clone();
    read.add_path(["metadata"]);
    assert_eq!(read.select("metadata"), Selected::Whole);
    read.union(&Projection::whole());
    assert!(read.is_whole());
}

#[test]
fn rules_whose_reads_are_known_are_projected() {
    let memory = policy(
        cel("object.spec.containers.all(c, has(c.resources))"),
        pods(),
    );
    let read = read_by(&memory).expect("projected");
    assert_eq!(read.select("status"), Selected::Skip);
    assert!(matches!(read.select("spec"), Selected::Within(_)));
    let condition = policy(
        json!({"template": {"type": "condition", "condition": {
            "cond": "Exist", "dataRef": {"from": "current", "path": "/spec/x"},
            "message": "{{ object.status.phase }}"}}}),
        pods(),
    );
    let read = read_by(&condition).expect("projected");
    let Selected::Within(spec) = read.select("spec") else {
        panic!("spec is projected: {read:?}");
    };
    assert_eq!(spec.select("x"), Selected::Whole);
    assert_eq!(spec.select("containers"), Selected::Skip);
    assert!(matches!(read.select("status"), Selected::Within(_)));
    let mut audited = policy(cel("object.spec.x == 1"), pods());
    if let PolicyRules::Validate { actions, .. } = &mut Arc::make_mut(&mut audited).rules {
        *actions = vec![kanon_api::ValidationAction::Audit];
    }
    let whole = [
        audited,
        policy(cel("object == oldObject"), pods()),
        policy(
            json!({"template": {"type": "condition", "condition": {
                "cond": "Exist", "dataRef": {"from": "current", "path": "$.spec.containers[*].image"},
                "message": "x"}}}),
            pods(),
        ),
        policy(json!({"program": "{{ object | tojson }}"}), pods()),
        policy(
            cel("object.spec.x == 1"),
            json!({"apiVersion": "v1", "kind": "Pod", "fieldSelector": {"matchFields": {"/spec/nodeName": "n"}}}),
        ),
    ];
    for policy in &whole {
        assert_eq!(read_by(policy), None, "{}", policy.label);
    }
}

#[test]
fn a_type_is_projected_when_every_policy_that_may_select_it_is() {
    let set = |policies: Vec<Arc<CompiledPolicy>>| {
        PolicySet::build(policies.iter().map(|p| (**p).clone()).collect()).expect("a set")
    };
    let memory = policy(cel("has(object.spec.containers)"), pods());
    let status = policy(cel("has(object.status.phase)"), pods());
    let both = set(vec![memory.clone(), status]);
    let read = both
        .object_read(WebhookKind::Validating, "v1", "Pod", Some("a"))
        .expect("projected");
    assert!(matches!(read.select("status"), Selected::Within(_)));
    assert!(matches!(read.select("spec"), Selected::Within(_)));
    assert_eq!(read.select("data"), Selected::Skip);
    let with_whole = set(vec![memory, policy(cel("size(object) > 1"), pods())]);
    assert_eq!(
        with_whole.object_read(WebhookKind::Validating, "v1", "Pod", Some("a")),
        None
    );
}

fn override_policy(overriders: serde_json::Value) -> Arc<CompiledPolicy> {
    let document = json!({
        "apiVersion": "policy.kanon.dev/v1alpha1",
        "kind": "ClusterOverridePolicy",
        "metadata": {"name": format!("o-{}", overriders.to_string().len())},
        "spec": {"resourceSelectors": [pods()], "overrideRules": [{"overriders": overriders}]},
    });
    Arc::new(crate::compile_document(&document).expect("compiles"))
}

#[test]
fn override_rules_are_projected_with_the_places_constant_patches_name() {
    let labels = override_policy(json!({"template": {
        "type": "labels", "operation": "add", "path": "a/b", "value": {"string": "x"}}}));
    let read = read_by(&labels).expect("a labels template is projected");
    let Selected::Within(metadata) = read.select("metadata") else {
        panic!("{read:?}");
    };
    assert_eq!(metadata.select("labels"), Selected::Whole);
    assert_eq!(read.select("spec"), Selected::Skip);

    let plaintext = override_policy(json!({"plaintext": [
        {"op": "add", "path": "/spec/tolerations/-", "value": {"key": "k"}},
        {"op": "move", "from": "/status/x", "path": "/metadata/annotations/x"},
    ]}));
    let read = read_by(&plaintext).expect("plaintext is projected");
    assert!(read.covers(["spec", "tolerations", "-"]));
    assert!(read.covers(["status", "x"]));
    assert!(!read.covers(["spec", "containers"]));

    let cel = override_policy(json!({"cel": {"mutations": [
        {"patchType": "JSONPatch", "jsonPatch": {"expression":
            "[JSONPatch{op: 'add', path: '/spec/nodeName', value: 'n'}]"}},
        {"patchType": "JSONPatch", "jsonPatch": {"expression":
            "[JSONPatch{op: 'add', path: '/metadata/labels/x', value: object.spec.serviceAccountName}]"}},
    ]}}));
    let read = read_by(&cel).expect("CEL mutations are projected");
    assert!(
        read.covers(["spec", "nodeName"]),
        "a constant patch's place"
    );
    assert!(
        read.covers(["spec", "serviceAccountName"]),
        "what an expression reads"
    );
    assert!(!read.covers(["spec"]));

    // Reads that are not known: the object whole.
    for whole in [
        override_policy(
            json!({"program": "{{ [{'op': 'add', 'path': '/x', 'value': object | length}] | tojson }}"}),
        ),
        override_policy(json!({"template": {
            "type": "nodeSelector", "operation": "add", "path": "a", "value": {"string": "x"}}})),
    ] {
        assert_eq!(read_by(&whole), None, "{}", whole.label);
    }
}

#[test]
fn a_place_is_covered_where_the_projection_keeps_it_whole() {
    let mut read = Projection::base();
    read.add_path(["spec", "containers"]);
    assert!(read.covers(["metadata", "labels", "a"]));
    assert!(read.covers(["metadata", "labels"]));
    assert!(read.covers(["spec", "containers", "0", "image"]));
    // Decoded in part, or skipped.
    assert!(!read.covers(["metadata"]));
    assert!(!read.covers(["spec"]));
    assert!(!read.covers(Vec::<&str>::new()));
    assert!(!read.covers(["spec", "nodeName"]));
    assert!(!read.covers(["metadata", "managedFields"]));
    assert!(Projection::whole().covers(["anything"]));

    // An apply configuration: into the root and metadata field by field, elsewhere only
    // into what is kept whole.
    let live = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "labels": {"a": "x"}},
        "spec": {"containers": []},
    });
    let covers = |projection: &Projection, configuration| {
        projection.covers_configuration(&configuration, &live)
    };
    assert!(covers(&read, json!({"metadata": {"labels": {"a": "b"}}})));
    assert!(!covers(&read, json!({"spec": {"containers": []}})));
    assert!(!covers(&read, json!({"spec": {"nodeName": "n"}})));
    assert!(!covers(&read, json!({"metadata": {"managedFields": []}})));
    assert!(!covers(&read, json!({"metadata": "x"})));
    // Naming every field decoded of the root or metadata: whether the whole object keeps one
    // more decides how the merge goes.
    assert!(!covers(
        &read,
        json!({"metadata": {"name": "p", "labels": {}}})
    ));
    let decoded = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}});
    let labels = json!({"metadata": {"labels": {"b": "y"}}});
    assert!(Projection::base().covers_configuration(&labels, &decoded));
    let typed = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"labels": {"b": "y"}}});
    assert!(!Projection::base().covers_configuration(&typed, &decoded));
    assert!(!read.covers_configuration(
        &json!({"metadata": {"labels": {}}}),
        &json!({"kind": "Pod"})
    ));
    let mut spec = Projection::base();
    spec.add_path(["spec"]);
    assert!(covers(&spec, json!({"spec": {"nodeName": "n"}})));
}
