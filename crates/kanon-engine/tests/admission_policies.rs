//! Kubernetes' own admission policies: ValidatingAdmissionPolicy and MutatingAdmissionPolicy
//! manifests with their bindings, refused when written as kanon reports them, and evaluated as
//! kube-apiserver 1.35 evaluates them (matching, params, decisions, words).

mod common;

use common::*;
use kanon_api::{Operation, ValidationReason};
use kanon_engine::{
    AdmissionKind, AdmissionPolicies, CompiledPolicy, Decision, ObjectStore, PolicyOutcome,
    PolicySet, Request, StatusReason, admission_kind_of,
};
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------------
// Documents
// ---------------------------------------------------------------------------------------------

const V1: &str = "admissionregistration.k8s.io/v1";
const V1BETA1: &str = "admissionregistration.k8s.io/v1beta1";

fn document(api_version: &str, kind: &str, name: &str, spec: Value) -> Value {
    json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": name}, "spec": spec})
}

/// A ValidatingAdmissionPolicy named `name`.
fn vap(name: &str, spec: Value) -> Value {
    document(V1, "ValidatingAdmissionPolicy", name, spec)
}

/// A ValidatingAdmissionPolicyBinding named `name`.
fn vapb(name: &str, spec: Value) -> Value {
    document(V1, "ValidatingAdmissionPolicyBinding", name, spec)
}

/// A MutatingAdmissionPolicy named `name` (v1beta1, what Kubernetes 1.35 serves).
fn map(name: &str, spec: Value) -> Value {
    document(V1BETA1, "MutatingAdmissionPolicy", name, spec)
}

/// A MutatingAdmissionPolicyBinding named `name` (v1beta1).
fn mapb(name: &str, spec: Value) -> Value {
    document(V1BETA1, "MutatingAdmissionPolicyBinding", name, spec)
}

/// A binding `b` of ValidatingAdmissionPolicy `p` with `actions`.
fn binding_with(actions: Value) -> Value {
    vapb(
        "b",
        json!({"policyName": "p", "validationActions": actions}),
    )
}

/// The binding `b` of `p` that denies.
fn deny_binding() -> Value {
    binding_with(json!(["Deny"]))
}

/// A resource rule of the core group's v1 `resources` for CREATE and UPDATE.
fn core_rule(resources: Value) -> Value {
    json!({"apiGroups": [""], "apiVersions": ["v1"], "resources": resources,
           "operations": ["CREATE", "UPDATE"]})
}

/// `matchConstraints` with these resource rules.
fn constraints(rules: Value) -> Value {
    json!({"resourceRules": rules})
}

/// A ValidatingAdmissionPolicy `p` whose one validation always fails with `denied`, matching
/// `match_constraints`.
fn denying_vap(match_constraints: Value) -> Value {
    vap(
        "p",
        json!({
            "matchConstraints": match_constraints,
            "validations": [{"expression": "false", "message": "denied"}],
        }),
    )
}

/// The message of a denial by `p` with binding `b`.
fn denied_by_p(message: &str) -> String {
    format!("ValidatingAdmissionPolicy 'p' with binding 'b' denied request: {message}")
}

/// A MutatingAdmissionPolicy `m` with `mutations` (each a JSONPatch expression) for Pods.
fn patching_map(failure_policy: &str, expressions: &[&str]) -> Value {
    let mutations: Vec<Value> = expressions
        .iter()
        .map(|e| json!({"patchType": "JSONPatch", "jsonPatch": {"expression": e}}))
        .collect();
    map(
        "m",
        json!({
            "matchConstraints": constraints(json!([core_rule(json!(["pods"]))])),
            "failurePolicy": failure_policy,
            "reinvocationPolicy": "Never",
            "mutations": mutations,
        }),
    )
}

/// The binding `mb` of MutatingAdmissionPolicy `m`.
fn map_binding() -> Value {
    mapb("mb", json!({"policyName": "m"}))
}

// ---------------------------------------------------------------------------------------------
// Compiling and evaluating
// ---------------------------------------------------------------------------------------------

fn compile_all(docs: &[Value]) -> Result<Vec<CompiledPolicy>, Vec<String>> {
    let mut policies = AdmissionPolicies::new();
    for doc in docs {
        policies.add(doc);
    }
    policies.compile()
}

/// The problems of documents that must not compile, each as kanon reports it.
#[track_caller]
fn refusals(docs: &[Value]) -> Vec<String> {
    match compile_all(docs) {
        Ok(compiled) => panic!("should be refused, compiled {} policies", compiled.len()),
        Err(problems) => problems,
    }
}

/// A set of admission policies (and kanon's policies in `kanon`).
fn set_with(docs: &[Value], kanon: &[Value]) -> PolicySet {
    let mut policies = compile_all(docs).unwrap_or_else(|e| panic!("should compile: {e:#?}"));
    policies.extend(kanon.iter().map(compiled));
    PolicySet::build(policies).expect("no duplicate policies")
}

fn set(docs: &[Value]) -> PolicySet {
    set_with(docs, &[])
}

fn review(set: &PolicySet, request: &Request, store: &ObjectStore) -> Decision {
    kanon_engine::block_on(set.review(request, store))
}

/// Whether `p` with binding `b` (which always denies) denied the request: it must have
/// matched.
#[track_caller]
fn denied(set: &PolicySet, request: &Request, store: &ObjectStore) -> bool {
    let decision = review(set, request, store);
    if decision.allowed {
        assert!(decision.messages.is_empty(), "{decision:?}");
        false
    } else {
        assert_eq!(decision.messages, [denied_by_p("denied")], "{decision:?}");
        true
    }
}

fn store_of(objects: &[Value]) -> ObjectStore {
    let mut store = ObjectStore::new();
    for object in objects {
        store.insert(object.clone()).expect("an identified object");
    }
    store
}

/// The namespaces the Pods of these tests live in.
fn namespaces() -> ObjectStore {
    store_of(&[
        namespace("shop", json!({"env": "prod"})),
        namespace("dev", json!({"env": "dev"})),
    ])
}

fn configmap(namespace: &str, name: &str, labels: Value, data: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "data": data,
    })
}

fn deployment(namespace: &str, name: &str) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"replicas": 1},
    })
}

fn update(old: &Value, new: &Value) -> Request {
    Request::from_objects(Operation::Update, Some(new.clone()), Some(old.clone()))
        .expect("valid UPDATE request")
}

/// An UPDATE of Pod `shop/web` through an AdmissionReview, which names its resource (`pods`)
/// and `sub_resource` (empty: none), as offline requests cannot.
fn pod_review(sub_resource: &str) -> Request {
    let pod = pod("shop", "web", json!({}));
    let mut request = json!({
        "uid": "1",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": "shop",
        "name": "web",
        "operation": "UPDATE",
        "userInfo": {"username": "alice"},
        "object": pod,
        "oldObject": pod,
    });
    if !sub_resource.is_empty() {
        request["subResource"] = json!(sub_resource);
    }
    Request::from_admission_review(&json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": request,
    }))
    .expect("a valid AdmissionReview")
}

// ---------------------------------------------------------------------------------------------
// 1. Refused when written
// ---------------------------------------------------------------------------------------------

#[test]
fn a_policy_without_match_constraints_is_refused() {
    let policy = vap("p", json!({"validations": [{"expression": "true"}]}));
    assert_eq!(
        refusals(&[policy, deny_binding()]),
        ["ValidatingAdmissionPolicy/p is invalid:\n  spec.matchConstraints: is required"]
    );
}

#[test]
fn match_constraints_without_resource_rules_are_refused() {
    let policy = denying_vap(json!({"resourceRules": []}));
    assert_eq!(
        refusals(&[policy, deny_binding()]),
        [
            "ValidatingAdmissionPolicy/p is invalid:\n  spec.matchConstraints.resourceRules: at least one resource rule is required"
        ]
    );
}

#[test]
fn a_mutating_policy_refuses_the_delete_operation() {
    let policy = map(
        "m",
        json!({
            "matchConstraints": constraints(json!([{
                "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"],
                "operations": ["CREATE", "DELETE"],
            }])),
            "reinvocationPolicy": "Never",
            "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": "[JSONPatch{op: 'test', path: '/kind', value: object.kind}]"}}],
        }),
    );
    assert_eq!(
        refusals(&[policy, map_binding()]),
        [
            "MutatingAdmissionPolicy/m is invalid:\n  spec.matchConstraints.resourceRules[0].operations[1]: unsupported value `DELETE`: supported values: *, CREATE, UPDATE"
        ]
    );
}

#[test]
fn validation_actions_must_not_be_empty() {
    let policy = denying_vap(constraints(json!([core_rule(json!(["pods"]))])));
    assert_eq!(
        refusals(&[policy, binding_with(json!([]))]),
        [
            "ValidatingAdmissionPolicyBinding/b is invalid:\n  spec.validationActions: at least one validation action is required"
        ]
    );
}

#[test]
fn validation_actions_must_not_repeat() {
    let policy = denying_vap(constraints(json!([core_rule(json!(["pods"]))])));
    assert_eq!(
        refusals(&[policy, binding_with(json!(["Audit", "Audit"]))]),
        [
            "ValidatingAdmissionPolicyBinding/b is invalid:\n  spec.validationActions[1]: duplicate value `Audit`"
        ]
    );
}

#[test]
fn validation_actions_must_not_both_deny_and_warn() {
    let policy = denying_vap(constraints(json!([core_rule(json!(["pods"]))])));
    assert_eq!(
        refusals(&[policy, binding_with(json!(["Deny", "Warn"]))]),
        [
            "ValidatingAdmissionPolicyBinding/b is invalid:\n  spec.validationActions: must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)"
        ]
    );
}

/// A policy with a ConfigMap paramKind, and a binding of it with `param_ref`.
fn with_param_ref(param_ref: Value) -> [Value; 2] {
    let policy = vap(
        "p",
        json!({
            "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
            "matchConstraints": constraints(json!([core_rule(json!(["pods"]))])),
            "validations": [{"expression": "params != null"}],
        }),
    );
    let binding = vapb(
        "b",
        json!({"policyName": "p", "validationActions": ["Deny"], "paramRef": param_ref}),
    );
    [policy, binding]
}

#[test]
fn a_param_ref_must_not_have_both_name_and_selector() {
    let docs = with_param_ref(json!({
        "name": "limits",
        "selector": {"matchLabels": {"kanon": "params"}},
        "parameterNotFoundAction": "Deny",
    }));
    assert_eq!(
        refusals(&docs),
        [
            "ValidatingAdmissionPolicyBinding/b is invalid:\n  spec.paramRef: `name` and `selector` are mutually exclusive"
        ]
    );
}

#[test]
fn a_param_ref_needs_a_name_or_a_selector() {
    let docs = with_param_ref(json!({"parameterNotFoundAction": "Deny"}));
    assert_eq!(
        refusals(&docs),
        [
            "ValidatingAdmissionPolicyBinding/b is invalid:\n  spec.paramRef: one of `name` or `selector` must be set"
        ]
    );
}

#[test]
fn a_param_ref_needs_a_parameter_not_found_action() {
    let docs = with_param_ref(json!({"name": "limits"}));
    assert_eq!(
        refusals(&docs),
        [
            "ValidatingAdmissionPolicyBinding/b is invalid:\n  spec.paramRef.parameterNotFoundAction: is required"
        ]
    );
}

#[test]
fn an_unknown_field_is_reported_at_its_path() {
    let policy = vap(
        "p",
        json!({
            "matchConstraints": constraints(json!([core_rule(json!(["pods"]))])),
            "validations": [{"expression": "true", "expresion": "false"}],
        }),
    );
    assert_eq!(
        refusals(&[policy, deny_binding()]),
        ["ValidatingAdmissionPolicy/p is invalid:\n  spec.validations[0].expresion: unknown field"]
    );
}

#[test]
fn an_unknown_field_of_a_binding_is_reported_at_its_path() {
    let policy = denying_vap(constraints(json!([core_rule(json!(["pods"]))])));
    let binding = vapb(
        "b",
        json!({
            "policyName": "p",
            "validationActions": ["Deny"],
            "matchResources": {"objectSelectr": {}},
        }),
    );
    assert_eq!(
        refusals(&[policy, binding]),
        [
            "ValidatingAdmissionPolicyBinding/b is invalid:\n  spec.matchResources.objectSelectr: unknown field",
            // The binding is refused, so nothing binds the policy.
            "ValidatingAdmissionPolicy/p is invalid:\n  no ValidatingAdmissionPolicyBinding among the documents names it, so it would apply to nothing (kube-apiserver evaluates a policy only through its bindings)",
        ]
    );
}

/// The problems of a policy `p` whose one validation is `expression`.
fn expression_refusals(expression: &str) -> Vec<String> {
    let policy = vap(
        "p",
        json!({
            "matchConstraints": constraints(json!([core_rule(json!(["pods"]))])),
            "validations": [{"expression": expression}],
        }),
    );
    refusals(&[policy, deny_binding()])
}

#[test]
fn references_is_undeclared_in_an_admission_policy() {
    assert_eq!(
        expression_refusals("references.limits != null"),
        [
            "ValidatingAdmissionPolicy/p is invalid:\n  spec.validations[0].expression: ERROR: <input>:1:1: undeclared reference to 'references' (in container '')\n | references.limits != null\n | ^"
        ]
    );
}

#[test]
fn authorizer_is_refused_with_why() {
    let policy = vap(
        "p",
        json!({
            "matchConstraints": constraints(json!([core_rule(json!(["pods"]))])),
            "variables": [{"name": "authz", "expression": "authorizer"}],
            "validations": [{"expression": "true"}],
        }),
    );
    assert_eq!(
        refusals(&[policy, deny_binding()]),
        [
            "ValidatingAdmissionPolicy/p is invalid:\n  spec.variables[0].expression: `authorizer` (authorization checks) is not available in kanon: kanon does not make SubjectAccessReviews\nERROR: <input>:1:1: undeclared reference to 'authorizer' (in container '')\n | authorizer\n | ^"
        ]
    );
}

#[test]
fn a_policy_without_a_binding_is_refused() {
    let policy = denying_vap(constraints(json!([core_rule(json!(["pods"]))])));
    assert_eq!(
        refusals(&[policy]),
        [
            "ValidatingAdmissionPolicy/p is invalid:\n  no ValidatingAdmissionPolicyBinding among the documents names it, so it would apply to nothing (kube-apiserver evaluates a policy only through its bindings)"
        ]
    );
}

#[test]
fn a_binding_of_a_missing_policy_is_refused() {
    let binding = vapb(
        "b",
        json!({"policyName": "ghost", "validationActions": ["Deny"]}),
    );
    assert_eq!(
        refusals(&[binding]),
        [
            "ValidatingAdmissionPolicyBinding/b is invalid:\n  spec.policyName: no ValidatingAdmissionPolicy named `ghost` among the documents"
        ]
    );
}

#[test]
fn two_bindings_with_one_name_are_refused() {
    let policy = denying_vap(constraints(json!([core_rule(json!(["pods"]))])));
    assert_eq!(
        refusals(&[policy, deny_binding(), binding_with(json!(["Warn"]))]),
        [
            "ValidatingAdmissionPolicyBinding/b is invalid:\n  metadata.name: is defined more than once"
        ]
    );
}

#[test]
fn a_mutating_policy_needs_a_reinvocation_policy() {
    let policy = map(
        "m",
        json!({
            "matchConstraints": constraints(json!([core_rule(json!(["pods"]))])),
            "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": "[JSONPatch{op: 'test', path: '/kind', value: object.kind}]"}}],
        }),
    );
    assert_eq!(
        refusals(&[policy, map_binding()]),
        ["MutatingAdmissionPolicy/m is invalid:\n  spec.reinvocationPolicy: is required"]
    );
}

#[test]
fn versions_read_validating_at_v1_mutating_at_v1beta1_and_v1() {
    let kind = |api_version: &str, kind: &str| {
        admission_kind_of(&json!({"apiVersion": api_version, "kind": kind}))
    };
    assert_eq!(kind(V1BETA1, "ValidatingAdmissionPolicy"), None);
    assert_eq!(kind(V1BETA1, "ValidatingAdmissionPolicyBinding"), None);
    assert_eq!(
        kind(V1, "ValidatingAdmissionPolicy"),
        Some(AdmissionKind::ValidatingPolicy)
    );
    assert_eq!(
        kind(V1BETA1, "MutatingAdmissionPolicy"),
        Some(AdmissionKind::MutatingPolicy)
    );
    assert_eq!(
        kind(V1, "MutatingAdmissionPolicy"),
        Some(AdmissionKind::MutatingPolicy)
    );
    assert_eq!(
        kind(V1BETA1, "MutatingAdmissionPolicyBinding"),
        Some(AdmissionKind::MutatingBinding)
    );
    assert_eq!(
        kind(V1, "MutatingAdmissionPolicyBinding"),
        Some(AdmissionKind::MutatingBinding)
    );
}

#[test]
fn a_validating_policy_at_v1beta1_is_refused_when_added() {
    let mut policy = denying_vap(constraints(json!([core_rule(json!(["pods"]))])));
    policy["apiVersion"] = json!(V1BETA1);
    assert_eq!(
        refusals(&[policy]),
        [
            "document is invalid:\n  kind: not a ValidatingAdmissionPolicy, MutatingAdmissionPolicy or binding of one at a version kanon reads (admissionregistration.k8s.io/v1; v1beta1 for the mutating kinds)"
        ]
    );
}

#[test]
fn a_mutating_policy_at_v1_compiles() {
    let mut policy = patching_map(
        "Fail",
        &["[JSONPatch{op: 'test', path: '/kind', value: object.kind}]"],
    );
    policy["apiVersion"] = json!(V1);
    let mut binding = map_binding();
    binding["apiVersion"] = json!(V1);
    let compiled = compile_all(&[policy, binding]).expect("compiles");
    assert_eq!(compiled.len(), 1);
    assert_eq!(
        compiled[0].id.to_string(),
        "MutatingAdmissionPolicy/m with binding mb"
    );
}

// ---------------------------------------------------------------------------------------------
// 2. Matching
// ---------------------------------------------------------------------------------------------

#[test]
fn resource_rules_match_group_version_resource_and_operation() {
    let set = set(&[
        denying_vap(constraints(json!([{
            "apiGroups": ["apps"], "apiVersions": ["v1"], "resources": ["deployments"],
            "operations": ["CREATE"],
        }]))),
        deny_binding(),
    ]);
    let store = namespaces();
    let web = deployment("shop", "web");
    assert!(denied(&set, &create(&web), &store));
    assert!(!denied(&set, &update(&web, &web), &store), "not for UPDATE");
    // Another group (the core group), another resource of the group, another version.
    assert!(!denied(
        &set,
        &create(&pod("shop", "web", json!({}))),
        &store
    ));
    let mut stateful = web.clone();
    stateful["kind"] = json!("StatefulSet");
    assert!(!denied(&set, &create(&stateful), &store));
}

/// A HorizontalPodAutoscaler at `api_version` (autoscaling/v1 and v2 are both served).
fn hpa(api_version: &str) -> Value {
    json!({
        "apiVersion": api_version,
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                 "maxReplicas": 3},
    })
}

/// A policy for autoscaling/v1 HorizontalPodAutoscalers with `match_policy`.
fn autoscaling_v1(match_policy: &str) -> PolicySet {
    set(&[
        denying_vap(json!({
            "matchPolicy": match_policy,
            "resourceRules": [{
                "apiGroups": ["autoscaling"], "apiVersions": ["v1"],
                "resources": ["horizontalpodautoscalers"], "operations": ["CREATE"],
            }],
        })),
        deny_binding(),
    ])
}

#[test]
fn match_policy_exact_matches_only_the_rules_versions() {
    let set = autoscaling_v1("Exact");
    let store = namespaces();
    assert!(denied(&set, &create(&hpa("autoscaling/v1")), &store));
    assert!(!denied(&set, &create(&hpa("autoscaling/v2")), &store));
}

#[test]
fn a_star_resource_matches_resources_but_not_subresources() {
    let set = set(&[
        denying_vap(constraints(json!([{
            "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"], "operations": ["*"],
        }]))),
        deny_binding(),
    ]);
    let store = namespaces();
    assert!(denied(&set, &create(&deployment("shop", "web")), &store));
    assert!(denied(&set, &pod_review(""), &store));
    assert!(!denied(&set, &pod_review("status"), &store));
}

#[test]
fn a_star_slash_star_resource_matches_subresources_too() {
    let set = set(&[
        denying_vap(constraints(json!([core_rule(json!(["*/*"]))]))),
        deny_binding(),
    ]);
    let store = namespaces();
    assert!(denied(&set, &pod_review(""), &store));
    assert!(denied(&set, &pod_review("status"), &store));
    assert!(denied(&set, &pod_review("ephemeralcontainers"), &store));
}

#[test]
fn a_subresource_rule_matches_only_that_subresource() {
    let set = set(&[
        denying_vap(constraints(json!([core_rule(json!(["pods/status"]))]))),
        deny_binding(),
    ]);
    let store = namespaces();
    assert!(denied(&set, &pod_review("status"), &store));
    assert!(!denied(&set, &pod_review(""), &store));
    assert!(!denied(&set, &pod_review("ephemeralcontainers"), &store));
}

/// A policy for Pods, Nodes and Namespaces with `scope`.
fn scoped(scope: &str) -> PolicySet {
    let mut rule = core_rule(json!(["pods", "nodes", "namespaces"]));
    rule["scope"] = json!(scope);
    set(&[denying_vap(constraints(json!([rule]))), deny_binding()])
}

#[test]
fn cluster_scope_matches_cluster_scoped_objects_and_namespaces() {
    let set = scoped("Cluster");
    let store = namespaces();
    assert!(denied(&set, &create(&node("n1")), &store));
    assert!(denied(
        &set,
        &create(&namespace("fresh", json!({}))),
        &store
    ));
    assert!(!denied(
        &set,
        &create(&pod("shop", "web", json!({}))),
        &store
    ));
}

#[test]
fn namespaced_scope_matches_namespaced_objects_only() {
    let set = scoped("Namespaced");
    let store = namespaces();
    assert!(denied(
        &set,
        &create(&pod("shop", "web", json!({}))),
        &store
    ));
    assert!(!denied(&set, &create(&node("n1")), &store));
    assert!(!denied(
        &set,
        &create(&namespace("fresh", json!({}))),
        &store
    ));
}

#[test]
fn excluded_resource_rules_win() {
    let set = set(&[
        denying_vap(json!({
            "resourceRules": [core_rule(json!(["*"]))],
            "excludeResourceRules": [core_rule(json!(["configmaps"]))],
        })),
        deny_binding(),
    ]);
    let store = namespaces();
    assert!(denied(
        &set,
        &create(&pod("shop", "web", json!({}))),
        &store
    ));
    let settings = configmap("shop", "settings", json!({}), json!({}));
    assert!(!denied(&set, &create(&settings), &store));
}

#[test]
fn resource_names_limit_a_rule_to_those_names() {
    let mut rule = core_rule(json!(["pods"]));
    rule["resourceNames"] = json!(["web"]);
    let set = set(&[denying_vap(constraints(json!([rule]))), deny_binding()]);
    let store = namespaces();
    assert!(denied(
        &set,
        &create(&pod("shop", "web", json!({}))),
        &store
    ));
    assert!(!denied(
        &set,
        &create(&pod("shop", "api", json!({}))),
        &store
    ));
}

#[test]
fn a_binding_match_resources_narrows_the_policy() {
    let policy = denying_vap(constraints(json!([core_rule(json!([
        "pods",
        "configmaps"
    ]))])));
    let binding = vapb(
        "b",
        json!({
            "policyName": "p",
            "validationActions": ["Deny"],
            "matchResources": {"resourceRules": [core_rule(json!(["configmaps"]))]},
        }),
    );
    let set = set(&[policy, binding]);
    let store = namespaces();
    let settings = configmap("shop", "settings", json!({}), json!({}));
    assert!(denied(&set, &create(&settings), &store));
    assert!(!denied(
        &set,
        &create(&pod("shop", "web", json!({}))),
        &store
    ));
}

#[test]
fn a_binding_cannot_widen_the_policy() {
    let policy = denying_vap(constraints(json!([core_rule(json!(["pods"]))])));
    let binding = vapb(
        "b",
        json!({
            "policyName": "p",
            "validationActions": ["Deny"],
            "matchResources": {"resourceRules": [core_rule(json!(["pods", "configmaps"]))]},
        }),
    );
    let set = set(&[policy, binding]);
    let store = namespaces();
    let settings = configmap("shop", "settings", json!({}), json!({}));
    assert!(!denied(&set, &create(&settings), &store));
    assert!(denied(
        &set,
        &create(&pod("shop", "web", json!({}))),
        &store
    ));
}

/// A policy for Pods, Nodes and Namespaces in namespaces labelled `env: prod`.
fn prod_only() -> PolicySet {
    set(&[
        denying_vap(json!({
            "namespaceSelector": {"matchLabels": {"env": "prod"}},
            "resourceRules": [core_rule(json!(["pods", "nodes", "namespaces"]))],
        })),
        deny_binding(),
    ])
}

#[test]
fn a_namespace_selector_reads_the_labels_of_the_objects_namespace() {
    let set = prod_only();
    let store = namespaces();
    assert!(denied(
        &set,
        &create(&pod("shop", "web", json!({}))),
        &store
    ));
    assert!(!denied(
        &set,
        &create(&pod("dev", "web", json!({}))),
        &store
    ));
}

#[test]
fn a_namespace_is_judged_by_its_own_labels() {
    let set = prod_only();
    // The stored Namespace `shop` says prod; the request's Namespace says otherwise.
    let store = namespaces();
    let relabelled = namespace("shop", json!({"env": "dev"}));
    assert!(!denied(&set, &create(&relabelled), &store));
    let fresh = namespace("fresh", json!({"env": "prod"}));
    assert!(denied(&set, &create(&fresh), &store));
}

#[test]
fn a_namespace_selector_never_leaves_out_a_cluster_scoped_object() {
    let set = prod_only();
    assert!(denied(&set, &create(&node("n1")), &namespaces()));
}

#[test]
fn a_missing_namespace_is_a_configuration_error_of_the_policy() {
    let decision = review(
        &prod_only(),
        &create(&pod("ghost", "web", json!({}))),
        &namespaces(),
    );
    assert!(!decision.allowed);
    assert_eq!(
        decision.messages,
        [
            "ValidatingAdmissionPolicy 'p' denied request: failed to configure policy: namespaces \"ghost\" not found"
        ]
    );
}

#[test]
fn an_object_selector_on_update_matches_the_old_objects_labels() {
    let set = set(&[
        denying_vap(json!({
            "objectSelector": {"matchLabels": {"app": "old"}},
            "resourceRules": [core_rule(json!(["pods"]))],
        })),
        deny_binding(),
    ]);
    let store = namespaces();
    let old = pod("shop", "web", json!({"app": "old"}));
    let new = pod("shop", "web", json!({"app": "new"}));
    assert!(denied(&set, &update(&old, &new), &store));
    assert!(!denied(&set, &create(&new), &store));
    assert!(!denied(&set, &update(&new, &new), &store));
}

#[test]
fn match_policy_equivalent_does_not_let_another_version_by_unjudged() {
    // kube-apiserver converts an autoscaling/v2 HPA to v1 for a policy whose rules name v1;
    // kanon converts no object, so the policy fails under its failure policy (Fail by default)
    // instead of judging the wrong version or none.
    let store = namespaces();
    for set in [autoscaling_v1("Equivalent"), autoscaling_v1_default()] {
        assert!(denied(&set, &create(&hpa("autoscaling/v1")), &store));
        let decision = review(&set, &create(&hpa("autoscaling/v2")), &store);
        assert!(!decision.allowed, "{decision:?}");
        assert_eq!(
            decision.messages,
            [
                "ValidatingAdmissionPolicy 'p' denied request: failed to configure policy: the policy's rules match horizontalpodautoscalers at autoscaling/v1, not at autoscaling/v2 as requested (matchPolicy: Equivalent), and kanon does not convert objects between versions; name autoscaling/v2 in the rules, or set matchPolicy: Exact"
            ]
        );
        assert!(
            matches!(
                decision.policy_results[0].outcome,
                PolicyOutcome::Failed {
                    ignored: false,
                    reason: "conversion"
                }
            ),
            "{decision:?}"
        );
    }
}

#[test]
fn match_policy_equivalent_excludes_every_version_of_an_excluded_resource() {
    let set = set(&[
        denying_vap(json!({
            "resourceRules": [{
                "apiGroups": ["autoscaling"], "apiVersions": ["*"],
                "resources": ["horizontalpodautoscalers"], "operations": ["CREATE"],
            }],
            "excludeResourceRules": [{
                "apiGroups": ["autoscaling"], "apiVersions": ["v1"],
                "resources": ["horizontalpodautoscalers"], "operations": ["CREATE"],
            }],
        })),
        deny_binding(),
    ]);
    let store = namespaces();
    assert!(!denied(&set, &create(&hpa("autoscaling/v1")), &store));
    assert!(!denied(&set, &create(&hpa("autoscaling/v2")), &store));
}

/// [`autoscaling_v1`] without a `matchPolicy` (Equivalent by default).
fn autoscaling_v1_default() -> PolicySet {
    set(&[
        denying_vap(json!({
            "resourceRules": [{
                "apiGroups": ["autoscaling"], "apiVersions": ["v1"],
                "resources": ["horizontalpodautoscalers"], "operations": ["CREATE"],
            }],
        })),
        deny_binding(),
    ])
}

// ---------------------------------------------------------------------------------------------
// 3. Params
// ---------------------------------------------------------------------------------------------

/// A policy `p` with ConfigMap params capping the number of containers at `params.data.max`,
/// bound by `b` with `param_ref` and `actions`.
fn capped(param_ref: Value, actions: Value) -> PolicySet {
    let policy = vap(
        "p",
        json!({
            "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
            "matchConstraints": constraints(json!([core_rule(json!(["pods", "nodes"]))])),
            "validations": [{
                "expression": "!has(object.spec.containers) || size(object.spec.containers) <= int(params.data.max)",
                "messageExpression": "'at most ' + params.data.max + ' containers (' + params.metadata.namespace + '/' + params.metadata.name + ')'",
            }],
        }),
    );
    let binding = vapb(
        "b",
        json!({"policyName": "p", "validationActions": actions, "paramRef": param_ref}),
    );
    set(&[policy, binding])
}

/// A Pod in `namespace` with three containers.
fn crowded_pod(namespace: &str) -> Value {
    let mut pod = pod(namespace, "web", json!({}));
    pod["spec"]["containers"] = json!([
        {"name": "a", "image": "a"}, {"name": "b", "image": "b"}, {"name": "c", "image": "c"},
    ]);
    pod
}

fn limits(namespace: &str, name: &str, max: &str) -> Value {
    configmap(
        namespace,
        name,
        json!({"kanon": "params"}),
        json!({"max": max}),
    )
}

#[test]
fn a_param_by_name_comes_from_the_requests_namespace() {
    let set = capped(
        json!({"name": "limits", "parameterNotFoundAction": "Deny"}),
        json!(["Deny"]),
    );
    let mut store = namespaces();
    store.insert(limits("shop", "limits", "2")).unwrap();
    store.insert(limits("dev", "limits", "5")).unwrap();
    let decision = review(&set, &create(&crowded_pod("shop")), &store);
    assert!(!decision.allowed);
    assert_eq!(
        decision.messages,
        [denied_by_p("at most 2 containers (shop/limits)")]
    );
    let decision = review(&set, &create(&crowded_pod("dev")), &store);
    assert!(decision.allowed, "{decision:?}");
}

#[test]
fn a_param_ref_namespace_names_where_the_params_live() {
    let set = capped(
        json!({"name": "limits", "namespace": "config", "parameterNotFoundAction": "Deny"}),
        json!(["Deny"]),
    );
    let mut store = namespaces();
    store.insert(limits("config", "limits", "1")).unwrap();
    store.insert(limits("dev", "limits", "5")).unwrap();
    let decision = review(&set, &create(&crowded_pod("dev")), &store);
    assert_eq!(
        decision.messages,
        [denied_by_p("at most 1 containers (config/limits)")]
    );
}

#[test]
fn a_param_selector_runs_the_policy_once_per_param() {
    let set = capped(
        json!({"selector": {"matchLabels": {"kanon": "params"}}, "parameterNotFoundAction": "Deny"}),
        json!(["Warn"]),
    );
    let mut store = namespaces();
    store.insert(limits("shop", "small", "1")).unwrap();
    store.insert(limits("shop", "tiny", "2")).unwrap();
    // Not selected: other labels, another namespace.
    store
        .insert(configmap("shop", "other", json!({}), json!({"max": "0"})))
        .unwrap();
    store.insert(limits("dev", "elsewhere", "0")).unwrap();
    let decision = review(&set, &create(&crowded_pod("shop")), &store);
    assert!(decision.allowed, "{decision:?}");
    assert!(decision.messages.is_empty());
    let mut warnings = decision.warnings.clone();
    warnings.sort();
    assert_eq!(
        warnings,
        [
            "Validation failed for ValidatingAdmissionPolicy 'p' with binding 'b': at most 1 containers (shop/small)",
            "Validation failed for ValidatingAdmissionPolicy 'p' with binding 'b': at most 2 containers (shop/tiny)",
        ]
    );
}

#[test]
fn no_params_found_with_allow_admits_without_running_the_policy() {
    let set = capped(
        json!({"name": "limits", "parameterNotFoundAction": "Allow"}),
        json!(["Deny"]),
    );
    // The expression would fail on null params, and the policy would deny: it does not run.
    let decision = review(&set, &create(&crowded_pod("shop")), &namespaces());
    assert!(decision.allowed, "{decision:?}");
    assert!(decision.messages.is_empty(), "{decision:?}");
    assert!(decision.warnings.is_empty(), "{decision:?}");
}

#[test]
fn no_params_found_with_deny_denies() {
    let set = capped(
        json!({"name": "limits", "parameterNotFoundAction": "Deny"}),
        json!(["Deny"]),
    );
    let decision = review(&set, &create(&crowded_pod("shop")), &namespaces());
    assert!(!decision.allowed);
    assert_eq!(
        decision.messages,
        [denied_by_p(
            "failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction"
        )]
    );
    assert_eq!(
        decision.status_reason,
        Some(StatusReason::Validation(ValidationReason::Invalid))
    );
}

#[test]
fn a_binding_configuration_error_denies_even_under_warn() {
    let set = capped(
        json!({"name": "limits", "parameterNotFoundAction": "Deny"}),
        json!(["Warn"]),
    );
    let decision = review(&set, &create(&crowded_pod("shop")), &namespaces());
    assert!(!decision.allowed, "{decision:?}");
    assert_eq!(
        decision.messages,
        [denied_by_p(
            "failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction"
        )]
    );
    assert!(decision.warnings.is_empty(), "{decision:?}");
}

#[test]
fn namespaced_params_need_a_namespace_for_cluster_scoped_requests() {
    let set = capped(
        json!({"name": "limits", "parameterNotFoundAction": "Allow"}),
        json!(["Deny"]),
    );
    let decision = review(&set, &create(&node("n1")), &namespaces());
    assert!(!decision.allowed);
    assert_eq!(
        decision.messages,
        [denied_by_p(
            "failed to configure binding: cannot use namespaced paramRef in policy binding that matches cluster-scoped resources"
        )]
    );
}

#[test]
fn cluster_scoped_params_refuse_a_param_ref_namespace() {
    let policy = vap(
        "p",
        json!({
            "paramKind": {"apiVersion": "v1", "kind": "Namespace"},
            "matchConstraints": constraints(json!([core_rule(json!(["pods"]))])),
            "validations": [{"expression": "params.metadata.name == 'shop'"}],
        }),
    );
    let binding = vapb(
        "b",
        json!({
            "policyName": "p",
            "validationActions": ["Deny"],
            "paramRef": {"name": "shop", "namespace": "shop", "parameterNotFoundAction": "Deny"},
        }),
    );
    let set = set(&[policy, binding]);
    let decision = review(&set, &create(&pod("shop", "web", json!({}))), &namespaces());
    assert!(!decision.allowed);
    assert_eq!(
        decision.messages,
        [denied_by_p(
            "failed to configure binding: paramRef.namespace must not be provided for a cluster-scoped `paramKind`"
        )]
    );
}

#[test]
fn cluster_scoped_params_are_read_by_name() {
    let policy = vap(
        "p",
        json!({
            "paramKind": {"apiVersion": "v1", "kind": "Namespace"},
            "matchConstraints": constraints(json!([core_rule(json!(["pods"]))])),
            "validations": [{
                "expression": "params.metadata.labels.env != 'prod'",
                "messageExpression": "'param ' + params.metadata.name + ' is ' + params.metadata.labels.env",
            }],
        }),
    );
    let binding = vapb(
        "b",
        json!({
            "policyName": "p",
            "validationActions": ["Deny"],
            "paramRef": {"name": "shop", "parameterNotFoundAction": "Deny"},
        }),
    );
    let set = set(&[policy, binding]);
    let decision = review(&set, &create(&pod("dev", "web", json!({}))), &namespaces());
    assert_eq!(decision.messages, [denied_by_p("param shop is prod")]);
}

// ---------------------------------------------------------------------------------------------
// 4. Decisions
// ---------------------------------------------------------------------------------------------

/// A policy `p` for Pods with `validations` and `extra` merged into its spec.
fn pod_vap(validations: Value, extra: Value) -> Value {
    let mut spec = json!({
        "matchConstraints": constraints(json!([core_rule(json!(["pods"]))])),
        "validations": validations,
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        for (key, value) in extra {
            spec.insert(key.clone(), value.clone());
        }
    }
    vap("p", spec)
}

fn web() -> Request {
    create(&pod("shop", "web", json!({"app": "web"})))
}

#[test]
fn a_denial_carries_the_validations_reason() {
    let policy = pod_vap(
        json!([{"expression": "false", "message": "no", "reason": "Forbidden"}]),
        json!({}),
    );
    let decision = review(&set(&[policy, deny_binding()]), &web(), &namespaces());
    assert!(!decision.allowed);
    assert_eq!(decision.messages, [denied_by_p("no")]);
    assert_eq!(
        decision.status_reason,
        Some(StatusReason::Validation(ValidationReason::Forbidden))
    );
}

#[test]
fn a_denial_without_a_reason_is_invalid() {
    let policy = pod_vap(json!([{"expression": "false"}]), json!({}));
    let decision = review(&set(&[policy, deny_binding()]), &web(), &namespaces());
    assert_eq!(decision.messages, [denied_by_p("failed expression: false")]);
    assert_eq!(
        decision.status_reason,
        Some(StatusReason::Validation(ValidationReason::Invalid))
    );
}

const FAILING: &str = "object.spec.missing == 1";

#[test]
fn an_error_under_fail_denies_with_the_expression() {
    let policy = pod_vap(json!([{"expression": FAILING}]), json!({}));
    let decision = review(&set(&[policy, deny_binding()]), &web(), &namespaces());
    assert!(!decision.allowed);
    assert_eq!(
        decision.messages,
        [denied_by_p(
            "expression 'object.spec.missing == 1' resulted in error: no such key: missing"
        )]
    );
    assert_eq!(
        decision.status_reason,
        Some(StatusReason::Validation(ValidationReason::Invalid))
    );
}

#[test]
fn an_error_under_ignore_admits_silently_but_is_recorded() {
    let policy = pod_vap(
        json!([{"expression": FAILING}]),
        json!({"failurePolicy": "Ignore"}),
    );
    let decision = review(&set(&[policy, deny_binding()]), &web(), &namespaces());
    assert!(decision.allowed, "{decision:?}");
    assert!(decision.messages.is_empty(), "{decision:?}");
    assert!(decision.warnings.is_empty(), "{decision:?}");
    assert_eq!(decision.status_reason, None);
    assert_eq!(decision.policy_results.len(), 1, "{decision:?}");
    assert_eq!(
        &*decision.policy_results[0].policy,
        "ValidatingAdmissionPolicy/p with binding b"
    );
    assert!(
        matches!(
            decision.policy_results[0].outcome,
            PolicyOutcome::Failed { ignored: true, .. }
        ),
        "{decision:?}"
    );
}

#[test]
fn audit_writes_the_validation_failure_annotation() {
    let policy = pod_vap(
        json!([
            {"expression": "true"},
            {"expression": "false", "message": "no web pods"},
        ]),
        json!({}),
    );
    let decision = review(
        &set(&[policy, binding_with(json!(["Audit"]))]),
        &web(),
        &namespaces(),
    );
    assert!(decision.allowed, "{decision:?}");
    assert!(decision.warnings.is_empty(), "{decision:?}");
    assert_eq!(
        decision.audit_annotations.get(kanon_engine::VALIDATION_FAILURE_KEY),
        Some(
            &r#"[{"message":"no web pods","policy":"p","binding":"b","expressionIndex":1,"validationActions":["Audit"]}]"#
                .to_owned()
        )
    );
    assert_eq!(
        kanon_engine::VALIDATION_FAILURE_KEY,
        "validation.policy.admission.k8s.io/validation_failure"
    );
}

#[test]
fn audit_with_deny_lists_both_actions() {
    let policy = pod_vap(json!([{"expression": "false", "message": "no"}]), json!({}));
    let decision = review(
        &set(&[policy, binding_with(json!(["Deny", "Audit"]))]),
        &web(),
        &namespaces(),
    );
    assert!(!decision.allowed);
    assert_eq!(decision.messages, [denied_by_p("no")]);
    assert_eq!(
        decision.audit_annotations["validation.policy.admission.k8s.io/validation_failure"],
        r#"[{"message":"no","policy":"p","binding":"b","expressionIndex":0,"validationActions":["Deny","Audit"]}]"#
    );
}

#[test]
fn audit_annotation_escapes_html_characters_as_go_does() {
    let policy = pod_vap(
        json!([{"expression": "false", "message": "replicas <= 5 & > 0"}]),
        json!({}),
    );
    let decision = review(
        &set(&[policy, binding_with(json!(["Audit"]))]),
        &web(),
        &namespaces(),
    );
    assert_eq!(
        decision.audit_annotations["validation.policy.admission.k8s.io/validation_failure"],
        r#"[{"message":"replicas \u003c= 5 \u0026 \u003e 0","policy":"p","binding":"b","expressionIndex":0,"validationActions":["Audit"]}]"#
    );
}

#[test]
fn audit_annotations_are_keyed_by_policy() {
    let policy = pod_vap(
        json!([{"expression": "true"}]),
        json!({"auditAnnotations": [
            {"key": "seen", "valueExpression": "'pod ' + object.metadata.name"},
            {"key": "skipped", "valueExpression": "null"},
        ]}),
    );
    let decision = review(&set(&[policy, deny_binding()]), &web(), &namespaces());
    assert!(decision.allowed, "{decision:?}");
    assert_eq!(
        decision.audit_annotations,
        [("p/seen".to_owned(), "pod web".to_owned())].into()
    );
}

fn labels_of(decision: &Decision) -> Value {
    let patched = decision.patched.as_ref().expect("a patched object");
    patched["metadata"]["labels"].clone()
}

#[test]
fn a_json_patch_whose_test_fails_is_left_out() {
    let policy = patching_map(
        "Fail",
        &[
            "[JSONPatch{op: 'test', path: '/metadata/labels/app', value: 'api'}, JSONPatch{op: 'add', path: '/metadata/labels/tested', value: 'yes'}]",
            "[JSONPatch{op: 'add', path: '/metadata/labels/next', value: 'yes'}]",
        ],
    );
    let decision = review(&set(&[policy, map_binding()]), &web(), &namespaces());
    assert!(decision.allowed, "{decision:?}");
    assert!(decision.messages.is_empty(), "{decision:?}");
    assert!(decision.warnings.is_empty(), "{decision:?}");
    assert_eq!(labels_of(&decision), json!({"app": "web", "next": "yes"}));
}

const FIRST: &str = "[JSONPatch{op: 'add', path: '/metadata/labels/first', value: 'yes'}]";
const BROKEN: &str = "[JSONPatch{op: 'remove', path: '/metadata/labels/missing'}]";
const THIRD: &str = "[JSONPatch{op: 'add', path: '/metadata/labels/third', value: 'yes'}]";

#[test]
fn a_failing_mutation_under_fail_denies_in_the_apiservers_words() {
    let policy = patching_map("Fail", &[FIRST, BROKEN, THIRD]);
    let decision = review(&set(&[policy, map_binding()]), &web(), &namespaces());
    assert!(!decision.allowed);
    // kube-apiserver's patch library (gopkg.in/evanphx/json-patch.v4) words it so.
    assert_eq!(
        decision.messages,
        [
            "policy 'm' with binding 'mb' denied request: JSON Patch: error in remove for path: '/metadata/labels/missing': Unable to remove nonexistent key: missing: missing value"
        ]
    );
    assert_eq!(
        decision.status_reason,
        Some(StatusReason::Validation(ValidationReason::Invalid))
    );
    assert!(decision.patch.0.is_empty(), "{decision:?}");
}

#[test]
fn json_patches_mean_what_they_mean_in_the_apiserver() {
    // The apiserver's patch library replaces an absent member by adding it, and counts a
    // negative index from the end.
    let policy = patching_map(
        "Fail",
        &[
            "[JSONPatch{op: 'replace', path: '/metadata/labels/tier', value: 'front'}]",
            "[JSONPatch{op: 'add', path: '/spec/containers/-1', value: Object.spec.containers{name: 'last', image: 'i'}}]",
        ],
    );
    let decision = review(&set(&[policy, map_binding()]), &web(), &namespaces());
    assert!(decision.allowed, "{decision:?}");
    assert_eq!(labels_of(&decision), json!({"app": "web", "tier": "front"}));
    let patched = decision.patched.as_ref().expect("patched");
    let names: Vec<&str> = patched["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(names.last(), Some(&"last"), "{patched}");
}

#[test]
fn a_patch_adding_an_undeclared_field_fails_the_request_whatever_the_failure_policy() {
    for failure_policy in ["Fail", "Ignore"] {
        let policy = patching_map(
            failure_policy,
            &[
                FIRST,
                "[JSONPatch{op: 'add', path: '/spec/colour', value: 'blue'}, JSONPatch{op: 'add', path: '/metadata/labels/x', value: 'y'}]",
                THIRD,
            ],
        );
        let decision = review(&set(&[policy, map_binding()]), &web(), &namespaces());
        assert!(!decision.allowed, "{failure_policy}: {decision:?}");
        // As kube-apiserver's strict decoding into the Pod's Go type answers (500).
        assert_eq!(
            decision.messages,
            ["Internal error occurred: strict decoding error: unknown field \"spec.colour\""],
            "{failure_policy}"
        );
        assert_eq!(decision.status_reason, Some(StatusReason::InternalError));
        assert!(decision.patch.0.is_empty(), "{decision:?}");
        assert!(
            matches!(
                decision.policy_results[0].outcome,
                PolicyOutcome::Failed {
                    ignored: false,
                    reason: "strict_decoding"
                }
            ),
            "{decision:?}"
        );
    }
}

#[test]
fn a_value_the_go_type_cannot_hold_fails_the_request_whatever_the_failure_policy() {
    for failure_policy in ["Fail", "Ignore"] {
        // Two mistyped values: the decoder reports the first in the object's order (metadata
        // before spec), and before the undeclared field.
        let policy = patching_map(
            failure_policy,
            &[
                FIRST,
                "[JSONPatch{op: 'add', path: '/spec/hostNetwork', value: 'yes'}, JSONPatch{op: 'add', path: '/spec/colour', value: 'blue'}, JSONPatch{op: 'add', path: '/metadata/labels/x', value: 5}]",
                THIRD,
            ],
        );
        let decision = review(&set(&[policy, map_binding()]), &web(), &namespaces());
        assert!(!decision.allowed, "{failure_policy}: {decision:?}");
        // kube-apiserver 1.35.8's words for the same patch (500).
        assert_eq!(
            decision.messages,
            [
                "Internal error occurred: json: cannot unmarshal number into Go struct field ObjectMeta.metadata.labels of type string"
            ],
            "{failure_policy}"
        );
        assert_eq!(decision.status_reason, Some(StatusReason::InternalError));
        assert!(
            matches!(
                decision.policy_results[0].outcome,
                PolicyOutcome::Failed {
                    ignored: false,
                    reason: "typed_decoding"
                }
            ),
            "{decision:?}"
        );
    }
}

#[test]
fn the_next_mutation_sees_the_object_written_back_from_its_go_type() {
    // The empty `env` the first mutation writes is gone when the apiserver writes the Pod back,
    // so the second cannot add into it; a label written as `null` is gone too, and a quantity
    // is canonical.
    let policy = patching_map(
        "Fail",
        &[
            "[JSONPatch{op: 'add', path: '/spec/containers/0/env', value: []}, JSONPatch{op: 'add', path: '/spec/containers/0/resources', value: {'limits': {'memory': '1024Mi'}}}]",
            "[JSONPatch{op: 'add', path: '/spec/containers/0/env/0', value: {'name': 'A', 'value': 'a'}}]",
        ],
    );
    let decision = review(&set(&[policy, map_binding()]), &web(), &namespaces());
    assert!(!decision.allowed, "{decision:?}");
    assert_eq!(decision.messages.len(), 1, "{decision:?}");
    assert!(
        decision.messages[0].contains("JSON Patch: add operation does not apply: doc is missing path: \"/spec/containers/0/env/0\""),
        "{decision:?}"
    );
    let policy = patching_map(
        "Ignore",
        &[
            "[JSONPatch{op: 'add', path: '/spec/containers/0/env', value: []}, JSONPatch{op: 'add', path: '/spec/containers/0/resources', value: {'limits': {'memory': '1024Mi'}}}]",
        ],
    );
    let decision = review(&set(&[policy, map_binding()]), &web(), &namespaces());
    let patched = decision.patched.as_ref().expect("patched");
    let container = &patched["spec"]["containers"][0];
    assert!(container.get("env").is_none(), "{patched}");
    assert_eq!(
        container["resources"]["limits"]["memory"], "1Gi",
        "{patched}"
    );
}

#[test]
fn a_failing_mutation_under_ignore_keeps_the_others() {
    let policy = patching_map("Ignore", &[FIRST, BROKEN, THIRD]);
    let decision = review(&set(&[policy, map_binding()]), &web(), &namespaces());
    assert!(decision.allowed, "{decision:?}");
    assert!(decision.messages.is_empty(), "{decision:?}");
    assert!(decision.warnings.is_empty(), "{decision:?}");
    assert_eq!(
        labels_of(&decision),
        json!({"app": "web", "first": "yes", "third": "yes"})
    );
    assert!(
        matches!(
            decision.policy_results[0].outcome,
            PolicyOutcome::Failed { ignored: true, .. }
        ),
        "{decision:?}"
    );
}

#[test]
fn mutating_policies_run_before_kanons_overrides_and_validating_policies_see_the_result() {
    let mutating = patching_map(
        "Fail",
        &["[JSONPatch{op: 'add', path: '/metadata/labels/order', value: 'map'}]"],
    );
    // Fails (no such key) unless the MutatingAdmissionPolicy ran first.
    let kanon = cop(
        "kanon",
        json!({"overrideRules": [{"overriders": {"cel": {"mutations": [
            {"patchType": "JSONPatch", "jsonPatch": {"expression":
                "[JSONPatch{op: 'replace', path: '/metadata/labels/order', value: object.metadata.labels.order + ',kanon'}]"}},
        ]}}}]}),
    );
    let validating = pod_vap(
        json!([{
            "expression": "false",
            "messageExpression": "'order: ' + object.metadata.labels.order",
        }]),
        json!({}),
    );
    let set = set_with(
        &[
            mutating,
            map_binding(),
            validating,
            binding_with(json!(["Warn"])),
        ],
        &[kanon],
    );
    let decision = review(&set, &web(), &namespaces());
    assert!(decision.allowed, "{decision:?}");
    assert_eq!(
        decision.warnings,
        ["Validation failed for ValidatingAdmissionPolicy 'p' with binding 'b': order: map,kanon"]
    );
    assert_eq!(
        labels_of(&decision),
        json!({"app": "web", "order": "map,kanon"})
    );
    assert_eq!(
        decision.applied_policies,
        [
            "MutatingAdmissionPolicy/m with binding mb",
            "ClusterOverridePolicy/kanon",
            "ValidatingAdmissionPolicy/p with binding b",
        ]
    );
}

/// Each failing validation is a decision to deny, in order, and kube-apiserver answers with the
/// first alone (its dispatcher's `deniedDecisions[0]`, one message, one cause).
#[test]
fn the_first_failing_validation_is_the_answer() {
    let policy = pod_vap(
        json!([
            {"expression": "false", "message": "first"},
            {"expression": "true", "message": "holds"},
            {"expression": "false", "message": "second"},
        ]),
        json!({}),
    );
    let decision = review(&set(&[policy, deny_binding()]), &web(), &namespaces());
    assert_eq!(decision.messages, [denied_by_p("first")]);
}

/// Several admission policies deny: one answer, the first policy's first denial (kanon's
/// order; kube-apiserver's among policies is a Go map's), with that validation's reason.
#[test]
fn several_denying_policies_give_one_answer_with_its_reason() {
    let policies: Vec<Value> = ["aa", "mm", "zz"]
        .iter()
        .flat_map(|name| {
            let mut policy = pod_vap(
                json!([{"expression": "false", "message": format!("{name} says no"), "reason": "Forbidden"}]),
                json!({}),
            );
            policy["metadata"]["name"] = json!(name);
            let binding = vapb(
                name,
                json!({"policyName": name, "validationActions": ["Deny"]}),
            );
            [policy, binding]
        })
        .collect();
    let decision = review(&set(&policies), &web(), &namespaces());
    assert!(!decision.allowed);
    assert_eq!(
        decision.messages,
        ["ValidatingAdmissionPolicy 'aa' with binding 'aa' denied request: aa says no"]
    );
    assert_eq!(
        decision.status_reason,
        Some(kanon_api::ValidationReason::Forbidden.into())
    );
}

/// kube-apiserver refuses to overwrite an audit annotation with another value: the first
/// failure stays.
#[test]
fn audit_keeps_the_first_failure_only() {
    let policy = pod_vap(
        json!([
            {"expression": "false", "message": "first"},
            {"expression": "false", "message": "second"},
        ]),
        json!({}),
    );
    let decision = review(
        &set(&[policy, binding_with(json!(["Audit"]))]),
        &web(),
        &namespaces(),
    );
    assert_eq!(
        decision.audit_annotations["validation.policy.admission.k8s.io/validation_failure"],
        r#"[{"message":"first","policy":"p","binding":"b","expressionIndex":0,"validationActions":["Audit"]}]"#
    );
}

/// A policy `p` with ConfigMap params whose audit annotation `max` is the param's `max`.
fn auditing_max() -> Value {
    pod_vap(
        json!([{"expression": "true"}]),
        json!({
            "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
            "auditAnnotations": [{"key": "max", "valueExpression": "string(params.data.max)"}],
        }),
    )
}

fn params_binding(name: &str, param_ref: Value) -> Value {
    vapb(
        name,
        json!({"policyName": "p", "validationActions": ["Deny"], "paramRef": param_ref}),
    )
}

#[test]
fn audit_annotation_values_of_several_params_are_joined() {
    let binding = params_binding(
        "b",
        json!({"selector": {"matchLabels": {"kanon": "params"}}, "parameterNotFoundAction": "Deny"}),
    );
    let mut store = namespaces();
    store.insert(limits("shop", "a", "1")).unwrap();
    store.insert(limits("shop", "b", "2")).unwrap();
    store.insert(limits("shop", "c", "1")).unwrap();
    let decision = review(&set(&[auditing_max(), binding]), &web(), &store);
    assert!(decision.allowed, "{decision:?}");
    assert_eq!(
        decision.audit_annotations,
        [("p/max".to_owned(), "1, 2".to_owned())].into()
    );
}

#[test]
fn audit_annotation_values_of_several_bindings_of_a_policy_are_joined() {
    let one = params_binding(
        "b1",
        json!({"name": "one", "parameterNotFoundAction": "Deny"}),
    );
    let two = params_binding(
        "b2",
        json!({"name": "two", "parameterNotFoundAction": "Deny"}),
    );
    let mut store = namespaces();
    store.insert(limits("shop", "one", "1")).unwrap();
    store.insert(limits("shop", "two", "2")).unwrap();
    let decision = review(&set(&[auditing_max(), one, two]), &web(), &store);
    assert!(decision.allowed, "{decision:?}");
    assert_eq!(
        decision.audit_annotations,
        [("p/max".to_owned(), "1, 2".to_owned())].into()
    );
}

/// Match conditions of `cost` units each, `count` of them (each a list of that many numbers).
fn costly_conditions(count: usize, cost: usize) -> Value {
    Value::Array(
        (0..count)
            .map(|i| json!({"name": format!("c{i}"), "expression": format!("lists.range({cost}).size() > 0")}))
            .collect(),
    )
}

#[test]
fn a_bindings_match_conditions_have_a_budget_of_their_own() {
    // kube-apiserver meters an admission policy's match conditions apart from its validations,
    // with RuntimeCELCostBudgetMatchConditions (2,500,000 units): two conditions of ~900,000
    // fit, three do not, though all three fit the validations' 10,000,000.
    let object = configmap("shop", "c", json!({}), json!({}));
    let request = create(&object);
    let with = |count: usize| {
        let mut policy = denying_vap(constraints(json!([core_rule(json!(["configmaps"]))])));
        policy["spec"]["matchConditions"] = costly_conditions(count, 900_000);
        policy["spec"]["failurePolicy"] = json!("Fail");
        review(&set(&[policy, deny_binding()]), &request, &namespaces())
    };
    let two = with(2);
    assert_eq!(two.messages, [denied_by_p("denied")], "{:?}", two.messages);
    let three = with(3);
    assert!(!three.allowed);
    assert!(
        three.messages[0].contains("ValidatingAdmissionPolicy 'p' with binding 'b'")
            && three.messages[0].contains("cost budget"),
        "{:?}",
        three.messages
    );
}

#[test]
fn an_admission_policy_is_a_candidate_only_for_the_types_its_resource_rules_name() {
    use kanon_engine::WebhookKind::Validating;
    let rule = |group: &str, versions: Value, resources: Value| {
        json!({"apiGroups": [group], "apiVersions": versions, "resources": resources,
               "operations": ["CREATE", "UPDATE"]})
    };
    let evaluated = |rules: Value, api_version: &str, kind: &str| {
        set(&[denying_vap(constraints(rules)), deny_binding()]).evaluates(
            Validating,
            api_version,
            kind,
            Some("shop"),
        )
    };
    // Pods: Pods, and nothing else.
    let pods = json!([rule("", json!(["v1"]), json!(["pods"]))]);
    assert!(evaluated(pods.clone(), "v1", "Pod"));
    assert!(!evaluated(pods.clone(), "v1", "ConfigMap"));
    assert!(!evaluated(pods, "apps/v1", "Deployment"));
    // Every served version of the resource: an equivalent request is matched at another.
    let hpa = json!([rule(
        "autoscaling",
        json!(["v2"]),
        json!(["horizontalpodautoscalers"])
    )]);
    assert!(evaluated(
        hpa.clone(),
        "autoscaling/v1",
        "HorizontalPodAutoscaler"
    ));
    assert!(evaluated(hpa, "autoscaling/v2", "HorizontalPodAutoscaler"));
    // What the built-in schema cannot tell reaches every type: wildcards, subresources,
    // versions it does not serve.
    for rules in [
        json!([rule("", json!(["v1"]), json!(["*"]))]),
        json!([rule("", json!(["*"]), json!(["pods"]))]),
        json!([rule("", json!(["v1"]), json!(["pods/status"]))]),
        json!([rule("apps", json!(["v1beta9"]), json!(["deployments"]))]),
    ] {
        assert!(evaluated(rules.clone(), "v1", "ConfigMap"), "{rules}");
        assert!(
            evaluated(rules.clone(), "example.com/v1", "Widget"),
            "{rules}"
        );
    }
    // A group the built-in schema does not serve is no built-in type's: every custom type may
    // be selected, no built-in one.
    let widgets = json!([rule("example.com", json!(["v1"]), json!(["widgets"]))]);
    assert!(!evaluated(widgets.clone(), "v1", "ConfigMap"));
    assert!(evaluated(widgets.clone(), "example.com/v1", "Widget"));
    assert!(evaluated(widgets, "other.example.com/v2", "Gadget"));
    let both = json!([
        rule("", json!(["v1"]), json!(["pods"])),
        rule("example.com", json!(["v1"]), json!(["widgets"]))
    ]);
    assert!(evaluated(both.clone(), "v1", "Pod"));
    assert!(!evaluated(both.clone(), "v1", "ConfigMap"));
    assert!(evaluated(both, "example.com/v1", "Widget"));
}

#[test]
fn a_rule_matches_the_operations_and_names_it_lists() {
    let configmap = configmap("shop", "settings", json!({}), json!({"a": "b"}));
    let create = Request::from_objects(Operation::Create, Some(configmap.clone()), None)
        .expect("valid CREATE request");
    let changed = update(&configmap, &configmap);
    let store = namespaces();
    let rule = |operations: Value, names: Value| {
        json!([{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"],
                "operations": operations, "resourceNames": names}])
    };
    let decides = |operations: Value, names: Value| {
        let set = set(&[
            denying_vap(constraints(rule(operations, names))),
            deny_binding(),
        ]);
        (
            denied(&set, &create, &store),
            denied(&set, &changed, &store),
        )
    };
    assert_eq!(decides(json!(["UPDATE"]), json!([])), (false, true));
    assert_eq!(decides(json!(["CREATE"]), json!([])), (true, false));
    assert_eq!(decides(json!(["*"]), json!([])), (true, true));
    assert_eq!(
        decides(json!(["DELETE", "CONNECT"]), json!([])),
        (false, false)
    );
    assert_eq!(decides(json!(["*"]), json!(["settings"])), (true, true));
    assert_eq!(
        decides(json!(["*"]), json!(["other", "settings"])),
        (true, true)
    );
    assert_eq!(decides(json!(["*"]), json!(["other"])), (false, false));
}

/// kube-apiserver gives admission policies `namespaceObject`; kanon looks the namespace up only
/// for a policy whose expressions name it, so a binding that does not read it costs no lookup
/// (and a lookup that fails changes nothing for it).
#[test]
fn the_namespace_is_looked_up_only_for_policies_that_read_namespace_object() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let pods = constraints(json!([core_rule(json!(["pods"]))]));
    let validating = |expression: &str| {
        vap(
            "p",
            json!({"matchConstraints": pods, "validations": [{"expression": expression, "message": "denied"}]}),
        )
    };
    let mutating = |expression: &str| {
        map(
            "m",
            json!({
                "matchConstraints": pods,
                "reinvocationPolicy": "Never",
                "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": expression}}],
            }),
        )
    };
    let add_label = |value: &str| {
        format!("[JSONPatch{{op: 'add', path: '/metadata/labels/seen', value: {value}}}]")
    };
    let cases = [
        (validating("object.metadata.name != ''"), deny_binding(), 0),
        (
            validating("namespaceObject.metadata.labels['env'] == 'prod'"),
            deny_binding(),
            1,
        ),
        (mutating(&add_label("'yes'")), map_binding(), 0),
        (
            mutating(&add_label("namespaceObject.metadata.labels['env']")),
            map_binding(),
            1,
        ),
    ];
    let object = pod("shop", "web", json!({}));
    for (policy, binding, lookups) in cases {
        let set = set(&[policy.clone(), binding]);
        let counting = CountingLookup {
            calls: AtomicUsize::new(0),
            fail: false,
            inner: namespaces(),
        };
        let request = create(&object);
        let decision = kanon_engine::block_on(set.review(&request, &counting));
        assert!(
            decision.allowed && decision.messages.is_empty() && decision.warnings.is_empty(),
            "{policy}: {decision:?}"
        );
        assert_eq!(
            counting.calls.load(Ordering::SeqCst),
            lookups,
            "{policy}: {decision:?}"
        );
    }
}
