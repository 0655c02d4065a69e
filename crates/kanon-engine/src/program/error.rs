//! What went wrong compiling or running a program, said in one line with the line of the
//! program it happened at (never a dump of the context, which would print the object).

use minijinja::{Error, ErrorKind};

/// A program that failed to compile or to run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ProgramError {
    /// What went wrong, with the line when known.
    pub message: String,
    /// What went wrong without the line and its code, when `message` has them: how to say it
    /// for a program kanon rendered from a template, whose lines its author never wrote.
    pub brief: Option<String>,
}

impl ProgramError {
    /// An error with `message`.
    pub fn new(message: impl Into<String>) -> Self {
        ProgramError {
            message: message.into(),
            brief: None,
        }
    }

    /// The error of a minijinja failure in `source`.
    pub(super) fn from_minijinja(err: &Error, source: &str) -> Self {
        let (message, brief) = describe(err, source);
        ProgramError { message, brief }
    }

    /// What went wrong, without a line of the program.
    pub fn brief(&self) -> &str {
        self.brief.as_deref().unwrap_or(&self.message)
    }
}

/// Marks the message of `fail(...)`, which is shown as the author wrote it.
pub(super) const FAIL_MARK: &str = "\u{2063}fail:";

/// Describes a minijinja error in one line with its line number and the text of that line
/// (never the debug dump, which would print context values), and, when there is a line, the
/// same without it.
fn describe(err: &Error, source: &str) -> (String, Option<String>) {
    let detail = err.detail().unwrap_or_default();
    if let Some(message) = detail.strip_prefix(FAIL_MARK) {
        return match err.line() {
            Some(line) => (format!("line {line}: {message}"), Some(message.to_string())),
            None => (message.to_string(), None),
        };
    }
    let mut text = match err.kind() {
        ErrorKind::OutOfFuel => "the program ran out of fuel (instruction limit): it loops too long".to_string(),
        ErrorKind::UndefinedError => "undefined value: a name or attribute does not exist (probe optional fields with `is defined` or `| default(...)`)".to_string(),
        ErrorKind::InvalidOperation if detail.contains("recursion limit") => {
            "the program nests macro calls deeper than the recursion limit".to_string()
        }
        // The details of invalid operations speak for themselves.
        ErrorKind::InvalidOperation if !detail.is_empty() => detail.to_string(),
        _ if !detail.is_empty() => format!("{}: {detail}", err.kind()),
        _ => err.kind().to_string(),
    };
    let Some(line) = err.line() else {
        return (text, None);
    };
    let brief = text.clone();
    text = format!("line {line}: {text}");
    if let Some(code) = source.lines().nth(line.saturating_sub(1)) {
        let code = code.trim();
        if !code.is_empty() {
            text = format!("{text} (in `{}`)", shorten(code, 120));
        }
    }
    (text, Some(brief))
}

/// `text` cut to at most `max` bytes (at a character boundary), marked with `…` when cut.
pub(super) fn shorten(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}
