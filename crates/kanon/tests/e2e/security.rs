//! Who may reach what, through the real apiserver: a namespaced policy reads nothing outside
//! its namespace (and cluster-scoped kinds) and no Secret; Secrets need the operator's
//! `--allow-secret-lookups`; and tokens, object contents and request bodies stay out of the
//! answers, the metrics, the logs and the policies' status. See SECURITY.md.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use crate::Scenario;
use crate::admission::{install, policy};
use crate::env::{Env, Restarted, text};

pub const SCENARIOS: &[Scenario] = &[
    (
        "security::a_namespaced_policy_reads_only_its_namespace_and_no_secret",
        a_namespaced_policy_reads_only_its_namespace_and_no_secret,
    ),
    (
        "security::secret_lookups_need_the_operators_flag",
        secret_lookups_need_the_operators_flag,
    ),
    (
        "security::tokens_and_object_contents_stay_out_of_answers_metrics_logs_and_status",
        tokens_and_object_contents_stay_out_of_answers_metrics_logs_and_status,
    ),
];

/// A Pod in `namespace` with `annotations` (and, optionally, an owner).
fn pod_with(namespace: &str, name: &str, annotations: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations},
        "spec": {"containers": [{"name": "app", "image": "registry.example/app:1.0"}]},
    })
}

fn label(object: &Value, key: &str) -> Option<String> {
    object
        .pointer(&format!("/metadata/labels/{key}"))
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// `kubectl create -o json` of `object`: (the created object or the refusal, warnings).
fn create_with_warnings(env: &Env, object: &Value) -> (Result<Value, String>, String) {
    let out = env.kubectl_stdin(&["create", "-o", "json", "-f", "-"], &object.to_string());
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if out.status.success() {
        let created = serde_json::from_slice(&out.stdout).expect("JSON");
        (Ok(created), stderr)
    } else {
        (Err(text(&out)), stderr)
    }
}

fn a_namespaced_policy_reads_only_its_namespace_and_no_secret(env: &mut Env) {
    let (mine, theirs) = ("sec-mine", "sec-theirs");
    env.namespace(mine, json!({}));
    env.namespace(theirs, json!({}));
    for ns in [mine, theirs] {
        env.apply(&json!({"apiVersion": "v1", "kind": "ConfigMap",
                          "metadata": {"name": "cfg", "namespace": ns, "labels": {"app": "cfg"}},
                          "data": {"owner": ns}}));
    }
    let password = "sec-mine-pw-7d1e";
    env.apply(&json!({"apiVersion": "v1", "kind": "Secret",
                      "metadata": {"name": "db", "namespace": mine},
                      "stringData": {"password": password, "token": password}}));

    // Written down, another namespace is refused when the policy is applied: by name, by label
    // selector, and a token's Secret.
    let refused_at_write = [
        json!({"from": "k8s", "path": "/data/owner", "k8s": {
            "apiVersion": "v1", "kind": "ConfigMap", "namespace": theirs, "name": "cfg"}}),
        json!({"from": "k8s", "path": "$[*].data.owner", "k8s": {
            "apiVersion": "v1", "kind": "ConfigMap", "namespace": theirs,
            "labelSelector": {"matchLabels": {"app": "cfg"}}}}),
        json!({"from": "http", "http": {"url": "https://checker.example/",
            "auth": {"secretRef": {"namespace": theirs, "name": "db"}}}}),
    ];
    for data_ref in refused_at_write {
        let reaching = policy(
            "ValidatePolicy",
            Some(mine),
            "sec-reaching",
            json!({"validateRules": [{"template": {"type": "condition", "condition": {
                "cond": "Exist", "dataRef": data_ref}}}]}),
        );
        let refused = env
            .apply_policy(&reaching)
            .expect_err("refused when written");
        assert!(
            refused.contains("only in its own namespace `sec-mine`, not `sec-theirs`"),
            "{refused}"
        );
    }

    // A namespace computed per request: its own works, another is an evaluation error under
    // the policy's failurePolicy (Fail: the request is denied, the message names why).
    install(
        env,
        &policy(
            "OverridePolicy",
            Some(mine),
            "sec-reach",
            json!({"resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
                   "failurePolicy": "Fail",
                   "overrideRules": [{"overriders": {"template": {"type": "labels", "operation": "add",
                       "path": "seen", "valueRef": {"from": "k8s", "path": "/data/owner", "k8s": {
                           "apiVersion": "v1", "kind": "ConfigMap",
                           "namespace": "{{ object.metadata.annotations.target }}", "name": "cfg"}}}}}]}),
        ),
    );
    let own = env
        .create(&pod_with(mine, "own", json!({"target": mine})))
        .expect("its own namespace is readable");
    assert_eq!(label(&own, "seen").as_deref(), Some(mine), "{own}");
    let refused = env
        .create(&pod_with(mine, "other", json!({"target": theirs})))
        .expect_err("another namespace is not");
    assert!(
        refused.contains("OverridePolicy/sec-mine/sec-reach")
            && refused.contains(
                "a namespaced policy reads objects only in its own namespace `sec-mine`, not `sec-theirs`"
            ),
        "{refused}"
    );
    assert!(!refused.contains("\"sec-theirs\"]"), "{refused}");
    env.delete_policy("OverridePolicy", Some(mine), "sec-reach");

    // A Secret of its own namespace, by name and as the owner: refused without the operator's
    // flag. Under `Ignore` the request passes with a warning that says why.
    install(
        env,
        &policy(
            "ValidatePolicy",
            Some(mine),
            "sec-secret-ignored",
            json!({"resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
                   "failurePolicy": "Ignore",
                   "validateRules": [{"template": {"type": "condition", "condition": {
                       "cond": "Exist", "dataRef": {"from": "k8s", "path": "/data/password", "k8s": {
                           "apiVersion": "v1", "kind": "Secret", "name": "db", "namespace": mine}},
                       "message": "{{ data }}"}}}]}),
        ),
    );
    let (created, warnings) = create_with_warnings(env, &pod_with(mine, "ignored", json!({})));
    created.expect("admitted under Ignore");
    assert!(
        warnings.contains("ValidatePolicy/sec-mine/sec-secret-ignored")
            && warnings.contains(
                "Secrets are not readable through references unless the operator allows it"
            ),
        "{warnings}"
    );
    env.delete_policy("ValidatePolicy", Some(mine), "sec-secret-ignored");
    install(
        env,
        &policy(
            "OverridePolicy",
            Some(mine),
            "sec-secret-owner",
            json!({"resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
                   "failurePolicy": "Fail",
                   "overrideRules": [{"overriders": {"template": {"type": "labels", "operation": "add",
                       "path": "owner-pw", "valueRef": {"from": "owner", "path": "/data/password"}}}}]}),
        ),
    );
    let secret = env
        .get("v1", "Secret", "secrets", Some(mine), "db")
        .expect("the Secret");
    let mut owned = pod_with(mine, "owned", json!({}));
    owned["metadata"]["ownerReferences"] = json!([{
        "apiVersion": "v1", "kind": "Secret", "name": "db",
        "uid": secret["metadata"]["uid"], "controller": true,
    }]);
    let refused = env.create(&owned).expect_err("its owner is a Secret");
    assert!(
        refused.contains("OverridePolicy/sec-mine/sec-secret-owner")
            && refused.contains("Secrets are not readable through references"),
        "{refused}"
    );
    use base64::Engine as _;
    let encoded = base64::engine::general_purpose::STANDARD.encode(password);
    for shown in [&refused, &warnings] {
        assert!(
            !shown.contains(password) && !shown.contains(&encoded),
            "{shown}"
        );
    }
    env.delete_policy("OverridePolicy", Some(mine), "sec-secret-owner");
}

fn secret_lookups_need_the_operators_flag(env: &mut Env) {
    let ns = "sec-flag";
    env.namespace(ns, json!({}));
    env.namespace("sec-flag-other", json!({}));
    // Nine characters: base64 without padding, a valid label value.
    let password = "hunter2xy";
    env.apply(&json!({"apiVersion": "v1", "kind": "Secret",
                      "metadata": {"name": "db", "namespace": ns},
                      "stringData": {"password": password}}));
    install(
        env,
        &policy(
            "ClusterOverridePolicy",
            None,
            "sec-flag-read",
            json!({"resourceSelectors": [{"apiVersion": "v1", "kind": "Pod", "namespace": ns}],
                   "overrideRules": [{"overriders": {"template": {"type": "labels", "operation": "add",
                       "path": "pw", "valueRef": {"from": "k8s", "path": "/data/password", "k8s": {
                           "apiVersion": "v1", "kind": "Secret", "namespace": ns, "name": "db"}}}}}]}),
        ),
    );
    // A namespaced policy elsewhere that tries to reach the same Secret per request.
    install(
        env,
        &policy(
            "OverridePolicy",
            Some("sec-flag-other"),
            "sec-flag-reach",
            json!({"resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
                   "overrideRules": [{"overriders": {"template": {"type": "labels", "operation": "add",
                       "path": "pw", "valueRef": {"from": "k8s", "path": "/data/password", "k8s": {
                           "apiVersion": "v1", "kind": "Secret",
                           "namespace": "{{ object.metadata.annotations.target }}", "name": "db"}}}}}]}),
        ),
    );
    let without_flag = |env: &Env, name: &str| {
        let refused = env
            .create(&pod_with(ns, name, json!({})))
            .expect_err("Secrets refused without the flag");
        assert!(
            refused.contains("ClusterOverridePolicy/sec-flag-read")
                && refused.contains("kanon serve --allow-secret-lookups"),
            "{refused}"
        );
        assert!(!refused.contains(password), "{refused}");
    };
    without_flag(env, "before");

    {
        let restarted = Restarted::with(env, &["--allow-secret-lookups"]);
        let env = &*restarted.env;
        // The cluster policy reads it now (the label is the Secret's data, base64).
        let created = env
            .create(&pod_with(ns, "allowed", json!({})))
            .expect("readable with the flag");
        use base64::Engine as _;
        let encoded = base64::engine::general_purpose::STANDARD.encode(password);
        assert_eq!(label(&created, "pw"), Some(encoded), "{created}");
        // The namespaced policy still cannot leave its namespace.
        let refused = env
            .create(&pod_with("sec-flag-other", "reach", json!({"target": ns})))
            .expect_err("another namespace, flag or not");
        assert!(
            refused.contains("OverridePolicy/sec-flag-other/sec-flag-reach")
                && refused.contains("only in its own namespace `sec-flag-other`, not `sec-flag`"),
            "{refused}"
        );
    }
    // Without the flag again (the guard restarted kanon as the suite runs it).
    without_flag(env, "after");
    env.delete_policy("ClusterOverridePolicy", None, "sec-flag-read");
    env.delete_policy("OverridePolicy", Some("sec-flag-other"), "sec-flag-reach");
}

/// A service for `http` references that fails in every way, echoing the `Authorization` header
/// it gets: `/401` (an error page quoting it), `/text` (200, not JSON), `/big` (2 MiB),
/// `/slow` (answers after 3 s). It records the headers it received.
struct FailingService {
    port: u16,
    authorizations: Arc<Mutex<Vec<String>>>,
}

impl FailingService {
    fn start() -> FailingService {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("its port").port();
        let authorizations = Arc::new(Mutex::new(Vec::new()));
        let seen = authorizations.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let seen = seen.clone();
                std::thread::spawn(move || Self::serve(stream, &seen));
            }
        });
        FailingService {
            port,
            authorizations,
        }
    }

    fn serve(stream: TcpStream, seen: &Mutex<Vec<String>>) {
        let Ok(read_half) = stream.try_clone() else {
            return;
        };
        let mut reader = BufReader::new(read_half);
        let mut stream = stream;
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
        let mut auth = String::new();
        let mut length = 0usize;
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                match name.to_ascii_lowercase().as_str() {
                    "authorization" => auth = value.trim().to_string(),
                    "content-length" => length = value.trim().parse().unwrap_or(0),
                    _ => {}
                }
            }
        }
        let mut body = vec![0; length];
        let _ = reader.read_exact(&mut body);
        seen.lock().unwrap().push(auth.clone());
        let (status, content_type, body) = match path.split('?').next().unwrap_or_default() {
            "/401" => (
                "401 Unauthorized",
                "text/plain",
                format!("invalid credentials: {auth}").into_bytes(),
            ),
            "/text" => ("200 OK", "text/plain", format!("hello {auth}").into_bytes()),
            "/big" => {
                let mut big = format!("{{\"auth\": \"{auth}\", \"pad\": \"").into_bytes();
                big.resize(2 * 1024 * 1024, b'x');
                ("200 OK", "application/json", big)
            }
            "/slow" => {
                std::thread::sleep(Duration::from_secs(3));
                ("200 OK", "application/json", b"{}".to_vec())
            }
            _ => ("404 Not Found", "text/plain", Vec::new()),
        };
        let head = format!(
            "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        );
        let _ = stream.write_all(head.as_bytes());
        let _ = stream.write_all(&body);
    }
}

/// The metric families kanon documents (README, `kanon-webhook/src/metrics.rs`,
/// `kanon-cluster/src/metrics.rs`, `kanon-cluster/src/certificates.rs`).
const FAMILIES: &[&str] = &[
    "kanon_admission_requests",
    "kanon_admission_duration_seconds",
    "kanon_policy_evaluations",
    "kanon_policy_patches",
    "kanon_policy_rejections",
    "kanon_policy_errors",
    "kanon_policies",
    "kanon_ready",
    "kanon_policy_reload_failures",
    "kanon_lookups",
    "kanon_lookup_duration_seconds",
    "kanon_lookup_errors",
    "kanon_policy_compilations",
    "kanon_policies_invalid",
    "kanon_policy_watch_errors",
    "kanon_status_writes",
    "kanon_certificate_expiry_timestamp_seconds",
    "kanon_certificate_renewals",
    "kanon_connections",
    "kanon_connections_shed",
    "kanon_reviews_shed",
    "kanon_review_body_bytes",
    "kanon_exceptions_applied",
    "kanon_policy_results",
    "kanon_audit_duration_seconds",
    "kanon_audits",
    "kanon_audit_objects_scanned",
    "kanon_audit_leader",
    "kanon_audit_report_writes",
    "kanon_audit_report_cuts",
    "kanon_trace_spans_exported",
    "kanon_trace_spans_dropped",
    "kanon_trace_spans_failed",
    "kanon_decision_log_lines",
    "kanon_decision_log_dropped",
    "kanon_events_written",
    "kanon_events_series_updates",
    "kanon_events_aggregated",
    "kanon_events_dropped",
];

/// Checks every family and every label value of a scrape against the documented, bounded
/// sets; returns the label values seen.
fn check_exposition(metrics: &str) -> BTreeSet<String> {
    let mut values = BTreeSet::new();
    for line in metrics.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let name = rest.split_whitespace().next().unwrap_or_default();
            assert!(FAMILIES.contains(&name), "undocumented family {name}");
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let Some((series, _value)) = line.rsplit_once(' ') else {
            panic!("not a sample: {line}");
        };
        let Some((_name, labels)) = series.split_once('{') else {
            continue;
        };
        let labels = labels.trim_end_matches('}');
        for pair in labels.split("\",").filter(|p| !p.is_empty()) {
            let (key, value) = pair
                .split_once("=\"")
                .unwrap_or_else(|| panic!("a label: {pair} in {line}"));
            let value = value.trim_end_matches('"');
            let plausible_kind = |v: &str| {
                v.is_empty()
                    || (v.len() <= 63
                        && v.starts_with(|c: char| c.is_ascii_alphabetic())
                        && v.chars().all(|c| c.is_ascii_alphanumeric()))
            };
            let ok = match key {
                "webhook" => ["mutate", "validate"].contains(&value),
                "operation" => ["CREATE", "UPDATE", "DELETE", "CONNECT", ""].contains(&value),
                "result" => [
                    "allowed",
                    "denied",
                    "patched",
                    "invalid",
                    "too_large",
                    "over_budget",
                    "not_ready",
                    "ready",
                    "written",
                    "failed",
                    // Audit findings.
                    "pass",
                    "fail",
                    "warn",
                    "error",
                    "skip",
                ]
                .contains(&value),
                "outcome" => ["finished", "handed_over", "failed", "ok", "error"].contains(&value),
                "kind" => plausible_kind(value),
                "policy" => {
                    let mut parts = value.split('/');
                    let kind = parts.next().unwrap_or_default();
                    kanon_api::PolicyKind::from_kind(kind).is_some()
                        && parts.all(|p| {
                            !p.is_empty()
                                && p.chars().all(|c| {
                                    c.is_ascii_lowercase()
                                        || c.is_ascii_digit()
                                        || c == '-'
                                        || c == '.'
                                })
                        })
                }
                "ignored" => ["true", "false"].contains(&value),
                "source" => ["k8s", "namespace", "http", "directory", "cluster"].contains(&value),
                "cache" => ["hit", "miss"].contains(&value),
                "listener" => ["webhook", "metrics"].contains(&value),
                "reason" => [
                    "not_synced",
                    "timed_out",
                    "forbidden",
                    "unknown_type",
                    "unavailable",
                    "failed",
                    "evicted",
                    "refused",
                    "header_timeout",
                    "write_timeout",
                    "body_budget",
                    "slow_body",
                    "body_timeout",
                    // A policy error's cause (RuleError::reason).
                    "deadline",
                    "invalid_policy",
                    "not_found",
                    "reference",
                    "program",
                    "cel",
                    "patch",
                    "defect",
                    // Kubernetes Events not written.
                    "queue_full",
                    "backlog_full",
                    "rate_limited",
                    "cache_full",
                ]
                .contains(&value),
                "action" => ["denied", "warned", "audited"].contains(&value),
                "certificate" => ["ca", "serving"].contains(&value),
                // One of the first (exception, policy) pairs counted, else `other`.
                "exception" => value == "other" || value.starts_with("PolicyException/"),
                "cut" => ["results", "replaced"].contains(&value),
                "le" => value.parse::<f64>().is_ok() || value == "+Inf",
                _ => false,
            };
            assert!(
                ok,
                "label {key}=\"{value}\" is not in its bounded set: {line}"
            );
            values.insert(value.to_string());
        }
    }
    values
}

fn tokens_and_object_contents_stay_out_of_answers_metrics_logs_and_status(env: &mut Env) {
    let ns = "sec-quiet";
    env.namespace(ns, json!({}));
    let token = "e2e-bearer-T0k3n-5c9f1a";
    let object_secret = "pod-annotation-S3CR3T-81b2";
    let env_secret = "pod-env-S3CR3T-e4d7";
    env.apply(&json!({"apiVersion": "v1", "kind": "Secret",
                      "metadata": {"name": "api-token", "namespace": ns},
                      "stringData": {"token": token}}));
    let service = FailingService::start();
    let paths = [
        ("/401", None),
        ("/text", None),
        ("/big", None),
        ("/slow", Some(1)),
    ];
    for (path, timeout) in paths {
        let name = format!("sec-quiet-{}", path.trim_start_matches('/'));
        let mut http = json!({
            "url": format!("http://127.0.0.1:{}{path}", service.port),
            "params": {"name": "{{ object.metadata.name }}"},
            "auth": {"secretRef": {"namespace": ns, "name": "api-token"}},
        });
        if let Some(seconds) = timeout {
            http["timeoutSeconds"] = json!(seconds);
        }
        install(
            env,
            &policy(
                "ClusterValidatePolicy",
                None,
                &name,
                json!({"resourceSelectors": [{"apiVersion": "v1", "kind": "Pod", "namespace": ns}],
                       "failurePolicy": "Ignore",
                       "validateRules": [{"template": {"type": "condition", "condition": {
                           "cond": "Exist", "dataRef": {"from": "http", "http": http},
                           "message": "{{ data | tojson }}"}}}]}),
            ),
        );
    }
    let mut pod = pod_with(ns, "quiet", json!({"db-password": object_secret}));
    pod["spec"]["containers"][0]["env"] = json!([{"name": "PASSWORD", "value": env_secret}]);
    let (created, warnings) = create_with_warnings(env, &pod);
    created.expect("admitted: every failing policy is Ignore");
    // Each failure is reported, by what went wrong, without the token.
    for expected in [
        "ClusterValidatePolicy/sec-quiet-401",
        "answered HTTP 401: invalid credentials: Bearer <redacted>",
        "ClusterValidatePolicy/sec-quiet-text",
        "answered with a body that is not JSON",
        "ClusterValidatePolicy/sec-quiet-big",
        "larger than the limit of 1048576 bytes",
        "ClusterValidatePolicy/sec-quiet-slow",
        "timed out after 1s",
    ] {
        assert!(warnings.contains(expected), "{expected}: {warnings}");
    }
    let sent = service.authorizations.lock().unwrap().clone();
    assert!(
        sent.iter().any(|a| a == &format!("Bearer {token}")),
        "the service got the token: {sent:?}"
    );

    let metrics = env.kanon.metrics();
    assert!(
        metrics.contains("kanon_lookup_errors_total{source=\"http\",reason=\"timed_out\"}")
            && metrics.contains("kanon_policy_errors_total{policy=\"ClusterValidatePolicy/sec-quiet-401\",ignored=\"true\",reason=\"reference\"}"),
        "{metrics}"
    );
    let values = check_exposition(&metrics);
    assert!(
        values.contains("ClusterValidatePolicy/sec-quiet-slow"),
        "{values:?}"
    );
    // Give the status writer a moment, then read every policy of the scenario.
    std::thread::sleep(Duration::from_millis(300));
    let mut statuses = String::new();
    for (path, _) in paths {
        let name = format!("sec-quiet-{}", path.trim_start_matches('/'));
        let found = env
            .policy("ClusterValidatePolicy", None, &name)
            .expect("the policy");
        statuses.push_str(&found.to_string());
    }
    let log = std::fs::read_to_string(env.kanon.log()).unwrap_or_default();
    assert!(log.contains("HTTP lookup"), "the log has the lookups");
    for (what, shown) in [
        ("warnings", &warnings),
        ("metrics", &metrics),
        ("log", &log),
        ("status", &statuses),
    ] {
        for secret in [token, object_secret, env_secret] {
            assert!(!shown.contains(secret), "{what} show {secret}:\n{shown}");
        }
    }
    for (path, _) in paths {
        let name = format!("sec-quiet-{}", path.trim_start_matches('/'));
        env.delete_policy("ClusterValidatePolicy", None, &name);
    }
}
