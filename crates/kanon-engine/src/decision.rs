//! Evaluation of a request against a [`PolicySet`]: overrides (patches) and validations
//! (verdicts), with each policy's failure policy deciding what its errors do.

use std::collections::BTreeMap;
use std::sync::Arc;

use kanon_api::{FailurePolicy, Operation};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::index::PolicySet;
use crate::lookup::Lookup;
use crate::plaintext;
use crate::policy::{CompiledPolicy, PolicyRules};
use crate::request::Request;
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
    /// the old object on DELETE.
    pub patched: Option<Value>,
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
        }
    }

    /// Records an evaluation error of `policy` under its failure policy.
    fn policy_error(&mut self, policy: &CompiledPolicy, error: &str) {
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

    /// Folds the verdict of a later stage (validation after mutation) into this one.
    fn merge(&mut self, later: Decision) {
        self.allowed &= later.allowed;
        self.messages.extend(later.messages);
        self.warnings.extend(later.warnings);
        self.audit_annotations.extend(later.audit_annotations);
        self.applied_policies.extend(later.applied_policies);
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

    fn get(&mut self) -> Result<Option<&Map<String, Value>>, String> {
        let namespace = self.namespace;
        let lookup = self.lookup;
        let cached = self.cached.get_or_insert_with(|| {
            let Some(ns) = namespace else { return Ok(None) };
            match lookup.get("v1", "Namespace", None, ns) {
                Ok(Some(object)) => Ok(Some(object)),
                Ok(None) => Err(format!(
                    "namespaceSelector: namespace `{ns}` was not found, so its labels are unknown"
                )),
                Err(e) => Err(format!("namespaceSelector: {e}")),
            }
        });
        match cached {
            Ok(object) => Ok(object.as_deref().and_then(labels_of)),
            Err(e) => Err(e.clone()),
        }
    }
}

/// Whether `policy` applies to the request: selectors, namespace selector and at least one
/// rule for the operation. A namespace that cannot be read is an evaluation error.
fn applies(
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
    policy.selects_namespace(view, || namespaces.get())
}

fn defect_message(policy: &CompiledPolicy) -> Option<String> {
    policy.defect.as_ref().map(|d| {
        let errors: Vec<String> = d.errors.iter().map(ToString::to_string).collect();
        format!("the policy is invalid: {}", errors.join("; "))
    })
}

/// Runs one override policy's rules for `operation` on `working`. On error `working` may be
/// partly changed; the caller restores it.
fn run_override(
    policy: &CompiledPolicy,
    operation: Operation,
    working: &mut Value,
) -> Result<(), String> {
    if let Some(message) = defect_message(policy) {
        return Err(message);
    }
    let PolicyRules::Override(rules) = &policy.rules else {
        return Ok(());
    };
    for rule in rules.iter().filter(|r| r.operations.contains(operation)) {
        for op in &rule.plaintext {
            plaintext::apply(working, &op.operation).map_err(|e| format!("{}: {e}", op.field))?;
        }
    }
    Ok(())
}

impl PolicySet {
    /// Runs the override policies on the request: every applicable policy in order, each
    /// seeing the result of the previous one. A failing policy's changes are discarded; under
    /// `Fail` the request is denied, under `Ignore` a warning is added. DELETE is never
    /// patched.
    pub fn mutate(&self, request: &Request, lookup: &dyn Lookup) -> Decision {
        let Some(original) = request
            .object
            .as_ref()
            .filter(|_| request.operation != Operation::Delete)
        else {
            return Decision::allow(request.subject().cloned());
        };
        let mut decision = Decision::allow(None);
        let mut working = original.clone();
        let view = request.view(original);
        let mut namespaces = NamespaceLabels::new(lookup, request.namespace.as_deref());
        let candidates = self.override_candidates(
            &request.api_version,
            &request.kind,
            request.namespace.as_deref(),
        );
        for policy in candidates {
            match applies(policy, &view, request.operation, &mut namespaces) {
                Ok(false) => continue,
                Ok(true) => {}
                Err(e) => {
                    decision.policy_error(policy, &e);
                    continue;
                }
            }
            let before = working.clone();
            match run_override(policy, request.operation, &mut working) {
                Ok(()) => decision.applied_policies.push(policy.id.to_string()),
                Err(e) => {
                    working = before;
                    decision.policy_error(policy, &e);
                }
            }
        }
        if decision.allowed {
            decision.patch = json_patch::diff(original, &working);
            decision.patched = Some(working);
        } else {
            decision.patched = Some(original.clone());
        }
        decision
    }

    /// Runs the validate policies on the request (on `object` in place of the request's own
    /// object when given, e.g. the result of [`PolicySet::mutate`]). All applicable policies
    /// are evaluated, in order, and every rejection is reported.
    pub fn validate(
        &self,
        request: &Request,
        object: Option<&Value>,
        lookup: &dyn Lookup,
    ) -> Decision {
        let subject = object.or(request.subject());
        let mut decision = Decision::allow(subject.cloned());
        let Some(subject) = subject else {
            return decision;
        };
        let view = request.view(subject);
        let mut namespaces = NamespaceLabels::new(lookup, request.namespace.as_deref());
        let candidates = self.validate_candidates(
            &request.api_version,
            &request.kind,
            request.namespace.as_deref(),
        );
        for policy in candidates {
            match applies(policy, &view, request.operation, &mut namespaces) {
                Ok(false) => continue,
                Ok(true) => {}
                Err(e) => {
                    decision.policy_error(policy, &e);
                    continue;
                }
            }
            match defect_message(policy) {
                Some(message) => decision.policy_error(policy, &message),
                None => decision.applied_policies.push(policy.id.to_string()),
            }
        }
        decision
    }

    /// What kube-apiserver would make of the request with kanon installed: the override
    /// policies mutate the object, then the validate policies judge the result.
    pub fn review(&self, request: &Request, lookup: &dyn Lookup) -> Decision {
        let mut decision = self.mutate(request, lookup);
        if !decision.allowed {
            return decision;
        }
        let judged = match request.operation {
            Operation::Delete => self.validate(request, None, lookup),
            _ => self.validate(request, decision.patched.as_ref(), lookup),
        };
        decision.merge(judged);
        if !decision.allowed {
            decision.patch = json_patch::Patch(Vec::new());
            decision.patched = request.subject().cloned();
        }
        decision
    }
}
