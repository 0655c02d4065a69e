//! The largest objects kube-apiserver accepts, sent through it to kanon: a review whose JSON
//! would take more than kanon's memory budget once read is refused (413, and kube-apiserver
//! applies the webhook's `failurePolicy`), large reviews within it are judged, and kanon's peak
//! memory stays bounded meanwhile.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::Scenario;
use crate::admission::{install, policy};
use crate::env::{Env, Restarted, text};

pub const SCENARIOS: &[Scenario] = &[(
    "limits::the_largest_objects_the_apiserver_accepts_keep_kanon_within_its_memory_budget",
    the_largest_objects_the_apiserver_accepts_keep_kanon_within_its_memory_budget,
)];

const NS: &str = "lim-large";
const GROUP: &str = "e2e.kanon.dev";
const CRD: &str = "blobs.e2e.kanon.dev";
const WEBHOOKS: &str = "kanon-e2e-blobs";
const POLICY: &str = "lim-large";
/// The review memory budget kanon runs with here (its default, given explicitly so the
/// message checked below does not depend on the default).
const BUDGET_MIB: u64 = 24;
/// kube-apiserver's limit on a request body (3 MiB).
const APISERVER_BODY_LIMIT: usize = 3 * 1024 * 1024;
/// How much kanon's peak RSS may rise during the scenario: the server's share of the chart's
/// memory limit.
const MAX_RISE_MIB: u64 = 192;

/// A Blob's JSON with `data` written out as given (large documents are built as text: a
/// `serde_json::Value` of 1.5 million numbers would itself take over 100 MiB here).
fn blob(name: &str, data: &str) -> String {
    format!(
        r#"{{"apiVersion":"{GROUP}/v1","kind":"Blob","metadata":{{"name":"{name}","namespace":"{NS}"}},"data":{data}}}"#
    )
}

/// The hostile case: as many zeros in one array as fit under kube-apiserver's body limit.
/// Two bytes each on the wire, far more once read.
fn dense_blob(name: &str) -> (String, usize) {
    let room = APISERVER_BODY_LIMIT - blob(name, "[]").len() - 16 * 1024;
    let values = room / 2;
    let mut data = String::with_capacity(values * 2 + 2);
    data.push('[');
    for i in 0..values {
        if i > 0 {
            data.push(',');
        }
        data.push('0');
    }
    data.push(']');
    (blob(name, &data), values)
}

/// About 2.5 MB of long strings: few values, about their text's size once read.
fn strings_blob(name: &str) -> String {
    let fields: Vec<String> = (0..25)
        .map(|i| format!(r#""s{i}":"{}""#, "x".repeat(100_000)))
        .collect();
    blob(name, &format!("{{{}}}", fields.join(",")))
}

/// A Pod of about 1.4 MiB of JSON (under etcd's default request limit of 1.5 MiB, so it can be
/// stored): one container with 1,000 environment variables of 1,400 bytes.
fn large_pod(name: &str) -> Value {
    let env: Vec<Value> = (0..1000)
        .map(|i| json!({"name": format!("VAR_{i:04}"), "value": "v".repeat(1400)}))
        .collect();
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"containers": [{"name": "app", "image": "registry.example/app:1.0", "env": env}]},
    })
}

/// kanon's peak resident set so far (`VmHWM`), in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("kanon's status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in kanon's status")
}

/// `kubectl create --dry-run=server -f -` of `document`: its output, and how long it took.
fn dry_run(env: &Env, document: &str) -> (std::process::Output, Duration) {
    let started = Instant::now();
    let out = env.kubectl_stdin(
        &["create", "--dry-run=server", "-o", "name", "-f", "-"],
        document,
    );
    (out, started.elapsed())
}

/// Whether kubectl's error says that kube-apiserver's call to kanon's Blob webhook failed with
/// kanon's 413, quoting kanon's message naming `bound` (kube-apiserver quotes a webhook's
/// message only from a `v1` Status body, which is what kanon's 413 is).
fn refused_over_budget(shown: &str, bound: &str) -> bool {
    shown.contains(r#"failed calling webhook "blobs.kanon.dev""#) && shown.contains(bound)
}

/// An AdmissionReview of `object` (a Blob's JSON), as kube-apiserver sends it for a dry-run
/// create.
fn dense_review(object: &str) -> String {
    format!(
        r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"dense-direct","kind":{{"group":"{GROUP}","version":"v1","kind":"Blob"}},"resource":{{"group":"{GROUP}","version":"v1","resource":"blobs"}},"namespace":"{NS}","name":"dense","operation":"CREATE","userInfo":{{"username":"e2e"}},"object":{object},"dryRun":true}}}}"#
    )
}

/// POSTs `review` to kanon's `/validate` directly: the HTTP status and the answer.
fn post_review(env: &Env, review: &str) -> (String, Value) {
    let mut curl = Command::new("curl")
        .args(["-s", "--max-time", "20", "-w", "\n%{http_code}"])
        .args(["-H", "Content-Type: application/json"])
        .arg("--cacert")
        .arg(env.kanon.cert_dir.join("ca.crt"))
        // From standard input: the body is far over the kernel's limit on one argument.
        .args(["--data-binary", "@-"])
        .arg(format!(
            "https://127.0.0.1:{}/validate?timeout=10s",
            env.kanon.port
        ))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("curl runs");
    curl.stdin
        .take()
        .expect("curl's stdin")
        .write_all(review.as_bytes())
        .expect("the review to curl");
    let out = curl.wait_with_output().expect("curl ends");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let (body, status) = stdout.rsplit_once('\n').unwrap_or(("", &stdout));
    (
        status.to_string(),
        serde_json::from_str(body).unwrap_or(Value::Null),
    )
}

/// Sum of the `kanon_admission_requests_total` samples with `result="<result>"`.
fn reviews_with_result(metrics: &str, result: &str) -> f64 {
    let label = format!("result=\"{result}\"");
    metrics
        .lines()
        .filter(|l| l.starts_with("kanon_admission_requests_total{") && l.contains(&label))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
        .sum()
}

fn install_blobs(env: &Env) {
    env.apply(&json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": "blobs", "singular": "blob", "kind": "Blob", "listKind": "BlobList"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}],
        },
    }));
    let out = env.kubectl(&[
        "wait",
        "--for=condition=Established",
        "--timeout=30s",
        &format!("crd/{CRD}"),
    ]);
    assert!(out.status.success(), "the CRD established: {}", text(&out));
    // The suite's webhooks cover only built-in kinds: Blobs get a validating webhook of their
    // own, to kanon, `Fail` like the suite's (and the chart's default).
    let (_, validating) = env.webhook_configurations();
    let mut webhook = validating["webhooks"][0].clone();
    webhook["name"] = json!("blobs.kanon.dev");
    webhook["rules"] = json!([{"apiGroups": [GROUP], "apiVersions": ["v1"],
                                "operations": ["CREATE", "UPDATE"], "resources": ["blobs"]}]);
    webhook["namespaceSelector"] = json!({"matchLabels": {"kubernetes.io/metadata.name": NS}});
    webhook["timeoutSeconds"] = json!(10);
    env.apply(&json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": WEBHOOKS},
        "webhooks": [webhook],
    }));
}

fn the_largest_objects_the_apiserver_accepts_keep_kanon_within_its_memory_budget(env: &mut Env) {
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| large_objects(env)));
    // Whatever happened: the webhook, the policy, the CRD and the namespace go.
    let _ = env.kubectl(&[
        "delete",
        "--ignore-not-found",
        &format!("validatingwebhookconfiguration/{WEBHOOKS}"),
    ]);
    env.delete_policy("ClusterValidatePolicy", None, POLICY);
    let _ = env.kubectl(&[
        "delete",
        "--ignore-not-found",
        "--wait=false",
        &format!("crd/{CRD}"),
    ]);
    let _ = env.kubectl(&[
        "delete",
        "--ignore-not-found",
        "--wait=false",
        "namespace",
        NS,
    ]);
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

fn large_objects(env: &mut Env) {
    env.namespace(NS, json!({}));
    install_blobs(env);
    // Allows everything but a probe, which shows the webhook and the policy in force.
    install(
        env,
        &policy(
            "ClusterValidatePolicy",
            None,
            POLICY,
            json!({
                "resourceSelectors": [
                    {"apiVersion": format!("{GROUP}/v1"), "kind": "Blob", "namespace": NS},
                    {"apiVersion": "v1", "kind": "Pod", "namespace": NS},
                ],
                "validateRules": [{"template": {"type": "condition", "condition": {
                    "cond": "Equal", "dataRef": {"from": "current", "path": "/metadata/labels/probe"},
                    "value": {"string": "deny"},
                    "message": "{{ object.metadata.name }} is a probe",
                }}}],
            }),
        ),
    );
    let (dense, values) = dense_blob("dense");
    let strings = strings_blob("strings");
    let pod = large_pod("large").to_string();
    eprintln!(
        "e2e: large objects: dense {} bytes ({values} numbers), strings {} bytes, Pod {} bytes",
        dense.len(),
        strings.len(),
        pod.len()
    );

    {
        // A fresh kanon, so its peak RSS is this scenario's.
        let restarted = Restarted::with(env, &["--max-review-memory-mib", &BUDGET_MIB.to_string()]);
        let env = &*restarted.env;
        let probe = format!(
            r#"{{"apiVersion":"{GROUP}/v1","kind":"Blob","metadata":{{"name":"probe","namespace":"{NS}","labels":{{"probe":"deny"}}}},"data":[]}}"#
        );
        env.wait_for(
            "kube-apiserver calls kanon for Blobs",
            Duration::from_secs(20),
            || text(&dry_run(env, &probe).0).contains("probe is a probe"),
        );
        let pid = env.kanon.pid().expect("kanon runs");
        let before = peak_rss_kib(pid);
        let over_budget_before = reviews_with_result(&env.kanon.metrics(), "over_budget");

        // (a) The hostile case: refused through kube-apiserver, under the webhook's `Fail`.
        let (out, took) = dry_run(env, &dense);
        let refused = text(&out);
        eprintln!(
            "e2e: dense array through kube-apiserver ({:.1} s): {}",
            took.as_secs_f64(),
            refused.trim()
        );
        assert!(!out.status.success(), "the dense array was admitted");
        let bound = format!("the review would take more than {BUDGET_MIB} MiB once read (");
        assert!(refused_over_budget(&refused, &bound), "{refused}");
        // kanon's answer itself, as kube-apiserver got it: 413 naming the bound.
        let started = Instant::now();
        let (status, answer) = post_review(env, &dense_review(&dense));
        let took = started.elapsed();
        let message = answer
            .pointer("/message")
            .and_then(Value::as_str)
            .unwrap_or_default();
        assert_eq!(status, "413", "{answer}");
        assert_eq!(answer["kind"], "Status", "{answer}");
        assert!(
            message.starts_with(&bound) && message.ends_with("read when it passed the bound)"),
            "{answer}"
        );
        eprintln!(
            "e2e: kanon's answer to the dense array, posted directly ({:.2} s): HTTP {status}: {message}",
            took.as_secs_f64()
        );

        // (b) Long strings, few values: judged and admitted.
        let (out, took) = dry_run(env, &strings);
        assert!(out.status.success(), "strings: {}", text(&out));
        eprintln!(
            "e2e: 2.5 MB of strings admitted in {:.1} s",
            took.as_secs_f64()
        );

        // (c) A Pod near etcd's limit: judged, admitted and stored.
        let started = Instant::now();
        let out = env.kubectl_stdin(&["create", "-o", "name", "-f", "-"], &pod);
        assert!(out.status.success(), "the large Pod: {}", text(&out));
        eprintln!(
            "e2e: a {} byte Pod admitted and stored in {:.1} s",
            pod.len(),
            started.elapsed().as_secs_f64()
        );

        // Four hostile ones at once, each refused the same way. Straight to the REST API:
        // four kubectl processes would add their own decoding of 1.5 million values to the
        // apiserver's, on the same two cores.
        let scratch = tempfile::tempdir().expect("a temporary directory");
        let (object, cert, key) = (
            scratch.path().join("dense.json"),
            scratch.path().join("admin.crt"),
            scratch.path().join("admin.key"),
        );
        std::fs::write(&object, &dense).expect("the dense Blob's file");
        std::fs::write(&cert, env.control_plane().client_cert_pem())
            .expect("the admin certificate");
        std::fs::write(&key, env.control_plane().client_key_pem()).expect("the admin key");
        let url = format!(
            "{}/apis/{GROUP}/v1/namespaces/{NS}/blobs?dryRun=All",
            env.control_plane().server()
        );
        let started = Instant::now();
        let answers: Vec<String> = std::thread::scope(|scope| {
            let runs: Vec<_> = (0..4)
                .map(|_| {
                    scope.spawn(|| {
                        let out = Command::new("curl")
                            .args(["-s", "--max-time", "60"])
                            .args(["-H", "Content-Type: application/json"])
                            .arg("--cacert")
                            .arg(env.control_plane().ca_cert_file())
                            .arg("--cert")
                            .arg(&cert)
                            .arg("--key")
                            .arg(&key)
                            .arg("--data-binary")
                            .arg(format!("@{}", object.display()))
                            .arg(&url)
                            .output()
                            .expect("curl runs");
                        // kube-apiserver's refusal is a Status: its message.
                        serde_json::from_slice::<Value>(&out.stdout)
                            .ok()
                            .and_then(|status| status["message"].as_str().map(str::to_string))
                            .unwrap_or_else(|| text(&out))
                    })
                })
                .collect();
            runs.into_iter()
                .map(|run| run.join().expect("a curl thread"))
                .collect()
        });
        for answer in &answers {
            assert!(
                refused_over_budget(answer, &bound),
                "one of four at once: {answer}"
            );
        }
        eprintln!(
            "e2e: four dense arrays at once refused in {:.1} s",
            started.elapsed().as_secs_f64()
        );

        let metrics = env.kanon.metrics();
        let over_budget = reviews_with_result(&metrics, "over_budget") - over_budget_before;
        // One through kubectl, one posted directly, four at once.
        assert!(
            over_budget >= 6.0,
            "{over_budget} reviews counted over budget"
        );
        let after = peak_rss_kib(pid);
        let rise_mib = after.saturating_sub(before) / 1024;
        eprintln!(
            "e2e: kanon peak RSS (VmHWM, debug build) {:.1} MiB before, {:.1} MiB after: a rise of {rise_mib} MiB (limit {MAX_RISE_MIB} MiB) with a {BUDGET_MIB} MiB review budget",
            before as f64 / 1024.0,
            after as f64 / 1024.0,
        );
        assert!(
            rise_mib < MAX_RISE_MIB,
            "kanon's peak RSS rose by {rise_mib} MiB ({before} KiB to {after} KiB)"
        );
    }
}
