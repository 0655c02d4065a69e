//! The compiled form of a template or a hand-written program: a minijinja program with the
//! references it reads, and, for a template, its native form and its message.

use crate::language::template::message::ConditionMessage;
use crate::language::template::native::NativeRule;
use crate::program::{Program, ProgramError};
use crate::references::CompiledRef;
use crate::rule::RuleError;

/// A compiled rule program with the references it reads (as `refs.<name>`).
#[derive(Clone, Debug)]
pub struct RuleProgram {
    /// Field path of the template or program, for messages.
    pub field: String,
    /// The program.
    pub program: Program,
    /// References resolved before each run, by name.
    pub refs: Vec<(&'static str, CompiledRef)>,
    /// A structured template's native form, which gives the program's result without running
    /// it where it can vouch for it (see [`super::template::native`]); `None` for hand-written
    /// programs.
    pub native: Option<NativeRule>,
    /// Written by the policy's author (a `program` field), not rendered by kanon from a
    /// template: run by the evaluation's [`crate::host::ProgramHost`] when it has one.
    pub authored: bool,
    /// A hand-written program held to the language of texts but for `{% if %}` branches
    /// ([`Program::contained`]): run in kanon's own process, its reads charged as a text's,
    /// and in the program host only when it reads more. Always `false` for templates.
    pub contained: bool,
    /// A validate condition's message, rendered apart from its verdict, on a denial; `None`
    /// for other rules, whose programs give their verdicts (or operations) whole.
    pub message: Option<ConditionMessage>,
}

impl RuleProgram {
    /// What running it may read of the request's object and old object, when that is known
    /// (`None`: anything).
    pub(crate) fn object_read(&self) -> Option<crate::projection::Projection> {
        let mut read = crate::projection::Projection::nothing();
        let mut sources = vec![self.program.source()];
        sources.extend(
            self.message
                .as_ref()
                .and_then(ConditionMessage::template_source),
        );
        for source in sources {
            for name in ["object", "oldObject"] {
                read.add_read(&crate::program::reads::fields_read(source, name));
            }
        }
        for (_, reference) in &self.refs {
            read.add_read(&reference.object_read()?);
        }
        (!read.is_whole()).then_some(read)
    }

    /// How an error of this rule reads: the field and what went wrong. A template's error
    /// names the template's own field (its `condition`, for a validate template) without the
    /// line of the program kanon rendered from it; a hand-written program's names its line.
    pub fn error(&self, e: &ProgramError) -> RuleError {
        let (field, message) = match (self.authored, &self.message) {
            (true, _) => (self.field.clone(), e.message.clone()),
            (false, Some(_)) => (format!("{}.condition", self.field), e.brief().to_string()),
            (false, None) => (self.field.clone(), e.brief().to_string()),
        };
        RuleError::Program { field, message }
    }
}
