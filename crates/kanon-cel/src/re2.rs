//! RE2 syntax (Go's `regexp`, which kube-apiserver's CEL uses) on top of Rust's `regex` crate:
//! what RE2 accepts and Rust's parser does not is rewritten (`\Q…\E`), and what RE2 refuses and
//! Rust's parser accepts is refused (nested repetition such as `x**`, look-around, `\C`,
//! backreferences), with Go's wording where it can be told. Patterns are compiled with a bound
//! on their size, and kept per program in a bounded cache.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use regex::Regex;

/// Compiled regular expressions kept per program; patterns are usually constants, so a few
/// suffice, and the bound keeps a hostile stream of patterns from growing memory.
const REGEX_CACHE_SIZE: usize = 32;
/// Largest compiled form of one regular expression (RE2-like bound on "huge regexes").
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// Compiles an RE2 pattern (Go's syntax, as kube-apiserver's CEL reads it); the error is Go's
/// message (`error parsing regexp: …`).
pub(crate) fn compile(pattern: &str) -> Result<Regex, String> {
    let translated = translate(pattern)?;
    regex::RegexBuilder::new(&translated)
        .size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|error| go_message(pattern, &error.to_string()))
}

/// A program's compiled regular expressions, by pattern.
#[derive(Default)]
pub(crate) struct RegexCache(Mutex<HashMap<String, Arc<Regex>>>);

impl std::fmt::Debug for RegexCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl RegexCache {
    /// The compiled form of `pattern`, compiled on first use; Go's message when it does not
    /// compile.
    pub(crate) fn get_or_compile(&self, pattern: &str) -> Result<Arc<Regex>, String> {
        if let Ok(cache) = self.0.lock()
            && let Some(found) = cache.get(pattern)
        {
            return Ok(found.clone());
        }
        let compiled = Arc::new(compile(pattern)?);
        if let Ok(mut cache) = self.0.lock() {
            if cache.len() >= REGEX_CACHE_SIZE {
                cache.clear();
            }
            cache.insert(pattern.to_owned(), compiled.clone());
        }
        Ok(compiled)
    }
}

/// The pattern to give Rust's `regex`, or Go's message for a pattern RE2 refuses
/// (`error parsing regexp: …`).
pub(crate) fn translate(pattern: &str) -> Result<String, String> {
    let chars: Vec<char> = pattern.chars().collect();
    let mut out = String::with_capacity(pattern.len());
    let mut index = 0;
    // Just after a repetition operator (with its optional non-greedy `?`): another is an error.
    let mut after_repeat: Option<usize> = None;
    let mut in_class = false;
    while index < chars.len() {
        let c = chars[index];
        if c == '\\' {
            let Some(&next) = chars.get(index + 1) else {
                return Err(go_error("trailing backslash at end of expression", ""));
            };
            match next {
                'Q' => {
                    // Literal text up to `\E` (or the end).
                    let start = index + 2;
                    let mut end = start;
                    while end < chars.len()
                        && !(chars[end] == '\\' && chars.get(end + 1) == Some(&'E'))
                    {
                        end += 1;
                    }
                    for literal in &chars[start..end] {
                        push_literal(&mut out, *literal);
                    }
                    index = if end < chars.len() { end + 2 } else { end };
                    after_repeat = None;
                    continue;
                }
                'E' => {
                    // A stray `\E` is ignored by RE2.
                    index += 2;
                    continue;
                }
                'C' | 'X' | 'R' | 'G' | 'K' | 'o' | 'g' | 'k' | 'N' | 'h' | 'H' | 'V' | 'e'
                | 'c' | 'u' | 'U' | 'l' | 'L' | 'Z' => {
                    return Err(go_error(
                        "invalid escape sequence",
                        &chars[index..index + 2].iter().collect::<String>(),
                    ));
                }
                '1'..='9' if !in_class => {
                    return Err(go_error(
                        "invalid escape sequence",
                        &chars[index..index + 2].iter().collect::<String>(),
                    ));
                }
                'p' | 'P' | 'x' if chars.get(index + 2) == Some(&'{') => {
                    // `\p{Greek}`, `\x{10FFFF}`: copied whole.
                    let close = (index + 3..chars.len())
                        .find(|&at| chars[at] == '}')
                        .unwrap_or(chars.len() - 1);
                    out.extend(&chars[index..=close]);
                    index = close + 1;
                    after_repeat = None;
                    continue;
                }
                // RE2's Perl classes and word boundaries are ASCII; Rust's are Unicode.
                'd' | 'D' | 'w' | 'W' | 's' | 'S' | 'b' | 'B' => {
                    out.push_str(perl_class(next, in_class));
                    index += 2;
                    after_repeat = None;
                    continue;
                }
                _ => {}
            }
            out.push(c);
            out.push(next);
            index += 2;
            after_repeat = None;
            continue;
        }
        if in_class {
            if c == '[' && chars.get(index + 1) == Some(&':') {
                // A POSIX class `[:alpha:]` inside a class: copied whole.
                if let Some(close) = (index + 2..chars.len().saturating_sub(1))
                    .find(|&at| chars[at] == ':' && chars[at + 1] == ']')
                {
                    out.extend(&chars[index..close + 2]);
                    index = close + 2;
                    continue;
                }
            }
            if c == '[' {
                // Rust reads `[` inside a class as a nested class; RE2 as a literal.
                out.push_str("\\[");
                index += 1;
                continue;
            }
            if c == ']' {
                in_class = false;
            }
            out.push(c);
            index += 1;
            continue;
        }
        match c {
            '[' => {
                in_class = true;
                out.push(c);
                index += 1;
                // A `]` (after an optional `^`) first in a class is a literal.
                if chars.get(index) == Some(&'^') {
                    out.push('^');
                    index += 1;
                }
                if chars.get(index) == Some(&']') {
                    out.push_str("\\]");
                    index += 1;
                }
                after_repeat = None;
                continue;
            }
            '(' if chars.get(index + 1) == Some(&'?') => {
                let rest: String = chars[index..chars.len().min(index + 4)].iter().collect();
                if rest.starts_with("(?=")
                    || rest.starts_with("(?!")
                    || rest.starts_with("(?<=")
                    || rest.starts_with("(?<!")
                {
                    let shown: String = chars
                        [index..index + if rest.starts_with("(?<") { 4 } else { 3 }]
                        .iter()
                        .collect();
                    return Err(go_error("invalid or unsupported Perl syntax", &shown));
                }
                after_repeat = None;
            }
            '*' | '+' | '?' => {
                if let Some(start) = after_repeat {
                    let shown: String = chars[start..=index].iter().collect();
                    return Err(go_error("invalid nested repetition operator", &shown));
                }
                out.push(c);
                index += 1;
                // A non-greedy `?` belongs to this operator.
                if chars.get(index) == Some(&'?') {
                    out.push('?');
                    index += 1;
                }
                after_repeat = Some(start_of_repeat(&chars, index));
                continue;
            }
            '{' => {
                if let Some(close) = repeat_braces(&chars, index) {
                    if let Some(start) = after_repeat {
                        let shown: String = chars[start..=close].iter().collect();
                        return Err(go_error("invalid nested repetition operator", &shown));
                    }
                    out.extend(&chars[index..=close]);
                    index = close + 1;
                    if chars.get(index) == Some(&'?') {
                        out.push('?');
                        index += 1;
                    }
                    after_repeat = Some(start_of_repeat(&chars, index));
                    continue;
                }
                // Not a repetition: RE2 reads `{` as a literal.
                out.push_str("\\{");
                index += 1;
                after_repeat = None;
                continue;
            }
            '}' => {
                out.push_str("\\}");
                index += 1;
                after_repeat = None;
                continue;
            }
            _ => after_repeat = None,
        }
        out.push(c);
        index += 1;
    }
    Ok(out)
}

/// RE2's ASCII meaning of `\d`, `\w`, `\s` (and their negations) and `\b`, `\B`, inside or
/// outside a class.
fn perl_class(letter: char, in_class: bool) -> &'static str {
    match (letter, in_class) {
        ('d', false) => "[0-9]",
        ('D', false) => "[^0-9]",
        ('w', false) => "[0-9A-Za-z_]",
        ('W', false) => "[^0-9A-Za-z_]",
        ('s', false) => "[\\t\\n\\f\\r ]",
        ('S', false) => "[^\\t\\n\\f\\r ]",
        ('d', true) => "0-9",
        ('D', true) => "[:^digit:]",
        ('w', true) => "0-9A-Za-z_",
        ('W', true) => "[:^word:]",
        ('s', true) => "\\t\\n\\f\\r ",
        ('S', true) => "[:^space:]",
        ('b', false) => "(?-u:\\b)",
        ('B', false) => "(?-u:\\B)",
        // `\b` in a class is a backspace in RE2.
        (_, true) => "\\x08",
        _ => "",
    }
}

/// Where the repetition operator that ends just before `end` starts (`*`, `+?`, `{2,3}?`).
fn start_of_repeat(chars: &[char], end: usize) -> usize {
    let mut start = end - 1;
    if chars[start] == '?' && start > 0 && matches!(chars[start - 1], '*' | '+' | '?' | '}') {
        start -= 1;
    }
    if chars[start] == '}'
        && let Some(open) = chars[..start].iter().rposition(|&c| c == '{')
    {
        start = open;
    }
    start
}

/// `{n}`, `{n,}` or `{n,m}` starting at `open`: the index of its `}`.
fn repeat_braces(chars: &[char], open: usize) -> Option<usize> {
    let mut index = open + 1;
    let digits = |index: &mut usize| {
        let start = *index;
        while chars.get(*index).is_some_and(char::is_ascii_digit) {
            *index += 1;
        }
        *index > start
    };
    if !digits(&mut index) {
        return None;
    }
    if chars.get(index) == Some(&',') {
        index += 1;
        digits(&mut index);
    }
    (chars.get(index) == Some(&'}')).then_some(index)
}

fn push_literal(out: &mut String, c: char) {
    if "\\.+*?()|[]{}^$#&-~ \t\n".contains(c) {
        out.push('\\');
    }
    out.push(c);
}

fn go_error(code: &str, expr: &str) -> String {
    format!("error parsing regexp: {code}: `{expr}`")
}

/// Go's message for a pattern Rust's `regex` refused (`error parsing regexp: …`), as far as
/// the two parsers' errors correspond.
pub(crate) fn go_message(pattern: &str, rust_error: &str) -> String {
    let lower = rust_error.to_ascii_lowercase();
    if lower.contains("unclosed group") {
        go_error("missing closing )", pattern)
    } else if lower.contains("unopened group") {
        go_error("unexpected )", pattern)
    } else if lower.contains("unclosed character class") {
        let from = pattern.rfind('[').unwrap_or(0);
        go_error("missing closing ]", &pattern[from..])
    } else if lower.contains("repetition operator missing expression") {
        go_error("missing argument to repetition operator", pattern)
    } else if lower.contains("invalid character class range") {
        go_error("invalid character class range", pattern)
    } else if lower.contains("exceeds size limit") || lower.contains("too big") {
        go_error("expression too large", pattern)
    } else {
        format!(
            "error parsing regexp: {}",
            rust_error.lines().last().unwrap_or(rust_error).trim()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewrites_and_refuses_as_re2_does() {
        assert_eq!(translate(r"\Q.*\E").unwrap(), r"\.\*");
        assert_eq!(translate(r"a\Q.").unwrap(), r"a\.");
        assert_eq!(translate("a*?b+?").unwrap(), "a*?b+?");
        assert_eq!(translate("x{2,3}?").unwrap(), "x{2,3}?");
        assert!(translate("x**").is_err());
        assert!(translate("x*+").is_err());
        assert!(translate("x{2}{3}").is_err());
        assert!(translate("x??").is_ok());
        assert!(translate("x???").is_err());
        assert!(translate("a(?=b)").is_err());
        assert!(translate(r"\C").is_err());
        assert!(translate(r"(a)\1").is_err());
        assert_eq!(translate("a{").unwrap(), r"a\{");
        assert_eq!(translate("[[]").unwrap(), r"[\[]");
        assert_eq!(translate("[]a]").unwrap(), r"[\]a]");
        assert_eq!(translate("[[:alpha:]]").unwrap(), "[[:alpha:]]");
        assert_eq!(translate(r"\p{L}+").unwrap(), r"\p{L}+");
        assert_eq!(translate(r"^\p{Han}+$").unwrap(), r"^\p{Han}+$");
    }
}
