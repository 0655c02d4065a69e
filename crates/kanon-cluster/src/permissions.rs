//! What kanon's identity must be allowed to do, checked at start with
//! SelfSubjectAccessReviews, so that a missing RBAC rule is reported at once, by name, instead
//! of surfacing later as a watch that never syncs or a status that is never written.

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::Client;
use kube::api::{Api, PostParams};

/// One permission: a verb on a resource (optionally a subresource, a namespace, a name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Permission {
    /// `get`, `list`, `watch`, `patch`, `create`, ...
    pub verb: &'static str,
    /// API group (`""` for the core group).
    pub group: &'static str,
    /// Resource (plural).
    pub resource: &'static str,
    /// Subresource, e.g. `status`.
    pub subresource: Option<&'static str>,
    /// Namespace, for namespaced resources.
    pub namespace: Option<String>,
    /// Object name, when the permission is for one object.
    pub name: Option<String>,
    /// What kanon needs it for (shown when it is missing).
    pub purpose: &'static str,
}

impl std::fmt::Display for Permission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let group = if self.group.is_empty() {
            String::new()
        } else {
            format!(".{}", self.group)
        };
        write!(f, "{} {}{group}", self.verb, self.resource)?;
        if let Some(sub) = self.subresource {
            write!(f, "/{sub}")?;
        }
        if let Some(name) = &self.name {
            write!(f, " {name}")?;
        }
        if let Some(ns) = &self.namespace {
            write!(f, " in namespace {ns}")?;
        }
        write!(f, " ({})", self.purpose)
    }
}

const POLICY_RESOURCES: [&str; 4] = [
    "clusteroverridepolicies",
    "overridepolicies",
    "clustervalidatepolicies",
    "validatepolicies",
];

/// What kanon needs, given what it was asked to do.
#[derive(Debug, Clone, Default)]
pub struct Needs {
    /// Status writes are on.
    pub status: bool,
    /// The certificate Secret `(namespace, name)`, when kanon keeps its certificates.
    pub certificate_secret: Option<(String, String)>,
    /// The webhook configurations' name, when kanon keeps them.
    pub webhook_configuration: Option<String>,
    /// The namespaces whose PolicyExceptions kanon honours (and watches).
    pub exception_namespaces: Vec<String>,
    /// The namespace of the audit Lease, when kanon audits (and writes reports).
    pub audit: Option<String>,
    /// Kubernetes Events are written (`--events`).
    pub events: bool,
}

impl Needs {
    /// Every permission these needs imply.
    pub fn permissions(&self) -> Vec<Permission> {
        let p = |verb, group, resource, purpose| Permission {
            verb,
            group,
            resource,
            subresource: None,
            namespace: None,
            name: None,
            purpose,
        };
        let mut all = Vec::new();
        for resource in POLICY_RESOURCES {
            for verb in ["list", "watch"] {
                all.push(p(verb, kanon_api::GROUP, resource, "reading policies"));
            }
            if self.status {
                all.push(Permission {
                    subresource: Some("status"),
                    ..p("patch", kanon_api::GROUP, resource, "writing policy status")
                });
            }
        }
        for namespace in &self.exception_namespaces {
            for verb in ["list", "watch"] {
                all.push(Permission {
                    namespace: Some(namespace.clone()),
                    ..p(
                        verb,
                        kanon_api::GROUP,
                        "policyexceptions",
                        "reading PolicyExceptions",
                    )
                });
            }
            if self.status {
                all.push(Permission {
                    namespace: Some(namespace.clone()),
                    subresource: Some("status"),
                    ..p(
                        "patch",
                        kanon_api::GROUP,
                        "policyexceptions",
                        "writing PolicyException status",
                    )
                });
            }
        }
        for verb in ["list", "watch"] {
            all.push(p(
                verb,
                "",
                "namespaces",
                "namespaceSelector and namespaceObject",
            ));
        }
        if let Some((namespace, name)) = &self.certificate_secret {
            all.push(Permission {
                namespace: Some(namespace.clone()),
                ..p("create", "", "secrets", "creating the certificate Secret")
            });
            for verb in ["get", "update"] {
                all.push(Permission {
                    namespace: Some(namespace.clone()),
                    name: Some(name.clone()),
                    ..p(verb, "", "secrets", "keeping the certificate Secret")
                });
            }
        }
        if let Some(namespace) = &self.audit {
            all.push(Permission {
                namespace: Some(namespace.clone()),
                ..p(
                    "create",
                    "coordination.k8s.io",
                    "leases",
                    "creating the audit Lease",
                )
            });
            for verb in ["get", "update"] {
                all.push(Permission {
                    namespace: Some(namespace.clone()),
                    name: Some(crate::audit::AuditConfig::default().lease_name),
                    ..p(
                        verb,
                        "coordination.k8s.io",
                        "leases",
                        "holding the audit Lease",
                    )
                });
            }
            for resource in ["reports", "clusterreports"] {
                // create: a server-side apply that creates a report needs it; get and update:
                // admission results are recorded by reading a report and replacing it at its
                // resource version.
                for verb in ["get", "list", "create", "patch", "update", "delete"] {
                    all.push(p(
                        verb,
                        kanon_api::REPORT_GROUP,
                        resource,
                        "writing audit reports",
                    ));
                }
            }
        }
        if self.events {
            // In any namespace: an Event lives beside the object it is about.
            for verb in ["create", "patch"] {
                all.push(p(
                    verb,
                    "events.k8s.io",
                    "events",
                    "writing Kubernetes Events",
                ));
            }
            // The policies' uids, so that `kubectl describe` of a policy lists its Events.
            for resource in POLICY_RESOURCES {
                all.push(p(
                    "get",
                    kanon_api::GROUP,
                    resource,
                    "naming policies in Kubernetes Events",
                ));
            }
        }
        if let Some(name) = &self.webhook_configuration {
            for resource in [
                "mutatingwebhookconfigurations",
                "validatingwebhookconfigurations",
            ] {
                for verb in ["get", "patch"] {
                    all.push(Permission {
                        name: Some(name.clone()),
                        ..p(
                            verb,
                            "admissionregistration.k8s.io",
                            resource,
                            "keeping the webhook configurations",
                        )
                    });
                }
            }
        }
        all
    }
}

/// Why the check itself could not be made.
#[derive(Debug, thiserror::Error)]
#[error("checking kanon's permissions: {0}")]
pub struct CheckError(String);

/// The permissions kanon's identity lacks, among `needed` (empty: all granted).
pub async fn missing(
    client: &Client,
    needed: &[Permission],
) -> Result<Vec<Permission>, CheckError> {
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let mut missing = Vec::new();
    for permission in needed {
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    verb: Some(permission.verb.to_string()),
                    group: Some(permission.group.to_string()),
                    resource: Some(permission.resource.to_string()),
                    subresource: permission.subresource.map(str::to_string),
                    namespace: permission.namespace.clone(),
                    name: permission.name.clone(),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = api
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| CheckError(crate::apiserver_error::describe(&e)))?;
        if !answer.status.is_some_and(|s| s.allowed) {
            missing.push(permission.clone());
        }
    }
    Ok(missing)
}
