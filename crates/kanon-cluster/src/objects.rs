//! Cluster objects read for `k8s` and `owner` references: straight from the apiserver, with a
//! short-lived cache.
//!
//! Why reads and not watch caches: a policy may name any type, and a watch per type would keep
//! every object of that type in memory (and need `list`/`watch` on it) for as long as kanon
//! runs, whether or not a request ever needs it again. A read costs one round trip on a cache
//! miss, needs only `get` (by name) or `list` (by label selector) on the types policies name,
//! and the cache (`ttl`, a few seconds by default) absorbs bursts such as a Deployment's Pods all
//! looking up the same owner. An object changed within the TTL may be seen as it was.
//!
//! The operator's limits are applied here, whatever the engine asked: Secrets are refused
//! unless allowed, and a namespaced policy (`confined_to`) reads namespaced types only in its
//! own namespace.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kanon_engine::LookupError;
use kanon_engine::{LookupFuture, ObjectQuery};
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::Value;

use crate::discovery::{DiscoveryError, ServedType, ServedTypes};
use crate::documents;
use crate::metrics::{ClusterMetrics, LookupSource};

/// Limits and cache sizes of object reads.
#[derive(Debug, Clone)]
pub struct ObjectConfig {
    /// How long an object (or a listing) read is reused.
    pub ttl: Duration,
    /// How many reads the cache keeps at most.
    pub cache_entries: usize,
    /// Whether policies may read Secrets through references.
    pub allow_secrets: bool,
    /// How long a type the apiserver does not serve is remembered as unknown (a CRD may be
    /// installed meanwhile).
    pub unknown_type_ttl: Duration,
}

impl Default for ObjectConfig {
    fn default() -> Self {
        ObjectConfig {
            ttl: Duration::from_secs(5),
            cache_entries: 4096,
            allow_secrets: false,
            unknown_type_ttl: Duration::from_secs(30),
        }
    }
}

/// `(apiVersion, kind, namespace, name)`; the name is `None` for a listing.
type ReadKey = (String, String, Option<String>, Option<String>);

#[derive(Debug, Clone)]
enum Read {
    One(Option<Arc<Value>>),
    Many(Vec<Arc<Value>>),
}

/// Reads cluster objects for policies.
pub struct ObjectReader {
    client: Client,
    config: ObjectConfig,
    metrics: ClusterMetrics,
    served: ServedTypes,
    reads: Mutex<HashMap<ReadKey, (Instant, Read)>>,
}

impl std::fmt::Debug for ObjectReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectReader")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// A kube client error as a lookup error about `what`.
fn lookup_error(what: String, error: kube::Error) -> LookupError {
    match error {
        kube::Error::Api(status) if status.code == 403 => LookupError::Forbidden {
            what,
            reason: format!("the apiserver refused kanon: {}", status.message),
        },
        kube::Error::Api(status) if status.code == 404 => LookupError::UnknownType { what },
        other => LookupError::Failed {
            what,
            message: other.to_string(),
        },
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// Where a query may read: the namespace to use (`None`: cluster-wide), after the operator's
/// and the confinement's rules: Secrets only when allowed; a namespaced policy reads namespaced
/// types only in its own namespace, and its listing without a namespace reads that one.
fn read_scope(
    query: &ObjectQuery<'_>,
    namespaced: bool,
    allow_secrets: bool,
    what: &str,
) -> Result<Option<String>, LookupError> {
    if query.api_version == "v1" && query.kind == "Secret" && !allow_secrets {
        return Err(LookupError::Forbidden {
            what: what.to_string(),
            reason: "Secrets are not readable through references unless the operator allows it (kanon serve --allow-secret-lookups)".into(),
        });
    }
    if !namespaced {
        return Ok(None);
    }
    match (query.namespace, query.confined_to) {
        (Some(ns), Some(own)) if ns != own => Err(LookupError::Forbidden {
            what: what.to_string(),
            reason: format!("a namespaced policy reads objects only in its own namespace `{own}`"),
        }),
        (Some(ns), _) => Ok(Some(ns.to_string())),
        (None, Some(own)) => Ok(Some(own.to_string())),
        (None, None) => Ok(None),
    }
}

impl ObjectReader {
    /// A reader over `client`.
    pub fn new(client: Client, config: ObjectConfig, metrics: ClusterMetrics) -> Self {
        ObjectReader {
            served: ServedTypes::new(client.clone(), config.unknown_type_ttl),
            client,
            config,
            metrics,
            reads: Mutex::new(HashMap::new()),
        }
    }

    /// The served type of `api_version`/`kind`, from discovery (remembered).
    async fn served_type(
        &self,
        query: &ObjectQuery<'_>,
        what: &str,
    ) -> Result<ServedType, LookupError> {
        self.served
            .find(query.api_version, query.kind)
            .await
            .map_err(|error| {
                let what = what.to_string();
                match error {
                    DiscoveryError::Invalid(_) | DiscoveryError::NotServed(_) => {
                        LookupError::UnknownType { what }
                    }
                    DiscoveryError::Forbidden(message) => LookupError::Forbidden {
                        what,
                        reason: format!("the apiserver refused kanon: {message}"),
                    },
                    error @ (DiscoveryError::Unavailable { .. } | DiscoveryError::Failed(_)) => {
                        LookupError::Failed {
                            what,
                            message: error.to_string(),
                        }
                    }
                }
            })
    }

    fn cached(&self, key: &ReadKey) -> Option<Read> {
        let reads = lock(&self.reads);
        let (at, read) = reads.get(key)?;
        (at.elapsed() < self.config.ttl).then(|| read.clone())
    }

    fn remember(&self, key: ReadKey, read: Read) {
        if self.config.ttl.is_zero() || self.config.cache_entries == 0 {
            return;
        }
        let mut reads = lock(&self.reads);
        if reads.len() >= self.config.cache_entries {
            let ttl = self.config.ttl;
            reads.retain(|_, (at, _)| at.elapsed() < ttl);
            if reads.len() >= self.config.cache_entries
                && let Some(oldest) = reads
                    .iter()
                    .min_by_key(|(_, (at, _))| *at)
                    .map(|(k, _)| k.clone())
            {
                reads.remove(&oldest);
            }
        }
        reads.insert(key, (Instant::now(), read));
    }

    async fn read(&self, query: ObjectQuery<'_>, name: Option<&str>) -> Result<Read, LookupError> {
        let what = query.describe(name);
        let result = async {
            let served = self.served_type(&query, &what).await?;
            let namespace =
                read_scope(&query, served.namespaced, self.config.allow_secrets, &what)?;
            if served.namespaced && query.namespace.is_none() && name.is_some() {
                // A name without a namespace means a cluster-scoped object, and there is no
                // such object of a namespaced type (the engine asks this of an owner it did not
                // find in the object's namespace), as offline.
                return Ok(Read::One(None));
            }
            let key: ReadKey = (
                query.api_version.to_string(),
                query.kind.to_string(),
                namespace.clone(),
                name.map(str::to_string),
            );
            if let Some(read) = self.cached(&key) {
                self.metrics.lookup_hit(LookupSource::Objects);
                return Ok(read);
            }
            let (client, resource) = (&self.client, &served.resource);
            let started = Instant::now();
            let read = match name {
                Some(name) => documents::get(client, resource, namespace.as_deref(), name)
                    .await
                    .map(|found| Read::One(found.map(Arc::new))),
                None => documents::list(
                    client,
                    resource,
                    namespace.as_deref(),
                    &ListParams::default(),
                )
                .await
                .map(|(objects, _)| Read::Many(objects.into_iter().map(Arc::new).collect())),
            }
            .map_err(|e| lookup_error(what.clone(), e));
            self.metrics
                .lookup_miss(LookupSource::Objects, started.elapsed(), &read);
            if let Ok(read) = &read {
                self.remember(key, read.clone());
            }
            read
        }
        .await;
        if let Err(e) = &result
            && !matches!(
                e,
                LookupError::Failed { .. } | LookupError::Forbidden { .. }
            )
        {
            // Apiserver errors were counted with their round trip; refusals here.
            self.metrics.lookup_error(LookupSource::Objects, e);
        }
        result
    }

    /// The object named `name`; `Ok(None)` when it does not exist.
    pub fn get<'a>(
        &'a self,
        query: ObjectQuery<'a>,
        name: &'a str,
    ) -> LookupFuture<'a, Option<Arc<Value>>> {
        Box::pin(async move {
            match self.read(query, Some(name)).await? {
                Read::One(found) => Ok(found),
                Read::Many(_) => Ok(None),
            }
        })
    }

    /// The objects of the query's type and namespace, ordered by namespace and name.
    pub fn list<'a>(&'a self, query: ObjectQuery<'a>) -> LookupFuture<'a, Vec<Arc<Value>>> {
        Box::pin(async move {
            match self.read(query, None).await? {
                Read::Many(mut items) => {
                    let key = |o: &Arc<Value>| {
                        let text = |p: &str| {
                            o.pointer(p)
                                .and_then(Value::as_str)
                                .unwrap_or_default()
                                .to_string()
                        };
                        (text("/metadata/namespace"), text("/metadata/name"))
                    };
                    items.sort_by_key(key);
                    Ok(items)
                }
                Read::One(_) => Ok(Vec::new()),
            }
        })
    }

    /// The value of `key` in the Secret `namespace/name`, as text (a bearer token for an HTTP
    /// reference). Never cached beyond the TTL, never logged.
    pub async fn secret_text(
        &self,
        namespace: &str,
        name: &str,
        key: &str,
    ) -> Result<String, LookupError> {
        let what = format!("v1/Secret {namespace}/{name}");
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("", "v1", "Secret"),
            "secrets",
        );
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), namespace, &resource);
        let secret = api
            .get_opt(name)
            .await
            .map_err(|e| lookup_error(what.clone(), e))?
            .ok_or_else(|| LookupError::Failed {
                what: what.clone(),
                message: "the Secret does not exist".into(),
            })?;
        let encoded = secret
            .data
            .pointer(&format!(
                "/data/{}",
                key.replace('~', "~0").replace('/', "~1")
            ))
            .and_then(Value::as_str)
            .ok_or_else(|| LookupError::Failed {
                what: what.clone(),
                message: format!("the Secret has no key `{key}`"),
            })?;
        use base64::Engine as _;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .map_err(|_| LookupError::Failed {
                what: what.clone(),
                message: format!("the Secret's key `{key}` is not base64"),
            })?;
        String::from_utf8(bytes)
            .map(|t| t.trim().to_string())
            .map_err(|_| LookupError::Failed {
                what,
                message: format!("the Secret's key `{key}` is not text"),
            })
    }
}

#[cfg(test)]
mod tests {
    use kanon_engine::LookupError;
    use kanon_engine::ObjectQuery;

    use super::read_scope;

    fn query<'a>(
        kind: &'a str,
        namespace: Option<&'a str>,
        confined_to: Option<&'a str>,
    ) -> ObjectQuery<'a> {
        ObjectQuery {
            api_version: "v1",
            kind,
            namespace,
            policy: "p",
            confined_to,
            label_selector: None,
        }
    }

    #[test]
    fn reads_stay_where_the_policy_may_read() {
        let scope = |q: ObjectQuery<'_>, namespaced, allow| read_scope(&q, namespaced, allow, "x");
        // Cluster policies read where they ask; cluster-scoped types are readable by all.
        assert_eq!(
            scope(query("ConfigMap", Some("a"), None), true, false),
            Ok(Some("a".into()))
        );
        assert_eq!(scope(query("ConfigMap", None, None), true, false), Ok(None));
        assert_eq!(
            scope(query("Node", None, Some("a")), false, false),
            Ok(None)
        );
        // A namespaced policy: its own namespace only, also when listing without one.
        assert_eq!(
            scope(query("ConfigMap", Some("a"), Some("a")), true, false),
            Ok(Some("a".into()))
        );
        assert_eq!(
            scope(query("ConfigMap", None, Some("a")), true, false),
            Ok(Some("a".into()))
        );
        assert!(matches!(
            scope(query("ConfigMap", Some("b"), Some("a")), true, false),
            Err(LookupError::Forbidden { reason, .. }) if reason.contains("own namespace `a`")
        ));
        // Secrets: refused unless allowed, whoever asks.
        assert!(matches!(
            scope(query("Secret", Some("a"), None), true, false),
            Err(LookupError::Forbidden { reason, .. }) if reason.contains("--allow-secret-lookups")
        ));
        assert_eq!(
            scope(query("Secret", Some("a"), None), true, true),
            Ok(Some("a".into()))
        );
        assert!(matches!(
            scope(query("Secret", Some("b"), Some("a")), true, true),
            Err(LookupError::Forbidden { .. })
        ));
    }
}
