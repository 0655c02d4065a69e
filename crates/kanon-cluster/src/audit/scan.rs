//! Reading what exists, a page at a time: which kinds the validate policies need read, each
//! kind's objects in pages (`limit`/`continue`) at a bounded rate, and each object judged by the
//! engine as the CREATE that made it.

use std::sync::Arc;
use std::time::Duration;

use kanon_api::Operation;
use kanon_engine::ProgramHost;
use kanon_engine::{Deadline, Evaluation, Finding, Lookup, PolicySet, WebhookKind};
use kube::api::ListParams;
use kube::core::ApiResource;
use kube::discovery::{self, Scope};
use kube::{Client, Discovery};
use serde_json::Value;

use super::AuditError;
use super::book::{KindKey, Subject};
use super::pace::{CpuBudget, Pacer};
use crate::documents;

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
        match crate::discovery::served_type(client, api_version, kind).await {
            Ok(served) => found.push(AuditKind {
                key: KindKey::new(api_version.clone(), kind.clone()),
                namespaced: served.namespaced,
                resource: served.resource,
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
    budget: CpuBudget,
}

impl Lister {
    /// A lister reading `page_size` objects per request, at most `qps` requests per second,
    /// and, before each, resting as long as `budget` asks for the work since the last.
    pub fn new(client: Client, page_size: u32, qps: f64, budget: CpuBudget) -> Self {
        Lister {
            client,
            page_size: page_size.max(1),
            pacer: Pacer::new(qps),
            budget,
        }
    }

    /// The page of `kind` at `token` (`None`: the first). An expired token is
    /// [`AuditError::Expired`]: the kind must be read again from its start.
    pub async fn page(
        &mut self,
        kind: &AuditKind,
        token: Option<&str>,
    ) -> Result<Page, AuditError> {
        self.budget.rest().await;
        self.pacer.wait().await;
        let mut params = ListParams::default().limit(self.page_size);
        if let Some(token) = token {
            params = params.continue_token(token);
        }
        let (objects, next) = documents::list(&self.client, &kind.resource, None, &params)
            .await
            .map_err(|error| match &error {
                kube::Error::Api(status) if status.code == 410 => AuditError::Expired {
                    kind: kind.key.to_string(),
                },
                _ => AuditError::List {
                    kind: kind.key.to_string(),
                    message: error.to_string(),
                },
            })?;
        Ok(Page { objects, next })
    }
}

/// How long one object's evaluation may take, as a review's default timeout.
pub const OBJECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How objects are judged: the lookups and program host admission uses, at a time.
#[derive(Clone, Copy)]
pub struct Judge<'a> {
    /// The lookups policies make.
    pub lookup: &'a dyn Lookup,
    /// Where hand-written programs run (`None`: in the calling thread).
    pub programs: Option<&'a dyn ProgramHost>,
    /// The time, in Unix seconds (exceptions' expiry).
    pub now: i64,
    /// How long one object's evaluation may take ([`OBJECT_TIMEOUT`]); half as long again
    /// and it is given up.
    pub timeout: Duration,
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
        for object in objects {
            let Some(subject) = Subject::of(&object) else {
                continue;
            };
            // As a review is bounded by its timeout: policies not run by then fail under
            // their failure policy (an error finding), and an evaluation that ignores even
            // that (a lookup that never answers) is given up.
            let until = std::time::Instant::now() + self.timeout;
            let evaluation = Evaluation::new(self.lookup)
                .with_programs(self.programs)
                .with_now(Some(self.now))
                .with_deadline(Some(Deadline::new(move || {
                    std::time::Instant::now() >= until
                })));
            let judged = tokio::time::timeout(
                self.timeout + self.timeout / 2,
                set.audit_in(object, &evaluation),
            )
            .await;
            match judged {
                Ok(Ok(findings)) => each(&subject, findings),
                Ok(Err(error)) => {
                    tracing::debug!(%error, object = %subject.name, "an object the audit cannot judge")
                }
                Err(_) => tracing::warn!(
                    kind = %subject.kind,
                    namespace = subject.namespace.as_deref().unwrap_or(""),
                    name = %subject.name,
                    "the audit gave up judging an object: its evaluation did not end"
                ),
            }
            tokio::task::yield_now().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kanon_engine::{HttpAnswer, HttpCall, LookupFuture, ObjectQuery};
    use serde_json::json;

    /// A cluster whose every read hangs.
    struct Hanging;

    impl Lookup for Hanging {
        fn get<'a>(
            &'a self,
            _: ObjectQuery<'a>,
            _: &'a str,
        ) -> LookupFuture<'a, Option<Arc<Value>>> {
            Box::pin(std::future::pending())
        }

        fn list<'a>(&'a self, _: ObjectQuery<'a>) -> LookupFuture<'a, Vec<Arc<Value>>> {
            Box::pin(std::future::pending())
        }

        fn http<'a>(&'a self, _: &'a HttpCall) -> LookupFuture<'a, HttpAnswer> {
            Box::pin(std::future::pending())
        }
    }

    #[tokio::test]
    async fn an_object_whose_lookup_hangs_is_given_up_and_the_next_is_judged() {
        let policy = json!({
            "apiVersion": "policy.kanon.dev/v1alpha1", "kind": "ClusterValidatePolicy",
            "metadata": {"name": "needs-config"},
            "spec": {
                "resourceSelectors": [{"apiVersion": "v1", "kind": "ConfigMap", "namespace": "slow"}],
                "validateRules": [{"cel": {
                    "references": {"config": {"from": "k8s", "k8s": {"apiVersion": "v1",
                        "kind": "ConfigMap", "namespace": "kanon-system", "name": "settings"}}},
                    "validations": [{"expression": "has(references.config)"}]}}],
            },
        });
        let compiled = kanon_engine::compile_document(&policy).expect("a valid policy");
        let set = Arc::new(PolicySet::build(vec![compiled]).expect("one policy"));
        let object = |namespace: &str, name: &str| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": name, "namespace": namespace}})
        };
        let judge = Judge {
            lookup: &Hanging,
            programs: None,
            now: 0,
            timeout: Duration::from_millis(100),
        };
        let mut judged = Vec::new();
        let started = std::time::Instant::now();
        judge
            .page(
                &set,
                vec![object("slow", "a"), object("fast", "b")],
                |subject, findings| {
                    judged.push((subject.name.clone(), findings.len()));
                },
            )
            .await;
        assert!(started.elapsed() < Duration::from_secs(5));
        assert_eq!(judged, vec![("b".to_string(), 0)]);
    }
}
