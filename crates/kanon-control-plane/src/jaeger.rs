//! Jaeger v2 as a child process: the trace backend that kanon and kube-apiserver export to in
//! the end-to-end traces scenario, read back through Jaeger's query API.
//!
//! It runs with in-memory storage and every listener on a free loopback port (Jaeger's defaults
//! bind all interfaces on fixed ports), and dies with this process like the control plane.

use std::fs;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::logs::tail_lines;
use crate::ports::free_port;
use crate::process::{Lifetime, STOP_GRACE, spawn, stop_child};

/// A running Jaeger: OTLP receivers (gRPC and HTTP) and the query API, all on 127.0.0.1.
#[derive(Debug)]
pub struct Jaeger {
    child: Option<Child>,
    log: PathBuf,
    otlp_grpc: u16,
    otlp_http: u16,
    query_http: u16,
    _dir: tempfile::TempDir,
}

impl Jaeger {
    /// Starts the Jaeger binary at `binary` (see [`crate::ensure_jaeger`]) and waits until its query
    /// API answers (up to 60 s).
    pub fn start(binary: &Path) -> Result<Jaeger> {
        let dir = tempfile::Builder::new()
            .prefix("kanon-jaeger-")
            .tempdir()
            .context("creating Jaeger's temporary directory")?;
        let [otlp_grpc, otlp_http, query_http, query_grpc] =
            [free_port()?, free_port()?, free_port()?, free_port()?];
        let config = dir.path().join("config.yaml");
        fs::write(
            &config,
            config_yaml(otlp_grpc, otlp_http, query_http, query_grpc),
        )
        .with_context(|| format!("writing {}", config.display()))?;
        let log = dir.path().join("jaeger.log");
        let mut cmd = Command::new(binary);
        cmd.arg(format!("--config={}", config.display()));
        let child = spawn(cmd, &log, Lifetime::DiesWithParent)?;
        let mut jaeger = Jaeger {
            child: Some(child),
            log,
            otlp_grpc,
            otlp_http,
            query_http,
            _dir: dir,
        };
        jaeger.wait_ready(Duration::from_secs(60))?;
        Ok(jaeger)
    }

    /// The OTLP/gRPC receiver as `host:port` (what kube-apiserver's `TracingConfiguration`
    /// takes).
    pub fn otlp_grpc_endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.otlp_grpc)
    }

    /// The OTLP/HTTP receiver's base URL (`http://127.0.0.1:PORT`, without `/v1/traces`).
    pub fn otlp_http_endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.otlp_http)
    }

    /// The query API's base URL.
    pub fn query_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.query_http)
    }

    /// Jaeger's own log.
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// The last lines of Jaeger's log, for a failure message.
    pub fn log_tail(&self, lines: usize) -> String {
        tail_lines(&self.log, 0, lines)
    }

    /// GETs `path` (`/api/traces?service=kanon`) from the query API and parses the JSON body;
    /// an error for a status other than 200.
    pub fn query(&self, path: &str) -> Result<serde_json::Value> {
        let (status, body) = http_get(self.query_http, path)?;
        if status != 200 {
            bail!(
                "Jaeger answered GET {path} with {status}: {}",
                String::from_utf8_lossy(&body)
            );
        }
        serde_json::from_slice(&body)
            .with_context(|| format!("Jaeger's answer to GET {path} is not JSON"))
    }

    fn wait_ready(&mut self, within: Duration) -> Result<()> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(child) = self.child.as_mut()
                && let Some(status) = child.try_wait().context("checking on jaeger")?
            {
                bail!(
                    "jaeger exited ({status}) before it was ready; its log:\n{}",
                    self.log_tail(40)
                );
            }
            // The query API answers once storage and the receivers are up.
            if let Ok((200, _)) = http_get(self.query_http, "/api/services") {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "jaeger's query API did not answer within {within:?}; its log:\n{}",
                    self.log_tail(40)
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Stops Jaeger (SIGTERM, then SIGKILL after a grace period).
    pub fn stop(mut self) -> Result<()> {
        self.stop_child()
    }

    fn stop_child(&mut self) -> Result<()> {
        match self.child.take() {
            Some(mut child) => stop_child("jaeger", &mut child, STOP_GRACE),
            None => Ok(()),
        }
    }
}

impl Drop for Jaeger {
    fn drop(&mut self) {
        if let Err(e) = self.stop_child() {
            eprintln!("stopping jaeger: {e:#}");
        }
    }
}

/// Jaeger's configuration: OTLP in, memory storage, the query API; no internal metrics
/// endpoint (it would bind a fixed port on every interface).
fn config_yaml(otlp_grpc: u16, otlp_http: u16, query_http: u16, query_grpc: u16) -> String {
    format!(
        "\
service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: info
extensions:
  jaeger_storage:
    backends:
      memory_store:
        memory:
          max_traces: 100000
  jaeger_query:
    storage:
      traces: memory_store
    http:
      endpoint: 127.0.0.1:{query_http}
    grpc:
      endpoint: 127.0.0.1:{query_grpc}
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:{otlp_grpc}
      http:
        endpoint: 127.0.0.1:{otlp_http}
exporters:
  jaeger_storage_exporter:
    trace_storage: memory_store
"
    )
}

/// A plain HTTP/1.0 GET (the query API is plain HTTP on loopback; 1.0 so that the body is not
/// chunked and ends with the connection). Returns the status and the body.
fn http_get(port: u16, path: &str) -> Result<(u16, Vec<u8>)> {
    let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, port))
        .with_context(|| format!("connecting to 127.0.0.1:{port}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .context("setting a read timeout")?;
    write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nAccept: application/json\r\n\r\n"
    )
    .with_context(|| format!("sending GET {path}"))?;
    let mut response = Vec::new();
    stream
        .read_to_end(&mut response)
        .with_context(|| format!("reading the answer to GET {path}"))?;
    let split = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .with_context(|| format!("the answer to GET {path} has no end of headers"))?;
    let head = String::from_utf8_lossy(&response[..split]);
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .with_context(|| format!("the answer to GET {path} has no status: {head}"))?;
    Ok((status, response[split + 4..].to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listener_is_on_loopback() {
        let yaml = config_yaml(1, 2, 3, 4);
        let endpoints: Vec<&str> = yaml
            .lines()
            .filter_map(|l| l.trim().strip_prefix("endpoint: "))
            .collect();
        assert_eq!(
            endpoints,
            ["127.0.0.1:3", "127.0.0.1:4", "127.0.0.1:1", "127.0.0.1:2"]
        );
        assert!(yaml.contains("level: none"), "{yaml}");
    }
}
