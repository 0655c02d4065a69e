//! Finding 6: `$..*` over a deeply nested object. Before, the descent copied each subtree once
//! per ancestor: one 2.5 MB object nested 120 deep took one review from 24 to 325 MiB (548 MiB
//! with four at once). Now a JSONPath runs by reference and copies what it selects within 16 MiB,
//! past which the policy fails under its failurePolicy, naming the bound.

use anyhow::Result;
use kanon_control_plane::kanon::Cluster;
use serde_json::{Value, json};

use crate::world::{Figures, Run, flood, review};

/// The tenant's namespace.
const NAMESPACE: &str = "tenant-jsonpath";

/// An object nested `depth` deep whose innermost level holds `bytes` of text, spread over the
/// levels so that every subtree is large.
fn nested(depth: usize, bytes: usize) -> Value {
    let piece = "x".repeat(bytes / depth);
    let mut value = json!({"leaf": piece});
    for level in 0..depth {
        value = json!({"level": level, "text": piece, "next": value});
    }
    value
}

/// Floods a ValidatePolicy whose condition reads `$..*` of Pods carrying a 2.5 MB object
/// nested 120 deep (`spec.overhead` is not checked by kanon; the review goes straight to it).
pub(crate) fn tenant_jsonpath(cluster: &Cluster, run: &Run, reviews: usize) -> Result<Figures> {
    cluster.apply(&json!({"apiVersion": "v1", "kind": "Namespace",
                          "metadata": {"name": NAMESPACE}}))?;
    let policy = json!({
        "apiVersion": "policy.kanon.dev/v1alpha1",
        "kind": "ValidatePolicy",
        "metadata": {"name": "descent", "namespace": NAMESPACE},
        "spec": {
            "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
            "failurePolicy": "Fail",
            "validateRules": [{"template": {"type": "condition", "condition": {
                "cond": "NotExist", "dataRef": {"from": "current", "path": "$..*"},
                "message": "the object holds values"}}}],
        },
    });
    let mut review = review(NAMESPACE)?;
    review["request"]["object"]["spec"]["nested"] = nested(120, 2_500_000);
    flood(cluster, run, &policy, &vec![review; reviews])
}
