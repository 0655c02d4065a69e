//! Differential test of kanon-cel against kube-apiserver 1.35's own CEL environment.
//!
//! The oracle is tests/oracle/main.go: it builds `environment.MustBaseEnvSet(1.35)`'s
//! `StoredExpressions` environment (k8s.io/apiserver v0.35.8, the control plane's version),
//! declares the admission variables `object`, `oldObject` and `params` as `dyn`, and
//! `namespaceObject` and `request` with the admission plugins' types (`BuildNamespaceType`,
//! `BuildRequestType`; kanon-cel's `library::admission`), and compiles and evaluates each expression as the admission plugins do:
//! kube-apiserver's program options (OptOptimize, Kubernetes' cost estimator, per-call limit
//! 1,000,000). kanon-cel runs the same case in `Env::kubernetes()` with the same variables and a
//! `Budget` of the same limit. Both sides render values canonically (tests/oracle/render.rs and
//! `render` in main.go) and the test compares:
//! - **refusal**: one side refuses to compile what the other compiles;
//! - **compile-text**: both refuse, with different first lines of the message;
//! - **static-type**: both compile, to different static types (`Type.String()` of cel-go's
//!   checked result against kanon-cel's `Program::result_type`): what decides whether a
//!   policy's field (a validation's `bool`, a message's `string`) accepts the expression;
//! - **outcome**: one side gives a value, the other an error;
//! - **value**: both give values whose rendering or type name differ;
//! - **error-text**: both fail, with different messages (except where kube-apiserver's message
//!   is its own recovered crash, `internal error: interface conversion: …`: kanon says the real
//!   cause there, and that is no difference);
//! - **panic**: kanon-cel panicked (caught; recorded, not a crash);
//! - **cost**: the results agree but the actual costs differ (compared only then, so that
//!   value agreement stays visible on its own).
//!
//! Cases: tests/oracle/corpus.txt (categories, variable sets from tests/oracle/variables.json)
//! and tests/oracle/generate.rs (operators and functions crossed with edge-case arguments).
//!
//! A second test, `random_expressions_agree_with_kube_apiserver`, compares expressions generated
//! at random (tests/oracle/random.rs: well-typed trees over the variable sets) from a seed, a
//! third of them with parts written as an admission policy's `variables` (composed on the Go
//! side by the admission plugins' composition, on kanon's by `kanon_cel::composition`, which
//! kanon's policies use: types as declared, computed when first read, costs, error words): each
//! difference is shrunk to a small reproducer (a node replaced by a child of its type, or by a
//! leaf, while the difference stays of the same kind), and every reproducer must be listed in
//! tests/oracle/known-random-differences.txt. `KANON_CEL_RANDOM_SEED` (a number, or `fresh`)
//! and `KANON_CEL_RANDOM_CASES` (default 2,000) choose the run; scripts/cel-random.sh runs
//! 100,000 on a fresh seed.
//!
//! Every difference must be listed in tests/oracle/known-differences.txt (`case id  # kind:
//! reason`); an unlisted difference, a listed case that now agrees, or one whose kind of
//! difference changed fails the test.
//!
//! Run:   cargo test -p kanon-cel --test oracle -- --nocapture
//! Bless: KANON_CEL_ORACLE_BLESS=1 cargo test -p kanon-cel --test oracle
//!        (rewrites known-differences.txt with this run's differences, keeping the reasons of
//!        entries that still differ the same way)
//!
//! The oracle is built with `go` (on PATH or in /usr/local/go/bin; missing Go fails the test)
//! once per version of main.go/go.mod/go.sum, into kanon's cache (see tests/oracle/go.rs).

#[path = "oracle/corpus.rs"]
mod corpus;
#[path = "oracle/fields.rs"]
mod fields;
#[path = "oracle/generate.rs"]
mod generate;
#[path = "oracle/go.rs"]
mod go;
#[path = "oracle/random.rs"]
mod random;
#[path = "oracle/render.rs"]
mod render;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write};
use std::panic::{self, AssertUnwindSafe};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use kanon_cel::composition;
use kanon_cel::{Activation, Budget, Env, EvalError, Type, Value};
use serde_json::{Value as Json, json};

use corpus::{Case, VARIABLES, VariableSets};

/// kube-apiserver's per-call cost limit (`celconfig.PerCallLimit`), set by the oracle's
/// environment too.
const COST_LIMIT: u64 = 1_000_000;
/// Longest detail kept in a reason of known-differences.txt.
const MAX_REASON: usize = 240;
const KINDS: [&str; 8] = [
    "refusal",
    "compile-text",
    "static-type",
    "outcome",
    "value",
    "error-text",
    "panic",
    "cost",
];

/// What one side made of a case.
#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    /// Compilation refused; the first line of the message.
    Refused(String),
    Value {
        rendering: String,
        type_name: String,
        cost: u64,
    },
    Error {
        text: String,
        cost: u64,
    },
    Panic(String),
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Refused(text) => write!(f, "refused: {text}"),
            Outcome::Value {
                rendering,
                type_name,
                cost,
            } => write!(f, "{rendering} ({type_name}, cost {cost})"),
            Outcome::Error { text, cost } => write!(f, "error: {text} (cost {cost})"),
            Outcome::Panic(text) => write!(f, "panic: {text}"),
        }
    }
}

struct Difference {
    kind: &'static str,
    detail: String,
}

#[test]
fn kanon_cel_agrees_with_kube_apiserver() {
    let started = Instant::now();
    let dir = go::source_dir();
    let sets = corpus::load_variable_sets(&dir.join("variables.json"));
    let mut cases = corpus::load_corpus(&dir.join("corpus.txt"), &sets);
    // A generated case the corpus already holds is the corpus's.
    let written: HashSet<String> = cases.iter().map(|case| case.id.clone()).collect();
    cases.extend(
        generate::cases()
            .into_iter()
            .filter(|case| !written.contains(&case.id)),
    );
    corpus::check_ids(&cases);

    let binary = go::oracle_binary();
    let (oracle, oracle_checked) = run_oracle(&binary, &cases, &sets);
    let (kanon, kanon_checked) = run_kanon(&cases, &sets);

    let differences = differences(&oracle, &oracle_checked, &kanon, &kanon_checked);
    let report = report(&cases, &oracle, &kanon, &differences);
    println!("{report}");
    println!(
        "{} cases in {:.1}s",
        cases.len(),
        started.elapsed().as_secs_f64()
    );

    let path = dir.join("known-differences.txt");
    let known = read_known(&path);
    if std::env::var_os("KANON_CEL_ORACLE_BLESS").is_some_and(|value| value == "1") {
        let text = blessed(&cases, &differences, &known);
        std::fs::write(&path, text)
            .unwrap_or_else(|error| panic!("writing {}: {error}", path.display()));
        println!("blessed: wrote {}", path.display());
        return;
    }
    let mut problems = String::new();
    let mut seen = HashMap::new();
    for (index, (case, difference)) in cases.iter().zip(&differences).enumerate() {
        seen.insert(case.id.as_str(), ());
        match (difference, known.get(&case.id)) {
            (None, None) => {}
            (Some(difference), None) => {
                let _ = writeln!(
                    problems,
                    "new difference ({}) in {}: {}",
                    difference.kind, case.id, difference.detail
                );
            }
            (None, Some(_)) if oracle[index].1 => {}
            (None, Some(_)) => {
                let _ = writeln!(problems, "now agrees, remove it: {}", case.id);
            }
            (Some(difference), Some((kind, _))) if kind != difference.kind => {
                let _ = writeln!(
                    problems,
                    "difference changed from {kind} to {} in {}: {}",
                    difference.kind, case.id, difference.detail
                );
            }
            (Some(_), Some(_)) => {}
        }
    }
    for id in known.keys() {
        if !seen.contains_key(id.as_str()) {
            let _ = writeln!(problems, "listed but no such case, remove it: {id}");
        }
    }
    assert!(
        problems.is_empty(),
        "{problems}\nkanon-cel and kube-apiserver disagree in ways known-differences.txt does not \
         list. Fix kanon-cel, or accept this run as the baseline: \
         KANON_CEL_ORACLE_BLESS=1 cargo test -p kanon-cel --test oracle"
    );
}

/// cel-go's checker tries a function's overloads in the order they were declared and keeps
/// the type bindings of the first that fits, so where an argument's type is still free (an
/// element of `[]`, of a list derived from JSON) that order decides the expression's type:
/// kanon-cel must declare every overload cel-go also has in cel-go's order.
#[test]
fn overloads_are_declared_in_cel_gos_order() {
    let binary = go::oracle_binary();
    let out = Command::new(&binary)
        .arg("overloads")
        .output()
        .unwrap_or_else(|error| panic!("running {}: {error}", binary.display()));
    assert!(
        out.status.success(),
        "the oracle: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let order: BTreeMap<String, Vec<String>> =
        serde_json::from_slice(&out.stdout).expect("the oracle's overloads");
    let env = Env::kubernetes();
    let mut problems = String::new();
    for (function, cel_go) in &order {
        let ours: Vec<String> = env
            .overloads(function)
            .iter()
            .map(|overload| overload.id.to_string())
            .filter(|id| cel_go.contains(id))
            .collect();
        let theirs: Vec<&String> = cel_go.iter().filter(|id| ours.contains(id)).collect();
        if ours.iter().ne(theirs.iter().copied()) {
            let _ = writeln!(
                problems,
                "{function}: kanon-cel {ours:?}; cel-go {theirs:?}"
            );
        }
    }
    assert!(
        problems.is_empty(),
        "overloads declared in another order than cel-go's:\n{problems}"
    );
}

/// The seed of the tests' random run (any other is for scripts/cel-random.sh).
const RANDOM_SEED: u64 = 20_261_129;

#[test]
fn random_expressions_agree_with_kube_apiserver() {
    let started = Instant::now();
    let (seed, count) = (random_seed(), random_count(2_000));
    let dir = go::source_dir();
    let sets = corpus::load_variable_sets(&dir.join("variables.json"));
    let binary = go::oracle_binary();
    let generated = random::cases(seed, count);
    let cases: Vec<Case> = generated.iter().map(|(case, _)| case.clone()).collect();
    let differences = differ(&binary, &cases, &sets);

    // Each difference shrunk to its smallest reproducer; reproducers seen once.
    let mut reproducers: BTreeMap<String, Difference> = BTreeMap::new();
    let mut shrunk = 0;
    for ((case, node), difference) in generated.iter().zip(differences) {
        let Some(difference) = difference else {
            continue;
        };
        if shrunk == MAX_SHRUNK {
            reproducers.entry(case.id.clone()).or_insert(difference);
            continue;
        }
        shrunk += 1;
        let (id, difference) = shrink(&binary, &sets, &case.vars, node.clone(), difference);
        reproducers.entry(id).or_insert(difference);
    }
    println!(
        "random run: seed {seed}, {count} expressions, {} reproducers of differences, {:.1}s",
        reproducers.len(),
        started.elapsed().as_secs_f64()
    );
    let listed = dir.join("known-random-differences.txt");
    let known = read_known(&listed);
    let families = read_families(&listed);
    let mut problems = String::new();
    for (id, difference) in &reproducers {
        match known.get(id) {
            Some((kind, _)) if kind == difference.kind => {}
            _ if families.iter().any(|family| family.holds(id, difference)) => {}
            _ => {
                let _ = writeln!(
                    problems,
                    "{id}  # {}: {}",
                    difference.kind,
                    short(&difference.detail)
                );
            }
        }
    }
    assert!(
        problems.is_empty(),
        "random expressions (seed {seed}) where kanon-cel and kube-apiserver differ, shrunk; \
         fix kanon-cel, or list them in tests/oracle/known-random-differences.txt with a \
         reason:\n{problems}"
    );
}

/// The random tests' seed: `KANON_CEL_RANDOM_SEED` (a number or `fresh`), else the fixed one.
fn random_seed() -> u64 {
    match std::env::var("KANON_CEL_RANDOM_SEED").as_deref() {
        Ok("fresh") => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |elapsed| elapsed.as_nanos() as u64),
        Ok(number) => number
            .parse()
            .unwrap_or_else(|_| panic!("KANON_CEL_RANDOM_SEED={number}: a number or `fresh`")),
        Err(_) => RANDOM_SEED,
    }
}

/// How many expressions a random test generates: `KANON_CEL_RANDOM_CASES`, else `default`.
fn random_count(default: usize) -> usize {
    std::env::var("KANON_CEL_RANDOM_CASES")
        .ok()
        .and_then(|count| count.parse().ok())
        .unwrap_or(default)
}

/// Random expressions over the variable sets, each evaluated twice by kanon-cel alone: over
/// the whole documents, and over `object` and `oldObject` with every field the program is not
/// said to read removed (`Program::fields_read`, which lets a webhook decode only those). The
/// outcomes must be the same, cost included. No oracle needed: `KANON_CEL_RANDOM_SEED` and
/// `KANON_CEL_RANDOM_CASES` widen it as for the comparison with kube-apiserver.
#[test]
fn random_expressions_read_no_field_beyond_what_they_are_said_to_read() {
    let (seed, count) = (random_seed(), random_count(4_000));
    let sets = corpus::load_variable_sets(&go::source_dir().join("variables.json"));
    let (env, slots) = kanon_env();
    let null = Json::Null;
    let (mut pruned_some, mut differences) = (0, Vec::new());
    for (case, _) in random::cases(seed, count) {
        let set = &sets[&case.vars];
        let mut documents = vec![null.clone(); VARIABLES.len()];
        for (name, slot) in VARIABLES.iter().zip(&slots) {
            if let Some(document) = set.get(*name) {
                documents[*slot] = document.clone();
            }
        }
        // Every program of the case: its variables' definitions, then the expression.
        let mut composed = env.clone();
        let mut programs = Vec::new();
        for (name, expression) in &case.definitions {
            let Ok(program) = composed.compile(expression) else {
                break;
            };
            composed.declare_variable(
                &composition::declared_name(name),
                composition::variable_type(program.result_type()),
            );
            programs.push(program);
        }
        let Ok(program) = composed.compile(&case.expr) else {
            continue;
        };
        programs.push(program);
        let all: Vec<&kanon_cel::Program> = programs.iter().collect();
        let mut projected = documents.clone();
        for name in fields::PRUNED {
            let slot = slots[VARIABLES.iter().position(|v| *v == name).expect("declared")];
            projected[slot] = fields::pruned(&documents[slot], &fields::read_by(&all, name));
        }
        if projected != documents {
            pruned_some += 1;
        }
        let whole: Vec<&Json> = documents.iter().collect();
        let pruned: Vec<&Json> = projected.iter().collect();
        let run = |documents: &[&Json]| {
            panic::catch_unwind(AssertUnwindSafe(|| {
                if case.definitions.is_empty() {
                    kanon_outcome(&env, &case.expr, documents).0
                } else {
                    composed_outcome(&env, &case, documents).0
                }
            }))
            .unwrap_or_else(|payload| Outcome::Panic(panic_text(payload.as_ref())))
        };
        let (before, after) = (run(&whole), run(&pruned));
        if before != after {
            differences.push(format!("{}\n  whole: {before}\n  pruned: {after}", case.id));
        }
    }
    println!(
        "fields read: seed {seed}, {count} expressions, {pruned_some} read over pruned documents"
    );
    assert!(
        pruned_some > count / 4,
        "too few expressions ({pruned_some} of {count}) left fields unread to test anything"
    );
    assert!(
        differences.is_empty(),
        "expressions (seed {seed}) that read a field they were not said to read:\n{}",
        differences.join("\n")
    );
}

/// Differences past this many are reported as generated, not shrunk (shrinking costs runs of
/// both sides).
const MAX_SHRUNK: usize = 40;

/// Each case's difference between the two sides, if any.
fn differ(binary: &Path, cases: &[Case], sets: &VariableSets) -> Vec<Option<Difference>> {
    let (oracle, oracle_checked) = run_oracle(binary, cases, sets);
    let (kanon, kanon_checked) = run_kanon(cases, sets);
    differences(&oracle, &oracle_checked, &kanon, &kanon_checked)
}

/// Each case's difference, from both sides' outcomes and static types. An answer that depends
/// on map order is not compared: kube-apiserver iterates maps in Go's random order, kanon-cel in
/// document order.
fn differences(
    oracle: &[(Outcome, bool)],
    oracle_checked: &[Option<String>],
    kanon: &[Outcome],
    kanon_checked: &[Option<String>],
) -> Vec<Option<Difference>> {
    oracle
        .iter()
        .zip(kanon)
        .zip(oracle_checked.iter().zip(kanon_checked))
        .map(|(((oracle, unstable), kanon), (oracle_type, kanon_type))| {
            static_type_difference(kanon_type, oracle_type)
                .or_else(|| (!unstable).then(|| compare(kanon, oracle)).flatten())
        })
        .collect()
}

/// The smallest tree one step at a time that still differs in the same way: its id and its
/// difference.
fn shrink(
    binary: &Path,
    sets: &VariableSets,
    vars: &str,
    mut node: random::Node,
    mut difference: Difference,
) -> (String, Difference) {
    for _ in 0..30 {
        let mut candidates = node.smaller();
        candidates.sort_by_key(random::Node::size);
        candidates.truncate(200);
        let cases: Vec<Case> = candidates
            .iter()
            .map(|candidate| candidate.case(vars))
            .collect();
        if cases.is_empty() {
            break;
        }
        let found = differ(binary, &cases, sets)
            .into_iter()
            .zip(candidates)
            .find(|(found, _)| {
                found
                    .as_ref()
                    .is_some_and(|found| found.kind == difference.kind)
            });
        match found {
            Some((Some(found), smaller)) if smaller.size() < node.size() => {
                node = smaller;
                difference = found;
            }
            _ => break,
        }
    }
    (node.case(vars).id, difference)
}

// ---------------------------------------------------------------------------------------------
// The two sides.

/// Every case through one oracle process: JSON lines in, JSON lines out, in order. With each
/// outcome, whether the oracle saw it change from one evaluation to the next (map order).
fn run_oracle(
    binary: &Path,
    cases: &[Case],
    sets: &VariableSets,
) -> (Vec<(Outcome, bool)>, Vec<Option<String>>) {
    let mut child = Command::new(binary)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|error| panic!("starting {}: {error}", binary.display()));
    let mut input = String::new();
    for case in cases {
        let mut line = json!({"expr": case.expr, "variables": sets[&case.vars]});
        if !case.definitions.is_empty() {
            line["definitions"] = case
                .definitions
                .iter()
                .map(|(name, expression)| json!({"name": name, "expression": expression}))
                .collect();
        }
        input.push_str(&line.to_string());
        input.push('\n');
    }
    let mut stdin = child.stdin.take().expect("piped stdin");
    // Written from another thread: the oracle answers as it reads, and both pipes are bounded.
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let stdout = child.stdout.take().expect("piped stdout");
    let mut outcomes = Vec::with_capacity(cases.len());
    let mut checked = Vec::with_capacity(cases.len());
    for line in BufReader::new(stdout).lines() {
        let line = line.unwrap_or_else(|error| panic!("reading the oracle's output: {error}"));
        let answer: Json = serde_json::from_str(&line)
            .unwrap_or_else(|error| panic!("the oracle wrote {line:?}: {error}"));
        let unstable = answer.get("unstable").and_then(Json::as_bool) == Some(true);
        outcomes.push((oracle_outcome(&answer), unstable));
        checked.push(
            answer
                .get("checked")
                .and_then(Json::as_str)
                .map(str::to_owned),
        );
    }
    writer
        .join()
        .expect("writer thread")
        .unwrap_or_else(|error| panic!("writing to the oracle: {error}"));
    let status = child.wait().expect("waiting for the oracle");
    assert!(status.success(), "the oracle exited with {status}");
    assert_eq!(
        outcomes.len(),
        cases.len(),
        "the oracle answered {} of {} cases",
        outcomes.len(),
        cases.len()
    );
    (outcomes, checked)
}

fn oracle_outcome(answer: &Json) -> Outcome {
    let text = |field: &str| answer.get(field).and_then(Json::as_str).map(str::to_owned);
    let cost = answer.get("cost").and_then(Json::as_u64).unwrap_or(0);
    if let Some(message) = text("compile_error") {
        return Outcome::Refused(first_line(&message));
    }
    if let Some(message) = text("program_error") {
        return Outcome::Refused(format!("{PROGRAM}{}", first_line(&message)));
    }
    if let Some(message) = text("error") {
        return Outcome::Error {
            text: message,
            cost,
        };
    }
    match (text("value"), text("type")) {
        (Some(rendering), Some(type_name)) => Outcome::Value {
            rendering,
            type_name,
            cost,
        },
        _ => panic!("the oracle wrote {answer}"),
    }
}

/// kanon-cel's environment for the cases: the oracle's variables, each in its slot, with
/// `request` and `namespaceObject` typed as kube-apiserver types them (their slots stay).
fn kanon_env() -> (Env, Vec<usize>) {
    let mut env = Env::kubernetes();
    let slots: Vec<usize> = VARIABLES
        .iter()
        .map(|name| env.declare_variable(name, Type::Dyn))
        .collect();
    kanon_cel::library::admission::declare_variables(&mut env);
    (env, slots)
}

/// kanon-cel's outcome of each case, and the static type of those that compiled.
fn run_kanon(cases: &[Case], sets: &VariableSets) -> (Vec<Outcome>, Vec<Option<String>>) {
    let (env, slots) = kanon_env();
    let null = Json::Null;
    // A panic is a result here: keep the default hook from printing each one.
    let hook = panic::take_hook();
    panic::set_hook(Box::new(|_| {}));
    let outcomes = cases
        .iter()
        .map(|case| {
            let set = &sets[&case.vars];
            let mut documents = vec![&null; VARIABLES.len()];
            for (name, slot) in VARIABLES.iter().zip(&slots) {
                if let Some(document) = set.get(*name) {
                    documents[*slot] = document;
                }
            }
            let started = Instant::now();
            let outcome = panic::catch_unwind(AssertUnwindSafe(|| {
                if case.definitions.is_empty() {
                    kanon_outcome(&env, &case.expr, &documents)
                } else {
                    composed_outcome(&env, case, &documents)
                }
            }))
            .unwrap_or_else(|payload| (Outcome::Panic(panic_text(payload.as_ref())), None));
            (outcome, started.elapsed())
        })
        .collect::<Vec<_>>();
    panic::set_hook(hook);
    // The test must stay fast: name the cases that slow it down.
    let mut slowest: Vec<(std::time::Duration, &str)> = outcomes
        .iter()
        .zip(cases)
        .map(|((_, elapsed), case)| (*elapsed, case.id.as_str()))
        .collect();
    slowest.sort_by_key(|(elapsed, _)| std::cmp::Reverse(*elapsed));
    for (elapsed, id) in slowest
        .iter()
        .take(5)
        .filter(|(elapsed, _)| elapsed.as_millis() >= 100)
    {
        println!("slow in kanon-cel: {:.2}s {id}", elapsed.as_secs_f64());
    }
    outcomes.into_iter().map(|(answer, _)| answer).unzip()
}

fn kanon_outcome(env: &Env, expr: &str, documents: &[&Json]) -> (Outcome, Option<String>) {
    let program = match env.compile(expr) {
        Ok(program) => program,
        Err(error) => return (Outcome::Refused(first_line(&error.to_string())), None),
    };
    let checked = Some(program.result_type().runtime_text());
    let variables: Vec<Value<'_>> = documents
        .iter()
        .map(|document| Value::from_json(document))
        .collect();
    let mut budget = Budget::new(COST_LIMIT);
    let result = program.eval(&variables, &mut budget);
    (evaluated(result, &budget), checked)
}

/// The outcome of an evaluation that spent `budget`.
fn evaluated(result: Result<Value<'_>, EvalError>, budget: &Budget<'_>) -> Outcome {
    match result {
        Ok(value) => Outcome::Value {
            rendering: render::render(&value),
            type_name: value.type_of().runtime_name().to_owned(),
            cost: budget.spent,
        },
        Err(error) => Outcome::Error {
            text: error.to_string(),
            cost: budget.spent,
        },
    }
}

/// [`kanon_outcome`] of an expression that reads an admission policy's variables, composed
/// with kanon-cel's composition (what kanon's policies use): each definition compiled in an
/// environment that declares the ones before it, computed when first read.
fn composed_outcome(env: &Env, case: &Case, documents: &[&Json]) -> (Outcome, Option<String>) {
    let mut env = env.clone();
    let mut programs = Vec::with_capacity(case.definitions.len());
    for (name, expression) in &case.definitions {
        let program = match env.compile(expression) {
            Ok(program) => program,
            Err(error) => {
                let refused = first_line(&error.to_string());
                return (
                    Outcome::Refused(format!("variable {name}: {refused}")),
                    None,
                );
            }
        };
        env.declare_variable(
            &composition::declared_name(name),
            composition::variable_type(program.result_type()),
        );
        programs.push((name.as_str(), program));
    }
    let program = match env.compile(&case.expr) {
        Ok(program) => program,
        Err(error) => return (Outcome::Refused(first_line(&error.to_string())), None),
    };
    let checked = Some(program.result_type().runtime_text());
    let mut activation = Composed {
        base: documents
            .iter()
            .map(|document| Value::from_json(document))
            .collect(),
        programs: &programs,
        computed: composition::Computed::new(programs.len(), usize::MAX),
    };
    let mut budget = Budget::new(COST_LIMIT);
    let result = program.eval_with(&mut activation, &mut budget);
    (evaluated(result, &budget), checked)
}

/// The admission variables, then the policy's variables in the slots declared after them.
struct Composed<'p, 'a> {
    base: Vec<Value<'a>>,
    programs: &'p [(&'p str, kanon_cel::Program)],
    computed: composition::Computed<'a>,
}

impl<'a> Activation<'a> for Composed<'_, 'a> {
    fn resolve(&mut self, slot: usize, budget: &mut Budget<'_>) -> Result<Value<'a>, EvalError> {
        if let Some(value) = self.base.get(slot) {
            return Ok(value.clone());
        }
        let index = slot - self.base.len();
        let programs = self.programs;
        let Some((name, program)) = programs.get(index) else {
            return Ok(Value::Null);
        };
        composition::Computed::resolve(
            self,
            |activation| &mut activation.computed,
            index,
            name,
            program,
            budget,
        )
    }
}

fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "(not a string)".to_owned()
    }
}

fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or("").to_owned()
}

// ---------------------------------------------------------------------------------------------
// Comparing and reporting.

/// Both compiled, to different static types.
fn static_type_difference(kanon: &Option<String>, oracle: &Option<String>) -> Option<Difference> {
    match (kanon, oracle) {
        (Some(a), Some(b)) if a != b => Some(Difference {
            kind: "static-type",
            detail: format!("kanon {a}; oracle {b}"),
        }),
        _ => None,
    }
}

fn compare(kanon: &Outcome, oracle: &Outcome) -> Option<Difference> {
    let differ = |kind: &'static str| {
        Some(Difference {
            kind,
            detail: format!("kanon {kanon}; oracle {oracle}"),
        })
    };
    match (kanon, oracle) {
        (Outcome::Panic(_), _) => differ("panic"),
        (Outcome::Refused(a), Outcome::Refused(b)) => (!same_refusal(a, b)).then(|| Difference {
            kind: "compile-text",
            detail: format!("kanon {a:?}; oracle {b:?}"),
        }),
        (Outcome::Refused(_), _) | (_, Outcome::Refused(_)) => differ("refusal"),
        (
            Outcome::Value {
                rendering: a,
                type_name: a_type,
                cost: a_cost,
            },
            Outcome::Value {
                rendering: b,
                type_name: b_type,
                cost: b_cost,
            },
        ) => {
            if a != b || a_type != b_type {
                differ("value")
            } else if a_cost != b_cost {
                Some(Difference {
                    kind: "cost",
                    detail: format!("kanon {a_cost}; oracle {b_cost}"),
                })
            } else {
                None
            }
        }
        (
            Outcome::Error {
                text: a,
                cost: a_cost,
            },
            Outcome::Error {
                text: b,
                cost: b_cost,
            },
        ) => {
            // (Within a policy variable, the same behind `composited variable "v0" fails to
            // evaluate: `.)
            if b.starts_with(RECOVERED_CRASH) || b.contains(&format!(": {RECOVERED_CRASH}")) {
                // kube-apiserver's text is its own recovered crash; kanon says the real cause
                // (what failed first), as issue 35 asks, and no cost is compared past a crash.
                None
            } else if a != b {
                Some(Difference {
                    kind: "error-text",
                    detail: format!("kanon {a:?}; oracle {b:?}"),
                })
            } else if a_cost != b_cost {
                Some(Difference {
                    kind: "cost",
                    detail: format!("kanon {a_cost}; oracle {b_cost}"),
                })
            } else {
                None
            }
        }
        _ => differ("outcome"),
    }
}

/// How kube-apiserver words an error that is its own recovered crash (cel-go's lists library
/// converting an error value to a list: `internal error: interface conversion: *types.Err is not
/// traits.Lister: missing method Add`).
const RECOVERED_CRASH: &str = "internal error: interface conversion";

/// Marks the oracle's refusals from `cel.Program` rather than `Compile`: OptOptimize folds
/// constant calls there, and a call that fails (`int('x')`) refuses the expression with the bare
/// error. kanon-cel folds while compiling and reports it as a compile error at the call.
const PROGRAM: &str = "(program) ";

/// Same first line; an oracle's program error is the same refusal as kanon's compile error of
/// the same message, whatever its location.
fn same_refusal(kanon: &str, oracle: &str) -> bool {
    let (program, oracle) = match oracle.strip_prefix(PROGRAM) {
        Some(oracle) => (true, oracle),
        None => (false, oracle),
    };
    // A policy variable's refusal names the variable first on both sides (`variable v0: `).
    let (kanon, oracle) = match (variable_named(kanon), variable_named(oracle)) {
        (Some((a, kanon)), Some((b, oracle))) if a == b => (kanon, oracle),
        _ => (kanon, oracle),
    };
    if program {
        without_location(kanon) == oracle
    } else {
        kanon == oracle
    }
}

/// `variable v0: message` → `("v0", "message")`.
fn variable_named(text: &str) -> Option<(&str, &str)> {
    let rest = text.strip_prefix("variable ")?;
    rest.split_once(": ")
}

/// `ERROR: <input>:1:4: message` → `message`.
fn without_location(text: &str) -> &str {
    let Some(rest) = text.strip_prefix("ERROR: <input>:") else {
        return text;
    };
    // Line and column, each followed by a colon, then a space.
    let mut rest = rest;
    for _ in 0..2 {
        match rest.split_once(':') {
            Some((number, after)) if number.bytes().all(|byte| byte.is_ascii_digit()) => {
                rest = after;
            }
            _ => return text,
        }
    }
    rest.strip_prefix(' ').unwrap_or(rest)
}

#[derive(Default)]
struct Tally {
    cases: usize,
    /// Not compared: the oracle's answer depends on map order.
    unstable: usize,
    /// Everything agrees, cost included.
    agree: usize,
    /// Results agree (compile refusal and its text, value and type, error text), cost aside.
    results_agree: usize,
    cost_compared: usize,
    cost_agree: usize,
    by_kind: BTreeMap<&'static str, usize>,
}

impl Tally {
    fn add(&mut self, oracle: &(Outcome, bool), difference: Option<&Difference>) {
        self.cases += 1;
        if oracle.1 {
            self.unstable += 1;
            return;
        }
        match difference {
            None => self.agree += 1,
            Some(difference) => *self.by_kind.entry(difference.kind).or_default() += 1,
        }
        let result_agrees = difference.is_none_or(|difference| difference.kind == "cost");
        if result_agrees {
            self.results_agree += 1;
            if matches!(oracle.0, Outcome::Value { .. } | Outcome::Error { .. }) {
                self.cost_compared += 1;
                if difference.is_none() {
                    self.cost_agree += 1;
                }
            }
        }
    }

    fn line(&self, name: &str) -> String {
        let kinds: Vec<String> = self
            .by_kind
            .iter()
            .map(|(kind, count)| format!("{kind} {count}"))
            .collect();
        let compared = self.cases - self.unstable;
        format!(
            "{name:<30} {:>5} {:>10} {:>10} {:>10}   {}",
            self.cases,
            format!("{}/{compared}", self.results_agree),
            format!("{}/{}", self.cost_agree, self.cost_compared),
            format!("{}/{compared}", self.agree),
            kinds.join(", ")
        )
    }
}

fn report(
    cases: &[Case],
    oracle: &[(Outcome, bool)],
    kanon: &[Outcome],
    differences: &[Option<Difference>],
) -> String {
    let mut categories: Vec<(String, Tally)> = Vec::new();
    let mut total = Tally::default();
    for (index, case) in cases.iter().enumerate() {
        let position = match categories
            .iter()
            .position(|(name, _)| *name == case.category)
        {
            Some(position) => position,
            None => {
                categories.push((case.category.clone(), Tally::default()));
                categories.len() - 1
            }
        };
        let difference = differences[index].as_ref();
        categories[position].1.add(&oracle[index], difference);
        total.add(&oracle[index], difference);
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nkanon-cel vs kube-apiserver 1.35 CEL (k8s.io/apiserver v0.35.8)"
    );
    let _ = writeln!(
        out,
        "{:<30} {:>5} {:>10} {:>10} {:>10}   differences by kind",
        "category", "cases", "results", "cost", "all"
    );
    for (name, tally) in &categories {
        let _ = writeln!(out, "{}", tally.line(name));
    }
    let _ = writeln!(out, "{}", total.line("TOTAL"));
    let _ = writeln!(
        out,
        "results: refusal (and its first line), value and type, or error text agree, of the \
         cases compared;\ncost: costs agree, of the cases evaluated with agreeing results; \
         all: results and cost agree."
    );
    if total.unstable > 0 {
        let _ = writeln!(
            out,
            "\nnot compared, the oracle's answer changes with map order ({}): rewrite them \
             order-independent",
            total.unstable
        );
        for (case, (outcome, _)) in cases
            .iter()
            .zip(oracle)
            .filter(|(_, (_, unstable))| *unstable)
        {
            let _ = writeln!(out, "  {}\n      oracle (one of): {outcome}", case.id);
        }
    }
    let _ = writeln!(out, "\ndifferences:");
    for (index, case) in cases.iter().enumerate() {
        if let Some(difference) = &differences[index] {
            let _ = writeln!(out, "  [{}] {}", difference.kind, case.id);
            let _ = writeln!(out, "      kanon:  {}", kanon[index]);
            let _ = writeln!(out, "      oracle: {}", oracle[index].0);
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// known-differences.txt

const HEADER: &str = "\
# Cases where kanon-cel and kube-apiserver 1.35's CEL differ (tests/oracle.rs).
# One line per case: <case id>  # <kind>: <reason>. The id is the expression, prefixed by
# `[set] ` when evaluated over a variable set of variables.json; kinds are refusal,
# compile-text, outcome, value, error-text, panic, cost. Regenerate with
#   KANON_CEL_ORACLE_BLESS=1 cargo test -p kanon-cel --test oracle
# (reasons of entries that still differ the same way are kept).
";

/// Case id → (kind, reason).
/// A family of known differences (`family <kind> <text>  # reason` in
/// known-random-differences.txt): every reproducer of that kind whose case contains the text.
/// A `cost` family holds only where kanon-cel charges more than cel-go (a deliberate safety
/// charge), never less.
struct Family {
    kind: String,
    text: String,
}

impl Family {
    fn holds(&self, id: &str, difference: &Difference) -> bool {
        if difference.kind != self.kind || !id.contains(&self.text) {
            return false;
        }
        if self.kind != "cost" {
            return true;
        }
        // `kanon N; oracle M`
        let costs: Vec<u64> = difference
            .detail
            .split(|c: char| !c.is_ascii_digit())
            .filter_map(|part| part.parse().ok())
            .collect();
        matches!(costs.as_slice(), [kanon, oracle] if kanon > oracle)
    }
}

fn read_families(path: &Path) -> Vec<Family> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|line| line.trim().strip_prefix("family "))
        .map(|rest| {
            let rule = rest.split_once("  # ").map_or(rest, |(rule, _)| rule);
            let (kind, text) = rule.split_once(' ').unwrap_or((rule, ""));
            assert!(KINDS.contains(&kind), "family of unknown kind {kind:?}");
            assert!(
                !text.trim().is_empty(),
                "a family needs a text: {line:?}",
                line = rest
            );
            Family {
                kind: kind.to_owned(),
                text: text.trim().to_owned(),
            }
        })
        .collect()
}

fn read_known(path: &Path) -> BTreeMap<String, (String, String)> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(error) => panic!("reading {}: {error}", path.display()),
    };
    let mut known = BTreeMap::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with("family ") {
            continue;
        }
        let where_ = format!("{}:{}", path.display(), number + 1);
        let (id, reason) = line
            .rsplit_once("  # ")
            .unwrap_or_else(|| panic!("{where_}: no `  # kind: reason` in {line:?}"));
        let (kind, reason) = reason.split_once(':').unwrap_or((reason, ""));
        assert!(
            KINDS.contains(&kind),
            "{where_}: unknown kind {kind:?} (one of {KINDS:?})"
        );
        let previous = known.insert(
            id.trim().to_owned(),
            (kind.to_owned(), reason.trim().to_owned()),
        );
        assert!(previous.is_none(), "{where_}: listed twice: {id}");
    }
    known
}

fn blessed(
    cases: &[Case],
    differences: &[Option<Difference>],
    known: &BTreeMap<String, (String, String)>,
) -> String {
    let mut out = String::from(HEADER);
    let mut category = "";
    for (case, difference) in cases.iter().zip(differences) {
        let Some(difference) = difference else {
            continue;
        };
        if case.category != category {
            category = &case.category;
            let _ = writeln!(out, "\n# {category}");
        }
        let reason = match known.get(&case.id) {
            Some((kind, reason)) if kind == difference.kind && !reason.is_empty() => reason.clone(),
            _ => short(&difference.detail),
        };
        let _ = writeln!(out, "{}  # {}: {reason}", case.id, difference.kind);
    }
    out
}

/// One line, without the separator, at most MAX_REASON characters.
fn short(detail: &str) -> String {
    let mut text = detail.replace('\n', "\\n").replace("  # ", " # ");
    if text.chars().count() > MAX_REASON {
        text = text.chars().take(MAX_REASON).collect::<String>() + "…";
    }
    text
}
