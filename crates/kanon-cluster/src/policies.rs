//! The cluster's policies, compiled: what the reflector keeps between watch events. Each event
//! recompiles only the policy it carries, and only when its `metadata.generation` (or uid)
//! changed; a new [`PolicySet`] is then built from the shared compiled policies, so one change
//! costs one compilation and an index build, not a recompilation of every policy.
//!
//! Kinds and paths are checked against the kinds known in the cluster, custom ones included
//! ([`ClusterPolicies::set_kinds`]). When those change, only the warnings are recomputed (the
//! one part of a compilation that custom kinds affect): one kinds check per policy, no
//! recompilation and no new set.
//!
//! Pure bookkeeping, no I/O: the reflector feeds it watch events and publishes what it builds,
//! which is what makes it testable without an apiserver.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use kanon_api::PolicyKind;
use kanon_engine::{
    CompiledPolicy, FieldError, Kinds, PolicyId, PolicyObject, PolicySet, compile, compile_with,
    kinds_warnings,
};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::Value;

/// A policy object as the cluster holds it, compiled.
#[derive(Debug, Clone)]
pub struct Entry {
    /// The object's uid (a policy deleted and created again under the same name is new).
    pub uid: String,
    /// `metadata.generation` of the compiled spec.
    pub generation: Option<i64>,
    /// The compiled policy; `None` when the object could not be read at all (it then takes
    /// no part in admission and only reports its errors).
    pub compiled: Option<Arc<CompiledPolicy>>,
    /// Every problem found, by field path; empty when the policy is ready.
    pub errors: Vec<FieldError>,
    /// Likely mistakes, by field path: the compiled policy's warnings, recomputed when the
    /// known kinds change (so they may differ from `compiled`'s, which are those of its
    /// compilation).
    pub warnings: Vec<FieldError>,
    /// The decoded object, kept to recompute `warnings`; `None` when it could not be read.
    pub object: Option<Arc<PolicyObject>>,
    /// The object's `status` as last seen in a watch event.
    pub observed_status: Option<Value>,
}

/// What one watch event did to the policies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// The policy is new, or its spec changed: it was compiled.
    Compiled(PolicyId),
    /// Only its metadata or status changed: nothing to compile, the set is unchanged.
    Unchanged(PolicyId),
    /// The object has no name or kind and was left out.
    Unreadable(String),
}

/// The compiled policies of the cluster, by identity.
#[derive(Debug, Default)]
pub struct ClusterPolicies {
    entries: BTreeMap<PolicyId, Entry>,
    /// The kinds policies are checked against; `None`: the built-in ones.
    kinds: Option<Kinds>,
    /// Kinds that have been listed completely at least once.
    synced: BTreeSet<PolicyKind>,
    /// During a relist of a kind: the policies of that kind it has delivered so far.
    relisting: BTreeMap<PolicyKind, BTreeSet<PolicyId>>,
    /// What changed since the last [`ClusterPolicies::take_changes`].
    changes: Vec<String>,
}

/// Which version of an object a watch event carries, and the status it shows: what decides
/// whether it is compiled again (policies and exceptions alike).
pub(crate) struct Seen {
    /// `metadata.uid` (an object deleted and created again under the same name is new).
    pub(crate) uid: String,
    /// `metadata.generation`.
    pub(crate) generation: Option<i64>,
    /// Its `status`, taken out of the object.
    pub(crate) status: Option<Value>,
}

impl Seen {
    /// Reads the version of `object` and takes its `status` out.
    pub(crate) fn take(object: &mut Value) -> Seen {
        Seen {
            uid: object
                .pointer("/metadata/uid")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            generation: object
                .pointer("/metadata/generation")
                .and_then(Value::as_i64),
            status: object
                .as_object_mut()
                .and_then(|o| o.remove("status"))
                .filter(|s| !s.is_null()),
        }
    }

    /// Whether a version compiled before (`uid`, `generation`) is the one seen now (`now_uid`,
    /// `now_generation`): then only its status changed. Without a generation, never.
    pub(crate) fn same(
        uid: &str,
        generation: Option<i64>,
        now_uid: &str,
        now_generation: Option<i64>,
    ) -> bool {
        uid == now_uid && now_generation.is_some() && generation == now_generation
    }
}

/// The identity of a policy object of `kind`.
fn identity(kind: PolicyKind, object: &Value) -> Result<PolicyId, String> {
    let text = |pointer: &str| {
        object
            .pointer(pointer)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    let name = text("/metadata/name").ok_or_else(|| format!("a {kind} without a name"))?;
    let namespace = text("/metadata/namespace").map(str::to_string);
    if kind.is_namespaced() != namespace.is_some() {
        return Err(format!(
            "{kind} {name}: {} namespace",
            if kind.is_namespaced() {
                "has no"
            } else {
                "unexpectedly has a"
            }
        ));
    }
    Ok(PolicyId::new(kind, namespace, name))
}

impl ClusterPolicies {
    /// No policies, no kind synced.
    pub fn new() -> Self {
        Self::default()
    }

    /// A policy object of `kind` was created or updated (or delivered by a listing).
    pub fn apply(&mut self, kind: PolicyKind, mut object: Value) -> Applied {
        let id = match identity(kind, &object) {
            Ok(id) => id,
            Err(message) => return Applied::Unreadable(message),
        };
        if let Some(seen) = self.relisting.get_mut(&kind) {
            seen.insert(id.clone());
        }
        let Seen {
            uid,
            generation,
            status: observed_status,
        } = Seen::take(&mut object);
        if let Some(entry) = self.entries.get_mut(&id)
            && Seen::same(&entry.uid, entry.generation, &uid, generation)
        {
            entry.observed_status = observed_status;
            return Applied::Unchanged(id);
        }
        // Listings may leave out the type of their items; the engine needs it.
        if let Some(map) = object.as_object_mut() {
            map.insert("apiVersion".into(), Value::from(kanon_api::API_VERSION));
            map.insert("kind".into(), Value::from(kind.as_str()));
        }
        let (compiled, errors, warnings, decoded) = match PolicyObject::decode_reporting(&object) {
            Ok((decoded, problems)) => {
                let compiled = match &self.kinds {
                    Some(kinds) => compile_with(&decoded, kinds),
                    None => compile(&decoded),
                }
                .with_decode_problems(problems);
                let warnings = compiled.policy.warnings.clone();
                (
                    Some(Arc::new(compiled.policy)),
                    compiled.errors,
                    warnings,
                    Some(Arc::new(decoded)),
                )
            }
            Err(invalid) => (None, invalid.errors, Vec::new(), None),
        };
        let verb = if self.entries.contains_key(&id) {
            "updated"
        } else {
            "added"
        };
        self.changes.push(format!("{id} {verb}"));
        self.entries.insert(
            id.clone(),
            Entry {
                uid,
                generation,
                compiled,
                errors,
                warnings,
                object: decoded,
                observed_status,
            },
        );
        Applied::Compiled(id)
    }

    /// The kinds policies are checked against changed (custom kinds came, went or changed):
    /// recomputes every policy's warnings; the policies whose warnings changed. Errors and
    /// the policy set do not depend on custom kinds, so nothing is recompiled.
    pub fn set_kinds(&mut self, kinds: Kinds) -> Vec<PolicyId> {
        let mut changed = Vec::new();
        for (id, entry) in &mut self.entries {
            let Some(object) = &entry.object else {
                continue;
            };
            let warnings = kinds_warnings(object, &kinds);
            if warnings != entry.warnings {
                entry.warnings = warnings;
                changed.push(id.clone());
            }
        }
        self.kinds = Some(kinds);
        changed
    }

    /// A policy object of `kind` was deleted; whether it was known.
    pub fn delete(&mut self, kind: PolicyKind, object: &Value) -> bool {
        let Ok(id) = identity(kind, object) else {
            return false;
        };
        let known = self.entries.remove(&id).is_some();
        if known {
            self.changes.push(format!("{id} deleted"));
        }
        known
    }

    /// A (re)listing of `kind` starts: the objects it delivers replace those of that kind.
    pub fn relist_started(&mut self, kind: PolicyKind) {
        self.relisting.insert(kind, BTreeSet::new());
    }

    /// The listing of `kind` is complete: policies of that kind it did not deliver were
    /// deleted meanwhile (e.g. while the apiserver was away) and are dropped.
    pub fn relist_done(&mut self, kind: PolicyKind) {
        let seen = self.relisting.remove(&kind).unwrap_or_default();
        let gone: Vec<PolicyId> = self
            .entries
            .keys()
            .filter(|id| id.kind == kind && !seen.contains(*id))
            .cloned()
            .collect();
        for id in gone {
            self.entries.remove(&id);
            self.changes.push(format!("{id} deleted"));
        }
        self.synced.insert(kind);
    }

    /// Whether every policy kind has been listed once: only then is a set complete enough to
    /// serve.
    pub fn synced(&self) -> bool {
        PolicyKind::ALL.iter().all(|k| self.synced.contains(k))
    }

    /// What changed since the last call, for the log (`None` when nothing did).
    pub fn take_changes(&mut self) -> Option<String> {
        if self.changes.is_empty() {
            return None;
        }
        let changes = std::mem::take(&mut self.changes);
        Some(match changes.len() {
            1..=3 => changes.join(", "),
            n => format!("{n} policy changes"),
        })
    }

    /// The policy set of every policy that could be read (invalid ones included: their
    /// failure policy decides what matching requests get).
    pub fn set(&self) -> PolicySet {
        let policies: Vec<Arc<CompiledPolicy>> = self
            .entries
            .values()
            .filter_map(|e| e.compiled.clone())
            .collect();
        // Identities are the map's keys, so they cannot repeat.
        PolicySet::build_shared(policies).unwrap_or_default()
    }

    /// Every policy, by identity.
    pub fn entries(&self) -> impl Iterator<Item = (&PolicyId, &Entry)> {
        self.entries.iter()
    }

    /// One policy.
    pub fn get(&self, id: &PolicyId) -> Option<&Entry> {
        self.entries.get(id)
    }

    /// One policy's compiled form, when it could be read.
    pub fn policy(&self, id: &PolicyId) -> Option<&CompiledPolicy> {
        self.entries.get(id)?.compiled.as_deref()
    }

    /// The identities of the policies (readable or not).
    pub fn ids(&self) -> impl Iterator<Item = &PolicyId> {
        self.entries.keys()
    }

    /// Number of policies (readable or not).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there is no policy.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Number of policies with errors.
    pub fn invalid(&self) -> usize {
        self.entries
            .values()
            .filter(|e| !e.errors.is_empty())
            .count()
    }
}

/// The API resource of a policy kind.
pub fn policy_resource(kind: PolicyKind) -> ApiResource {
    let gvk = GroupVersionKind::gvk(kanon_api::GROUP, kanon_api::VERSION, kind.as_str());
    ApiResource::from_gvk_with_plural(&gvk, kind.plural())
}

/// The API resource of PolicyExceptions.
pub fn exception_resource() -> ApiResource {
    let gvk = GroupVersionKind::gvk(
        kanon_api::GROUP,
        kanon_api::VERSION,
        kanon_api::EXCEPTION_KIND,
    );
    ApiResource::from_gvk_with_plural(&gvk, "policyexceptions")
}
