//! The server's bounds against clients that do not behave like kube-apiserver: reviews whose
//! JSON would take too much memory, deadlines a client asks for, bodies that never finish,
//! answers nobody reads, connection floods, and client certificates. Each test checks the bound
//! holds and that a well-behaved review on another connection is still answered.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Client, HttpResponse, fixture, start, with_uid};
use kanon_engine::{PolicySet, compile_document};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::{Value, json};
use tokio::net::{TcpSocket, TcpStream};
use tokio_rustls::TlsConnector;

fn pod_review(uid: &str) -> Value {
    with_uid(fixture("pod-create.json"), uid)
}

/// A Pod review carrying an array of `items` zeros (two bytes each on the wire, about 80 once
/// read).
fn review_with_array(uid: &str, items: usize) -> Vec<u8> {
    let mut review = pod_review(uid);
    review["request"]["object"]["spec"]["junk"] = json!([]);
    let text = serde_json::to_string(&review).unwrap();
    let zeros = format!("[{}0]", "0,".repeat(items.saturating_sub(1)));
    text.replacen(r#""junk":[]"#, &format!(r#""junk":{zeros}"#), 1)
        .into_bytes()
}

fn allowed(response: &HttpResponse, uid: &str) {
    assert_eq!(response.status, 200, "{}", response.text());
    let answer = response.json();
    assert_eq!(answer["response"]["uid"], uid, "{answer}");
}

fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|line| {
            let (name, value) = line.rsplit_once(' ')?;
            (name == series).then(|| value.parse().unwrap())
        })
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_review_whose_json_takes_too_much_memory_is_refused_by_name() {
    let server = start("over-budget", true, |config| {
        config.review_budget.memory_bytes = 1024 * 1024;
    })
    .await;
    let mut client = server.connect().await;
    // 100,000 zeros: 200 KB on the wire, over 8 MiB once read.
    let body = review_with_array("big-array", 100_000);
    assert!(body.len() < 256 * 1024);
    let response = client.request("POST", "/validate", &body).await.unwrap();
    assert_eq!(response.status, 413, "{}", response.text());
    // A v1 Status, whose message kube-apiserver quotes to its client.
    let answer = response.json();
    assert_eq!(answer["kind"], "Status", "{answer}");
    assert_eq!(answer["apiVersion"], "v1");
    assert_eq!(answer["status"], "Failure");
    assert_eq!(answer["reason"], "RequestEntityTooLarge");
    assert_eq!(answer["code"], 413);
    let message = answer["message"].as_str().unwrap();
    assert!(
        message.starts_with("the review would take more than 1 MiB once read ("),
        "{message}"
    );
    // The body was read whole: the connection stays and serves the next review.
    let small = body_of(&pod_review("after"));
    allowed(
        &client.request("POST", "/validate", &small).await.unwrap(),
        "after",
    );
    // A review of the same shape under the bound is answered.
    let body = review_with_array("small-array", 1000);
    allowed(
        &client.request("POST", "/mutate", &body).await.unwrap(),
        "small-array",
    );
    // Nested deeper than the bound: refused by name.
    let mut deep = pod_review("deep");
    deep["request"]["object"]["spec"]["junk"] = json!([]);
    let text = serde_json::to_string(&deep).unwrap().replacen(
        r#""junk":[]"#,
        &format!(r#""junk":{}{}"#, "[".repeat(200), "]".repeat(200)),
        1,
    );
    let response = client
        .request("POST", "/validate", text.as_bytes())
        .await
        .unwrap();
    assert_eq!(response.status, 413, "{}", response.text());
    assert!(
        response.text().contains("deeper than 128 levels"),
        "{}",
        response.text()
    );
    let metrics = server.metrics.encode();
    assert_eq!(
        metric(
            &metrics,
            r#"kanon_admission_requests_total{webhook="validate",operation="",kind="",result="over_budget"}"#
        ),
        2.0,
        "{metrics}"
    );
    server.shutdown(Duration::from_secs(5)).await.unwrap();
}

fn body_of(review: &Value) -> Vec<u8> {
    serde_json::to_vec(review).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_uid_longer_than_kube_apiservers_is_not_echoed() {
    let server = start("long-uid", true, |_| {}).await;
    let mut client = server.connect().await;
    let long = "u".repeat(100_000);
    let response = client.post("/validate", &pod_review(&long)).await;
    assert_eq!(response.status, 400, "{}", response.text());
    assert!(response.body.len() < 1024, "{} bytes", response.body.len());
    let message = response.json()["response"]["status"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.contains("request.uid is 100000 bytes long"),
        "{message}"
    );
    // The longest uid kanon answers is echoed.
    let uid = "u".repeat(kanon_webhook::admission::MAX_UID_BYTES);
    allowed(&client.post("/validate", &pod_review(&uid)).await, &uid);
    server.shutdown(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_client_cannot_choose_its_own_deadline() {
    let body_timeout = Duration::from_millis(700);
    let server = start("deadline", true, |config| {
        config.body_timeout = body_timeout;
    })
    .await;
    let mut client = server.connect().await;
    // A timeout past what a Duration added to now can hold: answered, nothing panics.
    for query in [
        "timeout=15000000000000000000s",
        "timeout=1000h",
        "timeout=99999999999999999999999s",
    ] {
        let uid = format!("huge-{}", query.len());
        let body = body_of(&pod_review(&uid));
        let response = client
            .request("POST", &format!("/validate?{query}"), &body)
            .await
            .unwrap();
        allowed(&response, &uid);
    }
    // A body dribbled under a timeout of 1000 h is cut at the body timeout.
    let body = body_of(&pod_review("dribbled"));
    let mut dribbler = server.connect().await;
    let started = Instant::now();
    dribbler
        .send_raw(&Client::<TcpStream>::head(
            "POST",
            "/validate?timeout=1000h",
            body.len(),
        ))
        .await
        .unwrap();
    let dribble = async {
        for byte in body.iter().take(200) {
            if dribbler.send_raw(&[*byte]).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(3), dribble)
        .await
        .ok();
    let response = dribbler.read_response().await.unwrap();
    assert_eq!(response.status, 408, "{}", response.text());
    assert_eq!(response.json()["reason"], "Timeout");
    assert_eq!(response.header("connection"), Some("close"));
    let waited = started.elapsed();
    assert!(
        waited >= body_timeout && waited < body_timeout * 5,
        "cut after {waited:?}"
    );
    assert!(dribbler.closed_within(Duration::from_secs(2)).await);
    // The other connection was served throughout.
    allowed(
        &client.post("/validate", &pod_review("still")).await,
        "still",
    );
    server.shutdown(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bodies_that_trickle_give_their_buffer_to_a_review_that_waits() {
    let server = start("trickle", true, |config| {
        config.max_body_bytes = 1024 * 1024;
        config.body_buffer_bytes = 2 * 1024 * 1024;
    })
    .await;
    // Two bodies of 1 MiB declared, a kilobyte sent: the whole buffer is held.
    let mut stalled = Vec::new();
    for _ in 0..2 {
        let mut connection = server.connect().await;
        let mut bytes = Client::<TcpStream>::head("POST", "/validate", 1024 * 1024);
        bytes.extend_from_slice(&[b' '; 1024]);
        connection.send_raw(&bytes).await.unwrap();
        stalled.push(connection);
    }
    // Past their grace, a review that needs room makes them give way and is answered.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let mut client = server.connect().await;
    let started = Instant::now();
    allowed(
        &client.post("/validate", &pod_review("waits")).await,
        "waits",
    );
    assert!(started.elapsed() < Duration::from_secs(3));
    let mut gave_way = 0;
    for connection in &mut stalled {
        if let Ok(Ok(response)) =
            tokio::time::timeout(Duration::from_secs(2), connection.read_response()).await
        {
            assert_eq!(response.status, 408, "{}", response.text());
            gave_way += 1;
        }
    }
    assert!(gave_way >= 1, "no stalled body gave way");
    let metrics = server.metrics.encode();
    assert!(
        metric(
            &metrics,
            r#"kanon_reviews_shed_total{webhook="validate",reason="slow_body"}"#
        ) >= 1.0,
        "{metrics}"
    );
    // (A body still arriving would hold shutdown's drain up to its body timeout.)
    drop(stalled);
    server.shutdown(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_flood_of_silent_connections_cannot_lock_a_client_out() {
    let server = start("flood", true, |config| {
        config.max_connections = 16;
        config.header_read_timeout = Duration::from_secs(30);
    })
    .await;
    // A client that was served keeps its connection through the flood.
    let mut served = server.connect().await;
    allowed(
        &served.post("/validate", &pod_review("before")).await,
        "before",
    );
    let mut flood = Vec::new();
    for _ in 0..100 {
        flood.push(TcpStream::connect(server.addr).await.unwrap());
    }
    // New connections get in, and are served.
    for n in 0..5 {
        let uid = format!("new-{n}");
        let mut client = server.connect().await;
        allowed(&client.post("/validate", &pod_review(&uid)).await, &uid);
    }
    allowed(
        &served.post("/validate", &pod_review("after")).await,
        "after",
    );
    let metrics = server.metrics.encode();
    assert!(
        metric(
            &metrics,
            r#"kanon_connections_shed_total{listener="webhook",reason="evicted"}"#
        ) >= 80.0,
        "{metrics}"
    );
    assert!(
        metric(&metrics, r#"kanon_connections{listener="webhook"}"#) <= 16.0,
        "{metrics}"
    );
    // The probe port has a cap of its own: the flood did not touch it.
    let mut probe = server.connect_metrics().await;
    assert_eq!(probe.get("/readyz").await.status, 200);
    drop(flood);
    server.shutdown(Duration::from_secs(5)).await.unwrap();
}

/// A Pod review with a 1 MiB annotation that the test's override policy copies: its answer
/// holds a patch of about 1.4 MiB.
fn copying_policies() -> PolicySet {
    let policy = json!({
        "apiVersion": "policy.kanon.dev/v1alpha1",
        "kind": "ClusterOverridePolicy",
        "metadata": {"name": "copy-annotation"},
        "spec": {
            "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
            "overrideRules": [{"overriders": {"plaintext": [
                {"op": "copy", "from": "/metadata/annotations/big", "path": "/metadata/annotations/copy"},
            ]}}],
        },
    });
    PolicySet::build(vec![compile_document(&policy).unwrap()]).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_answer_nobody_reads_is_given_up_with_its_connection() {
    let write_timeout = Duration::from_millis(800);
    let server = start("unread", false, |config| {
        config.write_timeout = write_timeout;
    })
    .await;
    server.state.replace(copying_policies());
    let mut review = pod_review("unread");
    review["request"]["object"]["metadata"]["annotations"] = json!({"big": "x".repeat(1 << 20)});
    let body = body_of(&review);
    // A client with a small receive window that pipelines reviews and reads nothing.
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let tcp = socket.connect(server.addr).await.unwrap();
    let connector = TlsConnector::from(common::client_config(&server.ca));
    let tls = connector
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    let mut client = Client::new(tls);
    let mut request = Client::<TcpStream>::head("POST", "/mutate", body.len());
    request.extend_from_slice(&body);
    let started = Instant::now();
    let sending = async {
        for _ in 0..16 {
            if client.send_raw(&request).await.is_err() {
                break;
            }
        }
    };
    // The sends stop when the server stops reading (it is stuck writing), or fail once it
    // closes.
    let _ = tokio::time::timeout(Duration::from_secs(10), sending).await;
    // The server gives the connection up within the write timeout (and a tick or two).
    let deadline = started + Duration::from_secs(8);
    loop {
        let metrics = server.metrics.encode();
        if metric(
            &metrics,
            r#"kanon_connections_shed_total{listener="webhook",reason="write_timeout"}"#,
        ) >= 1.0
        {
            break;
        }
        assert!(Instant::now() < deadline, "not given up:\n{metrics}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut other = server.connect().await;
    let response = other.post("/mutate", &pod_review("other")).await;
    allowed(&response, "other");
    server.shutdown(Duration::from_secs(5)).await.unwrap();
}

/// A CA and a client certificate it signed, as PEM: (CA, certificate, key).
fn client_identity(name: &str) -> (String, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().unwrap();
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let mut params = CertificateParams::new(vec![name.to_string()]).unwrap();
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, &issuer).unwrap();
    (ca_cert.pem(), cert.pem(), key.serialize_pem())
}

async fn connect_as(
    server: &common::TestServer,
    identity: Option<(&str, &str)>,
) -> std::io::Result<Client<tokio_rustls::client::TlsStream<TcpStream>>> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(&server.ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots);
    let mut config = match identity {
        Some((cert, key)) => builder
            .with_client_auth_cert(
                vec![CertificateDer::from_pem_slice(cert.as_bytes()).unwrap()],
                PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap(),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let tcp = TcpStream::connect(server.addr).await?;
    let tls = TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await?;
    let mut client = Client::new(tls);
    // With TLS 1.3 the server checks the client's certificate after the client thinks the
    // handshake is done: a refusal shows on the first exchange.
    client.request("GET", "/healthz", b"").await.map(|_| client)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_a_client_ca_only_clients_it_signed_get_in() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (ca, cert, key) = client_identity("kube-apiserver");
    let (_, stranger_cert, stranger_key) = client_identity("stranger");
    let dir = common::temp_dir("client-ca-file");
    let ca_file = dir.join("client-ca.crt");
    std::fs::write(&ca_file, &ca).unwrap();
    let server = start("client-ca", true, |config| {
        config.client_ca = Some(ca_file.clone());
    })
    .await;
    let mut trusted = connect_as(&server, Some((&cert, &key))).await.unwrap();
    allowed(
        &trusted.post("/validate", &pod_review("trusted")).await,
        "trusted",
    );
    assert!(connect_as(&server, None).await.is_err(), "no certificate");
    assert!(
        connect_as(&server, Some((&stranger_cert, &stranger_key)))
            .await
            .is_err(),
        "a certificate of another CA"
    );
    // The probes, on the plain port, need none.
    assert_eq!(
        server.connect_metrics().await.get("/healthz").await.status,
        200
    );
    server.shutdown(Duration::from_secs(5)).await.unwrap();

    // A client CA file that holds no certificate: the server does not start, and says why.
    std::fs::write(&ca_file, "not a certificate").unwrap();
    let config = kanon_webhook::server::ServerConfig {
        client_ca: Some(ca_file.clone()),
        ..common::test_config()
    };
    let (resolver, _) = common::certificates(&common::temp_dir("client-ca-bad"));
    let error = kanon_webhook::server::Server::bind(
        config,
        resolver,
        kanon_webhook::PolicyState::new(),
        Arc::new(common::SlowLookup),
        kanon_webhook::metrics::Metrics::new(),
    )
    .await
    .unwrap_err();
    assert!(error.to_string().contains("client-ca.crt"), "{error}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn probes_and_metrics_answer_on_their_own_port() {
    let server = start("probe-port", false, |_| {}).await;
    let mut probe = server.connect_metrics().await;
    assert_eq!(probe.get("/healthz").await.status, 200);
    let response = probe.get("/readyz").await;
    assert_eq!(response.status, 503, "{}", response.text());
    server.state.replace(common::policies());
    assert_eq!(probe.get("/readyz").await.status, 200);
    assert_eq!(probe.get("/metrics").await.status, 200);
    assert_eq!(probe.get("/mutate").await.status, 404);
    server.shutdown(Duration::from_secs(5)).await.unwrap();
}
