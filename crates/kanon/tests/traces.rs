//! `kanon serve` exporting traces of reviews over OTLP/HTTP to a collector written for the
//! test: a review's span is the child of the `traceparent` its caller sent (as kube-apiserver
//! sends one to its webhooks), carries the request's identity, and a collector that is gone
//! costs dropped spans, never an answer. And the decision log, a JSON line per denial, warning
//! and audit-mode finding, with the trace id.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use prost::Message;

/// A loopback port no other test of this binary is given (the kit's).
fn port() -> u16 {
    kanon_control_plane::kanon::free_port().expect("a free port")
}

fn curl(args: &[&str]) -> Output {
    Command::new("curl")
        .args(["-s", "--max-time", "10"])
        .args(args)
        .output()
        .expect("curl runs")
}

/// A span as the collector received it, with its resource's attributes.
#[derive(Debug, Clone)]
struct Received {
    name: String,
    kind: i32,
    trace_id: String,
    span_id: String,
    parent_span_id: String,
    attributes: Vec<KeyValue>,
    resource: Vec<KeyValue>,
}

fn text_of(attributes: &[KeyValue], key: &str) -> Option<String> {
    let value = attributes.iter().find(|kv| kv.key == key)?.value.as_ref()?;
    match value {
        AnyValue {
            value: Some(any_value::Value::StringValue(text)),
        } => Some(text.clone()),
        AnyValue {
            value: Some(any_value::Value::BoolValue(b)),
        } => Some(b.to_string()),
        AnyValue {
            value: Some(any_value::Value::IntValue(i)),
        } => Some(i.to_string()),
        _ => None,
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// An OTLP/HTTP collector: each `POST /v1/traces` body decoded, its spans kept.
struct Collector {
    port: u16,
    spans: Arc<Mutex<Vec<Received>>>,
}

impl Collector {
    fn start() -> Collector {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a port");
        let port = listener.local_addr().expect("an address").port();
        let spans = Arc::new(Mutex::new(Vec::new()));
        let kept = spans.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let kept = kept.clone();
                std::thread::spawn(move || serve(stream, &kept));
            }
        });
        Collector { port, spans }
    }

    fn spans(&self) -> Vec<Received> {
        self.spans.lock().expect("the spans").clone()
    }

    /// Waits for a span that `wanted` accepts.
    fn wait_for(&self, wanted: impl Fn(&Received) -> bool) -> Received {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Some(span) = self.spans().into_iter().find(|s| wanted(s)) {
                return span;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("no such span; received: {:#?}", self.spans());
    }
}

/// Answers the HTTP/1.1 requests of one connection.
fn serve(stream: std::net::TcpStream, kept: &Mutex<Vec<Received>>) {
    let mut writer = match stream.try_clone() {
        Ok(writer) => writer,
        Err(_) => return,
    };
    let mut reader = BufReader::new(stream);
    loop {
        let mut length = 0usize;
        let mut line = String::new();
        let mut first = true;
        loop {
            line.clear();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            if first {
                assert!(line.starts_with("POST /v1/traces "), "{line}");
                first = false;
            }
            let trimmed = line.trim_end();
            if trimmed.is_empty() {
                break;
            }
            if let Some((name, value)) = trimmed.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let request = ExportTraceServiceRequest::decode(body.as_slice()).expect("OTLP protobuf");
        let mut received = Vec::new();
        for resource_spans in request.resource_spans {
            let resource = resource_spans
                .resource
                .map(|r| r.attributes)
                .unwrap_or_default();
            for scope in resource_spans.scope_spans {
                for span in scope.spans {
                    received.push(Received {
                        name: span.name,
                        kind: span.kind,
                        trace_id: hex(&span.trace_id),
                        span_id: hex(&span.span_id),
                        parent_span_id: hex(&span.parent_span_id),
                        attributes: span.attributes,
                        resource: resource.clone(),
                    });
                }
            }
        }
        kept.lock().expect("the spans").extend(received);
        let answer =
            "HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
        if writer.write_all(answer.as_bytes()).is_err() {
            return;
        }
    }
}

const LABEL_POLICY: &str = "apiVersion: policy.kanon.dev/v1alpha1
kind: ClusterOverridePolicy
metadata: {name: mark}
spec:
  resourceSelectors: [{apiVersion: v1, kind: Pod}]
  namespaceSelector: {matchExpressions: [{key: team, operator: DoesNotExist}]}
  overrideRules:
  - overriders:
      plaintext:
      - {op: add, path: /metadata/labels/served-by, value: kanon}
";

/// Pods are refused in `default`, warned of without a `team` label, and passed by a
/// hand-written program (run in a worker process).
const JUDGE_POLICIES: &str = "apiVersion: policy.kanon.dev/v1alpha1
kind: ClusterValidatePolicy
metadata: {name: not-in-default}
spec:
  resourceSelectors: [{apiVersion: v1, kind: Pod}]
  validateRules:
  - targetOperations: [CREATE]
    cel:
      validations: [{expression: \"object.metadata.namespace != 'default'\", message: not in default}]
---
apiVersion: policy.kanon.dev/v1alpha1
kind: ClusterValidatePolicy
metadata: {name: team-label}
spec:
  resourceSelectors: [{apiVersion: v1, kind: Pod}]
  validationActions: [Warn, Audit]
  validateRules:
  - targetOperations: [CREATE]
    cel:
      validations: [{expression: \"has(object.metadata.labels) && 'team' in object.metadata.labels\", message: no team label}]
---
apiVersion: policy.kanon.dev/v1alpha1
kind: ClusterValidatePolicy
metadata: {name: program-check}
spec:
  resourceSelectors: [{apiVersion: v1, kind: Pod}]
  validateRules:
  - targetOperations: [CREATE]
    program: |
      {% set l = namespace(v=[1]) %}{% for i in range(3) %}{% set l.v = l.v + l.v %}{% endfor %}
      valid: true
";

/// `kanon serve --policies` with `extra` flags and `env`.
struct Serving {
    child: Child,
    https: String,
    metrics: String,
    ca: String,
    _dir: tempfile::TempDir,
}

impl Serving {
    fn start(extra: &[&str], env: &[(&str, &str)]) -> Serving {
        let dir = tempfile::tempdir().expect("a directory");
        let policies = dir.path().join("policies");
        std::fs::create_dir_all(&policies).expect("the policy directory");
        std::fs::write(policies.join("mark.yaml"), LABEL_POLICY).expect("the policy");
        std::fs::write(policies.join("judge.yaml"), JUDGE_POLICIES).expect("the policies");
        // The Namespace the policy's selector reads.
        let objects = dir.path().join("namespaces.yaml");
        let namespace = "apiVersion: v1\nkind: Namespace\nmetadata: {name: default, labels: {kubernetes.io/metadata.name: default}}\n";
        std::fs::write(&objects, namespace).expect("the Namespace");
        let certs = dir.path().join("certs");
        let (https, metrics) = (port(), port());
        let child = Command::new(env!("CARGO_BIN_EXE_kanon"))
            .args(["serve", "--policies"])
            .arg(&policies)
            .arg("--objects")
            .arg(&objects)
            .arg("--cert-dir")
            .arg(&certs)
            .args(["--listen", &format!("127.0.0.1:{https}")])
            .args(["--metrics-listen", &format!("127.0.0.1:{metrics}")])
            .args(extra)
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("kanon serve starts");
        let serving = Serving {
            child,
            https: format!("https://127.0.0.1:{https}"),
            metrics: format!("http://127.0.0.1:{metrics}/metrics"),
            ca: certs.join("ca.crt").display().to_string(),
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            let out = curl(&[
                "--cacert",
                &serving.ca,
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                &format!("{}/readyz", serving.https),
            ]);
            if out.stdout == b"200" {
                return serving;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("kanon serve did not become ready");
    }

    /// [`Serving::start`] exporting to `collector` over OTLP/HTTP, each span within 50 ms,
    /// with `extra` flags.
    fn exporting_to(collector: &Collector, extra: &[&str]) -> Serving {
        let endpoint = format!("http://127.0.0.1:{}", collector.port);
        let mut args = vec![
            "--otlp-endpoint",
            &endpoint,
            "--otlp-protocol",
            "http/protobuf",
        ];
        args.extend_from_slice(extra);
        Serving::start(&args, &[("OTEL_BSP_SCHEDULE_DELAY", "50")])
    }

    /// POSTs the Pod-create review to `/mutate` with `headers`: the HTTP status.
    fn review(&self, headers: &[&str]) -> String {
        self.review_at("/mutate", headers)
    }

    /// POSTs the Pod-create review to `path` with `headers`: the HTTP status.
    fn review_at(&self, path: &str, headers: &[&str]) -> String {
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fixtures/admission-reviews/pod-create.json");
        let data = format!("@{}", fixture.display());
        let mut args = vec![
            "--cacert",
            &self.ca,
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
        ];
        for header in headers {
            args.extend(["-H", header]);
        }
        let url = format!("{}{path}?timeout=10s", self.https);
        args.extend([
            "-H",
            "Content-Type: application/json",
            "--data-binary",
            &data,
            &url,
        ]);
        String::from_utf8_lossy(&curl(&args).stdout).into_owned()
    }

    /// The value of a counter on `/metrics`.
    fn counter(&self, name: &str) -> u64 {
        let out = curl(&[&self.metrics]);
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .find_map(|line| line.strip_prefix(&format!("{name} ")))
            .and_then(|value| value.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} on /metrics"))
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const TRACE_ID: &str = "0af7651916cd43dd8448eb211c80319c";
const PARENT_SPAN: &str = "b7ad6b7169203331";

#[test]
fn a_reviews_span_is_the_child_of_the_callers_and_names_the_request() {
    let collector = Collector::start();
    let serving = Serving::exporting_to(&collector, &["--cluster-name", "test-cluster"]);
    let traceparent = format!("traceparent: 00-{TRACE_ID}-{PARENT_SPAN}-01");
    assert_eq!(serving.review(&[&traceparent]), "200");
    let span = collector.wait_for(|s| s.trace_id == TRACE_ID && s.kind == 2);
    assert_eq!(span.name, "POST /mutate");
    assert_eq!(span.parent_span_id, PARENT_SPAN, "{span:#?}");
    // SPAN_KIND_SERVER.
    assert_eq!(span.kind, 2);
    let attribute = |key| text_of(&span.attributes, key);
    assert_eq!(
        attribute("kanon.request.uid").as_deref(),
        Some("1299d386-525b-4032-98ae-1949f69f9cfc")
    );
    assert_eq!(
        attribute("kanon.request.operation").as_deref(),
        Some("CREATE")
    );
    assert_eq!(attribute("kanon.request.kind").as_deref(), Some("Pod"));
    assert_eq!(attribute("kanon.allowed").as_deref(), Some("true"));
    assert_eq!(
        attribute("http.response.status_code").as_deref(),
        Some("200")
    );
    assert_eq!(
        text_of(&span.resource, "service.name").as_deref(),
        Some("kanon")
    );
    assert_eq!(
        text_of(&span.resource, "k8s.cluster.name").as_deref(),
        Some("test-cluster")
    );
    // The Namespace the policy's selector reads was looked up within the review, while the
    // policies that apply were chosen (before any ran).
    let lookup = collector.wait_for(|s| {
        s.trace_id == TRACE_ID
            && text_of(&s.attributes, "kanon.lookup.kind").as_deref() == Some("get")
    });
    assert!(
        text_of(&lookup.attributes, "kanon.lookup.target").is_some_and(|t| t.contains("Namespace")),
        "{lookup:#?}"
    );
    assert_eq!(
        text_of(&lookup.attributes, "kanon.lookup.outcome").as_deref(),
        Some("found"),
        "{lookup:#?}"
    );
    assert_eq!(lookup.parent_span_id, span.span_id);
    // The policy's run is the review span's child, with its outcome.
    let policy = collector
        .wait_for(|s| s.parent_span_id == span.span_id && s.name == "ClusterOverridePolicy/mark");
    assert_eq!(policy.trace_id, TRACE_ID);
    assert_eq!(
        text_of(&policy.attributes, "kanon.outcome").as_deref(),
        Some("mutated")
    );
    assert_eq!(
        text_of(&policy.attributes, "kanon.policy.languages").as_deref(),
        Some("plaintext")
    );

    // The review's duration links its trace: an exemplar on the bucket it fell in.
    let metrics = String::from_utf8_lossy(&curl(&[&serving.metrics]).stdout).into_owned();
    let exemplar = format!("# {{trace_id=\"{TRACE_ID}\"}}");
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("kanon_admission_duration_seconds_bucket")
                && l.contains(&exemplar)),
        "{metrics}"
    );

    // Without a trace context the review starts a trace of its own (sampled: no ratio set).
    assert_eq!(serving.review(&[]), "200");
    let own = collector.wait_for(|s| s.trace_id != TRACE_ID && s.kind == 2);
    assert_eq!(own.name, "POST /mutate");
    assert_eq!(own.parent_span_id, "", "{own:#?}");
    assert!(serving.counter("kanon_trace_spans_exported_total") >= 2);
    assert_eq!(serving.counter("kanon_trace_spans_dropped_total"), 0);

    // A caller's context that says "not sampled" is followed.
    let unsampled = format!("traceparent: 00-{}-{PARENT_SPAN}-00", "1".repeat(32));
    assert_eq!(serving.review(&[&unsampled]), "200");
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        collector
            .spans()
            .iter()
            .all(|s| s.trace_id != "1".repeat(32)),
        "an unsampled trace was exported"
    );
}

#[test]
fn a_collector_that_is_gone_costs_spans_not_answers() {
    // Nothing listens there; one span waits at most, each export is tried alone.
    let endpoint = format!("http://127.0.0.1:{}", port());
    let serving = Serving::start(
        &[
            "--otlp-endpoint",
            &endpoint,
            "--otlp-protocol",
            "http/protobuf",
        ],
        &[
            ("OTEL_BSP_MAX_QUEUE_SIZE", "1"),
            ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "1"),
            ("OTEL_BSP_SCHEDULE_DELAY", "10"),
        ],
    );
    let started = Instant::now();
    for _ in 0..20 {
        assert_eq!(serving.review(&[]), "200");
    }
    // The answers did not wait for the collector (its exports retry for seconds each).
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
    assert!(serving.counter("kanon_trace_spans_dropped_total") > 0);
    assert_eq!(serving.counter("kanon_trace_spans_exported_total"), 0);
}

#[test]
fn a_protocol_kanon_does_not_export_with_is_refused() {
    let out = Command::new(env!("CARGO_BIN_EXE_kanon"))
        .args(["serve", "--policies", ".", "--otlp-protocol", "http/json"])
        .output()
        .expect("kanon runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("`http/json` is not one kanon exports with"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(env!("CARGO_BIN_EXE_kanon"))
        .args(["serve", "--policies", "."])
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "thrift")
        .output()
        .expect("kanon runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("`thrift`"));
}

#[test]
fn a_review_left_out_by_the_ratio_makes_no_span_at_all() {
    let collector = Collector::start();
    let serving = Serving::exporting_to(&collector, &["--trace-sampling-ratio", "0"]);
    // Reviews without a context (their lookups of the Namespace and their programs included)
    // leave nothing, while one whose caller samples it is traced whole.
    for path in ["/mutate", "/validate", "/mutate"] {
        assert_eq!(serving.review_at(path, &[]), "200");
    }
    let traceparent = format!("traceparent: 00-{TRACE_ID}-{PARENT_SPAN}-01");
    assert_eq!(serving.review_at("/validate", &[&traceparent]), "200");
    collector.wait_for(|s| s.trace_id == TRACE_ID && s.name == "program validate");
    std::thread::sleep(Duration::from_millis(300));
    let strays: Vec<String> = collector
        .spans()
        .iter()
        .filter(|s| s.trace_id != TRACE_ID)
        .map(|s| s.name.clone())
        .collect();
    assert!(strays.is_empty(), "spans of untraced reviews: {strays:?}");
}

#[test]
fn a_sandboxed_programs_run_is_a_span_beneath_its_policys() {
    let collector = Collector::start();
    let serving = Serving::exporting_to(&collector, &["--program-workers", "1"]);
    let traceparent = format!("traceparent: 00-{TRACE_ID}-{PARENT_SPAN}-01");
    assert_eq!(serving.review_at("/validate", &[&traceparent]), "200");
    let policy = collector
        .wait_for(|s| s.trace_id == TRACE_ID && s.name == "ClusterValidatePolicy/program-check");
    assert_eq!(
        text_of(&policy.attributes, "kanon.policy.languages").as_deref(),
        Some("program")
    );
    // Beneath it too: the lookup of the Namespace the program reads (no CEL rule before it
    // needed it).
    let program =
        collector.wait_for(|s| s.parent_span_id == policy.span_id && s.name == "program validate");
    assert_eq!(
        text_of(&program.attributes, "kanon.program.runner").as_deref(),
        Some("sandbox")
    );
    assert_eq!(
        text_of(&program.attributes, "kanon.program.outcome").as_deref(),
        Some("returned"),
        "{program:#?}"
    );
}

#[test]
fn each_denial_warning_and_audit_finding_is_a_decision_log_line_with_the_trace_id() {
    let collector = Collector::start();
    let log = tempfile::NamedTempFile::new().expect("a log file");
    let path = log.path().display().to_string();
    let serving = Serving::exporting_to(&collector, &["--decision-log", &path]);
    let traceparent = format!("traceparent: 00-{TRACE_ID}-{PARENT_SPAN}-01");
    assert_eq!(serving.review_at("/validate", &[&traceparent]), "200");
    // A review that finds nothing to say leaves no line.
    assert_eq!(serving.review_at("/mutate", &[]), "200");
    let deadline = Instant::now() + Duration::from_secs(10);
    let lines: Vec<serde_json::Value> = loop {
        let text = std::fs::read_to_string(&path).expect("the log");
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect();
        if lines.len() >= 3 || Instant::now() > deadline {
            break lines;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let decisions: Vec<(&str, Option<&str>)> = lines
        .iter()
        .map(|l| (l["decision"].as_str().unwrap_or(""), l["policy"].as_str()))
        .collect();
    assert_eq!(
        decisions,
        [
            ("deny", Some("ClusterValidatePolicy/not-in-default")),
            ("warn", Some("ClusterValidatePolicy/team-label")),
            ("audit", None),
        ],
        "{lines:#?}"
    );
    let deny = &lines[0];
    assert_eq!(
        deny["message"],
        "ClusterValidatePolicy/not-in-default: not in default"
    );
    assert_eq!(deny["webhook"], "validate");
    assert_eq!(deny["allowed"], false);
    assert_eq!(
        deny["request"]["uid"],
        "1299d386-525b-4032-98ae-1949f69f9cfc"
    );
    assert_eq!(deny["request"]["operation"], "CREATE");
    assert_eq!(deny["request"]["kind"], "Pod");
    assert_eq!(deny["request"]["namespace"], "default");
    assert!(deny["user"]["username"].is_string(), "{deny:#}");
    assert_eq!(deny["traceId"], TRACE_ID);
    assert!(
        deny["time"].as_str().is_some_and(|t| t.ends_with('Z')),
        "{deny:#}"
    );
    assert!(
        lines[2]["auditAnnotation"]["value"].is_string(),
        "{lines:#?}"
    );
    assert_eq!(serving.counter("kanon_decision_log_lines_total"), 3);
    assert_eq!(serving.counter("kanon_decision_log_dropped_total"), 0);
}
