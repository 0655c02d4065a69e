//! CEL rules: ValidatingAdmissionPolicy's and MutatingAdmissionPolicy's fields inside kanon's
//! rules, in kube-apiserver 1.35's CEL environment (`kanon_cel::Env::kubernetes`).
//!
//! Every expression is parsed, type-checked and planned once, when the policy compiles; a
//! request evaluates the plans over the request's JSON in place. Each expression call is bounded
//! by kube-apiserver's per-call cost limit, one rule's evaluation by its per-policy budget, and
//! comprehensions poll the review's deadline.
//!
//! What an expression sees: `object`, `oldObject`, `request`, `namespaceObject` as a
//! ValidatingAdmissionPolicy sees them, `variables.<name>` (computed on first use, at most once
//! per request), and `references.<name>`: the rule's kanon references (the object's owner, other
//! objects, HTTP services), resolved through kanon's lookups before the rule runs.

mod activation;
pub(crate) mod compile;
pub(crate) mod mutate;
pub(crate) mod schema;
pub(crate) mod validate;

use kanon_cel::EvalError;

/// kube-apiserver's limit on one expression call, in cost units (about 0.1 s of work).
pub const PER_CALL_LIMIT: u64 = 1_000_000;
/// kube-apiserver's budget for all expressions of one policy on one request.
pub const PER_EVALUATION_LIMIT: u64 = 10_000_000;
/// How many values (list items, map entries, 32-byte pieces of strings) one rule's variables may
/// hold together on one request: about 64 MiB. kube-apiserver has no such bound; within its cost
/// budget alone, a rule's variables can hold some 300 MiB (measured), which a few concurrent
/// reviews would multiply past a webhook's memory limit.
pub const VARIABLE_VALUES_LIMIT: usize = 2_000_000;
/// Longest message a `messageExpression` may give; longer is cut (kube-apiserver: 5 KiB).
pub const MESSAGE_LIMIT: usize = 5 * 1024;

/// What one rule's evaluation may still spend, shared by its expressions; each call also
/// stops at [`PER_CALL_LIMIT`] and when `interrupted` says the deadline has passed.
pub(crate) struct Meter<'d> {
    remaining: u64,
    interrupted: &'d (dyn Fn() -> bool + Sync),
}

impl<'d> Meter<'d> {
    pub(crate) fn new(interrupted: &'d (dyn Fn() -> bool + Sync)) -> Self {
        Meter {
            remaining: PER_EVALUATION_LIMIT,
            interrupted,
        }
    }

    /// Runs one expression call within the remaining budget.
    pub(crate) fn run<'a>(
        &mut self,
        call: impl FnOnce(&mut kanon_cel::Budget<'_>) -> Result<kanon_cel::Value<'a>, EvalError>,
    ) -> Result<kanon_cel::Value<'a>, CallError> {
        let limit = PER_CALL_LIMIT.min(self.remaining);
        let interrupted = self.interrupted;
        let check = move || interrupted();
        let mut budget = kanon_cel::Budget::new(limit).with_interrupt(&check);
        let outcome = call(&mut budget);
        self.remaining = self.remaining.saturating_sub(budget.spent.min(limit));
        match outcome {
            Ok(value) => Ok(value),
            Err(EvalError::CostLimitExceeded { .. }) if limit < PER_CALL_LIMIT => {
                Err(CallError::OutOfBudget)
            }
            Err(error) => Err(CallError::Failed(error)),
        }
    }
}

/// Why an expression call gave no value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum CallError {
    /// The expression failed (its own error, its per-call limit, the deadline).
    Failed(EvalError),
    /// The rule's whole budget is spent: no further expression of it runs.
    OutOfBudget,
}
