//! Hand-written programs in `kanon apply` and `kanon test` are bounded as `kanon serve` bounds
//! them: run in memory-limited worker processes, stopped at the review's deadline, failing
//! under their policy's failure policy with a message naming the bound, while kanon's own
//! memory stays small.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A validate program that doubles a list 64 times: the program runtime does not charge fuel
/// for concatenating lists, so in process it runs on and grows without end.
fn doubling_policy(failure_policy: &str) -> String {
    format!(
        "apiVersion: policy.kanon.dev/v1alpha1
kind: ClusterValidatePolicy
metadata: {{name: doubling}}
spec:
  failurePolicy: {failure_policy}
  resourceSelectors: [{{apiVersion: v1, kind: Pod}}]
  validateRules:
  - targetOperations: [CREATE, UPDATE]
    program: |
      {{% set l = namespace(v=[1]) %}}{{% for i in range(64) %}}{{% set l.v = l.v + l.v %}}{{% endfor %}}
      valid: true
"
    )
}

const POD: &str = "apiVersion: v1
kind: Pod
metadata: {name: web, namespace: default}
spec:
  containers: [{name: c, image: nginx}]
";

/// What the memory bound says when a worker meets it.
const MEMORY_BOUND: &str = "the program's worker process ended while running it";

/// One run of kanon: its exit code, output, how long it took and the peak resident memory of
/// it and the workers it started and reaped (`wait4`'s `ru_maxrss`), in KiB.
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
    took: Duration,
    max_rss_kib: i64,
}

/// Runs kanon in `dir`; killed if still running after a minute (a program not bounded).
#[expect(
    clippy::zombie_processes,
    reason = "reaped by wait4, which also reads its resource usage"
)]
fn kanon(dir: &Path, args: &[&str]) -> Run {
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_kanon"))
        .current_dir(dir)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the kanon binary runs");
    let pid = child.id() as libc::pid_t;
    let read = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        })
    };
    let stdout = read(Box::new(child.stdout.take().unwrap()));
    let stderr = read(Box::new(child.stderr.take().unwrap()));
    let (done, finished) = mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if finished.recv_timeout(Duration::from_secs(60)).is_err() {
            // SAFETY: kill sends a signal to the child this test started and has not reaped.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    });
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 fills it in and reaps our own child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let reaped = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    let took = started.elapsed();
    let _ = done.send(());
    watchdog.join().unwrap();
    assert_eq!(reaped, pid, "wait4: {}", std::io::Error::last_os_error());
    assert!(
        libc::WIFEXITED(status),
        "kanon did not exit by itself (status {status}) after {took:?}"
    );
    Run {
        code: libc::WEXITSTATUS(status),
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
        took,
        max_rss_kib: usage.ru_maxrss,
    }
}

fn write(dir: &Path, name: &str, content: &str) {
    let path = dir.join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

/// The run ended within `seconds`, and neither kanon nor its workers held the list.
fn assert_bounded(run: &Run, seconds: u64) {
    eprintln!(
        "took {:?}, peak resident memory {} KiB",
        run.took, run.max_rss_kib
    );
    assert!(
        run.took < Duration::from_secs(seconds),
        "took {:?}; stderr: {}",
        run.took,
        run.stderr
    );
    assert!(
        run.max_rss_kib < 200 * 1024,
        "peak resident memory {} KiB",
        run.max_rss_kib
    );
}

fn apply_json(dir: &Path, args: &[&str]) -> (Run, serde_json::Value) {
    let mut all = vec!["apply", "-p", "policy.yaml", "-r", "pod.yaml", "-o", "json"];
    all.extend_from_slice(args);
    let run = kanon(dir, &all);
    let verdicts: serde_json::Value = serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("stdout is JSON ({e}); stderr: {}", run.stderr));
    (run, verdicts[0].clone())
}

#[test]
fn apply_denies_under_fail_when_a_program_exhausts_its_workers_memory() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "policy.yaml", &doubling_policy("Fail"));
    write(dir.path(), "pod.yaml", POD);
    let (run, verdict) = apply_json(dir.path(), &["--program-memory-mib", "64"]);
    assert_eq!(run.code, 1, "{verdict}");
    assert_eq!(verdict["allowed"], false, "{verdict}");
    let message = verdict["messages"][0].as_str().unwrap_or_default();
    assert!(
        message.starts_with(&format!(
            "ClusterValidatePolicy/doubling: spec.validateRules[0].program: {MEMORY_BOUND}"
        )) && message.contains("the workers' 64 MiB of memory"),
        "{message}"
    );
    assert_bounded(&run, 8);
}

#[test]
fn apply_warns_under_ignore_when_a_program_exhausts_its_workers_memory() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "policy.yaml", &doubling_policy("Ignore"));
    write(dir.path(), "pod.yaml", POD);
    let (run, verdict) = apply_json(dir.path(), &["--program-memory-mib", "64"]);
    assert_eq!(run.code, 0, "{verdict}");
    assert_eq!(verdict["allowed"], true, "{verdict}");
    let warning = verdict["warnings"][0].as_str().unwrap_or_default();
    assert!(
        warning.contains(MEMORY_BOUND) && warning.contains("64 MiB"),
        "{verdict}"
    );
    assert_bounded(&run, 8);
}

#[test]
fn apply_stops_a_program_still_running_at_the_reviews_deadline() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "policy.yaml", &doubling_policy("Fail"));
    write(dir.path(), "pod.yaml", POD);
    // A memory limit it does not reach within a second: the deadline stops it.
    let (run, verdict) = apply_json(
        dir.path(),
        &["--program-memory-mib", "1024", "--timeout-seconds", "1"],
    );
    assert_eq!(run.code, 1, "{verdict}");
    let message = verdict["messages"][0].as_str().unwrap_or_default();
    assert!(
        message.contains("the program did not finish before the review's deadline")
            && message.contains("its worker process was stopped"),
        "{message}"
    );
    assert!(run.took < Duration::from_secs(4), "took {:?}", run.took);
}

#[test]
fn apply_refuses_a_worker_memory_limit_too_small_to_start() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "policy.yaml", &doubling_policy("Fail"));
    write(dir.path(), "pod.yaml", POD);
    let run = kanon(
        dir.path(),
        &[
            "apply",
            "-p",
            "policy.yaml",
            "-r",
            "pod.yaml",
            "--program-memory-mib",
            "16",
        ],
    );
    assert_eq!(run.code, 2);
    assert!(
        run.stderr
            .contains("--program-memory-mib 16: at least 64 MiB"),
        "{}",
        run.stderr
    );
}

#[test]
fn test_suites_bound_programs_under_their_failure_policy() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "policies/fail.yaml", &doubling_policy("Fail"));
    write(
        dir.path(),
        "policies/ignore.yaml",
        &doubling_policy("Ignore").replace("name: doubling", "name: doubling-ignored"),
    );
    write(dir.path(), "resources/pod.yaml", POD);
    write(
        dir.path(),
        "kanon-test.yaml",
        &format!(
            // A regular expression in single quotes: any character for the apostrophe.
            "name: bounds
policies: [policies/]
resources: [resources/]
cases:
- resource: {{kind: Pod, namespace: default, name: web}}
  allowed: false
  messages:
  - {{matches: '^ClusterValidatePolicy/doubling: spec.validateRules.0..program: {bound} .*64 MiB'}}
  warnings:
  - {{matches: '^ClusterValidatePolicy/doubling-ignored: .*{bound} .*64 MiB'}}
",
            bound = MEMORY_BOUND.replace('\'', "."),
        ),
    );
    let run = kanon(dir.path(), &["test", ".", "--program-memory-mib", "64"]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert!(
        run.stdout
            .contains("PASS bounds: CREATE Pod/default/web\n1 passed, 0 failed"),
        "{}",
        run.stdout
    );
    // Two programs ran out of memory, each in a worker of its own.
    assert_bounded(&run, 12);
}

/// A ValidatePolicy whose condition's `message` is `message`, denying every Pod.
fn message_policy(message: &str) -> String {
    format!(
        "apiVersion: policy.kanon.dev/v1alpha1
kind: ValidatePolicy
metadata: {{name: loud, namespace: default}}
spec:
  resourceSelectors: [{{apiVersion: v1, kind: Pod}}]
  validateRules:
  - template:
      type: condition
      condition:
        cond: Exist
        dataRef: {{from: current, path: /metadata/name}}
        message: '{}'
",
        message.replace('\'', "''")
    )
}

/// The message that took `kanon serve`, `kanon apply` and `kanon test` down (issue 34): a list
/// doubled 40 times, in kanon's own process.
const LIST_DOUBLING: &str = "{% set l = namespace(v=[1]) %}{% for i in range(40) %}{% set l.v = l.v + l.v %}{% endfor %}{{ l.v | length }}";

#[test]
fn apply_and_test_refuse_a_message_that_would_grow_a_list() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "policy.yaml", &message_policy(LIST_DOUBLING));
    write(dir.path(), "pod.yaml", POD);
    let run = kanon(
        dir.path(),
        &["apply", "-p", "policy.yaml", "-r", "pod.yaml"],
    );
    assert_ne!(run.code, 0, "{}", run.stdout);
    assert!(
        run.stderr
            .contains("spec.validateRules[0].template.condition.message")
            && run
                .stderr
                .contains("statements (`{% ... %}`) are not allowed"),
        "{}",
        run.stderr
    );
    assert_bounded(&run, 12);
    write(
        dir.path(),
        "suite/policies/loud.yaml",
        &message_policy(LIST_DOUBLING),
    );
    write(dir.path(), "suite/resources/pod.yaml", POD);
    write(
        dir.path(),
        "suite/kanon-test.yaml",
        "name: loud
policies: [policies/]
resources: [resources/]
cases:
- resource: {kind: Pod, namespace: default, name: web}
  allowed: false
",
    );
    let run = kanon(dir.path(), &["test", "suite"]);
    assert_ne!(run.code, 0, "{}", run.stdout);
    assert!(
        format!("{}{}", run.stdout, run.stderr)
            .contains("statements (`{% ... %}`) are not allowed"),
        "{}{}",
        run.stdout,
        run.stderr
    );
    assert_bounded(&run, 12);
}

#[test]
fn apply_ends_a_message_that_reads_too_much_within_its_bound() {
    // 4,000 copies of a 200 KB Pod would be 800 MB of JSON: the message's read budget ends it,
    // and the denial stands with the rule's own reason.
    let dir = tempfile::tempdir().unwrap();
    let copies = vec!["object"; 4_000].join(", ");
    write(
        dir.path(),
        "policy.yaml",
        &message_policy(&format!("{{{{ [{copies}] | tojson }}}}")),
    );
    write(
        dir.path(),
        "pod.yaml",
        &POD.replace(
            "metadata: {name: web, namespace: default}",
            &format!(
                "metadata: {{name: web, namespace: default, annotations: {{big: {}}}}}",
                "x".repeat(200_000)
            ),
        ),
    );
    let (run, verdict) = apply_json(dir.path(), &[]);
    assert_eq!(verdict["allowed"], false, "{}", run.stderr);
    let said = verdict.to_string();
    assert!(
        said.contains("(its message could not be rendered)")
            && said.contains("the text reads more than 1024 KiB of the request's values"),
        "{}",
        &said[..said.len().min(2000)]
    );
    assert_bounded(&run, 12);
}
