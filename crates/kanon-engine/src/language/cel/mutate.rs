//! `overrideRules[].overriders.cel`: MutatingAdmissionPolicy's mutations, with its meanings.
//!
//! Match conditions decide whether the rule runs; then each mutation, in order, sees the object
//! as the mutations before it left it. A `JSONPatch` mutation gives a list of
//! `JSONPatch{op, path, from, value}`, applied as kube-apiserver applies a
//! MutatingAdmissionPolicy's ([`crate::admission_policy::patch`]: its patch library's meanings
//! and words, not RFC 6902's to the letter), so that a mutation means the same in kanon's kinds
//! and in a MAP; a built-in object left with a field its kind does not declare is refused as
//! the apiserver's strict decoding refuses it. A patch that does not apply is an error under the
//! policy's failure policy (a `test` that does not hold leaves the patch out instead; in a MAP
//! the strict decoding error fails the whole request, as in the apiserver). An
//! `ApplyConfiguration` mutation gives an `Object{...}`, merged into the object by the kind's
//! schema ([`super::apply_configuration`]).

use json_patch::{AddOperation, PatchOperation, ReplaceOperation};
use kanon_api::{CelMutation, PatchType};
use kanon_cel::Value;
use serde_json::Value as Json;

use super::apply_configuration::{Configuration, Merged, PreparedApply, apply_configuration};
use super::compile::{Expect, Expression, Named, RuleEnv, Site};
use super::decoded::{strictly_decoded, value_at, written_back};
use super::validate::{Inputs, failed, matches, out_of_budget};
use super::{CallError, Meter};
use crate::admission_policy::patch::{self, Refusal, WrittenOperation};
use crate::error::FieldError;
use crate::pointer::label_or_annotation;
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
    /// Whether an expression names `namespaceObject` (else the namespace is not read).
    pub(crate) reads_namespace: bool,
    /// What its expressions read of `object` and `oldObject`, and where its constant patches
    /// write.
    pub(crate) object_read: crate::projection::Projection,
}

#[derive(Debug, Clone)]
struct Mutation {
    patch_type: PatchType,
    expression: Expression,
    /// The change a JSONPatch expression that reads nothing gives (a list of constant
    /// patches), prepared when the policy compiles instead of on every request.
    prepared: Option<Vec<WrittenOperation>>,
    /// The configuration an `ApplyConfiguration` expression that reads nothing gives, checked
    /// and made JSON once, when the policy compiles.
    prepared_apply: Option<PreparedApply>,
    /// The built-in kind (its root type's address) the prepared patch was found to write no
    /// undeclared field into, at its paths as written, or the prepared configuration was
    /// checked against: checked on the first request of that kind, not on every one.
    clean_for: std::sync::OnceLock<usize>,
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
            let constant = expression.program.constant();
            let (prepared, prepared_apply) = match mutation.patch_type {
                PatchType::JsonPatch => (
                    constant.and_then(|value| written_operations(value).ok()),
                    None,
                ),
                PatchType::ApplyConfiguration => (
                    None,
                    constant
                        .and_then(|value| apply_configuration(value).ok())
                        .map(PreparedApply::new),
                ),
            };
            mutations.push(Mutation {
                patch_type: mutation.patch_type,
                expression,
                prepared,
                prepared_apply,
                clean_for: std::sync::OnceLock::new(),
            });
        }
    }
    let mut object_read = env.object_read();
    // A constant patch writes where it says: kept whole, so that writing there needs nothing
    // the reading skipped (any other write is checked as it applies, `diff::Changes`).
    for operation in mutations.iter().flat_map(|m| m.prepared.iter().flatten()) {
        for path in std::iter::once(&operation.path).chain(&operation.from) {
            match json_patch::jsonptr::PointerBuf::parse(path.as_str()) {
                Ok(pointer) => object_read.add_pointer(&pointer),
                Err(_) => object_read = crate::projection::Projection::whole(),
            }
        }
    }
    (errors.len() == before).then(|| CelOverrideRule {
        match_conditions,
        variables,
        mutations,
        references,
        reads_namespace: env.reads_namespace(),
        object_read,
    })
}

/// What one mutation gives: a JSON patch as written (borrowed when prepared, with the record
/// of the kind it was found clean for), or an apply configuration to merge.
#[derive(Debug)]
pub(crate) enum Change<'m> {
    Written(
        std::borrow::Cow<'m, [WrittenOperation]>,
        Option<&'m std::sync::OnceLock<usize>>,
    ),
    /// An apply configuration to merge.
    Apply(Configuration<'m>),
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
    /// `apply` applies one mutation's change (recording it) and says how many operations
    /// applied. A mutation that fails is left out and the next one runs (a
    /// MutatingAdmissionPolicy's meaning, which kanon's `cel` overriders share): every error is
    /// returned, with how many operations applied in all.
    pub(crate) fn apply_each(
        &self,
        inputs: Inputs<'_>,
        working: &mut Json,
        meter: &mut Meter<'_>,
        mut apply: impl FnMut(&mut Json, Change<'_>, &str) -> Result<usize, RuleError>,
    ) -> EachApplied {
        let mut outcome = EachApplied::default();
        if !self.match_conditions.is_empty() {
            let mut activation = Inputs {
                object: &*working,
                ..inputs
            }
            .activation(&self.variables);
            match matches(
                &self.match_conditions,
                &mut activation,
                &mut meter.for_conditions(),
            ) {
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
            prepared_apply,
            clean_for,
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
                            Some(prepared) => Ok(Change::Written(
                                std::borrow::Cow::Borrowed(prepared),
                                Some(clean_for),
                            )),
                            None => written_operations(&value)
                                .map(|written| Change::Written(written.into(), None))
                                .map_err(|message| failed(mutation, message)),
                        },
                        // kube-apiserver says these in its own words, not as the expression's.
                        PatchType::ApplyConfiguration => match prepared_apply {
                            Some(prepared) => {
                                Ok(Change::Apply(Configuration::Prepared(prepared, clean_for)))
                            }
                            None => apply_configuration(&value)
                                .map(|json| Change::Apply(Configuration::Computed(json))),
                        }
                        .map_err(|message| RuleError::Cel {
                            field: mutation.field.clone(),
                            message,
                        }),
                    },
                    Err(CallError::Failed(error)) => Err(failed(mutation, error.to_string())),
                    Err(spent) => {
                        outcome.errors.push(out_of_budget(&mutation.field, spent));
                        return outcome;
                    }
                }
            };
            let result = change.and_then(|change| apply(working, change, &mutation.field));
            match result {
                Ok(count) => outcome.applied += count,
                Err(error) => outcome.errors.push(error),
            }
        }
        outcome
    }
}

/// Applies one mutation's change to `working`, each operation recorded in `changes` before it
/// applies: how many operations applied (none when a `test` did not hold, which leaves the
/// patch out). A MutatingAdmissionPolicy's patch is applied as kube-apiserver applies it, and a
/// built-in object it leaves with fields its kind does not declare, or with a value its Go type
/// cannot hold, fails as the apiserver's decoding fails it. An apply configuration is merged by
/// the working object's schema (from `lookup`'s kinds, read only then) and applied as the
/// operations from the object to the merge.
///
/// Then, as the apiserver decodes the object into its Go type and writes it back before the next
/// mutation, what the change wrote is written back as Go writes it ([`crate::typed`]): an
/// emptied `omitempty` field is gone; and the kind's defaulting runs over the whole object, as
/// the apiserver runs it after each mutation (a `replicas` removed is 1 again). A `test` that
/// does not hold leaves the patch out but the object is defaulted all the same.
pub(crate) fn apply_change(
    working: &mut Json,
    change: Change<'_>,
    field: &str,
    request: &crate::request::Request,
    lookup: &dyn crate::lookup::Lookup,
    changes: &mut crate::diff::Changes,
) -> Result<usize, RuleError> {
    let applied = apply_patch(working, change, field, request, lookup, changes)?;
    if request.defaults_objects() {
        // An object defaulting left as it was stays so when only its labels or annotations
        // changed since (by this mutation or any other policy's), unless the kind's defaulting
        // reads them: one walk of the object per review, not one per mutation, and none when
        // every mutation writes labels (an object read in part is then never read whole).
        let unread = || {
            request
                .typed()
                .is_some_and(|typed| !typed.defaulting_reads_metadata())
        };
        if changes.settled_but_for_labels() && unread() {
            changes.mark_settled();
            return Ok(applied);
        }
        // Defaulting reads the whole object: one read in part is read whole first.
        if !changes.read_whole() {
            return Ok(applied);
        }
        let mut defaulted = working.clone();
        request.default_object(&mut defaulted);
        let operations = crate::diff::diff(working, &defaulted).0;
        if !operations.is_empty() {
            crate::language::apply_recorded(working, operations, changes).map_err(
                |(_, message)| RuleError::Patch {
                    field: field.to_owned(),
                    message: format!("defaulting the object: {message}"),
                },
            )?;
        }
        changes.mark_settled();
    }
    Ok(applied)
}

/// [`apply_change`] up to the defaulting: how many operations applied.
fn apply_patch(
    working: &mut Json,
    change: Change<'_>,
    field: &str,
    request: &crate::request::Request,
    lookup: &dyn crate::lookup::Lookup,
    changes: &mut crate::diff::Changes,
) -> Result<usize, RuleError> {
    let failure = |message: String| RuleError::Patch {
        field: field.to_owned(),
        message,
    };
    if !within_reading(working, &change, request, changes) {
        return Ok(0);
    }
    let (operations, strict) = match change {
        Change::Written(written, clean_for) => {
            // The usual single `add` or `replace` applied in one walk where RFC 6902 applies it
            // (meaning there what the apiserver's library means), then checked.
            if let [only] = &*written
                && let Some((pointer, value)) = only.rfc_target()
            {
                let (path, copy) = (pointer.clone(), value.clone());
                let operation = if only.op == "add" {
                    PatchOperation::Add(AddOperation { path, value: copy })
                } else {
                    PatchOperation::Replace(ReplaceOperation { path, value: copy })
                };
                if changes.apply_one(working, operation).is_ok() {
                    strictly_decoded(
                        std::iter::once((&*pointer, value)),
                        &written,
                        clean_for,
                        field,
                        request,
                    )?;
                    // A string now at one label or annotation is written back as it is
                    // (what `written_back` finds there, known without looking).
                    if !(value.is_string() && label_or_annotation(&pointer)) {
                        written_back(working, [pointer.as_ref()], request, changes, field)?;
                    }
                    return Ok(1);
                }
            }
            match patch::resolve(working, &written) {
                Ok(operations) => (operations, Some((written, clean_for))),
                Err(Refusal::TestFailed) => return Ok(0),
                Err(Refusal::Panics(message)) => {
                    return Err(RuleError::Unanswered {
                        field: field.to_owned(),
                        message,
                    });
                }
                Err(Refusal::Error(message)) => {
                    return Err(failure(format!("JSON Patch: {message}")));
                }
            }
        }
        Change::Apply(configuration) => {
            match super::apply_configuration::merge(
                working,
                &configuration,
                request,
                lookup,
                changes,
                field,
            )? {
                Merged::Applied(count) => return Ok(count),
                Merged::Operations(operations) => (operations, None),
            }
        }
    };
    let count = operations.len();
    // Where the operations reached, collected once before they apply: the places they wrote a
    // value at (`true`; the apiserver decodes what lies there once the whole patch has applied,
    // so a value a later operation replaced is never decoded), and, for a kind with Go facts,
    // every place to write back afterwards (removals and a move's source too).
    let mut touched: Vec<(json_patch::jsonptr::PointerBuf, bool)> = Vec::new();
    if strict.is_some() || request.typed().is_some() {
        for operation in &operations {
            match operation {
                PatchOperation::Add(op) => touched.push((op.path.clone(), true)),
                PatchOperation::Replace(op) => touched.push((op.path.clone(), true)),
                PatchOperation::Remove(op) => touched.push((op.path.clone(), false)),
                PatchOperation::Copy(op) => touched.push((op.path.clone(), false)),
                PatchOperation::Move(op) => {
                    touched.push((op.path.clone(), false));
                    touched.push((op.from.clone(), false));
                }
                PatchOperation::Test(_) => {}
            }
        }
    }
    crate::language::apply_recorded(working, operations, changes)
        .map_err(|(index, e)| failure(format!("JSON Patch: operation {index}: {e}")))?;
    if let Some((written, clean_for)) = strict {
        // A path a later operation moved (an item removed before it) is checked by the
        // nearest field or list that holds it, whole.
        let finals: Vec<(&json_patch::jsonptr::Pointer, &Json)> = touched
            .iter()
            .filter(|(_, writes)| *writes)
            .filter_map(|(path, _)| {
                let mut at: &json_patch::jsonptr::Pointer = path.as_ref();
                loop {
                    if let Some(value) = value_at(working, at) {
                        return Some((at, value));
                    }
                    at = at.parent()?;
                }
            })
            .collect();
        // A place found above a path an operation named is checked whole: it must have been
        // decoded whole.
        if !finals.iter().all(|(at, _)| changes.reaches(at)) {
            return Ok(count);
        }
        strictly_decoded(finals.iter().copied(), &written, clean_for, field, request)?;
    }
    written_back(
        working,
        touched.iter().map(|(path, _)| path.as_ref()),
        request,
        changes,
        field,
    )?;
    Ok(count)
}

/// Whether `change` reaches only what the object's reading decoded whole (always, for an object
/// read whole), as far as can be told before it applies: the places its operations name, or
/// the fields its configuration merges into (a merge reads what lies there). When not, the
/// changes are marked beyond the reading, and the change need not apply.
fn within_reading(
    working: &Json,
    change: &Change<'_>,
    request: &crate::request::Request,
    changes: &mut crate::diff::Changes,
) -> bool {
    let Some(projection) = changes.projection() else {
        return true;
    };
    let covered = match change {
        // A prepared patch's places are kept whole in every projection made for its policy
        // (`CelOverrideRule::object_read`); `Changes` checks them again as they apply.
        Change::Written(std::borrow::Cow::Borrowed(_), _) => true,
        Change::Written(written, _) => written.iter().all(|operation| {
            std::iter::once(&operation.path)
                .chain(&operation.from)
                .all(|path| {
                    json_patch::jsonptr::Pointer::parse(path.as_str())
                        .is_ok_and(|pointer| projection.covers_pointer(pointer))
                })
        }),
        // An object not decoded by the apiserver is merged and checked whole.
        Change::Apply(configuration) => {
            request.arrived_defaulted()
                && projection.covers_configuration(configuration.json(), working)
        }
    };
    covered || !changes.read_whole()
}

/// The `JSONPatch{op, path, from, value}` items a mutation's value holds, as written.
fn written_operations(value: &Value<'_>) -> Result<Vec<WrittenOperation>, String> {
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
        let text = |name: &str| -> Result<String, String> {
            match patch.fields.get(name) {
                None => Ok(String::new()),
                Some(Value::String(text)) => Ok(text.as_str().to_owned()),
                Some(other) => Err(format!(
                    "item {index}: `{name}` must be a string, got {}",
                    other.type_of()
                )),
            }
        };
        let value = match patch.fields.get("value") {
            Some(value) => Some(
                value
                    .to_json()
                    .map_err(|error| format!("item {index}: value: {error}"))?,
            ),
            None => None,
        };
        operations.push(WrittenOperation {
            op: text("op")?,
            path: text("path")?,
            from: Some(text("from")?).filter(|from| !from.is_empty()),
            value,
        });
    }
    Ok(operations)
}
