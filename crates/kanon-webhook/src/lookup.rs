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

    fn bound<'a, T: Send + 'a>(
        &'a self,
        what: impl FnOnce() -> String + Send + 'a,
        future: LookupFuture<'a, T>,
    ) -> LookupFuture<'a, T> {
        let deadline = self.deadline;
        Box::pin(async move {
            let given = deadline.saturating_duration_since(Instant::now());
            match self
                .waiting(tokio::time::timeout_at(deadline, future))
                .await
            {
                Ok(result) => result,
                Err(_) => Err(LookupError::TimedOut {
                    what: what(),
                    after: round_ms(given),
                }),
            }
        })
    }
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
        self.bound(
            move || query.describe(Some(name)),
            self.inner.get(query, name),
        )
    }

    fn list<'a>(&'a self, query: ObjectQuery<'a>) -> LookupFuture<'a, Vec<Arc<Value>>> {
        self.bound(move || query.describe(None), self.inner.list(query))
    }

    fn http<'a>(&'a self, call: &'a HttpCall) -> LookupFuture<'a, HttpAnswer> {
        self.bound(move || call.describe(), self.inner.http(call))
    }

    fn kinds(&self) -> Option<kanon_engine::Kinds> {
        self.inner.kinds()
    }
}

impl ProgramHost for BoundedLookup<'_> {
    fn run<'a>(&'a self, program: &'a Program, input: ProgramInput) -> ProgramFuture<'a> {
        match self.sandbox {
            Some(sandbox) => {
                Box::pin(self.waiting(sandbox.run_until(program, input, self.deadline)))
            }
            // Not offered by `program_host` without a sandbox; run in place all the same.
            None => Box::pin(std::future::ready(program.run(&input.context()))),
        }
    }
}
