//! Evaluation of a request against a [`PolicySet`](crate::PolicySet): overrides (patches)
//! and validations (verdicts), with each policy's failure policy deciding what its errors do.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use kanon_api::{FailurePolicy, Operation, ValidationAction};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::condition::{ConditionMessage, condition_from_output};
use crate::diff::Changes;
use crate::index::Indexed;
use crate::lookup::{Lookup, ObjectQuery};
use crate::native::NativeOutcome;
use crate::plaintext;
use crate::policy::{CompiledPolicy, PolicyRules, RuleProgram};
use crate::program::{ProgramVerdict, json_value, patch_from_output, verdict_from_output};
use crate::refs::RefScope;
use crate::request::{Deadline, Request};
use crate::selector::{ObjectView, labels_of};

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
    /// The policy failed to evaluate; `ignored` under `failurePolicy: Ignore`.
    Failed {
        /// Whether the failure was ignored.
        ignored: bool,
    },
}

impl Decision {
    fn allow(patched: Option<Value>) -> Self {
        Decision {
            allowed: true,
            messages: Vec::new(),
            warnings: Vec::new(),
            audit_annotations: BTreeMap::new(),
            applied_policies: Vec::new(),
            patch: json_patch::Patch(Vec::new()),
            patched,
            policy_results: Vec::new(),
        }
    }

    /// Records an evaluation error of `policy` under its failure policy.
    fn policy_error(&mut self, policy: &CompiledPolicy, error: &str) {
        self.record(
            policy,
            PolicyOutcome::Failed {
                ignored: policy.failure_policy == FailurePolicy::Ignore,
            },
        );
        match policy.failure_policy {
            FailurePolicy::Fail => {
                self.allowed = false;
                self.messages.push(format!("{}: {error}", policy.id));
            }
            FailurePolicy::Ignore => self.warnings.push(format!(
                "{}: skipped (failurePolicy Ignore): {error}",
                policy.id
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
        namespaces: &mut NamespaceLabels<'_>,
    ) -> bool {
        let applies = applies(policy, view, request.operation, namespaces).await;
        self.settle(policy, applies, request)
    }

    /// Whether `policy`, which `applies` or not, is to run now: a policy that applies but
    /// cannot (the deadline passed, its namespace could not be read) fails under its failure
    /// policy here.
    fn settle(
        &mut self,
        policy: &CompiledPolicy,
        applies: Result<bool, String>,
        request: &Request,
    ) -> bool {
        if request.deadline.as_ref().is_some_and(Deadline::passed) {
            // Only policies that meet the request fail; the others would not have run.
            if applies.unwrap_or(true) {
                self.policy_error(
                    policy,
                    "the review's deadline passed before this policy ran",
                );
            }
            return false;
        }
        match applies {
            Ok(applies) => applies,
            Err(e) => {
                self.policy_error(policy, &e);
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

    /// Folds the verdict of a later stage (validation after mutation) into this one.
    fn merge(&mut self, later: Decision) {
        self.allowed &= later.allowed;
        self.messages.extend(later.messages);
        self.warnings.extend(later.warnings);
        self.audit_annotations.extend(later.audit_annotations);
        self.applied_policies.extend(later.applied_policies);
        self.policy_results.extend(later.policy_results);
    }
}

/// Reads the labels of the object's namespace once per request, only if a policy needs them.
struct NamespaceLabels<'a> {
    lookup: &'a dyn Lookup,
    namespace: Option<&'a str>,
    cached: Option<Result<Option<Arc<Value>>, String>>,
}

impl<'a> NamespaceLabels<'a> {
    fn new(lookup: &'a dyn Lookup, namespace: Option<&'a str>) -> Self {
        NamespaceLabels {
            lookup,
            namespace,
            cached: None,
        }
    }

    /// Reads the namespace, once.
    async fn load(&mut self) -> &Result<Option<Arc<Value>>, String> {
        if self.cached.is_none() {
            let loaded = match self.namespace {
                None => Ok(None),
                Some(ns) => {
                    let query = ObjectQuery {
                        api_version: "v1",
                        kind: "Namespace",
                        namespace: None,
                        policy: "",
                        confined_to: None,
                    };
                    match self.lookup.get(query, ns).await {
                        Ok(Some(object)) => Ok(Some(object)),
                        Ok(None) => Err(format!(
                            "namespaceSelector: namespace `{ns}` was not found, so its labels are unknown"
                        )),
                        Err(e) => Err(format!("namespaceSelector: {e}")),
                    }
                }
            };
            self.cached = Some(loaded);
        }
        match &self.cached {
            Some(loaded) => loaded,
            None => unreachable!("set above"),
        }
    }

    /// The labels of the namespace.
    async fn labels(&mut self) -> Result<Option<&Map<String, Value>>, String> {
        match self.load().await {
            Ok(object) => Ok(object.as_deref().and_then(labels_of)),
            Err(e) => Err(e.clone()),
        }
    }

    /// The namespace object, for programs' `namespaceObject`; `None` when unknown.
    async fn object(&mut self) -> Option<Arc<Value>> {
        self.load().await.as_ref().ok().and_then(Clone::clone)
    }
}

/// What a program run needs besides the program: the request, the object as it stands now,
/// cluster objects and the namespace.
struct Scope<'a, 'n> {
    request: &'a Request,
    lookup: &'a dyn Lookup,
    namespaces: &'n mut NamespaceLabels<'a>,
    /// The policy being run.
    policy: &'a CompiledPolicy,
}

impl Scope<'_, '_> {
    /// The variables a program sees.
    async fn context(&mut self, object: &Value, refs: Map<String, Value>) -> minijinja::Value {
        use minijinja::value::Serde;
        let namespace_object = self.namespaces.object().await;
        let old = self.request.old_object.as_ref();
        // Documents are wrapped, not converted: programs read only the parts they touch.
        minijinja::context! {
            object => json_value(Arc::new(object.clone())),
            oldObject => old.map(|o| json_value(Arc::new(o.clone()))).unwrap_or(minijinja::Value::from(())),
            operation => self.request.operation.as_str(),
            request => minijinja::Value::from(Serde(&self.request.info)),
            namespaceObject => namespace_object
                .as_deref()
                .map(|o| minijinja::Value::from(Serde(o)))
                .unwrap_or(minijinja::Value::from(())),
            refs => minijinja::Value::from(Serde(Value::Object(refs))),
        }
    }

    /// Resolves the rule's references against `object` and runs it: natively when its native
    /// form can vouch for the result, else its program.
    async fn run(&mut self, rule: &RuleProgram, object: &Value) -> Result<RuleOutput, String> {
        let refs = self.resolve(rule, object).await?;
        if let Some(native) = &rule.native
            && let Some(outcome) = native.run(object, &refs, rule.program.limits())
        {
            return Ok(RuleOutput::Native(outcome));
        }
        self.run_program(rule, object, refs)
            .await
            .map(RuleOutput::Program)
    }

    /// Runs the rule's program (in the lookup's program host, for a hand-written one): its
    /// output.
    async fn run_program(
        &mut self,
        rule: &RuleProgram,
        object: &Value,
        refs: Map<String, Value>,
    ) -> Result<Option<Value>, String> {
        if rule.authored
            && let Some(host) = self.lookup.programs()
        {
            let input = self.input(object, refs).await;
            return host
                .run(&rule.program, input)
                .await
                .map_err(|e| rule.error(&e));
        }
        let context = self.context(object, refs).await;
        rule.program.run(&context).map_err(|e| rule.error(&e))
    }

    /// The variables a program sees, as JSON for a [`crate::host::ProgramHost`]: the same as
    /// [`Scope::context`].
    async fn input(
        &mut self,
        object: &Value,
        refs: Map<String, Value>,
    ) -> crate::host::ProgramInput {
        let namespace_object = self.namespaces.object().await;
        crate::host::ProgramInput {
            object: object.clone(),
            old_object: self.request.old_object.clone(),
            operation: self.request.operation.as_str().to_string(),
            request: self.request.info.clone(),
            namespace_object: namespace_object.as_deref().cloned(),
            refs,
        }
    }

    /// Runs an override rule: its operations.
    async fn patch(
        &mut self,
        rule: &RuleProgram,
        object: &Value,
    ) -> Result<json_patch::Patch, String> {
        match self.run(rule, object).await? {
            RuleOutput::Native(NativeOutcome::Patch(patch)) => Ok(patch),
            RuleOutput::Native(NativeOutcome::Verdict(_)) => Err(format!(
                "{}: a condition cannot run as an override",
                rule.field
            )),
            RuleOutput::Program(output) => patch_from_output(output).map_err(|e| rule.error(&e)),
        }
    }

    /// Runs a validate rule: its verdict.
    async fn verdict(
        &mut self,
        rule: &RuleProgram,
        object: &Value,
    ) -> Result<ProgramVerdict, String> {
        if let Some(message) = &rule.message {
            return self.condition(rule, message, object).await;
        }
        match self.run(rule, object).await? {
            RuleOutput::Native(_) => Err(format!(
                "{}: a template's native form answered for a program (a defect of kanon)",
                rule.field
            )),
            RuleOutput::Program(output) => verdict_from_output(output).map_err(|e| rule.error(&e)),
        }
    }

    /// Runs a validate condition: its check decides, then a denial renders the message, which
    /// cannot change the verdict (see [`crate::condition`]).
    async fn condition(
        &mut self,
        rule: &RuleProgram,
        message: &ConditionMessage,
        object: &Value,
    ) -> Result<ProgramVerdict, String> {
        let refs = self.resolve(rule, object).await?;
        let native = rule
            .native
            .as_ref()
            .and_then(|native| native.run(object, &refs, rule.program.limits()));
        let (verdict, kept) = match native {
            // The native form only borrows the references: they stay for the message.
            Some(NativeOutcome::Verdict(verdict)) => (verdict, Some(refs)),
            Some(NativeOutcome::Patch(_)) => {
                return Err(format!(
                    "{}: an override template cannot run as a validation",
                    rule.field
                ));
            }
            None => {
                // The program takes the references: a copy stays for the message only when it
                // reads variables.
                let kept = message.needs_context().then(|| refs.clone());
                let output = self.run_program(rule, object, refs).await?;
                let verdict = condition_from_output(output).map_err(|e| rule.error(&e))?;
                (verdict, kept)
            }
        };
        let kept = kept.filter(|_| message.needs_context());
        if verdict.valid {
            return Ok(ProgramVerdict {
                valid: true,
                ..Default::default()
            });
        }
        let context = match kept {
            Some(refs) => {
                use minijinja::value::Serde;
                let (data, value) = message.variables(&refs, &verdict);
                // The item `data` was read from (the container, for a path through
                // `containers[*]`).
                let item = verdict.item.and_then(|i| {
                    let (_, data_ref) = rule.refs.iter().find(|(name, _)| *name == "data")?;
                    data_ref.item_at(object, self.request.old_object.as_ref(), i)
                });
                let base = self.context(object, refs).await;
                let base = match item {
                    Some(item) => minijinja::context! { item => Serde(item), ..base },
                    None => base,
                };
                Some(match value {
                    Some(value) => minijinja::context! {
                        data => Serde(data), value => Serde(value), ..base
                    },
                    None => minijinja::context! { data => Serde(data), ..base },
                })
            }
            None => None,
        };
        let rendered = message.render(context.as_ref());
        Ok(ProgramVerdict {
            valid: false,
            reason: rendered.text,
            warnings: rendered.warning.into_iter().collect(),
        })
    }

    /// The rule's references resolved against `object`, by name.
    async fn resolve(
        &mut self,
        rule: &RuleProgram,
        object: &Value,
    ) -> Result<Map<String, Value>, String> {
        let mut refs = Map::new();
        if !rule.refs.is_empty() {
            // Placeholders in references see the same variables as the program, bar `refs`.
            let base = if rule.refs.iter().any(|(_, r)| r.needs_context()) {
                Some(self.context(object, Map::new()).await)
            } else {
                None
            };
            let policy = self.policy.id.to_string();
            let scope = RefScope {
                object,
                old_object: self.request.old_object.as_ref(),
                namespace: self.request.namespace.as_deref(),
                lookup: self.lookup,
                policy: &policy,
                context: base.as_ref(),
            };
            for (name, reference) in &rule.refs {
                if let Some(value) = reference.resolve(&scope).await? {
                    refs.insert((*name).to_string(), value);
                }
            }
        }
        Ok(refs)
    }
}

/// What running a rule gave: the native form's result, or the program's output.
enum RuleOutput {
    Native(NativeOutcome),
    Program(Option<Value>),
}

/// Whether `policy` applies to the request: selectors, namespace selector and at least one
/// rule for the operation. A namespace that cannot be read is an evaluation error.
async fn applies(
    policy: &CompiledPolicy,
    view: &ObjectView<'_>,
    operation: Operation,
    namespaces: &mut NamespaceLabels<'_>,
) -> Result<bool, String> {
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
    if !policy.reads_namespace_labels(view) {
        return policy.selects_namespace(view, || Ok(None));
    }
    let labels = namespaces.labels().await?;
    policy.selects_namespace(view, || Ok(labels))
}

fn defect_message(policy: &CompiledPolicy) -> Option<String> {
    policy.defect.as_ref().map(|d| {
        let errors: Vec<String> = d.errors.iter().map(ToString::to_string).collect();
        format!("the policy is invalid: {}", errors.join("; "))
    })
}

/// Runs one override policy's rules for `operation` on `working`. On error `working` may be
/// partly changed; the caller restores it.
async fn run_override(
    policy: &CompiledPolicy,
    scope: &mut Scope<'_, '_>,
    working: &mut Value,
    changes: &mut Changes,
) -> Result<usize, String> {
    if let Some(message) = defect_message(policy) {
        return Err(message);
    }
    let PolicyRules::Override(rules) = &policy.rules else {
        return Ok(0);
    };
    let mut applied = 0;
    let operation = scope.request.operation;
    for rule in rules.iter().filter(|r| r.operations.contains(operation)) {
        for program in [&rule.template, &rule.program].into_iter().flatten() {
            let mut ops = scope.patch(program, working).await?.0;
            applied += ops.len();
            // A single operation (the usual template output) applied and recorded in one walk.
            if ops.len() == 1
                && let Some(op) = ops.pop()
                && let Err(op) = changes.apply_one(working, op)
            {
                ops.push(op);
            }
            ops.iter().for_each(|op| changes.before(op, working));
            plaintext::apply_all_owned(working, ops)
                .map_err(|(i, e)| format!("{}: operation {i}: {e}", program.field))?;
        }
        applied += rule.patch.len();
        // Copied only where it can go in one walk.
        if let [op] = rule.patch.as_slice()
            && changes.saves_places()
            && changes.apply_one(working, op.clone()).is_ok()
        {
            continue;
        }
        rule.patch.iter().for_each(|op| changes.before(op, working));
        plaintext::apply_all(working, &rule.patch)
            .map_err(|(i, e)| format!("{}: {e}", rule.plaintext[i].field))?;
    }
    Ok(applied)
}

/// The verdicts of one validate policy's rules: reasons of failed checks and warnings.
async fn run_validate(
    policy: &CompiledPolicy,
    scope: &mut Scope<'_, '_>,
    object: &Value,
) -> Result<(Vec<String>, Vec<String>), String> {
    if let Some(message) = defect_message(policy) {
        return Err(message);
    }
    let PolicyRules::Validate { rules, .. } = &policy.rules else {
        return Ok((Vec::new(), Vec::new()));
    };
    let operation = scope.request.operation;
    let (mut reasons, mut warnings) = (Vec::new(), Vec::new());
    for (i, rule) in rules
        .iter()
        .enumerate()
        .filter(|(_, r)| r.operations.contains(operation))
    {
        for program in [&rule.template, &rule.program].into_iter().flatten() {
            let verdict = scope.verdict(program, object).await?;
            warnings.extend(verdict.warnings);
            if !verdict.valid {
                reasons.push(if verdict.reason.is_empty() {
                    format!("spec.validateRules[{i}] rejected the object")
                } else {
                    verdict.reason
                });
            }
        }
    }
    Ok((reasons, warnings))
}

/// The audit annotation key of a policy: `<kind>.<namespace>.<name>`, lower-case, at most
/// 63 characters and ending with an alphanumeric character, as Kubernetes requires of
/// annotation names.
fn audit_key(policy: &CompiledPolicy) -> String {
    let mut key = policy.id.kind.as_str().to_ascii_lowercase();
    if let Some(ns) = &policy.id.namespace {
        key = format!("{key}.{ns}");
    }
    key = format!("{key}.{}", policy.id.name);
    // At most 63 bytes, cut at a character (names in policy files may be any text).
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

/// [`PolicySet::mutate`](crate::PolicySet::mutate).
pub(crate) async fn mutate(set: Indexed<'_>, request: &Request, lookup: &dyn Lookup) -> Decision {
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
        lookup,
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
    lookup: &dyn Lookup,
) -> Decision {
    if request.operation == Operation::Delete {
        return Decision::allow(None);
    }
    let Some(object) = request.object.take() else {
        return Decision::allow(None);
    };
    let request = &*request;
    let (mut decision, working, changes) =
        override_object(set, request, Cow::Owned(object), Changes::saving(), lookup).await;
    if decision.allowed
        && !changes.is_empty()
        && let Some(patch) = changes.into_diff(working.into_owned())
    {
        decision.patch = patch;
    }
    decision
}

/// Runs the override policies on `working`: every applicable policy in order, each seeing
/// the result of the previous one, each operation recorded in `changes` before it applies.
/// A borrowed `working` is copied only once a policy runs.
async fn override_object<'v>(
    set: Indexed<'_>,
    request: &Request,
    mut working: Cow<'v, Value>,
    mut changes: Changes,
    lookup: &dyn Lookup,
) -> (Decision, Cow<'v, Value>, Changes) {
    let mut decision = Decision::allow(None);
    let mut namespaces = NamespaceLabels::new(lookup, request.namespace.as_deref());
    let candidates = set.override_candidates(
        &request.api_version,
        &request.kind,
        request.namespace.as_deref(),
    );
    // Policies select on the object as it came, not on earlier policies' changes, so which
    // apply is known before the object changes.
    let mut selected = Vec::new();
    {
        let view = request.view(&working);
        for policy in candidates {
            let applies = applies(policy, &view, request.operation, &mut namespaces).await;
            selected.push((policy, applies));
        }
    }
    for (policy, applies) in selected {
        if !decision.settle(policy, applies, request) {
            continue;
        }
        let object = working.to_mut();
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
        let mut scope = Scope {
            request,
            lookup,
            namespaces: &mut namespaces,
            policy,
        };
        match run_override(policy, &mut scope, object, &mut changes).await {
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
                }
                decision.policy_error(policy, &e);
            }
        }
    }
    (decision, working, changes)
}

/// [`PolicySet::validate`](crate::PolicySet::validate).
pub(crate) async fn validate(
    set: Indexed<'_>,
    request: &Request,
    object: Option<&Value>,
    lookup: &dyn Lookup,
) -> Decision {
    let subject = object.or(request.subject());
    let mut decision = Decision::allow(None);
    let Some(subject) = subject else {
        return decision;
    };
    let view = request.view(subject);
    let mut namespaces = NamespaceLabels::new(lookup, request.namespace.as_deref());
    let candidates = set.validate_candidates(
        &request.api_version,
        &request.kind,
        request.namespace.as_deref(),
    );
    for policy in candidates {
        if !decision.runs(policy, &view, request, &mut namespaces).await {
            continue;
        }
        let mut scope = Scope {
            request,
            lookup,
            namespaces: &mut namespaces,
            policy,
        };
        let (reasons, warnings) = match run_validate(policy, &mut scope, subject).await {
            Ok(found) => found,
            Err(message) => {
                decision.policy_error(policy, &message);
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
        decision
            .warnings
            .extend(warnings.into_iter().map(|w| format!("{}: {w}", policy.id)));
        if reasons.is_empty() {
            continue;
        }
        let PolicyRules::Validate { actions, .. } = &policy.rules else {
            continue;
        };
        for action in actions {
            match action {
                ValidationAction::Deny => {
                    decision.allowed = false;
                    decision
                        .messages
                        .extend(reasons.iter().map(|r| format!("{}: {r}", policy.id)));
                }
                ValidationAction::Warn => {
                    decision
                        .warnings
                        .extend(reasons.iter().map(|r| format!("{}: {r}", policy.id)));
                }
                ValidationAction::Audit => {
                    decision
                        .audit_annotations
                        .insert(audit_key(policy), reasons.join("; "));
                }
            }
        }
    }
    decision
}

/// [`PolicySet::review`](crate::PolicySet::review).
pub(crate) async fn review(set: Indexed<'_>, request: &Request, lookup: &dyn Lookup) -> Decision {
    let mut decision = mutate(set, request, lookup).await;
    if !decision.allowed {
        return decision;
    }
    let judged = match request.operation {
        Operation::Delete => validate(set, request, None, lookup).await,
        _ => validate(set, request, decision.patched.as_ref(), lookup).await,
    };
    decision.merge(judged);
    if !decision.allowed {
        decision.patch = json_patch::Patch(Vec::new());
        decision.patched = request.subject().cloned();
    }
    decision
}
