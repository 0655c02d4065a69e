//! The load: Pod creates through the apiserver at a fixed rate (open loop), each classified.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Result;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};

use crate::policies::pod;
use crate::world::World;
use crate::{CREATE_TIMEOUT, LABEL_A, LABEL_B, LABEL_HANG, LABEL_NAME, NS};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Sort {
    /// An ordinary bench Pod: admitted and labelled.
    Normal,
    /// `forbidden: "yes"`: denied.
    Forbidden,
    /// `lookup: hang` (phase 5): admitted, labelled by all but the hanging policy.
    Hang,
}

impl Sort {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Sort::Normal => "normal",
            Sort::Forbidden => "forbidden",
            Sort::Hang => "lookup: hang",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Category {
    Admitted,
    Denied,
    WebhookFailed,
    Unavailable,
    ServerError,
    TimedOut,
    Other,
}

impl Category {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Category::Admitted => "admitted",
            Category::Denied => "denied by a policy",
            Category::WebhookFailed => "webhook call failed (failurePolicy Fail)",
            Category::Unavailable => "apiserver unavailable (refused, 429, 503)",
            Category::ServerError => "apiserver error (other 5xx)",
            Category::TimedOut => "timed out (client, 15 s)",
            Category::Other => "other error",
        }
    }
}

pub(crate) struct Create {
    pub(crate) name: String,
    pub(crate) sort: Sort,
    /// When it was due to start.
    pub(crate) scheduled: Instant,
    /// From `scheduled` to the answer.
    pub(crate) latency: Duration,
    pub(crate) category: Category,
    /// The labels it came back with (admitted), else the error.
    pub(crate) labels: BTreeMap<String, String>,
    pub(crate) message: String,
}

impl Create {
    pub(crate) fn done(&self) -> Instant {
        self.scheduled + self.latency
    }
}

pub(crate) fn error_text(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

pub(crate) fn classify(error: &kube::Error) -> (Category, String) {
    match error {
        kube::Error::Api(status) => {
            let message = format!("{} {}: {}", status.code, status.reason, status.message);
            let category = if status.message.contains("failed calling webhook") {
                Category::WebhookFailed
            } else if status.code == 403 && status.message.contains("denied the request") {
                Category::Denied
            } else if matches!(status.code, 429 | 503) {
                Category::Unavailable
            } else if status.code >= 500 {
                Category::ServerError
            } else {
                Category::Other
            };
            (category, message)
        }
        other => {
            let message = error_text(other);
            let category = if message.contains("Connection refused")
                || message.contains("onnection reset")
                || message.contains("client error (Connect)")
                || message.contains("connection closed before message completed")
            {
                Category::Unavailable
            } else {
                Category::Other
            };
            (category, message)
        }
    }
}

/// Pod creates at a fixed rate until stopped.
pub(crate) struct Load {
    pub(crate) stop: Arc<AtomicBool>,
    pub(crate) handle: tokio::task::JoinHandle<Vec<Create>>,
    pub(crate) began: Instant,
}

pub(crate) type LabelsOf = Arc<dyn Fn(usize) -> BTreeMap<String, String> + Send + Sync>;

/// Labels of the `i`-th Pod of `phase`: one in ten forbidden; `hang_every`: every that many
/// (of the others) selects the hanging policy.
pub(crate) fn phase_labels(phase: &str, hang: bool) -> LabelsOf {
    let phase = phase.to_string();
    Arc::new(move |i| {
        let mut labels = BTreeMap::from([
            ("app".to_string(), "bench".to_string()),
            ("phase".to_string(), phase.clone()),
        ]);
        if i % 10 == 9 {
            labels.insert("forbidden".into(), "yes".into());
        } else if hang && i.is_multiple_of(2) {
            labels.insert("lookup".into(), "hang".into());
        }
        labels
    })
}

impl Load {
    pub(crate) fn start(world: &World, prefix: &str, rate: u32, labels: LabelsOf) -> Load {
        let api: Api<Pod> = Api::namespaced(world.client.clone(), NS);
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let prefix = prefix.to_string();
        let interval = Duration::from_secs(1) / rate;
        let start = tokio::time::Instant::now() + Duration::from_millis(20);
        let began = start.into_std();
        let handle = world.runtime.spawn(async move {
            let mut tasks = Vec::new();
            let mut i = 0usize;
            loop {
                let scheduled = start + interval * i as u32;
                tokio::time::sleep_until(scheduled).await;
                if stopped.load(Ordering::Relaxed) {
                    break;
                }
                let labels = labels(i);
                let sort = if labels.contains_key("forbidden") {
                    Sort::Forbidden
                } else if labels.contains_key("lookup") {
                    Sort::Hang
                } else {
                    Sort::Normal
                };
                let name = format!("{prefix}-{i:06}");
                let body = pod(&name, &labels);
                let api = api.clone();
                tasks.push(tokio::spawn(async move {
                    let result = match serde_json::from_value::<Pod>(body) {
                        Ok(pod) => {
                            tokio::time::timeout(
                                CREATE_TIMEOUT,
                                api.create(&PostParams::default(), &pod),
                            )
                            .await
                        }
                        Err(e) => Ok(Err(kube::Error::SerdeError(e))),
                    };
                    let latency = scheduled.elapsed();
                    let (category, labels, message) = match result {
                        Ok(Ok(created)) => (
                            Category::Admitted,
                            created.metadata.labels.unwrap_or_default(),
                            String::new(),
                        ),
                        Ok(Err(error)) => {
                            let (category, message) = classify(&error);
                            (category, BTreeMap::new(), message)
                        }
                        Err(_) => (
                            Category::TimedOut,
                            BTreeMap::new(),
                            format!("no answer within {CREATE_TIMEOUT:?}"),
                        ),
                    };
                    Create {
                        name,
                        sort,
                        scheduled: scheduled.into_std(),
                        latency,
                        category,
                        labels,
                        message,
                    }
                }));
                i += 1;
            }
            let mut creates = Vec::with_capacity(tasks.len());
            for task in tasks {
                if let Ok(create) = task.await {
                    creates.push(create);
                }
            }
            creates
        });
        Load {
            stop,
            handle,
            began,
        }
    }

    /// Stops sending and waits for the creates in flight (15 s at most each).
    pub(crate) fn finish(self, world: &World) -> Result<Vec<Create>> {
        self.stop.store(true, Ordering::Relaxed);
        Ok(world.runtime.block_on(self.handle)?)
    }
}

/// Whether an admitted Pod carries what the policies add: its name copied, `faults-a` and
/// `faults-b` with one of the allowed values, and (a `lookup: hang` Pod) no label from the
/// hanging reference.
pub(crate) struct Expect {
    pub(crate) a: Vec<String>,
    pub(crate) b: Vec<String>,
}

impl Expect {
    pub(crate) fn exactly(a: &str, b: &str) -> Expect {
        Expect {
            a: vec![a.into()],
            b: vec![b.into()],
        }
    }

    pub(crate) fn holds(&self, create: &Create) -> bool {
        let labels = &create.labels;
        labels.get(LABEL_NAME) == Some(&create.name)
            && labels.get(LABEL_A).is_some_and(|v| self.a.contains(v))
            && labels.get(LABEL_B).is_some_and(|v| self.b.contains(v))
            && !labels.contains_key(LABEL_HANG)
    }
}
