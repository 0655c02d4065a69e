//! Errors of parsing, checking and evaluating CEL.

use std::fmt;

use crate::ast::Span;

/// One problem found in an expression's text or types, at a place in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issue {
    pub span: Span,
    pub message: String,
}

/// Why an expression could not be compiled: every problem found, each at its place. Displayed as
/// kube-apiserver shows compile errors (`ERROR: <input>:1:8: undeclared reference to 'x'` with the
/// line and a caret under the column).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct CompileError {
    pub text: String,
    pub issues: Vec<Issue>,
}

impl CompileError {
    pub fn new(source: &str, issues: Vec<Issue>) -> Self {
        CompileError {
            text: source.to_owned(),
            issues,
        }
    }

    /// 1-based line and column (in characters) of a byte offset of the source.
    pub fn location(&self, offset: u32) -> (usize, usize) {
        let offset = (offset as usize).min(self.text.len());
        let mut boundary = offset;
        while !self.text.is_char_boundary(boundary) {
            boundary -= 1;
        }
        let before = &self.text[..boundary];
        let line = before.matches('\n').count() + 1;
        let column = before
            .rsplit('\n')
            .next()
            .map_or(0, |text| text.chars().count())
            + 1;
        (line, column)
    }
}

impl fmt::Display for CompileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, issue) in self.issues.iter().enumerate() {
            if index > 0 {
                f.write_str("\n")?;
            }
            let (line, column) = self.location(issue.span.start);
            write!(f, "ERROR: <input>:{line}:{column}: {}", issue.message)?;
            if let Some(text) = self.text.lines().nth(line - 1) {
                write!(f, "\n | {text}\n | {}^", ".".repeat(column - 1))?;
            }
        }
        Ok(())
    }
}

/// Why an evaluation failed. Messages are worded as cel-go words them, since kube-apiserver
/// quotes them in its denials (`expression '…' resulted in error: no such key: x`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EvalError {
    #[error("no such key: {0}")]
    NoSuchKey(String),
    #[error("no such attribute(s): {0}")]
    NoSuchAttribute(String),
    /// No overload takes the arguments, worded as cel-go words it where it happened
    /// (`no such overload`, `no such overload: size`, `no such overload: charAt(int, int)`).
    #[error("{0}")]
    NoSuchOverload(String),
    #[error("division by zero")]
    DivisionByZero,
    #[error("modulus by zero")]
    ModulusByZero,
    #[error("{0} overflow")]
    Overflow(&'static str),
    #[error("index out of bounds: {0}")]
    IndexOutOfBounds(String),
    /// A function refused its arguments (a bad regex, an unparsable quantity, …).
    #[error("{0}")]
    Invalid(String),
    #[error("operation cancelled: actual cost limit exceeded")]
    CostLimitExceeded { limit: u64 },
    #[error("operation interrupted")]
    Interrupted,
    /// kube-apiserver ends the whole evaluation here, whatever would have absorbed the error
    /// (`||`, `&&`, a comprehension): cel-go's cost accounting of some calls fails on a failed
    /// argument (it recovers from its own crash). The text names the real cause.
    #[error("{0}")]
    Aborted(String),
}
