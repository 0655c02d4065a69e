//! The messages below are kube-apiserver 1.35.8's, from dry-run creates of a Pod through a
//! MutatingAdmissionPolicy whose JSON patch wrote the value at the path.

use serde_json::{Value, json};

use super::*;

fn pod() -> Typed<'static> {
    Typed::builtin("v1", "Pod").expect("Pod is built in")
}

fn segments(path: &str) -> Vec<&str> {
    path.trim_start_matches('/').split('/').collect()
}

fn error(path: &str, value: Value) -> Option<String> {
    pod()
        .decode_error_at(&segments(path), &value)
        .map(|decoded| match decoded {
            Decoded::Immediate(message) | Decoded::Saved(message) => message,
        })
}

#[test]
fn an_error_a_type_decodes_itself_with_ends_decoding_and_wins() {
    // kube-apiserver 1.35.8: a label of the wrong type is kept while decoding goes on; the
    // quantity that does not parse ends it and is the answer.
    let decoded = pod().decode_error_at(
        &segments("/spec/containers/0"),
        &json!({"name": "app", "image": 5, "resources": {"limits": {"cpu": "lots"}}}),
    );
    assert!(
        matches!(&decoded, Some(Decoded::Immediate(m)) if m.starts_with("quantities must match")),
        "{decoded:?}"
    );
    let decoded = pod().decode_error_at(&segments("/spec/containers/0/image"), &json!(5));
    assert!(matches!(decoded, Some(Decoded::Saved(_))), "{decoded:?}");
}

#[test]
fn wrong_json_types_are_named_as_gos_decoder_names_them() {
    let cases = [
        (
            "/metadata/labels/b",
            json!(5),
            "json: cannot unmarshal number into Go struct field ObjectMeta.metadata.labels of type string",
        ),
        (
            "/spec/containers/0/image",
            json!({"a": "b"}),
            "json: cannot unmarshal object into Go struct field Container.spec.containers.image of type string",
        ),
        (
            "/spec/containers/0/ports",
            json!("x"),
            "json: cannot unmarshal string into Go struct field Container.spec.containers.ports of type []v1.ContainerPort",
        ),
        (
            "/spec/activeDeadlineSeconds",
            json!("x"),
            "json: cannot unmarshal string into Go struct field PodSpec.spec.activeDeadlineSeconds of type int64",
        ),
        (
            "/spec/containers/0/imagePullPolicy",
            json!(5),
            "json: cannot unmarshal number into Go struct field Container.spec.containers.imagePullPolicy of type v1.PullPolicy",
        ),
        (
            "/spec/containers/0/ports",
            json!([{"containerPort": 1.5}]),
            "json: cannot unmarshal number 1.5 into Go struct field ContainerPort.spec.containers.ports.containerPort of type int32",
        ),
        (
            "/spec/hostNetwork",
            json!("yes"),
            "json: cannot unmarshal string into Go struct field PodSpec.spec.hostNetwork of type bool",
        ),
        (
            "/metadata/uid",
            json!(5),
            "json: cannot unmarshal number into Go struct field ObjectMeta.metadata.uid of type types.UID",
        ),
        (
            "/spec/containers/0/livenessProbe",
            json!({"httpGet": {"port": {"x": 1}}}),
            "json: cannot unmarshal object into Go struct field HTTPGetAction.spec.containers.livenessProbe.ProbeHandler.httpGet.port of type int32",
        ),
        (
            "/spec/containers/0/livenessProbe",
            json!({"httpGet": {"port": 1.5}}),
            "json: cannot unmarshal number 1.5 into Go struct field HTTPGetAction.spec.containers.livenessProbe.ProbeHandler.httpGet.port of type int32",
        ),
        (
            "/metadata/creationTimestamp",
            json!(5),
            "json: cannot unmarshal number into Go struct field ObjectMeta.metadata.creationTimestamp of type string",
        ),
        (
            "/spec/priority",
            json!(9_999_999_999_i64),
            "json: cannot unmarshal number 9999999999 into Go struct field PodSpec.spec.priority of type int32",
        ),
        (
            "/spec/containers",
            json!({"a": 1}),
            "json: cannot unmarshal object into Go struct field PodSpec.spec.containers of type []v1.Container",
        ),
        (
            "/spec",
            json!("x"),
            "json: cannot unmarshal string into Go struct field Pod.spec of type v1.PodSpec",
        ),
        (
            "/metadata/creationTimestamp",
            json!("yesterday"),
            r#"parsing time "yesterday" as "2006-01-02T15:04:05Z07:00": cannot parse "yesterday" as "2006""#,
        ),
        (
            "/spec/containers/0/resources",
            json!({"limits": {"cpu": {"a": 1}}}),
            "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
        ),
        (
            "/spec/containers/0/resources",
            json!({"limits": {"cpu": "lots"}}),
            "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
        ),
    ];
    for (path, value, expected) in cases {
        assert_eq!(
            error(path, value.clone()).as_deref(),
            Some(expected),
            "{path} = {value}"
        );
    }
}

#[test]
fn values_of_the_right_type_decode() {
    let cases = [
        ("/metadata/labels/b", json!("five")),
        (
            "/spec/containers/0/resources",
            json!({"limits": {"cpu": 2, "memory": "1Gi"}}),
        ),
        ("/spec/priority", json!(2.0)),
        ("/spec/containers/0/image", Value::Null),
        (
            "/spec/containers/0/livenessProbe",
            json!({"httpGet": {"port": "http"}}),
        ),
        ("/metadata/creationTimestamp", json!("2024-05-01T10:00:00Z")),
        // Not declared: strict decoding's business, not a type error.
        ("/metadata/colour", json!(5)),
        ("/spec/containers/0/env", json!([])),
    ];
    for (path, value) in cases {
        assert_eq!(error(path, value.clone()), None, "{path} = {value}");
    }
}

fn written_back(path: &str, value: Value) -> Option<Value> {
    let typed = pod();
    let place = typed.place(&segments(path)).expect("a typed place");
    typed.round_trip(&place, &value)
}

#[test]
fn written_back_as_the_apiserver_writes_its_go_type() {
    // Empty omitempty fields are left out: the next mutation cannot add into them.
    assert_eq!(written_back("/spec/containers/0/env", json!([])), None);
    assert_eq!(written_back("/spec/nodeSelector", json!({})), None);
    assert_eq!(written_back("/spec/containers/0/image", Value::Null), None);
    assert_eq!(written_back("/spec/hostNetwork", json!(false)), None);
    // A pointer keeps its zero; a struct is never left out.
    assert_eq!(
        written_back("/spec/activeDeadlineSeconds", json!(0)),
        Some(json!(0))
    );
    assert_eq!(
        written_back("/spec/containers/0/resources", Value::Null),
        Some(json!({}))
    );
    // Not omitempty: null is the zero value, written.
    assert_eq!(
        written_back("/spec/containers/0/name", Value::Null),
        Some(json!(""))
    );
    // Canonical numbers, quantities and times, inside a written object too.
    assert_eq!(written_back("/spec/priority", json!(2.0)), Some(json!(2)));
    assert_eq!(
        written_back(
            "/spec/containers/0",
            json!({"name": "a", "image": "x", "env": [], "resources": {"limits": {"cpu": 2, "memory": "1024Mi"}}})
        ),
        Some(
            json!({"name": "a", "image": "x", "resources": {"limits": {"cpu": "2", "memory": "1Gi"}}})
        )
    );
    assert_eq!(
        written_back(
            "/metadata/creationTimestamp",
            json!("2024-05-01T12:00:00.5+02:00")
        ),
        Some(json!("2024-05-01T10:00:00Z"))
    );
}

#[test]
fn absent_fields_are_written_as_go_writes_a_zero_field() {
    // A container a mutation adds without `resources` gets `resources: {}` (a struct held by
    // value is never left out), so a next mutation can add into it as in the apiserver.
    assert_eq!(
        written_back(
            "/spec/containers/1",
            json!({"name": "side", "image": "busybox"})
        ),
        Some(json!({"name": "side", "image": "busybox", "resources": {}}))
    );
    // A field that is not omitempty is written as its zero value.
    assert_eq!(
        written_back("/spec/containers/1", json!({"image": "busybox"})),
        Some(json!({"name": "", "image": "busybox", "resources": {}}))
    );
    // Nested: a probe's embedded handler adds nothing, its own non-omitempty fields do.
    assert_eq!(
        written_back(
            "/spec/containers/0/livenessProbe",
            json!({"httpGet": {"port": 80}})
        ),
        Some(json!({"httpGet": {"port": 80}}))
    );
    // A written metadata gets the time Go writes as null.
    assert_eq!(
        written_back("/metadata", json!({"name": "web"})),
        Some(json!({"name": "web", "creationTimestamp": null}))
    );
}

#[test]
fn json_numbers_are_written_as_go_writes_them() {
    let text = |value: Value| match value {
        Value::Number(n) => json_number_text(&n),
        _ => unreachable!(),
    };
    assert_eq!(text(json!(2.0)), "2");
    assert_eq!(text(json!(1.5)), "1.5");
    assert_eq!(text(json!(1e21)), "1e+21");
    assert_eq!(text(json!(1e-7)), "1e-7");
    assert_eq!(text(json!(-3)), "-3");
}
