//! The clauses of the strings extension's `string.format` templates (`%s`, `%d`, `%f`, `%e`,
//! `%b`, `%x`, `%X`, `%o`, `%%`, and a precision: `%.2f`): how a clause after its `%` is read,
//! and cel-go's compile-time check of a literal template against the checked types of its
//! arguments. Read by the library's `format` as it runs and by the validators when compiling.

use crate::types::Type;

#[derive(Clone, Copy)]
pub(crate) enum Clause {
    String,
    Decimal,
    Fixed(Option<usize>),
    /// cel-go writes `%<precision>e`: the precision becomes a width and the digits stay six.
    Scientific(Option<usize>),
    Binary,
    Hex(bool),
    Octal,
}

/// The clause after a `%`, and how many bytes it takes.
pub(crate) fn parse_clause(text: &str) -> Result<(usize, Clause), String> {
    let bytes = text.as_bytes();
    let mut index = 0;
    let mut precision = None;
    if bytes.first() == Some(&b'.') {
        index = 1;
        let start = index;
        loop {
            let Some(byte) = bytes.get(index) else {
                return Err(
                    "error while parsing precision: could not find end of precision specifier"
                        .to_owned(),
                );
            };
            if !byte.is_ascii_digit() {
                break;
            }
            index += 1;
        }
        let digits = &text[start..index];
        precision = Some(digits.parse::<usize>().map_err(|error| {
            let reason = if digits.is_empty() || matches!(error.kind(), std::num::IntErrorKind::InvalidDigit) {
                "invalid syntax"
            } else {
                "value out of range"
            };
            // Only digits: Go's `%q` adds nothing but the quotes.
            format!("error while parsing precision: error while converting precision to integer: strconv.Atoi: parsing \"{digits}\": {reason}")
        })?);
    }
    let Some(verb) = text[index..].chars().next() else {
        return Err("unexpected end of string".to_owned());
    };
    let clause = match verb {
        's' => Clause::String,
        'd' => Clause::Decimal,
        'f' => Clause::Fixed(precision),
        'e' => Clause::Scientific(precision),
        'b' => Clause::Binary,
        'x' => Clause::Hex(false),
        'X' => Clause::Hex(true),
        'o' => Clause::Octal,
        other => return Err(format!("unrecognized formatting clause \"{other}\"")),
    };
    Ok((index + verb.len_utf8(), clause))
}

/// cel-go's compile-time check of `'<literal>'.format([<list literal>])` (the strings
/// extension's validator): the clauses against the checked types of the list's elements. The
/// error comes with the index of the element it is about, if any (else it is the call's).
pub(crate) fn check(
    template: &str,
    args: &[Type],
    element_kinds: &dyn Fn(usize) -> Result<(), (usize, String)>,
) -> Result<usize, (Option<usize>, String)> {
    let bytes = template.as_bytes();
    let mut index = 0;
    let mut next_arg = 0;
    while index < bytes.len() {
        if bytes[index] != b'%' {
            index += 1;
            continue;
        }
        if bytes.get(index + 1) == Some(&b'%') {
            index += 2;
            continue;
        }
        if index + 1 >= bytes.len() {
            return Err((None, "unexpected end of string".to_owned()));
        }
        if next_arg >= args.len() {
            return Err((None, format!("index {next_arg} out of range")));
        }
        let (read, clause) = parse_clause(&template[index + 1..])
            .map_err(|error| (None, format!("could not parse formatting clause: {error}")))?;
        let kind = &args[next_arg];
        let allowed: &[&str] = match clause {
            Clause::String => &[],
            Clause::Decimal | Clause::Octal => &["int", "uint"],
            Clause::Fixed(_) | Clause::Scientific(_) => &["double", "string"],
            Clause::Binary => &["int", "uint", "bool"],
            Clause::Hex(_) => &["int", "uint", "string", "bytes"],
        };
        let wrong = |at: usize, kind: &Type| {
            let given = kind.runtime_name();
            let message = match clause {
                Clause::String => format!(
                    "string clause can only be used on strings, bools, bytes, ints, doubles, maps, lists, types, durations, and timestamps, was given {given}"
                ),
                Clause::Decimal => {
                    format!("decimal clause can only be used on integers, was given {given}")
                }
                Clause::Octal => {
                    format!("octal clause can only be used on integers, was given {given}")
                }
                Clause::Fixed(_) => {
                    format!("fixed-point clause can only be used on doubles, was given {given}")
                }
                Clause::Scientific(_) => {
                    format!("scientific clause can only be used on doubles, was given {given}")
                }
                Clause::Binary => {
                    format!("only integers and bools can be formatted as binary, was given {given}")
                }
                Clause::Hex(_) => format!(
                    "only integers, byte buffers, and strings can be formatted as hex, was given {given}"
                ),
            };
            (Some(at), format!("error during formatting: {message}"))
        };
        match clause {
            Clause::String => element_kinds(next_arg).map_err(|(at, given)| {
                (Some(at), format!("error during formatting: string clause can only be used on strings, bools, bytes, ints, doubles, maps, lists, types, durations, and timestamps, was given {given}"))
            })?,
            _ => {
                if !matches!(kind, Type::Dyn | Type::Param(_) | Type::Error)
                    && !allowed.contains(&kind.runtime_name())
                {
                    return Err(wrong(next_arg, kind));
                }
            }
        }
        index += 1 + read;
        next_arg += 1;
    }
    Ok(next_arg)
}

/// Can `%s` format a value of this checked type (cel-go's `verifyString`, for one level)?
pub(crate) fn string_formattable(kind: &Type) -> bool {
    matches!(
        kind,
        Type::Dyn
            | Type::Param(_)
            | Type::Error
            | Type::List(_)
            | Type::Map(_, _)
            | Type::Int
            | Type::Uint
            | Type::Double
            | Type::Bool
            | Type::String
            | Type::Timestamp
            | Type::Bytes
            | Type::Duration
            | Type::Type(_)
            | Type::Null
    )
}
