//! Part 4: CEL through the apiserver, ValidatingAdmissionPolicies against kanon's CEL rules.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use k8s_openapi::api::core::v1::Pod;
use kanon_control_plane::kanon::{self as kit, Kanon, bench_policy, cpu_time, output_text as text};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::{Value, json};

use crate::stats::{Stats, ms, stats};
use crate::world::{World, cvps};
use crate::{Settings, load_average};

/// The namespace of the Pods created in part 4.
pub(crate) const CEL_NS: &str = "bench-cel";

/// kanon's validating webhook configuration in part 4, and its webhook.
pub(crate) const CEL_WEBHOOK: &str = "kanon-bench-cel";
pub(crate) const CEL_WEBHOOK_NAME: &str = "validate-cel.bench.kanon.dev";

/// One of the 10 rules: a CEL validation that holds for [`cel_pod`], and how to change that Pod
/// so that this rule alone fails.
pub(crate) struct CelRule {
    pub(crate) name: &'static str,
    pub(crate) expression: &'static str,
    pub(crate) violate: fn(&mut Value),
}

/// The 10 rules, each installed once as a ValidatingAdmissionPolicy with its binding and once as
/// a kanon ClusterValidatePolicy.
pub(crate) const CEL_RULES: [CelRule; 10] = [
    CelRule {
        name: "memory-limit",
        expression: "object.spec.containers.all(c, has(c.resources) && has(c.resources.limits) \
                     && 'memory' in c.resources.limits)",
        violate: |pod| {
            pod["spec"]["containers"][0]["resources"]["limits"]
                .as_object_mut()
                .map(|limits| limits.remove("memory"));
        },
    },
    CelRule {
        name: "cpu-limit",
        expression: "object.spec.containers.all(c, has(c.resources) && has(c.resources.limits) \
                     && 'cpu' in c.resources.limits)",
        violate: |pod| {
            pod["spec"]["containers"][0]["resources"]["limits"]
                .as_object_mut()
                .map(|limits| limits.remove("cpu"));
        },
    },
    CelRule {
        name: "memory-at-most-1gi",
        expression: "object.spec.containers.all(c, !has(c.resources) || !has(c.resources.limits) \
                     || !('memory' in c.resources.limits) \
                     || quantity(c.resources.limits.memory).compareTo(quantity('1Gi')) <= 0)",
        violate: |pod| pod["spec"]["containers"][0]["resources"]["limits"]["memory"] = json!("2Gi"),
    },
    CelRule {
        name: "image-registry",
        expression: "object.spec.containers.all(c, c.image.startsWith('registry.example/'))",
        violate: |pod| pod["spec"]["containers"][0]["image"] = json!("docker.io/library/app:1.0"),
    },
    CelRule {
        name: "image-tag",
        expression: "object.spec.containers.all(c, c.image.contains(':') \
                     && !c.image.endsWith(':latest'))",
        violate: |pod| pod["spec"]["containers"][0]["image"] = json!("registry.example/app:latest"),
    },
    CelRule {
        name: "team-label",
        expression: "has(object.metadata.labels) && 'team' in object.metadata.labels \
                     && object.metadata.labels.team.matches('^[a-z][a-z0-9-]*$')",
        violate: |pod| pod["metadata"]["labels"]["team"] = json!("Platform"),
    },
    CelRule {
        name: "no-host-namespaces",
        expression: "!object.spec.?hostNetwork.orValue(false) && !object.spec.?hostPID.orValue(false) \
                     && !object.spec.?hostIPC.orValue(false)",
        violate: |pod| pod["spec"]["hostNetwork"] = json!(true),
    },
    CelRule {
        name: "run-as-non-root",
        expression: "object.spec.?securityContext.?runAsNonRoot.orValue(false) \
                     || object.spec.containers.all(c, c.?securityContext.?runAsNonRoot.orValue(false))",
        violate: |pod| pod["spec"]["securityContext"]["runAsNonRoot"] = json!(false),
    },
    CelRule {
        name: "no-privilege-escalation",
        expression: "object.spec.containers.all(c, \
                     !c.?securityContext.?allowPrivilegeEscalation.orValue(true) \
                     && !c.?securityContext.?privileged.orValue(false))",
        violate: |pod| {
            pod["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] =
                json!(true)
        },
    },
    CelRule {
        name: "no-host-path",
        expression: "!has(object.spec.volumes) || object.spec.volumes.all(v, !has(v.hostPath))",
        violate: |pod| {
            pod["spec"]["volumes"] = json!([{"name": "host", "hostPath": {"path": "/tmp"}}]);
        },
    },
];

/// The message of a rule's validation (the same in the VAP and in kanon's policy).
pub(crate) fn cel_message(rule: &CelRule) -> String {
    format!("bench rule {} does not hold", rule.name)
}

/// The object name of a rule's VAP, binding and kanon policy.
pub(crate) fn cel_name(rule: &CelRule) -> String {
    format!("bench-cel-{}", rule.name)
}

/// The Pod of part 4: every one of the 10 rules holds for it.
pub(crate) fn cel_pod(name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": CEL_NS,
                     "labels": {"app": "bench", "team": "platform"}},
        "spec": {
            "securityContext": {"runAsNonRoot": true, "runAsUser": 1000},
            "containers": [{
                "name": "app",
                "image": "registry.example/app:1.0",
                "securityContext": {"allowPrivilegeEscalation": false},
                "resources": {"limits": {"cpu": "500m", "memory": "128Mi"}},
            }],
        },
    })
}

/// The namespace selector of part 4's VAPs and webhook: [`CEL_NS`] only.
pub(crate) fn cel_namespace_selector() -> Value {
    kit::namespaces_named(&[CEL_NS])
}

/// A rule as a ValidatingAdmissionPolicy (Pods, CREATE, in [`CEL_NS`]) and its binding (Deny).
pub(crate) fn cel_vap(rule: &CelRule) -> [Value; 2] {
    let name = cel_name(rule);
    let labels = json!({"bench.kanon.dev/cel": "true"});
    [
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "namespaceSelector": cel_namespace_selector(),
                    "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                       "operations": ["CREATE"], "resources": ["pods"]}],
                },
                "validations": [{"expression": rule.expression, "message": cel_message(rule)}],
            },
        }),
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name, "labels": labels},
            "spec": {"policyName": name, "validationActions": ["Deny"]},
        }),
    ]
}

/// A rule as a kanon ClusterValidatePolicy (Pods in [`CEL_NS`], CREATE, `cel.validations`).
pub(crate) fn cel_cvp(rule: &CelRule) -> Value {
    let mut document = bench_policy(
        "ClusterValidatePolicy",
        &cel_name(rule),
        json!({
            "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod", "namespace": CEL_NS}],
            "failurePolicy": "Fail",
            "validationActions": ["Deny"],
            "validateRules": [{"targetOperations": ["CREATE"], "cel": {"validations": [
                {"expression": rule.expression, "message": cel_message(rule)}]}}],
        }),
    );
    document["metadata"]["labels"]["bench.kanon.dev/cel"] = json!("true");
    document
}

/// What is in force during a round of part 4.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CelConfig {
    /// No policy, no webhook.
    NoPolicy,
    /// The 10 rules as ValidatingAdmissionPolicies with their bindings.
    Vaps,
    /// The 10 rules as kanon ClusterValidatePolicies, behind kanon's validating webhook.
    KanonCel,
}

impl CelConfig {
    pub(crate) const ALL: [CelConfig; 3] =
        [CelConfig::NoPolicy, CelConfig::Vaps, CelConfig::KanonCel];

    pub(crate) fn name(self) -> &'static str {
        match self {
            CelConfig::NoPolicy => "no policy",
            CelConfig::Vaps => "10 VAPs",
            CelConfig::KanonCel => "kanon webhook, 10 CEL rules",
        }
    }

    /// What the apiserver's refusal of a Pod violating `rule` says, when this configuration
    /// refuses it (`None`: admitted).
    pub(crate) fn denial(self, rule: &CelRule) -> Option<String> {
        match self {
            CelConfig::NoPolicy => None,
            CelConfig::Vaps => Some(format!(
                "ValidatingAdmissionPolicy '{0}' with binding '{0}' denied request",
                cel_name(rule)
            )),
            CelConfig::KanonCel => Some(format!(
                "admission webhook \"{CEL_WEBHOOK_NAME}\" denied the request"
            )),
        }
    }
}

impl World {
    /// A server-side dry-run create of `pod`: `Ok(Ok(()))` when admitted, `Ok(Err(message))`
    /// when the apiserver refuses it.
    pub(crate) fn dry_run_create(&self, pod: &Value) -> Result<Result<(), String>> {
        let namespace = pod["metadata"]["namespace"].as_str().unwrap_or_default();
        let pod: Pod = serde_json::from_value(pod.clone())?;
        let params = PostParams {
            dry_run: true,
            ..Default::default()
        };
        match self
            .runtime
            .block_on(self.pods(namespace).create(&params, &pod))
        {
            Ok(_) => Ok(Ok(())),
            Err(kube::Error::Api(status)) => Ok(Err(status.message.clone())),
            Err(other) => Err(other.into()),
        }
    }

    /// kanon's validating webhook of part 4: Pods, CREATE, in [`CEL_NS`] only, `Fail`, 5 s.
    pub(crate) fn cel_webhook_configuration(&self) -> Result<Value> {
        let webhook = self.kanon().webhook(
            CEL_WEBHOOK_NAME,
            "/validate",
            kit::pod_rules(&["CREATE"]),
            cel_namespace_selector(),
        )?;
        Ok(kit::validating_configuration(CEL_WEBHOOK, vec![webhook]))
    }

    /// Waits until `config` is what the apiserver enforces: for each rule, a dry-run create of
    /// a Pod violating that rule alone is refused by that rule's VAP or by kanon's webhook with
    /// the rule's message, or (no policy) admitted; and the bench Pod itself is admitted.
    pub(crate) fn wait_cel_config(&self, config: CelConfig) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let mut wrong = Vec::new();
            if let Err(message) = self.dry_run_create(&cel_pod("probe"))? {
                wrong.push(format!("the bench Pod: refused: {message}"));
            }
            for rule in &CEL_RULES {
                let mut pod = cel_pod(&format!("probe-{}", rule.name));
                (rule.violate)(&mut pod);
                match (config.denial(rule), self.dry_run_create(&pod)?) {
                    (None, Ok(())) => {}
                    (Some(denial), Err(message))
                        if message.contains(&denial) && message.contains(&cel_message(rule)) => {}
                    (_, outcome) => wrong.push(format!("{}: {outcome:?}", rule.name)),
                }
            }
            if wrong.is_empty() {
                return Ok(());
            }
            ensure!(
                Instant::now() < deadline,
                "{} not in force after 60 s: {wrong:#?}",
                config.name()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Puts `config` in force and waits until the apiserver enforces it.
    pub(crate) fn enter_cel_config(&mut self, config: CelConfig) -> Result<()> {
        match config {
            CelConfig::NoPolicy => {}
            CelConfig::Vaps => {
                let items: Vec<Value> = CEL_RULES.iter().flat_map(cel_vap).collect();
                self.apply(&json!({"apiVersion": "v1", "kind": "List", "items": items}))?;
            }
            CelConfig::KanonCel => {
                let webhook = self.cel_webhook_configuration()?;
                self.cel_webhook = true;
                self.apply(&webhook)?;
            }
        }
        self.wait_cel_config(config)
    }

    /// Takes `config` out and waits until nothing refuses the rules' violating Pods.
    pub(crate) fn leave_cel_config(&mut self, config: CelConfig) -> Result<()> {
        match config {
            CelConfig::NoPolicy => {}
            CelConfig::Vaps => {
                self.kubectl(&[
                    "delete",
                    "validatingadmissionpolicybindings,validatingadmissionpolicies",
                    "-l",
                    "bench.kanon.dev/cel=true",
                ])?;
            }
            CelConfig::KanonCel => self.delete_cel_webhook()?,
        }
        self.wait_cel_config(CelConfig::NoPolicy)
    }

    pub(crate) fn delete_cel_webhook(&mut self) -> Result<()> {
        if self.cel_webhook {
            self.kubectl(&[
                "delete",
                "--ignore-not-found",
                &format!("validatingwebhookconfiguration/{CEL_WEBHOOK}"),
            ])?;
            self.cel_webhook = false;
        }
        Ok(())
    }

    /// How many times each of kanon's 10 CEL policies has been evaluated so far
    /// (`kanon_policy_evaluations_total`).
    pub(crate) fn kanon_cel_evaluations(&self) -> Result<Vec<f64>> {
        let text = self.kanon().metrics()?;
        Ok(CEL_RULES
            .iter()
            .map(|rule| {
                metric_sum(
                    &text,
                    "kanon_policy_evaluations_total",
                    &[(
                        "policy",
                        &format!("ClusterValidatePolicy/{}", cel_name(rule)),
                    )],
                )
            })
            .collect())
    }

    /// The apiserver's time in its validating admission plugins so far, for admitted CREATEs:
    /// (calls, seconds) of `ValidatingAdmissionPolicy` and of `ValidatingAdmissionWebhook`
    /// (`apiserver_admission_controller_admission_duration_seconds`; the apiserver counts no
    /// admission per VAP, only denials and errors).
    pub(crate) fn validating_plugins(&self) -> Result<[(f64, f64); 2]> {
        let out = self.kubectl(&["get", "--raw", "/metrics"])?;
        let text = String::from_utf8_lossy(&out.stdout);
        let plugin = |name: &str| {
            let labels = [
                ("name", name),
                ("operation", "CREATE"),
                ("rejected", "false"),
                ("type", "validate"),
            ];
            (
                metric_sum(
                    &text,
                    "apiserver_admission_controller_admission_duration_seconds_count",
                    &labels,
                ),
                metric_sum(
                    &text,
                    "apiserver_admission_controller_admission_duration_seconds_sum",
                    &labels,
                ),
            )
        };
        Ok([
            plugin("ValidatingAdmissionPolicy"),
            plugin("ValidatingAdmissionWebhook"),
        ])
    }

    /// Deletes every Pod of `namespace` (many thousands: the collection delete may time out
    /// on the client's side while the apiserver goes on) and waits until none is left.
    pub(crate) fn delete_many_pods(&self, namespace: &str) -> Result<()> {
        let api = self.pods(namespace);
        let deadline = Instant::now() + Duration::from_secs(600);
        loop {
            let left = self
                .runtime
                .block_on(api.list_metadata(&ListParams::default().limit(1)))?;
            if left.items.is_empty() {
                return Ok(());
            }
            ensure!(Instant::now() < deadline, "Pods of {namespace} not deleted");
            if let Err(error) = self
                .runtime
                .block_on(api.delete_collection(&DeleteParams::default(), &ListParams::default()))
            {
                eprintln!("bench: deleting the Pods of {namespace}: {error} (retried)");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// The sum of every sample of metric `name` (any other labels) that has all of `labels`.
pub(crate) fn metric_sum(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .filter(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The processes whose CPU time part 4 reports, in its tables' order.
pub(crate) const CPU_PROCESSES: [&str; 5] = [
    "kube-apiserver",
    "etcd",
    "kube-controller-manager",
    "kanon",
    "bench client",
];

/// The CPU time so far of each of [`CPU_PROCESSES`] (the bench client is this process).
pub(crate) fn cpu_times(world: &World) -> [Duration; 5] {
    let mut pids = world.control_plane().pids();
    if let Some(child) = world.kanon.as_ref().and_then(Kanon::pid) {
        pids.push(("kanon", child));
    }
    pids.push(("bench client", std::process::id()));
    CPU_PROCESSES.map(|name| {
        pids.iter()
            .find(|(n, _)| *n == name)
            .map_or(Duration::ZERO, |&(_, pid)| cpu_time(pid))
    })
}

/// One create of the closed loop: when it started (from the loop's start), how long it took,
/// and the apiserver's refusal if it was not admitted.
pub(crate) struct Timed {
    pub(crate) started: Duration,
    pub(crate) latency: Duration,
    pub(crate) error: Option<String>,
}

/// `clients` concurrent clients, each creating Pods (`pod`, renamed `<prefix>-<client>-<n>`)
/// one after the other, the next as soon as the previous one is answered, for `total`.
pub(crate) async fn creates_closed_loop(
    api: Api<Pod>,
    pod: Pod,
    prefix: &str,
    clients: usize,
    total: Duration,
) -> Vec<Timed> {
    let origin = tokio::time::Instant::now();
    let end = origin + total;
    let mut tasks = Vec::with_capacity(clients);
    for client in 0..clients {
        let api = api.clone();
        let mut pod = pod.clone();
        let prefix = prefix.to_owned();
        tasks.push(tokio::spawn(async move {
            let mut done = Vec::new();
            for n in 0.. {
                let started = tokio::time::Instant::now();
                if started >= end {
                    break;
                }
                pod.metadata.name = Some(format!("{prefix}-{client:02}-{n:06}"));
                let error = api
                    .create(&PostParams::default(), &pod)
                    .await
                    .err()
                    .map(|e| match e {
                        kube::Error::Api(status) => status.message.clone(),
                        other => other.to_string(),
                    });
                done.push(Timed {
                    started: started - origin,
                    latency: started.elapsed(),
                    error,
                });
            }
            done
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        match task.await {
            Ok(mut done) => all.append(&mut done),
            Err(e) => all.push(Timed {
                started: Duration::ZERO,
                latency: Duration::MAX,
                error: Some(format!("the task failed: {e}")),
            }),
        }
    }
    all
}

pub(crate) struct CelRound {
    pub(crate) config: CelConfig,
    /// Creates answered within the measured window.
    pub(crate) stats: Stats,
    pub(crate) latencies: Vec<Duration>,
    /// Creates answered per second of the measured window.
    pub(crate) throughput: f64,
    /// Pods admitted in the round, warm-up and the last answers after the window included.
    pub(crate) admitted: usize,
    /// kanon: evaluations of each of its 10 policies during the round (the least and the most).
    pub(crate) evaluations: Option<(f64, f64)>,
    /// The apiserver's mean time per admitted CREATE in its `ValidatingAdmissionPolicy` and
    /// `ValidatingAdmissionWebhook` plugins during the round.
    pub(crate) plugin_means: [Duration; 2],
    /// CPU time per admitted Pod of each of [`CPU_PROCESSES`] over the round (warm-up
    /// included), and the share of the machine's CPUs all of them used.
    pub(crate) cpu_per_create: [Duration; 5],
    pub(crate) cpu_share: f64,
    pub(crate) load: String,
}

pub(crate) fn cel_round(
    world: &World,
    settings: &Settings,
    number: usize,
    config: CelConfig,
) -> Result<CelRound> {
    let pod: Pod = serde_json::from_value(cel_pod("template"))?;
    let warmup = Duration::from_secs(settings.cel_warmup_secs.into());
    let window = Duration::from_secs(settings.cel_round_secs.into());
    let before = world.kanon_cel_evaluations()?;
    let plugins_before = world.validating_plugins()?;
    // `KANON_BENCH_APISERVER_PROFILE=DIR`: kube-apiserver's CPU profile over the measured
    // window, to DIR/cel-round-<n>-<configuration>.pprof (`go tool pprof -top FILE`).
    let profile = std::env::var_os("KANON_BENCH_APISERVER_PROFILE").map(|dir| {
        let mut kubectl = world.control_plane().kubectl();
        kubectl.args([
            "get",
            "--raw",
            &format!("/debug/pprof/profile?seconds={}", settings.cel_round_secs),
        ]);
        let slug = config.name().replace([' ', ','], "-").replace("--", "-");
        let path = Path::new(&dir).join(format!("cel-round-{number}-{slug}.pprof"));
        std::thread::spawn(move || -> Result<PathBuf> {
            std::thread::sleep(warmup);
            let out = kubectl.output()?;
            ensure!(out.status.success(), "the profile: {}", text(&out));
            std::fs::write(&path, &out.stdout)?;
            Ok(path)
        })
    });
    let cpu_before = cpu_times(world);
    let began = Instant::now();
    let creates = world.runtime.block_on(creates_closed_loop(
        world.pods(CEL_NS),
        pod,
        &format!("c{number}"),
        settings.cel_clients,
        warmup + window,
    ));
    let wall = began.elapsed();
    let cpu_after = cpu_times(world);
    let load = load_average();
    if let Some(profile) = profile {
        match profile.join() {
            Ok(Ok(path)) => eprintln!("bench: kube-apiserver's profile in {}", path.display()),
            Ok(Err(error)) => eprintln!("bench: kube-apiserver's profile: {error:#}"),
            Err(_) => eprintln!("bench: kube-apiserver's profile: the thread panicked"),
        }
    }
    let after = world.kanon_cel_evaluations()?;
    let plugins_after = world.validating_plugins()?;
    let errors: Vec<&String> = creates.iter().filter_map(|c| c.error.as_ref()).collect();
    ensure!(
        errors.is_empty(),
        "{}: {} of {} creates refused; the first: {:?}",
        config.name(),
        errors.len(),
        creates.len(),
        &errors[..errors.len().min(3)]
    );
    let admitted = creates.len();
    let latencies: Vec<Duration> = creates
        .iter()
        .filter(|c| {
            let answered = c.started + c.latency;
            answered >= warmup && answered < warmup + window
        })
        .map(|c| c.latency)
        .collect();
    let throughput = latencies.len() as f64 / window.as_secs_f64();
    // Every admitted Pod is stored.
    let stored = world
        .runtime
        .block_on(world.pods(CEL_NS).list_metadata(&ListParams::default()))?
        .items
        .len();
    ensure!(
        stored == admitted,
        "{}: {admitted} creates admitted, {stored} Pods stored",
        config.name()
    );
    // With kanon, every admitted Pod went through each of its 10 policies once; otherwise
    // none of them ran.
    let deltas: Vec<f64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    let expected = if config == CelConfig::KanonCel {
        admitted as f64
    } else {
        0.0
    };
    ensure!(
        deltas.iter().all(|&d| d == expected),
        "{}: {admitted} Pods admitted, but kanon's CEL policies were evaluated {deltas:?} times",
        config.name()
    );
    let evaluations = (config == CelConfig::KanonCel).then(|| {
        let least = deltas.iter().copied().fold(f64::INFINITY, f64::min);
        let most = deltas.iter().copied().fold(0.0, f64::max);
        (least, most)
    });
    let cpu_used: [Duration; 5] =
        std::array::from_fn(|i| cpu_after[i].saturating_sub(cpu_before[i]));
    let cpu_per_create = cpu_used.map(|d| d / admitted.max(1) as u32);
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let cpu_share = cpu_used.iter().sum::<Duration>().as_secs_f64() / wall.as_secs_f64() / cpus;
    let plugin_means = [0, 1].map(|i| {
        let (calls, seconds) = (
            plugins_after[i].0 - plugins_before[i].0,
            plugins_after[i].1 - plugins_before[i].1,
        );
        if calls > 0.0 {
            Duration::from_secs_f64(seconds / calls)
        } else {
            Duration::ZERO
        }
    });
    let stats = stats(&latencies);
    eprintln!(
        "bench: CEL round {number} ({}): {admitted} Pods admitted, {:.0} creates/s, p50 {}, p99 {}; load {load}",
        config.name(),
        throughput,
        ms(stats.p50),
        ms(stats.p99)
    );
    Ok(CelRound {
        config,
        stats,
        latencies,
        throughput,
        admitted,
        evaluations,
        plugin_means,
        cpu_per_create,
        cpu_share,
        load,
    })
}

/// Part 4: the rounds, the configurations alternating (their order rotated every round).
pub(crate) fn cel_through_apiserver(
    world: &mut World,
    settings: &Settings,
) -> Result<Vec<CelRound>> {
    world.cluster.pod_namespace(CEL_NS)?;
    for rule in &CEL_RULES {
        world.apply_policy(&cel_cvp(rule))?;
    }
    let cvps = cvps().len();
    world.wait_policies_ready("ClusterValidatePolicy", cvps + CEL_RULES.len())?;
    world.wait_cel_config(CelConfig::NoPolicy)?;
    eprintln!(
        "bench: {} kanon CEL policies ready; {} concurrent clients",
        CEL_RULES.len(),
        settings.cel_clients
    );
    let mut rounds = Vec::new();
    for round in 0..settings.cel_rounds {
        for k in 0..CelConfig::ALL.len() {
            let config = CelConfig::ALL[(round + k) % CelConfig::ALL.len()];
            world.enter_cel_config(config)?;
            std::thread::sleep(Duration::from_secs(2));
            rounds.push(cel_round(world, settings, rounds.len() + 1, config)?);
            // Still in force at the end of the round.
            world.wait_cel_config(config)?;
            world.leave_cel_config(config)?;
            world.delete_many_pods(CEL_NS)?;
        }
    }
    world.kubectl(&[
        "delete",
        "clustervalidatepolicies",
        "-l",
        "bench.kanon.dev/cel=true",
    ])?;
    world.wait_policies_ready("ClusterValidatePolicy", cvps)?;
    Ok(rounds)
}
