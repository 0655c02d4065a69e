//! The suite's world: a real control plane (etcd, kube-apiserver, kube-controller-manager on
//! 127.0.0.1), kanon's CRDs as generated, `kanon serve` as a process with the control plane's
//! kubeconfig, kanon's webhooks registered by URL with kanon's CA, a kube client and kubectl,
//! and a small HTTP service for `http` references.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kanon_control_plane::kanon::{self as kit, Cluster};
use kanon_control_plane::{ControlPlane, Options};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

pub use kanon_control_plane::kanon::repo;

/// Label on the namespaces whose requests go to the webhooks with `failurePolicy: Ignore`
/// (all other test namespaces go to the ones with `Fail`).
pub const IGNORE_LABEL: &str = "e2e.kanon.dev/failure-policy";

/// The name of the suite's webhook configurations.
const WEBHOOKS: &str = "kanon-e2e";

/// What the suite runs every kanon with, before a scenario's own arguments.
const KANON_SETTINGS: [&str; 6] = [
    // The suite's HTTP service listens on loopback: allowed explicitly.
    "--http-allow-cidr",
    "127.0.0.1/32",
    // Lookups re-read quickly, so a test that changes a referenced object sees it.
    "--object-cache-ttl-ms",
    "200",
    "--http-cache-ttl-ms",
    "200",
];

/// `kanon serve` as the suite runs it: the kit's [`kit::Kanon`] (its fields and reads through
/// `Deref`), whose failures panic, failing the scenario with their message.
pub struct Kanon(kit::Kanon);

impl Deref for Kanon {
    type Target = kit::Kanon;

    fn deref(&self) -> &kit::Kanon {
        &self.0
    }
}

impl DerefMut for Kanon {
    fn deref_mut(&mut self) -> &mut kit::Kanon {
        &mut self.0
    }
}

impl Kanon {
    /// A kanon (not started) against `cluster` with the suite's settings, its files named
    /// `name`.
    fn new(cluster: &Cluster, name: &str) -> Kanon {
        let kanon = cluster
            .kanon(env!("CARGO_BIN_EXE_kanon"), name)
            .unwrap_or_else(|e| panic!("kanon {name}: {e:#}"))
            .with_settings(&KANON_SETTINGS)
            .with_env("RUST_LOG", "info,kanon_cluster=debug");
        Kanon(kanon)
    }

    /// Starts the process without waiting for it to be ready.
    pub fn spawn(&mut self) {
        self.0.spawn().unwrap_or_else(|e| panic!("{e:#}"));
    }

    /// Starts kanon (after [`Kanon::stop`]) and waits until it is ready.
    pub fn start(&mut self) {
        self.0.start().unwrap_or_else(|e| panic!("{e:#}"));
    }

    /// Waits for `/readyz` (60 s at most).
    pub fn wait_ready(&mut self) {
        self.0
            .wait_ready(Duration::from_secs(60), Duration::from_millis(100))
            .unwrap_or_else(|e| panic!("{e:#}"));
    }

    /// HTTP status of `GET path` over HTTPS (with the kanon's client identity, if any), `000`
    /// when nothing answers.
    pub fn get(&self, path: &str) -> String {
        self.0.status(path)
    }

    /// The metrics text (empty when nothing answers).
    pub fn metrics(&self) -> String {
        self.0.metrics().unwrap_or_default()
    }

    /// SIGKILL (a crash, or a node gone), then reap the process.
    pub fn kill(&mut self) {
        let _ = self.0.kill();
    }

    /// SIGTERM, then wait for the exit.
    pub fn stop(&mut self) {
        self.0.stop();
    }
}

/// The suite's kanon restarted with a changed configuration; dropping the guard restarts it as
/// it was (also when the scenario fails).
pub struct Restarted<'a> {
    pub env: &'a mut Env,
    args: Vec<String>,
    client_identity: Option<(PathBuf, PathBuf)>,
}

impl<'a> Restarted<'a> {
    /// Restarts kanon with `args` added.
    pub fn with(env: &'a mut Env, args: &[&str]) -> Self {
        Self::changed(env, |kanon| {
            kanon.args.extend(args.iter().map(|a| a.to_string()))
        })
    }

    /// Restarts kanon after `change` (to its arguments or the identity probes present).
    pub fn changed(env: &'a mut Env, change: impl FnOnce(&mut Kanon)) -> Self {
        let args = env.kanon.args.clone();
        let client_identity = env.kanon.client_identity.clone();
        env.kanon.stop();
        change(&mut env.kanon);
        env.kanon.start();
        Restarted {
            env,
            args,
            client_identity,
        }
    }
}

impl Drop for Restarted<'_> {
    fn drop(&mut self) {
        let kanon = &mut self.env.kanon;
        kanon.stop();
        kanon.args = std::mem::take(&mut self.args);
        kanon.client_identity = self.client_identity.take();
        kanon.start();
    }
}

/// A tiny HTTP/1.1 service on 127.0.0.1 for `http` references: `GET /allowed/<name>` answers
/// `{"allowed": <bool>}` from a table the test sets; every request is recorded.
pub struct Service {
    pub port: u16,
    pub allowed: Arc<Mutex<BTreeMap<String, bool>>>,
    pub requests: Arc<Mutex<Vec<String>>>,
}

impl Service {
    fn start() -> Service {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the HTTP service");
        let port = listener.local_addr().expect("its port").port();
        let allowed = Arc::new(Mutex::new(BTreeMap::new()));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let (table, log) = (allowed.clone(), requests.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (table, log) = (table.clone(), log.clone());
                std::thread::spawn(move || serve_one(stream, &table, &log));
            }
        });
        Service {
            port,
            allowed,
            requests,
        }
    }
}

fn serve_one(stream: TcpStream, table: &Mutex<BTreeMap<String, bool>>, log: &Mutex<Vec<String>>) {
    let mut reader = BufReader::new(match stream.try_clone() {
        Ok(s) => s,
        Err(_) => return,
    });
    let mut stream = stream;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let target = line.split_whitespace().nth(1).unwrap_or("/").to_string();
        let mut length = 0usize;
        let mut auth = String::new();
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                match name.to_ascii_lowercase().as_str() {
                    "content-length" => length = value.trim().parse().unwrap_or(0),
                    "authorization" => auth = value.trim().to_string(),
                    _ => {}
                }
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        log.lock().unwrap().push(format!("{target} {auth}"));
        let name = target
            .strip_prefix("/allowed/")
            .unwrap_or_default()
            .split('?')
            .next()
            .unwrap_or_default()
            .to_string();
        let answer = match table.lock().unwrap().get(&name) {
            Some(allowed) => json!({"allowed": allowed}).to_string(),
            None => json!({"allowed": false, "reason": "unknown"}).to_string(),
        };
        let response = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{answer}",
            answer.len()
        );
        if stream.write_all(response.as_bytes()).is_err() {
            return;
        }
    }
}

/// Everything the scenarios use.
pub struct Env {
    pub kanon: Kanon,
    pub service: Service,
    pub runtime: tokio::runtime::Runtime,
    pub client: kube::Client,
    /// The control plane with the CRDs; last, so that it stops after kanon.
    pub cluster: Cluster,
}

/// The API resource of a kanon policy kind.
pub fn policy_resource(kind: &str) -> ApiResource {
    kit::policy_resource(kind).unwrap_or_else(|e| panic!("{e:#}"))
}

impl Env {
    /// Starts the kit's cluster (the control plane with the CRDs), starts kanon and registers
    /// its webhooks.
    pub fn start() -> Env {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let cluster = Cluster::start("e2e", Options::default())
            .unwrap_or_else(|e| panic!("the control plane starts: {e:#}"));
        let runtime = kit::runtime().unwrap_or_else(|e| panic!("{e:#}"));
        let client = runtime
            .block_on(cluster.client())
            .unwrap_or_else(|e| panic!("{e:#}"));
        let mut env = Env {
            kanon: Kanon::new(&cluster, "kanon"),
            service: Service::start(),
            runtime,
            client,
            cluster,
        };
        // The suite's kanon serves admission only; the audit scenarios run auditors of their
        // own, so that no audit runs behind the other scenarios' backs.
        env.kanon.args.push("--no-audit".to_string());
        env.kanon.start();
        env.register_webhooks();
        env
    }

    /// The control plane.
    pub fn control_plane(&self) -> &ControlPlane {
        self.cluster.control_plane()
    }

    /// Another kanon process (a second replica) against the same control plane, not started;
    /// its files named `name` in the suite's directory.
    pub fn replica(&self, name: &str) -> Kanon {
        Kanon::new(&self.cluster, name)
    }

    /// kubectl against the control plane.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        self.cluster
            .kubectl_output(args, None)
            .unwrap_or_else(|e| panic!("{e:#}"))
    }

    /// kubectl with `input` on its standard input.
    pub fn kubectl_stdin(&self, args: &[&str], input: &str) -> Output {
        self.cluster
            .kubectl_output(args, Some(input))
            .unwrap_or_else(|e| panic!("{e:#}"))
    }

    /// `kubectl apply -f -` of a JSON or YAML document; panics on failure.
    pub fn apply(&self, document: &Value) {
        self.cluster
            .apply(document)
            .unwrap_or_else(|e| panic!("{e:#}"));
    }

    /// The webhook configurations: mutate and validate for the kinds the suite uses, in every
    /// namespace but the system ones, `Fail` unless the namespace carries [`IGNORE_LABEL`];
    /// kanon's own policy kinds checked with `Ignore`, so a stopped kanon never keeps anyone
    /// from fixing a policy.
    pub fn webhook_configurations(&self) -> (Value, Value) {
        let rules = |operations: &[&str]| {
            json!([
                {"apiGroups": [""], "apiVersions": ["v1"], "operations": operations,
                 "resources": ["pods", "namespaces", "configmaps"]},
                {"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": operations,
                 "resources": ["deployments"]},
            ])
        };
        let system = json!({"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                            "values": ["kube-system", "kube-public", "kube-node-lease"]});
        let webhook = |name: &str, path: &str, operations: &[&str], failure: &str| {
            let operator = if failure == "Ignore" { "In" } else { "NotIn" };
            let selector = json!({"matchExpressions": [
                system,
                {"key": IGNORE_LABEL, "operator": operator, "values": ["ignore"]},
            ]});
            let mut webhook = self
                .kanon
                .webhook(name, path, rules(operations), selector)
                .unwrap_or_else(|e| panic!("{e:#}"));
            webhook["failurePolicy"] = json!(failure);
            webhook
        };
        let mutating = kit::mutating_configuration(
            WEBHOOKS,
            vec![
                webhook("mutate.kanon.dev", "/mutate", &["CREATE", "UPDATE"], "Fail"),
                webhook(
                    "mutate-ignore.kanon.dev",
                    "/mutate",
                    &["CREATE", "UPDATE"],
                    "Ignore",
                ),
            ],
        );
        let mut policies = webhook(
            "policies.kanon.dev",
            "/validate",
            &["CREATE", "UPDATE"],
            "Ignore",
        );
        policies["rules"] = json!([{"apiGroups": [kanon_api::GROUP], "apiVersions": [kanon_api::VERSION],
            "operations": ["CREATE", "UPDATE"], "resources": ["*"], "scope": "*"}]);
        policies["namespaceSelector"] = json!({});
        let all = &["CREATE", "UPDATE", "DELETE"];
        let validating = kit::validating_configuration(
            WEBHOOKS,
            vec![
                webhook("validate.kanon.dev", "/validate", all, "Fail"),
                webhook("validate-ignore.kanon.dev", "/validate", all, "Ignore"),
                policies,
            ],
        );
        (mutating, validating)
    }

    /// Registers kanon's webhooks and waits until the apiserver calls them.
    pub fn register_webhooks(&self) {
        let (mutating, validating) = self.webhook_configurations();
        self.apply(&mutating);
        self.apply(&validating);
    }

    /// Removes kanon's webhooks (before the suite stops kanon for good).
    pub fn unregister_webhooks(&self) {
        let _ = self.cluster.delete_webhook_configurations(WEBHOOKS);
    }

    /// Creates a namespace (with `labels`) for a scenario, deleting any earlier one.
    pub fn namespace(&self, name: &str, labels: Value) {
        let _ = self.kubectl(&[
            "delete",
            "namespace",
            name,
            "--ignore-not-found",
            "--wait=true",
            "--timeout=60s",
        ]);
        self.apply(&json!({"apiVersion": "v1", "kind": "Namespace",
                            "metadata": {"name": name, "labels": labels}}));
    }

    /// An API for objects of `api_version`/`kind` (plural given) in `namespace`.
    pub fn api(
        &self,
        api_version: &str,
        kind: &str,
        plural: &str,
        namespace: Option<&str>,
    ) -> Api<DynamicObject> {
        let (group, version) = kanon_schema::group_version(api_version);
        let resource =
            ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
        match namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &resource),
            None => Api::all_with(self.client.clone(), &resource),
        }
    }

    /// Creates `object`; the apiserver's answer (with kanon's changes), or its refusal.
    pub fn create(&self, object: &Value) -> Result<Value, String> {
        self.create_with(object, &PostParams::default())
    }

    /// [`Env::create`] with `params` (dry run).
    pub fn create_with(&self, object: &Value, params: &PostParams) -> Result<Value, String> {
        let api = self.api_for(object);
        let object: DynamicObject = serde_json::from_value(object.clone()).expect("an object");
        self.runtime
            .block_on(api.create(params, &object))
            .map(|o| serde_json::to_value(o).expect("JSON"))
            .map_err(|e| match e {
                kube::Error::Api(status) => status.message.clone(),
                other => other.to_string(),
            })
    }

    fn api_for(&self, object: &Value) -> Api<DynamicObject> {
        let text = |p: &str| {
            object
                .pointer(p)
                .and_then(Value::as_str)
                .unwrap_or_default()
        };
        let kind = text("/kind");
        let plural = match kind {
            "Pod" => "pods",
            "Deployment" => "deployments",
            "Namespace" => "namespaces",
            "ConfigMap" => "configmaps",
            "ReplicaSet" => "replicasets",
            other => panic!("the suite has no plural for {other}"),
        };
        let namespace = object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str);
        self.api(text("/apiVersion"), kind, plural, namespace)
    }

    /// Reads an object; `None` when it does not exist.
    pub fn get(
        &self,
        api_version: &str,
        kind: &str,
        plural: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Value> {
        let api = self.api(api_version, kind, plural, namespace);
        self.runtime
            .block_on(api.get_opt(name))
            .expect("reading an object")
            .map(|o| serde_json::to_value(o).expect("JSON"))
    }

    /// Reads a policy.
    pub fn policy(&self, kind: &str, namespace: Option<&str>, name: &str) -> Option<Value> {
        let resource = policy_resource(kind);
        let api: Api<DynamicObject> = match namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &resource),
            None => Api::all_with(self.client.clone(), &resource),
        };
        self.runtime
            .block_on(api.get_opt(name))
            .expect("reading a policy")
            .map(|o| serde_json::to_value(o).expect("JSON"))
    }

    /// Deletes a policy, if it exists.
    pub fn delete_policy(&self, kind: &str, namespace: Option<&str>, name: &str) {
        let resource = policy_resource(kind);
        let api: Api<DynamicObject> = match namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &resource),
            None => Api::all_with(self.client.clone(), &resource),
        };
        let _ = self
            .runtime
            .block_on(api.delete(name, &DeleteParams::default()));
    }

    /// Server-side applies a policy document (as a policy author's `kubectl apply
    /// --server-side` would).
    pub fn apply_policy(&self, document: &Value) -> Result<(), String> {
        let text = |p: &str| {
            document
                .pointer(p)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let resource = policy_resource(&text("/kind"));
        let namespace = text("/metadata/namespace");
        let api: Api<DynamicObject> = if namespace.is_empty() {
            Api::all_with(self.client.clone(), &resource)
        } else {
            Api::namespaced_with(self.client.clone(), &namespace, &resource)
        };
        let params = PatchParams::apply("e2e-author").force();
        self.runtime
            .block_on(api.patch(&text("/metadata/name"), &params, &Patch::Apply(document)))
            .map(|_| ())
            .map_err(|e| match e {
                kube::Error::Api(status) => status.message.clone(),
                other => other.to_string(),
            })
    }

    /// Waits until `check` holds (polling every 50 ms), up to `limit`; how long it took.
    pub fn wait_for(
        &self,
        what: &str,
        limit: Duration,
        mut check: impl FnMut() -> bool,
    ) -> Duration {
        let started = Instant::now();
        while started.elapsed() < limit {
            if check() {
                return started.elapsed();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "{what}: not within {limit:?}; kanon's log:\n{}",
            self.kanon.log_tail(40)
        );
    }

    /// Waits until kanon serves a set in which `policy` (`Kind/name`) is in force: its status
    /// says Ready (True or False) for its current generation.
    pub fn wait_policy_status(&self, kind: &str, namespace: Option<&str>, name: &str) -> Value {
        let mut last = Value::Null;
        self.wait_for(
            &format!("status of {kind} {name}"),
            Duration::from_secs(20),
            || {
                let Some(policy) = self.policy(kind, namespace, name) else {
                    return false;
                };
                let generation = policy.pointer("/metadata/generation").cloned();
                let observed = policy.pointer("/status/observedGeneration").cloned();
                last = policy;
                generation.is_some() && generation == observed
            },
        );
        last
    }
}

/// stdout and stderr of a command, for messages.
pub use kanon_control_plane::kanon::output_text as text;

impl Drop for Env {
    fn drop(&mut self) {
        // Webhooks first: a stopped kanon behind a `Fail` webhook would block the
        // controllers' writes while everything stops.
        self.unregister_webhooks();
        self.kanon.stop();
    }
}

/// The documents of a YAML or JSON file, or of every such file under a directory (recursively,
/// in name order), as `kanon` reads its inputs.
pub fn documents(path: &Path) -> Vec<Value> {
    if path.is_dir() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
            .unwrap_or_else(|e| panic!("listing {}: {e}", path.display()))
            .map(|entry| entry.expect("a directory entry").path())
            .collect();
        entries.sort();
        return entries
            .iter()
            .filter(|entry| {
                entry.is_dir()
                    || matches!(
                        entry.extension().and_then(|e| e.to_str()),
                        Some("yaml" | "yml" | "json")
                    )
            })
            .flat_map(|entry| documents(entry))
            .collect();
    }
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let json = path.extension().and_then(|e| e.to_str()) == Some("json");
    kanon_engine::parse_documents(&text, &path.display().to_string(), json)
        .unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()))
}
