//! The span queue between a review and the collector: bounded, never waited on. A review's
//! spans are handed over without blocking; when the queue is full (the collector slow or gone)
//! they are dropped and counted, so export never holds a review or grows memory.

use std::fmt;
use std::time::Duration;

use opentelemetry::Context;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;
use tokio::sync::mpsc;

/// The trace export's metrics.
#[derive(Clone, Default, Debug)]
pub struct TraceMetrics {
    /// Spans dropped because the queue was full (`kanon_trace_spans_dropped_total`).
    pub dropped: Counter,
    /// Spans the collector did not take (`kanon_trace_spans_failed_total`).
    pub failed: Counter,
    /// Spans exported (`kanon_trace_spans_exported_total`).
    pub exported: Counter,
}

impl TraceMetrics {
    /// Registers the metrics in `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "kanon_trace_spans_dropped",
            "Spans dropped because the export queue was full (the collector slow or unreachable)",
            self.dropped.clone(),
        );
        registry.register(
            "kanon_trace_spans_failed",
            "Spans the collector did not take (an export that failed or timed out)",
            self.failed.clone(),
        );
        registry.register(
            "kanon_trace_spans_exported",
            "Spans exported to the collector",
            self.exported.clone(),
        );
    }
}

/// How spans are batched for export.
#[derive(Debug, Clone, Copy)]
pub struct QueueSettings {
    /// Most spans waiting (`OTEL_BSP_MAX_QUEUE_SIZE`, default 2048).
    pub capacity: usize,
    /// Most spans in one export (`OTEL_BSP_MAX_EXPORT_BATCH_SIZE`, default 512).
    pub batch: usize,
    /// Longest a span waits for its batch to fill (`OTEL_BSP_SCHEDULE_DELAY`, default 5 s).
    pub delay: Duration,
}

impl Default for QueueSettings {
    fn default() -> Self {
        QueueSettings {
            capacity: 2048,
            batch: 512,
            delay: Duration::from_secs(5),
        }
    }
}

/// The SDK's span processor: hands finished spans to the export task, or drops them.
pub struct SpanQueue {
    sender: mpsc::Sender<SpanData>,
    metrics: TraceMetrics,
}

impl fmt::Debug for SpanQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SpanQueue")
            .field("capacity", &self.sender.max_capacity())
            .finish()
    }
}

impl SpanQueue {
    /// A queue exporting through `exporter` from a task on the current tokio runtime; the
    /// task ends, having exported what is left, once the queue is dropped (with the tracer
    /// provider), and its handle says when.
    pub fn start<E: SpanExporter + 'static>(
        exporter: E,
        settings: QueueSettings,
        metrics: TraceMetrics,
    ) -> (SpanQueue, tokio::task::JoinHandle<()>) {
        let (sender, receiver) = mpsc::channel(settings.capacity.max(1));
        let task = tokio::spawn(export(receiver, exporter, settings, metrics.clone()));
        (SpanQueue { sender, metrics }, task)
    }
}

impl SpanProcessor for SpanQueue {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        if self.sender.try_send(span).is_err() {
            self.metrics.dropped.inc();
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }
}

/// Exports batches as they fill, or when the oldest span has waited `settings.delay`.
async fn export<E: SpanExporter>(
    mut receiver: mpsc::Receiver<SpanData>,
    exporter: E,
    settings: QueueSettings,
    metrics: TraceMetrics,
) {
    let batch_size = settings.batch.max(1);
    loop {
        let Some(first) = receiver.recv().await else {
            break;
        };
        let mut batch = Vec::with_capacity(batch_size);
        batch.push(first);
        let until = tokio::time::Instant::now() + settings.delay;
        while batch.len() < batch_size {
            match tokio::time::timeout_at(until, receiver.recv()).await {
                Ok(Some(span)) => batch.push(span),
                Ok(None) | Err(_) => break,
            }
        }
        let spans = batch.len() as u64;
        match exporter.export(batch).await {
            Ok(()) => {
                metrics.exported.inc_by(spans);
            }
            Err(error) => {
                metrics.failed.inc_by(spans);
                tracing::debug!(%error, spans, "exporting spans failed");
            }
        }
    }
    let _ = exporter.shutdown_with_timeout(Duration::from_secs(1));
}
