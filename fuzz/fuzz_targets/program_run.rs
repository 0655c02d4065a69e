//! An arbitrary object run through fixed compiled policies: the example and hand-written
//! policies with their resource selectors removed, so each applies to every object (templates
//! of every type, conditions, programs, plaintext, references). The first byte chooses the
//! operation and, optionally, a type and namespace forced onto the object; the rest is the
//! object as JSON.

#![no_main]

use std::sync::LazyLock;

use kanon_api::Operation;
use kanon_engine::{ObjectStore, PolicySet, Request, block_on};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

static POLICIES: LazyLock<PolicySet> = LazyLock::new(kanon_fuzz::unselective_policy_set);
static LOOKUP: LazyLock<ObjectStore> = LazyLock::new(kanon_fuzz::context_lookup);

fuzz_target!(|data: &[u8]| {
    let Some((&choice, json)) = data.split_first() else {
        return;
    };
    let Ok(mut object) = serde_json::from_slice::<Value>(json) else {
        return;
    };
    // bits 0-1: the operation; bit 2: force a type (bits 3-5), bit 6: force a namespace (bit 7
    // and bit 3).
    let operation = [
        Operation::Create,
        Operation::Update,
        Operation::Delete,
        Operation::Connect,
    ][usize::from(choice & 3)];
    if let Some(map) = object.as_object_mut() {
        if choice & 4 != 0 {
            let (api_version, kind) = kanon_fuzz::TYPES[usize::from((choice >> 3) & 7)];
            map.insert("apiVersion".into(), api_version.into());
            map.insert("kind".into(), kind.into());
        }
        if choice & 64 != 0 {
            let namespace =
                kanon_fuzz::NAMESPACES[usize::from(((choice >> 6) & 2) | ((choice >> 3) & 1))];
            if let Some(metadata) = map
                .entry("metadata")
                .or_insert_with(|| Value::Object(Default::default()))
                .as_object_mut()
            {
                metadata.insert("namespace".into(), namespace.into());
            }
        }
    }
    // UPDATE's old object: the example Pod, so that programs comparing old and new see both.
    let old = matches!(operation, Operation::Update | Operation::Delete).then(kanon_fuzz::web_pod);
    let Ok(request) = Request::from_objects(operation, Some(object), old) else {
        return;
    };
    let policies = &*POLICIES;
    let lookup = &*LOOKUP;
    let decision = block_on(policies.mutate(&request, lookup));
    // The patch is the difference from the object to the final object.
    if let (Some(original), Some(patched)) = (request.object.as_ref(), decision.patched.as_ref())
        && decision.allowed
        && request.operation != Operation::Delete
    {
        let mut replayed = original.clone();
        json_patch::patch(&mut replayed, &decision.patch).expect("the patch applies");
        assert_eq!(&replayed, patched, "the patch gives the final object");
    }
    let _ = block_on(policies.validate(&request, decision.patched.as_ref(), lookup));
    let _ = block_on(policies.review(&request, lookup));
});
