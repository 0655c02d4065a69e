//! Text of a reference that may hold `{{ expression }}` placeholders: compiled once, rendered
//! per request against the rule's variables.

use crate::error::FieldError;
use crate::program::{Program, ProgramError, ProgramKind, ProgramLimits};

/// A string that may hold `{{ expression }}` placeholders.
#[derive(Clone, Debug)]
pub(super) enum Text {
    Plain(String),
    Template(Program),
}

/// The most `+` and `*` operators a reference's placeholders may hold. Placeholders run in
/// the evaluating thread (programs may run in a worker process, see [`crate::host`]); the one
/// unbounded operation known in the program runtime needs a list concatenated 33 levels deep,
/// which an expression without statements reaches only with 33 operators.
pub const MAX_PLACEHOLDER_OPERATORS: usize = 16;

/// Why `text` is not a valid run of `{{ expression }}` placeholders, if it is not.
fn placeholder_problem(text: &str) -> Option<String> {
    if text.contains("{%") {
        return Some(
            "statements (`{% ... %}`) are not allowed in a reference; a placeholder is one \
             `{{ expression }}` (compute more in the rule's program)"
                .to_string(),
        );
    }
    let mut operators = 0;
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        let inside = &rest[start + 2..];
        let end = inside.find("}}").unwrap_or(inside.len());
        let mut quote: Option<char> = None;
        let mut escaped = false;
        for c in inside[..end].chars() {
            match quote {
                Some(q) => {
                    if escaped {
                        escaped = false;
                    } else if c == '\\' {
                        escaped = true;
                    } else if c == q {
                        quote = None;
                    }
                }
                None if c == '"' || c == '\'' => quote = Some(c),
                None if c == '+' || c == '*' => operators += 1,
                None => {}
            }
        }
        rest = &inside[end..];
    }
    (operators > MAX_PLACEHOLDER_OPERATORS).then(|| {
        format!(
            "the placeholders hold {operators} `+` and `*` operators; the limit is \
             {MAX_PLACEHOLDER_OPERATORS} (compute more in the rule's program)"
        )
    })
}

impl Text {
    pub(super) fn compile(text: &str, field: String, errors: &mut Vec<FieldError>) -> Text {
        if !text.contains("{{") && !text.contains("{%") {
            return Text::Plain(text.to_string());
        }
        if let Some(problem) = placeholder_problem(text) {
            errors.push(FieldError::new(field, format!("placeholder: {problem}")));
            return Text::Plain(text.to_string());
        }
        match Program::compile(text, ProgramKind::Validate, ProgramLimits::default()) {
            Ok(p) => Text::Template(p),
            Err(e) => {
                errors.push(FieldError::new(
                    field,
                    format!("placeholder: {}", e.message),
                ));
                Text::Plain(text.to_string())
            }
        }
    }

    pub(super) fn render(&self, context: &minijinja::Value) -> Result<String, ProgramError> {
        match self {
            Text::Plain(s) => Ok(s.clone()),
            Text::Template(p) => p.render(context).map(|s| s.trim().to_string()),
        }
    }
}
