//! The checked form of a policy that the index and evaluation use, built once per change.

use std::sync::Arc;

use kanon_api::{FailurePolicy, ValidationAction};
use serde_json::{Map, Value};

use super::object::PolicyId;
use super::operations::OperationSet;
use crate::error::{FieldError, InvalidPolicy};
use crate::language::cel::mutate::CelOverrideRule;
use crate::language::cel::validate::CelValidateRule;
use crate::language::plaintext::PlaintextOp;
use crate::language::{OverrideStep, RuleProgram, ValidateStep};
use crate::rule::RuleError;
use crate::selector::{LabelMatcher, ObjectView, ResourceMatcher, labels_of};

/// One compiled override rule.
#[derive(Clone, Debug)]
pub struct CompiledOverrideRule {
    /// Its `name`, by which an exception may exempt from it alone.
    pub name: Option<String>,
    /// The operations it applies to.
    pub operations: OperationSet,
    /// The program the template renders to.
    pub template: Option<RuleProgram>,
    /// The hand-written program.
    pub program: Option<RuleProgram>,
    /// The CEL mutations.
    pub(crate) cel: Option<Arc<CelOverrideRule>>,
    /// Plaintext operations, in order, with the fields they come from.
    pub plaintext: Vec<PlaintextOp>,
    /// The same operations, contiguous, to apply in one atomic step.
    pub patch: Vec<json_patch::PatchOperation>,
}

impl CompiledOverrideRule {
    /// Its parts, each in its language, in the order they run: template, program, plaintext.
    pub(crate) fn parts(&self) -> impl Iterator<Item = OverrideStep<'_>> {
        let template = self.template.as_ref().map(OverrideStep::Template);
        let program = self.program.as_ref().map(OverrideStep::Program);
        let cel = self.cel.as_deref().map(OverrideStep::Cel);
        let plaintext = (!self.patch.is_empty()).then_some(OverrideStep::Plaintext {
            ops: &self.patch,
            sources: &self.plaintext,
        });
        [template, program, cel, plaintext].into_iter().flatten()
    }

    /// How many atomic steps the rule takes: one per template, program, CEL block and
    /// plaintext list.
    pub fn steps(&self) -> usize {
        usize::from(self.template.is_some())
            + usize::from(self.program.is_some())
            + usize::from(self.cel.is_some())
            + usize::from(!self.patch.is_empty())
    }
}

/// One compiled validate rule.
#[derive(Clone, Debug)]
pub struct CompiledValidateRule {
    /// Its `name`, by which an exception may exempt from it alone.
    pub name: Option<String>,
    /// The operations it applies to.
    pub operations: OperationSet,
    /// The program the condition template renders to.
    pub template: Option<RuleProgram>,
    /// The hand-written program.
    pub program: Option<RuleProgram>,
    /// The CEL validations.
    pub(crate) cel: Option<Arc<CelValidateRule>>,
}

impl CompiledValidateRule {
    /// Its parts, each in its language, in the order they run: template, program, CEL.
    pub(crate) fn parts(&self) -> impl Iterator<Item = ValidateStep<'_>> {
        let template = self.template.as_ref().map(ValidateStep::Template);
        let program = self.program.as_ref().map(ValidateStep::Program);
        let cel = self.cel.as_deref().map(ValidateStep::Cel);
        [template, program, cel].into_iter().flatten()
    }
}

/// A template's rendered program, for `kanon render` and the policy status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rendered {
    /// Field path of the template.
    pub field: String,
    /// The program text (shared with the compiled program).
    pub source: Arc<str>,
}

/// What a compiled policy does.
#[derive(Clone, Debug)]
pub enum PolicyRules {
    /// Override rules, in order.
    Override(Vec<CompiledOverrideRule>),
    /// Validate rules, in order, and what a failure does.
    Validate {
        /// The rules.
        rules: Vec<CompiledValidateRule>,
        /// Deny (default), Warn and/or Audit.
        actions: Vec<ValidationAction>,
    },
}

/// A policy in the checked form the index and evaluation use, built once per policy change.
#[derive(Clone, Debug)]
pub struct CompiledPolicy {
    /// Identity.
    pub id: PolicyId,
    /// The identity as text (`Kind/name`, `Kind/namespace/name`), made once: every decision
    /// and metric names the policy by it.
    pub label: Arc<str>,
    /// What an evaluation error does.
    pub failure_policy: FailurePolicy,
    /// The resource selectors; empty selects every object the policy may see.
    pub selectors: Vec<ResourceMatcher>,
    /// The namespace selector (cluster policies).
    pub namespace_selector: Option<LabelMatcher>,
    /// Whether the policy also judges (or patches) the pod templates of workloads: it selects
    /// Pods and has not turned `podTemplates` off.
    pub pod_templates: bool,
    /// The rules.
    pub rules: PolicyRules,
    /// Set when the policy did not compile: a matching request then meets this error under the
    /// policy's failure policy, as a policy that got past admission while kanon was down would.
    pub defect: Option<Arc<InvalidPolicy>>,
    /// The programs the policy's templates render to, in rule order.
    pub rendered: Vec<Rendered>,
    /// Likely mistakes that do not make the policy invalid (a path no selected kind has, a
    /// validate rule that also judges DELETE), by field path: shown by `kanon apply` and
    /// `kanon test`, returned as admission warnings when the policy is written, and kept in
    /// its status.
    pub warnings: Vec<FieldError>,
    /// Set for a binding of a ValidatingAdmissionPolicy or MutatingAdmissionPolicy: how it
    /// matches requests (instead of `selectors`), its params and its actions.
    pub admission: Option<Arc<crate::admission_policy::AdmissionBinding>>,
    /// How grave a failure is (`policy.kanon.dev/severity`: critical, high, medium, low,
    /// info), as reports say it.
    pub severity: Option<Arc<str>>,
    /// What the policy is about (`policy.kanon.dev/category`), as reports say it.
    pub category: Option<Arc<str>>,
}

/// Result of [`compile`](super::compile()): the compiled policy, which is usable for matching even when invalid,
/// and its errors.
pub struct Compiled {
    /// The compiled policy; its `defect` is set when `errors` is not empty.
    pub policy: CompiledPolicy,
    /// Every problem found, by field path.
    pub errors: Vec<FieldError>,
}

impl Compiled {
    /// Puts `problems` found while decoding the document (unknown fields, ...) ahead of the
    /// compile errors, and marks the policy defective when there are any: what
    /// [`crate::compile_document_reporting`] does with
    /// [`PolicyObject::decode_reporting`](super::PolicyObject::decode_reporting)'s problems.
    pub fn with_decode_problems(mut self, mut problems: Vec<FieldError>) -> Compiled {
        if problems.is_empty() {
            return self;
        }
        problems.append(&mut self.errors);
        self.errors = problems;
        self.policy.defect = Some(Arc::new(InvalidPolicy {
            policy: self.policy.id.to_string(),
            errors: self.errors.clone(),
        }));
        self
    }
}

impl CompiledPolicy {
    /// Whether it is a validate policy whose actions (or whose binding's) include `Audit`.
    pub fn audits(&self) -> bool {
        let audit = kanon_api::ValidationAction::Audit;
        match (&self.rules, &self.admission) {
            (PolicyRules::Validate { .. }, Some(binding)) => binding.actions.contains(&audit),
            (PolicyRules::Validate { actions, .. }, None) => actions.contains(&audit),
            (PolicyRules::Override(_), _) => false,
        }
    }

    /// Whether the policy's resource selectors select the object, the namespace rule
    /// included: a namespaced policy only ever sees objects of its own namespace. The
    /// namespace selector is separate ([`CompiledPolicy::selects_namespace`]) because it needs
    /// a lookup.
    pub fn selects_resource(&self, object: &ObjectView<'_>) -> bool {
        if let Some(own) = &self.id.namespace
            && object.namespace != Some(own.as_str())
        {
            return false;
        }
        self.selectors.is_empty() || self.selectors.iter().any(|s| s.matches(object))
    }

    /// Whether judging the object needs the labels of its namespace: the policy has a
    /// non-empty namespace selector and the object is namespaced. As in Kubernetes' own
    /// webhook matching, a Namespace is judged by its own labels and other cluster-scoped
    /// objects always pass.
    pub fn reads_namespace_labels(&self, object: &ObjectView<'_>) -> bool {
        self.namespace_selector
            .as_ref()
            .is_some_and(|s| !s.is_empty())
            && !(object.kind == "Namespace" && object.api_version == "v1")
            && object.namespace.is_some()
    }

    /// Whether the namespace selector (if any) selects the object. `namespace_labels` gives the
    /// labels of the object's namespace (`Ok(None)`: it has none; `Err`: it could not be
    /// found) and is called only when needed ([`CompiledPolicy::reads_namespace_labels`]); an
    /// empty selector selects every namespace without reading it.
    pub fn selects_namespace<'n>(
        &self,
        object: &ObjectView<'_>,
        namespace_labels: impl FnOnce() -> Result<Option<&'n Map<String, Value>>, RuleError>,
    ) -> Result<bool, RuleError> {
        let Some(selector) = &self.namespace_selector else {
            return Ok(true);
        };
        if selector.is_empty() {
            return Ok(true);
        }
        if object.kind == "Namespace" && object.api_version == "v1" {
            return Ok(selector.matches(labels_of(object.object)));
        }
        if object.namespace.is_none() {
            return Ok(true);
        }
        Ok(selector.matches(namespace_labels()?))
    }
}
