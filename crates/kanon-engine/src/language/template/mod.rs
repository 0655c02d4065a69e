//! Structured templates (`overriders.template`, `validateRules[].template`): rendered once per
//! policy generation into a program ([`render`]), whose result is their meaning; run natively
//! where their native form can vouch for that result ([`native`]); a validate condition's
//! message rendered apart, on a denial only ([`message`]).

pub mod message;
pub mod native;
pub mod render;

use json_patch::Patch;
use serde_json::{Map, Value};

use crate::evaluation::Scope;
use crate::language::RuleProgram;
use crate::language::program;
use crate::program::{patch_from_output, verdict_from_output};
use crate::rule::{RuleError, Verdict};
use message::{ConditionMessage, condition_from_output};
use native::NativeOutcome;

/// What the native form of `rule` gives for `object` with the resolved `refs`, when it can
/// vouch for it.
fn native(rule: &RuleProgram, object: &Value, refs: &Map<String, Value>) -> Option<NativeOutcome> {
    rule.native
        .as_ref()
        .and_then(|native| native.run(object, refs, rule.program.limits()))
}

/// Runs an override template on `object`: its operations.
pub(crate) async fn patch(
    rule: &RuleProgram,
    scope: &mut Scope<'_, '_>,
    object: &Value,
) -> Result<Patch, RuleError> {
    let refs = scope.resolve(&rule.refs, object).await?;
    match native(rule, object, &refs) {
        Some(NativeOutcome::Patch(patch)) => Ok(patch),
        Some(NativeOutcome::Verdict(_)) => Err(RuleError::Defect {
            field: rule.field.clone(),
            message: "a condition cannot run as an override".to_string(),
        }),
        None => {
            let output = program::run(rule, scope, object, refs).await?;
            patch_from_output(output).map_err(|e| rule.error(&e))
        }
    }
}

/// Runs a validate template on `object`: its verdict.
pub(crate) async fn verdict(
    rule: &RuleProgram,
    scope: &mut Scope<'_, '_>,
    object: &Value,
) -> Result<Verdict, RuleError> {
    if let Some(message) = &rule.message {
        return condition(rule, message, scope, object).await;
    }
    // Every validate template is a condition, with a message; this is the program's way.
    let refs = scope.resolve(&rule.refs, object).await?;
    if native(rule, object, &refs).is_some() {
        return Err(RuleError::Defect {
            field: rule.field.clone(),
            message: "a template's native form answered for a program (a defect of kanon)"
                .to_string(),
        });
    }
    let output = program::run(rule, scope, object, refs).await?;
    verdict_from_output(output).map_err(|e| rule.error(&e))
}

/// Runs a validate condition: its check decides, then a denial renders the message, which
/// cannot change the verdict (see [`message`]).
async fn condition(
    rule: &RuleProgram,
    message: &ConditionMessage,
    scope: &mut Scope<'_, '_>,
    object: &Value,
) -> Result<Verdict, RuleError> {
    let refs = scope.resolve(&rule.refs, object).await?;
    let (verdict, kept) = match native(rule, object, &refs) {
        // The native form only borrows the references: they stay for the message.
        Some(NativeOutcome::Verdict(verdict)) => (verdict, Some(refs)),
        Some(NativeOutcome::Patch(_)) => {
            return Err(RuleError::Defect {
                field: rule.field.clone(),
                message: "an override template cannot run as a validation".to_string(),
            });
        }
        None => {
            // The program takes the references: a copy stays for the message only when it
            // reads variables.
            let kept = message.needs_context().then(|| refs.clone());
            let output = program::run(rule, scope, object, refs).await?;
            let verdict = condition_from_output(output).map_err(|e| rule.error(&e))?;
            (verdict, kept)
        }
    };
    let kept = kept.filter(|_| message.needs_context());
    if verdict.valid {
        return Ok(Verdict::pass());
    }
    let context = match kept {
        Some(refs) => {
            let (data, value) = message.variables(&refs, &verdict);
            // The item `data` was read from (the container, for a path through
            // `containers[*]`).
            let item = verdict.item.and_then(|i| {
                let (_, data_ref) = rule.refs.iter().find(|(name, _)| *name == "data")?;
                data_ref.item_at(object, scope.request.old_object.as_ref(), i)
            });
            let mut extra = vec![("data", data)];
            extra.extend(item.map(|item| ("item", item)));
            extra.extend(value.map(|value| ("value", value)));
            Some(crate::program::text_context(
                scope.variables(object, refs).await,
                extra,
            ))
        }
        None => None,
    };
    let rendered = message.render(context.as_ref());
    Ok(Verdict {
        valid: false,
        reason: rendered.text,
        more_reasons: Vec::new(),
        warnings: rendered.warning.into_iter().collect(),
        audit_annotations: Vec::new(),
        status: None,
    })
}
