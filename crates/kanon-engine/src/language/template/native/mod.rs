//! Structured templates executed natively.
//!
//! A structured template is rendered once per policy generation into a rule program, and that
//! program is its documented semantics (`kanon render` and the policy status show it). Running
//! the program on each request costs the program context, the interpreter and parsing its
//! output. Beside the program, compiling a template builds its native form ([`NativeRule`]),
//! which computes the same operations (or the same verdict) straight on the JSON object,
//! calling the very helper functions the program calls (`helpers`, `podspec`).
//!
//! The native form is a shortcut, never a second semantics: whenever its result could differ
//! from the program's it declines ([`NativeRule::run`] gives `None`) and the program runs. It
//! declines on anything the program would report as an error (a helper's error, a value of an
//! unexpected type, a structured `valueRef` for a label), on values only minijinja's number
//! coercion can compare (an integer against a float), on a `field` value holding a float its
//! output would not give back exactly, near the program's limits (output size, fuel, nesting
//! of the output). A condition's message is not part of either: it is rendered apart, after
//! the verdict (see [`super::message`]). `tests/native.rs` runs both on generated inputs and
//! requires the same operations, verdicts and errors.

mod condition;
mod containers;
mod fields;
mod maps;
mod ops;
mod patch;

use json_patch::Patch;
use serde_json::{Map, Value};

use crate::language::template::message::ConditionVerdict;
use crate::program::ProgramLimits;

pub use condition::NativeCondition;
pub(crate) use containers::ContainerEdit;
pub(crate) use fields::{FieldValue, SpecField};
pub(crate) use maps::{MapAt, MapEdit};
pub use patch::NativeOverride;

/// Most entries of a label, annotation or node selector map handled natively (each costs the
/// program fuel).
pub(super) const MAX_MAP_ENTRIES: usize = 10_000;
/// Most containers and init containers, together, handled natively (the program's loop costs
/// fuel per container).
pub(super) const MAX_CONTAINERS: usize = 128;
/// Most values a JSONPath `dataRef` may select for a native condition.
pub(super) const MAX_SELECTED: usize = 1_000;
/// Deepest nesting of a value in an operation handled natively: the program's output is
/// parsed back, and the parser refuses more than 128 levels.
pub(super) const MAX_DEPTH: usize = 100;
/// Room for what the program writes besides the operations (whitespace, brackets).
pub(super) const OUTPUT_SLACK: usize = 1024;

/// The native form of a structured template.
#[derive(Clone, Debug)]
pub enum NativeRule {
    /// An override template.
    Override(NativeOverride),
    /// A validate condition.
    Condition(NativeCondition),
}

/// What a native run produced: what the program's output reads as.
#[derive(Clone, Debug, PartialEq)]
pub enum NativeOutcome {
    /// The operations of an override template.
    Patch(Patch),
    /// The verdict of a condition.
    Verdict(ConditionVerdict),
}

impl NativeRule {
    /// Runs the template on `object` with the resolved references (`refs.value`,
    /// `refs.data`), within the limits of its program. `None`: the native form cannot vouch
    /// for the result here, run the program.
    pub fn run(
        &self,
        object: &Value,
        refs: &Map<String, Value>,
        limits: &ProgramLimits,
    ) -> Option<NativeOutcome> {
        match self {
            NativeRule::Override(o) => o.run(object, refs, limits).map(NativeOutcome::Patch),
            NativeRule::Condition(c) => c.run(refs).map(NativeOutcome::Verdict),
        }
    }
}
