//! cel-spec's conformance tests (the "simple" suite of `cel.dev/expr` v0.24.0, the version
//! kube-apiserver 1.35 is built with), run against kanon-cel's public API.
//!
//! The data is not copied into the repository: the test runs `go mod download -json
//! cel.dev/expr@v0.24.0` and reads `tests/simple/testdata/*.textproto` from the module. Without
//! `go` (on PATH or in /usr/local/go/bin) the test fails, saying so.
//!
//! Run:   cargo test -p kanon-cel --test conformance -- --nocapture
//! Bless: KANON_CEL_CONFORMANCE_BLESS=1 cargo test -p kanon-cel --test conformance
//!        (rewrites tests/conformance/known-failures.txt with the failures of this run)
//!
//! # Classification
//!
//! Every test of every file lands in exactly one column:
//! - **needs protobuf** (skipped): a container naming proto packages, a message literal or
//!   message/enum name in the expression, a declaration, binding or expected value of a message,
//!   wrapper, enum or `Any` type. kanon-cel has no protobuf messages.
//! - **partial evaluation** (skipped): expects `unknown`/`any_unknowns`; kube-apiserver does not
//!   evaluate partially.
//! - **other skip** (skipped, with the reason): declares custom functions, uses a container,
//!   locale or `disable_macros` (kanon-cel's `ParseOptions` has no flag to turn macros off), binds
//!   an error or unknown, or holds data this harness cannot convert.
//! - **passed** / **failed**: run. A test fails on a compile error, an evaluation error where a
//!   value was expected, a value where an error was expected, a value that is not exactly the one
//!   expected, a deduced type other than the expected one (checked `typed_result` tests), a panic
//!   or a timeout. An `eval_error` test whose error message differs from the
//!   expected one passes with a note (cel-go's wording is not part of the spec).
//!
//! Independently, every test has a **scope**: kube-apiserver's environment, or not (the files and
//! sections in `classify::NOT_IN_KUBE`: extensions kube-apiserver 1.35 does not enable, and the
//! protobuf files). Tests out of scope still run when they can; they are tallied apart, excluded
//! from the headline pass rate, and their failures are kept in their own block of
//! known-failures.txt (reasons prefixed `[not in kube-apiserver]`), so a change to them is still
//! noticed without mixing them with the failures that matter.
//!
//! # Assertion
//!
//! The set of failing tests must equal known-failures.txt (`file/section/test  # reason`, `#`
//! comments, blank lines ignored): an unlisted failure is a regression, a listed test that passes
//! must be removed (re-bless).
//!
//! # Environment
//!
//! Each test starts from kube-apiserver 1.35's environment (`Env::kubernetes()`: the standard
//! definitions and the libraries kube-apiserver enables), declares its `type_env` idents (and
//! any other bound name as `dyn`) and evaluates with a budget of 10,000,000 cost units.
//! `disable_check` tests compile with `Env::compile_unchecked`, the others with `Env::compile`.
//! A `typed_result` also compares the checker's type of the whole expression
//! (`Program::result_type`) with the `deduced_type`, when the test is checked. Out-of-scope
//! tests get the syntax they need that kanon-cel has behind a parser option (`cel.bind`,
//! backquoted field names).

#[path = "conformance/cases.rs"]
mod cases;
#[path = "conformance/classify.rs"]
mod classify;
#[path = "conformance/expected.rs"]
mod expected;
#[path = "conformance/textproto.rs"]
mod textproto;

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Once, mpsc};
use std::time::{Duration, Instant};

use kanon_cel::{Budget, Env, Type, Value};

use cases::{Binding, Case, Decl, Expect, TestFile};
use expected::{Expected, Unusable};

const MODULE: &str = "cel.dev/expr@v0.24.0";
/// Enough for any test in the suite; a runaway loop fails with the cost error instead.
const COST_LIMIT: u64 = 10_000_000;
/// A test that takes this long is counted as failed and left behind on its thread.
const TEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Deeply nested expressions (parse.textproto) recurse in a debug build's parser and evaluator.
const WORKER_STACK: usize = 64 << 20;
const WORKER_NAME: &str = "cel-conformance-worker";
/// How many new failures (or newly passing tests) the assertion message lists.
const MAX_LISTED: usize = 100;
const NOT_IN_KUBE_PREFIX: &str = "[not in kube-apiserver]";

#[test]
fn cel_spec_conformance() {
    let started = Instant::now();
    let testdata = cel_spec_testdata();
    let files = load_files(&testdata);
    let mut jobs: Vec<Job> = files
        .iter()
        .flat_map(|(stem, file)| {
            file.sections.iter().flat_map(move |section| {
                section.tests.iter().map(move |case| Job {
                    id: format!("{stem}/{}/{}", section.name, case.name),
                    file: stem.clone(),
                    scope: classify::not_in_kube(stem, &section.name),
                })
            })
        })
        .collect();
    let cases: Vec<&Case> = files
        .iter()
        .flat_map(|(_, file)| {
            file.sections
                .iter()
                .flat_map(|section| section.tests.iter())
        })
        .collect();
    disambiguate(&mut jobs);
    // known-failures.txt uses `#` for its comments.
    let hashed: Vec<&str> = jobs
        .iter()
        .map(|job| job.id.as_str())
        .filter(|id| id.contains('#'))
        .collect();
    assert!(hashed.is_empty(), "test ids with a `#`: {hashed:?}");

    let outcomes = run_all(&files, cases.len(), run_case, TEST_TIMEOUT);
    let report = Report::new(&jobs, &outcomes, &cases);
    let text = report.render(started.elapsed());
    println!("{text}");

    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/known-failures.txt");
    if std::env::var_os("KANON_CEL_CONFORMANCE_BLESS").is_some_and(|value| value == "1") {
        std::fs::write(&path, report.known_failures_file())
            .unwrap_or_else(|error| panic!("writing {}: {error}", path.display()));
        println!(
            "blessed: wrote {} failures to {}",
            report.failures.len(),
            path.display()
        );
        return;
    }
    let known = read_known_failures(&path);
    let failing: BTreeSet<&str> = report
        .failures
        .iter()
        .map(|failure| failure.id.as_str())
        .collect();
    let new: Vec<&str> = failing
        .iter()
        .filter(|id| !known.contains(**id))
        .copied()
        .collect();
    let fixed: Vec<&str> = known
        .iter()
        .map(String::as_str)
        .filter(|id| !failing.contains(id))
        .collect();
    let mut problems = String::new();
    if !new.is_empty() {
        let _ = writeln!(
            problems,
            "{} new failures (not in known-failures.txt):",
            new.len()
        );
        let listed = report
            .failures
            .iter()
            .filter(|failure| new.contains(&failure.id.as_str()));
        for failure in listed.take(MAX_LISTED) {
            let _ = writeln!(problems, "  {}: {}", failure.id, failure.detail);
        }
        if new.len() > MAX_LISTED {
            let _ = writeln!(
                problems,
                "  … and {} more (the report above lists every failure)",
                new.len() - MAX_LISTED
            );
        }
    }
    if !fixed.is_empty() {
        let _ = writeln!(
            problems,
            "{} tests now pass (or are no longer run): remove them from known-failures.txt:",
            fixed.len()
        );
        for id in fixed.iter().take(MAX_LISTED) {
            let _ = writeln!(problems, "  {id}");
        }
        if fixed.len() > MAX_LISTED {
            let _ = writeln!(problems, "  … and {} more", fixed.len() - MAX_LISTED);
        }
    }
    assert!(
        problems.is_empty(),
        "{problems}\nTo accept this run's failures as the new baseline: \
         KANON_CEL_CONFORMANCE_BLESS=1 cargo test -p kanon-cel --test conformance"
    );
}

// ---------------------------------------------------------------------------------------------
// The data.

/// `Dir/tests/simple/testdata` of the module, downloaded by `go` into kanon's module cache.
fn cel_spec_testdata() -> PathBuf {
    kanon_control_plane::go_module(MODULE)
        .map(|dir| dir.join("tests/simple/testdata"))
        .unwrap_or_else(|e| {
            panic!("the CEL conformance test reads cel-spec's test data from the Go module {MODULE}: {e:#}")
        })
}

/// Every `*.textproto`, by file stem, in name order.
fn load_files(testdata: &Path) -> Vec<(String, TestFile)> {
    let entries = std::fs::read_dir(testdata)
        .unwrap_or_else(|error| panic!("reading {}: {error}", testdata.display()));
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "textproto"))
        .collect();
    paths.sort();
    assert!(
        !paths.is_empty(),
        "no .textproto files in {}",
        testdata.display()
    );
    paths
        .iter()
        .map(|path| {
            let stem = path
                .file_stem()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            let text = std::fs::read_to_string(path)
                .unwrap_or_else(|error| panic!("reading {}: {error}", path.display()));
            let tree = textproto::parse(&text)
                .unwrap_or_else(|error| panic!("{}:{error}", path.display()));
            let file = TestFile::from_tree(&tree)
                .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
            (stem, file)
        })
        .collect()
}

/// A few names repeat within a section (string_ext/index_of/empty_index, …): the second one is
/// `…~2`, the third `…~3`, in the order of the file.
fn disambiguate(jobs: &mut [Job]) {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for job in jobs {
        let count = seen.entry(job.id.clone()).or_default();
        *count += 1;
        if *count > 1 {
            job.id = format!("{}~{count}", job.id);
        }
    }
}

fn read_known_failures(path: &Path) -> BTreeSet<String> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(error) => panic!("reading {}: {error}", path.display()),
    };
    text.lines()
        .map(|line| line.split('#').next().unwrap_or("").trim())
        .filter(|id| !id.is_empty())
        .map(str::to_owned)
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Running.

struct Job {
    id: String,
    file: String,
    /// Why the test is outside kube-apiserver's environment, if it is.
    scope: Option<&'static str>,
}

#[derive(Debug, Clone)]
enum Outcome {
    Pass { note: Option<String> },
    Fail(String),
    Skip(Skip, String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Skip {
    NeedsProtobuf,
    PartialEvaluation,
    Other,
}

/// Runs every test on worker threads, one test at a time each, catching panics; a test that
/// does not finish in `timeout` is failed and its thread abandoned for a fresh one.
fn run_all(
    files: &[(String, TestFile)],
    count: usize,
    run: Runner,
    timeout: Duration,
) -> Vec<Outcome> {
    install_quiet_panic_hook();
    // Workers need 'static data: share owned copies.
    let cases: Arc<Vec<(String, String, Case)>> = Arc::new(
        files
            .iter()
            .flat_map(|(stem, file)| {
                file.sections.iter().flat_map(move |section| {
                    section
                        .tests
                        .iter()
                        .map(move |case| (stem.clone(), section.name.clone(), case.clone()))
                })
            })
            .collect(),
    );
    assert_eq!(cases.len(), count);
    let next = Arc::new(AtomicUsize::new(0));
    let (sender, receiver) = mpsc::channel::<(usize, Outcome)>();
    let mut outcomes: Vec<Option<Outcome>> = vec![None; count];
    let mut done = 0;
    let spawn = |abandoned: Arc<AtomicBool>| {
        let cases = cases.clone();
        let next = next.clone();
        let sender = sender.clone();
        std::thread::Builder::new()
            .name(WORKER_NAME.to_owned())
            .stack_size(WORKER_STACK)
            .spawn(move || worker(&cases, &next, &abandoned, &sender, run))
            .expect("spawning a conformance worker")
    };
    let mut abandoned = Arc::new(AtomicBool::new(false));
    let mut handle = spawn(abandoned.clone());
    while done < count {
        match receiver.recv_timeout(timeout) {
            Ok((index, outcome)) => {
                // A late result of a test already failed for its time is ignored.
                if outcomes[index].is_none() {
                    outcomes[index] = Some(outcome);
                    done += 1;
                }
            }
            Err(_) => {
                // Tests taken but not finished are the stuck one (only one worker runs at a time).
                let taken = next.load(Ordering::SeqCst).min(count);
                let mut stuck = 0;
                for slot in outcomes[..taken].iter_mut().filter(|slot| slot.is_none()) {
                    *slot = Some(Outcome::Fail(format!(
                        "timed out after {:.1}s",
                        timeout.as_secs_f64()
                    )));
                    stuck += 1;
                }
                done += stuck;
                if stuck == 0 {
                    // No test in flight: the worker is stuck before its first one (in base_env).
                    for slot in outcomes.iter_mut().filter(|slot| slot.is_none()) {
                        *slot = Some(Outcome::Fail(
                            "not run: building the environment did not return".to_owned(),
                        ));
                    }
                    break;
                }
                // Leave the stuck thread behind (the process ends with the test) and let a fresh
                // one take the remaining tests.
                abandoned.store(true, Ordering::SeqCst);
                abandoned = Arc::new(AtomicBool::new(false));
                handle = spawn(abandoned.clone());
            }
        }
    }
    if done == count {
        let _ = handle.join();
    }
    outcomes
        .into_iter()
        .map(|outcome| outcome.expect("every test has an outcome"))
        .collect()
}

/// The environment every test starts from: kube-apiserver 1.35's (cel-spec's standard
/// definitions and the libraries kube-apiserver enables, among them the strings extension and
/// optional types that string_ext and optionals test), with cel-spec's plain literal rules
/// (kube-apiserver's homogeneous-literal rule is not applied, as cel-spec's tests assume).
fn base_env() -> Env {
    // cel-spec's tests expect neither homogeneous literals nor errors of constant
    // conversions at compile time: both are kube-apiserver settings over plain CEL.
    let mut env = Env::kubernetes();
    env.set_homogeneous_literals(false);
    env.set_fold_constants(false);
    env
}

/// How one test is run (the harness's [`run_case`]; a stand-in in the runner's own test).
type Runner = fn(&Env, &str, &str, &Case) -> Outcome;

fn worker(
    cases: &[(String, String, Case)],
    next: &AtomicUsize,
    abandoned: &AtomicBool,
    sender: &mpsc::Sender<(usize, Outcome)>,
    run: Runner,
) {
    // The environment is built once per worker; each test clones it.
    let base = panic::catch_unwind(base_env).map_err(|payload| {
        format!(
            "building the environment panicked: {}",
            panic_message(payload)
        )
    });
    while !abandoned.load(Ordering::SeqCst) {
        let index = next.fetch_add(1, Ordering::SeqCst);
        let Some((file, section, case)) = cases.get(index) else {
            return;
        };
        let outcome = match &base {
            Err(problem) => Outcome::Fail(problem.clone()),
            Ok(base) => {
                match panic::catch_unwind(AssertUnwindSafe(|| run(base, file, section, case))) {
                    Ok(outcome) => outcome,
                    Err(payload) => Outcome::Fail(format!("panicked: {}", panic_message(payload))),
                }
            }
        };
        if sender.send((index, outcome)).is_err() {
            return;
        }
    }
}

thread_local! {
    /// The place of the last panic on this worker, for the failure message.
    static PANIC_PLACE: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Keeps caught panics of workers off stderr (they are reported as failures); other threads'
/// panics are printed as usual.
fn install_quiet_panic_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if std::thread::current().name() == Some(WORKER_NAME) {
                let place = info.location().map(|location| location.to_string());
                PANIC_PLACE.with(|slot| *slot.borrow_mut() = place);
            } else {
                previous(info);
            }
        }));
    });
}

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    let message = if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "(a non-string payload)".to_owned()
    };
    match PANIC_PLACE.with(|slot| slot.borrow_mut().take()) {
        Some(place) => format!("{message} (at {place})"),
        None => message,
    }
}

// ---------------------------------------------------------------------------------------------
// One test.

/// What a runnable test checks, once classified.
enum Check {
    /// Compile only (`check_only`, or a `typed_result` without a result).
    Compiles {
        deduced: Option<Type>,
    },
    Value {
        value: Expected,
        deduced: Option<Type>,
    },
    Error(Vec<String>),
}

struct Prepared {
    env: Env,
    values: Vec<Value<'static>>,
    check: Check,
}

fn run_case(base: &Env, file: &str, section: &str, case: &Case) -> Outcome {
    let prepared = match prepare(base, file, section, case) {
        Ok(prepared) => prepared,
        Err((skip, why)) => return Outcome::Skip(skip, why),
    };
    let compiled = if case.disable_check {
        prepared.env.compile_unchecked(&case.expr)
    } else {
        prepared.env.compile(&case.expr)
    };
    let program = match compiled {
        Ok(program) => program,
        Err(error) => return Outcome::Fail(compile_error(&error)),
    };
    let (expected, deduced) = match prepared.check {
        Check::Compiles { deduced } => (None, deduced),
        Check::Value { value, deduced } => (Some(Ok(value)), deduced),
        Check::Error(messages) => (Some(Err(messages)), None),
    };
    // The checker's type of the whole expression (unchecked programs have none to compare).
    let type_problem = match &deduced {
        Some(kind) if !case.disable_check && program.result_type() != kind => Some(format!(
            "deduced type: expected {kind}, got {}",
            program.result_type()
        )),
        _ => None,
    };
    let Some(expected) = expected else {
        return match type_problem {
            Some(problem) => Outcome::Fail(problem),
            None => Outcome::Pass { note: None },
        };
    };
    let mut budget = Budget::new(COST_LIMIT);
    let result = program.eval(&prepared.values, &mut budget);
    let outcome = match (expected, result) {
        (Ok(value), Ok(got)) if expected::matches(&value, &got) => Outcome::Pass { note: None },
        (Ok(value), Ok(got)) => Outcome::Fail(format!(
            "expected {value}, got {}",
            expected::describe(&got)
        )),
        (Ok(value), Err(error)) => Outcome::Fail(format!(
            "expected {value}, got error: {}",
            one_line(&error.to_string())
        )),
        (Err(messages), Ok(got)) => Outcome::Fail(format!(
            "expected error {}, got {}",
            quote_messages(&messages),
            expected::describe(&got)
        )),
        (Err(messages), Err(error)) => {
            let text = error.to_string();
            let same = messages.is_empty()
                || messages
                    .iter()
                    .any(|message| text.contains(message.as_str()));
            Outcome::Pass {
                note: (!same).then(|| {
                    format!(
                        "error message: expected {}, got {:?}",
                        quote_messages(&messages),
                        one_line(&text)
                    )
                }),
            }
        }
    };
    match (outcome, type_problem) {
        (Outcome::Pass { .. }, Some(problem)) => Outcome::Fail(problem),
        (Outcome::Fail(detail), Some(problem)) => Outcome::Fail(format!("{detail}; {problem}")),
        (outcome, _) => outcome,
    }
}

/// The issues of a compile error at their places, without the echo of the source that its
/// Display adds (the report is one line per test).
fn compile_error(error: &kanon_cel::CompileError) -> String {
    if error.issues.is_empty() {
        return format!("compile error: {}", one_line(&error.to_string()));
    }
    let issues: Vec<String> = error
        .issues
        .iter()
        .map(|issue| {
            let (line, column) = error.location(issue.span.start);
            format!("{line}:{column}: {}", one_line(&issue.message))
        })
        .collect();
    format!("compile error: {}", issues.join("; "))
}

fn quote_messages(messages: &[String]) -> String {
    let quoted: Vec<String> = messages
        .iter()
        .map(|message| format!("{message:?}"))
        .collect();
    quoted.join(" or ")
}

fn one_line(text: &str) -> String {
    text.split('\n')
        .map(str::trim_end)
        .collect::<Vec<_>>()
        .join(" ⏎ ")
}

/// Classifies a test and builds its environment and variable values.
fn prepare(base: &Env, file: &str, section: &str, case: &Case) -> Result<Prepared, (Skip, String)> {
    let protobuf = |what: String| (Skip::NeedsProtobuf, what);
    let unusable = |problem: Unusable| match problem {
        Unusable::NeedsProtobuf(what) => (Skip::NeedsProtobuf, what),
        Unusable::Other(what) => (Skip::Other, format!("unusable data: {what}")),
    };

    if matches!(case.expect, Expect::Unknown) {
        return Err((
            Skip::PartialEvaluation,
            "partial evaluation (not used by kube-apiserver)".to_owned(),
        ));
    }
    if classify::protobuf_container(&case.container) {
        return Err(protobuf(format!("container {}", case.container)));
    }
    if let Some(what) = classify::protobuf_in_expr(&case.expr) {
        return Err(protobuf(what));
    }
    let mut declared: Vec<(String, Type)> = Vec::new();
    let mut functions = Vec::new();
    for decl in &case.type_env {
        match decl {
            Decl::Ident { name, kind } => {
                declared.push((name.clone(), expected::kind(kind).map_err(unusable)?))
            }
            Decl::Function { name } => functions.push(name.as_str()),
        }
    }
    let mut bound: Vec<(String, Value<'static>)> = Vec::new();
    let mut binding_problem = None;
    for (name, binding) in &case.bindings {
        match binding {
            Binding::Value(value) => bound.push((
                name.clone(),
                expected::to_value(&expected::value(value).map_err(unusable)?),
            )),
            Binding::Error => binding_problem = Some(format!("binding {name} is an error value")),
            Binding::Unknown => binding_problem = Some(format!("binding {name} is unknown")),
        }
    }
    // A deduced type kanon-cel has no name for (a custom function's abstract type) matters only
    // if the test is not skipped for its custom functions below.
    let deduced = match &case.expect {
        Expect::TypedResult {
            deduced_type: Some(kind),
            ..
        } => match expected::kind(kind) {
            Ok(kind) => Ok(Some(kind)),
            Err(Unusable::NeedsProtobuf(what)) => {
                return Err(protobuf(format!("deduced type {what}")));
            }
            Err(other) => Err(other),
        },
        _ => Ok(None),
    };
    if !functions.is_empty() {
        return Err((
            Skip::Other,
            format!("declares custom functions ({})", functions.join(", ")),
        ));
    }
    let deduced = deduced.map_err(unusable)?;
    let check = match &case.expect {
        _ if case.check_only => Check::Compiles { deduced },
        Expect::Value(value) => Check::Value {
            value: expected::value(value).map_err(unusable)?,
            deduced,
        },
        Expect::TypedResult { result: None, .. } => Check::Compiles { deduced },
        Expect::TypedResult {
            result: Some(result),
            ..
        } => Check::Value {
            value: expected::value(result).map_err(unusable)?,
            deduced,
        },
        Expect::EvalError(messages) => Check::Error(messages.clone()),
        Expect::Unknown => unreachable!("skipped above"),
    };

    // Not protobuf, but still outside what kanon-cel's API can express.
    if !case.container.is_empty() {
        return Err((
            Skip::Other,
            format!("container {:?} (kube-apiserver uses none)", case.container),
        ));
    }
    if let Some(problem) = binding_problem {
        return Err((Skip::Other, problem));
    }
    if case.disable_macros {
        return Err((
            Skip::Other,
            "disable_macros (ParseOptions has no such flag)".to_owned(),
        ));
    }
    if !case.locale.is_empty() {
        return Err((
            Skip::Other,
            format!("locale {:?} (kube-apiserver uses none)", case.locale),
        ));
    }

    let mut env = base.clone();
    // Syntax kube-apiserver does not enable but kanon-cel can parse on request, for the tests
    // outside its environment that need it.
    let mut options = env.parse_options().clone();
    match (file, section) {
        ("bindings_ext", _) => options.bind_macro = true,
        ("fields", "quoted_map_fields") => options.escaped_identifiers = true,
        _ => {}
    }
    env.set_parse_options(options);
    for (name, kind) in &declared {
        env.declare_variable(name, kind.clone());
    }
    for (name, _) in &bound {
        if !declared.iter().any(|(declared, _)| declared == name) {
            env.declare_variable(name, Type::Dyn);
        }
    }
    let evaluates = !matches!(check, Check::Compiles { .. });
    let mut values = Vec::with_capacity(env.variables().len());
    for (name, _) in env.variables() {
        match bound.iter().find(|(bound, _)| bound == &**name) {
            Some((_, value)) => values.push(value.clone()),
            None if !evaluates => values.push(Value::Null),
            None => {
                return Err((
                    Skip::Other,
                    format!("variable {name} is declared but not bound (no test does this today)"),
                ));
            }
        }
    }
    Ok(Prepared { env, values, check })
}

// ---------------------------------------------------------------------------------------------
// The report.

#[derive(Default, Clone)]
struct Tally {
    tests: usize,
    passed: usize,
    failed: usize,
    protobuf: usize,
    partial: usize,
    other: usize,
}

impl Tally {
    fn add(&mut self, outcome: &Outcome) {
        self.tests += 1;
        match outcome {
            Outcome::Pass { .. } => self.passed += 1,
            Outcome::Fail(_) => self.failed += 1,
            Outcome::Skip(Skip::NeedsProtobuf, _) => self.protobuf += 1,
            Outcome::Skip(Skip::PartialEvaluation, _) => self.partial += 1,
            Outcome::Skip(Skip::Other, _) => self.other += 1,
        }
    }

    fn rate(&self) -> String {
        let run = self.passed + self.failed;
        if run == 0 {
            "-".to_owned()
        } else {
            format!("{:.1}%", 100.0 * self.passed as f64 / run as f64)
        }
    }
}

struct Failure {
    id: String,
    detail: String,
    in_kube: bool,
}

struct Report {
    /// Per file: the tally of its tests in kube-apiserver's environment, and of those out of it
    /// (a file can have both: fields/quoted_map_fields).
    files: BTreeMap<String, (Tally, Tally)>,
    failures: Vec<Failure>,
    /// Remarks on passing tests (an error message worded differently), by test id.
    notes: Vec<(String, String)>,
    /// Skipped tests by reason.
    other_skips: BTreeMap<String, usize>,
    protobuf: BTreeMap<String, usize>,
    /// Tests run (passed or failed) that were compiled unchecked.
    disable_check: usize,
}

impl Report {
    fn new(jobs: &[Job], outcomes: &[Outcome], cases: &[&Case]) -> Report {
        let mut report = Report {
            files: BTreeMap::new(),
            failures: Vec::new(),
            notes: Vec::new(),
            other_skips: BTreeMap::new(),
            protobuf: BTreeMap::new(),
            disable_check: 0,
        };
        for ((job, outcome), case) in jobs.iter().zip(outcomes).zip(cases) {
            let entry = report.files.entry(job.file.clone()).or_default();
            let tally = if job.scope.is_none() {
                &mut entry.0
            } else {
                &mut entry.1
            };
            tally.add(outcome);
            match outcome {
                Outcome::Fail(detail) => report.failures.push(Failure {
                    id: job.id.clone(),
                    detail: detail.clone(),
                    in_kube: job.scope.is_none(),
                }),
                Outcome::Pass { note: Some(note) } => {
                    report.notes.push((job.id.clone(), note.clone()))
                }
                Outcome::Skip(Skip::Other, why) => {
                    *report.other_skips.entry(why.clone()).or_default() += 1
                }
                Outcome::Skip(Skip::NeedsProtobuf, why) => {
                    *report.protobuf.entry(why.clone()).or_default() += 1
                }
                _ => {}
            }
            if case.disable_check && matches!(outcome, Outcome::Pass { .. } | Outcome::Fail(_)) {
                report.disable_check += 1;
            }
        }
        report
    }

    fn render(&self, elapsed: Duration) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "\ncel-spec conformance ({MODULE}, tests/simple/testdata)\n"
        );
        let header = format!(
            "{:<16} {:>6} {:>7} {:>7} {:>9} {:>8} {:>6} {:>7}",
            "file", "tests", "passed", "failed", "protobuf", "partial", "other", "rate"
        );
        let _ = writeln!(out, "{header}");
        let _ = writeln!(out, "{}", "-".repeat(header.chars().count()));
        let mut in_kube = Tally::default();
        let mut out_of_kube = Tally::default();
        for (file, (inside, outside)) in &self.files {
            for (tally, label) in [(inside, ""), (outside, " *")] {
                if tally.tests == 0 {
                    continue;
                }
                let _ = writeln!(
                    out,
                    "{:<16} {:>6} {:>7} {:>7} {:>9} {:>8} {:>6} {:>7}",
                    format!("{file}{label}"),
                    tally.tests,
                    tally.passed,
                    tally.failed,
                    tally.protobuf,
                    tally.partial,
                    tally.other,
                    tally.rate()
                );
            }
            merge(&mut in_kube, inside);
            merge(&mut out_of_kube, outside);
        }
        let _ = writeln!(out, "{}", "-".repeat(header.chars().count()));
        for (tally, label) in [(&in_kube, "in kube env"), (&out_of_kube, "not in kube *")] {
            let _ = writeln!(
                out,
                "{:<16} {:>6} {:>7} {:>7} {:>9} {:>8} {:>6} {:>7}",
                label,
                tally.tests,
                tally.passed,
                tally.failed,
                tally.protobuf,
                tally.partial,
                tally.other,
                tally.rate()
            );
        }
        let _ = writeln!(out, "\n* not in kube-apiserver's environment:");
        for (file, section, why) in classify::NOT_IN_KUBE {
            let place = if section.is_empty() {
                (*file).to_owned()
            } else {
                format!("{file}/{section}")
            };
            let _ = writeln!(out, "    {place}: {why}");
        }
        let _ = writeln!(
            out,
            "\nrate = passed / (passed + failed); protobuf = needs protobuf messages; partial = partial evaluation"
        );
        let _ = writeln!(
            out,
            "({} of the tests run compile unchecked: disable_check)",
            self.disable_check
        );

        if !self.protobuf.is_empty() {
            let _ = writeln!(out, "\nneeds protobuf, by what was found first:");
            for (why, count) in &self.protobuf {
                let _ = writeln!(out, "  {count:>4}  {why}");
            }
        }
        if !self.other_skips.is_empty() {
            let _ = writeln!(out, "\nother skips:");
            for (why, count) in &self.other_skips {
                let _ = writeln!(out, "  {count:>4}  {why}");
            }
        }
        for (in_kube_block, title) in [
            (true, "failures"),
            (false, "failures not in kube-apiserver's environment"),
        ] {
            let failures: Vec<&Failure> = self
                .failures
                .iter()
                .filter(|failure| failure.in_kube == in_kube_block)
                .collect();
            if failures.is_empty() {
                continue;
            }
            let _ = writeln!(out, "\n{title} ({}):", failures.len());
            for failure in failures {
                let _ = writeln!(out, "  {}: {}", failure.id, failure.detail);
            }
        }
        if !self.notes.is_empty() {
            let _ = writeln!(out, "\nnotes on passing tests ({}):", self.notes.len());
            for (id, note) in &self.notes {
                let _ = writeln!(out, "  {id}: {note}");
            }
        }
        let _ = writeln!(
            out,
            "\nkube-apiserver's environment, no-protobuf tests: {} of {} pass ({}); {} failing",
            in_kube.passed,
            in_kube.passed + in_kube.failed,
            in_kube.rate(),
            in_kube.failed
        );
        let _ = writeln!(out, "(ran in {:.2}s)", elapsed.as_secs_f64());
        out
    }

    fn known_failures_file(&self) -> String {
        let mut out = String::from(
            "# cel-spec conformance tests kanon-cel fails today (tests/conformance.rs).\n\
             # One line per test: file/section/test  # reason. Regenerate with\n\
             #   KANON_CEL_CONFORMANCE_BLESS=1 cargo test -p kanon-cel --test conformance\n",
        );
        for (in_kube, title) in [
            (true, "In kube-apiserver's environment"),
            (
                false,
                "Not in kube-apiserver's environment (run for information only)",
            ),
        ] {
            let _ = writeln!(out, "\n# {title}");
            for failure in self
                .failures
                .iter()
                .filter(|failure| failure.in_kube == in_kube)
            {
                let prefix = if in_kube { "" } else { NOT_IN_KUBE_PREFIX };
                let reason = shorten(&failure.detail.replace('#', "(hash)"), 120);
                let _ = writeln!(
                    out,
                    "{}  # {prefix}{}{reason}",
                    failure.id,
                    if in_kube { "" } else { " " }
                );
            }
        }
        out
    }
}

fn merge(total: &mut Tally, part: &Tally) {
    total.tests += part.tests;
    total.passed += part.passed;
    total.failed += part.failed;
    total.protobuf += part.protobuf;
    total.partial += part.partial;
    total.other += part.other;
}

fn shorten(text: &str, limit: usize) -> String {
    if text.chars().count() <= limit {
        text.to_owned()
    } else {
        let mut short: String = text.chars().take(limit).collect();
        short.push('…');
        short
    }
}

#[cfg(test)]
mod runner_tests {
    use super::*;

    /// Panics and hangs of single tests become failures; the other tests still run.
    #[test]
    fn panics_and_hangs_are_failures() {
        let text = r#"
            name: "runner"
            section {
              name: "s"
              test { name: "passes" expr: "1" }
              test { name: "panics" expr: "1" }
              test { name: "hangs" expr: "1" }
              test { name: "after" expr: "1" }
            }
        "#;
        let file = TestFile::from_tree(&textproto::parse(text).unwrap()).unwrap();
        let files = vec![("runner".to_owned(), file)];
        fn run(_: &Env, _: &str, _: &str, case: &Case) -> Outcome {
            match case.name.as_str() {
                "panics" => panic!("boom"),
                "hangs" => {
                    std::thread::sleep(Duration::from_secs(3));
                    Outcome::Pass { note: None }
                }
                _ => Outcome::Pass { note: None },
            }
        }
        let outcomes = run_all(&files, 4, run, Duration::from_millis(300));
        assert!(matches!(outcomes[0], Outcome::Pass { .. }), "{outcomes:?}");
        assert!(
            matches!(&outcomes[1], Outcome::Fail(text) if text.starts_with("panicked: boom (at ")),
            "{outcomes:?}"
        );
        assert!(
            matches!(&outcomes[2], Outcome::Fail(text) if text.starts_with("timed out")),
            "{outcomes:?}"
        );
        assert!(matches!(outcomes[3], Outcome::Pass { .. }), "{outcomes:?}");
    }
}
