//! kanon's webhook configurations, kept correct: the `caBundle` and the generated `rules` of
//! the entries kanon manages.
//!
//! The Helm chart owns the two objects (a MutatingWebhookConfiguration and a
//! ValidatingWebhookConfiguration of one name) and every static field of their entries: name,
//! `clientConfig` service or URL, `failurePolicy`, `timeoutSeconds`, `matchPolicy`,
//! `sideEffects`, `admissionReviewVersions`, `namespaceSelector`. So `helm uninstall` removes
//! them even when kanon is not running, and kanon never creates or deletes them: a missing
//! object is an error that says to install the chart, retried.
//!
//! kanon owns two fields of the entries it is told to manage: `clientConfig.caBundle` and
//! `rules` (for [`WebhookConfig::ca_only`] entries only the `caBundle`; their rules stay the
//! chart's). It writes them by server-side apply under the field manager [`FIELD_MANAGER`]:
//! `webhooks` is a list keyed by `name`, so the apply owns exactly those fields of those
//! entries, and a later `helm upgrade` (which does not set them) leaves them alone.
//!
//! Rules come from the policies' [`Targets`]: each `(apiVersion, kind)` is resolved through
//! discovery to its resource plural (cached; kinds the apiserver does not serve yet are left
//! out, reported, and looked up again at every sync), then laid out by [`generate_rules`]:
//! sorted and merged, so the same policies always give the same rules. Each sync reads the live
//! objects and writes only when `caBundle` or `rules` differ, with the read `resourceVersion` and
//! `uid` as preconditions: it can never create the object (an apply with a `uid` does not create
//! one), nor overwrite a change it has not seen (it reads again and compares again).
//!
//! Every replica computes the same content from the same policies and bundle: replicas do not
//! fight, and the one that finds the objects already in line writes nothing.

mod rules;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Duration;

use base64::Engine as _;
use kanon_engine::{Targets, WebhookKind};
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};

use crate::discovery::{DiscoveryError, ServedTypes};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{debug, info, warn};

pub use rules::{ALL_OPERATIONS, ResolvedType, Rule, generate_rules, needed_types};

/// The field manager of kanon's writes to its webhook configurations.
pub const FIELD_MANAGER: &str = "kanon";

/// The API group and version of webhook configurations.
const GROUP: &str = "admissionregistration.k8s.io";
const VERSION: &str = "v1";

/// How often to apply again after a conflict (someone else wrote between read and write).
const CONFLICT_RETRIES: usize = 3;
/// First and longest wait after a failed sync.
const BACKOFF_START: Duration = Duration::from_millis(500);
const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// After a change of the inputs, how long to wait for more changes before syncing (policies
/// often change in bursts).
const DEBOUNCE: Duration = Duration::from_millis(100);

/// How the `rules` of the managed entries are made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RuleMode {
    /// From the policies' targets: the apiserver calls kanon only for what some policy can
    /// select (see [`generate_rules`]).
    #[default]
    Generated,
    /// One rule for every resource, subresource and operation, whatever the policies: for
    /// operators who prefer rules that never depend on discovery (at the cost of a call for
    /// every request the namespace selector lets through).
    CatchAll,
}

/// Which configurations and entries kanon manages, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookConfig {
    /// Name of the MutatingWebhookConfiguration and of the ValidatingWebhookConfiguration.
    pub name: String,
    /// How the rules of the entries below are made.
    pub mode: RuleMode,
    /// Entries (by webhook name) of the mutating configuration that get generated rules, e.g.
    /// `["mutate.kanon.dev"]`.
    pub mutating: Vec<String>,
    /// Entries of the validating configuration that get generated rules, e.g.
    /// `["validate.kanon.dev"]`.
    pub validating: Vec<String>,
    /// Entries of the validating configuration that only get the caBundle, e.g.
    /// `["policies.kanon.dev"]`.
    pub ca_only: Vec<String>,
    /// How often to re-check even without a change (discovery of newly installed CRDs,
    /// someone else's edit). Default 60 s.
    pub resync: Duration,
}

impl Default for WebhookConfig {
    /// The configuration `kanon` with entries `mutate.kanon.dev`, `validate.kanon.dev` and
    /// (caBundle only) `policies.kanon.dev`, generated rules, resync every 60 s.
    fn default() -> Self {
        WebhookConfig {
            name: "kanon".to_string(),
            mode: RuleMode::Generated,
            mutating: vec!["mutate.kanon.dev".to_string()],
            validating: vec!["validate.kanon.dev".to_string()],
            ca_only: vec!["policies.kanon.dev".to_string()],
            resync: Duration::from_secs(60),
        }
    }
}

/// What a sync did to one configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// kanon manages no entry of it: not read, not written.
    NotManaged,
    /// Already in line: nothing written.
    Unchanged,
    /// Written (once).
    Written,
}

/// A type some policy selects that the apiserver does not serve (yet): left out of the rules.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct UnresolvedType {
    /// Its `apiVersion`.
    pub api_version: String,
    /// Its `kind`.
    pub kind: String,
    /// Why, as discovery said.
    pub reason: String,
}

/// What [`WebhookConfigurations::sync`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncReport {
    /// The MutatingWebhookConfiguration.
    pub mutating: Outcome,
    /// The ValidatingWebhookConfiguration.
    pub validating: Outcome,
    /// The types left out of the rules, sorted; looked up again at the next sync.
    pub unresolved: Vec<UnresolvedType>,
}

impl SyncReport {
    /// Whether nothing was written.
    pub fn is_unchanged(&self) -> bool {
        self.mutating != Outcome::Written && self.validating != Outcome::Written
    }
}

/// Why a sync failed. Every case is retried by [`WebhookConfigurations::run`].
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    /// The object does not exist: the chart creates it, kanon only fills it in.
    #[error(
        "the {kind} {name:?} does not exist: install the chart (or create it as the chart does); kanon only writes the caBundle and rules of its entries, it never creates the object"
    )]
    ConfigurationMissing {
        /// `MutatingWebhookConfiguration` or `ValidatingWebhookConfiguration`.
        kind: &'static str,
        /// Its name.
        name: String,
    },
    /// The object exists but lacks an entry kanon is told to manage.
    #[error(
        "the {kind} {name:?} has no webhook {webhook:?}: install or upgrade the chart so that it has this entry, or change kanon's webhook configuration options"
    )]
    EntryMissing {
        /// `MutatingWebhookConfiguration` or `ValidatingWebhookConfiguration`.
        kind: &'static str,
        /// Its name.
        name: String,
        /// The missing entry.
        webhook: String,
    },
    /// kanon's identity may not read or patch the object.
    #[error(
        "kanon may not {verb} the {kind} {name:?}: {message} (kanon needs get and patch on it; the chart's ClusterRole grants them)"
    )]
    Forbidden {
        /// `get` or `patch`.
        verb: &'static str,
        /// `MutatingWebhookConfiguration` or `ValidatingWebhookConfiguration`.
        kind: &'static str,
        /// Its name.
        name: String,
        /// The apiserver's message.
        message: String,
    },
    /// Any other failure of a request about the object.
    #[error(
        "could not {verb} the {kind} {name:?}: {}",
        crate::apiserver_error::describe(source)
    )]
    Api {
        /// `get` or `patch`.
        verb: &'static str,
        /// `MutatingWebhookConfiguration` or `ValidatingWebhookConfiguration`.
        kind: &'static str,
        /// Its name.
        name: String,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
    /// Discovery failed for a reason other than the type not being served (the apiserver
    /// unreachable, say): no rules are written rather than rules missing a type.
    #[error("could not look up {api_version}/{kind} in the apiserver's discovery: {source}")]
    Discovery {
        /// The `apiVersion` looked up.
        api_version: String,
        /// The `kind` looked up.
        kind: String,
        /// Why.
        #[source]
        source: DiscoveryError,
    },
}

fn kind_name(webhook: WebhookKind) -> &'static str {
    match webhook {
        WebhookKind::Mutating => "MutatingWebhookConfiguration",
        WebhookKind::Validating => "ValidatingWebhookConfiguration",
    }
}

fn api_resource(webhook: WebhookKind) -> ApiResource {
    let plural = match webhook {
        WebhookKind::Mutating => "mutatingwebhookconfigurations",
        WebhookKind::Validating => "validatingwebhookconfigurations",
    };
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(GROUP, VERSION, kind_name(webhook)),
        plural,
    )
}

/// What kanon writes into one entry: always the caBundle, and the rules unless `None`.
#[derive(Debug)]
struct DesiredEntry {
    rules: Option<Vec<Rule>>,
}

/// Keeps kanon's two webhook configurations in line with the policies and the CA bundle.
pub struct WebhookConfigurations {
    client: Client,
    config: WebhookConfig,
    /// The types policies select, as the apiserver serves them (a type not served is asked
    /// again at every sync).
    served: ServedTypes,
    /// The types not served, warned about once each.
    warned: Mutex<BTreeSet<(String, String)>>,
}

fn classify(
    error: kube::Error,
    verb: &'static str,
    webhook: WebhookKind,
    name: &str,
) -> WebhookError {
    match error {
        kube::Error::Api(status) if status.code == 403 => WebhookError::Forbidden {
            verb,
            kind: kind_name(webhook),
            name: name.to_string(),
            message: status.message.clone(),
        },
        kube::Error::Api(status) if verb == "patch" && status.code == 404 => {
            WebhookError::ConfigurationMissing {
                kind: kind_name(webhook),
                name: name.to_string(),
            }
        }
        source => WebhookError::Api {
            verb,
            kind: kind_name(webhook),
            name: name.to_string(),
            source,
        },
    }
}

/// The `caBundle` of a live entry, decoded (absent: empty; not base64: `None`, so it differs).
fn live_ca_bundle(entry: &Value) -> Option<Vec<u8>> {
    match entry.pointer("/clientConfig/caBundle") {
        None | Some(Value::Null) => Some(Vec::new()),
        Some(Value::String(text)) => base64::engine::general_purpose::STANDARD.decode(text).ok(),
        Some(_) => None,
    }
}

/// The `rules` of a live entry (absent: none).
fn live_rules(entry: &Value) -> Value {
    match entry.get("rules") {
        None | Some(Value::Null) => Value::Array(Vec::new()),
        Some(rules) => rules.clone(),
    }
}

impl std::fmt::Debug for WebhookConfigurations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookConfigurations")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl WebhookConfigurations {
    /// Manages the configurations `config` names, through `client`.
    pub fn new(client: Client, config: WebhookConfig) -> Self {
        WebhookConfigurations {
            served: ServedTypes::new(client.clone(), Duration::ZERO),
            client,
            config,
            warned: Mutex::new(BTreeSet::new()),
        }
    }

    /// What this manages.
    pub fn config(&self) -> &WebhookConfig {
        &self.config
    }

    fn warned(&self) -> std::sync::MutexGuard<'_, BTreeSet<(String, String)>> {
        self.warned.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Resolves `wanted` through discovery (cached), one request per type not yet resolved,
    /// all at once.
    async fn resolve(
        &self,
        wanted: BTreeSet<(String, String)>,
    ) -> Result<
        (
            BTreeMap<(String, String), ResolvedType>,
            Vec<UnresolvedType>,
        ),
        WebhookError,
    > {
        let wanted: Vec<(String, String)> = wanted.into_iter().collect();
        let lookups = futures::future::join_all(
            wanted
                .iter()
                .map(|(api_version, kind)| self.served.find(api_version, kind)),
        )
        .await;
        let mut resolved = BTreeMap::new();
        let mut unresolved = Vec::new();
        let mut warned = self.warned();
        for (key, result) in wanted.into_iter().zip(lookups) {
            match result {
                Ok(served) => {
                    let r = ResolvedType {
                        group: served.resource.group,
                        version: served.resource.version,
                        plural: served.resource.plural,
                        namespaced: served.namespaced,
                    };
                    if warned.remove(&key) {
                        info!(api_version = %key.0, kind = %key.1, resource = %r.plural,
                            "a type the policies select is now served: added to the webhook rules");
                    }
                    resolved.insert(key, r);
                }
                // An aggregated API that is down: its objects cannot be written either.
                Err(
                    error @ (DiscoveryError::Invalid(_)
                    | DiscoveryError::NotServed(_)
                    | DiscoveryError::Unavailable { .. }),
                ) => {
                    let reason = error.to_string();
                    if warned.insert(key.clone()) {
                        warn!(api_version = %key.0, kind = %key.1, %reason,
                            "a type the policies select is not served: left out of the webhook rules until it is");
                    } else {
                        debug!(api_version = %key.0, kind = %key.1, %reason, "still not served");
                    }
                    unresolved.push(UnresolvedType {
                        api_version: key.0,
                        kind: key.1,
                        reason,
                    });
                }
                Err(source) => {
                    return Err(WebhookError::Discovery {
                        api_version: key.0,
                        kind: key.1,
                        source,
                    });
                }
            }
        }
        // Warn again about a type that comes back unresolved after it was no longer wanted.
        warned.retain(|(api_version, kind)| {
            unresolved
                .iter()
                .any(|u| &u.api_version == api_version && &u.kind == kind)
        });
        Ok((resolved, unresolved))
    }

    /// Brings both configurations in line with these targets and this bundle; writes only
    /// what differs. Returns what it did: which configurations were written, which kinds
    /// could not be resolved (left out of the rules until they are).
    ///
    /// Both configurations are attempted even when the first fails; the first error is
    /// returned.
    pub async fn sync(
        &self,
        mutating: &Targets,
        validating: &Targets,
        ca_bundle: &[u8],
    ) -> Result<SyncReport, WebhookError> {
        let mode = self.config.mode;
        let mut wanted = BTreeSet::new();
        if !self.config.mutating.is_empty() {
            wanted.extend(needed_types(mutating, mode));
        }
        if !self.config.validating.is_empty() {
            wanted.extend(needed_types(validating, mode));
        }
        let (resolved, mut unresolved) = self.resolve(wanted).await?;
        unresolved.sort();

        let mutating_entries: BTreeMap<String, DesiredEntry> = {
            let rules = generate_rules(mutating, mode, &resolved);
            self.config
                .mutating
                .iter()
                .map(|name| {
                    let rules = Some(rules.clone());
                    (name.clone(), DesiredEntry { rules })
                })
                .collect()
        };
        let validating_entries: BTreeMap<String, DesiredEntry> = {
            let rules = generate_rules(validating, mode, &resolved);
            let ca_only = self
                .config
                .ca_only
                .iter()
                .map(|name| (name.clone(), DesiredEntry { rules: None }));
            // An entry named in both lists gets its rules.
            let generated = self.config.validating.iter().map(|name| {
                let rules = Some(rules.clone());
                (name.clone(), DesiredEntry { rules })
            });
            ca_only.chain(generated).collect()
        };

        let mutating = self
            .sync_configuration(WebhookKind::Mutating, &mutating_entries, ca_bundle)
            .await;
        let validating = self
            .sync_configuration(WebhookKind::Validating, &validating_entries, ca_bundle)
            .await;
        Ok(SyncReport {
            mutating: mutating?,
            validating: validating?,
            unresolved,
        })
    }

    /// One configuration: read it, compare, apply when something differs.
    async fn sync_configuration(
        &self,
        webhook: WebhookKind,
        entries: &BTreeMap<String, DesiredEntry>,
        ca_bundle: &[u8],
    ) -> Result<Outcome, WebhookError> {
        if entries.is_empty() {
            return Ok(Outcome::NotManaged);
        }
        let name = self.config.name.as_str();
        let kind = kind_name(webhook);
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &api_resource(webhook));
        let encoded_bundle = base64::engine::general_purpose::STANDARD.encode(ca_bundle);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let live = api
                .get_opt(name)
                .await
                .map_err(|e| classify(e, "get", webhook, name))?
                .ok_or_else(|| WebhookError::ConfigurationMissing {
                    kind,
                    name: name.to_string(),
                })?;
            let live_entries: &[Value] = live
                .data
                .get("webhooks")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default();
            let live_name = |e: &Value| e.get("name").and_then(Value::as_str).map(str::to_string);
            let present: BTreeSet<String> = live_entries.iter().filter_map(live_name).collect();
            if let Some(absent) = entries.keys().find(|n| !present.contains(*n)) {
                return Err(WebhookError::EntryMissing {
                    kind,
                    name: name.to_string(),
                    webhook: absent.clone(),
                });
            }
            // The applied entries, in the live order (so the apply never reorders the list).
            let mut applied = Vec::new();
            let mut differs = Vec::new();
            for entry in live_entries {
                let Some(entry_name) = live_name(entry) else {
                    continue;
                };
                let Some(desired) = entries.get(&entry_name) else {
                    continue;
                };
                let mut patch = json!({
                    "name": entry_name,
                    "clientConfig": {"caBundle": encoded_bundle},
                });
                if live_ca_bundle(entry).as_deref() != Some(ca_bundle) {
                    differs.push(format!("{entry_name}: caBundle"));
                }
                if let Some(rules) = &desired.rules {
                    let rules = serde_json::to_value(rules).unwrap_or_default();
                    if live_rules(entry) != rules {
                        differs.push(format!("{entry_name}: rules"));
                    }
                    patch["rules"] = rules;
                }
                applied.push(patch);
            }
            if differs.is_empty() {
                debug!(kind, name, "webhook configuration already in line");
                return Ok(Outcome::Unchanged);
            }
            let body = json!({
                "apiVersion": format!("{GROUP}/{VERSION}"),
                "kind": kind,
                "metadata": {
                    "name": name,
                    // Preconditions: the apply fails (409) if the object changed since it was
                    // read (resourceVersion) or is gone (uid: without it, an apply would create
                    // the object anew).
                    "resourceVersion": live.metadata.resource_version,
                    "uid": live.metadata.uid,
                },
                "webhooks": applied,
            });
            let params = PatchParams::apply(FIELD_MANAGER).force();
            match api.patch(name, &params, &Patch::Apply(&body)).await {
                Ok(_) => {
                    info!(kind, name, changed = ?differs, "webhook configuration written");
                    return Ok(Outcome::Written);
                }
                Err(kube::Error::Api(status))
                    if status.code == 409 && attempt <= CONFLICT_RETRIES =>
                {
                    debug!(
                        kind,
                        name, attempt, "webhook configuration changed meanwhile: reading it again"
                    );
                }
                Err(e) => return Err(classify(e, "patch", webhook, name)),
            }
        }
    }

    /// Keeps them in line: syncs on every change of `targets` (the mutating and the validating
    /// webhook's targets) or `ca_bundle`, and every [`WebhookConfig::resync`]; errors are
    /// logged and retried with backoff (500 ms doubling to 30 s, sooner on a change). Waits
    /// for a non-empty bundle before the first write. A closed channel keeps its last value.
    /// Never panics; runs until dropped.
    pub async fn run(
        self,
        mut targets: watch::Receiver<(Targets, Targets)>,
        mut ca_bundle: watch::Receiver<Vec<u8>>,
    ) {
        let mut backoff = BACKOFF_START;
        let (mut targets_open, mut ca_open) = (true, true);
        loop {
            let (mutating, validating) = targets.borrow_and_update().clone();
            let bundle = ca_bundle.borrow_and_update().clone();
            let wait = if bundle.is_empty() {
                debug!("no CA bundle yet: webhook configurations not synced");
                self.config.resync
            } else {
                match self.sync(&mutating, &validating, &bundle).await {
                    Ok(report) => {
                        // Written configurations and unresolved kinds are logged by `sync`.
                        debug!(?report, "webhook configurations synced");
                        backoff = BACKOFF_START;
                        self.config.resync
                    }
                    Err(error) => {
                        let wait = backoff;
                        warn!(%error, retry_in = ?wait, "could not sync the webhook configurations");
                        backoff = (backoff * 2).min(BACKOFF_MAX);
                        wait
                    }
                }
            };
            let deadline = Instant::now() + wait;
            loop {
                tokio::select! {
                    changed = targets.changed(), if targets_open => {
                        if changed.is_err() {
                            targets_open = false;
                            continue;
                        }
                    }
                    changed = ca_bundle.changed(), if ca_open => {
                        if changed.is_err() {
                            ca_open = false;
                            continue;
                        }
                    }
                    () = tokio::time::sleep_until(deadline) => break,
                }
                // A change: let a burst settle, then sync with the latest values.
                tokio::time::sleep(DEBOUNCE).await;
                break;
            }
        }
    }
}
