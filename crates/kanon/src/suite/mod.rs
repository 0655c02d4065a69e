//! `kanon test`: policy test suites, a policy author's CI.
//!
//! A suite is a `kanon-test.yaml` file:
//!
//! ```yaml
//! name: labels                     # optional; defaults to the folder
//! policies: [policies/]            # paths relative to the suite file
//! resources: [resources/]
//! context: [context/]              # optional (alias `objects`): Namespaces and objects
//!                                  # references read
//! operation: CREATE                # optional, default CREATE; per case too
//! oldResources: [old/]             # optional: previous versions, paired by identity
//! exceptionNamespaces: [policy-exceptions]  # optional: where PolicyExceptions among the
//!                                  # policies are honoured (none by default, as in a cluster)
//! now: 2026-11-26T12:00:00Z        # optional: the time exceptions' expiresAt is judged at
//! defaults: false                  # optional: judge resources as written, without the
//!                                  # apiserver's defaults (default true)
//! strict: true                     # optional: a warning on any policy fails the run
//! cases:
//!   - name: web-0 is admitted      # optional: what reports and `--case` call it (default:
//!                                  # its operation and resource, `CREATE Pod/shop/web-0`)
//!     resource: {kind: Pod, namespace: shop, name: web-0}   # apiVersion optional; or by
//!                                  # file: {source: resources/web-0.yaml}, with kind, name,
//!                                  # … to pick among its documents
//!     operation: UPDATE            # optional
//!     oldResource: old/web-0.yaml  # optional: this case's old object (a path or an object)
//!     allowed: true
//!     messages: [...]              # every message, in order; optional
//!     messagesInclude: [...]       # some of the messages, in any order; optional
//!     warnings: [...]              # every warning, in order; optional
//!     warningsInclude: [...]       # some of the warnings; optional
//!     appliedPolicies: [...]       # exact, optional
//!     exceptions: [...]            # the exceptions that applied (`ns/name: Kind/policy`), exact
//!     auditAnnotations: {...}      # exact, optional
//!     patch: [...]                 # exact, optional
//!     patched: {...}               # a subset of the patched object, optional
//! ```
//!
//! An entry of the message and warning lists is a string (the whole text), `{contains: TEXT}`
//! (a part of it) or `{matches: REGEX}` (a regular expression found in it).
//!
//! Each case evaluates only the resource it selects, so only the resources of UPDATE cases
//! need an old version. The policy paths may hold other documents too (a `helm template`
//! output): they are skipped with a note.
//!
//! What a run found ([`report::Run`]) is printed as text, JSON, JUnit XML or GitHub workflow
//! annotations. Exit status: 0 when every case passes, 1 when a case fails (or, strict, a
//! policy has a warning), 2 when an input cannot be read or no case is selected.

mod audit_check;
mod expect;
mod file;
mod github;
mod junit;
mod plan;
mod report;
mod resource;
mod select;
mod text;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::{Args, ValueEnum};
use kanon_api::Operation;
use kanon_engine::PolicySet;

use crate::apply::{BadInput, Verdict, evaluate_request, load_context, load_policies_for};
use crate::exceptions::ExceptionWarning;
use crate::inputs::{Origins, Place, read_documents};
use crate::programs::{DeadlineArgs, OfflineEvaluation, ProgramArgs};
use expect::{TextChecks, judge};
use file::{Case, SUITE_FILE, Suite};
use plan::{Planned, SuiteInputs, plan};
use report::{CaseRun, PolicyVerdict, PolicyWarning, Run, SuiteRun};
use resource::candidates;
use select::Selection;

/// How `kanon test` prints what it found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum TestOutput {
    /// `PASS`/`FAIL` lines, then the counts; warnings and notes on standard error.
    #[default]
    Text,
    /// One JSON document: every suite, its cases, warnings and notes, and the counts.
    Json,
    /// JUnit XML, as CI servers read test reports: a testsuite per suite, a testcase per case.
    Junit,
    /// The text, with GitHub Actions workflow commands (`::error`, `::warning`) that annotate
    /// the suite file at each failing case and the policy file at each warning.
    Github,
}

/// Arguments of `kanon test`.
#[derive(Debug, Args)]
pub struct TestArgs {
    /// Folders searched (recursively) for `kanon-test.yaml` files, or suite files; default `.`.
    #[arg(value_name = "DIR")]
    paths: Vec<PathBuf>,
    /// Judge every suite's plain resources as written, without the defaults kube-apiserver
    /// fills in before any webhook sees an object (as a suite's `defaults: false` does).
    #[arg(long)]
    no_defaults: bool,
    /// What to print.
    #[arg(short, long, value_enum, default_value_t = TestOutput::Text)]
    output: TestOutput,
    /// Write the `--output` format to FILE (a JUnit report for CI, say) and print the text
    /// on standard output.
    #[arg(long, value_name = "FILE")]
    output_file: Option<PathBuf>,
    /// Run only the suites whose name or file matches GLOB (`*` any text, `?` one
    /// character); repeatable.
    #[arg(long = "suite", value_name = "GLOB")]
    suites: Vec<String>,
    /// Run only the cases whose name matches GLOB (a case without a `name` is called by its
    /// operation and resource, `CREATE Pod/shop/web-0`); repeatable.
    #[arg(long = "case", value_name = "GLOB")]
    cases: Vec<String>,
    /// Print only the cases that fail (text, JSON and GitHub; a JUnit report lists every case).
    #[arg(long)]
    fail_only: bool,
    /// Print what each policy did with each case's resource, and what it said.
    #[arg(long)]
    detailed: bool,
    /// Fail the run when any policy has a warning (a field no selected kind has, a rule that
    /// judges DELETE, ...), as a suite's `strict: true` does: a typo'd field fails CI.
    #[arg(long)]
    strict: bool,
    #[command(flatten)]
    programs: ProgramArgs,
    #[command(flatten)]
    deadline: DeadlineArgs,
}

/// What every suite of a run shares.
struct Options<'a> {
    evaluation: &'a OfflineEvaluation,
    no_defaults: bool,
    strict: bool,
    detailed: bool,
    selection: &'a Selection,
}

/// Finds suite files under `path` (or `path` itself when it is one), in name order.
fn find_suites(path: &Path, out: &mut Vec<PathBuf>) -> Result<(), String> {
    if path.is_file() {
        out.push(path.to_path_buf());
        return Ok(());
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(|e| format!("{}: {e}", path.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for entry in entries {
        let name = entry
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if entry.is_dir() && name != "target" && !name.starts_with('.') {
            find_suites(&entry, out)?;
        } else if name == SUITE_FILE {
            out.push(entry);
        }
    }
    Ok(())
}

/// Runs one suite file; `None` when `--suite` leaves it out.
fn run_suite(file: &Path, options: &Options) -> Option<SuiteRun> {
    let started = Instant::now();
    let dir = file.parent().unwrap_or(Path::new("."));
    let mut run = SuiteRun {
        name: dir.display().to_string(),
        file: file.display().to_string(),
        cases: Vec::new(),
        errors: Vec::new(),
        warnings: Vec::new(),
        notes: Vec::new(),
        strict: options.strict,
        seconds: 0.0,
    };
    let text = match std::fs::read_to_string(file) {
        Ok(text) => text,
        Err(e) => {
            run.errors.push(format!("{}: {e}", file.display()));
            return options.selection.suite(&run.name, &run.file).then_some(run);
        }
    };
    let suite: Suite = match serde_saphyr::from_str(&text) {
        Ok(suite) => suite,
        Err(e) => {
            run.errors
                .push(format!("{}: {}", file.display(), e.without_snippet()));
            return options.selection.suite(&run.name, &run.file).then_some(run);
        }
    };
    if let Some(name) = &suite.name {
        run.name = name.clone();
    }
    if !options.selection.suite(&run.name, &run.file) {
        return None;
    }
    run.strict |= suite.strict;
    if let Err(problems) = run_cases(&suite, dir, options, &mut run) {
        run.errors = problems
            .into_iter()
            .map(|p| format!("{}: {p}", file.display()))
            .collect();
        run.cases.clear();
    }
    run.seconds = started.elapsed().as_secs_f64();
    Some(run)
}

/// Loads a suite's inputs, plans every case (a bad one fails the whole suite, reporting every
/// problem and no verdict) and runs the selected ones into `run`.
fn run_cases(
    suite: &Suite,
    dir: &Path,
    options: &Options,
    run: &mut SuiteRun,
) -> Result<(), Vec<String>> {
    let rel = |paths: &[PathBuf]| paths.iter().map(|p| dir.join(p)).collect::<Vec<_>>();
    let context = load_context(&rel(&suite.context)).map_err(|BadInput(p)| p)?;
    let loaded = load_policies_for(&rel(&suite.policies), &context).map_err(|BadInput(p)| p)?;
    run.notes.extend(loaded.skipped_note());
    let (policies, exceptions) =
        crate::exceptions::honoured_with_warnings(loaded.set, &suite.exception_namespaces);
    take_warnings(&policies, &loaded.origins, exceptions, run);
    let now = match &suite.now {
        Some(text) => {
            kanon_engine::parse_exception_time(text).map_err(|e| vec![format!("now: {e}")])?
        }
        None => crate::exceptions::clock(),
    };
    options.evaluation.set_now(now);
    let resources = read_documents(&rel(&suite.resources)).map_err(|e| vec![e.to_string()])?;
    let old = read_documents(&rel(&suite.old_resources)).map_err(|e| vec![e.to_string()])?;
    let default_op = kanon_engine::parse_operation(&suite.operation)
        .map_err(|e| vec![format!("operation: {e}")])?;
    let inputs = SuiteInputs {
        dir,
        candidates: candidates(&resources)?,
        old: &old,
        default_op,
        defaults: suite.defaults && !options.no_defaults,
        context: &context,
    };
    let mut problems = Vec::new();
    let mut planned = Vec::with_capacity(suite.cases.len());
    for (i, case) in suite.cases.iter().enumerate() {
        let line = case.referenced.line();
        let case = &case.value;
        match plan(case, &inputs) {
            Ok((op, texts, ready)) => planned.push(Ready {
                name: case_name(case, op),
                place: Place {
                    file: run.file.clone(),
                    line: (line > 0).then_some(line as usize),
                },
                case,
                texts,
                plan: ready,
            }),
            Err(found) => {
                let op = case.operation.as_deref().unwrap_or(&suite.operation);
                let at = format!("cases[{i}] ({op} {})", case.resource.label());
                problems.extend(found.into_iter().map(|p| format!("{at}: {p}")));
            }
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    planned.retain(|ready| options.selection.case(&ready.name));
    judge_cases(options, &policies, &context, planned, run);
    if run.strict {
        run.cases.extend(strict_checks(&run.warnings, &run.file));
    }
    Ok(())
}

/// The policies' and exceptions' warnings, each with its policy and place.
fn take_warnings(
    policies: &PolicySet,
    origins: &Origins,
    exceptions: Vec<ExceptionWarning>,
    run: &mut SuiteRun,
) {
    for policy in policies.policies() {
        for warning in &policy.warnings {
            run.warnings.push(PolicyWarning {
                policy: policy.id.to_string(),
                place: origins.of(policy).cloned(),
                // A type-checking warning ends in a newline, as kube-controller-manager writes it.
                message: warning.to_string().trim_end().to_owned(),
            });
        }
    }
    for warning in exceptions {
        let exception = &warning.exception;
        let text = warning.text();
        // `PolicyException/ns/name is not honoured: ...` is said without the name here.
        let prefix = format!("{}: ", exception.label);
        let named = format!("{} is ", exception.label);
        let message = text
            .strip_prefix(&prefix)
            .or_else(|| text.strip_prefix(&named))
            .unwrap_or(&text);
        run.warnings.push(PolicyWarning {
            policy: exception.label.to_string(),
            place: origins.of_exception(exception).cloned(),
            message: message.to_owned(),
        });
    }
}

/// Under `strict`, one failing check per policy with warnings, at the policy's place.
fn strict_checks(warnings: &[PolicyWarning], suite_file: &str) -> Vec<CaseRun> {
    let mut checks: Vec<CaseRun> = Vec::new();
    for warning in warnings {
        let name = format!("policy {} has no warnings", warning.policy);
        match checks.iter_mut().find(|c| c.name == name) {
            Some(check) => check.failures.push(warning.message.clone()),
            None => checks.push(CaseRun {
                name,
                place: warning.place.clone().unwrap_or_else(|| Place {
                    file: suite_file.to_owned(),
                    line: None,
                }),
                failures: vec![warning.message.clone()],
                policies: Vec::new(),
                seconds: 0.0,
            }),
        }
    }
    checks
}

/// What reports call a case: its `name`, or its operation and resource.
fn case_name(case: &Case, op: Operation) -> String {
    match &case.name {
        Some(name) => name.clone(),
        None => format!("{op} {}", case.resource.label()),
    }
}

/// A planned case with what reports call it.
struct Ready<'c> {
    name: String,
    place: Place,
    case: &'c Case,
    texts: TextChecks,
    plan: Planned,
}

/// Runs the planned cases: evaluates each one's resource and holds the verdict to the case.
fn judge_cases(
    options: &Options,
    policies: &PolicySet,
    context: &kanon_engine::ObjectStore,
    planned: Vec<Ready>,
    run: &mut SuiteRun,
) {
    let namespaces = crate::namespaces::Namespaces::new(
        context,
        planned.iter().filter_map(|ready| match &ready.plan {
            Planned::Run { request, .. } => request.namespace.as_deref(),
            Planned::Fail(_) => None,
        }),
    );
    let context = &namespaces;
    for ready in planned {
        let started = Instant::now();
        let mut verdicts = Vec::new();
        let failures = match ready.plan {
            Planned::Run { request, source } => {
                let evaluation = options.evaluation;
                let verdict = evaluate_request(evaluation, policies, context, &request, source);
                let mut failures = judge(ready.case, &ready.texts, &verdict);
                failures.extend(audit_check::audit_disagreement(
                    evaluation, policies, context, &request, &verdict,
                ));
                if options.detailed {
                    verdicts = policy_verdicts(&verdict);
                }
                failures
            }
            Planned::Fail(why) => vec![why],
        };
        run.cases.push(CaseRun {
            name: ready.name,
            place: ready.place,
            failures,
            policies: verdicts,
            seconds: started.elapsed().as_secs_f64(),
        });
    }
    // Where a case failed, the Namespaces that were assumed may be why; a passing suite's
    // are not worth a line each run.
    if run.cases.iter().any(|c| !c.passed()) {
        run.notes.extend(namespaces.notes("the suite's context"));
    }
}

/// What each policy did with the request, and what it said (`--detailed`).
fn policy_verdicts(verdict: &Verdict) -> Vec<PolicyVerdict> {
    let decision = &verdict.decision;
    decision
        .policy_results
        .iter()
        .map(|result| {
            let prefix = format!("{}: ", result.policy);
            let said = decision
                .messages
                .iter()
                .chain(&decision.warnings)
                .filter_map(|text| text.strip_prefix(&prefix))
                .map(str::to_owned)
                .collect();
            PolicyVerdict {
                policy: result.policy.to_string(),
                outcome: result.outcome.to_string(),
                said,
            }
        })
        .collect()
}

/// Runs `kanon test`: exit 0 when every case passes, 1 when any fails, 2 on bad input.
pub fn run(args: &TestArgs) -> ExitCode {
    match run_all(args) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

fn run_all(args: &TestArgs) -> Result<u8, String> {
    let selection = Selection::new(&args.suites, &args.cases);
    let evaluation = OfflineEvaluation::new(&args.programs, &args.deadline)?;
    let roots = if args.paths.is_empty() {
        vec![PathBuf::from(".")]
    } else {
        args.paths.clone()
    };
    let mut files = Vec::new();
    for root in &roots {
        find_suites(root, &mut files)?;
    }
    if files.is_empty() {
        let roots: Vec<String> = roots.iter().map(|r| r.display().to_string()).collect();
        return Err(format!("no {SUITE_FILE} found under {}", roots.join(", ")));
    }
    let options = Options {
        evaluation: &evaluation,
        no_defaults: args.no_defaults,
        strict: args.strict,
        detailed: args.detailed,
        selection: &selection,
    };
    let run = Run {
        suites: files
            .iter()
            .filter_map(|file| run_suite(file, &options))
            .collect(),
    };
    if let Some(why) = selection.selected_nothing(&run) {
        return Err(why);
    }
    let shown = text::Shown {
        fail_only: args.fail_only,
    };
    let rendered = render(&run, args.output, shown)?;
    match &args.output_file {
        None => print!("{rendered}"),
        Some(path) => {
            std::fs::write(path, rendered).map_err(|e| format!("{}: {e}", path.display()))?;
            print!("{}", text::render(&run, shown));
        }
    }
    text::print_diagnostics(&run);
    Ok(run.exit_code())
}

/// The run in `format`, as one text.
fn render(run: &Run, format: TestOutput, shown: text::Shown) -> Result<String, String> {
    Ok(match format {
        TestOutput::Text => text::render(run, shown),
        TestOutput::Github => format!("{}{}", text::render(run, shown), github::render(run)),
        TestOutput::Json => {
            let mut text = serde_json::to_string_pretty(&run.to_json(shown.fail_only))
                .map_err(|e| format!("cannot print the result: {e}"))?;
            text.push('\n');
            text
        }
        TestOutput::Junit => junit::render(run),
    })
}

#[cfg(test)]
mod tests {
    use super::expect::subset;
    use serde_json::json;

    #[test]
    fn subset_matching() {
        let actual = json!({"a": {"b": 1, "c": [1, {"d": 2, "e": 3}]}, "f": "x"});
        assert_eq!(
            subset(&json!({"a": {"c": [1, {"d": 2}]}}), &actual, ""),
            Ok(())
        );
        assert_eq!(subset(&json!({}), &actual, ""), Ok(()));
        assert_eq!(
            subset(&json!({"a": {"b": 2}}), &actual, ""),
            Err("/a/b: expected 2, found 1".into())
        );
        assert_eq!(
            subset(&json!({"g": 1}), &actual, ""),
            Err("/g: expected 1, found nothing".into())
        );
        assert!(subset(&json!({"a": {"c": [1]}}), &actual, "").is_err());
    }
}
