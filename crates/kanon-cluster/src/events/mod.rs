//! Kubernetes Events (`events.k8s.io/v1`), opt in (`kanon serve --events`): on the policy when
//! it denies a review (`reason: PolicyViolation`, `action: Denied`, `related` the object
//! reviewed), optionally when it warns (`Warned`), and on an existing object the background
//! audit finds failing (`Audited`, `related` the policy), all `type: Warning` from
//! `reportingController: kanon.dev/kanon`.
//!
//! - [`event`]: what an Event is made of, and what makes two occurrences the same Event.
//! - [`series`]: occurrences aggregated into series, as client-go's events broadcaster does,
//!   new Events limited per policy and all writes together, waiting in a bounded backlog.
//! - [`limit`]: the token buckets.
//! - [`metrics`]: Events written, series updated, occurrences aggregated and dropped.
//! - the writer task, which makes the writes against the apiserver.
//!
//! A review never waits for any of it: [`Events::admission`] hands the occurrences to a bounded
//! queue (`try_send`; what does not fit is counted as dropped), and a flood of denials costs
//! etcd at most the buckets' Events plus one series update per Event every
//! [`SeriesConfig::series_interval`]. Dry runs write no Event (tools diff with them all day).

pub mod event;
pub mod limit;
pub mod metrics;
pub mod series;
mod writer;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use kanon_api::ResultStatus;
use kanon_engine::{Decision, Finding, Request};
use kube::Client;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::audit::book::{Lineage, Subject};
pub use event::Action;
use event::{EventKey, MAX_NOTE_BYTES, Reference, truncate};
use metrics::Dropped;
pub use metrics::EventMetrics;
pub use series::SeriesConfig;
use series::{Occurrence, Series};

/// Which Events are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EventKinds {
    /// Admission denials, on the policy.
    pub deny: bool,
    /// Admission warnings, on the policy.
    pub warn: bool,
    /// Objects the background audit finds failing, on the object.
    pub audit: bool,
}

impl EventKinds {
    /// Whether any is.
    pub fn any(self) -> bool {
        self.deny || self.warn || self.audit
    }
}

/// How the recorder runs.
#[derive(Debug, Clone)]
pub struct EventsConfig {
    /// What it records.
    pub kinds: EventKinds,
    /// `reportingInstance`: this replica (its Pod's name).
    pub instance: String,
    /// Aggregation and limits.
    pub series: SeriesConfig,
    /// The most occurrences waiting between the reviews (and the audit) and the recorder.
    pub queue: usize,
}

impl Default for EventsConfig {
    fn default() -> Self {
        EventsConfig {
            kinds: EventKinds {
                deny: true,
                warn: false,
                audit: true,
            },
            instance: "kanon".to_string(),
            series: SeriesConfig::default(),
            queue: 1024,
        }
    }
}

/// The recorder: where reviews and the audit hand their occurrences. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Events {
    sender: mpsc::Sender<Occurrence>,
    kinds: EventKinds,
    metrics: EventMetrics,
}

impl Events {
    /// Starts the writer task on the current runtime, writing with `client`.
    pub fn start(client: Client, config: EventsConfig, metrics: EventMetrics) -> Events {
        let (sender, receiver) = mpsc::channel(config.queue.max(1));
        let tick = (config.series.series_interval / 4)
            .clamp(Duration::from_millis(100), Duration::from_secs(1));
        let series = Series::new(config.series, metrics.clone(), SystemTime::now());
        let context = Arc::new(writer::Context::new(client, config.instance));
        tokio::spawn(writer::run(context, receiver, series, tick));
        Events {
            sender,
            kinds: config.kinds,
            metrics,
        }
    }

    /// What it records.
    pub fn kinds(&self) -> EventKinds {
        self.kinds
    }

    fn send(&self, occurrences: Vec<Occurrence>) {
        for occurrence in occurrences {
            if self.sender.try_send(occurrence).is_err() {
                self.metrics.dropped(Dropped::QueueFull, 1);
            }
        }
    }

    /// Records what `decision` said of `request`: an occurrence per policy that denied it (and
    /// per warning, when warnings are recorded). Returns at once.
    pub fn admission(&self, request: &Request, decision: &Decision) {
        self.send(admission_occurrences(
            request,
            decision,
            self.kinds,
            SystemTime::now(),
        ));
    }

    /// Records what the audit found of an existing object (when audit findings are recorded).
    /// Returns at once.
    pub fn audited(&self, subject: &Subject, lineage: &Lineage, findings: &[Finding]) {
        if self.kinds.audit {
            self.send(audit_occurrences(
                subject,
                lineage,
                findings,
                SystemTime::now(),
            ));
        }
    }
}

/// The policy whose label begins `message` (`Kind/name: ...`), of those that met the request,
/// and the rest of the message.
fn speaker<'m>(decision: &Decision, message: &'m str) -> Option<(Arc<str>, &'m str)> {
    decision.policy_results.iter().find_map(|result| {
        message
            .strip_prefix(&*result.policy)
            .and_then(|rest| rest.strip_prefix(": "))
            .map(|rest| (result.policy.clone(), rest))
    })
}

/// How a note names the object reviewed: `shop/web`, `web` when cluster-scoped, and the
/// `generateName` when it has no name yet.
fn object_words(request: &Request) -> String {
    let generated = || {
        [&request.object, &request.old_object]
            .into_iter()
            .flatten()
            .find_map(|object| object.pointer("/metadata/generateName"))
            .and_then(Value::as_str)
            .map(|prefix| format!("{prefix}(generated)"))
            .unwrap_or_else(|| "(generated)".to_string())
    };
    let name = if request.name.is_empty() {
        generated()
    } else {
        request.name.clone()
    };
    match &request.namespace {
        Some(namespace) => format!("{namespace}/{name}"),
        None => name,
    }
}

/// The occurrences of one review's decision, at `at`: one per policy that denied it (its
/// message; a policy that gave several messages, one per message), and per policy warning when
/// `kinds.warn`. None for a dry run.
pub fn admission_occurrences(
    request: &Request,
    decision: &Decision,
    kinds: EventKinds,
    at: SystemTime,
) -> Vec<Occurrence> {
    if request.dry_run {
        return Vec::new();
    }
    let mut found = Vec::new();
    if kinds.deny && !decision.allowed {
        found.extend(
            decision
                .messages
                .iter()
                .map(|message| (Action::Denied, message)),
        );
    }
    if kinds.warn {
        found.extend(
            decision
                .warnings
                .iter()
                .map(|warning| (Action::Warned, warning)),
        );
    }
    if found.is_empty() {
        return Vec::new();
    }
    // The stored object's uid: on a CREATE the apiserver has given the object one already,
    // which no stored object has (and which would make every retry an Event of its own).
    let uid = request
        .old_object
        .as_ref()
        .and_then(|object| object.pointer("/metadata/uid"))
        .and_then(Value::as_str)
        .filter(|uid| !uid.is_empty())
        .map(str::to_string);
    let related = Reference {
        api_version: request.api_version.clone(),
        kind: request.kind.clone(),
        namespace: request.namespace.clone(),
        name: request.name.clone(),
        uid,
    };
    let object = object_words(request);
    found
        .into_iter()
        .filter_map(|(action, message)| {
            let (policy, said) = speaker(decision, message)?;
            let regarding = Reference::policy(&policy)?;
            let note = format!(
                "{} {} {object}: {said}",
                request.operation.as_str(),
                request.kind
            );
            Some(Occurrence {
                key: EventKey {
                    action,
                    regarding,
                    related: Some(related.clone()),
                    note: truncate(&note, MAX_NOTE_BYTES).into(),
                },
                policy,
                at,
            })
        })
        .collect()
}

/// The occurrences of what the audit found of one object, at `at`: one per failing finding.
/// Findings under the policies that also judge the pod template of the workload the object was
/// made from are left out: they are the workload's, whose own Event tells them.
pub fn audit_occurrences(
    subject: &Subject,
    lineage: &Lineage,
    findings: &[Finding],
    at: SystemTime,
) -> Vec<Occurrence> {
    let regarding = Reference {
        api_version: subject.kind.api_version.clone(),
        kind: subject.kind.kind.clone(),
        namespace: subject.namespace.clone(),
        name: subject.name.clone(),
        uid: (!subject.uid.is_empty()).then(|| subject.uid.clone()),
    };
    findings
        .iter()
        .filter(|finding| finding.result == ResultStatus::Fail)
        .filter(|finding| {
            lineage
                .made_by
                .as_ref()
                .is_none_or(|made_by| !made_by.policies.contains(&finding.policy))
        })
        .map(|finding| {
            let note = match &finding.rule {
                Some(rule) => format!("{} (rule {rule}): {}", finding.policy, finding.message),
                None => format!("{}: {}", finding.policy, finding.message),
            };
            Occurrence {
                key: EventKey {
                    action: Action::Audited,
                    regarding: regarding.clone(),
                    related: Reference::policy(&finding.policy),
                    note: truncate(&note, MAX_NOTE_BYTES).into(),
                },
                policy: finding.policy.clone(),
                at,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::book::{KindKey, MadeBy};
    use kanon_engine::{PolicyOutcome, PolicyResult};
    use serde_json::json;

    fn request(dry_run: bool, name: &str) -> Request {
        Request::from_admission_review(&json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": "r-1", "operation": "UPDATE", "dryRun": dry_run,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "namespace": "shop", "name": name,
            "object": {"apiVersion": "v1", "kind": "Pod",
                       "metadata": {"name": name, "namespace": "shop", "uid": "pod-uid",
                                    "generateName": "web-"}},
            "oldObject": {"apiVersion": "v1", "kind": "Pod",
                          "metadata": {"name": name, "namespace": "shop", "uid": "pod-uid",
                                       "generateName": "web-"}},
        }}))
        .unwrap()
    }

    fn decision(allowed: bool, messages: &[&str], warnings: &[&str]) -> Decision {
        let policies = [
            "ClusterValidatePolicy/no-latest",
            "ValidatePolicy/shop/limits",
        ];
        Decision {
            allowed,
            messages: messages.iter().map(|m| m.to_string()).collect(),
            warnings: warnings.iter().map(|m| m.to_string()).collect(),
            audit_annotations: Default::default(),
            status_reason: None,
            applied_policies: policies.iter().map(|p| p.to_string()).collect(),
            patch: json_patch::Patch(Vec::new()),
            patched: None,
            policy_results: policies
                .iter()
                .map(|p| PolicyResult {
                    policy: (*p).into(),
                    outcome: PolicyOutcome::Rejected,
                })
                .collect(),
            exceptions: vec![],
            findings: None,
            admission_denied: false,
            beyond_reading: false,
        }
    }

    fn every() -> EventKinds {
        EventKinds {
            deny: true,
            warn: true,
            audit: true,
        }
    }

    #[test]
    fn a_denial_is_an_occurrence_on_each_denying_policy() {
        let decision = decision(
            false,
            &[
                "ClusterValidatePolicy/no-latest: image web:latest has no tag",
                "ValidatePolicy/shop/limits: no limits",
                "a message no policy said",
            ],
            &["ClusterValidatePolicy/no-latest: consider a digest"],
        );
        let at = SystemTime::UNIX_EPOCH;
        let only_denials = EventKinds {
            warn: false,
            ..every()
        };
        let found = admission_occurrences(&request(false, "web"), &decision, only_denials, at);
        assert_eq!(found.len(), 2);
        let first = &found[0].key;
        assert_eq!(first.action, Action::Denied);
        assert_eq!(first.regarding.kind, "ClusterValidatePolicy");
        assert_eq!(first.regarding.name, "no-latest");
        assert_eq!(first.namespace(), "default");
        assert_eq!(
            &*first.note,
            "UPDATE Pod shop/web: image web:latest has no tag"
        );
        let related = first.related.as_ref().unwrap();
        assert_eq!(
            (
                related.kind.as_str(),
                related.namespace.as_deref(),
                related.name.as_str(),
                related.uid.as_deref()
            ),
            ("Pod", Some("shop"), "web", Some("pod-uid"))
        );
        assert_eq!(&*found[0].policy, "ClusterValidatePolicy/no-latest");
        // A namespaced policy's Event is in its namespace.
        assert_eq!(found[1].key.namespace(), "shop");
        assert_eq!(found[1].key.regarding.kind, "ValidatePolicy");

        let all = admission_occurrences(&request(false, "web"), &decision, every(), at);
        assert_eq!(all.len(), 3);
        assert_eq!(all[2].key.action, Action::Warned);
        assert_eq!(&*all[2].key.note, "UPDATE Pod shop/web: consider a digest");
    }

    #[test]
    fn dry_runs_allowed_reviews_and_kinds_turned_off_make_nothing() {
        let denied = decision(false, &["ClusterValidatePolicy/no-latest: no"], &[]);
        let at = SystemTime::UNIX_EPOCH;
        assert!(admission_occurrences(&request(true, "web"), &denied, every(), at).is_empty());
        let allowed = decision(true, &[], &["ClusterValidatePolicy/no-latest: careful"]);
        let only_denials = EventKinds {
            warn: false,
            ..every()
        };
        assert!(
            admission_occurrences(&request(false, "web"), &allowed, only_denials, at).is_empty()
        );
        assert!(
            admission_occurrences(&request(false, "web"), &denied, EventKinds::default(), at)
                .is_empty()
        );
    }

    #[test]
    fn retried_creates_are_one_event_whatever_uid_the_apiserver_gave_them() {
        let create = |uid: &str| {
            Request::from_admission_review(&json!({
                "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
                "uid": "r-1", "operation": "CREATE",
                "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
                "namespace": "shop", "name": "settings",
                "object": {"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": "settings", "namespace": "shop", "uid": uid}},
            }}))
            .unwrap()
        };
        let denied = decision(false, &["ClusterValidatePolicy/no-latest: no"], &[]);
        let at = SystemTime::UNIX_EPOCH;
        let first = admission_occurrences(&create("a"), &denied, every(), at);
        let again = admission_occurrences(&create("b"), &denied, every(), at);
        assert_eq!(first[0].key, again[0].key);
        assert_eq!(first[0].key.related.as_ref().unwrap().uid, None);
    }

    #[test]
    fn an_object_without_a_name_yet_is_named_by_its_prefix() {
        let denied = decision(false, &["ClusterValidatePolicy/no-latest: no"], &[]);
        let found = admission_occurrences(
            &request(false, ""),
            &denied,
            every(),
            SystemTime::UNIX_EPOCH,
        );
        assert_eq!(&*found[0].key.note, "UPDATE Pod shop/web-(generated): no");
        assert_eq!(found[0].key.related.as_ref().unwrap().name, "");
    }

    #[test]
    fn an_audit_failure_is_an_occurrence_on_the_object() {
        let subject = Subject {
            kind: KindKey::new("v1", "ConfigMap"),
            namespace: Some("shop".into()),
            name: "settings".into(),
            uid: "cm-uid".into(),
        };
        let finding = |policy: &str, result| Finding {
            policy: policy.into(),
            rule: Some("no-debug".into()),
            result,
            message: "debug must be off".into(),
            severity: None,
            category: None,
        };
        let findings = [
            finding("ClusterValidatePolicy/debug", ResultStatus::Fail),
            finding("ClusterValidatePolicy/other", ResultStatus::Pass),
            finding("ClusterValidatePolicy/warned", ResultStatus::Warn),
        ];
        let found = audit_occurrences(
            &subject,
            &Lineage::default(),
            &findings,
            SystemTime::UNIX_EPOCH,
        );
        assert_eq!(found.len(), 1);
        let key = &found[0].key;
        assert_eq!(key.action, Action::Audited);
        assert_eq!(key.regarding.name, "settings");
        assert_eq!(key.regarding.uid.as_deref(), Some("cm-uid"));
        assert_eq!(key.namespace(), "shop");
        assert_eq!(key.related.as_ref().unwrap().name, "debug");
        assert_eq!(
            &*key.note,
            "ClusterValidatePolicy/debug (rule no-debug): debug must be off"
        );
        // What a workload's pod template stands for is the workload's Event.
        let owned = Lineage {
            template: Arc::from([]),
            made_by: Some(MadeBy {
                kind: KindKey::new("apps/v1", "ReplicaSet"),
                name: "web-1".into(),
                uid: "rs".into(),
                policies: Arc::from([Arc::<str>::from("ClusterValidatePolicy/debug")]),
            }),
        };
        assert!(audit_occurrences(&subject, &owned, &findings, SystemTime::UNIX_EPOCH).is_empty());
    }
}
