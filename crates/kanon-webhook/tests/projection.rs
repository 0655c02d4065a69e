//! Reviews read with their objects projected (only what the policies that may select them can
//! read, `PolicySet::object_read`) are decided exactly as reviews read whole, on both webhooks:
//! every policy file of the example suites and of `tests/projection/`, alone, against every
//! object of the suites and the review fixtures, created, updated and deleted. The answers must
//! be the same bytes.

use std::path::{Path, PathBuf};

use kanon_engine::{
    AdmissionPolicies, Evaluation, NoObjects, PolicySet, WebhookKind, compile_document,
    parse_documents,
};
use kanon_webhook::admission::{answer, decide, read, read_projected};
use kanon_webhook::{Limits, review};
use serde_json::{Value, json};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| entries.filter_map(|e| Some(e.ok()?.path())).collect())
        .unwrap_or_default();
    files.retain(|p| p.extension().and_then(|e| e.to_str()) == Some("yaml"));
    files.sort();
    files
}

fn documents(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).expect("a file");
    parse_documents(&text, &path.display().to_string(), false).expect("YAML")
}

/// The set of one policy file, or `None` when it holds something else (a suite's exceptions
/// or context only).
fn set_of(path: &Path) -> Option<PolicySet> {
    let mut admission = AdmissionPolicies::default();
    let mut policies = Vec::new();
    for document in documents(path) {
        if AdmissionPolicies::accepts(&document) {
            admission.add_from(&document, &path.display().to_string());
        } else if kanon_engine::policy_kind_of(&document).is_some() {
            policies.push(compile_document(&document).ok()?);
        }
    }
    policies.extend(admission.compile().ok()?);
    (!policies.is_empty()).then(|| PolicySet::build(policies).expect("a set"))
}

fn objects() -> Vec<Value> {
    let mut objects = Vec::new();
    for suite in yaml_dirs(&root().join("examples/suites")) {
        for file in yaml_files(&suite.join("resources")) {
            objects.extend(documents(&file).into_iter().filter(|d| d.is_object()));
        }
    }
    for entry in std::fs::read_dir(root().join("fixtures/admission-reviews")).expect("fixtures") {
        let path = entry.expect("an entry").path();
        if path.extension().and_then(|e| e.to_str()) == Some("json") {
            let review: Value =
                serde_json::from_slice(&std::fs::read(&path).expect("a fixture")).expect("JSON");
            for name in ["object", "oldObject"] {
                if review["request"][name].is_object() {
                    objects.push(review["request"][name].clone());
                }
            }
        }
    }
    objects
}

fn yaml_dirs(dir: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("the suites")
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    dirs
}

/// The object changed as an update might change it.
fn changed(object: &Value) -> Value {
    let mut old = object.clone();
    old["metadata"]["labels"]["changed"] = json!("yes");
    if let Some(replicas) = old["spec"]["replicas"].as_i64() {
        old["spec"]["replicas"] = json!(replicas + 7);
    }
    if old["data"].is_object() {
        old["data"]["changed"] = json!("yes");
    }
    old
}

fn review_of(operation: &str, object: Option<&Value>, old: Option<&Value>) -> Vec<u8> {
    let subject = object.or(old).expect("an object");
    let api_version = subject["apiVersion"].as_str().unwrap_or("v1");
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let kind = subject["kind"].as_str().unwrap_or("");
    let resource = format!("{}s", kind.to_lowercase());
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "0b5c9c43-0000-4000-8000-000000000001",
            "kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": resource},
            "requestKind": {"group": group, "version": version, "kind": kind},
            "requestResource": {"group": group, "version": version, "resource": resource},
            "name": subject["metadata"]["name"],
            "namespace": subject["metadata"]["namespace"].as_str().unwrap_or("default"),
            "operation": operation,
            "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
            "object": object,
            "oldObject": old,
            "dryRun": false,
        },
    }))
    .expect("JSON")
}

/// How many reviews of one webhook were compared, read projected, and (mutating) read again
/// whole after a mutation reached beyond the projection.
#[derive(Default, Debug)]
struct Counts {
    compared: usize,
    projected: usize,
    read_again: usize,
}

/// Answers `body` read whole and as the server reads it (`review`), and asserts the same bytes.
fn compare(
    body: &[u8],
    webhook: WebhookKind,
    policies: &PolicySet,
    counts: &mut Counts,
    what: &str,
) {
    let limits = Limits::default();
    let whole = match read(body, &limits) {
        Ok(request) => kanon_engine::block_on(answer(
            request,
            None,
            webhook,
            policies,
            &Evaluation::new(&NoObjects),
        )),
        Err(reply) => *reply,
    };
    let identity = kanon_webhook::triage::glance(body);
    let projection = identity
        .as_ref()
        .filter(|identity| {
            policies.evaluates(
                webhook,
                &identity.api_version,
                &identity.kind,
                identity.namespace.as_deref(),
            )
        })
        .and_then(|identity| identity.object_read(webhook, policies))
        .filter(|projection| !projection.is_whole());
    let mut beyond = false;
    if let (Some(projection), Some(identity)) = (&projection, &identity) {
        counts.projected += 1;
        if webhook == WebhookKind::Mutating
            && let Ok(mut request) =
                read_projected(body, &limits, Some((projection, identity.subject())))
        {
            let decision =
                kanon_engine::block_on(decide(&mut request, webhook, policies, &NoObjects));
            counts.read_again += usize::from(decision.beyond_reading);
            beyond = decision.beyond_reading;
        }
    }
    let reply = kanon_engine::block_on(review(body, webhook, policies, &NoObjects, &limits));
    assert_eq!(
        (reply.status, String::from_utf8_lossy(&reply.body)),
        (whole.status, String::from_utf8_lossy(&whole.body)),
        "{webhook:?}: {what} on {}",
        String::from_utf8_lossy(body)
    );
    // The answer says it read the review again (for `kanon_reviews_read_again_total`)
    // exactly when a decision on the part decoded was void.
    assert_eq!(reply.read_again, beyond, "{webhook:?}: {what}");
    counts.compared += 1;
}

#[test]
fn a_review_read_projected_is_answered_as_one_read_whole() {
    let objects = objects();
    assert!(objects.len() >= 20, "only {} objects", objects.len());
    let (mut validating, mut mutating, mut files) = (Counts::default(), Counts::default(), 0);
    let mut policy_files: Vec<PathBuf> = yaml_dirs(&root().join("examples/suites"))
        .iter()
        .flat_map(|suite| yaml_files(&suite.join("policies")))
        .collect();
    policy_files.extend(yaml_files(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/projection"),
    ));
    {
        for file in policy_files {
            let Some(policies) = set_of(&file) else {
                continue;
            };
            files += 1;
            let before = validating.projected + mutating.projected;
            let before_mutating = (mutating.projected, mutating.read_again);
            let what = file.display().to_string();
            for object in &objects {
                let old = changed(object);
                for body in [
                    review_of("CREATE", Some(object), None),
                    review_of("UPDATE", Some(object), Some(&old)),
                    review_of("DELETE", None, Some(object)),
                ] {
                    compare(
                        &body,
                        WebhookKind::Validating,
                        &policies,
                        &mut validating,
                        &what,
                    );
                    compare(
                        &body,
                        WebhookKind::Mutating,
                        &policies,
                        &mut mutating,
                        &what,
                    );
                }
            }
            if validating.projected + mutating.projected == before {
                println!("never read projected: {what}");
            }
            // This folder's files: the mutations that write within the projection are never
            // read again; those that write beyond it always are.
            let (projected, read_again) = (
                mutating.projected - before_mutating.0,
                mutating.read_again - before_mutating.1,
            );
            if file.ends_with("tests/projection/labels.yaml")
                || file.ends_with("tests/projection/templates.yaml")
                || file.ends_with("tests/projection/mixed.yaml")
            {
                assert!(
                    projected > 0 && read_again == 0,
                    "{what}: {projected}, {read_again}"
                );
            }
            if file.to_string_lossy().contains("tests/projection/beyond-") {
                assert!(read_again > 0, "{what}: {projected}, {read_again}");
            }
        }
    }
    println!("{files} policy files; validating: {validating:?}; mutating: {mutating:?}");
    assert!(files >= 10, "only {files} policy files");
    // Reviews some policy may select, read projected (441 validating when written): CEL
    // rules and templates without lookups, over the types they select.
    assert!(
        validating.projected >= 300,
        "only {} of {} validating reviews some policy may select were read projected",
        validating.projected,
        validating.compared
    );
    // Mutations of the suites: some write only what was decoded, some beyond it (and are
    // read again whole).
    assert!(
        mutating.projected >= 100 && mutating.read_again >= 10,
        "mutating: {mutating:?}"
    );
    assert!(
        mutating.projected - mutating.read_again >= 50,
        "mutating: {mutating:?}"
    );
}

#[test]
fn a_body_that_names_another_type_on_a_second_reading_is_read_whole() {
    // The glance reads the first `kind` written (a ConfigMap, which no policy reads anything
    // of), the full reading the last (a Pod, whose containers the policy reads).
    let documents = [json!({
        "apiVersion": "policy.kanon.dev/v1alpha1",
        "kind": "ClusterValidatePolicy",
        "metadata": {"name": "memory-limits"},
        "spec": {
            "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
            "validateRules": [{"cel": {"validations": [{
                "expression": "object.spec.containers.all(c, has(c.resources))",
                "message": "every container needs resources",
            }]}}],
        },
    })];
    let policies = PolicySet::build(
        documents
            .iter()
            .map(|d| compile_document(d).expect("compiles"))
            .collect(),
    )
    .expect("a set");
    let body = br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u-1","operation":"CREATE","namespace":"a","kind":{"group":"","version":"v1","kind":"Pod"},"object":{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"p","namespace":"a"},"kind":"Pod","spec":{"containers":[{"name":"c","image":"i"}]}}}}"#;
    let identity = kanon_webhook::triage::glance(body).expect("a review");
    assert_eq!(identity.kind, "ConfigMap", "the glance reads the first");
    let limits = Limits::default();
    let whole = read(body, &limits).expect("a request");
    assert_eq!(whole.kind, "Pod", "the full reading the last");
    let whole = kanon_engine::block_on(answer(
        whole,
        None,
        WebhookKind::Validating,
        &policies,
        &Evaluation::new(&NoObjects),
    ));
    assert!(
        String::from_utf8_lossy(&whole.body).contains("every container needs resources"),
        "{}",
        String::from_utf8_lossy(&whole.body)
    );
    let reply = kanon_engine::block_on(review(
        body,
        WebhookKind::Validating,
        &policies,
        &NoObjects,
        &limits,
    ));
    assert_eq!(
        String::from_utf8_lossy(&reply.body),
        String::from_utf8_lossy(&whole.body)
    );
}
