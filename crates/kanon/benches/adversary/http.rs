//! Connections and HTTP/1.1, by hand for byte-level control: TLS that accepts any certificate
//! (`common/tls.rs`), loopback endpoints, requests, responses, and an exchange's outcome in a few words.

use std::net::{SocketAddr, ToSocketAddrs};

use anyhow::{Context, Result, bail, ensure};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::timeout;
use tokio_rustls::TlsConnector;

use crate::CONNECT_TIMEOUT;

pub(crate) use crate::tls::tls_connector;

pub(crate) trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}
pub(crate) type Stream = Box<dyn Io>;

/// Where requests go: an address on loopback, with or without TLS, and a path prefix.
#[derive(Clone, Debug)]
pub(crate) struct Endpoint {
    pub(crate) addr: SocketAddr,
    tls: bool,
    authority: String,
    prefix: String,
}

impl Endpoint {
    pub(crate) fn https(port: u16) -> Endpoint {
        Endpoint {
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            tls: true,
            authority: format!("127.0.0.1:{port}"),
            prefix: String::new(),
        }
    }

    pub(crate) fn http(port: u16) -> Endpoint {
        Endpoint {
            tls: false,
            ..Endpoint::https(port)
        }
    }

    /// `http(s)://HOST:PORT[/prefix]`, `{port}` and `{metrics_port}` replaced; loopback only.
    pub(crate) fn parse(template: &str, port: u16, metrics_port: u16) -> Result<Endpoint> {
        let url = match template {
            "webhook" => "https://127.0.0.1:{port}",
            "metrics" => "http://127.0.0.1:{metrics_port}",
            other => other,
        }
        .replace("{port}", &port.to_string())
        .replace("{metrics_port}", &metrics_port.to_string());
        let (tls, rest) = if let Some(rest) = url.strip_prefix("https://") {
            (true, rest)
        } else if let Some(rest) = url.strip_prefix("http://") {
            (false, rest)
        } else {
            bail!("KANON_PROBE_URL={url:?}: not an http:// or https:// URL");
        };
        let (authority, prefix) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let addr = authority
            .to_socket_addrs()
            .with_context(|| format!("KANON_PROBE_URL={url:?}: no address with a port"))?
            .next()
            .with_context(|| format!("KANON_PROBE_URL={url:?}: no address"))?;
        ensure!(
            addr.ip().is_loopback(),
            "KANON_PROBE_URL={url:?}: this bench only sends to loopback"
        );
        Ok(Endpoint {
            addr,
            tls,
            authority: authority.to_string(),
            prefix: prefix.trim_end_matches('/').to_string(),
        })
    }

    pub(crate) fn base(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}{}", self.authority, self.prefix)
    }

    /// A request head (and body): keep-alive with a body, `Connection: close` without.
    pub(crate) fn request(&self, method: &str, path: &str, body: Option<&[u8]>) -> Vec<u8> {
        let mut out = self.head(method, path, body.map(<[u8]>::len));
        out.extend_from_slice(body.unwrap_or_default());
        out
    }

    pub(crate) fn head(&self, method: &str, path: &str, length: Option<usize>) -> Vec<u8> {
        let fields = match length {
            Some(n) => format!("Content-Type: application/json\r\nContent-Length: {n}\r\n"),
            None => "Connection: close\r\n".to_string(),
        };
        format!(
            "{method} {}{path} HTTP/1.1\r\nHost: {}\r\nUser-Agent: kanon-adversary\r\n{fields}\r\n",
            self.prefix, self.authority
        )
        .into_bytes()
    }
}

pub(crate) async fn tcp_connect(
    addr: SocketAddr,
    receive_buffer: Option<u32>,
) -> Result<TcpStream> {
    let socket = TcpSocket::new_v4().context("a socket")?;
    if let Some(size) = receive_buffer {
        // Before connect, so that the window kanon sees is small from the start.
        socket
            .set_recv_buffer_size(size)
            .context("setting SO_RCVBUF")?;
    }
    timeout(CONNECT_TIMEOUT, socket.connect(addr))
        .await
        .context("TCP connect timed out")?
        .context("TCP connect")
}

pub(crate) async fn tls_handshake(
    tcp: TcpStream,
    addr: SocketAddr,
    tls: &TlsConnector,
) -> Result<Stream> {
    let name = ServerName::from(addr.ip());
    let stream = timeout(CONNECT_TIMEOUT, tls.connect(name, tcp))
        .await
        .context("TLS handshake timed out")?
        .context("TLS handshake")?;
    Ok(Box::new(stream))
}

async fn connect(endpoint: &Endpoint, tls: &TlsConnector) -> Result<Stream> {
    let tcp = tcp_connect(endpoint.addr, None).await?;
    if endpoint.tls {
        tls_handshake(tcp, endpoint.addr, tls).await
    } else {
        Ok(Box::new(tcp))
    }
}

pub(crate) struct Response {
    pub(crate) status: u16,
    pub(crate) body: Vec<u8>,
    /// The server closes the connection after this response.
    close: bool,
}

fn find(haystack: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    haystack
        .get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|i| i + from)
}

async fn read_more<S: AsyncRead + Unpin + ?Sized>(stream: &mut S, buf: &mut Vec<u8>) -> Result<()> {
    buf.reserve(64 * 1024);
    let n = stream.read_buf(buf).await.context("reading the response")?;
    ensure!(n > 0, "the connection closed before the response ended");
    Ok(())
}

/// One HTTP/1.1 response (Content-Length, chunked, or to the end of the connection); `buf`
/// holds what was read past it.
async fn read_response<S: AsyncRead + Unpin + ?Sized>(
    stream: &mut S,
    buf: &mut Vec<u8>,
) -> Result<Response> {
    let head_end = loop {
        if let Some(at) = find(buf, b"\r\n\r\n", 0) {
            break at + 4;
        }
        ensure!(buf.len() < 64 * 1024, "a response head over 64 KiB");
        read_more(stream, buf).await?;
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status: u16 = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("not an HTTP status line: {status_line:?}"))?;
    let (mut length, mut chunked, mut close) = (None, false, false);
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim().to_ascii_lowercase();
        match name.trim().to_ascii_lowercase().as_str() {
            "content-length" => length = value.parse::<usize>().ok(),
            "transfer-encoding" => chunked = value.contains("chunked"),
            "connection" => close = value.contains("close"),
            _ => {}
        }
    }
    let mut body = Vec::new();
    let end = if chunked {
        let mut at = head_end;
        loop {
            let line_end = loop {
                if let Some(i) = find(buf, b"\r\n", at) {
                    break i;
                }
                read_more(stream, buf).await?;
            };
            let size_text = String::from_utf8_lossy(&buf[at..line_end]);
            let size_text = size_text.split(';').next().unwrap_or_default().trim();
            let size = usize::from_str_radix(size_text, 16)
                .with_context(|| format!("a chunk size {size_text:?}"))?;
            at = line_end + 2;
            if size == 0 {
                // Trailer fields, up to the empty line.
                loop {
                    let i = loop {
                        if let Some(i) = find(buf, b"\r\n", at) {
                            break i;
                        }
                        read_more(stream, buf).await?;
                    };
                    let empty = i == at;
                    at = i + 2;
                    if empty {
                        break;
                    }
                }
                break at;
            }
            while buf.len() < at + size + 2 {
                read_more(stream, buf).await?;
            }
            body.extend_from_slice(&buf[at..at + size]);
            at += size + 2;
        }
    } else if let Some(n) = length {
        while buf.len() < head_end + n {
            read_more(stream, buf).await?;
        }
        body.extend_from_slice(&buf[head_end..head_end + n]);
        head_end + n
    } else {
        close = true;
        loop {
            buf.reserve(64 * 1024);
            if stream.read_buf(buf).await.context("reading the response")? == 0 {
                break;
            }
        }
        body.extend_from_slice(&buf[head_end..]);
        buf.len()
    };
    buf.drain(..end);
    Ok(Response {
        status,
        body,
        close,
    })
}

/// A keep-alive connection and what was read past the last response.
type Conn = (Stream, Vec<u8>);

/// Sends `request` on `conn` (connecting first when there is none) and reads the response;
/// the connection is dropped after an error or a `Connection: close`.
pub(crate) async fn exchange(
    conn: &mut Option<Conn>,
    endpoint: &Endpoint,
    tls: &TlsConnector,
    request: &[u8],
) -> Result<Response> {
    let result = async {
        if conn.is_none() {
            *conn = Some((connect(endpoint, tls).await?, Vec::new()));
        }
        let (stream, buf) = conn.as_mut().context("a connection")?;
        stream
            .write_all(request)
            .await
            .context("sending the request")?;
        stream.flush().await.context("sending the request")?;
        read_response(stream, buf).await
    }
    .await;
    if !matches!(result, Ok(ref r) if !r.close) {
        *conn = None;
    }
    result
}

/// A GET on a new connection.
pub(crate) async fn get(endpoint: &Endpoint, tls: &TlsConnector, path: &str) -> Result<Response> {
    let mut conn = None;
    exchange(
        &mut conn,
        endpoint,
        tls,
        &endpoint.request("GET", path, None),
    )
    .await
}

/// The cause of a failed exchange, in a few words for a table cell.
fn short_error(e: &anyhow::Error) -> String {
    let text = format!("{e:#}");
    let lower = text.to_lowercase();
    if lower.contains("close_notify")
        || lower.contains("closed before")
        || lower.contains("unexpected eof")
    {
        "connection closed".to_string()
    } else if lower.contains("reset by peer") {
        "connection reset".to_string()
    } else if lower.contains("refused") {
        "connection refused".to_string()
    } else {
        text.chars().take(80).collect()
    }
}

pub(crate) fn answer_text(result: Result<Result<Response>, tokio::time::error::Elapsed>) -> String {
    match result {
        Ok(Ok(r)) => format!("HTTP {}", r.status),
        Ok(Err(e)) => format!("no answer ({})", short_error(&e)),
        Err(_) => "no answer in time".to_string(),
    }
}
