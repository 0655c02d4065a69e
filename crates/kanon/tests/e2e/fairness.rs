//! One tenant's costly CEL rules slow only the reviews they select (issue 34, finding 2):
//! through kube-apiserver, a tenant's ValidatePolicy of 40 rules × 14 validations of about
//! 600,000 cost units each is flooded with Pods, and another namespace's ConfigMap dry runs
//! keep being admitted meanwhile, each within its webhook's timeout, none failing.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use kube::api::{DynamicObject, PostParams};
use serde_json::{Value, json};

use crate::Scenario;
use crate::admission::{install, policy};
use crate::env::Env;

pub const SCENARIOS: &[Scenario] = &[(
    "fairness::a_tenants_costly_cel_rules_do_not_slow_another_namespace",
    a_tenants_costly_cel_rules_do_not_slow_another_namespace,
)];

const TENANT: &str = "fair-tenant";
const OTHER: &str = "fair-other";
const POLICY: &str = "costly";
/// The tenant's Pods in flight at once, as in the finding.
const FLOOD: usize = 8;
/// How long the other namespace's dry runs are measured under the flood.
const MEASURED: Duration = Duration::from_secs(15);
/// The webhooks' timeout: a dry run slower than this would have failed under `Fail`.
const WEBHOOK_TIMEOUT: Duration = Duration::from_secs(10);

/// 40 rules × 14 validations of about 600,000 units each: 336,000,000 units per review were
/// the budget per rule; 10,000,000 now, the budget per policy.
fn costly_spec() -> Value {
    let validations: Vec<Value> = (0..14)
        .map(|_| json!({"expression": "lists.range(600000).size() > 0"}))
        .collect();
    let rules: Vec<Value> = (0..40)
        .map(|i| {
            json!({"name": format!("costly-{i}"), "targetOperations": ["CREATE"],
                   "cel": {"validations": validations}})
        })
        .collect();
    json!({
        "failurePolicy": "Fail",
        "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
        "validateRules": rules,
    })
}

fn pod(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": TENANT},
           "spec": {"containers": [{"name": "app", "image": "registry.example/app:1"}]}})
}

fn configmap(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "namespace": OTHER}, "data": {"key": "value"}})
}

fn dry_run() -> PostParams {
    PostParams {
        dry_run: true,
        ..PostParams::default()
    }
}

fn a_tenants_costly_cel_rules_do_not_slow_another_namespace(env: &mut Env) {
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| flooded(env)));
    env.delete_policy("ValidatePolicy", Some(TENANT), POLICY);
    for ns in [TENANT, OTHER] {
        let _ = env.kubectl(&[
            "delete",
            "--ignore-not-found",
            "--wait=false",
            "namespace",
            ns,
        ]);
    }
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

fn flooded(env: &mut Env) {
    env.namespace(TENANT, json!({}));
    env.namespace(OTHER, json!({}));
    install(
        env,
        &policy("ValidatePolicy", Some(TENANT), POLICY, costly_spec()),
    );
    // The tenant's Pod meets its policy (and runs out of its budget: denied under `Fail`).
    let denied = env
        .create_with(&pod("probe"), &dry_run())
        .expect_err("the costly policy denies");
    assert!(denied.contains("running out of cost budget"), "{denied}");

    let pods = env.api("v1", "Pod", "pods", Some(TENANT));
    let stop = Arc::new(AtomicBool::new(false));
    let (answered, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let flood: Vec<_> = (0..FLOOD)
        .map(|client| {
            let (pods, stop) = (pods.clone(), stop.clone());
            let (answered, failed) = (answered.clone(), failed.clone());
            env.runtime.spawn(async move {
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let object: DynamicObject =
                        serde_json::from_value(pod(&format!("flood-{client}-{n}"))).expect("a Pod");
                    match pods.create(&dry_run(), &object).await {
                        // Denied by the policy's budget: the answer the tenant's Pods get.
                        Err(kube::Error::Api(status)) if status.message.contains("cost budget") => {
                            answered.fetch_add(1, Ordering::Relaxed);
                        }
                        _ => {
                            failed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(1));

    // Another team's ConfigMaps, dry runs one after another: each admitted, within the timeout.
    let started = Instant::now();
    let mut times = Vec::new();
    let mut n = 0;
    while started.elapsed() < MEASURED {
        n += 1;
        let asked = Instant::now();
        let result = env.create_with(&configmap(&format!("settings-{n}")), &dry_run());
        let took = asked.elapsed();
        if let Err(refused) = result {
            stop.store(true, Ordering::Relaxed);
            panic!(
                "another namespace's ConfigMap failed under the tenant's flood after {took:?}: {refused}"
            );
        }
        assert!(took < WEBHOOK_TIMEOUT, "a ConfigMap took {took:?}");
        times.push(took);
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::Relaxed);
    for task in flood {
        let _ = env.runtime.block_on(task);
    }
    times.sort();
    let at = |q: f64| times[((times.len() as f64 * q) as usize).min(times.len() - 1)];
    eprintln!(
        "e2e: {} ConfigMap dry runs of another namespace under the tenant's flood: p50 {:?}, p99 {:?}, max {:?}; the tenant's Pods: {} answered, {} other outcomes",
        times.len(),
        at(0.5),
        at(0.99),
        times[times.len() - 1],
        answered.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed),
    );
    assert!(
        answered.load(Ordering::Relaxed) > 0,
        "the flood reached the policy"
    );
    // Answered promptly, not near the timeout: a review no policy selects waits for no
    // evaluation.
    assert!(at(0.99) < Duration::from_secs(2), "p99 {:?}", at(0.99));
}
