//! HTTP lookups against a real server on 127.0.0.1: what arrives, what comes back, the limits,
//! the cache, the guard against private addresses, and TLS with an operator-given CA.

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use kanon_cluster::ClusterMetrics;
use kanon_cluster::http::{HttpConfig, HttpLookups, HttpSetupError, TokenSource};
use kanon_engine::HttpMethod;
use kanon_engine::{
    HttpAnswer, HttpCall, HttpToken, Lookup, LookupError, LookupFuture, ObjectQuery, PolicySet,
    compile_document,
};
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

const SECRET_TOKEN: &str = "s3cr3t-from-the-secret";
const STATIC_TOKEN: &str = "st4tic-token-in-the-policy";

/// One request as the server received it.
#[derive(Debug, Clone)]
struct Received {
    method: String,
    path: String,
    query: Option<String>,
    headers: HashMap<String, String>,
    body: Vec<u8>,
}

type Log = Arc<Mutex<Vec<Received>>>;

/// A test server: its address and what it received.
struct Server {
    addr: SocketAddr,
    log: Log,
}

impl Server {
    fn received(&self) -> Vec<Received> {
        self.log.lock().expect("log lock").clone()
    }

    fn url(&self, path: &str) -> String {
        let scheme = "http";
        format!("{scheme}://{}{path}", self.addr)
    }
}

type Body = BoxBody<Bytes, Infallible>;

fn full(body: impl Into<Bytes>) -> Body {
    Full::new(body.into()).boxed()
}

/// Answers per path: `/json` (with a repeated header), `/big` (4 KiB, with a length),
/// `/big-stream` (4 KiB, chunked), `/slow` (3 s), `/delay` (300 ms), `/redirect` (302 to
/// `/json`), `/fail` (500).
async fn answer(request: Request<Incoming>, log: Log) -> Result<Response<Body>, Infallible> {
    let (parts, body) = request.into_parts();
    let body = body
        .collect()
        .await
        .map(|c| c.to_bytes().to_vec())
        .unwrap_or_default();
    let headers = parts
        .headers
        .iter()
        .map(|(n, v)| {
            (
                n.as_str().to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    log.lock().expect("log lock").push(Received {
        method: parts.method.to_string(),
        path: parts.uri.path().to_string(),
        query: parts.uri.query().map(str::to_string),
        headers,
        body,
    });
    let auth = parts
        .headers
        .get("authorization")
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .unwrap_or_default();
    let json_answer = || {
        Response::builder()
            .header("Content-Type", "application/json")
            .header("X-Multi", "a")
            .header("X-Multi", "b")
            .body(full(r#"{"ok":true}"#))
    };
    let response = match parts.uri.path() {
        "/json" => json_answer(),
        "/big" => Response::builder().body(full(vec![b'x'; 4096])),
        "/big-stream" => {
            // No length: the client must stop by counting.
            let chunks =
                (0..8).map(|_| Ok::<_, Infallible>(Frame::data(Bytes::from(vec![b'y'; 512]))));
            Response::builder().body(StreamBody::new(futures::stream::iter(chunks)).boxed())
        }
        "/slow" => {
            tokio::time::sleep(Duration::from_secs(3)).await;
            json_answer()
        }
        "/delay" => {
            tokio::time::sleep(Duration::from_millis(300)).await;
            json_answer()
        }
        "/redirect" => Response::builder()
            .status(StatusCode::FOUND)
            .header("Location", "/json")
            .body(full("")),
        "/fail" => Response::builder()
            .status(StatusCode::INTERNAL_SERVER_ERROR)
            .body(full(r#"{"error":"down"}"#)),
        "/redirect-metadata" => Response::builder()
            .status(StatusCode::FOUND)
            .header("Location", "http://169.254.169.254/latest/meta-data/")
            .body(full("")),
        // Services that echo the `Authorization` header they were sent, in the ways a
        // careless or hostile one would: an error page, a JSON answer, text, an oversized body.
        "/echo-401" => Response::builder()
            .status(StatusCode::UNAUTHORIZED)
            .header("WWW-Authenticate", format!("Bearer realm=\"{auth}\""))
            .body(full(format!("token rejected: {auth}"))),
        "/echo-json" => Response::builder()
            .header("Content-Type", "application/json")
            .header("X-Seen", auth.clone())
            .body(full(serde_json::json!({"seen": auth}).to_string())),
        "/echo-text" => Response::builder()
            .header("Content-Type", "text/plain")
            .body(full(format!("you sent {auth}"))),
        "/echo-big" => Response::builder().body(full(format!("{auth}{}", "z".repeat(4096)))),
        _ => Response::builder()
            .status(StatusCode::NOT_FOUND)
            .body(full("")),
    };
    Ok(response.expect("a valid response"))
}

/// Starts a server on 127.0.0.1, over TLS when `tls` is given.
async fn start(tls: Option<TlsAcceptor>) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("local address");
    let log: Log = Arc::default();
    let shared = log.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let log = shared.clone();
            let tls = tls.clone();
            tokio::spawn(async move {
                let service = service_fn(move |request| answer(request, log.clone()));
                match tls {
                    None => {
                        let _ = http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                    }
                    Some(acceptor) => {
                        // A failed handshake (the client distrusts us) just ends here.
                        if let Ok(stream) = acceptor.accept(stream).await {
                            let _ = http1::Builder::new()
                                .serve_connection(TokioIo::new(stream), service)
                                .await;
                        }
                    }
                }
            });
        }
    });
    Server { addr, log }
}

/// Tokens of one Secret, `team-a/api`, key `token`, stored with a trailing newline.
struct FakeSecrets;

impl TokenSource for FakeSecrets {
    fn token<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        key: &'a str,
    ) -> LookupFuture<'a, String> {
        let result = if (namespace, name, key) == ("team-a", "api", "token") {
            Ok(format!("{SECRET_TOKEN}\n"))
        } else {
            Err(LookupError::Failed {
                what: format!("v1/Secret {namespace}/{name}"),
                message: format!("no key {key}"),
            })
        };
        Box::pin(std::future::ready(result))
    }
}

fn loopback_allowed() -> HttpConfig {
    HttpConfig {
        allowed_networks: vec!["127.0.0.1/32".parse().expect("a network")],
        ..HttpConfig::default()
    }
}

fn client(config: HttpConfig) -> (HttpLookups, ClusterMetrics) {
    let metrics = ClusterMetrics::new();
    let lookups =
        HttpLookups::new(config, Arc::new(FakeSecrets), metrics.clone()).expect("a client");
    (lookups, metrics)
}

fn get(url: String) -> HttpCall {
    HttpCall {
        method: HttpMethod::Get,
        url,
        params: BTreeMap::new(),
        headers: BTreeMap::new(),
        body: None,
        token: None,
        timeout: None,
        policy: "ClusterValidatePolicy/test".to_string(),
    }
}

fn encoded(metrics: &ClusterMetrics) -> String {
    let mut registry = Registry::default();
    metrics.register(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode metrics");
    text
}

fn install_ring() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

#[tokio::test]
async fn get_sends_params_and_headers_and_returns_the_answer() {
    let server = start(None).await;
    let (lookups, _) = client(loopback_allowed());
    let mut call = get(server.url("/json?fixed=1"));
    call.params.insert("name".into(), "a b&c".into());
    call.params.insert("ns".into(), "default".into());
    call.headers.insert("X-Request-Id".into(), "abc".into());

    let answer = lookups.call(&call).await.expect("an answer");

    assert_eq!(answer.status, 200);
    assert_eq!(answer.body, br#"{"ok":true}"#);
    assert_eq!(
        answer.headers.get("content-type").map(String::as_str),
        Some("application/json")
    );
    assert_eq!(
        answer.headers.get("x-multi").map(String::as_str),
        Some("a, b")
    );
    assert!(
        answer.headers.keys().all(|k| *k == k.to_lowercase()),
        "{:?}",
        answer.headers
    );

    let received = server.received();
    assert_eq!(received.len(), 1);
    let got = &received[0];
    assert_eq!(got.method, "GET");
    assert_eq!(got.path, "/json");
    assert_eq!(
        got.query.as_deref(),
        Some("fixed=1&name=a+b%26c&ns=default")
    );
    assert_eq!(
        got.headers.get("x-request-id").map(String::as_str),
        Some("abc")
    );
    assert_eq!(
        got.headers.get("accept").map(String::as_str),
        Some("application/json")
    );
    assert!(!got.headers.contains_key("authorization"));
    assert!(got.body.is_empty());
}

#[tokio::test]
async fn post_sends_the_json_body() {
    let server = start(None).await;
    let (lookups, _) = client(loopback_allowed());
    let mut call = get(server.url("/json"));
    call.method = HttpMethod::Post;
    call.body = Some(json!({"image": "nginx:1.27", "replicas": 3}));

    let answer = lookups.call(&call).await.expect("an answer");

    assert_eq!(answer.status, 200);
    let received = server.received();
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].method, "POST");
    assert_eq!(
        received[0].headers.get("content-type").map(String::as_str),
        Some("application/json")
    );
    let body: serde_json::Value = serde_json::from_slice(&received[0].body).expect("JSON body");
    assert_eq!(body, json!({"image": "nginx:1.27", "replicas": 3}));
}

#[tokio::test]
async fn bearer_tokens_arrive_from_a_secret_and_from_the_policy() {
    let server = start(None).await;
    let (lookups, _) = client(loopback_allowed());

    let mut from_secret = get(server.url("/json"));
    from_secret.token = Some(HttpToken::Secret {
        namespace: "team-a".into(),
        name: "api".into(),
        key: "token".into(),
    });
    lookups.call(&from_secret).await.expect("an answer");

    let mut inline = get(server.url("/json"));
    inline.token = Some(HttpToken::Static(STATIC_TOKEN.into()));
    lookups.call(&inline).await.expect("an answer");

    let received = server.received();
    assert_eq!(received.len(), 2, "different tokens are different calls");
    assert_eq!(
        received[0].headers.get("authorization").map(String::as_str),
        Some(format!("Bearer {SECRET_TOKEN}").as_str()),
        "the Secret's trailing newline is trimmed"
    );
    assert_eq!(
        received[1].headers.get("authorization").map(String::as_str),
        Some(format!("Bearer {STATIC_TOKEN}").as_str())
    );

    // A Secret the source cannot read: its error, and nothing sent.
    let mut missing = get(server.url("/json"));
    missing.token = Some(HttpToken::Secret {
        namespace: "team-a".into(),
        name: "api".into(),
        key: "other".into(),
    });
    let error = lookups.call(&missing).await.expect_err("no token");
    assert!(matches!(error, LookupError::Failed { .. }), "{error:?}");
    assert_eq!(server.received().len(), 2);
}

#[tokio::test]
async fn an_answer_over_the_limit_fails() {
    let server = start(None).await;
    let (lookups, _) = client(HttpConfig {
        max_body_bytes: 1024,
        ..loopback_allowed()
    });
    for path in ["/big", "/big-stream"] {
        let error = lookups
            .call(&get(server.url(path)))
            .await
            .expect_err("too large");
        match &error {
            LookupError::Failed { message, .. } => assert!(
                message.contains("larger than the limit of 1024 bytes"),
                "{path}: {message}"
            ),
            other => panic!("{path}: expected Failed, got {other:?}"),
        }
    }
    // Within the limit it is read whole.
    let (lookups, _) = client(HttpConfig {
        max_body_bytes: 4096,
        ..loopback_allowed()
    });
    for path in ["/big", "/big-stream"] {
        let answer = lookups
            .call(&get(server.url(path)))
            .await
            .expect("an answer");
        assert_eq!(answer.body.len(), 4096, "{path}");
    }
}

#[tokio::test]
async fn a_slow_answer_times_out() {
    let server = start(None).await;
    let (lookups, metrics) = client(loopback_allowed());
    let mut call = get(server.url("/slow"));
    call.timeout = Some(Duration::from_millis(300));

    let started = Instant::now();
    let error = lookups.call(&call).await.expect_err("timed out");

    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        error,
        LookupError::TimedOut {
            what: call.describe(),
            after: Duration::from_millis(300)
        }
    );
    assert!(
        encoded(&metrics)
            .contains(r#"kanon_lookup_errors_total{source="http",reason="timed_out"} 1"#)
    );
}

#[tokio::test]
async fn the_default_timeout_applies_without_one_in_the_call() {
    let server = start(None).await;
    let (lookups, _) = client(HttpConfig {
        default_timeout: Duration::from_millis(200),
        ..loopback_allowed()
    });
    let error = lookups
        .call(&get(server.url("/slow")))
        .await
        .expect_err("timed out");
    assert!(
        matches!(error, LookupError::TimedOut { after, .. } if after == Duration::from_millis(200)),
        "{error:?}"
    );
}

#[tokio::test]
async fn a_redirect_is_returned_not_followed() {
    let server = start(None).await;
    let (lookups, _) = client(loopback_allowed());

    let answer = lookups
        .call(&get(server.url("/redirect")))
        .await
        .expect("an answer");

    assert_eq!(answer.status, 302);
    assert_eq!(
        answer.headers.get("location").map(String::as_str),
        Some("/json")
    );
    assert_eq!(server.received().len(), 1);
}

#[tokio::test]
async fn a_second_identical_call_is_served_from_the_cache() {
    let server = start(None).await;
    let (lookups, metrics) = client(loopback_allowed());
    let mut call = get(server.url("/json"));
    call.params.insert("q".into(), "1".into());

    let first = lookups.call(&call).await.expect("an answer");
    let second = lookups.call(&call).await.expect("an answer");

    assert_eq!(first, second);
    assert_eq!(server.received().len(), 1);
    let text = encoded(&metrics);
    assert!(
        text.contains(r#"kanon_lookups_total{source="http",cache="hit"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(r#"kanon_lookups_total{source="http",cache="miss"} 1"#),
        "{text}"
    );

    // Anything that defines the call makes another one.
    let mut other = call.clone();
    other.params.insert("q".into(), "2".into());
    lookups.call(&other).await.expect("an answer");
    let mut other = call.clone();
    other.headers.insert("X-Tenant".into(), "b".into());
    lookups.call(&other).await.expect("an answer");
    assert_eq!(server.received().len(), 3);
}

#[tokio::test]
async fn a_cached_answer_expires_after_the_ttl() {
    let server = start(None).await;
    let (lookups, _) = client(HttpConfig {
        cache_ttl: Duration::from_millis(200),
        ..loopback_allowed()
    });
    let call = get(server.url("/json"));

    lookups.call(&call).await.expect("an answer");
    lookups.call(&call).await.expect("an answer");
    assert_eq!(server.received().len(), 1);
    tokio::time::sleep(Duration::from_millis(300)).await;
    lookups.call(&call).await.expect("an answer");
    assert_eq!(server.received().len(), 2);
}

#[tokio::test]
async fn errors_are_not_cached_and_caching_can_be_off() {
    let server = start(None).await;
    let (lookups, _) = client(loopback_allowed());
    let call = get(server.url("/fail"));
    for _ in 0..2 {
        let answer = lookups.call(&call).await.expect("an answer");
        assert_eq!(answer.status, 500);
    }
    assert_eq!(server.received().len(), 2);

    let (lookups, _) = client(HttpConfig {
        cache_ttl: Duration::ZERO,
        ..loopback_allowed()
    });
    let call = get(server.url("/json"));
    lookups.call(&call).await.expect("an answer");
    lookups.call(&call).await.expect("an answer");
    assert_eq!(server.received().len(), 4);
}

#[tokio::test]
async fn identical_concurrent_calls_share_one_request() {
    let server = start(None).await;
    let (lookups, _) = client(loopback_allowed());
    let call = get(server.url("/delay"));

    let answers = futures::future::join_all((0..5).map(|_| lookups.call(&call))).await;

    for answer in answers {
        assert_eq!(answer.expect("an answer").status, 200);
    }
    assert_eq!(server.received().len(), 1);
}

#[tokio::test]
async fn private_and_local_addresses_are_refused_without_an_allowance() {
    let server = start(None).await;
    let port = server.addr.port();
    let (lookups, metrics) = client(HttpConfig::default());
    let targets = [
        (format!("http://127.0.0.1:{port}/json"), "loopback"),
        (format!("http://localhost:{port}/json"), "loopback"),
        (format!("http://[::1]:{port}/json"), "loopback"),
        (format!("http://[::ffff:127.0.0.1]:{port}/json"), "loopback"),
        // Another spelling of 127.0.0.1 that URL parsers accept.
        (format!("http://2130706433:{port}/json"), "loopback"),
        (
            "http://169.254.169.254/latest/meta-data/".to_string(),
            "link-local",
        ),
        ("http://10.1.2.3/".to_string(), "private"),
        ("http://172.16.5.4/".to_string(), "private"),
        ("http://172.31.0.1/".to_string(), "private"),
        ("http://192.168.0.1/".to_string(), "private"),
        ("http://[fc00::1]/".to_string(), "private"),
        ("http://[fe80::1]/".to_string(), "link-local"),
        // IPv4-mapped IPv6 forms reach the IPv4 address: judged by it.
        (
            "http://[::ffff:169.254.169.254]/latest/meta-data/".to_string(),
            "link-local",
        ),
        ("http://[::ffff:10.0.0.1]/".to_string(), "private"),
        ("http://[::ffff:192.168.1.1]/".to_string(), "private"),
        (format!("http://[::ffff:7f00:1]:{port}/json"), "loopback"),
        ("http://[fd00:ec2::254]/".to_string(), "private"),
        ("http://100.100.100.200/".to_string(), "shared"),
        ("http://0.0.0.0/".to_string(), "unspecified"),
    ];
    for (url, why) in &targets {
        let started = Instant::now();
        let error = lookups.call(&get(url.clone())).await.expect_err("refused");
        let elapsed = started.elapsed();
        assert!(
            elapsed < Duration::from_millis(500),
            "{url} took {elapsed:?}"
        );
        match &error {
            LookupError::Forbidden { what, reason } => {
                assert_eq!(what, &format!("GET {url}"));
                assert!(reason.contains(why), "{url}: {reason}");
                assert!(
                    reason.contains("unless the operator allows the network"),
                    "{reason}"
                );
            }
            other => panic!("{url}: expected Forbidden, got {other:?}"),
        }
    }
    let error = lookups
        .call(&get(format!("http://localhost:{port}/json")))
        .await
        .expect_err("refused");
    let text = error.to_string();
    assert!(
        text.contains("`localhost` resolves to 127.0.0.1, a loopback address"),
        "{text}"
    );

    let error = lookups
        .call(&get("file:///etc/passwd".into()))
        .await
        .expect_err("refused");
    assert!(matches!(error, LookupError::Forbidden { .. }), "{error:?}");

    assert!(server.received().is_empty());
    let text = encoded(&metrics);
    assert!(
        text.contains(&format!(
            r#"kanon_lookup_errors_total{{source="http",reason="forbidden"}} {}"#,
            targets.len() + 2
        )),
        "{text}"
    );
    assert!(!text.contains(r#"cache="miss"} 1"#), "{text}");
}

#[tokio::test]
async fn a_host_name_is_called_at_its_allowed_addresses() {
    // `localhost` may resolve to ::1 too; only 127.0.0.1 is allowed, and is the one dialled.
    let server = start(None).await;
    let (lookups, _) = client(loopback_allowed());
    let url = format!("http://localhost:{}/json", server.addr.port());
    let answer = lookups.call(&get(url)).await.expect("an answer");
    assert_eq!(answer.status, 200);
    assert_eq!(server.received().len(), 1);
}

#[tokio::test]
async fn a_connection_failure_is_failed_with_its_cause() {
    // A port nobody listens on: bound, then released.
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("local address");
    drop(listener);
    let (lookups, _) = client(loopback_allowed());

    let error = lookups
        .call(&get(format!("http://{addr}/json?secret=1")))
        .await
        .expect_err("no server");

    match &error {
        LookupError::Failed { message, .. } => {
            assert!(message.starts_with("cannot connect: "), "{message}");
            assert!(message.contains("Connection refused"), "{message}");
            assert!(!message.contains("secret=1"), "{message}");
        }
        other => panic!("expected Failed, got {other:?}"),
    }
}

#[tokio::test]
async fn tokens_never_show() {
    let (lookups, _) = client(HttpConfig::default());
    let mut call = get("http://127.0.0.1/json".into());
    call.token = Some(HttpToken::Static(STATIC_TOKEN.into()));

    assert!(!format!("{call:?}").contains(STATIC_TOKEN));
    assert!(!format!("{lookups:?}").contains(STATIC_TOKEN));
    let error = lookups.call(&call).await.expect_err("refused");
    assert!(!format!("{error} {error:?}").contains(STATIC_TOKEN));

    // A token that cannot be a header value is refused without being shown.
    let server = start(None).await;
    let (lookups, _) = client(loopback_allowed());
    let mut call = get(server.url("/json"));
    call.token = Some(HttpToken::Static(format!("{STATIC_TOKEN}\u{7f}x")));
    let error = lookups.call(&call).await.expect_err("bad token");
    assert!(matches!(error, LookupError::Failed { .. }), "{error:?}");
    assert!(
        !format!("{error} {error:?}").contains(STATIC_TOKEN),
        "{error}"
    );
    assert!(server.received().is_empty());

    // Nor in errors after the token was sent.
    call.token = Some(HttpToken::Static(STATIC_TOKEN.into()));
    call.url = server.url("/slow");
    call.timeout = Some(Duration::from_millis(100));
    let error = lookups.call(&call).await.expect_err("timed out");
    assert!(
        !format!("{error} {error:?}").contains(STATIC_TOKEN),
        "{error}"
    );
}

#[tokio::test]
async fn the_call_future_is_send() {
    fn assert_send<T: Send>(_: &T) {}
    let (lookups, _) = client(HttpConfig::default());
    let call = get("http://10.0.0.1/".into());
    let future = lookups.call(&call);
    assert_send(&future);
    let _ = future.await;
}

/// A CA and a serving certificate for 127.0.0.1 signed by it: (CA PEM, acceptor).
fn tls_server() -> (String, TlsAcceptor) {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    };
    use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};

    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "kanon test CA");
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_key = KeyPair::generate().expect("CA key");
    let ca_cert = ca_params.self_signed(&ca_key).expect("CA certificate");
    let issuer = Issuer::new(ca_params, ca_key);

    let mut params = CertificateParams::new(vec!["127.0.0.1".to_string()]).expect("params");
    params
        .distinguished_name
        .push(DnType::CommonName, "127.0.0.1");
    let key = KeyPair::generate().expect("key");
    let cert = params.signed_by(&key, &issuer).expect("certificate");

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )
        .expect("server config");
    (ca_cert.pem(), TlsAcceptor::from(Arc::new(config)))
}

#[tokio::test]
async fn https_with_an_extra_ca() {
    install_ring();
    let (ca_pem, acceptor) = tls_server();
    let server = start(Some(acceptor)).await;
    let url = format!("https://{}/json", server.addr);

    let (trusting, _) = client(HttpConfig {
        extra_roots_pem: ca_pem.into_bytes(),
        ..loopback_allowed()
    });
    let answer = trusting
        .call(&get(url.clone()))
        .await
        .expect("an answer over TLS");
    assert_eq!(answer.status, 200);
    assert_eq!(answer.body, br#"{"ok":true}"#);

    let (distrusting, _) = client(loopback_allowed());
    let error = distrusting.call(&get(url)).await.expect_err("unknown CA");
    match &error {
        LookupError::Failed { message, .. } => {
            assert!(message.contains("certificate"), "{message}")
        }
        other => panic!("expected Failed, got {other:?}"),
    }
    assert_eq!(server.received().len(), 1);
}

#[test]
fn bad_extra_roots_are_a_setup_error() {
    let setup = |pem: &str| {
        HttpLookups::new(
            HttpConfig {
                extra_roots_pem: pem.as_bytes().to_vec(),
                ..HttpConfig::default()
            },
            Arc::new(FakeSecrets),
            ClusterMetrics::new(),
        )
    };
    assert!(matches!(
        setup("not a certificate"),
        Err(HttpSetupError::NoExtraRoots)
    ));
    assert!(matches!(
        setup("-----BEGIN CERTIFICATE-----\nAAAA\n"),
        Err(HttpSetupError::ExtraRootsPem { .. })
    ));
    assert!(setup("  \n").is_ok(), "blank means no extra CAs");
}

// ---------------------------------------------------------------------------------------------
// Through the engine: what a policy (and the user of a request) gets to see
// ---------------------------------------------------------------------------------------------

/// The engine's lookup with only HTTP: objects are none, calls go through `HttpLookups`.
struct HttpOnly(HttpLookups);

impl Lookup for HttpOnly {
    fn get<'a>(&'a self, _: ObjectQuery<'a>, _: &'a str) -> LookupFuture<'a, Option<Arc<Value>>> {
        Box::pin(std::future::ready(Ok(None)))
    }

    fn list<'a>(&'a self, _: ObjectQuery<'a>) -> LookupFuture<'a, Vec<Arc<Value>>> {
        Box::pin(std::future::ready(Ok(Vec::new())))
    }

    fn http<'a>(&'a self, call: &'a HttpCall) -> LookupFuture<'a, HttpAnswer> {
        Box::pin(self.0.call(call))
    }
}

/// A ClusterValidatePolicy that asks `http` (an `http` reference's target) and denies with
/// what it got: `{{ data | tojson }}`, so a denial shows the answer a policy sees.
fn asking(http: Value) -> PolicySet {
    let doc = json!({
        "apiVersion": "policy.kanon.dev/v1alpha1",
        "kind": "ClusterValidatePolicy",
        "metadata": {"name": "ask"},
        "spec": {"validateRules": [{"template": {"type": "condition", "condition": {
            "cond": "Exist", "dataRef": {"from": "http", "http": http},
            "message": "{{ data | tojson }}",
        }}}]},
    });
    let policy = compile_document(&doc).unwrap_or_else(|e| panic!("{e}"));
    PolicySet::build(vec![policy]).expect("one policy")
}

/// A Pod CREATE whose object carries secret-like values.
fn pod_request() -> kanon_engine::Request {
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web", "namespace": "team-a",
                     "annotations": {"db-password": "pod-annotation-s3cr3t"}},
        "spec": {"containers": [{"name": "app", "image": "nginx",
                  "env": [{"name": "PASSWORD", "value": "pod-env-s3cr3t"}]}]},
    });
    kanon_engine::Request::from_objects(kanon_api::Operation::Create, Some(pod), None)
        .expect("a request")
}

/// Everything written through `tracing`, at every level, by every test of this file from the
/// first call on: one global subscriber (a scoped one misses events whose callsites other
/// tests' threads met first).
fn captured_logs() -> Arc<Mutex<Vec<u8>>> {
    #[derive(Clone)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    static LOGS: std::sync::OnceLock<Arc<Mutex<Vec<u8>>>> = std::sync::OnceLock::new();
    LOGS.get_or_init(|| {
        let logs = Arc::new(Mutex::new(Vec::new()));
        let writer = Buffer(logs.clone());
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .init();
        logs
    })
    .clone()
}

#[tokio::test]
async fn a_redirect_to_a_refused_address_is_not_followed() {
    let server = start(None).await;
    let (lookups, _) = client(loopback_allowed());
    // The allowed service answers with a redirect to the metadata address: the answer is the
    // redirect itself, nothing else is requested.
    let answer = lookups
        .call(&get(server.url("/redirect-metadata")))
        .await
        .expect("an answer");
    assert_eq!(answer.status, 302);
    assert_eq!(server.received().len(), 1);
    // And a policy gets an evaluation error for it, not the metadata.
    let set = asking(json!({"url": server.url("/redirect-metadata")}));
    let decision = set.validate(&pod_request(), None, &HttpOnly(lookups)).await;
    assert!(!decision.allowed);
    let message = decision.messages.join("\n");
    assert!(message.contains("answered HTTP 302"), "{message}");
    // Two calls (a redirect is not cached), both to the allowed service only.
    let paths: Vec<String> = server.received().into_iter().map(|r| r.path).collect();
    assert_eq!(paths, ["/redirect-metadata", "/redirect-metadata"]);
}

#[tokio::test]
async fn tokens_never_leak_from_failing_services() {
    let logs = captured_logs();
    let server = start(None).await;
    let (lookups, metrics) = client(HttpConfig {
        max_body_bytes: 1024,
        cache_ttl: Duration::ZERO,
        ..loopback_allowed()
    });
    let lookup = HttpOnly(lookups);
    let from_secret = json!({"secretRef": {"namespace": "team-a", "name": "api"}});
    let inline = json!({"staticToken": STATIC_TOKEN});
    // Each way of failing (and an echo in a good answer), with each kind of token: what the
    // policy's message says must name the failure and never show the token.
    let cases = [
        (
            "/echo-401",
            None,
            "answered HTTP 401: token rejected: Bearer <redacted>",
        ),
        (
            "/echo-json",
            None,
            r#""seen": "Bearer \u003credacted\u003e""#,
        ),
        ("/echo-text", None, "answered with a body that is not JSON"),
        ("/slow", Some(1), "timed out after 1s"),
        ("/echo-big", None, "larger than the limit of 1024 bytes"),
        ("/fail", None, "answered HTTP 500"),
    ];
    let mut shown = String::new();
    for (path, timeout, expected) in cases {
        for auth in [&from_secret, &inline] {
            let mut http = json!({"url": server.url(path), "auth": auth});
            if let Some(seconds) = timeout {
                http["timeoutSeconds"] = json!(seconds);
            }
            let decision = asking(http).validate(&pod_request(), None, &lookup).await;
            assert!(!decision.allowed, "{path}: {decision:?}");
            let text = [decision.messages.as_slice(), decision.warnings.as_slice()]
                .concat()
                .join("\n");
            assert!(text.contains(expected), "{path}: {text}");
            shown.push_str(&text);
            shown.push_str(&format!("{decision:?}"));
        }
    }
    // The service did get the tokens.
    let sent: Vec<String> = server
        .received()
        .iter()
        .filter_map(|r| r.headers.get("authorization").cloned())
        .collect();
    assert!(sent.contains(&format!("Bearer {SECRET_TOKEN}")), "{sent:?}");
    assert!(sent.contains(&format!("Bearer {STATIC_TOKEN}")), "{sent:?}");

    let exposition = encoded(&metrics);
    let logged = String::from_utf8_lossy(&logs.lock().expect("log lock")).into_owned();
    assert!(logged.contains("HTTP lookup failed"), "{logged}");
    for (what, text) in [
        ("decision", &shown),
        ("metrics", &exposition),
        ("logs", &logged),
    ] {
        for secret in [SECRET_TOKEN, STATIC_TOKEN] {
            assert!(!text.contains(secret), "{what} show {secret}:\n{text}");
        }
    }
    // Nor the object's contents, in the metrics or the logs.
    for text in [&exposition, &logged] {
        assert!(!text.contains("s3cr3t"), "{text}");
    }
}
