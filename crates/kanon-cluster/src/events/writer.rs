//! The writer task: takes occurrences from the queue into the [`Series`], makes the writes it
//! hands out against the apiserver one at a time (creations by POST, series updates by a JSON
//! merge patch), looks up the uids of the policies Events refer to (so that `kubectl describe`
//! of a policy lists its Events), and logs what the apiserver refuses, at most once a minute.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use futures::future::OptionFuture;
use k8s_openapi::api::events::v1::Event;
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use tokio::sync::mpsc;

use super::event::{self, NewEvent, Reference};
use super::series::{Done, Occurrence, Series, Write};
use crate::apiserver_error::{describe, is_not_found};

/// How long a policy's uid is reused before it is looked up again (a policy deleted and
/// created again under its name has a new one).
const UID_TTL: Duration = Duration::from_secs(300);

/// The most policy uids remembered.
const MAX_UIDS: usize = 4096;

/// The most occurrences taken from the queue before the writer looks at its writes again.
const DRAIN: usize = 256;

/// What every write needs.
pub(super) struct Context {
    pub(super) client: Client,
    /// `reportingInstance`.
    pub(super) instance: String,
    uids: Mutex<HashMap<Reference, (Option<String>, Instant)>>,
    sequence: AtomicU64,
}

impl Context {
    pub(super) fn new(client: Client, instance: String) -> Self {
        Context {
            client,
            instance,
            uids: Mutex::new(HashMap::new()),
            sequence: AtomicU64::new(0),
        }
    }

    /// The uid of the kanon policy `reference` names, if it names one and it can be read.
    async fn policy_uid(&self, reference: &Reference) -> Option<String> {
        let kind = reference.policy_kind()?;
        if reference.uid.is_some() {
            return None;
        }
        let known = self
            .uids
            .lock()
            .ok()
            .and_then(|uids| uids.get(reference).cloned());
        if let Some((uid, at)) = known
            && at.elapsed() < UID_TTL
        {
            return uid;
        }
        let resource = crate::policies::policy_resource(kind);
        let api: Api<DynamicObject> = match &reference.namespace {
            Some(namespace) => Api::namespaced_with(self.client.clone(), namespace, &resource),
            None => Api::all_with(self.client.clone(), &resource),
        };
        let uid = match api.get_opt(&reference.name).await {
            Ok(found) => found.and_then(|policy| policy.metadata.uid),
            Err(error) => {
                tracing::debug!(error = %describe(&error), policy = %reference.name, "cannot read a policy's uid for its Events");
                None
            }
        };
        if let Ok(mut uids) = self.uids.lock() {
            if uids.len() >= MAX_UIDS {
                uids.clear();
            }
            uids.insert(reference.clone(), (uid.clone(), Instant::now()));
        }
        uid
    }
}

/// What a write came to, and the apiserver's error if it failed.
pub(super) struct Finished {
    done: Done,
    error: Option<String>,
}

/// Makes `write`.
async fn execute(context: Arc<Context>, write: Write) -> Finished {
    match write {
        Write::Create {
            key,
            first,
            count,
            last,
        } => {
            let regarding_uid = context.policy_uid(&key.regarding).await;
            let related_uid = match &key.related {
                Some(related) => context.policy_uid(related).await,
                None => None,
            };
            let sequence = context.sequence.fetch_add(1, Ordering::Relaxed);
            let name = event::event_name(&key.regarding.name, SystemTime::now(), sequence);
            let body = event::body(
                &key,
                NewEvent {
                    name: &name,
                    first,
                    count,
                    last,
                    instance: &context.instance,
                    regarding_uid,
                    related_uid,
                },
            );
            let api: Api<Event> = Api::namespaced(context.client.clone(), key.namespace());
            match api.create(&PostParams::default(), &body).await {
                Ok(created) => Finished {
                    done: Done::Created {
                        name: created.metadata.name.unwrap_or(name),
                        key,
                        count,
                    },
                    error: None,
                },
                Err(error) => Finished {
                    error: Some(format!(
                        "cannot create an Event in namespace {}: {}",
                        key.namespace(),
                        describe(&error)
                    )),
                    done: Done::Failed {
                        key,
                        creating: true,
                    },
                },
            }
        }
        Write::Patch {
            key,
            namespace,
            name,
            count,
            last,
        } => {
            let api: Api<Event> = Api::namespaced(context.client.clone(), &namespace);
            let patch = Patch::Merge(event::series_patch(count, last));
            match api.patch(&name, &PatchParams::default(), &patch).await {
                Ok(_) => Finished {
                    done: Done::Patched { key, count },
                    error: None,
                },
                Err(error) if is_not_found(&error) => Finished {
                    done: Done::Gone { key },
                    error: None,
                },
                Err(error) => Finished {
                    done: Done::Failed {
                        key,
                        creating: false,
                    },
                    error: Some(format!(
                        "cannot update the Event {namespace}/{name}: {}",
                        describe(&error)
                    )),
                },
            }
        }
    }
}

/// Lets a message through at most once every `every`, counting those held back.
#[derive(Debug)]
pub(super) struct LogLimit {
    every: Duration,
    last: Option<Instant>,
    held: u64,
}

impl LogLimit {
    pub(super) fn new(every: Duration) -> Self {
        LogLimit {
            every,
            last: None,
            held: 0,
        }
    }

    /// Whether to log at `now`, and how many were held back since the last one logged.
    pub(super) fn allow(&mut self, now: Instant) -> Option<u64> {
        match self.last {
            Some(last) if now.saturating_duration_since(last) < self.every => {
                self.held += 1;
                None
            }
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.held))
            }
        }
    }
}

type Writing = Pin<Box<dyn Future<Output = Finished> + Send>>;

/// Runs until every sender of `receiver` is gone: occurrences in, writes out, one at a time,
/// series updates and ends checked every `tick_every`.
pub(super) async fn run(
    context: Arc<Context>,
    mut receiver: mpsc::Receiver<Occurrence>,
    mut series: Series,
    tick_every: Duration,
) {
    let mut tick = tokio::time::interval(tick_every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut writing: Option<Writing> = None;
    let mut errors = LogLimit::new(Duration::from_secs(60));
    loop {
        let now = SystemTime::now();
        if writing.is_none()
            && let Some(write) = series.next_write(now)
        {
            writing = Some(Box::pin(execute(context.clone(), write)));
        }
        let token_wait = match writing {
            Some(_) => None,
            None => series.token_wait(now),
        };
        tokio::select! {
            received = receiver.recv() => {
                let Some(occurrence) = received else { return };
                series.observe(occurrence);
                for _ in 0..DRAIN {
                    match receiver.try_recv() {
                        Ok(occurrence) => series.observe(occurrence),
                        Err(_) => break,
                    }
                }
            }
            Some(finished) = OptionFuture::from(writing.as_mut()), if writing.is_some() => {
                writing = None;
                if let Some(error) = &finished.error
                    && let Some(held) = errors.allow(Instant::now())
                {
                    tracing::warn!(%error, held_back = held, "the apiserver refused an Event write");
                }
                series.finished(finished.done, SystemTime::now());
            }
            _ = tick.tick() => series.tick(SystemTime::now()),
            _ = tokio::time::sleep(token_wait.unwrap_or_default()), if token_wait.is_some() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_logged_once_a_minute_with_how_many_were_held_back() {
        let mut limit = LogLimit::new(Duration::from_secs(60));
        let start = Instant::now();
        assert_eq!(limit.allow(start), Some(0));
        assert_eq!(limit.allow(start + Duration::from_secs(1)), None);
        assert_eq!(limit.allow(start + Duration::from_secs(59)), None);
        assert_eq!(limit.allow(start + Duration::from_secs(60)), Some(2));
        assert_eq!(limit.allow(start + Duration::from_secs(61)), None);
    }
}
