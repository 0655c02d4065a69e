//! The index of a [`PolicySet`](crate::PolicySet): built once per policy change, it hands each
//! request the policies that can select its type, in evaluation order, so that the cost of a
//! request depends on the policies for its kind and namespace, not on all policies.

use std::collections::HashMap;
use std::sync::Arc;

use kanon_api::PolicyKind;

use crate::policy::CompiledPolicy;

/// Candidates by type: `apiVersion` → `kind` → policy positions (already merged with `any`),
/// and the policies whose selectors accept every type.
#[derive(Debug, Default)]
struct TypeIndex {
    by_type: HashMap<String, HashMap<String, Vec<u32>>>,
    any: Vec<u32>,
}

impl TypeIndex {
    fn candidates(&self, api_version: &str, kind: &str) -> &[u32] {
        self.by_type
            .get(api_version)
            .and_then(|kinds| kinds.get(kind))
            .map_or(self.any.as_slice(), Vec::as_slice)
    }

    /// Builds the index from `(position, policy)` pairs given in evaluation order.
    fn build<'a>(entries: impl Iterator<Item = (u32, &'a CompiledPolicy)>) -> Self {
        let mut index = TypeIndex::default();
        let mut typed: Vec<(u32, &CompiledPolicy)> = Vec::new();
        for (pos, policy) in entries {
            if policy.selectors.is_empty() {
                index.any.push(pos);
            } else {
                typed.push((pos, policy));
            }
        }
        for (pos, policy) in typed {
            for s in &policy.selectors {
                // Keys are cloned once per type, not once per selector: with thousands of
                // policies over a few hundred types, most selectors find their type there.
                if !index.by_type.contains_key(s.api_version.as_str()) {
                    index.by_type.insert(s.api_version.clone(), HashMap::new());
                }
                let Some(kinds) = index.by_type.get_mut(s.api_version.as_str()) else {
                    continue;
                };
                if !kinds.contains_key(s.kind.as_str()) {
                    kinds.insert(s.kind.clone(), Vec::new());
                }
                let Some(list) = kinds.get_mut(s.kind.as_str()) else {
                    continue;
                };
                if list.last() != Some(&pos) {
                    list.push(pos);
                }
            }
        }
        // Merge the any-type policies into every typed list, keeping evaluation order (the
        // typed lists are already in order: positions only grow).
        if !index.any.is_empty() {
            for kinds in index.by_type.values_mut() {
                for list in kinds.values_mut() {
                    list.extend_from_slice(&index.any);
                    list.sort_unstable();
                    list.dedup();
                }
            }
        }
        index
    }
}

/// The policies of one webhook (override or validate): cluster-wide, then per namespace.
#[derive(Debug, Default)]
pub(crate) struct WebhookIndex {
    cluster: TypeIndex,
    namespaced: HashMap<String, TypeIndex>,
}

impl WebhookIndex {
    /// The index of the policies of `cluster_kind` and `namespaced_kind` among `policies`
    /// (given in evaluation order; positions are indexes into it).
    pub(crate) fn build(
        policies: &[Arc<CompiledPolicy>],
        cluster_kind: PolicyKind,
        namespaced_kind: PolicyKind,
    ) -> Self {
        let positioned = || {
            policies
                .iter()
                .enumerate()
                .map(|(i, p)| (i as u32, p.as_ref()))
        };
        let cluster = TypeIndex::build(positioned().filter(|(_, p)| p.id.kind == cluster_kind));
        let mut by_namespace: HashMap<&str, Vec<(u32, &CompiledPolicy)>> = HashMap::new();
        for (pos, p) in positioned().filter(|(_, p)| p.id.kind == namespaced_kind) {
            by_namespace
                .entry(p.id.namespace.as_deref().unwrap_or_default())
                .or_default()
                .push((pos, p));
        }
        let namespaced = by_namespace
            .into_iter()
            .map(|(ns, entries)| (ns.to_string(), TypeIndex::build(entries.into_iter())))
            .collect();
        WebhookIndex {
            cluster,
            namespaced,
        }
    }

    /// Positions of the policies that may select an object of this type in this namespace,
    /// in evaluation order.
    pub(crate) fn candidates<'a>(
        &'a self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
    ) -> impl Iterator<Item = u32> + use<'a> {
        let cluster = self.cluster.candidates(api_version, kind);
        let namespaced = namespace
            .and_then(|ns| self.namespaced.get(ns))
            .map_or(&[][..], |idx| idx.candidates(api_version, kind));
        cluster.iter().chain(namespaced.iter()).copied()
    }
}

/// The policies of a set with their indexes, as evaluation reads them: the policies that may
/// select an object, in evaluation order.
#[derive(Clone, Copy)]
pub(crate) struct Indexed<'a> {
    /// Every policy, in evaluation order; the indexes hold positions in it.
    pub(crate) policies: &'a [Arc<CompiledPolicy>],
    /// The override policies' index.
    pub(crate) overrides: &'a WebhookIndex,
    /// The validate policies' index.
    pub(crate) validates: &'a WebhookIndex,
    /// The exceptions in force.
    pub(crate) exceptions: &'a crate::exception::Exceptions,
}

impl<'a> Indexed<'a> {
    /// Override policies that may select an object of this type in this namespace, in
    /// evaluation order (the selectors still have to be checked).
    pub(crate) fn override_candidates(
        self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
    ) -> impl Iterator<Item = &'a CompiledPolicy> + use<'a> {
        let policies = self.policies;
        self.overrides
            .candidates(api_version, kind, namespace)
            .map(move |i| policies[i as usize].as_ref())
    }

    /// Validate policies that may select an object of this type in this namespace, in
    /// evaluation order.
    pub(crate) fn validate_candidates(
        self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
    ) -> impl Iterator<Item = &'a CompiledPolicy> + use<'a> {
        let policies = self.policies;
        self.validates
            .candidates(api_version, kind, namespace)
            .map(move |i| policies[i as usize].as_ref())
    }
}
