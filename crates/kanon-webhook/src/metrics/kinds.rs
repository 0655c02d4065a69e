//! The `kind` label's values, bounded: anyone who reaches the webhook port can send a review of
//! any kind, and each value is a series.

use std::collections::HashSet;
use std::sync::{PoisonError, RwLock};

/// At most this many distinct `kind` label values that no policy selects (besides `other`)
/// are counted: the bound on the series a review sender can create.
pub const MAX_OTHER_KIND_LABELS: usize = 64;

/// The `kind` label values: the kinds policies select, and the others counted so far.
#[derive(Debug, Default)]
pub(super) struct KindLabels {
    pub(super) selected: HashSet<String>,
    pub(super) others: HashSet<String>,
}

/// Kinds that always have their own `kind` label value: kanon's own (its validating webhook
/// checks them whatever policies are installed) and Kubernetes 1.35's built-in kinds, which a
/// policy that selects every type (or the `all` webhook rules) sends kanon without naming them.
pub(super) const RESERVED_KINDS: &[&str] = &[
    // kanon
    "ClusterOverridePolicy",
    "OverridePolicy",
    "ClusterValidatePolicy",
    "ValidatePolicy",
    // core
    "Binding",
    "ComponentStatus",
    "ConfigMap",
    "Endpoints",
    "Event",
    "LimitRange",
    "Namespace",
    "Node",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "Pod",
    "PodTemplate",
    "ReplicationController",
    "ResourceQuota",
    "Secret",
    "Service",
    "ServiceAccount",
    // subresources reviews carry
    "Eviction",
    "Scale",
    "TokenRequest",
    "PodAttachOptions",
    "PodExecOptions",
    "PodPortForwardOptions",
    "PodProxyOptions",
    "NodeProxyOptions",
    "ServiceProxyOptions",
    // workloads
    "ControllerRevision",
    "DaemonSet",
    "Deployment",
    "ReplicaSet",
    "StatefulSet",
    "CronJob",
    "Job",
    "HorizontalPodAutoscaler",
    // networking, policy, access
    "Ingress",
    "IngressClass",
    "IPAddress",
    "NetworkPolicy",
    "ServiceCIDR",
    "EndpointSlice",
    "PodDisruptionBudget",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    // storage
    "CSIDriver",
    "CSINode",
    "CSIStorageCapacity",
    "StorageClass",
    "VolumeAttachment",
    "VolumeAttributesClass",
    // the control plane's own
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
    "MutatingAdmissionPolicy",
    "MutatingAdmissionPolicyBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "CustomResourceDefinition",
    "APIService",
    "CertificateSigningRequest",
    "ClusterTrustBundle",
    "Lease",
    "LeaseCandidate",
    "FlowSchema",
    "PriorityLevelConfiguration",
    "RuntimeClass",
    "PriorityClass",
    "DeviceClass",
    "DeviceTaintRule",
    "ResourceClaim",
    "ResourceClaimTemplate",
    "ResourceSlice",
    "StorageVersion",
    "StorageVersionMigration",
    "TokenReview",
    "SelfSubjectReview",
    "SubjectAccessReview",
    "SelfSubjectAccessReview",
    "LocalSubjectAccessReview",
    "SelfSubjectRulesReview",
];

/// The `kind` label value of a request's kind: itself when policies select it, or when it is
/// a plausible kind already counted or still under [`MAX_OTHER_KIND_LABELS`]; else `other`.
pub(super) fn kind_label(kinds: &RwLock<KindLabels>, kind: &str) -> String {
    if kind.is_empty() {
        return String::new();
    }
    let plausible = kind.len() <= 63
        && kind.starts_with(|c: char| c.is_ascii_alphabetic())
        && kind.chars().all(|c| c.is_ascii_alphanumeric());
    if !plausible {
        return "other".to_string();
    }
    {
        let kinds = kinds.read().unwrap_or_else(PoisonError::into_inner);
        if kinds.selected.contains(kind) || kinds.others.contains(kind) {
            return kind.to_string();
        }
        if kinds.others.len() >= MAX_OTHER_KIND_LABELS {
            return "other".to_string();
        }
    }
    let mut kinds = kinds.write().unwrap_or_else(PoisonError::into_inner);
    if kinds.others.len() >= MAX_OTHER_KIND_LABELS {
        return "other".to_string();
    }
    kinds.others.insert(kind.to_string());
    kind.to_string()
}
