//! Functions: their overloads, the signatures they are declared with (`"string.contains(string)
//! -> bool"`), what an implementation receives while it runs ([`Ctx`]: the cost meter and the
//! program's regex cache), and cel-go's errors where a call finds no overload.

use std::sync::Arc;

use regex::Regex;

use crate::ast::operators;
use crate::budget::Budget;
use crate::error::EvalError;
use crate::re2::RegexCache;
use crate::types::Type;
use crate::value::Value;

/// A function's implementation: receives the arguments (the receiver first for a method call)
/// and the evaluation context (cost meter, regex cache).
pub type Implementation =
    for<'a> fn(&mut Ctx<'_, '_>, &[Value<'a>]) -> Result<Value<'a>, EvalError>;

/// The cost of one call, from its arguments, when it is not cel-go's default of 1 (string
/// functions cost in proportion to their lengths, as kube-apiserver meters them).
pub type CostFn = for<'a> fn(&[Value<'a>]) -> u64;

/// One overload of a function: `string.contains(string) -> bool` is the overload
/// `contains_string` of `contains`, called as a method.
#[derive(Clone)]
pub struct Overload {
    pub id: Arc<str>,
    pub function: Arc<str>,
    pub signature: Signature,
    pub implementation: Implementation,
    pub cost: Option<CostFn>,
    /// The cost is kube-apiserver's estimator's, which meters by the function's name, so it
    /// applies even where the checker left the overload to run-time dispatch; cel-go's own
    /// costs are by overload and are then the default of 1.
    pub cost_by_name: bool,
    /// The cost where the overload is chosen at run time, when kube-apiserver's estimator
    /// meters that case differently (it also looks at the overload's id).
    pub dispatched_cost: Option<CostFn>,
}

impl std::fmt::Debug for Overload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.id, self.signature)
    }
}

/// The types an overload takes and gives. `receiver` marks a method (`x.f(y)`): its first
/// parameter is the receiver.
#[derive(Debug, Clone, PartialEq)]
pub struct Signature {
    pub receiver: bool,
    pub params: Vec<Type>,
    pub result: Type,
}

impl std::fmt::Display for Signature {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut params = self.params.iter();
        if self.receiver
            && let Some(receiver) = params.next()
        {
            write!(f, "{receiver}.")?;
        }
        f.write_str("(")?;
        for (index, param) in params.enumerate() {
            if index > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{param}")?;
        }
        write!(f, ") -> {}", self.result)
    }
}

/// What a function implementation may use while it runs.
pub struct Ctx<'e, 'i> {
    pub budget: &'e mut Budget<'i>,
    pub(crate) regexes: &'e RegexCache,
}

impl Ctx<'_, '_> {
    /// The compiled form of `pattern` (RE2 syntax as far as Rust's `regex` shares it), cached
    /// per program. A pattern that does not compile or is too large is an error naming it.
    pub fn regex(&mut self, pattern: &str) -> Result<Arc<Regex>, EvalError> {
        self.regexes
            .get_or_compile(pattern)
            .map_err(EvalError::Invalid)
    }
}

/// cel-go's error where a function's implementation refuses its arguments
/// (`types.MaybeNoSuchOverloadErr`): a bare `no such overload`.
pub(crate) fn no_overload(_function: &str, _args: &[Value<'_>]) -> EvalError {
    EvalError::NoSuchOverload("no such overload".to_owned())
}

/// Whether cel-go binds `function` once for all its overloads (a singleton binding: its standard
/// operators, `size`, `matches`, the conversions to `type` and `dyn`, the lists extension's
/// `@sortByAssociatedKeys`): then the value decides at
/// run time whatever overload the checker resolved, so a call of it is never narrowed to the
/// checker's overloads (`-x` on an `int` runs where the checker chose `-_(double)`).
pub(crate) fn singleton(function: &str) -> bool {
    matches!(
        function,
        operators::ADD
            | operators::SUBTRACT
            | operators::MULTIPLY
            | operators::DIVIDE
            | operators::MODULO
            | operators::NEGATE
            | operators::LESS
            | operators::LESS_EQUALS
            | operators::GREATER
            | operators::GREATER_EQUALS
            | operators::EQUALS
            | operators::NOT_EQUALS
            | operators::INDEX
            | operators::LOGICAL_NOT
            | operators::LOGICAL_AND
            | operators::LOGICAL_OR
            | operators::CONDITIONAL
            | operators::IN
            | "size"
            | "matches"
            | "type"
            | "dyn"
            | "@sortByAssociatedKeys"
    )
}

/// cel-go's error where no overload of `function` takes `args` at run time. cel-go's standard
/// operators are singletons that need a trait of their first operand (`no such overload: -_`
/// without it, else the implementation's bare `no such overload`); `contains`, `startsWith`
/// and `endsWith` skip the type guards (bare); other functions' guards name the argument types
/// (`no such overload: charAt(int, int)`).
pub(crate) fn dispatch_failure(function: &str, args: &[Value<'_>]) -> EvalError {
    // cel-go asks the left operand to compare itself, and a NaN double refuses first.
    if matches!(
        function,
        operators::LESS | operators::LESS_EQUALS | operators::GREATER | operators::GREATER_EQUALS
    ) && matches!(args.first(), Some(Value::Double(d)) if d.is_nan())
    {
        return EvalError::Invalid("NaN values cannot be ordered".to_owned());
    }
    let has = |kinds: &[&str]| {
        args.first()
            .is_some_and(|first| kinds.contains(&first.type_of().runtime_name()))
    };
    const NUMBERS: &[&str] = &["int", "uint", "double"];
    let trait_held = match function {
        operators::ADD => Some(has(&[
            "int",
            "uint",
            "double",
            "string",
            "bytes",
            "list",
            "google.protobuf.Duration",
            "google.protobuf.Timestamp",
        ])),
        operators::SUBTRACT => Some(has(&[
            "int",
            "uint",
            "double",
            "google.protobuf.Duration",
            "google.protobuf.Timestamp",
        ])),
        operators::MULTIPLY | operators::DIVIDE => Some(has(NUMBERS)),
        operators::MODULO => Some(has(&["int", "uint"])),
        operators::NEGATE => Some(has(&["int", "double", "google.protobuf.Duration"])),
        operators::LESS
        | operators::LESS_EQUALS
        | operators::GREATER
        | operators::GREATER_EQUALS => Some(has(&[
            "bool",
            "int",
            "uint",
            "double",
            "string",
            "bytes",
            "google.protobuf.Duration",
            "google.protobuf.Timestamp",
        ])),
        "size" => Some(has(&["string", "bytes", "list", "map"])),
        "matches" => Some(has(&["string"])),
        operators::INDEX => Some(has(&["list", "map"])),
        operators::LOGICAL_NOT
        | operators::LOGICAL_AND
        | operators::LOGICAL_OR
        | operators::CONDITIONAL
        | operators::IN
        | "contains"
        | "startsWith"
        | "endsWith" => Some(true),
        _ => None,
    };
    // Without the trait, a receiver type (string, duration, timestamp) is asked to take the
    // call, and refuses it with the bare message.
    let receiver = has(&[
        "string",
        "google.protobuf.Duration",
        "google.protobuf.Timestamp",
    ]);
    EvalError::NoSuchOverload(match trait_held {
        Some(true) => "no such overload".to_owned(),
        Some(false) if receiver => "no such overload".to_owned(),
        Some(false) => format!("no such overload: {function}"),
        None => format!(
            "no such overload: {function}({})",
            args.iter()
                .map(|arg| arg.type_of().runtime_name().to_owned())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    })
}

/// Parses `name(T, …) -> R`, or `T.name(…) -> R` for a method.
pub(crate) fn parse_signature(text: &str, method: bool) -> Result<(String, Signature), String> {
    let (call, result) = text.split_once("->").ok_or("no `-> result`")?;
    let result = parse_type(result.trim())?;
    let call = call.trim();
    if !call.ends_with(')') {
        return Err("no closing `)`".to_owned());
    }
    // The argument list opens at the `(` that matches the final `)`.
    let mut depth = 0i32;
    let mut open = None;
    for (index, character) in call.char_indices().rev() {
        match character {
            ')' => depth += 1,
            '(' => {
                depth -= 1;
                if depth == 0 {
                    open = Some(index);
                    break;
                }
            }
            _ => {}
        }
    }
    let open = open.ok_or("no `(`")?;
    let head = &call[..open];
    let inner = &call[open + 1..call.len() - 1];
    let mut params = split_types(inner)?;
    // A method's receiver is everything before the last dot outside parentheses.
    let name = if method {
        let dot = last_dot_outside_parens(head).ok_or("a method without a receiver")?;
        params.insert(0, parse_type(&head[..dot])?);
        head[dot + 1..].to_owned()
    } else {
        head.to_owned()
    };
    Ok((
        name,
        Signature {
            receiver: method,
            params,
            result,
        },
    ))
}

fn last_dot_outside_parens(text: &str) -> Option<usize> {
    let mut depth = 0i32;
    let mut last = None;
    for (index, character) in text.char_indices() {
        match character {
            '(' => depth += 1,
            ')' => depth -= 1,
            '.' if depth == 0 => last = Some(index),
            _ => {}
        }
    }
    last
}

fn split_types(text: &str) -> Result<Vec<Type>, String> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(Vec::new());
    }
    let mut types = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (index, character) in text.char_indices() {
        match character {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                types.push(parse_type(text[start..index].trim())?);
                start = index + 1;
            }
            _ => {}
        }
    }
    types.push(parse_type(text[start..].trim())?);
    Ok(types)
}

/// Parses a type as signatures write it: `int`, `list(A)`, `map(string, dyn)`, `Object.spec`, ….
pub fn parse_type(text: &str) -> Result<Type, String> {
    let text = text.trim();
    if let Some(open) = text.find('(') {
        if !text.ends_with(')') {
            return Err(format!("{text}: no closing `)`"));
        }
        let mut args = split_types(&text[open + 1..text.len() - 1])?;
        let name = &text[..open];
        return match (name, args.len()) {
            ("list", 1) => Ok(Type::list(args.remove(0))),
            ("map", 2) => {
                let value = args.remove(1);
                Ok(Type::map(args.remove(0), value))
            }
            ("optional_type", 1) => Ok(Type::optional(args.remove(0))),
            ("type", 1) => Ok(Type::type_of(args.remove(0))),
            _ => Err(format!("{text}: unknown generic type")),
        };
    }
    Ok(match text {
        "dyn" => Type::Dyn,
        "null_type" => Type::Null,
        "bool" => Type::Bool,
        "int" => Type::Int,
        "uint" => Type::Uint,
        "double" => Type::Double,
        "string" => Type::String,
        "bytes" => Type::Bytes,
        "duration" | "google.protobuf.Duration" => Type::Duration,
        "timestamp" | "google.protobuf.Timestamp" => Type::Timestamp,
        "type" => Type::Type(None),
        "" => return Err("an empty type".to_owned()),
        name if name.len() == 1 && name.chars().all(|c| c.is_ascii_uppercase()) => {
            Type::Param(Arc::from(name))
        }
        name => Type::Object(Arc::from(name)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_parse_functions_and_methods() {
        let (name, signature) = parse_signature("string.contains(string) -> bool", true).unwrap();
        assert_eq!(name, "contains");
        assert!(signature.receiver);
        assert_eq!(signature.params, vec![Type::String, Type::String]);
        assert_eq!(signature.result, Type::Bool);

        let (name, signature) = parse_signature("size(map(K, V)) -> int", false).unwrap();
        assert_eq!(name, "size");
        assert!(!signature.receiver);
        assert_eq!(
            signature.params,
            vec![Type::map(Type::Param("K".into()), Type::Param("V".into()))]
        );

        let (name, signature) = parse_signature("list(A).indexOf(A) -> int", true).unwrap();
        assert_eq!(name, "indexOf");
        assert_eq!(signature.params.len(), 2);
        assert_eq!(signature.to_string(), "list(A).(A) -> int");

        let (name, _) = parse_signature("_+_(int, int) -> int", false).unwrap();
        assert_eq!(name, "_+_");
        assert!(parse_signature("size(int", false).is_err());
        let (name, signature) =
            parse_signature("optional.of(A) -> optional_type(A)", false).unwrap();
        assert_eq!(name, "optional.of");
        assert_eq!(signature.params, vec![Type::Param("A".into())]);
    }
}
