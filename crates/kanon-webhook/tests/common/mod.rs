//! A test server on 127.0.0.1 (ports picked by the system, certificates created in a fresh
//! directory) and a small HTTP/1.1 client, over TLS or plain TCP, that writes exactly the
//! bytes a test asks for (to stall mid-head or mid-body) and reads one response at a time.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use kanon_engine::{Lookup, LookupFuture, ObjectQuery, PolicySet, compile_document};
use kanon_webhook::PolicyState;
use kanon_webhook::metrics::Metrics;
use kanon_webhook::server::{Server, ServerConfig, ServerError};
use kanon_webhook::tls::CertResolver;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

pub const FIXTURES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../fixtures/admission-reviews"
);

/// The label the test override policy puts on every object.
pub const LABEL: &str = "example.com/reviewed";

/// The kind whose lookup is slow (see [`SlowLookup`]).
pub const SLOW_KIND: &str = "Slow";

/// How long a lookup of [`SLOW_KIND`] takes.
pub const SLOW_LOOKUP: Duration = Duration::from_millis(1500);

/// A lookup that knows no objects and takes [`SLOW_LOOKUP`] to say so for [`SLOW_KIND`].
#[derive(Debug)]
pub struct SlowLookup;

impl Lookup for SlowLookup {
    fn get<'a>(
        &'a self,
        query: ObjectQuery<'a>,
        _name: &'a str,
    ) -> LookupFuture<'a, Option<Arc<Value>>> {
        Box::pin(async move {
            if query.kind == SLOW_KIND {
                tokio::time::sleep(SLOW_LOOKUP).await;
            }
            Ok(None)
        })
    }

    fn list<'a>(&'a self, _query: ObjectQuery<'a>) -> LookupFuture<'a, Vec<Arc<Value>>> {
        Box::pin(std::future::ready(Ok(Vec::new())))
    }
}

/// The override policy both test files use: `LABEL: "true"` on every object.
pub fn label_policy() -> Value {
    json!({
        "apiVersion": "policy.kanon.dev/v1alpha1",
        "kind": "ClusterOverridePolicy",
        "metadata": {"name": "reviewed-label"},
        "spec": {"overrideRules": [{"overriders": {"template": {
            "type": "labels", "operation": "add", "path": LABEL, "value": {"string": "true"},
        }}}]},
    })
}

/// The validate policy both test files use: no privileged container in a Pod.
pub fn no_privileged_policy() -> Value {
    json!({
        "apiVersion": "policy.kanon.dev/v1alpha1",
        "kind": "ClusterValidatePolicy",
        "metadata": {"name": "no-privileged"},
        "spec": {
            "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
            "validateRules": [{"targetOperations": ["CREATE", "UPDATE"], "program": concat!(
                "{%- for c in object.spec.containers if c.securityContext and c.securityContext.privileged -%}\n",
                "{%- if loop.first -%}\n",
                "{\"valid\": false, \"reason\": {{ (\"container \" ~ c.name ~ \" is privileged\") | tojson }}}\n",
                "{%- endif -%}\n",
                "{%- endfor -%}\n",
            )}],
        },
    })
}

/// A label on everything; no privileged Pod containers; ConfigMaps (no fixture is one) look up
/// a slow object ([`slow_review`]).
pub fn policies() -> PolicySet {
    let documents = [
        label_policy(),
        no_privileged_policy(),
        json!({
            "apiVersion": "policy.kanon.dev/v1alpha1",
            "kind": "ClusterValidatePolicy",
            "metadata": {"name": "slow-lookup"},
            "spec": {
                "resourceSelectors": [{"apiVersion": "v1", "kind": "ConfigMap"}],
                "validateRules": [{"template": {"type": "condition", "condition": {
                    "cond": "Exist",
                    "dataRef": {"from": "k8s", "path": "/spec", "k8s": {
                        "apiVersion": "example.com/v1", "kind": SLOW_KIND, "name": "slow",
                    }},
                    "message": "found the slow object",
                }}}],
            },
        }),
    ];
    let compiled = documents
        .iter()
        .map(|d| compile_document(d).unwrap_or_else(|e| panic!("{e}")))
        .collect();
    PolicySet::build(compiled).unwrap()
}

/// A fixture's review body.
pub fn fixture(name: &str) -> Value {
    let path = Path::new(FIXTURES).join(name);
    let text = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_slice(&text).unwrap()
}

/// A ConfigMap CREATE (made from `service-create.json`): its validation takes
/// [`SLOW_LOOKUP`].
pub fn slow_review(uid: &str) -> Value {
    let mut review = with_uid(fixture("service-create.json"), uid);
    review["request"]["kind"] = json!({"group": "", "version": "v1", "kind": "ConfigMap"});
    review["request"]["resource"] = json!({"group": "", "version": "v1", "resource": "configmaps"});
    review["request"]["object"]["kind"] = json!("ConfigMap");
    review
}

/// Every fixture file, in name order.
pub fn fixture_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(FIXTURES)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    assert!(files.len() >= 10, "fixtures missing: {files:?}");
    files
}

/// `review` with a new uid.
pub fn with_uid(mut review: Value, uid: &str) -> Value {
    review["request"]["uid"] = json!(uid);
    review
}

/// A fresh directory under the target's temporary directory.
pub fn temp_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("kanon-https")
        .join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A running server and what a test needs of it.
pub struct TestServer {
    pub addr: SocketAddr,
    pub metrics_addr: SocketAddr,
    pub dir: PathBuf,
    pub ca: PathBuf,
    pub resolver: Arc<CertResolver>,
    pub state: Arc<PolicyState>,
    pub metrics: Arc<Metrics>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), ServerError>>>,
}

/// A CA and a serving certificate for `localhost` created in `dir` as standalone kanon does,
/// loaded; and the CA's file.
pub fn certificates(dir: &Path) -> (Arc<CertResolver>, PathBuf) {
    let files = kanon_certificates::directory::ensure(dir).unwrap();
    let resolver = CertResolver::load(&files.cert, &files.key).unwrap();
    (resolver, files.ca.expect("a generated CA"))
}

/// Test defaults: short timeouts, a fast certificate poll.
pub fn test_config() -> ServerConfig {
    ServerConfig {
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        metrics_listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        header_read_timeout: Duration::from_secs(2),
        idle_timeout: Duration::from_secs(30),
        default_review_timeout: Duration::from_secs(10),
        drain_timeout: Duration::from_secs(10),
        ..ServerConfig::default()
    }
}

/// Starts a server with certificates in a fresh directory named after the test; `ready`: with
/// [`policies`] in force.
pub async fn start(
    name: &str,
    ready: bool,
    configure: impl FnOnce(&mut ServerConfig),
) -> TestServer {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = temp_dir(name);
    let (resolver, ca) = certificates(&dir);
    let mut config = test_config();
    configure(&mut config);
    let state = PolicyState::new();
    if ready {
        state.replace(policies());
    }
    let metrics = Metrics::new();
    let server = Server::bind(
        config,
        resolver.clone(),
        state.clone(),
        Arc::new(SlowLookup),
        metrics.clone(),
    )
    .await
    .unwrap();
    let (addr, metrics_addr) = (server.local_addr(), server.metrics_addr());
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(server.run(async {
        let _ = stopped.await;
    }));
    TestServer {
        addr,
        metrics_addr,
        dir,
        ca,
        resolver,
        state,
        metrics,
        stop: Some(stop),
        task: Some(task),
    }
}

impl TestServer {
    /// A TLS connection trusting the server's generated CA.
    pub async fn connect(&self) -> Client<TlsStream<TcpStream>> {
        connect_tls(self.addr, &self.ca).await.unwrap()
    }

    /// A plain connection to the metrics listener.
    pub async fn connect_metrics(&self) -> Client<TcpStream> {
        Client::new(TcpStream::connect(self.metrics_addr).await.unwrap())
    }

    /// Signals shutdown (the server drains in the background).
    pub fn trigger_shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }

    /// Signals shutdown and waits (at most `within`) for the server to return.
    pub async fn shutdown(mut self, within: Duration) -> Result<(), ServerError> {
        self.trigger_shutdown();
        let task = self.task.take().unwrap();
        tokio::time::timeout(within, task)
            .await
            .expect("the server did not shut down in time")
            .expect("the server task panicked")
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.trigger_shutdown();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A client configuration trusting only the CA in `ca` (PEM).
pub fn client_config(ca: &Path) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(config)
}

/// A TLS connection to `addr` as `localhost`, trusting only the CA in `ca`.
pub async fn connect_tls(
    addr: SocketAddr,
    ca: &Path,
) -> std::io::Result<Client<TlsStream<TcpStream>>> {
    let tcp = TcpStream::connect(addr).await?;
    let connector = TlsConnector::from(client_config(ca));
    let name = ServerName::try_from("localhost").unwrap();
    let tls = connector.connect(name, tcp).await?;
    Ok(Client::new(tls))
}

/// One HTTP response.
#[derive(Debug)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }
}

/// An HTTP/1.1 client over one connection.
pub struct Client<S> {
    stream: BufReader<S>,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Client<S> {
    pub fn new(stream: S) -> Self {
        Client {
            stream: BufReader::new(stream),
        }
    }

    /// Writes `bytes` as they are.
    pub async fn send_raw(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        let stream = self.stream.get_mut();
        stream.write_all(bytes).await?;
        stream.flush().await
    }

    /// The head of a request with a body of `length` bytes.
    pub fn head(method: &str, path: &str, length: usize) -> Vec<u8> {
        format!(
            "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nAccept: application/json\r\nContent-Length: {length}\r\n\r\n"
        )
        .into_bytes()
    }

    /// Sends a request and reads its response.
    pub async fn request(
        &mut self,
        method: &str,
        path: &str,
        body: &[u8],
    ) -> std::io::Result<HttpResponse> {
        let mut bytes = Self::head(method, path, body.len());
        bytes.extend_from_slice(body);
        self.send_raw(&bytes).await?;
        self.read_response().await
    }

    /// POSTs `review` as JSON.
    pub async fn post(&mut self, path: &str, review: &Value) -> HttpResponse {
        self.request("POST", path, &serde_json::to_vec(review).unwrap())
            .await
            .unwrap()
    }

    pub async fn get(&mut self, path: &str) -> HttpResponse {
        self.request("GET", path, b"").await.unwrap()
    }

    /// Reads one response (bodies with a Content-Length only).
    pub async fn read_response(&mut self) -> std::io::Result<HttpResponse> {
        let mut line = String::new();
        if self.stream.read_line(&mut line).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let status = line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("not a status line: {line:?}"));
        let mut headers = Vec::new();
        loop {
            line.clear();
            if self.stream.read_line(&mut line).await? == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            let trimmed = line.trim_end();
            if trimmed.is_empty() {
                break;
            }
            let (name, value) = trimmed.split_once(':').unwrap();
            headers.push((name.trim().to_string(), value.trim().to_string()));
        }
        let mut response = HttpResponse {
            status,
            headers,
            body: Vec::new(),
        };
        assert!(
            response.header("transfer-encoding").is_none(),
            "chunked responses are not expected: {:?}",
            response.headers
        );
        let length: usize = response
            .header("content-length")
            .map_or(0, |v| v.parse().unwrap());
        response.body = vec![0; length];
        self.stream.read_exact(&mut response.body).await?;
        Ok(response)
    }

    /// Whether the server closed the connection within `within` (end of stream or an error
    /// on read); panics if it sends bytes instead.
    pub async fn closed_within(&mut self, within: Duration) -> bool {
        let mut byte = [0_u8; 1];
        match tokio::time::timeout(within, self.stream.read(&mut byte)).await {
            Err(_) => false,
            Ok(Ok(0)) | Ok(Err(_)) => true,
            Ok(Ok(_)) => panic!("unexpected bytes from the server: {byte:?}"),
        }
    }
}
