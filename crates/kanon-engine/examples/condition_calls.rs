//! Runs one validate `condition` that denies the Pod of `benches/cases`, the way the webhook
//! does (`PolicySet::validate`), many times, for counting instructions (BENCHMARKS.md):
//!
//! ```sh
//! cargo build --release -p kanon-engine --example condition_calls
//! valgrind --tool=callgrind --callgrind-out-file=cg.out --toggle-collect='condition_calls::run_once' \
//!     target/release/examples/condition_calls templated 2000
//! callgrind_annotate --inclusive=yes cg.out | grep -m1 'run_once'    # ÷ 2000: per call
//! ```
//!
//! Cases (each denies): `plain` (`Gt` on one field, a message without placeholders),
//! `templated` (the same with `{{ object.metadata.name }}` and `{{ data }}` in the message),
//! `every-container` (`Exist` under `allow` through `$.spec.containers[*]…`, one container
//! lacking the field, its name in the message). Without valgrind it prints the mean time per
//! call.

use std::process::ExitCode;

// The Pod of the `template` benches.
#[path = "../benches/cases/mod.rs"]
#[allow(dead_code)]
mod cases;

use kanon_api::Operation;
use kanon_engine::{NoObjects, PolicySet, Request, compile_document};
use serde_json::{Value, json};

/// The allocator of the `kanon` binary, as in the benches.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// One evaluation, kept out of line so that callgrind can count it alone.
#[inline(never)]
fn run_once(set: &PolicySet, request: &Request) -> usize {
    kanon_engine::block_on(set.validate(request, None, &NoObjects))
        .messages
        .len()
}

fn condition(case: &str) -> Option<Value> {
    let gt = |message: &str| {
        json!({"cond": "Gt", "dataRef": {"from": "current", "path": "/spec/containers/0/resources/limits/cpu"},
               "value": {"string": "100m"}, "message": message})
    };
    Some(match case {
        "plain" => gt("the cpu limit is too high"),
        "templated" => gt("Pod {{ object.metadata.name }}: the cpu limit {{ data }} is too high"),
        "every-container" => json!({
            "cond": "Exist", "affectMode": "allow",
            "dataRef": {"from": "current", "path": "$.spec.containers[*].securityContext.runAsNonRoot"},
            "message": "container {{ item.name }} does not set runAsNonRoot",
        }),
        _ => return None,
    })
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let case = args.next().unwrap_or_default();
    let calls: usize = args.next().and_then(|n| n.parse().ok()).unwrap_or(100_000);
    let Some(condition) = condition(&case) else {
        eprintln!(
            "usage: condition_calls CASE [CALLS]; CASE is plain, templated or every-container"
        );
        return ExitCode::from(2);
    };
    let policy = json!({
        "apiVersion": "policy.kanon.dev/v1alpha1", "kind": "ClusterValidatePolicy",
        "metadata": {"name": "bench"},
        "spec": {"resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
                 "validateRules": [{"targetOperations": ["CREATE"],
                                    "template": {"type": "condition", "condition": condition}}]},
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
    let request = match Request::from_objects(Operation::Create, Some(cases::pod()), None) {
        Ok(request) => request,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let first = kanon_engine::block_on(set.validate(&request, None, &NoObjects));
    if first.allowed || !first.warnings.is_empty() {
        eprintln!("{case}: expected a denial without warnings, got {first:?}");
        return ExitCode::FAILURE;
    }
    println!("{case}: {}", first.messages.join("; "));
    let started = std::time::Instant::now();
    let denials: usize = (0..calls).map(|_| run_once(&set, &request)).sum();
    let elapsed = started.elapsed();
    println!(
        "{case}: {calls} calls, {denials} denials, {:.3} µs per call",
        elapsed.as_secs_f64() * 1e6 / calls.max(1) as f64
    );
    ExitCode::SUCCESS
}
