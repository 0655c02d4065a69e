//! A tenant who writes policies cannot take kanon down or starve other tenants, through the
//! real apiserver (SECURITY.md, "Bounds that protect availability"; issue 34).

use serde_json::{Value, json};

use crate::Scenario;
use crate::admission::{install, policy};
use crate::env::Env;

pub const SCENARIOS: &[Scenario] = &[(
    "tenants::a_tenants_message_cannot_take_kanon_down",
    a_tenants_message_cannot_take_kanon_down,
)];

/// The message that made `kanon serve` abort on a failed allocation, cutting every namespace's
/// writes off (issue 34, finding 1): a list doubled 40 times, rendered in kanon's process.
const LIST_DOUBLING: &str = "{% set l = namespace(v=[1]) %}{% for i in range(40) %}{% set l.v = l.v + l.v %}{% endfor %}{{ l.v | length }}";

/// A ValidatePolicy of `namespace` that denies Pods labelled `tenant=loud` with `message`.
fn loud_policy(namespace: &str, name: &str, message: &str) -> Value {
    policy(
        "ValidatePolicy",
        Some(namespace),
        name,
        json!({
            "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod",
                                   "labelSelector": {"matchLabels": {"tenant": "loud"}}}],
            "validateRules": [{"template": {"type": "condition", "condition": {
                "cond": "Exist", "dataRef": {"from": "current", "path": "/metadata/name"},
                "message": message}}}],
        }),
    )
}

fn pod(namespace: &str, name: &str, annotation_bytes: usize) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"tenant": "loud"},
                     "annotations": {"big": "x".repeat(annotation_bytes)}},
        "spec": {"containers": [{"name": "app", "image": "registry.example/app:1.0"}]},
    })
}

fn a_tenants_message_cannot_take_kanon_down(env: &mut Env) {
    let (tenant, other) = ("tnt-loud", "tnt-other");
    env.namespace(tenant, json!({}));
    env.namespace(other, json!({}));

    // The text that took kanon down is refused where the tenant writes it, naming the field.
    let refused = env
        .apply_policy(&loud_policy(tenant, "doubling", LIST_DOUBLING))
        .expect_err("refused at write");
    assert!(
        refused.contains("spec.validateRules[0].template.condition.message")
            && refused.contains("statements (`{% ... %}`) are not allowed"),
        "{refused}"
    );

    // A message within the language that asks for 4,000 copies of a 200 KB Pod (800 MB of
    // JSON) when it is rendered: its read budget ends it, the denial stands with the rule's
    // own reason, and kanon goes on serving everyone.
    let copies = vec!["object"; 4_000].join(", ");
    install(
        env,
        &loud_policy(tenant, "reader", &format!("{{{{ [{copies}] | tojson }}}}")),
    );
    for i in 0..3 {
        let denied = env
            .create(&pod(tenant, &format!("loud-{i}"), 200_000))
            .expect_err("the tenant's policy denies its Pod");
        assert!(
            denied.contains("(its message could not be rendered)"),
            "{}",
            &denied[..denied.len().min(2000)]
        );
    }
    env.create(&pod(other, "quiet", 10))
        .expect("another namespace's Pod is admitted");
    assert!(env.kanon.running(), "kanon is still running");
    assert_eq!(env.kanon.readyz(), "200", "kanon is still ready");
    env.delete_policy("ValidatePolicy", Some(tenant), "reader");
}
