//! The cluster's PolicyExceptions, compiled: what the reflector keeps between watch events of
//! the exception namespaces, and the status each exception should have against the policies in
//! force (a named policy or rule that does not exist, an exception past `expiresAt`).
//!
//! Pure bookkeeping, no I/O, like [`crate::policies`]: the reflector feeds it and publishes.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use kanon_engine::FieldError;
use kanon_engine::{CompiledException, PolicyId, compile_exception};
use serde_json::{Value, json};

use crate::policies::{ClusterPolicies, Seen};
use crate::status::{Ready, ready_status};

/// `(namespace, name)` of an exception.
pub type ExceptionKey = (String, String);

/// An exception as the cluster holds it.
#[derive(Debug, Clone)]
pub struct ExceptionEntry {
    /// The object's uid.
    pub uid: String,
    /// `metadata.generation` of the compiled spec.
    pub generation: Option<i64>,
    /// The compiled exception, or every error by field path.
    pub compiled: Result<Arc<CompiledException>, Vec<FieldError>>,
    /// The object's `status` as last seen.
    pub observed_status: Option<Value>,
}

/// The exceptions of the exception namespaces, by namespace and name.
#[derive(Debug, Default)]
pub struct ClusterExceptions {
    entries: BTreeMap<ExceptionKey, ExceptionEntry>,
    namespaces: Vec<String>,
    synced: BTreeSet<String>,
    relisting: BTreeMap<String, BTreeSet<ExceptionKey>>,
    changed: bool,
}

fn key_of(object: &Value) -> Option<ExceptionKey> {
    let text = |p: &str| {
        object
            .pointer(p)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    Some((
        text("/metadata/namespace")?.to_string(),
        text("/metadata/name")?.to_string(),
    ))
}

impl ClusterExceptions {
    /// No exceptions yet; `namespaces` are the exception namespaces watched.
    pub fn new(namespaces: Vec<String>) -> Self {
        ClusterExceptions {
            namespaces,
            ..Self::default()
        }
    }

    /// An exception was created or updated (or listed): compiled when its spec changed.
    /// Its key, or `None` for an object without namespace or name.
    pub fn apply(&mut self, mut object: Value) -> Option<ExceptionKey> {
        let key = key_of(&object)?;
        if let Some(seen) = self.relisting.get_mut(&key.0) {
            seen.insert(key.clone());
        }
        let Seen {
            uid,
            generation,
            status: observed_status,
        } = Seen::take(&mut object);
        if let Some(entry) = self.entries.get_mut(&key)
            && Seen::same(&entry.uid, entry.generation, &uid, generation)
        {
            entry.observed_status = observed_status;
            return Some(key);
        }
        if let Some(map) = object.as_object_mut() {
            map.insert("apiVersion".into(), Value::from(kanon_api::API_VERSION));
            map.insert("kind".into(), Value::from(kanon_api::EXCEPTION_KIND));
        }
        let compiled = compile_exception(&object)
            .map(Arc::new)
            .map_err(|invalid| invalid.errors);
        self.entries.insert(
            key.clone(),
            ExceptionEntry {
                uid,
                generation,
                compiled,
                observed_status,
            },
        );
        self.changed = true;
        Some(key)
    }

    /// An exception was deleted.
    pub fn delete(&mut self, object: &Value) {
        if let Some(key) = key_of(object)
            && self.entries.remove(&key).is_some()
        {
            self.changed = true;
        }
    }

    /// A (re)listing of `namespace` starts.
    pub fn relist_started(&mut self, namespace: &str) {
        self.relisting
            .insert(namespace.to_string(), BTreeSet::new());
    }

    /// The listing of `namespace` is complete: exceptions it did not deliver are gone.
    pub fn relist_done(&mut self, namespace: &str) {
        let seen = self.relisting.remove(namespace).unwrap_or_default();
        let before = self.entries.len();
        self.entries
            .retain(|key, _| key.0 != namespace || seen.contains(key));
        self.changed |= self.entries.len() != before;
        self.synced.insert(namespace.to_string());
    }

    /// Whether every exception namespace has been listed once.
    pub fn synced(&self) -> bool {
        self.namespaces.iter().all(|n| self.synced.contains(n))
    }

    /// Whether the exceptions changed since the last call.
    pub fn take_changed(&mut self) -> bool {
        std::mem::take(&mut self.changed)
    }

    /// The exceptions that compiled: what the policy set carries (the engine skips expired
    /// ones at each request's time).
    pub fn in_force(&self) -> Vec<Arc<CompiledException>> {
        self.entries
            .values()
            .filter_map(|e| e.compiled.as_ref().ok().cloned())
            .collect()
    }

    /// Every exception.
    pub fn entries(&self) -> impl Iterator<Item = (&ExceptionKey, &ExceptionEntry)> {
        self.entries.iter()
    }

    /// One exception.
    pub fn get(&self, key: &ExceptionKey) -> Option<&ExceptionEntry> {
        self.entries.get(key)
    }

    /// The soonest `expiresAt` after `now` (Unix seconds): when a status must change next.
    pub fn next_expiry(&self, now: i64) -> Option<i64> {
        self.entries
            .values()
            .filter_map(|e| e.compiled.as_ref().ok()?.expires_at)
            .filter(|at| *at > now)
            .min()
    }
}

/// The `status` an exception should have against the cluster's `policies` at `now_seconds`
/// (judged against the policies the reflector keeps, so that no second set is built): `Ready` True
/// when it compiled, has not expired and every policy and rule it names exists; else False
/// with the first reason (`Invalid`, `Expired`, `PolicyNotFound`, `RuleNotFound`) and every
/// problem. `policies` lists the policies it names that exist.
pub fn desired_status(
    entry: &ExceptionEntry,
    policies: &ClusterPolicies,
    now_seconds: i64,
    observed: Option<&Value>,
    now: &str,
) -> Value {
    let (ready, found) = match &entry.compiled {
        Err(errors) => {
            let errors: Vec<String> = errors.iter().map(ToString::to_string).collect();
            (
                Ready {
                    status: "False",
                    reason: "Invalid",
                    message: errors.join("; "),
                },
                Vec::new(),
            )
        }
        Ok(exception) => {
            let found: Vec<String> = exception
                .exempted
                .iter()
                .filter(|e| policies.policy(&e.policy).is_some())
                .map(|e| e.policy.to_string())
                .collect();
            let known: Vec<&PolicyId> = policies.ids().collect();
            let missing = exception.missing(|id| policies.policy(id), &known);
            let ready = if exception.expired(Some(now_seconds)) {
                Ready {
                    status: "False",
                    reason: "Expired",
                    message: "past its expiresAt: it no longer exempts anything".to_string(),
                }
            } else if let Some((reason, _)) = missing.first() {
                let listed: Vec<&str> = missing.iter().map(|(_, m)| m.as_str()).collect();
                let hint = if missing
                    .iter()
                    .any(|(reason, _)| *reason != "SelectsNothing")
                {
                    ": it exempts from nothing there (check the kind, name, namespace and rule names)"
                } else {
                    ""
                };
                Ready {
                    status: "False",
                    reason,
                    message: format!("{}{hint}", listed.join("; ")),
                }
            } else {
                Ready {
                    status: "True",
                    reason: "Honoured",
                    message: "every policy and rule it names exists; it is in force".to_string(),
                }
            };
            (ready, found)
        }
    };
    let mut out = ready_status(ready, entry.generation, observed, now);
    if !found.is_empty() {
        out["policies"] = json!(found);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exception(name: &str, generation: i64, spec: Value) -> Value {
        json!({
            "metadata": {"name": name, "namespace": "exceptions", "uid": name, "generation": generation},
            "spec": spec,
        })
    }

    fn spec(policy: &str, expires: Option<&str>) -> Value {
        let mut spec = json!({
            "policies": [{"kind": "ClusterValidatePolicy", "name": policy}],
            "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
            "reason": "r",
        });
        if let Some(at) = expires {
            spec["expiresAt"] = json!(at);
        }
        spec
    }

    fn policies() -> ClusterPolicies {
        let policy = json!({
            "metadata": {"name": "p", "uid": "p", "generation": 1},
            "spec": {"validateRules": [{"targetOperations": ["CREATE"], "cel": {"validations": [{"expression": "true"}]}}]},
        });
        let mut policies = ClusterPolicies::new();
        policies.apply(kanon_api::PolicyKind::ClusterValidatePolicy, policy);
        policies
    }

    fn ready_of(status: &Value) -> (&str, &str) {
        let c = &status["conditions"][0];
        (c["status"].as_str().unwrap(), c["reason"].as_str().unwrap())
    }

    #[test]
    fn statuses_say_what_an_exception_names_and_whether_it_is_in_force() {
        let mut exceptions = ClusterExceptions::new(vec!["exceptions".into()]);
        exceptions.relist_started("exceptions");
        assert!(!exceptions.synced());
        let good = exceptions
            .apply(exception(
                "good",
                1,
                spec("p", Some("2026-12-01T00:00:00Z")),
            ))
            .unwrap();
        let typo = exceptions
            .apply(exception("typo", 1, spec("pp", None)))
            .unwrap();
        let bad = exceptions
            .apply(exception("bad", 1, json!({"policies": []})))
            .unwrap();
        exceptions.relist_done("exceptions");
        assert!(exceptions.synced() && exceptions.take_changed());
        assert_eq!(exceptions.in_force().len(), 2);

        let set = policies();
        let now = kanon_engine::parse_exception_time("2026-11-26T00:00:00Z").unwrap();
        let status = |key: &ExceptionKey, at: i64| {
            let entry = exceptions.get(key).unwrap();
            desired_status(entry, &set, at, None, "2026-11-26T00:00:00Z")
        };
        let s = status(&good, now);
        assert_eq!(ready_of(&s), ("True", "Honoured"));
        assert_eq!(s["policies"], json!(["ClusterValidatePolicy/p"]));
        assert_eq!(s["observedGeneration"], 1);
        let s = status(&typo, now);
        assert_eq!(ready_of(&s), ("False", "PolicyNotFound"));
        assert!(
            s["conditions"][0]["message"]
                .as_str()
                .unwrap()
                .starts_with("ClusterValidatePolicy/pp does not exist"),
            "{s}"
        );
        let s = status(&bad, now);
        assert_eq!(ready_of(&s), ("False", "Invalid"));
        assert!(
            s["conditions"][0]["message"]
                .as_str()
                .unwrap()
                .contains("missing field `resourceSelectors`"),
            "{s}"
        );
        // It expires on time; the next expiry is when its status must change.
        let expiry = kanon_engine::parse_exception_time("2026-12-01T00:00:00Z").unwrap();
        assert_eq!(exceptions.next_expiry(now), Some(expiry));
        assert_eq!(exceptions.next_expiry(expiry), None);
        assert_eq!(ready_of(&status(&good, expiry)), ("False", "Expired"));

        // The same generation is not compiled again; a relist without it deletes it.
        exceptions.apply(exception("good", 1, spec("p", None)));
        assert!(!exceptions.take_changed());
        exceptions.relist_started("exceptions");
        exceptions.apply(exception("good", 1, spec("p", None)));
        exceptions.relist_done("exceptions");
        assert!(exceptions.take_changed());
        assert_eq!(exceptions.entries().count(), 1);
    }
}
