//! `overrideRules[].overriders.cel`: MutatingAdmissionPolicy's mutations, with its meanings.
//!
//! Match conditions decide whether the rule runs; then each mutation, in order, sees the object
//! as the mutations before it left it. A `JSONPatch` mutation gives a list of
//! `JSONPatch{op, path, from, value}`, applied as RFC 6902 operations; a patch that does not
//! apply is an error under the policy's failure policy (a `test` that does not hold leaves the
//! patch out instead). An `ApplyConfiguration` mutation gives an `Object{...}`, merged into the
//! object by the kind's schema ([`crate::structured_merge`]).

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
    mutations: Vec<Mutation>,
    /// The kanon references, resolved before the rule runs.
    pub(crate) references: Vec<(String, CompiledRef)>,
}

#[derive(Debug, Clone)]
struct Mutation {
    patch_type: PatchType,
    expression: Expression,
    /// The operations of a JSONPatch expression that reads nothing (a list of constant
    /// patches), prepared when the policy compiles instead of on every request.
    prepared: Option<Vec<PatchOperation>>,
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
        let (written, other, name, expect) = match mutation.patch_type {
            PatchType::JsonPatch => (
                &mutation.json_patch,
                &mutation.apply_configuration,
                ("jsonPatch", "applyConfiguration", "JSONPatch"),
                Expect::Patches,
            ),
            PatchType::ApplyConfiguration => (
                &mutation.apply_configuration,
                &mutation.json_patch,
                ("applyConfiguration", "jsonPatch", "ApplyConfiguration"),
                Expect::ApplyConfiguration,
            ),
        };
        let (own, foreign, patch_type) = name;
        if other.is_some() {
            errors.push(FieldError::new(
                format!("{field}.{foreign}"),
                format!("must not be set when patchType is {patch_type}"),
            ));
        }
        let Some(written) = written else {
            errors.push(FieldError::new(
                format!("{field}.{own}"),
                format!("is required when patchType is {patch_type}"),
            ));
            continue;
        };
        if let Some(expression) = env.compile(
            &written.expression,
            &format!("{field}.{own}.expression"),
            expect,
            errors,
        ) {
            let prepared = match mutation.patch_type {
                PatchType::JsonPatch => expression
                    .program
                    .constant()
                    .and_then(|value| operations(value).ok()),
                PatchType::ApplyConfiguration => None,
            };
            mutations.push(Mutation {
                patch_type: mutation.patch_type,
                expression,
                prepared,
            });
        }
    }
    (errors.len() == before).then(|| CelOverrideRule {
        match_conditions,
        variables,
        mutations,
        references,
    })
}

/// What one mutation gives: RFC 6902 operations, or an apply configuration to merge.
#[derive(Debug)]
pub(crate) enum Change {
    Patch(Vec<PatchOperation>),
    Apply(Json),
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
        apply: impl FnMut(&mut Json, Change, &str) -> Result<(), PatchFailure>,
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
        apply: impl FnMut(&mut Json, Change, &str) -> Result<(), PatchFailure>,
    ) -> EachApplied {
        self.run(inputs, working, interrupted, false, apply)
    }

    fn run(
        &self,
        inputs: Inputs<'_>,
        working: &mut Json,
        interrupted: &(dyn Fn() -> bool + Sync),
        stop_at_error: bool,
        mut apply: impl FnMut(&mut Json, Change, &str) -> Result<(), PatchFailure>,
    ) -> EachApplied {
        let mut meter = Meter::new(interrupted);
        let mut outcome = EachApplied::default();
        if !self.match_conditions.is_empty() {
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
        for Mutation {
            patch_type,
            expression: mutation,
            prepared,
        } in &self.mutations
        {
            // The change is owned JSON: the object's borrow ends before it applies.
            let change = {
                let mut activation = Inputs {
                    object: &*working,
                    ..inputs
                }
                .activation(&self.variables);
                let program = &mutation.program;
                match meter.run(|budget| program.eval_with(&mut activation, budget)) {
                    Ok(value) => match patch_type {
                        // A prepared patch is evaluated all the same, for its cost.
                        PatchType::JsonPatch => match prepared {
                            Some(prepared) => Ok(Change::Patch(prepared.clone())),
                            None => operations(&value)
                                .map(Change::Patch)
                                .map_err(|message| failed(mutation, message)),
                        },
                        // kube-apiserver says these in its own words, not as the expression's.
                        PatchType::ApplyConfiguration => apply_configuration(&value)
                            .map(Change::Apply)
                            .map_err(|message| RuleError::Cel {
                                field: mutation.field.clone(),
                                message,
                            }),
                    },
                    Err(CallError::OutOfBudget) => {
                        outcome.errors.push(out_of_budget(&mutation.field));
                        return outcome;
                    }
                    Err(CallError::Failed(error)) => Err(failed(mutation, error.to_string())),
                }
            };
            let result = change.and_then(|change| {
                let (count, tests) = match &change {
                    Change::Patch(operations) => (
                        operations.len(),
                        operations
                            .iter()
                            .map(|op| matches!(op, PatchOperation::Test(_)))
                            .collect(),
                    ),
                    Change::Apply(_) => (1, Vec::new()),
                };
                match apply(working, change, &mutation.field) {
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

/// The apply configuration an `ApplyConfiguration` mutation's value holds: an `Object{...}`
/// whose nested objects are named after their field paths (`Object.spec.template`), as
/// kube-apiserver checks before merging.
fn apply_configuration(value: &Value<'_>) -> Result<Json, String> {
    let Value::Object(object) = value else {
        return Err(format!("expected Object, got {}", value.type_of()));
    };
    let mut mismatches = Vec::new();
    type_names(
        value,
        &mut vec![object.type_name.to_string()],
        &mut mismatches,
    );
    if !mismatches.is_empty() {
        return Err(format!("type mismatch: {}", mismatches.join("\n")));
    }
    value.to_json()
}

/// Every nested object whose type name is not its field path from the root `Object`.
fn type_names(value: &Value<'_>, path: &mut Vec<String>, mismatches: &mut Vec<String>) {
    match value {
        Value::Object(object) => {
            let expected = path.join(".");
            if *object.type_name != *expected {
                mismatches.push(format!(
                    "unexpected type name {:?}, expected {expected:?}, which matches field name path from root Object type",
                    &*object.type_name
                ));
            }
            for (name, field) in &object.fields {
                path.push(name.to_string());
                type_names(field, path, mismatches);
                path.pop();
            }
        }
        Value::List(items) => items
            .iter()
            .for_each(|item| type_names(&item, path, mismatches)),
        Value::Map(map) => map
            .entries()
            .iter()
            .for_each(|(_, item)| type_names(item, path, mismatches)),
        _ => {}
    }
}

/// Applies one mutation's change to `working`, each operation recorded in `changes` before it
/// applies; an apply configuration is merged by the working object's schema (from `lookup`'s
/// kinds, read only then) and applied as the operations from the object to the merge. `words`
/// prefixes a patch that does not apply (`JSON Patch: ` for an admission policy, as the
/// apiserver says).
pub(crate) fn apply_change(
    working: &mut Json,
    change: Change,
    field: &str,
    lookup: &dyn crate::lookup::Lookup,
    changes: &mut crate::diff::Changes,
    words: &str,
) -> Result<(), PatchFailure> {
    let operations = match change {
        Change::Patch(operations) => operations,
        Change::Apply(configuration) => {
            let failure = |message: String| PatchFailure {
                index: usize::MAX,
                error: RuleError::Patch {
                    field: field.to_owned(),
                    message,
                },
            };
            let kinds = crate::lookup::kinds_of(lookup);
            let Some((schema, root)) = kinds.as_ref().and_then(|kinds| object_type(kinds, working))
            else {
                return Err(failure(format!(
                    "Resource kind {}/{} not found: an apply configuration needs the kind's schema",
                    working
                        .get("apiVersion")
                        .and_then(Json::as_str)
                        .unwrap_or("?"),
                    working.get("kind").and_then(Json::as_str).unwrap_or("?"),
                )));
            };
            let merged = crate::structured_merge::apply(schema, root, working, &configuration)
                .map_err(|error| failure(format!("error applying patch: {error}")))?;
            json_patch::diff(working, &merged).0
        }
    };
    crate::language::apply_recorded(working, operations, changes).map_err(|(index, e)| {
        PatchFailure {
            index,
            error: RuleError::Patch {
                field: field.to_owned(),
                message: format!("{words}operation {index}: {e}"),
            },
        }
    })
}

/// The schema and root type of `object`'s kind, when `kinds` know it.
fn object_type<'k>(
    kinds: &'k kanon_schema::Kinds,
    object: &Json,
) -> Option<(&'k kanon_schema::Schema, &'k kanon_schema::Type)> {
    let text = |key: &str| object.get(key).and_then(Json::as_str);
    let known = kinds.kind(text("apiVersion")?, text("kind")?)?;
    Some((known.schema, known.schema.root_type(known.kind)?))
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
