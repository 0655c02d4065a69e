//! What each webhook must be called for: the types and operations the installed policies can
//! select, so that kube-apiserver calls kanon for nothing else. The cluster runtime turns these
//! into the `rules` of kanon's webhook configurations.

use std::collections::BTreeMap;
use std::sync::Arc;

use kanon_api::{Operation, PolicyKind};

use crate::policy::{CompiledPolicy, OperationSet, PolicyRules};
use crate::workload::WORKLOADS;

/// Which of kanon's two webhooks: the policies it runs, and where it is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WebhookKind {
    /// `POST /mutate`: the override policies; the answer may carry a patch.
    Mutating,
    /// `POST /validate`: the validate policies and the check of kanon's own policy objects;
    /// the answer never carries a patch.
    Validating,
}

impl WebhookKind {
    /// The HTTP path the webhook is served at.
    pub fn path(self) -> &'static str {
        match self {
            WebhookKind::Mutating => "/mutate",
            WebhookKind::Validating => "/validate",
        }
    }

    /// The webhook served at `path`, if any.
    pub fn from_path(path: &str) -> Option<Self> {
        match path {
            "/mutate" => Some(WebhookKind::Mutating),
            "/validate" => Some(WebhookKind::Validating),
            _ => None,
        }
    }
}

/// The types one webhook must see, each with the operations some policy needs on it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Targets {
    /// `(apiVersion, kind)` → operations, in a stable order.
    pub types: BTreeMap<(String, String), Vec<Operation>>,
    /// Operations of policies that select every type (no `resourceSelectors`): then the
    /// webhook must see every type for these.
    pub every_type: Vec<Operation>,
}

impl Targets {
    /// Whether no policy needs this webhook at all.
    pub fn is_empty(&self) -> bool {
        self.types.is_empty() && self.every_type.is_empty()
    }
}

const CONCRETE: [Operation; 4] = [
    Operation::Create,
    Operation::Update,
    Operation::Delete,
    Operation::Connect,
];

fn operations(set: OperationSet) -> Vec<Operation> {
    CONCRETE
        .into_iter()
        .filter(|op| set.contains(*op))
        .collect()
}

/// The operations a policy's rules target; an invalid policy with no rules meets every
/// operation (as evaluation does, so that it is not silently skipped).
fn policy_operations(policy: &CompiledPolicy) -> OperationSet {
    let sets: Vec<OperationSet> = match &policy.rules {
        PolicyRules::Override(rules) => rules.iter().map(|r| r.operations).collect(),
        PolicyRules::Validate { rules, .. } => rules.iter().map(|r| r.operations).collect(),
    };
    if sets.is_empty() && policy.defect.is_some() {
        return OperationSet::ALL;
    }
    sets.into_iter()
        .fold(OperationSet::NONE, OperationSet::union)
}

/// What `webhook` must be called for, from every policy of its kinds among `policies`.
pub(crate) fn targets(policies: &[Arc<CompiledPolicy>], webhook: WebhookKind) -> Targets {
    let mut types: BTreeMap<(String, String), OperationSet> = BTreeMap::new();
    let mut every_type = OperationSet::NONE;
    for policy in policies {
        let mutating = matches!(
            policy.id.kind,
            PolicyKind::ClusterOverridePolicy | PolicyKind::OverridePolicy
        );
        if mutating != (webhook == WebhookKind::Mutating) {
            continue;
        }
        let ops = policy_operations(policy);
        if policy.selectors.is_empty() {
            every_type = every_type.union(ops);
            continue;
        }
        for s in &policy.selectors {
            let entry = types
                .entry((s.api_version.clone(), s.kind.clone()))
                .or_insert(OperationSet::NONE);
            *entry = entry.union(ops);
        }
        // A Pod policy also judges the pod templates workloads are created and updated with.
        let written = [Operation::Create, Operation::Update]
            .into_iter()
            .filter(|op| ops.contains(*op))
            .fold(OperationSet::NONE, |set, op| {
                set.union(OperationSet::from_targets(&[op]))
            });
        if written == OperationSet::NONE {
            continue;
        }
        for workload in WORKLOADS.iter().filter(|w| policy.reaches_template_of(w)) {
            let entry = types
                .entry((workload.api_version.to_string(), workload.kind.to_string()))
                .or_insert(OperationSet::NONE);
            *entry = entry.union(written);
        }
    }
    Targets {
        types: types
            .into_iter()
            .map(|(k, ops)| (k, operations(ops)))
            .filter(|(_, ops)| !ops.is_empty())
            .collect(),
        every_type: operations(every_type),
    }
}
