//! The reviews the bench sends (the fixtures as they are, grown to just under kanon's body
//! limit, or of made-up kinds) and the policy kanon serves.

use std::sync::Arc;

use anyhow::{Context, Result};
use serde_json::Value;

use crate::{BIG_BODY, repo};

pub(crate) struct Bodies {
    /// fixtures/admission-reviews/pod-create.json as it is.
    pub(crate) pod: Arc<[u8]>,
    /// The same review with `request.object.spec.junk: [0,0,...]`, [`BIG_BODY`] bytes.
    pub(crate) big_array: Arc<[u8]>,
    /// The same review with a `request.uid` that makes it [`BIG_BODY`] bytes.
    pub(crate) big_uid: Arc<[u8]>,
    /// fixtures/admission-reviews/deployment-update.json.
    pub(crate) deployment: Arc<[u8]>,
    /// The pod review, parsed, for the made-up kinds.
    pod_value: Value,
}

fn fixture(name: &str) -> Result<Vec<u8>> {
    let path = repo().join("fixtures/admission-reviews").join(name);
    std::fs::read(&path).with_context(|| format!("reading {}", path.display()))
}

/// `review` serialized with the string `"@@FILL@@"` at `pointer` replaced by `fill(n)` for the
/// `n` that makes the whole `size` bytes.
fn grown(
    review: &Value,
    pointer: &str,
    size: usize,
    fill: fn(usize) -> Vec<u8>,
) -> Result<Vec<u8>> {
    let mut review = review.clone();
    *review
        .pointer_mut(pointer)
        .with_context(|| format!("the fixture has no {pointer}"))? = Value::from("@@FILL@@");
    let text = serde_json::to_vec(&review)?;
    let marker = b"\"@@FILL@@\"";
    let at = text
        .windows(marker.len())
        .position(|w| w == marker)
        .context("the marker is in the serialized review")?;
    let room = size
        .checked_sub(text.len() - marker.len())
        .context("the fixture is larger than the body")?;
    let mut out = text[..at].to_vec();
    out.extend(fill(room));
    out.extend(&text[at + marker.len()..]);
    Ok(out)
}

/// `[0,0,...,0]` of at most `room` bytes.
fn zeros(room: usize) -> Vec<u8> {
    let n = (room.saturating_sub(1) / 2).max(1);
    let mut out = Vec::with_capacity(2 * n + 1);
    out.push(b'[');
    for i in 0..n {
        out.extend_from_slice(if i + 1 == n { b"0]" } else { b"0," });
    }
    out
}

/// A JSON string of `room` bytes.
fn long_string(room: usize) -> Vec<u8> {
    let mut out = vec![b'u'; room.max(2)];
    out[0] = b'"';
    let last = out.len() - 1;
    out[last] = b'"';
    out
}

impl Bodies {
    pub(crate) fn load() -> Result<Bodies> {
        let pod = fixture("pod-create.json")?;
        let pod_value: Value = serde_json::from_slice(&pod).context("pod-create.json is JSON")?;
        let mut with_spec = pod_value.clone();
        with_spec
            .pointer_mut("/request/object/spec")
            .and_then(Value::as_object_mut)
            .context("pod-create.json has request.object.spec")?
            .insert("junk".into(), Value::Null);
        Ok(Bodies {
            big_array: grown(&with_spec, "/request/object/spec/junk", BIG_BODY, zeros)?.into(),
            big_uid: grown(&pod_value, "/request/uid", BIG_BODY, long_string)?.into(),
            deployment: fixture("deployment-update.json")?.into(),
            pod: pod.into(),
            pod_value,
        })
    }

    /// The pod review as a review of the made-up kind `kind`.
    pub(crate) fn of_kind(&self, kind: &str) -> Vec<u8> {
        let mut review = self.pod_value.clone();
        for pointer in [
            "/request/kind/kind",
            "/request/requestKind/kind",
            "/request/object/kind",
        ] {
            if let Some(value) = review.pointer_mut(pointer) {
                *value = Value::from(kind);
            }
        }
        let resource = format!("{}s", kind.to_lowercase());
        for pointer in [
            "/request/resource/resource",
            "/request/requestResource/resource",
        ] {
            if let Some(value) = review.pointer_mut(pointer) {
                *value = Value::from(resource.as_str());
            }
        }
        serde_json::to_vec(&review).unwrap_or_default()
    }
}

/// Selects every kind and never denies (the label is never set), so every legitimate review
/// is evaluated and allowed.
pub(crate) const POLICY: &str = "apiVersion: policy.kanon.dev/v1alpha1
kind: ClusterValidatePolicy
metadata: {name: adversary-never-denies}
spec:
  resourceSelectors: []
  validateRules:
  - template:
      type: condition
      condition:
        cond: Exist
        dataRef: {from: current, path: /metadata/labels/kanon-adversary-never-set}
        message: never denied
";
