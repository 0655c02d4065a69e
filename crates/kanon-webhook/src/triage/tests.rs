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

/// The reviews of the repository's fixtures, by name.
fn fixtures() -> Vec<(String, Vec<u8>)> {
    let dir = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fixtures/admission-reviews"
    );
    let mut found: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .expect("the fixtures")
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|e| e == "json"))
        .map(|path| {
            let name = path.display().to_string();
            (name, std::fs::read(&path).expect("a fixture"))
        })
        .collect();
    found.sort();
    found
}

#[test]
fn a_glance_identifies_a_review_as_reading_it_whole_does() {
    let mut glanced = 0;
    for (name, body) in fixtures() {
        let whole = identify(&body);
        match glance(&body) {
            Some(identity) => {
                assert_eq!(Some(identity), whole, "{name}");
                glanced += 1;
            }
            // Only where the object has no namespace of its own (cluster-scoped, or a
            // review whose object is not there) does a glance not do.
            None => {
                let review: serde_json::Value = serde_json::from_slice(&body).expect("JSON");
                let request = &review["request"];
                let subject = match request["operation"].as_str() {
                    Some("DELETE") => &request["oldObject"],
                    _ => &request["object"],
                };
                assert!(
                    subject.pointer("/metadata/namespace").is_none(),
                    "{name}: not identified at a glance"
                );
            }
        }
    }
    assert!(glanced >= 8, "{glanced}");
    // The request's fields in any order; a DELETE's old object.
    let reordered = serde_json::to_vec(&json!({
        "request": {
            "object": {"metadata": {"namespace": "team-a", "name": "c"}, "kind": "ConfigMap", "apiVersion": "v1"},
            "operation": "CREATE", "uid": "u-3", "namespace": "team-a",
        },
        "kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1",
    }))
    .expect("JSON");
    assert_eq!(glance(&reordered), identify(&reordered));
    assert!(glance(&reordered).is_some());
    let delete = body(json!({
        "uid": "u-4", "operation": "DELETE", "namespace": "team-a", "object": null,
        "oldObject": {"apiVersion": "v1", "kind": "Secret", "metadata": {"namespace": "team-a"}},
        "options": {"kind": "DeleteOptions"},
    }));
    assert_eq!(glance(&delete), identify(&delete));
    assert_eq!(glance(&delete).map(|i| i.kind), Some("Secret".to_string()));
    // What the whole reading refuses, a glance refuses too when it can tell.
    for refused in [
        body(json!({"uid": "", "operation": "CREATE", "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {"namespace": "a"}}})),
        body(json!({"uid": "u", "operation": "MOVE", "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {"namespace": "a"}}})),
        body(json!({"uid": "u", "operation": "CREATE", "object": null})),
        br#"{"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {"uid": "u", "operation": "CREATE", "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {"namespace": "a"}}}}"#.to_vec(),
        br#"{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "u", "operation": "CREATE", "object": {"apiVersion": "v\u0031", "kind": "Pod", "metadata": {"namespace": "a"}}}}"#.to_vec(),
    ] {
        assert_eq!(glance(&refused), None, "{}", String::from_utf8_lossy(&refused));
    }
}

#[test]
fn a_glance_stops_at_the_identity_and_only_a_whole_reading_answers() {
    // A body whose object's spec is not JSON: a glance has the identity before it, reading
    // the whole body finds it out.
    let (_, pod) = fixtures()
        .into_iter()
        .find(|(name, _)| name.ends_with("/pod-create.json"))
        .expect("the Pod fixture");
    let text = String::from_utf8(pod).expect("UTF-8");
    // Past the object's namespace (in its metadata, before its managed fields) nothing is
    // read.
    let at = text.find("\"managedFields\"").expect("managed fields");
    let early = format!("{}\"managedFields\": {{{{ not JSON", &text[..at]).into_bytes();
    assert_eq!(glance(&early).map(|i| i.kind), Some("Pod".to_string()));
    assert_eq!(identify(&early), None);
    let at = text.find("\"spec\"").expect("a spec");
    let broken = format!("{}\"spec\": {{{{ not JSON", &text[..at]).into_bytes();
    let identity = glance(&broken).expect("identified at a glance");
    assert_eq!(
        (identity.kind.as_str(), identity.flow()),
        ("Pod", "default")
    );
    assert_eq!(identify(&broken), None);
    // Triage answers without evaluation only a review it read whole: with no policy, the
    // broken body goes to the full reading (which refuses it), the whole one is answered.
    let none = PolicySet::default();
    assert!(matches!(
        triage(&broken, WebhookKind::Validating, &none),
        Triage::Evaluate(None)
    ));
    assert!(matches!(
        triage(text.as_bytes(), WebhookKind::Validating, &none),
        Triage::Answered(_)
    ));
}
