//! `validateRules[].cel`: ValidatingAdmissionPolicy's validations, with its meanings.
//!
//! Match conditions run first (one false: the rule is skipped; one failing and none false: an
//! error under the policy's failure policy); then every validation; then the audit annotations.
//! A validation that is false denies with its message: `messageExpression` if it gives a
//! non-empty single line, else `message`, else `failed expression: <expression>`, as
//! kube-apiserver words it. One that fails to evaluate is an error (`expression '<expression>'
//! resulted in error: <cause>`) unless another validation already denies.

use kanon_api::{CelValidation, ValidationReason};
use kanon_cel::Value;
use serde_json::Value as Json;

use super::activation::RuleActivation;
use super::compile::{Expect, Expression, Named, RuleEnv, Site};
use super::{CallError, MESSAGE_LIMIT, Meter};
use crate::error::FieldError;
use crate::references::CompiledRef;
use crate::rule::RuleError;

/// A compiled `cel` validate rule.
#[derive(Debug, Clone)]
pub(crate) struct CelValidateRule {
    /// `spec.validateRules[N].cel`.
    pub(crate) field: String,
    match_conditions: Vec<Named>,
    variables: Vec<Named>,
    validations: Vec<CompiledValidation>,
    audit_annotations: Vec<(String, Expression)>,
    /// The kanon references, resolved before the rule runs.
    pub(crate) references: Vec<(String, CompiledRef)>,
    /// Whether an expression names `namespaceObject` (else the namespace is not read).
    pub(crate) reads_namespace: bool,
    /// What its expressions read of `object` and `oldObject`.
    pub(crate) object_read: crate::projection::Projection,
}

#[derive(Debug, Clone)]
struct CompiledValidation {
    expression: Expression,
    message: Option<String>,
    message_expression: Option<Expression>,
    reason: ValidationReason,
}

/// What the request's data are, for one rule: read in place.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Inputs<'a> {
    pub(crate) object: &'a Json,
    pub(crate) old_object: &'a Json,
    pub(crate) request: &'a Json,
    pub(crate) namespace_object: &'a Json,
    /// `references` in a kanon rule, `params` in an admission policy.
    pub(crate) fifth: &'a Json,
}

impl<'a> Inputs<'a> {
    pub(crate) fn activation<'v>(&self, variables: &'v [Named]) -> RuleActivation<'v, 'a> {
        RuleActivation::new(
            [
                Value::from_json(self.object),
                Value::from_json(self.old_object),
                Value::from_json(self.request),
                Value::from_json(self.namespace_object),
                Value::from_json(self.fifth),
            ],
            variables,
        )
    }
}

/// The outcome of one rule on one request.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct CelVerdict {
    /// A match condition was false: the rule did not run.
    pub(crate) skipped: bool,
    /// The validations that did not hold: their messages and reasons, in order.
    pub(crate) failures: Vec<(String, ValidationReason)>,
    /// Audit annotations: key and value.
    pub(crate) audit_annotations: Vec<(String, String)>,
}

/// Compiles a `cel` validate rule at `at` (`spec.validateRules[N].cel`).
pub(crate) fn compile(
    rule: &CelValidation,
    at: &str,
    site: Site,
    own_namespace: Option<&str>,
    errors: &mut Vec<FieldError>,
) -> Option<CelValidateRule> {
    let before = errors.len();
    let mut env = RuleEnv::validation(site);
    let references = env.references(&rule.references, at, own_namespace, errors);
    let variables = env.variables(&rule.variables, at, errors);
    let match_conditions = env.match_conditions(&rule.match_conditions, at, errors);
    if rule.validations.is_empty() && rule.audit_annotations.is_empty() {
        errors.push(FieldError::new(
            format!("{at}.validations"),
            "a cel rule needs at least one validation or audit annotation",
        ));
    }
    let mut validations = Vec::with_capacity(rule.validations.len());
    for (index, validation) in rule.validations.iter().enumerate() {
        let field = format!("{at}.validations[{index}]");
        let expression = env.compile(
            &validation.expression,
            &format!("{field}.expression"),
            Expect::Bool,
            errors,
        );
        let message_expression = validation.message_expression.as_ref().and_then(|source| {
            env.compile(
                source,
                &format!("{field}.messageExpression"),
                Expect::String,
                errors,
            )
        });
        if let Some(message) = &validation.message
            && message.contains('\n')
        {
            errors.push(FieldError::new(
                format!("{field}.message"),
                "a message must be a single line",
            ));
        }
        if let Some(expression) = expression {
            validations.push(CompiledValidation {
                expression,
                message: validation.message.clone().filter(|m| !m.trim().is_empty()),
                message_expression,
                reason: validation.reason.unwrap_or_default(),
            });
        }
    }
    let mut audit_annotations = Vec::with_capacity(rule.audit_annotations.len());
    for (index, annotation) in rule.audit_annotations.iter().enumerate() {
        let field = format!("{at}.auditAnnotations[{index}]");
        if !is_annotation_key(&annotation.key) {
            errors.push(FieldError::new(
                format!("{field}.key"),
                format!(
                    "`{}` is not a valid key: lowercase letters, digits, `-`, `_` and `.`, at most 63 characters",
                    annotation.key
                ),
            ));
        }
        if rule.audit_annotations[..index]
            .iter()
            .any(|a| a.key == annotation.key)
        {
            errors.push(FieldError::new(
                format!("{field}.key"),
                format!("audit annotation `{}` is declared twice", annotation.key),
            ));
        }
        if let Some(expression) = env.compile(
            &annotation.value_expression,
            &format!("{field}.valueExpression"),
            Expect::StringOrNull,
            errors,
        ) {
            audit_annotations.push((annotation.key.clone(), expression));
        }
    }
    (errors.len() == before).then(|| CelValidateRule {
        field: at.to_owned(),
        match_conditions,
        variables,
        validations,
        audit_annotations,
        references,
        reads_namespace: env.reads_namespace(),
        object_read: env.object_read(),
    })
}

/// What one validation found, as kube-apiserver's decisions say it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Check {
    /// It holds.
    Holds,
    /// It does not: the message and the reason.
    Fails(String, ValidationReason),
    /// It could not be evaluated.
    Error(RuleError),
}

/// Every validation's and audit annotation's outcome on one request, in order.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Checked {
    /// A match condition was false: nothing ran.
    pub(crate) skipped: bool,
    /// One per validation.
    pub(crate) checks: Vec<Check>,
    /// One per audit annotation: its key and its value (`None`: null or empty, left out).
    pub(crate) annotations: Vec<(String, Result<Option<String>, RuleError>)>,
}

impl CelValidateRule {
    /// Runs the rule on one request with kanon's meaning: the first validation that does not
    /// hold denies; one that cannot be evaluated is an error unless another denies.
    pub(crate) fn evaluate(
        &self,
        inputs: Inputs<'_>,
        meter: &mut Meter<'_>,
    ) -> Result<CelVerdict, RuleError> {
        let checked = self.check(inputs, meter)?;
        let mut verdict = CelVerdict {
            skipped: checked.skipped,
            ..CelVerdict::default()
        };
        let mut first_error = None;
        for check in checked.checks {
            match check {
                Check::Holds => {}
                Check::Fails(message, reason) => verdict.failures.push((message, reason)),
                Check::Error(error) => {
                    first_error.get_or_insert(error);
                }
            }
        }
        if verdict.failures.is_empty()
            && let Some(error) = first_error
        {
            return Err(error);
        }
        for (key, value) in checked.annotations {
            if let Some(value) = value? {
                verdict.audit_annotations.push((key, value));
            }
        }
        Ok(verdict)
    }

    /// Runs the rule on one request and says what each validation and audit annotation
    /// found, drawing on `meter` (the policy's budget on this request). Errors: a match
    /// condition that could not be evaluated (and none false), or the budget spent (no further
    /// expression runs), as kube-apiserver gives them.
    pub(crate) fn check(
        &self,
        inputs: Inputs<'_>,
        meter: &mut Meter<'_>,
    ) -> Result<Checked, RuleError> {
        let mut activation = inputs.activation(&self.variables);
        if !matches(
            &self.match_conditions,
            &mut activation,
            &mut meter.for_conditions(),
        )? {
            return Ok(Checked {
                skipped: true,
                ..Checked::default()
            });
        }
        let mut checked = Checked::default();
        for validation in &self.validations {
            let program = &validation.expression.program;
            let check = match meter.run(|budget| program.eval_with(&mut activation, budget)) {
                Ok(Value::Bool(true)) => Check::Holds,
                Ok(Value::Bool(false)) => {
                    let message = self.message(validation, &mut activation, meter);
                    Check::Fails(message, validation.reason)
                }
                Ok(other) => Check::Error(failed(
                    &validation.expression,
                    format!("expected a bool, got {}", other.type_of()),
                )),
                Err(CallError::Failed(error)) => {
                    Check::Error(failed(&validation.expression, error.to_string()))
                }
                Err(spent) => return Err(out_of_budget(&self.field, spent)),
            };
            checked.checks.push(check);
        }
        for (key, expression) in &self.audit_annotations {
            let program = &expression.program;
            let value = match meter.run(|budget| program.eval_with(&mut activation, budget)) {
                Ok(Value::String(text)) => {
                    let text = text.as_str().trim();
                    Ok((!text.is_empty()).then(|| text.to_owned()))
                }
                Ok(Value::Null) => Ok(None),
                Ok(other) => Err(failed(
                    expression,
                    format!("expected a string or null, got {}", other.type_of()),
                )),
                Err(CallError::Failed(error)) => Err(failed(expression, error.to_string())),
                Err(spent) => return Err(out_of_budget(&self.field, spent)),
            };
            checked.annotations.push((key.clone(), value));
        }
        Ok(checked)
    }

    /// The message of a validation that does not hold, as kube-apiserver chooses it.
    fn message(
        &self,
        validation: &CompiledValidation,
        activation: &mut RuleActivation<'_, '_>,
        meter: &mut Meter<'_>,
    ) -> String {
        if let Some(expression) = &validation.message_expression {
            let program = &expression.program;
            if let Ok(Value::String(text)) =
                meter.run(|budget| program.eval_with(activation, budget))
            {
                let text = text.as_str().trim();
                if !text.is_empty() && !text.contains('\n') {
                    return truncate(text);
                }
            }
        }
        match &validation.message {
            Some(message) => message.clone(),
            None => format!(
                "failed expression: {}",
                validation.expression.source().trim()
            ),
        }
    }
}

/// Whether every match condition holds. One false decides (even if another failed); a failure
/// without a false one is an error.
pub(crate) fn matches(
    conditions: &[Named],
    activation: &mut RuleActivation<'_, '_>,
    meter: &mut Meter<'_>,
) -> Result<bool, RuleError> {
    let mut first_error = None;
    for condition in conditions {
        let program = &condition.expression.program;
        match meter.run(|budget| program.eval_with(activation, budget)) {
            Ok(Value::Bool(true)) => {}
            Ok(Value::Bool(false)) => return Ok(false),
            Ok(other) => {
                first_error.get_or_insert_with(|| {
                    failed(
                        &condition.expression,
                        format!("expected a bool, got {}", other.type_of()),
                    )
                });
            }
            Err(CallError::Failed(error)) => {
                first_error.get_or_insert_with(|| failed(&condition.expression, error.to_string()));
            }
            Err(spent) => return Err(out_of_budget(&condition.expression.field, spent)),
        }
    }
    match first_error {
        Some(error) => Err(error),
        None => Ok(true),
    }
}

/// kube-apiserver's wording of an expression that could not be evaluated.
pub(crate) fn failed(expression: &Expression, cause: String) -> RuleError {
    RuleError::Cel {
        field: expression.field.clone(),
        message: format!(
            "expression '{}' resulted in error: {cause}",
            expression.source()
        ),
    }
}

/// The error of an expression stopped by a spent budget: kube-apiserver's wording when the
/// policy's is spent, the same words naming the review's ceiling when that is.
pub(crate) fn out_of_budget(field: &str, spent: CallError) -> RuleError {
    let message = match spent {
        CallError::OutOfReviewBudget(message) => message,
        _ => "validation failed due to running out of cost budget, no further validation rules will be run".to_owned(),
    };
    RuleError::Cel {
        field: field.to_owned(),
        message,
    }
}

fn truncate(text: &str) -> String {
    if text.len() <= MESSAGE_LIMIT {
        return text.to_owned();
    }
    let mut end = MESSAGE_LIMIT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

/// An audit annotation key: a DNS-label-like name, as kube-apiserver requires.
fn is_annotation_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= 63
        && key
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '_' | '.'))
}
