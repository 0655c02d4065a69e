//! `kanon serve --policies DIR` end to end: the binary, real TLS, curl as the client.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
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
        let (https, metrics) = (free_port(), free_port());
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
        let data = format!("@{}", file.display());
        let out = curl(&[
            "--cacert",
            &self.ca,
            "-H",
            "Content-Type: application/json",
            "--data-binary",
            &data,
            "-w",
            "\n%{http_code}",
            &format!("{}{path}?timeout=10s", self.https),
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
