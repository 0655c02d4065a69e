//! What a CEL rule's expressions read when they run: the base variables, read in place from the
//! request's JSON, and the rule's `variables`, each computed the first time an expression reads
//! it and kept for the rest of the request (as kube-apiserver does).

use kanon_cel::{Activation, Budget, EvalError, Value};

use super::compile::{BASE_VARIABLES, Named};

/// The values of one rule's variables on one request.
pub(crate) struct RuleActivation<'v, 'a> {
    base: [Value<'a>; BASE_VARIABLES.len()],
    variables: &'v [Named],
    computed: Vec<Option<Result<Value<'a>, EvalError>>>,
    /// What the computed variables hold ([`Value::owned_size`]), against
    /// [`super::VARIABLE_VALUES_LIMIT`].
    held: usize,
}

impl<'v, 'a> RuleActivation<'v, 'a> {
    /// `base` in the order of [`BASE_VARIABLES`]; `variables` as compiled, in slot order after
    /// them.
    pub(crate) fn new(base: [Value<'a>; BASE_VARIABLES.len()], variables: &'v [Named]) -> Self {
        RuleActivation {
            base,
            variables,
            computed: vec![None; variables.len()],
            held: 0,
        }
    }
}

impl<'a> Activation<'a> for RuleActivation<'_, 'a> {
    fn resolve(&mut self, slot: usize, budget: &mut Budget<'_>) -> Result<Value<'a>, EvalError> {
        if let Some(value) = self.base.get(slot) {
            return Ok(value.clone());
        }
        let index = slot - self.base.len();
        if let Some(Some(known)) = self.computed.get(index) {
            return known.clone();
        }
        // The compiled variables outlive this activation: read through a copy of the slice, not
        // through `self`, which the evaluation borrows.
        let variables = self.variables;
        let Some(variable) = variables.get(index) else {
            return Ok(Value::Null);
        };
        let program = &variable.expression.program;
        // Its cost is the reading expression's, as in kube-apiserver, which words a variable
        // that fails as such (running out of budget or time stays what it is).
        let mut value = program
            .eval_with(self, budget)
            .map_err(|error| match error {
                EvalError::CostLimitExceeded { .. } | EvalError::Interrupted => error,
                other => EvalError::Invalid(format!(
                    "composited variable {} fails to evaluate: {other}",
                    kanon_cel::go_quote(&variable.name)
                )),
            });
        // Kept until the rule ends: within the cost budget a rule's variables could hold
        // hundreds of MiB, so what they hold together is bounded too (beyond kube-apiserver).
        if let Ok(computed) = &value {
            let limit = super::VARIABLE_VALUES_LIMIT;
            self.held = self
                .held
                .saturating_add(computed.owned_size(limit.saturating_sub(self.held)));
            if self.held > limit {
                value = Err(EvalError::Invalid(format!(
                    "the rule's variables hold more than {limit} values (kanon's bound on one rule's memory)"
                )));
            }
        }
        if let Some(slot) = self.computed.get_mut(index) {
            *slot = Some(value.clone());
        }
        value
    }
}
