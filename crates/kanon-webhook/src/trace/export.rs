//! Where traces go and how many: OTLP over gRPC or HTTP/protobuf, settings from flags and
//! from OpenTelemetry's standard environment variables (as every OpenTelemetry SDK reads them),
//! flags first. Off unless an endpoint is given.

use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider, SpanExporter as _, Tracer};

use super::queue::{QueueSettings, SpanQueue, TraceMetrics};
use super::sampling::{ReviewSampling, SamplingError};

/// The OTLP transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// OTLP/gRPC (port 4317 by convention).
    Grpc,
    /// OTLP/HTTP with protobuf bodies (port 4318, path `/v1/traces`).
    HttpProtobuf,
}

impl Protocol {
    /// `grpc` or `http/protobuf`, as `OTEL_EXPORTER_OTLP_PROTOCOL` writes them.
    pub fn parse(text: &str) -> Result<Protocol, ExportError> {
        match text.trim() {
            "grpc" => Ok(Protocol::Grpc),
            "http/protobuf" => Ok(Protocol::HttpProtobuf),
            other => Err(ExportError::Protocol(other.to_owned())),
        }
    }
}

/// Why traces cannot be exported as asked.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// A protocol other than `grpc` and `http/protobuf`.
    #[error(
        "OTLP protocol `{0}` is not one kanon exports with: use `grpc` or `http/protobuf` (`http/json` is not supported)"
    )]
    Protocol(String),
    /// The sampling asked for (a ratio, `OTEL_TRACES_SAMPLER`).
    #[error(transparent)]
    Sampling(#[from] SamplingError),
    /// A number in an `OTEL_*` variable that is not one.
    #[error("{variable}={value}: not a number")]
    Number {
        /// The variable.
        variable: &'static str,
        /// What it holds.
        value: String,
    },
    /// The exporter could not be built (a malformed endpoint, say).
    #[error("the OTLP exporter to {endpoint} cannot be built: {reason}")]
    Exporter {
        /// The endpoint.
        endpoint: String,
        /// Why.
        reason: String,
    },
}

/// What the binary's flags say (each `None` leaves it to the environment).
#[derive(Debug, Clone, Default)]
pub struct TraceSettings {
    /// The collector (`--otlp-endpoint`): for gRPC `http://host:4317`; for HTTP the base URL
    /// (`/v1/traces` is appended) or, ending in `/v1/traces`, the whole URL.
    pub endpoint: Option<String>,
    /// `--otlp-protocol`.
    pub protocol: Option<Protocol>,
    /// `--trace-sampling-ratio`: the share of reviews that arrive without a trace context that
    /// are traced (those with one follow its sampled flag).
    pub sampling_ratio: Option<f64>,
    /// `--cluster-name`, as `k8s.cluster.name` on every span.
    pub cluster_name: Option<String>,
}

/// Reads an environment variable (a seam for tests).
pub type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// Trace export in force: the provider (kept for its lifetime) and the tracer for the layer.
pub struct Tracing {
    provider: SdkTracerProvider,
    tracer: Tracer,
    export: tokio::task::JoinHandle<()>,
    /// Where spans go, for the start-up log line.
    pub endpoint: String,
    /// How.
    pub protocol: Protocol,
    /// Which reviews are traced: the server decides before making a review's span.
    pub sampling: ReviewSampling,
}

impl Tracing {
    /// Starts export on the current tokio runtime when an endpoint is given (by `settings`,
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT`) and
    /// `OTEL_SDK_DISABLED` is not `true`; `None` otherwise.
    pub fn start(
        settings: &TraceSettings,
        env: Env<'_>,
        metrics: TraceMetrics,
    ) -> Result<Option<Tracing>, ExportError> {
        if env("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        let protocol = match settings.protocol {
            Some(protocol) => protocol,
            None => match env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
                .or_else(|| env("OTEL_EXPORTER_OTLP_PROTOCOL"))
            {
                Some(text) => Protocol::parse(&text)?,
                None => Protocol::Grpc,
            },
        };
        let Some(endpoint) = endpoint(settings, env, protocol) else {
            return Ok(None);
        };
        let built = match protocol {
            Protocol::Grpc => opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_endpoint(endpoint.clone())
                .with_timeout(Duration::from_secs(10))
                .build(),
            Protocol::HttpProtobuf => opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                .with_endpoint(endpoint.clone())
                .with_timeout(Duration::from_secs(10))
                .build(),
        };
        let mut exporter = built.map_err(|e| ExportError::Exporter {
            endpoint: endpoint.clone(),
            reason: e.to_string(),
        })?;
        let resource = resource(settings, env);
        exporter.set_resource(&resource);
        let (queue, export) = SpanQueue::start(exporter, queue_settings(env)?, metrics);
        let mut provider = SdkTracerProvider::builder()
            .with_span_processor(queue)
            .with_resource(resource);
        // A flag decides; else OTEL_TRACES_SAMPLER as the SDKs read it; else every review
        // without a parent, and those with one as their parent says. The server decides
        // before it makes a span (see `sampling`), so the SDK keeps every span it is given
        // (and the audit's pages, which have no caller, are all traced).
        let sampling = match settings.sampling_ratio {
            Some(ratio) => ReviewSampling::parent_based(ratio)?,
            None => ReviewSampling::from_env(env)?,
        };
        provider = provider.with_sampler(Sampler::AlwaysOn);
        let provider = provider.build();
        let tracer = provider.tracer("kanon");
        Ok(Some(Tracing {
            provider,
            tracer,
            export,
            endpoint,
            protocol,
            sampling,
        }))
    }

    /// The tracer the `tracing-opentelemetry` layer writes spans with.
    pub fn tracer(&self) -> Tracer {
        self.tracer.clone()
    }

    /// Exports what is queued (for at most `within`) and stops.
    pub async fn shutdown(self, within: Duration) {
        let Tracing {
            provider,
            tracer,
            export,
            ..
        } = self;
        drop(tracer);
        let _ = provider.shutdown();
        drop(provider);
        let _ = tokio::time::timeout(within, export).await;
    }
}

/// The endpoint to export to: the flag, else the traces variable (a whole URL), else the
/// generic variable (a base URL, `/v1/traces` appended for HTTP, as the specification says).
fn endpoint(settings: &TraceSettings, env: Env<'_>, protocol: Protocol) -> Option<String> {
    let whole = |url: String| match protocol {
        Protocol::HttpProtobuf if !url.trim_end_matches('/').ends_with("/v1/traces") => {
            format!("{}/v1/traces", url.trim_end_matches('/'))
        }
        _ => url,
    };
    if let Some(url) = settings.endpoint.clone() {
        return Some(whole(url));
    }
    if let Some(url) = env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
        return Some(url);
    }
    env("OTEL_EXPORTER_OTLP_ENDPOINT").map(whole)
}

/// `service.name` (`OTEL_SERVICE_NAME`, else `kanon`), `k8s.cluster.name` (the flag), and
/// `OTEL_RESOURCE_ATTRIBUTES`.
fn resource(settings: &TraceSettings, env: Env<'_>) -> Resource {
    let mut builder = Resource::builder();
    if env("OTEL_SERVICE_NAME").is_none() {
        builder = builder.with_service_name("kanon");
    }
    builder = builder.with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")));
    if let Some(cluster) = &settings.cluster_name {
        builder = builder.with_attribute(KeyValue::new("k8s.cluster.name", cluster.clone()));
    }
    builder.build()
}

/// The queue's bounds from `OTEL_BSP_*`, as the SDK's batch processor reads them.
fn queue_settings(env: Env<'_>) -> Result<QueueSettings, ExportError> {
    let number = |variable: &'static str| -> Result<Option<u64>, ExportError> {
        env(variable)
            .map(|value| {
                value
                    .trim()
                    .parse::<u64>()
                    .map_err(|_| ExportError::Number {
                        variable,
                        value: value.clone(),
                    })
            })
            .transpose()
    };
    let mut settings = QueueSettings::default();
    if let Some(n) = number("OTEL_BSP_MAX_QUEUE_SIZE")? {
        settings.capacity = usize::try_from(n).unwrap_or(usize::MAX).max(1);
    }
    if let Some(n) = number("OTEL_BSP_MAX_EXPORT_BATCH_SIZE")? {
        settings.batch = usize::try_from(n).unwrap_or(usize::MAX).max(1);
    }
    if let Some(ms) = number("OTEL_BSP_SCHEDULE_DELAY")? {
        settings.delay = Duration::from_millis(ms);
    }
    Ok(settings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::env_of;

    #[test]
    fn the_endpoint_comes_from_the_flag_then_the_variables_as_the_specification_says() {
        let none = env_of(&[]);
        let flag = TraceSettings {
            endpoint: Some("http://collector:4318".into()),
            ..TraceSettings::default()
        };
        assert_eq!(
            endpoint(&flag, &none, Protocol::HttpProtobuf).as_deref(),
            Some("http://collector:4318/v1/traces")
        );
        assert_eq!(
            endpoint(&flag, &none, Protocol::Grpc).as_deref(),
            Some("http://collector:4318")
        );
        let generic = env_of(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318/")]);
        assert_eq!(
            endpoint(&TraceSettings::default(), &generic, Protocol::HttpProtobuf).as_deref(),
            Some("http://c:4318/v1/traces")
        );
        let traces = env_of(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t:9999/custom"),
        ]);
        assert_eq!(
            endpoint(&TraceSettings::default(), &traces, Protocol::HttpProtobuf).as_deref(),
            Some("http://t:9999/custom")
        );
        assert_eq!(
            endpoint(&TraceSettings::default(), &none, Protocol::Grpc),
            None
        );
    }

    #[test]
    fn bad_settings_are_named() {
        assert!(matches!(
            Protocol::parse("http/json"),
            Err(ExportError::Protocol(p)) if p == "http/json"
        ));
        let bad = env_of(&[("OTEL_BSP_MAX_QUEUE_SIZE", "lots")]);
        assert_eq!(
            queue_settings(&bad).unwrap_err().to_string(),
            "OTEL_BSP_MAX_QUEUE_SIZE=lots: not a number"
        );
        let sized = env_of(&[
            ("OTEL_BSP_MAX_QUEUE_SIZE", "10"),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ]);
        let settings = queue_settings(&sized).unwrap();
        assert_eq!(settings.capacity, 10);
        assert_eq!(settings.delay, Duration::from_millis(100));
    }
}
