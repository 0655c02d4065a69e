//! A policy object being written is checked against the kinds its lookup knows: in a cluster,
//! custom kinds too, so `kubectl apply` shows a typo in a custom resource's path.

use std::sync::Arc;
use std::time::Duration;

use kanon_api::Operation;
use kanon_engine::WebhookKind;
use kanon_engine::{Kinds, Lookup, NoObjects, PolicySet, Request, block_on};
use kanon_engine::{LookupFuture, ObjectQuery, lookup_ready as ready};
use kanon_webhook::admission::decide;
use kanon_webhook::lookup::BoundedLookup;
use serde_json::{Value, json};

/// No objects, and the kinds of a cluster whose CRD serves `example.com/v1 Widget`.
struct ClusterKinds(Kinds);

impl Lookup for ClusterKinds {
    fn get<'a>(
        &'a self,
        _query: ObjectQuery<'a>,
        _name: &'a str,
    ) -> LookupFuture<'a, Option<Arc<Value>>> {
        ready(Ok(None))
    }

    fn list<'a>(&'a self, _query: ObjectQuery<'a>) -> LookupFuture<'a, Vec<Arc<Value>>> {
        ready(Ok(Vec::new()))
    }

    fn kinds(&self) -> Option<Kinds> {
        Some(self.0.clone())
    }
}

fn cluster_kinds() -> Kinds {
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "names": {"kind": "Widget", "plural": "widgets"},
                 "scope": "Namespaced",
                 "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                     "type": "object", "properties": {"spec": {"type": "object", "properties": {
                         "color": {"type": "string"}}}}}}}]},
    });
    let builtin = kanon_schema::Schema::builtin().unwrap();
    let widgets = kanon_schema::CustomResource::from_crd(&crd).unwrap();
    let custom = kanon_schema::Schema::from_custom_resources(builtin, [&widgets]).unwrap();
    Kinds::with_custom(builtin, Arc::new(custom))
}

/// The warnings of the validating webhook on creating a policy that reads `/spec/colr` of
/// Widgets, through `lookup` bounded as the server bounds it.
fn warnings_with(lookup: &dyn Lookup) -> Vec<String> {
    let policy = json!({
        "apiVersion": "policy.kanon.dev/v1alpha1",
        "kind": "ClusterValidatePolicy",
        "metadata": {"name": "widgets"},
        "spec": {"resourceSelectors": [{"apiVersion": "example.com/v1", "kind": "Widget"}],
                 "validateRules": [{"targetOperations": ["CREATE", "UPDATE"], "template": {"type": "condition",
                     "condition": {"cond": "Exist", "dataRef": {"from": "current", "path": "/spec/colr"},
                                   "affectMode": "allow"}}}]},
    });
    let mut request = Request::from_objects(Operation::Create, Some(policy), None).unwrap();
    let bounded = BoundedLookup::new(lookup, tokio::time::Instant::now() + Duration::from_secs(5));
    let decision = block_on(decide(
        &mut request,
        WebhookKind::Validating,
        &PolicySet::default(),
        &bounded,
    ));
    assert!(decision.allowed, "{:?}", decision.messages);
    decision.warnings
}

#[test]
fn a_policy_being_written_is_checked_against_the_lookups_kinds() {
    assert_eq!(
        warnings_with(&ClusterKinds(cluster_kinds())),
        [
            "ClusterValidatePolicy/widgets: spec.validateRules[0].template.condition.dataRef.path: `/spec/colr` does not exist in example.com/v1 Widget; did you mean `/spec/color`?"
        ]
    );
    // Without custom kinds (offline, or no CRD watch), Widgets are not judged.
    assert!(warnings_with(&NoObjects).is_empty());
}
