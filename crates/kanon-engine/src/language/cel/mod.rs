//! CEL rules: ValidatingAdmissionPolicy's and MutatingAdmissionPolicy's fields inside kanon's
//! rules, in kube-apiserver 1.35's CEL environment (`kanon_cel::Env::kubernetes`).
//!
//! Every expression is parsed, type-checked and planned once, when the policy compiles; a
//! request evaluates the plans over the request's JSON in place. Each expression call is bounded
//! by kube-apiserver's per-call cost limit, one policy's evaluation by kube-apiserver's budget
//! per policy, the policies of one owner on one review by a ceiling of kanon's, and
//! comprehensions poll the review's deadline.
//!
//! What an expression sees: `object`, `oldObject`, `request`, `namespaceObject` as a
//! ValidatingAdmissionPolicy sees them, `variables.<name>` (computed on first use, at most once
//! per request), and `references.<name>`: the rule's kanon references (the object's owner, other
//! objects, HTTP services), resolved through kanon's lookups before the rule runs.

mod activation;
mod apply_configuration;
pub(crate) mod compile;
mod decoded;
pub(crate) mod mutate;
pub(crate) mod schema;
pub(crate) mod validate;

use std::sync::atomic::{AtomicU64, Ordering};

use kanon_cel::EvalError;

/// kube-apiserver's limit on one expression call, in cost units (about 0.1 s of work).
pub const PER_CALL_LIMIT: u64 = 1_000_000;
/// kube-apiserver's budget for all expressions of one policy on one request
/// (`RuntimeCELCostBudget`, per ValidatingAdmissionPolicyBinding evaluation): in kanon's kinds,
/// every rule, match condition, variable, validation, message and mutation of one policy on one
/// request share it; in an admission policy, one binding's evaluation (per param), as in
/// kube-apiserver.
pub const PER_EVALUATION_LIMIT: u64 = 10_000_000;
/// What the policies of one owner may spend together on one review: five policies' whole
/// budgets. kube-apiserver has no such ceiling (only the webhook's timeout ends a request with
/// many bindings); kanon has one so that the CPU a review takes is bounded whatever the number of
/// policies: about 0.75 s of a core at kanon's measured ~67M units a second, under a tenth of the
/// default 10 s timeout. The owners are the cluster (cluster policies and admission policy
/// bindings) and the request's namespace (its namespaced policies: a namespaced policy selects
/// only objects of its own namespace), each with its own ceiling, so a tenant who spends its
/// whole ceiling makes only its own policies fail, never a cluster policy (which under `Ignore`
/// would then be skipped).
pub const PER_REVIEW_LIMIT: u64 = 5 * PER_EVALUATION_LIMIT;
/// kube-apiserver's budget for the match conditions of one webhook or binding on one object
/// (`RuntimeCELCostBudgetMatchConditions`): what one PolicyException's `matchConditions` may
/// spend on one request.
pub const MATCH_CONDITIONS_LIMIT: u64 = 2_500_000;
/// What every PolicyException's `matchConditions` may spend together on one review. An
/// exception whose conditions cannot be evaluated within it does not apply (the policy runs),
/// so running out never exempts anything.
pub const EXCEPTIONS_PER_REVIEW_LIMIT: u64 = PER_EVALUATION_LIMIT;
/// How many values (list items, map entries, 32-byte pieces of strings) one rule's variables may
/// hold together on one request: about 64 MiB. kube-apiserver has no such bound; within its cost
/// budget alone, a rule's variables can hold some 300 MiB (measured), which a few concurrent
/// reviews would multiply past a webhook's memory limit.
pub const VARIABLE_VALUES_LIMIT: usize = 2_000_000;
/// Longest message a `messageExpression` may give; longer is cut (kube-apiserver: 5 KiB).
pub const MESSAGE_LIMIT: usize = 5 * 1024;

/// A budget several evaluations on one review draw from: an owner's policies
/// ([`PER_REVIEW_LIMIT`]) or the exceptions ([`EXCEPTIONS_PER_REVIEW_LIMIT`]).
#[derive(Debug)]
pub(crate) struct Ceiling {
    remaining: AtomicU64,
    limit: u64,
    /// Whose it is, for the message when it is spent (`the cluster's policies`).
    whose: &'static str,
}

impl Ceiling {
    fn new(limit: u64, whose: &'static str) -> Self {
        Ceiling {
            remaining: AtomicU64::new(limit),
            limit,
            whose,
        }
    }

    fn remaining(&self) -> u64 {
        self.remaining.load(Ordering::Relaxed)
    }

    fn charge(&self, spent: u64) {
        // One review is evaluated by one task at a time: no charge races another.
        let left = self.remaining().saturating_sub(spent);
        self.remaining.store(left, Ordering::Relaxed);
    }

    /// The message of an evaluation stopped because this ceiling is spent.
    pub(crate) fn spent(&self) -> String {
        format!(
            "validation failed due to running out of the review's cost budget ({} units for {} on one request), no further validation rules will be run",
            self.limit, self.whose
        )
    }
}

/// The CEL budgets of one review (one webhook call): a ceiling per owner of policies and one for
/// the exceptions' match conditions. Built by each of the engine's entry points, so a caller
/// that evaluates many requests in one [`Evaluation`](crate::Evaluation) (the audit, `kanon
/// test`) gives each its own.
#[derive(Debug)]
pub(crate) struct ReviewCost {
    cluster: Ceiling,
    namespaced: Ceiling,
    pub(crate) exceptions: Ceiling,
}

impl ReviewCost {
    pub(crate) fn new() -> Self {
        ReviewCost {
            cluster: Ceiling::new(PER_REVIEW_LIMIT, "the cluster's policies"),
            namespaced: Ceiling::new(PER_REVIEW_LIMIT, "the namespace's own policies"),
            exceptions: Ceiling::new(EXCEPTIONS_PER_REVIEW_LIMIT, "the exceptions' conditions"),
        }
    }

    /// The ceiling of a policy's owner: its namespace's when it is namespaced, else the
    /// cluster's.
    pub(crate) fn of(&self, namespaced: bool) -> &Ceiling {
        if namespaced {
            &self.namespaced
        } else {
            &self.cluster
        }
    }
}

/// What one policy may still spend on one request — its match conditions apart, as
/// kube-apiserver meters a binding's ([`MATCH_CONDITIONS_LIMIT`]) — and the review's ceiling
/// both also draw from.
#[derive(Debug)]
pub(crate) struct PolicyBudget<'c> {
    remaining: u64,
    conditions: u64,
    ceiling: &'c Ceiling,
}

impl<'c> PolicyBudget<'c> {
    /// [`PER_EVALUATION_LIMIT`] within `ceiling`.
    pub(crate) fn new(ceiling: &'c Ceiling) -> Self {
        PolicyBudget::of(PER_EVALUATION_LIMIT, ceiling)
    }

    /// `limit` within `ceiling`.
    pub(crate) fn of(limit: u64, ceiling: &'c Ceiling) -> Self {
        PolicyBudget {
            remaining: limit,
            conditions: MATCH_CONDITIONS_LIMIT,
            ceiling,
        }
    }

    /// The review's ceiling it draws from.
    pub(crate) fn ceiling(&self) -> &'c Ceiling {
        self.ceiling
    }

    /// A meter over this budget, stopping when `interrupted` says the deadline has passed.
    pub(crate) fn meter<'m>(&'m mut self, interrupted: &'m (dyn Fn() -> bool + Sync)) -> Meter<'m>
    where
        'c: 'm,
    {
        Meter {
            remaining: &mut self.remaining,
            conditions: Some(&mut self.conditions),
            ceiling: self.ceiling,
            interrupted,
        }
    }
}

/// What one policy's evaluation may still spend, shared by its expressions; each call also
/// stops at [`PER_CALL_LIMIT`], at the review's ceiling, and when `interrupted` says the
/// deadline has passed.
pub(crate) struct Meter<'m> {
    remaining: &'m mut u64,
    /// What the policy's match conditions may still spend (`None`: this meter is theirs).
    conditions: Option<&'m mut u64>,
    ceiling: &'m Ceiling,
    interrupted: &'m (dyn Fn() -> bool + Sync),
}

impl Meter<'_> {
    /// The meter of the policy's match conditions: their own budget, within the same review
    /// ceiling and deadline (this meter itself when it is theirs).
    pub(crate) fn for_conditions(&mut self) -> Meter<'_> {
        let remaining = match self.conditions.as_deref_mut() {
            Some(conditions) => conditions,
            None => &mut *self.remaining,
        };
        Meter {
            remaining,
            conditions: None,
            ceiling: self.ceiling,
            interrupted: self.interrupted,
        }
    }

    /// Runs one expression call within the remaining budget.
    pub(crate) fn run<'a>(
        &mut self,
        call: impl FnOnce(&mut kanon_cel::Budget<'_>) -> Result<kanon_cel::Value<'a>, EvalError>,
    ) -> Result<kanon_cel::Value<'a>, CallError> {
        let own = *self.remaining;
        let review = self.ceiling.remaining();
        let limit = PER_CALL_LIMIT.min(own).min(review);
        let interrupted = self.interrupted;
        let check = move || interrupted();
        let mut budget = kanon_cel::Budget::new(limit).with_interrupt(&check);
        let outcome = call(&mut budget);
        let spent = budget.spent.min(limit);
        *self.remaining = own.saturating_sub(spent);
        self.ceiling.charge(spent);
        match outcome {
            Ok(value) => Ok(value),
            Err(EvalError::CostLimitExceeded { .. }) if limit < PER_CALL_LIMIT => {
                Err(if own <= review {
                    CallError::OutOfBudget
                } else {
                    CallError::OutOfReviewBudget(self.ceiling.spent())
                })
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
    /// The policy's whole budget is spent: no further expression of it runs.
    OutOfBudget,
    /// The review's ceiling for the policy's owner is spent (its message): no further
    /// expression of it runs.
    OutOfReviewBudget(String),
}
