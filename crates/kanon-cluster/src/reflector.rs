//! The policy reflector: watches of the four policy kinds feeding [`ClusterPolicies`], a new
//! policy set published after each batch of changes, and each policy's status brought up to
//! date.
//!
//! - Objects are watched untyped (`DynamicObject`): any object the apiserver stores is read,
//!   and a policy the engine cannot make sense of is reported (`Ready=False`, a log line, a
//!   metric) instead of breaking the watch for the others.
//! - Nothing is published until every kind has been listed once and the Namespace cache has
//!   synced: `/readyz` stays false until then.
//! - Events that arrive together are handled together and published once.
//! - When the apiserver goes away, the watches retry with backoff and the last set keeps
//!   serving; when they come back they relist, and policies deleted meanwhile are dropped.
//! - Policies are checked against the kinds the cluster serves ([`CustomKinds`]); when those
//!   change, every policy's warnings are recomputed here (off the request path: one kinds
//!   check per policy, at most once per batch of CRD changes) and the statuses that differ are
//!   written. Statuses wait until the CRDs have been listed once (or their watch has failed),
//!   so that a starting replica does not write statuses without the custom kinds' warnings.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use futures::{FutureExt, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kanon_api::PolicyKind;
use kanon_engine::{PolicyId, PolicyPublisher, Targets, WebhookKind};
use kube::Client;
use kube::api::{Api, DynamicObject};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::Value;
use tokio::sync::watch;

use crate::backoff::WatchBackoff;
use crate::custom_kinds::CustomKinds;
use crate::exceptions::{self, ClusterExceptions, ExceptionKey};
use crate::metrics::ClusterMetrics;
use crate::namespaces::NamespaceCache;
use crate::policies::exception_resource;
pub use crate::policies::policy_resource;
use crate::policies::{Applied, ClusterPolicies};
use crate::status::{self, StatusOf, StatusUpdate, StatusWriter};

/// What the reflector needs.
pub struct Reflector {
    /// The apiserver.
    pub client: Client,
    /// Where each new set goes.
    pub publisher: Arc<dyn PolicyPublisher>,
    /// The Namespace cache the first set waits for.
    pub namespaces: NamespaceCache,
    /// Where status updates go; `None`: statuses are not written (read-only replicas, tests).
    pub status: Option<StatusWriter>,
    /// Where what each webhook must see goes after each new set (mutating, validating), for
    /// the webhook configurations' rules; `None`: not needed.
    pub targets: Option<watch::Sender<(Targets, Targets)>>,
    /// The kinds the cluster serves, custom ones included; `None`: the built-in kinds only.
    pub kinds: Option<CustomKinds>,
    /// Metrics.
    pub metrics: ClusterMetrics,
    /// The namespaces whose PolicyExceptions are honoured (and watched); empty: none.
    pub exception_namespaces: Vec<String>,
}

/// The reflector's state between events.
struct Loop {
    policies: ClusterPolicies,
    /// Policies whose status may need a write (touched by an event since the last check).
    touched: BTreeSet<PolicyId>,
    /// The status last sent per policy, until its object shows it (so a write in flight is
    /// not sent again).
    sent: HashMap<PolicyId, Value>,
    published: bool,
    exceptions: ClusterExceptions,
    /// The status last sent per exception, until its object shows it.
    exception_sent: HashMap<ExceptionKey, Value>,
}

impl Reflector {
    /// Runs until the runtime stops.
    pub async fn run(mut self) {
        let streams = PolicyKind::ALL.map(|kind| {
            let api: Api<DynamicObject> =
                Api::all_with(self.client.clone(), &policy_resource(kind));
            watcher(api, watcher::Config::default())
                .backoff(WatchBackoff::new())
                .map(move |event| (kind, event))
                .boxed()
        });
        let mut events = futures::stream::select_all(streams);
        let mut exception_events =
            futures::stream::select_all(self.exception_namespaces.iter().map(|namespace| {
                let api: Api<DynamicObject> =
                    Api::namespaced_with(self.client.clone(), namespace, &exception_resource());
                let namespace = namespace.clone();
                watcher(api, watcher::Config::default())
                    .backoff(WatchBackoff::new())
                    .map(move |event| (namespace.clone(), event))
                    .boxed()
            }));
        let watching_exceptions = !self.exception_namespaces.is_empty();
        let mut state = Loop {
            policies: ClusterPolicies::new(),
            touched: BTreeSet::new(),
            sent: HashMap::new(),
            published: false,
            exceptions: ClusterExceptions::new(self.exception_namespaces.clone()),
            exception_sent: HashMap::new(),
        };
        let mut kinds = self.kinds.take();
        if let Some(known) = kinds.as_ref().and_then(CustomKinds::current) {
            state.policies.set_kinds(known);
        }
        let mut namespaces_synced = self.namespaces.is_synced();
        loop {
            tokio::select! {
                next = events.next() => {
                    let Some((kind, event)) = next else { return };
                    self.handle(&mut state, kind, event);
                    // Everything already waiting joins this batch.
                    while let Some(Some((kind, event))) = events.next().now_or_never() {
                        self.handle(&mut state, kind, event);
                    }
                }
                _ = self.namespaces.wait_synced(), if !namespaces_synced => {
                    namespaces_synced = true;
                }
                Some((namespace, event)) = exception_events.next(), if watching_exceptions => {
                    self.handle_exception(&mut state, &namespace, event);
                    while let Some(Some((namespace, event))) = exception_events.next().now_or_never() {
                        self.handle_exception(&mut state, &namespace, event);
                    }
                }
                // An exception's status changes when it expires.
                _ = until_next_expiry(&state.exceptions) => {}
                Some(known) = kinds_changed(&mut kinds) => {
                    let changed = state.policies.set_kinds(known);
                    if !changed.is_empty() {
                        tracing::info!(policies = changed.len(), "the known kinds changed the warnings of some policies");
                    }
                    state.touched.extend(changed);
                }
            }
            if !(namespaces_synced && state.policies.synced() && state.exceptions.synced()) {
                continue;
            }
            let mut change = state.policies.take_changes();
            if state.exceptions.take_changed() {
                change = Some(match change {
                    Some(c) => format!("{c}, PolicyExceptions changed"),
                    None => "PolicyExceptions changed".to_string(),
                });
            }
            if change.is_some() || !state.published {
                let change = change.unwrap_or_else(|| "no policies".to_string());
                let set = state
                    .policies
                    .set()
                    .with_exceptions(state.exceptions.in_force());
                if let Some(targets) = &self.targets {
                    let now = (
                        set.targets(WebhookKind::Mutating),
                        set.targets(WebhookKind::Validating),
                    );
                    if state.published {
                        targets.send_if_modified(|current| {
                            let changed = *current != now;
                            *current = now;
                            changed
                        });
                    } else {
                        // The first set always notifies: rules must not be written from the
                        // channel's initial (empty) value before any set exists.
                        targets.send_replace(now);
                    }
                }
                self.publisher.publish(set, &change);
                self.metrics.set_invalid(state.policies.invalid());
                state.published = true;
            }
            // Statuses wait for the custom kinds, whose warnings they carry.
            if kinds.as_ref().is_none_or(CustomKinds::is_settled) {
                self.update_statuses(&mut state);
            }
            self.update_exception_statuses(&mut state);
        }
    }

    fn handle(
        &self,
        state: &mut Loop,
        kind: PolicyKind,
        event: Result<watcher::Event<DynamicObject>, watcher::Error>,
    ) {
        let event = match event {
            Ok(event) => event,
            Err(error) => {
                self.metrics.watch_error(kind.as_str());
                let error = crate::apiserver_error::describe_watch(&error);
                tracing::warn!(%kind, %error, "the policy watch failed; retrying (the last policies keep serving)");
                return;
            }
        };
        match event {
            watcher::Event::Init => state.policies.relist_started(kind),
            watcher::Event::InitDone => state.policies.relist_done(kind),
            watcher::Event::Apply(object) | watcher::Event::InitApply(object) => {
                let value = match serde_json::to_value(&object) {
                    Ok(v) => v,
                    Err(error) => {
                        tracing::warn!(%kind, %error, "a policy object could not be read");
                        return;
                    }
                };
                match state.policies.apply(kind, value) {
                    Applied::Compiled(id) => {
                        if let Some(entry) = state.policies.get(&id) {
                            self.metrics.compiled(!entry.errors.is_empty());
                            if !entry.errors.is_empty() {
                                let errors: Vec<String> =
                                    entry.errors.iter().map(ToString::to_string).collect();
                                tracing::warn!(policy = %id, "the policy is invalid (Ready=False): {}", errors.join("; "));
                            }
                        }
                        state.sent.remove(&id);
                        state.touched.insert(id);
                    }
                    Applied::Unchanged(id) => {
                        state.touched.insert(id);
                    }
                    Applied::Unreadable(message) => {
                        tracing::warn!(%kind, "a policy object left out: {message}");
                    }
                }
            }
            watcher::Event::Delete(object) => {
                if let Ok(value) = serde_json::to_value(&object) {
                    state.policies.delete(kind, &value);
                }
            }
        }
    }

    fn handle_exception(
        &self,
        state: &mut Loop,
        namespace: &str,
        event: Result<watcher::Event<DynamicObject>, watcher::Error>,
    ) {
        let event = match event {
            Ok(event) => event,
            Err(error) => {
                self.metrics.watch_error(kanon_api::EXCEPTION_KIND);
                let error = crate::apiserver_error::describe_watch(&error);
                tracing::warn!(%namespace, %error, "the PolicyException watch failed; retrying (the last exceptions stay in force)");
                return;
            }
        };
        match event {
            watcher::Event::Init => state.exceptions.relist_started(namespace),
            watcher::Event::InitDone => state.exceptions.relist_done(namespace),
            watcher::Event::Apply(object) | watcher::Event::InitApply(object) => {
                let Ok(value) = serde_json::to_value(&object) else {
                    return;
                };
                if let Some(key) = state.exceptions.apply(value)
                    && let Some(Err(errors)) = state.exceptions.get(&key).map(|e| &e.compiled)
                {
                    let errors: Vec<String> = errors.iter().map(ToString::to_string).collect();
                    tracing::warn!(exception = %format!("{}/{}", key.0, key.1), "the PolicyException is invalid (Ready=False): {}", errors.join("; "));
                }
            }
            watcher::Event::Delete(object) => {
                if let Ok(value) = serde_json::to_value(&object) {
                    state.exceptions.delete(&value);
                }
            }
        }
    }

    /// Sends the exceptions' statuses that differ from what their objects show: judged
    /// against the policies in force, at the clock's time, once a set has been published.
    fn update_exception_statuses(&self, state: &mut Loop) {
        let Some(writer) = &self.status else {
            return;
        };
        if !state.published {
            return;
        }
        let now_text = serde_json::to_value(Time(k8s_openapi::jiff::Timestamp::now()))
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        let now = unix_now();
        state
            .exception_sent
            .retain(|key, _| state.exceptions.get(key).is_some());
        for (key, entry) in state.exceptions.entries() {
            let observed = entry.observed_status.as_ref();
            let desired =
                exceptions::desired_status(entry, &state.policies, now, observed, &now_text);
            if status::matches(observed, &desired) {
                state.exception_sent.remove(key);
                continue;
            }
            if state
                .exception_sent
                .get(key)
                .is_some_and(|sent| status::matches(Some(sent), &desired))
            {
                continue;
            }
            state.exception_sent.insert(key.clone(), desired.clone());
            writer.send(StatusUpdate {
                id: StatusOf::Exception {
                    namespace: key.0.clone(),
                    name: key.1.clone(),
                },
                status: desired,
            });
        }
    }

    /// Sends the statuses that differ from what their objects show (and are not already on
    /// their way).
    fn update_statuses(&self, state: &mut Loop) {
        let touched = std::mem::take(&mut state.touched);
        let Some(writer) = &self.status else {
            return;
        };
        let now = serde_json::to_value(Time(k8s_openapi::jiff::Timestamp::now()))
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        for id in touched {
            let Some(entry) = state.policies.get(&id) else {
                state.sent.remove(&id);
                continue;
            };
            let observed = entry.observed_status.as_ref();
            let desired = status::desired_status(entry, observed, &now);
            if status::matches(observed, &desired) {
                state.sent.remove(&id);
                continue;
            }
            if state
                .sent
                .get(&id)
                .is_some_and(|sent| status::matches(Some(sent), &desired))
            {
                continue;
            }
            state.sent.insert(id.clone(), desired.clone());
            writer.send(StatusUpdate {
                id: StatusOf::Policy(id),
                status: desired,
            });
        }
    }
}

/// The clock's time in Unix seconds.
fn unix_now() -> i64 {
    kanon_engine::unix_seconds(std::time::SystemTime::now())
}

/// Returns when the next exception expires; never, when none will.
async fn until_next_expiry(exceptions: &ClusterExceptions) {
    let now = unix_now();
    match exceptions.next_expiry(now) {
        // A second past it, so that the status computed then says Expired.
        Some(at) => {
            let wait = u64::try_from(at - now).unwrap_or(0) + 1;
            tokio::time::sleep(std::time::Duration::from_secs(wait)).await;
        }
        None => std::future::pending().await,
    }
}

/// The kinds, once they change (or settle); never, without a CRD watch.
async fn kinds_changed(kinds: &mut Option<CustomKinds>) -> Option<kanon_engine::Kinds> {
    match kinds {
        Some(kinds) => {
            kinds.changed().await;
            kinds.current()
        }
        None => std::future::pending().await,
    }
}
