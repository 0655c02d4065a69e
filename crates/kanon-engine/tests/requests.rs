//! Requests: every AdmissionReview fixture in `fixtures/admission-reviews`, malformed
//! reviews, and requests built from objects.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use common::*;
use kanon_api::Operation;
use kanon_engine::{NoObjects, Request, RequestError, parse_operation};
use serde_json::{Value, json};

const FIXTURES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../fixtures/admission-reviews"
);

fn fixture_dir() -> PathBuf {
    let dir = Path::new(FIXTURES);
    assert!(
        dir.is_dir(),
        "fixtures not found at {} (the repository's fixtures/ folder)",
        dir.display()
    );
    dir.to_path_buf()
}

fn read_fixture(name: &str) -> Value {
    let path = fixture_dir().join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// What a fixture must give.
struct Expect {
    file: &'static str,
    uid: &'static str,
    operation: Operation,
    api_version: &'static str,
    kind: &'static str,
    namespace: Option<&'static str>,
    name: &'static str,
    has_object: bool,
    has_old_object: bool,
    dry_run: bool,
}

const fn e(
    file: &'static str,
    uid: &'static str,
    operation: Operation,
    api_version: &'static str,
    kind: &'static str,
    namespace: Option<&'static str>,
    name: &'static str,
) -> Expect {
    let (has_object, has_old_object) = match operation {
        Operation::Delete => (false, true),
        Operation::Update => (true, true),
        _ => (true, false),
    };
    Expect {
        file,
        uid,
        operation,
        api_version,
        kind,
        namespace,
        name,
        has_object,
        has_old_object,
        dry_run: false,
    }
}

const POD_UID: &str = "1299d386-525b-4032-98ae-1949f69f9cfc";

fn expectations() -> Vec<Expect> {
    use Operation::*;
    vec![
        e(
            "cronjob-create.json",
            "682d570d-ca11-4752-87e8-26617d394119",
            Create,
            "batch/v1",
            "CronJob",
            Some("default"),
            "hello",
        ),
        e(
            "custom-resource-create.json",
            "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee",
            Create,
            "policies.kubewarden.io/v1",
            "AdmissionPolicy",
            Some("team-a"),
            // request.name is absent; the object's name is used.
            "my-policy",
        ),
        e(
            "daemonset-create.json",
            "18621aa5-c868-4040-9705-d0abb60757f0",
            Create,
            "apps/v1",
            "DaemonSet",
            Some("default"),
            "fluentd-elasticsearch",
        ),
        e(
            "deployment-delete.json",
            "4477bb16-cc59-496f-91ec-91dcbe6658a3",
            Delete,
            "apps/v1",
            "Deployment",
            Some("default"),
            "nginx",
        ),
        e(
            "deployment-update.json",
            "ab41adeb-eca2-4add-9336-c263895d3953",
            Update,
            "apps/v1",
            "Deployment",
            Some("default"),
            "nginx",
        ),
        // The object has no apiVersion/kind: they come from request.kind. Cluster-scoped. The
        // object's own name (`test`) wins over request.name (`one`), as documented.
        e(
            "namespace-create.json",
            POD_UID,
            Create,
            "v1",
            "Namespace",
            None,
            "test",
        ),
        e(
            "pod-create-privileged.json",
            POD_UID,
            Create,
            "v1",
            "Pod",
            Some("default"),
            "nginx",
        ),
        e(
            "pod-create.json",
            POD_UID,
            Create,
            "v1",
            "Pod",
            Some("default"),
            "nginx",
        ),
        e(
            "pod-delete.json",
            "6230ff1b-7dd7-42af-88d2-fbf9aecde94b",
            Delete,
            "v1",
            "Pod",
            Some("default"),
            "nginx",
        ),
        e(
            "pvc-create.json",
            "4bc4ec12-b2c9-42db-a1b2-321f8c2fc8e1",
            Create,
            "v1",
            "PersistentVolumeClaim",
            Some("default"),
            "example-pv-claim",
        ),
        e(
            "service-create.json",
            POD_UID,
            Create,
            "v1",
            "Service",
            Some("default"),
            "nginx",
        ),
        e(
            "statefulset-create.json",
            "da5d4560-d427-45b0-aa29-6eeb9bcd2ec4",
            Create,
            "apps/v1",
            "StatefulSet",
            Some("default"),
            "foo",
        ),
    ]
}

/// Fixtures that are not valid requests, and what the error must say.
const INVALID_FIXTURES: &[(&str, &str)] = &[
    // The synthetic review fills every field with placeholders, `operation` included.
    (
        "every-field.synthetic.json",
        "request.operation: unknown operation `operationValue`",
    ),
];

#[test]
fn every_fixture_is_covered() {
    let on_disk: BTreeSet<String> = std::fs::read_dir(fixture_dir())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".json"))
        .collect();
    let covered: BTreeSet<String> = expectations()
        .iter()
        .map(|e| e.file.to_string())
        .chain(INVALID_FIXTURES.iter().map(|(f, _)| f.to_string()))
        .collect();
    assert_eq!(on_disk, covered, "every fixture needs a row in this test");
}

#[test]
fn fixtures_give_operation_kind_namespace_and_name() {
    for x in expectations() {
        let review = read_fixture(x.file);
        let req = Request::from_admission_review(&review)
            .unwrap_or_else(|err| panic!("{}: {err}", x.file));
        let f = x.file;
        assert_eq!(req.uid, x.uid, "{f}");
        assert_eq!(req.operation, x.operation, "{f}");
        assert_eq!(req.api_version, x.api_version, "{f}");
        assert_eq!(req.kind, x.kind, "{f}");
        assert_eq!(req.namespace.as_deref(), x.namespace, "{f}");
        assert_eq!(req.name, x.name, "{f}");
        assert_eq!(req.object.is_some(), x.has_object, "{f}: object");
        assert_eq!(req.old_object.is_some(), x.has_old_object, "{f}: oldObject");
        assert_eq!(req.dry_run, x.dry_run, "{f}");
        // The object under test is the old object on DELETE, else the object, verbatim.
        let subject_key = if x.operation == Operation::Delete {
            "oldObject"
        } else {
            "object"
        };
        assert_eq!(
            req.subject(),
            review["request"].get(subject_key),
            "{f}: subject"
        );
        let view = req.view(req.subject().unwrap());
        assert_eq!(
            (view.api_version, view.kind, view.namespace, view.name),
            (x.api_version, x.kind, x.namespace, x.name),
            "{f}"
        );
    }
}

#[test]
fn invalid_fixtures_are_review_errors() {
    for (file, needle) in INVALID_FIXTURES {
        let err = Request::from_admission_review(&read_fixture(file)).unwrap_err();
        assert!(matches!(err, RequestError::Review(_)), "{file}: {err:?}");
        assert!(
            err.to_string().starts_with("invalid AdmissionReview: "),
            "{err}"
        );
        assert!(err.to_string().contains(needle), "{file}: {err}");
    }
}

#[test]
fn synthetic_fixture_with_a_real_operation() {
    // With a real operation, the synthetic review's placeholders flow through: type from the
    // object, namespace and name from the request (the object has no metadata), dryRun set.
    for (operation, op) in [
        ("CONNECT", Operation::Connect),
        ("UPDATE", Operation::Update),
        ("CREATE", Operation::Create),
    ] {
        let mut review = read_fixture("every-field.synthetic.json");
        review["request"]["operation"] = json!(operation);
        let req = Request::from_admission_review(&review).unwrap();
        assert_eq!(req.uid, "uidValue");
        assert_eq!(req.operation, op);
        assert_eq!(req.api_version, "example.com/v1");
        assert_eq!(req.kind, "CustomType");
        assert_eq!(req.namespace.as_deref(), Some("namespaceValue"));
        assert_eq!(req.name, "nameValue");
        assert!(req.dry_run);
    }
    let mut review = read_fixture("every-field.synthetic.json");
    review["request"]["operation"] = json!("DELETE");
    let req = Request::from_admission_review(&review).unwrap();
    assert!(req.object.is_none(), "DELETE carries no object");
    assert_eq!(req.subject(), review["request"].get("oldObject"));
}

#[test]
fn fixtures_through_the_engine() {
    // A policy with no selectors marks every object; a namespaced one only its namespace's.
    let set = set_of(&[
        cop("mark", json!({"overrideRules": [hit_rule("mark")]})),
        op(
            "default",
            "ns-mark",
            json!({"overrideRules": [hit_rule("ns")]}),
        ),
    ]);
    for x in expectations() {
        let review = read_fixture(x.file);
        let req = Request::from_admission_review(&review).unwrap();
        let d = kanon_engine::block_on(set.review(&req, &NoObjects));
        assert!(d.allowed, "{}: {d:?}", x.file);
        if x.operation == Operation::Delete {
            assert!(d.patch.0.is_empty(), "{}: DELETE gets no patch", x.file);
            assert!(d.applied_policies.is_empty(), "{}", x.file);
            continue;
        }
        let mut expected = vec!["ClusterOverridePolicy/mark".to_string()];
        if x.namespace == Some("default") {
            expected.push("OverridePolicy/default/ns-mark".into());
        }
        assert_eq!(d.applied_policies, expected, "{}", x.file);
        let patch = serde_json::to_value(&d.patch).unwrap();
        let paths: Vec<&str> = patch
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["path"].as_str().unwrap())
            .collect();
        let mut want_paths = vec!["/hit-mark"];
        if x.namespace == Some("default") {
            want_paths.push("/hit-ns");
        }
        assert_eq!(paths, want_paths, "{}", x.file);
        let original = req.object.as_ref().unwrap();
        assert_patch_is_diff(original, &d);
    }
}

#[test]
fn namespace_fixture_is_judged_by_its_own_labels() {
    let review = read_fixture("namespace-create.json");
    let req = Request::from_admission_review(&review).unwrap();
    let selector = |value: &str| {
        cop(
            value,
            json!({
                "resourceSelectors": [{"apiVersion": "v1", "kind": "Namespace"}],
                "namespaceSelector": {"matchLabels": {"pod-security.kubernetes.io/enforce": value}},
                "overrideRules": [hit_rule(value)],
            }),
        )
    };
    let set = set_of(&[selector("baseline"), selector("restricted")]);
    let d = kanon_engine::block_on(set.mutate(&req, &NoObjects));
    assert!(d.allowed, "{d:?}");
    assert_eq!(d.applied_policies, ["ClusterOverridePolicy/baseline"]);
}

// ---------------------------------------------------------------------------------------------
// Malformed reviews
// ---------------------------------------------------------------------------------------------

fn valid_review() -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u-1",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "default",
            "operation": "CREATE",
            "object": pod("default", "web", json!({})),
        },
    })
}

fn with(mut review: Value, pointer: &str, value: Option<Value>) -> Value {
    let (parent, key) = pointer.rsplit_once('/').unwrap();
    let parent = review.pointer_mut(parent).unwrap().as_object_mut().unwrap();
    match value {
        Some(v) => {
            parent.insert(key.to_string(), v);
        }
        None => {
            parent.remove(key);
        }
    }
    review
}

#[test]
fn malformed_reviews_are_review_errors_with_a_clear_message() {
    assert!(Request::from_admission_review(&valid_review()).is_ok());
    let rows: Vec<(Value, &str)> = vec![
        (json!([]), "the body is not a JSON object"),
        (json!("text"), "the body is not a JSON object"),
        (
            with(
                valid_review(),
                "/apiVersion",
                Some(json!("admission.k8s.io/v1beta1")),
            ),
            "expected apiVersion admission.k8s.io/v1 and kind AdmissionReview, found admission.k8s.io/v1beta1 and AdmissionReview",
        ),
        (
            with(valid_review(), "/apiVersion", None),
            "found no apiVersion and AdmissionReview",
        ),
        (
            with(valid_review(), "/kind", Some(json!("AdmissionRequest"))),
            "found admission.k8s.io/v1 and AdmissionRequest",
        ),
        (
            with(valid_review(), "/kind", None),
            "found admission.k8s.io/v1 and no kind",
        ),
        (
            with(valid_review(), "/request", None),
            "`request` is missing",
        ),
        (
            with(valid_review(), "/request", Some(Value::Null)),
            "`request` is missing",
        ),
        (
            with(valid_review(), "/request", Some(json!("x"))),
            "`request` is missing",
        ),
        (
            with(valid_review(), "/request/uid", None),
            "`request.uid` is missing",
        ),
        (
            with(valid_review(), "/request/uid", Some(json!(""))),
            "`request.uid` is missing",
        ),
        (
            with(valid_review(), "/request/uid", Some(json!(7))),
            "`request.uid` is missing",
        ),
        (
            with(valid_review(), "/request/operation", None),
            "`request.operation` is missing",
        ),
        (
            with(valid_review(), "/request/operation", Some(json!("PATCH"))),
            "request.operation: unknown operation `PATCH`",
        ),
        (
            with(valid_review(), "/request/operation", Some(json!("*"))),
            "request.operation: unknown operation `*`",
        ),
        (
            with(valid_review(), "/request/object", None),
            "CREATE request has no `request.object`",
        ),
        (
            with(valid_review(), "/request/object", Some(Value::Null)),
            "CREATE request has no `request.object`",
        ),
        (
            with(valid_review(), "/request/object", Some(json!("pod"))),
            "the object is not a JSON object",
        ),
        (
            with(
                with(valid_review(), "/request/operation", Some(json!("UPDATE"))),
                "/request/object",
                None,
            ),
            "UPDATE request has no `request.object`",
        ),
        (
            with(valid_review(), "/request/operation", Some(json!("UPDATE"))),
            "UPDATE request has no `request.oldObject`",
        ),
        (
            with(
                with(
                    with(valid_review(), "/request/operation", Some(json!("DELETE"))),
                    "/request/object",
                    None,
                ),
                "/request/kind",
                None,
            ),
            "neither the object nor `request.kind` gives an apiVersion",
        ),
        (
            with(
                with(
                    valid_review(),
                    "/request/object",
                    Some(json!({"metadata": {"name": "x"}})),
                ),
                "/request/kind",
                Some(json!({"group": "", "version": "v1"})),
            ),
            "neither the object nor `request.kind` gives a kind",
        ),
    ];
    for (review, needle) in rows {
        let err = Request::from_admission_review(&review).expect_err(needle);
        assert!(matches!(err, RequestError::Review(_)), "{err:?}");
        let text = err.to_string();
        assert!(text.starts_with("invalid AdmissionReview: "), "{text}");
        assert!(text.contains(needle), "`{text}` should contain `{needle}`");
    }
}

#[test]
fn review_identity_falls_back_to_the_request() {
    // DELETE without oldObject (some apiservers omit it): identity from the request.
    let review = with(
        with(valid_review(), "/request/operation", Some(json!("DELETE"))),
        "/request/object",
        None,
    );
    let review = with(review, "/request/name", Some(json!("gone")));
    let req = Request::from_admission_review(&review).unwrap();
    assert_eq!(
        (
            req.operation,
            req.api_version.as_str(),
            req.kind.as_str(),
            req.namespace.as_deref(),
            req.name.as_str()
        ),
        (Operation::Delete, "v1", "Pod", Some("default"), "gone")
    );
    assert!(req.subject().is_none());
    // The engine has nothing to judge and admits it.
    let set = set_of(&[cop("mark", json!({"overrideRules": [hit_rule("mark")]}))]);
    let d = kanon_engine::block_on(set.review(&req, &NoObjects));
    assert!(
        d.allowed && d.patch.0.is_empty() && d.patched.is_none(),
        "{d:?}"
    );

    // Group and version from request.kind when the object lacks its type.
    let review = with(
        with(
            valid_review(),
            "/request/object",
            Some(json!({"metadata": {"name": "d", "namespace": "apps-ns"}})),
        ),
        "/request/kind",
        Some(json!({"group": "apps", "version": "v1", "kind": "Deployment"})),
    );
    let req = Request::from_admission_review(&review).unwrap();
    assert_eq!(
        (req.api_version.as_str(), req.kind.as_str()),
        ("apps/v1", "Deployment")
    );
    assert_eq!(
        req.namespace.as_deref(),
        Some("apps-ns"),
        "the object's namespace wins"
    );
    // The object's namespace is absent: the request's.
    let review = with(
        valid_review(),
        "/request/object",
        Some(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}})),
    );
    let req = Request::from_admission_review(&review).unwrap();
    assert_eq!(req.namespace.as_deref(), Some("default"));
    // CONNECT without an object.
    let review = with(
        with(valid_review(), "/request/operation", Some(json!("CONNECT"))),
        "/request/object",
        None,
    );
    let review = with(
        review,
        "/request/kind",
        Some(json!({"group": "", "version": "v1", "kind": "PodExecOptions"})),
    );
    let review = with(review, "/request/name", Some(json!("web")));
    let req = Request::from_admission_review(&review).unwrap();
    assert_eq!(
        (req.operation, req.kind.as_str(), req.name.as_str()),
        (Operation::Connect, "PodExecOptions", "web")
    );
    // An explicit dryRun.
    let review = with(valid_review(), "/request/dryRun", Some(json!(true)));
    assert!(Request::from_admission_review(&review).unwrap().dry_run);
}

// ---------------------------------------------------------------------------------------------
// Requests from objects (offline)
// ---------------------------------------------------------------------------------------------

#[test]
fn requests_from_objects() {
    let p = pod("default", "web", json!({}));
    let req = Request::from_objects(Operation::Create, Some(p.clone()), None).unwrap();
    assert_eq!(
        (
            req.api_version.as_str(),
            req.kind.as_str(),
            req.namespace.as_deref(),
            req.name.as_str()
        ),
        ("v1", "Pod", Some("default"), "web")
    );
    assert_eq!(req.uid, "");
    assert_eq!(req.subject(), Some(&p));

    // DELETE: the old object is the subject, and the object slot is empty.
    let req = Request::from_objects(Operation::Delete, None, Some(p.clone())).unwrap();
    assert_eq!((req.object.as_ref(), req.subject()), (None, Some(&p)));
    // DELETE given only an object treats it as the object being deleted.
    let req = Request::from_objects(Operation::Delete, Some(p.clone()), None).unwrap();
    assert_eq!(
        (req.object.as_ref(), req.old_object.as_ref()),
        (None, Some(&p))
    );

    let n = node("n");
    let req = Request::from_objects(Operation::Update, Some(n.clone()), Some(n)).unwrap();
    assert_eq!(req.namespace, None);

    let rows: Vec<(Operation, Option<Value>, Option<Value>, RequestError)> = vec![
        (
            Operation::All,
            Some(p.clone()),
            None,
            RequestError::Operation("*".into()),
        ),
        (
            Operation::Create,
            None,
            Some(p.clone()),
            RequestError::MissingObject {
                operation: Operation::Create,
                what: "an object",
            },
        ),
        (
            Operation::Connect,
            None,
            None,
            RequestError::MissingObject {
                operation: Operation::Connect,
                what: "an object",
            },
        ),
        (
            Operation::Update,
            Some(p.clone()),
            None,
            RequestError::MissingObject {
                operation: Operation::Update,
                what: "an old object",
            },
        ),
        (
            Operation::Delete,
            None,
            None,
            RequestError::MissingObject {
                operation: Operation::Delete,
                what: "the object being deleted",
            },
        ),
        (
            Operation::Create,
            Some(json!({"kind": "Pod", "metadata": {"name": "x"}})),
            None,
            RequestError::MissingField("apiVersion"),
        ),
        (
            Operation::Create,
            Some(json!({"apiVersion": "v1", "kind": "", "metadata": {"name": "x"}})),
            None,
            RequestError::MissingField("kind"),
        ),
    ];
    for (op, object, old, want) in rows {
        assert_eq!(Request::from_objects(op, object, old).unwrap_err(), want);
    }
    assert_eq!(
        RequestError::MissingObject {
            operation: Operation::Update,
            what: "an old object"
        }
        .to_string(),
        "UPDATE needs an old object"
    );
    assert_eq!(
        RequestError::MissingField("kind").to_string(),
        "the object has no kind"
    );
}

#[test]
fn operation_names() {
    for (text, op) in [
        ("CREATE", Operation::Create),
        ("UPDATE", Operation::Update),
        ("DELETE", Operation::Delete),
        ("CONNECT", Operation::Connect),
        ("create", Operation::Create),
        ("Delete", Operation::Delete),
    ] {
        assert_eq!(parse_operation(text), Ok(op), "{text}");
    }
    for text in ["*", "", "PATCH", "CREATED"] {
        let err = parse_operation(text).unwrap_err();
        assert_eq!(err, RequestError::Operation(text.to_string()));
        assert_eq!(
            err.to_string(),
            format!("unknown operation `{text}`; use CREATE, UPDATE, DELETE or CONNECT")
        );
    }
}

#[test]
fn a_namespace_is_cluster_scoped_even_when_the_review_names_its_namespace() {
    // Since Kubernetes 1.20 (kubernetes/kubernetes#95012) the apiserver sets
    // `request.namespace` to a Namespace's own name on every operation. The Namespace is still
    // a cluster-scoped object: the engine must see it exactly as offline (`from_objects`), so
    // that an OverridePolicy in namespace `team-a` cannot reach the Namespace `team-a` itself.
    let ns = namespace("team-a", json!({"env": "prod"}));
    let offline =
        Request::from_objects(Operation::Update, Some(ns.clone()), Some(ns.clone())).unwrap();
    assert_eq!(offline.namespace, None);
    for (operation, object, old) in [
        ("CREATE", Some(ns.clone()), None),
        ("UPDATE", Some(ns.clone()), Some(ns.clone())),
        ("DELETE", None, Some(ns.clone())),
    ] {
        let review = json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u",
                "kind": {"group": "", "version": "v1", "kind": "Namespace"},
                "resource": {"group": "", "version": "v1", "resource": "namespaces"},
                "name": "team-a",
                "namespace": "team-a",
                "operation": operation,
                "object": object,
                "oldObject": old,
            },
        });
        let req = Request::from_admission_review(&review).unwrap();
        assert_eq!(req.namespace, None, "{operation}");
        assert_eq!(
            (req.kind.as_str(), req.name.as_str()),
            ("Namespace", "team-a")
        );

        let set = set_of(&[
            op("team-a", "own", json!({"overrideRules": [hit_rule("own")]})),
            cop(
                "by-namespace",
                json!({"resourceSelectors": [{"apiVersion": "v1", "kind": "Namespace", "namespace": "team-a"}],
                       "overrideRules": [hit_rule("by-namespace")]}),
            ),
            cop("any", json!({"overrideRules": [hit_rule("any")]})),
        ]);
        let d = kanon_engine::block_on(set.mutate(&req, &NoObjects));
        assert!(d.allowed, "{d:?}");
        let expected: &[&str] = if operation == "DELETE" {
            &[]
        } else {
            &["ClusterOverridePolicy/any"]
        };
        assert_eq!(d.applied_policies, expected, "{operation}");
    }
    // A namespaced object keeps the request's namespace when its own is absent.
    let review = with(
        valid_review(),
        "/request/object",
        Some(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}})),
    );
    assert_eq!(
        Request::from_admission_review(&review)
            .unwrap()
            .namespace
            .as_deref(),
        Some("default")
    );
}
