//! Inputs found by fuzzing (fuzz/, `scripts/fuzz.sh`) or while writing the fuzz targets, each
//! fed exactly as found: the engine must answer them with a decision or a typed error, never
//! a panic.

mod common;

use common::*;
use std::time::{Duration, Instant};

use kanon_engine::NoObjects;
use kanon_engine::{Decimal, Quantity};
use serde_json::json;

/// An Audit rejection by a policy whose name holds multi-byte characters: the audit
/// annotation key is cut at 63 bytes, which fell inside a character (a panic in
/// `String::truncate`). Kubernetes names are ASCII, but policy files in standalone mode and
/// `kanon apply` take any name.
#[test]
fn audit_key_of_a_policy_with_a_multibyte_name_is_cut_at_a_character() {
    let name = "é".repeat(40);
    let policy = cvp(
        &name,
        json!({
            "validationActions": ["Audit"],
            "validateRules": [{"program": "{\"valid\": false, \"reason\": \"audited\"}"}],
        }),
    );
    let d = kanon_engine::block_on(set_of(&[policy]).validate(
        &create(&pod("default", "web", json!({}))),
        None,
        &NoObjects,
    ));
    assert!(d.allowed, "{d:?}");
    let (key, reason) = d
        .audit_annotations
        .iter()
        .next()
        .unwrap_or_else(|| panic!("an audit annotation: {d:?}"));
    assert!(key.len() <= 63, "{key}");
    assert!(key.starts_with("clustervalidatepolicy"), "{key}");
    assert_eq!(reason, "audited");
}

/// fuzz target `pointer_path_quantity_selector` (quantities): the canonical form of a
/// quantity did not read back. `-700000000000000000.5` is written as
/// `-700000000000000000500m`, whose 21 integer digits `Decimal::parse` refused (it took at
/// most 20, while a quantity's canonical form may have 31).
#[test]
fn a_quantitys_canonical_form_reads_back() {
    for text in [
        "-700000000000000000.5",
        "1000000000000000000000",
        "999999999999999999999.999999999",
        "-999999999999999999999999999999n",
    ] {
        let q: Quantity = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
        let written = q.to_string();
        let again: Quantity = written
            .parse()
            .unwrap_or_else(|e| panic!("{text} written as {written}: {e}"));
        assert_eq!(again, q, "{text} written as {written}");
    }
    assert_eq!(
        "-700000000000000000.5"
            .parse::<Quantity>()
            .map(|q| q.to_string()),
        Ok("-700000000000000000500m".to_string())
    );
    // Still refused: more than a quantity can be, and more digits than an i128 holds.
    assert!("1000000000000000000001".parse::<Quantity>().is_err());
    assert!(Decimal::parse(&"9".repeat(40)).is_none());
}

/// Found while writing the quantity target: a quantity scaled past the largest quantity was
/// kept, and rounding it up to a unit then overflowed `i128` (a panic with overflow checks, a
/// negative request without). `oversold` in a program reaches it with any factor.
#[test]
fn scaling_past_the_largest_quantity_is_an_overflow_error() {
    // limit × factor is within 10^9 of i128::MAX and not a whole unit.
    let limit = "170141194179364465.031648600709k";
    let q: Quantity = limit.parse().unwrap_or_else(|e| panic!("{e}"));
    let factor = Decimal::parse("999999937").unwrap_or_else(|| panic!("a decimal"));
    assert!(q.scaled(factor).is_none());
    let program = format!(
        "{{{{ {{\"patches\": [{{\"op\": \"add\", \"path\": \"/spec/containers/0/resources\", \
         \"value\": oversold({{\"limits\": {{\"memory\": \"{limit}\"}}}}, {{\"memory\": \"999999937\"}}, \"add\")}}]}} | tojson }}}}"
    );
    let policy = cop(
        "oversold",
        json!({"overrideRules": [{"overriders": {"program": program}}]}),
    );
    let d = mutate_create(&set_of(&[policy]), &pod("default", "web", json!({})));
    assert!(!d.allowed, "{d:?}");
    assert!(
        d.messages
            .iter()
            .any(|m| m.contains("limits.memory: overflow")),
        "{d:?}"
    );
}

/// fuzz target `pointer_path_quantity_selector` (JSONPaths), a timeout: the JSONPath parser
/// backtracks through nested filters that never close in time exponential in their depth;
/// this 546-byte path took over 10 s (AddressSanitizer build) and each further level about
/// twice as long. A policy's `dataRef` path is parsed when the policy is compiled, on the
/// validating webhook's check of a policy object, and a program's `jsonpath()` path at
/// request time. Paths nested deeper than 8 are now refused before parsing.
const NESTED_UNCLOSED_FILTERS: &str = "$.spec.co..ainers[?(@.ntainers[?(@.name == 'app')].spec.containerpec.contantainers[?valu\
     e(@.ntainerontainers[?value(@.containeriners[?value(@.ntainerontainers[?value(@.containe\
     rs[?value(@.ntainerontainers[?value(@.ntaers[?(@.ntainers[?(@.name == 'axp')].spec.conon\
     tainers[?value(@.ntannnnnnnnnPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPtantainers[?value(@.ntaine\
     rontainers[?value(@.containeriners[?value(@.ntainerontainers[?value(@.containers[?value(\
     @.ntainerontainers[?value(@.ntaers[?(@.ntainers[?(@.na?(@.\u{2}0.90071e == 'a71992Mi\n0.\
     39007n%ame == 'app0')]8";

#[test]
fn a_jsonpath_of_deeply_nested_unclosed_filters_is_refused_at_once() {
    use kanon_engine::parse_jsonpath;
    let started = Instant::now();
    let error = parse_jsonpath(NESTED_UNCLOSED_FILTERS)
        .err()
        .unwrap_or_else(|| panic!("refused"));
    assert!(
        error.contains("nest") && error.contains("the limit is 8"),
        "{error}"
    );
    // Eleven levels of filters that do not close, just past the old timeout.
    let eleven = format!("$.a{}", "[?value(@.b".repeat(6));
    assert!(parse_jsonpath(&eleven).is_err());
    assert!(parse_jsonpath(&format!("$.{}", "a".repeat(1025))).is_err());
    // Paths people write still parse, filters in filters included.
    for path in [
        "$.spec.containers[*].image",
        "$.spec.containers[?(@.name == 'app')].resources.limits",
        "$..[?(@.ports[?(@.port == 80)])].name",
        "$['metadata']['labels']['app.kubernetes.io/name']",
    ] {
        assert!(parse_jsonpath(path).is_ok(), "{path}");
    }
    // A policy with that path is invalid, with the reason at the path's field.
    let policy = cvp(
        "nested",
        json!({"validateRules": [{"template": {"type": "condition", "condition": {
            "cond": "Exist",
            "dataRef": {"from": "current", "path": NESTED_UNCLOSED_FILTERS},
        }}}]}),
    );
    let errors = compile_errors(&policy);
    assert!(
        errors
            .iter()
            .any(|e| e.field.ends_with("dataRef.path") && e.message.contains("nest")),
        "{errors:#?}"
    );
    // A program calling jsonpath() with it fails under its failure policy.
    let program = cop(
        "nested",
        json!({"overrideRules": [{"overriders": {
            "program": "{{ jsonpath(object, object.metadata.annotations.path) | tojson }}",
        }}]}),
    );
    let mut object = pod("default", "web", json!({}));
    object["metadata"]["annotations"] = json!({"path": NESTED_UNCLOSED_FILTERS});
    let d = mutate_create(&set_of(&[program]), &object);
    assert!(!d.allowed, "{d:?}");
    assert!(d.messages.iter().any(|m| m.contains("nest")), "{d:?}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}
