//! Pairing admission policies with their bindings and compiling each pair into a policy kanon
//! evaluates: the policy's expressions once (shared by its bindings), each binding's match
//! resources, params and actions on their own.

use std::collections::BTreeMap;
use std::sync::Arc;

use kanon_api::{CelMutation, CelValidation, FailurePolicy, PolicyKind, ValidationAction};
use kanon_schema::Kinds;
use serde_json::Value;

use super::manifest::{
    self, AdmissionKind, BindingSpec, Manifest, MatchResources, MutatingPolicySpec, ParamKind,
    ValidatingPolicySpec, admission_kind_of,
};
use super::matching::Matcher;
use super::params::{ParamRef, Params};
use crate::error::{FieldError, InvalidPolicy};
use crate::language::cel::compile::Site;
use crate::language::cel::mutate::CelOverrideRule;
use crate::language::cel::validate::CelValidateRule;
use crate::policy::{
    CompiledOverrideRule, CompiledPolicy, CompiledValidateRule, PolicyId, PolicyRules,
};

/// One binding of an admission policy, as evaluation needs it beside the compiled rule.
#[derive(Debug)]
pub struct AdmissionBinding {
    /// The policy's name.
    pub policy: String,
    /// The binding's name.
    pub binding: String,
    /// Which kind of policy.
    pub(crate) mutating: bool,
    /// The policy's `matchConstraints`.
    pub(crate) constraints: Matcher,
    /// The binding's `matchResources`, when it has any.
    pub(crate) narrowed: Option<Matcher>,
    /// Where the params come from.
    pub(crate) params: Params,
    /// The binding's `validationActions`, as written (for the audit annotation).
    pub(crate) actions: Vec<ValidationAction>,
}

/// The compiled half of a policy, shared by its bindings.
enum Rule {
    Validating(Arc<CelValidateRule>),
    Mutating(Arc<CelOverrideRule>),
}

struct Policy {
    origin: String,
    kind: AdmissionKind,
    name: String,
    failure_policy: FailurePolicy,
    param_kind: Option<ParamKind>,
    constraints: Matcher,
    rule: Option<Rule>,
    bound: bool,
    /// What kube-controller-manager would write in its `status.typeChecking`, shown with its
    /// first binding.
    warnings: Vec<FieldError>,
}

/// What both kinds of policy have, as written.
struct Common<'m> {
    kind: AdmissionKind,
    name: &'m str,
    origin: &'m str,
    failure_policy: Option<&'m str>,
    match_constraints: Option<&'m MatchResources>,
    param_kind: Option<&'m ParamKind>,
}

struct Binding {
    origin: String,
    kind: AdmissionKind,
    name: String,
    spec: BindingSpec,
}

/// Kubernetes' admission policies and bindings gathered from documents
/// ([`AdmissionPolicies::add`]), then paired into policies kanon evaluates
/// ([`AdmissionPolicies::compile`]).
#[derive(Default)]
pub struct AdmissionPolicies {
    policies: Vec<Policy>,
    bindings: Vec<Binding>,
    /// Where each problem was found, and the problem.
    problems: Vec<(String, InvalidPolicy)>,
    /// The kinds VAPs are type-checked against; `None`: the built-in kinds.
    kinds: Option<Kinds>,
}

fn invalid(kind: AdmissionKind, name: &str, errors: Vec<FieldError>) -> InvalidPolicy {
    InvalidPolicy {
        policy: format!("{kind}/{name}"),
        errors,
    }
}

impl AdmissionPolicies {
    /// No documents yet.
    pub fn new() -> Self {
        AdmissionPolicies::default()
    }

    /// No documents yet; VAPs are type-checked against `kinds` (built-in and custom), as
    /// kube-controller-manager checks them against the kinds its cluster serves.
    pub fn with_kinds(kinds: Kinds) -> Self {
        AdmissionPolicies {
            kinds: Some(kinds),
            ..AdmissionPolicies::default()
        }
    }

    /// Whether `document` is one of the kinds this reads ([`admission_kind_of`]).
    pub fn accepts(document: &Value) -> bool {
        admission_kind_of(document).is_some()
    }

    /// Reads one document: a ValidatingAdmissionPolicy, MutatingAdmissionPolicy or a binding
    /// of one. A policy's expressions are compiled here; every problem is kept for
    /// [`AdmissionPolicies::compile`].
    pub fn add(&mut self, document: &Value) {
        self.add_from(document, "");
    }

    /// [`AdmissionPolicies::add`] for a document from `origin` (a file, `file (document 2)`),
    /// which its problems name.
    pub fn add_from(&mut self, document: &Value, origin: &str) {
        let origin = origin.to_owned();
        let Some(kind) = admission_kind_of(document) else {
            self.problems.push((origin, InvalidPolicy {
                policy: "document".to_owned(),
                errors: vec![FieldError::new(
                    "kind",
                    "not a ValidatingAdmissionPolicy, MutatingAdmissionPolicy or binding of one at a version kanon reads (admissionregistration.k8s.io/v1; v1beta1 for the mutating kinds)",
                )],
            }));
            return;
        };
        let name = document
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let outcome = match kind {
            AdmissionKind::ValidatingPolicy => manifest::decode(document).map(|m| {
                self.add_validating(m, &origin);
            }),
            AdmissionKind::MutatingPolicy => manifest::decode(document).map(|m| {
                self.add_mutating(m, &origin);
            }),
            AdmissionKind::ValidatingBinding | AdmissionKind::MutatingBinding => {
                manifest::decode::<Manifest<BindingSpec>>(document).map(|m| {
                    self.bindings.push(Binding {
                        origin: origin.clone(),
                        kind,
                        name: m.name().to_owned(),
                        spec: m.spec,
                    })
                })
            }
        };
        if let Err(errors) = outcome {
            self.problems
                .push((origin.clone(), invalid(kind, &name, errors)));
        }
        if name.is_empty() {
            self.problems.push((
                origin,
                invalid(
                    kind,
                    "",
                    vec![FieldError::new("metadata.name", "is required")],
                ),
            ));
        }
    }

    fn add_validating(&mut self, manifest: Manifest<ValidatingPolicySpec>, origin: &str) {
        let spec = &manifest.spec;
        let written = CelValidation {
            match_conditions: spec.match_conditions.clone(),
            variables: spec.variables.clone(),
            validations: spec.validations.clone(),
            audit_annotations: spec.audit_annotations.clone(),
            references: BTreeMap::new(),
        };
        let common = Common {
            kind: AdmissionKind::ValidatingPolicy,
            name: manifest.name(),
            origin,
            failure_policy: spec.failure_policy.as_deref(),
            match_constraints: spec.match_constraints.as_ref(),
            param_kind: spec.param_kind.as_ref(),
        };
        let kinds = self.kinds.clone().map(Ok).unwrap_or_else(Kinds::builtin);
        let warnings = match kinds {
            Ok(kinds) => super::type_checking::warnings(spec, &kinds),
            // The embedded schema is checked by tests; without it there is nothing to check
            // against.
            Err(_) => Vec::new(),
        };
        self.add_policy(common, warnings, |errors| {
            crate::language::cel::validate::compile(
                &written,
                "spec",
                Site::AdmissionPolicy,
                None,
                errors,
            )
            .map(|r| Rule::Validating(Arc::new(r)))
        });
    }

    fn add_mutating(&mut self, manifest: Manifest<MutatingPolicySpec>, origin: &str) {
        let spec = &manifest.spec;
        let written = CelMutation {
            match_conditions: spec.match_conditions.clone(),
            variables: spec.variables.clone(),
            mutations: spec.mutations.clone(),
            references: BTreeMap::new(),
        };
        let common = Common {
            kind: AdmissionKind::MutatingPolicy,
            name: manifest.name(),
            origin,
            failure_policy: spec.failure_policy.as_deref(),
            match_constraints: spec.match_constraints.as_ref(),
            param_kind: spec.param_kind.as_ref(),
        };
        let reinvocation = spec.reinvocation_policy.as_deref();
        // kube-controller-manager checks only ValidatingAdmissionPolicies' types.
        self.add_policy(common, Vec::new(), |errors| {
            match reinvocation {
                Some("Never" | "IfNeeded") => {}
                None => errors.push(FieldError::new("spec.reinvocationPolicy", "is required")),
                Some(other) => errors.push(FieldError::new(
                    "spec.reinvocationPolicy",
                    format!("unsupported value `{other}`: supported values: Never, IfNeeded"),
                )),
            }
            crate::language::cel::mutate::compile(
                &written,
                "spec",
                Site::AdmissionPolicy,
                None,
                errors,
            )
            .map(|r| Rule::Mutating(Arc::new(r)))
        });
    }

    /// Checks what both kinds of policy have, compiles the rule, and keeps the policy (or its
    /// problems).
    fn add_policy(
        &mut self,
        common: Common<'_>,
        warnings: Vec<FieldError>,
        rule: impl FnOnce(&mut Vec<FieldError>) -> Option<Rule>,
    ) {
        let mut errors = Vec::new();
        let failure_policy = failure_policy(common.failure_policy, &mut errors);
        let mutating = common.kind == AdmissionKind::MutatingPolicy;
        let constraints = constraints(common.match_constraints, mutating, &mut errors);
        check_param_kind(common.param_kind, &mut errors);
        let rule = rule(&mut errors);
        let policy = Policy {
            origin: common.origin.to_owned(),
            kind: common.kind,
            name: common.name.to_owned(),
            failure_policy,
            param_kind: common.param_kind.cloned(),
            constraints,
            rule,
            bound: false,
            warnings,
        };
        self.keep(common.kind, common.name, errors, policy);
    }

    fn keep(&mut self, kind: AdmissionKind, name: &str, errors: Vec<FieldError>, policy: Policy) {
        if errors.is_empty() {
            self.policies.push(policy);
        } else {
            self.problems
                .push((policy.origin, invalid(kind, name, errors)));
        }
    }

    /// Pairs every binding with its policy: one compiled policy per binding, or every problem
    /// found (in the documents, a binding that names no policy given, a policy no binding
    /// names: offline, either would silently do nothing), each as `origin: problem`.
    pub fn compile(mut self) -> Result<Vec<CompiledPolicy>, Vec<String>> {
        let mut compiled = Vec::new();
        let mut seen: Vec<(AdmissionKind, &str)> = Vec::new();
        for policy in &self.policies {
            if seen.contains(&(policy.kind, &policy.name)) {
                self.problems
                    .push(defined_twice(&policy.origin, policy.kind, &policy.name));
            }
            seen.push((policy.kind, &policy.name));
        }
        let bindings = std::mem::take(&mut self.bindings);
        let mut binding_names: Vec<(AdmissionKind, &str)> = Vec::new();
        for binding in &bindings {
            if binding_names.contains(&(binding.kind, &binding.name)) {
                self.problems
                    .push(defined_twice(&binding.origin, binding.kind, &binding.name));
                continue;
            }
            binding_names.push((binding.kind, &binding.name));
            match self.bind(binding) {
                Ok(Some(policy)) => compiled.push(policy),
                Ok(None) => {}
                Err(errors) => self.problems.push((
                    binding.origin.clone(),
                    invalid(binding.kind, &binding.name, errors),
                )),
            }
        }
        for policy in self.policies.iter().filter(|p| !p.bound) {
            let binding = match policy.kind {
                AdmissionKind::MutatingPolicy => AdmissionKind::MutatingBinding,
                _ => AdmissionKind::ValidatingBinding,
            };
            self.problems.push((
                policy.origin.clone(),
                invalid(
                    policy.kind,
                    &policy.name,
                    vec![FieldError::new(
                        "",
                        format!("no {binding} among the documents names it, so it would apply to nothing (kube-apiserver evaluates a policy only through its bindings)"),
                    )],
                ),
            ));
        }
        if self.problems.is_empty() {
            return Ok(compiled);
        }
        Err(self
            .problems
            .iter()
            .map(|(origin, problem)| match origin.as_str() {
                "" => problem.to_string(),
                origin => format!("{origin}: {problem}"),
            })
            .collect())
    }

    /// Compiles one binding with its policy (`Ok(None)`: the policy is given but invalid, and
    /// already reported).
    fn bind(&mut self, binding: &Binding) -> Result<Option<CompiledPolicy>, Vec<FieldError>> {
        let mut errors = Vec::new();
        let spec = &binding.spec;
        let mutating = binding.kind == AdmissionKind::MutatingBinding;
        let policy_kind = if mutating {
            AdmissionKind::MutatingPolicy
        } else {
            AdmissionKind::ValidatingPolicy
        };
        if spec.policy_name.is_empty() {
            errors.push(FieldError::new("spec.policyName", "is required"));
        }
        let narrowed = spec
            .match_resources
            .as_ref()
            .map(|m| Matcher::compile(m, "spec.matchResources", mutating, false, &mut errors));
        let actions = if mutating {
            if spec.validation_actions.is_some() {
                errors.push(FieldError::new(
                    "spec.validationActions",
                    "unknown field (a MutatingAdmissionPolicyBinding has no validation actions)",
                ));
            }
            Vec::new()
        } else {
            validation_actions(spec.validation_actions.as_deref(), &mut errors)
        };
        let param_ref = spec
            .param_ref
            .as_ref()
            .and_then(|r| ParamRef::compile(r, "spec.paramRef", &mut errors));
        let known = self
            .policies
            .iter_mut()
            .find(|p| p.kind == policy_kind && p.name == spec.policy_name);
        let Some(policy) = known else {
            if !spec.policy_name.is_empty() {
                let invalid_given = self
                    .problems
                    .iter()
                    .any(|(_, p)| p.policy == format!("{policy_kind}/{}", spec.policy_name));
                if !invalid_given {
                    errors.push(FieldError::new(
                        "spec.policyName",
                        format!(
                            "no {policy_kind} named `{}` among the documents",
                            spec.policy_name
                        ),
                    ));
                }
            }
            return if errors.is_empty() {
                Ok(None)
            } else {
                Err(errors)
            };
        };
        // The first binding shows the policy's warnings; the others find none left.
        let warnings = std::mem::take(&mut policy.warnings);
        policy.bound = true;
        if !errors.is_empty() {
            return Err(errors);
        }
        let params = Params::new(policy.param_kind.clone(), param_ref);
        let admission = Arc::new(AdmissionBinding {
            policy: policy.name.clone(),
            binding: binding.name.clone(),
            mutating,
            constraints: policy.constraints.clone(),
            narrowed,
            params,
            actions: actions.clone(),
        });
        let operations = policy.constraints.operations();
        let (kind, rules) = match &policy.rule {
            Some(Rule::Validating(rule)) => (
                PolicyKind::ClusterValidatePolicy,
                PolicyRules::Validate {
                    rules: vec![CompiledValidateRule {
                        name: None,
                        operations,
                        template: None,
                        program: None,
                        cel: Some(rule.clone()),
                    }],
                    actions,
                },
            ),
            Some(Rule::Mutating(rule)) => (
                PolicyKind::ClusterOverridePolicy,
                PolicyRules::Override(vec![CompiledOverrideRule {
                    name: None,
                    operations,
                    template: None,
                    program: None,
                    cel: Some(rule.clone()),
                    plaintext: Vec::new(),
                    patch: Vec::new(),
                }]),
            ),
            None => return Ok(None),
        };
        let id = PolicyId {
            kind,
            namespace: None,
            name: policy.name.clone(),
            binding: Some(binding.name.clone()),
        };
        Ok(Some(CompiledPolicy {
            label: id.to_string().into(),
            id,
            failure_policy: policy.failure_policy,
            selectors: Vec::new(),
            namespace_selector: None,
            rules,
            defect: None,
            rendered: Vec::new(),
            warnings,
            pod_templates: false,
            admission: Some(admission),
            severity: None,
            category: None,
        }))
    }
}

/// The problem of a name given to two documents of one kind.
fn defined_twice(origin: &str, kind: AdmissionKind, name: &str) -> (String, InvalidPolicy) {
    let error = FieldError::new("metadata.name", "is defined more than once");
    (origin.to_owned(), invalid(kind, name, vec![error]))
}

fn failure_policy(written: Option<&str>, errors: &mut Vec<FieldError>) -> FailurePolicy {
    match written {
        None | Some("Fail") => FailurePolicy::Fail,
        Some("Ignore") => FailurePolicy::Ignore,
        Some(other) => {
            errors.push(FieldError::new(
                "spec.failurePolicy",
                format!("unsupported value `{other}`: supported values: Fail, Ignore"),
            ));
            FailurePolicy::Fail
        }
    }
}

fn constraints(
    written: Option<&MatchResources>,
    mutating: bool,
    errors: &mut Vec<FieldError>,
) -> Matcher {
    match written {
        Some(written) => Matcher::compile(written, "spec.matchConstraints", mutating, true, errors),
        None => {
            errors.push(FieldError::new("spec.matchConstraints", "is required"));
            Matcher::default()
        }
    }
}

fn check_param_kind(param_kind: Option<&ParamKind>, errors: &mut Vec<FieldError>) {
    if let Some(param_kind) = param_kind {
        if param_kind.api_version.is_empty() {
            errors.push(FieldError::new("spec.paramKind.apiVersion", "is required"));
        }
        if param_kind.kind.is_empty() {
            errors.push(FieldError::new("spec.paramKind.kind", "is required"));
        }
    }
}

/// A binding's `validationActions`: at least one, no repeats, not both Deny and Warn.
fn validation_actions(
    written: Option<&[String]>,
    errors: &mut Vec<FieldError>,
) -> Vec<ValidationAction> {
    let field = "spec.validationActions";
    let written = written.unwrap_or_default();
    if written.is_empty() {
        errors.push(FieldError::new(
            field,
            "at least one validation action is required",
        ));
    }
    let mut actions = Vec::new();
    for (index, action) in written.iter().enumerate() {
        let action = match action.as_str() {
            "Deny" => ValidationAction::Deny,
            "Warn" => ValidationAction::Warn,
            "Audit" => ValidationAction::Audit,
            other => {
                errors.push(FieldError::new(
                    format!("{field}[{index}]"),
                    format!("unsupported value `{other}`: supported values: Deny, Warn, Audit"),
                ));
                continue;
            }
        };
        if actions.contains(&action) {
            errors.push(FieldError::new(
                format!("{field}[{index}]"),
                format!("duplicate value `{}`", written[index]),
            ));
            continue;
        }
        actions.push(action);
    }
    if actions.contains(&ValidationAction::Deny) && actions.contains(&ValidationAction::Warn) {
        errors.push(FieldError::new(
            field,
            "must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)",
        ));
    }
    actions
}
