//! Pod policies reach the pod templates of workloads: a Deployment (StatefulSet, DaemonSet,
//! ReplicaSet, Job, CronJob) whose Pods a policy would deny is denied itself, with a message
//! naming its template; Pod mutations patch the template; `podTemplates: false` turns it off.

mod common;

use common::*;
use kanon_api::Operation;
use kanon_engine::{Decision, NoObjects, PolicySet, Request, WebhookKind, block_on};
use serde_json::{Value, json};

/// A ClusterValidatePolicy on Pods denying privileged containers (CEL).
fn no_privileged(extra: Value) -> Value {
    let mut spec = json!({
        "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
        "validateRules": [{"cel": {"validations": [{
            "expression": "object.spec.containers.all(c, !has(c.securityContext) || !has(c.securityContext.privileged) || !c.securityContext.privileged)",
            "messageExpression": "'Pod ' + object.metadata.name + ' in ' + object.metadata.namespace + ': privileged containers are not allowed'",
        }]}}],
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    cvp("no-privileged", spec)
}

fn containers(privileged: bool) -> Value {
    json!([{"name": "app", "image": "nginx:1.27", "securityContext": {"privileged": privileged}}])
}

fn deployment(privileged: bool) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": containers(privileged)}},
        },
    })
}

fn cronjob(privileged: bool) -> Value {
    json!({
        "apiVersion": "batch/v1", "kind": "CronJob",
        "metadata": {"name": "nightly", "namespace": "shop"},
        "spec": {"schedule": "0 3 * * *", "jobTemplate": {"spec": {"template": {"spec": {
            "restartPolicy": "OnFailure", "containers": containers(privileged),
        }}}}},
    })
}

fn review(set: &PolicySet, request: &Request) -> Decision {
    block_on(set.review(request, &NoObjects))
}

#[test]
fn a_workload_whose_pods_would_be_denied_is_denied_naming_its_template() {
    let set = set_of(&[no_privileged(json!({}))]);
    let denied = review(&set, &create(&deployment(true)));
    assert!(!denied.allowed, "{denied:#?}");
    assert_eq!(
        denied.messages,
        [
            "ClusterValidatePolicy/no-privileged: spec.template: Pod web in shop: privileged containers are not allowed"
        ]
    );
    let cron = review(&set, &create(&cronjob(true)));
    assert_eq!(
        cron.messages,
        [
            "ClusterValidatePolicy/no-privileged: spec.jobTemplate.spec.template: Pod nightly in shop: privileged containers are not allowed"
        ]
    );
    for kind in ["StatefulSet", "DaemonSet", "ReplicaSet"] {
        let mut object = deployment(true);
        object["kind"] = json!(kind);
        assert!(!review(&set, &create(&object)).allowed, "{kind}");
    }
    let mut job = cronjob(true)["spec"]["jobTemplate"].clone();
    job["apiVersion"] = json!("batch/v1");
    job["kind"] = json!("Job");
    job["metadata"] = json!({"name": "once", "namespace": "shop"});
    assert!(!review(&set, &create(&job)).allowed);

    let allowed = review(&set, &create(&deployment(false)));
    assert!(allowed.allowed, "{allowed:#?}");
    assert_eq!(
        allowed.applied_policies,
        ["ClusterValidatePolicy/no-privileged"]
    );
    // The same policy still judges Pods as Pods.
    let mut pod = pod("shop", "web-1", json!({}));
    pod["spec"]["containers"] = containers(true);
    assert_eq!(
        review(&set, &create(&pod)).messages,
        [
            "ClusterValidatePolicy/no-privileged: Pod web-1 in shop: privileged containers are not allowed"
        ]
    );
}

#[test]
fn pod_templates_false_keeps_a_policy_to_pods() {
    let set = set_of(&[no_privileged(json!({"podTemplates": false}))]);
    let decision = review(&set, &create(&deployment(true)));
    assert!(decision.allowed, "{decision:#?}");
    assert!(decision.applied_policies.is_empty());
    assert!(
        set.targets(WebhookKind::Validating)
            .types
            .keys()
            .all(|(_, kind)| kind == "Pod")
    );
}

#[test]
fn a_policy_that_selects_the_workload_judges_it_not_its_template_again() {
    let mut policy = no_privileged(json!({}));
    policy["spec"]["resourceSelectors"] = json!([
        {"apiVersion": "v1", "kind": "Pod"},
        {"apiVersion": "apps/v1", "kind": "Deployment"},
    ]);
    let set = set_of(&[policy]);
    // On the Deployment itself, `object.spec.containers` does not exist: the rule fails as
    // the author wrote it, once, on the Deployment, and is not run a second time on the template.
    let decision = review(&set, &create(&deployment(false)));
    assert_eq!(decision.policy_results.len(), 1, "{decision:#?}");
    // A StatefulSet it does not select still has its template judged.
    let mut sts = deployment(true);
    sts["kind"] = json!("StatefulSet");
    assert!(!review(&set, &create(&sts)).allowed);
}

#[test]
fn label_selectors_match_the_templates_labels() {
    let mut policy = no_privileged(json!({}));
    policy["spec"]["resourceSelectors"] = json!([{"apiVersion": "v1", "kind": "Pod", "labelSelector": {"matchLabels": {"tier": "front"}}}]);
    let set = set_of(&[policy]);
    let mut object = deployment(true);
    assert!(
        review(&set, &create(&object)).allowed,
        "the template has no tier label"
    );
    // The workload's own labels are not the Pods'.
    object["metadata"]["labels"] = json!({"tier": "front"});
    assert!(review(&set, &create(&object)).allowed);
    object["spec"]["template"]["metadata"]["labels"]["tier"] = json!("front");
    assert!(!review(&set, &create(&object)).allowed);
}

#[test]
fn only_writes_of_the_workload_itself_are_judged() {
    let set = set_of(&[no_privileged(json!({}))]);
    let object = deployment(true);
    let written = Request::from_objects(
        Operation::Update,
        Some(object.clone()),
        Some(deployment(false)),
    )
    .expect("an UPDATE");
    assert!(
        !review(&set, &written).allowed,
        "an UPDATE that writes the template"
    );
    // Scaling (as the Deployment controller scales ReplicaSets, by a full update) leaves the
    // template as it was: not judged again, so a workload admitted before the policy can
    // still be scaled, rolled back or deleted.
    let mut scaled = object.clone();
    scaled["spec"]["replicas"] = json!(5);
    let scale = Request::from_objects(Operation::Update, Some(scaled), Some(object.clone()))
        .expect("an UPDATE");
    assert!(review(&set, &scale).allowed, "{:#?}", review(&set, &scale));
    let update = request(Operation::Update, &object);
    assert!(
        review(&set, &update).allowed,
        "an update that leaves the template as it was"
    );
    let mut status = request(Operation::Update, &object);
    status.info["subResource"] = json!("status");
    assert!(
        review(&set, &status).allowed,
        "a status update does not write the template"
    );
    let delete = request(Operation::Delete, &object);
    assert!(review(&set, &delete).allowed);
}

#[test]
fn the_webhook_is_called_for_workloads_on_create_and_update() {
    let mut policy = no_privileged(json!({}));
    policy["spec"]["validateRules"][0]["targetOperations"] = json!(["CREATE", "DELETE"]);
    let set = set_of(&[policy]);
    let targets = set.targets(WebhookKind::Validating);
    let key = |v: &str, k: &str| (v.to_string(), k.to_string());
    assert_eq!(
        targets.types.get(&key("v1", "Pod")),
        Some(&vec![Operation::Create, Operation::Delete])
    );
    for (api_version, kind) in [
        ("apps/v1", "Deployment"),
        ("apps/v1", "StatefulSet"),
        ("apps/v1", "DaemonSet"),
        ("apps/v1", "ReplicaSet"),
        ("batch/v1", "Job"),
        ("batch/v1", "CronJob"),
    ] {
        assert_eq!(
            targets.types.get(&key(api_version, kind)),
            Some(&vec![Operation::Create]),
            "{kind}"
        );
    }
}

/// A ClusterOverridePolicy on Pods adding a label and a default seccomp profile (CEL), and an
/// annotation (plaintext).
fn defaults() -> Value {
    cop(
        "defaults",
        json!({
            "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
            "overrideRules": [{"overriders": {
                "cel": {"mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression":
                    "Object{metadata: Object.metadata{labels: {'team': 'shop'}}, spec: Object.spec{securityContext: Object.spec.securityContext{seccompProfile: Object.spec.securityContext.seccompProfile{type: 'RuntimeDefault'}}}}"}}]},
            }}],
        }),
    )
}

#[test]
fn pod_mutations_patch_the_template() {
    let set = set_of(&[defaults()]);
    let object = deployment(false);
    let decision = review(&set, &create(&object));
    assert!(decision.allowed, "{decision:#?}");
    assert_patch_is_diff(&object, &decision);
    let patched = decision.patched.as_ref().expect("patched");
    assert_eq!(
        patched["spec"]["template"]["metadata"]["labels"],
        json!({"app": "web", "team": "shop"})
    );
    assert_eq!(
        patched["spec"]["template"]["spec"]["securityContext"],
        json!({"seccompProfile": {"type": "RuntimeDefault"}})
    );
    // The namespace and name the rules saw are the workload's, not written into the template.
    assert_eq!(
        patched["spec"]["template"]["metadata"].get("namespace"),
        None
    );
    assert_eq!(patched["spec"]["template"]["metadata"].get("name"), None);
    assert_eq!(patched["metadata"], object["metadata"]);

    // A template without metadata gets one; the in-place (webhook) path gives the same patch.
    let cron = cronjob(false);
    let decision = review(&set, &create(&cron));
    assert_patch_is_diff(&cron, &decision);
    let template =
        &decision.patched.as_ref().expect("patched")["spec"]["jobTemplate"]["spec"]["template"];
    assert_eq!(template["metadata"], json!({"labels": {"team": "shop"}}));
    let mut in_place = create(&cron);
    let saved = block_on(set.mutate_patch(&mut in_place, &NoObjects));
    assert_eq!(saved.patch, decision.patch);
}

#[test]
fn pod_mutations_and_validations_meet_on_the_template() {
    // The validation sees the template as mutated: a seccomp profile the mutation adds.
    let needs_seccomp = cvp(
        "needs-seccomp",
        json!({
            "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
            "validateRules": [{"cel": {"validations": [{
                "expression": "has(object.spec.securityContext) && has(object.spec.securityContext.seccompProfile)",
                "message": "a seccomp profile is required",
            }]}}],
        }),
    );
    let validating = set_of(std::slice::from_ref(&needs_seccomp));
    assert_eq!(
        review(&validating, &create(&deployment(false))).messages,
        ["ClusterValidatePolicy/needs-seccomp: spec.template: a seccomp profile is required"]
    );
    let both = set_of(&[defaults(), needs_seccomp]);
    let decision = review(&both, &create(&deployment(false)));
    assert!(decision.allowed, "{decision:#?}");
}

#[test]
fn errors_under_the_failure_policy_name_the_template() {
    let mut policy = no_privileged(json!({"failurePolicy": "Ignore"}));
    policy["spec"]["validateRules"][0]["cel"]["validations"][0]["expression"] =
        json!("object.spec.nodeName == 'x'");
    let set = set_of(&[policy]);
    let decision = review(&set, &create(&deployment(false)));
    assert!(decision.allowed);
    assert_eq!(decision.warnings.len(), 1, "{decision:#?}");
    assert!(
        decision.warnings[0].starts_with(
            "ClusterValidatePolicy/no-privileged: spec.template: skipped (failurePolicy Ignore): "
        ),
        "{decision:#?}"
    );
}
