//! What each path answers, and the path of one review: its bound in time (from its arrival), its
//! body within the shared budget, its triage (a review no policy may select is answered at
//! once), its namespace's turn among the evaluation slots, its JSON read within the memory
//! budget (the body let go) and its evaluation (on its worker while cheap, else on a thread of
//! the evaluation pool), its answer.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};

use super::Shared;
use super::body::{self, BodyError, Reservation};
use super::probes::Probes;
use super::timeout::review_timeout;
use tracing::Instrument;

use crate::admission::{self, Reply};
use crate::lookup::BoundedLookup;
use crate::metrics;
use crate::slot::Slot;
use crate::triage;
use kanon_engine::WebhookKind;

pub(super) type Body = Full<Bytes>;

/// Which routes a listener serves.
#[derive(Clone)]
pub(super) enum Routes {
    /// The webhooks and health checks (HTTPS).
    Webhook(Arc<Shared>),
    /// `/metrics` and the probes (plain HTTP, its own thread).
    Probes(Arc<Probes>),
}

/// Routes one request, which `arrived` (the first byte of its head; on a new connection, when
/// it was accepted), and logs it.
pub(super) async fn handle(
    routes: &Routes,
    request: Request<Incoming>,
    arrived: Instant,
) -> Response<Body> {
    let started = Instant::now();
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    let (response, uid) = match routes {
        Routes::Webhook(shared) => webhook(shared, request, arrived).await,
        Routes::Probes(probes) => (probe(probes, &request), None),
    };
    tracing::debug!(
        %method,
        path,
        status = response.status().as_u16(),
        uid = uid.as_deref().unwrap_or(""),
        duration_ms = started.elapsed().as_secs_f64() * 1000.0,
        "request"
    );
    response
}

async fn webhook(
    shared: &Arc<Shared>,
    request: Request<Incoming>,
    arrived: Instant,
) -> (Response<Body>, Option<String>) {
    let path = request.uri().path();
    if let Some(webhook) = WebhookKind::from_path(path) {
        if request.method() != Method::POST {
            return (method_not_allowed("POST"), None);
        }
        if !shared.allow_all && !shared.state.is_ready() {
            return not_ready(shared, webhook);
        }
        let span =
            crate::trace::review_span(webhook, request.headers(), shared.review_sampling.as_ref());
        let answered = review(shared, webhook, request, arrived)
            .instrument(span.clone())
            .await;
        crate::trace::record_status(&span, answered.0.status().as_u16());
        return answered;
    }
    let response = match path {
        "/healthz" => healthz(request.method(), Ok(())),
        "/readyz" => readyz(request.method(), shared.state.is_ready()),
        _ => not_found(path),
    };
    (response, None)
}

fn probe(probes: &Probes, request: &Request<Incoming>) -> Response<Body> {
    match request.uri().path() {
        "/metrics" => match *request.method() {
            Method::GET => {
                let mut response = Response::new(Full::from(probes.metrics.encode()));
                response.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static(metrics::CONTENT_TYPE),
                );
                response
            }
            _ => method_not_allowed("GET"),
        },
        "/healthz" => healthz(request.method(), probes.live()),
        "/readyz" => readyz(request.method(), probes.state.is_ready()),
        path => not_found(path),
    }
}

fn healthz(method: &Method, live: Result<(), Duration>) -> Response<Body> {
    match (method, live) {
        (&Method::GET | &Method::HEAD, Ok(())) => text(StatusCode::OK, "ok"),
        (&Method::GET | &Method::HEAD, Err(silent)) => text(
            StatusCode::SERVICE_UNAVAILABLE,
            &format!(
                "not live: the webhook's runtime has not run for {:.1} s",
                silent.as_secs_f64()
            ),
        ),
        _ => method_not_allowed("GET"),
    }
}

fn readyz(method: &Method, ready: bool) -> Response<Body> {
    match (method, ready) {
        (&Method::GET | &Method::HEAD, true) => text(StatusCode::OK, "ready"),
        (&Method::GET | &Method::HEAD, false) => text(
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: no policy set loaded yet",
        ),
        _ => method_not_allowed("GET"),
    }
}

/// How long past the review's deadline an evaluation may take to return its verdict (the
/// policies it had not run by then fail under their failure policy) before the server answers
/// 500 itself.
const EVALUATION_GRACE: Duration = Duration::from_millis(250);

/// How long before the review's deadline its lookups are cut short, so that the verdict (the
/// policy failing under its own failure policy) reaches kube-apiserver before it stops
/// waiting: a tenth of the timeout, at most 100 ms.
fn answer_margin(timeout: Duration) -> Duration {
    (timeout / 10).min(Duration::from_millis(100))
}

/// The 503 to a review that arrives before any policy set is in force (the connection closes:
/// its body is not read).
fn not_ready(shared: &Shared, webhook: WebhookKind) -> (Response<Body>, Option<String>) {
    let reply = Reply::not_ready();
    shared
        .metrics
        .observe_review(webhook, &reply, None, None, 0.0);
    if shared.warned_not_ready.swap(true, Ordering::Relaxed) {
        tracing::debug!(
            webhook = webhook.path(),
            "a review before any policy set is in force: answered 503"
        );
    } else {
        tracing::warn!(
            webhook = webhook.path(),
            "a review before any policy set is in force: answered 503, so the webhook's failurePolicy applies (further ones are logged at debug level and counted in kanon_admission_requests_total{{result=\"not_ready\"}})"
        );
    }
    let mut response = reply_response(reply.status, reply.body);
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    (closing(response), None)
}

/// One review: its body (within the shared budget and its own deadline), its triage (answered
/// at once when no policy may select it), an evaluation slot in its namespace's turn, its JSON
/// read within the memory budget and its evaluation (on this worker while cheap, else on a
/// thread of the evaluation pool), all within the review's timeout, counted from its arrival.
async fn review(
    shared: &Arc<Shared>,
    webhook: WebhookKind,
    request: Request<Incoming>,
    arrived: Instant,
) -> (Response<Body>, Option<String>) {
    let started = Instant::now();
    let timeout = review_timeout(request.uri().query(), shared.default_review_timeout);
    // From the review's arrival, as kube-apiserver counts its own timeout: time spent before
    // the server read the head (a busy runtime, the TLS handshake) is not given again. At
    // most 30 s: no overflow whatever the client asked.
    let deadline = tokio::time::Instant::from_std(arrived) + timeout;
    let limit = shared.limits.max_body_bytes;
    let answered = |reply: Reply| {
        shared
            .metrics
            .observe_review(webhook, &reply, None, None, started.elapsed().as_secs_f64());
        reply
    };
    let too_large = || {
        let reply = answered(Reply::too_large(limit));
        // Close rather than read the rest of a body that is not wanted.
        (closing(reply_response(reply.status, reply.body)), None)
    };
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit as u64) {
        return too_large();
    }
    // Bytes held for the body: its declared length, else as much as a body may take.
    let wanted = declared.map_or(limit, |length| {
        usize::try_from(length).unwrap_or(limit).min(limit)
    });
    let body_deadline = deadline.min(tokio::time::Instant::now() + shared.body_timeout);
    let reservation = match shared.bodies.reserve(wanted, body_deadline).await {
        Ok(reservation) => reservation,
        Err(busy) => {
            tracing::warn!(
                webhook = webhook.path(),
                wanted = busy.wanted,
                budget = busy.capacity,
                "no room to read a review body: the bodies being read take the whole budget"
            );
            shared
                .metrics
                .review_shed(webhook, metrics::ReviewShed::BodyBudget);
            let message = format!(
                "kanon is reading other review bodies and has no room for this one's {} bytes (--body-buffer-mib); try again",
                busy.wanted
            );
            let mut response = failure(
                StatusCode::SERVICE_UNAVAILABLE,
                "ServiceUnavailable",
                &message,
            );
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            return (closing(response), None);
        }
    };
    let read = tokio::time::timeout_at(
        body_deadline,
        body::read(request.into_body(), limit, &reservation),
    );
    let body = match read.await {
        Ok(Ok(body)) => body,
        Ok(Err(BodyError::TooLarge)) => return too_large(),
        Ok(Err(BodyError::Read(error))) => {
            tracing::warn!(webhook = webhook.path(), %error, "reading the review body failed");
            let response = failure(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                &format!("cannot read the body: {error}"),
            );
            return (closing(response), None);
        }
        Ok(Err(BodyError::Evicted)) => {
            tracing::debug!(
                webhook = webhook.path(),
                "gave up a review body arriving too slowly to make room for another"
            );
            shared
                .metrics
                .review_shed(webhook, metrics::ReviewShed::SlowBody);
            let response = failure(
                StatusCode::REQUEST_TIMEOUT,
                "Timeout",
                "the body arrived too slowly while other bodies waited for room",
            );
            return (closing(response), None);
        }
        Err(_) => {
            shared
                .metrics
                .review_shed(webhook, metrics::ReviewShed::BodyTimeout);
            let message = format!(
                "the body did not arrive within {:?}",
                shared.body_timeout.min(timeout)
            );
            tracing::debug!(webhook = webhook.path(), "{message}");
            return (
                closing(failure(StatusCode::REQUEST_TIMEOUT, "Timeout", &message)),
                None,
            );
        }
    };

    if shared.allow_all {
        let reply = answered(admission::allow_all(&body));
        return (reply_response(reply.status, reply.body), reply.uid);
    }
    // Triage (see `crate::triage`): a review no policy may select is answered here, at once,
    // without a slot or a thread of the pool: a tenant's flood of costly reviews never makes
    // it wait. The others take their turn among the slots by namespace.
    let policies = shared.state.current();
    let identity = match triage::triage(&body, webhook, &policies) {
        triage::Triage::Answered(reply) => return observed(shared, webhook, reply, started),
        triage::Triage::Evaluate(identity) => identity,
    };
    let flow = identity.as_ref().map_or("", triage::Identity::flow);
    // What the review's evaluation may read of its object: the rest is not decoded.
    let projection = identity
        .as_ref()
        .and_then(|identity| identity.object_read(webhook, &policies));
    let slot = match tokio::time::timeout_at(deadline, Slot::acquire(shared.reviews.clone(), flow))
        .await
    {
        Ok(Ok(slot)) => slot,
        Ok(Err(_closed)) => {
            return (
                failure(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "ServiceUnavailable",
                    "the server is shutting down",
                ),
                None,
            );
        }
        Err(_) => return timed_out(webhook, timeout, "waiting for an evaluation slot"),
    };
    let job = Job {
        shared: shared.clone(),
        webhook,
        policies,
        // The identity still names the review's flow below: copied, and only when projected.
        object_read: projection
            .zip(identity.as_ref())
            .map(|(projection, identity)| (projection, identity.clone())),
        deadline,
        timeout,
    };
    // On this worker while it is cheap, else on a thread of the evaluation pool, apart from
    // the workers that do I/O (`pool`). The hard stop is for an evaluation that does not
    // return: past the deadline its lookups fail, so this fires only if something ignores
    // them.
    let body_bytes = body.len();
    let evaluation = shared.pool.run(
        tokio::runtime::Handle::current(),
        flow,
        body_bytes,
        // Boxed where it is made: the evaluation's future is some kilobytes (the engine's
        // whole state machine), and each wrapper and await would copy it again.
        tokio::time::timeout_at(
            deadline + EVALUATION_GRACE,
            Box::pin(job.evaluate(body, reservation, slot)).instrument(tracing::Span::current()),
        ),
    );
    let evaluated = evaluation.await;
    if evaluated.as_ref().is_ok_and(|evaluated| evaluated.demoted) {
        shared.metrics.review_demoted(webhook);
    }
    match evaluated.map(|evaluated| evaluated.output) {
        Ok(Ok(reply)) => observed(shared, webhook, reply, started),
        Ok(Err(_)) => timed_out(webhook, timeout, "evaluating"),
        Err(error) => {
            tracing::error!(webhook = webhook.path(), %error, "an evaluation failed");
            (
                failure(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "InternalError",
                    "the evaluation failed",
                ),
                None,
            )
        }
    }
}

/// A review's answer, counted in the metrics.
fn observed(
    shared: &Shared,
    webhook: WebhookKind,
    reply: Reply,
    started: Instant,
) -> (Response<Body>, Option<String>) {
    let allowed = match &reply.outcome {
        admission::Outcome::Decided(decision) => Some(decision.allowed),
        admission::Outcome::Unevaluated => Some(true),
        admission::Outcome::Invalid(_) | admission::Outcome::NotReady => None,
    };
    crate::trace::record_answer(
        reply.uid.as_deref(),
        reply
            .request
            .as_ref()
            .map(|(operation, kind)| (operation.as_str(), kind.as_str())),
        allowed,
    );
    let (operation, kind) = match &reply.request {
        Some((operation, kind)) => (Some(*operation), Some(kind.as_str())),
        None => (None, None),
    };
    shared.metrics.observe_review(
        webhook,
        &reply,
        operation,
        kind,
        started.elapsed().as_secs_f64(),
    );
    (reply_response(reply.status, reply.body), reply.uid)
}

/// What a review's evaluation needs besides its body and slot, owned: it may move to a thread
/// of the evaluation pool.
struct Job {
    shared: Arc<Shared>,
    webhook: WebhookKind,
    policies: Arc<kanon_engine::PolicySet>,
    /// What the evaluation may read of the object (`None`: all of it), and the identity it
    /// was chosen for.
    object_read: Option<(Arc<kanon_engine::Projection>, triage::Identity)>,
    deadline: tokio::time::Instant,
    timeout: Duration,
}

impl Job {
    /// Reads the review within the memory budget (then the body and its share of the body
    /// budget are let go: the review never holds its text and its evaluation at once, but for
    /// a mutating review read in part, which may have to be read again whole) and
    /// evaluates it, giving the slot back while a lookup or a worker process is awaited.
    async fn evaluate(self, body: Bytes, reservation: Reservation, slot: Slot) -> Reply {
        let Job {
            shared,
            webhook,
            policies,
            object_read,
            deadline,
            timeout,
        } = self;
        let projected = object_read
            .as_ref()
            .map(|(projection, identity)| (projection, identity.subject()));
        let read = admission::read_projected(&body, &shared.limits, projected);
        // A mutating review read in part keeps its text, and its share of the budget, until
        // it is decided: a mutation that writes where the reading skipped needs it read whole.
        let kept = (webhook == WebhookKind::Mutating && object_read.is_some())
            .then_some((body, reservation));
        let request = match read {
            Ok(request) => {
                crate::trace::record_namespace(request.namespace.as_deref());
                request
            }
            Err(reply) => {
                tracing::debug!(
                    webhook = webhook.path(),
                    status = reply.status,
                    uid = reply.uid.as_deref().unwrap_or(""),
                    "a review that cannot be answered"
                );
                return *reply;
            }
        };
        // The engine stops running policies at the deadline; those left fail under their own
        // failure policy, and the answer is still a verdict.
        let until = deadline.into_std();
        let lookup = BoundedLookup::new(shared.lookup.as_ref(), deadline - answer_margin(timeout))
            .with_programs(shared.sandbox.as_ref())
            .with_slot(&slot);
        let evaluation = kanon_engine::Evaluation::new(&lookup)
            .with_programs(lookup.program_host())
            .with_deadline(Some(kanon_engine::Deadline::new(move || {
                std::time::Instant::now() >= until
            })))
            .with_now(Some(kanon_engine::unix_seconds(
                std::time::SystemTime::now(),
            )))
            .with_owner_trust(shared.owner_trust.clone())
            .with_pause(Some(super::pool::pause()));
        let recorder = shared.recorder.get().map(|r| r.as_ref());
        let reread = kept
            .as_ref()
            .map(|(body, _)| admission::Reread::new(body, &shared.limits));
        admission::answer_recording(
            request,
            reread,
            webhook,
            &policies,
            &evaluation,
            recorder,
            &shared.observers,
        )
        .await
    }
}

fn timed_out(
    webhook: WebhookKind,
    timeout: Duration,
    doing: &'static str,
) -> (Response<Body>, Option<String>) {
    tracing::warn!(
        webhook = webhook.path(),
        timeout_ms = timeout.as_millis(),
        doing,
        "a review timed out"
    );
    let message = format!("the review timed out after {timeout:?} ({doing})");
    (
        failure(StatusCode::INTERNAL_SERVER_ERROR, "Timeout", &message),
        None,
    )
}

fn reply_response(status: u16, body: Vec<u8>) -> Response<Body> {
    let mut response = Response::new(Full::from(body));
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(admission::CONTENT_TYPE),
    );
    response
}

/// A webhook answer that is not a verdict: a `v1` Status, whose message kube-apiserver
/// quotes to its client ([`admission::status_body`]).
fn failure(status: StatusCode, reason: &str, message: &str) -> Response<Body> {
    reply_response(
        status.as_u16(),
        admission::status_body(status.as_u16(), reason, message),
    )
}

/// `response`, telling the client this connection closes (the rest of its body is not read).
fn closing(mut response: Response<Body>) -> Response<Body> {
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

fn text(status: StatusCode, message: &str) -> Response<Body> {
    let mut response = Response::new(Full::from(format!("{message}\n")));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

fn not_found(path: &str) -> Response<Body> {
    text(StatusCode::NOT_FOUND, &format!("no such path: {path}"))
}

fn method_not_allowed(allow: &'static str) -> Response<Body> {
    let mut response = text(
        StatusCode::METHOD_NOT_ALLOWED,
        &format!("method not allowed: use {allow}"),
    );
    response
        .headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(allow));
    response
}
