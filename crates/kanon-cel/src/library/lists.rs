//! Kubernetes' lists library (`isSorted`, `sum`, `min`, `max`, `indexOf`, `lastIndexOf`) and
//! cel-go's lists extension at version 3 (`slice`, `flatten`, `sort`, `@sortByAssociatedKeys`
//! behind the `sortBy` macro, `lists.range`, `reverse`, `distinct`).

use std::cmp::Ordering;

use crate::env::Env;
use crate::error::EvalError;
use crate::function::{Ctx, no_overload};
use crate::time::Duration;
use crate::value::{List, Value};

use super::{actual_size, int_arg, traversal_cost};

/// Element types the Kubernetes list functions are declared for, with the names their overload
/// ids use.
const COMPARABLE: [(&str, &str); 8] = [
    ("int", "int"),
    ("uint", "uint"),
    ("double", "double"),
    ("bool", "bool"),
    ("duration", "duration"),
    ("timestamp", "timestamp"),
    ("string", "string"),
    ("bytes", "bytes"),
];

/// cel-go's cost of a call and of creating a list.
const CALL_COST: u64 = 1;
const LIST_CREATE_COST: u64 = 10;

pub(crate) fn install(env: &mut Env) {
    install_kubernetes_lists(env);
    install_ext_lists(env);
}

fn install_kubernetes_lists(env: &mut Env) {
    for (name, kind) in COMPARABLE {
        let id = format!("list_{name}_is_sorted_bool");
        env.method(&id, &format!("list({kind}).isSorted() -> bool"), is_sorted);
        env.set_name_cost(&id, |args| traversal_cost(&args[0]));
        let id = format!("list_{name}_max_{name}");
        env.method(&id, &format!("list({kind}).max() -> {kind}"), |_, args| {
            extreme("max", args, Ordering::Less)
        });
        env.set_name_cost(&id, |args| traversal_cost(&args[0]));
        let id = format!("list_{name}_min_{name}");
        env.method(&id, &format!("list({kind}).min() -> {kind}"), |_, args| {
            extreme("min", args, Ordering::Greater)
        });
        env.set_name_cost(&id, |args| traversal_cost(&args[0]));
    }
    env.method("list_int_sum_int", "list(int).sum() -> int", |_, args| {
        sum(args, Value::Int(0))
    });
    env.method(
        "list_uint_sum_uint",
        "list(uint).sum() -> uint",
        |_, args| sum(args, Value::Uint(0)),
    );
    env.method(
        "list_double_sum_double",
        "list(double).sum() -> double",
        |_, args| sum(args, Value::Double(0.0)),
    );
    env.method(
        "list_duration_sum_duration",
        "list(duration).sum() -> duration",
        |_, args| sum(args, Value::Duration(Duration { nanos: 0 })),
    );
    for id in [
        "list_int_sum_int",
        "list_uint_sum_uint",
        "list_double_sum_double",
        "list_duration_sum_duration",
    ] {
        env.set_name_cost(id, |args| traversal_cost(&args[0]));
    }
    env.method(
        "list_a_index_of_int",
        "list(A).indexOf(A) -> int",
        |_, args| match &args[0] {
            Value::List(list) => Ok(Value::Int(
                list.iter()
                    .position(|item| item.equals(&args[1]))
                    .map_or(-1, |index| index as i64),
            )),
            _ => Err(no_overload("indexOf", args)),
        },
    );
    env.method(
        "list_a_last_index_of_int",
        "list(A).lastIndexOf(A) -> int",
        |_, args| match &args[0] {
            Value::List(list) => {
                let found = (0..list.len())
                    .rev()
                    .find(|index| list.get(*index).is_some_and(|item| item.equals(&args[1])));
                Ok(Value::Int(found.map_or(-1, |index| index as i64)))
            }
            _ => Err(no_overload("lastIndexOf", args)),
        },
    );
    for id in ["list_a_index_of_int", "list_a_last_index_of_int"] {
        env.set_name_cost(id, |args| traversal_cost(&args[0]));
    }
}

/// Values cel-go can order (its `traits.Comparer`s).
fn comparable(value: &Value<'_>) -> bool {
    matches!(
        value,
        Value::Bool(_)
            | Value::Int(_)
            | Value::Uint(_)
            | Value::Double(_)
            | Value::String(_)
            | Value::Bytes(_)
            | Value::Duration(_)
            | Value::Timestamp(_)
    )
}

fn list_of<'v, 'a>(function: &str, args: &'v [Value<'a>]) -> Result<&'v List<'a>, EvalError> {
    match args.first() {
        Some(Value::List(list)) => Ok(list),
        _ => Err(no_overload(function, args)),
    }
}

fn is_sorted<'a>(_: &mut Ctx<'_, '_>, args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    let list = list_of("isSorted", args)?;
    let mut previous: Option<Value<'a>> = None;
    for item in list.iter() {
        if !comparable(&item) {
            return Err(no_overload("isSorted", &[item]));
        }
        // Pairs that cannot be ordered (NaN) are skipped, as cel-go ignores the error.
        if let Some(previous) = &previous
            && previous.compare(&item) == Some(Ordering::Greater)
        {
            return Ok(Value::Bool(false));
        }
        previous = Some(item);
    }
    Ok(Value::Bool(true))
}

/// `min` (replace when the current result is greater) and `max` (when it is less).
fn extreme<'a>(
    function: &str,
    args: &[Value<'a>],
    replace_when: Ordering,
) -> Result<Value<'a>, EvalError> {
    let list = list_of(function, args)?;
    let mut result: Option<Value<'a>> = None;
    for item in list.iter() {
        if !comparable(&item) {
            return Err(no_overload(function, &[item]));
        }
        result = match result {
            None => Some(item),
            Some(current) if current.compare(&item) == Some(replace_when) => Some(item),
            keep => keep,
        };
    }
    result.ok_or_else(|| EvalError::Invalid(format!("{function} called on empty list")))
}

/// The sum, from the overload's zero for an empty list, else from the first element: at run
/// time the first declared overload takes any list, so the elements decide the type.
fn sum<'a>(args: &[Value<'a>], zero: Value<'a>) -> Result<Value<'a>, EvalError> {
    let list = list_of("sum", args)?;
    let mut items = list.iter();
    let Some(mut total) = items.next() else {
        return Ok(zero);
    };
    if !matches!(
        total,
        Value::Int(_) | Value::Uint(_) | Value::Double(_) | Value::Duration(_)
    ) {
        return Err(no_overload("_+_", &[zero, total]));
    }
    // cel-go adds to the overload's zero: `0.0 + -0.0` is `0.0`, so `[-0.0].sum()` is `0.0`.
    if std::mem::discriminant(&total) == std::mem::discriminant(&zero) {
        total = add(zero, total)?;
    }
    for item in items {
        total = add(total, item)?;
    }
    Ok(total)
}

fn add<'a>(a: Value<'a>, b: Value<'a>) -> Result<Value<'a>, EvalError> {
    match (&a, &b) {
        (Value::Int(x), Value::Int(y)) => x
            .checked_add(*y)
            .map(Value::Int)
            .ok_or(EvalError::Overflow("integer")),
        (Value::Uint(x), Value::Uint(y)) => x
            .checked_add(*y)
            .map(Value::Uint)
            .ok_or(EvalError::Overflow("unsigned integer")),
        (Value::Double(x), Value::Double(y)) => Ok(Value::Double(x + y)),
        (Value::Duration(x), Value::Duration(y)) => x
            .nanos
            .checked_add(y.nanos)
            .map(|nanos| Value::Duration(Duration { nanos }))
            .ok_or(EvalError::Overflow("integer")),
        _ => Err(no_overload("_+_", &[a, b])),
    }
}

fn install_ext_lists(env: &mut Env) {
    env.method("list_slice", "list(T).slice(int, int) -> list(T)", slice);
    env.set_cost("list_slice", |args| match (&args[1], &args[2]) {
        (Value::Int(start), Value::Int(end))
            if 0 <= *start && start <= end && (*end as u64) <= actual_size(&args[0]) =>
        {
            allocating((end - start) as u64, 1.0)
        }
        // cel-go meters the result: an error's size is 1.
        _ => allocating(1, 1.0),
    });
    env.method(
        "list_flatten",
        "list(list(T)).flatten() -> list(T)",
        |ctx, args| flatten(ctx, args, 1),
    );
    env.set_cost("list_flatten", |args| {
        allocating(actual_size(&args[0]), 1.0)
    });
    env.method(
        "list_flatten_int",
        "list(dyn).flatten(int) -> list(dyn)",
        |ctx, args| {
            let depth = int_arg("flatten", args, 1)?;
            flatten(ctx, args, depth)
        },
    );
    env.set_cost("list_flatten_int", |args| match args[1] {
        Value::Int(depth) if depth >= 0 => allocating(actual_size(&args[0]), depth as f64),
        _ => allocating(0, 1.0),
    });

    for (name, kind) in COMPARABLE {
        let id = format!("list_{name}_sort");
        env.method(
            &id,
            &format!("list({kind}).sort() -> list({kind})"),
            |_, args| {
                let list = list_of("sort", args)?;
                sort_by_keys(list, list)
            },
        );
        env.set_cost(&id, |args| self_compare_cost(&args[0]));
        let id = format!("list_{name}_sortByAssociatedKeys");
        env.method(
            &id,
            &format!("list(T).@sortByAssociatedKeys(list({kind})) -> list(T)"),
            |_, args| match (&args[0], &args[1]) {
                (Value::List(list), Value::List(keys)) => sort_by_keys(list, keys),
                _ => Err(no_overload("@sortByAssociatedKeys", args)),
            },
        );
        env.set_cost(&id, |args| self_compare_cost(&args[1]));
    }

    env.function("lists_range", "lists.range(int) -> list(int)", |_, args| {
        let count = int_arg("lists.range", args, 0)?;
        Ok(Value::list((0..count.max(0)).map(Value::Int).collect()))
    });
    // Charged before the list is built, so a huge count meets the budget first.
    env.set_cost("lists_range", |args| match args[0] {
        Value::Int(count) => allocating(count.max(0) as u64, 1.0),
        // A failed count: cel-go sizes the error it gives as 1.
        _ => allocating(1, 1.0),
    });
    env.method("list_reverse", "list(T).reverse() -> list(T)", |_, args| {
        let list = list_of("reverse", args)?;
        let mut items: Vec<Value<'_>> = list.iter().collect();
        items.reverse();
        Ok(Value::list(items))
    });
    env.set_cost("list_reverse", |args| {
        allocating(actual_size(&args[0]), 1.0)
    });
    env.method(
        "list_distinct",
        "list(T).distinct() -> list(T)",
        |_, args| {
            let list = list_of("distinct", args)?;
            let mut unique: Vec<Value<'_>> = Vec::with_capacity(list.len());
            for item in list.iter() {
                if !unique.iter().any(|seen| item.equals(seen)) {
                    unique.push(item);
                }
            }
            Ok(Value::list(unique))
        },
    );
    env.set_cost("list_distinct", |args| self_compare_cost(&args[0]));
}

/// cel-go's `trackAllocatingListCall`: the list's size times a factor, plus a call and a list.
fn allocating(size: u64, factor: f64) -> u64 {
    ((size as f64 * factor) as u64).saturating_add(CALL_COST + LIST_CREATE_COST)
}

/// cel-go's `trackListSelfCompare`: n² comparisons, a tenth more for strings and bytes.
fn self_compare_cost(list: &Value<'_>) -> u64 {
    let size = actual_size(list);
    let mut factor = 2.0;
    if let Value::List(items) = list
        && matches!(items.get(0), Some(Value::String(_) | Value::Bytes(_)))
    {
        factor += 0.1;
    }
    allocating(size.saturating_mul(size), factor)
}

fn slice<'a>(_: &mut Ctx<'_, '_>, args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    let list = list_of("slice", args)?;
    let start = int_arg("slice", args, 1)?;
    let end = int_arg("slice", args, 2)?;
    if start < 0 || end < 0 {
        return Err(EvalError::Invalid(format!(
            "cannot slice({start}, {end}), negative indexes not supported"
        )));
    }
    if start > end {
        return Err(EvalError::Invalid(format!(
            "cannot slice({start}, {end}), start index must be less than or equal to end index"
        )));
    }
    if list.len() < end as usize {
        return Err(EvalError::Invalid(format!(
            "cannot slice({start}, {end}), list is length {}",
            list.len()
        )));
    }
    Ok(Value::list(
        (start as usize..end as usize)
            .filter_map(|index| list.get(index))
            .collect(),
    ))
}

fn flatten<'a>(
    ctx: &mut Ctx<'_, '_>,
    args: &[Value<'a>],
    depth: i64,
) -> Result<Value<'a>, EvalError> {
    let list = list_of("flatten", args)?;
    if depth < 0 {
        return Err(EvalError::Invalid("level must be non-negative".to_owned()));
    }
    let mut flat = Vec::with_capacity(list.len());
    flatten_into(ctx, list, depth, &mut flat)?;
    Ok(Value::list(flat))
}

fn flatten_into<'a>(
    ctx: &mut Ctx<'_, '_>,
    list: &List<'a>,
    depth: i64,
    out: &mut Vec<Value<'a>>,
) -> Result<(), EvalError> {
    for item in list.iter() {
        match item {
            Value::List(inner) if depth > 0 => {
                // Nested lists may hold far more than the outer size the cost was based on.
                ctx.budget.charge(inner.len() as u64 / 10)?;
                flatten_into(ctx, &inner, depth - 1, out)?;
            }
            other => out.push(other),
        }
    }
    Ok(())
}

/// The elements of `list` ordered by their keys (the list itself for `sort`): cel-go's
/// `sortListByAssociatedKeys`. The sort is stable, as Go's is for lists of up to 12 elements.
fn sort_by_keys<'a>(list: &List<'a>, keys: &List<'_>) -> Result<Value<'a>, EvalError> {
    if list.len() != keys.len() {
        return Err(EvalError::Invalid(format!(
            "@sortByAssociatedKeys() expected a list of the same size as the associated keys list, but got {} and {} elements respectively",
            list.len(),
            keys.len()
        )));
    }
    let keys: Vec<Value<'_>> = keys.iter().collect();
    let Some(first) = keys.first() else {
        return Ok(Value::List(list.clone()));
    };
    if !comparable(first) {
        return Err(EvalError::Invalid(
            "list elements must be comparable".to_owned(),
        ));
    }
    let kind = first.type_of();
    if keys
        .iter()
        .any(|key| key.type_of().runtime_name() != kind.runtime_name())
    {
        return Err(EvalError::Invalid(
            "list elements must have the same type".to_owned(),
        ));
    }
    let mut order: Vec<usize> = (0..keys.len()).collect();
    // Incomparable pairs (NaN) count as "not less", as in cel-go.
    order.sort_by(|a, b| match keys[*a].compare(&keys[*b]) {
        Some(Ordering::Less) => Ordering::Less,
        _ if keys[*b].compare(&keys[*a]) == Some(Ordering::Less) => Ordering::Greater,
        _ => Ordering::Equal,
    });
    Ok(Value::list(
        order
            .into_iter()
            .filter_map(|index| list.get(index))
            .collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use crate::Value;

    fn doubles(values: &[f64]) -> Value<'static> {
        Value::list(values.iter().map(|value| Value::Double(*value)).collect())
    }

    #[test]
    fn kubernetes_list_functions() {
        assert!(truth(method("isSorted", vec![ints(&[1, 2, 3])])));
        assert!(!truth(method("isSorted", vec![ints(&[1, 3, 2])])));
        assert!(truth(method("isSorted", vec![strings(&["a", "b", "b"])])));
        assert!(truth(method("isSorted", vec![ints(&[])])));
        assert_value(method("sum", vec![ints(&[1, 2, 3])]), Value::Int(6));
        assert_value(
            method("sum", vec![doubles(&[1.0, 2.5])]),
            Value::Double(3.5),
        );
        assert_value(method("sum", vec![ints(&[])]), Value::Int(0));
        assert_eq!(
            error_text(method("sum", vec![ints(&[i64::MAX, 1])])),
            "integer overflow"
        );
        assert_value(method("min", vec![ints(&[3, 1, 2])]), Value::Int(1));
        assert_value(method("max", vec![ints(&[3, 1, 2])]), Value::Int(3));
        assert_value(method("max", vec![strings(&["a", "c", "b"])]), s("c"));
        assert_eq!(
            error_text(method("min", vec![ints(&[])])),
            "min called on empty list"
        );
        assert_eq!(
            error_text(method("max", vec![ints(&[])])),
            "max called on empty list"
        );
        assert_value(
            method("indexOf", vec![ints(&[1, 2, 2, 3]), Value::Int(2)]),
            Value::Int(1),
        );
        assert_value(
            method("lastIndexOf", vec![ints(&[1, 2, 2, 3]), Value::Int(2)]),
            Value::Int(2),
        );
        assert_value(
            method("indexOf", vec![ints(&[1]), Value::Int(5)]),
            Value::Int(-1),
        );
        assert_value(
            method("lastIndexOf", vec![ints(&[]), Value::Int(5)]),
            Value::Int(-1),
        );
        // Cross-type numeric equality, as cel-go's Equal.
        assert_value(
            method("indexOf", vec![ints(&[1, 2]), Value::Double(2.0)]),
            Value::Int(1),
        );
    }

    #[test]
    fn kubernetes_list_costs_are_one_traversal() {
        assert_eq!(method_cost("sum", vec![ints(&[1, 2, 3])]), 3);
        // Strings cost a tenth per byte, rounded down.
        assert_eq!(
            method_cost(
                "indexOf",
                vec![strings(&["aaaaaaaaaaaaaaaaaaaa", "b"]), s("b")]
            ),
            2
        );
    }

    #[test]
    fn ext_lists_slice_flatten_range() {
        assert_value(
            method(
                "slice",
                vec![ints(&[1, 2, 3, 4]), Value::Int(1), Value::Int(3)],
            ),
            ints(&[2, 3]),
        );
        assert_value(
            method(
                "slice",
                vec![ints(&[1, 2, 3, 4]), Value::Int(0), Value::Int(0)],
            ),
            ints(&[]),
        );
        assert_eq!(
            error_text(method(
                "slice",
                vec![ints(&[1, 2]), Value::Int(-1), Value::Int(1)]
            )),
            "cannot slice(-1, 1), negative indexes not supported"
        );
        assert_eq!(
            error_text(method(
                "slice",
                vec![ints(&[1, 2]), Value::Int(2), Value::Int(1)]
            )),
            "cannot slice(2, 1), start index must be less than or equal to end index"
        );
        assert_eq!(
            error_text(method(
                "slice",
                vec![ints(&[1, 2]), Value::Int(0), Value::Int(3)]
            )),
            "cannot slice(0, 3), list is length 2"
        );
        let nested = Value::list(vec![
            ints(&[1, 2]),
            Value::list(vec![ints(&[3]), Value::Int(4)]),
            Value::Int(5),
        ]);
        assert_value(
            method("flatten", vec![nested.clone()]),
            Value::list(vec![
                Value::Int(1),
                Value::Int(2),
                ints(&[3]),
                Value::Int(4),
                Value::Int(5),
            ]),
        );
        assert_value(
            method("flatten", vec![nested.clone(), Value::Int(2)]),
            ints(&[1, 2, 3, 4, 5]),
        );
        assert_value(
            method("flatten", vec![nested.clone(), Value::Int(0)]),
            nested.clone(),
        );
        assert_eq!(
            error_text(method("flatten", vec![nested, Value::Int(-1)])),
            "level must be non-negative"
        );
        assert_value(
            function("lists.range", vec![Value::Int(4)]),
            ints(&[0, 1, 2, 3]),
        );
        assert_value(function("lists.range", vec![Value::Int(0)]), ints(&[]));
        assert_value(function("lists.range", vec![Value::Int(-3)]), ints(&[]));
        assert_eq!(function_cost("lists.range", vec![Value::Int(4)]), 15);
    }

    #[test]
    fn lists_range_meets_the_budget_before_allocating() {
        let mut env = crate::Env::kubernetes();
        env.declare_variable("n", crate::Type::Int);
        let expr = crate::ast::Expr {
            id: 0,
            span: Default::default(),
            kind: crate::ast::ExprKind::Call {
                target: None,
                function: "lists.range".into(),
                args: vec![crate::ast::Expr {
                    id: 1,
                    span: Default::default(),
                    kind: crate::ast::ExprKind::Ident("n".into()),
                }],
            },
        };
        let program = crate::Program::plan(&env, "lists.range(n)", &expr, None).unwrap();
        let mut budget = crate::Budget::new(1_000_000);
        let result = program.eval(&[Value::Int(i64::MAX)], &mut budget);
        assert!(matches!(
            result,
            Err(crate::EvalError::CostLimitExceeded { .. })
        ));
    }

    #[test]
    fn ext_lists_sort_reverse_distinct() {
        assert_value(method("sort", vec![ints(&[3, 1, 2])]), ints(&[1, 2, 3]));
        assert_value(
            method("sort", vec![strings(&["b", "a", "c"])]),
            strings(&["a", "b", "c"]),
        );
        assert_value(method("sort", vec![ints(&[])]), ints(&[]));
        assert_eq!(
            error_text(method(
                "sort",
                vec![Value::list(vec![Value::Int(1), s("a")])]
            )),
            "list elements must have the same type"
        );
        assert_eq!(
            error_text(method(
                "sort",
                vec![Value::list(vec![ints(&[1]), ints(&[2])])]
            )),
            "list elements must be comparable"
        );
        assert_value(
            method(
                "@sortByAssociatedKeys",
                vec![strings(&["c", "a", "b"]), ints(&[3, 1, 2])],
            ),
            strings(&["a", "b", "c"]),
        );
        assert_eq!(
            error_text(method(
                "@sortByAssociatedKeys",
                vec![strings(&["c", "a"]), ints(&[3])]
            )),
            "@sortByAssociatedKeys() expected a list of the same size as the associated keys list, but got 2 and 1 elements respectively"
        );
        assert_value(method("reverse", vec![ints(&[1, 2, 3])]), ints(&[3, 2, 1]));
        assert_value(
            method("distinct", vec![ints(&[1, 2, 2, 1, 3])]),
            ints(&[1, 2, 3]),
        );
        assert_value(
            method(
                "distinct",
                vec![Value::list(vec![
                    Value::Int(1),
                    Value::Double(1.0),
                    Value::Uint(1),
                    s("1"),
                ])],
            ),
            Value::list(vec![Value::Int(1), s("1")]),
        );
        // n² × 2 + 11.
        assert_eq!(method_cost("sort", vec![ints(&[3, 1, 2])]), 29);
        assert_eq!(method_cost("distinct", vec![ints(&[1, 2])]), 19);
        assert_eq!(method_cost("reverse", vec![ints(&[1, 2, 3])]), 14);
    }
}
