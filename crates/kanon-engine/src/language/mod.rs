//! kanon's rule languages, a module each: structured [`template`]s, hand-written `program`s
//! (minijinja) and [`plaintext`] RFC 6902 operations. Each evaluates one rule in a `Scope` to
//! operations or a verdict, or fails with a [`RuleError`]; this module is the seam the
//! evaluation calls them through, in the order a rule's parts run. A new language is one more
//! module, a variant of `OverrideStep` and/or `ValidateStep` (yielded by the compiled rule's
//! `parts`), and its arms here.

pub(crate) mod cel;
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
    /// Its CEL mutations, each applied before the next runs.
    Cel(&'r cel::mutate::CelOverrideRule),
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
    /// Its CEL validations.
    Cel(&'r cel::validate::CelValidateRule),
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
        OverrideStep::Cel(rule) => return apply_cel(rule, scope, working, changes).await,
    };
    let applied = patch.0.len();
    apply_recorded(working, patch.0, changes).map_err(|(i, e)| RuleError::Patch {
        field: rule.field.clone(),
        message: format!("operation {i}: {e}"),
    })?;
    Ok(applied)
}

/// Applies `ops` to `working` in one atomic step, each recorded in `changes` before it
/// applies; a single operation (the usual one) is applied and recorded in one walk. On error
/// `working` is unchanged and the error names the failing operation's index.
pub(crate) fn apply_recorded(
    working: &mut Value,
    mut ops: Vec<PatchOperation>,
    changes: &mut Changes,
) -> Result<(), (usize, String)> {
    if ops.len() == 1
        && let Some(op) = ops.pop()
        && let Err(op) = changes.apply_one(working, op)
    {
        ops.push(op);
    }
    if ops.is_empty() {
        return Ok(());
    }
    ops.iter().for_each(|op| changes.before(op, working));
    plaintext::apply_all_owned(working, ops)
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
        ValidateStep::Cel(rule) => cel_verdict(rule, scope, object).await,
    }
}

/// What a CEL rule reads besides the object: kube-apiserver's variables, from the request.
/// `object` is null on DELETE and `oldObject` on CREATE, as in a ValidatingAdmissionPolicy.
struct CelData {
    /// Shared with the namespace cache, not copied per rule.
    namespace_object: Option<std::sync::Arc<Value>>,
    references: Value,
}

/// The rule's data: its namespace only when one of its expressions names `namespaceObject`
/// (else the variable is null, which nothing reads).
async fn cel_data(
    scope: &mut Scope<'_, '_>,
    references: &[(String, crate::references::CompiledRef)],
    reads_namespace: bool,
    object: &Value,
) -> Result<CelData, RuleError> {
    let namespace_object = if reads_namespace {
        scope.documents.namespace_object().await
    } else {
        None
    };
    Ok(CelData {
        namespace_object,
        references: Value::Object(scope.resolve(references, object).await?),
    })
}

fn cel_inputs<'a>(
    request: &'a crate::request::Request,
    data: &'a CelData,
    object: &'a Value,
) -> cel::validate::Inputs<'a> {
    const NULL: &Value = &Value::Null;
    let object = if request.operation == kanon_api::Operation::Delete {
        NULL
    } else {
        object
    };
    cel::validate::Inputs {
        object,
        old_object: request.old_object.as_ref().unwrap_or(NULL),
        request: &request.info,
        namespace_object: data.namespace_object.as_deref().unwrap_or(NULL),
        fifth: &data.references,
    }
}

async fn cel_verdict(
    rule: &cel::validate::CelValidateRule,
    scope: &mut Scope<'_, '_>,
    object: &Value,
) -> Result<Verdict, RuleError> {
    let data = cel_data(scope, &rule.references, rule.reads_namespace, object).await?;
    let evaluation = scope.evaluation;
    let interrupted = move || evaluation.deadline_passed();
    let inputs = cel_inputs(scope.request, &data, object);
    let outcome = rule
        .evaluate(inputs, &mut scope.budget.meter(&interrupted))
        .map_err(|error| on_delete(error, scope.request))?;
    let mut failures = outcome.failures.into_iter();
    Ok(match failures.next() {
        None => Verdict {
            audit_annotations: outcome.audit_annotations,
            ..Verdict::pass()
        },
        Some((message, reason)) => Verdict {
            valid: false,
            reason: message,
            more_reasons: failures.map(|(message, _)| message).collect(),
            warnings: Vec::new(),
            audit_annotations: outcome.audit_annotations,
            status: Some(reason),
        },
    })
}

/// A CEL error met while judging a DELETE, whose `object` is null, says so: `no such key: spec`
/// alone does not tell a policy author that the rule read the object a DELETE does not have
/// (kube-apiserver's words stay first, as a VAP's would read).
fn on_delete(error: RuleError, request: &crate::request::Request) -> RuleError {
    match error {
        RuleError::Cel { field, message }
            if request.operation == kanon_api::Operation::Delete
                && message.contains("no such key") =>
        {
            RuleError::Cel {
                field,
                message: format!(
                    "{message} (the request is a DELETE: `object` is null and the object being deleted is `oldObject`; guard the rule with request.operation != 'DELETE', or leave DELETE out of its targetOperations)"
                ),
            }
        }
        other => other,
    }
}

/// Runs a rule's CEL mutations on `working`, each recorded in `changes` before it applies:
/// how many operations they made. As in a MutatingAdmissionPolicy (and in the one `kanon
/// convert` makes of the rule), a mutation that fails is left out and the ones after it still
/// run; the rule then fails with the first error, under the policy's failure policy, keeping
/// what the others did. Between mutations a built-in object is written back as its Go type
/// writes it, as the apiserver does between a MutatingAdmissionPolicy's mutations.
async fn apply_cel(
    rule: &cel::mutate::CelOverrideRule,
    scope: &mut Scope<'_, '_>,
    working: &mut Value,
    changes: &mut Changes,
) -> Result<usize, RuleError> {
    let data = cel_data(scope, &rule.references, rule.reads_namespace, working).await?;
    let evaluation = scope.evaluation;
    let interrupted = move || evaluation.deadline_passed();
    let (request, lookup) = (scope.request, scope.evaluation.lookup());
    let inputs = cel_inputs(request, &data, &Value::Null);
    let mut meter = scope.budget.meter(&interrupted);
    let outcome = rule.apply_each(inputs, working, &mut meter, |working, change, field| {
        cel::mutate::apply_change(working, change, field, request, lookup, changes)
    });
    match outcome.errors.into_iter().next() {
        Some(error) => Err(error),
        None => Ok(outcome.applied),
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
