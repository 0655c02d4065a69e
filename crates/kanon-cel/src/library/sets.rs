//! cel-go's sets extension: `sets.contains`, `sets.equivalent` and `sets.intersects` over lists,
//! with CEL's (heterogeneous) equality.

use crate::env::Env;
use crate::function::no_overload;
use crate::value::{List, Value};

use super::actual_size;

pub(crate) fn install(env: &mut Env) {
    env.function(
        "list_sets_contains_list",
        "sets.contains(list(T), list(T)) -> bool",
        |_, args| match (&args[0], &args[1]) {
            (Value::List(list), Value::List(sublist)) => {
                Ok(Value::Bool(contains_all(list, sublist)))
            }
            _ => Err(no_overload("sets.contains", args)),
        },
    );
    env.set_cost("list_sets_contains_list", |args| sets_cost(args, 1.0));
    env.function(
        "list_sets_equivalent_list",
        "sets.equivalent(list(T), list(T)) -> bool",
        |_, args| match (&args[0], &args[1]) {
            (Value::List(a), Value::List(b)) => {
                Ok(Value::Bool(contains_all(a, b) && contains_all(b, a)))
            }
            _ => Err(no_overload("sets.equivalent", args)),
        },
    );
    env.set_cost("list_sets_equivalent_list", |args| sets_cost(args, 2.0));
    env.function(
        "list_sets_intersects_list",
        "sets.intersects(list(T), list(T)) -> bool",
        |_, args| match (&args[0], &args[1]) {
            (Value::List(a), Value::List(b)) => {
                Ok(Value::Bool(a.iter().any(|item| contains(b, &item))))
            }
            _ => Err(no_overload("sets.intersects", args)),
        },
    );
    env.set_cost("list_sets_intersects_list", |args| sets_cost(args, 1.0));
}

/// cel-go's `trackSetsCost`: 1 + the product of the sizes times a factor.
fn sets_cost(args: &[Value<'_>], factor: f64) -> u64 {
    let product = actual_size(&args[0]).saturating_mul(actual_size(&args[1]));
    1 + (product as f64 * factor) as u64
}

fn contains(list: &List<'_>, item: &Value<'_>) -> bool {
    list.iter().any(|element| element.equals(item))
}

fn contains_all(list: &List<'_>, sublist: &List<'_>) -> bool {
    sublist.iter().all(|item| contains(list, &item))
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use crate::Value;

    #[test]
    fn sets_follow_cel_go() {
        assert!(truth(function("sets.contains", vec![ints(&[]), ints(&[])])));
        assert!(truth(function(
            "sets.contains",
            vec![ints(&[1, 2, 3]), ints(&[3, 1])]
        )));
        assert!(!truth(function(
            "sets.contains",
            vec![ints(&[1, 2]), ints(&[3])]
        )));
        assert!(truth(function(
            "sets.contains",
            vec![
                Value::list(vec![Value::Double(1.0), Value::Uint(2)]),
                ints(&[1, 2])
            ]
        )));
        assert!(truth(function(
            "sets.equivalent",
            vec![ints(&[1, 2, 2]), ints(&[2, 1])]
        )));
        assert!(!truth(function(
            "sets.equivalent",
            vec![ints(&[1, 2]), ints(&[1])]
        )));
        assert!(truth(function(
            "sets.intersects",
            vec![ints(&[1, 2]), ints(&[2, 3])]
        )));
        assert!(!truth(function(
            "sets.intersects",
            vec![ints(&[1]), ints(&[])]
        )));
        assert_eq!(
            function_cost("sets.equivalent", vec![ints(&[1, 2]), ints(&[1, 2, 3])]),
            13
        );
        assert_eq!(
            function_cost("sets.contains", vec![ints(&[1, 2]), ints(&[1, 2, 3])]),
            7
        );
    }
}
