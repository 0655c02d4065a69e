//! Triage: what a review is about, read from its body before it is evaluated, so that the
//! server knows whose turn it takes among the evaluation slots (its namespace) and can answer a
//! review that no policy may select at once, without a slot or the evaluation pool.
//!
//! Only the request's identity is read (uid, operation, type, namespace), in place, skipping the
//! rest of the body without keeping it: nothing is allocated but the identity's few strings,
//! whatever the body holds (a field written with escapes, which no name kube-apiserver sends
//! has, leaves the body to the full reading rather than being copied). A review some policy
//! may select is read only as far as its identity (a [`glance`]: the object's spec and status
//! and the old object are the bulk of a body, and its evaluation reads them anyway); one that
//! is answered here is read whole first ([`identify`]), so that only JSON is answered. The
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

    /// What `policies` on `webhook` may read of the object of a review of this type and
    /// namespace (`None`: all of it; see [`PolicySet::object_read`]).
    pub fn object_read(
        &self,
        webhook: WebhookKind,
        policies: &PolicySet,
    ) -> Option<std::sync::Arc<kanon_engine::Projection>> {
        policies.object_read(
            webhook,
            &self.api_version,
            &self.kind,
            self.namespace.as_deref(),
        )
    }

    /// Its type and namespace, as a reader of the whole review checks them.
    pub fn subject(&self) -> admission::Subject<'_> {
        admission::Subject {
            api_version: &self.api_version,
            kind: &self.kind,
            namespace: self.namespace.as_deref(),
        }
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
/// leaves it to the full reading. The whole body is read (and so known to be JSON), with no
/// field twice. Its nesting is not measured here ([`unselected`] does, before answering).
pub fn identify(body: &[u8]) -> Option<Identity> {
    let review: Review<'_> = serde_json::from_slice(body).ok()?;
    let request = review.request?;
    resolve(
        Parts {
            api_version: review.api_version,
            kind: review.kind,
            uid: request.uid,
            operation: request.operation,
            namespace: request.namespace,
            review_kind: request.kind,
            object: request.object.map(Some),
            old_object: request.old_object.map(Some),
            enough: false,
        },
        true,
    )
}

/// [`identify`] for a review that will be read in full anyway: the body is read only as far
/// as the identity goes (in kube-apiserver's order of fields: the review's type, the request's
/// uid, namespace and operation, then the object's type and metadata), not through the
/// object's spec, its status or the old object. So what the rest holds is not checked here —
/// nor that no field comes twice, nor that an UPDATE has its old object — and only a review
/// that some policy may select, and that the full reading will check, may be identified so.
/// `None` where the identity is not known by then (a cluster-scoped object, fields in another
/// order): read the whole body with [`identify`].
pub fn glance(body: &[u8]) -> Option<Identity> {
    let mut parts = Parts::default();
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let read = serde::Deserializer::deserialize_map(
        &mut deserializer,
        Glance {
            parts: &mut parts,
            level: Level::Review,
        },
    );
    match read {
        Err(_) if parts.enough => resolve(parts, false),
        _ => None,
    }
}

/// What [`glance`]'s reading stops with once it has the identity (an error, to serde).
const ENOUGH: &str = "kanon: the identity is read";

/// The parts of a review its identity is made of, borrowed from the body.
#[derive(Default)]
struct Parts<'a> {
    api_version: Option<&'a str>,
    kind: Option<&'a str>,
    uid: Option<&'a str>,
    operation: Option<&'a str>,
    namespace: Option<&'a str>,
    review_kind: Option<Kind<'a>>,
    /// `Some(None)`: the field was there, null.
    object: Option<Option<Object<'a>>>,
    old_object: Option<Option<Object<'a>>>,
    /// The reading stopped because these parts give the identity.
    enough: bool,
}

impl Parts<'_> {
    /// Whether what was read so far gives the identity, whatever comes after it.
    fn known(&self) -> bool {
        let (Some(_), Some(_), Some(_), Some(operation)) =
            (self.api_version, self.kind, self.uid, self.operation)
        else {
            return false;
        };
        let subject = match operation {
            "DELETE" => &self.old_object,
            _ => &self.object,
        };
        // The object's own type and namespace, which come before the review's.
        matches!(
            subject,
            Some(Some(Object {
                api_version: Some(_),
                kind: Some(_),
                metadata: Some(Metadata { namespace: Some(_) }),
            }))
        )
    }
}

/// The identity `parts` make, as [`kanon_engine::Request`] reads it; with `whole`, also
/// refusing what only the whole body can tell (an UPDATE without its old object).
fn resolve(parts: Parts<'_>, whole: bool) -> Option<Identity> {
    if parts.api_version != Some(admission::REVIEW_API_VERSION)
        || parts.kind != Some(admission::REVIEW_KIND)
    {
        return None;
    }
    let uid = parts.uid.filter(|uid| !uid.is_empty())?;
    if uid.len() > MAX_UID_BYTES {
        return None;
    }
    let operation = kanon_engine::parse_operation(parts.operation?).ok()?;
    let subject = match operation {
        Operation::Delete => parts.old_object.as_ref(),
        _ => parts.object.as_ref(),
    }
    .and_then(Option::as_ref);
    // What the full reading refuses: a CREATE or UPDATE without its object, an UPDATE
    // without the old one.
    if subject.is_none() && matches!(operation, Operation::Create | Operation::Update)
        || whole && operation == Operation::Update && !matches!(parts.old_object, Some(Some(_)))
    {
        return None;
    }
    let review_kind = parts.review_kind.as_ref();
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
        .or_else(|| parts.namespace.filter(|_| !is_namespace))
        .map(str::to_string);
    Some(Identity {
        uid: uid.to_string(),
        operation,
        api_version,
        kind,
        namespace,
    })
}

/// Which map [`Glance`] reads.
#[derive(Clone, Copy)]
enum Level {
    Review,
    Request,
    /// The request's `object` (`false`) or `oldObject` (`true`).
    Subject(bool),
    /// Its `metadata`.
    Metadata(bool),
}

/// Reads one map of a review into [`Parts`], skipping what the identity does not need, and
/// stops the whole reading (an error of [`ENOUGH`]) once the parts give the identity.
struct Glance<'p, 'a> {
    parts: &'p mut Parts<'a>,
    level: Level,
}

impl<'de> serde::de::DeserializeSeed<'de> for Glance<'_, 'de> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        match self.level {
            // A subject, or its metadata, may be null.
            Level::Subject(_) | Level::Metadata(_) => deserializer.deserialize_option(self),
            _ => deserializer.deserialize_map(self),
        }
    }
}

impl<'de> serde::de::Visitor<'de> for Glance<'_, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an AdmissionReview")
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<(), E> {
        match self.level {
            Level::Subject(old) => *subject_of(self.parts, old) = Some(None),
            Level::Metadata(old) => {
                if let Some(Some(subject)) = subject_of(self.parts, old) {
                    subject.metadata = None;
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
        self.visit_none()
    }

    fn visit_some<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_map(self)
    }

    fn visit_map<M: serde::de::MapAccess<'de>>(self, mut map: M) -> Result<(), M::Error> {
        use serde::de::{Error, IgnoredAny};
        let parts = self.parts;
        match self.level {
            Level::Subject(old) => {
                *subject_of(parts, old) = Some(Some(Object {
                    api_version: None,
                    kind: None,
                    metadata: None,
                }));
            }
            Level::Metadata(old) => {
                if let Some(Some(subject)) = subject_of(parts, old) {
                    subject.metadata = Some(Metadata { namespace: None });
                }
            }
            _ => {}
        }
        while let Some(key) = map.next_key::<&'de str>()? {
            match (self.level, key) {
                (Level::Review, "apiVersion") => parts.api_version = map.next_value()?,
                (Level::Review, "kind") => parts.kind = map.next_value()?,
                (Level::Review, "request") => map.next_value_seed(Glance {
                    parts: &mut *parts,
                    level: Level::Request,
                })?,
                (Level::Request, "uid") => parts.uid = map.next_value()?,
                (Level::Request, "operation") => parts.operation = map.next_value()?,
                (Level::Request, "namespace") => parts.namespace = map.next_value()?,
                (Level::Request, "kind") => parts.review_kind = map.next_value()?,
                (Level::Request, "object" | "oldObject") => map.next_value_seed(Glance {
                    parts: &mut *parts,
                    level: Level::Subject(key == "oldObject"),
                })?,
                (Level::Subject(old), "metadata") => map.next_value_seed(Glance {
                    parts: &mut *parts,
                    level: Level::Metadata(old),
                })?,
                (Level::Subject(old), "apiVersion" | "kind")
                | (Level::Metadata(old), "namespace") => {
                    let Some(Some(subject)) = subject_of(parts, old) else {
                        return Err(M::Error::custom("unreachable: the subject was set"));
                    };
                    let value: Option<&'de str> = map.next_value()?;
                    match key {
                        "apiVersion" => subject.api_version = value,
                        "kind" => subject.kind = value,
                        _ => {
                            if let Some(metadata) = &mut subject.metadata {
                                metadata.namespace = value;
                            }
                        }
                    }
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            if parts.known() {
                parts.enough = true;
                return Err(M::Error::custom(ENOUGH));
            }
        }
        Ok(())
    }
}

/// The request's `object` (`old`: `oldObject`) as read so far.
fn subject_of<'p, 'a>(parts: &'p mut Parts<'a>, old: bool) -> &'p mut Option<Option<Object<'a>>> {
    match old {
        true => &mut parts.old_object,
        false => &mut parts.object,
    }
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

/// What triage makes of a review.
#[derive(Debug)]
pub enum Triage {
    /// No policy may select it: this is its answer, given without evaluating it.
    Answered(Reply),
    /// It is to be evaluated, in its namespace's turn when its identity could be read.
    Evaluate(Option<Identity>),
}

/// Triages the review in `body` for `webhook` under `policies`. A review some policy may select
/// is identified at a [`glance`] (its evaluation reads it all anyway); any other is read whole
/// ([`identify`]) before it is answered without evaluation ([`unselected`]), so that only JSON
/// is ever answered so.
pub fn triage(body: &[u8], webhook: WebhookKind, policies: &PolicySet) -> Triage {
    if let Some(identity) = glance(body)
        && policies.evaluates(
            webhook,
            &identity.api_version,
            &identity.kind,
            identity.namespace.as_deref(),
        )
    {
        return Triage::Evaluate(Some(identity));
    }
    let identity = identify(body);
    match identity
        .as_ref()
        .and_then(|identity| unselected(identity, body, webhook, policies))
    {
        Some(reply) => Triage::Answered(reply),
        None => Triage::Evaluate(identity),
    }
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
