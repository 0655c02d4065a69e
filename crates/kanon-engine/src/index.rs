//! The index of a [`PolicySet`](crate::PolicySet): built once per policy change, it hands each
//! request the policies that can select its type, in evaluation order, so that the cost of a
//! request depends on the policies for its kind and namespace, not on all policies. Within a
//! type, policies are also filed by the name, namespace or label value their selectors
//! require, so that a policy selecting another Pod by name (or another namespace, or another
//! `app` label) costs a request nothing.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use kanon_api::PolicyKind;

use crate::policy::CompiledPolicy;
use crate::projection::Projection;
use crate::selector::{ObjectView, Required, labels_of};

/// Candidates by type: `apiVersion` → `kind` → the policies that may select it, and the
/// policies whose selectors accept every type.
#[derive(Debug, Default)]
struct TypeIndex {
    by_type: HashMap<String, HashMap<String, TypeEntry>>,
    any: Vec<u32>,
    /// The policies that may select any type the built-in schema does not know (admission
    /// policies whose rules name only groups it does not serve), with `any`, in order.
    any_custom: Vec<u32>,
    /// What the policies of `any` and `any_custom` may read of an object (`None`: all of it).
    any_read: Read,
    any_custom_read: Read,
}

/// What the candidates for a type may read of an object: `None` for all of it.
type Read = Option<Arc<Projection>>;

/// What the policies at `positions` may read of an object they judge, with what kanon reads.
fn read_by(positions: &[u32], reads: &HashMap<u32, Option<Projection>>) -> Read {
    let mut read = Projection::base();
    for pos in positions {
        read.union(reads.get(pos)?.as_ref()?);
    }
    Some(Arc::new(read))
}

/// Whether the built-in schema knows the type (`apiVersion`, `kind`).
fn builtin(api_version: &str, kind: &str) -> bool {
    kanon_schema::Schema::builtin().is_ok_and(|schema| schema.kind(api_version, kind).is_some())
}

/// The policies that may select objects of one type (positions, in evaluation order): all of
/// them, and the same filed by what their selectors require, so that a policy selecting
/// another name, namespace or label value costs a request of that type nothing.
#[derive(Debug, Default)]
struct TypeEntry {
    all: Vec<u32>,
    /// Policies with a selector of this type that requires nothing an index can look up
    /// (and the policies of every type).
    open: Vec<u32>,
    by_name: HashMap<String, Vec<u32>>,
    by_namespace: HashMap<String, Vec<u32>>,
    /// Label key → value → policies.
    by_label: HashMap<String, HashMap<String, Vec<u32>>>,
    /// What the policies of `all` may read of an object.
    read: Read,
}

impl TypeEntry {
    /// Files `pos` under what `required` asks.
    fn file(&mut self, pos: u32, required: Required<'_>) {
        let list = match required {
            Required::Name(name) => self.by_name.entry(name.to_owned()).or_default(),
            Required::Namespace(ns) => self.by_namespace.entry(ns.to_owned()).or_default(),
            Required::Label(key, value) => self
                .by_label
                .entry(key.to_owned())
                .or_default()
                .entry(value.to_owned())
                .or_default(),
            Required::Nothing => &mut self.open,
        };
        if list.last() != Some(&pos) {
            list.push(pos);
        }
        if self.all.last() != Some(&pos) {
            self.all.push(pos);
        }
    }

    /// Whether some policy is filed by name, namespace or label.
    fn filed(&self) -> bool {
        !(self.by_name.is_empty() && self.by_namespace.is_empty() && self.by_label.is_empty())
    }

    /// The positions that may select `view`, in evaluation order: the open ones and those
    /// filed under its name, namespace or one of its labels.
    fn narrowed(&self, view: &ObjectView<'_>) -> Cow<'_, [u32]> {
        if !self.filed() {
            return Cow::Borrowed(&self.all);
        }
        let mut found: Vec<&[u32]> = Vec::new();
        if let Some(list) = self.by_name.get(view.name) {
            found.push(list);
        }
        if let Some(list) = view.namespace.and_then(|ns| self.by_namespace.get(ns)) {
            found.push(list);
        }
        if !self.by_label.is_empty()
            && let Some(labels) = labels_of(view.object)
        {
            for (key, value) in labels {
                if let Some(list) = self
                    .by_label
                    .get(key)
                    .and_then(|values| values.get(value.as_str()?))
                {
                    found.push(list);
                }
            }
        }
        if found.is_empty() {
            return Cow::Borrowed(&self.open);
        }
        let mut merged: Vec<u32> = self.open.clone();
        for list in found {
            merged.extend_from_slice(list);
        }
        merged.sort_unstable();
        merged.dedup();
        Cow::Owned(merged)
    }
}

impl TypeIndex {
    /// Files `pos` under each of `policy`'s selectors.
    fn file_selectors(&mut self, pos: u32, policy: &CompiledPolicy) {
        for s in &policy.selectors {
            // Keys are cloned once per type, not once per selector: with thousands of
            // policies over a few hundred types, most selectors find their type there.
            if !self.by_type.contains_key(s.api_version.as_str()) {
                self.by_type.insert(s.api_version.clone(), HashMap::new());
            }
            let Some(kinds) = self.by_type.get_mut(s.api_version.as_str()) else {
                continue;
            };
            if !kinds.contains_key(s.kind.as_str()) {
                kinds.insert(s.kind.clone(), TypeEntry::default());
            }
            let Some(entry) = kinds.get_mut(s.kind.as_str()) else {
                continue;
            };
            entry.file(pos, s.required());
        }
    }

    /// Files `pos` under each of `types` (`apiVersion`, `kind`), under the names `named`
    /// says a request of that type must have (for any name when it says `None`).
    fn file_types(
        &mut self,
        pos: u32,
        types: Vec<(String, String)>,
        named: impl Fn(&str, &str) -> Option<Vec<String>>,
    ) {
        for (api_version, kind) in types {
            let names = named(&api_version, &kind);
            let entry = self
                .by_type
                .entry(api_version)
                .or_default()
                .entry(kind)
                .or_default();
            match names {
                Some(names) => {
                    for name in &names {
                        entry.file(pos, Required::Name(name));
                    }
                }
                None => entry.file(pos, Required::Nothing),
            }
        }
    }

    fn entry(&self, api_version: &str, kind: &str) -> Option<&TypeEntry> {
        self.by_type
            .get(api_version)
            .and_then(|kinds| kinds.get(kind))
    }

    /// The policies that may select every type of its kind (built-in or not) and are filed
    /// under none.
    fn unfiled(&self, api_version: &str, kind: &str) -> &[u32] {
        if self.custom_unfiled(api_version, kind) {
            &self.any_custom
        } else {
            &self.any
        }
    }

    /// Whether the unfiled policies of this type are `any_custom` (else `any`): those of a type
    /// the built-in schema does not know, when some admission policy may select only such.
    fn custom_unfiled(&self, api_version: &str, kind: &str) -> bool {
        self.any_custom.len() != self.any.len() && !builtin(api_version, kind)
    }

    /// Every policy that may select this type.
    fn candidates(&self, api_version: &str, kind: &str) -> &[u32] {
        self.entry(api_version, kind).map_or_else(
            || self.unfiled(api_version, kind),
            |entry| entry.all.as_slice(),
        )
    }

    /// The policies that may select `view`.
    fn narrowed(&self, view: &ObjectView<'_>) -> Cow<'_, [u32]> {
        match self.entry(view.api_version, view.kind) {
            Some(entry) => entry.narrowed(view),
            None => Cow::Borrowed(self.unfiled(view.api_version, view.kind)),
        }
    }

    /// Builds the index from `(position, policy)` pairs given in evaluation order.
    fn build<'a>(entries: impl Iterator<Item = (u32, &'a CompiledPolicy)>) -> Self {
        let mut index = TypeIndex::default();
        let mut custom = Vec::new();
        let mut reads = HashMap::new();
        for (pos, policy) in entries {
            reads.insert(pos, crate::policy::read_by(policy));
            if !policy.selectors.is_empty() {
                index.file_selectors(pos, policy);
                continue;
            }
            // An admission policy selects by its resource rules, not by selectors: filed
            // under the built-in types they name, when the schema can tell them (and under
            // the resource names they require there), and with the custom resources when
            // they name groups the schema does not serve.
            let Some(binding) = &policy.admission else {
                index.any.push(pos);
                continue;
            };
            let reach = binding.constraints.reach();
            match reach.builtin {
                Some(types) => {
                    index.file_types(pos, types, |api_version, kind| {
                        binding.names_for(api_version, kind)
                    });
                    if reach.custom {
                        custom.push(pos);
                    }
                }
                None => index.any.push(pos),
            }
        }
        index.any_custom = index.any.iter().chain(&custom).copied().collect();
        index.any_custom.sort_unstable();
        // Merge the any-type policies into every type's lists, keeping evaluation order (the
        // typed lists are already in order: positions only grow).
        for (api_version, kinds) in &mut index.by_type {
            for (kind, entry) in kinds {
                let unfiled = if builtin(api_version, kind) {
                    &index.any
                } else {
                    &index.any_custom
                };
                if unfiled.is_empty() {
                    continue;
                }
                for list in [&mut entry.all, &mut entry.open] {
                    list.extend_from_slice(unfiled);
                    list.sort_unstable();
                    list.dedup();
                }
            }
        }
        for kinds in index.by_type.values_mut() {
            for entry in kinds.values_mut() {
                entry.read = read_by(&entry.all, &reads);
            }
        }
        index.any_read = read_by(&index.any, &reads);
        index.any_custom_read = read_by(&index.any_custom, &reads);
        index
    }

    /// What the policies that may select this type may read of an object.
    fn read(&self, api_version: &str, kind: &str) -> Read {
        match self.entry(api_version, kind) {
            Some(entry) => entry.read.clone(),
            None if self.custom_unfiled(api_version, kind) => self.any_custom_read.clone(),
            None => self.any_read.clone(),
        }
    }
}

/// Positions of candidates: the cluster's, then the namespace's.
pub(crate) struct Candidates<'a> {
    cluster: Cow<'a, [u32]>,
    namespaced: Cow<'a, [u32]>,
    next: usize,
}

impl Iterator for Candidates<'_> {
    type Item = u32;

    fn next(&mut self) -> Option<u32> {
        let at = self.next;
        self.next += 1;
        match self.cluster.get(at) {
            Some(pos) => Some(*pos),
            None => self.namespaced.get(at - self.cluster.len()).copied(),
        }
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

    /// What the policies that may select an object of this type in this namespace may read
    /// of it, with what kanon reads (`None`: all of it).
    pub(crate) fn object_read(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
    ) -> Option<Arc<Projection>> {
        let cluster = self.cluster.read(api_version, kind)?;
        let Some(namespaced) = namespace
            .and_then(|ns| self.namespaced.get(ns))
            .filter(|index| !index.candidates(api_version, kind).is_empty())
        else {
            return Some(cluster);
        };
        let mut read = Projection::clone(&cluster);
        read.union(&*namespaced.read(api_version, kind)?);
        Some(Arc::new(read))
    }

    /// Positions of the policies that may select an object of this type in this namespace,
    /// in evaluation order.
    pub(crate) fn candidates<'a>(
        &'a self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
    ) -> Candidates<'a> {
        let cluster = self.cluster.candidates(api_version, kind);
        let namespaced = namespace
            .and_then(|ns| self.namespaced.get(ns))
            .map_or(&[][..], |idx| idx.candidates(api_version, kind));
        Candidates {
            cluster: Cow::Borrowed(cluster),
            namespaced: Cow::Borrowed(namespaced),
            next: 0,
        }
    }

    /// Positions of the policies that may select `view`, in evaluation order: those of its
    /// type and namespace whose selectors do not require another name, namespace or label
    /// value than it has.
    pub(crate) fn narrowed<'a>(&'a self, view: &ObjectView<'_>) -> Candidates<'a> {
        let namespaced = view
            .namespace
            .and_then(|ns| self.namespaced.get(ns))
            .map_or(Cow::Borrowed(&[][..]), |idx| idx.narrowed(view));
        Candidates {
            cluster: self.cluster.narrowed(view),
            namespaced,
            next: 0,
        }
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

    /// Override policies that may select `view` ([`WebhookIndex::narrowed`]), in evaluation
    /// order (the selectors still have to be checked).
    pub(crate) fn override_narrowed(
        self,
        view: &ObjectView<'_>,
    ) -> impl Iterator<Item = &'a CompiledPolicy> + use<'a> {
        let policies = self.policies;
        self.overrides
            .narrowed(view)
            .map(move |i| policies[i as usize].as_ref())
    }

    /// Validate policies that may select `view` ([`WebhookIndex::narrowed`]), in evaluation
    /// order.
    pub(crate) fn validate_narrowed(
        self,
        view: &ObjectView<'_>,
    ) -> impl Iterator<Item = &'a CompiledPolicy> + use<'a> {
        let policies = self.policies;
        self.validates
            .narrowed(view)
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn policy(name: &str, selectors: Value) -> Arc<CompiledPolicy> {
        let document = json!({
            "apiVersion": "policy.kanon.dev/v1alpha1",
            "kind": "ClusterValidatePolicy",
            "metadata": {"name": name},
            "spec": {"resourceSelectors": selectors, "validateRules": [{"cel": {"validations": [{"expression": "true"}]}}]},
        });
        Arc::new(crate::compile_document(&document).expect("compiles"))
    }

    fn pod_selector(extra: Value) -> Value {
        let mut selector = json!({"apiVersion": "v1", "kind": "Pod"});
        if let (Some(s), Some(extra)) = (selector.as_object_mut(), extra.as_object()) {
            s.extend(extra.clone());
        }
        selector
    }

    /// Policies selecting Pods every way an index can file them, and some it cannot.
    fn policies() -> Vec<Arc<CompiledPolicy>> {
        let mut policies = Vec::new();
        for i in 0..40 {
            let extra = match i % 8 {
                0 => json!({"name": format!("pod-{}", i % 5)}),
                1 => json!({"namespace": format!("ns-{}", i % 3)}),
                2 => json!({"labelSelector": {"matchLabels": {"app": format!("app-{}", i % 4)}}}),
                3 => {
                    json!({"labelSelector": {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["a"]}]}})
                }
                4 => {
                    json!({"labelSelector": {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}]}})
                }
                5 => {
                    json!({"labelSelector": {"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["app-1"]}]}})
                }
                6 => json!({"namespace": "ns-1", "name": format!("pod-{}", i % 5)}),
                _ => json!({}),
            };
            let selectors = if i % 11 == 0 {
                // Two selectors of the type, filed twice.
                json!([pod_selector(extra), pod_selector(json!({"name": "pod-9"}))])
            } else {
                json!([pod_selector(extra)])
            };
            policies.push(policy(&format!("p{i:02}"), selectors));
        }
        policies.push(policy("every-type", json!([])));
        policies.push(policy(
            "configmaps",
            json!([{"apiVersion": "v1", "kind": "ConfigMap"}]),
        ));
        policies
    }

    #[test]
    fn narrowed_candidates_are_those_whose_selectors_may_select_the_object_in_order() {
        let policies = policies();
        let index = WebhookIndex::build(
            &policies,
            PolicyKind::ClusterValidatePolicy,
            PolicyKind::ValidatePolicy,
        );
        let mut narrowed_total = 0;
        for name in ["pod-0", "pod-3", "pod-9", "other", ""] {
            for namespace in [None, Some("ns-1"), Some("ns-2"), Some("elsewhere")] {
                for labels in [
                    json!(null),
                    json!({"app": "app-1"}),
                    json!({"app": "app-2", "tier": "a"}),
                    json!({"tier": "b", "app": 7}),
                ] {
                    let object = json!({
                        "apiVersion": "v1", "kind": "Pod",
                        "metadata": {"name": name, "namespace": namespace, "labels": labels},
                    });
                    let view = ObjectView {
                        api_version: "v1",
                        kind: "Pod",
                        namespace,
                        name,
                        object: &object,
                    };
                    let all: Vec<u32> = index.candidates("v1", "Pod", namespace).collect();
                    let narrowed: Vec<u32> = index.narrowed(&view).collect();
                    let selecting: Vec<u32> = all
                        .iter()
                        .copied()
                        .filter(|&i| policies[i as usize].selects_resource(&view))
                        .collect();
                    assert!(narrowed.is_sorted(), "{narrowed:?}");
                    assert!(narrowed.iter().all(|i| all.contains(i)));
                    assert!(
                        selecting.iter().all(|i| narrowed.contains(i)),
                        "{name} {namespace:?} {labels}: {selecting:?} not all in {narrowed:?}"
                    );
                    narrowed_total += narrowed.len();
                }
            }
        }
        // Most policies require a name, namespace or label the objects do not have.
        assert!(narrowed_total < 80 * 42 / 2, "{narrowed_total}");
        // Another type: the policies of every type only.
        let object = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}});
        let view = ObjectView::of_object(&object).expect("a view");
        let narrowed: Vec<&str> = index
            .narrowed(&view)
            .map(|i| &*policies[i as usize].label)
            .collect();
        assert_eq!(narrowed, ["ClusterValidatePolicy/every-type"]);
    }

    #[test]
    fn admission_policies_that_require_resource_names_are_filed_under_them() {
        let mut admission = crate::AdmissionPolicies::new();
        let policy = |name: &str, names: Value, match_policy: &str| {
            json!({
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicy",
                "metadata": {"name": name},
                "spec": {
                    "matchConstraints": {"matchPolicy": match_policy, "resourceRules": [{
                        "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"],
                        "operations": ["CREATE"], "resourceNames": names}]},
                    "validations": [{"expression": "true"}],
                },
            })
        };
        let binding = |name: &str| {
            json!({
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicyBinding",
                "metadata": {"name": name},
                "spec": {"policyName": name, "validationActions": ["Deny"]},
            })
        };
        for (name, names, match_policy) in [
            ("web-only", json!(["web"]), "Equivalent"),
            ("web-or-api", json!(["web", "api"]), "Exact"),
            ("every-pod", json!([]), "Equivalent"),
        ] {
            admission.add(&policy(name, names, match_policy));
            admission.add(&binding(name));
        }
        let policies: Vec<Arc<CompiledPolicy>> = admission
            .compile()
            .expect("compiles")
            .into_iter()
            .map(Arc::new)
            .collect();
        let kind = policies[0].id.kind;
        let index = WebhookIndex::build(&policies, kind, kind);
        let candidates = |name: &str| -> Vec<String> {
            let object = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}});
            let view = ObjectView {
                api_version: "v1",
                kind: "Pod",
                namespace: Some("shop"),
                name,
                object: &object,
            };
            let mut names: Vec<String> = index
                .narrowed(&view)
                .map(|i| {
                    policies[i as usize]
                        .admission
                        .as_ref()
                        .map(|b| b.policy.clone())
                        .unwrap_or_default()
                })
                .collect();
            names.sort();
            names
        };
        assert_eq!(candidates("web"), ["every-pod", "web-only", "web-or-api"]);
        assert_eq!(candidates("api"), ["every-pod", "web-or-api"]);
        assert_eq!(candidates("db"), ["every-pod"]);
        assert_eq!(candidates(""), ["every-pod"]);
    }
}
