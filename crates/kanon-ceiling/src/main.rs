//! The independent ceiling of `scripts/load-bench.sh`: the least an admission webhook can do,
//! written the plain way with the same stack as kanon (tokio's multi-threaded runtime with its
//! default worker count, hyper 1 over HTTP/1.1 keep-alive, rustls with ring) and nothing of
//! kanon's own code.
//!
//! Every POST body is parsed into a `serde_json::Value` and answered
//! `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":<uid>,"allowed":true}}`
//! (HTTP 400 when the body is not JSON with a `request.uid`); any other request gets 200 `ok`
//! (a readiness probe). The certificate is a fresh self-signed one from rcgen for `localhost`
//! and `127.0.0.1` (clients are expected not to verify it).
//!
//!     kanon-ceiling [ADDR]        (default 127.0.0.1:8443; prints `listening on ADDR`)

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

type Error = Box<dyn std::error::Error + Send + Sync>;

fn main() -> Result<(), Error> {
    let addr: SocketAddr = std::env::args()
        .nth(1)
        .as_deref()
        .unwrap_or("127.0.0.1:8443")
        .parse()?;
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(serve(addr))
}

fn tls_config() -> Result<Arc<rustls::ServerConfig>, Error> {
    let certified = rcgen::generate_simple_self_signed(["localhost".into(), "127.0.0.1".into()])?;
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
        certified.signing_key.serialize_der(),
    ));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(vec![certified.cert.der().clone()], key)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

async fn serve(addr: SocketAddr) -> Result<(), Error> {
    let acceptor = TlsAcceptor::from(tls_config()?);
    let listener = TcpListener::bind(addr).await?;
    println!("listening on {}", listener.local_addr()?);
    loop {
        let (tcp, _) = listener.accept().await?;
        tcp.set_nodelay(true)?;
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            let Ok(tls) = acceptor.accept(tcp).await else {
                return;
            };
            let _ = http1::Builder::new()
                .keep_alive(true)
                .serve_connection(TokioIo::new(tls), service_fn(handle))
                .await;
        });
    }
}

async fn handle(request: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    if request.method() != Method::POST {
        return Ok(Response::new(Full::from("ok")));
    }
    let body = match request.into_body().collect().await {
        Ok(body) => body.to_bytes(),
        Err(_) => return Ok(status(StatusCode::BAD_REQUEST)),
    };
    let review: Value = match serde_json::from_slice(&body) {
        Ok(review) => review,
        Err(_) => return Ok(status(StatusCode::BAD_REQUEST)),
    };
    let Some(uid) = review.pointer("/request/uid").and_then(Value::as_str) else {
        return Ok(status(StatusCode::BAD_REQUEST));
    };
    let answer = json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": uid, "allowed": true},
    });
    let mut response = Response::new(Full::from(answer.to_string()));
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Ok(response)
}

fn status(code: StatusCode) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::default());
    *response.status_mut() = code;
    response
}
