//! Runs one matched template (or the plaintext floor) of `benches/cases` on its Pod, the
//! way the webhook does (`mutate_patch`, in place), many times, for counting instructions,
//! which unlike times do not move with the machine's load (BENCHMARKS.md):
//!
//! ```sh
//! cargo build --release -p kanon-engine --example template_calls
//! valgrind --tool=callgrind --callgrind-out-file=cg.out --toggle-collect='template_calls::run_once' \
//!     target/release/examples/template_calls resources 2000
//! callgrind_annotate --inclusive=yes cg.out | grep -m1 'run_once'    # ÷ 2000: per call
//! ```
//!
//! `run_once` counts the evaluation and dropping what is left of the request and the decision
//! (`mutate_patch` itself may be inlined into it).
//!
//! Cases: floor and each template of `benches/cases` (labels, annotations, nodeSelector,
//! resources, resourcesOversell, tolerations, affinity). Without valgrind it prints the mean
//! time per call.

use std::process::ExitCode;

// The Pod and templates of the `template` benches.
#[path = "../benches/cases/mod.rs"]
mod cases;

use kanon_api::Operation;
use kanon_engine::{NoObjects, PolicySet, Request, compile_document};

/// The allocator of the `kanon` binary, as in the benches.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    let policy = match case.as_str() {
        "floor" => Some(cases::floor()),
        name => cases::templates()
            .into_iter()
            .find(|(template, _)| *template == name)
            .map(|(_, template)| cases::override_template(template)),
    };
    let Some(policy) = policy else {
        eprintln!(
            "usage: template_calls CASE [CALLS]; CASE is floor, labels, annotations, nodeSelector, resources, resourcesOversell, tolerations or affinity"
        );
        return ExitCode::from(2);
    };
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
