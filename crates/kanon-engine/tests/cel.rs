//! CEL rules in kanon's policies: `validateRules[].cel` with ValidatingAdmissionPolicy's fields
//! and meanings, `overriders.cel` with MutatingAdmissionPolicy's JSONPatch mutations; checked
//! when written, bounded when run.

mod common;

use common::*;
use kanon_api::Operation;
use kanon_engine::{Decision, NoObjects, Request};
use serde_json::{Value, json};

fn pod_with(containers: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "namespace": "shop", "labels": {"app": "web"}},
        "spec": {"containers": containers},
    })
}

fn limited_pod() -> Value {
    pod_with(json!([
        {"name": "app", "image": "registry.corp/app:1", "resources": {"limits": {"memory": "256Mi"}}},
        {"name": "sidecar", "image": "registry.corp/envoy:2", "resources": {"limits": {"memory": "64Mi"}}}
    ]))
}

fn unlimited_pod() -> Value {
    pod_with(json!([
        {"name": "app", "image": "registry.corp/app:1", "resources": {"limits": {"memory": "256Mi"}}},
        {"name": "sidecar", "image": "registry.corp/envoy:2"}
    ]))
}

/// A ClusterValidatePolicy selecting Pods whose only rule is `cel`, with `extra` merged into
/// its spec.
fn cel_policy(name: &str, cel: Value, extra: Value) -> Value {
    let mut spec = json!({
        "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
        "validateRules": [{"targetOperations": ["CREATE", "UPDATE"], "cel": cel}],
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        for (key, value) in extra {
            spec.insert(key.clone(), value.clone());
        }
    }
    cvp(name, spec)
}

fn judge(policy: Value, request: &Request) -> Decision {
    let set = set_of(&[policy]);
    kanon_engine::block_on(set.validate(request, None, &NoObjects))
}

const MEMORY_LIMIT: &str = "object.spec.containers.all(c, has(c.resources) && has(c.resources.limits) && 'memory' in c.resources.limits)";

#[test]
fn the_memory_limit_rule_in_one_line() {
    let policy = cel_policy(
        "memory-limits",
        json!({"validations": [{"expression": MEMORY_LIMIT, "message": "every container needs a memory limit"}]}),
        json!({}),
    );
    let allowed = judge(policy.clone(), &create(&limited_pod()));
    assert!(allowed.allowed, "{allowed:?}");
    assert_eq!(
        allowed.applied_policies,
        ["ClusterValidatePolicy/memory-limits"]
    );

    let denied = judge(policy, &create(&unlimited_pod()));
    assert!(!denied.allowed);
    assert_eq!(
        denied.messages,
        ["ClusterValidatePolicy/memory-limits: every container needs a memory limit"]
    );
}

#[test]
fn an_error_judging_a_delete_says_the_object_is_null() {
    let mut policy = cel_policy(
        "containers",
        json!({"validations": [{"expression": "object.spec.containers.size() > 0"}]}),
        json!({}),
    );
    policy["spec"]["validateRules"][0]["targetOperations"] = json!(["DELETE"]);
    let decision = judge(policy, &request(Operation::Delete, &limited_pod()));
    assert!(!decision.allowed, "{decision:?}");
    let message = &decision.messages[0];
    assert!(
        message.contains(
            "resulted in error: no such key: spec (the request is a DELETE: `object` is null"
        ),
        "{message}"
    );
}

#[test]
fn messages_are_chosen_as_the_apiserver_chooses_them() {
    let validations = json!([
        // No message: kube-apiserver's default.
        {"expression": "object.metadata.name != 'web'"},
        // A messageExpression that gives text.
        {"expression": "size(object.spec.containers) > 5",
         "messageExpression": "'pod ' + object.metadata.name + ' has only ' + string(size(object.spec.containers)) + ' containers'"},
        // A messageExpression that fails falls back to the message.
        {"expression": "false", "message": "static", "messageExpression": "string(object.missing)"},
        // One that gives an empty string too.
        {"expression": "false", "message": "also static", "messageExpression": "''"},
    ]);
    for (index, expected) in [
        "failed expression: object.metadata.name != 'web'",
        "pod web has only 2 containers",
        "static",
        "also static",
    ]
    .into_iter()
    .enumerate()
    {
        let one = json!({"validations": [validations[index].clone()]});
        let decision = judge(cel_policy("p", one, json!({})), &create(&limited_pod()));
        assert_eq!(
            decision.messages,
            [format!("ClusterValidatePolicy/p: {expected}")]
        );
    }
}

#[test]
fn match_conditions_and_variables() {
    let cel = json!({
        "matchConditions": [{"name": "only-web", "expression": "object.metadata.labels.app == 'web'"}],
        "variables": [
            {"name": "containers", "expression": "object.spec.containers"},
            {"name": "unlimited", "expression": "variables.containers.filter(c, !has(c.resources)).map(c, c.name)"},
        ],
        "validations": [{
            "expression": "size(variables.unlimited) == 0",
            "messageExpression": "'no limits: ' + variables.unlimited.join(', ')",
        }],
    });
    let policy = cel_policy("p", cel, json!({}));
    let denied = judge(policy.clone(), &create(&unlimited_pod()));
    assert_eq!(
        denied.messages,
        ["ClusterValidatePolicy/p: no limits: sidecar"]
    );

    let mut other = unlimited_pod();
    other["metadata"]["labels"]["app"] = json!("batch");
    let skipped = judge(policy, &create(&other));
    assert!(
        skipped.allowed,
        "a false match condition skips the rule: {skipped:?}"
    );
}

#[test]
fn a_variable_is_computed_only_when_read() {
    // `broken` fails when evaluated; no expression reads it, so nothing fails.
    let cel = json!({
        "variables": [{"name": "broken", "expression": "object.spec.nothing.here"}],
        "validations": [{"expression": "true"}],
    });
    let decision = judge(cel_policy("p", cel, json!({})), &create(&limited_pod()));
    assert!(
        decision.allowed && decision.messages.is_empty(),
        "{decision:?}"
    );
}

#[test]
fn evaluation_errors_follow_the_failure_policy_with_the_apiservers_words() {
    let cel = json!({"validations": [{"expression": "object.spec.nothing == 1"}]});
    let fail = judge(
        cel_policy("p", cel.clone(), json!({})),
        &create(&limited_pod()),
    );
    assert!(!fail.allowed);
    assert_eq!(
        fail.messages,
        [
            "ClusterValidatePolicy/p: spec.validateRules[0].cel.validations[0].expression: expression 'object.spec.nothing == 1' resulted in error: no such key: nothing"
        ]
    );
    let ignore = judge(
        cel_policy("p", cel, json!({"failurePolicy": "Ignore"})),
        &create(&limited_pod()),
    );
    assert!(ignore.allowed, "{ignore:?}");
    assert_eq!(ignore.warnings.len(), 1, "{ignore:?}");
    assert!(
        ignore.warnings[0].contains("resulted in error: no such key: nothing"),
        "{ignore:?}"
    );
}

#[test]
fn a_validation_that_fails_still_denies_beside_one_that_errs() {
    let cel = json!({"validations": [
        {"expression": "object.spec.nothing == 1"},
        {"expression": "false", "message": "always"},
    ]});
    let decision = judge(
        cel_policy("p", cel, json!({"failurePolicy": "Ignore"})),
        &create(&limited_pod()),
    );
    assert!(!decision.allowed);
    assert_eq!(decision.messages, ["ClusterValidatePolicy/p: always"]);
}

#[test]
fn old_object_and_request_are_the_apiservers() {
    let cel = json!({"validations": [
        {"expression": "request.operation != 'UPDATE' || oldObject.metadata.name == object.metadata.name",
         "message": "renamed"},
        {"expression": "oldObject == null || request.operation == 'UPDATE'", "message": "old object on create"},
    ]});
    let policy = cel_policy("p", cel, json!({}));
    assert!(judge(policy.clone(), &create(&limited_pod())).allowed);
    assert!(judge(policy, &request(Operation::Update, &limited_pod())).allowed);
}

#[test]
fn every_validation_that_fails_has_its_own_message() {
    let cel = json!({"validations": [
        {"expression": MEMORY_LIMIT, "message": "needs memory limits"},
        {"expression": "object.metadata.name == 'web'", "message": "ok"},
        {"expression": "object.spec.containers.all(c, c.image.startsWith('corp/'))", "message": "images from corp/ only"},
    ]});
    let warned = judge(
        cel_policy("p", cel.clone(), json!({"validationActions": ["Warn"]})),
        &create(&unlimited_pod()),
    );
    assert!(warned.allowed);
    assert_eq!(
        warned.warnings,
        [
            "ClusterValidatePolicy/p: needs memory limits",
            "ClusterValidatePolicy/p: images from corp/ only"
        ]
    );
    let denied = judge(cel_policy("p", cel, json!({})), &create(&unlimited_pod()));
    assert!(!denied.allowed);
    assert_eq!(denied.messages.len(), 2, "{denied:?}");
}

#[test]
fn warn_and_audit_actions_and_audit_annotations() {
    let cel = json!({
        "validations": [{"expression": MEMORY_LIMIT, "message": "needs memory limits"}],
        "auditAnnotations": [{"key": "containers", "valueExpression": "string(size(object.spec.containers))"}],
    });
    let decision = judge(
        cel_policy("p", cel, json!({"validationActions": ["Warn", "Audit"]})),
        &create(&unlimited_pod()),
    );
    assert!(decision.allowed);
    assert_eq!(
        decision.warnings,
        ["ClusterValidatePolicy/p: needs memory limits"]
    );
    assert_eq!(
        decision.audit_annotations.get("clustervalidatepolicy.p"),
        Some(&"needs memory limits".to_owned())
    );
    assert_eq!(
        decision
            .audit_annotations
            .get("clustervalidatepolicy.p.containers"),
        Some(&"2".to_owned())
    );
}

#[test]
fn an_error_under_fail_does_what_the_actions_say() {
    // As in a ValidatingAdmissionPolicy: a policy in Warn or Audit mode that cannot evaluate
    // warns or audits the error instead of denying (a rollout in Warn mode never blocks).
    let cel = json!({"validations": [{"expression": "object.spec.nodeName == 'x'"}]});
    let error = "spec.validateRules[0].cel.validations[0].expression: ";
    let warned = judge(
        cel_policy(
            "p",
            cel.clone(),
            json!({"validationActions": ["Warn", "Audit"]}),
        ),
        &create(&unlimited_pod()),
    );
    assert!(warned.allowed, "{warned:?}");
    assert_eq!(warned.warnings.len(), 1, "{warned:?}");
    assert!(
        warned.warnings[0].starts_with(&format!("ClusterValidatePolicy/p: {error}")),
        "{warned:?}"
    );
    let audited = warned.audit_annotations.get("clustervalidatepolicy.p");
    assert!(audited.is_some_and(|a| a.starts_with(error)), "{warned:?}");
    let denied = judge(cel_policy("p", cel, json!({})), &create(&unlimited_pod()));
    assert!(!denied.allowed);
    assert!(denied.messages[0].starts_with(&format!("ClusterValidatePolicy/p: {error}")));
}

#[test]
fn expressions_are_checked_when_written_by_field_path() {
    let errors = compile_errors(&cel_policy(
        "p",
        json!({
            "matchConditions": [{"name": "m", "expression": "object.metadata.name"}],
            "variables": [{"name": "9bad", "expression": "1"}, {"name": "ok", "expression": "1 +"}],
            "validations": [
                {"expression": "objekt.spec"},
                {"expression": "1 + 1"},
                {"expression": "true", "messageExpression": "42"},
                {"expression": "authorizer.group('apps').check('get').allowed()"},
                {"expression": "base64.encode(b'x') == ''"},
            ],
            "auditAnnotations": [{"key": "Bad Key", "valueExpression": "'x'"}],
        }),
        json!({}),
    ));
    let at = "spec.validateRules[0].cel";
    // `dyn` is not `bool`: kube-apiserver refuses a field read alone.
    assert_error(
        &errors,
        &format!("{at}.matchConditions[0].expression"),
        "must evaluate to bool but got dyn",
    );
    assert_error(
        &errors,
        &format!("{at}.variables[0].name"),
        "is not a CEL identifier",
    );
    assert_error(
        &errors,
        &format!("{at}.variables[1].expression"),
        "Syntax error",
    );
    assert_error(
        &errors,
        &format!("{at}.validations[0].expression"),
        "undeclared reference to 'objekt'",
    );
    assert_error(
        &errors,
        &format!("{at}.validations[1].expression"),
        "must evaluate to bool but got int",
    );
    assert_error(
        &errors,
        &format!("{at}.validations[2].messageExpression"),
        "must evaluate to string but got int",
    );
    assert_error(
        &errors,
        &format!("{at}.validations[3].expression"),
        "`authorizer` (authorization checks) is not available",
    );
    assert_error(
        &errors,
        &format!("{at}.validations[4].expression"),
        "undeclared reference to 'base64'",
    );
    assert_error(
        &errors,
        &format!("{at}.auditAnnotations[0].key"),
        "is not a valid key",
    );
}

#[test]
fn what_a_rules_variables_hold_together_is_bounded() {
    // Each variable fits the per-call cost limit, and all of them the rule's budget, but
    // together they would hold some 100 MiB: the third one is refused.
    let variables: Vec<Value> = (0..4)
        .map(|i| json!({"name": format!("r{i}"), "expression": "lists.range(900000)"}))
        .collect();
    let validations: Vec<Value> = (0..4)
        .map(|i| json!({"expression": format!("variables.r{i}.size() > 0")}))
        .collect();
    let cel = json!({"variables": variables, "validations": validations});
    let decision = judge(cel_policy("p", cel, json!({})), &create(&limited_pod()));
    assert!(!decision.allowed);
    assert!(
        decision.messages[0].ends_with(
            "resulted in error: the rule's variables hold more than 2000000 values (kanon's bound on one rule's memory)"
        ),
        "{decision:?}"
    );
    // Two of them are fine.
    let variables: Vec<Value> = (0..2)
        .map(|i| json!({"name": format!("r{i}"), "expression": "lists.range(900000)"}))
        .collect();
    let validations: Vec<Value> = (0..2)
        .map(|i| json!({"expression": format!("variables.r{i}.size() > 0")}))
        .collect();
    let cel = json!({"variables": variables, "validations": validations});
    let decision = judge(cel_policy("p", cel, json!({})), &create(&limited_pod()));
    assert!(decision.allowed, "{decision:?}");
}

#[test]
fn a_rule_that_runs_too_long_ends_at_its_cost_bound() {
    let nested = "[1,2,3,4,5,6,7,8,9,10].all(a, [1,2,3,4,5,6,7,8,9,10].all(b, [1,2,3,4,5,6,7,8,9,10].all(c, \
        [1,2,3,4,5,6,7,8,9,10].all(d, [1,2,3,4,5,6,7,8,9,10].all(e, [1,2,3,4,5,6,7,8,9,10].all(f, a + b + c + d + e + f > 0))))))";
    let cel = json!({"validations": [{"expression": nested}]});
    let decision = judge(cel_policy("p", cel, json!({})), &create(&limited_pod()));
    assert!(!decision.allowed);
    assert!(
        decision.messages[0]
            .ends_with("resulted in error: operation cancelled: actual cost limit exceeded"),
        "{decision:?}"
    );
}

#[test]
fn cel_mutations_patch_in_order_after_the_program() {
    let policy = cop(
        "defaults",
        json!({
            "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
            "overrideRules": [{"overriders": {
                "cel": {
                    "matchConditions": [{"name": "no-tier", "expression": "!has(object.metadata.labels.tier)"}],
                    "mutations": [
                        {"patchType": "JSONPatch", "jsonPatch": {"expression":
                            "[JSONPatch{op: 'add', path: '/metadata/labels/tier', value: 'web'}]"}},
                        {"patchType": "JSONPatch", "jsonPatch": {"expression":
                            "object.spec.containers.filter(c, !has(c.resources)).map(c, JSONPatch{op: 'add', path: '/spec/containers/' + string(object.spec.containers.indexOf(c)) + '/resources', value: {'limits': {'memory': '128Mi'}}})"}},
                        {"patchType": "JSONPatch", "jsonPatch": {"expression":
                            "[JSONPatch{op: 'add', path: '/metadata/annotations', value: {'tier-seen': object.metadata.labels.tier}}]"}},
                    ],
                },
                "plaintext": [{"op": "add", "path": "/metadata/labels/checked", "value": "yes"}],
            }}],
        }),
    );
    let set = set_of(&[policy]);
    let original = unlimited_pod();
    let decision = mutate_create(&set, &original);
    assert!(decision.allowed, "{decision:?}");
    let patched = decision.patched.clone().expect("patched");
    assert_eq!(patched["metadata"]["labels"]["tier"], "web");
    assert_eq!(patched["metadata"]["labels"]["checked"], "yes");
    // The third mutation saw the first one's label.
    assert_eq!(patched["metadata"]["annotations"]["tier-seen"], "web");
    assert_eq!(
        patched["spec"]["containers"][1]["resources"]["limits"]["memory"],
        "128Mi"
    );
    assert_patch_is_diff(&original, &decision);

    // With the label already there, the match condition skips the CEL block.
    let mut labelled = unlimited_pod();
    labelled["metadata"]["labels"]["tier"] = json!("db");
    let decision = mutate_create(&set, &labelled);
    let patched = decision.patched.expect("patched");
    assert!(
        patched["metadata"].get("annotations").is_none(),
        "{patched}"
    );
    assert_eq!(patched["metadata"]["labels"]["checked"], "yes");
}

#[test]
fn a_mutation_that_does_not_apply_fails_under_the_failure_policy() {
    let policy = cop(
        "broken",
        json!({
            "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
            "overrideRules": [{"overriders": {"cel": {"mutations": [
                {"patchType": "JSONPatch", "jsonPatch": {"expression":
                    "[JSONPatch{op: 'replace', path: '/spec/nothing/here', value: 1}]"}},
            ]}}}],
        }),
    );
    let decision = mutate_create(&set_of(&[policy]), &limited_pod());
    assert!(!decision.allowed, "{decision:?}");
    assert!(
        decision.messages[0].contains("spec.overrideRules[0].overriders.cel.mutations[0]"),
        "{decision:?}"
    );
}

#[test]
fn a_json_patch_means_what_it_means_in_a_mutating_admission_policy() {
    // kube-apiserver's patch library: `replace` of an absent member adds it, a negative index
    // counts from the end; its words when a patch does not apply.
    let policy = cop(
        "apiserver-patch",
        json!({
            "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
            "overrideRules": [{"overriders": {"cel": {"mutations": [
                {"patchType": "JSONPatch", "jsonPatch": {"expression":
                    "[JSONPatch{op: 'replace', path: '/metadata/labels/tier', value: 'web'}, JSONPatch{op: 'replace', path: '/spec/containers/-1/image', value: 'last'}]"}},
            ]}}}],
        }),
    );
    let decision = mutate_create(&set_of(&[policy]), &limited_pod());
    assert!(decision.allowed, "{decision:?}");
    let patched = decision.patched.as_ref().expect("patched");
    assert_eq!(patched["metadata"]["labels"]["tier"], "web", "{patched}");
    let containers = patched["spec"]["containers"]
        .as_array()
        .expect("containers");
    assert_eq!(
        containers.last().map(|c| &c["image"]),
        Some(&json!("last")),
        "{patched}"
    );

    let broken = cop(
        "broken",
        json!({
            "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
            "overrideRules": [{"overriders": {"cel": {"mutations": [
                {"patchType": "JSONPatch", "jsonPatch": {"expression":
                    "[JSONPatch{op: 'remove', path: '/metadata/labels/none'}]"}},
            ]}}}],
        }),
    );
    let decision = mutate_create(&set_of(&[broken]), &limited_pod());
    assert_eq!(
        decision.messages,
        [
            "ClusterOverridePolicy/broken: spec.overrideRules[0].overriders.cel.mutations[0].jsonPatch.expression: JSON Patch: error in remove for path: '/metadata/labels/none': Unable to remove nonexistent key: none: missing value"
        ]
    );
}

#[test]
fn a_field_the_kind_does_not_declare_fails_the_request_whatever_the_failure_policy() {
    let mut policy = cop(
        "colour",
        json!({
            "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
            "overrideRules": [{"overriders": {"cel": {"mutations": [
                {"patchType": "JSONPatch", "jsonPatch": {"expression":
                    "[JSONPatch{op: 'add', path: '/spec/containers/0/colour', value: 'blue'}]"}},
            ]}}}],
        }),
    );
    let decision = mutate_create(&set_of(&[policy.clone()]), &limited_pod());
    assert!(!decision.allowed, "{decision:?}");
    assert_eq!(
        decision.messages,
        [
            "ClusterOverridePolicy/colour: spec.overrideRules[0].overriders.cel.mutations[0].jsonPatch.expression: strict decoding error: unknown field \"spec.containers[0].colour\""
        ]
    );
    // As in a MutatingAdmissionPolicy, where kube-apiserver's strict decoding fails the request,
    // `failurePolicy: Ignore` does not let it through.
    policy["spec"]["failurePolicy"] = json!("Ignore");
    let ignored = mutate_create(&set_of(&[policy]), &limited_pod());
    assert_eq!(ignored.messages, decision.messages);
    assert!(!ignored.allowed, "{ignored:?}");
}

#[test]
fn a_value_the_go_type_cannot_hold_fails_the_request_whatever_the_failure_policy() {
    let mut policy = cop(
        "mistyped",
        json!({
            "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
            "failurePolicy": "Ignore",
            "overrideRules": [{"overriders": {"cel": {"mutations": [
                {"patchType": "JSONPatch", "jsonPatch": {"expression":
                    "[JSONPatch{op: 'add', path: '/spec/containers/0/image', value: {'name': 'nginx'}}]"}},
            ]}}}],
        }),
    );
    for failure_policy in ["Ignore", "Fail"] {
        policy["spec"]["failurePolicy"] = json!(failure_policy);
        let decision = mutate_create(&set_of(&[policy.clone()]), &limited_pod());
        assert!(!decision.allowed, "{failure_policy}: {decision:?}");
        // What kube-apiserver answers when the patched Pod does not decode (500).
        assert_eq!(
            decision.messages,
            [
                "ClusterOverridePolicy/mistyped: spec.overrideRules[0].overriders.cel.mutations[0].jsonPatch.expression: the patched object does not decode into its kind's Go type: json: cannot unmarshal object into Go struct field Container.spec.containers.image of type string"
            ],
            "{failure_policy}"
        );
    }
}

#[test]
fn a_mutation_that_fails_leaves_the_others_applied_as_in_a_mutating_admission_policy() {
    // The same rule as a MutatingAdmissionPolicy's mutations (which `kanon convert` makes of
    // it): the failing second is left out, the third still runs; under Ignore the error is
    // dropped and the others' changes kept.
    let policy = cop(
        "in-order",
        json!({
            "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
            "failurePolicy": "Ignore",
            "overrideRules": [{"overriders": {"cel": {"mutations": [
                {"patchType": "JSONPatch", "jsonPatch": {"expression":
                    "[JSONPatch{op: 'add', path: '/metadata/labels/first', value: '1'}]"}},
                {"patchType": "JSONPatch", "jsonPatch": {"expression":
                    "[JSONPatch{op: 'remove', path: '/metadata/labels/absent'}]"}},
                {"patchType": "JSONPatch", "jsonPatch": {"expression":
                    "[JSONPatch{op: 'add', path: '/metadata/labels/third', value: '3'}]"}},
            ]}}}],
        }),
    );
    let decision = mutate_create(&set_of(&[policy]), &limited_pod());
    assert!(decision.allowed, "{decision:?}");
    let patched = decision.patched.as_ref().expect("patched");
    assert_eq!(patched["metadata"]["labels"]["first"], "1", "{patched}");
    assert_eq!(patched["metadata"]["labels"]["third"], "3", "{patched}");
}

#[test]
fn a_constant_patch_is_checked_for_each_kind_it_meets() {
    // `spec.replicas` is a Deployment's field, not a DaemonSet's: found clean for Deployments
    // (and not checked again for them), the same patch still fails for a DaemonSet.
    let policy = cop(
        "replicas",
        json!({
            "resourceSelectors": [
                {"apiVersion": "apps/v1", "kind": "Deployment"},
                {"apiVersion": "apps/v1", "kind": "DaemonSet"},
            ],
            "overrideRules": [{"overriders": {"cel": {"mutations": [
                {"patchType": "JSONPatch", "jsonPatch": {"expression":
                    "[JSONPatch{op: 'add', path: '/spec/replicas', value: 3}]"}},
            ]}}}],
        }),
    );
    let set = set_of(&[policy]);
    let workload = |kind: &str| {
        json!({"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": "w", "namespace": "default"},
               "spec": {"template": {"spec": {"containers": [{"name": "a", "image": "a"}]}}}})
    };
    for _ in 0..2 {
        let deployment = mutate_create(&set, &workload("Deployment"));
        assert!(deployment.allowed, "{deployment:?}");
        assert_eq!(
            deployment.patched.as_ref().map(|p| &p["spec"]["replicas"]),
            Some(&json!(3))
        );
        let daemon_set = mutate_create(&set, &workload("DaemonSet"));
        assert!(!daemon_set.allowed, "{daemon_set:?}");
        assert!(
            daemon_set.messages[0]
                .ends_with("strict decoding error: unknown field \"spec.replicas\""),
            "{daemon_set:?}"
        );
    }
}

/// A ClusterOverridePolicy selecting Pods whose one rule is a CEL mutation applying the
/// configuration `expression`.
fn applying(name: &str, expression: &str) -> Value {
    cop(
        name,
        json!({
            "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
            "overrideRules": [{"overriders": {"cel": {"mutations": [
                {"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": expression}},
            ]}}}],
        }),
    )
}

#[test]
fn apply_configurations_merge_by_the_kinds_schema() {
    let policy = applying(
        "sidecar-env",
        "Object{metadata: Object.metadata{labels: {'env-set': 'yes'}}, spec: Object.spec{containers: [Object.spec.containers{name: object.spec.containers[0].name, env: [Object.spec.containers.env{name: 'MODE', value: 'strict'}]}]}}",
    );
    let set = set_of(&[policy]);
    let original = limited_pod();
    let decision = mutate_create(&set, &original);
    assert!(decision.allowed, "{decision:?}");
    let patched = decision.patched.clone().expect("patched");
    // Merged into the first container by its name; the container keeps everything else (and
    // the Pod's defaulting, which runs after each mutation, gives it requests from its limits).
    assert_eq!(patched["spec"]["containers"][0]["env"][0]["name"], "MODE");
    assert_eq!(
        patched["spec"]["containers"][0]["resources"]["limits"],
        original["spec"]["containers"][0]["resources"]["limits"]
    );
    assert_eq!(
        patched["spec"]["containers"][0]["resources"]["requests"],
        original["spec"]["containers"][0]["resources"]["limits"]
    );
    assert_eq!(
        patched["spec"]["containers"].as_array().map(Vec::len),
        original["spec"]["containers"].as_array().map(Vec::len)
    );
    assert_eq!(patched["metadata"]["labels"]["env-set"], "yes");
    assert_patch_is_diff(&original, &decision);

    // Through the webhook (an object kube-apiserver defaulted: here the one just patched) the
    // merge is walked only where the configuration reaches, with the same result.
    let again = applying(
        "sidecar-env",
        "Object{metadata: Object.metadata{labels: {'env-set': 'again', 'new': 'yes'}}, spec: Object.spec{containers: [Object.spec.containers{name: object.spec.containers[1].name, env: [Object.spec.containers.env{name: 'MODE', value: 'lax'}]}, Object.spec.containers{name: 'added', image: 'registry.corp/added:1'}]}}",
    );
    let set = set_of(&[again]);
    let offline = mutate_create(&set, &patched);
    let webhook =
        kanon_engine::block_on(set.mutate(&create(&patched).defaulted_on_arrival(), &NoObjects));
    assert!(webhook.allowed, "{webhook:?}");
    assert_eq!(webhook.patched, offline.patched);
    assert_eq!(webhook.patch, offline.patch);
    assert_patch_is_diff(&patched, &webhook);

    // An atomic list is refused, as kube-apiserver refuses it; and a result that is not an
    // Object is refused when written.
    let atomic = cop(
        "args",
        json!({
            "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
            "overrideRules": [{"overriders": {"cel": {"mutations": [
                {"patchType": "ApplyConfiguration", "applyConfiguration": {"expression":
                    "Object{spec: Object.spec{containers: [Object.spec.containers{name: 'app', args: ['-v']}]}}"}},
            ]}}}],
        }),
    );
    let decision = mutate_create(&set_of(std::slice::from_ref(&atomic)), &limited_pod());
    assert!(!decision.allowed, "{decision:?}");
    assert!(
        decision.messages[0].contains(
            "error applying patch: invalid ApplyConfiguration: may not mutate atomic arrays, maps or structs: .spec.containers[0].args"
        ),
        "{decision:?}"
    );
    // A configuration that reads nothing is made once and checked against the kind once:
    // through the webhook it is refused on every request, not only the first.
    let atomic_set = set_of(&[atomic]);
    for _ in 0..2 {
        let decision = kanon_engine::block_on(
            atomic_set.mutate(&create(&limited_pod()).defaulted_on_arrival(), &NoObjects),
        );
        assert!(!decision.allowed, "{decision:?}");
        assert!(
            decision.messages[0].contains("may not mutate atomic arrays"),
            "{decision:?}"
        );
    }
    // And one that holds is applied the same on every request.
    let labels = set_of(&[applying(
        "labels",
        "Object{metadata: Object.metadata{labels: {'a': 'b'}}}",
    )]);
    for _ in 0..2 {
        let decision = kanon_engine::block_on(
            labels.mutate(&create(&limited_pod()).defaulted_on_arrival(), &NoObjects),
        );
        assert!(decision.allowed, "{decision:?}");
        assert_eq!(
            serde_json::to_value(&decision.patch).expect("JSON"),
            json!([{"op": "add", "path": "/metadata/labels/a", "value": "b"}])
        );
    }
    let errors = compile_errors(&cop(
        "p",
        json!({"overrideRules": [{"overriders": {"cel": {"mutations": [
            {"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": "[JSONPatch{op: 'remove', path: '/a'}]"}},
        ]}}}]}),
    ));
    assert_error(
        &errors,
        "spec.overrideRules[0].overriders.cel.mutations[0].applyConfiguration.expression",
        "must evaluate to Object but got list(JSONPatch)",
    );
}

/// A ConfigMap of per-namespace limits and a ReplicaSet owning the Pod, standing for the
/// cluster.
fn cluster() -> kanon_engine::ObjectStore {
    let mut store = kanon_engine::ObjectStore::new();
    store
        .insert(json!({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": "limits", "namespace": "shop"},
                       "data": {"containers": "1"}}))
        .unwrap();
    store
        .insert(json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
                       "metadata": {"name": "web-abc", "namespace": "shop", "uid": "rs-uid",
                                    "labels": {"team": "payments"}}}))
        .unwrap();
    store
}

#[test]
fn references_bring_what_only_kanon_has() {
    let mut pod = unlimited_pod();
    pod["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet",
        "name": "web-abc", "uid": "rs-uid", "controller": true}]);
    let cel = json!({
        "references": {
            "limits": {"from": "k8s", "k8s": {"apiVersion": "v1", "kind": "ConfigMap",
                       "namespace": "{{ object.metadata.namespace }}", "name": "limits"}},
            "team": {"from": "owner", "path": "/metadata/labels/team"},
        },
        "validations": [
            {"expression": "size(object.spec.containers) <= int(references.limits.data.containers)",
             "messageExpression": "'team ' + references.team + ' may run ' + references.limits.data.containers + ' container(s)'"},
        ],
    });
    let set = set_of(&[cel_policy("p", cel, json!({}))]);
    let decision = kanon_engine::block_on(set.validate(&create(&pod), None, &cluster()));
    assert_eq!(
        decision.messages,
        ["ClusterValidatePolicy/p: team payments may run 1 container(s)"]
    );

    // A reference that cannot be resolved fails under the failure policy, naming it.
    let cel = json!({
        "references": {"missing": {"from": "k8s", "k8s": {"apiVersion": "v1", "kind": "ConfigMap",
                       "namespace": "shop", "name": "nothing"}}},
        "validations": [{"expression": "true"}],
    });
    let set = set_of(&[cel_policy("p", cel, json!({}))]);
    let decision = kanon_engine::block_on(set.validate(&create(&pod), None, &cluster()));
    assert!(!decision.allowed);
    assert!(
        decision.messages[0].contains("spec.validateRules[0].cel.references.missing.k8s: v1 ConfigMap shop/nothing was not found"),
        "{decision:?}"
    );

    let errors = compile_errors(&cel_policy(
        "p",
        json!({"references": {"not-a-name": {"from": "owner"}}, "validations": [{"expression": "true"}]}),
        json!({}),
    ));
    assert_error(
        &errors,
        "spec.validateRules[0].cel.references.not-a-name",
        "is not a CEL identifier",
    );
}

/// The warnings compiling `doc` gives, as `field: message`.
fn warnings_of(doc: &Value) -> Vec<String> {
    compiled(doc)
        .warnings
        .iter()
        .map(|w| format!("{}: {}", w.field, w.message))
        .collect()
}

#[test]
fn expressions_are_type_checked_against_the_selected_kinds() {
    // Correct expressions over Pods and Deployments: no warning.
    let good = cel_policy(
        "good",
        json!({
            "variables": [{"name": "names", "expression": "object.spec.containers.map(c, c.name)"}],
            "validations": [
                {"expression": MEMORY_LIMIT},
                {"expression": "object.spec.?hostNetwork.orValue(false) == false && size(variables.names) > 0"},
                {"expression": "object.metadata.name.startsWith('web') || has(object.metadata.labels)",
                 "messageExpression": "object.metadata.name + ' ' + variables.names.join(',')"},
            ],
        }),
        json!({}),
    );
    assert_eq!(warnings_of(&good), Vec::<String>::new());

    // A field the kind does not have: a warning naming the kind and the column, the policy
    // still compiles (at run time `object` is dyn, as in kube-apiserver).
    let typo = cel_policy(
        "typo",
        json!({"validations": [
            {"expression": "object.spec.containerz.all(c, has(c.resources))"},
            {"expression": "object.spec.containers.all(c, has(c.resource.limits))"},
        ]}),
        json!({}),
    );
    assert_eq!(
        warnings_of(&typo),
        [
            "spec.validateRules[0].cel.validations[0].expression: checked against Pod (v1): ERROR: <input>:1:12: undefined field 'containerz'",
            "spec.validateRules[0].cel.validations[1].expression: checked against Pod (v1): ERROR: <input>:1:36: undefined field 'resource'",
        ]
    );

    // Mutations too, on Deployments.
    let mutation = cop(
        "m",
        json!({
            "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment"}],
            "overrideRules": [{"overriders": {"cel": {"mutations": [
                {"patchType": "JSONPatch", "jsonPatch": {"expression":
                    "object.spec.replica > 3 ? [JSONPatch{op: 'replace', path: '/spec/replicas', value: 3}] : []"}},
            ]}}}],
        }),
    );
    assert_eq!(
        warnings_of(&mutation),
        [
            "spec.overrideRules[0].overriders.cel.mutations[0].jsonPatch.expression: checked against Deployment (apps/v1): ERROR: <input>:1:12: undefined field 'replica'"
        ]
    );
}

/// A validation costing about 600,000 units: under kube-apiserver's per-call limit of 1,000,000.
const COSTLY: &str = "lists.range(600000).size() > 0";

/// One CEL rule of `validations` costly validations.
fn costly_rule(validations: usize) -> Value {
    let validations: Vec<Value> = (0..validations)
        .map(|_| json!({"expression": COSTLY}))
        .collect();
    json!({"targetOperations": ["CREATE", "UPDATE"], "cel": {"validations": validations}})
}

/// Pods, with `rules` costly rules of `validations` validations each.
fn costly_spec(rules: usize, validations: usize) -> Value {
    let rules: Vec<Value> = (0..rules).map(|_| costly_rule(validations)).collect();
    json!({
        "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
        "validateRules": rules,
    })
}

#[test]
fn a_policys_rules_share_one_budget_on_one_request() {
    // Each rule's ten validations (6,000,000 units) fit the budget, the two rules together
    // (12,000,000) do not: the budget is the policy's, as a binding's in kube-apiserver.
    let policy = cvp("costly", costly_spec(2, 10));
    let decision = judge(policy, &create(&limited_pod()));
    assert!(!decision.allowed, "{decision:?}");
    assert_eq!(
        decision.messages,
        [
            "ClusterValidatePolicy/costly: spec.validateRules[1].cel: validation failed due to running out of cost budget, no further validation rules will be run"
        ],
    );
    // One rule of them is within it.
    let decision = judge(cvp("costly", costly_spec(1, 10)), &create(&limited_pod()));
    assert!(decision.allowed, "{decision:?}");
}

#[test]
fn the_policies_of_one_owner_share_a_ceiling_on_one_review() {
    // Twelve cluster policies of 4,800,000 units each, each within its budget; together past
    // the cluster's ceiling of 50,000,000 on one review: the last ones fail, naming it.
    let mut policies: Vec<Value> = (0..12)
        .map(|i| cvp(&format!("costly-{i:02}"), costly_spec(1, 8)))
        .collect();
    // The namespace's own policy has a ceiling of its own: the cluster's spent, it still runs.
    policies.push(vp(
        "shop",
        "team-label",
        json!({
            "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
            "validateRules": [{"targetOperations": ["CREATE"], "cel": {"validations": [
                {"expression": "has(object.metadata.labels.team)", "message": "a team label is required"}
            ]}}],
        }),
    ));
    let set = set_of(&policies);
    let decision = kanon_engine::block_on(set.validate(&create(&limited_pod()), None, &NoObjects));
    assert!(!decision.allowed);
    let ceiling = "validation failed due to running out of the review's cost budget (50000000 units for the cluster's policies on one request), no further validation rules will be run";
    let spent: Vec<&String> = decision
        .messages
        .iter()
        .filter(|m| m.ends_with(ceiling))
        .collect();
    assert!(
        spent.len() == 2 && spent[0].starts_with("ClusterValidatePolicy/costly-10: "),
        "{:#?}",
        decision.messages
    );
    assert_eq!(
        decision.messages.last().map(String::as_str),
        Some("ValidatePolicy/shop/team-label: a team label is required"),
    );
    // The next review has a ceiling of its own.
    let again = kanon_engine::block_on(set.validate(&create(&limited_pod()), None, &NoObjects));
    assert_eq!(again.messages, decision.messages);
}

#[test]
fn a_tenant_that_spends_its_ceiling_fails_only_its_own_policies() {
    // A namespace's twelve costly policies on Deployments spend its ceiling before the
    // cluster's Pod policy judges the Deployment's pod template; that policy, under `Ignore`,
    // is not skipped for want of budget: it has the cluster's ceiling.
    let mut policies: Vec<Value> = (0..12)
        .map(|i| {
            let mut spec = costly_spec(1, 8);
            spec["resourceSelectors"] = json!([{"apiVersion": "apps/v1", "kind": "Deployment"}]);
            vp("shop", &format!("costly-{i:02}"), spec)
        })
        .collect();
    policies.push(cvp(
        "team-label",
        json!({
            "failurePolicy": "Ignore",
            "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
            "validateRules": [{"targetOperations": ["CREATE"], "cel": {"validations": [
                {"expression": "has(object.metadata.labels.team)", "message": "a team label is required"}
            ]}}],
        }),
    ));
    let set = set_of(&policies);
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "app", "image": "app:1"}]}},
        },
    });
    let decision = kanon_engine::block_on(set.validate(&create(&deployment), None, &NoObjects));
    let ceiling = "(50000000 units for the namespace's own policies on one request)";
    assert!(
        decision.messages[0].starts_with("ValidatePolicy/shop/costly-10: ")
            && decision.messages[0].contains(ceiling),
        "{:#?}",
        decision.messages
    );
    assert_eq!(
        decision.messages.last().map(String::as_str),
        Some("ClusterValidatePolicy/team-label: spec.template: a team label is required"),
    );
    assert!(decision.warnings.is_empty(), "{:#?}", decision.warnings);
}

#[test]
fn a_policys_match_conditions_have_a_budget_of_their_own() {
    // As kube-apiserver meters a binding's match conditions (2,500,000 units, apart from the
    // validations' 10,000,000), so a ClusterValidatePolicy that `kanon convert` made of a
    // ValidatingAdmissionPolicy decides as the original: two conditions of ~900,000 units fit,
    // three do not.
    let with = |count: usize| {
        let conditions: Vec<Value> = (0..count)
            .map(|i| json!({"name": format!("c{i}"), "expression": "lists.range(900000).size() > 0"}))
            .collect();
        let policy = cel_policy(
            "costly-conditions",
            json!({"matchConditions": conditions,
                   "validations": [{"expression": "false", "message": "matched"}]}),
            json!({"failurePolicy": "Fail"}),
        );
        judge(policy, &create(&limited_pod()))
    };
    let two = with(2);
    assert_eq!(
        two.messages,
        ["ClusterValidatePolicy/costly-conditions: matched"],
        "{:?}",
        two.messages
    );
    let three = with(3);
    assert!(!three.allowed);
    assert!(
        three.messages[0].contains("running out of cost budget"),
        "{:?}",
        three.messages
    );
}

/// `request` and `namespaceObject` have kube-apiserver's static types in kanon's rules as in a
/// VAP: a field they do not have is refused when written, at its field path; a variable whose
/// expression gives an object or an optional is `dyn` to the expressions that read it.
#[test]
fn request_and_namespace_object_are_typed_as_kube_apiserver_types_them() {
    let errors = compile_errors(&cel_policy(
        "p",
        json!({"validations": [
            {"expression": "request.userInfo.username != ''"},
            {"expression": "request.namee == 'a'"},
            {"expression": "namespaceObject.metadata.uid == ''"},
        ]}),
        json!({}),
    ));
    assert_error(
        &errors,
        "spec.validateRules[0].cel.validations[1].expression",
        "undefined field 'namee'",
    );
    assert_error(
        &errors,
        "spec.validateRules[0].cel.validations[2].expression",
        "undefined field 'uid'",
    );
    assert_eq!(errors.len(), 2, "{errors:?}");

    // kube-apiserver 1.35.8 accepted this policy as a VAP: `variables.o` (an optional) and
    // `variables.u` (a kubernetes.UserInfo) are dyn there.
    let policy = cel_policy(
        "p",
        json!({
            "variables": [
                {"name": "o", "expression": "object.?spec"},
                {"name": "u", "expression": "request.userInfo"},
            ],
            "validations": [{"expression": "variables.o + 1 > 0 || variables.u.usernamee == ''"}],
        }),
        json!({}),
    );
    assert!(kanon_engine::compile_document(&policy).is_ok());
}

/// A ClusterOverridePolicy selecting `kind` whose one rule is the CEL JSON patch `expression`.
fn labelling(name: &str, kind: &str, expression: &str) -> Value {
    cop(
        name,
        json!({
            "resourceSelectors": [{"apiVersion": "v1", "kind": kind}],
            "overrideRules": [{"overriders": {"cel": {"mutations": [
                {"patchType": "JSONPatch", "jsonPatch": {"expression": expression}},
            ]}}}],
        }),
    )
}

#[test]
fn after_a_label_mutation_the_object_is_defaulted_unless_nothing_else_changed_it() {
    // Each CEL mutation of a built-in kind is followed by the apiserver's defaulting, as
    // between a MutatingAdmissionPolicy's mutations. A label change alone needs none once
    // the object is defaulted; a change by another rule in between does.
    let container = json!({"name": "late", "image": "registry.corp/late:1"});
    let policies = [
        labelling(
            "a-first",
            "Pod",
            "[JSONPatch{op: 'add', path: '/metadata/labels/first', value: 'yes'}]",
        ),
        cop(
            "b-plaintext",
            json!({
                "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
                "overrideRules": [{"overriders": {"plaintext": [
                    {"op": "add", "path": "/spec/containers/-", "value": container},
                ]}}],
            }),
        ),
        labelling(
            "c-last",
            "Pod",
            "[JSONPatch{op: 'add', path: '/metadata/labels/last', value: 'yes'}]",
        ),
    ];
    let set = set_of(&policies);
    let original = limited_pod();
    let decision = mutate_create(&set, &original);
    assert!(decision.allowed, "{decision:?}");
    let patched = decision.patched.clone().expect("patched");
    assert_eq!(patched["metadata"]["labels"]["last"], "yes");
    // The container the plaintext rule added was defaulted after the last label mutation.
    assert_eq!(patched["spec"]["containers"][2]["name"], "late");
    assert_eq!(
        patched["spec"]["containers"][2]["imagePullPolicy"], "IfNotPresent",
        "{patched:#}"
    );
    assert_eq!(
        patched["spec"]["containers"][2]["terminationMessagePolicy"],
        "File"
    );
    assert_patch_is_diff(&original, &decision);

    // A Namespace's defaulting reads its labels: the name label a mutation removes after
    // another one comes back.
    let set = set_of(&[
        labelling(
            "a-first",
            "Namespace",
            "[JSONPatch{op: 'add', path: '/metadata/labels/first', value: 'yes'}]",
        ),
        labelling(
            "b-unname",
            "Namespace",
            "[JSONPatch{op: 'remove', path: '/metadata/labels/kubernetes.io~1metadata.name'}]",
        ),
    ]);
    let namespace = json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "shop", "labels": {"kubernetes.io/metadata.name": "shop"}},
    });
    let decision = mutate_create(&set, &namespace);
    let patched = decision.patched.clone().expect("patched");
    assert_eq!(
        patched["metadata"]["labels"],
        json!({"kubernetes.io/metadata.name": "shop", "first": "yes"}),
        "{decision:?}"
    );
}

#[test]
fn an_object_kube_apiserver_defaulted_is_not_defaulted_again_before_a_label_mutation() {
    // Every object a webhook receives was defaulted by the apiserver; one from a file may not
    // be, and is defaulted whole after the first mutation.
    let set = set_of(&[labelling(
        "a-first",
        "Pod",
        "[JSONPatch{op: 'add', path: '/metadata/labels/first', value: 'yes'}]",
    )]);
    let pod = limited_pod();
    let from_file = mutate_create(&set, &pod);
    let patched = from_file.patched.clone().expect("patched");
    assert_eq!(
        patched["spec"]["containers"][0]["imagePullPolicy"],
        "IfNotPresent"
    );
    let request = create(&pod).defaulted_on_arrival();
    let from_apiserver = kanon_engine::block_on(set.mutate(&request, &NoObjects));
    let patched = from_apiserver.patched.clone().expect("patched");
    assert_eq!(patched["metadata"]["labels"]["first"], "yes");
    assert!(
        patched["spec"]["containers"][0]
            .get("imagePullPolicy")
            .is_none(),
        "{patched:#}"
    );
    assert_patch_is_diff(&pod, &from_apiserver);
}
