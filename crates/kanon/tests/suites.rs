//! `kanon test` and `kanon render` end to end.

use std::path::Path;
use std::process::{Command, Output};

fn kanon(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kanon"))
        .current_dir(dir)
        .args(args)
        .output()
        .expect("the kanon binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn write(dir: &Path, name: &str, content: &str) {
    let path = dir.join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

const LABELS: &str = "apiVersion: policy.kanon.dev/v1alpha1
kind: ClusterOverridePolicy
metadata:
  name: managed-by
spec:
  overrideRules:
  - overriders:
      template:
        type: labels
        operation: add
        path: app.kubernetes.io/managed-by
        value: {string: kanon}
";

const REPLICAS: &str = "apiVersion: policy.kanon.dev/v1alpha1
kind: ClusterValidatePolicy
metadata:
  name: max-replicas
spec:
  resourceSelectors:
  - {apiVersion: apps/v1, kind: Deployment}
  validateRules:
  - template:
      type: condition
      condition:
        cond: Gt
        dataRef: {from: current, path: /spec/replicas}
        value: {integer: 3}
        message: '{{ object.metadata.name }} wants {{ object.spec.replicas }} replicas'
";

const RESOURCES: &str = "apiVersion: apps/v1
kind: Deployment
metadata: {name: big, namespace: default}
spec:
  replicas: 5
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: small, namespace: default}
spec:
  replicas: 1
";

fn suite_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "s/policies/labels.yaml", LABELS);
    write(dir.path(), "s/policies/replicas.yaml", REPLICAS);
    write(dir.path(), "s/resources.yaml", RESOURCES);
    dir
}

#[test]
fn passing_and_failing_cases_are_reported_with_a_closing_count() {
    let dir = suite_dir();
    write(
        dir.path(),
        "s/kanon-test.yaml",
        "name: replicas
policies: [policies/]
resources: [resources.yaml]
cases:
  - resource: {kind: Deployment, namespace: default, name: big}
    allowed: false
    messages: ['ClusterValidatePolicy/max-replicas: big wants 5 replicas']
  - resource: {kind: Deployment, namespace: default, name: small}
    allowed: true
    appliedPolicies: [ClusterOverridePolicy/managed-by, ClusterValidatePolicy/max-replicas]
    patched: {metadata: {labels: {app.kubernetes.io/managed-by: kanon}}}
  - resource: {kind: Deployment, namespace: default, name: small}
    patched: {metadata: {labels: {app.kubernetes.io/managed-by: someone-else}}}
  - resource: {kind: Deployment, namespace: default, name: missing}
    allowed: true
",
    );
    let out = kanon(dir.path(), &["test"]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}{}", text(&out.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], "PASS replicas: CREATE Deployment/default/big");
    assert_eq!(lines[1], "PASS replicas: CREATE Deployment/default/small");
    assert_eq!(lines[2], "FAIL replicas: CREATE Deployment/default/small");
    assert_eq!(
        lines[3].trim(),
        "patched: /metadata/labels/app.kubernetes.io~1managed-by: expected \"someone-else\", found \"kanon\""
    );
    assert_eq!(lines[4], "FAIL replicas: CREATE Deployment/default/missing");
    assert_eq!(
        lines[5].trim(),
        "no Deployment default/missing in the suite's resources; there are: Deployment default/big, Deployment default/small"
    );
    assert_eq!(*lines.last().unwrap(), "2 passed, 2 failed");
}

#[test]
fn a_green_suite_exits_0() {
    let dir = suite_dir();
    write(
        dir.path(),
        "s/kanon-test.yaml",
        "policies: [policies/]
resources: [resources.yaml]
cases:
  - resource: {apiVersion: apps/v1, kind: Deployment, namespace: default, name: small}
    allowed: true
    warnings: []
",
    );
    let out = kanon(dir.path(), &["test", "s"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    assert!(text(&out.stdout).ends_with("1 passed, 0 failed\n"));
}

#[test]
fn bad_suites_are_bad_input() {
    let dir = suite_dir();
    write(
        dir.path(),
        "s/kanon-test.yaml",
        "policies: [policies/]\nresources: [resources.yaml]\ncases: []\nexpect: nothing\n",
    );
    let out = kanon(dir.path(), &["test"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("unknown field `expect`"),
        "{}",
        text(&out.stderr)
    );

    let empty = tempfile::tempdir().unwrap();
    let out = kanon(empty.path(), &["test"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("no kanon-test.yaml found"),
        "{}",
        text(&out.stderr)
    );

    write(
        dir.path(),
        "s/kanon-test.yaml",
        "policies: [nowhere/]\nresources: [resources.yaml]\ncases: []\n",
    );
    let out = kanon(dir.path(), &["test"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("nowhere"),
        "{}",
        text(&out.stderr)
    );
}

/// Runs `kanon test` on the suite `s/` and returns (exit code, stdout, stderr).
fn run_suite(dir: &Path) -> (Option<i32>, String, String) {
    let out = kanon(dir, &["test", "s"]);
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

/// The lines of `stdout` from the one about `case` up to the next case.
fn report_of<'a>(stdout: &'a str, case: &str) -> Vec<&'a str> {
    let mut lines = stdout.lines().skip_while(|l| !l.ends_with(case));
    let mut found: Vec<&str> = lines.next().into_iter().collect();
    found.extend(lines.take_while(|l| l.starts_with(' ')).map(str::trim));
    found
}

#[test]
fn messages_and_warnings_match_exactly_by_part_or_by_regex() {
    let dir = suite_dir();
    // One policy denies with a message, another warns (validationActions Warn).
    write(
        dir.path(),
        "s/policies/warn.yaml",
        &REPLICAS
            .replace("name: max-replicas", "name: replicas-warning")
            .replace("spec:\n", "spec:\n  validationActions: [Warn]\n")
            .replace("value: {integer: 3}", "value: {integer: 4}")
            .replace("wants", "should not want"),
    );
    write(
        dir.path(),
        "s/kanon-test.yaml",
        r#"name: texts
policies: [policies/]
resources: [resources.yaml]
cases:
  # Passing: exact, a part, a regex (unanchored), a mixed list, and some among many.
  - resource: {kind: Deployment, namespace: default, name: big}
    messages: ["ClusterValidatePolicy/max-replicas: big wants 5 replicas"]
    warnings: [{contains: "should not want 5"}]
  - resource: {kind: Deployment, namespace: default, name: big}
    messages: [{matches: 'wants [0-9]+ replicas$'}]
    warnings: [{matches: '^ClusterValidatePolicy/replicas-warning: '}]
  - resource: {kind: Deployment, namespace: default, name: big}
    messagesInclude: [{contains: max-replicas}]
    warningsInclude: ["ClusterValidatePolicy/replicas-warning: big should not want 5 replicas"]
  - resource: {kind: Deployment, namespace: default, name: small}
    messages: []
    messagesInclude: []
    warnings: []
  # Failing: a part that is not there; a regex that does not match; a list whose length
  # differs; an included entry matching nothing.
  - resource: {kind: Deployment, namespace: default, name: big}
    messages: [{contains: "wants 6"}]
  - resource: {kind: Deployment, namespace: default, name: big}
    warnings: [{matches: '^big'}]
  - resource: {kind: Deployment, namespace: default, name: big}
    messages: [{contains: max-replicas}, {contains: max-replicas}]
  - resource: {kind: Deployment, namespace: default, name: small}
    messagesInclude: [{matches: 'replicas'}]
"#,
    );
    let (code, stdout, stderr) = run_suite(dir.path());
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    let lines: Vec<&str> = stdout.lines().filter(|l| !l.starts_with(' ')).collect();
    assert_eq!(
        lines,
        [
            "PASS texts: CREATE Deployment/default/big",
            "PASS texts: CREATE Deployment/default/big",
            "PASS texts: CREATE Deployment/default/big",
            "PASS texts: CREATE Deployment/default/small",
            "FAIL texts: CREATE Deployment/default/big",
            "FAIL texts: CREATE Deployment/default/big",
            "FAIL texts: CREATE Deployment/default/big",
            "FAIL texts: CREATE Deployment/default/small",
            "4 passed, 4 failed",
        ],
        "{stdout}"
    );
    let reasons: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with(' '))
        .map(str::trim)
        .collect();
    assert_eq!(
        reasons,
        [
            r#"messages: expected [{contains: "wants 6"}], got ["ClusterValidatePolicy/max-replicas: big wants 5 replicas"]"#,
            r#"warnings: expected [{matches: "^big"}], got ["ClusterValidatePolicy/replicas-warning: big should not want 5 replicas"]"#,
            r#"messages: expected [{contains: "max-replicas"}, {contains: "max-replicas"}], got ["ClusterValidatePolicy/max-replicas: big wants 5 replicas"]"#,
            r#"messagesInclude: nothing matches {matches: "replicas"}, got []"#,
        ],
        "{stdout}"
    );
}

#[test]
fn a_bad_regex_or_matcher_names_the_case_and_the_field() {
    let dir = suite_dir();
    write(
        dir.path(),
        "s/kanon-test.yaml",
        "policies: [policies/]
resources: [resources.yaml]
cases:
  - resource: {kind: Deployment, namespace: default, name: small}
    allowed: true
  - resource: {kind: Deployment, namespace: default, name: big}
    messages: [exact, {matches: 'wants (5'}]
    warningsInclude: [{matches: '[z-a]'}]
",
    );
    let (code, stdout, stderr) = run_suite(dir.path());
    assert_eq!(code, Some(2), "{stdout}{stderr}");
    // Nothing ran: a bad suite reports every problem and no verdict.
    assert!(!stdout.contains("PASS"), "{stdout}");
    assert!(
        stderr.contains("cases[1] (CREATE Deployment/default/big): messages[1].matches: `wants (5` is not a valid regular expression: unclosed group"),
        "{stderr}"
    );
    assert!(
        stderr.contains("cases[1] (CREATE Deployment/default/big): warningsInclude[0].matches: `[z-a]` is not a valid regular expression: invalid character class range"),
        "{stderr}"
    );

    // An entry that is neither a string nor {contains} / {matches}.
    for (entry, want) in [
        (
            "{contain: x}",
            "unknown field `contain`, expected one of contains, matches",
        ),
        (
            "{contains: x, matches: y}",
            "give one of `contains` and `matches` per entry",
        ),
        (
            "[x]",
            "expected a string (the whole text), {contains: TEXT} or {matches: REGEX}",
        ),
    ] {
        write(
            dir.path(),
            "s/kanon-test.yaml",
            &format!(
                "policies: [policies/]\nresources: [resources.yaml]\ncases:\n  - resource: {{kind: Deployment, namespace: default, name: big}}\n    messages: [{entry}]\n"
            ),
        );
        let (code, _, stderr) = run_suite(dir.path());
        assert_eq!(code, Some(2), "{entry}: {stderr}");
        assert!(stderr.contains(want), "{entry}: {stderr}");
        assert!(stderr.contains("line 5"), "{entry}: {stderr}");
    }
}

/// Records the old replicas on UPDATE and denies halving them: only an old object gives either.
const SCALE_DOWN: &str = "apiVersion: policy.kanon.dev/v1alpha1
kind: ClusterValidatePolicy
metadata:
  name: gradual
spec:
  resourceSelectors:
  - {apiVersion: apps/v1, kind: Deployment}
  validateRules:
  - targetOperations: [UPDATE]
    template:
      type: condition
      condition:
        cond: Lt
        dataRef: {from: current, path: /spec/replicas}
        valueRef: {from: old, path: /spec/replicas}
        valueProcess: {operation: '*', operationWith: '0.5'}
        message: 'from {{ oldObject.spec.replicas }} to {{ object.spec.replicas }}'
";

#[test]
fn an_update_case_brings_its_own_old_object() {
    let dir = suite_dir();
    write(dir.path(), "s/policies/gradual.yaml", SCALE_DOWN);
    write(
        dir.path(),
        "s/earlier/small.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: small, namespace: default}\nspec:\n  replicas: 4\n",
    );
    // No oldResources at all: `big` never needs an old version, `small` brings its own, from
    // a file and written in place.
    write(
        dir.path(),
        "s/kanon-test.yaml",
        "name: own-old
policies: [policies/]
resources: [resources.yaml]
cases:
  - resource: {kind: Deployment, namespace: default, name: big}
    allowed: false
  - resource: {kind: Deployment, namespace: default, name: small}
    operation: UPDATE
    oldResource: earlier/small.yaml
    allowed: false
    messagesInclude: ['ClusterValidatePolicy/gradual: from 4 to 1']
  - resource: {kind: Deployment, namespace: default, name: small}
    operation: UPDATE
    oldResource:
      apiVersion: apps/v1
      kind: Deployment
      metadata: {name: small, namespace: default}
      spec: {replicas: 2}
    allowed: true
    messages: []
",
    );
    let (code, stdout, stderr) = run_suite(dir.path());
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        [
            "PASS own-old: CREATE Deployment/default/big",
            "PASS own-old: UPDATE Deployment/default/small",
            "PASS own-old: UPDATE Deployment/default/small",
            "3 passed, 0 failed",
        ]
    );

    // The suite-wide way still works, and a case's own old object wins over it.
    write(
        dir.path(),
        "s/old/all.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: small, namespace: default}\nspec:\n  replicas: 10\n",
    );
    write(
        dir.path(),
        "s/kanon-test.yaml",
        "name: suite-old
policies: [policies/]
resources: [resources.yaml]
oldResources: [old/]
operation: UPDATE
cases:
  - resource: {kind: Deployment, namespace: default, name: small}
    messages: ['ClusterValidatePolicy/gradual: from 10 to 1']
  - resource: {kind: Deployment, namespace: default, name: small}
    oldResource: earlier/small.yaml
    messages: ['ClusterValidatePolicy/gradual: from 4 to 1']
",
    );
    let (code, stdout, stderr) = run_suite(dir.path());
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.ends_with("2 passed, 0 failed\n"), "{stdout}");

    // Bad input, each named by case and field: an UPDATE with no old object anywhere (`big`
    // is not in old/), an old object on CREATE, a file that is not there, and one with two
    // documents.
    write(
        dir.path(),
        "s/earlier/two.yaml",
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: b}\n",
    );
    write(
        dir.path(),
        "s/kanon-test.yaml",
        "policies: [policies/]
resources: [resources.yaml]
oldResources: [old/]
cases:
  - resource: {kind: Deployment, namespace: default, name: big}
    operation: UPDATE
  - resource: {kind: Deployment, namespace: default, name: small}
    oldResource: earlier/small.yaml
  - resource: {kind: Deployment, namespace: default, name: small}
    operation: UPDATE
    oldResource: earlier/nothing.yaml
  - resource: {kind: Deployment, namespace: default, name: small}
    operation: UPDATE
    oldResource: earlier/two.yaml
",
    );
    let (code, stdout, stderr) = run_suite(dir.path());
    assert_eq!(code, Some(2), "{stdout}{stderr}");
    assert!(!stdout.contains("PASS"), "{stdout}");
    for want in [
        "cases[0] (UPDATE Deployment/default/big): ",
        "resources.yaml: UPDATE needs an old object (give the case an `oldResource`, or the suite's `oldResources` a previous version of it)",
        "cases[1] (CREATE Deployment/default/small): oldResource: a CREATE has no old object (set `operation: UPDATE`, or DELETE, where it is the object being deleted)",
        "cases[2] (UPDATE Deployment/default/small): oldResource: ",
        "earlier/nothing.yaml: No such file",
        "cases[3] (UPDATE Deployment/default/small): oldResource: earlier/two.yaml holds 2 documents; give a file with exactly one",
    ] {
        assert!(stderr.contains(want), "expected `{want}` in:\n{stderr}");
    }
}

#[test]
fn a_resource_not_in_the_suite_lists_those_there_are_nearest_first() {
    let dir = suite_dir();
    write(
        dir.path(),
        "s/more.yaml",
        "apiVersion: apps/v1
kind: Deployment
metadata: {name: payments, namespace: shop}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: checkout, namespace: shop}
---
apiVersion: v1
kind: Pod
metadata: {name: payments, namespace: shop}
",
    );
    write(
        dir.path(),
        "s/kanon-test.yaml",
        "name: names
policies: [policies/]
resources: [resources.yaml, more.yaml]
cases:
  - resource: {kind: Deployment, namespace: shop, name: paymnts}
    allowed: true
  - resource: {kind: Deploymnet, namespace: shop, name: checkout}
    allowed: true
  - resource: {kind: StatefulSet, namespace: shop, name: db}
    allowed: true
  - resource: {apiVersion: apps/v2, kind: Deployment, namespace: shop, name: checkout}
    allowed: true
",
    );
    let (code, stdout, stderr) = run_suite(dir.path());
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    assert_eq!(
        report_of(&stdout, "Deployment/shop/paymnts"),
        [
            "FAIL names: CREATE Deployment/shop/paymnts",
            "no Deployment shop/paymnts in the suite's resources; did you mean Deployment shop/payments? There are: Deployment shop/payments, Deployment shop/checkout, Pod shop/payments, Deployment default/big, Deployment default/small",
        ]
    );
    assert_eq!(
        report_of(&stdout, "Deploymnet/shop/checkout")[1],
        "no Deploymnet shop/checkout in the suite's resources; did you mean Deployment shop/checkout? There are: Deployment shop/checkout, Deployment shop/payments, Deployment default/big, Deployment default/small, Pod shop/payments"
    );
    // Nothing near: the list alone.
    assert!(
        report_of(&stdout, "StatefulSet/shop/db")[1]
            .starts_with("no StatefulSet shop/db in the suite's resources; there are: "),
        "{stdout}"
    );
    // With an apiVersion the list shows apiVersions, the one that differs included.
    assert!(
        report_of(&stdout, "Deployment/shop/checkout")[1].starts_with(
            "no apps/v2 Deployment shop/checkout in the suite's resources; did you mean apps/v1 Deployment shop/checkout? There are: apps/v1 Deployment shop/checkout, "
        ),
        "{stdout}"
    );
}

#[test]
fn a_case_picks_its_resource_by_file_so_a_suite_holds_an_object_and_its_patched_form() {
    let dir = suite_dir();
    // The object as written, and as the labels policy leaves it: applying the policy again
    // changes nothing (an idempotence suite).
    write(
        dir.path(),
        "s/web/original.yaml",
        "apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec: {replicas: 2}
",
    );
    write(
        dir.path(),
        "s/web/patched.yaml",
        "apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: shop
  labels: {app.kubernetes.io/managed-by: kanon}
spec: {replicas: 2}
",
    );
    let suite = |cases: &str| {
        write(
            dir.path(),
            "s/kanon-test.yaml",
            &format!(
                "name: idempotent\npolicies: [policies/labels.yaml]\nresources: [web/]\ncases:\n{cases}"
            ),
        );
        run_suite(dir.path())
    };
    let (code, stdout, stderr) = suite(
        "  - resource: {source: web/original.yaml}
    patch: [{op: add, path: /metadata/labels, value: {app.kubernetes.io/managed-by: kanon}}]
  - resource: {kind: Deployment, namespace: shop, name: web, source: web/patched.yaml}
    patch: []
",
    );
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(
        stdout.contains("PASS idempotent: CREATE web/original.yaml")
            && stdout.contains("PASS idempotent: CREATE Deployment/shop/web (web/patched.yaml)"),
        "{stdout}"
    );

    // By identity alone both match: the failure says how to pick one.
    let (code, stdout, _) = suite(
        "  - resource: {kind: Deployment, namespace: shop, name: web}
    allowed: true
",
    );
    assert_eq!(code, Some(1), "{stdout}");
    let report = report_of(&stdout, "Deployment/shop/web");
    assert!(
        report[1].starts_with("several resources match (")
            && report[1].ends_with(
                "pick one by its file (`source: web/original.yaml`, relative to the suite file)"
            ),
        "{stdout}"
    );

    // A file that holds no such resource, or is not among the suite's resources, is named.
    let (code, stdout, _) = suite(
        "  - resource: {kind: Pod, name: web, source: web/patched.yaml}
    allowed: true
  - resource: {source: web/elsewhere.yaml}
    allowed: true
",
    );
    assert_eq!(code, Some(1), "{stdout}");
    assert_eq!(
        report_of(&stdout, "Pod/web (web/patched.yaml)")[1],
        "no Pod web in web/patched.yaml; web/patched.yaml holds: Deployment shop/web"
    );
    assert!(
        report_of(&stdout, "web/elsewhere.yaml")[1].starts_with(
            "no resource in web/elsewhere.yaml: web/elsewhere.yaml is not among the suite's resources (they are read from: "
        ),
        "{stdout}"
    );

    // Neither a file nor a kind and name: bad input.
    let (code, _, stderr) = suite(
        "  - resource: {kind: Deployment}
    allowed: true
",
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("resource: give its kind and name (with namespace for a namespaced kind), or the file it is in (`source`, relative to the suite file)"),
        "{stderr}"
    );
}

#[test]
fn a_suites_objects_are_its_context() {
    let dir = suite_dir();
    // max-replicas only in namespaces labelled env=prod.
    write(
        dir.path(),
        "s/policies/replicas.yaml",
        &REPLICAS.replace(
            "spec:\n",
            "spec:\n  namespaceSelector:\n    matchLabels: {env: prod}\n",
        ),
    );
    write(
        dir.path(),
        "s/cluster/namespaces.yaml",
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: default, labels: {env: prod}}\n",
    );
    // `objects:` is `context:` under the name `kanon serve --objects` uses.
    write(
        dir.path(),
        "s/kanon-test.yaml",
        "policies: [policies/]
resources: [resources.yaml]
objects: [cluster/]
cases:
  - resource: {kind: Deployment, namespace: default, name: big}
    messages: ['ClusterValidatePolicy/max-replicas: big wants 5 replicas']
",
    );
    let (code, stdout, stderr) = run_suite(dir.path());
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    // Both names at once is one too many.
    write(
        dir.path(),
        "s/kanon-test.yaml",
        "policies: [policies/]\nresources: [resources.yaml]\nobjects: [cluster/]\ncontext: [cluster/]\ncases: []\n",
    );
    let (code, _, stderr) = run_suite(dir.path());
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("duplicate field `context`"), "{stderr}");
}

#[test]
fn render_prints_each_templates_program() {
    let dir = suite_dir();
    let out = kanon(dir.path(), &["render", "-p", "s/policies"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains(
            "# ClusterOverridePolicy/managed-by spec.overrideRules[0].overriders.template\n"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains("# ClusterValidatePolicy/max-replicas spec.validateRules[0].template\n"),
        "{stdout}"
    );
    // The rendered program is what runs: it holds the key and the comparison.
    assert!(
        stdout.contains("\"app.kubernetes.io/managed-by\": \"kanon\""),
        "{stdout}"
    );
    assert!(stdout.contains("compare(data, value) > 0"), "{stdout}");
    // The message is the second part, rendered apart from the verdict (only on a denial).
    assert!(
        stdout.contains("# ClusterValidatePolicy/max-replicas spec.validateRules[0].template.condition.message\n{{ object.metadata.name }} wants {{ object.spec.replicas }} replicas\n"),
        "{stdout}"
    );

    write(
        dir.path(),
        "bad.yaml",
        &LABELS.replace(
            "value: {string: kanon}",
            "value: {string: kanon, integer: 1}",
        ),
    );
    let out = kanon(dir.path(), &["render", "-p", "bad.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("spec.overrideRules[0].overriders.template.value: set only one value, not string and integer"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn render_shows_what_a_pod_policy_becomes_for_workloads() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "pods.yaml",
        "apiVersion: policy.kanon.dev/v1alpha1
kind: ClusterValidatePolicy
metadata: {name: no-host-network}
spec:
  resourceSelectors: [{apiVersion: v1, kind: Pod}, {apiVersion: apps/v1, kind: DaemonSet}]
  validateRules:
  - cel:
      validations:
      - expression: '!has(object.spec.hostNetwork) || !object.spec.hostNetwork'
---
apiVersion: policy.kanon.dev/v1alpha1
kind: ClusterValidatePolicy
metadata: {name: pods-only}
spec:
  podTemplates: false
  resourceSelectors: [{apiVersion: v1, kind: Pod}]
  validateRules:
  - cel:
      validations:
      - expression: 'true'
",
    );
    write(
        dir.path(),
        "cron.yaml",
        "apiVersion: batch/v1
kind: CronJob
metadata: {name: nightly, namespace: shop}
spec:
  schedule: '0 3 * * *'
  jobTemplate:
    spec:
      template:
        metadata: {labels: {app: nightly}}
        spec:
          hostNetwork: true
          restartPolicy: OnFailure
          containers: [{name: job, image: 'busybox:1.36'}]
",
    );
    let out = kanon(
        dir.path(),
        &["render", "-p", "pods.yaml", "-r", "cron.yaml"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    // The kinds it reaches: not DaemonSet, which it judges as itself.
    assert!(
        stdout.contains("# ClusterValidatePolicy/no-host-network pod templates"),
        "{stdout}"
    );
    assert!(
        stdout.contains("#   apps/v1 Deployment: spec.template\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains("#   batch/v1 CronJob: spec.jobTemplate.spec.template\n"),
        "{stdout}"
    );
    assert!(!stdout.contains("#   apps/v1 DaemonSet"), "{stdout}");
    assert!(!stdout.contains("pods-only pod templates"), "{stdout}");
    // The Pod the CronJob's template is judged as.
    assert!(
        stdout.contains(
            "# ClusterValidatePolicy/no-host-network on CronJob nightly: the Pod its rules judge
apiVersion: v1
kind: Pod
metadata:
  labels:
    app: nightly
  namespace: shop
  name: nightly
spec:
  hostNetwork: true
"
        ),
        "{stdout}"
    );
    // And `kanon apply` denies the CronJob, naming the template.
    let out = kanon(dir.path(), &["apply", "-p", "pods.yaml", "-r", "cron.yaml"]);
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("ClusterValidatePolicy/no-host-network: spec.jobTemplate.spec.template: failed expression: "),
        "{stdout}"
    );
}

#[test]
fn the_example_suites_pass() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = kanon(&repo, &["test", "examples"]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    let summary = stdout.lines().last().unwrap_or_default();
    assert!(summary.ends_with(" passed, 0 failed"), "{summary}");
    // The examples are written as policies should be: kanon warns of nothing in them but the
    // exception the exceptions suite writes in a namespace that may not hold one, and what
    // kube-controller-manager writes in the status of the VAP that reads a container's limits
    // (its type checking does not expose quantities; the policy works all the same).
    let stderr = text(&out.stderr);
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("warning:"))
        .collect();
    assert_eq!(
        warnings,
        [
            "warning: admission-policies: ValidatingAdmissionPolicy/memory-limits with binding memory-limits-prod (examples/suites/admission-policies/policies/memory-limits.yaml:2): spec.validations[0].expression: apps/v1, Kind=Deployment: ERROR: <input>:2:26: undefined field 'limits'",
            "warning: exceptions: PolicyException/shop/self-service (examples/suites/exceptions/policies/exceptions.yaml:56): not honoured: namespace shop is not an exception namespace (--exception-namespace)"
        ]
    );
    // Every template type, operator and suite folder is exercised.
    for suite in [
        "plaintext",
        "templates",
        "templates-defaults",
        "conditions",
        "programs",
        "references",
        "exceptions",
    ] {
        assert!(
            stdout.contains(&format!("PASS {suite}")),
            "no passing case from {suite}:\n{stdout}"
        );
    }
}

/// A suite with a named passing case, a failing one and one more passing case, for the CI
/// outputs.
fn ci_suite() -> tempfile::TempDir {
    let dir = suite_dir();
    write(
        dir.path(),
        "s/kanon-test.yaml",
        "name: replicas
policies: [policies/]
resources: [resources.yaml]
cases:
  - name: big is refused
    resource: {kind: Deployment, namespace: default, name: big}
    allowed: false
  - resource: {kind: Deployment, namespace: default, name: small}
    allowed: false
  - name: small is labelled
    resource: {kind: Deployment, namespace: default, name: small}
    patched: {metadata: {labels: {app.kubernetes.io/managed-by: kanon}}}
",
    );
    dir
}

#[test]
fn json_output_lists_every_case_with_its_line_and_the_counts() {
    let dir = ci_suite();
    let out = kanon(dir.path(), &["test", "--output", "json"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        report["summary"],
        serde_json::json!({"passed": 2, "failed": 1, "errors": 0})
    );
    let suite = &report["suites"][0];
    assert_eq!(suite["name"], "replicas");
    assert_eq!(suite["file"], "./s/kanon-test.yaml");
    let cases = suite["cases"].as_array().unwrap();
    let names: Vec<&str> = cases.iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "big is refused",
            "CREATE Deployment/default/small",
            "small is labelled"
        ]
    );
    // Each case points at its place in the suite file.
    assert_eq!(cases[0]["place"], "./s/kanon-test.yaml:5");
    assert_eq!(cases[1]["place"], "./s/kanon-test.yaml:8");
    assert_eq!(
        cases[1]["failures"][0],
        "allowed: expected false, got true (messages: [])"
    );
    assert!(cases[0].get("failures").is_none());

    // --fail-only keeps the failing case alone; the counts stay those of the whole run.
    let out = kanon(dir.path(), &["test", "-o", "json", "--fail-only"]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let cases = report["suites"][0]["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 1);
    assert_eq!(cases[0]["name"], "CREATE Deployment/default/small");
    assert_eq!(report["summary"]["passed"], 2);
}

#[test]
fn cases_and_suites_are_selected_by_glob_and_a_selection_of_nothing_is_an_error() {
    let dir = ci_suite();
    let out = kanon(dir.path(), &["test", "--case", "*is*"]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert_eq!(
        stdout,
        "PASS replicas: big is refused\nPASS replicas: small is labelled\n2 passed, 0 failed\n"
    );
    let out = kanon(
        dir.path(),
        &[
            "test",
            "--suite",
            "repl*",
            "--case",
            "CREATE Deployment/*/small",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stdout).lines().count(),
        3,
        "{}",
        text(&out.stdout)
    );
    // The fail-only text leaves the passing cases out.
    let out = kanon(dir.path(), &["test", "--fail-only"]);
    assert_eq!(
        text(&out.stdout),
        "FAIL replicas: CREATE Deployment/default/small\n     allowed: expected false, got true (messages: [])\n2 passed, 1 failed\n"
    );
    // A filter with a typo must not pass a CI job by running nothing.
    let out = kanon(dir.path(), &["test", "--suite", "replica"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("error: no case selected by --suite replica (0 suites matched)"),
        "{}",
        text(&out.stderr)
    );
    let out = kanon(dir.path(), &["test", "--case", "nothing*"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn detailed_output_shows_what_each_policy_did_and_said() {
    let dir = ci_suite();
    let out = kanon(dir.path(), &["test", "--detailed", "--case", "big*"]);
    assert_eq!(
        text(&out.stdout),
        "PASS replicas: big is refused
     ClusterOverridePolicy/managed-by mutated
     ClusterValidatePolicy/max-replicas rejected
       big wants 5 replicas
1 passed, 0 failed
"
    );
}

#[test]
fn github_output_annotates_the_failing_case_at_its_line() {
    let dir = ci_suite();
    let out = kanon(dir.path(), &["test", "--output", "github"]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout.starts_with("PASS replicas: big is refused\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "::error file=./s/kanon-test.yaml,line=8,title=kanon test%3A replicas%3A CREATE Deployment/default/small::allowed: expected false, got true (messages: [])\n"
        ),
        "{stdout}"
    );
}

/// A policy that reads a field Pods do not have: valid, but almost surely a typo.
const TYPO: &str = "apiVersion: policy.kanon.dev/v1alpha1
kind: ClusterValidatePolicy
metadata:
  name: one-container
spec:
  resourceSelectors: [{apiVersion: v1, kind: Pod}]
  validateRules:
  - targetOperations: [CREATE]
    cel:
      validations:
      - expression: \"!has(object.spec.containerz) || size(object.spec.containerz) == 1\"
";

const POD: &str = "apiVersion: v1
kind: Pod
metadata: {name: web, namespace: shop}
spec:
  containers: [{name: a, image: nginx}, {name: b, image: nginx}]
";

#[test]
fn strict_makes_a_typod_field_fail_the_run() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "t/policies/typo.yaml", TYPO);
    write(dir.path(), "t/pods.yaml", POD);
    let suite = "name: typo
policies: [policies/]
resources: [pods.yaml]
cases:
  - resource: {kind: Pod, namespace: shop, name: web}
    allowed: true
";
    write(dir.path(), "t/kanon-test.yaml", suite);
    // Without strict the suite passes, and the warning names its suite, policy and place.
    let out = kanon(dir.path(), &["test"]);
    assert_eq!(out.status.code(), Some(0));
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with(
            "warning: typo: ClusterValidatePolicy/one-container (./t/policies/typo.yaml:1): spec.validateRules[0].cel.validations[0].expression: "
        ),
        "{stderr}"
    );
    assert!(stderr.contains("undefined field 'containerz'"), "{stderr}");
    // Strict, from the command line or the suite, the warning is a failing check.
    let out = kanon(dir.path(), &["test", "--strict"]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("FAIL typo: policy ClusterValidatePolicy/one-container has no warnings\n"),
        "{stdout}"
    );
    assert!(stdout.ends_with("1 passed, 1 failed\n"), "{stdout}");
    write(
        dir.path(),
        "t/kanon-test.yaml",
        &format!("strict: true\n{suite}"),
    );
    let out = kanon(dir.path(), &["test", "--output", "github"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stdout).contains(
            "::error file=./t/policies/typo.yaml,line=1,title=kanon test%3A typo%3A policy ClusterValidatePolicy/one-container has no warnings::"
        ),
        "{}",
        text(&out.stdout)
    );
}

/// Runs scripts/check-junit.sh (the JUnit schema and a JUnit reader) on `files`.
fn check_junit(files: &[&Path]) -> Output {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    Command::new(repo.join("scripts/check-junit.sh"))
        .args(files)
        .output()
        .expect("scripts/check-junit.sh runs")
}

#[test]
fn junit_reports_validate_against_the_schema_ci_servers_read() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out_dir = tempfile::tempdir().unwrap();
    // The repository's own suites, as a CI job would run them.
    let green = out_dir.path().join("green.xml");
    let out = kanon(
        &repo,
        &[
            "test",
            "examples",
            "library",
            "--output",
            "junit",
            "--output-file",
            green.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // The text still goes to standard output beside the file.
    let summary = text(&out.stdout);
    let passed: usize = summary
        .lines()
        .last()
        .and_then(|l| l.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert!(passed > 100, "{summary}");
    // A failing run, a strict check and a suite that cannot run.
    let dir = ci_suite();
    write(dir.path(), "t/policies/typo.yaml", TYPO);
    write(dir.path(), "t/pods.yaml", POD);
    write(
        dir.path(),
        "t/kanon-test.yaml",
        "strict: true\npolicies: [policies/]\nresources: [pods.yaml]\ncases: [{resource: {kind: Pod, namespace: shop, name: web}, allowed: true}]\n",
    );
    write(
        dir.path(),
        "u/kanon-test.yaml",
        "policies: [nowhere/]\nresources: []\ncases: []\n",
    );
    let red = out_dir.path().join("red.xml");
    let out = kanon(dir.path(), &["test", "-o", "junit"]);
    assert_eq!(out.status.code(), Some(2));
    std::fs::write(&red, &out.stdout).unwrap();
    let xml = text(&out.stdout);
    assert!(xml.contains("<failure message=\"allowed: expected false, got true (messages: [])\" type=\"expectation\">"), "{xml}");
    assert!(xml.contains("<error message="), "{xml}");

    let checked = check_junit(&[&green, &red]);
    let report = text(&checked.stdout);
    assert_eq!(
        checked.status.code(),
        Some(0),
        "{report}{}",
        text(&checked.stderr)
    );
    let lines: Vec<&str> = report.lines().collect();
    assert_eq!(
        lines[0],
        format!(
            "{} tests={passed} failures=0 errors=0 skipped=0",
            green.display()
        )
    );
    // 3 cases and 1 strict check (1 failing each), and the suite that could not run.
    assert_eq!(
        lines[1],
        format!("{} tests=6 failures=2 errors=1 skipped=0", red.display())
    );
    // The check can fail: an attribute the schema does not allow on a testcase.
    let bad = out_dir.path().join("bad.xml");
    std::fs::write(
        &bad,
        "<testsuites><testsuite name=\"s\" tests=\"1\" failures=\"0\" errors=\"0\"><testcase name=\"c\" line=\"3\"/></testsuite></testsuites>",
    )
    .unwrap();
    let checked = check_junit(&[&bad]);
    assert_eq!(checked.status.code(), Some(1));
    assert!(
        text(&checked.stderr).contains("does not validate against junit-10.xsd"),
        "{}",
        text(&checked.stderr)
    );
}
