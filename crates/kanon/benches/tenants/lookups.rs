//! Finding 3: a tenant's `k8s` reference by label selector in a namespace full of large
//! ConfigMaps, and many reviews needing it at once. Before, each review listed the whole
//! namespace and filtered in kanon (100 ConfigMaps of 900 KiB, 16 reviews: 86 → 1,357 MiB);
//! now the apiserver filters, one read is bounded in bytes, concurrent misses share one read.

use anyhow::{Context, Result};
use kanon_control_plane::kanon::Cluster;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

use crate::world::{Figures, Run, flood, review};

/// What the scenario needs.
#[derive(Debug, Clone)]
pub(crate) struct LookupScenario {
    /// The tenant's namespace (filled once, reused by later runs).
    pub(crate) namespace: String,
    /// ConfigMaps in it, and the bytes of data each holds.
    pub(crate) config_maps: usize,
    pub(crate) config_map_bytes: usize,
    /// The `matchLabels` of the policy's reference (the ConfigMaps are labelled
    /// `fill: "yes"`).
    pub(crate) match_labels: Value,
    /// Reviews sent at once.
    pub(crate) reviews: usize,
}

/// Fills the namespace (once), then floods a ValidatePolicy whose condition reads the
/// ConfigMaps its selector matches.
pub(crate) fn label_selector_lookups(
    cluster: &Cluster,
    run: &Run,
    scenario: &LookupScenario,
) -> Result<Figures> {
    let runtime = kanon_control_plane::kanon::runtime()?;
    runtime.block_on(fill(cluster, scenario))?;
    let policy = json!({
        "apiVersion": "policy.kanon.dev/v1alpha1",
        "kind": "ValidatePolicy",
        "metadata": {"name": "tenant-lookups", "namespace": scenario.namespace},
        "spec": {
            "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
            "failurePolicy": "Fail",
            "validateRules": [{"template": {"type": "condition", "condition": {
                "cond": "Exist",
                "dataRef": {"from": "k8s", "path": "$[*].metadata.name", "k8s": {
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "labelSelector": {"matchLabels": scenario.match_labels}}},
                "message": "a ConfigMap the policy reads exists",
            }}}],
        },
    });
    let reviews = vec![review(&scenario.namespace)?; scenario.reviews];
    flood(cluster, run, &policy, &reviews)
}

/// The namespace and its ConfigMaps, labelled `fill: "yes"`; those already there are kept.
async fn fill(cluster: &Cluster, scenario: &LookupScenario) -> Result<()> {
    cluster.apply(&json!({"apiVersion": "v1", "kind": "Namespace",
                          "metadata": {"name": scenario.namespace}}))?;
    let client = cluster.client().await?;
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("", "v1", "ConfigMap"),
        "configmaps",
    );
    let api: Api<DynamicObject> = Api::namespaced_with(client, &scenario.namespace, &resource);
    let blob = "x".repeat(scenario.config_map_bytes);
    for i in 0..scenario.config_maps {
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("blob-{i:03}"), "labels": {"fill": "yes"}},
            "data": {"blob": blob},
        }))?;
        match api.create(&PostParams::default(), &object).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(e) => return Err(e).context("a ConfigMap"),
        }
    }
    Ok(())
}
