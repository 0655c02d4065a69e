//! What every rule language shares and the runtimes beneath them read: the variables a rule
//! sees ([`Variables`]), what a validate rule decides ([`Verdict`]) and how evaluating a rule
//! fails ([`RuleError`]). The context a rule is evaluated in is [`crate::evaluation`], the
//! references it reads [`crate::references`], the languages [`crate::language`].

mod error;
mod variables;
mod verdict;

pub use error::RuleError;
pub(crate) use error::unknown_fields;
pub use variables::{Shared, Variables};
pub use verdict::Verdict;
