//! Operators: equality, ordering, arithmetic, negation, membership, `size`, `type` and `dyn`.
//! Overload ids are cel-go's, so costs and checked references line up with kube-apiserver.

use std::cmp::Ordering;
use std::sync::Arc;

use crate::ast::operators as op;
use crate::env::Env;
use crate::error::EvalError;
use crate::function::{Ctx, no_overload};
use crate::value::{HELD_BY_POINTER, Value, map_insert_owned};

use super::string_cost;

pub(crate) fn install(env: &mut Env) {
    env.function("equals", "_==_(A, A) -> bool", |_, args| {
        refused_equality(args)?;
        Ok(Value::Bool(args[0].equals(&args[1])))
    });
    env.function("not_equals", "_!=_(A, A) -> bool", |_, args| {
        // cel-go's `!=` is "not equal to true": where `==` fails, `!=` holds.
        if refused_equality(args).is_err() {
            return Ok(Value::Bool(true));
        }
        Ok(Value::Bool(!args[0].equals(&args[1])))
    });
    for id in ["equals", "not_equals"] {
        env.set_cost(id, |args| {
            string_cost(size_of(&args[0]).min(size_of(&args[1])))
        });
    }

    install_ordering(env);

    env.function("logical_not", "!_(bool) -> bool", |_, args| match args[0] {
        Value::Bool(value) => Ok(Value::Bool(!value)),
        _ => Err(no_overload(op::LOGICAL_NOT, args)),
    });
    env.function("negate_int64", "-_(int) -> int", |_, args| match args[0] {
        Value::Int(value) => value
            .checked_neg()
            .map(Value::Int)
            .ok_or(EvalError::Overflow("integer")),
        _ => Err(no_overload(op::NEGATE, args)),
    });
    env.function(
        "negate_double",
        "-_(double) -> double",
        |_, args| match args[0] {
            Value::Double(value) => Ok(Value::Double(-value)),
            _ => Err(no_overload(op::NEGATE, args)),
        },
    );

    install_arithmetic(env);

    env.function(
        "in_list",
        "@in(A, list(A)) -> bool",
        |_, args| match &args[1] {
            Value::List(list) => Ok(Value::Bool(list.iter().any(|item| item.equals(&args[0])))),
            _ => Err(no_overload(op::IN, args)),
        },
    );
    env.set_cost("in_list", |args| size_of(&args[1]));
    env.function(
        "in_map",
        "@in(A, map(A, B)) -> bool",
        |_, args| match &args[1] {
            Value::Map(map) => Ok(Value::Bool(map.contains(&args[0]))),
            _ => Err(no_overload(op::IN, args)),
        },
    );

    // Tried in cel-go's order (`CEL_GO_ORDER` in stdlib/mod.rs).
    for (id, signature) in [
        ("size_bytes", "size(bytes) -> int"),
        ("size_list", "size(list(A)) -> int"),
        ("size_map", "size(map(A, B)) -> int"),
        ("size_string", "size(string) -> int"),
    ] {
        env.function(id, signature, size);
    }
    for (id, signature) in [
        ("bytes_size", "bytes.size() -> int"),
        ("list_size", "list(A).size() -> int"),
        ("map_size", "map(A, B).size() -> int"),
        ("string_size", "string.size() -> int"),
    ] {
        env.method(id, signature, size);
    }

    env.function("type", "type(A) -> type(A)", |_, args| {
        Ok(Value::Type(args[0].type_of()))
    });
    env.function("to_dyn", "dyn(A) -> dyn", |_, args| Ok(args[0].clone()));
}

fn size<'a>(_: &mut Ctx<'_, '_>, args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    let size = match &args[0] {
        Value::String(text) => text.as_str().chars().count(),
        Value::Bytes(bytes) => bytes.len(),
        Value::List(list) => list.len(),
        Value::Map(map) => map.len(),
        _ => return Err(no_overload("size", args)),
    };
    Ok(Value::Int(size as i64))
}

/// cel-go's `actualSize`: the length of strings (in code points), bytes, lists and maps; 1 for
/// anything else.
pub(crate) fn size_of(value: &Value<'_>) -> u64 {
    match value {
        Value::String(text) => text.as_str().chars().count() as u64,
        Value::Bytes(bytes) => bytes.len() as u64,
        Value::List(list) => list.len() as u64,
        Value::Map(map) => map.len() as u64,
        Value::Optional(Some(inner)) => size_of(inner),
        _ => 1,
    }
}

fn install_ordering(env: &mut Env) {
    // Same-type pairs, then cel-go's cross-type numeric comparisons (kube-apiserver enables them).
    let pairs = [
        ("bool", "bool", "bool"),
        ("int64", "int", "int"),
        ("uint64", "uint", "uint"),
        ("double", "double", "double"),
        ("string", "string", "string"),
        ("bytes", "bytes", "bytes"),
        ("timestamp", "timestamp", "timestamp"),
        ("duration", "duration", "duration"),
        ("int64_uint64", "int", "uint"),
        ("int64_double", "int", "double"),
        ("uint64_int64", "uint", "int"),
        ("uint64_double", "uint", "double"),
        ("double_int64", "double", "int"),
        ("double_uint64", "double", "uint"),
    ];
    for (suffix, left, right) in pairs {
        env.function(
            &format!("less_{suffix}"),
            &format!("_<_({left}, {right}) -> bool"),
            |_, args| order(op::LESS, args, |ordering| ordering == Ordering::Less),
        );
        env.function(
            &format!("less_equals_{suffix}"),
            &format!("_<=_({left}, {right}) -> bool"),
            |_, args| {
                order(op::LESS_EQUALS, args, |ordering| {
                    ordering != Ordering::Greater
                })
            },
        );
        env.function(
            &format!("greater_{suffix}"),
            &format!("_>_({left}, {right}) -> bool"),
            |_, args| order(op::GREATER, args, |ordering| ordering == Ordering::Greater),
        );
        env.function(
            &format!("greater_equals_{suffix}"),
            &format!("_>=_({left}, {right}) -> bool"),
            |_, args| {
                order(op::GREATER_EQUALS, args, |ordering| {
                    ordering != Ordering::Less
                })
            },
        );
        if matches!(suffix, "string" | "bytes") {
            for prefix in ["less", "less_equals", "greater", "greater_equals"] {
                env.set_cost(&format!("{prefix}_{suffix}"), |args| {
                    string_cost(size_of(&args[0]).min(size_of(&args[1])))
                });
            }
        }
    }
}

/// An ordering operator: NaN cannot be ordered (an error in cel-go v0.26, kube-apiserver 1.35).
/// (A NaN left of an operand no overload takes is the same error: `function::dispatch_failure`.)
fn order<'a>(
    function: &str,
    args: &[Value<'a>],
    holds: fn(Ordering) -> bool,
) -> Result<Value<'a>, EvalError> {
    match args[0].compare(&args[1]) {
        Some(ordering) => Ok(Value::Bool(holds(ordering))),
        None if is_number(&args[0]) && is_number(&args[1]) => Err(EvalError::Invalid(
            "NaN values cannot be ordered".to_owned(),
        )),
        None => Err(no_overload(function, args)),
    }
}

fn is_number(value: &Value<'_>) -> bool {
    matches!(value, Value::Int(_) | Value::Uint(_) | Value::Double(_))
}

fn install_arithmetic(env: &mut Env) {
    env.function("add_int64", "_+_(int, int) -> int", |_, args| {
        int_op(op::ADD, args, i64::checked_add)
    });
    env.function("add_uint64", "_+_(uint, uint) -> uint", |_, args| {
        uint_op(op::ADD, args, u64::checked_add)
    });
    env.function("add_double", "_+_(double, double) -> double", |_, args| {
        double_op(op::ADD, args, |a, b| a + b)
    });
    env.function(
        "add_string",
        "_+_(string, string) -> string",
        |_, args| match (&args[0], &args[1]) {
            (Value::String(a), Value::String(b)) => {
                let mut joined = String::with_capacity(a.as_str().len() + b.as_str().len());
                joined.push_str(a.as_str());
                joined.push_str(b.as_str());
                Ok(Value::string(joined))
            }
            _ => Err(no_overload(op::ADD, args)),
        },
    );
    env.set_cost("add_string", |args| {
        string_cost(size_of(&args[0]) + size_of(&args[1]))
    });
    env.function(
        "add_bytes",
        "_+_(bytes, bytes) -> bytes",
        |_, args| match (&args[0], &args[1]) {
            (Value::Bytes(a), Value::Bytes(b)) => {
                let mut joined = Vec::with_capacity(a.len() + b.len());
                joined.extend_from_slice(a);
                joined.extend_from_slice(b);
                Ok(Value::Bytes(Arc::from(joined)))
            }
            _ => Err(no_overload(op::ADD, args)),
        },
    );
    env.set_cost("add_bytes", |args| {
        string_cost(size_of(&args[0]) + size_of(&args[1]))
    });
    env.function(
        "add_list",
        "_+_(list(A), list(A)) -> list(A)",
        |_, args| match (&args[0], &args[1]) {
            (Value::List(a), Value::List(b)) => Ok(Value::List(a.concat(b))),
            _ => Err(no_overload(op::ADD, args)),
        },
    );
    // cel-go counts list concatenation as O(1) (it chains the lists); so does List::concat.

    env.function("subtract_int64", "_-_(int, int) -> int", |_, args| {
        int_op(op::SUBTRACT, args, i64::checked_sub)
    });
    env.function("subtract_uint64", "_-_(uint, uint) -> uint", |_, args| {
        uint_op(op::SUBTRACT, args, u64::checked_sub)
    });
    env.function(
        "subtract_double",
        "_-_(double, double) -> double",
        |_, args| double_op(op::SUBTRACT, args, |a, b| a - b),
    );

    env.function("multiply_int64", "_*_(int, int) -> int", |_, args| {
        int_op(op::MULTIPLY, args, i64::checked_mul)
    });
    env.function("multiply_uint64", "_*_(uint, uint) -> uint", |_, args| {
        uint_op(op::MULTIPLY, args, u64::checked_mul)
    });
    env.function(
        "multiply_double",
        "_*_(double, double) -> double",
        |_, args| double_op(op::MULTIPLY, args, |a, b| a * b),
    );

    env.function("divide_int64", "_/_(int, int) -> int", |_, args| {
        match (&args[0], &args[1]) {
            (Value::Int(_), Value::Int(0)) => Err(EvalError::DivisionByZero),
            (Value::Int(a), Value::Int(b)) => a
                .checked_div(*b)
                .map(Value::Int)
                .ok_or(EvalError::Overflow("integer")),
            _ => Err(no_overload(op::DIVIDE, args)),
        }
    });
    env.function(
        "divide_uint64",
        "_/_(uint, uint) -> uint",
        |_, args| match (&args[0], &args[1]) {
            (Value::Uint(_), Value::Uint(0)) => Err(EvalError::DivisionByZero),
            (Value::Uint(a), Value::Uint(b)) => Ok(Value::Uint(a / b)),
            _ => Err(no_overload(op::DIVIDE, args)),
        },
    );
    env.function(
        "divide_double",
        "_/_(double, double) -> double",
        |_, args| double_op(op::DIVIDE, args, |a, b| a / b),
    );

    env.function("modulo_int64", "_%_(int, int) -> int", |_, args| {
        match (&args[0], &args[1]) {
            (Value::Int(_), Value::Int(0)) => Err(EvalError::ModulusByZero),
            (Value::Int(a), Value::Int(b)) => a
                .checked_rem(*b)
                .map(Value::Int)
                .ok_or(EvalError::Overflow("integer")),
            _ => Err(no_overload(op::MODULO, args)),
        }
    });
    env.function(
        "modulo_uint64",
        "_%_(uint, uint) -> uint",
        |_, args| match (&args[0], &args[1]) {
            (Value::Uint(_), Value::Uint(0)) => Err(EvalError::ModulusByZero),
            (Value::Uint(a), Value::Uint(b)) => Ok(Value::Uint(a % b)),
            _ => Err(no_overload(op::MODULO, args)),
        },
    );
}

fn int_op<'a>(
    function: &str,
    args: &[Value<'a>],
    apply: fn(i64, i64) -> Option<i64>,
) -> Result<Value<'a>, EvalError> {
    match (&args[0], &args[1]) {
        (Value::Int(a), Value::Int(b)) => apply(*a, *b)
            .map(Value::Int)
            .ok_or(EvalError::Overflow("integer")),
        _ => Err(no_overload(function, args)),
    }
}

fn uint_op<'a>(
    function: &str,
    args: &[Value<'a>],
    apply: fn(u64, u64) -> Option<u64>,
) -> Result<Value<'a>, EvalError> {
    match (&args[0], &args[1]) {
        (Value::Uint(a), Value::Uint(b)) => apply(*a, *b)
            .map(Value::Uint)
            .ok_or(EvalError::Overflow("unsigned integer")),
        _ => Err(no_overload(function, args)),
    }
}

fn double_op<'a>(
    function: &str,
    args: &[Value<'a>],
    apply: fn(f64, f64) -> f64,
) -> Result<Value<'a>, EvalError> {
    match (&args[0], &args[1]) {
        (Value::Double(a), Value::Double(b)) => Ok(Value::Double(apply(*a, *b))),
        _ => Err(no_overload(function, args)),
    }
}

/// Declarations the checker needs for operators the interpreter plans itself (`?:`, indexing):
/// their implementations serve only a program compiled without those plans.
pub(crate) fn install_planned(env: &mut Env) {
    env.function(
        "conditional",
        "_?_:_(bool, A, A) -> A",
        |_, args| match args[0] {
            Value::Bool(true) => Ok(args[1].clone()),
            Value::Bool(false) => Ok(args[2].clone()),
            _ => Err(no_overload(op::CONDITIONAL, args)),
        },
    );
    env.function("index_list", "_[_](list(A), int) -> A", index);
    env.function("index_map", "_[_](map(A, B), A) -> B", index);
    // Indexing an optional list or map (cel-go's optional types) gives an optional.
    env.function(
        "optional_list_index_int",
        "_[_](optional_type(list(A)), int) -> optional_type(A)",
        optional_index,
    );
    env.function(
        "optional_map_index_value",
        "_[_](optional_type(map(A, B)), A) -> optional_type(B)",
        optional_index,
    );

    // The optional index `a[?b]`, declared as cel-go declares it so that the checker types it
    // the same way (an operand that is an optional of `dyn` matches only the optional map and
    // list overloads, leaving the element's type free). Evaluation does not come here: the
    // planner evaluates `_[?_]` itself.
    env.function(
        "list_optindex_optional_int",
        "_[?_](list(V), int) -> optional_type(V)",
        optional_index_any,
    );
    env.function(
        "optional_list_optindex_optional_int",
        "_[?_](optional_type(list(V)), int) -> optional_type(V)",
        optional_index_any,
    );
    env.function(
        "map_optindex_optional_value",
        "_[?_](map(K, V), K) -> optional_type(V)",
        optional_index_any,
    );
    env.function(
        "optional_map_optindex_optional_value",
        "_[?_](optional_type(map(K, V)), K) -> optional_type(V)",
        optional_index_any,
    );

    // The map insertion two-variable comprehensions (`transformMap`) expand to.
    env.function(
        "cel_@mapInsert_map_key_value",
        "cel.@mapInsert(map(A, B), A, B) -> map(A, B)",
        |ctx, args| map_insert(ctx, &args[0], &[(args[1].clone(), args[2].clone())]),
    );
    env.function(
        "cel_@mapInsert_map_map",
        "cel.@mapInsert(map(A, B), map(A, B)) -> map(A, B)",
        |ctx, args| match &args[1] {
            Value::Map(entries) => map_insert(ctx, &args[0], &entries.entries()),
            _ => Err(no_overload("cel.@mapInsert", args)),
        },
    );
}

fn map_insert<'a>(
    _: &mut Ctx<'_, '_>,
    map: &Value<'a>,
    entries: &[(Value<'a>, Value<'a>)],
) -> Result<Value<'a>, EvalError> {
    map_insert_owned(map.clone(), entries)
}

/// `a[?b]` whether `a` is an optional or not.
fn optional_index_any<'a>(
    ctx: &mut Ctx<'_, '_>,
    args: &[Value<'a>],
) -> Result<Value<'a>, EvalError> {
    match &args[0] {
        Value::Optional(_) => optional_index(ctx, args),
        plain => optional_index(
            ctx,
            &[
                Value::Optional(Some(Arc::new(plain.clone()))),
                args[1].clone(),
            ],
        ),
    }
}

/// cel-go's opaque types compare only with values of their own Go type: a value it holds by
/// pointer ([`HELD_BY_POINTER`]) on the right of `==` is no such overload.
fn refused_equality(args: &[Value<'_>]) -> Result<(), EvalError> {
    if let (Value::Object(left), Value::Object(right)) = (&args[0], &args[1])
        && left.type_name == right.type_name
        && right.fields.contains_key(HELD_BY_POINTER)
    {
        return Err(no_overload(op::EQUALS, args));
    }
    Ok(())
}

fn optional_index<'a>(_: &mut Ctx<'_, '_>, args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    match &args[0] {
        Value::Optional(None) => Ok(Value::Optional(None)),
        Value::Optional(Some(inner)) => match (&**inner, &args[1]) {
            (Value::List(list), Value::Int(position)) => Ok(Value::Optional(
                usize::try_from(*position)
                    .ok()
                    .and_then(|position| list.get(position))
                    .map(Arc::new),
            )),
            (Value::Map(map), key) => Ok(Value::Optional(map.get(key).map(Arc::new))),
            _ => Err(no_overload(op::INDEX, args)),
        },
        _ => Err(no_overload(op::INDEX, args)),
    }
}

fn index<'a>(_: &mut Ctx<'_, '_>, args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    match (&args[0], &args[1]) {
        (Value::List(list), Value::Int(position)) => usize::try_from(*position)
            .ok()
            .and_then(|position| list.get(position))
            .ok_or_else(|| {
                EvalError::Invalid(format!(
                    "index '{position}' out of range in list size '{}'",
                    list.len()
                ))
            }),
        (Value::Map(map), key) => map
            .get(key)
            .ok_or_else(|| EvalError::NoSuchKey(key.to_string())),
        _ => Err(no_overload(op::INDEX, args)),
    }
}
