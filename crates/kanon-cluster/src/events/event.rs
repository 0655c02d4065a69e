//! The Events kanon writes, as kube-apiserver's `events.k8s.io/v1` validation accepts them:
//! what makes two occurrences the same Event ([`EventKey`]), the objects an Event is about
//! ([`Reference`]), its note, name and namespace, and the body sent.

use std::sync::Arc;
use std::time::SystemTime;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kanon_api::PolicyKind;

/// `reportingController` of every Event kanon writes.
pub const REPORTING_CONTROLLER: &str = "kanon.dev/kanon";

/// `reason` of every Event kanon writes, as peers (Kyverno) name it.
pub const REASON: &str = "PolicyViolation";

/// The most bytes of an Event's `note` (kube-apiserver refuses more).
pub const MAX_NOTE_BYTES: usize = 1024;

/// The most bytes of `reportingInstance` (kube-apiserver refuses more).
pub const MAX_INSTANCE_BYTES: usize = 128;

/// The namespace of Events about cluster-scoped objects: kube-apiserver accepts only
/// `default` and `kube-system` there, and peers use `default`.
pub const CLUSTER_EVENTS_NAMESPACE: &str = "default";

/// What an Event says kanon did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Action {
    /// A review was denied by the policy.
    Denied,
    /// A review was admitted with the policy's warning.
    Warned,
    /// The background audit found an existing object failing the policy.
    Audited,
}

impl Action {
    /// The Event's `action`.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Denied => "Denied",
            Action::Warned => "Warned",
            Action::Audited => "Audited",
        }
    }

    /// The metrics' label.
    pub fn label(self) -> &'static str {
        match self {
            Action::Denied => "denied",
            Action::Warned => "warned",
            Action::Audited => "audited",
        }
    }
}

/// An object an Event is about (`regarding`) or mentions (`related`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Reference {
    /// `apiVersion`.
    pub api_version: String,
    /// `kind`.
    pub kind: String,
    /// Its namespace; `None` when cluster-scoped.
    pub namespace: Option<String>,
    /// Its name (empty for an object created with `generateName`).
    pub name: String,
    /// Its uid, when known. A policy's is looked up when the Event is written, not here, so
    /// that it takes no part in telling Events apart.
    pub uid: Option<String>,
}

impl Reference {
    /// The policy a decision or finding names by its label (`Kind/name`,
    /// `Kind/namespace/name`, `ValidatingAdmissionPolicy/name with binding b`); `None` for a
    /// label of no known shape.
    pub fn policy(label: &str) -> Option<Reference> {
        if let Some((head, _binding)) = label.split_once(" with binding ") {
            let (kind, name) = head.split_once('/')?;
            if !matches!(
                kind,
                "ValidatingAdmissionPolicy" | "MutatingAdmissionPolicy"
            ) || name.is_empty()
            {
                return None;
            }
            return Some(Reference {
                api_version: "admissionregistration.k8s.io/v1".to_string(),
                kind: kind.to_string(),
                namespace: None,
                name: name.to_string(),
                uid: None,
            });
        }
        let mut parts = label.split('/');
        let kind = PolicyKind::from_kind(parts.next()?)?;
        let (namespace, name) = match (parts.next(), parts.next(), parts.next()) {
            (Some(name), None, None) if !kind.is_namespaced() => (None, name),
            (Some(namespace), Some(name), None) if kind.is_namespaced() => {
                (Some(namespace.to_string()), name)
            }
            _ => return None,
        };
        if name.is_empty() {
            return None;
        }
        Some(Reference {
            api_version: kanon_api::API_VERSION.to_string(),
            kind: kind.as_str().to_string(),
            namespace,
            name: name.to_string(),
            uid: None,
        })
    }

    /// The kanon policy kind this names, if it names one.
    pub fn policy_kind(&self) -> Option<PolicyKind> {
        (self.api_version == kanon_api::API_VERSION)
            .then(|| PolicyKind::from_kind(&self.kind))
            .flatten()
    }

    fn object_reference(&self, uid: Option<String>) -> ObjectReference {
        ObjectReference {
            api_version: Some(self.api_version.clone()),
            kind: Some(self.kind.clone()),
            namespace: self.namespace.clone(),
            name: (!self.name.is_empty()).then(|| self.name.clone()),
            uid: uid.or_else(|| self.uid.clone()),
            ..ObjectReference::default()
        }
    }
}

/// What makes occurrences one Event, as client-go's events broadcaster keys them (regarding,
/// related, action, reason and reporting controller; kanon's reason, type and controller are
/// fixed) with the note too: a different message is a different Event.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EventKey {
    /// What kanon did.
    pub action: Action,
    /// What the Event is about: the policy for an admission, the object for the audit.
    pub regarding: Reference,
    /// What it mentions: the object reviewed for an admission, the policy for the audit.
    pub related: Option<Reference>,
    /// The message, at most [`MAX_NOTE_BYTES`].
    pub note: Arc<str>,
}

impl EventKey {
    /// The namespace the Event is written in: the regarding object's, or `default` for a
    /// cluster-scoped one.
    pub fn namespace(&self) -> &str {
        self.regarding
            .namespace
            .as_deref()
            .unwrap_or(CLUSTER_EVENTS_NAMESPACE)
    }
}

/// `text` cut to at most `max` bytes on a character boundary, marked with `...` when cut.
pub fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    const MARK: &str = "...";
    let mut end = max.saturating_sub(MARK.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{MARK}", &text[..end])
}

/// A name for a new Event about an object named `regarding`: client-go's
/// `<regarding name>.<hex nanoseconds>`, made a valid DNS subdomain whatever the object's name
/// (RBAC names may hold `:`, a Pod created with `generateName` has none yet).
pub fn event_name(regarding: &str, at: SystemTime, sequence: u64) -> String {
    let nanos = at
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
        .wrapping_add(u128::from(sequence));
    let suffix = format!(".{:x}", nanos as u64);
    let mut base: String = regarding
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9' | '-' | '.') => c,
            _ => '-',
        })
        .collect();
    base.truncate(253 - suffix.len());
    let base = base.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    let base = if base.is_empty() { "kanon" } else { base };
    format!("{base}{suffix}")
}

fn micro_time(at: SystemTime) -> MicroTime {
    MicroTime(
        k8s_openapi::jiff::Timestamp::try_from(at)
            .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
    )
}

/// The series of an Event counted `count` times, last at `last`: none for a single
/// occurrence (kube-apiserver refuses a series with a count under 2).
pub fn series(count: u64, last: SystemTime) -> Option<EventSeries> {
    (count >= 2).then(|| EventSeries {
        count: i32::try_from(count).unwrap_or(i32::MAX),
        last_observed_time: micro_time(last),
    })
}

/// What a new Event carries besides its key.
#[derive(Debug, Clone)]
pub struct NewEvent<'a> {
    /// Its name ([`event_name`]).
    pub name: &'a str,
    /// When it was first seen (`eventTime`).
    pub first: SystemTime,
    /// How many times it has been seen, and the last time.
    pub count: u64,
    /// The last time it was seen.
    pub last: SystemTime,
    /// `reportingInstance`: this replica.
    pub instance: &'a str,
    /// The uids looked up for the regarding and related objects (policies), if any.
    pub regarding_uid: Option<String>,
    /// See `regarding_uid`.
    pub related_uid: Option<String>,
}

/// The body of a new Event for `key`.
pub fn body(key: &EventKey, new: NewEvent<'_>) -> Event {
    Event {
        metadata: ObjectMeta {
            name: Some(new.name.to_string()),
            namespace: Some(key.namespace().to_string()),
            ..ObjectMeta::default()
        },
        event_time: Some(micro_time(new.first)),
        series: series(new.count, new.last),
        reporting_controller: Some(REPORTING_CONTROLLER.to_string()),
        reporting_instance: Some(truncate(new.instance, MAX_INSTANCE_BYTES)),
        action: Some(key.action.as_str().to_string()),
        reason: Some(REASON.to_string()),
        regarding: Some(key.regarding.object_reference(new.regarding_uid)),
        related: key
            .related
            .as_ref()
            .map(|related| related.object_reference(new.related_uid)),
        note: Some(key.note.to_string()),
        type_: Some("Warning".to_string()),
        ..Event::default()
    }
}

/// The JSON merge patch that brings a stored Event's series to `count`, last seen at `last`.
pub fn series_patch(count: u64, last: SystemTime) -> serde_json::Value {
    serde_json::json!({ "series": series(count.max(2), last) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn policies_are_referred_to_by_their_labels() {
        let cluster = Reference::policy("ClusterValidatePolicy/no-latest").unwrap();
        assert_eq!(cluster.api_version, "policy.kanon.dev/v1alpha1");
        assert_eq!(cluster.kind, "ClusterValidatePolicy");
        assert_eq!(cluster.namespace, None);
        assert_eq!(cluster.name, "no-latest");
        assert_eq!(
            cluster.policy_kind(),
            Some(PolicyKind::ClusterValidatePolicy)
        );
        let namespaced = Reference::policy("ValidatePolicy/shop/limits").unwrap();
        assert_eq!(namespaced.namespace.as_deref(), Some("shop"));
        assert_eq!(namespaced.name, "limits");
        let binding =
            Reference::policy("ValidatingAdmissionPolicy/replicas with binding b").unwrap();
        assert_eq!(binding.api_version, "admissionregistration.k8s.io/v1");
        assert_eq!(binding.name, "replicas");
        assert_eq!(binding.policy_kind(), None);
        for bad in [
            "",
            "Nothing/x",
            "ValidatePolicy/no-namespace",
            "ClusterValidatePolicy/a/b",
            "ClusterValidatePolicy/",
            "Secret/x with binding b",
        ] {
            assert_eq!(Reference::policy(bad), None, "{bad}");
        }
    }

    #[test]
    fn notes_are_cut_to_the_apis_limit_on_a_character_boundary() {
        assert_eq!(truncate("short", MAX_NOTE_BYTES), "short");
        let long = "é".repeat(1000);
        let cut = truncate(&long, MAX_NOTE_BYTES);
        assert!(cut.len() <= MAX_NOTE_BYTES, "{}", cut.len());
        assert!(cut.ends_with("..."));
    }

    #[test]
    fn event_names_are_dns_subdomains() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_nanos(0xabc);
        assert_eq!(event_name("no-latest", at, 0), "no-latest.abc");
        assert_eq!(event_name("no-latest", at, 1), "no-latest.abd");
        assert_eq!(
            event_name("system:controller:Thing", at, 0),
            "system-controller-thing.abc"
        );
        assert_eq!(event_name("", at, 0), "kanon.abc");
        let long = event_name(&"a".repeat(300), at, 0);
        assert!(long.len() <= 253, "{}", long.len());
    }

    #[test]
    fn an_event_has_what_kube_apiserver_requires() {
        let key = EventKey {
            action: Action::Denied,
            regarding: Reference::policy("ClusterValidatePolicy/p").unwrap(),
            related: Some(Reference {
                api_version: "v1".into(),
                kind: "Pod".into(),
                namespace: Some("shop".into()),
                name: String::new(),
                uid: None,
            }),
            note: "CREATE Pod shop/: no".into(),
        };
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let event = body(
            &key,
            NewEvent {
                name: "p.1",
                first: at,
                count: 1,
                last: at,
                instance: "kanon-0",
                regarding_uid: Some("u-1".into()),
                related_uid: None,
            },
        );
        let json = serde_json::to_value(&event).unwrap();
        assert_eq!(json["metadata"]["namespace"], "default");
        assert_eq!(json["eventTime"], "2023-11-14T22:13:20.000000Z");
        assert_eq!(json["reportingController"], "kanon.dev/kanon");
        assert_eq!(json["reason"], "PolicyViolation");
        assert_eq!(json["action"], "Denied");
        assert_eq!(json["type"], "Warning");
        assert_eq!(json["regarding"]["uid"], "u-1");
        assert_eq!(json["related"]["kind"], "Pod");
        assert!(json["related"].get("name").is_none());
        assert!(json.get("series").is_none());
        let patch = series_patch(5, at + Duration::from_millis(1500));
        assert_eq!(patch["series"]["count"], 5);
        assert_eq!(
            patch["series"]["lastObservedTime"],
            "2023-11-14T22:13:21.500000Z"
        );
    }
}
