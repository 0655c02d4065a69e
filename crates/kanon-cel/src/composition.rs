//! An admission policy's `variables`, composed as kube-apiserver's admission plugins compose
//! them (k8s.io/apiserver `plugin/cel`, composition.go): each is declared `variables.<name>` with
//! the type its expression gives, as the composition declares it ([`variable_type`]), and is
//! computed the first time an expression reads it, then kept for the rest of the request
//! ([`Computed`]). An error computing it is the reader's, worded as the variable's.

use crate::{Activation, Budget, EvalError, Program, Type, Value, go_quote};

/// The name a variable is declared by in the environment: `variables.<name>`.
pub fn declared_name(name: &str) -> String {
    format!("variables.{name}")
}

/// The type `variables.<name>` has for a variable whose expression gives `result`: scalars as
/// they are, lists and maps element by element, and anything else (an object type such as
/// `request.userInfo`'s, an optional, a quantity, a type) `dyn`, as the composition's conversion
/// of the checked type to a declared type leaves them.
pub fn variable_type(result: &Type) -> Type {
    match result {
        Type::Bool
        | Type::Bytes
        | Type::Double
        | Type::Duration
        | Type::Int
        | Type::Null
        | Type::String
        | Type::Timestamp
        | Type::Uint => result.clone(),
        Type::List(element) => Type::list(variable_type(element)),
        Type::Map(key, value) => Type::map(variable_type(key), variable_type(value)),
        _ => Type::Dyn,
    }
}

/// The values of a policy's variables during one request: each computed when first read and
/// kept, its error too.
///
/// Beyond kube-apiserver, what the kept values hold together is bounded (`limit`, counted as
/// [`Value::owned_size`] counts): within the cost budget a policy's variables could otherwise
/// hold hundreds of MiB.
pub struct Computed<'a> {
    values: Vec<Option<Result<Value<'a>, EvalError>>>,
    held: usize,
    limit: usize,
}

impl<'a> Computed<'a> {
    /// Room for `count` variables, none computed yet.
    pub fn new(count: usize, limit: usize) -> Self {
        Computed {
            values: vec![None; count],
            held: 0,
            limit,
        }
    }

    /// The value of the variable `index` (named `name`, computed by `program`), read through
    /// `activation`, whose variables these are (`computed` finds them in it).
    ///
    /// Each read costs 1, as selecting the field of `variables` does in cel-go; computing it
    /// the first time costs what its expression costs, charged to `budget`, the reading
    /// expression's, as kube-apiserver charges a variable's cost to the request's. An error is
    /// worded `composited variable "<name>" fails to evaluate: …` as there; running out of
    /// budget or time stays what it is.
    pub fn resolve<A: Activation<'a>>(
        activation: &mut A,
        computed: fn(&mut A) -> &mut Computed<'a>,
        index: usize,
        name: &str,
        program: &Program,
        budget: &mut Budget<'_>,
    ) -> Result<Value<'a>, EvalError> {
        budget.charge(1)?;
        if let Some(Some(known)) = computed(activation).values.get(index) {
            return known.clone();
        }
        let mut value = program
            .eval_with(activation, budget)
            .map_err(|error| match error {
                EvalError::CostLimitExceeded { .. } | EvalError::Interrupted => error,
                other => EvalError::Invalid(format!(
                    "composited variable {} fails to evaluate: {other}",
                    go_quote(name)
                )),
            });
        let kept = computed(activation);
        if let Ok(value_now) = &value {
            let limit = kept.limit;
            kept.held = kept
                .held
                .saturating_add(value_now.owned_size(limit.saturating_sub(kept.held)));
            if kept.held > limit {
                value = Err(EvalError::Invalid(format!(
                    "the rule's variables hold more than {limit} values (kanon's bound on one rule's memory)"
                )));
            }
        }
        if let Some(slot) = kept.values.get_mut(index) {
            *slot = Some(value.clone());
        }
        value
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::Env;

    #[test]
    fn types_are_declared_as_the_composition_declares_them() {
        assert_eq!(variable_type(&Type::Int), Type::Int);
        assert_eq!(
            variable_type(&Type::list(Type::String)),
            Type::list(Type::String)
        );
        assert_eq!(
            variable_type(&Type::Optional(Arc::new(Type::String))),
            Type::Dyn
        );
        assert_eq!(
            variable_type(&Type::map(
                Type::String,
                Type::Optional(Arc::new(Type::Int))
            )),
            Type::map(Type::String, Type::Dyn)
        );
    }

    /// `object` and one variable `v`, computed lazily.
    struct Lazy<'p, 'a> {
        object: Value<'a>,
        program: &'p Program,
        computed: Computed<'a>,
        runs: usize,
    }

    impl<'a> Activation<'a> for Lazy<'_, 'a> {
        fn resolve(
            &mut self,
            slot: usize,
            budget: &mut Budget<'_>,
        ) -> Result<Value<'a>, EvalError> {
            if slot == 0 {
                return Ok(self.object.clone());
            }
            let program = self.program;
            if matches!(self.computed.values.first(), Some(None)) {
                self.runs += 1;
            }
            Computed::resolve(self, |a| &mut a.computed, 0, "v", program, budget)
        }
    }

    #[test]
    fn a_variable_is_computed_once_when_read_and_its_error_named() {
        let mut env = Env::kubernetes();
        env.declare_variable("object", Type::Dyn);
        let variable = env.compile("object.spec.replicas * 2").expect("compiles");
        env.declare_variable(&declared_name("v"), variable_type(variable.result_type()));
        let reader = env
            .compile("variables.v + variables.v == 12")
            .expect("compiles");
        let unread = env.compile("true || variables.v > 0").expect("compiles");
        let lazy_over = |object| Lazy {
            object: Value::from_json(object),
            program: &variable,
            computed: Computed::new(1, 1000),
            runs: 0,
        };
        let object = serde_json::json!({"spec": {"replicas": 3}});
        let mut lazy = lazy_over(&object);
        let mut budget = Budget::new(1_000_000);
        let value = reader.eval_with(&mut lazy, &mut budget).expect("evaluates");
        assert!(matches!(value, Value::Bool(true)));
        assert_eq!(lazy.runs, 1, "computed once, read twice");

        let object = serde_json::json!({"spec": {}});
        let mut lazy = lazy_over(&object);
        let mut budget = Budget::new(1_000_000);
        let value = unread.eval_with(&mut lazy, &mut budget).expect("evaluates");
        assert!(matches!(value, Value::Bool(true)));
        assert_eq!(lazy.runs, 0, "never read, never computed");
        let error = reader
            .eval_with(&mut lazy, &mut budget)
            .expect_err("no replicas");
        assert_eq!(
            error.to_string(),
            "composited variable \"v\" fails to evaluate: no such key: replicas"
        );
    }
}
