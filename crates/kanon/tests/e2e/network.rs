//! Who may reach kanon's ports: with `--client-ca-file`, the webhook port takes only clients
//! with a certificate of that CA, which kube-apiserver presents (the control plane configures
//! it with one of its CA's certificates for every webhook); the metrics port stays open to
//! plain HTTP for probes.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};

use crate::Scenario;
use crate::admission::{install, pod, pod_create_review, policy};
use crate::env::{Env, Restarted, text};

pub const SCENARIOS: &[Scenario] = &[(
    "network::with_a_client_ca_only_the_apiservers_certificate_reaches_the_webhook_port",
    with_a_client_ca_only_the_apiservers_certificate_reaches_the_webhook_port,
)];

/// What a direct POST of a review got: whether curl succeeded, the HTTP status (`000` when no
/// answer came), the body, and curl's error.
struct Posted {
    ok: bool,
    status: String,
    body: String,
    error: String,
}

/// POSTs `review` to kanon's `/validate`, presenting `identity` (certificate and key) if given.
fn post(env: &Env, review: &Value, identity: Option<(&Path, &Path)>) -> Posted {
    let mut curl = Command::new("curl");
    curl.args(["-sS", "--max-time", "5", "-w", "\n%{http_code}"])
        .args(["-H", "Content-Type: application/json"])
        .arg("--cacert")
        .arg(env.kanon.cert_dir.join("ca.crt"))
        .args(["--data-binary", &review.to_string()]);
    if let Some((cert, key)) = identity {
        curl.arg("--cert").arg(cert).arg("--key").arg(key);
    }
    let out = curl
        .arg(format!(
            "https://127.0.0.1:{}/validate?timeout=5s",
            env.kanon.port
        ))
        .output()
        .expect("curl runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let (body, status) = stdout.rsplit_once('\n').unwrap_or(("", &stdout));
    Posted {
        ok: out.status.success(),
        status: status.to_string(),
        body: body.to_string(),
        error: String::from_utf8_lossy(&out.stderr).trim().to_string(),
    }
}

fn openssl(dir: &Path, args: &[&str]) -> Output {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("openssl runs");
    assert!(out.status.success(), "openssl {args:?}: {}", text(&out));
    out
}

/// A CA of the test's own making and a client certificate it signed, with the very name
/// kube-apiserver's has: (certificate, key).
fn foreign_identity(dir: &Path) -> (PathBuf, PathBuf) {
    let p256 = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    openssl(
        dir,
        &[
            &["req", "-x509"][..],
            &p256,
            &[
                "-keyout",
                "ca.key",
                "-out",
                "ca.crt",
                "-days",
                "1",
                "-subj",
                "/CN=not-the-control-plane-ca",
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign",
            ],
        ]
        .concat(),
    );
    openssl(
        dir,
        &[
            &["req", "-new"][..],
            &p256,
            &[
                "-keyout",
                "client.key",
                "-out",
                "client.csr",
                "-subj",
                &format!("/CN={}", kanon_control_plane::WEBHOOK_CLIENT_NAME),
            ],
        ]
        .concat(),
    );
    std::fs::write(dir.join("client.ext"), "extendedKeyUsage=clientAuth\n")
        .expect("the extensions file");
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "client.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "1",
            "-extfile",
            "client.ext",
            "-out",
            "client.crt",
        ],
    );
    (dir.join("client.crt"), dir.join("client.key"))
}

fn with_a_client_ca_only_the_apiservers_certificate_reaches_the_webhook_port(env: &mut Env) {
    let ns = "net-client-ca";
    env.namespace(ns, json!({}));
    install(
        env,
        &policy(
            "ClusterValidatePolicy",
            None,
            "net-forbidden",
            json!({"resourceSelectors": [{"apiVersion": "v1", "kind": "Pod", "namespace": ns}],
            "validateRules": [{"template": {"type": "condition", "condition": {
                "cond": "Equal", "dataRef": {"from": "current", "path": "/metadata/labels/forbidden"},
                "value": {"string": "yes"},
                "message": "{{ object.metadata.name }} is marked forbidden",
            }}}]}),
        ),
    );
    let foreign_dir = tempfile::tempdir().expect("a temporary directory");
    let (foreign_cert, foreign_key) = foreign_identity(foreign_dir.path());
    let ca = env.control_plane().ca_cert_file();
    let apiserver = (
        env.control_plane().webhook_client_cert_file(),
        env.control_plane().webhook_client_key_file(),
    );
    let forbidden = pod(ns, "direct", json!({"forbidden": "yes"}));
    {
        let restarted = Restarted::changed(env, |kanon| {
            kanon.args.push("--client-ca-file".to_string());
            kanon.args.push(ca.display().to_string());
            // Its own readiness probe over HTTPS needs a certificate now: kube-apiserver's.
            kanon.client_identity = Some(apiserver.clone());
        });
        let env = &*restarted.env;

        // Through kube-apiserver, which presents its certificate: both webhooks answered.
        let refused = env
            .create(&pod(ns, "denied", json!({"forbidden": "yes"})))
            .expect_err("denied by the policy");
        assert!(refused.contains("denied is marked forbidden"), "{refused}");
        env.create(&pod(ns, "allowed", json!({})))
            .expect("allowed by the policy");

        // Directly, as kube-apiserver: answered.
        let as_apiserver = post(
            env,
            &pod_create_review(&forbidden, "as-apiserver"),
            Some((&apiserver.0, &apiserver.1)),
        );
        let answer: Value = serde_json::from_str(&as_apiserver.body).unwrap_or(Value::Null);
        assert_eq!(as_apiserver.status, "200", "{}", as_apiserver.error);
        assert_eq!(answer["response"]["uid"], "as-apiserver", "{answer}");
        assert_eq!(answer["response"]["allowed"], false, "{answer}");

        // Without a certificate, and with one of another CA (under kube-apiserver's very
        // name): the handshake fails, nothing is answered.
        let anonymous = post(env, &pod_create_review(&forbidden, "anonymous"), None);
        let foreign = post(
            env,
            &pod_create_review(&forbidden, "foreign"),
            Some((&foreign_cert, &foreign_key)),
        );
        for (who, posted) in [("no certificate", &anonymous), ("another CA", &foreign)] {
            assert!(
                !posted.ok && posted.status == "000" && posted.body.is_empty(),
                "{who}: HTTP {} {} ({})",
                posted.status,
                posted.body,
                posted.error
            );
        }
        eprintln!(
            "e2e: webhook port with --client-ca-file: no certificate: {}; another CA: {}",
            anonymous.error, foreign.error
        );

        // Probes and metrics stay on plain HTTP, without a certificate.
        let healthz = Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-w", "%{http_code}"])
            .args(["--max-time", "5"])
            .arg(format!(
                "http://127.0.0.1:{}/healthz",
                env.kanon.metrics_port
            ))
            .output()
            .expect("curl runs");
        assert_eq!(String::from_utf8_lossy(&healthz.stdout), "200");
        assert!(
            env.kanon
                .metrics()
                .contains("kanon_admission_requests_total"),
            "the metrics port answers"
        );
    }
    // Restored: no certificate asked for again.
    assert_eq!(env.kanon.client_identity, None);
    let anonymous = post(env, &pod_create_review(&forbidden, "restored"), None);
    assert_eq!(anonymous.status, "200", "{}", anonymous.error);
    env.delete_policy("ClusterValidatePolicy", None, "net-forbidden");
}
