//! Triage: what a review is about, read from its body before it is evaluated, so that the
//! server knows whose turn it takes among the evaluation slots (its namespace) and can answer a
//! review that no policy may select at once, without a slot or the evaluation pool.
//!
//! Only the request's identity is read (uid, operation, type, namespace), in place, skipping the
//! rest of the body without keeping it: nothing is allocated but the identity's few strings,
//! whatever the body holds (a field written with escapes, which no name kube-apiserver sends
//! has, leaves the body to the full reading rather than being copied). The
//! type and namespace are resolved as [`kanon_engine::Request`] resolves them (the object's own,
//! else the review's). A body whose identity cannot be read this way (not an AdmissionReview,
//! a uid too long, a field of the wrong type, nested deeper than a review may) is left to the
//! full reading, which says what is wrong with it.

use kanon_api::Operation;
use kanon_engine::{PolicySet, WebhookKind};
use serde::Deserialize;

use crate::admission::{self, MAX_UID_BYTES, Reply};

/// What a review is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// `request.uid`.
    pub uid: String,
    /// `request.operation`.
    pub operation: Operation,
    /// The object's `apiVersion` (else the review's `request.kind`).
    pub api_version: String,
    /// The object's `kind` (else the review's).
    pub kind: String,
    /// The object's namespace (else the review's, but for a Namespace); `None`: cluster-scoped.
    pub namespace: Option<String>,
}

impl Identity {
    /// The evaluation slots' flow of the review: its namespace, empty when cluster-scoped.
    pub fn flow(&self) -> &str {
        self.namespace.as_deref().unwrap_or_default()
    }
}

#[derive(Deserialize)]
struct Review<'a> {
    #[serde(rename = "apiVersion")]
    api_version: Option<&'a str>,
    kind: Option<&'a str>,
    #[serde(borrow)]
    request: Option<Request<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Request<'a> {
    uid: Option<&'a str>,
    operation: Option<&'a str>,
    #[serde(borrow)]
    kind: Option<Kind<'a>>,
    namespace: Option<&'a str>,
    #[serde(borrow)]
    object: Option<Object<'a>>,
    #[serde(borrow)]
    old_object: Option<Object<'a>>,
}

#[derive(Deserialize)]
struct Kind<'a> {
    group: Option<&'a str>,
    version: Option<&'a str>,
    kind: Option<&'a str>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Object<'a> {
    api_version: Option<&'a str>,
    kind: Option<&'a str>,
    #[serde(borrow)]
    metadata: Option<Metadata<'a>>,
}

#[derive(Deserialize)]
struct Metadata<'a> {
    namespace: Option<&'a str>,
}

/// Nesting past which a body is left to the full reading (which refuses past 128, saying so):
/// below anything it refuses, so no review it would refuse is answered here.
const MAX_DEPTH: usize = 100;

/// What the review in `body` is about, when it reads as a review kanon can answer; `None`
/// leaves it to the full reading. Its nesting is not measured here ([`unselected`] does,
/// before answering): a review that is evaluated is read in full anyway.
pub fn identify(body: &[u8]) -> Option<Identity> {
    let review: Review<'_> = serde_json::from_slice(body).ok()?;
    if review.api_version != Some(admission::REVIEW_API_VERSION)
        || review.kind != Some(admission::REVIEW_KIND)
    {
        return None;
    }
    let request = review.request?;
    let uid = request.uid.filter(|uid| !uid.is_empty())?;
    if uid.len() > MAX_UID_BYTES {
        return None;
    }
    let operation = kanon_engine::parse_operation(request.operation?).ok()?;
    let subject = match operation {
        Operation::Delete => request.old_object.as_ref(),
        _ => request.object.as_ref(),
    };
    // What the full reading refuses: a CREATE or UPDATE without its object, an UPDATE
    // without the old one.
    if subject.is_none() && matches!(operation, Operation::Create | Operation::Update)
        || operation == Operation::Update && request.old_object.is_none()
    {
        return None;
    }
    let review_kind = request.kind.as_ref();
    let api_version = match subject.and_then(|s| s.api_version) {
        Some(api_version) => api_version.to_string(),
        None => {
            let kind = review_kind?;
            let version = kind.version?;
            match kind.group.unwrap_or_default() {
                "" => version.to_string(),
                group => format!("{group}/{version}"),
            }
        }
    };
    let kind = subject
        .and_then(|s| s.kind)
        .or_else(|| review_kind.and_then(|k| k.kind))?
        .to_string();
    let is_namespace = api_version == "v1" && kind == "Namespace";
    let namespace = subject
        .and_then(|s| s.metadata.as_ref())
        .and_then(|m| m.namespace)
        .or_else(|| request.namespace.filter(|_| !is_namespace))
        .map(str::to_string);
    Some(Identity {
        uid: uid.to_string(),
        operation,
        api_version,
        kind,
        namespace,
    })
}

/// How deep `body`'s arrays and objects nest (brackets inside strings are not counted).
fn nesting(body: &[u8]) -> usize {
    let (mut depth, mut deepest, mut in_string, mut escaped) = (0usize, 0usize, false, false);
    for &byte in body {
        if in_string {
            match (escaped, byte) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// The answer to a review no policy may select (`policies` give `webhook` nothing to
/// evaluate for its type and namespace): allowed, as its evaluation would decide, without it.
/// A `body` nested deeper than the full reading may accept is left to it, to be refused.
pub fn unselected(
    identity: &Identity,
    body: &[u8],
    webhook: WebhookKind,
    policies: &PolicySet,
) -> Option<Reply> {
    if policies.evaluates(
        webhook,
        &identity.api_version,
        &identity.kind,
        identity.namespace.as_deref(),
    ) || nesting(body) > MAX_DEPTH
    {
        return None;
    }
    Some(admission::allowed_unevaluated(
        &identity.uid,
        Some((identity.operation, identity.kind.clone())),
    ))
}

#[cfg(test)]
mod tests;
