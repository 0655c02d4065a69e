//! CEL rules through a real kube-apiserver: a validation denies with its message, reason and
//! code as kubectl shows them, a JSONPatch mutation lands on the stored object, and a policy
//! whose expression does not compile is refused at `kubectl apply`, by field path.

use serde_json::{Value, json};

use crate::Scenario;
use crate::admission::{install, policy};
use crate::env::{Env, text};

pub const SCENARIOS: &[Scenario] = &[
    (
        "cel::validations_and_mutations_through_the_apiserver",
        validations_and_mutations_through_the_apiserver,
    ),
    (
        "cel::a_policy_whose_expression_does_not_compile_is_refused",
        a_policy_whose_expression_does_not_compile_is_refused,
    ),
];

fn pod(namespace: &str, name: &str, memory: Option<&str>) -> Value {
    let mut container = json!({"name": "app", "image": "registry.example/app:1.0"});
    if let Some(memory) = memory {
        container["resources"] = json!({"limits": {"memory": memory}});
    }
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": [container]},
    })
}

fn validations_and_mutations_through_the_apiserver(env: &mut Env) {
    let ns = "cel-pods";
    env.namespace(ns, json!({}));
    let pods = json!([{"apiVersion": "v1", "kind": "Pod", "namespace": ns}]);
    install(
        env,
        &policy(
            "ClusterValidatePolicy",
            None,
            "cel-memory",
            json!({"resourceSelectors": pods, "validateRules": [{"targetOperations": ["CREATE"], "cel": {
                "validations": [{
                    "expression": "object.spec.containers.all(c, has(c.resources) && has(c.resources.limits) && 'memory' in c.resources.limits)",
                    "messageExpression": "'pod ' + object.metadata.name + ': every container needs a memory limit'",
                }],
            }}]}),
        ),
    );
    install(
        env,
        &policy(
            "ClusterOverridePolicy",
            None,
            "cel-label",
            json!({"resourceSelectors": pods, "overrideRules": [{"targetOperations": ["CREATE"], "overriders": {"cel": {
                "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression":
                    "[JSONPatch{op: 'add', path: '/metadata/labels', value: {'checked-by': 'cel'}}]"}}],
            }}}]}),
        ),
    );

    // Admitted and mutated: the label is on the stored object.
    env.create(&pod(ns, "limited", Some("64Mi")))
        .expect("a pod with a memory limit is admitted");
    let stored = env
        .get("v1", "Pod", "pods", Some(ns), "limited")
        .expect("stored");
    assert_eq!(
        stored.pointer("/metadata/labels/checked-by"),
        Some(&json!("cel")),
        "{stored}"
    );

    // Denied, with the message and ValidatingAdmissionPolicy's reason (Invalid, 422).
    let manifest = pod(ns, "unlimited", None);
    let out = env.kubectl_stdin(&["create", "-f", "-"], &manifest.to_string());
    assert!(!out.status.success(), "a pod without limits was admitted");
    let shown = text(&out);
    assert!(
        shown.contains("denied the request")
            && shown.contains(
                "ClusterValidatePolicy/cel-memory: pod unlimited: every container needs a memory limit"
            ),
        "{shown}"
    );
    assert!(
        shown.contains("Invalid") || shown.contains("is invalid"),
        "{shown}"
    );
    assert!(
        env.get("v1", "Pod", "pods", Some(ns), "unlimited")
            .is_none()
    );

    env.delete_policy("ClusterValidatePolicy", None, "cel-memory");
    env.delete_policy("ClusterOverridePolicy", None, "cel-label");
}

fn a_policy_whose_expression_does_not_compile_is_refused(env: &mut Env) {
    let document = policy(
        "ClusterValidatePolicy",
        None,
        "cel-broken",
        json!({"validateRules": [{"targetOperations": ["CREATE"], "cel": {"validations": [
            {"expression": "object.spec.containers.all(c, c.image.startsWith('registry.example/'))"},
            {"expression": "objekt.metadata.name == 'x'"},
        ]}}]}),
    );
    let refused = env
        .apply_policy(&document)
        .expect_err("a policy with an undeclared name is refused");
    assert!(
        refused.contains("spec.validateRules[0].cel.validations[1].expression")
            && refused.contains("undeclared reference to 'objekt'"),
        "{refused}"
    );
    assert!(
        env.policy("ClusterValidatePolicy", None, "cel-broken")
            .is_none()
    );
}
