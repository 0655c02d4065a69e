//! The certificates kanon keeps in a Secret, against a real kube-apiserver 1.35: creation,
//! replicas converging on one Secret, reuse, renewal and CA rotation while a TLS client keeps
//! connecting, replicas following each other, repairs of a bad Secret, and RBAC refusals.
//!
//! One control plane serves every test of this file (each test has its own namespace); it is
//! started by the first test that needs it, in `CARGO_TARGET_TMPDIR`, and dies with the test
//! process. Certificates are checked with rustls (what a client does), never with kanon's own
//! reader.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::StreamExt as _;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kanon_cluster::certificates::{
    CA_CERT_KEY, CA_KEY_KEY, CA_SIGNING_CERT_KEY, CertificateConfig, CertificateError,
    CertificateMetrics, Certificates, MANAGED_BY, MANAGED_BY_LABEL, ROTATED_AT_ANNOTATION,
    SECRET_TYPE, TLS_CERT_KEY, TLS_KEY_KEY, secret_problems,
};
use kanon_control_plane::Options;
use kanon_control_plane::kanon::Cluster;
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use kube::{Client, ResourceExt as _};
use prometheus_client::registry::Registry;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::ServerCertVerifier as _;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

const SECRET: &str = "kanon-tls";
const LOCALHOST: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

// ---------------------------------------------------------------------------------------------
// The control plane, clients and namespaces.

/// The cluster of this test binary, started once (blocking: call it off the runtime).
fn cluster() -> &'static Cluster {
    static CLUSTER: OnceLock<Cluster> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        // A fixed directory, emptied at each start, so runs leave nothing behind but it.
        let state_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("certificates-control-plane");
        let options = Options {
            state_dir: Some(state_dir),
            controller_manager: false,
            ..Options::default()
        };
        Cluster::start("certificates", options)
            .unwrap_or_else(|e| panic!("starting the control plane: {e:#}"))
    })
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A client of the control plane, as the admin or impersonating `user`.
async fn client_as(user: Option<&str>) -> Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cluster = tokio::task::spawn_blocking(cluster)
        .await
        .expect("the control plane");
    let mut config = cluster.kube_config().await.expect("a client configuration");
    if let Some(user) = user {
        config.auth_info.impersonate = Some(user.to_string());
    }
    Client::try_from(config).expect("a client")
}

/// An admin client and a fresh namespace `name`.
async fn setup(name: &str) -> Client {
    let client = client_as(None).await;
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap_or_else(|e| panic!("creating namespace {name}: {e}"));
    client
}

fn config(namespace: &str, dir: &Path) -> CertificateConfig {
    CertificateConfig {
        namespace: namespace.to_string(),
        secret_name: SECRET.to_string(),
        dns_names: vec![
            format!("kanon.{namespace}.svc"),
            format!("kanon.{namespace}.svc.cluster.local"),
        ],
        ip_addresses: vec![LOCALHOST],
        cert_dir: dir.to_path_buf(),
        ..CertificateConfig::default()
    }
}

async fn secret(client: &Client, namespace: &str) -> Secret {
    Api::<Secret>::namespaced(client.clone(), namespace)
        .get(SECRET)
        .await
        .expect("the certificate Secret")
}

fn data<'a>(secret: &'a Secret, key: &str) -> &'a [u8] {
    secret
        .data
        .as_ref()
        .and_then(|data| data.get(key))
        .map(|value| value.0.as_slice())
        .unwrap_or_else(|| panic!("the Secret has no {key}"))
}

fn read(dir: &Path, file: &str) -> Vec<u8> {
    std::fs::read(dir.join(file)).unwrap_or_else(|e| panic!("reading {file}: {e}"))
}

// ---------------------------------------------------------------------------------------------
// Checking certificates as a client does.

fn certs(pem: &[u8]) -> Vec<CertificateDer<'static>> {
    CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .expect("PEM certificates")
}

fn verifier(bundle_pem: &[u8]) -> Arc<WebPkiServerVerifier> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in certs(bundle_pem) {
        roots.add(cert).expect("a trust anchor");
    }
    WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider())
        .build()
        .expect("a verifier")
}

/// Verifies the leaf (DER) for `name` against the bundle (PEM) at `at`.
fn verify_at(leaf: &[u8], bundle_pem: &[u8], name: &str, at: SystemTime) -> Result<(), String> {
    let name = ServerName::try_from(name.to_string()).expect("a server name");
    let at = UnixTime::since_unix_epoch(at.duration_since(UNIX_EPOCH).unwrap());
    verifier(bundle_pem)
        .verify_server_cert(&CertificateDer::from(leaf), &[], &name, &[], at)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

fn verify(leaf: &[u8], bundle_pem: &[u8], name: &str) -> Result<(), String> {
    verify_at(leaf, bundle_pem, name, SystemTime::now())
}

/// The DER of the first certificate of a PEM file or value.
fn leaf_der(pem: &[u8]) -> Vec<u8> {
    certs(pem).first().expect("a certificate").to_vec()
}

fn pem_of(der: &[u8]) -> Vec<u8> {
    use base64::Engine as _;
    let encoded = base64::engine::general_purpose::STANDARD.encode(der);
    let mut pem = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in encoded.as_bytes().chunks(64) {
        pem.push_str(std::str::from_utf8(line).unwrap());
        pem.push('\n');
    }
    pem.push_str("-----END CERTIFICATE-----\n");
    pem.into_bytes()
}

/// Which CAs of `bundle` the leaf verifies against (by index), for 127.0.0.1, now.
fn issuers(leaf: &[u8], bundle_pem: &[u8]) -> Vec<usize> {
    certs(bundle_pem)
        .iter()
        .enumerate()
        .filter(|(_, ca)| verify(leaf, &pem_of(ca), "127.0.0.1").is_ok())
        .map(|(i, _)| i)
        .collect()
}

// ---------------------------------------------------------------------------------------------
// A TLS server on the certificate directory (as the webhook's: the files, re-read on change),
// and a client trusting only a bundle.

#[derive(Debug)]
struct FileResolver {
    dir: PathBuf,
    provider: Arc<CryptoProvider>,
    /// The last pair that loaded: kept while a new pair is half written.
    last: Mutex<Option<Arc<CertifiedKey>>>,
}

impl FileResolver {
    fn load(&self) -> Option<CertifiedKey> {
        let chain = CertificateDer::pem_file_iter(self.dir.join(TLS_CERT_KEY))
            .ok()?
            .collect::<Result<Vec<_>, _>>()
            .ok()?;
        let key = PrivateKeyDer::from_pem_file(self.dir.join(TLS_KEY_KEY)).ok()?;
        CertifiedKey::from_der(chain, key, &self.provider).ok()
    }
}

impl ResolvesServerCert for FileResolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let mut last = self.last.lock().unwrap();
        if let Some(key) = self.load() {
            *last = Some(Arc::new(key));
        }
        last.clone()
    }
}

/// Serves `dir`'s pair on 127.0.0.1 until the returned task is aborted: every connection is
/// answered "ok".
async fn serve_files(dir: &Path) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let resolver = Arc::new(FileResolver {
        dir: dir.to_path_buf(),
        provider: provider(),
        last: Mutex::new(None),
    });
    let config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind((LOCALHOST, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                if let Ok(mut tls) = acceptor.accept(stream).await {
                    let _ = tls.write_all(b"ok").await;
                    let _ = tls.shutdown().await;
                }
            });
        }
    });
    (addr, task)
}

/// One TLS connection to `addr` as 127.0.0.1, trusting only `bundle_pem`; returns the leaf
/// the server presented.
async fn connect(addr: SocketAddr, bundle_pem: &[u8]) -> Result<Vec<u8>, String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in certs(bundle_pem) {
        roots.add(cert).map_err(|e| e.to_string())?;
    }
    let config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let stream = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let mut tls = connector
        .connect(ServerName::IpAddress(LOCALHOST.into()), stream)
        .await
        .map_err(|e| e.to_string())?;
    let leaf = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|chain| chain.first())
        .map(|cert| cert.to_vec())
        .ok_or("no peer certificate")?;
    let mut answer = Vec::new();
    tls.read_to_end(&mut answer)
        .await
        .map_err(|e| e.to_string())?;
    if answer != b"ok" {
        return Err(format!("answered {answer:?}"));
    }
    Ok(leaf)
}

// ---------------------------------------------------------------------------------------------
// Metrics.

fn metric(metrics: &CertificateMetrics, sample: &str) -> Option<f64> {
    let mut registry = Registry::default();
    metrics.register(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    text.lines()
        .find_map(|line| line.strip_prefix(sample)?.strip_prefix(' ')?.parse().ok())
}

fn renewals(metrics: &CertificateMetrics, certificate: &str) -> f64 {
    metric(
        metrics,
        &format!("kanon_certificate_renewals_total{{certificate=\"{certificate}\"}}"),
    )
    .unwrap_or(0.0)
}

// ---------------------------------------------------------------------------------------------
// The tests.

#[tokio::test]
async fn creation_from_nothing() {
    let started = Instant::now();
    let namespace = "certs-create";
    let client = setup(namespace).await;
    let dir = tempfile::tempdir().unwrap();
    let metrics = CertificateMetrics::new();
    let certificates = Certificates::ensure(
        client.clone(),
        config(namespace, dir.path()),
        metrics.clone(),
    )
    .await
    .expect("ensure");

    // The Secret's layout.
    let secret = secret(&client, namespace).await;
    assert_eq!(secret.type_.as_deref(), Some(SECRET_TYPE));
    assert_eq!(
        secret.labels().get(MANAGED_BY_LABEL).map(String::as_str),
        Some(MANAGED_BY)
    );
    let rotated_at = &secret.annotations()[ROTATED_AT_ANNOTATION];
    rotated_at
        .parse::<k8s_openapi::jiff::Timestamp>()
        .unwrap_or_else(|e| panic!("{rotated_at:?} is not RFC 3339: {e}"));
    let keys: Vec<&str> = secret
        .data
        .as_ref()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            CA_SIGNING_CERT_KEY,
            CA_CERT_KEY,
            CA_KEY_KEY,
            TLS_CERT_KEY,
            TLS_KEY_KEY
        ]
    );
    assert!(secret_problems(&secret).is_empty());
    let bundle = data(&secret, CA_CERT_KEY);
    assert_eq!(certs(bundle).len(), 1);
    assert_eq!(
        certs(data(&secret, CA_SIGNING_CERT_KEY)),
        certs(bundle),
        "the signing CA is the bundle's first"
    );
    assert!(
        std::str::from_utf8(data(&secret, CA_KEY_KEY))
            .unwrap()
            .starts_with("-----BEGIN PRIVATE KEY-----")
    );

    // The files: the Secret's, the key private, no CA key.
    for file in [TLS_CERT_KEY, TLS_KEY_KEY, CA_CERT_KEY] {
        assert_eq!(read(dir.path(), file), data(&secret, file), "{file}");
    }
    assert!(!dir.path().join(CA_KEY_KEY).exists());
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(dir.path().join(TLS_KEY_KEY))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "tls.key is readable by others: {mode:o}");
    }
    assert_eq!(*certificates.ca_bundle().borrow(), bundle);

    // The leaf verifies against the bundle for every name, and for no other.
    let leaf = leaf_der(data(&secret, TLS_CERT_KEY));
    for name in [
        "kanon.certs-create.svc",
        "kanon.certs-create.svc.cluster.local",
        "127.0.0.1",
    ] {
        verify(&leaf, bundle, name).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    let other = verify(&leaf, bundle, "kanon.elsewhere.svc").unwrap_err();
    assert!(other.contains("not valid for name"), "{other}");
    // About a year, starting a little before now.
    let year = SystemTime::now() + Duration::from_secs(364 * 86_400);
    verify_at(&leaf, bundle, "127.0.0.1", year).expect("valid for a year");
    let later = SystemTime::now() + Duration::from_secs(366 * 86_400);
    assert!(verify_at(&leaf, bundle, "127.0.0.1", later).is_err());

    // A TLS client trusting only the bundle connects to a server on the files.
    let (addr, server) = serve_files(dir.path()).await;
    assert_eq!(connect(addr, bundle).await.expect("a handshake"), leaf);
    server.abort();

    // Metrics: both ends; nothing renewed.
    let serving = metric(
        &metrics,
        "kanon_certificate_expiry_timestamp_seconds{certificate=\"serving\"}",
    )
    .expect("the serving expiry");
    let ca = metric(
        &metrics,
        "kanon_certificate_expiry_timestamp_seconds{certificate=\"ca\"}",
    )
    .expect("the CA expiry");
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as f64;
    assert!((serving - now - 365.0 * 86_400.0).abs() < 60.0, "{serving}");
    assert!((ca - now - 3650.0 * 86_400.0).abs() < 60.0, "{ca}");
    assert_eq!(renewals(&metrics, "serving"), 0.0);
    eprintln!("creation_from_nothing: {:.1?}", started.elapsed());
}

#[tokio::test]
async fn replicas_starting_together_converge_on_one_secret() {
    let started = Instant::now();
    let namespace = "certs-replicas";
    let client = setup(namespace).await;
    let api = Api::<Secret>::namespaced(client.clone(), namespace);
    let before = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let dirs: Vec<_> = (0..4).map(|_| tempfile::tempdir().unwrap()).collect();
    let ensure = |i: usize| {
        Certificates::ensure(
            client.clone(),
            config(namespace, dirs[i].path()),
            CertificateMetrics::new(),
        )
    };
    let (a, b, c, d) = tokio::join!(ensure(0), ensure(1), ensure(2), ensure(3));
    let replicas = [a, b, c, d].map(|r| r.expect("ensure"));

    // One write: the Secret was created once and never modified.
    let mut events = api
        .watch(&WatchParams::default().timeout(1), &before)
        .await
        .unwrap()
        .boxed();
    let (mut added, mut modified) = (0, 0);
    while let Some(event) = events.next().await {
        match event.unwrap() {
            WatchEvent::Added(s) if s.name_any() == SECRET => added += 1,
            WatchEvent::Modified(s) if s.name_any() == SECRET => modified += 1,
            _ => {}
        }
    }
    assert_eq!((added, modified), (1, 0));

    // Identical files, the Secret's, and one bundle.
    let secret = secret(&client, namespace).await;
    for dir in &dirs {
        for file in [TLS_CERT_KEY, TLS_KEY_KEY, CA_CERT_KEY] {
            assert_eq!(read(dir.path(), file), data(&secret, file), "{file}");
        }
    }
    for replica in &replicas {
        assert_eq!(*replica.ca_bundle().borrow(), data(&secret, CA_CERT_KEY));
    }
    eprintln!(
        "replicas_starting_together_converge_on_one_secret: {:.1?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_later_start_reuses_the_secret() {
    let started = Instant::now();
    let namespace = "certs-reuse";
    let client = setup(namespace).await;
    let first_dir = tempfile::tempdir().unwrap();
    let first = Certificates::ensure(
        client.clone(),
        config(namespace, first_dir.path()),
        CertificateMetrics::new(),
    )
    .await
    .expect("ensure");
    let bundle = first.ca_bundle().borrow().clone();
    drop(first);
    let written = secret(&client, namespace).await;

    tokio::time::sleep(Duration::from_millis(1100)).await;
    let second_dir = tempfile::tempdir().unwrap();
    let metrics = CertificateMetrics::new();
    let second = Certificates::ensure(
        client.clone(),
        config(namespace, second_dir.path()),
        metrics.clone(),
    )
    .await
    .expect("ensure again");
    assert_eq!(*second.ca_bundle().borrow(), bundle);
    let reread = secret(&client, namespace).await;
    assert_eq!(
        reread.metadata.resource_version, written.metadata.resource_version,
        "nothing rewritten"
    );
    for file in [TLS_CERT_KEY, TLS_KEY_KEY, CA_CERT_KEY] {
        assert_eq!(
            read(second_dir.path(), file),
            read(first_dir.path(), file),
            "{file}"
        );
    }
    assert_eq!(
        renewals(&metrics, "serving") + renewals(&metrics, "ca"),
        0.0
    );
    eprintln!("a_later_start_reuses_the_secret: {:.1?}", started.elapsed());
}

#[tokio::test]
async fn a_deleted_secret_is_recreated_with_the_certificates_in_force() {
    let started = Instant::now();
    let namespace = "certs-deleted";
    let client = setup(namespace).await;
    let api = Api::<Secret>::namespaced(client.clone(), namespace);
    let dir = tempfile::tempdir().unwrap();
    let config = CertificateConfig {
        check_interval: Duration::from_millis(200),
        ..config(namespace, dir.path())
    };
    let certificates = Certificates::ensure(client.clone(), config, CertificateMetrics::new())
        .await
        .expect("ensure");
    let before = secret(&client, namespace).await;
    let keeper = tokio::spawn(certificates.run());
    api.delete(SECRET, &Default::default()).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let after = loop {
        assert!(Instant::now() < deadline, "the Secret was not recreated");
        if let Some(secret) = api.get_opt(SECRET).await.unwrap() {
            break secret;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    keeper.abort();
    assert_ne!(after.metadata.uid, before.metadata.uid);
    assert_eq!(after.data, before.data);
    assert_eq!(read(dir.path(), TLS_CERT_KEY), data(&before, TLS_CERT_KEY));
    eprintln!(
        "a_deleted_secret_is_recreated_with_the_certificates_in_force: {:.1?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn the_serving_certificate_is_renewed_while_clients_keep_connecting() {
    let started = Instant::now();
    let namespace = "certs-renewal";
    let client = setup(namespace).await;
    let dir = tempfile::tempdir().unwrap();
    let metrics = CertificateMetrics::new();
    let config = CertificateConfig {
        cert_validity: Duration::from_secs(6),
        renew_fraction: 0.5,
        overlap: Duration::from_secs(1),
        check_interval: Duration::from_millis(300),
        ..config(namespace, dir.path())
    };
    let certificates = Certificates::ensure(client.clone(), config, metrics.clone())
        .await
        .expect("ensure");
    let bundle = certificates.ca_bundle();
    let keeper = tokio::spawn(certificates.run());
    let (addr, server) = serve_files(dir.path()).await;

    let mut served: Vec<Vec<u8>> = Vec::new();
    let mut file = leaf_der(&read(dir.path(), TLS_CERT_KEY));
    let mut replaced = 0;
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let trusted = bundle.borrow().clone();
        let leaf = connect(addr, &trusted).await.unwrap_or_else(|e| {
            panic!(
                "handshake failed {:.1?} after the start: {e}",
                started.elapsed()
            )
        });
        if served.last() != Some(&leaf) {
            served.push(leaf);
        }
        let current = leaf_der(&read(dir.path(), TLS_CERT_KEY));
        if current != file {
            // Replaced before it expired: the old one is still valid now.
            verify(&file, &trusted, "127.0.0.1")
                .unwrap_or_else(|e| panic!("the replaced certificate was no longer valid: {e}"));
            verify(&current, &trusted, "127.0.0.1").expect("the new certificate verifies");
            file = current;
            replaced += 1;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    keeper.abort();
    server.abort();
    // A renewal about every 3 s (half of 6 s).
    assert!(replaced >= 2, "{replaced} renewals");
    assert!(served.len() >= 3, "{} certificates served", served.len());
    assert!(renewals(&metrics, "serving") >= 2.0);
    assert_eq!(renewals(&metrics, "ca"), 0.0);
    // Always the same CA.
    assert_eq!(certs(&bundle.borrow()).len(), 1);
    let secret = secret(&client, namespace).await;
    assert_eq!(leaf_der(data(&secret, TLS_CERT_KEY)), file);
    eprintln!(
        "the_serving_certificate_is_renewed_while_clients_keep_connecting: {:.1?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn the_ca_rotates_with_an_overlap_and_no_handshake_fails() {
    let started = Instant::now();
    let namespace = "certs-rotation";
    let client = setup(namespace).await;
    let dir = tempfile::tempdir().unwrap();
    let metrics = CertificateMetrics::new();
    // The CA lives 10 s and rotates when less than 5 s remain; the serving certificate (1 h)
    // is cut at its CA's end; 2 s of overlap.
    let config = CertificateConfig {
        ca_validity: Duration::from_secs(10),
        cert_validity: Duration::from_secs(3600),
        renew_fraction: 0.5,
        overlap: Duration::from_secs(2),
        check_interval: Duration::from_millis(250),
        ..config(namespace, dir.path())
    };
    let certificates = Certificates::ensure(client.clone(), config, metrics.clone())
        .await
        .expect("ensure");
    let bundle = certificates.ca_bundle();
    let first_ca = certs(&bundle.borrow())[0].to_vec();
    let keeper = tokio::spawn(certificates.run());
    let (addr, server) = serve_files(dir.path()).await;

    // What was seen, in order: (CAs in the bundle, whether the leaf is the first CA's).
    let mut saw_overlap = false; // bundle = new + first, leaf still the first CA's
    let mut saw_moved = false; // bundle = new + first, leaf the new CA's
    let mut saw_first_gone = false; // the first CA left the bundle
    let deadline = Instant::now() + Duration::from_secs(16);
    while Instant::now() < deadline && !saw_first_gone {
        let trusted = bundle.borrow().clone();
        // The caBundle a client holds always accepts what is served.
        let leaf = connect(addr, &trusted).await.unwrap_or_else(|e| {
            panic!(
                "handshake failed {:.1?} after the start: {e}",
                started.elapsed()
            )
        });
        // And the files agree with each other at every moment.
        let file_leaf = leaf_der(&read(dir.path(), TLS_CERT_KEY));
        let file_bundle = read(dir.path(), CA_CERT_KEY);
        verify(&file_leaf, &file_bundle, "127.0.0.1")
            .unwrap_or_else(|e| panic!("tls.crt does not verify against ca.crt: {e}"));

        let cas = certs(&trusted);
        let first_trusted = cas.iter().any(|ca| ca.as_ref() == first_ca.as_slice());
        let of_first = verify(&leaf, &pem_of(&first_ca), "127.0.0.1").is_ok();
        match (cas.len(), first_trusted) {
            (2, true) if cas[0].as_ref() != first_ca.as_slice() => {
                if of_first {
                    assert!(!saw_moved, "the leaf went back to the first CA");
                    saw_overlap = true;
                } else {
                    assert_eq!(issuers(&leaf, &trusted), [0], "the leaf is the new CA's");
                    saw_moved = true;
                }
            }
            (_, false) => {
                assert!(!of_first);
                saw_first_gone = true;
            }
            _ => assert!(
                !saw_overlap && of_first,
                "before the rotation: one CA, its leaf"
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    keeper.abort();
    server.abort();
    assert!(
        saw_overlap && saw_moved && saw_first_gone,
        "overlap {saw_overlap}, moved {saw_moved}, first CA gone {saw_first_gone}"
    );
    assert!(renewals(&metrics, "ca") >= 1.0);
    assert!(renewals(&metrics, "serving") >= 1.0);
    let secret = secret(&client, namespace).await;
    assert_eq!(
        certs(data(&secret, CA_SIGNING_CERT_KEY))[0],
        certs(data(&secret, CA_CERT_KEY))[0],
        "the signing CA is the newest"
    );
    eprintln!(
        "the_ca_rotates_with_an_overlap_and_no_handshake_fails: {:.1?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_replica_follows_another_replicas_renewal() {
    let started = Instant::now();
    let namespace = "certs-follow";
    let client = setup(namespace).await;
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (metrics_a, metrics_b) = (CertificateMetrics::new(), CertificateMetrics::new());
    let config_a = CertificateConfig {
        cert_validity: Duration::from_secs(6),
        renew_fraction: 0.5,
        overlap: Duration::from_secs(1),
        check_interval: Duration::from_millis(300),
        ..config(namespace, dir_a.path())
    };
    // B would renew only in the last 60 ms: A always renews first, B follows.
    let config_b = CertificateConfig {
        renew_fraction: 0.01,
        overlap: Duration::ZERO,
        ..config_a.clone()
    };
    let config_b = CertificateConfig {
        cert_dir: dir_b.path().to_path_buf(),
        ..config_b
    };
    let a = Certificates::ensure(client.clone(), config_a, metrics_a.clone())
        .await
        .expect("ensure A");
    let b = Certificates::ensure(client.clone(), config_b, metrics_b.clone())
        .await
        .expect("ensure B");
    let bundle_b = b.ca_bundle();
    let first = read(dir_b.path(), TLS_CERT_KEY);
    assert_eq!(first, read(dir_a.path(), TLS_CERT_KEY));
    let (a, b) = (tokio::spawn(a.run()), tokio::spawn(b.run()));

    // A renews (within about 3 s); B's files follow within its check interval.
    let deadline = Instant::now() + Duration::from_secs(8);
    let renewed = loop {
        assert!(Instant::now() < deadline, "no renewal reached B");
        let in_b = read(dir_b.path(), TLS_CERT_KEY);
        if in_b != first {
            break in_b;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let secret = secret(&client, namespace).await;
    assert_eq!(renewed, data(&secret, TLS_CERT_KEY));
    assert_eq!(read(dir_b.path(), TLS_KEY_KEY), data(&secret, TLS_KEY_KEY));
    verify(&leaf_der(&renewed), &bundle_b.borrow(), "127.0.0.1").expect("B's new pair verifies");
    assert!(renewals(&metrics_a, "serving") >= 1.0);
    assert_eq!(
        renewals(&metrics_b, "serving"),
        0.0,
        "B renewed nothing itself"
    );
    a.abort();
    b.abort();
    eprintln!(
        "a_replica_follows_another_replicas_renewal: {:.1?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_bad_secret_is_reported_by_key_and_repaired() {
    let started = Instant::now();
    let namespace = "certs-repair";
    let client = setup(namespace).await;
    let api = Api::<Secret>::namespaced(client.clone(), namespace);
    let dir = tempfile::tempdir().unwrap();
    let metrics = CertificateMetrics::new();
    let ensure = || {
        Certificates::ensure(
            client.clone(),
            config(namespace, dir.path()),
            metrics.clone(),
        )
    };
    ensure().await.expect("ensure");
    let good = secret(&client, namespace).await;

    // Garbage in tls.key: named, and a new serving pair from the same CA.
    let mut bad = good.clone();
    bad.data
        .as_mut()
        .unwrap()
        .insert(TLS_KEY_KEY.into(), ByteString(b"garbage".to_vec()));
    let bad = api
        .replace(SECRET, &PostParams::default(), &bad)
        .await
        .unwrap();
    let problems = secret_problems(&bad);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        matches!(&problems[0], CertificateError::BadSecret { key, .. } if key == TLS_KEY_KEY),
        "{problems:?}"
    );
    assert!(
        problems[0].to_string().contains("tls.key"),
        "{}",
        problems[0]
    );
    ensure().await.expect("ensure repairs");
    let repaired = secret(&client, namespace).await;
    assert!(secret_problems(&repaired).is_empty());
    assert_ne!(data(&repaired, TLS_CERT_KEY), data(&good, TLS_CERT_KEY));
    assert_eq!(data(&repaired, CA_KEY_KEY), data(&good, CA_KEY_KEY));
    assert_eq!(data(&repaired, CA_CERT_KEY), data(&good, CA_CERT_KEY));
    assert_eq!(read(dir.path(), TLS_KEY_KEY), data(&repaired, TLS_KEY_KEY));
    let (addr, server) = serve_files(dir.path()).await;
    connect(addr, data(&repaired, CA_CERT_KEY))
        .await
        .expect("the repaired pair serves");
    server.abort();
    assert_eq!(renewals(&metrics, "serving"), 1.0);

    // No ca.key: named; a new CA, the old one still trusted, the (good) serving certificate
    // kept for the overlap.
    let mut bad = repaired.clone();
    bad.data.as_mut().unwrap().remove(CA_KEY_KEY);
    let bad = api
        .replace(SECRET, &PostParams::default(), &bad)
        .await
        .unwrap();
    let problems = secret_problems(&bad);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].to_string().contains("ca.key: missing"),
        "{}",
        problems[0]
    );
    let certificates = ensure().await.expect("ensure repairs");
    let rotated = secret(&client, namespace).await;
    assert!(secret_problems(&rotated).is_empty());
    let bundle = data(&rotated, CA_CERT_KEY);
    assert_eq!(certs(bundle).len(), 2);
    assert_eq!(certs(bundle)[1], certs(data(&repaired, CA_CERT_KEY))[0]);
    assert_eq!(
        certs(data(&rotated, CA_SIGNING_CERT_KEY))[0],
        certs(bundle)[0]
    );
    assert_eq!(data(&rotated, TLS_CERT_KEY), data(&repaired, TLS_CERT_KEY));
    assert_eq!(*certificates.ca_bundle().borrow(), bundle);
    assert_eq!(read(dir.path(), CA_CERT_KEY), bundle);
    assert_eq!(renewals(&metrics, "ca"), 1.0);

    // A Secret someone else made, all garbage but an extra key: everything is re-issued, the
    // extra key kept.
    api.delete(SECRET, &Default::default()).await.unwrap();
    let foreign = Secret {
        metadata: ObjectMeta {
            name: Some(SECRET.into()),
            ..ObjectMeta::default()
        },
        type_: Some(SECRET_TYPE.into()),
        data: Some(BTreeMap::from([
            (TLS_CERT_KEY.into(), ByteString(b"x".to_vec())),
            (TLS_KEY_KEY.into(), ByteString(b"y".to_vec())),
            ("other".into(), ByteString(b"z".to_vec())),
        ])),
        ..Secret::default()
    };
    api.create(&PostParams::default(), &foreign).await.unwrap();
    let problems: Vec<String> = secret_problems(&secret(&client, namespace).await)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(problems.len(), 3, "{problems:?}");
    for key in ["ca.crt", "ca-signing.crt", "tls.crt"] {
        assert!(
            problems.iter().any(|p| p.contains(key)),
            "{key}: {problems:?}"
        );
    }
    ensure().await.expect("ensure repairs");
    let fresh = secret(&client, namespace).await;
    assert!(secret_problems(&fresh).is_empty());
    assert_eq!(data(&fresh, "other"), b"z");
    verify(
        &leaf_der(data(&fresh, TLS_CERT_KEY)),
        data(&fresh, CA_CERT_KEY),
        "127.0.0.1",
    )
    .expect("the new pair verifies");
    eprintln!(
        "a_bad_secret_is_reported_by_key_and_repaired: {:.1?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn missing_permissions_are_reported_as_forbidden() {
    let started = Instant::now();
    let namespace = "certs-forbidden";
    let admin = setup(namespace).await;
    let dir = tempfile::tempdir().unwrap();

    // A user with no permission at all: the first read is refused.
    let nobody = client_as(Some("nobody")).await;
    let error = Certificates::ensure(nobody, config(namespace, dir.path()), Default::default())
        .await
        .expect_err("ensure without permissions");
    assert!(error.is_forbidden(), "{error}");
    assert!(
        matches!(&error, CertificateError::Forbidden { verb: "get", .. }),
        "{error:?}"
    );
    assert!(
        error
            .to_string()
            .starts_with("forbidden to get Secret certs-forbidden/kanon-tls"),
        "{error}"
    );

    // A user who may read but not create: the creation is refused.
    let role = Role {
        metadata: ObjectMeta {
            name: Some("reader".into()),
            ..ObjectMeta::default()
        },
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["secrets".into()]),
            verbs: vec!["get".into()],
            ..PolicyRule::default()
        }]),
    };
    let binding = RoleBinding {
        metadata: ObjectMeta {
            name: Some("reader".into()),
            ..ObjectMeta::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "Role".into(),
            name: "reader".into(),
        },
        subjects: Some(vec![Subject {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "User".into(),
            name: "reader".into(),
            ..Subject::default()
        }]),
    };
    Api::<Role>::namespaced(admin.clone(), namespace)
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    Api::<RoleBinding>::namespaced(admin.clone(), namespace)
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    let reader = client_as(Some("reader")).await;
    // RBAC takes a moment to see the binding.
    let deadline = Instant::now() + Duration::from_secs(10);
    let error = loop {
        let error = Certificates::ensure(
            reader.clone(),
            config(namespace, dir.path()),
            Default::default(),
        )
        .await
        .expect_err("ensure without create");
        if matches!(&error, CertificateError::Forbidden { verb: "create", .. })
            || Instant::now() > deadline
        {
            break error;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        matches!(&error, CertificateError::Forbidden { verb: "create", .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("forbidden to create"), "{error}");
    assert!(!dir.path().join(TLS_CERT_KEY).exists());
    eprintln!(
        "missing_permissions_are_reported_as_forbidden: {:.1?}",
        started.elapsed()
    );
}
