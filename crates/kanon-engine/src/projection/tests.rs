use std::sync::Arc;

use serde_json::json;

use super::*;
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
    assert_eq!(
        both.object_read(WebhookKind::Mutating, "v1", "Pod", Some("a")),
        None,
        "the mutating webhook writes the whole object back"
    );
    let with_whole = set(vec![memory, policy(cel("size(object) > 1"), pods())]);
    assert_eq!(
        with_whole.object_read(WebhookKind::Validating, "v1", "Pod", Some("a")),
        None
    );
}
