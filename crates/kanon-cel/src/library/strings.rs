//! cel-go's strings extension at version 2 (kube-apiserver 1.29+): `charAt`, `indexOf`,
//! `lastIndexOf`, `lowerAscii`, `upperAscii`, `replace`, `split`, `substring`, `trim`, `join`,
//! `format` (version 1's formatter, locale `en_US`) and `strings.quote`. Not `reverse` (v3).
//!
//! Indexes count code points, as cel-go's do. Costs are kube-apiserver's (its estimator keys
//! them by function name, so `indexOf` costs what the lists library's `indexOf` costs).

use crate::env::Env;
use crate::error::EvalError;
use crate::function::{Ctx, no_overload};
use crate::value::Value;

use super::{STRING_TRAVERSAL, actual_size, int_arg, scaled_cost, string_arg, traversal_cost};

pub(crate) fn install(env: &mut Env) {
    env.method(
        "string_char_at_int",
        "string.charAt(int) -> string",
        |_, args| {
            let text = string_arg("charAt", args, 0)?;
            let index = int_arg("charAt", args, 1)?;
            let count = text.chars().count();
            match usize::try_from(index) {
                Ok(index) if index < count => Ok(Value::string(
                    text.chars()
                        .nth(index)
                        .map(String::from)
                        .unwrap_or_default(),
                )),
                Ok(index) if index == count => Ok(Value::string("")),
                _ => Err(out_of_range(index)),
            }
        },
    );

    env.method(
        "string_index_of_string",
        "string.indexOf(string) -> int",
        |_, args| {
            let (text, part) = (
                string_arg("indexOf", args, 0)?,
                string_arg("indexOf", args, 1)?,
            );
            index_of(text, part, 0).map(Value::Int)
        },
    );
    env.method(
        "string_index_of_string_int",
        "string.indexOf(string, int) -> int",
        |_, args| {
            let (text, part) = (
                string_arg("indexOf", args, 0)?,
                string_arg("indexOf", args, 1)?,
            );
            index_of(text, part, int_arg("indexOf", args, 2)?).map(Value::Int)
        },
    );
    env.method(
        "string_last_index_of_string",
        "string.lastIndexOf(string) -> int",
        |_, args| {
            let (text, part) = (
                string_arg("lastIndexOf", args, 0)?,
                string_arg("lastIndexOf", args, 1)?,
            );
            let count = text.chars().count() as i64;
            if part.is_empty() {
                return Ok(Value::Int(count));
            }
            // cel-go compares byte lengths here.
            if text.len() < part.len() {
                return Ok(Value::Int(-1));
            }
            last_index_of(text, part, count - 1).map(Value::Int)
        },
    );
    env.method(
        "string_last_index_of_string_int",
        "string.lastIndexOf(string, int) -> int",
        |_, args| {
            let (text, part) = (
                string_arg("lastIndexOf", args, 0)?,
                string_arg("lastIndexOf", args, 1)?,
            );
            last_index_of(text, part, int_arg("lastIndexOf", args, 2)?).map(Value::Int)
        },
    );
    for id in [
        "string_index_of_string",
        "string_index_of_string_int",
        "string_last_index_of_string",
        "string_last_index_of_string_int",
    ] {
        env.set_name_cost(id, |args| traversal_cost(&args[0]));
    }

    env.method(
        "string_lower_ascii",
        "string.lowerAscii() -> string",
        |_, args| {
            Ok(Value::string(
                string_arg("lowerAscii", args, 0)?.to_ascii_lowercase(),
            ))
        },
    );
    env.method(
        "string_upper_ascii",
        "string.upperAscii() -> string",
        |_, args| {
            Ok(Value::string(
                string_arg("upperAscii", args, 0)?.to_ascii_uppercase(),
            ))
        },
    );
    env.method("string_trim", "string.trim() -> string", |_, args| {
        // Go's strings.TrimSpace and Rust's trim agree on Unicode's White_Space.
        Ok(Value::string(string_arg("trim", args, 0)?.trim()))
    });
    env.method(
        "string_substring_int",
        "string.substring(int) -> string",
        |_, args| {
            let text = string_arg("substring", args, 0)?;
            let start = int_arg("substring", args, 1)?;
            let count = text.chars().count() as i64;
            substring(text, start, count, count)
        },
    );
    env.method(
        "string_substring_int_int",
        "string.substring(int, int) -> string",
        |_, args| {
            let text = string_arg("substring", args, 0)?;
            let (start, end) = (
                int_arg("substring", args, 1)?,
                int_arg("substring", args, 2)?,
            );
            if start > end {
                return Err(EvalError::Invalid(format!(
                    "invalid substring range. start: {start}, end: {end}"
                )));
            }
            substring(text, start, end, text.chars().count() as i64)
        },
    );
    for id in [
        "string_lower_ascii",
        "string_upper_ascii",
        "string_trim",
        "string_substring_int",
        "string_substring_int_int",
    ] {
        env.set_name_cost(id, |args| {
            scaled_cost(actual_size(&args[0]), STRING_TRAVERSAL)
        });
    }

    env.method(
        "string_replace_string_string",
        "string.replace(string, string) -> string",
        |ctx, args| replace(ctx, args, -1),
    );
    env.method(
        "string_replace_string_string_int",
        "string.replace(string, string, int) -> string",
        |ctx, args| {
            let limit = int_arg("replace", args, 3)?;
            replace(ctx, args, limit)
        },
    );
    env.method(
        "string_split_string",
        "string.split(string) -> list(string)",
        |_, args| split(args, -1),
    );
    env.method(
        "string_split_string_int",
        "string.split(string, int) -> list(string)",
        |_, args| split(args, int_arg("split", args, 2)?),
    );
    for id in [
        "string_replace_string_string",
        "string_replace_string_string_int",
        "string_split_string",
        "string_split_string_int",
    ] {
        env.set_name_cost(id, |args| {
            scaled_cost(actual_size(&args[0]) * 2, STRING_TRAVERSAL)
        });
    }

    env.method("list_join", "list(string).join() -> string", |ctx, args| {
        join(ctx, args, "")
    });
    env.method(
        "list_join_string",
        "list(string).join(string) -> string",
        |ctx, args| {
            let separator = string_arg("join", args, 1)?.to_owned();
            join(ctx, args, &separator)
        },
    );
    // Kubernetes charges for the result's size, known only once it is computed: charged inside.
    // A call that fails (an argument failed, a list that is not all strings) has an error for a
    // result, of size 1: ceil(1 × 2 × 0.1).
    for id in ["list_join", "list_join_string"] {
        env.set_name_cost(id, |args| {
            let joins = matches!(&args[0], Value::List(list)
                if list.iter().all(|item| matches!(item, Value::String(_))))
                && args[1..].iter().all(|arg| matches!(arg, Value::String(_)));
            if joins {
                0
            } else {
                scaled_cost(2, STRING_TRAVERSAL)
            }
        });
    }

    env.method(
        "string_format",
        "string.format(list(dyn)) -> string",
        |ctx, args| {
            let text = string_arg("format", args, 0)?;
            let Value::List(list) = &args[1] else {
                return Err(no_overload("format", args));
            };
            let formatted =
                super::strings_format::format(ctx, text, &list.iter().collect::<Vec<_>>())?;
            // Beyond its cost (the format string's length), the output is charged as it is built.
            Ok(Value::string(formatted))
        },
    );
    env.set_cost("string_format", |args| {
        scaled_cost(actual_size(&args[0]), STRING_TRAVERSAL)
    });
    env.function(
        "strings_quote",
        "strings.quote(string) -> string",
        |_, args| Ok(Value::string(quote(string_arg("strings.quote", args, 0)?))),
    );
    env.set_cost("strings_quote", |args| {
        scaled_cost(actual_size(&args[0]), STRING_TRAVERSAL)
    });
}

fn out_of_range(index: i64) -> EvalError {
    EvalError::Invalid(format!("index out of range: {index}"))
}

/// cel-go's `indexOfOffset`, over code points.
fn index_of(text: &str, part: &str, offset: i64) -> Result<i64, EvalError> {
    if part.is_empty() {
        return Ok(offset);
    }
    if offset < 0 {
        return Err(out_of_range(offset));
    }
    let runes: Vec<char> = text.chars().collect();
    let sub: Vec<char> = part.chars().collect();
    let offset = offset as usize;
    if offset >= runes.len() || sub.len() > runes.len() {
        return Ok(-1);
    }
    Ok((offset..=runes.len() - sub.len())
        .find(|start| runes[*start..*start + sub.len()] == sub[..])
        .map_or(-1, |found| found as i64))
}

/// cel-go's `lastIndexOfOffset`, over code points.
fn last_index_of(text: &str, part: &str, offset: i64) -> Result<i64, EvalError> {
    if part.is_empty() {
        return Ok(offset);
    }
    if offset < 0 {
        return Err(out_of_range(offset));
    }
    let runes: Vec<char> = text.chars().collect();
    let sub: Vec<char> = part.chars().collect();
    if offset as usize >= runes.len() || sub.len() > runes.len() {
        return Ok(-1);
    }
    let start = (offset as usize).min(runes.len() - sub.len());
    Ok((0..=start)
        .rev()
        .find(|start| runes[*start..*start + sub.len()] == sub[..])
        .map_or(-1, |found| found as i64))
}

fn substring<'a>(text: &str, start: i64, end: i64, count: i64) -> Result<Value<'a>, EvalError> {
    if start < 0 || start > count {
        return Err(out_of_range(start));
    }
    if end < 0 || end > count {
        return Err(out_of_range(end));
    }
    Ok(Value::string(
        text.chars()
            .skip(start as usize)
            .take((end - start) as usize)
            .collect::<String>(),
    ))
}

/// Go's `strings.Replace`: `limit < 0` replaces every occurrence; an empty `old` matches before
/// each code point and at the end.
fn replace<'a>(
    ctx: &mut Ctx<'_, '_>,
    args: &[Value<'a>],
    limit: i64,
) -> Result<Value<'a>, EvalError> {
    let text = string_arg("replace", args, 0)?;
    let old = string_arg("replace", args, 1)?;
    let new = string_arg("replace", args, 2)?;
    let occurrences = if old.is_empty() {
        text.chars().count() + 1
    } else {
        text.matches(old).count()
    };
    let count = if limit < 0 {
        occurrences
    } else {
        occurrences.min(limit as usize)
    };
    // The result may be far larger than the input its cost is based on: growth beyond twice the
    // input (which Kubernetes' cost covers), and beyond 4 KiB, is charged before the string is
    // built, so that memory stays bounded by cost.
    let grown = (count as u64).saturating_mul(new.chars().count() as u64);
    let covered = (text.chars().count() as u64).saturating_mul(2).max(4096);
    ctx.budget
        .charge(scaled_cost(grown.saturating_sub(covered), STRING_TRAVERSAL))?;
    Ok(Value::string(text.replacen(old, new, count)))
}

/// Go's `strings.SplitN`: `limit < 0` splits at every separator, 0 gives no strings, an empty
/// separator splits into code points.
fn split<'a>(args: &[Value<'a>], limit: i64) -> Result<Value<'a>, EvalError> {
    let text = string_arg("split", args, 0)?;
    let separator = string_arg("split", args, 1)?;
    if limit == 0 {
        return Ok(Value::list(Vec::new()));
    }
    let parts: Vec<Value<'a>> = if separator.is_empty() {
        let mut parts: Vec<Value<'a>> = Vec::new();
        let mut rest = text;
        while let Some(first) = rest.chars().next() {
            if limit > 0 && parts.len() as i64 == limit - 1 {
                break;
            }
            parts.push(Value::string(&rest[..first.len_utf8()]));
            rest = &rest[first.len_utf8()..];
        }
        if !rest.is_empty() {
            parts.push(Value::string(rest));
        }
        parts
    } else if limit < 0 {
        text.split(separator).map(Value::string).collect()
    } else {
        text.splitn(limit as usize, separator)
            .map(Value::string)
            .collect()
    };
    Ok(Value::list(parts))
}

fn join<'a>(
    ctx: &mut Ctx<'_, '_>,
    args: &[Value<'a>],
    separator: &str,
) -> Result<Value<'a>, EvalError> {
    let Value::List(list) = &args[0] else {
        return Err(no_overload("join", args));
    };
    let mut parts = Vec::with_capacity(list.len());
    for item in list.iter() {
        match item {
            Value::String(text) => parts.push(text),
            other => {
                // Charged before the call, as over an error of size 1 (its cost by name).
                return Err(EvalError::Invalid(format!(
                    "join: invalid input: {}",
                    go_value_text(&other)
                )));
            }
        }
    }
    // Kubernetes' cost: ceil(size of the result × 2 × 0.1), known before building it.
    let size = parts
        .iter()
        .map(|part| part.as_str().chars().count() as u64)
        .sum::<u64>()
        + (parts.len().saturating_sub(1) as u64) * separator.chars().count() as u64;
    ctx.budget.charge(scaled_cost(size * 2, STRING_TRAVERSAL))?;
    let mut joined = String::new();
    for (index, part) in parts.iter().enumerate() {
        if index > 0 {
            joined.push_str(separator);
        }
        joined.push_str(part.as_str());
    }
    Ok(Value::string(joined))
}

/// A value as Go's `%v` prints a CEL value, for messages.
fn go_value_text(value: &Value<'_>) -> String {
    match value {
        Value::String(text) => text.as_str().to_owned(),
        other => other.to_string(),
    }
}

/// cel-go's `strings.quote`: the string in double quotes with C-like escapes; other characters
/// as they are.
pub fn quote(text: &str) -> String {
    let mut quoted = String::with_capacity(text.len() + 2);
    quoted.push('"');
    for character in text.chars() {
        match character {
            '\u{7}' => quoted.push_str("\\a"),
            '\u{8}' => quoted.push_str("\\b"),
            '\u{c}' => quoted.push_str("\\f"),
            '\n' => quoted.push_str("\\n"),
            '\r' => quoted.push_str("\\r"),
            '\t' => quoted.push_str("\\t"),
            '\u{b}' => quoted.push_str("\\v"),
            '\\' => quoted.push_str("\\\\"),
            '"' => quoted.push_str("\\\""),
            other => quoted.push(other),
        }
    }
    quoted.push('"');
    quoted
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use crate::Value;

    fn i(value: i64) -> Value<'static> {
        Value::Int(value)
    }

    #[test]
    fn char_at_and_indexes_count_code_points() {
        assert_value(method("charAt", vec![s("héllo"), i(1)]), s("é"));
        assert_value(method("charAt", vec![s("abc"), i(3)]), s(""));
        assert_eq!(
            error_text(method("charAt", vec![s("abc"), i(4)])),
            "index out of range: 4"
        );
        assert_eq!(
            error_text(method("charAt", vec![s("abc"), i(-1)])),
            "index out of range: -1"
        );
        assert_value(method("indexOf", vec![s("héllo wörld"), s("ö")]), i(7));
        assert_value(method("indexOf", vec![s("abc"), s("")]), i(0));
        assert_value(method("indexOf", vec![s("abc"), s(""), i(10)]), i(10));
        assert_value(method("indexOf", vec![s("abcabc"), s("bc"), i(2)]), i(4));
        assert_value(method("indexOf", vec![s("abc"), s("bc"), i(3)]), i(-1));
        assert_eq!(
            error_text(method("indexOf", vec![s("abc"), s("b"), i(-1)])),
            "index out of range: -1"
        );
        assert_value(method("lastIndexOf", vec![s("abcabc"), s("bc")]), i(4));
        assert_value(method("lastIndexOf", vec![s("abc"), s("")]), i(3));
        assert_value(
            method("lastIndexOf", vec![s("abcabc"), s("bc"), i(3)]),
            i(1),
        );
        assert_value(method("lastIndexOf", vec![s("abc"), s("c"), i(10)]), i(-1));
        assert_value(method("lastIndexOf", vec![s("a"), s("abc")]), i(-1));
    }

    #[test]
    fn case_trim_substring() {
        assert_value(method("lowerAscii", vec![s("TacoCÆt")]), s("tacocÆt"));
        assert_value(method("upperAscii", vec![s("tacocæt")]), s("TACOCæT"));
        assert_value(method("trim", vec![s(" \t\u{a0}trim\n ")]), s("trim"));
        assert_value(method("substring", vec![s("tacocat"), i(4)]), s("cat"));
        assert_value(
            method("substring", vec![s("tacocat"), i(0), i(4)]),
            s("taco"),
        );
        assert_value(
            method("substring", vec![s("ta©o©αT"), i(2), i(6)]),
            s("©o©α"),
        );
        assert_eq!(
            error_text(method("substring", vec![s("abc"), i(4)])),
            "index out of range: 4"
        );
        assert_eq!(
            error_text(method("substring", vec![s("abc"), i(2), i(1)])),
            "invalid substring range. start: 2, end: 1"
        );
        assert_eq!(
            error_text(method("substring", vec![s("abc"), i(0), i(4)])),
            "index out of range: 4"
        );
    }

    #[test]
    fn replace_split_join_quote() {
        assert_value(
            method("replace", vec![s("12 days 12 hours"), s("{0}"), s("2")]),
            s("12 days 12 hours"),
        );
        assert_value(
            method("replace", vec![s("{0} days {0} hours"), s("{0}"), s("2")]),
            s("2 days 2 hours"),
        );
        assert_value(
            method(
                "replace",
                vec![s("{0} days {0} hours"), s("{0}"), s("2"), i(1)],
            ),
            s("2 days {0} hours"),
        );
        assert_value(
            method("replace", vec![s("a b"), s(""), s("-")]),
            s("-a- -b-"),
        );
        assert_value(
            method("split", vec![s("hello world"), s(" ")]),
            strings(&["hello", "world"]),
        );
        assert_value(
            method("split", vec![s("a,b,c"), s(","), i(0)]),
            strings(&[]),
        );
        assert_value(
            method("split", vec![s("a,b,c"), s(","), i(2)]),
            strings(&["a", "b,c"]),
        );
        assert_value(
            method("split", vec![s("abc"), s("")]),
            strings(&["a", "b", "c"]),
        );
        assert_value(
            method("split", vec![s("abc"), s(""), i(2)]),
            strings(&["a", "bc"]),
        );
        assert_value(method("split", vec![s(""), s("")]), strings(&[]));
        assert_value(method("split", vec![s(""), s(",")]), strings(&[""]));
        assert_value(method("join", vec![strings(&["x", "y"])]), s("xy"));
        assert_value(method("join", vec![strings(&["x", "y"]), s("-")]), s("x-y"));
        assert_value(method("join", vec![strings(&[]), s("-")]), s(""));
        assert_eq!(
            error_text(method("join", vec![Value::list(vec![s("a"), i(1)])])),
            "join: invalid input: 1"
        );
        assert_value(
            function("strings.quote", vec![s("first\nsecond \"x\" \\")]),
            s("\"first\\nsecond \\\"x\\\" \\\\\""),
        );
        assert_value(
            function("strings.quote", vec![s("a\u{0}\u{200b}é")]),
            s("\"a\u{0}\u{200b}é\""),
        );
    }

    #[test]
    fn costs_are_kubernetes() {
        let thirty = "a".repeat(30);
        assert_eq!(method_cost("lowerAscii", vec![s(&thirty)]), 3);
        assert_eq!(method_cost("charAt", vec![s(&thirty), i(3)]), 1);
        assert_eq!(
            method_cost("join", vec![strings(&["aaaaaaaaaa", "bbbbbbbbbb"]), s("-")]),
            5
        );
        assert_eq!(method_cost("lastIndexOf", vec![s("abc"), s("")]), 0);
        assert_eq!(method_cost("split", vec![s("abc"), s(""), i(2)]), 1);
        assert_eq!(method_cost("replace", vec![s("a b"), s(""), s("-")]), 1);
    }
}
