//! kanon's webhook configurations: the rule layout (pure), then every behaviour against a real
//! kube-apiserver 1.35 (see `kanon-control-plane`).
//!
//! The cluster scenarios share one control plane and run one after another inside a single
//! test (so that the control plane is stopped and its state directory deleted at the end);
//! each prints its duration and a failure in one does not hide the others. Each scenario
//! creates its own pair of configurations as the chart would, named after it, with
//! `failurePolicy: Ignore`, a URL nothing answers and an `objectSelector` nothing matches, so
//! that whatever rules kanon writes never get in the way of the test's own requests.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use base64::Engine as _;
use kanon_api::Operation::{self, Connect, Create, Delete, Update};
use kanon_cluster::webhooks::{
    FIELD_MANAGER, Outcome, ResolvedType, RuleMode, WebhookConfig, WebhookConfigurations,
    WebhookError, generate_rules, needed_types,
};
use kanon_control_plane::Options;
use kanon_control_plane::kanon as kit;
use kanon_engine::Targets;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};
use tokio::sync::watch;

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

fn targets(types: &[(&str, &str, &[Operation])], every_type: &[Operation]) -> Targets {
    Targets {
        types: types
            .iter()
            .map(|(v, k, ops)| ((v.to_string(), k.to_string()), ops.to_vec()))
            .collect(),
        every_type: every_type.to_vec(),
    }
}

fn resolved(
    entries: &[(&str, &str, &str, &str, &str)],
) -> BTreeMap<(String, String), ResolvedType> {
    entries
        .iter()
        .map(|(api_version, kind, group, version, plural)| {
            (
                (api_version.to_string(), kind.to_string()),
                ResolvedType {
                    group: group.to_string(),
                    version: version.to_string(),
                    plural: plural.to_string(),
                    namespaced: true,
                },
            )
        })
        .collect()
}

/// A rule as the apiserver stores it.
fn rule(group: &str, version: &str, operations: &[&str], resources: &[&str]) -> Value {
    json!({"apiGroups": [group], "apiVersions": [version], "operations": operations,
           "resources": resources, "scope": "*"})
}

fn catch_all(operations: &[&str]) -> Value {
    json!({"apiGroups": ["*"], "apiVersions": ["*"], "operations": operations,
           "resources": ["*/*"], "scope": "*"})
}

fn to_json(rules: &[kanon_cluster::webhooks::Rule]) -> Value {
    serde_json::to_value(rules).unwrap()
}

// ---------------------------------------------------------------------------------------------
// The rule layout, without a cluster
// ---------------------------------------------------------------------------------------------

fn several_kinds() -> (Targets, BTreeMap<(String, String), ResolvedType>) {
    let targets = targets(
        &[
            ("v1", "Pod", &[Update, Create, Connect]),
            ("v1", "ConfigMap", &[Create, Update]),
            ("v1", "Namespace", &[Update]),
            ("apps/v1", "StatefulSet", &[Create, Update]),
            ("apps/v1", "Deployment", &[Create, Update]),
            ("apps/v1", "DaemonSet", &[Delete]),
            ("example.dev/v1", "Missing", &[Create]),
        ],
        &[],
    );
    let resolved = resolved(&[
        ("v1", "Pod", "", "v1", "pods"),
        ("v1", "ConfigMap", "", "v1", "configmaps"),
        ("v1", "Namespace", "", "v1", "namespaces"),
        ("apps/v1", "StatefulSet", "apps", "v1", "statefulsets"),
        ("apps/v1", "Deployment", "apps", "v1", "deployments"),
        ("apps/v1", "DaemonSet", "apps", "v1", "daemonsets"),
    ]);
    (targets, resolved)
}

#[test]
fn rules_are_merged_by_group_version_and_operations_and_sorted() {
    let (targets, resolved) = several_kinds();
    let rules = generate_rules(&targets, RuleMode::Generated, &resolved);
    assert_eq!(
        to_json(&rules),
        json!([
            rule("", "v1", &["CREATE", "UPDATE"], &["configmaps", "pods"]),
            rule("", "v1", &["UPDATE"], &["namespaces"]),
            rule("", "v1", &["CONNECT"], &["pods/*"]),
            rule(
                "apps",
                "v1",
                &["CREATE", "UPDATE"],
                &["deployments", "statefulsets"]
            ),
            rule("apps", "v1", &["DELETE"], &["daemonsets"]),
        ])
    );
    // The same input in another order gives byte-identical rules.
    let mut reordered = targets.clone();
    for ops in reordered.types.values_mut() {
        ops.reverse();
    }
    let again = generate_rules(&reordered, RuleMode::Generated, &resolved);
    assert_eq!(
        serde_json::to_string(&again).unwrap(),
        serde_json::to_string(&rules).unwrap()
    );
    // Every type is needed, the unresolved one included (it is discovery's to report).
    assert_eq!(needed_types(&targets, RuleMode::Generated).len(), 7);
}

#[test]
fn every_type_gives_a_catch_all_rule_and_specific_rules_only_for_the_rest() {
    let targets = targets(
        &[
            ("v1", "Pod", &[Create, Delete]),
            ("apps/v1", "Deployment", &[Update]),
            ("example.dev/v1", "Missing", &[Create]),
        ],
        &[Update, Create],
    );
    let resolved = resolved(&[("v1", "Pod", "", "v1", "pods")]);
    let rules = generate_rules(&targets, RuleMode::Generated, &resolved);
    assert_eq!(
        to_json(&rules),
        json!([
            catch_all(&["CREATE", "UPDATE"]),
            rule("", "v1", &["DELETE"], &["pods"]),
        ])
    );
    // Deployment and Missing are covered by the catch-all: nothing to resolve for them.
    assert_eq!(
        needed_types(&targets, RuleMode::Generated)
            .into_iter()
            .collect::<Vec<_>>(),
        vec![("v1".to_string(), "Pod".to_string())]
    );
}

#[test]
fn catch_all_mode_ignores_the_targets_and_no_targets_give_no_rules() {
    let (targets, resolved) = several_kinds();
    let all = json!([catch_all(&["CREATE", "UPDATE", "DELETE", "CONNECT"])]);
    assert_eq!(
        to_json(&generate_rules(&targets, RuleMode::CatchAll, &resolved)),
        all
    );
    assert_eq!(
        to_json(&generate_rules(
            &Targets::default(),
            RuleMode::CatchAll,
            &resolved
        )),
        all
    );
    assert!(needed_types(&targets, RuleMode::CatchAll).is_empty());
    assert_eq!(
        generate_rules(&Targets::default(), RuleMode::Generated, &resolved),
        vec![]
    );
    // `*` in every_type is the four operations.
    assert_eq!(
        to_json(&generate_rules(
            &targets_every(&[Operation::All]),
            RuleMode::Generated,
            &resolved
        )),
        all
    );
}

fn targets_every(ops: &[Operation]) -> Targets {
    targets(&[], ops)
}

// ---------------------------------------------------------------------------------------------
// Against a real apiserver
// ---------------------------------------------------------------------------------------------

struct Cluster {
    client: kube::Client,
    /// The control plane with kanon's CRDs (last: it stops after the client is gone).
    kit: kit::Cluster,
}

const MUTATE: &str = "mutate.kanon.dev";
const VALIDATE: &str = "validate.kanon.dev";
const POLICIES: &str = "policies.kanon.dev";
const OTHER: &str = "other.example.dev";

fn webhook_resource(mutating: bool) -> ApiResource {
    let (kind, plural) = if mutating {
        (
            "MutatingWebhookConfiguration",
            "mutatingwebhookconfigurations",
        )
    } else {
        (
            "ValidatingWebhookConfiguration",
            "validatingwebhookconfigurations",
        )
    };
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind),
        plural,
    )
}

fn api(client: &kube::Client, mutating: bool) -> Api<DynamicObject> {
    Api::all_with(client.clone(), &webhook_resource(mutating))
}

fn config(name: &str) -> WebhookConfig {
    WebhookConfig {
        name: name.to_string(),
        mode: RuleMode::Generated,
        mutating: vec![MUTATE.to_string()],
        validating: vec![VALIDATE.to_string()],
        ca_only: vec![POLICIES.to_string()],
        resync: Duration::from_secs(60),
    }
}

/// The static part of one entry, as the chart writes it.
fn chart_entry(name: &str, timeout: i64) -> Value {
    json!({
        "name": name,
        "clientConfig": {"url": format!("https://127.0.0.1:9/{name}")},
        "failurePolicy": "Ignore",
        "matchPolicy": "Equivalent",
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": timeout,
        "namespaceSelector": {"matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
             "values": ["kube-system", "kube-node-lease", "kanon-system"]},
            {"key": "kanon.dev/ignore", "operator": "DoesNotExist"},
        ]},
        // Nothing carries this label: the apiserver never calls these test webhooks.
        "objectSelector": {"matchLabels": {"test.kanon.dev/never": "true"}},
    })
}

/// The chart's two objects: kanon's entries without caBundle (but `policies.kanon.dev` with
/// its static rules), and an entry of someone else's with its own caBundle and rules.
fn chart(name: &str, timeout: i64) -> (Value, Value) {
    let mut other = chart_entry(OTHER, timeout);
    other["clientConfig"]["caBundle"] = json!("b3RoZXI=");
    other["rules"] = json!([rule("", "v1", &["CREATE"], &["secrets"])]);
    let mut policies = chart_entry(POLICIES, timeout);
    policies["rules"] = json!([rule("policy.kanon.dev", "*", &["CREATE", "UPDATE"], &["*"])]);
    let mutating = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "Helm"}},
        "webhooks": [chart_entry(MUTATE, timeout), other],
    });
    let validating = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "Helm"}},
        "webhooks": [policies, chart_entry(VALIDATE, timeout), other],
    });
    (mutating, validating)
}

/// Installs (or upgrades) the chart's objects as helm 4 does: server-side apply under the
/// field manager `helm`.
async fn helm_apply(client: &kube::Client, name: &str, timeout: i64) {
    let (mutating, validating) = chart(name, timeout);
    let params = PatchParams::apply("helm").force();
    api(client, true)
        .patch(name, &params, &Patch::Apply(&mutating))
        .await
        .expect("the chart's MutatingWebhookConfiguration");
    api(client, false)
        .patch(name, &params, &Patch::Apply(&validating))
        .await
        .expect("the chart's ValidatingWebhookConfiguration");
}

async fn uninstall(client: &kube::Client, name: &str) {
    for mutating in [true, false] {
        let _ = api(client, mutating)
            .delete(name, &DeleteParams::default())
            .await;
    }
}

/// The live object, as JSON.
async fn live(client: &kube::Client, mutating: bool, name: &str) -> Value {
    serde_json::to_value(api(client, mutating).get(name).await.expect("the object")).unwrap()
}

fn entry<'a>(object: &'a Value, name: &str) -> &'a Value {
    object["webhooks"]
        .as_array()
        .expect("webhooks")
        .iter()
        .find(|e| e["name"] == name)
        .unwrap_or_else(|| panic!("no entry {name} in {object}"))
}

fn rules_of(object: &Value, name: &str) -> Value {
    entry(object, name)
        .get("rules")
        .cloned()
        .unwrap_or_else(|| json!([]))
}

fn ca_of(object: &Value, name: &str) -> Vec<u8> {
    let text = entry(object, name)["clientConfig"]["caBundle"]
        .as_str()
        .unwrap_or_default();
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .expect("base64")
}

fn resource_version(object: &Value) -> String {
    object["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The object's entries without the fields kanon owns (`caBundle` of the managed and ca-only
/// entries, `rules` of the managed ones), for comparing everything else.
fn without_kanon_fields(object: &Value) -> Value {
    let mut webhooks = object["webhooks"].clone();
    for e in webhooks.as_array_mut().unwrap() {
        let name = e["name"].as_str().unwrap().to_string();
        if [MUTATE, VALIDATE, POLICIES].contains(&name.as_str()) {
            e["clientConfig"]
                .as_object_mut()
                .unwrap()
                .remove("caBundle");
        }
        if [MUTATE, VALIDATE].contains(&name.as_str()) {
            e.as_object_mut().unwrap().remove("rules");
        }
    }
    webhooks
}

fn ca_pem(name: &str) -> Vec<u8> {
    rcgen::generate_simple_self_signed(vec![name.to_string()])
        .expect("a certificate")
        .cert
        .pem()
        .into_bytes()
}

async fn eventually<F, Fut>(what: &str, timeout: Duration, mut check: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = Instant::now();
    while !check().await {
        assert!(started.elapsed() < timeout, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    started.elapsed()
}

/// The targets of the first scenarios: core, apps and one of kanon's own CRDs.
fn mutating_targets() -> Targets {
    targets(
        &[
            ("v1", "Pod", &[Create, Update, Connect]),
            ("v1", "ConfigMap", &[Create, Update]),
            ("v1", "Namespace", &[Update]),
            ("apps/v1", "Deployment", &[Create, Update]),
            ("apps/v1", "StatefulSet", &[Create, Update]),
            ("apps/v1", "DaemonSet", &[Delete]),
            (
                "policy.kanon.dev/v1alpha1",
                "ClusterOverridePolicy",
                &[Create, Update],
            ),
        ],
        &[],
    )
}

fn mutating_rules() -> Value {
    json!([
        rule("", "v1", &["CREATE", "UPDATE"], &["configmaps", "pods"]),
        rule("", "v1", &["UPDATE"], &["namespaces"]),
        rule("", "v1", &["CONNECT"], &["pods/*"]),
        rule(
            "apps",
            "v1",
            &["CREATE", "UPDATE"],
            &["deployments", "statefulsets"]
        ),
        rule("apps", "v1", &["DELETE"], &["daemonsets"]),
        rule(
            "policy.kanon.dev",
            "v1alpha1",
            &["CREATE", "UPDATE"],
            &["clusteroverridepolicies"]
        ),
    ])
}

fn validating_targets() -> Targets {
    targets(
        &[
            ("apps/v1", "Deployment", &[Create, Update, Delete]),
            ("v1", "Service", &[Create]),
            ("policy.kanon.dev/v1alpha1", "ValidatePolicy", &[Delete]),
        ],
        &[],
    )
}

fn validating_rules() -> Value {
    json!([
        rule("", "v1", &["CREATE"], &["services"]),
        rule(
            "apps",
            "v1",
            &["CREATE", "UPDATE", "DELETE"],
            &["deployments"]
        ),
        rule(
            "policy.kanon.dev",
            "v1alpha1",
            &["DELETE"],
            &["validatepolicies"]
        ),
    ])
}

/// Writes exactly the expected rules, the caBundle everywhere it belongs, and nothing else;
/// kanon owns exactly those fields.
async fn generated_rules_and_ca_bundle(cluster: &Cluster) {
    let client = &cluster.client;
    let name = "generated";
    helm_apply(client, name, 5).await;
    let (m_before, v_before) = (
        live(client, true, name).await,
        live(client, false, name).await,
    );
    let ca = ca_pem("generated");
    let webhooks = WebhookConfigurations::new(client.clone(), config(name));
    let report = webhooks
        .sync(&mutating_targets(), &validating_targets(), &ca)
        .await
        .expect("sync");
    assert_eq!(report.mutating, Outcome::Written);
    assert_eq!(report.validating, Outcome::Written);
    assert_eq!(report.unresolved, vec![]);
    assert!(!report.is_unchanged());

    let (m, v) = (
        live(client, true, name).await,
        live(client, false, name).await,
    );
    assert_eq!(rules_of(&m, MUTATE), mutating_rules());
    assert_eq!(rules_of(&v, VALIDATE), validating_rules());
    for (object, entry_name) in [(&m, MUTATE), (&v, VALIDATE), (&v, POLICIES)] {
        assert_eq!(ca_of(object, entry_name), ca, "caBundle of {entry_name}");
    }
    // The ca-only entry keeps the chart's rules; someone else's entry is untouched; so are
    // the static fields of kanon's entries, and the entries' order.
    assert_eq!(rules_of(&v, POLICIES), rules_of(&v_before, POLICIES));
    assert_eq!(entry(&m, OTHER), entry(&m_before, OTHER));
    assert_eq!(entry(&v, OTHER), entry(&v_before, OTHER));
    assert_eq!(without_kanon_fields(&m), without_kanon_fields(&m_before));
    assert_eq!(without_kanon_fields(&v), without_kanon_fields(&v_before));
    assert_eq!(entry(&m, MUTATE)["timeoutSeconds"], 5);
    assert_eq!(entry(&m, MUTATE)["failurePolicy"], "Ignore");

    // Field ownership: kanon's apply owns caBundle and rules of its entries, nothing else.
    let kanon = |object: &Value| {
        object["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["manager"] == FIELD_MANAGER)
            .cloned()
            .expect("kanon's managed fields")
    };
    let key = |n: &str| format!("k:{{\"name\":\"{n}\"}}");
    let owned = |rules: bool| {
        let mut fields = json!({".": {}, "f:clientConfig": {"f:caBundle": {}}, "f:name": {}});
        if rules {
            fields["f:rules"] = json!({});
        }
        fields
    };
    let m_fields = kanon(&m);
    assert_eq!(m_fields["operation"], "Apply");
    assert_eq!(
        m_fields["fieldsV1"],
        json!({"f:webhooks": {key(MUTATE): owned(true)}})
    );
    assert_eq!(
        kanon(&v)["fieldsV1"],
        json!({"f:webhooks": {key(POLICIES): owned(false), key(VALIDATE): owned(true)}})
    );
    uninstall(client, name).await;
}

/// The same input again writes nothing; a change of targets writes once, only the
/// configuration concerned; a new bundle writes both.
async fn writes_only_what_differs(cluster: &Cluster) {
    let client = &cluster.client;
    let name = "only-differences";
    helm_apply(client, name, 5).await;
    let ca = ca_pem("one");
    let webhooks = WebhookConfigurations::new(client.clone(), config(name));
    let (mutating, validating) = (mutating_targets(), validating_targets());
    webhooks
        .sync(&mutating, &validating, &ca)
        .await
        .expect("sync");
    let versions = |m: &Value, v: &Value| (resource_version(m), resource_version(v));
    let before = versions(
        &live(client, true, name).await,
        &live(client, false, name).await,
    );

    let report = webhooks
        .sync(&mutating, &validating, &ca)
        .await
        .expect("sync");
    assert_eq!(report.mutating, Outcome::Unchanged);
    assert_eq!(report.validating, Outcome::Unchanged);
    assert!(report.is_unchanged());
    // A new instance (a restart, another replica) finds nothing to do either.
    let other = WebhookConfigurations::new(client.clone(), config(name));
    assert!(
        other
            .sync(&mutating, &validating, &ca)
            .await
            .expect("sync")
            .is_unchanged()
    );
    let after = versions(
        &live(client, true, name).await,
        &live(client, false, name).await,
    );
    assert_eq!(after, before, "no write without a change");

    // A policy more: one write of the mutating configuration.
    let mut more = mutating.clone();
    more.types.insert(
        ("batch/v1".to_string(), "Job".to_string()),
        vec![Create, Update],
    );
    let report = webhooks.sync(&more, &validating, &ca).await.expect("sync");
    assert_eq!(
        (report.mutating, report.validating),
        (Outcome::Written, Outcome::Unchanged)
    );
    let m = live(client, true, name).await;
    assert_ne!(resource_version(&m), before.0);
    assert_eq!(
        rules_of(&m, MUTATE)[5],
        rule("batch", "v1", &["CREATE", "UPDATE"], &["jobs"])
    );
    let report = webhooks.sync(&more, &validating, &ca).await.expect("sync");
    assert!(report.is_unchanged());
    assert_eq!(
        resource_version(&live(client, true, name).await),
        resource_version(&m)
    );

    // A new bundle: both written, every entry kanon manages carries it.
    let renewed = ca_pem("two");
    let report = webhooks
        .sync(&more, &validating, &renewed)
        .await
        .expect("sync");
    assert_eq!(
        (report.mutating, report.validating),
        (Outcome::Written, Outcome::Written)
    );
    let (m, v) = (
        live(client, true, name).await,
        live(client, false, name).await,
    );
    for (object, entry_name) in [(&m, MUTATE), (&v, VALIDATE), (&v, POLICIES)] {
        assert_eq!(
            ca_of(object, entry_name),
            renewed,
            "caBundle of {entry_name}"
        );
    }
    assert_eq!(ca_of(&m, OTHER), b"other");

    // No targets: no rules, so the apiserver calls kanon for nothing.
    let report = webhooks
        .sync(&Targets::default(), &Targets::default(), &renewed)
        .await
        .expect("sync");
    assert_eq!(
        (report.mutating, report.validating),
        (Outcome::Written, Outcome::Written)
    );
    let (m, v) = (
        live(client, true, name).await,
        live(client, false, name).await,
    );
    assert_eq!(rules_of(&m, MUTATE), json!([]));
    assert_eq!(rules_of(&v, VALIDATE), json!([]));
    assert_eq!(ca_of(&m, MUTATE), renewed);
    assert!(
        webhooks
            .sync(&Targets::default(), &Targets::default(), &renewed)
            .await
            .expect("sync")
            .is_unchanged()
    );
    uninstall(client, name).await;
}

/// `helm upgrade` (server-side apply as helm 4, strategic merge as helm 3) and a plain update
/// of static fields leave caBundle and rules alone; someone else's edit of kanon's fields is
/// undone at the next sync.
async fn other_managers_keep_kanons_fields(cluster: &Cluster) {
    let client = &cluster.client;
    let name = "upgrades";
    helm_apply(client, name, 5).await;
    let ca = ca_pem("upgrades");
    let webhooks = WebhookConfigurations::new(client.clone(), config(name));
    let (mutating, validating) = (mutating_targets(), validating_targets());
    webhooks
        .sync(&mutating, &validating, &ca)
        .await
        .expect("sync");
    let kept = |m: &Value, v: &Value| {
        assert_eq!(rules_of(m, MUTATE), mutating_rules());
        assert_eq!(rules_of(v, VALIDATE), validating_rules());
        for (object, entry_name) in [(m, MUTATE), (v, VALIDATE), (v, POLICIES)] {
            assert_eq!(ca_of(object, entry_name), ca, "caBundle of {entry_name}");
        }
    };

    // helm 4: server-side apply of the chart (which sets neither field) with a new timeout.
    helm_apply(client, name, 7).await;
    let (m, v) = (
        live(client, true, name).await,
        live(client, false, name).await,
    );
    assert_eq!(entry(&m, MUTATE)["timeoutSeconds"], 7);
    assert_eq!(entry(&v, VALIDATE)["timeoutSeconds"], 7);
    kept(&m, &v);

    // helm 3: a strategic merge patch of a static field.
    let patch = json!({"webhooks": [{"name": MUTATE, "timeoutSeconds": 9}]});
    let params = PatchParams {
        field_manager: Some("helm".to_string()),
        ..PatchParams::default()
    };
    api(client, true)
        .patch(name, &params, &Patch::Strategic(&patch))
        .await
        .expect("strategic merge patch");
    // A plain update (kubectl edit / replace) of the whole object with a changed selector.
    let mut object: DynamicObject = api(client, false).get(name).await.expect("get");
    let webhooks_list = object.data["webhooks"].as_array_mut().unwrap();
    for e in webhooks_list.iter_mut() {
        if e["name"] == VALIDATE {
            e["namespaceSelector"]["matchExpressions"][1]["key"] = json!("kanon.dev/skip");
        }
    }
    let params = PostParams {
        field_manager: Some("kubectl-edit".to_string()),
        ..PostParams::default()
    };
    api(client, false)
        .replace(name, &params, &object)
        .await
        .expect("replace");
    let (m, v) = (
        live(client, true, name).await,
        live(client, false, name).await,
    );
    assert_eq!(entry(&m, MUTATE)["timeoutSeconds"], 9);
    assert_eq!(
        entry(&v, VALIDATE)["namespaceSelector"]["matchExpressions"][1]["key"],
        "kanon.dev/skip"
    );
    kept(&m, &v);
    // Nothing for kanon to do after any of these.
    assert!(
        webhooks
            .sync(&mutating, &validating, &ca)
            .await
            .expect("sync")
            .is_unchanged()
    );

    // Someone empties kanon's rules and caBundle: the next sync restores them, leaving their
    // other change (the timeout) alone.
    let patch = json!({"webhooks": [{"name": MUTATE, "rules": [], "timeoutSeconds": 3,
                                     "clientConfig": {"caBundle": null}}]});
    let params = PatchParams {
        field_manager: Some("someone".to_string()),
        ..PatchParams::default()
    };
    api(client, true)
        .patch(name, &params, &Patch::Strategic(&patch))
        .await
        .expect("strategic merge patch");
    let m = live(client, true, name).await;
    assert_eq!(rules_of(&m, MUTATE), json!([]));
    assert_eq!(ca_of(&m, MUTATE), b"");
    let report = webhooks
        .sync(&mutating, &validating, &ca)
        .await
        .expect("sync");
    assert_eq!(
        (report.mutating, report.validating),
        (Outcome::Written, Outcome::Unchanged)
    );
    let m = live(client, true, name).await;
    assert_eq!(entry(&m, MUTATE)["timeoutSeconds"], 3);
    kept(&m, &live(client, false, name).await);
    uninstall(client, name).await;
}

fn widget_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.test.kanon.dev"},
        "spec": {
            "group": "test.kanon.dev",
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget",
                      "listKind": "WidgetList"},
            "scope": "Namespaced",
            "versions": [{"name": "v1", "served": true, "storage": true,
                          "schema": {"openAPIV3Schema": {"type": "object",
                                     "x-kubernetes-preserve-unknown-fields": true}}}],
        },
    })
}

/// A kind whose CRD is not installed is left out and reported, and is in the rules at the
/// first sync after the CRD exists.
async fn unknown_kinds_are_reported_then_added(cluster: &Cluster) {
    let client = &cluster.client;
    let name = "unknown-kinds";
    helm_apply(client, name, 5).await;
    let ca = ca_pem("unknown");
    let webhooks = WebhookConfigurations::new(client.clone(), config(name));
    let mutating = targets(
        &[
            ("v1", "Pod", &[Create]),
            ("test.kanon.dev/v1", "Widget", &[Create, Update]),
            ("apps/v1", "NoSuchKind", &[Create]),
            ("not/a/version", "Thing", &[Create]),
        ],
        &[],
    );
    let report = webhooks
        .sync(&mutating, &Targets::default(), &ca)
        .await
        .expect("sync");
    assert_eq!(report.mutating, Outcome::Written);
    let unresolved: Vec<(String, String)> = report
        .unresolved
        .iter()
        .map(|u| (u.api_version.clone(), u.kind.clone()))
        .collect();
    assert_eq!(
        unresolved,
        vec![
            ("apps/v1".to_string(), "NoSuchKind".to_string()),
            ("not/a/version".to_string(), "Thing".to_string()),
            ("test.kanon.dev/v1".to_string(), "Widget".to_string()),
        ]
    );
    assert!(
        report.unresolved[2].reason.contains("CRD"),
        "{:?}",
        report.unresolved[2]
    );
    assert_eq!(
        rules_of(&live(client, true, name).await, MUTATE),
        json!([rule("", "v1", &["CREATE"], &["pods"])])
    );
    // Still unknown: reported again, nothing written.
    let report = webhooks
        .sync(&mutating, &Targets::default(), &ca)
        .await
        .expect("sync");
    assert!(report.is_unchanged());
    assert_eq!(report.unresolved.len(), 3);

    // The CRD arrives: the next sync adds its resource.
    let crds = Api::<DynamicObject>::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
            "customresourcedefinitions",
        ),
    );
    let crd: DynamicObject = serde_json::from_value(widget_crd()).unwrap();
    crds.create(&PostParams::default(), &crd)
        .await
        .expect("the Widget CRD");
    let began = Instant::now();
    let report = loop {
        let report = webhooks
            .sync(&mutating, &Targets::default(), &ca)
            .await
            .expect("sync");
        if report.unresolved.len() == 2 {
            break report;
        }
        assert!(
            began.elapsed() < Duration::from_secs(15),
            "Widget still unresolved: {report:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(report.mutating, Outcome::Written);
    assert_eq!(
        rules_of(&live(client, true, name).await, MUTATE),
        json!([
            rule("", "v1", &["CREATE"], &["pods"]),
            rule("test.kanon.dev", "v1", &["CREATE", "UPDATE"], &["widgets"]),
        ])
    );
    let _ = crds
        .delete("widgets.test.kanon.dev", &DeleteParams::default())
        .await;
    uninstall(client, name).await;
}

/// Policies without resourceSelectors: a catch-all rule for their operations, specific rules
/// for the rest. And `RuleMode::CatchAll`: the catch-all with every operation, always.
async fn catch_all_rules(cluster: &Cluster) {
    let client = &cluster.client;
    let name = "catch-all";
    helm_apply(client, name, 5).await;
    let ca = ca_pem("catch-all");
    let webhooks = WebhookConfigurations::new(client.clone(), config(name));
    let mutating = targets(
        &[
            ("v1", "Pod", &[Create, Delete]),
            ("apps/v1", "Deployment", &[Update]),
            ("test.kanon.dev/v1", "Gadget", &[Create]),
        ],
        &[Create, Update],
    );
    let validating = targets(&[("v1", "Pod", &[Connect])], &[Delete]);
    let report = webhooks
        .sync(&mutating, &validating, &ca)
        .await
        .expect("sync");
    // Gadget is covered by the catch-all: not even looked up.
    assert_eq!(report.unresolved, vec![]);
    let (m, v) = (
        live(client, true, name).await,
        live(client, false, name).await,
    );
    assert_eq!(
        rules_of(&m, MUTATE),
        json!([
            catch_all(&["CREATE", "UPDATE"]),
            rule("", "v1", &["DELETE"], &["pods"]),
        ])
    );
    assert_eq!(
        rules_of(&v, VALIDATE),
        json!([
            catch_all(&["DELETE"]),
            rule("", "v1", &["CONNECT"], &["pods/*"])
        ])
    );

    let mut catch_all_config = config(name);
    catch_all_config.mode = RuleMode::CatchAll;
    let webhooks = WebhookConfigurations::new(client.clone(), catch_all_config);
    let all = json!([catch_all(&["CREATE", "UPDATE", "DELETE", "CONNECT"])]);
    for (mutating, validating) in [
        (mutating.clone(), validating.clone()),
        (Targets::default(), Targets::default()),
    ] {
        webhooks
            .sync(&mutating, &validating, &ca)
            .await
            .expect("sync");
        let (m, v) = (
            live(client, true, name).await,
            live(client, false, name).await,
        );
        assert_eq!(rules_of(&m, MUTATE), all);
        assert_eq!(rules_of(&v, VALIDATE), all);
        assert_eq!(
            rules_of(&v, POLICIES),
            chart(name, 5).1["webhooks"][0]["rules"]
        );
    }
    uninstall(client, name).await;
}

/// No configuration (chart not installed), a configuration without an entry kanon is told to
/// manage, and no permission: typed errors that say what to do; nothing is created.
async fn missing_configurations_are_typed_errors(cluster: &Cluster) {
    let client = &cluster.client;
    let ca = ca_pem("missing");
    let webhooks = WebhookConfigurations::new(client.clone(), config("not-installed"));
    let error = webhooks
        .sync(&mutating_targets(), &validating_targets(), &ca)
        .await
        .expect_err("no configuration");
    match &error {
        WebhookError::ConfigurationMissing { kind, name } => {
            assert_eq!(*kind, "MutatingWebhookConfiguration");
            assert_eq!(name, "not-installed");
        }
        other => panic!("unexpected error {other:?}"),
    }
    assert!(error.to_string().contains("install the chart"), "{error}");
    for mutating in [true, false] {
        assert!(
            api(client, mutating)
                .get_opt("not-installed")
                .await
                .expect("get")
                .is_none(),
            "kanon never creates the configuration"
        );
    }

    // Only the validating configuration installed: the error names the mutating one, and the
    // validating one is still brought in line.
    let name = "half-installed";
    helm_apply(client, name, 5).await;
    api(client, true)
        .delete(name, &DeleteParams::default())
        .await
        .expect("delete");
    let webhooks = WebhookConfigurations::new(client.clone(), config(name));
    let error = webhooks
        .sync(&mutating_targets(), &validating_targets(), &ca)
        .await
        .expect_err("no mutating configuration");
    assert!(
        matches!(
            &error,
            WebhookError::ConfigurationMissing {
                kind: "MutatingWebhookConfiguration",
                ..
            }
        ),
        "{error:?}"
    );
    assert_eq!(
        rules_of(&live(client, false, name).await, VALIDATE),
        validating_rules()
    );

    // An entry the chart does not have.
    let mut absent = config(name);
    absent.mutating.clear();
    absent.validating = vec!["absent.kanon.dev".to_string()];
    let error = WebhookConfigurations::new(client.clone(), absent)
        .sync(&Targets::default(), &Targets::default(), &ca)
        .await
        .expect_err("no such entry");
    match &error {
        WebhookError::EntryMissing { webhook, .. } => assert_eq!(webhook, "absent.kanon.dev"),
        other => panic!("unexpected error {other:?}"),
    }

    // An identity without RBAC.
    let mut kube_config = cluster.kit.kube_config().await.expect("a client config");
    kube_config.auth_info.impersonate = Some("nobody".to_string());
    let nobody = kube::Client::try_from(kube_config).expect("a client");
    let error = WebhookConfigurations::new(nobody, config(name))
        .sync(&Targets::default(), &Targets::default(), &ca)
        .await
        .expect_err("forbidden");
    match &error {
        WebhookError::Forbidden { verb, .. } => assert_eq!(*verb, "get"),
        other => panic!("unexpected error {other:?}"),
    }
    uninstall(client, name).await;
}

/// `run`: the first sync, a change of targets and of the bundle each reach the apiserver
/// within a second; a configuration installed late is picked up by the retries.
async fn run_follows_changes(cluster: &Cluster) {
    let client = &cluster.client;
    let name = "run";
    helm_apply(client, name, 5).await;
    let ca = ca_pem("run-one");
    let (targets_tx, targets_rx) = watch::channel((mutating_targets(), validating_targets()));
    let (ca_tx, ca_rx) = watch::channel(ca.clone());
    let task = tokio::spawn(
        WebhookConfigurations::new(client.clone(), config(name)).run(targets_rx, ca_rx),
    );
    let rules_are = |expected: Value| {
        let expected = expected.clone();
        move || {
            let expected = expected.clone();
            async move { rules_of(&live(client, true, name).await, MUTATE) == expected }
        }
    };
    eventually(
        "the first sync",
        Duration::from_secs(10),
        rules_are(mutating_rules()),
    )
    .await;

    let mut more = mutating_targets();
    more.types.insert(
        ("batch/v1".to_string(), "CronJob".to_string()),
        vec![Create],
    );
    targets_tx.send_replace((more, validating_targets()));
    let mut expected = mutating_rules();
    expected
        .as_array_mut()
        .unwrap()
        .insert(5, rule("batch", "v1", &["CREATE"], &["cronjobs"]));
    let took = eventually(
        "the new targets",
        Duration::from_secs(1),
        rules_are(expected),
    )
    .await;
    eprintln!("webhooks: run wrote new targets after {took:.2?}");

    let renewed = ca_pem("run-two");
    ca_tx.send_replace(renewed.clone());
    let took = eventually("the new bundle", Duration::from_secs(1), || {
        let renewed = renewed.clone();
        async move {
            let (m, v) = (
                live(client, true, name).await,
                live(client, false, name).await,
            );
            ca_of(&m, MUTATE) == renewed && ca_of(&v, POLICIES) == renewed
        }
    })
    .await;
    eprintln!("webhooks: run wrote the new bundle after {took:.2?}");
    task.abort();
    let _ = task.await;

    // Started before the chart is installed: errors, retried with backoff, until it is.
    let late = "run-late";
    let (_targets_tx, targets_rx) = watch::channel((mutating_targets(), validating_targets()));
    let (_ca_tx, ca_rx) = watch::channel(ca.clone());
    let task = tokio::spawn(
        WebhookConfigurations::new(client.clone(), config(late)).run(targets_rx, ca_rx),
    );
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(!task.is_finished(), "run goes on after errors");
    helm_apply(client, late, 5).await;
    let took = eventually(
        "the late configuration",
        Duration::from_secs(10),
        || async { rules_of(&live(client, true, late).await, MUTATE) == mutating_rules() },
    )
    .await;
    eprintln!("webhooks: run filled in the late configuration {took:.2?} after it appeared");
    task.abort();
    let _ = task.await;
    uninstall(client, name).await;
    uninstall(client, late).await;
}

type Scenario = for<'a> fn(&'a Cluster) -> futures::future::BoxFuture<'a, ()>;

macro_rules! scenario {
    ($f:ident) => {
        (stringify!($f), (|c| Box::pin($f(c))) as Scenario)
    };
}

#[test]
fn against_a_real_apiserver() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let started = Instant::now();
    let kit = kit::Cluster::start("webhooks", Options::default())
        .unwrap_or_else(|e| panic!("the control plane with kanon's CRDs: {e:#}"));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let client = runtime.block_on(async { kit.client().await.expect("a client") });
    let cluster = Cluster { client, kit };
    eprintln!(
        "webhooks: control plane and CRDs ready in {:.2?}",
        started.elapsed()
    );

    let scenarios: [(&str, Scenario); 7] = [
        scenario!(generated_rules_and_ca_bundle),
        scenario!(writes_only_what_differs),
        scenario!(other_managers_keep_kanons_fields),
        scenario!(unknown_kinds_are_reported_then_added),
        scenario!(catch_all_rules),
        scenario!(missing_configurations_are_typed_errors),
        scenario!(run_follows_changes),
    ];
    let mut failures = Vec::new();
    for (name, scenario) in scenarios {
        let began = Instant::now();
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            runtime.block_on(scenario(&cluster))
        }));
        let outcome = if result.is_ok() { "ok" } else { "FAILED" };
        eprintln!("webhooks: {name} {outcome} in {:.2?}", began.elapsed());
        if result.is_err() {
            failures.push(name);
        }
    }
    drop(runtime);
    drop(cluster);
    eprintln!("webhooks: all scenarios in {:.2?}", started.elapsed());
    assert!(failures.is_empty(), "failed scenarios: {failures:?}");
}
