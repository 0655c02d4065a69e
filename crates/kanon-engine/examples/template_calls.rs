//! Runs one matched template (or the plaintext floor) on the Pod of `benches/programs.rs` the
//! way the webhook does (`mutate_patch`, in place), many times, for counting instructions,
//! which unlike times do not move with the machine's load (BENCHMARKS.md):
//!
//! ```sh
//! cargo build --release -p kanon-engine --example template_calls
//! valgrind --tool=callgrind --callgrind-out-file=cg.out --toggle-collect='template_calls::run_once' \
//!     target/release/examples/template_calls resources 2000
//! callgrind_annotate --inclusive=yes cg.out | grep -m1 'mutate_patch'    # ÷ 2000: per call
//! ```
//!
//! Cases: floor, labels, annotations, nodeSelector, tolerations, resources, resourcesOversell,
//! affinity. Without valgrind it prints the mean time per call.

use std::process::ExitCode;

use kanon_api::Operation;
use kanon_engine::{NoObjects, PolicySet, Request, compile_document};
use serde_json::{Value, json};

fn pod() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-0", "namespace": "shop", "labels": {"app": "web", "tier": "frontend"},
                     "annotations": {"kubernetes.io/psp": "restricted"}},
        "spec": {
            "containers": [
                {"name": "nginx", "image": "nginx:1.27", "ports": [{"containerPort": 80}],
                 "resources": {"limits": {"cpu": "500m", "memory": "256Mi"}}},
                {"name": "sidecar", "image": "busybox:1.36", "command": ["sh", "-c", "sleep 3600"]}
            ],
            "restartPolicy": "Always"
        }
    })
}

/// The overriders of the case, as in `benches/programs.rs`.
fn overriders(case: &str) -> Option<Value> {
    let template = |t: Value| Some(json!({"template": t}));
    match case {
        "floor" => Some(json!({"plaintext": [
            {"op": "add", "path": "/metadata/labels/team", "value": "shop"}]})),
        "labels" => template(
            json!({"type": "labels", "operation": "add", "path": "team", "value": {"string": "shop"}}),
        ),
        "annotations" => template(
            json!({"type": "annotations", "operation": "add", "path": "kanon.dev/owner", "value": {"string": "platform"}}),
        ),
        "nodeSelector" => template(
            json!({"type": "nodeSelector", "operation": "add", "path": "disktype", "value": {"string": "ssd"}}),
        ),
        "tolerations" => template(json!({"type": "tolerations", "operation": "add",
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "shop", "effect": "NoSchedule"}]})),
        "resources" => template(
            json!({"type": "resources", "operation": "add", "containerNames": ["nginx"],
            "resources": {"requests": {"cpu": "250m", "memory": "128Mi"}}}),
        ),
        "resourcesOversell" => template(json!({"type": "resourcesOversell", "operation": "add",
            "resourcesOversell": {"cpuFactor": "0.5", "memoryFactor": "0.5"}})),
        "affinity" => template(
            json!({"type": "affinity", "operation": "add", "affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}]}}}}),
        ),
        _ => None,
    }
}

/// One evaluation, kept out of line so that callgrind can count it alone.
#[inline(never)]
fn run_once(set: &PolicySet, mut request: Request) -> usize {
    kanon_engine::block_on(set.mutate_patch(&mut request, &NoObjects))
        .patch
        .len()
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let case = args.next().unwrap_or_default();
    let calls: usize = args.next().and_then(|n| n.parse().ok()).unwrap_or(100_000);
    let Some(overriders) = overriders(&case) else {
        eprintln!(
            "usage: template_calls CASE [CALLS]; CASE is floor, labels, annotations, nodeSelector, tolerations, resources, resourcesOversell or affinity"
        );
        return ExitCode::from(2);
    };
    let policy = json!({
        "apiVersion": "policy.kanon.dev/v1alpha1", "kind": "ClusterOverridePolicy",
        "metadata": {"name": "tpl"},
        "spec": {"resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
                 "overrideRules": [{"overriders": overriders}]}
    });
    let set = match compile_document(&policy).map(|p| PolicySet::build(vec![p])) {
        Ok(Ok(set)) => set,
        Ok(Err(e)) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let request = match Request::from_objects(Operation::Create, Some(pod()), None) {
        Ok(request) => request,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    // Copies made before, so that only the evaluation (and dropping what it leaves) is counted.
    let requests: Vec<Request> = (0..calls).map(|_| request.clone()).collect();
    let started = std::time::Instant::now();
    let operations: usize = requests.into_iter().map(|r| run_once(&set, r)).sum();
    let elapsed = started.elapsed();
    if operations == 0 {
        eprintln!("{case}: the template changed nothing");
        return ExitCode::FAILURE;
    }
    println!(
        "{case}: {calls} calls, {operations} patch operations, {:.3} µs per call",
        elapsed.as_secs_f64() * 1e6 / calls.max(1) as f64
    );
    ExitCode::SUCCESS
}
