//! Text of a reference that may hold `{{ expression }}` placeholders: compiled once, rendered
//! per request against the rule's variables, in the language of texts (see
//! [`crate::program::TEXT_FILTERS`] and the module `program::text`).

use crate::error::FieldError;
use crate::program::{Program, ProgramError, ProgramKind, ProgramLimits};

/// A string that may hold `{{ expression }}` placeholders.
#[derive(Clone, Debug)]
pub(super) enum Text {
    Plain(String),
    Template(Program),
}

impl Text {
    pub(super) fn compile(text: &str, field: String, errors: &mut Vec<FieldError>) -> Text {
        if !text.contains("{{") && !text.contains("{%") {
            return Text::Plain(text.to_string());
        }
        // Held to the language of texts (see `program::text`): it renders in this process.
        match Program::compile(text, ProgramKind::Reference, ProgramLimits::default()) {
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
