//! The program source itself fuzzed: compiled and run directly (`Program` with small limits,
//! its output read as operations or a verdict, operations applied), then as the program of an
//! override or validate policy evaluated on a Pod. The first byte chooses the program's kind.

#![no_main]

use std::sync::{Arc, LazyLock};

use kanon_api::Operation;
use kanon_engine::internals::{json_value, patch_from_output, verdict_from_output};
use kanon_engine::{ObjectStore, PolicySet, Request, block_on, compile_document};
use kanon_engine::{Program, ProgramKind, ProgramLimits};
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

static LOOKUP: LazyLock<ObjectStore> = LazyLock::new(kanon_fuzz::context_lookup);
static REQUEST: LazyLock<Request> = LazyLock::new(|| {
    Request::from_objects(
        Operation::Update,
        Some(kanon_fuzz::web_pod()),
        Some(kanon_fuzz::web_pod()),
    )
    .expect("the example Pod makes a request")
});
static CONTEXT: LazyLock<Value> = LazyLock::new(|| {
    json!({
        "object": kanon_fuzz::web_pod(),
        "oldObject": kanon_fuzz::web_pod(),
        "operation": "UPDATE",
        "request": {"operation": "UPDATE", "userInfo": {"username": "fuzz"}},
        "namespaceObject": kanon_fuzz::shop_namespace(),
        "refs": {"owner": kanon_fuzz::api_deployment()},
    })
});

/// Small limits, so that a runaway program costs little here; the policy path below uses the
/// defaults.
const LIMITS: ProgramLimits = ProgramLimits {
    fuel: 50_000,
    recursion: 32,
    output_bytes: 64 * 1024,
    source_bytes: 16 * 1024,
};

fuzz_target!(|data: &[u8]| {
    let Some((&choice, source)) = data.split_first() else {
        return;
    };
    let Ok(source) = std::str::from_utf8(source) else {
        return;
    };
    let kind = match choice % 4 {
        0 => ProgramKind::Override,
        1 => ProgramKind::Validate,
        2 => ProgramKind::Message,
        _ => ProgramKind::Reference,
    };
    if let Ok(program) = Program::compile(source, kind, LIMITS) {
        let context = json_value(Arc::new(CONTEXT.clone()));
        let _ = program.render(&context);
        // A message whose strict rendering fails is rendered again with absent values shown.
        let _ = program.render_leniently(&context, "<absent>");
        match program.run(&context) {
            _ if kind.is_text() => {}
            Ok(output) if kind == ProgramKind::Override => {
                if let Ok(patch) = patch_from_output(output) {
                    let mut object = kanon_fuzz::web_pod();
                    let _ = kanon_engine::internals::apply_plaintext(&mut object, &patch.0);
                }
            }
            Ok(output) => {
                let _ = verdict_from_output(output);
            }
            Err(e) => {
                let _ = e.to_string();
            }
        }
    }
    // As a policy's program: compiled by the policy compiler, run in the engine's context.
    let api = kanon_api::API_VERSION;
    let document = match kind {
        ProgramKind::Override => json!({
            "apiVersion": api, "kind": "ClusterOverridePolicy", "metadata": {"name": "fuzz"},
            "spec": {"overrideRules": [{"overriders": {"program": source}}]},
        }),
        ProgramKind::Validate => json!({
            "apiVersion": api, "kind": "ClusterValidatePolicy", "metadata": {"name": "fuzz"},
            "spec": {
                "validationActions": ["Deny", "Audit"],
                "validateRules": [{"program": source}],
            },
        }),
        // A condition that denies, so its message is rendered.
        ProgramKind::Message => json!({
            "apiVersion": api, "kind": "ClusterValidatePolicy", "metadata": {"name": "fuzz"},
            "spec": {
                "validationActions": ["Deny", "Warn"],
                "validateRules": [{"template": {"type": "condition", "condition": {
                    "cond": "Exist", "dataRef": {"from": "current", "path": "$.spec.containers[*].image"},
                    "message": source,
                }}}],
            },
        }),
        // A reference whose object's name is the text, rendered on every request.
        ProgramKind::Reference => json!({
            "apiVersion": api, "kind": "ClusterValidatePolicy", "metadata": {"name": "fuzz"},
            "spec": {
                "validateRules": [{"template": {"type": "condition", "condition": {
                    "cond": "Exist", "dataRef": {"from": "k8s", "path": "/data", "k8s": {
                        "apiVersion": "v1", "kind": "ConfigMap", "namespace": "default",
                        "name": source}},
                }}}],
            },
        }),
    };
    let Ok(policy) = compile_document(&document) else {
        return;
    };
    let Ok(set) = PolicySet::build(vec![policy]) else {
        return;
    };
    let _ = block_on(set.review(&REQUEST, &*LOOKUP));
});
