//! The custom kinds the cluster serves: a watch of CustomResourceDefinitions, each converted
//! to its kinds and types (`kanon_schema::CustomResource`), and the [`Kinds`] (built-in and
//! custom) that policies are checked against, replaced whenever what the CRDs serve changes.
//!
//! Optional by design: if the watch is forbidden (kanon's role lacks `list`/`watch` on
//! `customresourcedefinitions.apiextensions.k8s.io`) or fails, it says so once in the log,
//! policies are checked against the built-in kinds (and the custom ones known so far) only,
//! and it tries again: a forbidden watch is not retried until a SelfSubjectAccessReview, made
//! every minute, says it is allowed, so that it fills neither the apiserver's audit log nor
//! kanon's.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use kanon_schema::{CustomResource, Kinds, Schema};
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;

use crate::metrics::ClusterMetrics;
use crate::permissions::{self, Permission};

/// How long the first listing of CRDs may take before the kinds count as settled anyway, so
/// that a slow or hanging listing delays policy statuses by this much at most.
const SETTLE_LIMIT: Duration = Duration::from_secs(10);

/// What the custom kinds are now.
#[derive(Debug, Clone)]
struct Snapshot {
    /// `None` when not even the built-in schema loads (a defect of the build): policies are
    /// then compiled without kind checks.
    kinds: Option<Kinds>,
    /// The first listing of CRDs is complete, or the watch has failed, or [`SETTLE_LIMIT`] has
    /// passed: nothing more is to be waited for.
    settled: bool,
}

/// The kinds known in the cluster, built-in and custom; cheap to clone (clones share them).
#[derive(Debug, Clone)]
pub struct CustomKinds {
    snapshot: watch::Receiver<Snapshot>,
}

impl CustomKinds {
    /// Starts watching CustomResourceDefinitions on the current runtime. Until the first
    /// listing completes (or the watch fails, or 10 s pass) only the built-in kinds are known
    /// and [`is_settled`](Self::is_settled) is false.
    pub fn start(client: Client, metrics: ClusterMetrics) -> Self {
        let builtin = Schema::builtin().ok();
        let (sender, snapshot) = watch::channel(Snapshot {
            kinds: builtin.map(Kinds::new),
            settled: false,
        });
        let Some(builtin) = builtin else {
            tracing::error!(
                "the built-in Kubernetes schema does not load: kinds and paths are not checked"
            );
            sender.send_replace(Snapshot {
                kinds: None,
                settled: true,
            });
            return CustomKinds { snapshot };
        };
        let sender = Arc::new(sender);
        let limit = sender.clone();
        tokio::spawn(async move {
            tokio::time::sleep(SETTLE_LIMIT).await;
            limit.send_if_modified(|snapshot| {
                let late = !snapshot.settled;
                if late {
                    tracing::warn!(
                        "the CustomResourceDefinitions are not listed after {}s: policy \
                         statuses are written without custom kinds' warnings until they are",
                        SETTLE_LIMIT.as_secs()
                    );
                    snapshot.settled = true;
                }
                late
            });
        });
        tokio::spawn(watch_crds(client, metrics, sender, builtin));
        CustomKinds { snapshot }
    }

    /// The kinds known now (`None` only if the built-in schema does not load).
    pub fn current(&self) -> Option<Kinds> {
        self.snapshot.borrow().kinds.clone()
    }

    /// Whether the first listing of CRDs is complete, or has failed, is forbidden or is taking
    /// longer than 10 s: statuses computed before then may lack custom kinds' warnings.
    pub fn is_settled(&self) -> bool {
        self.snapshot.borrow().settled
    }

    /// Waits until the kinds change or settle; then [`current`](Self::current) has the new
    /// ones. Never returns once the watch task has ended (with the runtime).
    pub async fn changed(&mut self) {
        if self.snapshot.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// How often a forbidden watch checks again whether it is allowed now.
const RECHECK: Duration = Duration::from_secs(60);

/// Whether kanon may list and watch CRDs (a SelfSubjectAccessReview each, which, unlike a
/// forbidden watch retrying, logs nothing); `None` when the check itself failed.
async fn permitted(client: &Client) -> Option<bool> {
    let needed = ["list", "watch"].map(|verb| Permission {
        verb,
        group: "apiextensions.k8s.io",
        resource: "customresourcedefinitions",
        subresource: None,
        namespace: None,
        name: None,
        purpose: "checking policies against custom resources' schemas",
    });
    match permissions::missing(client, &needed).await {
        Ok(missing) => Some(missing.is_empty()),
        Err(error) => {
            tracing::debug!(%error, "could not check the permission to watch CRDs");
            None
        }
    }
}

/// Whether a watch error is the apiserver's 403.
fn is_forbidden(error: &watcher::Error) -> bool {
    let code = match error {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status)) => status.code,
        watcher::Error::WatchError(status) => status.code,
        _ => return false,
    };
    code == 403
}

/// Watches CRDs for as long as the runtime runs, keeping `sender`'s kinds current. While kanon
/// may not (its role lacks the permission), it says so once and checks again every
/// [`RECHECK`]; other failures are said once per outage and retried with kube-runtime's
/// default backoff (up to 30 s: custom kinds only feed warnings).
async fn watch_crds(
    client: Client,
    metrics: ClusterMetrics,
    sender: Arc<watch::Sender<Snapshot>>,
    builtin: &'static Schema,
) {
    let gvk = GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition");
    let api: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(&gvk, "customresourcedefinitions"),
    );
    let mut set = CrdSet::default();
    let mut forbidden = false;
    loop {
        if permitted(&client).await == Some(false) {
            refused(&mut forbidden, &sender);
            tokio::time::sleep(RECHECK).await;
            continue;
        }
        if forbidden {
            tracing::info!("kanon may now watch CustomResourceDefinitions");
            forbidden = false;
        }
        let mut events = watcher(api.clone(), watcher::Config::default())
            .default_backoff()
            .boxed();
        let mut failing = false;
        while let Some(event) = events.next().await {
            let mut outcome = Outcome::default();
            let mut handle = |event: Result<watcher::Event<DynamicObject>, watcher::Error>| {
                match event {
                    Ok(event) => {
                        // `Init` starts every attempt to list, failed ones included.
                        if failing && !matches!(event, watcher::Event::Init) {
                            tracing::info!("the CustomResourceDefinition watch works again");
                            failing = false;
                        }
                        outcome.merge(set.apply(event));
                    }
                    Err(error) => {
                        metrics.watch_error("CustomResourceDefinition");
                        outcome.failed = true;
                        if is_forbidden(&error) {
                            // Said (once) by the permission check the loop goes back to.
                            outcome.forbidden = true;
                        } else if !failing {
                            let error = crate::apiserver_error::describe_watch(&error);
                            tracing::warn!(
                                %error,
                                "the CustomResourceDefinition watch failed: policies are \
                                 checked against the kinds known so far; retrying"
                            );
                            failing = true;
                        } else {
                            tracing::debug!(%error, "the CustomResourceDefinition watch failed again");
                        }
                    }
                }
            };
            handle(event);
            // Everything already waiting joins this batch: one new set of kinds per batch.
            while let Some(Some(event)) = events.next().now_or_never() {
                handle(event);
            }
            let settles = outcome.listed || outcome.failed;
            if outcome.changed {
                let kinds = set.kinds(builtin);
                tracing::info!(
                    crds = set.len(),
                    "custom kinds changed; policies' warnings follow"
                );
                sender.send_modify(|snapshot| {
                    snapshot.kinds = Some(kinds);
                    snapshot.settled |= settles;
                });
            } else if settles {
                sender.send_if_modified(|snapshot| !std::mem::replace(&mut snapshot.settled, true));
            }
            if outcome.forbidden {
                break;
            }
        }
        // Refused although the review allowed it (or could not tell): not before RECHECK again.
        refused(&mut forbidden, &sender);
        tokio::time::sleep(RECHECK).await;
    }
}

/// Says once that kanon may not watch CRDs (`forbidden` remembers it was said), and settles the
/// kinds: there is no listing to wait for.
fn refused(forbidden: &mut bool, sender: &watch::Sender<Snapshot>) {
    if !*forbidden {
        tracing::warn!(
            "kanon may not list and watch customresourcedefinitions.apiextensions.k8s.io: \
             policies are checked against the built-in kinds only (the chart's ClusterRole \
             grants it)"
        );
        *forbidden = true;
    }
    sender.send_if_modified(|snapshot| !std::mem::replace(&mut snapshot.settled, true));
}

/// What a batch of events did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Outcome {
    /// The kinds served changed.
    changed: bool,
    /// A listing completed.
    listed: bool,
    /// The watch failed.
    failed: bool,
    /// The watch failed because kanon may not list or watch CRDs.
    forbidden: bool,
}

impl Outcome {
    fn merge(&mut self, other: Outcome) {
        self.changed |= other.changed;
        self.listed |= other.listed;
        self.failed |= other.failed;
        self.forbidden |= other.forbidden;
    }
}

/// The cluster's CRDs, converted, by name: pure bookkeeping of watch events.
#[derive(Debug, Default)]
struct CrdSet {
    resources: BTreeMap<String, CustomResource>,
    /// Filled during a relist, swapped in when it is complete.
    relisting: Option<BTreeMap<String, CustomResource>>,
    /// CRDs that could not be read, with why (so each problem is logged once).
    unreadable: BTreeMap<String, String>,
}

impl CrdSet {
    /// Applies one watch event.
    fn apply(&mut self, event: watcher::Event<DynamicObject>) -> Outcome {
        let mut outcome = Outcome::default();
        match event {
            watcher::Event::Init => self.relisting = Some(BTreeMap::new()),
            watcher::Event::InitApply(object) => {
                if let Some(resource) = self.read(&object) {
                    self.relisting
                        .get_or_insert_with(BTreeMap::new)
                        .insert(resource.name().to_string(), resource);
                }
            }
            watcher::Event::InitDone => {
                let listed = self.relisting.take().unwrap_or_default();
                outcome.changed = listed != self.resources;
                outcome.listed = true;
                self.resources = listed;
            }
            watcher::Event::Apply(object) => {
                let name = object_name(&object);
                outcome.changed = match self.read(&object) {
                    // Status updates (conditions, stored versions) change nothing served.
                    Some(resource) if self.resources.get(&name) == Some(&resource) => false,
                    Some(resource) => {
                        self.resources.insert(name, resource);
                        true
                    }
                    None => self.resources.remove(&name).is_some(),
                };
            }
            watcher::Event::Delete(object) => {
                let name = object_name(&object);
                self.unreadable.remove(&name);
                outcome.changed = self.resources.remove(&name).is_some();
            }
        }
        outcome
    }

    /// Converts a CRD; `None` (logged once per problem) when it cannot be read.
    fn read(&mut self, object: &DynamicObject) -> Option<CustomResource> {
        let name = object_name(object);
        let converted = serde_json::to_value(object)
            .map_err(|e| e.to_string())
            .and_then(|value| CustomResource::from_crd(&value).map_err(|e| e.to_string()));
        match converted {
            Ok(resource) => {
                self.unreadable.remove(&name);
                Some(resource)
            }
            Err(message) => {
                if self.unreadable.get(&name) != Some(&message) {
                    tracing::warn!(crd = %name, "a CustomResourceDefinition left out of the custom kinds: {message}");
                    self.unreadable.insert(name, message);
                }
                None
            }
        }
    }

    /// Number of CRDs read.
    fn len(&self) -> usize {
        self.resources.len()
    }

    /// The built-in kinds with those of every CRD read.
    fn kinds(&self, builtin: &'static Schema) -> Kinds {
        match Schema::from_custom_resources(builtin, self.resources.values()) {
            Ok(custom) => Kinds::with_custom(builtin, Arc::new(custom)),
            Err(error) => {
                // Only if the built-in schema lacks ObjectMeta, which its tests rule out.
                tracing::error!(%error, "the custom kinds could not be combined; using the built-in kinds only");
                Kinds::new(builtin)
            }
        }
    }
}

fn object_name(object: &DynamicObject) -> String {
    object.metadata.name.clone().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    fn widgets(fields: Value, status: Value) -> Result<DynamicObject, serde_json::Error> {
        serde_json::from_value(json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {
                "group": "example.com",
                "names": {"kind": "Widget", "plural": "widgets"},
                "scope": "Namespaced",
                "versions": [{"name": "v1", "served": true, "storage": true, "schema": {
                    "openAPIV3Schema": {"type": "object", "properties": {
                        "spec": {"type": "object", "properties": fields}}}}}]
            },
            "status": status,
        }))
    }

    fn has_widget_field(set: &CrdSet, field: &str) -> Result<bool, Box<dyn std::error::Error>> {
        let kinds = set.kinds(Schema::builtin()?);
        let widget = kinds.kind("example.com/v1", "Widget").ok_or("no Widget")?;
        Ok(widget.resolve(&["spec", field]).found().is_some())
    }

    #[test]
    fn a_listing_then_changes_keep_the_kinds_current() -> TestResult {
        let mut set = CrdSet::default();
        assert_eq!(set.apply(watcher::Event::Init), Outcome::default());
        let size = json!({"size": {"type": "integer"}});
        set.apply(watcher::Event::InitApply(widgets(size.clone(), json!({}))?));
        let done = set.apply(watcher::Event::InitDone);
        assert!(done.changed && done.listed);
        assert!(has_widget_field(&set, "size")?);

        // A status update serves nothing new.
        let status = json!({"conditions": [{"type": "Established", "status": "True"}]});
        let outcome = set.apply(watcher::Event::Apply(widgets(size, status)?));
        assert!(!outcome.changed);

        // A new field is a change.
        let fields = json!({"size": {"type": "integer"}, "color": {"type": "string"}});
        let outcome = set.apply(watcher::Event::Apply(widgets(fields.clone(), json!({}))?));
        assert!(outcome.changed);
        assert!(has_widget_field(&set, "color")?);

        // A relist that delivers the same CRDs changes nothing; one without them removes them.
        set.apply(watcher::Event::Init);
        set.apply(watcher::Event::InitApply(widgets(fields, json!({}))?));
        assert!(!set.apply(watcher::Event::InitDone).changed);
        set.apply(watcher::Event::Init);
        assert!(set.apply(watcher::Event::InitDone).changed);
        assert!(
            set.kinds(Schema::builtin()?)
                .kind("example.com/v1", "Widget")
                .is_none()
        );
        Ok(())
    }

    #[test]
    fn a_deleted_or_unreadable_crd_serves_nothing() -> TestResult {
        let mut set = CrdSet::default();
        let fields = json!({"size": {"type": "integer"}});
        assert!(
            set.apply(watcher::Event::Apply(widgets(fields.clone(), json!({}))?))
                .changed
        );
        assert_eq!(set.len(), 1);
        // The same CRD made unreadable (its root is not an object) is dropped.
        let mut broken = widgets(fields.clone(), json!({}))?;
        broken.data["spec"]["versions"][0]["schema"]["openAPIV3Schema"] = json!({"type": "string"});
        assert!(set.apply(watcher::Event::Apply(broken.clone())).changed);
        assert_eq!(set.len(), 0);
        assert!(!set.apply(watcher::Event::Apply(broken)).changed);
        assert!(
            set.apply(watcher::Event::Apply(widgets(fields.clone(), json!({}))?))
                .changed
        );
        assert!(
            set.apply(watcher::Event::Delete(widgets(fields, json!({}))?))
                .changed
        );
        assert_eq!(set.len(), 0);
        Ok(())
    }
}
