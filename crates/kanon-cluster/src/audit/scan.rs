//! Reading what exists, a page at a time: which kinds the validate policies need read, each
//! kind's objects in pages (`limit`/`continue`) at a bounded rate, and each object judged by the
//! engine as the CREATE that made it.

use std::sync::Arc;
use std::time::Duration;

use kanon_api::Operation;
use kanon_engine::host::ProgramHost;
use kanon_engine::{Evaluation, Finding, Lookup, PolicySet, WebhookKind};
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::{self, Scope};
use kube::{Client, Discovery};
use serde_json::Value;
use tokio::time::Instant;

use super::AuditError;
use super::book::{KindKey, Subject};

/// A kind the audit reads, as the apiserver serves it.
#[derive(Debug, Clone)]
pub struct AuditKind {
    /// Its `apiVersion` and `kind`.
    pub key: KindKey,
    /// Where it is served.
    pub resource: ApiResource,
    /// Whether its objects live in namespaces.
    pub namespaced: bool,
}

/// The kinds whose existing objects the validate policies of `set` judge at CREATE, sorted,
/// found through discovery; a policy that selects every type makes every listable kind one.
/// A kind the apiserver does not serve is left out, with the problem returned.
pub async fn kinds(client: &Client, set: &PolicySet) -> (Vec<AuditKind>, Vec<AuditError>) {
    let targets = set.targets(WebhookKind::Validating);
    let mut found = Vec::new();
    let mut problems = Vec::new();
    if targets.every_type.contains(&Operation::Create) {
        match Discovery::new(client.clone()).run().await {
            Ok(discovery) => {
                for group in discovery.groups() {
                    for (resource, capabilities) in group.recommended_resources() {
                        if !capabilities.supports_operation(discovery::verbs::LIST)
                            || resource.plural.contains('/')
                        {
                            continue;
                        }
                        found.push(AuditKind {
                            key: KindKey::new(resource.api_version.clone(), resource.kind.clone()),
                            namespaced: capabilities.scope == Scope::Namespaced,
                            resource,
                        });
                    }
                }
            }
            Err(error) => problems.push(AuditError::Discovery {
                kind: "every kind".to_string(),
                message: error.to_string(),
            }),
        }
    }
    for ((api_version, kind), operations) in &targets.types {
        if !operations.contains(&Operation::Create)
            || found
                .iter()
                .any(|k| k.key.api_version == *api_version && k.key.kind == *kind)
        {
            continue;
        }
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let gvk = GroupVersionKind::gvk(group, version, kind);
        match discovery::pinned_kind(client, &gvk).await {
            Ok((resource, capabilities)) => found.push(AuditKind {
                key: KindKey::new(api_version.clone(), kind.clone()),
                namespaced: capabilities.scope == Scope::Namespaced,
                resource,
            }),
            Err(error) => problems.push(AuditError::Discovery {
                kind: format!("{api_version}/{kind}"),
                message: error.to_string(),
            }),
        }
    }
    found.sort_by(|a, b| a.key.cmp(&b.key));
    (found, problems)
}

/// Spaces requests at most `qps` per second (none when 0).
#[derive(Debug)]
pub struct Pacer {
    interval: Option<Duration>,
    next: Option<Instant>,
}

impl Pacer {
    /// A pacer of `qps` requests per second; 0: unpaced.
    pub fn new(qps: f64) -> Self {
        let interval = (qps > 0.0 && qps.is_finite()).then(|| Duration::from_secs_f64(1.0 / qps));
        Pacer {
            interval,
            next: None,
        }
    }

    /// Waits until the next request may go.
    pub async fn wait(&mut self) {
        let Some(interval) = self.interval else {
            return;
        };
        let now = Instant::now();
        if let Some(next) = self.next
            && next > now
        {
            tokio::time::sleep_until(next).await;
        }
        self.next = Some(Instant::now() + interval);
    }
}

/// One page of a kind's objects.
#[derive(Debug)]
pub struct Page {
    /// The objects, with `apiVersion` and `kind` set and without managed fields.
    pub objects: Vec<Value>,
    /// The token of the next page; `None`: this was the last.
    pub next: Option<String>,
}

/// Reads kinds a page at a time, paced.
pub struct Lister {
    client: Client,
    page_size: u32,
    pacer: Pacer,
}

impl Lister {
    /// A lister reading `page_size` objects per request, at most `qps` requests per second.
    pub fn new(client: Client, page_size: u32, qps: f64) -> Self {
        Lister {
            client,
            page_size: page_size.max(1),
            pacer: Pacer::new(qps),
        }
    }

    /// The page of `kind` at `token` (`None`: the first). An expired token is
    /// [`AuditError::Expired`]: the kind must be read again from its start.
    pub async fn page(
        &mut self,
        kind: &AuditKind,
        token: Option<&str>,
    ) -> Result<Page, AuditError> {
        self.pacer.wait().await;
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &kind.resource);
        let mut params = ListParams::default().limit(self.page_size);
        if let Some(token) = token {
            params = params.continue_token(token);
        }
        let list = api.list(&params).await.map_err(|error| match &error {
            kube::Error::Api(status) if status.code == 410 => AuditError::Expired {
                kind: kind.key.to_string(),
            },
            _ => AuditError::List {
                kind: kind.key.to_string(),
                message: error.to_string(),
            },
        })?;
        let next = list.metadata.continue_.filter(|t| !t.is_empty());
        let objects = list
            .items
            .into_iter()
            .filter_map(|object| document(object, &kind.resource))
            .collect();
        Ok(Page { objects, next })
    }
}

/// The object as the engine judges it: its JSON with its type set (list items lack it), without
/// managed fields (which only cost memory here).
fn document(object: DynamicObject, resource: &ApiResource) -> Option<Value> {
    let mut value = serde_json::to_value(object).ok()?;
    let map = value.as_object_mut()?;
    map.insert(
        "apiVersion".into(),
        Value::from(resource.api_version.clone()),
    );
    map.insert("kind".into(), Value::from(resource.kind.clone()));
    if let Some(metadata) = map.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.remove("managedFields");
    }
    Some(value)
}

/// How objects are judged: the lookups and program host admission uses, at a time.
#[derive(Clone, Copy)]
pub struct Judge<'a> {
    /// The lookups policies make.
    pub lookup: &'a dyn Lookup,
    /// Where hand-written programs run (`None`: in the calling thread).
    pub programs: Option<&'a dyn ProgramHost>,
    /// The time, in Unix seconds (exceptions' expiry).
    pub now: i64,
}

impl Judge<'_> {
    /// Judges each object of a page with `set`, handing its findings to `each`; an object that
    /// cannot be identified is skipped. Yields between objects, so that admission requests on
    /// the same runtime are not kept waiting by a long page.
    pub async fn page(
        &self,
        set: &Arc<PolicySet>,
        objects: Vec<Value>,
        mut each: impl FnMut(&Subject, Vec<Finding>),
    ) {
        let evaluation = Evaluation::new(self.lookup)
            .with_programs(self.programs)
            .with_now(Some(self.now));
        for object in objects {
            let Some(subject) = Subject::of(&object) else {
                continue;
            };
            match set.audit_in(object, &evaluation).await {
                Ok(findings) => each(&subject, findings),
                Err(error) => {
                    tracing::debug!(%error, object = %subject.name, "an object the audit cannot judge")
                }
            }
            tokio::task::yield_now().await;
        }
    }
}
