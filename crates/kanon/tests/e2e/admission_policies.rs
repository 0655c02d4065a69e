//! kanon's evaluation of ValidatingAdmissionPolicy and MutatingAdmissionPolicy manifests against
//! kube-apiserver's own: the suite `examples/suites/admission-policies` (policies, bindings,
//! params, namespaces, and its cases) is applied to the control plane, and every case is sent to
//! the apiserver (a server-side dry run) and to `kanon apply` on the object the apiserver's
//! admission saw (the same request made before the policies existed, with its defaults). Both
//! must agree on the verdict, the message and its reason, the warnings and the mutated object.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::Scenario;
use crate::env::{Env, documents, repo, text};

pub const SCENARIOS: &[Scenario] = &[
    (
        "admission_policies::kanon_and_the_apiserver_agree_on_every_case",
        kanon_and_the_apiserver_agree_on_every_case,
    ),
    (
        "admission_policies::converted_policies_decide_the_same_through_kanons_webhook",
        converted_policies_decide_the_same_through_kanons_webhook,
    ),
    (
        "admission_policies::what_the_apiserver_refuses_kanon_refuses_at_the_same_field",
        what_the_apiserver_refuses_kanon_refuses_at_the_same_field,
    ),
    (
        "admission_policies::several_denying_policies_give_one_answer",
        several_denying_policies_give_one_answer,
    ),
];

/// One case of the suite: the object, the operation, the old object.
pub(crate) struct Case {
    pub(crate) title: String,
    pub(crate) operation: String,
    pub(crate) object: Value,
    pub(crate) old: Option<Value>,
}

/// What one side made of a case.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Outcome {
    pub(crate) allowed: bool,
    /// The denial's message, without the apiserver's `<resource> "<name>" is forbidden: `.
    pub(crate) message: Option<String>,
    /// The denial's reason (`Invalid`, `Forbidden`).
    pub(crate) reason: Option<String>,
    pub(crate) warnings: BTreeSet<String>,
    /// The object as admitted, without the fields the apiserver sets on every write.
    pub(crate) object: Option<Value>,
}

fn text_at<'a>(value: &'a Value, pointer: &str) -> &'a str {
    value.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// The suite's cases with their objects.
fn cases(suite: &Path) -> Vec<Case> {
    let resources = documents(&suite.join("resources"));
    let file = documents(&suite.join("kanon-test.yaml"));
    let cases = file[0]["cases"].as_array().expect("cases").clone();
    cases
        .into_iter()
        .map(|case| {
            let (kind, namespace, name) = (
                text_at(&case, "/resource/kind"),
                case.pointer("/resource/namespace").and_then(Value::as_str),
                text_at(&case, "/resource/name"),
            );
            let object = resources
                .iter()
                .find(|r| {
                    text_at(r, "/kind") == kind
                        && text_at(r, "/metadata/name") == name
                        && r.pointer("/metadata/namespace").and_then(Value::as_str) == namespace
                })
                .unwrap_or_else(|| panic!("no resource {kind} {namespace:?} {name}"))
                .clone();
            let operation = case
                .get("operation")
                .and_then(Value::as_str)
                .unwrap_or("CREATE")
                .to_owned();
            let old = case
                .get("oldResource")
                .and_then(Value::as_str)
                .map(|path| documents(&suite.join(path)).remove(0));
            Case {
                title: format!("{operation} {kind} {}/{name}", namespace.unwrap_or("")),
                operation,
                object,
                old,
            }
        })
        .collect()
}

/// Drops what the apiserver writes on every object (identity, versions, timestamps, field
/// managers): the two sides cannot agree on those.
fn normalized(mut object: Value) -> Value {
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        for key in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "managedFields",
            "generation",
        ] {
            metadata.remove(key);
        }
    }
    object
}

/// The kind's resource name for kubectl.
fn resource(object: &Value) -> &'static str {
    match text_at(object, "/kind") {
        "Deployment" => "deployments.apps",
        "ConfigMap" => "configmaps",
        "Namespace" => "namespaces",
        other => panic!("the corpus has no resource name for {other}"),
    }
}

fn namespace_args(object: &Value) -> Vec<String> {
    match object
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
    {
        Some(ns) => vec!["-n".to_owned(), ns.to_owned()],
        None => Vec::new(),
    }
}

/// Sends the case to the apiserver as a server-side dry run.
pub(crate) fn send(env: &Env, case: &Case) -> Output {
    match case.operation.as_str() {
        "CREATE" => env.kubectl_stdin(
            &["create", "--dry-run=server", "-o", "json", "-f", "-"],
            &case.object.to_string(),
        ),
        "UPDATE" => env.kubectl_stdin(
            &["replace", "--dry-run=server", "-o", "json", "-f", "-"],
            &case.object.to_string(),
        ),
        "DELETE" => {
            let mut args = vec![
                "delete".to_owned(),
                resource(&case.object).to_owned(),
                text_at(&case.object, "/metadata/name").to_owned(),
                "--dry-run=server".to_owned(),
            ];
            args.extend(namespace_args(&case.object));
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            env.kubectl(&args)
        }
        other => panic!("the corpus has no {other} case"),
    }
}

/// What the apiserver answered, read from kubectl's output.
fn apiserver_outcome(case: &Case, out: &Output) -> Outcome {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let warnings = stderr
        .lines()
        .filter_map(|line| line.strip_prefix("Warning: "))
        .map(str::to_owned)
        .collect();
    if out.status.success() {
        let object = (case.operation != "DELETE").then(|| {
            normalized(
                serde_json::from_slice(&out.stdout)
                    .unwrap_or_else(|e| panic!("{}: kubectl printed no object: {e}", case.title)),
            )
        });
        return Outcome {
            allowed: true,
            message: None,
            reason: None,
            warnings,
            object,
        };
    }
    // kubectl words an Invalid status as `The <resource> "<name>" is invalid: : <message>`, any
    // other as `Error from server (<Reason>): [error when creating "STDIN": ]<message>`. A
    // message of several lines (`errors:`, then one indented line each) goes on below.
    let lines: Vec<&str> = stderr.lines().collect();
    let with_continuation = |at: usize, first: &str| -> String {
        let mut text = first.to_owned();
        for more in lines[at + 1..].iter().take_while(|l| l.starts_with("  ")) {
            text.push('\n');
            text.push_str(more);
        }
        text
    };
    let (reason, message): (String, String) = if let Some(at) = lines
        .iter()
        .position(|line| line.starts_with("The ") && line.contains(" is invalid: "))
    {
        let (_, after) = lines[at].split_once(" is invalid: ").expect("checked");
        // Several causes come one per line (`* : <message>`), the status's message first.
        let after = match after.trim() {
            "" => match lines.iter().position(|line| line.starts_with("* ")) {
                Some(cause) => with_continuation(cause, &lines[cause][2..]),
                None => String::new(),
            },
            _ => with_continuation(at, after),
        };
        let message = after.strip_prefix(": ").unwrap_or(&after).to_owned();
        ("Invalid".to_owned(), message)
    } else {
        let Some(at) = lines
            .iter()
            .position(|line| line.starts_with("Error from server ("))
        else {
            // No answer at all (the apiserver reset the stream, say): reported as it is, so
            // that the case shows up among the differences with its policy.
            return Outcome {
                allowed: false,
                message: Some(stderr.trim().to_owned()),
                reason: Some("no answer".to_owned()),
                warnings,
                object: None,
            };
        };
        let line = with_continuation(at, lines[at]);
        let rest = &line["Error from server (".len()..];
        let (reason, rest) = rest.split_once("): ").expect("a reason");
        let rest = match rest.split_once("\"STDIN\": ") {
            Some((_, after)) => after,
            None => rest,
        };
        let message = match rest.split_once(" is forbidden: ") {
            Some((_, after)) => after,
            None => rest,
        };
        (reason.to_owned(), message.to_owned())
    };
    Outcome {
        allowed: false,
        message: Some(message),
        reason: Some(reason),
        warnings,
        object: None,
    }
}

/// What `kanon apply` makes of the case, on the object the apiserver's admission saw.
pub(crate) fn kanon_outcome(
    policies: &Path,
    work: &Path,
    case: &Case,
    seen: &Value,
    old: Option<&Value>,
) -> Outcome {
    let input = work.join("input.json");
    std::fs::write(&input, seen.to_string()).expect("write the input");
    let mut command = kanon_apply(policies, work, &input);
    command.args(["--operation", &case.operation]);
    if let Some(old) = old {
        let path = work.join("old.json");
        std::fs::write(&path, old.to_string()).expect("write the old object");
        command.arg("--old-resource").arg(path);
    }
    outcome_of(case, &command.output().expect("kanon runs"))
}

/// What `kanon apply` decides for `case` given as the AdmissionReview kube-apiserver sends its
/// webhooks (a CREATE of `seen`): the path of an object that arrives defaulted, as `kanon
/// serve` takes every review's (no defaulting after a label-only mutation, an apply
/// configuration merged along its own fields).
pub(crate) fn kanon_review_outcome(
    policies: &Path,
    work: &Path,
    case: &Case,
    seen: &Value,
) -> Outcome {
    assert_eq!(
        case.operation, "CREATE",
        "{}: reviews of creations only",
        case.title
    );
    let api_version = text_at(seen, "/apiVersion");
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let kind = text_at(seen, "/kind");
    let review = serde_json::json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "e2e-review",
            "kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": resource(seen).split('.').next()},
            "name": text_at(seen, "/metadata/name"),
            "namespace": text_at(seen, "/metadata/namespace"),
            "operation": "CREATE",
            "userInfo": {"username": "e2e"},
            "object": seen,
            "oldObject": null,
            "dryRun": true,
        },
    });
    let input = work.join("review.json");
    std::fs::write(&input, review.to_string()).expect("write the review");
    let out = kanon_apply(policies, work, &input)
        .output()
        .expect("kanon runs");
    outcome_of(case, &out)
}

/// `kanon apply` of `policies` to `input`, with `work`'s context, printing JSON.
fn kanon_apply(policies: &Path, work: &Path, input: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_kanon"));
    command
        .arg("apply")
        .arg("--policy")
        .arg(policies)
        .arg("--resource")
        .arg(input)
        .arg("--context")
        .arg(work.join("context.json"))
        .args(["--output", "json"]);
    command
}

/// The outcome `kanon apply --output json` printed for `case`.
fn outcome_of(case: &Case, out: &std::process::Output) -> Outcome {
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "{}: kanon apply failed: {}",
        case.title,
        text(out)
    );
    let answers: Value = serde_json::from_slice(&out.stdout).expect("kanon prints JSON");
    let answer = &answers[0];
    let allowed = answer["allowed"].as_bool().expect("allowed");
    Outcome {
        allowed,
        message: answer["messages"]
            .get(0)
            .and_then(Value::as_str)
            .map(str::to_owned),
        reason: answer
            .get("statusReason")
            .and_then(Value::as_str)
            .filter(|_| !allowed)
            .map(str::to_owned),
        warnings: answer["warnings"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        object: (allowed && case.operation != "DELETE")
            .then(|| normalized(answer["patched"].clone())),
    }
}

/// The object as the apiserver's admission sees it: the same request, made before the policies
/// exist (with the apiserver's defaults); for DELETE, the stored object.
fn seen_by_admission(env: &Env, case: &Case) -> Value {
    if case.operation == "DELETE" {
        return stored(env, &case.object).expect("the object to delete exists");
    }
    let out = send(env, case);
    assert!(out.status.success(), "{}: {}", case.title, text(&out));
    serde_json::from_slice(&out.stdout).expect("an object")
}

fn stored(env: &Env, object: &Value) -> Option<Value> {
    let mut args = vec![
        "get".to_owned(),
        resource(object).to_owned(),
        text_at(object, "/metadata/name").to_owned(),
        "-o".to_owned(),
        "json".to_owned(),
    ];
    args.extend(namespace_args(object));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = env.kubectl(&args);
    out.status
        .success()
        .then(|| serde_json::from_slice(&out.stdout).expect("an object"))
}

/// Removes what the scenario creates, so that it starts clean and leaves nothing behind.
fn clean(env: &Env, suite: &Path) {
    let _ = env.kubectl(&[
        "delete",
        "-f",
        &suite.join("policies").display().to_string(),
        "--ignore-not-found",
    ]);
    for namespace in [
        "ap-prod",
        "ap-dev",
        "ap-canary",
        "ap-empty-team",
        "ap-no-team",
    ] {
        let _ = env.kubectl(&[
            "delete",
            "namespace",
            namespace,
            "--ignore-not-found",
            "--wait=true",
            "--timeout=60s",
        ]);
    }
}

/// The suite's cluster in place (context, old objects) and what each case's request is.
struct Prepared {
    suite: PathBuf,
    work: tempfile::TempDir,
    cases: Vec<Case>,
    /// The object the apiserver's admission sees for each case.
    seen: Vec<Value>,
    /// The stored old object of each UPDATE and DELETE case.
    olds: Vec<Option<Value>>,
}

impl Prepared {
    /// What `kanon apply` with `policies` makes of every case, on the objects admission saw.
    fn offline(&self, policies: &Path) -> Vec<Outcome> {
        self.cases
            .iter()
            .zip(&self.seen)
            .zip(&self.olds)
            .map(|((case, seen), old)| {
                kanon_outcome(policies, self.work.path(), case, seen, old.as_ref())
            })
            .collect()
    }
}

/// Cleans up, then creates the suite's context and old objects, and asks the apiserver (with no
/// policy in force) what each case's object looks like to admission.
fn prepare(env: &Env) -> Prepared {
    let suite: PathBuf = repo().join("examples/suites/admission-policies");
    let work = tempfile::tempdir().expect("a temporary directory");
    let cases = cases(&suite);
    clean(env, &suite);
    let context = suite.join("context").display().to_string();
    let out = env.kubectl(&["apply", "-f", &context]);
    assert!(out.status.success(), "{}", text(&out));
    for case in &cases {
        if let Some(old) = &case.old {
            env.apply(old);
        }
    }
    // kanon reads the context as the apiserver holds it (with its labels and fields).
    let mut held = Vec::new();
    for document in documents(&suite.join("context")) {
        held.push(stored(env, &document).expect("context object stored"));
    }
    std::fs::write(
        work.path().join("context.json"),
        Value::Array(held).to_string(),
    )
    .expect("write the context");
    let seen: Vec<Value> = cases.iter().map(|c| seen_by_admission(env, c)).collect();
    let olds: Vec<Option<Value>> = cases
        .iter()
        .map(|case| match case.operation.as_str() {
            "UPDATE" | "DELETE" => stored(env, &case.object),
            _ => None,
        })
        .collect();
    Prepared {
        suite,
        work,
        cases,
        seen,
        olds,
    }
}

/// Sends every case to the apiserver until each outcome `agrees` with `expected`, or 30 s have
/// passed (the apiserver takes a moment to put new policies in force): the last outcomes, and
/// the cases that still disagree.
pub(crate) fn until_agreed(
    env: &Env,
    cases: &[Case],
    expected: &[Outcome],
    agrees: impl Fn(&Outcome, &Outcome) -> bool,
) -> (Vec<Outcome>, Vec<String>) {
    let started = Instant::now();
    loop {
        let mut outcomes = Vec::new();
        let mut differences = Vec::new();
        for (case, expected) in cases.iter().zip(expected) {
            let apiserver = apiserver_outcome(case, &send(env, case));
            if !agrees(&apiserver, expected) {
                differences.push(format!(
                    "{}:\n  apiserver: {apiserver:?}\n  expected:  {expected:?}",
                    case.title
                ));
            }
            outcomes.push(apiserver);
        }
        if differences.is_empty() || started.elapsed() > Duration::from_secs(30) {
            return (outcomes, differences);
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

fn kanon_and_the_apiserver_agree_on_every_case(env: &mut Env) {
    let prepared = prepare(env);
    let Prepared { suite, cases, .. } = &prepared;
    let out = env.kubectl(&["apply", "-f", &suite.join("policies").display().to_string()]);
    assert!(out.status.success(), "{}", text(&out));
    let expected = prepared.offline(&suite.join("policies"));
    let (_, differences) = until_agreed(env, cases, &expected, Outcome::eq);
    clean(env, suite);
    assert!(
        differences.is_empty(),
        "kanon and kube-apiserver disagree on {} of {} cases:\n{}",
        differences.len(),
        cases.len(),
        differences.join("\n")
    );
    // Every kind of outcome is in the corpus, so agreement means something.
    assert!(expected.iter().any(|o| o.allowed && !o.warnings.is_empty()));
    assert!(
        expected
            .iter()
            .any(|o| !o.allowed && o.reason.as_deref() == Some("Forbidden"))
    );
    assert!(
        expected
            .iter()
            .any(|o| !o.allowed && o.reason.as_deref() == Some("Invalid"))
    );
}

/// The suite's policies that have no params (which `kanon convert` refuses).
fn convertible(suite: &Path, into: &Path) {
    std::fs::create_dir_all(into).expect("a directory");
    for entry in std::fs::read_dir(suite.join("policies")).expect("the policies") {
        let path = entry.expect("an entry").path();
        let text = std::fs::read_to_string(&path).expect("a policy file");
        if !text.contains("paramKind") {
            std::fs::copy(&path, into.join(path.file_name().expect("a name"))).expect("copy");
        }
    }
}

/// Whether kanon's webhook, serving the converted policies, decided as the apiserver did with
/// the originals: the same verdict, the same object, as many warnings (the ones kanon adds for
/// an error ignored under `failurePolicy: Ignore`, where the apiserver says nothing, aside), and
/// a denial that ends with the apiserver's message after its `denied request: ` (kanon words the
/// policy's name its own way).
fn webhook_agrees(webhook: &Outcome, apiserver: &Outcome) -> bool {
    let said = |warnings: &BTreeSet<String>| {
        warnings
            .iter()
            .filter(|w| !w.contains("skipped (failurePolicy Ignore)"))
            .count()
    };
    let message = match (&webhook.message, &apiserver.message) {
        (None, None) => true,
        (Some(ours), Some(theirs)) => {
            let theirs = theirs
                .split_once("denied request: ")
                .map_or(theirs.as_str(), |(_, after)| after);
            let theirs = theirs
                .strip_prefix("Internal error occurred: ")
                .unwrap_or(theirs);
            let theirs = theirs.split("JSON Patch: ").next().unwrap_or(theirs);
            ours.contains(theirs)
        }
        _ => false,
    };
    webhook.allowed == apiserver.allowed
        && webhook.object == apiserver.object
        && said(&webhook.warnings) == said(&apiserver.warnings)
        && message
}

fn converted_policies_decide_the_same_through_kanons_webhook(env: &mut Env) {
    let prepared = prepare(env);
    let Prepared {
        suite, work, cases, ..
    } = &prepared;
    let originals = work.path().join("originals");
    convertible(suite, &originals);

    // The originals in the apiserver, until they agree with kanon's offline evaluation of them.
    let out = env.kubectl(&["apply", "-f", &originals.display().to_string()]);
    assert!(out.status.success(), "{}", text(&out));
    let offline = prepared.offline(&originals);
    let (apiserver, differences) = until_agreed(env, cases, &offline, Outcome::eq);
    assert!(differences.is_empty(), "{}", differences.join("\n"));
    let out = env.kubectl(&["delete", "-f", &originals.display().to_string()]);
    assert!(out.status.success(), "{}", text(&out));

    // The same policies converted to kanon's kinds, served by kanon's webhook.
    let converted = Command::new(env!("CARGO_BIN_EXE_kanon"))
        .args(["convert", "--output", "json", "-f"])
        .arg(&originals)
        .output()
        .expect("kanon convert runs");
    assert!(converted.status.success(), "{}", text(&converted));
    let converted: Vec<Value> = serde_json::from_slice(&converted.stdout).expect("a JSON list");
    for policy in &converted {
        env.apply_policy(policy)
            .unwrap_or_else(|e| panic!("converted policy refused: {e}\n{policy}"));
        let kind = text_at(policy, "/kind").to_owned();
        let name = text_at(policy, "/metadata/name").to_owned();
        env.wait_policy_status(&kind, None, &name);
    }
    let (webhook, differences) = until_agreed(env, cases, &apiserver, webhook_agrees);
    for policy in &converted {
        env.delete_policy(
            text_at(policy, "/kind"),
            None,
            text_at(policy, "/metadata/name"),
        );
    }
    clean(env, suite);
    assert!(
        differences.is_empty(),
        "kanon's webhook with the converted policies and kube-apiserver with the originals disagree on {} of {} cases:\n{}",
        differences.len(),
        cases.len(),
        differences.join("\n")
    );
    assert!(apiserver.iter().any(|o| !o.allowed));
    assert!(apiserver.iter().any(|o| o.allowed && o.object.is_some()));
    // The webhook's answers are kanon's: its denials name the converted policies.
    assert!(
        webhook.iter().any(|o| o
            .message
            .as_deref()
            .is_some_and(|m| m.contains("ClusterValidatePolicy/"))),
        "{webhook:?}"
    );
    assert!(
        webhook.iter().any(|o| o
            .message
            .as_deref()
            .is_some_and(|m| m.contains("ClusterOverridePolicy/"))),
        "{webhook:?}"
    );
}

/// `text` without list indexes (`spec.a[0].b` → `spec.a.b`).
fn without_indexes(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_index = false;
    for character in text.chars() {
        match character {
            '[' => in_index = true,
            ']' if in_index => in_index = false,
            _ if in_index => {}
            other => out.push(other),
        }
    }
    out
}

/// The field paths an apiserver refusal names: `The X "n" is invalid: spec.a[0].b: Invalid value:
/// ...` (several joined by `, ` inside `[...]`).
fn refused_fields(message: &str) -> Vec<String> {
    message
        .split(char::is_whitespace)
        .map(|word| word.trim_start_matches('['))
        .filter(|word| word.starts_with("spec.") && word.ends_with(':'))
        .map(|word| word.trim_end_matches(':').to_owned())
        .collect()
}

fn what_the_apiserver_refuses_kanon_refuses_at_the_same_field(env: &mut Env) {
    let corpus = repo().join("crates/kanon/tests/e2e/refused-admission-policies");
    let resource = repo().join("examples/suites/admission-policies/resources/namespaces.yaml");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&corpus)
        .expect("the corpus")
        .map(|entry| entry.expect("an entry").path())
        .collect();
    files.sort();
    assert!(files.len() >= 10, "{files:?}");
    let mut differences = Vec::new();
    for file in &files {
        let out = env.kubectl(&[
            "apply",
            "--dry-run=server",
            "-f",
            &file.display().to_string(),
        ]);
        let apiserver = text(&out);
        let kanon = Command::new(env!("CARGO_BIN_EXE_kanon"))
            .arg("apply")
            .arg("--policy")
            .arg(file)
            .arg("--resource")
            .arg(&resource)
            .output()
            .expect("kanon runs");
        let kanon_says = String::from_utf8_lossy(&kanon.stderr).into_owned();
        let fields = refused_fields(&apiserver);
        // kanon names the field (the apiserver leaves some list indexes out), or its parent
        // (`spec.paramRef` for `spec.paramRef.name`).
        let kanon_fields = without_indexes(&kanon_says);
        let named = fields.iter().map(|f| without_indexes(f)).any(|field| {
            kanon_fields.contains(&format!("{field}:"))
                || field
                    .rsplit_once('.')
                    .is_some_and(|(parent, _)| kanon_fields.contains(&format!("{parent}:")))
        });
        if out.status.success() || kanon.status.code() != Some(2) || fields.is_empty() || !named {
            differences.push(format!(
                "{}:\n  apiserver (refused: {}): {apiserver}\n  kanon (exit {:?}): {kanon_says}",
                file.display(),
                !out.status.success(),
                kanon.status.code()
            ));
        }
    }
    assert!(
        differences.is_empty(),
        "kanon and kube-apiserver refuse differently:\n{}",
        differences.join("\n")
    );
}

/// Three VAPs deny one ConfigMap: kube-apiserver answers once, with one of them (the first its
/// dispatcher meets; its order among policies is a Go map's) and that validation's reason; kanon
/// answers once too, with its first policy's denial and reason.
fn several_denying_policies_give_one_answer(env: &mut Env) {
    const NAMES: [&str; 3] = ["deny3-aa", "deny3-mm", "deny3-zz"];
    let dir = tempfile::tempdir().expect("a directory");
    let mut manifests = Vec::new();
    for name in NAMES {
        manifests.push(serde_json::json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {
                "matchConstraints": {
                    "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                       "operations": ["CREATE"], "resources": ["configmaps"]}],
                    "objectSelector": {"matchLabels": {"deny3": "yes"}},
                },
                "validations": [{"expression": "false", "message": format!("{name} says no"),
                                 "reason": "Forbidden"}],
            },
        }));
        manifests.push(serde_json::json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name},
            "spec": {"policyName": name, "validationActions": ["Deny"]},
        }));
    }
    let policies = dir.path().join("policies.json");
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": manifests});
    std::fs::write(&policies, list.to_string()).expect("write the policies");
    let configmap = serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": "default", "labels": {"deny3": "yes"}},
        "data": {"k": "v"},
    });
    let expected: Vec<String> = NAMES
        .iter()
        .map(|name| format!("ValidatingAdmissionPolicy '{name}' with binding '{name}' denied request: {name} says no"))
        .collect();

    let out = env.kubectl(&["apply", "-f", &policies.display().to_string()]);
    assert!(out.status.success(), "{}", text(&out));
    // Until the apiserver has all three: it answers with one of them.
    let started = Instant::now();
    let answer = loop {
        let out = env.kubectl_stdin(
            &["create", "--dry-run=server", "-o", "json", "-f", "-"],
            &configmap.to_string(),
        );
        let said = String::from_utf8_lossy(&out.stderr).into_owned();
        if !out.status.success() && said.contains("denied request") {
            break said;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the apiserver does not deny: {said}"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    let _ = env.kubectl(&[
        "delete",
        "-f",
        &policies.display().to_string(),
        "--ignore-not-found",
    ]);
    assert!(
        answer.starts_with("Error from server (Forbidden)"),
        "{answer}"
    );
    assert_eq!(answer.matches("denied request").count(), 1, "{answer}");
    assert!(
        expected
            .iter()
            .any(|message| answer.trim_end().ends_with(message.as_str())),
        "{answer}"
    );

    let object = dir.path().join("configmap.json");
    std::fs::write(&object, configmap.to_string()).expect("write the object");
    let out = Command::new(env!("CARGO_BIN_EXE_kanon"))
        .arg("apply")
        .arg("--policy")
        .arg(&policies)
        .arg("--resource")
        .arg(&object)
        .args(["--output", "json"])
        .output()
        .expect("kanon runs");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let answers: Value = serde_json::from_slice(&out.stdout).expect("kanon prints JSON");
    assert_eq!(
        answers[0]["messages"],
        serde_json::json!([expected[0]]),
        "{answers}"
    );
    assert_eq!(answers[0]["statusReason"], "Forbidden", "{answers}");
}
