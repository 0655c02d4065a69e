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
//! What a read may hold is bounded in bytes, since a tenant's policy chooses what is read: a
//! listing by label selector is filtered by the apiserver and paged, one read (an object or a
//! listing) holds at most `read_max_bytes` (past it the lookup fails, naming the bound), every
//! read held at once — in progress, cached or still used by reviews — at most `memory_bytes`
//! ([`memory`]), and reads of the same key at the same time are one read ([`flight`]).
//!
//! The operator's limits are applied here, whatever the engine asked: Secrets are refused
//! unless allowed, and a namespaced policy (`confined_to`) reads namespaced types only in its
//! own namespace.

mod fetch;
mod flight;
mod memory;

use std::sync::Arc;
use std::time::{Duration, Instant};

use kanon_engine::LookupError;
use kanon_engine::{LookupFuture, ObjectQuery};
use kube::Client;
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::Value;

use crate::discovery::{DiscoveryError, ServedType, ServedTypes};
use crate::metrics::{ClusterMetrics, LookupSource};
use fetch::{Bounds, Read, ReadError};
use flight::Flights;
use memory::{Held, Limits, Store};

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
    /// The most one read may hold, in bytes: the JSON the apiserver sends for an object or a
    /// listing (all its pages), and its objects once decoded, each. Past it the lookup fails
    /// naming the bound, and the policy fails under its `failurePolicy`.
    pub read_max_bytes: usize,
    /// The most every read held at once may take, in bytes: reads in progress (each reserves
    /// twice `read_max_bytes` while it runs), the cache, and reads reviews still hold. Raised
    /// to twice `read_max_bytes` if below.
    pub memory_bytes: usize,
    /// The most objects asked for per LIST page (the first asks for at most 16; later ones
    /// for about what is left of `read_max_bytes`, by the size of the objects so far).
    pub page_objects: u32,
}

impl Default for ObjectConfig {
    fn default() -> Self {
        ObjectConfig {
            ttl: Duration::from_secs(5),
            cache_entries: 4096,
            allow_secrets: false,
            unknown_type_ttl: Duration::from_secs(30),
            read_max_bytes: DEFAULT_READ_MAX_BYTES,
            memory_bytes: DEFAULT_MEMORY_BYTES,
            page_objects: 500,
        }
    }
}

/// The default bound on one read: room for two objects at etcd's limit (1.5 MiB; as JSON,
/// with base64 `binaryData`, up to 2 MiB), or a thousand ConfigMaps of a few KiB, which is
/// more than a policy reads to decide on one request; an object larger than this is refused
/// by kube-apiserver anyway (its request limit is 3 MiB).
pub const DEFAULT_READ_MAX_BYTES: usize = 4 << 20;

/// The default bound on what reads hold together: four reads at their bound in progress at
/// once (each reserves 8 MiB), or a cache of thousands of typical objects.
pub const DEFAULT_MEMORY_BYTES: usize = 32 << 20;

/// `(apiVersion, kind, namespace, name, labelSelector)`; the name is `None` for a listing.
type ReadKey = (
    String,
    String,
    Option<String>,
    Option<String>,
    Option<String>,
);

/// What a read's callers get: its objects, or why there are none.
type Outcome = Result<Arc<Held>, LookupError>;

/// Reads cluster objects for policies.
pub struct ObjectReader {
    client: Client,
    config: ObjectConfig,
    metrics: ClusterMetrics,
    served: ServedTypes,
    store: Arc<Store<ReadKey>>,
    flights: Arc<Flights<ReadKey, Outcome>>,
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
            message: crate::apiserver_error::describe(&other),
        },
    }
}

/// A failed read as a lookup error about `what`; one over its bound says which bound.
fn read_error(what: String, error: ReadError) -> LookupError {
    match error {
        ReadError::Api(error) => lookup_error(what, error),
        error @ ReadError::TooLarge { .. } => LookupError::Failed {
            what,
            message: format!(
                "{error} (kanon serve --object-read-max-mib); a label selector that matches fewer objects reads less"
            ),
        },
        error @ ReadError::Decode(_) => LookupError::Failed {
            what,
            message: error.to_string(),
        },
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
        let read_max_bytes = config.read_max_bytes.clamp(1, 1 << 30);
        let store = Store::new(Limits {
            bytes: config.memory_bytes,
            reservation: 2 * read_max_bytes,
            ttl: config.ttl,
            entries: config.cache_entries,
        });
        ObjectReader {
            served: ServedTypes::new(client.clone(), config.unknown_type_ttl),
            client,
            config: ObjectConfig {
                read_max_bytes,
                ..config
            },
            metrics,
            store: Arc::new(store),
            flights: Arc::default(),
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
            let selector = match name {
                Some(_) => None,
                None => query.label_selector.map(str::to_string),
            };
            let key: ReadKey = (
                query.api_version.to_string(),
                query.kind.to_string(),
                namespace,
                name.map(str::to_string),
                selector,
            );
            if let Some(held) = self.store.cached(&key) {
                self.metrics.lookup_hit(LookupSource::Objects);
                return Ok(held.read.clone());
            }
            let (flight, joined) = self.flights.join(&key, || {
                self.fetch(key.clone(), served.resource, what.clone())
            });
            if joined {
                // Served without a round trip of its own, as a cache hit is.
                self.metrics.lookup_hit(LookupSource::Objects);
            }
            flight.await.map(|held| held.read.clone())
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

    /// The read of `key` from the apiserver, within the memory bound, cached when done.
    fn fetch(
        &self,
        key: ReadKey,
        resource: ApiResource,
        what: String,
    ) -> impl std::future::Future<Output = Outcome> + Send + 'static {
        let (client, store, metrics) = (
            self.client.clone(),
            self.store.clone(),
            self.metrics.clone(),
        );
        let bounds = Bounds {
            bytes: self.config.read_max_bytes,
            page_objects: self.config.page_objects,
        };
        async move {
            let reservation = store.reserve().await;
            let started = Instant::now();
            let (_, _, namespace, name, selector) = &key;
            let fetched = match name {
                Some(name) => {
                    fetch::get(&client, &resource, namespace.as_deref(), name, bounds).await
                }
                None => {
                    let selector = selector.as_deref();
                    fetch::list(&client, &resource, namespace.as_deref(), selector, bounds).await
                }
            }
            .map_err(|e| read_error(what, e));
            metrics.lookup_miss(LookupSource::Objects, started.elapsed(), &fetched);
            Ok(store.keep(key, fetched?, reservation))
        }
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

    /// The objects of the query's type and namespace that its label selector matches (the
    /// apiserver filters; every object without one), ordered by namespace and name.
    pub fn list<'a>(&'a self, query: ObjectQuery<'a>) -> LookupFuture<'a, Vec<Arc<Value>>> {
        Box::pin(async move {
            // Ordered when read.
            match self.read(query, None).await? {
                Read::Many(items) => Ok(items),
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
