//! Hostile policies: programs that try to exhaust memory or time, and YAML built to blow up
//! the parser. Each ends in a clear error under the policy's failurePolicy (or a clear load
//! error), within its bounds, and leaves other policies working.

mod common;

use std::time::{Duration, Instant};

use common::*;
use kanon_engine::{NoObjects, parse_documents};
use serde_json::{Value, json};

fn pod() -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
           "spec": {"containers": [{"name": "app", "image": "nginx"}]}})
}

/// Evaluates `program` as a validate program (failurePolicy Fail) beside a well-behaved
/// override policy; returns the denial message, after checking the time it took and that the
/// other policy still applied when the hostile one is `Ignore`.
fn hostile(program: &str) -> String {
    let doc = |failure_policy: &str| {
        let mut doc = cvp("hostile", json!({"validateRules": [{"program": program}]}));
        doc["spec"]["failurePolicy"] = json!(failure_policy);
        doc
    };
    let started = Instant::now();
    let d = kanon_engine::block_on(set_of(&[doc("Fail")]).review(&create(&pod()), &NoObjects));
    // Far below a webhook timeout even in a debug build: the bounds end it, not the clock.
    // Ended by the parser's event bound: a few seconds in a debug build, far less in release.
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{program}: {:?}",
        started.elapsed()
    );
    assert!(!d.allowed, "{program}: {d:?}");
    assert_eq!(d.messages.len(), 1, "{d:?}");
    let other = cop(
        "other",
        json!({"overrideRules": [{"overriders": {"plaintext": [
            {"op": "add", "path": "/metadata/labels/other", "value": "yes"}]}}]}),
    );
    let d =
        kanon_engine::block_on(set_of(&[doc("Ignore"), other]).review(&create(&pod()), &NoObjects));
    assert!(d.allowed, "{d:?}");
    assert_eq!(
        d.patched
            .as_ref()
            .map(|p| p["metadata"]["labels"]["other"].clone()),
        Some(json!("yes"))
    );
    d.warnings.join("\n")
}

#[test]
fn programs_that_build_huge_values_end_at_their_bounds() {
    let rows = [
        ("{{ 'x' * 1000000000 }}", "ran out of fuel"),
        ("{{ 'x' * 100000 * 100000 }}", "ran out of fuel"),
        (
            "{% for i in range(10000000000) %}{% endfor %}{\"valid\": true}",
            "range has too many elements",
        ),
        (
            "{{ (range(1000) | list) * 1000000 }}",
            "repeated sequence is too large",
        ),
        (
            "{{ range(100000) | list | tojson }}",
            "output exceeds 262144 bytes",
        ),
        // A list doubled 30 times is 2^30 items long, lazily; its length is free, but it is
        // no verdict.
        (
            "{% set l = namespace(v=[1]) %}{% for i in range(30) %}{% set l.v = l.v + l.v %}{% endfor %}{{ l.v | length }}",
            "renders {valid, reason, warnings}, not a number",
        ),
    ];
    for (program, needle) in rows {
        let text = hostile(program);
        assert!(text.contains(needle), "{program}: {text}");
    }
}

fn yaml_error(text: &str) -> String {
    match parse_documents(text, "policies.yaml", false) {
        Ok(docs) => panic!("parsed {} documents", docs.len()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn yaml_alias_bombs_are_refused_by_name() {
    // Nine levels of ten aliases each: a billion strings once expanded.
    let mut text = String::from("a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    for level in 1..10 {
        let prev = format!("*a{}", level - 1);
        let items = [prev.as_str(); 10].join(", ");
        text.push_str(&format!("a{level}: &a{level} [{items}]\n"));
    }
    let started = Instant::now();
    let error = yaml_error(&text);
    // Ended by the parser's event bound: a few seconds in a debug build, far less in release.
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    assert!(error.starts_with("policies.yaml: invalid YAML"), "{error}");
    assert!(
        error.contains("alias bomb") || error.contains("once its aliases are expanded"),
        "{error}"
    );
}

#[test]
fn deeply_nested_yaml_is_refused_by_name() {
    let text = format!("spec: {}1{}\n", "[".repeat(10_000), "]".repeat(10_000));
    let error = yaml_error(&text);
    assert!(error.contains("nested deeper than 64 levels"), "{error}");
    let text = (0..1000).fold(String::from("x"), |inner, i| {
        format!("k{i}:\n  {}", inner.replace('\n', "\n  "))
    });
    let error = yaml_error(&text);
    assert!(error.contains("nested deeper than 64 levels"), "{error}");
}

#[test]
fn a_file_holds_up_to_ten_thousand_documents() {
    let document = "---\napiVersion: policy.kanon.dev/v1alpha1\nkind: ClusterOverridePolicy\nmetadata: {name: p}\n";
    let docs = parse_documents(&document.repeat(10_000), "policies.yaml", false)
        .map(|d| d.len())
        .map_err(|e| e.to_string());
    assert_eq!(docs, Ok(10_000));
    let error = yaml_error(&document.repeat(10_001));
    assert!(
        error.contains("more than 10000 documents in one file (split it into several files)"),
        "{error}"
    );
}

#[test]
fn ten_thousand_policies_selecting_the_same_kind_all_apply() {
    let docs: Vec<Value> = (0..10_000)
        .map(|i| {
            cop(
                &format!("p{i:05}"),
                json!({"overrideRules": [{"overriders": {"plaintext": [
                    {"op": "add", "path": format!("/metadata/labels/p{i}"), "value": "x"}]}}]}),
            )
        })
        .collect();
    let d = mutate_create(&set_of(&docs), &pod());
    assert!(d.allowed, "{:?}", d.messages);
    assert_eq!(d.patch.len(), 10_000);
}

/// A ClusterValidatePolicy whose condition reads a ConfigMap named by `name`.
fn named_by(name: &str) -> Value {
    cvp(
        "placeholder",
        json!({"validateRules": [{"template": {"type": "condition", "condition": {
            "cond": "Exist",
            "dataRef": {"from": "k8s", "path": "/data/x", "k8s": {
                "apiVersion": "v1", "kind": "ConfigMap", "namespace": "default", "name": name}},
        }}}]}),
    )
}

/// The list-doubling text that took `kanon serve` down (issue 34): 40 doublings of a list.
const LIST_DOUBLING: &str = "{% set l = namespace(v=[1]) %}{% for i in range(40) %}{% set l.v = l.v + l.v %}{% endfor %}{{ l.v | length }}";

#[test]
fn placeholders_cannot_grow_a_list_without_bound() {
    // A lazily repeated list concatenated 33 levels deep would be copied into one list of
    // 10^10 items, in the evaluating thread: refused when the policy compiles.
    let mut expression = "range(100000) | list".to_string();
    for _ in 0..33 {
        expression = format!("({expression} + [1])");
    }
    let errors = compile_errors(&named_by(&format!("{{{{ {expression} | length }}}}")));
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(
        errors[0].field,
        "spec.validateRules[0].template.condition.dataRef.k8s.name"
    );
    // The first refusal found is the function that builds a list from nothing.
    assert!(
        errors[0]
            .message
            .contains("the function `range` is not allowed"),
        "{}",
        errors[0].message
    );
    let errors = compile_errors(&named_by(&format!(
        "{{{{ {} }}}}",
        vec!["data"; 34].join(" + ")
    )));
    assert!(
        errors[0]
            .message
            .contains("the placeholders hold 33 `+` operators; the limit is 16"),
        "{}",
        errors[0].message
    );
    // Statements and repetition are for programs.
    for text in [LIST_DOUBLING, "{{ [object] * 1000 }}"] {
        let errors = compile_errors(&named_by(text));
        assert!(
            errors[0]
                .message
                .contains("statements (`{% ... %}`) are not allowed")
                || errors[0].message.contains("`*` is not allowed"),
            "{text}: {}",
            errors[0].message
        );
    }
    // Operators inside strings do not count, and 16 are allowed.
    let sixteen = vec!["1"; 17].join(" + ");
    assert!(
        kanon_engine::compile_document(&named_by(&format!("{{{{ 'a+b*c+d' ~ ({sixteen}) }}}}")))
            .is_ok()
    );
}

/// A condition whose `message` is `message`, denying every Pod.
fn denied_with(message: &str) -> Value {
    cvp(
        "message",
        json!({"validateRules": [{"template": {"type": "condition", "condition": {
            "cond": "Exist", "dataRef": {"from": "current", "path": "/metadata/name"},
            "message": message,
        }}}]}),
    )
}

#[test]
fn messages_hold_no_statements() {
    // The text that aborted `kanon serve`, `kanon apply` and `kanon test` (issue 34) is refused
    // when the policy is written, with the field it is in.
    let errors = compile_errors(&denied_with(LIST_DOUBLING));
    assert_error(
        &errors,
        "spec.validateRules[0].template.condition.message",
        "line 1: statements (`{% ... %}`) are not allowed",
    );
    for (text, said) in [
        ("{{ [object] * 1000 }}", "`*` is not allowed"),
        (
            "{{ object | batch(100000, fill_with=object) }}",
            "the filter `batch`",
        ),
        ("{{ range(100000) | join }}", "the function `range`"),
    ] {
        assert_error(
            &compile_errors(&denied_with(text)),
            "spec.validateRules[0].template.condition.message",
            said,
        );
    }
}

/// A Pod with an annotation of `bytes` bytes.
fn pod_with_annotation(bytes: usize) -> Value {
    let mut pod = pod();
    pod["metadata"]["annotations"] = json!({"big": "x".repeat(bytes)});
    pod
}

/// A list that names the object `copies` times, printed as JSON: some kilobytes of text that,
/// for a Pod of 300 KB, would turn into `copies` × 300 KB in one step of the runtime.
fn copies_of_the_object(copies: usize) -> String {
    let list = vec!["object"; copies].join(", ");
    format!("{{{{ [{list}] | tojson | length }}}}")
}

#[test]
fn a_message_that_reads_too_much_falls_back_within_its_bound() {
    // 5,000 copies of 300 KB would be 1.5 GB: the read budget ends the rendering at the fourth,
    // and the denial stands with the rule's own reason and a warning naming the bound.
    let pod = pod_with_annotation(300_000);
    let set = set_of(&[denied_with(&copies_of_the_object(5_000))]);
    let started = Instant::now();
    let d = kanon_engine::block_on(set.review(&create(&pod), &NoObjects));
    assert!(started.elapsed() < Duration::from_secs(20));
    assert!(!d.allowed, "{:?}", d.warnings);
    assert!(
        d.messages[0].contains("(its message could not be rendered)"),
        "{:?}",
        d.messages
    );
    assert!(
        d.warnings
            .iter()
            .any(|w| w.contains("the text reads more than 1024 KiB of the request's values")),
        "{:?}",
        d.warnings
    );
    // Three copies fit the budget: the message is the length of their JSON.
    let d = kanon_engine::block_on(
        set_of(&[denied_with(&copies_of_the_object(3))]).review(&create(&pod), &NoObjects),
    );
    let length: usize = d.messages[0]
        .rsplit(": ")
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_default();
    assert!((900_000..1_000_000).contains(&length), "{:?}", d.messages);
}

#[test]
fn a_reference_that_reads_too_much_fails_its_policy_within_its_bound() {
    let pod = pod_with_annotation(300_000);
    for failure_policy in ["Fail", "Ignore"] {
        let mut doc = named_by(&copies_of_the_object(5_000));
        doc["spec"]["failurePolicy"] = json!(failure_policy);
        let started = Instant::now();
        let d = kanon_engine::block_on(set_of(&[doc]).review(&create(&pod), &NoObjects));
        assert!(started.elapsed() < Duration::from_secs(20));
        let said = if failure_policy == "Fail" {
            assert!(!d.allowed, "{:?}", d.warnings);
            d.messages.join("\n")
        } else {
            assert!(d.allowed, "{:?}", d.messages);
            d.warnings.join("\n")
        };
        assert!(
            said.contains("spec.validateRules[0].template.condition.dataRef.k8s.name")
                && said.contains("the text reads more than 1024 KiB of the request's values"),
            "{failure_policy}: {said}"
        );
    }
}
