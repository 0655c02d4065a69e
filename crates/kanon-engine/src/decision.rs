//! Evaluation of a request against a [`PolicySet`](crate::PolicySet): overrides (patches)
//! and validations (verdicts), with each policy's failure policy deciding what its errors do.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use kanon_api::{FailurePolicy, Operation, ResultStatus, ValidationAction};
use serde::Serialize;
use serde_json::Value;
use tracing::Instrument;

use crate::admission_policy;
use crate::diff::Changes;
use crate::evaluation::{Evaluation, RequestDocuments, Scope};
use crate::exception::{Beyond, CompiledException, Exceptions, Exemption};
use crate::finding::{Finding, rejection, rule_label};
use crate::index::Indexed;
use crate::language;
use crate::language::cel::mutate::CelOverrideRule;
use crate::language::cel::validate::CelValidateRule;
use crate::language::cel::{PolicyBudget, ReviewCost};
use crate::policy::{CompiledPolicy, PolicyRules};
use crate::request::Request;
use crate::rule::RuleError;
use crate::selector::ObjectView;
use crate::targets::WebhookKind;
use crate::workload::Workload;

/// How many candidate policies are chosen between two pause points.
const CANDIDATES_PER_PAUSE_POINT: usize = 16;

/// The outcome of a request.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    /// Whether the request is admitted.
    pub allowed: bool,
    /// Why it is denied: one message per failing policy, each prefixed with the policy.
    pub messages: Vec<String>,
    /// Admission warnings (e.g. policies skipped under `failurePolicy: Ignore`).
    pub warnings: Vec<String>,
    /// Audit annotations.
    pub audit_annotations: BTreeMap<String, String>,
    /// The reason (and HTTP code) of a denial, when the first rule that denied set one (a CEL
    /// validation's `reason`); `None`: Forbidden (403).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_reason: Option<StatusReason>,
    /// The policies that applied to the request, in evaluation order (`Kind/name`).
    pub applied_policies: Vec<String>,
    /// RFC 6902 patch from the object received to the final object; empty when nothing
    /// changed, on DELETE, and when denied.
    pub patch: json_patch::Patch,
    /// The final object (the object received when nothing changed or the request is denied);
    /// the old object on DELETE. `None` from [`PolicySet::validate`](crate::PolicySet::validate),
    /// which changes nothing.
    pub patched: Option<Value>,
    /// What each policy that met the request did, in order (for metrics and logs).
    #[serde(skip)]
    pub policy_results: Vec<PolicyResult>,
    /// The PolicyExceptions that exempted the request from a policy (or some of its rules).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exceptions: Vec<AppliedException>,
    /// What each validate policy found, rule by rule; kept only when auditing
    /// ([`PolicySet::audit_in`](crate::PolicySet::audit_in)), `None` otherwise.
    #[serde(skip)]
    pub findings: Option<Vec<Finding>>,
    /// Whether a ValidatingAdmissionPolicy (or its configuration error) has denied: its
    /// message is then the only one admission policies give, as kube-apiserver answers with
    /// the first denial alone; later admission policies' denials add no message.
    #[serde(skip)]
    pub admission_denied: bool,
    /// Set by [`PolicySet::mutate_patch`](crate::PolicySet::mutate_patch) for a request whose
    /// object was decoded in part ([`Request::read_through`]) when a mutation reached beyond
    /// that part: the decision is void (a denial that says so), and the review must be read
    /// whole and decided again.
    #[serde(skip)]
    pub beyond_reading: bool,
}

/// A PolicyException that exempted a request from a policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AppliedException {
    /// `PolicyException/<namespace>/<name>`.
    #[serde(serialize_with = "text")]
    pub exception: Arc<str>,
    /// The policy (`Kind/name`).
    #[serde(serialize_with = "text")]
    pub policy: Arc<str>,
    /// The rules exempted; empty: the whole policy.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<String>,
}

/// The reason of a denial as a Kubernetes Status says it, with its HTTP code: a reason a CEL
/// validation may give, or `InternalError`, which kube-apiserver answers when a
/// MutatingAdmissionPolicy leaves an object it cannot decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusReason {
    /// A validation's reason (`Invalid` 422, `Forbidden` 403, ...).
    Validation(kanon_api::ValidationReason),
    /// HTTP 500.
    InternalError,
}

impl StatusReason {
    /// The reason as a Status says it (`Invalid`).
    pub fn as_str(self) -> &'static str {
        match self {
            StatusReason::Validation(reason) => reason.as_str(),
            StatusReason::InternalError => "InternalError",
        }
    }

    /// The HTTP status code the reason carries.
    pub fn code(self) -> u16 {
        match self {
            StatusReason::Validation(reason) => reason.code(),
            StatusReason::InternalError => 500,
        }
    }
}

impl From<kanon_api::ValidationReason> for StatusReason {
    fn from(reason: kanon_api::ValidationReason) -> Self {
        StatusReason::Validation(reason)
    }
}

/// Written as the Status reason it is (`Invalid`).
impl Serialize for StatusReason {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// What one policy did with a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyResult {
    /// `Kind/name` or `Kind/namespace/name` ([`CompiledPolicy::label`]).
    pub policy: Arc<str>,
    /// The outcome.
    pub outcome: PolicyOutcome,
}

/// Outcomes of one policy on one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyOutcome {
    /// An override policy ran; `patched` when it produced operations.
    Mutated {
        /// Whether it produced any operation.
        patched: bool,
    },
    /// A validate policy found nothing wrong.
    Passed,
    /// A validate policy found the object wanting (denied, warned or audited per its actions).
    Rejected,
    /// A PolicyException exempted the request from the whole policy.
    Exempted,
    /// The policy failed to evaluate; `ignored` under `failurePolicy: Ignore`.
    Failed {
        /// Whether the failure was ignored.
        ignored: bool,
        /// Why, as [`RuleError::reason`] names it (`timed_out`, `not_found`, `cel`, ...).
        reason: &'static str,
    },
}

impl std::fmt::Display for PolicyOutcome {
    /// In words, as `kanon test --detailed` prints it and a trace span records it: `mutated`,
    /// `unchanged`, `passed`, `rejected`, `exempted`, `failed: <reason>`,
    /// `failed (ignored): <reason>`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PolicyOutcome::Mutated { patched: true } => f.write_str("mutated"),
            PolicyOutcome::Mutated { patched: false } => f.write_str("unchanged"),
            PolicyOutcome::Passed => f.write_str("passed"),
            PolicyOutcome::Rejected => f.write_str("rejected"),
            PolicyOutcome::Exempted => f.write_str("exempted"),
            PolicyOutcome::Failed {
                ignored: false,
                reason,
            } => write!(f, "failed: {reason}"),
            PolicyOutcome::Failed {
                ignored: true,
                reason,
            } => write!(f, "failed (ignored): {reason}"),
        }
    }
}

impl Decision {
    /// Whether the answer to a review of `operation` sent to `webhook` carries this decision's
    /// patch: only the mutating webhook's, only when it allows and changed something, never
    /// on DELETE (there is no object to patch).
    pub fn carries_patch(&self, webhook: WebhookKind, operation: Operation) -> bool {
        webhook == WebhookKind::Mutating
            && self.allowed
            && operation != Operation::Delete
            && !self.patch.is_empty()
    }

    fn allow(patched: Option<Value>) -> Self {
        Decision {
            allowed: true,
            messages: Vec::new(),
            warnings: Vec::new(),
            audit_annotations: BTreeMap::new(),
            status_reason: None,
            applied_policies: Vec::new(),
            patch: json_patch::Patch(Vec::new()),
            patched,
            policy_results: Vec::new(),
            exceptions: Vec::new(),
            findings: None,
            admission_denied: false,
            beyond_reading: false,
        }
    }

    /// The void decision of a mutation that reached beyond the part of the object that was
    /// decoded ([`Decision::beyond_reading`]): a denial, should a caller not read it again.
    fn beyond_reading() -> Self {
        let mut decision = Decision::allow(None);
        decision.allowed = false;
        decision.messages.push(
            "kanon decoded only part of the object and a mutation reached beyond it: the review must be read whole"
                .to_owned(),
        );
        decision.beyond_reading = true;
        decision
    }

    /// Records a finding of `policy` when auditing; `within` a workload's template, the
    /// message says where.
    fn found(
        &mut self,
        policy: &CompiledPolicy,
        rule: Option<String>,
        result: ResultStatus,
        message: impl FnOnce() -> String,
        within: Within,
    ) {
        let Some(findings) = &mut self.findings else {
            return;
        };
        let mut message = message();
        if let Some(workload) = within
            && !message.is_empty()
        {
            message = format!("{}: {message}", workload.field);
        }
        findings.push(Finding {
            policy: policy.label.clone(),
            rule,
            result,
            message,
            severity: policy.severity.clone(),
            category: policy.category.clone(),
        });
    }

    /// Records what exceptions did to `policy` on this request: each that applies is named in
    /// a warning and an audit annotation; one whose conditions could not be evaluated is not
    /// applied, with a warning saying why. Whether the whole policy is exempt (not to run).
    fn exempted(
        &mut self,
        policy: &CompiledPolicy,
        exemption: &Exemption<'_>,
        within: Within,
    ) -> bool {
        for (exception, error) in &exemption.errors {
            self.warnings.push(format!(
                "{}: {} not applied: {error}",
                speaker(policy, within),
                exception.label
            ));
        }
        for exception in &exemption.expired {
            let at = exception
                .expires_at_text
                .as_deref()
                .unwrap_or("its expiresAt");
            self.warnings.push(format!(
                "{}: {} no longer exempts this object: it expired at {at}",
                speaker(policy, within),
                exception.label
            ));
        }
        for (exception, rules) in &exemption.applied {
            let what = match rules.as_slice() {
                [] => String::new(),
                rules => format!(" (rules {})", rules.join(", ")),
            };
            self.warnings.push(format!(
                "{}: exempted{what} by {}: {}",
                speaker(policy, within),
                exception.label,
                exception.reason
            ));
            let key = exception_key(exception);
            let entry = format!("{}{what}", policy.label);
            match self.audit_annotations.get_mut(&key) {
                Some(known) if !known.split(", ").any(|k| k == entry) => {
                    known.push_str(", ");
                    known.push_str(&entry);
                }
                Some(_) => {}
                None => {
                    self.audit_annotations.insert(key, entry);
                }
            }
            self.exceptions.push(AppliedException {
                exception: exception.label.clone(),
                policy: policy.label.clone(),
                rules: rules.iter().map(|r| r.to_string()).collect(),
            });
            let why = || format!("exempted by {}: {}", exception.label, exception.reason);
            if rules.is_empty() {
                self.found(policy, None, ResultStatus::Skip, why, within);
            }
            for rule in rules {
                self.found(
                    policy,
                    Some(rule.to_string()),
                    ResultStatus::Skip,
                    why,
                    within,
                );
            }
        }
        let whole = exemption.whole();
        if whole {
            self.record(policy, PolicyOutcome::Exempted);
        }
        whole
    }

    /// Records an evaluation error of `policy` (judging `within` a workload's pod template, if
    /// set) under its failure policy.
    fn policy_error(&mut self, policy: &CompiledPolicy, within: Within, error: &RuleError) {
        // A CEL patch that writes a field its built-in kind does not declare, or a value its Go
        // type cannot hold, fails the request whatever the failure policy, as it does in a
        // MutatingAdmissionPolicy (and as the apiserver's decoding of the patched object does).
        let failure_policy = match error {
            RuleError::StrictDecoding { .. }
            | RuleError::TypedDecoding { .. }
            | RuleError::Unanswered { .. } => FailurePolicy::Fail,
            _ => policy.failure_policy,
        };
        self.record(
            policy,
            PolicyOutcome::Failed {
                ignored: failure_policy == FailurePolicy::Ignore,
                reason: error.reason(),
            },
        );
        self.found(
            policy,
            None,
            ResultStatus::Error,
            || error.to_string(),
            within,
        );
        if let Some(binding) = &policy.admission {
            // The apiserver's words for an admission policy it cannot match or run; nothing
            // under Ignore.
            if policy.failure_policy == FailurePolicy::Fail {
                if self.allowed {
                    self.status_reason = Some(kanon_api::ValidationReason::Invalid.into());
                }
                self.allowed = false;
                if !self.admission_denied {
                    self.admission_denied = true;
                    self.messages.push(binding.configuration_denial(error));
                }
            }
            return;
        }
        // As in a ValidatingAdmissionPolicy, an error under `Fail` is a failed validation: it
        // does what the policy's actions say, so a policy in Warn or Audit mode warns or
        // audits it rather than denying.
        let actions = match &policy.rules {
            PolicyRules::Validate { actions, .. } if failure_policy == FailurePolicy::Fail => {
                actions.as_slice()
            }
            _ => &[ValidationAction::Deny],
        };
        match failure_policy {
            FailurePolicy::Fail => {
                let message = format!("{}: {error}", speaker(policy, within));
                for action in actions {
                    match action {
                        ValidationAction::Deny => {
                            self.allowed = false;
                            self.messages.push(message.clone());
                        }
                        ValidationAction::Warn => self.warnings.push(message.clone()),
                        ValidationAction::Audit => {
                            let mut found = error.to_string();
                            if let Some(workload) = within {
                                found = format!("{}: {found}", workload.field);
                            }
                            self.audit_annotations.insert(audit_key(policy), found);
                        }
                    }
                }
            }
            FailurePolicy::Ignore => self.warnings.push(format!(
                "{}: skipped (failurePolicy Ignore): {error}",
                speaker(policy, within)
            )),
        }
    }

    /// Whether `policy` is to run on the request. A policy that applies but cannot (the
    /// deadline passed, its namespace could not be read) fails under its failure policy here.
    async fn runs(
        &mut self,
        policy: &CompiledPolicy,
        view: &ObjectView<'_>,
        request: &Request,
        evaluation: &Evaluation<'_>,
        documents: &mut RequestDocuments<'_>,
        within: Within,
    ) -> bool {
        let applies = applies(policy, view, request, evaluation, documents).await;
        self.settle(policy, applies, evaluation, within)
    }

    /// Whether `policy`, which `applies` or not, is to run now: a policy that applies but
    /// cannot (the deadline passed, its namespace could not be read) fails under its failure
    /// policy here.
    fn settle(
        &mut self,
        policy: &CompiledPolicy,
        applies: Result<bool, RuleError>,
        evaluation: &Evaluation<'_>,
        within: Within,
    ) -> bool {
        // One that does not apply is not run, the deadline passed or not (the clock is read
        // only for the others).
        if matches!(applies, Ok(false)) {
            return false;
        }
        if evaluation.deadline_passed() {
            // Only policies that meet the request fail; the others would not have run.
            if applies.unwrap_or(true) {
                self.policy_error(policy, within, &RuleError::DeadlinePassed);
            }
            return false;
        }
        match applies {
            Ok(applies) => applies,
            Err(e) => {
                self.policy_error(policy, within, &e);
                false
            }
        }
    }

    fn record(&mut self, policy: &CompiledPolicy, outcome: PolicyOutcome) {
        self.policy_results.push(PolicyResult {
            policy: policy.label.clone(),
            outcome,
        });
    }

    /// Records what a binding of a ValidatingAdmissionPolicy did, in the apiserver's words.
    fn admission_validated(
        &mut self,
        policy: &CompiledPolicy,
        validated: admission_policy::Validated,
    ) {
        let outcome = match (&validated.error, validated.rejected) {
            (_, true) => PolicyOutcome::Rejected,
            (Some((error, ignored)), false) => PolicyOutcome::Failed {
                ignored: *ignored,
                reason: error.reason(),
            },
            (None, false) => PolicyOutcome::Passed,
        };
        self.applied_policies.push(String::from(&*policy.label));
        self.record(policy, outcome);
        if self.findings.is_some() {
            let actions = policy.admission.as_deref().map(|b| b.actions.as_slice());
            let result = rejection(actions.unwrap_or_default());
            for (index, message) in &validated.failures {
                let rule = Some(format!("validations[{index}]"));
                self.found(policy, rule, result, || message.clone(), None);
            }
            if let Some((error, _)) = &validated.error {
                self.found(
                    policy,
                    None,
                    ResultStatus::Error,
                    || error.to_string(),
                    None,
                );
            } else if !validated.rejected {
                self.found(policy, None, ResultStatus::Pass, String::new, None);
            }
        }
        if let Some((_, reason)) = validated.denials.first()
            && self.allowed
        {
            self.allowed = false;
            self.status_reason = Some((*reason).into());
        }
        if policy.admission.is_some() {
            // kube-apiserver answers with its first denied decision alone (policies in kanon's
            // order; the apiserver's own order among policies is that of a Go map).
            if !self.admission_denied
                && let Some((message, _)) = validated.denials.into_iter().next()
            {
                self.admission_denied = true;
                self.messages.push(message);
            }
        } else {
            self.messages
                .extend(validated.denials.into_iter().map(|(message, _)| message));
        }
        self.warnings.extend(validated.warnings);
        for (key, value) in validated.annotations {
            match self.audit_annotations.get_mut(&key) {
                None => {
                    self.audit_annotations.insert(key, value);
                }
                // The apiserver keeps the first validation failure, and joins the distinct
                // values one policy's bindings give an audit annotation.
                Some(_) if key == admission_policy::VALIDATION_FAILURE_KEY => {}
                Some(known) => {
                    for one in value.split(", ") {
                        if !known.split(", ").any(|k| k == one) {
                            known.push_str(", ");
                            known.push_str(one);
                        }
                    }
                }
            }
        }
    }

    /// Records what a binding of a MutatingAdmissionPolicy did, in the apiserver's words: its
    /// errors deny under `Fail` (422 Invalid) and are dropped under `Ignore`. Whether the
    /// request is over: an error that fails it whatever the failure policy (500 InternalError,
    /// its message alone, as kube-apiserver answers) stops the policies after it.
    fn admission_mutated(
        &mut self,
        policy: &CompiledPolicy,
        mutated: admission_policy::Mutated,
    ) -> bool {
        if let Some((message, error)) = mutated.fatal {
            self.record(
                policy,
                PolicyOutcome::Failed {
                    ignored: false,
                    reason: error.reason(),
                },
            );
            self.allowed = false;
            self.status_reason = Some(StatusReason::InternalError);
            self.messages = vec![message];
            return true;
        }
        let ignored = policy.failure_policy == FailurePolicy::Ignore;
        let outcome = match mutated.errors.first() {
            Some((_, error)) => PolicyOutcome::Failed {
                ignored,
                reason: error.reason(),
            },
            None => PolicyOutcome::Mutated {
                patched: mutated.applied > 0,
            },
        };
        self.record(policy, outcome);
        if mutated.errors.is_empty() {
            self.applied_policies.push(String::from(&*policy.label));
            return false;
        }
        if !ignored {
            if self.allowed {
                self.status_reason = Some(kanon_api::ValidationReason::Invalid.into());
            }
            self.allowed = false;
            self.messages
                .extend(mutated.errors.into_iter().map(|(message, _)| message));
        }
        false
    }

    /// Folds the verdict of a later stage (validation after mutation) into this one.
    fn merge(&mut self, later: Decision) {
        if self.allowed && !later.allowed {
            self.status_reason = later.status_reason;
        }
        self.allowed &= later.allowed;
        self.admission_denied |= later.admission_denied;
        self.messages.extend(later.messages);
        self.warnings.extend(later.warnings);
        for (key, value) in later.audit_annotations {
            match self.audit_annotations.get_mut(&key) {
                // An exception that exempted from policies of both stages names them all.
                Some(known) if key.starts_with("policyexception.") => {
                    known.push_str(", ");
                    known.push_str(&value);
                }
                _ => {
                    self.audit_annotations.insert(key, value);
                }
            }
        }
        self.applied_policies.extend(later.applied_policies);
        self.policy_results.extend(later.policy_results);
        self.exceptions.extend(later.exceptions);
    }
}

/// Where a policy's rules judged when not the object itself: a workload's pod template.
type Within = Option<&'static Workload>;

/// Who a message is from: the policy (`Kind/name`), and the pod template it judged
/// (`Kind/name: spec.template`).
fn speaker(policy: &CompiledPolicy, within: Within) -> Cow<'_, str> {
    match within {
        None => Cow::Borrowed(&*policy.label),
        Some(workload) => Cow::Owned(format!("{}: {}", policy.label, workload.field)),
    }
}

/// Whether `policy` applies to the request: selectors, namespace selector and at least one
/// rule for the operation. A namespace that cannot be read is an evaluation error.
async fn applies(
    policy: &CompiledPolicy,
    view: &ObjectView<'_>,
    request: &Request,
    evaluation: &Evaluation<'_>,
    documents: &mut RequestDocuments<'_>,
) -> Result<bool, RuleError> {
    let operation = request.operation;
    if !policy.selects_resource(view) {
        return Ok(false);
    }
    let (rule_count, has_rule) = match &policy.rules {
        PolicyRules::Override(rules) => (
            rules.len(),
            rules.iter().any(|r| r.operations.contains(operation)),
        ),
        PolicyRules::Validate { rules, .. } => (
            rules.len(),
            rules.iter().any(|r| r.operations.contains(operation)),
        ),
    };
    // Compiling keeps every rule and its operations even when the policy is invalid, so an
    // invalid policy meets only the operations its rules target (as a Kubernetes webhook is
    // only called for the operations its rules name). One with no rules at all meets every
    // operation, so that it is not silently ignored.
    let meets_every_operation = policy.defect.is_some() && rule_count == 0;
    if !has_rule && !meets_every_operation {
        return Ok(false);
    }
    if let Some(binding) = &policy.admission {
        return binding
            .selects(request, view.object, documents, evaluation.lookup())
            .await;
    }
    if !policy.reads_namespace_labels(view) {
        return policy.selects_namespace(view, || Ok(None));
    }
    let labels = documents.labels().await?;
    policy.selects_namespace(view, || Ok(labels))
}

/// A binding of a ValidatingAdmissionPolicy: the binding and the policy's compiled rule.
fn admission_validation(
    policy: &CompiledPolicy,
) -> Option<(&admission_policy::AdmissionBinding, &CelValidateRule)> {
    let binding = policy.admission.as_deref()?;
    let PolicyRules::Validate { rules, .. } = &policy.rules else {
        return None;
    };
    Some((binding, rules.first()?.cel.as_deref()?))
}

/// A binding of a MutatingAdmissionPolicy: the binding and the policy's compiled rule.
fn admission_mutation(
    policy: &CompiledPolicy,
) -> Option<(&admission_policy::AdmissionBinding, &CelOverrideRule)> {
    let binding = policy.admission.as_deref()?;
    let PolicyRules::Override(rules) = &policy.rules else {
        return None;
    };
    Some((binding, rules.first()?.cel.as_deref()?))
}

/// The error a defective policy meets every request it applies to with.
fn defect(policy: &CompiledPolicy) -> Option<RuleError> {
    policy.defect.clone().map(RuleError::InvalidPolicy)
}

/// Runs one override policy's rules for the request's operation on `working`. On error
/// `working` may be partly changed; the caller restores it.
async fn run_override(
    policy: &CompiledPolicy,
    scope: &mut Scope<'_, '_>,
    working: &mut Value,
    changes: &mut Changes,
    exemption: &Exemption<'_>,
) -> Result<usize, RuleError> {
    if let Some(error) = defect(policy) {
        return Err(error);
    }
    let PolicyRules::Override(rules) = &policy.rules else {
        return Ok(0);
    };
    let (mut applied, mut steps) = (0, 0);
    let operation = scope.request.operation;
    for (_, rule) in rules
        .iter()
        .enumerate()
        .filter(|(_, r)| r.operations.contains(operation))
        .filter(|(i, r)| !exemption.exempts_rule(r.name.as_deref(), *i))
    {
        for step in rule.parts() {
            // The caller pauses right before a policy runs: not again before its first step.
            if steps > 0 {
                scope.evaluation.pause_point().await;
            }
            steps += 1;
            applied += language::apply(step, scope, working, changes).await?;
        }
    }
    Ok(applied)
}

/// What one validate policy's rules found: reasons of failed checks, warnings, and the audit
/// annotations its rules write (a CEL rule's `auditAnnotations`).
#[derive(Default)]
struct Judged {
    /// Each with the index of the rule that gave it.
    reasons: Vec<(usize, String)>,
    status: Option<kanon_api::ValidationReason>,
    warnings: Vec<String>,
    annotations: Vec<(String, String)>,
}

/// The verdicts of one validate policy's rules.
async fn run_validate(
    policy: &CompiledPolicy,
    scope: &mut Scope<'_, '_>,
    object: &Value,
    exemption: &Exemption<'_>,
) -> Result<Judged, RuleError> {
    if let Some(error) = defect(policy) {
        return Err(error);
    }
    let PolicyRules::Validate { rules, .. } = &policy.rules else {
        return Ok(Judged::default());
    };
    let operation = scope.request.operation;
    let (mut reasons, mut warnings, mut annotations) = (Vec::new(), Vec::new(), Vec::new());
    let (mut status, mut steps) = (None, 0);
    for (i, rule) in rules
        .iter()
        .enumerate()
        .filter(|(_, r)| r.operations.contains(operation))
        .filter(|(i, r)| !exemption.exempts_rule(r.name.as_deref(), *i))
    {
        for step in rule.parts() {
            // The caller pauses right before a policy runs: not again before its first step.
            if steps > 0 {
                scope.evaluation.pause_point().await;
            }
            steps += 1;
            let verdict = language::verdict(step, scope, object).await?;
            warnings.extend(verdict.warnings);
            annotations.extend(verdict.audit_annotations);
            if !verdict.valid {
                if reasons.is_empty() {
                    status = verdict.status;
                }
                reasons.push((
                    i,
                    if verdict.reason.is_empty() {
                        format!("spec.validateRules[{i}] rejected the object")
                    } else {
                        verdict.reason
                    },
                ));
                reasons.extend(verdict.more_reasons.into_iter().map(|r| (i, r)));
            }
        }
    }
    Ok(Judged {
        reasons,
        status,
        warnings,
        annotations,
    })
}

/// `key` as an annotation name: at most 63 bytes, cut at a character (names in policy files
/// may be any text), ending with an alphanumeric character, as Kubernetes requires.
fn annotation_name(mut key: String) -> String {
    let mut cut = key.len().min(63);
    while !key.is_char_boundary(cut) {
        cut -= 1;
    }
    key.truncate(cut);
    let end = key
        .trim_end_matches(|c: char| !c.is_ascii_alphanumeric())
        .len();
    key.truncate(end);
    key
}

/// The key of an audit annotation a policy's rule writes: the policy's key, `.`, the rule's
/// key, cut as [`annotation_name`] cuts.
fn annotation_key(policy_key: &str, key: &str) -> String {
    annotation_name(format!("{policy_key}.{key}"))
}

/// The audit annotation key of a policy: `<kind>.<namespace>.<name>`, lower-case, cut as
/// [`annotation_name`] cuts.
fn audit_key(policy: &CompiledPolicy) -> String {
    let mut key = policy.id.kind.as_str().to_ascii_lowercase();
    if let Some(ns) = &policy.id.namespace {
        key = format!("{key}.{ns}");
    }
    annotation_name(format!("{key}.{}", policy.id.name))
}

fn text<S: serde::Serializer>(value: &Arc<str>, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(value)
}

/// The audit annotation key that names an exception's exemptions:
/// `policyexception.<namespace>.<name>`, cut as [`annotation_name`] cuts.
fn exception_key(exception: &CompiledException) -> String {
    annotation_name(format!(
        "policyexception.{}.{}",
        exception.namespace, exception.name
    ))
}

/// [`PolicySet::mutate`](crate::PolicySet::mutate).
pub(crate) async fn mutate(
    set: Indexed<'_>,
    request: &Request,
    evaluation: &Evaluation<'_>,
) -> Decision {
    let Some(original) = request
        .object
        .as_ref()
        .filter(|_| request.operation != Operation::Delete)
    else {
        return Decision::allow(request.subject().cloned());
    };
    let (mut decision, working, changes) = override_object(
        set,
        request,
        Cow::Borrowed(original),
        Changes::tracking(),
        evaluation,
    )
    .await;
    match working {
        Cow::Owned(working) if decision.allowed => {
            decision.patch = changes.diff_from(original, &working);
            decision.patched = Some(working);
        }
        _ => decision.patched = Some(original.clone()),
    }
    decision
}

/// [`PolicySet::mutate_patch`](crate::PolicySet::mutate_patch).
pub(crate) async fn mutate_patch(
    set: Indexed<'_>,
    request: &mut Request,
    evaluation: &Evaluation<'_>,
) -> Decision {
    if request.operation == Operation::Delete {
        return Decision::allow(None);
    }
    let Some(object) = request.object.take() else {
        return Decision::allow(None);
    };
    let request = &*request;
    let (mut decision, working, changes) = override_object(
        set,
        request,
        Cow::Owned(object),
        Changes::saving().within(request.projection().cloned()),
        evaluation,
    )
    .await;
    if changes.beyond_reading() {
        return Decision::beyond_reading();
    }
    if decision.allowed
        && !changes.is_empty()
        && let Some(patch) = changes.into_diff(working.into_owned())
    {
        decision.patch = patch;
    }
    decision
}

/// Runs the override policies on `working`: every applicable policy in order, each seeing
/// the result of the previous one, each operation recorded in `changes` before it applies;
/// then, for a workload, the Pod policies on its pod template. A borrowed `working` is copied
/// only once a policy runs.
async fn override_object<'v>(
    set: Indexed<'_>,
    request: &Request,
    mut working: Cow<'v, Value>,
    mut changes: Changes,
    evaluation: &Evaluation<'_>,
) -> (Decision, Cow<'v, Value>, Changes) {
    let mut decision = Decision::allow(None);
    if request.arrived_defaulted() {
        changes.mark_settled();
    }
    let cost = &ReviewCost::new();
    let owners = owners_of(set, request, &working, evaluation).await;
    let mut documents = RequestDocuments::new(evaluation.lookup(), request.namespace.as_deref());
    let candidates = set.override_narrowed(&request.view(&working));
    let mut run = Overriding {
        decision: &mut decision,
        exceptions: set.exceptions,
        cost,
        request,
        evaluation,
        documents: &mut documents,
        within: None,
        beyond: Beyond {
            workload: None,
            owners: &owners,
        },
    };
    let over = run.run(candidates, &mut working, &mut changes).await;
    if !over
        && let Some(workload) = Workload::of_request(request)
        && workload.template_written(request, &working)
    {
        override_template(
            &mut decision,
            (set, cost),
            workload,
            request,
            (&mut working, &mut changes),
            evaluation,
        )
        .await;
    }
    (decision, working, changes)
}

/// Runs the Pod policies that reach `workload`'s pod template on it, as a Pod, and writes what
/// they changed back into the template.
async fn override_template(
    decision: &mut Decision,
    (set, cost): (Indexed<'_>, &ReviewCost),
    workload: &'static Workload,
    request: &Request,
    (working, changes): (&mut Cow<'_, Value>, &mut Changes),
    evaluation: &Evaluation<'_>,
) {
    let candidates: Vec<&CompiledPolicy> = set
        .override_candidates("v1", "Pod", request.namespace.as_deref())
        .filter(|p| p.reaches_template_of(workload))
        .collect();
    if candidates.is_empty() {
        return;
    }
    let Some(pod_request) = workload.pod_request(request, working) else {
        return;
    };
    let Some(pod) = pod_request.object.as_ref() else {
        return;
    };
    let mut patched = Cow::Borrowed(pod);
    // The namespace is read again (from the lookup's cache) for the Pod's request.
    let mut documents =
        RequestDocuments::new(evaluation.lookup(), pod_request.namespace.as_deref());
    let outer: &Value = working;
    let mut run = Overriding {
        decision,
        exceptions: set.exceptions,
        cost,
        request: &pod_request,
        evaluation,
        documents: &mut documents,
        within: Some(workload),
        beyond: Beyond {
            workload: Some((request, outer)),
            owners: &[],
        },
    };
    run.run(
        candidates.into_iter(),
        &mut patched,
        &mut Changes::tracking(),
    )
    .await;
    let Cow::Owned(patched) = patched else {
        return;
    };
    let ops = workload.write_back(working, &patched);
    if ops.is_empty() || !decision.allowed {
        return;
    }
    // The template is there (the Pod was made from it), so writing it back cannot fail.
    if let Err((_, error)) = language::apply_recorded(working.to_mut(), ops, changes) {
        decision.allowed = false;
        decision.messages.push(format!(
            "writing the patched pod template back to {}: {error}",
            workload.field
        ));
    }
}

/// One pass of override policies over an object: the request as they see it, and where the
/// decision goes.
struct Overriding<'r, 'a> {
    decision: &'r mut Decision,
    exceptions: &'r Exceptions,
    /// The review's CEL ceilings.
    cost: &'a ReviewCost,
    request: &'a Request,
    evaluation: &'a Evaluation<'a>,
    documents: &'r mut RequestDocuments<'a>,
    within: Within,
    /// What else exceptions may select: the workload whose pod template is judged, the
    /// object's owners.
    beyond: Beyond<'a>,
}

impl<'a> Overriding<'_, 'a> {
    /// Runs `candidates` that apply on `working`, in order. Whether the request is over (a
    /// MutatingAdmissionPolicy failed it whatever the failure policy).
    async fn run(
        &mut self,
        candidates: impl Iterator<Item = &'a CompiledPolicy>,
        working: &mut Cow<'_, Value>,
        changes: &mut Changes,
    ) -> bool {
        let (request, evaluation, within) = (self.request, self.evaluation, self.within);
        let interrupted = move || evaluation.deadline_passed();
        // Policies and exceptions select on the object as it came, not on earlier policies'
        // changes, so which apply is known before the object changes.
        let mut selected = Vec::new();
        {
            let view = request.view(working);
            // Choosing a policy that does not apply is cheap beside running one: a pause point
            // every few candidates (each reads the caller's clock), and after each that applied
            // (its exceptions' conditions were evaluated).
            let mut after_work = false;
            for (index, policy) in candidates.enumerate() {
                if after_work || index % CANDIDATES_PER_PAUSE_POINT == 0 {
                    evaluation.pause_point().await;
                }
                let applies =
                    applies(policy, &view, request, evaluation, &mut *self.documents).await;
                after_work = matches!(applies, Ok(true));
                let exemption = match applies {
                    Ok(true) => self.exceptions.for_policy(
                        policy,
                        &view,
                        request,
                        working,
                        self.beyond,
                        evaluation.now(),
                        (&self.cost.exceptions, &interrupted),
                    ),
                    _ => Exemption::default(),
                };
                selected.push((policy, applies, exemption));
            }
        }
        let decision = &mut *self.decision;
        for (policy, applies, exemption) in selected {
            if !decision.settle(policy, applies, evaluation, within) {
                continue;
            }
            evaluation.pause_point().await;
            if decision.exempted(policy, &exemption, within) {
                continue;
            }
            let object = working.to_mut();
            let mut scope = Scope {
                request,
                evaluation,
                documents: &mut *self.documents,
                policy: &policy.label,
                budget: PolicyBudget::new(self.cost.of(policy.id.namespace.is_some())),
            };
            let span = crate::trace::policy_span(policy);
            if let Some((binding, rule)) = admission_mutation(policy) {
                let mutated = admission_policy::mutate(binding, rule, &mut scope, object, changes)
                    .instrument(span.clone())
                    .await;
                if decision.admission_mutated(policy, mutated) {
                    return true;
                }
                record_last(&span, decision);
                continue;
            }
            // Each step is atomic, so a policy of one step needs no copy to roll back.
            let steps: usize = match &policy.rules {
                PolicyRules::Override(rules) => rules
                    .iter()
                    .filter(|r| r.operations.contains(request.operation))
                    .map(|r| r.steps())
                    .sum(),
                PolicyRules::Validate { .. } => 0,
            };
            let before = (steps > 1).then(|| object.clone());
            let ran = run_override(policy, &mut scope, object, changes, &exemption)
                .instrument(span.clone())
                .await;
            match ran {
                Ok(applied) => {
                    decision.applied_policies.push(String::from(&*policy.label));
                    decision.record(
                        policy,
                        PolicyOutcome::Mutated {
                            patched: applied > 0,
                        },
                    );
                }
                Err(e) => {
                    if let Some(before) = before {
                        *object = before;
                        changes.unsettle();
                    }
                    decision.policy_error(policy, within, &e);
                }
            }
            record_last(&span, decision);
        }
        false
    }
}

/// Records on a policy's span the outcome the decision recorded for it last.
fn record_last(span: &tracing::Span, decision: &Decision) {
    if let Some(result) = decision.policy_results.last() {
        record_outcome(span, result.outcome);
    }
}

/// Records `outcome` on a policy's span, in words; a failure is the span's error.
fn record_outcome(span: &tracing::Span, outcome: PolicyOutcome) {
    if span.is_disabled() {
        return;
    }
    let failed = matches!(outcome, PolicyOutcome::Failed { .. });
    crate::trace::record_outcome(span, &outcome.to_string(), failed);
}

/// [`PolicySet::validate`](crate::PolicySet::validate).
pub(crate) async fn validate(
    set: Indexed<'_>,
    request: &Request,
    object: Option<&Value>,
    evaluation: &Evaluation<'_>,
) -> Decision {
    let mut decision = Decision::allow(None);
    judge(&mut decision, set, request, object, evaluation).await;
    decision
}

/// The owners of the request's object that exceptions may select: none looked up unless some
/// exception selects a kind that owns objects of the request's kind.
async fn owners_of(
    set: Indexed<'_>,
    request: &Request,
    object: &Value,
    evaluation: &Evaluation<'_>,
) -> Vec<Arc<Value>> {
    if !set
        .exceptions
        .select_owners_of((&request.api_version, &request.kind))
    {
        return Vec::new();
    }
    crate::owners::chain(
        request,
        object,
        evaluation.lookup(),
        evaluation.owner_trust(),
    )
    .await
}

/// [`validate`], keeping what each policy found ([`Decision::findings`]): what
/// [`PolicySet::audit_in`](crate::PolicySet::audit_in) returns.
pub(crate) async fn judge_recording(
    set: Indexed<'_>,
    request: &Request,
    evaluation: &Evaluation<'_>,
) -> Decision {
    let mut decision = Decision::allow(None);
    decision.findings = Some(Vec::new());
    judge(&mut decision, set, request, None, evaluation).await;
    decision
}

async fn judge(
    decision: &mut Decision,
    set: Indexed<'_>,
    request: &Request,
    object: Option<&Value>,
    evaluation: &Evaluation<'_>,
) {
    let subject = object.or(request.subject());
    let Some(subject) = subject else {
        return;
    };
    let cost = &ReviewCost::new();
    let owners = owners_of(set, request, subject, evaluation).await;
    let mut documents = RequestDocuments::new(evaluation.lookup(), request.namespace.as_deref());
    let candidates = set.validate_narrowed(&request.view(subject));
    let mut judging = Judging {
        decision: &mut *decision,
        exceptions: set.exceptions,
        cost,
        request,
        evaluation,
        documents: &mut documents,
        within: None,
        beyond: Beyond {
            workload: None,
            owners: &owners,
        },
    };
    judging.run(candidates, subject).await;
    if let Some(workload) = Workload::of_request(request)
        && workload.template_written(request, subject)
    {
        let candidates: Vec<&CompiledPolicy> = set
            .validate_candidates("v1", "Pod", request.namespace.as_deref())
            .filter(|p| p.reaches_template_of(workload))
            .collect();
        if !candidates.is_empty()
            && let Some(pod_request) = workload.pod_request(request, subject)
            && let Some(pod) = pod_request.object.as_ref()
        {
            let mut documents =
                RequestDocuments::new(evaluation.lookup(), pod_request.namespace.as_deref());
            let mut judging = Judging {
                decision: &mut *decision,
                exceptions: set.exceptions,
                cost,
                request: &pod_request,
                evaluation,
                documents: &mut documents,
                within: Some(workload),
                beyond: Beyond {
                    workload: Some((request, subject)),
                    owners: &[],
                },
            };
            judging.run(candidates.into_iter(), pod).await;
        }
    }
}

/// One pass of validate policies over an object: the request as they see it, and where the
/// decision goes.
struct Judging<'r, 'a> {
    decision: &'r mut Decision,
    exceptions: &'r Exceptions,
    /// The review's CEL ceilings.
    cost: &'a ReviewCost,
    request: &'a Request,
    evaluation: &'a Evaluation<'a>,
    documents: &'r mut RequestDocuments<'a>,
    within: Within,
    /// What else exceptions may select: the workload whose pod template is judged, the
    /// object's owners.
    beyond: Beyond<'a>,
}

impl<'a> Judging<'_, 'a> {
    /// Judges `subject` by the `candidates` that apply, in order.
    async fn run(&mut self, candidates: impl Iterator<Item = &'a CompiledPolicy>, subject: &Value) {
        let (request, evaluation, within) = (self.request, self.evaluation, self.within);
        let interrupted = move || evaluation.deadline_passed();
        let view = request.view(subject);
        let decision = &mut *self.decision;
        for policy in candidates {
            if !decision
                .runs(policy, &view, request, evaluation, self.documents, within)
                .await
            {
                continue;
            }
            let exemption = self.exceptions.for_policy(
                policy,
                &view,
                request,
                subject,
                self.beyond,
                evaluation.now(),
                (&self.cost.exceptions, &interrupted),
            );
            // After its exceptions' conditions, right before it runs (`run_validate` does not
            // pause before a policy's first step).
            evaluation.pause_point().await;
            if decision.exempted(policy, &exemption, within) {
                continue;
            }
            let mut scope = Scope {
                request,
                evaluation,
                documents: &mut *self.documents,
                policy: &policy.label,
                budget: PolicyBudget::new(self.cost.of(policy.id.namespace.is_some())),
            };
            let span = crate::trace::policy_span(policy);
            if let Some((binding, rule)) = admission_validation(policy) {
                let validated = admission_policy::validate(
                    binding,
                    rule,
                    policy.failure_policy,
                    &mut scope,
                    subject,
                )
                .instrument(span.clone())
                .await;
                decision.admission_validated(policy, validated);
                record_last(&span, decision);
                continue;
            }
            let ran = run_validate(policy, &mut scope, subject, &exemption)
                .instrument(span.clone())
                .await;
            let Judged {
                reasons,
                status,
                warnings,
                annotations,
            } = match ran {
                Ok(found) => found,
                Err(error) => {
                    decision.policy_error(policy, within, &error);
                    record_last(&span, decision);
                    continue;
                }
            };
            decision.applied_policies.push(String::from(&*policy.label));
            let outcome = if reasons.is_empty() {
                PolicyOutcome::Passed
            } else {
                PolicyOutcome::Rejected
            };
            decision.record(policy, outcome);
            record_outcome(&span, outcome);
            if decision.findings.is_some() {
                if reasons.is_empty() {
                    decision.found(policy, None, ResultStatus::Pass, String::new, within);
                }
                if let PolicyRules::Validate { actions, .. } = &policy.rules {
                    let result = rejection(actions);
                    for (i, reason) in &reasons {
                        let rule = Some(rule_label(policy, *i));
                        decision.found(policy, rule, result, || reason.clone(), within);
                    }
                }
            }
            for (key, value) in annotations {
                decision
                    .audit_annotations
                    .insert(annotation_key(&audit_key(policy), &key), value);
            }
            let speaker = speaker(policy, within);
            decision
                .warnings
                .extend(warnings.into_iter().map(|w| format!("{speaker}: {w}")));
            if reasons.is_empty() {
                continue;
            }
            let PolicyRules::Validate { actions, .. } = &policy.rules else {
                continue;
            };
            for action in actions {
                match action {
                    ValidationAction::Deny => {
                        if decision.allowed {
                            decision.status_reason = status.map(StatusReason::from);
                        }
                        decision.allowed = false;
                        decision
                            .messages
                            .extend(reasons.iter().map(|(_, r)| format!("{speaker}: {r}")));
                    }
                    ValidationAction::Warn => {
                        decision
                            .warnings
                            .extend(reasons.iter().map(|(_, r)| format!("{speaker}: {r}")));
                    }
                    ValidationAction::Audit => {
                        let mut found = reasons
                            .iter()
                            .map(|(_, r)| r.as_str())
                            .collect::<Vec<_>>()
                            .join("; ");
                        if let Some(workload) = within {
                            found = format!("{}: {found}", workload.field);
                        }
                        decision.audit_annotations.insert(audit_key(policy), found);
                    }
                }
            }
        }
    }
}

/// [`PolicySet::review`](crate::PolicySet::review).
pub(crate) async fn review(
    set: Indexed<'_>,
    request: &Request,
    evaluation: &Evaluation<'_>,
) -> Decision {
    let mut decision = mutate(set, request, evaluation).await;
    if !decision.allowed {
        return decision;
    }
    let judged = match request.operation {
        Operation::Delete => validate(set, request, None, evaluation).await,
        _ => validate(set, request, decision.patched.as_ref(), evaluation).await,
    };
    decision.merge(judged);
    if !decision.allowed {
        decision.patch = json_patch::Patch(Vec::new());
        decision.patched = request.subject().cloned();
    }
    decision
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_an_allowing_mutating_decision_that_changed_something_carries_a_patch() {
        let mut decision = Decision::allow(None);
        decision.patch =
            serde_json::from_value(json!([{"op": "add", "path": "/metadata/labels", "value": {}}]))
                .expect("a JSON patch");
        assert!(decision.carries_patch(WebhookKind::Mutating, Operation::Create));
        assert!(decision.carries_patch(WebhookKind::Mutating, Operation::Update));
        assert!(!decision.carries_patch(WebhookKind::Mutating, Operation::Delete));
        assert!(!decision.carries_patch(WebhookKind::Validating, Operation::Create));
        decision.allowed = false;
        assert!(!decision.carries_patch(WebhookKind::Mutating, Operation::Create));
        let unchanged = Decision::allow(None);
        assert!(!unchanged.carries_patch(WebhookKind::Mutating, Operation::Create));
    }
}
