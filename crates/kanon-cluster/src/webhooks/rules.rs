//! The `rules` of a webhook entry, generated from what its policies select.
//!
//! Pure: discovery has already turned each `(apiVersion, kind)` into a [`ResolvedType`]; this
//! only lays the rules out, always the same way for the same input, so that the same policies
//! give byte-identical rules and an unchanged set of policies writes nothing.

use std::collections::{BTreeMap, BTreeSet};

use kanon_api::Operation;
use kanon_engine::Targets;
use serde::Serialize;

use super::RuleMode;

/// The four operations a rule can name, in the order rules list them.
pub const ALL_OPERATIONS: [Operation; 4] = [
    Operation::Create,
    Operation::Update,
    Operation::Delete,
    Operation::Connect,
];

/// A type as discovery serves it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResolvedType {
    /// API group, `""` for the core group.
    pub group: String,
    /// Version, e.g. `v1`.
    pub version: String,
    /// Resource plural, e.g. `deployments`.
    pub plural: String,
    /// Whether its objects live in namespaces (informational: rules use `scope: "*"`).
    pub namespaced: bool,
}

/// One entry of a webhook's `rules` (a `RuleWithOperations`), serialized as the apiserver
/// stores it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Rule {
    /// `apiGroups`.
    pub api_groups: Vec<String>,
    /// `apiVersions`.
    pub api_versions: Vec<String>,
    /// `operations`, in the order CREATE, UPDATE, DELETE, CONNECT.
    pub operations: Vec<Operation>,
    /// `resources`, sorted.
    pub resources: Vec<String>,
    /// `scope`, always `*`.
    pub scope: String,
}

impl Rule {
    /// The rule that matches every resource and subresource of every group and version, for
    /// `operations`.
    pub fn catch_all(operations: &[Operation]) -> Rule {
        Rule {
            api_groups: vec!["*".to_string()],
            api_versions: vec!["*".to_string()],
            operations: normalize(operations).collect(),
            resources: vec!["*/*".to_string()],
            scope: "*".to_string(),
        }
    }
}

/// Position of an operation in [`ALL_OPERATIONS`]; `*` is expanded by [`normalize`] first.
fn rank(operation: Operation) -> usize {
    match operation {
        Operation::Create => 0,
        Operation::Update => 1,
        Operation::Delete => 2,
        Operation::Connect | Operation::All => 3,
    }
}

/// `operations` in rule order, without duplicates, `*` expanded to all four.
fn normalize(operations: &[Operation]) -> impl Iterator<Item = Operation> + use<> {
    let mut present = [false; 4];
    for op in operations {
        if *op == Operation::All {
            present = [true; 4];
        } else {
            present[rank(*op)] = true;
        }
    }
    ALL_OPERATIONS
        .into_iter()
        .zip(present)
        .filter_map(|(op, on)| on.then_some(op))
}

/// The operations of each type that are not already covered by the catch-all rule of
/// `every_type`, in rule order; types left with none are omitted.
fn specific_operations(targets: &Targets) -> BTreeMap<&(String, String), Vec<Operation>> {
    let every: Vec<Operation> = normalize(&targets.every_type).collect();
    targets
        .types
        .iter()
        .map(|(key, ops)| {
            let ops: Vec<Operation> = normalize(ops).filter(|op| !every.contains(op)).collect();
            (key, ops)
        })
        .filter(|(_, ops)| !ops.is_empty())
        .collect()
}

/// The `(apiVersion, kind)`s that [`generate_rules`] needs resolved for `targets`: none in
/// [`RuleMode::CatchAll`], and only types with operations that the `every_type` catch-all does
/// not already cover.
pub fn needed_types(targets: &Targets, mode: RuleMode) -> BTreeSet<(String, String)> {
    match mode {
        RuleMode::CatchAll => BTreeSet::new(),
        RuleMode::Generated => specific_operations(targets).into_keys().cloned().collect(),
    }
}

/// The rules of a webhook that must see `targets`.
///
/// - [`RuleMode::CatchAll`]: one catch-all rule with all four operations, whatever the targets.
/// - [`RuleMode::Generated`]: first, when some policy selects every type, a catch-all rule
///   (`apiGroups: ["*"], apiVersions: ["*"], resources: ["*/*"]`) with those operations; then,
///   for the operations the catch-all does not cover, one rule per (group, version,
///   operations) naming every resource plural with exactly those operations. CONNECT is only
///   ever made on subresources (`pods/exec`, ...), so it gets rules of its own with
///   `<plural>/*`. Rules are ordered by group (core first), version and operations; resources
///   are sorted; operations are in the order CREATE, UPDATE, DELETE, CONNECT; `scope` is
///   always `*`.
///
/// Types missing from `resolved` (not served by the apiserver) are left out. No targets give
/// no rules: the apiserver then calls the webhook for nothing.
pub fn generate_rules(
    targets: &Targets,
    mode: RuleMode,
    resolved: &BTreeMap<(String, String), ResolvedType>,
) -> Vec<Rule> {
    if mode == RuleMode::CatchAll {
        return vec![Rule::catch_all(&ALL_OPERATIONS)];
    }
    let mut rules = Vec::new();
    if !targets.every_type.is_empty() {
        rules.push(Rule::catch_all(&targets.every_type));
    }
    // (group, version, operation ranks) → resources: the map's order is the rules' order.
    let mut merged: BTreeMap<(&str, &str, Vec<usize>), BTreeSet<String>> = BTreeMap::new();
    for (key, ops) in specific_operations(targets) {
        let Some(resolved) = resolved.get(key) else {
            continue;
        };
        let (group, version) = (resolved.group.as_str(), resolved.version.as_str());
        let plain: Vec<usize> = ops
            .iter()
            .filter(|op| **op != Operation::Connect)
            .map(|op| rank(*op))
            .collect();
        if !plain.is_empty() {
            merged
                .entry((group, version, plain))
                .or_default()
                .insert(resolved.plural.clone());
        }
        if ops.contains(&Operation::Connect) {
            merged
                .entry((group, version, vec![rank(Operation::Connect)]))
                .or_default()
                .insert(format!("{}/*", resolved.plural));
        }
    }
    rules.extend(
        merged
            .into_iter()
            .map(|((group, version, ranks), resources)| Rule {
                api_groups: vec![group.to_string()],
                api_versions: vec![version.to_string()],
                operations: ranks.into_iter().map(|r| ALL_OPERATIONS[r]).collect(),
                resources: resources.into_iter().collect(),
                scope: "*".to_string(),
            }),
    );
    rules
}
