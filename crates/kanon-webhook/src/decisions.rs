//! The decision log: one JSON line per denial, warning and audit-mode finding a review met
//! (`kanon serve --decision-log`), so that a SIEM collects decisions without parsing free text.
//!
//! Lines go through a bounded queue to a writer thread: a slow disk or a stopped reader costs
//! dropped lines (counted), never a review's time. The log is one of the server's
//! [`DecisionObserver`]s.

use std::io::Write;
use std::sync::mpsc::{SyncSender, TrySendError, sync_channel};

use kanon_engine::{Decision, Request, WebhookKind};

use crate::observer::{Decided, DecisionObserver};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;
use serde_json::{Value, json};

/// Most lines waiting for the writer.
pub const QUEUE_LINES: usize = 4096;

/// The decision log's metrics.
#[derive(Clone, Default, Debug)]
pub struct DecisionLogMetrics {
    /// Lines written (`kanon_decision_log_lines_total`).
    pub written: Counter,
    /// Lines dropped: the queue full, or the writer failing (`kanon_decision_log_dropped_total`).
    pub dropped: Counter,
}

impl DecisionLogMetrics {
    /// Registers the metrics in `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "kanon_decision_log_lines",
            "Decision log lines written (a denial, warning or audit-mode finding each)",
            self.written.clone(),
        );
        registry.register(
            "kanon_decision_log_dropped",
            "Decision log lines dropped: the queue to the writer full, or the writer failing",
            self.dropped.clone(),
        );
    }
}

/// Where decisions are logged.
pub struct DecisionLog {
    sender: SyncSender<String>,
    metrics: DecisionLogMetrics,
}

impl std::fmt::Debug for DecisionLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DecisionLog")
    }
}

/// A log is only ever equal to itself (a server configuration compares by identity).
impl PartialEq for DecisionLog {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}

impl Eq for DecisionLog {}

impl DecisionLog {
    /// A log writing each line to `writer` from a thread of its own, flushed after each line.
    pub fn to_writer(
        mut writer: Box<dyn Write + Send>,
        metrics: DecisionLogMetrics,
    ) -> std::io::Result<DecisionLog> {
        let (sender, receiver) = sync_channel::<String>(QUEUE_LINES);
        let counted = metrics.clone();
        std::thread::Builder::new()
            .name("kanon-decision-log".into())
            .spawn(move || {
                for line in receiver {
                    let written = writer
                        .write_all(line.as_bytes())
                        .and_then(|()| writer.write_all(b"\n"))
                        .and_then(|()| writer.flush());
                    match written {
                        Ok(()) => counted.written.inc(),
                        Err(_) => counted.dropped.inc(),
                    };
                }
            })?;
        Ok(DecisionLog { sender, metrics })
    }

    /// Logs what `decision` found of `request` in `webhook`: a line per denial message, warning
    /// and audit annotation; `trace_id` when the review is traced.
    pub fn record(
        &self,
        request: &Request,
        webhook: WebhookKind,
        decision: &Decision,
        trace_id: Option<String>,
    ) {
        for line in lines(request, webhook, decision, trace_id) {
            match self.sender.try_send(line.to_string()) {
                Ok(()) => {}
                Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                    self.metrics.dropped.inc();
                }
            }
        }
    }
}

impl DecisionObserver for DecisionLog {
    fn decided(&self, decided: &Decided<'_>) {
        self.record(
            decided.request,
            decided.webhook,
            decided.decision,
            decided.trace_id.map(str::to_owned),
        );
    }
}

/// The lines of one decision, in order: denials, warnings, audit annotations. Nothing when it
/// allowed without a word.
pub fn lines(
    request: &Request,
    webhook: WebhookKind,
    decision: &Decision,
    trace_id: Option<String>,
) -> Vec<Value> {
    if decision.messages.is_empty()
        && decision.warnings.is_empty()
        && decision.audit_annotations.is_empty()
    {
        return Vec::new();
    }
    let time = jiff::Timestamp::now().to_string();
    let user = &request.info["userInfo"];
    let common = json!({
        "time": time,
        "webhook": webhook.path().trim_start_matches('/'),
        "request": {
            "uid": request.uid,
            "operation": request.operation.as_str(),
            "apiVersion": request.api_version,
            "kind": request.kind,
            "namespace": request.namespace,
            "name": request.name,
            "dryRun": request.dry_run,
        },
        "user": {
            "username": user.get("username").cloned().unwrap_or(Value::Null),
            "groups": user.get("groups").cloned().unwrap_or(Value::Null),
        },
        "allowed": decision.allowed,
        "traceId": trace_id,
    });
    let policy_of = |text: &str| -> Option<String> {
        decision
            .policy_results
            .iter()
            .map(|r| &*r.policy)
            .find(|label| {
                text.strip_prefix(label)
                    .is_some_and(|rest| rest.starts_with(": "))
            })
            .map(str::to_owned)
    };
    let mut out = Vec::new();
    let mut push = |kind: &str, policy: Option<String>, message: Value| {
        let mut line = common.clone();
        line["decision"] = json!(kind);
        line["policy"] = json!(policy);
        line["message"] = message;
        out.push(line);
    };
    for message in &decision.messages {
        push("deny", policy_of(message), json!(message));
    }
    for warning in &decision.warnings {
        push("warn", policy_of(warning), json!(warning));
    }
    for (key, value) in &decision.audit_annotations {
        let mut line = common.clone();
        line["decision"] = json!("audit");
        line["policy"] = Value::Null;
        line["auditAnnotation"] = json!({"key": key, "value": value});
        out.push(line);
    }
    out
}
