//! `kanon serve`'s trace export flags ([`kanon_webhook::trace`]): off unless an OTLP endpoint
//! is given, by flag or by OpenTelemetry's environment variables.

use clap::Args;
use kanon_webhook::trace::{Protocol, TraceMetrics, TraceSettings, Tracing};

/// The trace flags of `kanon serve`.
#[derive(Debug, Clone, Args)]
pub struct TraceArgs {
    /// Export OpenTelemetry traces of reviews over OTLP to this collector
    /// (`http://collector:4317` for gRPC; for HTTP/protobuf the base URL, `/v1/traces` added).
    /// Default: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT`; with
    /// neither, no traces. kube-apiserver's `traceparent` is honoured, so kanon's spans sit
    /// under its webhook call.
    #[arg(long, value_name = "URL")]
    otlp_endpoint: Option<String>,
    /// The OTLP transport: `grpc` or `http/protobuf`. Default: `OTEL_EXPORTER_OTLP_PROTOCOL`,
    /// else `grpc`.
    #[arg(long, value_name = "PROTOCOL", value_parser = parse_protocol)]
    otlp_protocol: Option<Protocol>,
    /// The share of reviews arriving without a trace context that are traced (0 to 1); those
    /// with one follow its sampled flag. Default: `OTEL_TRACES_SAMPLER`/`_ARG` (`always_on`,
    /// `always_off`, `traceidratio`, or their `parentbased_` forms), else all.
    #[arg(long, value_name = "RATIO")]
    trace_sampling_ratio: Option<f64>,
}

fn parse_protocol(text: &str) -> Result<Protocol, String> {
    Protocol::parse(text).map_err(|e| e.to_string())
}

impl TraceArgs {
    /// Starts export on the current tokio runtime when asked for; `cluster_name` goes on every
    /// span as `k8s.cluster.name`.
    pub fn start(
        &self,
        cluster_name: Option<&str>,
        metrics: TraceMetrics,
    ) -> Result<Option<Tracing>, String> {
        let settings = TraceSettings {
            endpoint: self.otlp_endpoint.clone(),
            protocol: self.otlp_protocol,
            sampling_ratio: self.trace_sampling_ratio,
            cluster_name: cluster_name.map(str::to_owned),
        };
        let env = |key: &str| std::env::var(key).ok().filter(|v| !v.is_empty());
        Tracing::start(&settings, &env, metrics).map_err(|e| e.to_string())
    }
}
