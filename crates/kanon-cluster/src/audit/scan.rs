//! Reading what exists, a page at a time: which kinds the validate policies need read, each
//! kind's objects in pages (`limit`/`continue`) at a bounded rate, and each object judged by the
//! engine as the CREATE that made it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use kanon_api::Operation;
use kanon_engine::ProgramHost;
use kanon_engine::{Deadline, Evaluation, Finding, Lookup, PolicySet, WebhookKind, Workload};
use kube::api::ListParams;
use kube::core::ApiResource;
use kube::discovery::{self, Scope};
use kube::{Client, Discovery};
use serde_json::Value;

use super::AuditError;
use super::book::{KindKey, Lineage, MadeBy, Subject};
use super::pace::{CpuBudget, Pacer};
use crate::documents::{self, BoundedList};

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
    // In this order a workload's kind is read before the kinds its controller makes (apps/v1
    // Deployment, ReplicaSet, then v1 Pod; batch/v1 CronJob, then Job): what is made from a
    // workload is compared with what the workload was found to be.
    found.sort_by(|a, b| a.key.cmp(&b.key));
    (found, problems)
}

/// Where `object` stands among workloads as the policies of `set` judge it: when it is a
/// workload, the policies that judge its pod template; when its controller made it from the
/// controller's pod template, that workload and the policies that judge both alike (the
/// workload's template, and the object as a Pod or by its own template).
pub fn lineage(set: &PolicySet, object: &Value) -> Lineage {
    let text = |pointer: &str| object.pointer(pointer).and_then(Value::as_str);
    let (Some(api_version), Some(kind)) = (text("/apiVersion"), text("/kind")) else {
        return Lineage::default();
    };
    let own = Workload::of(api_version, kind);
    let judging = |workload: &Workload, also: Option<&Workload>| -> Arc<[Arc<str>]> {
        set.policies()
            .iter()
            .filter(|p| p.reaches_template_of(workload))
            .filter(|p| also.is_none_or(|also| p.reaches_template_of(also)))
            .map(|p| p.label.clone())
            .collect()
    };
    let template = own.map(|own| judging(own, None)).unwrap_or_default();
    let made_by = kanon_engine::made_from(object).and_then(|(workload, name, uid)| {
        let policies = judging(workload, own);
        (!policies.is_empty()).then(|| MadeBy {
            kind: KindKey::new(workload.api_version, workload.kind),
            name: name.to_string(),
            uid: uid.to_string(),
            policies,
        })
    });
    Lineage { template, made_by }
}

/// One page of a kind's objects.
#[derive(Debug)]
pub struct Page {
    /// The objects, with `apiVersion` and `kind` set and without managed fields.
    pub objects: Vec<Value>,
    /// The token of the next page; `None`: this was the last.
    pub next: Option<String>,
}

/// The most bytes one object's response may take: a page of one object is read up to this even
/// when the page bound is lower. The apiserver stores no object near it (etcd takes 1.5 MiB a
/// request by default, kube-apiserver 3 MiB a body).
pub const MAX_OBJECT_BYTES: usize = 8 * 1024 * 1024;

/// How many objects the next LIST of a kind asks for: `page_size` at most, fewer when its
/// objects are large, so that a page's response stays within `page_bytes`.
#[derive(Debug, Clone)]
pub struct PageSizer {
    page_size: u32,
    page_bytes: usize,
    limit: u32,
}

impl PageSizer {
    /// Pages of at most `page_size` objects and `page_bytes` bytes of response; the first asks
    /// for `page_size`.
    pub fn new(page_size: u32, page_bytes: usize) -> Self {
        let page_size = page_size.max(1);
        PageSizer {
            page_size,
            page_bytes: page_bytes.max(1),
            limit: page_size,
        }
    }

    /// The objects the next LIST asks for.
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// The most bytes the next response may take: the page bound, or for a page of one object
    /// [`MAX_OBJECT_BYTES`] if more.
    pub fn bound(&self) -> usize {
        if self.limit == 1 {
            self.page_bytes.max(MAX_OBJECT_BYTES)
        } else {
            self.page_bytes
        }
    }

    /// A page of `objects` took `bytes`: the next asks for as many objects of that size as half
    /// the bound holds (the other half for objects larger than these), `page_size` at most.
    pub fn read(&mut self, objects: usize, bytes: usize) {
        if objects == 0 {
            return;
        }
        let each = bytes.div_ceil(objects).max(1);
        let fits = (self.page_bytes / 2) / each;
        self.limit = u32::try_from(fits)
            .unwrap_or(u32::MAX)
            .clamp(1, self.page_size);
    }

    /// A response was longer than the bound, `fitted` whole objects within it: the same page is
    /// asked for again with that many (fewer than before). `false` when the page was one object
    /// already: that object cannot be read.
    pub fn too_large(&mut self, fitted: usize) -> bool {
        if self.limit == 1 {
            return false;
        }
        let fitted = u32::try_from(fitted).unwrap_or(u32::MAX);
        self.limit = fitted.clamp(1, self.limit - 1);
        true
    }
}

/// Reads kinds a page at a time, paced, each page's response within a bound of bytes.
pub struct Lister {
    client: Client,
    page_size: u32,
    page_bytes: usize,
    pacer: Pacer,
    budget: CpuBudget,
    /// Each kind's page size, as its objects' size makes it.
    sizers: HashMap<KindKey, PageSizer>,
}

impl Lister {
    /// A lister reading at most `page_size` objects and `page_bytes` bytes of response per
    /// request (fewer objects when they are large), at most `qps` requests per second, and,
    /// before each, resting as long as `budget` asks for the work since the last.
    pub fn new(
        client: Client,
        page_size: u32,
        page_bytes: usize,
        qps: f64,
        budget: CpuBudget,
    ) -> Self {
        Lister {
            client,
            page_size,
            page_bytes,
            pacer: Pacer::new(qps),
            budget,
            sizers: HashMap::new(),
        }
    }

    /// The page of `kind` at `token` (`None`: the first). A page whose response would pass the
    /// bound is asked for again with fewer objects. An expired token is
    /// [`AuditError::Expired`]: the kind must be read again from its start.
    pub async fn page(
        &mut self,
        kind: &AuditKind,
        token: Option<&str>,
    ) -> Result<Page, AuditError> {
        let (page_size, page_bytes) = (self.page_size, self.page_bytes);
        let mut sizer = self
            .sizers
            .remove(&kind.key)
            .unwrap_or_else(|| PageSizer::new(page_size, page_bytes));
        let page = self.page_sized(kind, token, &mut sizer).await;
        self.sizers.insert(kind.key.clone(), sizer);
        page
    }

    async fn page_sized(
        &mut self,
        kind: &AuditKind,
        token: Option<&str>,
        sizer: &mut PageSizer,
    ) -> Result<Page, AuditError> {
        loop {
            self.budget.rest().await;
            self.pacer.wait().await;
            let mut params = ListParams::default().limit(sizer.limit());
            if let Some(token) = token {
                params = params.continue_token(token);
            }
            let bound = sizer.bound();
            let listed = documents::list_within(&self.client, &kind.resource, None, &params, bound)
                .await
                .map_err(|error| match &error {
                    kube::Error::Api(status) if status.code == 410 => AuditError::Expired {
                        kind: kind.key.to_string(),
                    },
                    _ => AuditError::List {
                        kind: kind.key.to_string(),
                        message: crate::apiserver_error::describe(&error),
                    },
                })?;
            match listed {
                BoundedList::Page {
                    objects,
                    next,
                    bytes,
                } => {
                    sizer.read(objects.len(), bytes);
                    return Ok(Page { objects, next });
                }
                BoundedList::TooLarge { fitted } => {
                    if !sizer.too_large(fitted) {
                        return Err(AuditError::List {
                            kind: kind.key.to_string(),
                            message: format!("an object takes more than {bound} bytes"),
                        });
                    }
                    tracing::debug!(kind = %kind.key, limit = sizer.limit(), "an audit page over its bytes is read again with fewer objects");
                }
            }
        }
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
        self.page_judged(set, objects, |subject, _, findings| each(subject, findings))
            .await
    }

    /// [`Judge::page`], handing `each` the [`lineage`] of each object too.
    pub async fn page_judged(
        &self,
        set: &Arc<PolicySet>,
        objects: Vec<Value>,
        mut each: impl FnMut(&Subject, &Lineage, Vec<Finding>),
    ) {
        for object in objects {
            let Some(subject) = Subject::of(&object) else {
                continue;
            };
            let lineage = lineage(set, &object);
            // As a review is bounded by its timeout: policies not run by then fail under
            // their failure policy (an error finding), and an evaluation that ignores even
            // that (a lookup that never answers) is given up.
            let until = std::time::Instant::now() + self.timeout;
            // What exists is judged whoever wrote it: its owners decide alone.
            let evaluation = Evaluation::new(self.lookup)
                .with_programs(self.programs)
                .with_owner_trust(kanon_engine::OwnerTrust::Always)
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
                Ok(Ok(findings)) => each(&subject, &lineage, findings),
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

    #[test]
    fn pages_hold_fewer_objects_when_objects_are_large() {
        const MIB: usize = 1024 * 1024;
        let mut sizer = PageSizer::new(500, 8 * MIB);
        assert_eq!((sizer.limit(), sizer.bound()), (500, 8 * MIB));
        // 500 ConfigMaps of 900 KiB: the first response passes 8 MiB after 9 objects.
        assert!(sizer.too_large(9));
        assert_eq!(sizer.limit(), 9);
        // Read at that size, the next pages hold what half the bound holds.
        sizer.read(9, 9 * 900 * 1024);
        assert_eq!(sizer.limit(), 4);
        // Small objects again: back to the page size, never above it.
        sizer.read(4, 4 * 2048);
        assert_eq!(sizer.limit(), 500);
        // Not even one object fitted: one at a time, read up to an object's bound.
        assert!(sizer.too_large(0));
        assert_eq!((sizer.limit(), sizer.bound()), (1, MAX_OBJECT_BYTES));
        assert!(
            !sizer.too_large(0),
            "one object over its bound cannot be read"
        );
        // Always fewer than the page that did not fit.
        let mut sizer = PageSizer::new(10, MIB);
        assert!(sizer.too_large(50));
        assert_eq!(sizer.limit(), 9);
        // An empty page says nothing of the objects' size.
        sizer.read(0, 100);
        assert_eq!(sizer.limit(), 9);
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

    fn compiled(name: &str, selectors: Value) -> kanon_engine::CompiledPolicy {
        kanon_engine::compile_document(&json!({
            "apiVersion": "policy.kanon.dev/v1alpha1", "kind": "ClusterValidatePolicy",
            "metadata": {"name": name},
            "spec": {
                "resourceSelectors": selectors,
                "validateRules": [{"cel": {"validations": [{"expression": "true"}]}}],
            },
        }))
        .expect("a valid policy")
    }

    fn made(api_version: &str, kind: &str, owner: (&str, &str)) -> Value {
        json!({
            "apiVersion": api_version, "kind": kind,
            "metadata": {"name": "child", "namespace": "shop", "ownerReferences": [{
                "apiVersion": owner.0, "kind": owner.1, "name": "parent", "uid": "u-1",
                "controller": true,
            }]},
        })
    }

    fn labels(policies: &[Arc<str>]) -> Vec<&str> {
        policies.iter().map(|p| &**p).collect()
    }

    #[test]
    fn an_objects_lineage_names_the_policies_that_judge_it_as_its_workloads_template() {
        let set = PolicySet::build(vec![
            // Pods, and so the templates of every workload.
            compiled("pods", json!([{"apiVersion": "v1", "kind": "Pod"}])),
            // Pods, and ReplicaSets themselves: a ReplicaSet's findings are its own.
            compiled(
                "pods-and-replicasets",
                json!([{"apiVersion": "v1", "kind": "Pod"},
                       {"apiVersion": "apps/v1", "kind": "ReplicaSet"}]),
            ),
            compiled("config", json!([{"apiVersion": "v1", "kind": "ConfigMap"}])),
        ])
        .expect("a set");
        let pods = "ClusterValidatePolicy/pods";
        let both = "ClusterValidatePolicy/pods-and-replicasets";

        let pod = lineage(&set, &made("v1", "Pod", ("apps/v1", "ReplicaSet")));
        assert!(pod.template.is_empty());
        let by = pod.made_by.expect("made by its ReplicaSet");
        assert_eq!(by.kind, KindKey::new("apps/v1", "ReplicaSet"));
        assert_eq!((by.name.as_str(), by.uid.as_str()), ("parent", "u-1"));
        assert_eq!(labels(&by.policies), [pods]);

        let replica_set = lineage(
            &set,
            &made("apps/v1", "ReplicaSet", ("apps/v1", "Deployment")),
        );
        assert_eq!(labels(&replica_set.template), [pods]);
        let by = replica_set.made_by.expect("made by its Deployment");
        assert_eq!(labels(&by.policies), [pods]);

        let deployment = lineage(
            &set,
            &json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}}),
        );
        assert_eq!(labels(&deployment.template), [pods, both]);
        assert!(deployment.made_by.is_none());
        // A Pod of a ReplicationController, whose template kanon does not judge.
        let pod = lineage(&set, &made("v1", "Pod", ("v1", "ReplicationController")));
        assert_eq!(pod, Lineage::default());
    }

    #[test]
    fn a_workloads_kind_is_read_before_the_kinds_its_controller_makes() {
        for (owner, kind) in [
            (("apps/v1", "Deployment"), ("apps/v1", "ReplicaSet")),
            (("apps/v1", "ReplicaSet"), ("v1", "Pod")),
            (("apps/v1", "StatefulSet"), ("v1", "Pod")),
            (("apps/v1", "DaemonSet"), ("v1", "Pod")),
            (("batch/v1", "Job"), ("v1", "Pod")),
            (("batch/v1", "CronJob"), ("batch/v1", "Job")),
        ] {
            assert!(kanon_engine::made_from(&made(kind.0, kind.1, owner)).is_some());
            // `kinds` sorts by this.
            assert!(KindKey::new(owner.0, owner.1) < KindKey::new(kind.0, kind.1));
        }
    }
}
