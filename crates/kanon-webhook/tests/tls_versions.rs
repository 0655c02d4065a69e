//! The webhook port speaks TLS 1.2 and 1.3 only: a client that offers only TLS 1.0 or 1.1 is
//! refused with a `protocol_version` alert, plaintext HTTP gets no HTTP answer, and TLS 1.2 and
//! 1.3 clients are served. The old ClientHellos are written by hand, byte by byte, so the test
//! needs no TLS library that still speaks those versions.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Client, start};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// TLS record content types and the alert we expect.
const HANDSHAKE: u8 = 0x16;
const ALERT: u8 = 0x15;
const FATAL: u8 = 2;
const PROTOCOL_VERSION: u8 = 70;

/// A ClientHello record: `legacy_version` in the hello (and the record), a few CBC and ECDHE
/// suites those versions use, no compression, and `extensions` (already encoded).
fn client_hello(legacy_version: [u8; 2], extensions: &[u8]) -> Vec<u8> {
    let mut hello = Vec::new();
    hello.extend_from_slice(&legacy_version);
    hello.extend_from_slice(&[0x5a; 32]); // random
    hello.push(0); // no session id
    let suites: [u16; 4] = [0xc013, 0xc014, 0x002f, 0x0035];
    hello.extend_from_slice(&u16::try_from(suites.len() * 2).unwrap().to_be_bytes());
    for suite in suites {
        hello.extend_from_slice(&suite.to_be_bytes());
    }
    hello.extend_from_slice(&[1, 0]); // compression: null only
    if !extensions.is_empty() {
        hello.extend_from_slice(&u16::try_from(extensions.len()).unwrap().to_be_bytes());
        hello.extend_from_slice(extensions);
    }
    let mut handshake = vec![1]; // client_hello
    handshake.extend_from_slice(&u32::try_from(hello.len()).unwrap().to_be_bytes()[1..]);
    handshake.extend_from_slice(&hello);
    let mut record = vec![HANDSHAKE, legacy_version[0], legacy_version[1]];
    record.extend_from_slice(&u16::try_from(handshake.len()).unwrap().to_be_bytes());
    record.extend_from_slice(&handshake);
    record
}

/// One extension: type, length, data.
fn extension(kind: u16, data: &[u8]) -> Vec<u8> {
    let mut out = kind.to_be_bytes().to_vec();
    out.extend_from_slice(&u16::try_from(data.len()).unwrap().to_be_bytes());
    out.extend_from_slice(data);
    out
}

/// Extensions of a client that would do ECDHE: `localhost` as SNI, groups and point formats.
fn common_extensions() -> Vec<u8> {
    let name = b"localhost";
    let mut sni = Vec::new();
    sni.extend_from_slice(&u16::try_from(name.len() + 3).unwrap().to_be_bytes());
    sni.push(0); // host_name
    sni.extend_from_slice(&u16::try_from(name.len()).unwrap().to_be_bytes());
    sni.extend_from_slice(name);
    let mut out = extension(0x0000, &sni);
    out.extend(extension(0x000a, &[0, 4, 0x00, 0x1d, 0x00, 0x17])); // x25519, secp256r1
    out.extend(extension(0x000b, &[1, 0])); // uncompressed points
    out
}

/// Sends `bytes` on a fresh connection and reads whatever comes back until the server closes
/// (or 5 s pass, which fails the test: the server must not wait for more).
async fn exchange(addr: std::net::SocketAddr, bytes: &[u8]) -> Vec<u8> {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(bytes).await.unwrap();
    stream.flush().await.unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), async {
        let mut buf = [0_u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    assert!(
        read.is_ok(),
        "the server kept the connection open: {answer:?}"
    );
    answer
}

/// `handshake_failure`: what rustls answers a hello it cannot serve before it looks at the
/// version (a TLS 1.0/1.1 hello has no `signature_algorithms`, so no certificate fits it).
const HANDSHAKE_FAILURE: u8 = 40;

/// Asserts `answer` is exactly one fatal alert with one of `descriptions` (no ServerHello).
fn assert_fatal_alert(answer: &[u8], descriptions: &[u8], what: &str) {
    assert_eq!(
        answer.first(),
        Some(&ALERT),
        "{what}: not an alert (a ServerHello would start with {HANDSHAKE}): {answer:?}"
    );
    assert_eq!(answer.len(), 7, "{what}: one alert record: {answer:?}");
    assert_eq!(&answer[3..5], &[0, 2], "{what}: {answer:?}");
    assert_eq!(answer[5], FATAL, "{what}: {answer:?}");
    assert!(descriptions.contains(&answer[6]), "{what}: {answer:?}");
}

/// `signature_algorithms` (TLS 1.2's): with it, a hello gets as far as version selection.
fn signature_algorithms() -> Vec<u8> {
    // rsa_pss_rsae_sha256, ecdsa_secp256r1_sha256, rsa_pkcs1_sha256
    extension(0x000d, &[0, 6, 0x08, 0x04, 0x04, 0x03, 0x04, 0x01])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_1_0_and_1_1_client_hellos_are_refused() {
    let server = start("tls-old", true, |_| {}).await;
    for (version, name) in [([3, 2], "TLS 1.1"), ([3, 1], "TLS 1.0")] {
        // As such clients send them: no extensions, or SNI, groups and point formats.
        for extensions in [Vec::new(), common_extensions()] {
            let answer = exchange(server.addr, &client_hello(version, &extensions)).await;
            assert_fatal_alert(&answer, &[PROTOCOL_VERSION, HANDSHAKE_FAILURE], name);
        }
        // With TLS 1.2's signature algorithms too: refused for its version.
        let mut extensions = common_extensions();
        extensions.extend(signature_algorithms());
        let answer = exchange(server.addr, &client_hello(version, &extensions)).await;
        assert_fatal_alert(&answer, &[PROTOCOL_VERSION], name);
    }
    // A client that says 1.2 in the legacy field but offers only 1.0 and 1.1 in
    // `supported_versions` (how a TLS 1.3-era client states its versions).
    let mut extensions = common_extensions();
    extensions.extend(signature_algorithms());
    extensions.extend(extension(0x002b, &[4, 3, 2, 3, 1]));
    let answer = exchange(server.addr, &client_hello([3, 3], &extensions)).await;
    assert_fatal_alert(&answer, &[PROTOCOL_VERSION], "supported_versions 1.1, 1.0");
    // The server still serves a modern client afterwards.
    let mut client = server.connect().await;
    assert_eq!(client.get("/healthz").await.status, 200);
    server.shutdown(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plaintext_http_on_the_tls_port_gets_no_http_answer() {
    let server = start("tls-plain", true, |_| {}).await;
    let request = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n";
    let answer = exchange(server.addr, request).await;
    // At most a TLS alert, never an HTTP response or a body.
    assert!(
        !answer.starts_with(b"HTTP/") && !answer.windows(2).any(|w| w == b"ok"),
        "{:?}",
        String::from_utf8_lossy(&answer)
    );
    assert!(
        answer.is_empty() || answer.first() == Some(&ALERT),
        "{answer:?}"
    );
    // A review in plaintext: the same.
    let mut post = Client::<TcpStream>::head("POST", "/validate", 2);
    post.extend_from_slice(b"{}");
    let answer = exchange(server.addr, &post).await;
    assert!(
        answer.is_empty() || answer.first() == Some(&ALERT),
        "{answer:?}"
    );
    server.shutdown(Duration::from_secs(5)).await.unwrap();
}

/// A rustls client of exactly `version`, trusting the server's CA.
fn client_of(
    ca: &std::path::Path,
    version: &'static rustls::SupportedProtocolVersion,
) -> TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(&[version])
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    TlsConnector::from(Arc::new(config))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_1_2_and_1_3_clients_are_served() {
    let server = start("tls-modern", true, |_| {}).await;
    for (version, expected) in [
        (&rustls::version::TLS12, rustls::ProtocolVersion::TLSv1_2),
        (&rustls::version::TLS13, rustls::ProtocolVersion::TLSv1_3),
    ] {
        let tcp = TcpStream::connect(server.addr).await.unwrap();
        let tls = client_of(&server.ca, version)
            .connect(ServerName::try_from("localhost").unwrap(), tcp)
            .await
            .unwrap_or_else(|e| panic!("{expected:?}: {e}"));
        assert_eq!(tls.get_ref().1.protocol_version(), Some(expected));
        let mut client = Client::new(tls);
        let response = client.get("/healthz").await;
        assert_eq!(response.status, 200, "{expected:?}: {}", response.text());
    }
    server.shutdown(Duration::from_secs(5)).await.unwrap();
}
