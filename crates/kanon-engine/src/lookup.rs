//! How the engine reads the world outside the request (namespaces, owners, referenced objects,
//! HTTP services) without touching the network itself: through the [`Lookup`] trait. The
//! cluster runtime implements it over watch caches, the apiserver and an HTTP client, bounded
//! by the request's deadline; `kanon apply` implements it over `--context` files
//! ([`ObjectStore`]).
//!
//! Lookups are asynchronous so that one that waits (an apiserver read, an HTTP call) holds no
//! thread; an in-memory lookup answers at once, and [`block_on`] runs an evaluation over it
//! without a runtime.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use serde_json::Value;

/// What a [`Lookup`] method returns: a future that may borrow the lookup and its arguments.
pub type LookupFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, LookupError>> + Send + 'a>>;

/// A lookup that failed, as opposed to an object that does not exist (`Ok(None)`). Each
/// variant names what was looked up (`what`, e.g. `v1/Namespace default`), so that callers and
/// policy authors can tell the causes apart.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LookupError {
    /// The cache that answers this lookup has not finished its first listing.
    #[error("looking up {what}: not synced yet (the cache is still loading)")]
    NotSynced {
        /// What was looked up.
        what: String,
    },
    /// The request's deadline (or the reference's own timeout) passed first.
    #[error("looking up {what}: timed out after {after:?}")]
    TimedOut {
        /// What was looked up.
        what: String,
        /// How long it was given.
        after: Duration,
    },
    /// kanon may not read it: the operator did not allow it, or the apiserver refused.
    #[error("looking up {what}: forbidden: {reason}")]
    Forbidden {
        /// What was looked up.
        what: String,
        /// Who refused and why.
        reason: String,
    },
    /// The apiserver serves no such `apiVersion` and `kind`.
    #[error("looking up {what}: the apiserver serves no such apiVersion and kind")]
    UnknownType {
        /// What was looked up.
        what: String,
    },
    /// This kind of lookup does not exist where the evaluation runs (e.g. HTTP offline).
    #[error("looking up {what}: {reason}")]
    Unavailable {
        /// What was looked up.
        what: String,
        /// Why it is not available here.
        reason: String,
    },
    /// Anything else: the apiserver or the service answered with an error, the connection
    /// failed, the answer was too large.
    #[error("looking up {what}: {message}")]
    Failed {
        /// What was looked up.
        what: String,
        /// Why it failed.
        message: String,
    },
}

impl LookupError {
    /// What was looked up.
    pub fn what(&self) -> &str {
        match self {
            LookupError::NotSynced { what }
            | LookupError::TimedOut { what, .. }
            | LookupError::Forbidden { what, .. }
            | LookupError::UnknownType { what }
            | LookupError::Unavailable { what, .. }
            | LookupError::Failed { what, .. } => what,
        }
    }

    /// A short, stable name of the cause, for metrics labels: `not_synced`, `timed_out`,
    /// `forbidden`, `unknown_type`, `unavailable`, `failed`.
    pub fn reason(&self) -> &'static str {
        match self {
            LookupError::NotSynced { .. } => "not_synced",
            LookupError::TimedOut { .. } => "timed_out",
            LookupError::Forbidden { .. } => "forbidden",
            LookupError::UnknownType { .. } => "unknown_type",
            LookupError::Unavailable { .. } => "unavailable",
            LookupError::Failed { .. } => "failed",
        }
    }
}

/// One object, or the objects of one type, to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ObjectQuery<'a> {
    /// `apiVersion`, e.g. `v1` or `apps/v1`.
    pub api_version: &'a str,
    /// `kind`, e.g. `ConfigMap`.
    pub kind: &'a str,
    /// The namespace; `None` for cluster-scoped objects (or, in a list, every namespace).
    pub namespace: Option<&'a str>,
    /// The policy on whose behalf the lookup is made (`Kind/name` or `Kind/namespace/name`),
    /// so that an implementation can apply the operator's rules per policy and label its
    /// metrics. Empty for the engine's own reads (the namespace of the request).
    pub policy: &'a str,
    /// The namespace of a namespaced policy: objects of namespaced types are read only there
    /// (cluster-scoped objects are readable by every policy). `None` for cluster policies.
    pub confined_to: Option<&'a str>,
    /// For a listing, the label selector its objects are kept by, in the apiserver's
    /// `labelSelector` syntax, so that the implementation can read only those (the apiserver
    /// filters). It may also return others: the engine filters again. `None`: every object.
    pub label_selector: Option<&'a str>,
}

impl ObjectQuery<'_> {
    /// `apiVersion/Kind namespace/name` (or without the namespace): how errors name it.
    pub fn describe(&self, name: Option<&str>) -> String {
        let mut text = format!("{}/{}", self.api_version, self.kind);
        match (self.namespace, name) {
            (Some(ns), Some(name)) => text.push_str(&format!(" {ns}/{name}")),
            (None, Some(name)) => text.push_str(&format!(" {name}")),
            (Some(ns), None) => text.push_str(&format!(" in namespace {ns}")),
            (None, None) => {}
        }
        text
    }
}

/// HTTP methods of an [`HttpCall`].
pub use kanon_api::HttpMethod;

/// Where the bearer token of an [`HttpCall`] comes from.
#[derive(Clone, PartialEq, Eq)]
pub enum HttpToken {
    /// Given in the policy.
    Static(String),
    /// A key of a Secret, read by the implementation.
    Secret {
        /// The Secret's namespace.
        namespace: String,
        /// The Secret's name.
        name: String,
        /// The key in its data.
        key: String,
    },
}

impl std::fmt::Debug for HttpToken {
    // Never print a token, wherever the call is logged.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HttpToken::Static(_) => f.write_str("Static(<redacted>)"),
            HttpToken::Secret {
                namespace,
                name,
                key,
            } => write!(f, "Secret({namespace}/{name}, key {key})"),
        }
    }
}

/// An HTTP request of an `http` reference, its placeholders rendered.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpCall {
    /// GET or POST.
    pub method: HttpMethod,
    /// The URL, without the query parameters.
    pub url: String,
    /// Query parameters, appended (encoded) to the URL.
    pub params: BTreeMap<String, String>,
    /// Request headers.
    pub headers: BTreeMap<String, String>,
    /// A JSON body (POST).
    pub body: Option<Value>,
    /// A bearer token to send.
    pub token: Option<HttpToken>,
    /// The reference's own bound on the call; the request's deadline bounds it too.
    pub timeout: Option<Duration>,
    /// The policy on whose behalf the call is made.
    pub policy: String,
}

impl HttpCall {
    /// `GET https://...`: how errors name the call (without its query parameters, which may
    /// carry data of the object).
    pub fn describe(&self) -> String {
        let method = match self.method {
            HttpMethod::Get => "GET",
            HttpMethod::Post => "POST",
        };
        format!("{method} {}", self.url)
    }
}

/// The answer of an HTTP service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpAnswer {
    /// The status code.
    pub status: u16,
    /// Response headers, names in lower case; repeated headers joined with `, `.
    pub headers: BTreeMap<String, String>,
    /// The body as received.
    pub body: Vec<u8>,
}

/// Read access to the world outside the request.
pub trait Lookup: Send + Sync {
    /// The object named `name` of the query's type and namespace; `Ok(None)` when it does not
    /// exist.
    fn get<'a>(
        &'a self,
        query: ObjectQuery<'a>,
        name: &'a str,
    ) -> LookupFuture<'a, Option<Arc<Value>>>;

    /// Every object of the query's type in its namespace (`None`: cluster-scoped objects, or
    /// all namespaces for a namespaced type), in a stable order.
    fn list<'a>(&'a self, query: ObjectQuery<'a>) -> LookupFuture<'a, Vec<Arc<Value>>>;

    /// Sends an HTTP request. By default HTTP references are unavailable.
    fn http<'a>(&'a self, call: &'a HttpCall) -> LookupFuture<'a, HttpAnswer> {
        Box::pin(std::future::ready(Err(LookupError::Unavailable {
            what: call.describe(),
            reason: "HTTP references are not available here (offline evaluation has no network; \
                     they are resolved by `kanon serve` in a cluster)"
                .to_string(),
        })))
    }

    /// The kinds a policy object being written is checked against (see
    /// [`crate::compile_with`]): in a cluster, the built-in kinds and the custom ones its
    /// CustomResourceDefinitions serve. `None`, the default: the built-in kinds alone.
    fn kinds(&self) -> Option<kanon_schema::Kinds> {
        None
    }
}

impl<T: Lookup + ?Sized> Lookup for Arc<T> {
    fn get<'a>(
        &'a self,
        query: ObjectQuery<'a>,
        name: &'a str,
    ) -> LookupFuture<'a, Option<Arc<Value>>> {
        (**self).get(query, name)
    }

    fn list<'a>(&'a self, query: ObjectQuery<'a>) -> LookupFuture<'a, Vec<Arc<Value>>> {
        (**self).list(query)
    }

    fn http<'a>(&'a self, call: &'a HttpCall) -> LookupFuture<'a, HttpAnswer> {
        (**self).http(call)
    }

    fn kinds(&self) -> Option<kanon_schema::Kinds> {
        (**self).kinds()
    }
}

/// The kinds `lookup` knows (in a cluster, custom kinds too), else the built-in ones: what an
/// evaluation resolves a kind's schema or scope by.
pub(crate) fn kinds_of(lookup: &dyn Lookup) -> Option<kanon_schema::Kinds> {
    lookup
        .kinds()
        .or_else(|| kanon_schema::Kinds::builtin().ok())
}

/// A future that is already resolved, as a [`LookupFuture`].
pub fn ready<'a, T: Send + 'a>(result: Result<T, LookupError>) -> LookupFuture<'a, T> {
    Box::pin(std::future::ready(result))
}

/// Runs `future` to completion on the current thread, without a runtime: for evaluations over
/// lookups that answer at once ([`ObjectStore`], [`NoObjects`]), as the offline CLI and tests
/// do. A future that waits on a timer or on I/O of a runtime never completes here; use the
/// runtime's own executor for those.
pub fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let waker = thread_waker();
    let mut context = Context::from_waker(&waker);
    loop {
        match future.as_mut().poll(&mut context) {
            Poll::Ready(output) => return output,
            Poll::Pending => std::thread::park(),
        }
    }
}

/// A waker that unparks the current thread.
fn thread_waker() -> Waker {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.0.unpark();
        }
    }
    Waker::from(Arc::new(Unpark(std::thread::current())))
}

/// A lookup that knows no objects: every object is absent.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoObjects;

impl Lookup for NoObjects {
    fn get<'a>(&'a self, _: ObjectQuery<'a>, _: &'a str) -> LookupFuture<'a, Option<Arc<Value>>> {
        ready(Ok(None))
    }

    fn list<'a>(&'a self, _: ObjectQuery<'a>) -> LookupFuture<'a, Vec<Arc<Value>>> {
        ready(Ok(Vec::new()))
    }
}

type ObjectKey = (String, String, Option<String>, String);

const CRD_API_VERSION: &str = "apiextensions.k8s.io/v1";

/// An in-memory set of objects, for offline evaluation and tests. The
/// CustomResourceDefinitions among them serve their kinds ([`ObjectStore::kinds`]), as a
/// cluster's do.
#[derive(Debug, Clone, Default)]
pub struct ObjectStore {
    objects: HashMap<ObjectKey, Arc<Value>>,
    /// The kinds the store's CRDs serve beside the built-in ones, built on first use.
    kinds: std::sync::OnceLock<CustomKinds>,
}

/// What an [`ObjectStore`]'s CustomResourceDefinitions serve, read on first use.
#[derive(Debug, Clone, Default)]
struct CustomKinds {
    /// The built-in and custom kinds; `None` without CRDs (the built-in kinds alone).
    kinds: Option<kanon_schema::Kinds>,
    /// The CRDs that cannot be read, each with why.
    problems: Vec<String>,
}

/// An object that cannot be stored because it lacks an identity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("object has no {missing}")]
pub struct MissingIdentity {
    /// The missing field (`apiVersion`, `kind` or `metadata.name`).
    pub missing: &'static str,
}

impl ObjectStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) an object, keyed by its `apiVersion`, `kind`, `metadata.namespace`
    /// and `metadata.name`.
    pub fn insert(&mut self, object: Value) -> Result<(), MissingIdentity> {
        let text = |pointer: &str| {
            object
                .pointer(pointer)
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        let api_version = text("/apiVersion").ok_or(MissingIdentity {
            missing: "apiVersion",
        })?;
        let kind = text("/kind").ok_or(MissingIdentity { missing: "kind" })?;
        let name = text("/metadata/name").ok_or(MissingIdentity {
            missing: "metadata.name",
        })?;
        let namespace = text("/metadata/namespace").filter(|n| !n.is_empty());
        if kind == "CustomResourceDefinition" {
            self.kinds = std::sync::OnceLock::new();
        }
        self.objects
            .insert((api_version, kind, namespace, name), Arc::new(object));
        Ok(())
    }

    /// The CustomResourceDefinitions held that do not describe a custom kind kanon can read,
    /// each with why (their kinds are then unknown).
    pub fn crd_problems(&self) -> Vec<String> {
        self.custom().problems.clone()
    }

    /// The built-in kinds and those the CustomResourceDefinitions held serve; `None` when it
    /// holds none (the built-in kinds alone).
    pub fn custom_kinds(&self) -> Option<kanon_schema::Kinds> {
        self.custom().kinds.clone()
    }

    /// The store's CRDs read once: the kinds they serve and the ones that cannot be read.
    fn custom(&self) -> &CustomKinds {
        self.kinds.get_or_init(|| {
            let crds = self.objects(CRD_API_VERSION, "CustomResourceDefinition", None);
            let mut resources = Vec::with_capacity(crds.len());
            let mut problems = Vec::new();
            for crd in &crds {
                match kanon_schema::CustomResource::from_crd(crd) {
                    Ok(resource) => resources.push(resource),
                    Err(e) => {
                        let name = crd.pointer("/metadata/name").and_then(Value::as_str);
                        problems.push(format!(
                            "CustomResourceDefinition {}: {e}",
                            name.unwrap_or("?")
                        ));
                    }
                }
            }
            let kinds = (!crds.is_empty()).then(|| {
                let builtin = kanon_schema::Schema::builtin().ok()?;
                let custom =
                    kanon_schema::Schema::from_custom_resources(builtin, &resources).ok()?;
                Some(kanon_schema::Kinds::with_custom(builtin, Arc::new(custom)))
            });
            CustomKinds {
                kinds: kinds.flatten(),
                problems,
            }
        })
    }

    /// Number of objects held.
    pub fn len(&self) -> usize {
        self.objects.len()
    }

    /// Whether the store is empty.
    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    /// The object with this identity, if held.
    pub fn object(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Arc<Value>> {
        let key = (
            api_version.to_string(),
            kind.to_string(),
            namespace.map(str::to_string),
            name.to_string(),
        );
        self.objects.get(&key).cloned()
    }

    /// The objects of a type in a namespace (`None`: in every namespace and none), in a stable
    /// order.
    pub fn objects(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
    ) -> Vec<Arc<Value>> {
        let mut found: Vec<(&ObjectKey, &Arc<Value>)> = self
            .objects
            .iter()
            .filter(|((a, k, ns, _), _)| {
                a == api_version && k == kind && (namespace.is_none() || ns.as_deref() == namespace)
            })
            .collect();
        found.sort_by(|a, b| a.0.cmp(b.0));
        found.into_iter().map(|(_, v)| v.clone()).collect()
    }
}

impl Lookup for ObjectStore {
    fn get<'a>(
        &'a self,
        query: ObjectQuery<'a>,
        name: &'a str,
    ) -> LookupFuture<'a, Option<Arc<Value>>> {
        ready(Ok(self.object(
            query.api_version,
            query.kind,
            query.namespace,
            name,
        )))
    }

    fn list<'a>(&'a self, query: ObjectQuery<'a>) -> LookupFuture<'a, Vec<Arc<Value>>> {
        let mut found = self.objects(query.api_version, query.kind, query.namespace);
        if let Some(own) = query.confined_to {
            found.retain(|o| {
                o.pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .is_none_or(|ns| ns.is_empty() || ns == own)
            });
        }
        ready(Ok(found))
    }

    fn kinds(&self) -> Option<kanon_schema::Kinds> {
        self.custom_kinds()
    }
}
