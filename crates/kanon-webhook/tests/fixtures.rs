//! Every AdmissionReview fixture of `fixtures/admission-reviews` through both webhooks, each answer checked the way
//! kube-apiserver checks a webhook's answer; every kind of bad body; the check of kanon's own
//! policy objects on /validate.

use std::collections::BTreeSet;
use std::path::PathBuf;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use kanon_engine::WebhookKind;
use kanon_engine::{NoObjects, PolicySet, compile_document};
use kanon_webhook::admission::{CONTENT_TYPE, REVIEW_API_VERSION, REVIEW_KIND};
use kanon_webhook::{Limits, Outcome, Reply, review};
use serde_json::{Value, json};

mod common;
use common::{LABEL, label_policy, no_privileged_policy};

const FIXTURES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../fixtures/admission-reviews"
);

/// A small policy set: a label on everything, no privileged Pod containers, a warning and an
/// audit annotation for every PVC that names a storage class, and no kanon override policy
/// named `forbidden-*`.
fn policies() -> PolicySet {
    let documents = [
        label_policy(),
        no_privileged_policy(),
        json!({
            "apiVersion": "policy.kanon.dev/v1alpha1",
            "kind": "ClusterValidatePolicy",
            "metadata": {"name": "storage-class-notice"},
            "spec": {
                "validationActions": ["Warn", "Audit"],
                "resourceSelectors": [{"apiVersion": "v1", "kind": "PersistentVolumeClaim"}],
                "validateRules": [{"template": {"type": "condition", "condition": {
                    "cond": "Exist",
                    "dataRef": {"from": "current", "path": "/spec/storageClassName"},
                    "message": "storage class {{ object.spec.storageClassName }} is billed separately",
                }}}],
            },
        }),
        json!({
            "apiVersion": "policy.kanon.dev/v1alpha1",
            "kind": "ClusterValidatePolicy",
            "metadata": {"name": "no-forbidden-policies"},
            "spec": {
                "resourceSelectors": [
                    {"apiVersion": "policy.kanon.dev/v1alpha1", "kind": "ClusterOverridePolicy"},
                ],
                "validateRules": [{"program": concat!(
                    "{%- if object.metadata.name is startingwith(\"forbidden-\") -%}\n",
                    "{\"valid\": false, \"reason\": \"policy names may not start with forbidden-\"}\n",
                    "{%- endif -%}\n",
                )}],
            },
        }),
    ];
    let compiled = documents
        .iter()
        .map(|d| compile_document(d).unwrap_or_else(|e| panic!("{e}")))
        .collect();
    PolicySet::build(compiled).unwrap()
}

fn send(body: &[u8], webhook: WebhookKind) -> Reply {
    kanon_engine::block_on(review(
        body,
        webhook,
        &policies(),
        &NoObjects,
        &Limits::default(),
    ))
}

fn send_json(review: &Value, webhook: WebhookKind) -> Reply {
    send(&serde_json::to_vec(review).unwrap(), webhook)
}

/// What kube-apiserver made of an accepted answer.
#[derive(Debug)]
struct Accepted {
    allowed: bool,
    /// `status.message` of a denial.
    message: Option<String>,
    /// The RFC 6902 operations, when a patch came back.
    patch: Option<Vec<Value>>,
    /// The request's object with the patch applied (the object itself without a patch).
    object: Option<Value>,
    warnings: Vec<String>,
    audit_annotations: Vec<(String, String)>,
}

/// The checks kube-apiserver makes of a webhook's answer to `request` (an AdmissionReview it
/// sent): anything that fails here would count as a failed call and fall to the webhook's
/// failurePolicy.
fn accept(request: &Value, webhook: WebhookKind, reply: &Reply) -> Accepted {
    let text = String::from_utf8_lossy(&reply.body);
    assert_eq!(reply.status, 200, "HTTP status: {text}");
    let answer: Value = serde_json::from_slice(&reply.body)
        .unwrap_or_else(|e| panic!("the body is not JSON ({e}): {text}"));
    assert_eq!(answer["apiVersion"], REVIEW_API_VERSION, "{text}");
    assert_eq!(answer["kind"], REVIEW_KIND, "{text}");
    assert_eq!(answer["apiVersion"], request["apiVersion"], "{text}");
    assert!(answer.get("request").is_none(), "{text}");
    let response = answer["response"]
        .as_object()
        .unwrap_or_else(|| panic!("no response: {text}"));
    let known: BTreeSet<&str> = [
        "uid",
        "allowed",
        "status",
        "patch",
        "patchType",
        "auditAnnotations",
        "warnings",
    ]
    .into();
    for key in response.keys() {
        assert!(known.contains(key.as_str()), "unknown field {key}: {text}");
    }
    assert_eq!(response["uid"], request["request"]["uid"], "uid: {text}");
    assert_eq!(
        reply.uid.as_deref(),
        request["request"]["uid"].as_str(),
        "{text}"
    );
    let allowed = response["allowed"]
        .as_bool()
        .unwrap_or_else(|| panic!("allowed is not a boolean: {text}"));

    // patch and patchType together or not at all; the patch a base64 RFC 6902 array that
    // applies to the object sent.
    let operation = request["request"]["operation"].as_str().unwrap();
    let mut object = request["request"]
        .get("object")
        .filter(|o| !o.is_null())
        .cloned();
    let patch = match (response.get("patchType"), response.get("patch")) {
        (None, None) => None,
        (Some(patch_type), Some(patch)) => {
            assert_eq!(
                webhook,
                WebhookKind::Mutating,
                "a validating webhook patched: {text}"
            );
            assert_eq!(patch_type, "JSONPatch", "{text}");
            assert!(allowed, "a denial carries a patch: {text}");
            assert_ne!(operation, "DELETE", "a DELETE was patched: {text}");
            let encoded = patch
                .as_str()
                .unwrap_or_else(|| panic!("patch is not a string: {text}"));
            let decoded = BASE64
                .decode(encoded)
                .unwrap_or_else(|e| panic!("patch is not base64 ({e}): {text}"));
            let ops: Value = serde_json::from_slice(&decoded)
                .unwrap_or_else(|e| panic!("the patch is not JSON ({e}): {text}"));
            let ops = ops
                .as_array()
                .unwrap_or_else(|| panic!("the patch is not an array: {ops}"))
                .clone();
            assert!(!ops.is_empty(), "an empty patch was sent: {text}");
            for op in &ops {
                let name = op["op"].as_str().unwrap_or_default();
                assert!(
                    ["add", "remove", "replace", "move", "copy", "test"].contains(&name),
                    "not an RFC 6902 operation: {op}"
                );
                assert!(op["path"].is_string(), "no path: {op}");
            }
            let parsed: json_patch::Patch = serde_json::from_value(Value::Array(ops.clone()))
                .unwrap_or_else(|e| panic!("not an RFC 6902 patch ({e}): {text}"));
            let target = object
                .as_mut()
                .unwrap_or_else(|| panic!("a patch without an object: {text}"));
            json_patch::patch(target, &parsed)
                .unwrap_or_else(|e| panic!("the patch does not apply ({e}): {text}"));
            Some(ops)
        }
        _ => panic!("patch and patchType must come together: {text}"),
    };

    // A denial carries status.code >= 400 and a message.
    let message = if allowed {
        None
    } else {
        let status = &response["status"];
        let code = status["code"].as_u64().unwrap_or_default();
        assert!(code >= 400, "a denial with status.code {code}: {text}");
        assert_eq!(code, 403, "{text}");
        let message = status["message"].as_str().unwrap_or_default();
        assert!(!message.is_empty(), "a denial without a message: {text}");
        Some(message.to_string())
    };

    let warnings = match response.get("warnings") {
        None => Vec::new(),
        Some(w) => {
            let w: Vec<String> = serde_json::from_value(w.clone())
                .unwrap_or_else(|e| panic!("warnings are not strings ({e}): {text}"));
            assert!(!w.is_empty(), "empty warnings are sent: {text}");
            w
        }
    };
    let audit_annotations = match response.get("auditAnnotations") {
        None => Vec::new(),
        Some(a) => {
            let a: std::collections::BTreeMap<String, String> = serde_json::from_value(a.clone())
                .unwrap_or_else(|e| panic!("auditAnnotations are not strings ({e}): {text}"));
            assert!(!a.is_empty(), "empty auditAnnotations are sent: {text}");
            a.into_iter().collect()
        }
    };
    match &reply.outcome {
        Outcome::Decided(decision) => assert_eq!(decision.allowed, allowed),
        Outcome::Invalid(e) => panic!("an accepted answer to an invalid review: {e}"),
        Outcome::Unevaluated => panic!("a review answered without evaluation"),
        Outcome::NotReady => panic!("a review answered as not ready"),
    }
    Accepted {
        allowed,
        message,
        patch,
        object,
        warnings,
        audit_annotations,
    }
}

/// What a 400 answer must be: still an AdmissionReview-shaped response, not allowed, with the
/// HTTP status as `status.code`, the uid when it could be read, and a message; and a 413: a
/// `v1` Status with the code, a reason and a message (what kube-apiserver quotes to its
/// client), no uid. Returns the message.
fn rejected(reply: &Reply, http_status: u16, uid: &str) -> String {
    let text = String::from_utf8_lossy(&reply.body);
    assert_eq!(reply.status, http_status, "{text}");
    assert!(matches!(reply.outcome, Outcome::Invalid(_)), "{text}");
    let answer: Value = serde_json::from_slice(&reply.body).unwrap();
    let status = if http_status == 413 {
        assert_eq!(answer["apiVersion"], "v1", "{text}");
        assert_eq!(answer["kind"], "Status", "{text}");
        assert_eq!(answer["status"], "Failure", "{text}");
        assert_eq!(answer["reason"], "RequestEntityTooLarge", "{text}");
        assert!(answer.get("response").is_none(), "{text}");
        &answer
    } else {
        assert_eq!(answer["apiVersion"], REVIEW_API_VERSION, "{text}");
        assert_eq!(answer["kind"], REVIEW_KIND, "{text}");
        let response = &answer["response"];
        assert_eq!(response["uid"], uid, "{text}");
        assert_eq!(response["allowed"], false, "{text}");
        assert!(response.get("patch").is_none(), "{text}");
        assert!(response.get("patchType").is_none(), "{text}");
        &response["status"]
    };
    assert_eq!(status["code"], http_status, "{text}");
    let message = status["message"].as_str().unwrap();
    assert!(!message.is_empty(), "{text}");
    message.to_string()
}

fn fixture_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(FIXTURES)
        .unwrap_or_else(|e| panic!("{FIXTURES}: {e}"))
        .map(|entry| entry.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    assert!(files.len() >= 13, "fixtures missing from {FIXTURES}");
    files
}

fn fixture(name: &str) -> Value {
    let path = format!("{FIXTURES}/{name}");
    serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap()
}

fn label(object: &Option<Value>) -> Option<&str> {
    object
        .as_ref()?
        .pointer("/metadata/labels")?
        .get(LABEL)?
        .as_str()
}

/// The verdict each fixture must get from /mutate and /validate.
#[derive(Debug)]
enum Expect {
    /// CREATE or UPDATE: /mutate adds the label; /validate allows.
    Labelled,
    /// DELETE: both allow, neither patches.
    Deleted,
    /// /mutate adds the label; /validate denies with a message containing the text.
    Denied(&'static str),
    /// /mutate adds the label; /validate allows with this warning and an audit annotation.
    Warned(&'static str),
    /// Not a review kanon can answer: 400 from both, the uid echoed, the message naming the
    /// problem.
    BadRequest(&'static str),
}

fn expectation(name: &str) -> Expect {
    match name {
        "pod-create-privileged.json" => {
            Expect::Denied("ClusterValidatePolicy/no-privileged: container nginx is privileged")
        }
        "pod-delete.json" | "deployment-delete.json" => Expect::Deleted,
        "pvc-create.json" => Expect::Warned(
            "ClusterValidatePolicy/storage-class-notice: storage class fast is billed separately",
        ),
        // Placeholders everywhere: kube-apiserver never sends `operation: operationValue`, and
        // kanon cannot tell what the request does, so it is a bad review (the uid is
        // readable, so it is echoed). The `response` a request carries is ignored.
        "every-field.synthetic.json" => Expect::BadRequest("unknown operation `operationValue`"),
        "pod-create.json"
        | "deployment-update.json"
        | "namespace-create.json"
        | "custom-resource-create.json"
        | "cronjob-create.json"
        | "statefulset-create.json"
        | "daemonset-create.json"
        | "service-create.json" => Expect::Labelled,
        other => panic!("no expectation for the fixture {other}: add one"),
    }
}

#[test]
fn every_fixture_through_both_webhooks() {
    let mut checked = 0;
    for path in fixture_files() {
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        let body = std::fs::read(&path).unwrap();
        let request: Value = serde_json::from_slice(&body).unwrap();
        let mutated = send(&body, WebhookKind::Mutating);
        let validated = send(&body, WebhookKind::Validating);
        let expect = expectation(&name);
        if let Expect::BadRequest(problem) = expect {
            let uid = request["request"]["uid"].as_str().unwrap();
            for reply in [&mutated, &validated] {
                let message = rejected(reply, 400, uid);
                assert!(message.contains(problem), "{name}: {message}");
            }
            checked += 1;
            continue;
        }
        let m = accept(&request, WebhookKind::Mutating, &mutated);
        let v = accept(&request, WebhookKind::Validating, &validated);
        assert!(m.allowed, "{name}: /mutate denied: {:?}", m.message);
        assert!(m.warnings.is_empty(), "{name}: {:?}", m.warnings);
        assert!(v.patch.is_none(), "{name}");
        match expect {
            Expect::Deleted => {
                assert!(m.patch.is_none(), "{name}: {:?}", m.patch);
                assert!(v.allowed, "{name}: {:?}", v.message);
            }
            Expect::Labelled | Expect::Denied(_) | Expect::Warned(_) => {
                assert_eq!(label(&m.object), Some("true"), "{name}: {:?}", m.patch);
                // Only the label changes.
                let ops = m.patch.as_ref().unwrap();
                assert!(
                    ops.iter().all(|op| op["op"] == "add"
                        && op["path"].as_str().unwrap().starts_with("/metadata/labels")),
                    "{name}: {ops:?}"
                );
            }
            Expect::BadRequest(_) => unreachable!(),
        }
        match expect {
            Expect::Denied(reason) => {
                assert!(!v.allowed, "{name}");
                let message = v.message.unwrap();
                assert!(message.contains(reason), "{name}: {message}");
            }
            Expect::Warned(warning) => {
                assert!(v.allowed, "{name}: {:?}", v.message);
                assert_eq!(v.warnings, [warning], "{name}");
                assert_eq!(
                    v.audit_annotations,
                    [(
                        "clustervalidatepolicy.storage-class-notice".to_string(),
                        "storage class fast is billed separately".to_string()
                    )],
                    "{name}"
                );
            }
            _ => {
                assert!(v.allowed, "{name}: {:?}", v.message);
                assert!(v.warnings.is_empty(), "{name}: {:?}", v.warnings);
                assert!(v.audit_annotations.is_empty(), "{name}");
            }
        }
        checked += 1;
    }
    assert!(checked >= 13);
}

#[test]
fn namespace_without_api_version_and_kind_in_its_object() {
    let request = fixture("namespace-create.json");
    assert!(request["request"]["object"].get("kind").is_none());
    let m = accept(
        &request,
        WebhookKind::Mutating,
        &send_json(&request, WebhookKind::Mutating),
    );
    assert_eq!(
        m.patch.unwrap(),
        [json!({"op": "add", "path": "/metadata/labels/example.com~1reviewed", "value": "true"})]
    );
    let v = accept(
        &request,
        WebhookKind::Validating,
        &send_json(&request, WebhookKind::Validating),
    );
    assert!(v.allowed);
}

#[test]
fn an_object_without_labels_gets_them_created() {
    let request = fixture("pvc-create.json");
    assert!(request.pointer("/request/object/metadata/labels").is_none());
    let m = accept(
        &request,
        WebhookKind::Mutating,
        &send_json(&request, WebhookKind::Mutating),
    );
    assert_eq!(
        m.patch.unwrap(),
        [json!({"op": "add", "path": "/metadata/labels", "value": {LABEL: "true"}})]
    );
}

#[test]
fn nothing_to_change_means_no_patch() {
    let mut request = fixture("pod-create.json");
    request["request"]["object"]["metadata"]["labels"][LABEL] = json!("true");
    let reply = send_json(&request, WebhookKind::Mutating);
    let m = accept(&request, WebhookKind::Mutating, &reply);
    assert!(m.allowed);
    assert!(m.patch.is_none());
    let text = String::from_utf8(reply.body).unwrap();
    assert!(!text.contains("patch"), "{text}");
    assert!(!text.contains("status"), "{text}");
    assert!(!text.contains("warnings"), "{text}");
    assert!(!text.contains("auditAnnotations"), "{text}");
}

#[test]
fn the_wire_form_of_a_patch_and_a_denial() {
    let request = fixture("pod-create-privileged.json");
    let reply = send_json(&request, WebhookKind::Mutating);
    let answer: Value = serde_json::from_slice(&reply.body).unwrap();
    // A base64 string, not kube's array of numbers.
    assert!(answer["response"]["patch"].is_string(), "{answer}");
    assert_eq!(answer["response"]["patchType"], "JSONPatch");

    let reply = send_json(&request, WebhookKind::Validating);
    let answer: Value = serde_json::from_slice(&reply.body).unwrap();
    assert_eq!(
        answer,
        json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": {
                "uid": "1299d386-525b-4032-98ae-1949f69f9cfc",
                "allowed": false,
                "status": {
                    "status": "Failure",
                    "message": "ClusterValidatePolicy/no-privileged: container nginx is privileged",
                    "reason": "Forbidden",
                    "code": 403,
                },
            },
        })
    );
    assert_eq!(CONTENT_TYPE, "application/json");
}

#[test]
fn a_cel_denial_carries_its_reason_and_code() {
    // As a ValidatingAdmissionPolicy: `Invalid` (422) unless the validation says otherwise.
    for (reason, code) in [
        (None, 422),
        (Some("Forbidden"), 403),
        (Some("Unauthorized"), 401),
    ] {
        let mut validation = json!({"expression": "!object.spec.containers.exists(c, c.?securityContext.?privileged.orValue(false))",
                                    "message": "no privileged containers"});
        if let Some(reason) = reason {
            validation["reason"] = json!(reason);
        }
        let policy = compile_document(&json!({
            "apiVersion": "policy.kanon.dev/v1alpha1",
            "kind": "ClusterValidatePolicy",
            "metadata": {"name": "cel-privileged"},
            "spec": {
                "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
                "validateRules": [{"cel": {"validations": [validation]}}],
            },
        }))
        .unwrap();
        let set = PolicySet::build(vec![policy]).unwrap();
        let body = serde_json::to_vec(&fixture("pod-create-privileged.json")).unwrap();
        let reply = kanon_engine::block_on(review(
            &body,
            WebhookKind::Validating,
            &set,
            &NoObjects,
            &Limits::default(),
        ));
        let answer: Value = serde_json::from_slice(&reply.body).unwrap();
        let status = &answer["response"]["status"];
        assert_eq!(status["code"], code, "{answer}");
        assert_eq!(status["reason"], reason.unwrap_or("Invalid"), "{answer}");
        assert_eq!(
            status["message"],
            "ClusterValidatePolicy/cel-privileged: no privileged containers"
        );
    }
}

#[test]
fn a_denial_joins_every_reason() {
    // Two privileged containers: the program reports the first; a second policy that fails
    // (failurePolicy Fail) adds its own reason.
    let extra = compile_document(&json!({
        "apiVersion": "policy.kanon.dev/v1alpha1",
        "kind": "ClusterValidatePolicy",
        "metadata": {"name": "always-fails"},
        "spec": {
            "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
            "validateRules": [{"program": "{{ fail(\"no pods today\") }}"}],
        },
    }))
    .unwrap();
    let mut all: Vec<_> = policies().policies().to_vec();
    all.push(extra.into());
    let set = PolicySet::build_shared(all).unwrap();
    let request = fixture("pod-create-privileged.json");
    let body = serde_json::to_vec(&request).unwrap();
    let reply = kanon_engine::block_on(review(
        &body,
        WebhookKind::Validating,
        &set,
        &NoObjects,
        &Limits::default(),
    ));
    let v = accept(&request, WebhookKind::Validating, &reply);
    let message = v.message.unwrap();
    let parts: Vec<&str> = message.split("; ").collect();
    assert_eq!(parts.len(), 2, "{message}");
    assert!(
        parts[0].starts_with("ClusterValidatePolicy/always-fails: "),
        "{message}"
    );
    assert!(parts[0].contains("no pods today"), "{message}");
    assert_eq!(
        parts[1],
        "ClusterValidatePolicy/no-privileged: container nginx is privileged"
    );
}

#[test]
fn a_failing_override_denies_without_a_patch() {
    let failing = compile_document(&json!({
        "apiVersion": "policy.kanon.dev/v1alpha1",
        "kind": "ClusterOverridePolicy",
        "metadata": {"name": "zz-fails"},
        "spec": {
            "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
            "overrideRules": [{"overriders": {"program": "{{ fail(\"broken\") }}"}}],
        },
    }))
    .unwrap();
    let mut all: Vec<_> = policies().policies().to_vec();
    all.push(failing.into());
    let set = PolicySet::build_shared(all).unwrap();
    let request = fixture("pod-create.json");
    let body = serde_json::to_vec(&request).unwrap();
    let reply = kanon_engine::block_on(review(
        &body,
        WebhookKind::Mutating,
        &set,
        &NoObjects,
        &Limits::default(),
    ));
    let m = accept(&request, WebhookKind::Mutating, &reply);
    assert!(!m.allowed);
    assert!(m.patch.is_none(), "{:?}", m.patch);
    assert!(
        m.message
            .as_deref()
            .unwrap()
            .contains("ClusterOverridePolicy/zz-fails"),
        "{:?}",
        m.message
    );
}

// ---- bad bodies ----

const POD_UID: &str = "1299d386-525b-4032-98ae-1949f69f9cfc";

#[test]
fn not_json() {
    for webhook in [WebhookKind::Mutating, WebhookKind::Validating] {
        let message = rejected(&send(b"{\"apiVersion\": ", webhook), 400, "");
        assert!(message.starts_with("the body is not JSON: "), "{message}");
        let message = rejected(&send(b"\xff\xfe", webhook), 400, "");
        assert!(message.starts_with("the body is not JSON: "), "{message}");
    }
}

#[test]
fn empty_body() {
    for body in [&b""[..], b"  \n"] {
        let message = rejected(&send(body, WebhookKind::Validating), 400, "");
        assert!(message.contains("the body is empty"), "{message}");
    }
}

#[test]
fn not_an_object() {
    for body in [&b"[1, 2]"[..], b"\"AdmissionReview\"", b"null"] {
        let message = rejected(&send(body, WebhookKind::Mutating), 400, "");
        assert!(message.contains("not a JSON object"), "{message}");
    }
}

#[test]
fn wrong_api_version() {
    let mut request = fixture("pod-create.json");
    request["apiVersion"] = json!("admission.k8s.io/v1beta1");
    let message = rejected(&send_json(&request, WebhookKind::Mutating), 400, POD_UID);
    assert!(message.contains("admission.k8s.io/v1beta1"), "{message}");
    assert!(
        message.contains("expected apiVersion admission.k8s.io/v1"),
        "{message}"
    );
    request.as_object_mut().unwrap().remove("apiVersion");
    let message = rejected(&send_json(&request, WebhookKind::Validating), 400, POD_UID);
    assert!(message.contains("no apiVersion"), "{message}");
}

#[test]
fn wrong_kind() {
    let mut request = fixture("pod-create.json");
    request["kind"] = json!("AdmissionRequest");
    let message = rejected(&send_json(&request, WebhookKind::Validating), 400, POD_UID);
    assert!(message.contains("kind AdmissionReview"), "{message}");
    assert!(message.contains("AdmissionRequest"), "{message}");
}

#[test]
fn missing_request() {
    let body = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"});
    let message = rejected(&send_json(&body, WebhookKind::Mutating), 400, "");
    assert!(message.contains("`request` is missing"), "{message}");
    let body =
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": []});
    let message = rejected(&send_json(&body, WebhookKind::Mutating), 400, "");
    assert!(message.contains("`request` is missing"), "{message}");
}

#[test]
fn missing_uid() {
    let mut request = fixture("pod-create.json");
    request["request"].as_object_mut().unwrap().remove("uid");
    let message = rejected(&send_json(&request, WebhookKind::Mutating), 400, "");
    assert!(message.contains("`request.uid` is missing"), "{message}");
    request["request"]["uid"] = json!("");
    let message = rejected(&send_json(&request, WebhookKind::Validating), 400, "");
    assert!(message.contains("`request.uid` is missing"), "{message}");
}

#[test]
fn create_without_object() {
    let mut request = fixture("pod-create.json");
    request["request"].as_object_mut().unwrap().remove("object");
    for webhook in [WebhookKind::Mutating, WebhookKind::Validating] {
        let message = rejected(&send_json(&request, webhook), 400, POD_UID);
        assert!(
            message.contains("CREATE request has no `request.object`"),
            "{message}"
        );
    }
    request["request"]["object"] = Value::Null;
    let message = rejected(&send_json(&request, WebhookKind::Mutating), 400, POD_UID);
    assert!(message.contains("`request.object`"), "{message}");
    request["request"]["object"] = json!("a pod");
    let message = rejected(&send_json(&request, WebhookKind::Mutating), 400, POD_UID);
    assert!(message.contains("not a JSON object"), "{message}");
}

#[test]
fn update_without_old_object() {
    let mut request = fixture("deployment-update.json");
    let uid = request["request"]["uid"].as_str().unwrap().to_string();
    request["request"]
        .as_object_mut()
        .unwrap()
        .remove("oldObject");
    let message = rejected(&send_json(&request, WebhookKind::Validating), 400, &uid);
    assert!(message.contains("`request.oldObject`"), "{message}");
}

#[test]
fn missing_or_unknown_operation() {
    let mut request = fixture("pod-create.json");
    request["request"]["operation"] = json!("PATCH");
    let message = rejected(&send_json(&request, WebhookKind::Mutating), 400, POD_UID);
    assert!(message.contains("unknown operation `PATCH`"), "{message}");
    request["request"]
        .as_object_mut()
        .unwrap()
        .remove("operation");
    let message = rejected(&send_json(&request, WebhookKind::Mutating), 400, POD_UID);
    assert!(
        message.contains("`request.operation` is missing"),
        "{message}"
    );
}

#[test]
fn oversize_body() {
    let body = std::fs::read(format!("{FIXTURES}/pod-create.json")).unwrap();
    for webhook in [WebhookKind::Mutating, WebhookKind::Validating] {
        let reply = kanon_engine::block_on(review(
            &body,
            webhook,
            &policies(),
            &NoObjects,
            &Limits::with_max_body(1024),
        ));
        let message = rejected(&reply, 413, "");
        assert_eq!(
            message,
            format!(
                "the body is {} bytes, over the limit of 1024 bytes",
                body.len()
            )
        );
        // At the limit exactly, the body is read.
        let reply = kanon_engine::block_on(review(
            &body,
            webhook,
            &policies(),
            &NoObjects,
            &Limits::with_max_body(body.len()),
        ));
        assert_eq!(reply.status, 200);
    }
    let message = rejected(&Reply::too_large(1024), 413, "");
    assert_eq!(message, "the body is over the limit of 1024 bytes");
}

// ---- kanon's own policy objects on /validate ----

/// A review of `operation` on a ClusterOverridePolicy (or another policy kind).
fn policy_review(operation: &str, object: Value, old_object: Option<Value>) -> Value {
    let kind = object["kind"]
        .as_str()
        .unwrap_or("ClusterOverridePolicy")
        .to_string();
    let resource = format!("{}s", kind.to_ascii_lowercase()).replace("policys", "policies");
    let mut request = json!({
        "uid": "5d3c0a8e-0000-4000-8000-000000000001",
        "kind": {"group": "policy.kanon.dev", "version": "v1alpha1", "kind": kind},
        "resource": {"group": "policy.kanon.dev", "version": "v1alpha1", "resource": resource},
        "requestKind": {"group": "policy.kanon.dev", "version": "v1alpha1", "kind": kind},
        "requestResource": {"group": "policy.kanon.dev", "version": "v1alpha1", "resource": resource},
        "name": object.pointer("/metadata/name").cloned().unwrap_or(json!("")),
        "operation": operation,
        "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
        "dryRun": false,
    });
    if let Some(ns) = object.pointer("/metadata/namespace") {
        request["namespace"] = ns.clone();
    }
    if operation == "DELETE" {
        request["object"] = Value::Null;
        request["oldObject"] = object;
    } else {
        request["object"] = object;
        if let Some(old) = old_object {
            request["oldObject"] = old;
        }
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
}

/// `examples/failures/cop-invalid.yaml`, as the apiserver sends it (server-set metadata).
fn bad_policy() -> Value {
    json!({
        "apiVersion": "policy.kanon.dev/v1alpha1",
        "kind": "ClusterOverridePolicy",
        "metadata": {
            "name": "invalid",
            "uid": "0b7e5a52-1111-4222-8333-444455556666",
            "generation": 1,
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"kanon.dev/ignore": "true"},
            "managedFields": [{
                "manager": "kubectl-client-side-apply",
                "operation": "Update",
                "apiVersion": "policy.kanon.dev/v1alpha1",
                "time": "2026-01-01T00:00:00Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:spec": {}},
            }],
        },
        "spec": {
            "resourceSelectors": [{
                "apiVersion": "v1",
                "kind": "Pod",
                "fieldSelector": {"matchExpressions": [
                    {"field": "metadata.labels.app", "operator": "In", "values": ["web"]},
                ]},
            }],
            "overrideRules": [{
                "targetOperations": ["CREATE"],
                "overriders": {"plaintext": [
                    {"op": "add", "path": "metadata.labels.team", "value": "storefront"},
                    {"op": "replace", "path": "/metadata/labels/tier"},
                ]},
            }],
        },
    })
}

/// `examples/policies/cop-web-labels.yaml`, with server-set metadata and a status.
fn good_policy(name: &str) -> Value {
    json!({
        "apiVersion": "policy.kanon.dev/v1alpha1",
        "kind": "ClusterOverridePolicy",
        "metadata": {
            "name": name,
            "uid": "0b7e5a52-1111-4222-8333-777788889999",
            "generation": 2,
            "resourceVersion": "4242",
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": {
            "resourceSelectors": [
                {"apiVersion": "v1", "kind": "Pod", "labelSelector": {"matchLabels": {"app": "web"}}},
            ],
            "overrideRules": [{
                "targetOperations": ["CREATE", "UPDATE"],
                "overriders": {"plaintext": [
                    {"op": "add", "path": "/metadata/labels/team", "value": "storefront"},
                    {"op": "add", "path": "/metadata/labels/app.kubernetes.io~1part-of", "value": "storefront"},
                ]},
            }],
        },
        "status": {"observedGeneration": 1, "conditions": [{
            "type": "Ready", "status": "True", "reason": "Compiled", "message": "",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }]},
    })
}

const EXPECTED_ERRORS: [&str; 3] = [
    "spec.resourceSelectors[0].fieldSelector.matchExpressions[0].field: `metadata.labels.app` is not a JSON pointer",
    "spec.overrideRules[0].overriders.plaintext[0].path: `metadata.labels.team` is not a JSON pointer",
    "spec.overrideRules[0].overriders.plaintext[1].value: is required for `replace`",
];

#[test]
fn a_bad_policy_is_denied_with_every_error_by_field() {
    let policy = bad_policy();
    let engine_errors = compile_document(&policy).unwrap_err().errors;
    for (operation, old) in [("CREATE", None), ("UPDATE", Some(good_policy("invalid")))] {
        let request = policy_review(operation, policy.clone(), old);
        let v = accept(
            &request,
            WebhookKind::Validating,
            &send_json(&request, WebhookKind::Validating),
        );
        assert!(!v.allowed, "{operation}");
        let message = v.message.unwrap();
        assert!(
            message.starts_with("ClusterOverridePolicy/invalid is invalid: "),
            "{message}"
        );
        for expected in EXPECTED_ERRORS {
            assert!(message.contains(expected), "{expected} not in {message}");
        }
        // Every error the engine finds, each as `field: message`.
        assert_eq!(
            engine_errors.len(),
            EXPECTED_ERRORS.len(),
            "{engine_errors:?}"
        );
        for e in &engine_errors {
            assert!(
                message.contains(&format!("{}: {}", e.field, e.message)),
                "{message}"
            );
        }
    }
}

#[test]
fn a_bad_policy_exception_is_denied_with_every_error_by_field() {
    let exception = json!({
        "apiVersion": "policy.kanon.dev/v1alpha1", "kind": "PolicyException",
        "metadata": {"name": "legacy", "namespace": "exceptions"},
        "spec": {
            "policies": [{"kind": "ClusterValidatePolicy", "name": "p", "namespace": "x"}],
            "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
            "expiresAt": "soon",
            "reason": "legacy",
        },
    });
    let request = policy_review("CREATE", exception.clone(), None);
    let v = accept(
        &request,
        WebhookKind::Validating,
        &send_json(&request, WebhookKind::Validating),
    );
    assert!(!v.allowed);
    let message = v.message.unwrap_or_default();
    assert!(
        message.starts_with("PolicyException/exceptions/legacy is invalid: "),
        "{message}"
    );
    assert!(
        message.contains("spec.policies[0].namespace: a ClusterValidatePolicy has no namespace"),
        "{message}"
    );
    assert!(
        message.contains("spec.expiresAt: must be an RFC 3339 time"),
        "{message}"
    );
    // Fixed, it is admitted.
    let mut fixed = exception;
    fixed["spec"]["policies"][0]
        .as_object_mut()
        .map(|p| p.remove("namespace"));
    fixed["spec"]["expiresAt"] = json!("2027-01-01T00:00:00Z");
    let request = policy_review("CREATE", fixed, None);
    let v = accept(
        &request,
        WebhookKind::Validating,
        &send_json(&request, WebhookKind::Validating),
    );
    assert!(v.allowed, "{:?}", v.message);
}

#[test]
fn an_exception_written_where_kanon_does_not_honour_it_is_warned_about() {
    let exception = |namespace: &str| {
        json!({
            "apiVersion": "policy.kanon.dev/v1alpha1", "kind": "PolicyException",
            "metadata": {"name": "mine", "namespace": namespace},
            "spec": {
                "policies": [{"kind": "ClusterValidatePolicy", "name": "storage-class-notice"}],
                "resourceSelectors": [{"apiVersion": "v1", "kind": "PersistentVolumeClaim"}],
                "reason": "r",
            },
        })
    };
    let (set, _) = policies().honouring(&["policy-exceptions".to_string()]);
    let send = |object: Value| {
        let request = policy_review("CREATE", object, None);
        let reply = kanon_engine::block_on(review(
            &serde_json::to_vec(&request).unwrap(),
            WebhookKind::Validating,
            &set,
            &NoObjects,
            &Limits::default(),
        ));
        accept(&request, WebhookKind::Validating, &reply)
    };
    let elsewhere = send(exception("shop"));
    assert!(elsewhere.allowed);
    assert_eq!(
        elsewhere.warnings,
        [
            "PolicyException/shop/mine: not honoured: kanon honours exceptions only in policy-exceptions; it exempts nothing here"
        ]
    );
    let honoured = send(exception("policy-exceptions"));
    assert!(
        honoured.allowed && honoured.warnings.is_empty(),
        "{honoured:?}"
    );
    // What its status would say is said too: a policy that does not exist.
    let mut typo = exception("policy-exceptions");
    typo["spec"]["policies"][0]["name"] = json!("storage-class-notise");
    assert_eq!(
        send(typo).warnings,
        [
            "PolicyException/policy-exceptions/mine: ClusterValidatePolicy/storage-class-notise does not exist; did you mean ClusterValidatePolicy/storage-class-notice?"
        ]
    );
}

#[test]
fn a_policy_with_a_likely_mistake_is_admitted_with_a_warning_kubectl_shows() {
    let mut policy = good_policy("typo");
    policy["spec"]["overrideRules"][0]["overriders"]["plaintext"][0]["path"] =
        json!("/metadata/label/team");
    let request = policy_review("CREATE", policy, None);
    let v = accept(
        &request,
        WebhookKind::Validating,
        &send_json(&request, WebhookKind::Validating),
    );
    assert!(v.allowed, "{:?}", v.message);
    assert_eq!(
        v.warnings,
        [
            "ClusterOverridePolicy/typo: spec.overrideRules[0].overriders.plaintext[0].path: `/metadata/label/team` does not exist in v1 Pod; did you mean `/metadata/labels/team`?"
        ]
    );
    // A policy without one gets no warning.
    let request = policy_review("CREATE", good_policy("fine"), None);
    let v = accept(
        &request,
        WebhookKind::Validating,
        &send_json(&request, WebhookKind::Validating),
    );
    assert!(v.allowed && v.warnings.is_empty(), "{v:?}");
}

#[test]
fn a_bad_policy_is_only_checked_on_validate_create_and_update() {
    // /mutate does not check policies (it labels them, like everything else).
    let request = policy_review("CREATE", bad_policy(), None);
    let m = accept(
        &request,
        WebhookKind::Mutating,
        &send_json(&request, WebhookKind::Mutating),
    );
    assert!(m.allowed, "{:?}", m.message);
    // Deleting a bad policy is fine.
    let request = policy_review("DELETE", bad_policy(), None);
    let v = accept(
        &request,
        WebhookKind::Validating,
        &send_json(&request, WebhookKind::Validating),
    );
    assert!(v.allowed, "{:?}", v.message);
}

#[test]
fn status_writes_and_finalizer_removal_of_a_bad_policy_get_through() {
    // kanon reports Ready=False on a bad policy that got in while it was down.
    let mut request = policy_review("UPDATE", bad_policy(), Some(bad_policy()));
    request["request"]["subResource"] = json!("status");
    let v = accept(
        &request,
        WebhookKind::Validating,
        &send_json(&request, WebhookKind::Validating),
    );
    assert!(v.allowed, "{:?}", v.message);
    // Removing the last finalizer of a bad policy being deleted.
    let mut old = bad_policy();
    old["metadata"]["deletionTimestamp"] = json!("2026-01-02T00:00:00Z");
    old["metadata"]["finalizers"] = json!(["example.com/cleanup"]);
    let mut new = old.clone();
    new["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("finalizers");
    let request = policy_review("UPDATE", new, Some(old));
    let v = accept(
        &request,
        WebhookKind::Validating,
        &send_json(&request, WebhookKind::Validating),
    );
    assert!(v.allowed, "{:?}", v.message);
    // Any other update of it is checked.
    let request = policy_review("UPDATE", bad_policy(), Some(bad_policy()));
    let v = accept(
        &request,
        WebhookKind::Validating,
        &send_json(&request, WebhookKind::Validating),
    );
    assert!(!v.allowed);
}

#[test]
fn a_good_policy_is_allowed() {
    for (operation, old) in [
        ("CREATE", None),
        ("UPDATE", Some(good_policy("web-labels"))),
    ] {
        let request = policy_review(operation, good_policy("web-labels"), old);
        let v = accept(
            &request,
            WebhookKind::Validating,
            &send_json(&request, WebhookKind::Validating),
        );
        assert!(v.allowed, "{operation}: {:?}", v.message);
    }
}

#[test]
fn a_good_policy_is_still_judged_by_the_validate_policies() {
    let request = policy_review("CREATE", good_policy("forbidden-labels"), None);
    let v = accept(
        &request,
        WebhookKind::Validating,
        &send_json(&request, WebhookKind::Validating),
    );
    assert!(!v.allowed);
    assert_eq!(
        v.message.unwrap(),
        "ClusterValidatePolicy/no-forbidden-policies: policy names may not start with forbidden-"
    );
    // A bad one gets both: its own errors first, then the validate policies' reasons.
    let mut policy = bad_policy();
    policy["metadata"]["name"] = json!("forbidden-invalid");
    let request = policy_review("CREATE", policy, None);
    let v = accept(
        &request,
        WebhookKind::Validating,
        &send_json(&request, WebhookKind::Validating),
    );
    let message = v.message.unwrap();
    assert!(
        message.starts_with("ClusterOverridePolicy/forbidden-invalid is invalid: "),
        "{message}"
    );
    assert!(
        message.ends_with(
            "; ClusterValidatePolicy/no-forbidden-policies: policy names may not start with forbidden-"
        ),
        "{message}"
    );
}

#[test]
fn a_policy_object_without_api_version_and_kind_is_still_checked() {
    let mut policy = bad_policy();
    let object = policy.as_object_mut().unwrap();
    object.remove("apiVersion");
    object.remove("kind");
    let request = policy_review("CREATE", policy, None);
    let v = accept(
        &request,
        WebhookKind::Validating,
        &send_json(&request, WebhookKind::Validating),
    );
    assert!(!v.allowed);
    for expected in EXPECTED_ERRORS {
        assert!(v.message.as_deref().unwrap().contains(expected));
    }
}

#[test]
fn namespaced_policies_are_checked_in_their_namespace() {
    let policy = |selector_namespace: &str| {
        json!({
            "apiVersion": "policy.kanon.dev/v1alpha1",
            "kind": "OverridePolicy",
            "metadata": {"name": "shop-env", "namespace": "shop"},
            "spec": {
                "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod", "namespace": selector_namespace}],
                "overrideRules": [{"overriders": {"plaintext": [
                    {"op": "add", "path": "/metadata/annotations", "value": {"env": "shop"}},
                ]}}],
            },
        })
    };
    let request = policy_review("CREATE", policy("shop"), None);
    let v = accept(
        &request,
        WebhookKind::Validating,
        &send_json(&request, WebhookKind::Validating),
    );
    assert!(v.allowed, "{:?}", v.message);

    // The object may leave its namespace to the request.
    let mut request = policy_review("CREATE", policy("shop"), None);
    request["request"]["object"]["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("namespace");
    let v = accept(
        &request,
        WebhookKind::Validating,
        &send_json(&request, WebhookKind::Validating),
    );
    assert!(v.allowed, "{:?}", v.message);

    let request = policy_review("CREATE", policy("payments"), None);
    let v = accept(
        &request,
        WebhookKind::Validating,
        &send_json(&request, WebhookKind::Validating),
    );
    assert!(!v.allowed);
    let message = v.message.unwrap();
    assert!(
        message.starts_with(
            "OverridePolicy/shop/shop-env is invalid: spec.resourceSelectors[0].namespace: "
        ),
        "{message}"
    );
}

#[test]
fn webhook_paths() {
    for webhook in [WebhookKind::Mutating, WebhookKind::Validating] {
        assert_eq!(WebhookKind::from_path(webhook.path()), Some(webhook));
    }
    assert_eq!(WebhookKind::from_path("/healthz"), None);
}

#[test]
fn allow_all_answers_without_evaluating() {
    let body = serde_json::to_vec(&fixture("pod-create-privileged.json")).unwrap();
    let reply = kanon_webhook::admission::allow_all(&body);
    assert_eq!(reply.status, 200);
    let answer: serde_json::Value = serde_json::from_slice(&reply.body).unwrap();
    assert_eq!(answer["response"]["allowed"], true);
    assert!(
        answer["response"]["uid"]
            .as_str()
            .is_some_and(|u| !u.is_empty())
    );
    assert_eq!(kanon_webhook::admission::allow_all(b"{}").status, 400);
}
