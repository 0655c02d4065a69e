//! One auditor at a time: a `coordination.k8s.io/v1` Lease held by the replica that audits,
//! renewed while it does, taken over by another replica once it lapses. The Lease also
//! carries the audit's checkpoint, so that the replica that takes over resumes the audit where
//! it stopped.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, PostParams};
use serde::{Deserialize, Serialize};

use super::AuditError;

/// The annotation of the Lease holding the [`Checkpoint`].
pub const CHECKPOINT_ANNOTATION: &str = "audit.kanon.dev/checkpoint";

/// Where an audit stands, kept in the Lease after each page.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Checkpoint {
    /// When the audit began, in Unix seconds; 0: none yet.
    pub started: i64,
    /// When it finished, in Unix seconds; `None` while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished: Option<i64>,
    /// The kinds done, by `apiVersion kind`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub done: Vec<String>,
    /// The kind being read and the token of its next page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reading: Option<Reading>,
}

/// A kind part-read: every namespace before `namespace` was read to its end (and its report
/// written); the listing resumes at `token`, the page where `namespace` began.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Reading {
    /// `apiVersion kind`.
    pub kind: String,
    /// The `continue` token of the page where `namespace` began; `None`: the kind's first.
    #[serde(rename = "continue", default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// The namespace being read; `None` for a cluster-scoped kind (read again from its start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// The Lease of the audit.
#[derive(Clone)]
pub struct AuditLease {
    api: Api<Lease>,
    name: String,
    identity: String,
    duration: Duration,
}

/// What trying to hold the Lease found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Held {
    /// This replica holds it; the checkpoint it carries.
    Yes(Checkpoint),
    /// Another replica holds it.
    No {
        /// Who.
        holder: String,
    },
}

impl AuditLease {
    /// The Lease `name` in `namespace`, held as `identity` for `duration` past each renewal.
    pub fn new(
        client: Client,
        namespace: &str,
        name: &str,
        identity: &str,
        duration: Duration,
    ) -> Self {
        AuditLease {
            api: Api::namespaced(client, namespace),
            name: name.to_string(),
            identity: identity.to_string(),
            duration,
        }
    }

    /// Who this replica is.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Takes the Lease if it is free, has lapsed or is this replica's; renews it if held.
    /// `now` is the clock's time. A write that loses a race is [`Held::No`].
    pub async fn hold(&self, now: Timestamp) -> Result<Held, AuditError> {
        let existing = self.api.get_opt(&self.name).await.map_err(lease_error)?;
        let Some(mut lease) = existing else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    labels: Some(
                        [(
                            "app.kubernetes.io/managed-by".to_string(),
                            "kanon".to_string(),
                        )]
                        .into(),
                    ),
                    ..ObjectMeta::default()
                },
                spec: Some(self.spec(now, now, 0)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(Held::Yes(Checkpoint::default())),
                Err(kube::Error::Api(status)) if status.code == 409 => Ok(Held::No {
                    holder: "another replica".to_string(),
                }),
                Err(error) => Err(lease_error(error)),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let mine = holder == self.identity;
        let lapsed = match (&spec.renew_time, spec.lease_duration_seconds) {
            (Some(renewed), Some(seconds)) => {
                renewed.0.as_second() + i64::from(seconds) < now.as_second()
            }
            _ => true,
        };
        if !mine && !holder.is_empty() && !lapsed {
            return Ok(Held::No { holder });
        }
        let acquired = if mine {
            spec.acquire_time.map(|t| t.0).unwrap_or(now)
        } else {
            now
        };
        let transitions = spec.lease_transitions.unwrap_or(0) + i32::from(!mine);
        lease.spec = Some(self.spec(acquired, now, transitions));
        let checkpoint = checkpoint_of(&lease);
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(Held::Yes(checkpoint)),
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(Held::No {
                holder: "another replica".to_string(),
            }),
            Err(error) => Err(lease_error(error)),
        }
    }

    /// Writes `checkpoint` into the Lease and renews it, if this replica still holds it;
    /// `false` when another replica took it.
    pub async fn save(&self, now: Timestamp, checkpoint: &Checkpoint) -> Result<bool, AuditError> {
        let Some(mut lease) = self.api.get_opt(&self.name).await.map_err(lease_error)? else {
            return Ok(false);
        };
        let spec = lease.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(false);
        }
        let text =
            serde_json::to_string(checkpoint).map_err(|e| AuditError::Lease(e.to_string()))?;
        lease
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(CHECKPOINT_ANNOTATION.to_string(), text);
        lease.spec = Some(LeaseSpec {
            renew_time: Some(MicroTime(now)),
            ..spec
        });
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
            Err(error) => Err(lease_error(error)),
        }
    }

    /// Gives the Lease up (on shutdown), so another replica need not wait for it to lapse.
    pub async fn release(&self) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.name).await else {
            return;
        };
        let Some(spec) = lease.spec.as_mut() else {
            return;
        };
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.renew_time = None;
        if let Err(error) = self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            tracing::debug!(%error, "could not release the audit lease");
        }
    }

    fn spec(&self, acquired: Timestamp, renewed: Timestamp, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(
                i32::try_from(self.duration.as_secs()).unwrap_or(i32::MAX),
            ),
            acquire_time: Some(MicroTime(acquired)),
            renew_time: Some(MicroTime(renewed)),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }
}

fn checkpoint_of(lease: &Lease) -> Checkpoint {
    lease
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(CHECKPOINT_ANNOTATION))
        .and_then(|text| serde_json::from_str(text).ok())
        .unwrap_or_default()
}

fn lease_error(error: kube::Error) -> AuditError {
    AuditError::Lease(crate::apiserver_error::describe(&error))
}
