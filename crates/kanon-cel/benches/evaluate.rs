//! kanon-cel's evaluation speed on admission-policy expressions, to compare with cel-go as
//! kube-apiserver 1.35 runs it (issue 19 §5): the expressions and objects are those of
//! `benches/cases.json`, which the Go benchmark in `benches/cel-go/` reads too;
//! `scripts/cel-bench.sh` runs both sides and prints the ratios.
//!
//! Each expression is compiled once in kanon's environment for CEL rules (kube-apiserver's base
//! environment with `object`, `oldObject`, `request`, `namespaceObject` and `references` declared
//! `dyn`; a case marked `mutation` also gets `jsonpatch.escapeKey` and the `JSONPatch` type, as
//! MutatingAdmissionPolicy's expressions do), then evaluated with a `Budget` of 1,000,000 (the
//! per-call limit) over `Value::from_json` of the already decoded object. Only the evaluation is
//! timed: decoding the JSON and compiling happen once, outside.
//!
//! ```sh
//! cargo bench -p kanon-cel --bench evaluate                               # the timings
//! KANON_CEL_BENCH_RESULTS=1 cargo bench -p kanon-cel --bench evaluate     # each case's result
//! ```

use std::path::Path;

use criterion::{Criterion, black_box};
use kanon_cel::{Budget, Env, Program, Type, Value};
use serde_json::Value as Json;

// The allocator of the `kanon` binary, so that the figures are the server's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// kube-apiserver's per-call cost limit, kanon's default budget for one expression.
const PER_CALL_LIMIT: u64 = 1_000_000;

/// The variables of kanon's CEL rules, in slot order (kanon-engine's `BASE_VARIABLES`).
const VARIABLES: [&str; 5] = [
    "object",
    "oldObject",
    "request",
    "namespaceObject",
    "references",
];

struct Case {
    name: String,
    object: Json,
    program: Program,
}

fn environment(mutation: bool) -> Env {
    let mut env = Env::kubernetes();
    for name in VARIABLES {
        env.declare_variable(name, Type::Dyn);
    }
    if mutation {
        kanon_cel::library::install_patch_types(&mut env);
        env.declare_object("JSONPatch");
    }
    env
}

fn load() -> Vec<Case> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/cases.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("reading {}: {error}", path.display()));
    let file: Json = serde_json::from_str(&text)
        .unwrap_or_else(|error| panic!("parsing {}: {error}", path.display()));
    let (validating, mutating) = (environment(false), environment(true));
    let cases = file["cases"].as_array().expect("cases: a list");
    cases
        .iter()
        .map(|case| {
            let name = case["name"].as_str().expect("name").to_owned();
            let expression = case["expression"].as_str().expect("expression");
            let object_name = case["object"].as_str().expect("object");
            let object = file["objects"][object_name].clone();
            assert!(object.is_object(), "case {name}: no object {object_name:?}");
            let env = if case["mutation"].as_bool().unwrap_or(false) {
                &mutating
            } else {
                &validating
            };
            let program = env
                .compile(expression)
                .unwrap_or_else(|error| panic!("case {name}: {error}"));
            Case {
                name,
                object,
                program,
            }
        })
        .collect()
}

/// One evaluation, as kanon runs a rule's expression on a CREATE: `object` set, the rest null.
fn evaluate<'a>(program: &Program, variables: &[Value<'a>]) -> (Result<Value<'a>, String>, u64) {
    let mut budget = Budget::new(PER_CALL_LIMIT);
    let result = program
        .eval(variables, &mut budget)
        .map_err(|error| error.to_string());
    (result, budget.spent)
}

fn variables(object: &Json) -> [Value<'_>; 5] {
    [
        Value::from_json(object),
        Value::Null,
        Value::Null,
        Value::Null,
        Value::Null,
    ]
}

/// Each case's result as JSON, the form the Go side prints too.
fn print_results(cases: &[Case]) {
    for case in cases {
        let (result, cost) = evaluate(&case.program, &variables(&case.object));
        let mut line = serde_json::Map::new();
        line.insert("name".into(), Json::from(case.name.clone()));
        line.insert("cost".into(), Json::from(cost));
        match result.and_then(|value| value.to_json()) {
            Ok(value) => line.insert("value".into(), value),
            Err(error) => line.insert("error".into(), Json::from(error)),
        };
        println!("RESULT {}", Json::Object(line));
    }
}

fn bench(criterion: &mut Criterion, cases: &[Case]) {
    let mut group = criterion.benchmark_group("kanon_cel");
    for case in cases {
        let variables = variables(&case.object);
        if let (Err(error), _) = evaluate(&case.program, &variables) {
            panic!("case {}: {error}", case.name);
        }
        group.bench_function(case.name.as_str(), |bencher| {
            bencher.iter(|| {
                let mut budget = Budget::new(PER_CALL_LIMIT);
                black_box(case.program.eval(black_box(&variables), &mut budget))
            })
        });
    }
    group.finish();
}

fn main() {
    let cases = load();
    if std::env::var_os("KANON_CEL_BENCH_RESULTS").is_some() {
        print_results(&cases);
        return;
    }
    let mut criterion = Criterion::default().configure_from_args();
    bench(&mut criterion, &cases);
    criterion.final_summary();
}
