//! Which types the apiserver serves, asked through discovery (`pinned_kind`: one request for
//! the type's group version) and remembered in [`ServedTypes`]: what object lookups read, what
//! the webhook configurations' rules name, what the audit lists.
//!
//! A type that is served is remembered for good (its resource and scope do not change while
//! it exists; a CRD deleted and re-created differently is rare enough to need a restart). A
//! type that is not served is remembered for a while (a CRD may be installed meanwhile). A
//! failure to ask (the apiserver unreachable, refusing kanon, or an aggregated API down) is
//! never remembered: the next call asks again.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kube::Client;
use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::{self, Scope};

/// A type as the apiserver serves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServedType {
    /// Its group, version, kind and plural.
    pub resource: ApiResource,
    /// Whether its objects live in namespaces.
    pub namespaced: bool,
}

/// Why a type could not be found, in the cases a caller tells apart.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DiscoveryError {
    /// The apiVersion or kind is not a valid name: no apiserver serves it.
    #[error("{0}")]
    Invalid(String),
    /// The apiserver does not serve the type (or its group version: a CRD not installed yet).
    #[error("{0}")]
    NotServed(String),
    /// The type's group version is served by an aggregated API that is down (503): its
    /// objects can be neither read nor written for now.
    #[error("{api_version} is unavailable: {message}")]
    Unavailable {
        /// The group version.
        api_version: String,
        /// The apiserver's message.
        message: String,
    },
    /// The apiserver refused kanon discovery (RBAC).
    #[error("the apiserver refused kanon: {0}")]
    Forbidden(String),
    /// Discovery failed otherwise (the apiserver unreachable, say).
    #[error("{0}")]
    Failed(String),
}

impl DiscoveryError {
    /// Whether the type is not served (or cannot be: an invalid name), as opposed to
    /// discovery failing.
    pub fn is_not_served(&self) -> bool {
        matches!(
            self,
            DiscoveryError::Invalid(_) | DiscoveryError::NotServed(_)
        )
    }
}

/// Asks the apiserver whether it serves `kind` in `api_version`; nothing is remembered.
pub async fn served_type(
    client: &Client,
    api_version: &str,
    kind: &str,
) -> Result<ServedType, DiscoveryError> {
    let Some((group, version)) = split_api_version(api_version) else {
        return Err(DiscoveryError::Invalid(format!(
            "{api_version:?} is not a valid apiVersion"
        )));
    };
    if kind.is_empty() || !kind.chars().all(|c| c.is_ascii_alphanumeric()) {
        return Err(DiscoveryError::Invalid(format!(
            "{kind:?} is not a valid kind"
        )));
    }
    let gvk = GroupVersionKind::gvk(group, version, kind);
    match discovery::pinned_kind(client, &gvk).await {
        Ok((resource, capabilities)) => Ok(ServedType {
            resource,
            namespaced: capabilities.scope == Scope::Namespaced,
        }),
        Err(kube::Error::Discovery(_)) => Err(DiscoveryError::NotServed(format!(
            "the apiserver serves no kind {kind} in {api_version}"
        ))),
        Err(kube::Error::Api(status)) if status.code == 404 => Err(DiscoveryError::NotServed(
            format!("the apiserver does not serve {api_version} (is its CRD installed?)"),
        )),
        Err(kube::Error::Api(status)) if status.code == 503 => Err(DiscoveryError::Unavailable {
            api_version: api_version.to_string(),
            message: status.message,
        }),
        Err(kube::Error::Api(status)) if status.code == 403 => {
            Err(DiscoveryError::Forbidden(status.message))
        }
        Err(error) => Err(DiscoveryError::Failed(crate::apiserver_error::describe(
            &error,
        ))),
    }
}

/// Splits `apiVersion` into group and version (`v1` is the core group), when both are valid
/// names.
fn split_api_version(api_version: &str) -> Option<(&str, &str)> {
    let (group, version) = kanon_schema::group_version(api_version);
    let token_ok = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
    };
    // The core group is written without a slash (`v1`); `/v1` names no group.
    let group_ok = if api_version.contains('/') {
        token_ok(group)
    } else {
        group.is_empty()
    };
    (group_ok && token_ok(version) && !version.contains('.')).then_some((group, version))
}

/// What one cache entry holds: when it was asked, and the answer.
type Entry = (Instant, Result<ServedType, DiscoveryError>);

/// Discovery's answers, remembered (see the module's documentation).
pub struct ServedTypes {
    client: Client,
    not_served_ttl: Duration,
    known: Mutex<HashMap<(String, String), Entry>>,
}

impl std::fmt::Debug for ServedTypes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServedTypes")
            .field("not_served_ttl", &self.not_served_ttl)
            .field("known", &self.known().len())
            .finish_non_exhaustive()
    }
}

impl ServedTypes {
    /// Asks through `client`; a type found not served is asked again after `not_served_ttl`
    /// (zero: at every call).
    pub fn new(client: Client, not_served_ttl: Duration) -> Self {
        ServedTypes {
            client,
            not_served_ttl,
            known: Mutex::new(HashMap::new()),
        }
    }

    /// The served type of `api_version`/`kind`, remembered or asked.
    pub async fn find(&self, api_version: &str, kind: &str) -> Result<ServedType, DiscoveryError> {
        let key = (api_version.to_string(), kind.to_string());
        if let Some((at, known)) = self.known().get(&key) {
            let fresh = known.is_ok() || at.elapsed() < self.not_served_ttl;
            if fresh {
                return known.clone();
            }
        }
        let found = served_type(&self.client, api_version, kind).await;
        let remembered = match &found {
            Ok(_) => true,
            Err(error) => error.is_not_served() && !self.not_served_ttl.is_zero(),
        };
        if remembered {
            self.known().insert(key, (Instant::now(), found.clone()));
        }
        found
    }

    fn known(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Entry>> {
        self.known.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_versions_are_split_when_valid() {
        assert_eq!(split_api_version("v1"), Some(("", "v1")));
        assert_eq!(split_api_version("apps/v1"), Some(("apps", "v1")));
        assert_eq!(
            split_api_version("a.b-c/v1beta1"),
            Some(("a.b-c", "v1beta1"))
        );
        for bad in ["", "/v1", "apps/", "a b/v1", "apps/v1.2", "a/b/c"] {
            assert_eq!(split_api_version(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn not_served_is_told_from_failing() {
        assert!(DiscoveryError::NotServed("x".into()).is_not_served());
        assert!(DiscoveryError::Invalid("x".into()).is_not_served());
        assert!(!DiscoveryError::Failed("x".into()).is_not_served());
        assert!(!DiscoveryError::Forbidden("x".into()).is_not_served());
        let unavailable = DiscoveryError::Unavailable {
            api_version: "metrics.k8s.io/v1beta1".into(),
            message: "service unavailable".into(),
        };
        assert!(!unavailable.is_not_served());
        assert!(unavailable.to_string().contains("metrics.k8s.io/v1beta1"));
    }
}
