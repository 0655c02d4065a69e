//! Policy status: `observedGeneration`, a `Ready` condition (True; or False with every error
//! by field path), the programs the policy's templates render to and the compiler's warnings,
//! written on the `status`
//! subresource by server-side apply under one field manager ([`FIELD_MANAGER`]).
//!
//! Written only when it changes: the status a policy should have is compared with the one its
//! object carries, ignoring `lastTransitionTime`, which is kept from the object whenever the
//! condition's status does not change. So every replica computes the same status from the same
//! object, a replica that finds it already written writes nothing, and two replicas cannot
//! fight (at worst both write the same content once, with transition times a moment apart).

use std::collections::HashMap;
use std::time::Duration;

use kanon_engine::PolicyId;
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::metrics::ClusterMetrics;
use crate::policies::Entry;

/// The field manager of every status write, the same on every replica.
pub const FIELD_MANAGER: &str = "kanon";

/// The longest condition message kept (the Condition schema allows 32768 bytes).
const MAX_MESSAGE: usize = 32_000;

/// The `status` a policy should have. `observed` is the status its object carries (for the
/// transition time); `now` is the time to record when the condition changes (RFC 3339).
pub fn desired_status(entry: &Entry, observed: Option<&Value>, now: &str) -> Value {
    let ready = entry.errors.is_empty() && entry.compiled.is_some();
    let (status, reason, message) = if ready {
        (
            "True",
            "Compiled",
            "the policy compiled and is in force".to_string(),
        )
    } else {
        let errors: Vec<String> = entry.errors.iter().map(ToString::to_string).collect();
        let mut message = errors.join("; ");
        if message.is_empty() {
            message = "the policy could not be read".to_string();
        }
        ("False", "Invalid", message)
    };
    let mut out = ready_status(
        Ready {
            status,
            reason,
            message,
        },
        entry.generation,
        observed,
        now,
    );
    let rendered: Vec<Value> = entry
        .compiled
        .iter()
        .flat_map(|c| c.rendered.iter())
        .map(|r| json!({"field": r.field, "program": &*r.source}))
        .collect();
    if !rendered.is_empty() {
        out["renderedPrograms"] = Value::Array(rendered);
    }
    let warnings: Vec<Value> = entry
        .warnings
        .iter()
        .map(|w| Value::from(w.to_string()))
        .collect();
    if !warnings.is_empty() {
        out["warnings"] = Value::Array(warnings);
    }
    out
}

/// A `Ready` condition's status, reason and message.
pub(crate) struct Ready {
    pub(crate) status: &'static str,
    pub(crate) reason: &'static str,
    pub(crate) message: String,
}

/// A status of `observedGeneration` and one `Ready` condition, its transition time kept from
/// `observed` while its status does not change (`now` otherwise); a message past the
/// Condition schema's limit is cut.
pub(crate) fn ready_status(
    mut ready: Ready,
    generation: Option<i64>,
    observed: Option<&Value>,
    now: &str,
) -> Value {
    if ready.message.len() > MAX_MESSAGE {
        let mut end = MAX_MESSAGE;
        while !ready.message.is_char_boundary(end) {
            end -= 1;
        }
        ready.message.truncate(end);
        ready.message.push_str(" …");
    }
    let since = ready_condition(observed)
        .filter(|c| c.get("status").and_then(Value::as_str) == Some(ready.status))
        .and_then(|c| c.get("lastTransitionTime"))
        .cloned()
        .unwrap_or_else(|| Value::from(now));
    let mut condition = json!({
        "type": "Ready",
        "status": ready.status,
        "reason": ready.reason,
        "message": ready.message,
        "lastTransitionTime": since,
    });
    if let Some(generation) = generation {
        condition["observedGeneration"] = json!(generation);
    }
    let mut out = json!({"conditions": [condition]});
    if let Some(generation) = generation {
        out["observedGeneration"] = json!(generation);
    }
    out
}

fn ready_condition(status: Option<&Value>) -> Option<&Value> {
    status?
        .get("conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some("Ready"))
}

/// `status` without the `lastTransitionTime` of its conditions, for comparisons.
fn without_times(status: &Value) -> Value {
    let mut status = status.clone();
    if let Some(conditions) = status.get_mut("conditions").and_then(Value::as_array_mut) {
        for c in conditions {
            if let Some(map) = c.as_object_mut() {
                map.remove("lastTransitionTime");
            }
        }
    }
    status
}

/// Whether `observed` already says what `desired` says (transition times aside).
pub fn matches(observed: Option<&Value>, desired: &Value) -> bool {
    observed.is_some_and(|o| without_times(o) == without_times(desired))
}

/// An object whose status kanon writes: a policy or a PolicyException.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum StatusOf {
    /// A policy of kanon's kinds.
    Policy(PolicyId),
    /// A PolicyException.
    Exception {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
}

impl StatusOf {
    fn resource(&self) -> kube::core::ApiResource {
        match self {
            StatusOf::Policy(id) => crate::policies::policy_resource(id.kind),
            StatusOf::Exception { .. } => crate::policies::exception_resource(),
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            StatusOf::Policy(id) => id.kind.as_str(),
            StatusOf::Exception { .. } => kanon_api::EXCEPTION_KIND,
        }
    }

    fn namespace(&self) -> Option<&str> {
        match self {
            StatusOf::Policy(id) => id.namespace.as_deref(),
            StatusOf::Exception { namespace, .. } => Some(namespace),
        }
    }

    fn name(&self) -> &str {
        match self {
            StatusOf::Policy(id) => &id.name,
            StatusOf::Exception { name, .. } => name,
        }
    }
}

impl std::fmt::Display for StatusOf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StatusOf::Policy(id) => id.fmt(f),
            StatusOf::Exception { namespace, name } => {
                write!(f, "{}/{namespace}/{name}", kanon_api::EXCEPTION_KIND)
            }
        }
    }
}

/// One status to write.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusUpdate {
    /// The policy or exception.
    pub id: StatusOf,
    /// Its `status`.
    pub status: Value,
}

/// Writes statuses handed to it, in the background, each retried with a growing delay until
/// it is written, superseded by a newer one for the same policy, or the policy is gone.
#[derive(Debug, Clone)]
pub struct StatusWriter {
    queue: mpsc::UnboundedSender<StatusUpdate>,
}

impl StatusWriter {
    /// Starts the writer task on the current runtime.
    pub fn start(client: Client, metrics: ClusterMetrics) -> Self {
        let (queue, updates) = mpsc::unbounded_channel();
        tokio::spawn(write_statuses(client, updates, metrics));
        StatusWriter { queue }
    }

    /// Queues `update`.
    pub fn send(&self, update: StatusUpdate) {
        // The task ends only with the runtime.
        let _ = self.queue.send(update);
    }
}

/// Why a write failed: `gone` when the policy no longer exists (nothing to retry).
struct WriteFailure {
    gone: bool,
    message: String,
}

async fn write(client: &Client, update: &StatusUpdate) -> Result<(), WriteFailure> {
    let resource = update.id.resource();
    let api: Api<DynamicObject> = match update.id.namespace() {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    let mut body = json!({
        "apiVersion": kanon_api::API_VERSION,
        "kind": update.id.kind(),
        "metadata": {"name": update.id.name()},
        "status": update.status,
    });
    if let Some(ns) = update.id.namespace() {
        body["metadata"]["namespace"] = json!(ns);
    }
    let params = PatchParams::apply(FIELD_MANAGER).force();
    match api
        .patch_status(update.id.name(), &params, &Patch::Apply(&body))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Err(WriteFailure {
            gone: true,
            message: status.message,
        }),
        Err(e) => Err(WriteFailure {
            gone: false,
            message: crate::apiserver_error::describe(&e),
        }),
    }
}

async fn write_statuses(
    client: Client,
    mut updates: mpsc::UnboundedReceiver<StatusUpdate>,
    metrics: ClusterMetrics,
) {
    // The newest status per policy still to write, and how many times each has failed.
    let mut pending: HashMap<StatusOf, (StatusUpdate, u32)> = HashMap::new();
    loop {
        if pending.is_empty() {
            match updates.recv().await {
                Some(u) => {
                    pending.insert(u.id.clone(), (u, 0));
                }
                None => return,
            }
        }
        while let Ok(u) = updates.try_recv() {
            pending.insert(u.id.clone(), (u, 0));
        }
        let mut retry_in: Option<Duration> = None;
        let ids: Vec<StatusOf> = pending.keys().cloned().collect();
        for id in ids {
            let Some((update, failures)) = pending.get(&id).cloned() else {
                continue;
            };
            match write(&client, &update).await {
                Ok(()) => {
                    metrics.status_write(true);
                    tracing::debug!(policy = %id, "status written");
                    pending.remove(&id);
                }
                Err(failure) if failure.gone => {
                    pending.remove(&id);
                }
                Err(failure) => {
                    metrics.status_write(false);
                    tracing::warn!(policy = %id, error = %failure.message, "writing the status failed; retrying");
                    let delay = Duration::from_millis(200 * 2u64.pow(failures.min(7)));
                    retry_in = Some(retry_in.map_or(delay, |d| d.min(delay)));
                    if let Some(p) = pending.get_mut(&id) {
                        p.1 = failures + 1;
                    }
                }
            }
        }
        if let Some(delay) = retry_in {
            // Wait for the retry, or for newer updates, whichever comes first.
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                next = updates.recv() => match next {
                    Some(u) => { pending.insert(u.id.clone(), (u, 0)); }
                    None => return,
                },
            }
        }
    }
}
