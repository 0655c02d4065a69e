//! PolicyExceptions: checked when written (every error by field path), applied to the objects
//! they select while they have not expired, to whole policies or named rules, and visible
//! wherever they apply (warning, audit annotation, the decision's list).

mod common;

use std::sync::Arc;

use common::*;
use kanon_engine::{CompiledException, compile_exception};
use kanon_engine::{
    Decision, Evaluation, NoObjects, ObjectStore, OwnerTrust, PolicySet, Request, block_on,
};
use serde_json::{Value, json};

/// 2026-11-26T00:00:00Z.
const NOW: i64 = 1_795_651_200;

fn exception(spec: Value) -> Value {
    json!({
        "apiVersion": "policy.kanon.dev/v1alpha1", "kind": "PolicyException",
        "metadata": {"name": "legacy", "namespace": "exceptions"},
        "spec": spec,
    })
}

fn compiled_exception(spec: Value) -> Arc<CompiledException> {
    Arc::new(compile_exception(&exception(spec)).unwrap_or_else(|e| panic!("{e}")))
}

/// No `latest` images (rule `pinned`) and no privileged containers (rule `unprivileged`).
fn policy() -> Value {
    cvp(
        "pod-rules",
        json!({
            "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
            "validateRules": [
                {"name": "pinned", "cel": {"validations": [{
                    "expression": "object.spec.containers.all(c, !c.image.endsWith(':latest'))",
                    "message": "images must be pinned"}]}},
                {"name": "unprivileged", "cel": {"validations": [{
                    "expression": "object.spec.containers.all(c, !has(c.securityContext) || !c.securityContext.privileged)",
                    "message": "no privileged containers"}]}},
            ],
        }),
    )
}

/// [`policy`] with rules that have no names, as the library's.
fn unnamed_policy() -> Value {
    let mut unnamed = policy();
    for rule in unnamed["spec"]["validateRules"]
        .as_array_mut()
        .expect("rules")
    {
        rule.as_object_mut().expect("a rule").remove("name");
    }
    unnamed
}

fn bad_pod(name: &str, labels: Value) -> Value {
    let mut pod = pod("shop", name, labels);
    pod["spec"]["containers"] =
        json!([{"name": "app", "image": "nginx:latest", "securityContext": {"privileged": true}}]);
    pod
}

fn review_at(set: &PolicySet, request: &Request, now: Option<i64>) -> Decision {
    let evaluation = Evaluation::new(&NoObjects).with_now(now);
    block_on(set.review_in(request, &evaluation))
}

fn legacy_pods() -> Value {
    json!([{"apiVersion": "v1", "kind": "Pod", "labelSelector": {"matchLabels": {"app": "legacy"}}}])
}

#[test]
fn an_exception_exempts_the_objects_it_selects_and_says_so() {
    let set = set_of(&[policy()]).with_exceptions(vec![compiled_exception(json!({
        "policies": [{"kind": "ClusterValidatePolicy", "name": "pod-rules"}],
        "resourceSelectors": legacy_pods(),
        "reason": "legacy app, migration tracked in OPS-42",
    }))]);
    let exempt = review_at(
        &set,
        &create(&bad_pod("old", json!({"app": "legacy"}))),
        Some(NOW),
    );
    assert!(exempt.allowed, "{exempt:#?}");
    assert_eq!(
        exempt.warnings,
        [
            "ClusterValidatePolicy/pod-rules: exempted by PolicyException/exceptions/legacy: legacy app, migration tracked in OPS-42"
        ]
    );
    assert_eq!(
        exempt
            .audit_annotations
            .get("policyexception.exceptions.legacy"),
        Some(&"ClusterValidatePolicy/pod-rules".to_string())
    );
    assert_eq!(exempt.exceptions.len(), 1);
    assert_eq!(
        &*exempt.exceptions[0].exception,
        "PolicyException/exceptions/legacy"
    );
    assert!(
        exempt
            .policy_results
            .iter()
            .any(|r| r.outcome == kanon_engine::PolicyOutcome::Exempted)
    );
    // Another Pod is judged as before.
    let judged = review_at(
        &set,
        &create(&bad_pod("new", json!({"app": "shop"}))),
        Some(NOW),
    );
    assert!(!judged.allowed);
    assert_eq!(judged.messages.len(), 2, "{judged:#?}");
    assert!(judged.exceptions.is_empty());
}

#[test]
fn an_exception_may_exempt_from_named_rules_only() {
    let set = set_of(&[policy()]).with_exceptions(vec![compiled_exception(json!({
        "policies": [{"kind": "ClusterValidatePolicy", "name": "pod-rules", "rules": ["pinned"]}],
        "resourceSelectors": legacy_pods(),
        "reason": "the image is rebuilt nightly",
    }))]);
    let decision = review_at(
        &set,
        &create(&bad_pod("old", json!({"app": "legacy"}))),
        Some(NOW),
    );
    assert_eq!(
        decision.messages,
        ["ClusterValidatePolicy/pod-rules: no privileged containers"]
    );
    assert_eq!(
        decision.warnings,
        [
            "ClusterValidatePolicy/pod-rules: exempted (rules pinned) by PolicyException/exceptions/legacy: the image is rebuilt nightly"
        ]
    );
}

#[test]
fn an_exception_naming_a_rule_the_policy_lacks_exempts_nothing() {
    let set = set_of(&[policy()]).with_exceptions(vec![compiled_exception(json!({
        "policies": [{"kind": "ClusterValidatePolicy", "name": "pod-rules", "rules": ["pined"]}],
        "resourceSelectors": legacy_pods(),
        "reason": "a typo",
    }))]);
    let decision = review_at(
        &set,
        &create(&bad_pod("old", json!({"app": "legacy"}))),
        None,
    );
    assert_eq!(decision.messages.len(), 2, "{decision:#?}");
    assert!(decision.warnings.is_empty(), "{decision:#?}");
    assert!(decision.exceptions.is_empty());
    assert!(decision.audit_annotations.is_empty());
}

#[test]
fn an_exception_stops_applying_when_it_expires() {
    let set = set_of(&[policy()]).with_exceptions(vec![compiled_exception(json!({
        "policies": [{"kind": "ClusterValidatePolicy", "name": "pod-rules"}],
        "resourceSelectors": legacy_pods(),
        "expiresAt": "2026-11-26T00:00:00Z",
        "reason": "until the cut-over",
    }))]);
    let request = create(&bad_pod("old", json!({"app": "legacy"})));
    assert!(review_at(&set, &request, Some(NOW - 1)).allowed);
    let expired = review_at(&set, &request, Some(NOW));
    assert!(!expired.allowed, "expired at that second");
    // The denial it no longer prevents names it.
    assert_eq!(
        expired.warnings,
        [
            "ClusterValidatePolicy/pod-rules: PolicyException/exceptions/legacy no longer exempts this object: it expired at 2026-11-26T00:00:00Z"
        ]
    );
    // An object it never selected hears nothing of it.
    let other = review_at(
        &set,
        &create(&bad_pod("new", json!({"app": "shop"}))),
        Some(NOW),
    );
    assert!(other.warnings.is_empty(), "{other:#?}");
    assert!(
        !review_at(&set, &request, None).allowed,
        "without a clock an expiring exception does not apply"
    );
    let exception = &set.exceptions()[0];
    assert!(!exception.expired(Some(NOW - 1)));
    assert!(exception.expired(Some(NOW)));
}

#[test]
fn match_conditions_narrow_an_exception_and_an_error_keeps_it_from_applying() {
    let set = set_of(&[policy()]).with_exceptions(vec![compiled_exception(json!({
        "policies": [{"kind": "ClusterValidatePolicy", "name": "pod-rules"}],
        "resourceSelectors": legacy_pods(),
        "matchConditions": [{"name": "only-old", "expression": "object.metadata.name.startsWith('old')"}],
        "reason": "r",
    }))]);
    assert!(
        review_at(
            &set,
            &create(&bad_pod("old-1", json!({"app": "legacy"}))),
            None
        )
        .allowed
    );
    assert!(
        !review_at(
            &set,
            &create(&bad_pod("new-1", json!({"app": "legacy"}))),
            None
        )
        .allowed
    );

    let failing = set_of(&[policy()]).with_exceptions(vec![compiled_exception(json!({
        "policies": [{"kind": "ClusterValidatePolicy", "name": "pod-rules"}],
        "resourceSelectors": legacy_pods(),
        "matchConditions": [{"name": "broken", "expression": "object.metadata.annotations['x'] == 'y'"}],
        "reason": "r",
    }))]);
    let decision = review_at(
        &failing,
        &create(&bad_pod("old", json!({"app": "legacy"}))),
        None,
    );
    assert!(
        !decision.allowed,
        "an exception that cannot be matched exempts nothing"
    );
    assert!(
        decision.warnings[0].starts_with(
            "ClusterValidatePolicy/pod-rules: PolicyException/exceptions/legacy not applied: spec.matchConditions[0].expression: "
        ),
        "{decision:#?}"
    );
}

/// `pod-rules` and an override policy `defaults` labelling Pods, both exempted for what
/// `selectors` select.
fn policies_exempted_for(selectors: Value, reason: &str) -> PolicySet {
    let defaults = cop(
        "defaults",
        json!({
            "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
            "overrideRules": [{"overriders": {"plaintext": [
                {"op": "add", "path": "/metadata/labels/defaulted", "value": "yes"}]}}],
        }),
    );
    set_of(&[policy(), defaults]).with_exceptions(vec![compiled_exception(json!({
        "policies": [
            {"kind": "ClusterValidatePolicy", "name": "pod-rules"},
            {"kind": "ClusterOverridePolicy", "name": "defaults"},
        ],
        "resourceSelectors": selectors,
        "reason": reason,
    }))])
}

#[test]
fn an_exception_reaches_pod_templates_and_mutations() {
    let set = policies_exempted_for(legacy_pods(), "legacy");
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "old", "namespace": "shop"},
        "spec": {"selector": {"matchLabels": {"app": "legacy"}}, "template": {
            "metadata": {"labels": {"app": "legacy"}},
            "spec": bad_pod("x", json!({}))["spec"].clone(),
        }},
    });
    let decision = review_at(&set, &create(&deployment), None);
    assert!(decision.allowed, "{decision:#?}");
    assert!(decision.patch.0.is_empty(), "{decision:#?}");
    assert_eq!(
        decision
            .audit_annotations
            .get("policyexception.exceptions.legacy"),
        Some(&"ClusterOverridePolicy/defaults, ClusterValidatePolicy/pod-rules".to_string())
    );
    assert!(
        decision
            .warnings
            .iter()
            .all(|w| w.contains(": spec.template: exempted by ")),
        "{decision:#?}"
    );
}

#[test]
fn an_exception_is_checked_when_written() {
    let errors = match compile_exception(&exception(json!({
        "policies": [
            {"kind": "Deployment", "name": "x"},
            {"kind": "ValidatePolicy", "name": "y"},
            {"kind": "ClusterValidatePolicy", "name": "z", "namespace": "a", "rules": [""]},
        ],
        "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod", "labelSelector": {"matchExpressions": [{"key": "a", "operator": "Bogus"}]}}],
        "matchConditions": [{"name": "c", "expression": "1 + 1"}],
        "expiresAt": "next tuesday",
        "reason": " ",
    }))) {
        Ok(_) => panic!("the exception should not compile"),
        Err(e) => e.errors,
    };
    let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
    for field in [
        "spec.policies[0].kind",
        "spec.policies[1].namespace",
        "spec.policies[2].namespace",
        "spec.policies[2].rules[0]",
        "spec.resourceSelectors[0].labelSelector.matchExpressions[0].operator",
        "spec.matchConditions[0].expression",
        "spec.expiresAt",
        "spec.reason",
    ] {
        assert!(fields.contains(&field), "no error at {field}: {errors:#?}");
    }
    let errors = compile_exception(&exception(
        json!({"policies": [], "resourceSelectors": [], "reason": "r", "colour": 1}),
    ))
    .err()
    .map(|e| e.errors)
    .unwrap_or_default();
    assert_error(&errors, "spec.policies", "at least one policy");
    assert_error(&errors, "spec.resourceSelectors", "at least one selector");
    assert_error(&errors, "spec.colour", "unknown field");
}

#[test]
fn an_exception_that_names_what_does_not_exist_says_so() {
    let set = set_of(&[policy()]);
    let exception = compiled_exception(json!({
        "policies": [
            {"kind": "ClusterValidatePolicy", "name": "pod-rules", "rules": ["pinned", "pined"]},
            {"kind": "ClusterValidatePolicy", "name": "pod-rule"},
        ],
        "resourceSelectors": legacy_pods(),
        "reason": "r",
    }));
    assert_eq!(
        set.exception_problems(&exception),
        [
            (
                "RuleNotFound",
                "ClusterValidatePolicy/pod-rules has no rule named `pined` (its rules: `pinned`, `unprivileged`); did you mean `pinned`?".to_string()
            ),
            (
                "PolicyNotFound",
                "ClusterValidatePolicy/pod-rule does not exist; did you mean ClusterValidatePolicy/pod-rules?".to_string()
            ),
        ]
    );
    // Rule names are unique within a policy.
    let mut twice = policy();
    twice["spec"]["validateRules"][1]["name"] = json!("pinned");
    assert_error(
        &compile_errors(&twice),
        "spec.validateRules[1].name",
        "another rule of this policy is named `pinned`",
    );
}

/// An exception from `pod-rules` for the legacy Pods, named `name`, with `conditions` match
/// conditions: all but the last cost about 600,000 units each, the last is `last`.
fn costly_exception(name: &str, conditions: usize, last: &str) -> Arc<CompiledException> {
    let mut written: Vec<Value> = (1..conditions)
        .map(|i| json!({"name": format!("c{i}"), "expression": "lists.range(600000).size() > 0"}))
        .collect();
    written.push(json!({"name": "last", "expression": last}));
    let mut document = exception(json!({
        "policies": [{"kind": "ClusterValidatePolicy", "name": "pod-rules"}],
        "resourceSelectors": legacy_pods(),
        "matchConditions": written,
        "reason": "legacy app",
    }));
    document["metadata"]["name"] = json!(name);
    Arc::new(compile_exception(&document).unwrap_or_else(|e| panic!("{e}")))
}

#[test]
fn an_exceptions_conditions_have_the_apiservers_match_condition_budget() {
    // Four conditions (2,400,000 units) fit kube-apiserver's 2,500,000 for match conditions;
    // five do not, and the exception does not apply: the policy judges the Pod.
    let legacy = || create(&bad_pod("old", json!({"app": "legacy"})));
    let set = set_of(&[policy()]).with_exceptions(vec![costly_exception("fits", 5, "true")]);
    assert!(review_at(&set, &legacy(), Some(NOW)).allowed);
    let set = set_of(&[policy()]).with_exceptions(vec![costly_exception("costly", 6, "true")]);
    let judged = review_at(&set, &legacy(), Some(NOW));
    assert!(!judged.allowed, "{judged:#?}");
    assert_eq!(
        judged.warnings,
        [
            "ClusterValidatePolicy/pod-rules: PolicyException/exceptions/costly not applied: spec.matchConditions[4].expression: validation failed due to running out of cost budget, no further validation rules will be run"
        ]
    );
}

#[test]
fn the_exceptions_of_one_review_share_a_budget() {
    // Twenty exceptions whose conditions cost 2,400,000 units each and do not hold: 48,000,000
    // units on every legacy Pod's review. They share 10,000,000: the fifth and those after it
    // are not evaluated (nor applied), and say why.
    let exceptions = (0..20)
        .map(|i| costly_exception(&format!("costly-{i:02}"), 5, "false"))
        .collect();
    let set = set_of(&[policy()]).with_exceptions(exceptions);
    let judged = review_at(
        &set,
        &create(&bad_pod("old", json!({"app": "legacy"}))),
        Some(NOW),
    );
    assert!(!judged.allowed);
    let ceiling = "validation failed due to running out of the review's cost budget (10000000 units for the exceptions' conditions on one request), no further validation rules will be run";
    let spent: Vec<&String> = judged
        .warnings
        .iter()
        .filter(|w| w.ends_with(ceiling))
        .collect();
    assert_eq!(spent.len(), 16, "{:#?}", judged.warnings);
    assert!(
        spent[0].starts_with(
            "ClusterValidatePolicy/pod-rules: PolicyException/exceptions/costly-04 not applied: "
        ),
        "{spent:#?}"
    );
}

#[test]
fn a_rule_named_of_a_policy_whose_rules_have_no_names_says_so() {
    let unnamed = unnamed_policy();
    let set = set_of(&[unnamed]);
    let exception = compiled_exception(json!({
        "policies": [{"kind": "ClusterValidatePolicy", "name": "pod-rules", "rules": ["capabilities"]}],
        "resourceSelectors": legacy_pods(),
        "reason": "r",
    }));
    let missing = set.exception_problems(&exception);
    assert_eq!(missing.len(), 1, "{missing:?}");
    assert!(
        missing[0]
            .1
            .starts_with("ClusterValidatePolicy/pod-rules has no rule named `capabilities` (none of its rules has a `name`"),
        "{missing:?}"
    );
}

#[test]
fn a_rule_is_exempted_by_place_as_well_as_by_name() {
    let unnamed = unnamed_policy();
    let set = set_of(&[unnamed]).with_exceptions(vec![compiled_exception(json!({
        "policies": [{"kind": "ClusterValidatePolicy", "name": "pod-rules", "rules": ["validateRules[1]"]}],
        "resourceSelectors": legacy_pods(),
        "reason": "privileged until the driver moves out",
    }))]);
    let decision = review_at(
        &set,
        &create(&bad_pod("old", json!({"app": "legacy"}))),
        Some(NOW),
    );
    // The first rule (images) still denies; the second (privileged) is exempt.
    assert_eq!(
        decision.messages,
        ["ClusterValidatePolicy/pod-rules: images must be pinned"]
    );
    assert_eq!(
        decision.warnings,
        [
            "ClusterValidatePolicy/pod-rules: exempted (rules validateRules[1]) by PolicyException/exceptions/legacy: privileged until the driver moves out"
        ]
    );

    // A place past the policy's rules, or of the other family, is named.
    let past = compiled_exception(json!({
        "policies": [{"kind": "ClusterValidatePolicy", "name": "pod-rules", "rules": ["validateRules[2]"]}],
        "resourceSelectors": legacy_pods(),
        "reason": "r",
    }));
    assert_eq!(
        set.exception_problems(&past),
        [(
            "RuleNotFound",
            "ClusterValidatePolicy/pod-rules has no rule `validateRules[2]`: it has 2 rules (validateRules[0] to validateRules[1])".to_string()
        )]
    );
    let wrong = compile_exception(&exception(json!({
        "policies": [{"kind": "ClusterValidatePolicy", "name": "pod-rules", "rules": ["overrideRules[0]"]}],
        "resourceSelectors": legacy_pods(),
        "reason": "r",
    })))
    .expect_err("a validate policy has no overrideRules");
    assert!(
        wrong.to_string().contains("spec.policies[0].rules[0]: a ClusterValidatePolicy's rules are `validateRules[N]` by place (or their `name`), not `overrideRules[0]`"),
        "{wrong}"
    );
    // Naming a rule of a policy whose rules have no names says how to name one by place.
    let named = compiled_exception(json!({
        "policies": [{"kind": "ClusterValidatePolicy", "name": "pod-rules", "rules": ["capabilities"]}],
        "resourceSelectors": legacy_pods(),
        "reason": "r",
    }));
    let missing = set.exception_problems(&named);
    assert!(
        missing[0]
            .1
            .contains("exempt one by place, `validateRules[0]` to `validateRules[1]`"),
        "{missing:?}"
    );
}

#[test]
fn an_exception_selecting_a_workload_exempts_its_pod_template() {
    // Selected as Kyverno users write it: the Deployment by kind, namespace and name.
    let set = policies_exempted_for(
        json!([{"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "debug", "name": "netshoot"}]),
        "a debugging tool",
    );
    let deployment = |name: &str| {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": "debug"},
            "spec": {"selector": {"matchLabels": {"app": name}}, "template": {
                "metadata": {"labels": {"app": name}},
                "spec": bad_pod("x", json!({}))["spec"].clone(),
            }},
        })
    };
    let decision = review_at(&set, &create(&deployment("netshoot")), Some(NOW));
    assert!(decision.allowed, "{decision:#?}");
    assert!(decision.patch.0.is_empty(), "{decision:#?}");
    assert_eq!(
        decision
            .audit_annotations
            .get("policyexception.exceptions.legacy"),
        Some(&"ClusterOverridePolicy/defaults, ClusterValidatePolicy/pod-rules".to_string())
    );
    // Another Deployment is judged, its template mutated.
    let other = review_at(&set, &create(&deployment("web")), Some(NOW));
    assert!(!other.allowed, "{other:#?}");
    assert!(other.exceptions.is_empty(), "{other:#?}");
}

/// A Deployment `netshoot`, its ReplicaSet and a Pod the ReplicaSet controller creates, linked
/// by controller ownerReferences with uids; the Pod breaks both rules of `pod-rules`.
fn owned_pod(rs_uid_in_pod: &str) -> (ObjectStore, Value) {
    let mut store = ObjectStore::new();
    store
        .insert(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "netshoot", "namespace": "debug", "uid": "d-1"},
        }))
        .expect("identity");
    store
        .insert(json!({
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": "netshoot-5d8f", "namespace": "debug", "uid": "rs-1",
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment",
                    "name": "netshoot", "uid": "d-1", "controller": true}]},
        }))
        .expect("identity");
    let mut pod = bad_pod("netshoot-5d8f-x2k8p", json!({"app": "netshoot"}));
    pod["metadata"]["namespace"] = json!("debug");
    pod["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet",
        "name": "netshoot-5d8f", "uid": rs_uid_in_pod, "controller": true}]);
    (store, pod)
}

fn written_by(pod: &Value, user: &str) -> Request {
    let mut request = create(pod);
    request.info["userInfo"] = json!({"username": user});
    request
}

#[test]
fn an_exception_selecting_a_workload_reaches_what_its_controllers_create() {
    let set = set_of(&[policy()]).with_exceptions(vec![compiled_exception(json!({
        "policies": [{"kind": "ClusterValidatePolicy", "name": "pod-rules"}],
        "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "debug", "name": "netshoot"}],
        "reason": "a debugging tool",
    }))]);
    let (store, pod) = owned_pod("rs-1");
    let review = |request: &Request, evaluation: Evaluation<'_>| {
        block_on(set.review_in(request, &evaluation.with_now(Some(NOW))))
    };
    // Written by the ReplicaSet controller: the owner chain reaches the Deployment.
    let controller = written_by(
        &pod,
        "system:serviceaccount:kube-system:replicaset-controller",
    );
    let decision = review(&controller, Evaluation::new(&store));
    assert!(decision.allowed, "{decision:#?}");
    assert_eq!(decision.exceptions.len(), 1, "{decision:#?}");
    // Written by anyone else with the same ownerReference: judged as itself.
    let copied = written_by(&pod, "alice");
    assert!(!review(&copied, Evaluation::new(&store)).allowed);
    // Unless the operator trusts that user.
    let trusted = Evaluation::new(&store)
        .with_owner_trust(OwnerTrust::WrittenBy(vec!["alice".to_string()].into()));
    assert!(review(&copied, trusted).allowed);
    // An ownerReference whose uid is not the owner's leads nowhere.
    let (store, stale) = owned_pod("rs-old");
    let stale = written_by(
        &stale,
        "system:serviceaccount:kube-system:replicaset-controller",
    );
    assert!(!review(&stale, Evaluation::new(&store)).allowed);

    // The audit follows the chain whoever wrote the object.
    let (store, pod) = owned_pod("rs-1");
    let findings = block_on(
        set.audit_in(
            pod,
            &Evaluation::new(&store)
                .with_now(Some(NOW))
                .with_owner_trust(OwnerTrust::Always),
        ),
    )
    .expect("identified");
    assert!(
        findings
            .iter()
            .all(|f| f.result == kanon_api::ResultStatus::Skip),
        "{findings:#?}"
    );
}

#[test]
fn an_exception_whose_selectors_meet_nothing_its_policy_judges_says_so() {
    let set = set_of(&[policy()]);
    let selecting = |selectors: Value| {
        set.exception_problems(&compiled_exception(json!({
            "policies": [{"kind": "ClusterValidatePolicy", "name": "pod-rules"}],
            "resourceSelectors": selectors,
            "reason": "r",
        })))
    };
    // A Service is nothing a Pod policy judges, owns or templates.
    assert_eq!(
        selecting(json!([{"apiVersion": "v1", "kind": "Service", "name": "web"}])),
        [(
            "SelectsNothing",
            "its resourceSelectors (v1 Service) select nothing ClusterValidatePolicy/pod-rules judges (v1 Pod): not those kinds, a workload whose pod template it judges, nor an owner of them; it exempts nothing".to_string()
        )]
    );
    // Pods, a workload (its template), an owner further up (a CronJob's Jobs' Pods): each meets
    // something.
    for kind in [
        json!({"apiVersion": "v1", "kind": "Pod"}),
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}),
        json!({"apiVersion": "batch/v1", "kind": "CronJob", "name": "nightly"}),
        json!({"apiVersion": "v1", "kind": "ReplicationController", "name": "old"}),
    ] {
        assert!(selecting(json!([kind])).is_empty(), "{kind}");
    }
    // The policy-check webhook warns when it is written.
    let exception = exception(json!({
        "policies": [{"kind": "ClusterValidatePolicy", "name": "pod-rules"}],
        "resourceSelectors": [{"apiVersion": "v1", "kind": "Service"}],
        "reason": "r",
    }));
    let check = set
        .check_policy_object(&create(&exception), &NoObjects)
        .expect("an exception is checked");
    assert!(check.invalid.is_none(), "{check:?}");
    assert!(
        check.warnings.iter().any(|w| w.starts_with(
            "PolicyException/exceptions/legacy: its resourceSelectors (v1 Service) select nothing"
        )),
        "{check:?}"
    );
}
