//! Helpers shared by the engine's integration tests: policy documents, objects and requests,
//! all built as JSON and fed through the engine's public API.

#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use kanon_api::Operation;
use kanon_engine::{
    CompiledPolicy, Decision, FieldError, InvalidPolicy, Lookup, LookupError, LookupFuture,
    NoObjects, ObjectQuery, ObjectStore, PolicyObject, PolicySet, Request, compile,
    compile_document,
};
use serde_json::{Value, json};

pub const API: &str = "policy.kanon.dev/v1alpha1";

/// A ClusterOverridePolicy document with `spec` as given.
pub fn cop(name: &str, spec: Value) -> Value {
    json!({"apiVersion": API, "kind": "ClusterOverridePolicy", "metadata": {"name": name}, "spec": spec})
}

/// An OverridePolicy document in `namespace` with `spec` as given.
pub fn op(namespace: &str, name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": API,
        "kind": "OverridePolicy",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    })
}

/// A ClusterValidatePolicy document with `spec` as given.
pub fn cvp(name: &str, spec: Value) -> Value {
    json!({"apiVersion": API, "kind": "ClusterValidatePolicy", "metadata": {"name": name}, "spec": spec})
}

/// A ValidatePolicy document in `namespace` with `spec` as given.
pub fn vp(namespace: &str, name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": API,
        "kind": "ValidatePolicy",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    })
}

/// One override rule whose only overrider is the given plaintext operations.
pub fn plaintext_rule(ops: Value) -> Value {
    json!({"overriders": {"plaintext": ops}})
}

/// An override rule that appends `mark` to the object's top-level `/trace` array, creating it
/// if needed is not possible with one RFC 6902 op, so objects under test carry `trace: []`.
pub fn trace_rule(mark: &str) -> Value {
    plaintext_rule(json!([{"op": "add", "path": "/trace/-", "value": mark}]))
}

/// An override rule that sets a top-level marker field `/hit-<mark>` to `true`.
pub fn hit_rule(mark: &str) -> Value {
    plaintext_rule(json!([{"op": "add", "path": format!("/hit-{mark}"), "value": true}]))
}

/// Compiles a valid policy document, panicking with every error when it is not valid.
pub fn compiled(doc: &Value) -> CompiledPolicy {
    compile_document(doc).unwrap_or_else(|e| panic!("policy should compile: {e}"))
}

/// Decodes and compiles a document that may carry compile errors (not decode errors): the
/// result keeps its `defect`, as a policy that got in while kanon was down would.
pub fn compiled_even_if_invalid(doc: &Value) -> CompiledPolicy {
    let object = PolicyObject::decode(doc).unwrap_or_else(|e| panic!("policy should decode: {e}"));
    compile(&object).policy
}

/// Builds a policy set from valid documents.
pub fn set_of(docs: &[Value]) -> PolicySet {
    PolicySet::build(docs.iter().map(compiled).collect()).expect("no duplicate policies")
}

/// Builds a policy set from documents that may be invalid (but decode).
pub fn set_of_any(docs: &[Value]) -> PolicySet {
    PolicySet::build(docs.iter().map(compiled_even_if_invalid).collect())
        .expect("no duplicate policies")
}

/// The errors of a document that decodes and compiles with errors, as `field: message`.
pub fn compile_errors(doc: &Value) -> Vec<FieldError> {
    match compile_document(doc) {
        Ok(_) => panic!("policy should not compile: {doc:#}"),
        Err(InvalidPolicy { errors, .. }) => {
            assert!(
                !errors.is_empty(),
                "InvalidPolicy must list at least one error"
            );
            errors
        }
    }
}

/// Whether some error is at exactly `field` and its message contains `needle`.
pub fn has_error(errors: &[FieldError], field: &str, needle: &str) -> bool {
    errors
        .iter()
        .any(|e| e.field == field && e.message.contains(needle))
}

/// Asserts that some error is at exactly `field` with a message containing `needle`.
#[track_caller]
pub fn assert_error(errors: &[FieldError], field: &str, needle: &str) {
    assert!(
        has_error(errors, field, needle),
        "expected an error at `{field}` containing `{needle}`, got: {errors:#?}"
    );
}

/// A Pod named `name` in `namespace` with `labels`, and an empty `trace`.
pub fn pod(namespace: &str, name: &str, labels: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"containers": [{"name": "app", "image": "nginx"}]},
        "trace": [],
    })
}

/// A cluster-scoped Node named `name`, with an empty `trace`.
pub fn node(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "trace": []})
}

/// A Namespace named `name` with `labels`, and an empty `trace`.
pub fn namespace(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}, "trace": []})
}

/// A CREATE request for `object`.
pub fn create(object: &Value) -> Request {
    Request::from_objects(Operation::Create, Some(object.clone()), None)
        .expect("valid CREATE request")
}

/// A request with `operation` for `object` (used as the old object too where one is needed).
pub fn request(operation: Operation, object: &Value) -> Request {
    let (new, old) = match operation {
        Operation::Create | Operation::Connect => (Some(object.clone()), None),
        Operation::Update => (Some(object.clone()), Some(object.clone())),
        Operation::Delete => (None, Some(object.clone())),
        Operation::All => panic!("* is not a request operation"),
    };
    Request::from_objects(operation, new, old).expect("valid request")
}

/// Runs the override policies on a CREATE of `object` with no cluster objects.
pub fn mutate_create(set: &PolicySet, object: &Value) -> Decision {
    kanon_engine::block_on(set.mutate(&create(object), &NoObjects))
}

/// Runs the override policies with a lookup.
pub fn mutate_with(set: &PolicySet, object: &Value, lookup: &dyn Lookup) -> Decision {
    kanon_engine::block_on(set.mutate(&create(object), lookup))
}

/// Applies `decision.patch` to `original` and checks it gives `decision.patched`: the patch
/// must be the diff original → final.
#[track_caller]
pub fn assert_patch_is_diff(original: &Value, decision: &Decision) {
    let mut patched = original.clone();
    json_patch::patch(&mut patched, &decision.patch).expect("the patch applies to the original");
    assert_eq!(
        Some(&patched),
        decision.patched.as_ref(),
        "applying the patch to the original must give the final object"
    );
}

/// A lookup that counts its calls and fails or answers as told.
pub struct CountingLookup {
    pub calls: AtomicUsize,
    pub fail: bool,
    pub inner: ObjectStore,
}

impl Lookup for CountingLookup {
    fn get<'a>(
        &'a self,
        query: ObjectQuery<'a>,
        name: &'a str,
    ) -> LookupFuture<'a, Option<Arc<Value>>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if self.fail {
            return Box::pin(std::future::ready(Err(LookupError::NotSynced {
                what: query.describe(Some(name)),
            })));
        }
        self.inner.get(query, name)
    }

    fn list<'a>(&'a self, query: ObjectQuery<'a>) -> LookupFuture<'a, Vec<Arc<Value>>> {
        self.inner.list(query)
    }
}
