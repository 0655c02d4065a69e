//! Audit: existing objects judged by the validate policies as the CREATE that made them,
//! each policy's (or rule's) result a finding: pass, fail, warn, error or skip.

mod common;

use std::sync::Arc;

use common::*;
use kanon_api::ResultStatus;
use kanon_engine::compile_exception;
use kanon_engine::{
    AdmissionPolicies, Evaluation, Finding, NoObjects, ObjectStore, PolicySet, block_on,
};
use serde_json::{Value, json};

/// 2026-11-26T00:00:00Z.
const NOW: i64 = 1_795_651_200;

/// Rule `pinned`: no `latest` images; an unnamed second rule: no privileged containers.
fn pod_rules(actions: Value) -> Value {
    let mut policy = cvp(
        "pod-rules",
        json!({
            "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
            "validationActions": actions,
            "validateRules": [
                {"name": "pinned", "cel": {"validations": [{
                    "expression": "object.spec.containers.all(c, !c.image.endsWith(':latest'))",
                    "message": "images must be pinned"}]}},
                {"cel": {"validations": [{
                    "expression": "object.spec.containers.all(c, !has(c.securityContext) || !c.securityContext.privileged)",
                    "message": "no privileged containers"}]}},
            ],
        }),
    );
    policy["metadata"]["annotations"] =
        json!({"policy.kanon.dev/severity": "high", "policy.kanon.dev/category": "Pod Security"});
    policy
}

fn bad_pod(name: &str) -> Value {
    let mut pod = pod("shop", name, json!({"app": "legacy"}));
    pod["spec"]["containers"] =
        json!([{"name": "app", "image": "nginx:latest", "securityContext": {"privileged": true}}]);
    pod
}

fn audit(set: &PolicySet, object: &Value) -> Vec<Finding> {
    audit_with(set, object, &NoObjects)
}

fn audit_with(set: &PolicySet, object: &Value, lookup: &dyn kanon_engine::Lookup) -> Vec<Finding> {
    let evaluation = Evaluation::new(lookup).with_now(Some(NOW));
    block_on(set.audit_in(object.clone(), &evaluation)).expect("the object is identified")
}

/// `(rule, result, message)` of each finding.
fn summary(findings: &[Finding]) -> Vec<(Option<&str>, ResultStatus, &str)> {
    findings
        .iter()
        .map(|f| (f.rule.as_deref(), f.result, f.message.as_str()))
        .collect()
}

#[test]
fn a_compliant_object_passes_and_a_breaking_one_fails_rule_by_rule() {
    let set = set_of(&[pod_rules(json!(["Deny"]))]);
    let good = audit(&set, &pod("shop", "good", json!({})));
    assert_eq!(summary(&good), vec![(None, ResultStatus::Pass, "")]);
    assert_eq!(&*good[0].policy, "ClusterValidatePolicy/pod-rules");
    assert_eq!(good[0].severity.as_deref(), Some("high"));
    assert_eq!(good[0].category.as_deref(), Some("Pod Security"));

    let bad = audit(&set, &bad_pod("bad"));
    assert_eq!(
        summary(&bad),
        vec![
            (Some("pinned"), ResultStatus::Fail, "images must be pinned"),
            (
                Some("validateRules[1]"),
                ResultStatus::Fail,
                "no privileged containers"
            ),
        ]
    );
}

#[test]
fn the_actions_decide_between_fail_and_warn() {
    for (actions, expected) in [
        (json!(["Warn"]), ResultStatus::Warn),
        (json!(["Audit"]), ResultStatus::Fail),
        (json!(["Warn", "Audit"]), ResultStatus::Fail),
    ] {
        let set = set_of(&[pod_rules(actions.clone())]);
        let found = audit(&set, &bad_pod("bad"));
        assert!(
            found.iter().all(|f| f.result == expected) && found.len() == 2,
            "{actions}: {found:#?}"
        );
    }
}

#[test]
fn policies_that_do_not_apply_find_nothing() {
    let set = set_of(&[
        pod_rules(json!(["Deny"])),
        // Only UPDATE: an existing object is judged as its CREATE.
        cvp(
            "updates-only",
            json!({
                "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
                "validateRules": [{"targetOperations": ["UPDATE"],
                    "cel": {"validations": [{"expression": "false"}]}}],
            }),
        ),
    ]);
    let found = audit(&set, &node("n1"));
    assert!(found.is_empty(), "{found:#?}");
    let found = audit(&set, &pod("shop", "good", json!({})));
    assert_eq!(found.len(), 1, "{found:#?}");
}

#[test]
fn an_object_that_cannot_be_identified_is_an_error() {
    let set = set_of(&[pod_rules(json!(["Deny"]))]);
    let evaluation = Evaluation::new(&NoObjects);
    let error = block_on(set.audit_in(json!({"metadata": {"name": "x"}}), &evaluation))
        .expect_err("no apiVersion");
    assert!(error.to_string().contains("apiVersion"), "{error}");
}

#[test]
fn exceptions_skip_whole_policies_or_named_rules() {
    let exception = |policies: Value| {
        let document = json!({
            "apiVersion": "policy.kanon.dev/v1alpha1", "kind": "PolicyException",
            "metadata": {"name": "legacy", "namespace": "exceptions"},
            "spec": {
                "policies": policies,
                "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod",
                    "labelSelector": {"matchLabels": {"app": "legacy"}}}],
                "reason": "migrating",
            },
        });
        Arc::new(compile_exception(&document).unwrap_or_else(|e| panic!("{e}")))
    };
    let whole = set_of(&[pod_rules(json!(["Deny"]))]).with_exceptions(vec![exception(
        json!([{"name": "pod-rules", "kind": "ClusterValidatePolicy"}]),
    )]);
    let found = audit(&whole, &bad_pod("bad"));
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(found[0].result, ResultStatus::Skip);
    assert!(
        found[0]
            .message
            .contains("PolicyException/exceptions/legacy"),
        "{found:#?}"
    );

    let pinned = set_of(&[pod_rules(json!(["Deny"]))]).with_exceptions(vec![exception(
        json!([{"name": "pod-rules", "kind": "ClusterValidatePolicy", "rules": ["pinned"]}]),
    )]);
    let found = audit(&pinned, &bad_pod("bad"));
    assert_eq!(
        summary(&found)
            .into_iter()
            .map(|(rule, result, _)| (rule, result))
            .collect::<Vec<_>>(),
        vec![
            (Some("pinned"), ResultStatus::Skip),
            (Some("validateRules[1]"), ResultStatus::Fail),
        ]
    );
}

#[test]
fn a_policy_that_cannot_be_evaluated_is_an_error_not_a_failure() {
    // The rule reads a ConfigMap that does not exist.
    let set = set_of(&[cvp(
        "needs-config",
        json!({
            "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
            "validateRules": [{"cel": {
                "references": {"config": {"from": "k8s", "k8s": {"apiVersion": "v1",
                    "kind": "ConfigMap", "namespace": "kanon-system", "name": "settings"}}},
                "validations": [{"expression": "has(references.config)"}]}}],
        }),
    )]);
    let found = audit(&set, &pod("shop", "p", json!({})));
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(found[0].result, ResultStatus::Error, "{found:#?}");
    assert!(!found[0].message.is_empty());
}

#[test]
fn workloads_are_judged_through_their_pod_template() {
    let set = set_of(&[pod_rules(json!(["Deny"]))]);
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "app", "image": "nginx:latest"}]},
            },
        },
    });
    let found = audit(&set, &deployment);
    assert_eq!(
        summary(&found),
        vec![(
            Some("pinned"),
            ResultStatus::Fail,
            "spec.template: images must be pinned"
        )]
    );
}

#[test]
fn admission_policies_report_each_failed_validation() {
    let mut policies = AdmissionPolicies::new();
    policies.add(&json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "p"},
        "spec": {
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                "resources": ["pods"], "operations": ["CREATE", "UPDATE"]}]},
            "validations": [
                {"expression": "true", "message": "never"},
                {"expression": "!object.metadata.name.startsWith('bad')", "message": "bad name"},
            ],
        },
    }));
    policies.add(&json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": "b"},
        "spec": {"policyName": "p", "validationActions": ["Warn"]},
    }));
    let compiled = policies.compile().expect("valid admission policies");
    let set = PolicySet::build(compiled).expect("no duplicates");
    let found = audit(&set, &bad_pod("bad"));
    assert_eq!(
        summary(&found),
        vec![(Some("validations[1]"), ResultStatus::Warn, "bad name")]
    );
    let found = audit(&set, &pod("shop", "good", json!({})));
    assert_eq!(summary(&found), vec![(None, ResultStatus::Pass, "")]);
}

#[test]
fn lookups_are_the_same_as_at_admission() {
    // A namespace-label selector reads the namespace through the lookup.
    let set = set_of(&[cvp(
        "labelled-namespaces",
        json!({
            "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
            "namespaceSelector": {"matchLabels": {"audit": "on"}},
            "validateRules": [{"cel": {"validations": [{"expression": "false", "message": "no"}]}}],
        }),
    )]);
    let store = |labels: Value| {
        let mut store = ObjectStore::new();
        store.insert(namespace("shop", labels)).expect("identified");
        store
    };
    let found = audit_with(
        &set,
        &pod("shop", "p", json!({})),
        &store(json!({"audit": "on"})),
    );
    assert_eq!(
        summary(&found),
        vec![(Some("validateRules[0]"), ResultStatus::Fail, "no")]
    );
    assert!(audit_with(&set, &pod("shop", "p", json!({})), &store(json!({}))).is_empty());
}

#[test]
fn an_unknown_severity_is_left_out_with_a_warning() {
    let mut policy = pod_rules(json!(["Deny"]));
    policy["metadata"]["annotations"]["policy.kanon.dev/severity"] = json!("urgent");
    let compiled = compiled(&policy);
    assert!(compiled.severity.is_none());
    assert!(
        compiled
            .warnings
            .iter()
            .any(|w| w.field.contains("severity") && w.message.contains("urgent")),
        "{:#?}",
        compiled.warnings
    );
}
