//! The policy set: the compiled policies in evaluation order with their index, and what a
//! request gets from them. Its public face lives here; the index is in [`crate::index`], the
//! evaluation in [`crate::decision`], the webhook targets in [`crate::targets`].

use std::sync::Arc;

use kanon_api::PolicyKind;
use serde_json::Value;

use crate::decision::{self, Decision};
use crate::evaluation::Evaluation;
use crate::exception::{CompiledException, Exceptions};
use crate::index::{Indexed, WebhookIndex};
use crate::lookup::Lookup;
use crate::policy::{CompiledPolicy, PolicyId};
use crate::request::Request;
use crate::targets::{self, Targets, WebhookKind};

/// Two policies with the same identity were given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0} is defined more than once")]
pub struct DuplicatePolicy(pub String);

/// An immutable, compiled set of policies with its index. Swap it whole when policies change.
/// Policies are shared (`Arc`), so a new set after one change reuses every unchanged
/// policy's compiled form.
#[derive(Debug, Default)]
pub struct PolicySet {
    policies: Vec<Arc<CompiledPolicy>>,
    overrides: WebhookIndex,
    validates: WebhookIndex,
    exceptions: Exceptions,
    /// The namespaces whose exceptions the set honours, once a caller has said
    /// ([`PolicySet::honouring`]).
    exception_namespaces: Option<Arc<[String]>>,
    /// The validate policies whose actions include `Audit`, by label.
    auditing: Vec<Arc<str>>,
}

impl PolicySet {
    /// Builds the set. Policies are ordered by kind (ClusterOverridePolicy, OverridePolicy,
    /// ClusterValidatePolicy, ValidatePolicy), then namespace, then name; that order is the
    /// evaluation order.
    pub fn build(policies: Vec<CompiledPolicy>) -> Result<Self, DuplicatePolicy> {
        Self::build_shared(policies.into_iter().map(Arc::new).collect())
    }

    /// [`PolicySet::build`] from shared policies: what a source that keeps its compiled
    /// policies between sets (the cluster's reflectors) builds each new set from.
    pub fn build_shared(mut policies: Vec<Arc<CompiledPolicy>>) -> Result<Self, DuplicatePolicy> {
        policies.sort_by(|a, b| a.id.cmp(&b.id));
        if let Some(pair) = policies.windows(2).find(|w| w[0].id == w[1].id) {
            return Err(DuplicatePolicy(pair[0].id.to_string()));
        }
        let overrides = WebhookIndex::build(
            &policies,
            PolicyKind::ClusterOverridePolicy,
            PolicyKind::OverridePolicy,
        );
        let validates = WebhookIndex::build(
            &policies,
            PolicyKind::ClusterValidatePolicy,
            PolicyKind::ValidatePolicy,
        );
        let auditing = policies
            .iter()
            .filter(|p| p.audits())
            .map(|p| p.label.clone())
            .collect();
        Ok(PolicySet {
            policies,
            overrides,
            validates,
            exceptions: Exceptions::default(),
            exception_namespaces: None,
            auditing,
        })
    }

    /// The set with `exceptions` in force (replacing any it had). Which namespaces may hold
    /// exceptions is for the caller to decide: every exception given here applies.
    pub fn with_exceptions(mut self, exceptions: Vec<Arc<CompiledException>>) -> Self {
        self.exceptions = Exceptions::build(exceptions);
        self
    }

    /// The set with only the exceptions that live in `namespaces` (the operator's exception
    /// namespaces), and the ones left out.
    pub fn honouring(mut self, namespaces: &[String]) -> (Self, Vec<Arc<CompiledException>>) {
        self.exception_namespaces = Some(namespaces.into());
        let (kept, left): (Vec<_>, Vec<_>) = self
            .exceptions()
            .iter()
            .cloned()
            .partition(|e| namespaces.contains(&e.namespace));
        if left.is_empty() {
            return (self, left);
        }
        (self.with_exceptions(kept), left)
    }

    /// The namespaces whose exceptions this set honours, when [`PolicySet::honouring`] said.
    pub fn exception_namespaces(&self) -> Option<&[String]> {
        self.exception_namespaces.as_deref()
    }

    /// The exceptions in force, by namespace and name.
    pub fn exceptions(&self) -> &[Arc<CompiledException>] {
        self.exceptions.all()
    }

    /// Every policy, in evaluation order.
    pub fn policies(&self) -> &[Arc<CompiledPolicy>] {
        &self.policies
    }

    /// Number of policies.
    pub fn len(&self) -> usize {
        self.policies.len()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.policies.is_empty()
    }

    /// A policy by identity.
    pub fn get(&self, id: &PolicyId) -> Option<&CompiledPolicy> {
        self.policies
            .binary_search_by(|p| p.id.cmp(id))
            .ok()
            .map(|i| self.policies[i].as_ref())
    }

    /// What is wrong with `exception` against this set's policies, as its status says it
    /// ([`CompiledException::missing`](crate::CompiledException::missing)): `(reason,
    /// message)` pairs, none when it names only what exists and can select something.
    pub fn exception_problems(
        &self,
        exception: &crate::CompiledException,
    ) -> Vec<(&'static str, String)> {
        let known: Vec<&PolicyId> = self.policies.iter().map(|p| &p.id).collect();
        exception.missing(|id| self.get(id), &known)
    }

    /// Override policies that may select an object of this type in this namespace, in
    /// evaluation order (the selectors still have to be checked).
    pub fn override_candidates<'a>(
        &'a self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
    ) -> impl Iterator<Item = &'a CompiledPolicy> + use<'a> {
        self.indexed()
            .override_candidates(api_version, kind, namespace)
    }

    /// Validate policies that may select an object of this type in this namespace, in
    /// evaluation order.
    pub fn validate_candidates<'a>(
        &'a self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
    ) -> impl Iterator<Item = &'a CompiledPolicy> + use<'a> {
        self.indexed()
            .validate_candidates(api_version, kind, namespace)
    }

    /// What evaluating a review of an object of this type in this namespace on `webhook` may
    /// read of its object and old object (`None`: all of it). A reader of the review may leave
    /// out the rest; the decision is the same. Reviews are projected only when no exception is
    /// in force, and only for rules whose reads are known (see `projection`): a workload's pod
    /// template, one of kanon's own objects or a lookup by placeholders reads what no rule
    /// names. On the mutating webhook, mark the request so read ([`Request::read_through`]): a
    /// mutation that writes where the reading skipped voids the decision
    /// ([`Decision::beyond_reading`]), and the review is then read whole.
    pub fn object_read(
        &self,
        webhook: WebhookKind,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
    ) -> Option<std::sync::Arc<crate::projection::Projection>> {
        let indexed = self.indexed();
        if !indexed.exceptions.is_empty()
            || api_version.split('/').next() == Some(kanon_api::GROUP)
            || crate::workload::Workload::of(api_version, kind).is_some()
        {
            return None;
        }
        match webhook {
            WebhookKind::Mutating => indexed.overrides,
            WebhookKind::Validating => indexed.validates,
        }
        .object_read(api_version, kind, namespace)
    }

    /// Whether a review of an object of this type in this namespace gives `webhook` anything
    /// to evaluate: a policy of the webhook's kinds that may select it, a Pod policy that may
    /// reach its pod template (a workload kind), or, on the validating webhook, one of kanon's
    /// own objects to check. When it gives nothing, the webhook's decision is to allow, with no
    /// patch, warning or annotation, whatever the object holds: what a server may answer
    /// without evaluating it (the type and namespace are read as [`Request`] reads them).
    pub fn evaluates(
        &self,
        webhook: WebhookKind,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
    ) -> bool {
        let indexed = self.indexed();
        let index = match webhook {
            WebhookKind::Mutating => indexed.overrides,
            WebhookKind::Validating => indexed.validates,
        };
        if index
            .candidates(api_version, kind, namespace)
            .next()
            .is_some()
        {
            return true;
        }
        if webhook == WebhookKind::Validating
            && api_version.split('/').next() == Some(kanon_api::GROUP)
        {
            return true;
        }
        let Some(workload) = crate::workload::Workload::of(api_version, kind) else {
            return false;
        };
        index
            .candidates("v1", "Pod", namespace)
            .any(|i| indexed.policies[i as usize].reaches_template_of(workload))
    }

    /// The policies and their indexes, as evaluation reads them.
    fn indexed(&self) -> Indexed<'_> {
        Indexed {
            policies: &self.policies,
            overrides: &self.overrides,
            validates: &self.validates,
            exceptions: &self.exceptions,
        }
    }

    /// Runs the override policies on the request: every applicable policy in order, each
    /// seeing the result of the previous one. A failing policy's changes are discarded; under
    /// `Fail` the request is denied, under `Ignore` a warning is added. DELETE is never
    /// patched. Programs run in the calling thread; the request's deadline applies.
    pub async fn mutate(&self, request: &Request, lookup: &dyn Lookup) -> Decision {
        self.mutate_in(request, &of_request(request, lookup)).await
    }

    /// [`PolicySet::mutate`] in `evaluation` (its lookups, program host and deadline).
    pub async fn mutate_in(&self, request: &Request, evaluation: &Evaluation<'_>) -> Decision {
        decision::mutate(self.indexed(), request, evaluation).await
    }

    /// [`PolicySet::mutate`] for an admission answer, which needs the patch but neither the
    /// original object nor the changed one: takes the request's object (`request.object` is
    /// `None` afterwards) and changes it in place, saving only what the operations reach (the
    /// values at their targets, or the top-level fields they lie in; [`Changes`]), so the
    /// object is never copied whole; values added where nothing was move from the changed
    /// object into the patch. `patched` is always `None`: apply `patch` to the object for it.
    ///
    /// [`Changes`]: crate::diff::Changes
    pub async fn mutate_patch(&self, request: &mut Request, lookup: &dyn Lookup) -> Decision {
        let evaluation = of_request(request, lookup);
        self.mutate_patch_in(request, &evaluation).await
    }

    /// [`PolicySet::mutate_patch`] in `evaluation`.
    pub async fn mutate_patch_in(
        &self,
        request: &mut Request,
        evaluation: &Evaluation<'_>,
    ) -> Decision {
        decision::mutate_patch(self.indexed(), request, evaluation).await
    }

    /// Runs the validate policies on the request (on `object` in place of the request's own
    /// object when given, e.g. the result of [`PolicySet::mutate`]). All applicable policies
    /// are evaluated, in order, and every rejection is reported. The decision carries no
    /// `patched` object: validation changes nothing, and copying it would cost every request.
    pub async fn validate(
        &self,
        request: &Request,
        object: Option<&Value>,
        lookup: &dyn Lookup,
    ) -> Decision {
        self.validate_in(request, object, &of_request(request, lookup))
            .await
    }

    /// [`PolicySet::validate`] in `evaluation`.
    pub async fn validate_in(
        &self,
        request: &Request,
        object: Option<&Value>,
        evaluation: &Evaluation<'_>,
    ) -> Decision {
        decision::validate(self.indexed(), request, object, evaluation).await
    }

    /// What the validate policies find of an object that already exists (with `apiVersion`
    /// and `kind`), judged as the CREATE that made it would be judged now: the same
    /// exceptions, lookups and pod templates as admission, each policy's (or rule's) result
    /// as a [`Finding`](crate::Finding). Policies that do not apply to it find nothing. Fails
    /// only when the object cannot be identified.
    pub async fn audit_in(
        &self,
        object: Value,
        evaluation: &Evaluation<'_>,
    ) -> Result<Vec<crate::Finding>, crate::RequestError> {
        let request = Request::from_objects(kanon_api::Operation::Create, Some(object), None)?;
        let decision = decision::judge_recording(self.indexed(), &request, evaluation).await;
        Ok(decision.findings.unwrap_or_default())
    }

    /// What kube-apiserver would make of the request with kanon installed: the override
    /// policies mutate the object, then the validate policies judge the result.
    pub async fn review(&self, request: &Request, lookup: &dyn Lookup) -> Decision {
        self.review_in(request, &of_request(request, lookup)).await
    }

    /// [`PolicySet::review`] in `evaluation`.
    pub async fn review_in(&self, request: &Request, evaluation: &Evaluation<'_>) -> Decision {
        decision::review(self.indexed(), request, evaluation).await
    }

    /// Whether `decision` came from a validate policy whose actions include `Audit`: what the
    /// background audit's reports record of an admitted object ([`crate::AdmissionRecorder`]).
    pub fn audited(&self, decision: &Decision) -> bool {
        !self.auditing.is_empty()
            && decision
                .policy_results
                .iter()
                .any(|r| self.auditing.contains(&r.policy))
    }

    /// What `webhook` must be called for, from every policy of its kinds.
    pub fn targets(&self, webhook: WebhookKind) -> Targets {
        targets::targets(&self.policies, webhook)
    }
}

/// The evaluation of a request over `lookup` alone: programs in the calling thread, the
/// request's own deadline.
fn of_request<'a>(request: &Request, lookup: &'a dyn Lookup) -> Evaluation<'a> {
    Evaluation::new(lookup).with_deadline(request.deadline.clone())
}
