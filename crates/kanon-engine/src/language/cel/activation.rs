//! What a CEL rule's expressions read when they run: the base variables, read in place from the
//! request's JSON, and the rule's `variables`, each computed the first time an expression reads
//! it and kept for the rest of the request (as kube-apiserver does).

use kanon_cel::composition::Computed;
use kanon_cel::{Activation, Budget, EvalError, Value};

use super::compile::{BASE_VARIABLES, Named};

/// The values of one rule's variables on one request.
pub(crate) struct RuleActivation<'v, 'a> {
    base: [Value<'a>; BASE_VARIABLES.len()],
    variables: &'v [Named],
    computed: Computed<'a>,
}

impl<'v, 'a> RuleActivation<'v, 'a> {
    /// `base` in the order of [`BASE_VARIABLES`]; `variables` as compiled, in slot order after
    /// them.
    pub(crate) fn new(base: [Value<'a>; BASE_VARIABLES.len()], variables: &'v [Named]) -> Self {
        RuleActivation {
            base,
            variables,
            computed: Computed::new(variables.len(), super::VARIABLE_VALUES_LIMIT),
        }
    }
}

impl<'a> Activation<'a> for RuleActivation<'_, 'a> {
    fn resolve(&mut self, slot: usize, budget: &mut Budget<'_>) -> Result<Value<'a>, EvalError> {
        if let Some(value) = self.base.get(slot) {
            return Ok(value.clone());
        }
        let index = slot - self.base.len();
        // The compiled variables outlive this activation: read through a copy of the slice, not
        // through `self`, which the evaluation borrows.
        let variables = self.variables;
        let Some(variable) = variables.get(index) else {
            return Ok(Value::Null);
        };
        Computed::resolve(
            self,
            |activation| &mut activation.computed,
            index,
            &variable.name,
            &variable.expression.program,
            budget,
        )
    }
}
