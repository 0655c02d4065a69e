//! A `k8s` reference by label selector hands its selector to the lookup, in the apiserver's
//! syntax, so that a cluster's lookup lists only the matching objects; what the lookup returns
//! is still matched here.

mod common;

use std::sync::{Arc, Mutex};

use common::*;
use kanon_engine::{Lookup, LookupFuture, ObjectQuery, lookup_ready};
use serde_json::{Value, json};

/// A lookup that records each listing's selector and returns every object it holds, matching
/// or not, as a lookup that ignores the selector would.
struct Unfiltered {
    objects: Vec<Arc<Value>>,
    selectors: Mutex<Vec<Option<String>>>,
}

impl Lookup for Unfiltered {
    fn get<'a>(&'a self, _: ObjectQuery<'a>, _: &'a str) -> LookupFuture<'a, Option<Arc<Value>>> {
        lookup_ready(Ok(None))
    }

    fn list<'a>(&'a self, query: ObjectQuery<'a>) -> LookupFuture<'a, Vec<Arc<Value>>> {
        self.selectors
            .lock()
            .unwrap()
            .push(query.label_selector.map(str::to_string));
        lookup_ready(Ok(self.objects.clone()))
    }
}

fn config_map(name: &str, labels: Value) -> Arc<Value> {
    Arc::new(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default", "labels": labels}}))
}

/// The names the policy's listing found, as its denial message shows them.
fn listed(selector: Value, lookup: &Unfiltered) -> String {
    let policy = vp(
        "default",
        "show",
        json!({"validateRules": [{"template": {"type": "condition", "condition": {
            "cond": "Exist",
            "dataRef": {"from": "k8s", "path": "$[*].metadata.name", "k8s": {
                "apiVersion": "v1", "kind": "ConfigMap", "labelSelector": selector}},
            "message": "{{ refs.data | tojson }}",
        }}}]}),
    );
    let request = create(&pod("default", "web-1", json!({"app": "web"})));
    let decision = kanon_engine::block_on(set_of(&[policy]).validate(&request, None, lookup));
    decision.messages.join("; ")
}

#[test]
fn a_listing_carries_its_label_selector_and_is_still_matched() {
    let lookup = Unfiltered {
        objects: vec![
            config_map("web", json!({"app": "web", "team": "core"})),
            config_map("api", json!({"app": "api", "team": "core"})),
        ],
        selectors: Mutex::new(Vec::new()),
    };
    // Fixed, and rendered from the object per request.
    let fixed = listed(
        json!({"matchLabels": {"team": "core"}, "matchExpressions": [
            {"key": "app", "operator": "NotIn", "values": ["db"]}]}),
        &lookup,
    );
    assert!(fixed.ends_with(r#"["web", "api"]"#), "{fixed}");
    let rendered = listed(
        json!({"matchLabels": {"app": "{{ object.metadata.labels.app }}"}}),
        &lookup,
    );
    // The lookup ignored the selector; the engine kept only the matching object.
    assert!(rendered.ends_with(r#"["web"]"#), "{rendered}");
    // A value no label can hold is not sent; the engine matches it alone (nothing here).
    let odd = listed(json!({"matchLabels": {"app": "a b"}}), &lookup);
    assert!(odd.is_empty(), "{odd}");
    assert_eq!(
        *lookup.selectors.lock().unwrap(),
        [
            Some("team=core,app!=db".to_string()),
            Some("app=web".to_string()),
            None
        ]
    );
}
