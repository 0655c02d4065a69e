//! Kubernetes' regex library: `string.find(regex)` and `string.findAll(regex[, limit])`.

use crate::env::Env;
use crate::error::EvalError;
use crate::function::Ctx;
use crate::value::Value;

use super::{REGEX_LENGTH, STRING_TRAVERSAL, actual_size, int_arg, scaled_cost, string_arg};

pub(crate) fn install(env: &mut Env) {
    env.method("string_find_string", "string.find(string) -> string", find);
    env.method(
        "string_find_all_string",
        "string.findAll(string) -> list(string)",
        find_all,
    );
    env.method(
        "string_find_all_string_int",
        "string.findAll(string, int) -> list(string)",
        find_all,
    );
    for id in [
        "string_find_string",
        "string_find_all_string",
        "string_find_all_string_int",
    ] {
        env.set_name_cost(id, |args| {
            scaled_cost(1 + actual_size(&args[0]), STRING_TRAVERSAL)
                * scaled_cost(actual_size(&args[1]), REGEX_LENGTH)
        });
    }
}

fn compile(
    ctx: &mut Ctx<'_, '_>,
    pattern: &str,
) -> Result<std::sync::Arc<regex::Regex>, EvalError> {
    ctx.regex(pattern)
        .map_err(|error| EvalError::Invalid(format!("Illegal regex: {error}")))
}

fn find<'a>(ctx: &mut Ctx<'_, '_>, args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    let text = string_arg("find", args, 0)?;
    let pattern = string_arg("find", args, 1)?;
    let regex = compile(ctx, pattern)?;
    Ok(Value::string(
        regex.find(text).map_or("", |found| found.as_str()),
    ))
}

fn find_all<'a>(ctx: &mut Ctx<'_, '_>, args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    let text = string_arg("findAll", args, 0)?;
    let pattern = string_arg("findAll", args, 1)?;
    let limit = if args.len() == 3 {
        int_arg("findAll", args, 2)?
    } else {
        -1
    };
    let regex = compile(ctx, pattern)?;
    let mut found = Vec::new();
    if limit == 0 {
        return Ok(Value::list(found));
    }
    // Go's FindAllString ignores an empty match that abuts the previous match.
    let mut previous_end = None;
    for matched in regex.find_iter(text) {
        if matched.is_empty() && previous_end == Some(matched.start()) {
            continue;
        }
        previous_end = Some(matched.end());
        found.push(Value::string(matched.as_str()));
        if limit > 0 && found.len() as i64 >= limit {
            break;
        }
    }
    Ok(Value::list(found))
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;

    #[test]
    fn find_returns_the_first_match_or_empty() {
        assert_value(method("find", vec![s("abc 123"), s("[0-9]+")]), s("123"));
        assert_value(method("find", vec![s("abc"), s("[0-9]+")]), s(""));
        assert_value(method("find", vec![s("a 1 b 2"), s("[0-9]")]), s("1"));
    }

    #[test]
    fn find_all_returns_matches_up_to_a_limit() {
        assert_value(
            method("findAll", vec![s("123 abc 456"), s("[0-9]+")]),
            strings(&["123", "456"]),
        );
        assert_value(
            method(
                "findAll",
                vec![s("123 abc 456"), s("[0-9]+"), crate::Value::Int(1)],
            ),
            strings(&["123"]),
        );
        assert_value(
            method(
                "findAll",
                vec![s("123 abc 456"), s("[0-9]+"), crate::Value::Int(0)],
            ),
            strings(&[]),
        );
        assert_value(method("findAll", vec![s("abc"), s("[0-9]+")]), strings(&[]));
        // Go skips an empty match right after a match.
        assert_value(
            method("findAll", vec![s("baaa"), s("a*")]),
            strings(&["", "aaa"]),
        );
    }

    #[test]
    fn a_bad_regex_is_an_illegal_regex_error() {
        let text = error_text(method("find", vec![s("abc"), s("(")]));
        assert!(text.starts_with("Illegal regex: "), "{text}");
    }

    #[test]
    fn costs_follow_kubernetes() {
        // strCost ceil((1 + 7) * 0.1) = 1, regex cost ceil(6 * 0.25) = 2.
        assert_eq!(method_cost("find", vec![s("abc 123"), s("[0-9]+")]), 2);
    }
}
