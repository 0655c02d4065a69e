//! The AdmissionReview codec: request bytes in, response bytes out, in exactly the shape
//! kube-apiserver accepts (`admission.k8s.io/v1`).
//!
//! What kube-apiserver checks of a webhook's answer, and this module guarantees:
//! - HTTP 200 and a JSON AdmissionReview of the same `apiVersion` and `kind`;
//! - `response.uid` equal to `request.uid`;
//! - `patch` (base64 of an RFC 6902 array) and `patchType: JSONPatch` together or not at all,
//!   only from the mutating webhook, only when the object changed, never on DELETE or a denial;
//! - a denial carries `status.code` 403 (or the code of the first denying CEL validation's
//!   `reason`: 422 Invalid by default, as ValidatingAdmissionPolicy) and a message (every
//!   reason, joined with `; `).
//!
//! A body that is not a valid AdmissionReview gets HTTP 400, and one over the size limit HTTP
//! 413; both still carry an AdmissionReview-shaped response saying what is wrong, with the
//! request's uid when it can be read.
//!
//! kube's own `AdmissionResponse` is not used: it serializes `patch` as an array of numbers
//! rather than the documented base64 string.

use std::collections::BTreeMap;
use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use kanon_api::Operation;
use kanon_engine::{Decision, Evaluation, Lookup, PolicySet, Request, RequestError, WebhookKind};
use serde::Serialize;
use serde_json::Value;

use crate::budget::{self, JsonBudget, OverBudget};

/// `apiVersion` of the reviews kanon reads and writes.
pub const REVIEW_API_VERSION: &str = "admission.k8s.io/v1";
/// `kind` of the reviews kanon reads and writes.
pub const REVIEW_KIND: &str = "AdmissionReview";
/// The content type of every reply body.
pub const CONTENT_TYPE: &str = "application/json";

/// The text of [`Reply::not_ready`].
pub const NOT_READY: &str = "kanon is not ready: its policies are not loaded yet";
/// The default limit on a review body. kube-apiserver accepts request bodies of up to 3 MiB
/// (`--max-request-bytes`), and a review carries the object and, on UPDATE, the old object
/// besides the request's metadata, both as JSON (an object sent as protobuf grows when
/// written as JSON): 8 MiB leaves room for the largest review it can send.
pub const DEFAULT_MAX_BODY_BYTES: usize = 8 * 1024 * 1024;

/// The longest `request.uid` answered. kube-apiserver sends a UUID (36 bytes); a longer one is
/// not from it, and echoing it would let a client make kanon write what it likes.
pub const MAX_UID_BYTES: usize = 128;

/// What a review may take: its body's bytes and what its JSON takes once read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The largest body read; a larger one gets 413.
    pub max_body_bytes: usize,
    /// The memory and nesting the body's JSON may take once read; past it, 413.
    pub json: JsonBudget,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            json: JsonBudget::default(),
        }
    }
}

impl Limits {
    /// The default limits with a body limit of `max_body_bytes`.
    pub fn with_max_body(max_body_bytes: usize) -> Self {
        Limits {
            max_body_bytes,
            ..Limits::default()
        }
    }
}

/// A body that is not a review kanon can answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadReview {
    /// The body is over the size limit (its size, when known).
    #[error("{}", too_large_message(*.size, *.limit))]
    TooLarge {
        /// The body's size in bytes, when known (a server that stops reading at the limit
        /// does not know it).
        size: Option<usize>,
        /// The limit in bytes.
        limit: usize,
    },
    /// The body is empty (or only whitespace).
    #[error("the body is empty: expected an AdmissionReview ({REVIEW_API_VERSION})")]
    Empty,
    /// The body is not JSON.
    #[error("the body is not JSON: {0}")]
    NotJson(String),
    /// The body's JSON would take more memory, or nest deeper, than a review may.
    #[error("{0}")]
    OverBudget(OverBudget),
    /// `request.uid` is longer than any kube-apiserver sends.
    #[error(
        "request.uid is {0} bytes long; kube-apiserver sends a UUID, and kanon answers uids of at most {MAX_UID_BYTES} bytes"
    )]
    LongUid(usize),
    /// The body is JSON but not a valid AdmissionReview.
    #[error(transparent)]
    Review(#[from] RequestError),
}

fn too_large_message(size: Option<usize>, limit: usize) -> String {
    match size {
        Some(size) => format!("the body is {size} bytes, over the limit of {limit} bytes"),
        None => format!("the body is over the limit of {limit} bytes"),
    }
}

impl BadReview {
    /// The HTTP status of the reply: 413 for a body over the limit or over the memory
    /// budget, else 400.
    pub fn http_status(&self) -> u16 {
        match self {
            BadReview::TooLarge { .. } | BadReview::OverBudget(_) => 413,
            _ => 400,
        }
    }

    fn reason(&self) -> &'static str {
        match self {
            BadReview::TooLarge { .. } | BadReview::OverBudget(_) => "RequestEntityTooLarge",
            _ => "BadRequest",
        }
    }
}

/// What became of a review, for logs and metrics (the wire answer is in [`Reply::body`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The request was evaluated (allowed or denied).
    Decided(Box<Decision>),
    /// The body was not a review kanon can answer.
    Invalid(BadReview),
    /// Allowed without evaluation: no policy may select it ([`crate::triage`]), or
    /// [`allow_all`] (the benchmark ceiling).
    Unevaluated,
    /// Not answered: no policy set is in force yet ([`Reply::not_ready`]).
    NotReady,
}

/// The HTTP answer to one review.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// The HTTP status: 200 for every evaluated request (allowed or denied), 400 for a body
    /// that is not a valid AdmissionReview, 413 for a body over the limit.
    pub status: u16,
    /// The JSON AdmissionReview to send back ([`CONTENT_TYPE`]).
    pub body: Vec<u8>,
    /// The request's uid, when it could be read.
    pub uid: Option<String>,
    /// What became of the review.
    pub outcome: Outcome,
    /// The request's operation and kind, when the review could be read (for metrics labels).
    pub request: Option<(Operation, String)>,
    /// Whether the review was read a second time, whole, because a mutation reached beyond
    /// the part of the object the first reading decoded ([`Reread`]).
    pub read_again: bool,
}

impl Reply {
    /// The answer (503) while no policy set is in force (kanon starting, its policies not yet
    /// read from the cluster): not a verdict, so kube-apiserver applies the webhook's
    /// `failurePolicy`, as for a webhook that cannot be reached. Allowing here would admit
    /// what a `Fail` policy should deny.
    pub fn not_ready() -> Self {
        Reply {
            status: 503,
            body: status_body(503, "ServiceUnavailable", NOT_READY),
            uid: None,
            outcome: Outcome::NotReady,
            request: None,
            read_again: false,
        }
    }

    /// The answer to a body over `limit` bytes, for a server that stops reading at the limit.
    pub fn too_large(limit: usize) -> Self {
        Reply::invalid(None, BadReview::TooLarge { size: None, limit })
    }

    /// The answer to a body that is not a review kanon can answer: 400 with an
    /// AdmissionReview saying what is wrong, echoing `uid` when it could be read; or 413, for
    /// a review over a limit, with a `v1` Status ([`status_body`]), since that is a review
    /// kube-apiserver does send (its largest objects) and shows the message of only in a
    /// Status.
    pub fn invalid(uid: Option<String>, error: BadReview) -> Self {
        let status = error.http_status();
        if status == 413 {
            return Reply {
                status,
                body: status_body(status, error.reason(), &error.to_string()),
                uid,
                outcome: Outcome::Invalid(error),
                request: None,
                read_again: false,
            };
        }
        let body = encode_review(&ResponseOut {
            uid: uid.as_deref().unwrap_or_default(),
            allowed: false,
            status: Some(StatusOut {
                status: "Failure",
                message: error.to_string(),
                reason: error.reason(),
                code: status,
            }),
            patch: None,
            audit_annotations: None,
            warnings: &[],
        });
        Reply {
            status,
            body,
            uid,
            outcome: Outcome::Invalid(error),
            request: None,
            read_again: false,
        }
    }

    /// The answer (HTTP 200) to a request that was evaluated. The patch is sent only from
    /// the mutating webhook, when allowed, not on DELETE and when not empty.
    pub fn decided(request: &Request, webhook: WebhookKind, decision: Decision) -> Self {
        let patch = decision
            .carries_patch(webhook, request.operation)
            .then(|| PatchOut {
                patch_type: "JSONPatch",
                patch: BASE64.encode(encode(&decision.patch)),
            });
        let status = (!decision.allowed).then(|| StatusOut {
            status: "Failure",
            message: if decision.messages.is_empty() {
                "denied by kanon".to_string()
            } else {
                decision.messages.join("; ")
            },
            reason: decision
                .status_reason
                .map_or("Forbidden", |reason| reason.as_str()),
            code: decision.status_reason.map_or(403, |reason| reason.code()),
        });
        let body = encode_review(&ResponseOut {
            uid: &request.uid,
            allowed: decision.allowed,
            status,
            patch,
            audit_annotations: Some(&decision.audit_annotations)
                .filter(|annotations| !annotations.is_empty()),
            warnings: &decision.warnings,
        });
        Reply {
            status: 200,
            body,
            uid: Some(request.uid.clone()),
            outcome: Outcome::Decided(Box::new(decision)),
            request: Some((request.operation, request.kind.clone())),
            read_again: false,
        }
    }
}

/// The benchmark ceiling: answers any review that carries a uid with `allowed: true`, without
/// evaluating anything. Only `kanon serve --allow-all` uses it, to measure the server itself.
pub fn allow_all(body: &[u8]) -> Reply {
    let uid = serde_json::from_slice::<Value>(body).ok().and_then(|d| {
        d.pointer("/request/uid")
            .and_then(Value::as_str)
            .map(str::to_string)
    });
    let Some(uid) = uid else {
        return Reply::invalid(None, BadReview::NotJson("no request.uid".into()));
    };
    allowed_unevaluated(&uid, None)
}

/// `allowed: true` for the review `uid`, without evaluating it: what [`allow_all`] answers,
/// and what the server answers a review no policy may select ([`crate::triage`]).
/// `request`: its operation and kind, for the metrics' labels, when known.
pub fn allowed_unevaluated(uid: &str, request: Option<(Operation, String)>) -> Reply {
    let body = encode_review(&ResponseOut {
        uid,
        allowed: true,
        status: None,
        patch: None,
        audit_annotations: None,
        warnings: &[],
    });
    Reply {
        status: 200,
        body,
        uid: Some(uid.to_string()),
        outcome: Outcome::Unevaluated,
        request,
        read_again: false,
    }
}

/// Reads one AdmissionReview body within `limits`: the request, or the reply (400, 413) that
/// says what is wrong with it. The server reads the body this way, lets it go, and only then
/// evaluates ([`answer`]), so a review never holds its text and its evaluation at once.
pub fn read(body: &[u8], limits: &Limits) -> Result<Request, Box<Reply>> {
    read_with(body, limits, None)
}

/// [`read`], decoding of the object and old object only what the projection keeps: what
/// [`kanon_engine::PolicySet::object_read`] says the evaluation of a review of its [`Subject`]
/// may read (`None`: all of it). The request is refused exactly when [`read`] refuses it, and
/// decided the same: a body whose full reading names another type or namespace than the
/// subject (a field written twice) is read again whole.
pub fn read_projected(
    body: &[u8],
    limits: &Limits,
    projected: Option<(&Arc<kanon_engine::Projection>, Subject<'_>)>,
) -> Result<Request, Box<Reply>> {
    let Some((projection, subject)) = projected else {
        return read(body, limits);
    };
    match read_with(body, limits, Some(projection)) {
        Ok(request) if !subject.of(&request) => read(body, limits),
        read => read,
    }
}

/// The type and namespace of a review's subject as read before the review is (by
/// [`crate::triage`]), for which a projection was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Subject<'a> {
    /// The object's `apiVersion`.
    pub api_version: &'a str,
    /// The object's `kind`.
    pub kind: &'a str,
    /// Its namespace; `None` when cluster-scoped.
    pub namespace: Option<&'a str>,
}

impl Subject<'_> {
    /// Whether `request` (the review read whole) is of this type and namespace.
    pub fn of(&self, request: &Request) -> bool {
        self.api_version == request.api_version
            && self.kind == request.kind
            && self.namespace == request.namespace.as_deref()
    }
}

/// [`read`], decoding of the object and old object only what `projection` keeps.
fn read_with(
    body: &[u8],
    limits: &Limits,
    projection: Option<&Arc<kanon_engine::Projection>>,
) -> Result<Request, Box<Reply>> {
    let invalid = |uid, error| Err(Box::new(Reply::invalid(uid, error)));
    if body.len() > limits.max_body_bytes {
        let error = BadReview::TooLarge {
            size: Some(body.len()),
            limit: limits.max_body_bytes,
        };
        return invalid(None, error);
    }
    if body.iter().all(u8::is_ascii_whitespace) {
        return invalid(None, BadReview::Empty);
    }
    let parsed = match projection {
        Some(projection) => budget::parse_projected(body, &limits.json, projection),
        None => budget::parse(body, &limits.json),
    };
    let document = match parsed {
        Ok(document) => document,
        Err(budget::ParseError::OverBudget(over)) => {
            return invalid(None, BadReview::OverBudget(over));
        }
        Err(budget::ParseError::Syntax(e)) => {
            return invalid(None, BadReview::NotJson(e.to_string()));
        }
    };
    // Echo the uid whenever it is there, however wrong the rest is, unless it is too long to
    // be kube-apiserver's.
    let uid = kanon_engine::find_pointer(&document, "/request/uid")
        .and_then(Value::as_str)
        .filter(|uid| !uid.is_empty());
    if let Some(uid) = uid
        && uid.len() > MAX_UID_BYTES
    {
        return invalid(None, BadReview::LongUid(uid.len()));
    }
    let uid = uid.map(str::to_string);
    Request::from_admission_review_owned(document)
        .map(|request| {
            let request = request.defaulted_on_arrival();
            match projection {
                Some(projection) => request.read_through(projection.clone()),
                None => request,
            }
        })
        .or_else(|e| invalid(uid, e.into()))
}

/// The review a request was read from in part ([`read_projected`]), to read it again whole if
/// a mutation reaches beyond what was decoded ([`Decision::beyond_reading`]).
#[derive(Debug, Clone, Copy)]
pub struct Reread<'b> {
    body: &'b [u8],
    limits: &'b Limits,
}

impl<'b> Reread<'b> {
    /// The review `body`, read within `limits`.
    pub fn new(body: &'b [u8], limits: &'b Limits) -> Self {
        Reread { body, limits }
    }
}

/// [`decide_in`], reading the review again whole and deciding again when the decision on the
/// part of the object decoded is void ([`Decision::beyond_reading`]); without the review to
/// read again, the void decision (a denial) stands. Whether it was read again, with the
/// decision.
async fn decide_read(
    request: &mut Request,
    reread: Option<Reread<'_>>,
    webhook: WebhookKind,
    policies: &PolicySet,
    evaluation: &Evaluation<'_>,
) -> Result<(Decision, bool), Box<Reply>> {
    let decision = decide_in(request, webhook, policies, evaluation).await;
    let (true, Some(reread)) = (decision.beyond_reading, reread) else {
        return Ok((decision, false));
    };
    tracing::debug!(
        uid = %request.uid,
        kind = %request.kind,
        "a mutation reached beyond the part of the object decoded: reading the review whole"
    );
    *request = read(reread.body, reread.limits)?;
    Ok((
        decide_in(request, webhook, policies, evaluation).await,
        true,
    ))
}

/// Evaluates a request [`read`] from a review in `evaluation` (lookups, program host,
/// deadline) and encodes the answer. A request [`read_projected`] in part is read again from
/// `reread` when a mutation reaches beyond what was decoded.
pub async fn answer(
    mut request: Request,
    reread: Option<Reread<'_>>,
    webhook: WebhookKind,
    policies: &PolicySet,
    evaluation: &Evaluation<'_>,
) -> Reply {
    match decide_read(&mut request, reread, webhook, policies, evaluation).await {
        Ok((decision, read_again)) => Reply {
            read_again,
            ..Reply::decided(&request, webhook, decision)
        },
        Err(reply) => *reply,
    }
}

/// [`answer`], handing the object to `recorder` when the validating webhook admits a CREATE
/// or UPDATE (not a dry run) that a validate policy with the `Audit` action judged, so that
/// the audit's reports show it before the next audit, and telling `observers` (the decision
/// log, Kubernetes Events) what the decision found.
pub async fn answer_recording(
    mut request: Request,
    reread: Option<Reread<'_>>,
    webhook: WebhookKind,
    policies: &PolicySet,
    evaluation: &Evaluation<'_>,
    recorder: Option<&dyn kanon_engine::AdmissionRecorder>,
    observers: &crate::observer::DecisionObservers,
) -> Reply {
    let (decision, read_again) =
        match decide_read(&mut request, reread, webhook, policies, evaluation).await {
            Ok(decided) => decided,
            Err(reply) => return *reply,
        };
    observers.notify(&request, webhook, &decision);
    let record = recorder.is_some()
        && webhook == WebhookKind::Validating
        && decision.allowed
        && !request.dry_run
        && matches!(request.operation, Operation::Create | Operation::Update)
        && policies.audited(&decision);
    let reply = Reply {
        read_again,
        ..Reply::decided(&request, webhook, decision)
    };
    // The reply is made: the request's object is handed over, not copied.
    if let (true, Some(recorder), Some(object)) = (record, recorder, request.object.take()) {
        let namespaced = request.namespace.is_some();
        recorder.admitted(request.identify(object, namespaced), request.operation);
    }
    reply
}

/// The verdict of `webhook` on `request`. The mutating webhook runs the override policies on
/// the request's object in place ([`kanon_engine::PolicySet::mutate_patch`]: `request.object`
/// is taken).
/// The validating webhook runs the validate policies and, on CREATE and UPDATE of one of
/// kanon's own policy objects, checks that it compiles: a bad policy is denied with every
/// error by field path (before the validate policies' own reasons, if any). Writes to a
/// policy's `status` and updates of a policy being deleted are not checked.
pub async fn decide(
    request: &mut Request,
    webhook: WebhookKind,
    policies: &PolicySet,
    lookup: &dyn Lookup,
) -> Decision {
    let evaluation = Evaluation::new(lookup).with_deadline(request.deadline.clone());
    decide_in(request, webhook, policies, &evaluation).await
}

/// [`decide`] in `evaluation` (lookups, program host, deadline).
pub async fn decide_in(
    request: &mut Request,
    webhook: WebhookKind,
    policies: &PolicySet,
    evaluation: &Evaluation<'_>,
) -> Decision {
    match webhook {
        WebhookKind::Mutating => policies.mutate_patch_in(request, evaluation).await,
        WebhookKind::Validating => {
            let mut decision = policies.validate_in(request, None, evaluation).await;
            if let Some(check) = policies.check_policy_object(request, evaluation.lookup()) {
                if let Some(message) = check.invalid {
                    decision.allowed = false;
                    decision.messages.insert(0, message);
                }
                decision.warnings.splice(0..0, check.warnings);
            }
            decision
        }
    }
}

/// A `v1` Status body (`{"apiVersion":"v1","kind":"Status","status":"Failure",...}`) for an
/// answer that is not HTTP 200. kube-apiserver treats such an answer as the webhook failing
/// (its `failurePolicy` decides) and quotes the message in the error it returns to its client
/// only when the body is a Status; otherwise its client reads `the server responded with the
/// status code 413 but did not return more information`.
pub fn status_body(code: u16, reason: &str, message: &str) -> Vec<u8> {
    #[derive(Serialize)]
    struct Empty {}
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Status<'a> {
        api_version: &'static str,
        kind: &'static str,
        metadata: Empty,
        status: &'static str,
        message: &'a str,
        reason: &'a str,
        code: u16,
    }
    encode(&Status {
        api_version: "v1",
        kind: "Status",
        metadata: Empty {},
        status: "Failure",
        message,
        reason,
        code,
    })
}

/// The response AdmissionReview: `{apiVersion, kind, response}`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ReviewOut<'a> {
    api_version: &'static str,
    kind: &'static str,
    response: &'a ResponseOut<'a>,
}

/// `response` of an AdmissionReview (admission.k8s.io/v1 AdmissionResponse).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ResponseOut<'a> {
    uid: &'a str,
    allowed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<StatusOut>,
    /// `patchType` and `patch`, together or not at all.
    #[serde(flatten)]
    patch: Option<PatchOut>,
    #[serde(skip_serializing_if = "Option::is_none")]
    audit_annotations: Option<&'a BTreeMap<String, String>>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    warnings: &'a [String],
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PatchOut {
    patch_type: &'static str,
    /// Base64 of the RFC 6902 JSON array.
    patch: String,
}

/// A metav1.Status.
#[derive(Serialize)]
struct StatusOut {
    status: &'static str,
    message: String,
    reason: &'static str,
    code: u16,
}

fn encode_review(response: &ResponseOut<'_>) -> Vec<u8> {
    encode(&ReviewOut {
        api_version: REVIEW_API_VERSION,
        kind: REVIEW_KIND,
        response,
    })
}

fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).expect("string-keyed JSON always serializes")
}
