//! One binding of an admission policy on one request, as kube-apiserver 1.35 evaluates it:
//! matching, params (the policy runs once per param), then the validations' decisions through
//! the binding's actions, or the mutations in order; messages, warnings and audit annotations in
//! the apiserver's words.

use std::sync::Arc;

use kanon_api::{FailurePolicy, Operation, ValidationAction, ValidationReason};
use serde::Serialize;
use serde_json::Value;

use super::compile::AdmissionBinding;
use super::matching::{Attributes, Selection};
use crate::diff::Changes;
use crate::evaluation::{RequestDocuments, Scope};
use crate::language::cel::PolicyBudget;
use crate::language::cel::mutate::{CelOverrideRule, apply_change};
use crate::language::cel::validate::{CelValidateRule, Check, Inputs};
use crate::request::Request;
use crate::rule::RuleError;

/// kube-apiserver's cap on one audit annotation's value.
const AUDIT_VALUE_LIMIT: usize = 10 * 1024;

/// The key of the audit annotation that records validation failures of `Audit` bindings.
pub const VALIDATION_FAILURE_KEY: &str = "validation.policy.admission.k8s.io/validation_failure";

const NULL: &Value = &Value::Null;

impl AdmissionBinding {
    /// The resource names a request for the built-in type (`api_version`, `kind`) must have
    /// for the binding to select it, when the policy's constraints or the binding's match
    /// resources require names (see [`Matcher::names_for`]); `None`: any name.
    ///
    /// [`Matcher::names_for`]: super::matching::Matcher::names_for
    pub(crate) fn names_for(&self, api_version: &str, kind: &str) -> Option<Vec<String>> {
        self.constraints
            .names_for(api_version, kind)
            .or_else(|| self.narrowed.as_ref()?.names_for(api_version, kind))
    }

    /// Whether the policy's constraints and the binding's match resources both select the
    /// request, as it came (`object` is the request's object, or the old object on DELETE).
    /// Constraints that select it only at another version of its resource (`matchPolicy:
    /// Equivalent`) are an error: kube-apiserver would convert the object to that version, and
    /// kanon converts no object, so it neither judges the wrong version nor lets it by unjudged.
    pub(crate) async fn selects(
        &self,
        request: &Request,
        object: &Value,
        documents: &mut RequestDocuments<'_>,
        lookup: &dyn crate::lookup::Lookup,
    ) -> Result<bool, RuleError> {
        let attributes = attributes(request, object);
        let mut versions = || {
            crate::lookup::kinds_of(lookup).map_or_else(Vec::new, |kinds| {
                kinds
                    .versions_of(attributes.group, attributes.resource)
                    .into_iter()
                    .map(str::to_owned)
                    .collect()
            })
        };
        let matchers = std::iter::once(&self.constraints).chain(self.narrowed.as_ref());
        for (index, matcher) in matchers.enumerate() {
            let labels = if matcher.reads_namespace(&attributes) {
                documents.labels().await?
            } else {
                None
            };
            match matcher.selects(&attributes, labels, &mut versions) {
                Selection::No => return Ok(false),
                Selection::Yes => {}
                Selection::Equivalent(version) if index == 0 => {
                    let api_version = |version: &str| match attributes.group {
                        "" => version.to_owned(),
                        group => format!("{group}/{version}"),
                    };
                    return Err(RuleError::Conversion {
                        from: api_version(attributes.version),
                        to: api_version(&version),
                        resource: attributes.resource.to_owned(),
                    });
                }
                // The binding's own rules only narrow; the policy's decide the version.
                Selection::Equivalent(_) => {}
            }
        }
        Ok(true)
    }

    /// The denial of a policy that could not be matched or run (its namespace not found, the
    /// deadline), as the apiserver words a policy's configuration error.
    pub(crate) fn configuration_denial(&self, error: &RuleError) -> String {
        let cause = match error {
            RuleError::NamespaceNotFound { namespace } => {
                format!("namespaces {namespace:?} not found")
            }
            other => kube_words(other),
        };
        if self.mutating {
            // Go's %q: the policy's name in double quotes.
            format!(
                "policy {:?} denied request: failed to configure policy: {cause}",
                self.policy
            )
        } else {
            format!(
                "ValidatingAdmissionPolicy '{}' denied request: failed to configure policy: {cause}",
                self.policy
            )
        }
    }

    /// `ValidatingAdmissionPolicy 'p' with binding 'b'`.
    fn named(&self) -> String {
        let kind = if self.mutating {
            "MutatingAdmissionPolicy"
        } else {
            "ValidatingAdmissionPolicy"
        };
        format!("{kind} '{}' with binding '{}'", self.policy, self.binding)
    }
}

/// What matching reads of the request: its resource from the review (offline: from the kind).
fn attributes<'a>(request: &'a Request, object: &'a Value) -> Attributes<'a> {
    let names = request.resource_names();
    let (object, old_object) = match request.operation {
        Operation::Delete => (NULL, request.old_object.as_ref().unwrap_or(object)),
        _ => (object, request.old_object.as_ref().unwrap_or(NULL)),
    };
    Attributes {
        operation: request.operation,
        group: &names.group,
        version: &names.version,
        resource: &names.resource,
        sub_resource: &names.sub_resource,
        namespace: request.namespace.as_deref().unwrap_or_default(),
        name: &request.name,
        object,
        old_object,
    }
}

/// The inputs of one evaluation with one param.
fn inputs<'a>(
    request: &'a Request,
    object: &'a Value,
    namespace_object: Option<&'a Value>,
    param: Option<&'a Value>,
) -> Inputs<'a> {
    Inputs {
        object: if request.operation == Operation::Delete {
            NULL
        } else {
            object
        },
        old_object: request.old_object.as_ref().unwrap_or(NULL),
        request: &request.info,
        namespace_object: namespace_object.unwrap_or(NULL),
        fifth: param.unwrap_or(NULL),
    }
}

/// An error as the apiserver words it: the CEL error's own text, without kanon's field path.
fn kube_words(error: &RuleError) -> String {
    match error {
        RuleError::Cel { message, .. }
        | RuleError::Reference { message, .. }
        | RuleError::Patch { message, .. } => message.clone(),
        other => other.to_string(),
    }
}

/// What one binding of a ValidatingAdmissionPolicy did with a request.
#[derive(Debug, Default)]
pub(crate) struct Validated {
    /// Denials, in the apiserver's words, each with its reason.
    pub(crate) denials: Vec<(String, ValidationReason)>,
    /// Warnings.
    pub(crate) warnings: Vec<String>,
    /// Audit annotations, keys as the apiserver writes them.
    pub(crate) annotations: Vec<(String, String)>,
    /// Whether a validation did not hold (whatever the actions did with it).
    pub(crate) rejected: bool,
    /// The validations that did not hold, by index, with their messages (what an audit
    /// reports, whatever the actions).
    pub(crate) failures: Vec<(usize, String)>,
    /// The first error met, and whether the failure policy ignored it.
    pub(crate) error: Option<(RuleError, bool)>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ValidationFailure<'a> {
    message: &'a str,
    policy: &'a str,
    binding: &'a str,
    expression_index: usize,
    validation_actions: Vec<&'static str>,
}

impl Validated {
    /// An evaluation error (a match condition, the budget): a decision to deny under `Fail`,
    /// through the binding's actions; nothing under `Ignore`.
    fn error(&mut self, binding: &AdmissionBinding, fail: bool, error: RuleError, message: String) {
        if fail {
            self.decision(binding, 0, message, ValidationReason::Invalid);
        }
        self.error.get_or_insert((error, !fail));
    }

    /// A configuration error of the binding (its params): under `Fail` a denial whatever its
    /// actions, as the apiserver gives it; nothing under `Ignore`.
    fn configuration_error(
        &mut self,
        binding: &AdmissionBinding,
        fail: bool,
        error: RuleError,
        message: String,
    ) {
        if fail {
            self.denials.push((
                format!("{} denied request: {message}", binding.named()),
                ValidationReason::Invalid,
            ));
        }
        self.error.get_or_insert((error, !fail));
    }

    /// A decision to deny, through the binding's actions.
    fn decision(
        &mut self,
        binding: &AdmissionBinding,
        index: usize,
        message: String,
        reason: ValidationReason,
    ) {
        for action in &binding.actions {
            match action {
                ValidationAction::Deny => self.denials.push((
                    format!("{} denied request: {message}", binding.named()),
                    reason,
                )),
                ValidationAction::Warn => self.warnings.push(format!(
                    "Validation failed for {}: {message}",
                    binding.named()
                )),
                ValidationAction::Audit => {
                    // The apiserver keeps the first value of an annotation key.
                    if self
                        .annotations
                        .iter()
                        .any(|(key, _)| key == VALIDATION_FAILURE_KEY)
                    {
                        continue;
                    }
                    let failure = [ValidationFailure {
                        message: &message,
                        policy: &binding.policy,
                        binding: &binding.binding,
                        expression_index: index,
                        validation_actions: binding
                            .actions
                            .iter()
                            .map(|a| match a {
                                ValidationAction::Deny => "Deny",
                                ValidationAction::Warn => "Warn",
                                ValidationAction::Audit => "Audit",
                            })
                            .collect(),
                    }];
                    if let Ok(value) = serde_json::to_string(&failure) {
                        self.annotations
                            .push((VALIDATION_FAILURE_KEY.to_owned(), go_json(&value)));
                    }
                }
            }
        }
    }
}

/// The binding's params for the request; an error is the binding's configuration error, in the
/// apiserver's words (`failed to configure binding: ...`).
async fn params(
    binding: &AdmissionBinding,
    scope: &Scope<'_, '_>,
) -> Result<super::params::Collected, RuleError> {
    let namespace = scope.request.namespace.as_deref().unwrap_or_default();
    binding
        .params
        .collect(scope.evaluation.lookup(), namespace, scope.policy)
        .await
        .map_err(|message| RuleError::Reference {
            field: "spec.paramRef".to_owned(),
            message: format!("failed to configure binding: {message}"),
        })
}

/// JSON as Go's `encoding/json` writes it: `<`, `>`, `&`, U+2028 and U+2029 escaped (they only
/// occur inside strings).
fn go_json(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    for character in json.chars() {
        match character {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            other => out.push(other),
        }
    }
    out
}

/// The request's namespace as `namespaceObject`, looked up only for a rule whose expressions
/// name it (a lookup that fails reads as `null` either way).
async fn namespace_object(reads: bool, scope: &mut Scope<'_, '_>) -> Option<Arc<Value>> {
    if reads {
        scope.documents.namespace_object().await
    } else {
        None
    }
}

/// Runs one binding of a ValidatingAdmissionPolicy on the request (which it selects).
pub(crate) async fn validate(
    binding: &AdmissionBinding,
    rule: &CelValidateRule,
    failure_policy: FailurePolicy,
    scope: &mut Scope<'_, '_>,
    object: &Value,
) -> Validated {
    let fail = failure_policy == FailurePolicy::Fail;
    let mut out = Validated::default();
    let request = scope.request;
    let params = match params(binding, scope).await {
        Ok(params) => params,
        Err(error) => {
            let message = kube_words(&error);
            out.configuration_error(binding, fail, error, message);
            return out;
        }
    };
    let namespace_object = namespace_object(rule.reads_namespace, scope).await;
    let evaluation = scope.evaluation;
    let interrupted = move || evaluation.deadline_passed();
    let mut published: Vec<(String, Vec<String>)> = Vec::new();
    for param in &params {
        let inputs = inputs(
            request,
            object,
            namespace_object.as_deref(),
            param.as_deref(),
        );
        // A budget per binding evaluation (per param), as kube-apiserver's.
        let mut budget = PolicyBudget::new(scope.budget.ceiling());
        let checked = match rule.check(inputs, &mut budget.meter(&interrupted)) {
            Ok(checked) => checked,
            Err(error) => {
                let message = kube_words(&error);
                out.error(binding, fail, error, message);
                continue;
            }
        };
        for (index, check) in checked.checks.into_iter().enumerate() {
            match check {
                Check::Holds => {}
                Check::Fails(message, reason) => {
                    out.rejected = true;
                    out.failures.push((index, message.clone()));
                    out.decision(binding, index, message, reason);
                }
                Check::Error(error) => {
                    if fail {
                        out.decision(
                            binding,
                            index,
                            kube_words(&error),
                            ValidationReason::Invalid,
                        );
                    }
                    out.error.get_or_insert((error, !fail));
                }
            }
        }
        for (key, value) in checked.annotations {
            match value {
                Ok(Some(mut value)) => {
                    if value.len() > AUDIT_VALUE_LIMIT {
                        let mut cut = AUDIT_VALUE_LIMIT;
                        while !value.is_char_boundary(cut) {
                            cut -= 1;
                        }
                        value.truncate(cut);
                    }
                    match published.iter_mut().find(|(k, _)| *k == key) {
                        Some((_, values)) if !values.contains(&value) => values.push(value),
                        Some(_) => {}
                        None => published.push((key, vec![value])),
                    }
                }
                Ok(None) => {}
                // Under Fail an audit annotation that fails denies, whatever the actions.
                Err(error) => {
                    if fail {
                        out.denials.push((
                            format!("{} denied request: {}", binding.named(), kube_words(&error)),
                            ValidationReason::Invalid,
                        ));
                    }
                    out.error.get_or_insert((error, !fail));
                }
            }
        }
    }
    for (key, values) in published {
        out.annotations
            .push((format!("{}/{key}", binding.policy), values.join(", ")));
    }
    out
}

/// What one binding of a MutatingAdmissionPolicy did with a request.
#[derive(Debug, Default)]
pub(crate) struct Mutated {
    /// How many patch operations applied.
    pub(crate) applied: usize,
    /// Errors, in the apiserver's words (`policy 'p' with binding 'b' denied request: ...`),
    /// each with the typed error; they deny under `Fail`.
    pub(crate) errors: Vec<(String, RuleError)>,
    /// An error that fails the whole request whatever the failure policy, in the apiserver's
    /// words (`Internal error occurred: strict decoding error: ...`), with the typed error:
    /// nothing runs after it.
    pub(crate) fatal: Option<(String, RuleError)>,
}

/// Runs one binding of a MutatingAdmissionPolicy on `working` (which it selects): once per
/// param, each mutation in order. A mutation that fails is left out and the next one runs, the
/// changes before it kept, as in kube-apiserver.
pub(crate) async fn mutate(
    binding: &AdmissionBinding,
    rule: &CelOverrideRule,
    scope: &mut Scope<'_, '_>,
    working: &mut Value,
    changes: &mut Changes,
) -> Mutated {
    let mut out = Mutated::default();
    let request = scope.request;
    let denied = |message: &str| {
        format!(
            "policy '{}' with binding '{}' denied request: {message}",
            binding.policy, binding.binding
        )
    };
    let params = match params(binding, scope).await {
        Ok(params) => params,
        Err(error) => {
            out.errors.push((denied(&kube_words(&error)), error));
            return out;
        }
    };
    let namespace_object = namespace_object(rule.reads_namespace, scope).await;
    let evaluation = scope.evaluation;
    let interrupted = move || evaluation.deadline_passed();
    for param in &params {
        let inputs = inputs(request, NULL, namespace_object.as_deref(), param.as_deref());
        let lookup = scope.evaluation.lookup();
        let mut budget = PolicyBudget::new(scope.budget.ceiling());
        let mut meter = budget.meter(&interrupted);
        let outcome = rule.apply_each(inputs, working, &mut meter, |working, change, field| {
            apply_change(working, change, field, request, lookup, changes)
        });
        out.applied += outcome.applied;
        for error in outcome.errors {
            let fatal = match &error {
                RuleError::StrictDecoding { unknown, .. } => Some(format!(
                    "Internal error occurred: strict decoding error: {}",
                    crate::rule::unknown_fields(unknown)
                )),
                RuleError::TypedDecoding { message, .. } => {
                    Some(format!("Internal error occurred: {message}"))
                }
                RuleError::Unanswered { message, .. } => Some(message.clone()),
                _ => None,
            };
            if let Some(message) = fatal {
                out.fatal = Some((message, error));
                return out;
            }
            out.errors.push((denied(&kube_words(&error)), error));
        }
    }
    out
}
