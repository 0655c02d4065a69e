//! The standard string tests: `contains`, `startsWith`, `endsWith` and `matches`.

use crate::env::Env;
use crate::function::no_overload;
use crate::value::Value;

use super::{size_of, string_cost};

pub(crate) fn install(env: &mut Env) {
    env.method(
        "contains_string",
        "string.contains(string) -> bool",
        |_, args| match (&args[0], &args[1]) {
            (Value::String(text), Value::String(part)) => {
                Ok(Value::Bool(text.as_str().contains(part.as_str())))
            }
            _ => Err(no_overload("contains", args)),
        },
    );
    env.set_cost("contains_string", |args| {
        string_cost(size_of(&args[0])) * string_cost(size_of(&args[1]))
    });
    env.method(
        "starts_with_string",
        "string.startsWith(string) -> bool",
        |_, args| match (&args[0], &args[1]) {
            (Value::String(text), Value::String(part)) => {
                Ok(Value::Bool(text.as_str().starts_with(part.as_str())))
            }
            _ => Err(no_overload("startsWith", args)),
        },
    );
    env.set_cost("starts_with_string", |args| string_cost(size_of(&args[0])));
    env.method(
        "ends_with_string",
        "string.endsWith(string) -> bool",
        |_, args| match (&args[0], &args[1]) {
            (Value::String(text), Value::String(part)) => {
                Ok(Value::Bool(text.as_str().ends_with(part.as_str())))
            }
            _ => Err(no_overload("endsWith", args)),
        },
    );
    env.set_cost("ends_with_string", |args| string_cost(size_of(&args[0])));
    env.function("matches", "matches(string, string) -> bool", matches);
    env.method("matches_string", "string.matches(string) -> bool", matches);
    for id in ["matches", "matches_string"] {
        // cel-go: (1 + length) / 10 for the text times length / 4 for the pattern.
        env.set_cost(id, |args| {
            string_cost(1 + size_of(&args[0])) * size_of(&args[1]).div_ceil(4)
        });
    }
}

fn matches<'a>(
    ctx: &mut crate::function::Ctx<'_, '_>,
    args: &[Value<'a>],
) -> Result<Value<'a>, crate::error::EvalError> {
    match (&args[0], &args[1]) {
        (Value::String(text), Value::String(pattern)) => {
            let regex = ctx.regex(pattern.as_str())?;
            Ok(Value::Bool(regex.is_match(text.as_str())))
        }
        _ => Err(no_overload("matches", args)),
    }
}
