//! kanon's rule languages, a module each: structured [`template`]s, hand-written `program`s
//! (minijinja) and [`plaintext`] RFC 6902 operations. Each evaluates one rule in a `Scope` to
//! operations or a verdict, or fails with a [`RuleError`]; this module is the seam the
//! evaluation calls them through, in the order a rule's parts run. A new language is one more
//! module, a variant of `OverrideStep` and/or `ValidateStep` (yielded by the compiled rule's
//! `parts`), and its arms here.

pub mod plaintext;
pub(crate) mod program;
mod rule_program;
pub mod template;

pub use rule_program::RuleProgram;

use serde_json::Value;

use json_patch::PatchOperation;

use crate::diff::Changes;
use crate::evaluation::Scope;
use crate::rule::{RuleError, Verdict};
use plaintext::PlaintextOp;

/// One part of an override rule, in the language it is written in.
pub(crate) enum OverrideStep<'r> {
    /// Its template.
    Template(&'r RuleProgram),
    /// Its hand-written program.
    Program(&'r RuleProgram),
    /// Its plaintext operations, applied in one atomic step.
    Plaintext {
        /// The operations.
        ops: &'r [PatchOperation],
        /// The overriders they come from, for messages.
        sources: &'r [PlaintextOp],
    },
}

/// One part of a validate rule, in the language it is written in.
pub(crate) enum ValidateStep<'r> {
    /// Its condition template.
    Template(&'r RuleProgram),
    /// Its hand-written program.
    Program(&'r RuleProgram),
}

/// Runs one part of an override rule on `working` and applies its operations, each recorded in
/// `changes` before it applies: how many operations it made. On error `working` is unchanged
/// by this part.
pub(crate) async fn apply(
    step: OverrideStep<'_>,
    scope: &mut Scope<'_, '_>,
    working: &mut Value,
    changes: &mut Changes,
) -> Result<usize, RuleError> {
    let (rule, patch) = match step {
        OverrideStep::Template(rule) => (rule, template::patch(rule, scope, working).await?),
        OverrideStep::Program(rule) => (rule, program::patch(rule, scope, working).await?),
        OverrideStep::Plaintext { ops, sources } => {
            return apply_plaintext(ops, sources, working, changes);
        }
    };
    let mut ops = patch.0;
    let applied = ops.len();
    // A single operation (the usual template output) applied and recorded in one walk.
    if ops.len() == 1
        && let Some(op) = ops.pop()
        && let Err(op) = changes.apply_one(working, op)
    {
        ops.push(op);
    }
    ops.iter().for_each(|op| changes.before(op, working));
    plaintext::apply_all_owned(working, ops).map_err(|(i, e)| RuleError::Patch {
        field: rule.field.clone(),
        message: format!("operation {i}: {e}"),
    })?;
    Ok(applied)
}

/// Runs one part of a validate rule on `object`: its verdict.
pub(crate) async fn verdict(
    step: ValidateStep<'_>,
    scope: &mut Scope<'_, '_>,
    object: &Value,
) -> Result<Verdict, RuleError> {
    match step {
        ValidateStep::Template(rule) => template::verdict(rule, scope, object).await,
        ValidateStep::Program(rule) => program::verdict(rule, scope, object).await,
    }
}

/// Applies a rule's plaintext operations to `working` in one atomic step, each recorded in
/// `changes` before it applies: how many there are. On error `working` is unchanged.
fn apply_plaintext(
    ops: &[PatchOperation],
    sources: &[PlaintextOp],
    working: &mut Value,
    changes: &mut Changes,
) -> Result<usize, RuleError> {
    let applied = ops.len();
    // Copied only where it can go in one walk.
    if let [op] = ops
        && changes.saves_places()
        && changes.apply_one(working, op.clone()).is_ok()
    {
        return Ok(applied);
    }
    ops.iter().for_each(|op| changes.before(op, working));
    plaintext::apply_all(working, ops).map_err(|(i, message)| RuleError::Patch {
        field: sources.get(i).map_or_else(String::new, |p| p.field.clone()),
        message,
    })?;
    Ok(applied)
}
