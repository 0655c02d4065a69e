//! `overrideRules[].overriders.cel`: MutatingAdmissionPolicy's mutations, with its meanings.
//!
//! Match conditions decide whether the rule runs; then each mutation, in order, sees the object
//! as the mutations before it left it. A `JSONPatch` mutation gives a list of
//! `JSONPatch{op, path, from, value}`, applied as RFC 6902 operations; a patch that does not
//! apply is an error under the policy's failure policy.

use json_patch::{
    AddOperation, CopyOperation, MoveOperation, PatchOperation, RemoveOperation, ReplaceOperation,
    TestOperation,
};
use kanon_api::{CelMutation, PatchType};
use kanon_cel::Value;
use serde_json::Value as Json;

use super::compile::{Expect, Expression, Named, RuleEnv, Site};
use super::validate::{Inputs, failed, matches, out_of_budget};
use super::{CallError, Meter};
use crate::error::FieldError;
use crate::references::CompiledRef;
use crate::rule::RuleError;

/// A compiled `cel` overrider.
#[derive(Debug, Clone)]
pub(crate) struct CelOverrideRule {
    match_conditions: Vec<Named>,
    variables: Vec<Named>,
    mutations: Vec<Expression>,
    /// The kanon references, resolved before the rule runs.
    pub(crate) references: Vec<(String, CompiledRef)>,
}

/// Compiles a `cel` overrider at `at`.
pub(crate) fn compile(
    rule: &CelMutation,
    at: &str,
    site: Site,
    own_namespace: Option<&str>,
    errors: &mut Vec<FieldError>,
) -> Option<CelOverrideRule> {
    let before = errors.len();
    let mut env = RuleEnv::mutation(site);
    let references = env.references(&rule.references, at, own_namespace, errors);
    let variables = env.variables(&rule.variables, at, errors);
    let match_conditions = env.match_conditions(&rule.match_conditions, at, errors);
    if rule.mutations.is_empty() {
        errors.push(FieldError::new(
            format!("{at}.mutations"),
            "a cel overrider needs at least one mutation",
        ));
    }
    let mut mutations = Vec::with_capacity(rule.mutations.len());
    for (index, mutation) in rule.mutations.iter().enumerate() {
        let field = format!("{at}.mutations[{index}]");
        match mutation.patch_type {
            PatchType::JsonPatch => {
                if mutation.apply_configuration.is_some() {
                    errors.push(FieldError::new(
                        format!("{field}.applyConfiguration"),
                        "must not be set when patchType is JSONPatch",
                    ));
                }
                let Some(patch) = &mutation.json_patch else {
                    errors.push(FieldError::new(
                        format!("{field}.jsonPatch"),
                        "is required when patchType is JSONPatch",
                    ));
                    continue;
                };
                if let Some(expression) = env.compile(
                    &patch.expression,
                    &format!("{field}.jsonPatch.expression"),
                    Expect::Patches,
                    errors,
                ) {
                    mutations.push(expression);
                }
            }
            PatchType::ApplyConfiguration => errors.push(FieldError::new(
                format!("{field}.patchType"),
                "ApplyConfiguration mutations are not supported by kanon yet (they need Kubernetes' structured merge); write the change as a JSONPatch mutation",
            )),
        }
    }
    (errors.len() == before).then(|| CelOverrideRule {
        match_conditions,
        variables,
        mutations,
        references,
    })
}

/// Why a mutation's operations did not apply: which one failed, and the error.
#[derive(Debug)]
pub(crate) struct PatchFailure {
    /// The index of the failing operation.
    pub(crate) index: usize,
    /// Why.
    pub(crate) error: RuleError,
}

/// What a rule's mutations did when each runs whatever the ones before it did.
#[derive(Debug, Default)]
pub(crate) struct EachApplied {
    /// How many operations applied.
    pub(crate) applied: usize,
    /// The errors of the mutations that failed (or of the match conditions), in order.
    pub(crate) errors: Vec<RuleError>,
}

impl CelOverrideRule {
    /// Runs the rule's mutations on `working`, each seeing the object the ones before it left:
    /// `apply` applies one mutation's operations (recording them). How many operations there
    /// were; the first error stops the rule.
    pub(crate) fn apply(
        &self,
        inputs: Inputs<'_>,
        working: &mut Json,
        interrupted: &(dyn Fn() -> bool + Sync),
        apply: impl FnMut(&mut Json, Vec<PatchOperation>, &str) -> Result<(), PatchFailure>,
    ) -> Result<usize, RuleError> {
        let outcome = self.run(inputs, working, interrupted, true, apply);
        match outcome.errors.into_iter().next() {
            Some(error) => Err(error),
            None => Ok(outcome.applied),
        }
    }

    /// As [`CelOverrideRule::apply`], but a mutation that fails is left out and the next one
    /// runs (a MutatingAdmissionPolicy's meaning): every error is returned.
    pub(crate) fn apply_each(
        &self,
        inputs: Inputs<'_>,
        working: &mut Json,
        interrupted: &(dyn Fn() -> bool + Sync),
        apply: impl FnMut(&mut Json, Vec<PatchOperation>, &str) -> Result<(), PatchFailure>,
    ) -> EachApplied {
        self.run(inputs, working, interrupted, false, apply)
    }

    fn run(
        &self,
        inputs: Inputs<'_>,
        working: &mut Json,
        interrupted: &(dyn Fn() -> bool + Sync),
        stop_at_error: bool,
        mut apply: impl FnMut(&mut Json, Vec<PatchOperation>, &str) -> Result<(), PatchFailure>,
    ) -> EachApplied {
        let mut meter = Meter::new(interrupted);
        let mut outcome = EachApplied::default();
        {
            let mut activation = Inputs {
                object: &*working,
                ..inputs
            }
            .activation(&self.variables);
            match matches(&self.match_conditions, &mut activation, &mut meter) {
                Ok(true) => {}
                Ok(false) => return outcome,
                Err(error) => {
                    outcome.errors.push(error);
                    return outcome;
                }
            }
        }
        for mutation in &self.mutations {
            // The operations are owned JSON: the object's borrow ends before they apply.
            let operations = {
                let mut activation = Inputs {
                    object: &*working,
                    ..inputs
                }
                .activation(&self.variables);
                let program = mutation.program.clone();
                match meter.run(|budget| program.eval_with(&mut activation, budget)) {
                    Ok(value) => operations(&value).map_err(|message| failed(mutation, message)),
                    Err(CallError::OutOfBudget) => {
                        outcome.errors.push(out_of_budget(&mutation.field));
                        return outcome;
                    }
                    Err(CallError::Failed(error)) => Err(failed(mutation, error.to_string())),
                }
            };
            let result = operations.and_then(|operations| {
                let count = operations.len();
                let tests: Vec<bool> = operations
                    .iter()
                    .map(|op| matches!(op, PatchOperation::Test(_)))
                    .collect();
                match apply(working, operations, &mutation.field) {
                    Ok(()) => Ok(count),
                    // A `test` that does not hold means "do not apply this patch", not an
                    // error (kube-apiserver's MutatingAdmissionPolicy).
                    Err(failure) if tests.get(failure.index) == Some(&true) => Ok(0),
                    Err(failure) => Err(failure.error),
                }
            });
            match result {
                Ok(count) => outcome.applied += count,
                Err(error) => {
                    outcome.errors.push(error);
                    if stop_at_error {
                        return outcome;
                    }
                }
            }
        }
        outcome
    }
}

/// The RFC 6902 operations a mutation's value holds: a list of `JSONPatch{op, path, from,
/// value}`.
fn operations(value: &Value<'_>) -> Result<Vec<PatchOperation>, String> {
    let Value::List(items) = value else {
        return Err(format!(
            "expected a list of JSONPatch, got {}",
            value.type_of()
        ));
    };
    let mut operations = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        let Value::Object(patch) = &item else {
            return Err(format!(
                "item {index}: expected JSONPatch, got {}",
                item.type_of()
            ));
        };
        let text = |name: &str| -> Result<Option<String>, String> {
            match patch.fields.get(name) {
                None => Ok(None),
                Some(Value::String(text)) => Ok(Some(text.as_str().to_owned())),
                Some(other) => Err(format!(
                    "item {index}: `{name}` must be a string, got {}",
                    other.type_of()
                )),
            }
        };
        let op = text("op")?.ok_or_else(|| format!("item {index}: `op` is required"))?;
        let path = text("path")?.unwrap_or_default();
        let path = json_patch::jsonptr::PointerBuf::parse(&path)
            .map_err(|error| format!("item {index}: path {path:?}: {error}"))?;
        let value = || -> Result<Json, String> {
            match patch.fields.get("value") {
                Some(value) => value
                    .to_json()
                    .map_err(|error| format!("item {index}: value: {error}")),
                None => Err(format!("item {index}: `value` is required for op {op:?}")),
            }
        };
        let from = || -> Result<json_patch::jsonptr::PointerBuf, String> {
            let from = text("from")?
                .ok_or_else(|| format!("item {index}: `from` is required for op {op:?}"))?;
            json_patch::jsonptr::PointerBuf::parse(&from)
                .map_err(|error| format!("item {index}: from {from:?}: {error}"))
        };
        operations.push(match op.as_str() {
            "add" => PatchOperation::Add(AddOperation {
                path,
                value: value()?,
            }),
            "remove" => PatchOperation::Remove(RemoveOperation { path }),
            "replace" => PatchOperation::Replace(ReplaceOperation {
                path,
                value: value()?,
            }),
            "move" => PatchOperation::Move(MoveOperation {
                from: from()?,
                path,
            }),
            "copy" => PatchOperation::Copy(CopyOperation {
                from: from()?,
                path,
            }),
            "test" => PatchOperation::Test(TestOperation {
                path,
                value: value()?,
            }),
            other => return Err(format!("item {index}: unknown op {other:?}")),
        });
    }
    Ok(operations)
}
