//! Namespaces offline. In a cluster every namespaced object's Namespace exists, and the
//! apiserver guarantees it the label `kubernetes.io/metadata.name` with its name. Offline, a
//! Namespace the context objects lack is judged as that guaranteed Namespace (its name and that
//! label, defaulted as the apiserver defaults a Namespace) rather than as missing: a
//! `namespaceSelector` on the name label matches, as in the cluster, and one on other labels
//! does not. Each assumed Namespace a policy actually read is named in a note, with the way to
//! give the real one.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};

use kanon_engine::{HttpAnswer, HttpCall, Lookup, LookupFuture, ObjectQuery, ObjectStore};
use serde_json::{Value, json};

/// The context objects, with the guaranteed Namespace of each namespace they lack.
pub(crate) struct Namespaces<'s> {
    store: &'s ObjectStore,
    assumed: BTreeMap<String, Arc<Value>>,
    read: Mutex<BTreeSet<String>>,
}

impl<'s> Namespaces<'s> {
    /// `store`, completed with a Namespace for each of `namespaces` it does not hold.
    pub(crate) fn new<'n>(
        store: &'s ObjectStore,
        namespaces: impl IntoIterator<Item = &'n str>,
    ) -> Self {
        let assumed = namespaces
            .into_iter()
            .filter(|name| !name.is_empty())
            .filter(|name| store.object("v1", "Namespace", None, name).is_none())
            .map(|name| (name.to_owned(), Arc::new(guaranteed(name))))
            .collect();
        Namespaces {
            store,
            assumed,
            read: Mutex::new(BTreeSet::new()),
        }
    }

    /// One note for each assumed Namespace the evaluation read; `given_by` names what gives
    /// the real one (`--context`, `the suite's context`).
    pub(crate) fn notes(&self, given_by: &str) -> Vec<String> {
        let read = self.read.lock().unwrap_or_else(PoisonError::into_inner);
        read.iter()
            .map(|name| {
                format!(
                    "namespace {name} is not in {given_by}: it was judged as the Namespace the \
                     apiserver guarantees (its name and the label \
                     kubernetes.io/metadata.name={name}, no other label); give the Namespace \
                     in {given_by} to judge it with its own labels"
                )
            })
            .collect()
    }

    fn assumed(&self, query: &ObjectQuery<'_>, name: &str) -> Option<Arc<Value>> {
        if query.api_version != "v1" || query.kind != "Namespace" {
            return None;
        }
        let namespace = self.assumed.get(name)?;
        self.read
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name.to_owned());
        Some(Arc::clone(namespace))
    }
}

/// The Namespace `name` as the apiserver holds one created with nothing but its name.
fn guaranteed(name: &str) -> Value {
    let mut namespace =
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
    kanon_engine::apply_builtin_defaults(&mut namespace);
    namespace
}

impl Lookup for Namespaces<'_> {
    fn get<'a>(
        &'a self,
        query: ObjectQuery<'a>,
        name: &'a str,
    ) -> LookupFuture<'a, Option<Arc<Value>>> {
        match self.assumed(&query, name) {
            Some(namespace) => kanon_engine::lookup_ready(Ok(Some(namespace))),
            None => self.store.get(query, name),
        }
    }

    fn list<'a>(&'a self, query: ObjectQuery<'a>) -> LookupFuture<'a, Vec<Arc<Value>>> {
        if query.api_version != "v1" || query.kind != "Namespace" || self.assumed.is_empty() {
            return self.store.list(query);
        }
        let mut namespaces = self
            .store
            .objects("v1", "Namespace", None)
            .into_iter()
            .chain(self.assumed.values().cloned())
            .collect::<Vec<_>>();
        namespaces.sort_by(|a, b| name_of(a).cmp(name_of(b)));
        kanon_engine::lookup_ready(Ok(namespaces))
    }

    fn http<'a>(&'a self, call: &'a HttpCall) -> LookupFuture<'a, HttpAnswer> {
        self.store.http(call)
    }

    fn kinds(&self) -> Option<kanon_schema::Kinds> {
        self.store.kinds()
    }
}

fn name_of(object: &Value) -> &str {
    object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_namespace_is_the_guaranteed_one_and_noted_once_read() {
        let mut store = ObjectStore::new();
        store
            .insert(json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": "given", "labels": {"team": "a"}}}))
            .expect("a namespace");
        let namespaces = Namespaces::new(&store, ["given", "shop", "unread"]);
        let query = ObjectQuery {
            api_version: "v1",
            kind: "Namespace",
            namespace: None,
            policy: "",
            confined_to: None,
            label_selector: None,
        };
        let shop = kanon_engine::block_on(namespaces.get(query, "shop"))
            .expect("no error")
            .expect("the guaranteed namespace");
        assert_eq!(
            shop["metadata"]["labels"],
            json!({"kubernetes.io/metadata.name": "shop"})
        );
        let given = kanon_engine::block_on(namespaces.get(query, "given"))
            .expect("no error")
            .expect("the given namespace");
        assert_eq!(given["metadata"]["labels"], json!({"team": "a"}));
        let notes = namespaces.notes("--context");
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(
            notes[0].starts_with("namespace shop is not in --context"),
            "{notes:?}"
        );
    }
}
