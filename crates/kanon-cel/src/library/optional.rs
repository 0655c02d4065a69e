//! cel-go's optional types library at its latest version (kube-apiserver enables
//! `cel.OptionalTypes()` without a version): `optional.of`, `optional.ofNonZeroValue`,
//! `optional.none`, `value`, `hasValue`, `or`, `orValue` (evaluated by the interpreter, which
//! short-circuits them; declared here), `first`, `last`, `optional.unwrap` and `unwrapOpt`.

use std::sync::Arc;

use crate::env::Env;
use crate::error::EvalError;
use crate::function::no_overload;
use crate::value::Value;

pub(crate) fn install(env: &mut Env) {
    // The interpreter's team may declare the core functions with the standard library; one
    // declaration is enough.
    if env.overloads("optional.of").is_empty() {
        install_core(env);
    }
    if env.overloads("first").is_empty() {
        install_lists(env);
    }
}

fn install_core(env: &mut Env) {
    env.function(
        "optional_of",
        "optional.of(V) -> optional_type(V)",
        |_, args| Ok(Value::Optional(Some(Arc::new(args[0].clone())))),
    );
    env.function(
        "optional_ofNonZeroValue",
        "optional.ofNonZeroValue(V) -> optional_type(V)",
        |_, args| {
            Ok(if is_zero(&args[0]) {
                Value::Optional(None)
            } else {
                Value::Optional(Some(Arc::new(args[0].clone())))
            })
        },
    );
    env.function(
        "optional_none",
        "optional.none() -> optional_type(V)",
        |_, _| Ok(Value::Optional(None)),
    );
    env.method(
        "optional_value",
        "optional_type(V).value() -> V",
        |_, args| match &args[0] {
            Value::Optional(Some(inner)) => Ok((**inner).clone()),
            Value::Optional(None) => {
                Err(EvalError::Invalid("optional.none() dereference".to_owned()))
            }
            _ => Err(no_overload("value", args)),
        },
    );
    env.method(
        "optional_hasValue",
        "optional_type(V).hasValue() -> bool",
        |_, args| match &args[0] {
            Value::Optional(inner) => Ok(Value::Bool(inner.is_some())),
            _ => Err(no_overload("hasValue", args)),
        },
    );
    // Declarations for the checker: the interpreter evaluates `or` and `orValue` itself, so that
    // the alternative is evaluated only when needed. These run only if it does not.
    env.method(
        "optional_or_optional",
        "optional_type(V).or(optional_type(V)) -> optional_type(V)",
        |_, args| match &args[0] {
            Value::Optional(Some(_)) => Ok(args[0].clone()),
            Value::Optional(None) => Ok(args[1].clone()),
            _ => Err(no_overload("or", args)),
        },
    );
    env.method(
        "optional_orValue_value",
        "optional_type(V).orValue(V) -> V",
        |_, args| match &args[0] {
            Value::Optional(Some(inner)) => Ok((**inner).clone()),
            Value::Optional(None) => Ok(args[1].clone()),
            _ => Err(no_overload("orValue", args)),
        },
    );
}

fn install_lists(env: &mut Env) {
    env.method(
        "list_first",
        "list(V).first() -> optional_type(V)",
        |_, args| match &args[0] {
            Value::List(list) => Ok(Value::Optional(list.get(0).map(Arc::new))),
            _ => Err(no_overload("first", args)),
        },
    );
    env.method(
        "list_last",
        "list(V).last() -> optional_type(V)",
        |_, args| match &args[0] {
            Value::List(list) => Ok(Value::Optional(
                list.len()
                    .checked_sub(1)
                    .and_then(|last| list.get(last))
                    .map(Arc::new),
            )),
            _ => Err(no_overload("last", args)),
        },
    );
    env.function(
        "optional_unwrap",
        "optional.unwrap(list(optional_type(V))) -> list(V)",
        |_, args| unwrap("optional.unwrap", args),
    );
    env.method(
        "optional_unwrapOpt",
        "list(optional_type(V)).unwrapOpt() -> list(V)",
        |_, args| unwrap("unwrapOpt", args),
    );
}

fn unwrap<'a>(function: &str, args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    let Value::List(list) = &args[0] else {
        return Err(no_overload(function, args));
    };
    let mut values = Vec::with_capacity(list.len());
    for item in list.iter() {
        match item {
            Value::Optional(Some(inner)) => values.push((*inner).clone()),
            Value::Optional(None) => {}
            other => {
                return Err(EvalError::Invalid(format!(
                    "value {other} is not optional, the list must contain only optional values"
                )));
            }
        }
    }
    Ok(Value::list(values))
}

/// cel-go's `traits.Zeroer`: the zero of each type that has one (a type without one, such as an
/// optional or an opaque Kubernetes value, is never zero).
fn is_zero(value: &Value<'_>) -> bool {
    match value {
        Value::Null => true,
        Value::Bool(value) => !value,
        Value::Int(value) => *value == 0,
        Value::Uint(value) => *value == 0,
        Value::Double(value) => *value == 0.0,
        Value::String(text) => text.as_str().is_empty(),
        Value::Bytes(bytes) => bytes.is_empty(),
        Value::List(list) => list.is_empty(),
        Value::Map(map) => map.is_empty(),
        Value::Duration(duration) => duration.nanos == 0,
        // cel-go: Go's zero time, 0001-01-01T00:00:00Z.
        Value::Timestamp(timestamp) => {
            timestamp.seconds == crate::time::Timestamp::MIN_SECONDS && timestamp.nanos == 0
        }
        Value::Type(_) | Value::Optional(_) | Value::Object(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use crate::Value;
    use std::sync::Arc;

    fn of(value: Value<'static>) -> Value<'static> {
        Value::Optional(Some(Arc::new(value)))
    }

    #[test]
    fn optional_functions() {
        assert_value(
            function("optional.of", vec![Value::Int(0)]),
            of(Value::Int(0)),
        );
        assert_value(
            function("optional.ofNonZeroValue", vec![Value::Int(0)]),
            Value::Optional(None),
        );
        assert_value(
            function("optional.ofNonZeroValue", vec![s("")]),
            Value::Optional(None),
        );
        assert_value(
            function("optional.ofNonZeroValue", vec![Value::Null]),
            Value::Optional(None),
        );
        assert_value(
            function("optional.ofNonZeroValue", vec![s("x")]),
            of(s("x")),
        );
        assert_value(function("optional.none", vec![]), Value::Optional(None));
        assert_value(method("value", vec![of(Value::Int(1))]), Value::Int(1));
        assert_eq!(
            error_text(method("value", vec![Value::Optional(None)])),
            "optional.none() dereference"
        );
        assert!(truth(method("hasValue", vec![of(Value::Int(1))])));
        assert!(!truth(method("hasValue", vec![Value::Optional(None)])));
    }

    #[test]
    fn list_optional_functions() {
        assert_value(method("first", vec![ints(&[1, 2, 3])]), of(Value::Int(1)));
        assert_value(method("last", vec![ints(&[1, 2, 3])]), of(Value::Int(3)));
        assert_value(method("first", vec![ints(&[])]), Value::Optional(None));
        assert_value(method("last", vec![ints(&[])]), Value::Optional(None));
        let optionals = Value::list(vec![
            of(Value::Int(1)),
            Value::Optional(None),
            of(Value::Int(3)),
        ]);
        assert_value(
            function("optional.unwrap", vec![optionals.clone()]),
            ints(&[1, 3]),
        );
        assert_value(method("unwrapOpt", vec![optionals]), ints(&[1, 3]));
    }
}
