//! Lookups bounded by the review's deadline: whatever implements [`Lookup`] (watch caches, the
//! apiserver, an HTTP client), a lookup made for a review ends when the review's time is up,
//! with [`LookupError::TimedOut`], so that the policy fails under its own failure policy
//! instead of the whole review timing out.

use std::sync::Arc;
use std::time::Duration;

use kanon_engine::Program;
use kanon_engine::{HttpAnswer, HttpCall, LookupFuture, ObjectQuery};
use kanon_engine::{ProgramFuture, ProgramHost, ProgramInput};

use crate::sandbox::ProgramSandbox;
use crate::slot::Slot;
use kanon_engine::{Lookup, LookupError};
use serde_json::Value;
use tokio::time::Instant;
use tracing::Instrument;

/// A [`Lookup`] whose every call ends by `deadline`, and whose hand-written programs, given a
/// sandbox, run there by `deadline` too. Given the review's evaluation [`Slot`], it gives the
/// slot back while it waits.
pub struct BoundedLookup<'l> {
    inner: &'l dyn Lookup,
    deadline: Instant,
    sandbox: Option<&'l ProgramSandbox>,
    slot: Option<&'l Slot>,
}

impl<'l> BoundedLookup<'l> {
    /// Bounds `inner` by `deadline`.
    pub fn new(inner: &'l dyn Lookup, deadline: Instant) -> Self {
        BoundedLookup {
            inner,
            deadline,
            sandbox: None,
            slot: None,
        }
    }

    /// Gives `slot` back while a lookup or a program in the sandbox is awaited.
    pub fn with_slot(mut self, slot: &'l Slot) -> Self {
        self.slot = Some(slot);
        self
    }

    /// `future`, awaited without the review's slot when it has one.
    async fn waiting<F: std::future::Future>(&self, future: F) -> F::Output {
        match self.slot {
            Some(slot) => slot.away(self.deadline, future).await,
            None => future.await,
        }
    }

    /// Runs hand-written programs in `sandbox` (when given) rather than in the calling thread.
    pub fn with_programs(mut self, sandbox: Option<&'l ProgramSandbox>) -> Self {
        self.sandbox = sandbox;
        self
    }

    /// Where hand-written programs run, for the review's [`Evaluation`]: this lookup's
    /// sandbox, by the same deadline; `None` without one (in the calling thread).
    ///
    /// [`Evaluation`]: kanon_engine::Evaluation
    pub fn program_host(&self) -> Option<&dyn ProgramHost> {
        self.sandbox.map(|_| self as &dyn ProgramHost)
    }

    /// `future` (made within `span`, so that what its source records lands there), ended by
    /// the deadline, its outcome recorded on `span`.
    fn bound<'a, T: Send + 'a>(
        &'a self,
        span: tracing::Span,
        what: impl FnOnce() -> String + Send + 'a,
        future: LookupFuture<'a, T>,
    ) -> LookupFuture<'a, T> {
        let deadline = self.deadline;
        let traced = span.clone();
        Box::pin(
            async move {
                let given = deadline.saturating_duration_since(Instant::now());
                let result = match self
                    .waiting(tokio::time::timeout_at(deadline, future))
                    .await
                {
                    Ok(result) => result,
                    Err(_) => Err(LookupError::TimedOut {
                        what: what(),
                        after: round_ms(given),
                    }),
                };
                if let Err(error) = &result
                    && !traced.is_disabled()
                {
                    traced.record("kanon.lookup.outcome", error.reason());
                    traced.record("otel.status_code", "ERROR");
                }
                result
            }
            .instrument(span),
        )
    }
}

/// A lookup's span (`kanon.lookup.kind`: `get`, `list`, `http`; what it reads; whether a
/// cache answered, when the source says; its outcome), a child of the policy's that made it.
fn lookup_span(kind: &'static str, what: impl FnOnce() -> String) -> tracing::Span {
    // Only within a review's span: an untraced review's lookups start no trace of their own.
    if tracing::Span::current().is_none() {
        return tracing::Span::none();
    }
    let span = tracing::info_span!(
        target: crate::trace::TARGET,
        "lookup",
        otel.name = tracing::field::Empty,
        kanon.lookup.kind = kind,
        kanon.lookup.target = tracing::field::Empty,
        kanon.lookup.cache = tracing::field::Empty,
        kanon.lookup.outcome = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    );
    if !span.is_disabled() {
        let what = what();
        span.record("otel.name", format!("lookup {kind} {what}").as_str());
        span.record("kanon.lookup.target", what.as_str());
    }
    span
}

/// A sandboxed program run's span (`program override|validate|message|reference`): the
/// worker's round trip, its outcome, the error when it failed; a child of the policy's.
fn program_span(program: &Program) -> tracing::Span {
    if tracing::Span::current().is_none() {
        return tracing::Span::none();
    }
    let kind = match program.kind() {
        kanon_engine::ProgramKind::Override => "override",
        kanon_engine::ProgramKind::Validate => "validate",
        kanon_engine::ProgramKind::Message => "message",
        kanon_engine::ProgramKind::Reference => "reference",
    };
    let span = tracing::info_span!(
        target: crate::trace::TARGET,
        "program",
        otel.name = tracing::field::Empty,
        kanon.program.kind = kind,
        kanon.program.runner = "sandbox",
        kanon.program.outcome = tracing::field::Empty,
        kanon.program.error = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    );
    if !span.is_disabled() {
        span.record("otel.name", format!("program {kind}").as_str());
    }
    span
}

/// Durations in messages to the millisecond: enough for a person, stable for a test.
fn round_ms(duration: Duration) -> Duration {
    Duration::from_millis(duration.as_millis().min(u64::MAX as u128) as u64)
}

impl Lookup for BoundedLookup<'_> {
    fn get<'a>(
        &'a self,
        query: ObjectQuery<'a>,
        name: &'a str,
    ) -> LookupFuture<'a, Option<Arc<Value>>> {
        let span = lookup_span("get", || query.describe(Some(name)));
        let found = span.in_scope(|| self.inner.get(query, name));
        let traced = span.clone();
        let bounded = self.bound(span, move || query.describe(Some(name)), found);
        Box::pin(async move {
            let result = bounded.await;
            if let Ok(found) = &result
                && !traced.is_disabled()
            {
                let outcome = if found.is_some() {
                    "found"
                } else {
                    "not_found"
                };
                traced.record("kanon.lookup.outcome", outcome);
            }
            result
        })
    }

    fn list<'a>(&'a self, query: ObjectQuery<'a>) -> LookupFuture<'a, Vec<Arc<Value>>> {
        let span = lookup_span("list", || query.describe(None));
        let listed = span.in_scope(|| self.inner.list(query));
        self.bound(span, move || query.describe(None), listed)
    }

    fn http<'a>(&'a self, call: &'a HttpCall) -> LookupFuture<'a, HttpAnswer> {
        let span = lookup_span("http", || call.describe());
        let answered = span.in_scope(|| self.inner.http(call));
        self.bound(span, move || call.describe(), answered)
    }

    fn kinds(&self) -> Option<kanon_engine::Kinds> {
        self.inner.kinds()
    }
}

impl ProgramHost for BoundedLookup<'_> {
    fn run<'a>(&'a self, program: &'a Program, input: ProgramInput) -> ProgramFuture<'a> {
        match self.sandbox {
            Some(sandbox) => {
                let span = program_span(program);
                let traced = span.clone();
                Box::pin(
                    async move {
                        let result = self
                            .waiting(sandbox.run_until(program, input, self.deadline))
                            .await;
                        if !traced.is_disabled() {
                            match &result {
                                Ok(Some(_)) => traced.record("kanon.program.outcome", "returned"),
                                Ok(None) => traced.record("kanon.program.outcome", "no_result"),
                                Err(error) => {
                                    traced.record("kanon.program.outcome", "failed");
                                    traced.record("kanon.program.error", error.message.as_str());
                                    traced.record("otel.status_code", "ERROR")
                                }
                            };
                        }
                        result
                    }
                    .instrument(span),
                )
            }
            // Not offered by `program_host` without a sandbox; run in place all the same.
            None => Box::pin(std::future::ready(program.run(&input.context()))),
        }
    }
}
