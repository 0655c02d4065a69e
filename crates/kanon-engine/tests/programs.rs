//! Rule programs: what override and validate programs render (YAML or JSON, a list or
//! `{patches}`, a verdict), every helper, the context variables, and the sandbox limits (fuel,
//! recursion, output size) with the failure policy deciding what an error does.

mod common;

use std::time::{Duration, Instant};

use common::*;
use kanon_api::Operation;
use kanon_engine::{Decision, Lookup, NoObjects, ObjectStore, PolicySet, Request};
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

fn web_pod() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "namespace": "default",
                     "labels": {"app": "web", "app.kubernetes.io/name": "web"}},
        "spec": {"containers": [
            {"name": "app", "image": "nginx", "resources": {"limits": {"cpu": "500m", "memory": "1Gi"}}},
            {"name": "sidecar", "image": "envoy"},
        ]},
    })
}

fn override_program(name: &str, program: &str) -> Value {
    cop(
        name,
        json!({"overrideRules": [{"overriders": {"program": program}}]}),
    )
}

fn validate_program(name: &str, program: &str) -> Value {
    cvp(name, json!({"validateRules": [{"program": program}]}))
}

/// Runs an override program on a CREATE of `object`.
fn mutate_by(program: &str, object: &Value) -> Decision {
    mutate_create(&set_of(&[override_program("prog", program)]), object)
}

/// Runs a validate program on `request`.
fn validate_by(program: &str, request: &Request, lookup: &dyn Lookup) -> Decision {
    kanon_engine::block_on(
        set_of(&[validate_program("prog", program)]).validate(request, None, lookup),
    )
}

/// The reason a validate program gives when it renders `{valid: false, reason: <expr | tojson>}`
/// (the reason is then the JSON text of `expr`), parsed back; or the evaluation error.
fn evaluate_on(expr: &str, request: &Request, lookup: &dyn Lookup) -> Result<Value, String> {
    let program = format!("{{\"valid\": false, \"reason\": {{{{ ({expr}) | tojson | tojson }}}}}}");
    let d = validate_by(&program, request, lookup);
    assert!(!d.allowed, "{expr}: {d:?}");
    assert_eq!(d.messages.len(), 1, "{d:?}");
    let message = &d.messages[0];
    let text = message
        .strip_prefix("ClusterValidatePolicy/prog: ")
        .unwrap_or_else(|| panic!("{message}"));
    match text.strip_prefix("spec.validateRules[0].program: ") {
        Some(error) => Err(error.to_string()),
        None => Ok(serde_json::from_str(text).unwrap_or_else(|e| panic!("{expr}: {text}: {e}"))),
    }
}

fn evaluate(expr: &str) -> Result<Value, String> {
    evaluate_on(expr, &create(&web_pod()), &NoObjects)
}

/// A Decision's patch as JSON.
fn patch_of(d: &Decision) -> Value {
    serde_json::to_value(&d.patch).unwrap()
}

// ---------------------------------------------------------------------------------------------
// Override output
// ---------------------------------------------------------------------------------------------

#[test]
fn override_output_as_yaml_or_json_list_or_patches() {
    let object = web_pod();
    let expected = json!([{"op": "add", "path": "/metadata/labels/by", "value": "program"}]);
    let outputs = [
        "- op: add\n  path: /metadata/labels/by\n  value: program\n",
        "[{\"op\": \"add\", \"path\": \"/metadata/labels/by\", \"value\": \"program\"}]",
        "patches:\n  - op: add\n    path: /metadata/labels/by\n    value: program\n",
        "{\"patches\": [{\"op\": \"add\", \"path\": \"/metadata/labels/by\", \"value\": \"program\"}]}",
        "{% set by = 'program' %}\n- op: add\n  path: {{ '/metadata/labels/by' | tojson }}\n  value: {{ by | tojson }}\n",
        "---\n- {op: add, path: /metadata/labels/by, value: program}\n",
    ];
    for output in outputs {
        let d = mutate_by(output, &object);
        assert!(d.allowed, "{output}: {d:?}");
        assert_eq!(patch_of(&d), expected, "{output}");
        assert_eq!(d.applied_policies, ["ClusterOverridePolicy/prog"]);
    }
}

#[test]
fn empty_override_output_means_no_operations() {
    let object = web_pod();
    for output in [
        "",
        "   \n\t\n",
        "{% if false %}- op: add{% endif %}",
        "{# a comment only #}",
        "[]",
        "patches: []",
        "patches:",
        "~",
    ] {
        let d = mutate_by(output, &object);
        assert!(d.allowed, "{output:?}: {d:?}");
        assert!(d.patch.0.is_empty(), "{output:?}");
        assert_eq!(
            d.applied_policies,
            ["ClusterOverridePolicy/prog"],
            "{output:?}"
        );
    }
}

#[test]
fn override_programs_use_every_operation_and_see_earlier_steps() {
    let object = web_pod();
    let program = r#"
- {op: test, path: /metadata/labels/app, value: web}
- {op: replace, path: /metadata/labels/app, value: {{ (object.metadata.labels.app ~ "-v2") | tojson }}}
- {op: copy, from: /metadata/labels/app, path: /metadata/labels/copied}
- {op: move, from: /metadata/labels/copied, path: /metadata/labels/moved}
- {op: remove, path: /spec/containers/1}
- {op: add, path: /spec/containers/-, value: {name: logger, image: fluent}}
"#;
    let d = mutate_by(program, &object);
    assert!(d.allowed, "{d:?}");
    let patched = d.patched.as_ref().unwrap();
    assert_eq!(
        patched["metadata"]["labels"],
        json!({"app": "web-v2", "app.kubernetes.io/name": "web", "moved": "web-v2"})
    );
    assert_eq!(
        patched["spec"]["containers"][1],
        json!({"name": "logger", "image": "fluent"})
    );
    assert_patch_is_diff(&object, &d);

    // In one block the program runs after the template and sees its result.
    let set = set_of(&[cop(
        "p",
        json!({"overrideRules": [{"overriders": {
            "template": {"type": "labels", "operation": "add", "path": "team", "value": {"string": "core"}},
            "program": "- {op: add, path: /metadata/annotations, value: {team-seen: {{ object.metadata.labels.team | tojson }}}}",
        }}]}),
    )]);
    let d = mutate_create(&set, &object);
    assert_eq!(
        d.patched.as_ref().unwrap()["metadata"]["annotations"],
        json!({"team-seen": "core"})
    );
}

#[test]
fn bad_override_output_is_an_evaluation_error_naming_the_problem() {
    let object = web_pod();
    let rows = [
        (
            "op: add",
            "renders a list of operations or {patches: [...]}, not an object",
        ),
        (
            "just text",
            "renders a list of operations or {patches: [...]}, not a string",
        ),
        ("42", "not a number"),
        ("{patches: {op: add}}", "not an object"),
        (
            "- op: add\n  value: 1",
            "operation 0 ({\"op\":\"add\",\"value\":1}) is not an RFC 6902 operation",
        ),
        ("- op: frobnicate\n  path: /a", "operation 0"),
        (
            "- op: add\n  path: metadata/labels/x\n  value: 1",
            "operation 0: path: `metadata/labels/x` is not a JSON pointer: it must start with `/`",
        ),
        (
            "- op: remove\n  path: /metadata/labels/absent",
            "operation 0",
        ),
        ("[unclosed", "the output is not YAML or JSON"),
        (
            "- {op: add, path: /a, value: 1}\n---\n- {op: add, path: /b, value: 2}",
            "the output holds 2 documents",
        ),
    ];
    for (output, needle) in rows {
        let d = mutate_by(output, &object);
        assert!(!d.allowed, "{output}: {d:?}");
        assert_eq!(d.messages.len(), 1);
        let m = &d.messages[0];
        assert!(
            m.starts_with("ClusterOverridePolicy/prog: spec.overrideRules[0].overriders.program: ")
                && m.contains(needle),
            "{output}: expected `{needle}` in {m}"
        );
        assert!(d.patch.0.is_empty());
        assert_eq!(d.patched.as_ref(), Some(&object));
    }
}

// ---------------------------------------------------------------------------------------------
// Validate output
// ---------------------------------------------------------------------------------------------

#[test]
fn validate_output_verdicts_and_warnings() {
    let req = create(&web_pod());
    // (output, allowed, messages, warnings)
    let rows: Vec<(&str, bool, Vec<&str>, Vec<&str>)> = vec![
        ("{\"valid\": true}", true, vec![], vec![]),
        ("valid: true", true, vec![], vec![]),
        ("", true, vec![], vec![]),
        ("  \n ", true, vec![], vec![]),
        (
            "{\"valid\": false, \"reason\": \"no\"}",
            false,
            vec!["no"],
            vec![],
        ),
        (
            "valid: false\nreason: 'not today: {{ object.metadata.name }}'",
            false,
            vec!["not today: web"],
            vec![],
        ),
        (
            "{\"valid\": false}",
            false,
            vec!["spec.validateRules[0] rejected the object"],
            vec![],
        ),
        (
            "{\"valid\": false, \"reason\": \"\"}",
            false,
            vec!["spec.validateRules[0] rejected the object"],
            vec![],
        ),
        (
            "valid: true\nwarnings:\n  - first\n  - '{{ object.metadata.name }} is old'",
            true,
            vec![],
            vec!["first", "web is old"],
        ),
        (
            "{\"valid\": false, \"reason\": \"r\", \"warnings\": [\"w\"]}",
            false,
            vec!["r"],
            vec!["w"],
        ),
        (
            "{\"valid\": true, \"warnings\": null}",
            true,
            vec![],
            vec![],
        ),
        (
            "{\"valid\": true, \"warnings\": [3]}",
            true,
            vec![],
            vec!["3"],
        ),
    ];
    for (output, allowed, messages, warnings) in rows {
        let d = validate_by(output, &req, &NoObjects);
        assert_eq!(d.allowed, allowed, "{output}: {d:?}");
        let prefixed = |v: Vec<&str>| -> Vec<String> {
            v.into_iter()
                .map(|m| format!("ClusterValidatePolicy/prog: {m}"))
                .collect()
        };
        assert_eq!(d.messages, prefixed(messages), "{output}");
        assert_eq!(d.warnings, prefixed(warnings), "{output}");
    }
}

#[test]
fn bad_validate_output_is_an_evaluation_error_naming_the_problem() {
    let req = create(&web_pod());
    let rows = [
        (
            "[1, 2]",
            "a validate program renders {valid, reason, warnings}, not an array",
        ),
        ("true", "not a boolean"),
        ("reason: x", "the verdict has no `valid`"),
        (
            "{\"valid\": \"no way\"}",
            "`valid` must be true or false, not \"no way\"",
        ),
        ("{\"valid\": 1}", "`valid` must be true or false"),
        (
            "{\"valid\": true, \"warning\": \"x\"}",
            "unknown key `warning` in the verdict",
        ),
        (
            "{\"valid\": true, \"warnings\": \"x\"}",
            "`warnings` must be a list",
        ),
        ("valid: [", "the output is not YAML or JSON"),
    ];
    for (output, needle) in rows {
        let d = validate_by(output, &req, &NoObjects);
        assert!(!d.allowed, "{output}");
        let m = &d.messages[0];
        assert!(
            m.starts_with("ClusterValidatePolicy/prog: spec.validateRules[0].program: ")
                && m.contains(needle),
            "{output}: expected `{needle}` in {m}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Helpers available to programs
// ---------------------------------------------------------------------------------------------

#[test]
fn helpers_give_what_they_document() {
    let rows: Vec<(&str, Value)> = vec![
        // jsonpath: the list of matches.
        (
            "jsonpath(object, '$.spec.containers[*].image')",
            json!(["nginx", "envoy"]),
        ),
        ("jsonpath(object, '$.metadata.name')", json!(["web"])),
        ("jsonpath(object, '$.spec.nope[*]')", json!([])),
        (
            "jsonpath(object, \"$.spec.containers[?(@.name == 'sidecar')].image\")",
            json!(["envoy"]),
        ),
        // pointer: the value, escaped keys and all; absent is undefined.
        (
            "pointer(object, '/metadata/labels/app.kubernetes.io~1name')",
            json!("web"),
        ),
        (
            "pointer(object, '/spec/containers/0/resources/limits')",
            json!({"cpu": "500m", "memory": "1Gi"}),
        ),
        ("pointer(object, '/spec/nope') is defined", json!(false)),
        ("pointer(object, '') == object", json!(true)),
        (
            "pointer(object, '/spec/nope') | default('fallback')",
            json!("fallback"),
        ),
        (
            "'app.kubernetes.io/name' | escape_pointer",
            json!("app.kubernetes.io~1name"),
        ),
        ("'a~b' | escape_pointer", json!("a~0b")),
        // quantities
        ("quantity('500m')", json!(0.5)),
        ("quantity('1Ki')", json!(1024.0)),
        ("quantity('1.5Gi')", json!(1610612736.0)),
        ("quantity(2)", json!(2.0)),
        (
            "quantity(object.spec.containers[0].resources.limits.cpu) * 1000",
            json!(500.0),
        ),
        ("compare_quantities('1Gi', '1000Mi')", json!(1)),
        ("compare_quantities('500m', '0.5')", json!(0)),
        ("compare_quantities('1', 2)", json!(-1)),
        ("compare_quantities('1G', '1Gi')", json!(-1)),
        ("scale_quantity('500m', '0.25')", json!("125m")),
        ("scale_quantity('1Gi', 0.5)", json!("512Mi")),
        ("scale_quantity('3', '0.333')", json!("999m")),
        ("scale_quantity('100Mi', '0.3')", json!("30Mi")),
        // regex
        ("regex_match('web-12', '^web-\\\\d+$')", json!(true)),
        ("regex_match('api-1', '^web-')", json!(false)),
        ("regex_match(12, '^\\\\d+$')", json!(true)),
        ("regex_match(false, '^false$')", json!(true)),
        // base64
        ("'hello, world' | b64encode", json!("aGVsbG8sIHdvcmxk")),
        ("'aGVsbG8sIHdvcmxk' | b64decode", json!("hello, world")),
        ("('ünïcode' | b64encode | b64decode)", json!("ünïcode")),
        // tojson
        (
            "object.metadata.labels | tojson",
            json!("{\"app\": \"web\", \"app.kubernetes.io/name\": \"web\"}"),
        ),
        // maps
        (
            "with_keys({'a': 1}, {'b': 2, 'a': 3})",
            json!({"a": 3, "b": 2}),
        ),
        ("with_keys(none, {'b': 2})", json!({"b": 2})),
        (
            "with_keys(object.metadata.labels, {'x/y': 'z'})",
            json!({"app": "web", "app.kubernetes.io/name": "web", "x/y": "z"}),
        ),
        (
            "without_keys({'a': 1, 'b': 2, 'c': 3}, 'a')",
            json!({"b": 2, "c": 3}),
        ),
        (
            "without_keys({'a': 1, 'b': 2, 'c': 3}, ['a', 'b'])",
            json!({"c": 3}),
        ),
        (
            "without_keys({'a': 1, 'b': 2, 'c': 3}, 'a', 'c', 'nope')",
            json!({"b": 2}),
        ),
        // where the pod spec is
        ("pod_spec_pointer(object)", json!("/spec")),
        (
            "pod_spec_pointer({'kind': 'Deployment', 'spec': {'template': {'spec': {}}}})",
            json!("/spec/template/spec"),
        ),
        (
            "pod_spec_pointer({'kind': 'CronJob', 'spec': {'jobTemplate': {'spec': {'template': {'spec': {}}}}}})",
            json!("/spec/jobTemplate/spec/template/spec"),
        ),
        (
            "pod_spec_pointer({'kind': 'Service', 'spec': {}}) is defined",
            json!(false),
        ),
        // condition semantics
        ("equal('1000m', 1)", json!(true)),
        ("equal('a', 'b')", json!(false)),
        ("contains_all(['a', 'b', 3], ['a', '3'])", json!(true)),
        ("contains_none(['a', 'b'], 'c')", json!(true)),
        ("process_value('1Gi', '/', '4')", json!("256Mi")),
        ("process_value(10, '*', '0.5')", json!(5.0)),
        ("compare('10', 9)", json!(1)),
        ("compare('256Mi', '1Gi')", json!(-1)),
    ];
    let mut failures = Vec::new();
    for (expr, expected) in rows {
        match evaluate(expr) {
            Ok(got) if got == expected => {}
            other => failures.push(format!("{expr}: expected {expected}, got {other:?}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn helper_errors_say_what_is_wrong() {
    let rows = [
        ("quantity('lots')", "`lots` is not a Kubernetes quantity"),
        ("quantity([1])", "expected a quantity, got seq"),
        (
            "compare_quantities('1', 'x')",
            "`x` is not a Kubernetes quantity",
        ),
        (
            "scale_quantity('1', 'half')",
            "`half` is not a decimal factor",
        ),
        ("'!!!' | b64decode", "invalid base64"),
        ("'/w==' | b64decode", "decoded base64 is not UTF-8 text"),
        ("jsonpath(object, '$[')", "invalid JSONPath `$[`"),
        // Text that is not a pointer fails rather than reading as absent.
        (
            "pointer(object, 'spec.containers')",
            "pointer(): `spec.containers` is not a JSON pointer: it must start with `/` (e.g. `/spec/containers`",
        ),
        (
            "pointer(object, '/metadata/labels/a~2b')",
            "pointer(): `/metadata/labels/a~2b` is not a JSON pointer: `~` at offset",
        ),
        ("regex_match('a', 'a(')", "invalid regular expression `a(`"),
        ("with_keys([1], {})", "with_keys: expected a map, got array"),
        (
            "with_keys({}, 'k')",
            "with_keys: expected a map of keys, got string",
        ),
        (
            "without_keys('x', 'k')",
            "without_keys: expected a map, got string",
        ),
        ("without_keys({}, 3)", "without_keys: keys must be strings"),
        ("compare('a', 1)", "cannot order \"a\" and 1"),
        ("contains_all('a', 'a')", "expected a list to look in"),
        (
            "process_value('x', '+', '1')",
            "valueProcess needs a number or a quantity",
        ),
        (
            "fail('replicas must be set by ' ~ object.metadata.name)",
            "replicas must be set by web",
        ),
    ];
    for (expr, needle) in rows {
        match evaluate(expr) {
            Err(e) => assert!(
                e.starts_with("line 1: ") && e.contains(needle),
                "{expr}: expected `{needle}` in {e}"
            ),
            Ok(v) => panic!("{expr}: expected an error, got {v}"),
        }
    }
    // fail() speaks for itself: the line and its message, nothing else.
    assert_eq!(evaluate("fail('stop')").unwrap_err(), "line 1: stop");
    let d = validate_by(
        "{% macro check(x) %}{% if not x %}{{ fail('no ' ~ object.metadata.name) }}{% endif %}{% endmacro %}\n{{ check(false) }}",
        &create(&web_pod()),
        &NoObjects,
    );
    assert_eq!(
        d.messages,
        ["ClusterValidatePolicy/prog: spec.validateRules[0].program: line 1: no web"]
    );
    // Other errors show the text of the line at fault.
    assert_eq!(
        evaluate("1 + 'a'").unwrap_err(),
        "line 1: tried to use + operator on unsupported types number and string (in `{\"valid\": false, \"reason\": {{ (1 + 'a') | tojson | tojson }}}`)"
    );
}

// ---------------------------------------------------------------------------------------------
// Context variables
// ---------------------------------------------------------------------------------------------

#[test]
fn context_holds_object_old_object_operation_request_and_namespace() {
    let object = web_pod();
    let mut store = ObjectStore::new();
    store
        .insert(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default", "labels": {"env": "prod"}}}))
        .unwrap();
    let create_req = create(&object);
    let get = |expr: &str, req: &Request, lookup: &dyn Lookup| {
        evaluate_on(expr, req, lookup).unwrap_or_else(|e| panic!("{expr}: {e}"))
    };
    assert_eq!(
        get("object.metadata.name", &create_req, &NoObjects),
        json!("web")
    );
    assert_eq!(
        get("oldObject is none", &create_req, &NoObjects),
        json!(true)
    );
    assert_eq!(get("operation", &create_req, &NoObjects), json!("CREATE"));
    assert_eq!(
        get("request", &create_req, &NoObjects),
        json!({"uid": "", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "name": "web",
               "resource": {"group": "", "version": "v1", "resource": "pods"},
               "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
               "requestResource": {"group": "", "version": "v1", "resource": "pods"},
               "operation": "CREATE", "userInfo": {}, "dryRun": false, "namespace": "default"})
    );
    assert_eq!(
        get("namespaceObject.metadata.labels.env", &create_req, &store),
        json!("prod")
    );
    // A namespace that cannot be found is none, not an error.
    assert_eq!(
        get("namespaceObject is none", &create_req, &NoObjects),
        json!(true)
    );

    // UPDATE: both objects.
    let mut new = object.clone();
    new["metadata"]["labels"]["app"] = json!("web-v2");
    let update = Request::from_objects(Operation::Update, Some(new), Some(object.clone())).unwrap();
    assert_eq!(
        get(
            "[object.metadata.labels.app, oldObject.metadata.labels.app, operation]",
            &update,
            &NoObjects
        ),
        json!(["web-v2", "web", "UPDATE"])
    );
    // DELETE: the object under test is the old object.
    let delete = Request::from_objects(Operation::Delete, None, Some(object.clone())).unwrap();
    assert_eq!(
        get(
            "[object.metadata.name, oldObject.metadata.name, operation]",
            &delete,
            &NoObjects
        ),
        json!(["web", "web", "DELETE"])
    );

    // From an AdmissionReview, `request` carries what kube-apiserver sent.
    let review = json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "0b5d7d2c-1111-2222-3333-444455556666",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "subResource": "status",
            "name": "web",
            "namespace": "default",
            "operation": "CREATE",
            "userInfo": {"username": "alice", "groups": ["devs", "system:authenticated"]},
            "object": object,
            "dryRun": true,
        },
    });
    let req = Request::from_admission_review(&review).unwrap();
    assert_eq!(
        get(
            "[request.uid, request.userInfo.username, request.userInfo.groups, request.resource.resource, request.subResource, request.dryRun]",
            &req,
            &NoObjects
        ),
        json!([
            "0b5d7d2c-1111-2222-3333-444455556666",
            "alice",
            ["devs", "system:authenticated"],
            "pods",
            "status",
            true
        ])
    );
}

#[test]
fn override_programs_see_the_same_context() {
    let object = web_pod();
    let mut store = ObjectStore::new();
    store
        .insert(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default", "labels": {"team": "core"}}}))
        .unwrap();
    let set = set_of(&[override_program(
        "ctx",
        r#"- op: add
  path: /metadata/annotations
  value:
    team: {{ namespaceObject.metadata.labels.team | tojson }}
    operation: {{ operation | tojson }}
    user: {{ request.userInfo.username | default("offline") | tojson }}
    old: {{ (oldObject.metadata.labels.app if oldObject else "none") | tojson }}"#,
    )]);
    let d = kanon_engine::block_on(set.mutate(&create(&object), &store));
    assert_eq!(
        d.patched.as_ref().unwrap()["metadata"]["annotations"],
        json!({"team": "core", "operation": "CREATE", "user": "offline", "old": "none"})
    );
    let update =
        Request::from_objects(Operation::Update, Some(object.clone()), Some(object)).unwrap();
    let d = kanon_engine::block_on(set.mutate(&update, &store));
    assert_eq!(
        d.patched.as_ref().unwrap()["metadata"]["annotations"]["old"],
        "web"
    );
}

// ---------------------------------------------------------------------------------------------
// Strictness and sandbox
// ---------------------------------------------------------------------------------------------

#[test]
fn an_undefined_name_is_an_error_naming_the_line() {
    let req = create(&web_pod());
    for (program, line) in [
        ("{{ objekt.metadata.name }}", "line 1: undefined value"),
        (
            "{% set x = 1 %}\n{\"valid\": {{ object.metadata.nmae == 'web' }}}",
            "line 2: undefined value",
        ),
        (
            "{{ object.spec.containers[5].name }}",
            "line 1: undefined value",
        ),
        (
            "{% for c in object.spec.initContainers %}{% endfor %}",
            "line 1: undefined value",
        ),
    ] {
        let d = validate_by(program, &req, &NoObjects);
        assert!(!d.allowed, "{program}");
        let m = &d.messages[0];
        let last_line = program.lines().last().unwrap();
        assert!(
            m.contains(line) && m.contains(&format!("(in `{last_line}`)")),
            "{program}: {m}"
        );
    }
    // Probing for absence is allowed.
    for program in [
        "{\"valid\": {{ (object.metadata.annotations is defined) | tojson }}, \"reason\": \"probe\"}",
        "{% if object.metadata.annotations %}x{% endif %}{\"valid\": true}",
        "{\"valid\": {{ (object.metadata.annotations | default({}) | length == 0) | tojson }}}",
        "{\"valid\": {{ ('team' not in object.metadata.labels) | tojson }}}",
    ] {
        let d = validate_by(program, &req, &NoObjects);
        assert!(
            d.messages.iter().all(|m| !m.contains("undefined")),
            "{program}: {d:?}"
        );
    }
}

#[test]
fn a_program_that_does_not_compile_makes_the_policy_invalid() {
    for (doc, field) in [
        (
            override_program("x", "- op: add\n{% for x in %}\n{% endfor %}"),
            "spec.overrideRules[0].overriders.program",
        ),
        (
            validate_program("x", "{% if object %}{\"valid\": true}"),
            "spec.validateRules[0].program",
        ),
    ] {
        let errors = compile_errors(&doc);
        assert!(
            errors
                .iter()
                .any(|e| e.field == field && e.message.starts_with("line ")),
            "{errors:#?}"
        );
    }
    // Filters and functions are looked up when the program runs: an unknown one is an
    // evaluation error naming it.
    let d = validate_by(
        "{{ object | no_such_filter }}",
        &create(&web_pod()),
        &NoObjects,
    );
    assert!(
        d.messages[0].contains("line 1: unknown filter: filter no_such_filter is unknown"),
        "{:?}",
        d.messages
    );
    // The source size is bounded too.
    let huge = format!("{{# {} #}}", "x".repeat(70 * 1024));
    let errors = compile_errors(&validate_program("x", &huge));
    assert_error(
        &errors,
        "spec.validateRules[0].program",
        "bytes long; the limit is 65536",
    );
}

#[test]
fn programs_have_no_loader() {
    // There are no other templates to reach: include, import and extends do not exist.
    for program in [
        "{% include 'other' %}",
        "{% import 'macros' as m %}{{ m.x() }}",
        "{% from 'macros' import x %}",
        "{% extends 'base' %}",
    ] {
        let errors = compile_errors(&validate_program("x", program));
        assert_error(
            &errors,
            "spec.validateRules[0].program",
            "line 1: syntax error: unknown statement",
        );
    }
}

const RUNAWAY: &str =
    "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}";

#[test]
fn a_runaway_loop_runs_out_of_fuel_quickly() {
    let bound = if cfg!(debug_assertions) {
        // Unoptimised builds run the same instruction budget several times slower.
        Duration::from_secs(2)
    } else {
        Duration::from_millis(100)
    };
    let req = create(&web_pod());
    for (doc, field) in [
        (
            validate_program("loop", RUNAWAY),
            "spec.validateRules[0].program",
        ),
        (
            override_program("loop", RUNAWAY),
            "spec.overrideRules[0].overriders.program",
        ),
    ] {
        let set = set_of(&[doc]);
        let started = Instant::now();
        let d = kanon_engine::block_on(set.review(&req, &NoObjects));
        let took = started.elapsed();
        assert!(took < bound, "the runaway loop took {took:?}");
        assert!(!d.allowed);
        assert_eq!(d.messages.len(), 1);
        assert!(
            d.messages[0].contains(&format!(
                "{field}: line 1: the program ran out of fuel (instruction limit)"
            )),
            "{:?}",
            d.messages
        );
    }
}

#[test]
fn limits_are_evaluation_errors_under_the_failure_policy() {
    let deep_recursion = "{% macro down(n) %}{{ down(n + 1) }}{% endmacro %}{{ down(0) }}";
    let big_output = "{% for i in range(20000) %}0123456789abcdef{% endfor %}";
    // Fuel is charged for the data a program builds too, so doubling a string cannot fill
    // memory.
    let doubling = "{% set s = namespace(text='x') %}{% for i in range(64) %}{% set s.text = s.text ~ s.text %}{% endfor %}{{ s.text | length }}";
    let rows = [
        (RUNAWAY, "the program ran out of fuel"),
        (doubling, "the program ran out of fuel"),
        (
            deep_recursion,
            "the program nests macro calls deeper than the recursion limit",
        ),
        (big_output, "the program's output exceeds 262144 bytes"),
    ];
    let object = web_pod();
    for (program, needle) in rows {
        for kind in ["override", "validate"] {
            let doc = |name: &str, failure_policy: &str| {
                let mut doc = match kind {
                    "override" => override_program(name, program),
                    _ => validate_program(name, program),
                };
                doc["spec"]["failurePolicy"] = json!(failure_policy);
                doc
            };
            // Fail: denied, naming the policy and the limit.
            let d = kanon_engine::block_on(
                set_of(&[doc("limited", "Fail")]).review(&create(&object), &NoObjects),
            );
            assert!(!d.allowed, "{kind} {needle}");
            assert!(
                d.messages.len() == 1
                    && d.messages[0].starts_with("ClusterOverridePolicy/limited: ")
                        != (kind == "validate")
                    && d.messages[0].contains(needle),
                "{kind}: {:?}",
                d.messages
            );
            // Ignore: admitted with a warning, and other policies unaffected.
            let set = set_of(&[
                doc("limited", "Ignore"),
                override_program(
                    "other",
                    "- {op: add, path: /metadata/labels/other, value: 'yes'}",
                ),
            ]);
            let d = kanon_engine::block_on(set.review(&create(&object), &NoObjects));
            assert!(d.allowed, "{kind} {needle}: {d:?}");
            assert!(d.messages.is_empty());
            assert_eq!(d.warnings.len(), 1, "{d:?}");
            assert!(
                d.warnings[0].contains("limited: skipped (failurePolicy Ignore): ")
                    && d.warnings[0].contains(needle),
                "{:?}",
                d.warnings
            );
            assert_eq!(
                d.patched.as_ref().unwrap()["metadata"]["labels"]["other"],
                "yes"
            );
        }
    }
}

#[test]
fn output_just_under_the_limit_is_fine() {
    // 16 bytes × 16,000 = 256,000 bytes of YAML comment, under 262,144.
    let program = "{% for i in range(16000) %}#123456789abcde\n{% endfor %}{\"valid\": true}";
    let d = validate_by(program, &create(&web_pod()), &NoObjects);
    assert!(d.allowed, "{d:?}");
}

#[test]
fn one_policys_program_error_never_changes_another_policys_result() {
    let set: PolicySet = set_of(&[
        validate_program("a-broken", "{{ nope }}"),
        validate_program("b-rejects", "{\"valid\": false, \"reason\": \"b\"}"),
        validate_program("c-passes", "{\"valid\": true, \"warnings\": [\"c\"]}"),
    ]);
    let d = kanon_engine::block_on(set.validate(&create(&web_pod()), None, &NoObjects));
    assert_eq!(d.messages.len(), 2, "{d:?}");
    assert!(d.messages[0].starts_with(
        "ClusterValidatePolicy/a-broken: spec.validateRules[0].program: line 1: undefined value"
    ));
    assert_eq!(d.messages[1], "ClusterValidatePolicy/b-rejects: b");
    assert_eq!(d.warnings, ["ClusterValidatePolicy/c-passes: c"]);
}

/// Every helper the program library registers has a row in the README's helper table, and
/// every name there is registered (the table is what policy authors read).
#[test]
fn the_readme_lists_every_helper() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let library = std::fs::read_to_string(root.join("src/program/library.rs")).unwrap();
    let registered: std::collections::BTreeSet<String> =
        regex::Regex::new(r#"env\.add_(?:function|filter|test)\(\s*"([a-z0-9_]+)""#)
            .unwrap()
            .captures_iter(&library)
            .map(|c| c[1].to_string())
            .collect();
    assert!(registered.len() > 20, "{registered:?}");
    let readme = std::fs::read_to_string(root.join("../../README.md")).unwrap();
    let start = readme
        .find("| helper | does |")
        .expect("README's helper table");
    let table = &readme[start..];
    let table = &table[..table.find("\n\n").unwrap_or(table.len())];
    let name = regex::Regex::new(r"([a-z][a-z0-9_]*)(?:\(|`)").unwrap();
    let listed: std::collections::BTreeSet<String> = table
        .lines()
        .skip(2)
        // A filter's row writes its pipe escaped (`"a/b" \| escape_pointer`).
        .filter_map(|row| {
            row.replace("\\|", "¦")
                .split('|')
                .nth(1)
                .map(str::to_string)
        })
        .flat_map(|cell| {
            cell.split('`')
                .skip(1)
                .step_by(2)
                .filter_map(|code| {
                    let code = code.rsplit('¦').next().unwrap_or(code).trim();
                    name.captures(&format!("{code}`")).map(|c| c[1].to_string())
                })
                .collect::<Vec<_>>()
        })
        .collect();
    let missing: Vec<_> = registered.difference(&listed).collect();
    let unknown: Vec<_> = listed.difference(&registered).collect();
    assert!(
        missing.is_empty(),
        "helpers without a README row: {missing:?}"
    );
    assert!(
        unknown.is_empty(),
        "README rows naming no helper: {unknown:?}"
    );
}

/// The language of placeholder texts: what README says is what the engine allows, and every
/// filter and helper it allows exists (a text naming one compiles).
#[test]
fn readme_names_the_filters_and_helpers_a_text_may_use() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("../../README.md")).unwrap();
    let start = readme
        .find("**Placeholder texts**")
        .expect("README's paragraph on placeholder texts");
    let paragraph = &readme[start..];
    let paragraph = &paragraph[..paragraph.find("\n\n").unwrap_or(paragraph.len())];
    let listed = |after: &str| -> Vec<String> {
        let from = &paragraph[paragraph.find(after).expect(after) + after.len()..];
        let code = from.split('`').nth(1).unwrap_or_default();
        code.split_whitespace().map(str::to_string).collect()
    };
    assert_eq!(listed("with the filters"), kanon_engine::TEXT_FILTERS);
    assert_eq!(listed("and the helpers"), kanon_engine::TEXT_FUNCTIONS);
    use kanon_engine::{Program, ProgramKind, ProgramLimits};
    // Unknown names fail when the text renders, not when it compiles: render each.
    let renders = |text: &str| -> Result<String, String> {
        let program = Program::compile(text, ProgramKind::Message, ProgramLimits::default())
            .map_err(|e| e.message)?;
        program
            .render(&minijinja::context! { data => "1" })
            .map_err(|e| e.message)
    };
    let known = |text: &str| match renders(text) {
        Ok(_) => true,
        Err(e) => !e.contains("unknown filter") && !e.contains("unknown function"),
    };
    for filter in kanon_engine::TEXT_FILTERS {
        assert!(known(&format!("{{{{ data | {filter} }}}}")), "{filter}");
    }
    for function in kanon_engine::TEXT_FUNCTIONS {
        assert!(known(&format!("{{{{ {function}(data) }}}}")), "{function}");
    }
    assert!(renders("{{ data | no_such_filter }}").is_err());
}
