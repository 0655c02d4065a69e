use super::*;
use serde_json::json;

fn body(request: serde_json::Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request,
    }))
    .expect("JSON")
}

fn configmap(namespace: &str) -> serde_json::Value {
    json!({
        "uid": "u-1", "operation": "CREATE", "namespace": namespace,
        "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
        "object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": namespace}, "data": {"a": "b"}},
    })
}

#[test]
fn a_reviews_identity_is_read_as_the_request_reads_it() {
    let identity = identify(&body(configmap("team-b"))).expect("a review");
    assert_eq!(
        identity,
        Identity {
            uid: "u-1".into(),
            operation: Operation::Create,
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: Some("team-b".into()),
        }
    );
    assert_eq!(identity.flow(), "team-b");
    // A DELETE's type comes from the old object, else the review's kind.
    let delete = identify(&body(json!({
        "uid": "u-2", "operation": "DELETE", "namespace": "team-b",
        "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
    })))
    .expect("a review");
    assert_eq!(
        (delete.api_version.as_str(), delete.kind.as_str()),
        ("apps/v1", "Deployment")
    );
    // A Namespace is cluster-scoped, although the review names it as its own namespace.
    let namespace = identify(&body(json!({
        "uid": "u-3", "operation": "CREATE", "namespace": "new",
        "object": {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "new"}},
    })))
    .expect("a review");
    assert_eq!(namespace.flow(), "");
}

#[test]
fn what_the_full_reading_refuses_is_left_to_it() {
    let mut request = configmap("b");
    request["uid"] = json!("u".repeat(MAX_UID_BYTES + 1));
    assert_eq!(identify(&body(request)), None);
    let mut request = configmap("b");
    request.as_object_mut().map(|r| r.remove("object"));
    assert_eq!(identify(&body(request)), None);
    let mut request = configmap("b");
    request["operation"] = json!("UPDATE");
    assert_eq!(identify(&body(request)), None, "no old object");
    let mut request = configmap("b");
    request["object"]["metadata"]["namespace"] = json!(7);
    assert_eq!(identify(&body(request)), None);
    let mut deep = configmap("b");
    deep["object"]["data"] =
        serde_json::from_str(&format!("{}{}", "[".repeat(120), "]".repeat(120))).expect("JSON");
    let deep = body(deep);
    let identity = identify(&deep).expect("read, its nesting not measured");
    let none = PolicySet::build(Vec::new()).expect("an empty set");
    assert!(
        unselected(&identity, &deep, WebhookKind::Validating, &none).is_none(),
        "too deep to be answered without the full reading"
    );
    let shallow = body(configmap("b"));
    let identity = identify(&shallow).expect("a review");
    assert!(unselected(&identity, &shallow, WebhookKind::Validating, &none).is_some());
    assert_eq!(identify(b"{\"apiVersion\": \"v1\"}"), None);
    assert_eq!(identify(b"not json"), None);
}
