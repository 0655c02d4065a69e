//! OpenTelemetry traces of reviews: a span per review, a child of the span kube-apiserver's
//! webhook call sends in its W3C `traceparent` header (so kanon's work sits under the
//! apiserver's request in one trace), exported over OTLP through a bounded [`queue`].
//!
//! Spans are `tracing` spans of the target [`TARGET`]; the `tracing-opentelemetry` layer the
//! binary installs when export is on turns them into OpenTelemetry spans. With export off the
//! binary installs no span layer, no layer wants them, and making one costs a check of a cached
//! flag.

pub mod export;
pub mod queue;
pub mod sampling;

use hyper::HeaderMap;
use kanon_engine::WebhookKind;
use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

pub use export::{ExportError, Protocol, TraceSettings, Tracing};
pub use queue::{QueueSettings, SpanQueue, TraceMetrics};
pub use sampling::{ReviewSampling, SamplingError};

/// The `tracing` target of the spans exported as traces (the engine's too: a policy's run is
/// a child of its review's span).
pub const TARGET: &str = kanon_engine::TRACE_TARGET;

/// A review's span, named as OpenTelemetry names HTTP server spans (`POST /validate`), the
/// child of the apiserver's call when its headers carry a `traceparent`. The request's
/// identity and verdict are recorded with the answer ([`record_answer`], [`record_status`]);
/// never the object's contents. With `sampling` given (export on), a review it leaves out gets
/// no span at all, nor do its policies, lookups and programs.
pub fn review_span(
    webhook: WebhookKind,
    headers: &HeaderMap,
    sampling: Option<&ReviewSampling>,
) -> Span {
    if sampling.is_some_and(|sampling| !sampling.traced(headers)) {
        return Span::none();
    }
    let span = tracing::info_span!(
        target: TARGET,
        "review",
        otel.name = route_name(webhook),
        otel.kind = "server",
        http.request.method = "POST",
        http.route = webhook.path(),
        http.response.status_code = tracing::field::Empty,
        kanon.request.uid = tracing::field::Empty,
        kanon.request.operation = tracing::field::Empty,
        kanon.request.kind = tracing::field::Empty,
        kanon.request.namespace = tracing::field::Empty,
        kanon.allowed = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    );
    if !span.is_disabled() && headers.contains_key("traceparent") {
        let parent = TraceContextPropagator::new().extract(&HeaderExtractor(headers));
        let _ = span.set_parent(parent);
    }
    span
}

/// `POST /mutate` or `POST /validate`.
fn route_name(webhook: WebhookKind) -> &'static str {
    match webhook {
        WebhookKind::Mutating => "POST /mutate",
        WebhookKind::Validating => "POST /validate",
    }
}

/// Records the review's namespace on the current span, once the review is read.
pub fn record_namespace(namespace: Option<&str>) {
    let span = Span::current();
    if let Some(namespace) = namespace
        && !span.is_disabled()
    {
        span.record("kanon.request.namespace", namespace);
    }
}

/// Records the answer on the current span: the request's uid, and its operation and kind
/// when it was read, and whether it was allowed when it was judged.
pub fn record_answer(uid: Option<&str>, request: Option<(&str, &str)>, allowed: Option<bool>) {
    let span = Span::current();
    if span.is_disabled() {
        return;
    }
    if let Some(uid) = uid {
        span.record("kanon.request.uid", uid);
    }
    if let Some((operation, kind)) = request {
        span.record("kanon.request.operation", operation);
        span.record("kanon.request.kind", kind);
    }
    if let Some(allowed) = allowed {
        span.record("kanon.allowed", allowed);
    }
}

/// Records the HTTP status of the answer on `span`; a 5xx is the span's error, as
/// OpenTelemetry marks server spans.
pub fn record_status(span: &Span, status: u16) {
    if span.is_disabled() {
        return;
    }
    span.record("http.response.status_code", status);
    if status >= 500 {
        span.record("otel.status_code", "ERROR");
    }
}

/// The trace id of the current span, when it is traced (for the decision log).
pub fn current_trace_id() -> Option<String> {
    use opentelemetry::trace::TraceContextExt;
    let span = Span::current();
    if span.is_disabled() {
        return None;
    }
    let context = span.context();
    let span_context = context.span().span_context().clone();
    span_context
        .is_valid()
        .then(|| span_context.trace_id().to_string())
}

/// Reads W3C trace context from HTTP headers.
struct HeaderExtractor<'h>(&'h HeaderMap);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|value| value.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|name| name.as_str()).collect()
    }
}

/// An environment of fixed `pairs`, for the tests of what `OTEL_*` variables say.
#[cfg(test)]
fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
    move |key| {
        pairs
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| (*v).to_owned())
    }
}
