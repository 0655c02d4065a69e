//! Errors that name the place they come from.

use std::fmt;

/// One problem in a policy, at a field path such as
/// `spec.overrideRules[2].overriders.plaintext[0].path`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// The field path, from the root of the policy object.
    pub field: String,
    /// What is wrong there.
    pub message: String,
}

impl FieldError {
    /// A problem at `field`.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.field, self.message)
        }
    }
}

/// A policy that did not compile, with every error found, each by field path.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct InvalidPolicy {
    /// `Kind/name` or `Kind/namespace/name`.
    pub policy: String,
    /// Every problem found; never empty.
    pub errors: Vec<FieldError>,
}

impl fmt::Display for InvalidPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} is invalid:", self.policy)?;
        for e in &self.errors {
            write!(f, "\n  {e}")?;
        }
        Ok(())
    }
}
