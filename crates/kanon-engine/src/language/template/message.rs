//! Validate conditions after their check: the value that decided, and the denial message.
//!
//! A condition's program decides the verdict alone (`{"valid": …, "item": …}`); its message is
//! a separate small program, rendered afterwards and only for a denial. So a message can never
//! turn a denial into an error, and under `failurePolicy: Ignore` into an admission: a message
//! that cannot be rendered (a placeholder on a field the object lacks, such as
//! `metadata.name` of a Pod created from `generateName`) is rendered again with what is
//! missing shown as [`ABSENT`], or replaced by a fallback naming the rule, and the problem
//! becomes a warning that names the message's field.

use serde_json::{Map, Value};

use crate::error::FieldError;
use crate::helpers;
use crate::program::{Program, ProgramError, ProgramKind, ProgramLimits};

/// What a condition compares `dataRef`'s value with.
#[derive(Clone, Debug)]
pub(crate) enum Compared {
    /// Nothing (`Exist`, `NotExist`).
    Nothing,
    /// A constant, `valueProcess` already applied.
    Constant(Value),
    /// `refs.value`, then `valueProcess` (operation and operand) if any.
    Reference(Option<(String, String)>),
}

/// What a condition's check found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConditionVerdict {
    /// Whether the object passes.
    pub valid: bool,
    /// For a `dataRef` that selects several values, the index in the selection of the value
    /// that decided a denial: the first that hit under `reject`, the first that missed under
    /// `allow` (an empty selection is one absent value, at index 0). `None` for a single
    /// value or a pass.
    pub item: Option<usize>,
}

/// Reads a condition program's output: `{"valid": true}` or `{"valid": false, "item": i}`.
pub fn condition_from_output(output: Option<Value>) -> Result<ConditionVerdict, ProgramError> {
    let Some(Value::Object(map)) = output else {
        return Err(ProgramError::new(
            "the condition's program gave no verdict (a defect of kanon: please report it)",
        ));
    };
    let valid = map.get("valid").and_then(Value::as_bool).ok_or_else(|| {
        ProgramError::new("the condition's program gave no `valid` (a defect of kanon)")
    })?;
    let item = map
        .get("item")
        .and_then(Value::as_u64)
        .and_then(|i| usize::try_from(i).ok());
    Ok(ConditionVerdict { valid, item })
}

/// Shown in a message, once its strict rendering failed, where it reads a value that is absent.
pub const ABSENT: &str = "<absent>";

/// The message of a condition, with what it needs to be rendered on a denial.
#[derive(Clone, Debug)]
pub struct ConditionMessage {
    /// Field path of the message (`spec.validateRules[1].template.condition.message`), or of
    /// the condition when it has no message.
    field: String,
    /// Field path of the rule (`spec.validateRules[1]`), for the fallback.
    rule: String,
    /// What the condition says by default (`Exist condition does not hold`).
    default: String,
    text: MessageText,
    /// What the condition compares with, to give the message `value`.
    compared: Compared,
    /// `dataRef` selects several values: `data` is the one that decided.
    each: bool,
}

#[derive(Clone, Debug)]
enum MessageText {
    /// Text without placeholders, as shown.
    Plain(String),
    /// Text with placeholders, rendered per denial.
    Template(Program),
}

/// A rendered message, and what went wrong rendering it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RenderedMessage {
    /// The denial reason.
    pub text: String,
    /// Why the message could not be rendered as written, naming its field.
    pub warning: Option<String>,
}

/// Whether `text` holds minijinja syntax (`{{`, `{%`, `{#`).
fn has_placeholders(text: &str) -> bool {
    text.contains("{{") || text.contains("{%") || text.contains("{#")
}

impl ConditionMessage {
    /// The text's source, when it has placeholders.
    pub(crate) fn template_source(&self) -> Option<&str> {
        match &self.text {
            MessageText::Plain(_) => None,
            MessageText::Template(program) => Some(program.source()),
        }
    }

    /// The message of the condition at `field` (`…template.condition`) of the rule at `rule`;
    /// `default` is said when `message` is not given. A message that does not compile is an
    /// error under `{field}.message`.
    pub(crate) fn compile(
        message: Option<&str>,
        default: String,
        compared: Compared,
        each: bool,
        field: &str,
        rule: &str,
        errors: &mut Vec<FieldError>,
    ) -> Option<ConditionMessage> {
        let (at, text) = match message {
            None => (field.to_string(), MessageText::Plain(default.clone())),
            Some(text) if !has_placeholders(text) => (
                format!("{field}.message"),
                MessageText::Plain(text.trim().to_string()),
            ),
            Some(text) => {
                let at = format!("{field}.message");
                // Messages seldom render: keep only the source until the first denial.
                match Program::compile_lazily(text, ProgramKind::Message, ProgramLimits::default())
                {
                    Ok(program) => (at, MessageText::Template(program)),
                    Err(e) => {
                        errors.push(FieldError::new(at, e.message));
                        return None;
                    }
                }
            }
        };
        Some(ConditionMessage {
            field: at,
            rule: rule.to_string(),
            default,
            text,
            compared,
            each,
        })
    }

    /// Field path of the message.
    pub fn field(&self) -> &str {
        &self.field
    }

    /// The message as written (the source of its program, or its plain text).
    pub fn source(&self) -> &str {
        match &self.text {
            MessageText::Plain(text) => text,
            MessageText::Template(program) => program.source(),
        }
    }

    /// Whether rendering needs the program's variables (it has placeholders).
    pub fn needs_context(&self) -> bool {
        matches!(self.text, MessageText::Template(_))
    }

    /// The variables a message sees besides the program's: `data`, the value that decided
    /// (the selected item for a JSONPath that selects several), and `value`, what it was
    /// compared with (after `valueProcess`; absent for `Exist`/`NotExist`).
    pub fn variables(
        &self,
        refs: &Map<String, Value>,
        verdict: &ConditionVerdict,
    ) -> (Value, Option<Value>) {
        let data = refs.get("data").filter(|d| !d.is_null());
        let data = if self.each {
            match (data, verdict.item) {
                (Some(Value::Array(items)), Some(i)) => items.get(i).cloned(),
                _ => None,
            }
        } else {
            data.cloned()
        };
        let value = match &self.compared {
            Compared::Nothing => None,
            Compared::Constant(v) => Some(v.clone()),
            Compared::Reference(process) => Some(
                match (refs.get("value").filter(|v| !v.is_null()), process) {
                    (None, _) => Value::Null,
                    (Some(v), None) => v.clone(),
                    (Some(v), Some((op, with))) => {
                        helpers::process_value(v, op, with).unwrap_or(Value::Null)
                    }
                },
            ),
        };
        (data.unwrap_or(Value::Null), value)
    }

    /// Renders the message with `context` (the program's variables with `data` and `value`;
    /// `None` when [`ConditionMessage::needs_context`] is false). Never fails: see the module.
    pub fn render(&self, context: Option<&minijinja::Value>) -> RenderedMessage {
        let (program, context) = match (&self.text, context) {
            (MessageText::Plain(text), _) => {
                return RenderedMessage {
                    text: text.clone(),
                    warning: None,
                };
            }
            (MessageText::Template(program), Some(context)) => (program, context),
            (MessageText::Template(_), None) => {
                return self.fallback("it was given no variables (a defect of kanon)".into());
            }
        };
        let error = match program.render(context) {
            Ok(text) => {
                return RenderedMessage {
                    text: text.trim().to_string(),
                    warning: None,
                };
            }
            Err(e) => e.message,
        };
        match program.render_leniently(context, ABSENT) {
            // Worth showing only if it marks what is missing (a filter given an absent value
            // prints nothing, which would read as a real value) and says something besides.
            Ok(text)
                if text.contains(ABSENT)
                    && text.replace(ABSENT, "").chars().any(char::is_alphanumeric) =>
            {
                RenderedMessage {
                    text: text.trim().to_string(),
                    warning: Some(format!(
                        "{} could not be rendered ({error}); the denial stands, with {ABSENT} where a value is missing",
                        self.field
                    )),
                }
            }
            _ => self.fallback(error),
        }
    }

    /// The rule's default reason, naming the rule, with a warning saying why.
    fn fallback(&self, error: String) -> RenderedMessage {
        RenderedMessage {
            text: format!(
                "{}: {} (its message could not be rendered)",
                self.rule, self.default
            ),
            warning: Some(format!(
                "{} could not be rendered ({error}); the denial stands",
                self.field
            )),
        }
    }
}
