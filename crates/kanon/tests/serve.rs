//! `kanon serve --policies DIR` end to end: the binary, real TLS, curl as the client.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

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

struct Server {
    child: Child,
    https: String,
    metrics: String,
    ca: String,
}

impl Server {
    fn start(policies: &Path, certs: &Path) -> Server {
        Server::start_with(policies, certs, &[])
    }

    fn start_with(policies: &Path, certs: &Path, extra: &[&str]) -> Server {
        let (https, metrics) = (port(), port());
        let child = Command::new(env!("CARGO_BIN_EXE_kanon"))
            .args(["serve", "--policies"])
            .arg(policies)
            .arg("--cert-dir")
            .arg(certs)
            .args([
                "--listen",
                &format!("127.0.0.1:{https}"),
                "--metrics-listen",
                &format!("127.0.0.1:{metrics}"),
            ])
            .args(["--reload-interval-ms", "100"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kanon serve starts");
        let server = Server {
            child,
            https: format!("https://127.0.0.1:{https}"),
            metrics: format!("http://127.0.0.1:{metrics}"),
            ca: certs.join("ca.crt").display().to_string(),
        };
        server.wait_until(|s| s.get("/readyz").0 == "200");
        server
    }

    /// (HTTP status, body) of a GET over HTTPS.
    fn get(&self, path: &str) -> (String, String) {
        let out = curl(&[
            "--cacert",
            &self.ca,
            "-w",
            "\n%{http_code}",
            &format!("{}{path}", self.https),
        ]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", text.as_str()));
        (code.to_string(), body.to_string())
    }

    fn post(&self, path: &str, file: &Path) -> (String, serde_json::Value) {
        self.post_within(path, file, "10s")
    }

    /// POSTs `file` with `?timeout=` as kube-apiserver sends it.
    fn post_within(&self, path: &str, file: &Path, timeout: &str) -> (String, serde_json::Value) {
        let data = format!("@{}", file.display());
        let out = curl(&[
            // Longer than any review's timeout here (the last `--max-time` counts): kanon, not
            // curl, must be what ends a slow review.
            "--max-time",
            "40",
            "--cacert",
            &self.ca,
            "-H",
            "Content-Type: application/json",
            "--data-binary",
            &data,
            "-w",
            "\n%{http_code}",
            &format!("{}{path}?timeout={timeout}", self.https),
        ]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", text.as_str()));
        (
            code.to_string(),
            serde_json::from_str(body).unwrap_or(serde_json::Value::Null),
        )
    }

    fn wait_until(&self, ok: impl Fn(&Server) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if ok(self) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("kanon serve did not get there in time");
    }

    /// Sends SIGTERM and returns the exit status and what kanon wrote to stderr.
    fn stop_with_stderr(mut self) -> (Option<i32>, String) {
        let stderr = self.child.stderr.take();
        let code = self.stop();
        let mut text = String::new();
        if let Some(mut stderr) = stderr {
            let _ = std::io::Read::read_to_string(&mut stderr, &mut text);
        }
        (code, text)
    }

    /// Sends SIGTERM and returns the exit status.
    fn stop(mut self) -> Option<i32> {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        None
    }
}

fn fixture(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/admission-reviews")
        .join(name)
}

const LABEL_POLICY: &str = "apiVersion: policy.kanon.dev/v1alpha1
kind: ClusterOverridePolicy
metadata: {name: mark}
spec:
  resourceSelectors: [{apiVersion: v1, kind: Pod}]
  overrideRules:
  - overriders:
      plaintext:
      - {op: add, path: /metadata/labels, value: {served-by: kanon}}
";

#[test]
fn serves_reviews_reloads_policies_and_stops_on_sigterm() {
    let policies = tempfile::tempdir().unwrap();
    let certs = tempfile::tempdir().unwrap();
    std::fs::write(policies.path().join("mark.yaml"), LABEL_POLICY).unwrap();
    let server = Server::start(policies.path(), certs.path());
    assert!(certs.path().join("tls.crt").exists() && certs.path().join("ca.crt").exists());
    assert_eq!(server.get("/healthz").0, "200");

    // A Pod CREATE gets the label patch, as base64 JSONPatch, uid echoed.
    let (code, review) = server.post("/mutate", &fixture("pod-create.json"));
    assert_eq!(code, "200");
    let response = &review["response"];
    assert_eq!(response["allowed"], true);
    assert_eq!(response["patchType"], "JSONPatch");
    assert!(response["patch"].is_string(), "{review}");
    assert!(response["uid"].as_str().is_some_and(|u| !u.is_empty()));

    // Not a review: 400 with a message.
    let junk = policies.path().join("junk.txt");
    std::fs::write(&junk, "not json").unwrap();
    let (code, review) = server.post("/validate", &junk);
    assert_eq!(code, "400");
    assert!(
        review["response"]["status"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{review}"
    );

    // Removing the policy is picked up without a restart: no patch any more.
    std::fs::remove_file(policies.path().join("mark.yaml")).unwrap();
    server.wait_until(|s| {
        s.post("/mutate", &fixture("pod-create.json")).1["response"]["patch"].is_null()
    });

    // Metrics on the plain listener.
    let out = curl(&[&format!("{}/metrics", server.metrics)]);
    let metrics = String::from_utf8_lossy(&out.stdout);
    assert!(
        metrics.contains("kanon_admission_requests_total"),
        "{metrics}"
    );

    assert_eq!(server.stop(), Some(0));
}

/// Pods in namespaces labelled env=prod need a `team` label.
const PROD_TEAM_POLICY: &str = "apiVersion: policy.kanon.dev/v1alpha1
kind: ClusterValidatePolicy
metadata: {name: prod-needs-team}
spec:
  namespaceSelector:
    matchLabels: {env: prod}
  resourceSelectors: [{apiVersion: v1, kind: Pod}]
  validateRules:
  - template:
      type: condition
      condition:
        cond: NotExist
        dataRef: {from: current, path: /metadata/labels/team}
        message: 'Pod {{ object.metadata.name }} in {{ object.metadata.namespace }} has no team label'
";

/// A Pod's `env` label must be the name of a registered environment: a ConfigMap of
/// `platform` found by label selector (a `k8s` reference that lists objects).
const REGISTERED_ENV_POLICY: &str = "apiVersion: policy.kanon.dev/v1alpha1
kind: ClusterValidatePolicy
metadata: {name: registered-envs}
spec:
  resourceSelectors: [{apiVersion: v1, kind: Pod}]
  validateRules:
  - template:
      type: condition
      condition:
        cond: NotIn
        dataRef: {from: current, path: /metadata/labels/env}
        valueRef:
          from: k8s
          path: '$[*].data.name'
          k8s:
            apiVersion: v1
            kind: ConfigMap
            namespace: platform
            labelSelector:
              matchLabels: {example.com/registry: env}
        message: 'environment {{ object.metadata.labels.env }} is not registered'
";

fn namespaces(shop_env: &str) -> String {
    format!(
        "apiVersion: v1
kind: Namespace
metadata: {{name: payments, labels: {{env: prod}}}}
---
apiVersion: v1
kind: Namespace
metadata: {{name: shop, labels: {{env: {shop_env}}}}}
"
    )
}

const ENVIRONMENTS: &str = "apiVersion: v1
kind: ConfigMap
metadata:
  name: env-test
  namespace: platform
  labels: {example.com/registry: env}
data: {name: test}
";

/// The Pod CREATE review of the fixture, moved to `namespace` with the `env` label `env`,
/// written into `dir`.
fn pod_review(dir: &Path, namespace: &str, env: &str) -> std::path::PathBuf {
    let text = std::fs::read_to_string(fixture("pod-create.json")).unwrap();
    let mut review: serde_json::Value = serde_json::from_str(&text).unwrap();
    review["request"]["namespace"] = namespace.into();
    review["request"]["object"]["metadata"]["namespace"] = namespace.into();
    review["request"]["object"]["metadata"]["labels"]["env"] = env.into();
    let path = dir.join(format!("review-{namespace}-{env}.json"));
    std::fs::write(&path, serde_json::to_vec(&review).unwrap()).unwrap();
    path
}

/// (allowed, message) of a `/validate` answer.
fn verdict_of(server: &Server, review: &Path) -> (bool, String) {
    let (code, answer) = server.post("/validate", review);
    assert_eq!(code, "200", "{answer}");
    let response = &answer["response"];
    (
        response["allowed"]
            .as_bool()
            .unwrap_or_else(|| panic!("{answer}")),
        response["status"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}

#[test]
fn standalone_objects_stand_for_the_cluster_and_are_reloaded() {
    let policies = tempfile::tempdir().unwrap();
    let certs = tempfile::tempdir().unwrap();
    let objects = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    std::fs::write(policies.path().join("prod.yaml"), PROD_TEAM_POLICY).unwrap();
    std::fs::write(policies.path().join("envs.yaml"), REGISTERED_ENV_POLICY).unwrap();
    // A file and a directory, each given with its own --objects.
    let namespaces_file = objects.path().join("namespaces.yaml");
    std::fs::write(&namespaces_file, namespaces("staging")).unwrap();
    let platform = objects.path().join("platform");
    std::fs::create_dir(&platform).unwrap();
    std::fs::write(platform.join("environments.yaml"), ENVIRONMENTS).unwrap();
    let server = Server::start_with(
        policies.path(),
        certs.path(),
        &[
            "--objects",
            &namespaces_file.display().to_string(),
            "--objects",
            &platform.display().to_string(),
        ],
    );

    // namespaceSelector over the given Namespaces: payments is env=prod, so its Pod without a
    // team is judged and denied; shop is env=staging, so its Pod is not judged.
    let (allowed, message) = verdict_of(&server, &pod_review(work.path(), "payments", "test"));
    assert!(!allowed);
    assert_eq!(
        message,
        "ClusterValidatePolicy/prod-needs-team: Pod nginx in payments has no team label"
    );
    let in_shop = pod_review(work.path(), "shop", "test");
    assert_eq!(verdict_of(&server, &in_shop), (true, String::new()));
    // A namespace the objects do not hold: its labels are unknown, and the policy
    // (failurePolicy Fail) denies saying so.
    let (allowed, message) = verdict_of(&server, &pod_review(work.path(), "nowhere", "test"));
    assert!(!allowed);
    assert!(
        message.contains("namespaceSelector: namespace `nowhere` was not found"),
        "{message}"
    );
    // A `k8s` reference by label selector lists the given ConfigMaps: `test` is registered,
    // `qa` is not.
    let (allowed, message) = verdict_of(&server, &pod_review(work.path(), "shop", "qa"));
    assert!(!allowed);
    assert_eq!(
        message,
        "ClusterValidatePolicy/registered-envs: environment qa is not registered"
    );

    // The objects are reloaded on change, like the policies: shop becomes env=prod.
    std::fs::write(&namespaces_file, namespaces("prod")).unwrap();
    server.wait_until(|s| !verdict_of(s, &in_shop).0);
    assert_eq!(
        verdict_of(&server, &in_shop).1,
        "ClusterValidatePolicy/prod-needs-team: Pod nginx in shop has no team label"
    );
    // A broken objects file is reported, and the last good objects keep serving.
    std::fs::write(&namespaces_file, "apiVersion: v1\nmetadata: {name: shop}\n").unwrap();
    std::thread::sleep(Duration::from_millis(1000));
    assert!(!verdict_of(&server, &in_shop).0);
    let (code, stderr) = server.stop_with_stderr();
    assert_eq!(code, Some(0));
    assert!(
        stderr.contains("cannot reload the objects; the previous objects stay")
            && stderr.contains(&format!(
                "{}: object has no kind",
                namespaces_file.display()
            )),
        "{stderr}"
    );
}

/// Runs `kanon serve --policies DIR` with `extra` until it exits (within 30 s): its exit
/// status and stderr.
fn serve_until_exit(policies: &Path, certs: &Path, extra: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kanon"))
        .args(["serve", "--policies"])
        .arg(policies)
        .arg("--cert-dir")
        .arg(certs)
        .args(["--listen", &format!("127.0.0.1:{}", port())])
        .args(["--metrics-listen", &format!("127.0.0.1:{}", port())])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kanon serve starts");
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            let out = child.wait_with_output().unwrap();
            return (
                out.status.code(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("kanon serve {extra:?} kept running");
}

#[test]
fn bad_objects_stop_standalone_serve_at_startup() {
    let policies = tempfile::tempdir().unwrap();
    let certs = tempfile::tempdir().unwrap();
    let objects = tempfile::tempdir().unwrap();
    std::fs::write(policies.path().join("prod.yaml"), PROD_TEAM_POLICY).unwrap();
    let missing = objects.path().join("missing.yaml");
    let no_kind = objects.path().join("no-kind.yaml");
    std::fs::write(
        &no_kind,
        format!(
            "{}---\napiVersion: v1\nmetadata: {{name: x}}\n",
            namespaces("prod")
        ),
    )
    .unwrap();
    let not_yaml = objects.path().join("not-yaml.yaml");
    std::fs::write(
        &not_yaml,
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: [\n",
    )
    .unwrap();
    let empty = objects.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let show = |p: &Path| p.display().to_string();
    for (path, want) in [
        (
            show(&missing),
            format!("error: --objects: {}: No such file", show(&missing)),
        ),
        (
            show(&no_kind),
            format!(
                "error: --objects: {} (document 3): object has no kind (an object needs apiVersion, kind and metadata.name)",
                show(&no_kind)
            ),
        ),
        (
            show(&not_yaml),
            format!(
                "error: --objects: {}: invalid YAML at line 3",
                show(&not_yaml)
            ),
        ),
        (
            show(&empty),
            format!(
                "error: --objects: {}: no .yaml, .yml or .json file found",
                show(&empty)
            ),
        ),
        (
            "-".to_string(),
            "error: --objects -: standard input cannot be watched".to_string(),
        ),
    ] {
        let (code, stderr) = serve_until_exit(policies.path(), certs.path(), &["--objects", &path]);
        assert_eq!(code, Some(2), "{path}: {stderr}");
        assert!(stderr.contains(&want), "expected `{want}` in:\n{stderr}");
    }

    // Cluster mode reads the cluster: --objects is for standalone mode only.
    let out = Command::new(env!("CARGO_BIN_EXE_kanon"))
        .args(["serve", "--objects"])
        .arg(&no_kind)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("required arguments were not provided") && stderr.contains("--policies"),
        "{stderr}"
    );
}

#[test]
fn cluster_mode_without_a_cluster_says_what_is_missing() {
    let home = tempfile::tempdir().unwrap();
    // No kubeconfig anywhere and not in a Pod: nothing to connect to.
    let out = Command::new(env!("CARGO_BIN_EXE_kanon"))
        .arg("serve")
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .env("HOME", home.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("error: cannot reach the apiserver"),
        "{stderr}"
    );
    // A kubeconfig that is not there.
    let missing = home.path().join("absent.yaml");
    let out = Command::new(env!("CARGO_BIN_EXE_kanon"))
        .arg("serve")
        .arg("--kubeconfig")
        .arg(&missing)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("error: the kubeconfig {}", missing.display())),
        "{stderr}"
    );
}

/// A program that doubles a list 64 times: the program runtime copies the lazy list into one
/// list at the 33rd doubling without charging fuel, so only a bound outside the runtime stops it.
const DOUBLING_POLICY: &str = "apiVersion: policy.kanon.dev/v1alpha1
kind: ClusterValidatePolicy
metadata: {name: doubling}
spec:
  failurePolicy: Fail
  resourceSelectors: [{apiVersion: v1, kind: Pod}]
  validateRules:
  - program: |
      {% set l = namespace(v=[1]) %}{% for i in range(64) %}{% set l.v = l.v + l.v %}{% endfor %}
      valid: true
";

/// A hand-written override program that reads the object.
const NAMING_POLICY: &str = "apiVersion: policy.kanon.dev/v1alpha1
kind: ClusterOverridePolicy
metadata: {name: naming}
spec:
  resourceSelectors: [{apiVersion: v1, kind: Pod}]
  overrideRules:
  - overriders:
      program: |
        - {op: add, path: /metadata/labels/named, value: \"{{ object.metadata.name }}-by-{{ request.userInfo.username }}\"}
";

/// A memory figure of `/proc/PID/status` (`VmHWM`, `VmRSS`), in KiB.
fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} in /proc/{pid}/status"))
}

/// kanon's peak resident memory (VmHWM), in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmHWM")
}

/// The processes whose parent is `pid`.
fn children_of(pid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        // `pid (comm) state ppid ...`; comm may hold spaces, so read after its `)`.
        let parent = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if parent == Some(pid) {
            found.push(child);
        }
    }
    found
}

/// The patch of a mutating answer, decoded.
fn patch_of(review: &serde_json::Value) -> serde_json::Value {
    use base64::Engine as _;
    let text = review["response"]["patch"].as_str().unwrap_or_default();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .unwrap_or_default();
    serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null)
}

#[test]
fn a_program_that_exhausts_memory_ends_its_worker_not_the_server() {
    let policies = tempfile::tempdir().unwrap();
    let certs = tempfile::tempdir().unwrap();
    std::fs::write(policies.path().join("doubling.yaml"), DOUBLING_POLICY).unwrap();
    std::fs::write(policies.path().join("naming.yaml"), NAMING_POLICY).unwrap();
    let server = Server::start_with(
        policies.path(),
        certs.path(),
        // Room for a debug build's text (about 56 MiB mapped) beside a program that fits.
        &["--program-memory-mib", "128", "--program-workers", "2"],
    );
    let pid = server.child.id();

    for _ in 0..3 {
        // Denied under the policy's `Fail`, naming the bound it met; never admitted unchecked.
        let (code, review) = server.post_within("/validate", &fixture("pod-create.json"), "20s");
        assert_eq!(code, "200", "{review}");
        assert_eq!(review["response"]["allowed"], false, "{review}");
        let message = review["response"]["status"]["message"]
            .as_str()
            .unwrap_or_default();
        assert!(
            message.starts_with("ClusterValidatePolicy/doubling: spec.validateRules[0].program: the program's worker process ended while running it")
                && message.contains("128 MiB"),
            "{message}"
        );
        // The server is alive, and the next hand-written program gets a fresh worker.
        let (code, review) = server.post("/mutate", &fixture("pod-create.json"));
        assert_eq!(code, "200", "{review}");
        assert_eq!(
            patch_of(&review),
            serde_json::json!([{"op": "add", "path": "/metadata/labels/named", "value": "nginx-by-kubernetes-admin"}]),
            "{review}"
        );
    }
    // Measured: the server itself never held the list (a worker did, up to its limit).
    let peak = peak_rss_kib(pid);
    assert!(
        peak < 96 * 1024,
        "kanon serve peaked at {peak} KiB while its programs ran out of memory"
    );
    assert_eq!(server.stop(), Some(0));
}

#[test]
fn a_program_still_running_at_the_deadline_is_stopped_with_its_worker() {
    let policies = tempfile::tempdir().unwrap();
    let certs = tempfile::tempdir().unwrap();
    std::fs::write(policies.path().join("doubling.yaml"), DOUBLING_POLICY).unwrap();
    // A limit it does not reach within a second: the deadline stops it.
    let server = Server::start_with(
        policies.path(),
        certs.path(),
        &["--program-memory-mib", "8192", "--program-workers", "1"],
    );
    let started = Instant::now();
    let (code, review) = server.post_within("/validate", &fixture("pod-create.json"), "1s");
    let took = started.elapsed();
    assert_eq!(code, "200", "{review}");
    assert_eq!(review["response"]["allowed"], false, "{review}");
    let message = review["response"]["status"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        message.contains("the program did not finish before the review's deadline")
            && message.contains("its worker process was stopped"),
        "{message}"
    );
    assert!(took < Duration::from_secs(5), "answered after {took:?}");
    // The worker is gone: no child of kanon keeps the core.
    std::thread::sleep(Duration::from_millis(300));
    let children = children_of(server.child.id());
    assert!(
        children.is_empty(),
        "kanon still has children: {children:?}"
    );
    assert_eq!(server.stop(), Some(0));
}

/// The bounds the chart runs kanon with (charts/kanon/values.yaml, `serving`), from which it
/// derives the container's memory limit.
#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Serving {
    max_concurrent_reviews: u64,
    #[serde(rename = "maxReviewMemoryMiB")]
    max_review_memory_mib: u64,
    #[serde(rename = "bodyBufferMiB")]
    body_buffer_mib: u64,
    max_connections: u64,
}

fn chart_serving() -> Serving {
    #[derive(serde::Deserialize)]
    struct Values {
        serving: Serving,
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../charts/kanon/values.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let values: Values = serde_saphyr::from_str(&text).unwrap();
    values.serving
}

/// A TLS connection to kanon, trusting its CA.
type Tls = rustls::StreamOwned<rustls::ClientConnection, std::net::TcpStream>;

fn tls_client(ca: &str) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    Arc::new(
        rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth(),
    )
}

fn connect(addr: &str, config: &Arc<rustls::ClientConfig>) -> std::io::Result<Tls> {
    let tcp = std::net::TcpStream::connect(addr)?;
    tcp.set_read_timeout(Some(Duration::from_secs(30)))?;
    tcp.set_write_timeout(Some(Duration::from_secs(30)))?;
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let connection =
        rustls::ClientConnection::new(config.clone(), name).map_err(std::io::Error::other)?;
    let mut stream = rustls::StreamOwned::new(connection, tcp);
    // Completes the handshake.
    while stream.conn.is_handshaking() {
        stream.conn.complete_io(&mut stream.sock)?;
    }
    Ok(stream)
}

/// A Pod CREATE review whose object carries `items` zeros: two bytes each as text, about 80
/// once read.
fn dense_review(items: usize) -> Vec<u8> {
    let text = std::fs::read_to_string(fixture("pod-create.json")).unwrap();
    let mut review: serde_json::Value = serde_json::from_str(&text).unwrap();
    review["request"]["object"]["spec"]["junk"] = serde_json::json!([]);
    let text = serde_json::to_string(&review).unwrap();
    let zeros = format!("[{}0]", "0,".repeat(items.saturating_sub(1)));
    text.replacen(r#""junk":[]"#, &format!(r#""junk":{zeros}"#), 1)
        .into_bytes()
}

/// POSTs `body` and reads the status line of the answer (the rest is left unread).
fn post_raw(stream: &mut Tls, path: &str, body: &[u8]) -> std::io::Result<String> {
    use std::io::{Read as _, Write as _};
    let head = format!(
        "POST {path}?timeout=30s HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(body)?;
    stream.flush()?;
    let mut answer = Vec::new();
    let mut buffer = [0_u8; 4096];
    while !answer.windows(2).any(|w| w == b"\r\n") {
        let n = stream.read(&mut buffer)?;
        if n == 0 {
            break;
        }
        answer.extend_from_slice(&buffer[..n]);
    }
    let line = String::from_utf8_lossy(&answer);
    Ok(line.lines().next().unwrap_or_default().to_string())
}

const TWO_STEP_POLICY: &str = "apiVersion: policy.kanon.dev/v1alpha1
kind: ClusterOverridePolicy
metadata: {name: two-steps}
spec:
  overrideRules:
    - overriders:
        plaintext:
          - {op: add, path: /metadata/labels/a, value: b}
          - {op: add, path: /metadata/annotations, value: {c: d}}
";

/// The chart's memory limit is the sum of kanon's bounds; with every bound hit at once by
/// hostile clients (the body buffer full of stalled bodies, every evaluation slot busy with
/// reviews at and over the memory budget, the connection cap reached), kanon's peak stays
/// within the part of that sum the server holds (the limit less its base and the program
/// workers, separate processes this load never starts).
#[test]
fn every_bound_hit_at_once_stays_within_the_charts_memory_limit() {
    const MIB: u64 = 1024;
    let serving = chart_serving();
    let policies = tempfile::tempdir().unwrap();
    let certs = tempfile::tempdir().unwrap();
    std::fs::write(policies.path().join("two-steps.yaml"), TWO_STEP_POLICY).unwrap();
    std::fs::write(policies.path().join("label.yaml"), LABEL_POLICY).unwrap();
    // Room for the connections the cap allows, in this process and in kanon.
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write the struct we own.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit);
        limit.rlim_cur = limit.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
    }
    let server = Server::start_with(
        policies.path(),
        certs.path(),
        &[
            "--program-workers",
            "0",
            "--max-concurrent-reviews",
            &serving.max_concurrent_reviews.to_string(),
            "--max-review-memory-mib",
            &serving.max_review_memory_mib.to_string(),
            "--body-buffer-mib",
            &serving.body_buffer_mib.to_string(),
            "--max-connections",
            &serving.max_connections.to_string(),
            // Every review traced, to a collector that is not there: the spans wait in the
            // export queue, which holds at most its 2,048, and the rest are dropped.
            "--otlp-endpoint",
            "http://127.0.0.1:9",
            "--otlp-protocol",
            "http/protobuf",
            "--trace-sampling-ratio",
            "1",
        ],
    );
    let pid = server.child.id();
    let addr = server.https.trim_start_matches("https://").to_string();
    let config = tls_client(&server.ca);
    let idle = status_kib(pid, "VmRSS");
    let bound = serving.body_buffer_mib * MIB
        + serving.max_concurrent_reviews * 2 * serving.max_review_memory_mib * MIB
        + serving.max_connections * 64
        // The span export queue: 2,048 spans of a few hundred bytes each, and a batch in flight.
        + 4 * MIB;

    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let running = |stop: &Arc<std::sync::atomic::AtomicBool>| {
        !stop.load(std::sync::atomic::Ordering::Relaxed)
    };
    let mut threads = Vec::new();
    // The connection cap: handshaken connections that send nothing (each makes kanon hold its
    // TLS state), past the cap (the oldest give way).
    {
        let (addr, config, stop) = (addr.clone(), config.clone(), stop.clone());
        let count = serving.max_connections as usize + 64;
        threads.push(std::thread::spawn(move || {
            let mut held = Vec::new();
            for _ in 0..count {
                if let Ok(stream) = connect(&addr, &config) {
                    held.push(stream);
                }
            }
            while running(&stop) {
                std::thread::sleep(Duration::from_millis(50));
            }
            drop(held);
        }));
    }
    // The body buffer: bodies of the largest size declared, nearly all sent, then stalled (and
    // sent again when kanon gives one up for a waiting body).
    let stalled = (serving.body_buffer_mib / 8).max(1);
    for _ in 0..stalled {
        let (addr, config, stop) = (addr.clone(), config.clone(), stop.clone());
        threads.push(std::thread::spawn(move || {
            use std::io::Write as _;
            let body = dense_review(4_000_000);
            while running(&stop) {
                let Ok(mut stream) = connect(&addr, &config) else {
                    continue;
                };
                let head = format!(
                    "POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(head.as_bytes());
                let _ = stream.write_all(&body[..body.len() - 1024]);
                let _ = stream.flush();
                // Held until kanon gives it up (the read fails or answers 408).
                let mut byte = [0_u8; 1];
                let _ = std::io::Read::read(&mut stream, &mut byte);
            }
        }));
    }
    // Every slot: reviews over the budget (8 MiB of zeros, refused part way) and just under
    // it (accepted, and copied once by the two-step policy), on more connections than slots.
    let mut answers = Vec::new();
    for n in 0..serving.max_concurrent_reviews * 2 {
        let (addr, config, stop) = (addr.clone(), config.clone(), stop.clone());
        let (tx, rx) = std::sync::mpsc::channel();
        answers.push(rx);
        threads.push(std::thread::spawn(move || {
            // Under the budget with room for its array's last doubling.
            let body = if n % 2 == 0 {
                dense_review(4_000_000)
            } else {
                dense_review(120_000)
            };
            while running(&stop) {
                let Ok(mut stream) = connect(&addr, &config) else {
                    continue;
                };
                while running(&stop) {
                    match post_raw(&mut stream, "/mutate", &body) {
                        Ok(status) => {
                            let _ = tx.send(status);
                        }
                        Err(_) => break,
                    }
                }
            }
        }));
    }
    std::thread::sleep(Duration::from_secs(12));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let peak = peak_rss_kib(pid);
    for thread in threads {
        let _ = thread.join();
    }
    let statuses: Vec<String> = answers.iter().flat_map(|rx| rx.try_iter()).collect();
    eprintln!(
        "kanon under every bound at once: idle {} MiB, peak {} MiB, a rise of {} MiB within {} MiB; {} answers ({} over the budget, {} patched)",
        idle / MIB,
        peak / MIB,
        (peak - idle) / MIB,
        bound / MIB,
        statuses.len(),
        statuses.iter().filter(|s| s.contains(" 413 ")).count(),
        statuses.iter().filter(|s| s.contains(" 200 ")).count(),
    );
    // The load reached kanon: both kinds of review were answered.
    assert!(statuses.iter().any(|s| s.contains(" 413 ")), "{statuses:?}");
    assert!(statuses.iter().any(|s| s.contains(" 200 ")), "{statuses:?}");
    assert!(
        peak - idle <= bound,
        "peak {peak} KiB over idle {idle} KiB: more than the {bound} KiB the chart allows for"
    );
    // And kanon still answers.
    assert_eq!(server.get("/readyz").0, "200");
    server.stop();
}

#[test]
fn kubernetes_events_are_refused_in_standalone_mode() {
    let policies = tempfile::tempdir().unwrap();
    let certs = tempfile::tempdir().unwrap();
    std::fs::write(policies.path().join("prod.yaml"), PROD_TEAM_POLICY).unwrap();
    for flag in ["--events", "--events=deny,audit"] {
        let (code, stderr) = serve_until_exit(policies.path(), certs.path(), &[flag]);
        assert_eq!(code, Some(2), "{flag}: {stderr}");
        assert!(
            stderr.contains("--events")
                && stderr.contains("cannot be used with")
                && stderr.contains("--policies"),
            "{flag}: {stderr}"
        );
    }
}

#[test]
fn the_cluster_name_labels_every_metric_when_asked_and_must_be_a_label_value() {
    let policies = tempfile::tempdir().unwrap();
    let certs = tempfile::tempdir().unwrap();
    let server = Server::start_with(
        policies.path(),
        certs.path(),
        &["--cluster-name", "eu-west-1", "--metrics-cluster-label"],
    );
    let out = curl(&[&format!("{}/metrics", server.metrics)]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let samples: Vec<&str> = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .collect();
    assert!(samples.len() > 5, "{text}");
    for sample in &samples {
        assert!(sample.contains("cluster=\"eu-west-1\""), "{sample}");
    }
    server.stop();

    // Without the flag, no metric carries it.
    let server = Server::start_with(
        policies.path(),
        certs.path(),
        &["--cluster-name", "eu-west-1"],
    );
    let out = curl(&[&format!("{}/metrics", server.metrics)]);
    assert!(!String::from_utf8_lossy(&out.stdout).contains("cluster=\""));
    server.stop();

    // Reports carry it as a label, so it must be a label value; the metric label needs a name.
    for (extra, says) in [
        (&["--cluster-name", "eu west"][..], "is not a label value"),
        (
            &["--cluster-name", &"a".repeat(64)][..],
            "is not a label value",
        ),
        (&["--metrics-cluster-label"][..], "--cluster-name"),
    ] {
        let (code, stderr) = serve_until_exit(policies.path(), certs.path(), extra);
        assert_eq!(code, Some(2), "{extra:?}: {stderr}");
        assert!(stderr.contains(says), "{extra:?}: {stderr}");
    }
}
