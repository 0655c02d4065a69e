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
}

impl<'v, 'a> RuleActivation<'v, 'a> {
    /// `base` in the order of [`BASE_VARIABLES`]; `variables` as compiled, in slot order after
    /// them.
    pub(crate) fn new(base: [Value<'a>; BASE_VARIABLES.len()], variables: &'v [Named]) -> Self {
        RuleActivation {
            base,
            variables,
            computed: vec![None; variables.len()],
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
        let Some(variable) = self.variables.get(index) else {
            return Ok(Value::Null);
        };
        let program = variable.expression.program.clone();
        // Its cost is the reading expression's, as in kube-apiserver.
        let value = program.eval_with(self, budget);
        if let Some(slot) = self.computed.get_mut(index) {
            *slot = Some(value.clone());
        }
        value
    }
}
