//! Workloads and exceptions through the real apiserver: a Pod policy refuses a Deployment whose
//! template breaks it, naming the template; a PolicyException is checked when written, reports
//! in its status whether what it names exists, exempts only what it selects while it has not
//! expired and only from the namespace the operator named, and says so (metric, status).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use crate::Scenario;
use crate::env::{Env, Restarted, text};

pub const SCENARIOS: &[Scenario] = &[(
    "exceptions::pod_policies_reach_workloads_and_exceptions_exempt_until_they_expire",
    pod_policies_reach_workloads_and_exceptions_exempt_until_they_expire,
)];

const APPS: &str = "kex-apps";
const EXCEPTIONS: &str = "kex-exceptions";

fn policy() -> Value {
    json!({
        "apiVersion": "policy.kanon.dev/v1alpha1", "kind": "ClusterValidatePolicy",
        "metadata": {"name": "kex-no-host-network"},
        "spec": {
            "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod", "namespace": APPS}],
            "validateRules": [{
                "name": "no-host-network",
                "targetOperations": ["CREATE", "UPDATE"],
                "cel": {"validations": [{
                    "expression": "!has(object.spec.hostNetwork) || !object.spec.hostNetwork",
                    "message": "hostNetwork is not allowed",
                }]},
            }],
        },
    })
}

fn pod(name: &str, app: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": APPS, "labels": {"app": app}},
        "spec": {"hostNetwork": true, "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
    })
}

fn deployment(name: &str, app: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": APPS},
        "spec": {
            "selector": {"matchLabels": {"app": app}},
            "template": {"metadata": {"labels": {"app": app}}, "spec": pod(name, app)["spec"].clone()},
        },
    })
}

fn exception(namespace: &str, name: &str, policy: &str, expires_at: Option<&str>) -> Value {
    let mut exception = json!({
        "apiVersion": "policy.kanon.dev/v1alpha1", "kind": "PolicyException",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "policies": [{"kind": "ClusterValidatePolicy", "name": policy, "rules": ["no-host-network"]}],
            "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod", "namespace": APPS,
                                   "labelSelector": {"matchLabels": {"app": "legacy"}}}],
            "reason": "the legacy agent needs the host network (SEC-1)",
        },
    });
    if let Some(at) = expires_at {
        exception["spec"]["expiresAt"] = json!(at);
    }
    exception
}

/// The Ready condition of an exception: `(status, reason, message)`, once kanon wrote one for
/// its current generation.
fn ready(env: &Env, namespace: &str, name: &str) -> Option<(String, String, String)> {
    let object = env.get(
        "policy.kanon.dev/v1alpha1",
        "PolicyException",
        "policyexceptions",
        Some(namespace),
        name,
    )?;
    if object.pointer("/status/observedGeneration") != object.pointer("/metadata/generation") {
        return None;
    }
    let condition = object.pointer("/status/conditions/0")?;
    let field = |key: &str| condition[key].as_str().unwrap_or_default().to_string();
    Some((field("status"), field("reason"), field("message")))
}

fn wait_ready(env: &Env, namespace: &str, name: &str, reason: &str) -> (String, String, String) {
    let mut last = None;
    env.wait_for(
        &format!("PolicyException {namespace}/{name} {reason}"),
        Duration::from_secs(40),
        || {
            last = ready(env, namespace, name);
            last.as_ref().is_some_and(|(_, r, _)| r == reason)
        },
    );
    last.unwrap_or_default()
}

fn rfc3339(seconds_from_now: u64) -> String {
    let at = SystemTime::now() + Duration::from_secs(seconds_from_now);
    let seconds = at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    k8s_openapi::jiff::Timestamp::from_second(i64::try_from(seconds).unwrap_or(0))
        .map(|t| t.to_string())
        .unwrap_or_default()
}

fn pod_policies_reach_workloads_and_exceptions_exempt_until_they_expire(env: &mut Env) {
    env.namespace(APPS, json!({}));
    env.namespace(EXCEPTIONS, json!({}));
    // This control plane's kube-controller-manager writes as the admin user (it runs without
    // --use-service-account-credentials): its writes are the controllers' here.
    let restarted = Restarted::with(
        env,
        &[
            "--exception-namespace",
            EXCEPTIONS,
            "--exception-controller-user",
            "kanon-admin",
        ],
    );
    let env = &mut *restarted.env;
    env.apply_policy(&policy()).expect("the policy is written");
    env.wait_policy_status("ClusterValidatePolicy", None, "kex-no-host-network");

    // The Pod policy judges a Deployment's pod template, and names it.
    let refused = env
        .create(&deployment("web", "web"))
        .expect_err("a Deployment whose Pods would be refused is refused");
    assert!(
        refused.contains(
            "ClusterValidatePolicy/kex-no-host-network: spec.template: hostNetwork is not allowed"
        ),
        "{refused}"
    );
    assert!(env.create(&pod("legacy-0", "legacy")).is_err());

    // An exception with a mistake is refused when written, with the field at fault.
    let mut bad = exception(EXCEPTIONS, "bad", "kex-no-host-network", None);
    // (The CRD's schema already refuses a malformed expiresAt: a date-time.)
    bad["spec"]["policies"][0]["kind"] = json!("ValidatingAdmissionPolicy");
    let out = env.kubectl_stdin(&["apply", "-f", "-"], &bad.to_string());
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains(
            "spec.policies[0].kind: `ValidatingAdmissionPolicy` is not a kanon policy kind"
        ),
        "{}",
        text(&out)
    );

    // One that names a policy that does not exist says so in its status.
    env.apply(&exception(EXCEPTIONS, "typo", "kex-no-host-netwrok", None));
    let (status, _, message) = wait_ready(env, EXCEPTIONS, "typo", "PolicyNotFound");
    assert_eq!(status, "False");
    assert!(
        message.starts_with("ClusterValidatePolicy/kex-no-host-netwrok does not exist"),
        "{message}"
    );

    // A good one, for a short while: Ready, and the legacy Pods (and their Deployment) are
    // admitted while other Pods are not.
    env.apply(&exception(
        EXCEPTIONS,
        "legacy",
        "kex-no-host-network",
        Some(&rfc3339(25)),
    ));
    let (status, _, _) = wait_ready(env, EXCEPTIONS, "legacy", "Honoured");
    assert_eq!(status, "True");
    let status = env
        .get(
            "policy.kanon.dev/v1alpha1",
            "PolicyException",
            "policyexceptions",
            Some(EXCEPTIONS),
            "legacy",
        )
        .and_then(|e| e.pointer("/status/policies").cloned());
    assert_eq!(
        status,
        Some(json!(["ClusterValidatePolicy/kex-no-host-network"]))
    );
    let mut admitted = false;
    env.wait_for("the exception in force", Duration::from_secs(10), || {
        admitted = env.create(&pod("legacy-1", "legacy")).is_ok();
        admitted
    });
    env.create(&deployment("legacy", "legacy"))
        .expect("the legacy Deployment's template is exempt too");

    // An exception that selects a Deployment by name, as Kyverno users write it: the Deployment
    // is admitted, and so are the ReplicaSet and the Pods its controllers create from it (their
    // owner chain leads to it); other Deployments' Pods are not.
    let mut netshoot = exception(EXCEPTIONS, "netshoot", "kex-no-host-network", None);
    netshoot["spec"]["resourceSelectors"] = json!([{"apiVersion": "apps/v1", "kind": "Deployment",
                                                   "namespace": APPS, "name": "netshoot"}]);
    env.apply(&netshoot);
    wait_ready(env, EXCEPTIONS, "netshoot", "Honoured");
    let mut created = false;
    env.wait_for(
        "the netshoot exception in force",
        Duration::from_secs(10),
        || {
            created = env.create(&deployment("netshoot", "netshoot")).is_ok();
            created
        },
    );
    env.wait_for(
        "the netshoot Deployment's Pod, created by its controllers",
        Duration::from_secs(60),
        || {
            let out = env.kubectl(&[
                "get",
                "pods",
                "-n",
                APPS,
                "-l",
                "app=netshoot",
                "-o",
                "name",
            ]);
            !text(&out).trim().is_empty()
        },
    );
    // A Pod written by hand with the same labels is judged as itself.
    assert!(env.create(&pod("netshoot-by-hand", "netshoot")).is_err());
    assert!(env.create(&pod("other", "web")).is_err());
    let metrics = env.kanon.metrics();
    assert!(
        metrics.contains("kanon_exceptions_applied_total{exception=\"PolicyException/kex-exceptions/legacy\",policy=\"ClusterValidatePolicy/kex-no-host-network\"}"),
        "{metrics}"
    );

    // Written where exceptions may not live, an exception exempts nothing.
    // kubectl shows kanon's warning.
    let out = env.kubectl_stdin(
        &["apply", "-f", "-"],
        &exception(APPS, "self-service", "kex-no-host-network", None).to_string(),
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains(
            "PolicyException/kex-apps/self-service: not honoured: kanon honours exceptions only in kex-exceptions"
        ),
        "{}",
        text(&out)
    );
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        ready(env, APPS, "self-service").is_none(),
        "not watched there"
    );

    // Past expiresAt it stops applying, and its status says so.
    let (status, _, _) = wait_ready(env, EXCEPTIONS, "legacy", "Expired");
    assert_eq!(status, "False");
    let refused = env
        .create(&pod("legacy-2", "legacy"))
        .expect_err("an expired exception exempts nothing");
    assert!(refused.contains("hostNetwork is not allowed"), "{refused}");

    env.delete_policy("ClusterValidatePolicy", None, "kex-no-host-network");
    let _ = env.kubectl(&[
        "delete",
        "-n",
        APPS,
        "deployment",
        "netshoot",
        "legacy",
        "--ignore-not-found",
    ]);
    for (namespace, name) in [
        (EXCEPTIONS, "typo"),
        (EXCEPTIONS, "legacy"),
        (EXCEPTIONS, "netshoot"),
        (APPS, "self-service"),
    ] {
        let _ = env.kubectl(&[
            "delete",
            "-n",
            namespace,
            "policyexception",
            name,
            "--ignore-not-found",
        ]);
    }
    drop(restarted);
}
