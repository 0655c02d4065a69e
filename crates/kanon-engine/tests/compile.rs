//! Decoding and compiling policy documents: strictness, kinitiras leftovers, type errors with
//! their paths, unsupported overriders, rules without overriders, metadata, validation actions,
//! and the YAML route.

mod common;

use common::*;
use kanon_api::{FailurePolicy, PolicyKind};
use kanon_engine::{
    FieldError, InvalidPolicy, PolicyObject, compile, compile_document, parse_documents,
    policy_kind_of,
};
use serde_json::{Value, json};

fn add_rule() -> Value {
    plaintext_rule(json!([{"op": "add", "path": "/a", "value": 1}]))
}

/// The errors of a document that fails to decode or compile.
fn errors_of(doc: &Value) -> Vec<FieldError> {
    match compile_document(doc) {
        Ok(p) => panic!("{} should be invalid", p.id),
        Err(e) => {
            assert!(!e.errors.is_empty());
            e.errors
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Valid documents
// ---------------------------------------------------------------------------------------------

#[test]
fn valid_policies_of_every_kind_compile() {
    let p = compiled(&cop("c", json!({"overrideRules": [add_rule()]})));
    assert_eq!(p.id.to_string(), "ClusterOverridePolicy/c");
    assert_eq!(p.id.kind, PolicyKind::ClusterOverridePolicy);
    assert_eq!(p.id.namespace, None);
    assert_eq!(p.failure_policy, FailurePolicy::Fail, "Fail is the default");
    assert!(p.defect.is_none());

    let p = compiled(&op(
        "ns",
        "o",
        json!({"failurePolicy": "Ignore", "overrideRules": [add_rule()]}),
    ));
    assert_eq!(p.id.to_string(), "OverridePolicy/ns/o");
    assert_eq!(p.id.namespace.as_deref(), Some("ns"));
    assert_eq!(p.failure_policy, FailurePolicy::Ignore);

    // A policy as read back from the cluster: server-set metadata and a status.
    let from_cluster = json!({
        "apiVersion": API,
        "kind": "ClusterOverridePolicy",
        "metadata": {
            "name": "x", "uid": "0b6c6c1e", "resourceVersion": "12", "generation": 2,
            "creationTimestamp": "2024-01-01T00:00:00Z",
            "labels": {"team": "a"},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"},
            "managedFields": [{"manager": "kubectl", "operation": "Apply", "apiVersion": API,
                               "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}],
        },
        "spec": {"overrideRules": [add_rule()]},
        "status": {"observedGeneration": 2, "conditions": [{
            "type": "Ready", "status": "True", "reason": "Compiled", "message": "",
            "lastTransitionTime": "2024-01-01T00:00:00Z",
        }]},
    });
    assert_eq!(
        compiled(&from_cluster).id.to_string(),
        "ClusterOverridePolicy/x"
    );

    // A cluster-scoped policy's stray namespace is not part of its identity.
    let mut c = cop("c", json!({"overrideRules": [add_rule()]}));
    c["metadata"]["namespace"] = json!("ignored");
    assert_eq!(compiled(&c).id.to_string(), "ClusterOverridePolicy/c");
}

#[test]
fn policy_kind_of_documents() {
    let rows = [
        (
            json!({"apiVersion": API, "kind": "ClusterOverridePolicy"}),
            Some(PolicyKind::ClusterOverridePolicy),
        ),
        (
            json!({"apiVersion": API, "kind": "OverridePolicy"}),
            Some(PolicyKind::OverridePolicy),
        ),
        (
            json!({"apiVersion": API, "kind": "ClusterValidatePolicy"}),
            Some(PolicyKind::ClusterValidatePolicy),
        ),
        (
            json!({"apiVersion": API, "kind": "ValidatePolicy"}),
            Some(PolicyKind::ValidatePolicy),
        ),
        (json!({"apiVersion": API, "kind": "overridePolicy"}), None),
        (
            json!({"apiVersion": "policy.kanon.dev/v1", "kind": "OverridePolicy"}),
            None,
        ),
        (
            json!({"apiVersion": "policy.karmada.io/v1alpha1", "kind": "OverridePolicy"}),
            None,
        ),
        (json!({"apiVersion": "v1", "kind": "Pod"}), None),
        (json!({"kind": "OverridePolicy"}), None),
        (json!({"apiVersion": API}), None),
    ];
    for (doc, want) in rows {
        assert_eq!(policy_kind_of(&doc), want, "{doc}");
    }
    let mut not_ours = cop("x", json!({"overrideRules": [add_rule()]}));
    not_ours["apiVersion"] = json!("policy.kanon.dev/v1");
    assert_error(&errors_of(&not_ours), "kind", "not a kanon policy");
}

// ---------------------------------------------------------------------------------------------
// Strict decoding
// ---------------------------------------------------------------------------------------------

#[test]
fn unknown_fields_are_reported_by_path() {
    let rows: Vec<(Value, Vec<&str>)> = vec![
        (
            cop("x", json!({"overrideRules": [add_rule()], "bogus": 1})),
            vec!["spec.bogus"],
        ),
        (
            cop(
                "x",
                json!({"overrideRules": [{"overriders": {"plaintext": [], "foo": 1}}]}),
            ),
            vec!["spec.overrideRules[0].overriders.foo"],
        ),
        (
            cop(
                "x",
                json!({"overrideRules": [add_rule(), {"overriders": {"plaintext": [{"op": "remove", "path": "/a", "valeu": 1}]}}]}),
            ),
            vec!["spec.overrideRules[1].overriders.plaintext[0].valeu"],
        ),
        (
            cop(
                "x",
                json!({"resourceSelectors": [{"apiVersion": "v1", "kind": "Pod", "labelSelectors": {}}], "overrideRules": [add_rule()]}),
            ),
            vec!["spec.resourceSelectors[0].labelSelectors"],
        ),
        (
            cop(
                "x",
                json!({"resourceSelectors": [{"apiVersion": "v1", "kind": "Pod",
                                                   "labelSelector": {"matchLabel": {"a": "b"}}}],
                            "overrideRules": [add_rule()]}),
            ),
            vec!["spec.resourceSelectors[0].labelSelector.matchLabel"],
        ),
        (
            cop(
                "x",
                json!({"resourceSelectors": [{"apiVersion": "v1", "kind": "Pod",
                                                   "fieldSelector": {"matchExpressions": [{"field": "/a", "operator": "Exists", "vals": []}]}}],
                            "overrideRules": [add_rule()]}),
            ),
            vec!["spec.resourceSelectors[0].fieldSelector.matchExpressions[0].vals"],
        ),
        (
            cop(
                "x",
                json!({"overrideRules": [{"targetOperation": ["CREATE"], "overriders": {"plaintext": []}}]}),
            ),
            vec!["spec.overrideRules[0].targetOperation"],
        ),
        (
            json!({"apiVersion": API, "kind": "ClusterOverridePolicy", "metadata": {"name": "x", "nmae": "y"},
                   "spec": {"overrideRules": [add_rule()]}, "extra": true}),
            vec!["metadata.nmae", "extra"],
        ),
        (
            cvp(
                "x",
                json!({"validateRules": [{"program": "x", "message": "m"}]}),
            ),
            vec!["spec.validateRules[0].message"],
        ),
        (
            cop(
                "x",
                json!({"namespaceSelector": {}, "overrideRules": [add_rule()], "validationActions": ["Deny"]}),
            ),
            vec!["spec.validationActions"],
        ),
        // Namespaced override policies have no namespaceSelector.
        (
            op(
                "ns",
                "x",
                json!({"namespaceSelector": {}, "overrideRules": [add_rule()]}),
            ),
            vec!["spec.namespaceSelector"],
        ),
        (
            vp(
                "ns",
                "x",
                json!({"namespaceSelector": {}, "validateRules": [{"program": "x"}]}),
            ),
            vec!["spec.namespaceSelector"],
        ),
        (
            cop("x", json!({"overrideRules": [add_rule()], "a": 1, "b": 2})),
            vec!["spec.a", "spec.b"],
        ),
    ];
    for (doc, fields) in rows {
        let errors = errors_of(&doc);
        for field in &fields {
            assert_error(&errors, field, "unknown field");
        }
        // Other problems of the same policy are listed too; the unknown fields are exactly these.
        let unknown = errors
            .iter()
            .filter(|e| e.message.starts_with("unknown field"))
            .count();
        assert_eq!(unknown, fields.len(), "{errors:#?}");
    }
}

#[test]
fn kinitiras_cue_is_rejected_naming_program() {
    let rows: Vec<(Value, Vec<&str>)> = vec![
        (
            cop(
                "x",
                json!({"overrideRules": [{"overriders": {"cue": "object: {}"}}]}),
            ),
            vec!["spec.overrideRules[0].overriders.cue"],
        ),
        (
            cop(
                "x",
                json!({"overrideRules": [add_rule(), {"overriders": {"renderedCue": "x", "plaintext": []}}]}),
            ),
            vec!["spec.overrideRules[1].overriders.renderedCue"],
        ),
        (
            op(
                "ns",
                "x",
                json!({"overrideRules": [{"overriders": {"cue": "a", "renderedCue": "b"}}]}),
            ),
            vec![
                "spec.overrideRules[0].overriders.cue",
                "spec.overrideRules[0].overriders.renderedCue",
            ],
        ),
        (
            cvp("x", json!({"validateRules": [{"cue": "x"}]})),
            vec!["spec.validateRules[0].cue"],
        ),
        (
            vp(
                "ns",
                "x",
                json!({"validateRules": [{"program": "x"}, {"renderedCue": "y"}]}),
            ),
            vec!["spec.validateRules[1].renderedCue"],
        ),
    ];
    for (doc, fields) in rows {
        let errors = errors_of(&doc);
        for field in &fields {
            assert_error(&errors, field, "`program`");
            assert_error(&errors, field, "CUE");
        }
        // Reported once each (not also as unknown fields).
        let cue = errors.iter().filter(|e| e.field.ends_with("ue")).count();
        assert_eq!(cue, fields.len(), "{errors:#?}");
        assert!(
            !errors
                .iter()
                .any(|e| e.message.starts_with("unknown field")),
            "{errors:#?}"
        );
        // The decode step itself rejects it.
        assert!(PolicyObject::decode(&doc).is_err());
    }
}

#[test]
fn unknown_fields_and_compile_errors_are_listed_together() {
    let doc = cop(
        "x",
        json!({"overrideRules": [{"overriders": {"plaintext": [{"op": "add", "path": "a.b", "value": 1}]}, "targetOperation": ["CREATE"]}]}),
    );
    let errors = errors_of(&doc);
    assert_error(
        &errors,
        "spec.overrideRules[0].targetOperation",
        "unknown field",
    );
    assert_error(
        &errors,
        "spec.overrideRules[0].overriders.plaintext[0].path",
        "not a JSON pointer",
    );
    assert_eq!(errors.len(), 2, "{errors:#?}");
}

#[test]
fn type_errors_are_reported_with_their_path() {
    let rows: Vec<(Value, &str, &str)> = vec![
        (
            cop(
                "x",
                json!({"failurePolicy": "Sometimes", "overrideRules": [add_rule()]}),
            ),
            "spec.failurePolicy",
            "Sometimes",
        ),
        (
            cop(
                "x",
                json!({"overrideRules": [{"targetOperations": ["create"], "overriders": {"plaintext": []}}]}),
            ),
            "spec.overrideRules[0].targetOperations[0]",
            "`create`",
        ),
        (
            cop(
                "x",
                json!({"overrideRules": [add_rule(), {"targetOperations": "CREATE", "overriders": {}}]}),
            ),
            "spec.overrideRules[1].targetOperations",
            "must be a list",
        ),
        (
            cop(
                "x",
                json!({"overrideRules": [{"overriders": {"plaintext": [{"op": "patch", "path": "/a"}]}}]}),
            ),
            "spec.overrideRules[0].overriders.plaintext[0].op",
            "`patch`",
        ),
        (
            cop(
                "x",
                json!({"overrideRules": [{"overriders": {"plaintext": [{"op": "add", "path": 3, "value": 1}]}}]}),
            ),
            "spec.overrideRules[0].overriders.plaintext[0].path",
            "must be a string, not an integer (3)",
        ),
        (
            cop("x", json!({"overrideRules": "none"})),
            "spec.overrideRules",
            "must be a list",
        ),
        (cop("x", json!({})), "spec.overrideRules", "is required"),
        (cvp("x", json!({})), "spec.validateRules", "is required"),
        (
            cop(
                "x",
                json!({"resourceSelectors": [{"kind": "Pod"}], "overrideRules": [add_rule()]}),
            ),
            "spec.resourceSelectors[0].apiVersion",
            "is required",
        ),
        (
            cop(
                "x",
                json!({"resourceSelectors": [{"apiVersion": "v1", "kind": "Pod",
                                                   "labelSelector": {"matchLabels": {"a": 1}}}],
                            "overrideRules": [add_rule()]}),
            ),
            "spec.resourceSelectors[0].labelSelector.matchLabels.a",
            "must be a string",
        ),
        (
            cop(
                "x",
                json!({"resourceSelectors": [{"apiVersion": "v1", "kind": "Pod",
                                                   "fieldSelector": {"matchFields": {"/spec/replicas": 3}}}],
                            "overrideRules": [add_rule()]}),
            ),
            "spec.resourceSelectors[0].fieldSelector.matchFields./spec/replicas",
            "must be a string",
        ),
        (
            cop(
                "x",
                json!({"overrideRules": [{"overriders": {"template": {"type": "labelz", "operation": "add"}}}]}),
            ),
            "spec.overrideRules[0].overriders.template.type",
            "`labelz`",
        ),
        (
            cvp(
                "x",
                json!({"validationActions": ["Block"], "validateRules": []}),
            ),
            "spec.validationActions[0]",
            "`Block`",
        ),
        (
            json!({"apiVersion": API, "kind": "ClusterOverridePolicy", "metadata": {"name": 7}, "spec": {"overrideRules": []}}),
            "metadata.name",
            "must be a string",
        ),
    ];
    for (doc, field, needle) in rows {
        let errors = errors_of(&doc);
        assert_error(&errors, field, needle);
    }
}

#[test]
fn missing_metadata_spec_name_and_namespace() {
    // No metadata or spec at all: a decode error naming the missing field.
    let no_metadata = json!({"apiVersion": API, "kind": "ClusterOverridePolicy", "spec": {"overrideRules": [add_rule()]}});
    assert_error(&errors_of(&no_metadata), "metadata", "is required");
    let no_spec =
        json!({"apiVersion": API, "kind": "ClusterOverridePolicy", "metadata": {"name": "x"}});
    assert_error(&errors_of(&no_spec), "spec", "is required");

    let no_name = json!({"apiVersion": API, "kind": "ClusterOverridePolicy", "metadata": {}, "spec": {"overrideRules": [add_rule()]}});
    assert_error(&errors_of(&no_name), "metadata.name", "is required");

    for kind in ["OverridePolicy", "ValidatePolicy"] {
        let spec = if kind == "OverridePolicy" {
            json!({"overrideRules": [add_rule()]})
        } else {
            json!({"validateRules": []})
        };
        for metadata in [json!({"name": "x"}), json!({"name": "x", "namespace": ""})] {
            let doc = json!({"apiVersion": API, "kind": kind, "metadata": metadata, "spec": spec});
            let errors = errors_of(&doc);
            assert_error(
                &errors,
                "metadata.namespace",
                &format!("is required for {kind}"),
            );
            assert_eq!(errors.len(), 1, "{errors:#?}");
        }
    }
    // Cluster kinds do not need one.
    let doc = cvp("x", json!({"validateRules": []}));
    assert!(compile_document(&doc).is_ok());
}

// ---------------------------------------------------------------------------------------------
// Compile-time checks
// ---------------------------------------------------------------------------------------------

#[test]
fn bad_templates_and_programs_are_reported_by_field() {
    let rows: Vec<(Value, &str, &str)> = vec![
        (
            cop(
                "x",
                json!({"overrideRules": [{"overriders": {"template": {"type": "labels", "operation": "add", "path": "a"}}}]}),
            ),
            "spec.overrideRules[0].overriders.template",
            "set value or valueRef",
        ),
        (
            cop(
                "x",
                json!({"overrideRules": [add_rule(), {"overriders": {"program": "{% for x in y %}"}}]}),
            ),
            "spec.overrideRules[1].overriders.program",
            "line 1: syntax error",
        ),
        (
            cvp(
                "x",
                json!({"validateRules": [{"template": {"type": "condition"}}]}),
            ),
            "spec.validateRules[0].template.condition",
            "is required for type condition",
        ),
        (
            vp("ns", "x", json!({"validateRules": [{"program": "{{ }}"}]})),
            "spec.validateRules[0].program",
            "syntax error",
        ),
        (
            cvp(
                "x",
                json!({"validateRules": [{"template": {"type": "condition", "condition": {"cond": "Regex", "dataRef": {"from": "current", "path": "/metadata/name"}, "value": {"string": "a("}}}}]}),
            ),
            "spec.validateRules[0].template.condition.value.string",
            "invalid regular expression",
        ),
        (
            cop(
                "x",
                json!({"overrideRules": [{"overriders": {"template": {"type": "resourcesOversell", "operation": "add", "resourcesOversell": {"cpuFactor": "1.5"}}}}]}),
            ),
            "spec.overrideRules[0].overriders.template.resourcesOversell.cpuFactor",
            "strictly between 0 and 1",
        ),
    ];
    for (doc, field, needle) in rows {
        let errors = errors_of(&doc);
        assert_error(&errors, field, needle);
        assert_eq!(errors.len(), 1, "{errors:#?}");
    }
    // Template and program in one block: both reported.
    let doc = cop(
        "x",
        json!({"overrideRules": [{"overriders": {
            "template": {"type": "annotations", "operation": "remove"},
            "program": "{% if %}",
            "plaintext": [{"op": "add", "path": "/a", "value": 1}],
        }}]}),
    );
    let errors = errors_of(&doc);
    assert_error(
        &errors,
        "spec.overrideRules[0].overriders.template.path",
        "names the key to remove",
    );
    assert_error(
        &errors,
        "spec.overrideRules[0].overriders.program",
        "syntax error",
    );
    assert_eq!(errors.len(), 2);
}

#[test]
fn rules_without_an_overrider_or_check() {
    let rows: Vec<(Value, &str, &str)> = vec![
        (
            cop("x", json!({"overrideRules": [{"overriders": {}}]})),
            "spec.overrideRules[0].overriders",
            "no overrider",
        ),
        (
            cop(
                "x",
                json!({"overrideRules": [add_rule(), {"overriders": {"plaintext": []}}]}),
            ),
            "spec.overrideRules[1].overriders",
            "no overrider",
        ),
        (
            op(
                "ns",
                "x",
                json!({"overrideRules": [{"targetOperations": ["CREATE"], "overriders": {}}]}),
            ),
            "spec.overrideRules[0].overriders",
            "set template, program, cel or plaintext",
        ),
        (
            cvp("x", json!({"validateRules": [{}]})),
            "spec.validateRules[0]",
            "no check",
        ),
        (
            vp(
                "ns",
                "x",
                json!({"validateRules": [{"targetOperations": ["*"]}]}),
            ),
            "spec.validateRules[0]",
            "set template, program or cel",
        ),
    ];
    for (doc, field, needle) in rows {
        let errors = errors_of(&doc);
        assert_error(&errors, field, needle);
        assert_eq!(errors.len(), 1, "{errors:#?}");
    }
    // A rule needs `overriders` at all.
    assert_error(
        &errors_of(&cop(
            "x",
            json!({"overrideRules": [{"targetOperations": ["CREATE"]}]}),
        )),
        "spec.overrideRules[0].overriders",
        "is required",
    );
}

#[test]
fn plaintext_operations_are_checked_by_path() {
    let at = "spec.overrideRules[1].overriders.plaintext[2]";
    let rows: Vec<(Value, String, &str)> = vec![
        (
            json!({"op": "add", "path": "metadata.labels.a", "value": 1}),
            format!("{at}.path"),
            "`/metadata/labels/a`",
        ),
        (
            json!({"op": "add", "path": "/a~x", "value": 1}),
            format!("{at}.path"),
            "`~`",
        ),
        (
            json!({"op": "add", "path": "/a"}),
            format!("{at}.value"),
            "is required for `add`",
        ),
        (
            json!({"op": "replace", "path": "/a"}),
            format!("{at}.value"),
            "is required for `replace`",
        ),
        (
            json!({"op": "test", "path": "/a"}),
            format!("{at}.value"),
            "is required for `test`",
        ),
        (
            json!({"op": "remove", "path": "/a", "value": 1}),
            format!("{at}.value"),
            "is not used by `remove`",
        ),
        (
            json!({"op": "copy", "path": "/a"}),
            format!("{at}.from"),
            "is required for `copy`",
        ),
        (
            json!({"op": "move", "path": "/a"}),
            format!("{at}.from"),
            "is required for `move`",
        ),
        (
            json!({"op": "move", "path": "/a", "from": "b.c"}),
            format!("{at}.from"),
            "not a JSON pointer",
        ),
        (
            json!({"op": "add", "path": "/a", "value": 1, "from": "/b"}),
            format!("{at}.from"),
            "is not used by `add`",
        ),
        (
            json!({"op": "copy", "path": "/a", "from": "/b", "value": 1}),
            format!("{at}.value"),
            "is not used by `copy`",
        ),
    ];
    for (operation, field, needle) in rows {
        let doc = cop(
            "x",
            json!({"overrideRules": [add_rule(), plaintext_rule(json!([
                {"op": "add", "path": "/b", "value": 1},
                {"op": "remove", "path": "/b"},
                operation,
            ]))]}),
        );
        let errors = errors_of(&doc);
        assert_error(&errors, &field, needle);
        assert_eq!(errors.len(), 1, "{errors:#?}");
    }
}

#[test]
fn validation_actions() {
    let rows: Vec<(Value, Vec<(&str, &str)>)> = vec![
        (
            json!(["Deny", "Deny"]),
            vec![("spec.validationActions[1]", "Deny is listed twice")],
        ),
        (
            json!(["Warn", "Audit", "Warn"]),
            vec![("spec.validationActions[2]", "Warn is listed twice")],
        ),
        (
            json!(["Deny", "Warn"]),
            vec![(
                "spec.validationActions",
                "Deny and Warn may not be used together",
            )],
        ),
        (
            json!(["Warn", "Deny", "Deny"]),
            vec![
                ("spec.validationActions[2]", "Deny is listed twice"),
                (
                    "spec.validationActions",
                    "Deny and Warn may not be used together",
                ),
            ],
        ),
        (json!(["Deny", "Audit"]), vec![]),
        (json!(["Warn", "Audit"]), vec![]),
        (json!(["Audit"]), vec![]),
        (json!([]), vec![]),
    ];
    for (actions, expected) in rows {
        for doc in [
            cvp(
                "x",
                json!({"validationActions": actions, "validateRules": []}),
            ),
            vp(
                "ns",
                "x",
                json!({"validationActions": actions, "validateRules": []}),
            ),
        ] {
            match compile_document(&doc) {
                Ok(_) => assert!(expected.is_empty(), "{actions} should be rejected"),
                Err(e) => {
                    for (field, needle) in &expected {
                        assert_error(&e.errors, field, needle);
                    }
                    assert_eq!(e.errors.len(), expected.len(), "{actions}: {:#?}", e.errors);
                }
            }
        }
    }
}

#[test]
fn every_error_is_listed_at_once() {
    let doc = op(
        "team-a",
        "many",
        json!({
            "resourceSelectors": [
                {"apiVersion": "", "kind": ""},
                {"apiVersion": "v1", "kind": "Pod", "namespace": "team-b",
                 "labelSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]},
                 "fieldSelector": {"matchFields": {"spec.x": "1"}}},
            ],
            "overrideRules": [
                {"overriders": {}},
                plaintext_rule(json!([{"op": "add", "path": "x"}, {"op": "move", "path": "/y"}])),
            ],
        }),
    );
    let invalid = compile_document(&doc).unwrap_err();
    assert_eq!(invalid.policy, "OverridePolicy/team-a/many");
    let fields: Vec<&str> = invalid.errors.iter().map(|e| e.field.as_str()).collect();
    for field in [
        "spec.resourceSelectors[0].apiVersion",
        "spec.resourceSelectors[0].kind",
        "spec.resourceSelectors[1].labelSelector.matchExpressions[0].values",
        "spec.resourceSelectors[1].fieldSelector.matchFields[spec.x]",
        "spec.resourceSelectors[1].namespace",
        "spec.overrideRules[0].overriders",
        "spec.overrideRules[1].overriders.plaintext[0].path",
        "spec.overrideRules[1].overriders.plaintext[0].value",
        "spec.overrideRules[1].overriders.plaintext[1].from",
    ] {
        assert!(fields.contains(&field), "missing {field} in {fields:#?}");
    }
    assert_eq!(fields.len(), 9, "{fields:#?}");

    // Display: the policy, then one error per line.
    let text = invalid.to_string();
    assert!(
        text.starts_with("OverridePolicy/team-a/many is invalid:\n  "),
        "{text}"
    );
    assert_eq!(text.lines().count(), 10, "{text}");
    assert!(
        text.contains("\n  spec.overrideRules[0].overriders: no overrider"),
        "{text}"
    );

    // compile() returns the same errors and a usable policy carrying them as its defect.
    let compiled = compile(&PolicyObject::decode(&doc).unwrap());
    assert_eq!(compiled.errors, invalid.errors);
    let defect = compiled.policy.defect.as_deref().expect("a defect");
    assert_eq!(defect, &invalid);
    assert_eq!(
        compiled.policy.selectors.len(),
        2,
        "broken selectors still select their type"
    );
}

#[test]
fn invalid_policy_display() {
    let e = InvalidPolicy {
        policy: "ClusterOverridePolicy/x".into(),
        errors: vec![
            FieldError::new("spec.a", "bad"),
            FieldError::new("", "whole thing bad"),
        ],
    };
    assert_eq!(
        e.to_string(),
        "ClusterOverridePolicy/x is invalid:\n  spec.a: bad\n  whole thing bad"
    );
}

// ---------------------------------------------------------------------------------------------
// YAML documents
// ---------------------------------------------------------------------------------------------

const POLICIES_YAML: &str = r#"
# Ported from kinitiras by changing apiVersion.
apiVersion: policy.kanon.dev/v1alpha1
kind: ClusterOverridePolicy
metadata:
  name: web-labels
spec:
  resourceSelectors:
    - apiVersion: v1
      kind: Pod
      labelSelector:
        matchLabels:
          app: web
      fieldSelector:
        matchExpressions:
          - field: /metadata/annotations/example.com~1skip
            operator: DoesNotExist
          - field: /spec/nodeName
            operator: NotIn
            value: [forbidden]
  overrideRules:
    - targetOperations: [CREATE, UPDATE]
      overriders:
        plaintext:
          - op: add
            path: /metadata/labels/app.kubernetes.io~1part-of
            value: shop
---
apiVersion: policy.kanon.dev/v1alpha1
kind: OverridePolicy
metadata:
  name: shop-cost
  namespace: shop
spec:
  failurePolicy: Ignore
  overrideRules:
    - overriders:
        plaintext:
          - op: test
            path: /metadata/labels/app.kubernetes.io~1part-of
            value: shop
          - op: copy
            from: /metadata/labels/app.kubernetes.io~1part-of
            path: /metadata/labels/cost-center
"#;

#[test]
fn policies_written_in_yaml() {
    let docs = parse_documents(POLICIES_YAML, "policies.yaml", false).unwrap();
    assert_eq!(docs.len(), 2);
    let set = set_of(&docs);
    let object = pod("shop", "web", json!({"app": "web"}));
    let d = mutate_create(&set, &object);
    assert!(d.allowed, "{d:?}");
    assert_eq!(
        d.applied_policies,
        [
            "ClusterOverridePolicy/web-labels",
            "OverridePolicy/shop/shop-cost"
        ]
    );
    assert_eq!(
        d.patched.as_ref().unwrap()["metadata"]["labels"],
        json!({"app": "web", "app.kubernetes.io/part-of": "shop", "cost-center": "shop"})
    );
    assert_patch_is_diff(&object, &d);

    // The annotation the field selector excludes: the cluster policy does not apply, so the
    // namespaced one's test fails and, under Ignore, it is skipped with a warning.
    let mut skipped = object.clone();
    skipped["metadata"]["annotations"] = json!({"example.com/skip": "yes"});
    let d = mutate_create(&set, &skipped);
    assert!(d.allowed);
    assert!(d.applied_policies.is_empty(), "{d:?}");
    assert_eq!(d.warnings.len(), 1);
    assert!(
        d.warnings[0].starts_with("OverridePolicy/shop/shop-cost: "),
        "{d:?}"
    );
    assert!(
        d.warnings[0].contains("spec.overrideRules[0].overriders.plaintext[0]"),
        "{d:?}"
    );
    assert!(d.patch.0.is_empty());
}

#[test]
fn yaml_type_errors_keep_their_path() {
    let text = "apiVersion: policy.kanon.dev/v1alpha1\nkind: ClusterOverridePolicy\nmetadata: {name: x}\nspec:\n  failurePolicy: fail\n  overrideRules: []\n";
    let docs = parse_documents(text, "p.yaml", false).unwrap();
    assert_error(&errors_of(&docs[0]), "spec.failurePolicy", "`fail`");
}
