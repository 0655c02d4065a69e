//! The shape check against each kind's CRD schema: every error of a policy at once, each by
//! field path, in a policy author's words (did-you-mean for fields and enum values, what to
//! write for a wrong type), and no Rust type name in any message, serde's fallback included.

mod common;

use std::path::Path;

use common::*;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kanon_api::{Cond, ConstantValue, NumberOrString, PolicyKind, ValueProcess};
use kanon_engine::{FieldError, PolicyObject, compile_document, parse_documents, policy_kind_of};
use kanon_engine::{PathStep, ProblemKind, check_shape};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// serde's message for `value` read as a `T`.
fn serde_error<T: DeserializeOwned + std::fmt::Debug>(value: Value) -> String {
    match serde_json::from_value::<T>(value) {
        Ok(v) => panic!("{v:?} should not decode"),
        Err(e) => e.to_string(),
    }
}

/// The one policy in a YAML text.
fn yaml(text: &str) -> Value {
    let mut docs = parse_documents(text, "policy.yaml", false)
        .unwrap_or_else(|e| panic!("test YAML should parse: {e}"));
    assert_eq!(docs.len(), 1);
    docs.remove(0)
}

/// The errors of a document that fails to decode or compile.
fn errors_of(doc: &Value) -> Vec<FieldError> {
    match compile_document(doc) {
        Ok(p) => panic!("{} should be invalid", p.id),
        Err(e) => e.errors,
    }
}

/// The message at exactly `field`, panicking with every error when there is none.
#[track_caller]
fn message_at<'a>(errors: &'a [FieldError], field: &str) -> &'a str {
    match errors.iter().find(|e| e.field == field) {
        Some(e) => &e.message,
        None => panic!("expected an error at `{field}`, got: {errors:#?}"),
    }
}

/// A ClusterValidatePolicy whose one rule is a condition template with `condition` as given.
fn condition(condition: Value) -> Value {
    cvp(
        "x",
        json!({"validateRules": [{"template": {"type": "condition", "condition": condition}}]}),
    )
}

const AT: &str = "spec.validateRules[0].template.condition";

#[test]
fn every_error_of_a_policy_is_reported_at_once_by_path() {
    let doc = yaml(
        r#"
apiVersion: policy.kanon.dev/v1alpha1
kind: ClusterValidatePolicy
metadata:
  name: many
spec:
  failurePolicy: Sometimes
  validationActions: [Deny, warn]
  resourceSelectors:
    - kind: Deployment
  validateRules:
    - program: "{{ true }}"
    - targetOperations: CREATE
      template:
        type: condition
        condition:
          cond: exist
          dataref: {from: current, path: /spec/replicas}
          value: {integer: "2"}
"#,
    );
    let errors = errors_of(&doc);
    let rule = "spec.validateRules[1]";
    let cond = format!("{rule}.template.condition");
    let expected = [
        "spec.failurePolicy".to_string(),
        "spec.validationActions[1]".to_string(),
        "spec.resourceSelectors[0].apiVersion".to_string(),
        format!("{rule}.targetOperations"),
        format!("{cond}.cond"),
        format!("{cond}.dataref"),
        format!("{cond}.value.integer"),
        format!("{cond}.dataRef"),
    ];
    let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
    assert_eq!(fields, expected, "{errors:#?}");
    assert!(message_at(&errors, "spec.failurePolicy").contains("`Fail`, `Ignore`"));
    assert!(message_at(&errors, "spec.validationActions[1]").contains("did you mean `Warn`?"));
    assert_eq!(
        message_at(&errors, "spec.resourceSelectors[0].apiVersion"),
        "is required"
    );
    assert_eq!(
        message_at(&errors, &format!("{rule}.targetOperations")),
        "must be a list, each item one of `CREATE`, `UPDATE`, `DELETE`, `CONNECT`, `*`, \
         not a string (\"CREATE\"); write `targetOperations: [\"CREATE\"]`"
    );
    assert_eq!(
        message_at(&errors, &format!("{cond}.dataRef")),
        "is required"
    );
}

#[test]
fn an_unknown_field_names_the_field_it_resembles() {
    let errors = errors_of(&condition(
        json!({"cond": "Exist", "dataref": {"from": "current", "path": "/a"}}),
    ));
    assert_eq!(
        message_at(&errors, &format!("{AT}.dataref")),
        "unknown field; did you mean `dataRef`?"
    );
    // The field it stands for is then missing: said too, at its own path.
    assert_eq!(message_at(&errors, &format!("{AT}.dataRef")), "is required");
    assert_eq!(errors.len(), 2, "{errors:#?}");

    // Case, a letter too many or too few, two letters swapped.
    let rows = [
        (
            cop(
                "x",
                json!({"overrideRules": [{"overriders": {"plaintext": [{"op": "add", "path": "/a", "Value": 1}]}}]}),
            ),
            "spec.overrideRules[0].overriders.plaintext[0].Value",
            "value",
        ),
        (
            cop("x", json!({"resourceSelector": [], "overrideRules": []})),
            "spec.resourceSelector",
            "resourceSelectors",
        ),
        (
            cop(
                "x",
                json!({"overrideRules": [{"targetOperation": ["CREATE"], "overriders": {"program": "[]"}}]}),
            ),
            "spec.overrideRules[0].targetOperation",
            "targetOperations",
        ),
        (
            json!({"apiVersion": API, "kind": "ClusterOverridePolicy",
                   "metadata": {"name": "x", "lables": {"a": "b"}}, "spec": {"overrideRules": []}}),
            "metadata.lables",
            "labels",
        ),
    ];
    for (doc, field, meant) in rows {
        let errors = errors_of(&doc);
        assert_eq!(
            message_at(&errors, field),
            format!("unknown field; did you mean `{meant}`?")
        );
    }

    // Nothing close: the fields that are there.
    let errors = errors_of(&cvp(
        "x",
        json!({"validateRules": [{"program": "x", "message": "m"}]}),
    ));
    assert_eq!(
        message_at(&errors, "spec.validateRules[0].message"),
        "unknown field; known fields: `cel`, `name`, `program`, `targetOperations`, `template`"
    );
}

#[test]
fn a_value_outside_an_enum_lists_the_allowed_values() {
    let errors = errors_of(&condition(
        json!({"cond": "exist", "dataRef": {"from": "Current"}}),
    ));
    assert_eq!(
        message_at(&errors, &format!("{AT}.cond")),
        "must be one of `Exist`, `NotExist`, `Equal`, `NotEqual`, `In`, `NotIn`, `Gt`, `Gte`, \
         `Lt`, `Lte`, `Regex`, not `exist`; did you mean `Exist`?"
    );
    assert_eq!(
        message_at(&errors, &format!("{AT}.dataRef.from")),
        "must be one of `current`, `old`, `owner`, `k8s`, `http`, not `Current`; did you mean `current`?"
    );

    // Nothing close: the list alone.
    let errors = errors_of(&cop(
        "x",
        json!({"overrideRules": [{"overriders": {"plaintext": [{"op": "patch", "path": "/a"}]}}]}),
    ));
    assert_eq!(
        message_at(&errors, "spec.overrideRules[0].overriders.plaintext[0].op"),
        "must be one of `add`, `remove`, `replace`, `copy`, `move`, `test`, not `patch`"
    );

    // A value of another type: the allowed values too.
    let errors = errors_of(&condition(json!({"cond": 3, "dataRef": {"from": "old"}})));
    assert_eq!(
        message_at(&errors, &format!("{AT}.cond")),
        "must be one of `Exist`, `NotExist`, `Equal`, `NotEqual`, `In`, `NotIn`, `Gt`, `Gte`, \
         `Lt`, `Lte`, `Regex`, not an integer (3)"
    );

    // A missing enum field says which values it takes.
    let errors = errors_of(&condition(json!({"dataRef": {"from": "old"}})));
    assert!(
        message_at(&errors, &format!("{AT}.cond")).starts_with("is required: `Exist`, `NotExist`"),
        "{errors:#?}"
    );
}

#[test]
fn a_wrong_type_says_what_is_expected_and_what_to_write() {
    let dataref = json!({"from": "current", "path": "/spec/replicas"});
    let rows: Vec<(Value, String, &str)> = vec![
        (
            json!({"integer": "2"}),
            format!("{AT}.value.integer"),
            "must be an integer, not a string (\"2\"); write `integer: 2`",
        ),
        (
            json!(2),
            format!("{AT}.value"),
            "must be an object with fields `boolean`, `float`, `floatSlice`, `integer`, \
             `integerSlice`, `string`, `stringMap`, `stringSlice`, not an integer (2); \
             write `value: {integer: 2}`",
        ),
        (
            json!(2.5),
            format!("{AT}.value"),
            "must be an object with fields `boolean`, `float`, `floatSlice`, `integer`, \
             `integerSlice`, `string`, `stringMap`, `stringSlice`, not a decimal number (2.5); \
             write `value: {float: 2.5}`",
        ),
        (
            json!(["a", "b"]),
            format!("{AT}.value"),
            "must be an object with fields `boolean`, `float`, `floatSlice`, `integer`, \
             `integerSlice`, `string`, `stringMap`, `stringSlice`, not a list; \
             write `value: {stringSlice: [\"a\", \"b\"]}`",
        ),
        (
            json!({"integer": 2.0}),
            format!("{AT}.value.integer"),
            "must be an integer, not a decimal number (2.0)",
        ),
        (
            json!({"integerSlice": [1, "x"]}),
            format!("{AT}.value.integerSlice[1]"),
            "must be an integer, not a string (\"x\")",
        ),
        (
            json!({"boolean": "yes"}),
            format!("{AT}.value.boolean"),
            "must be true or false, not a string (\"yes\")",
        ),
        (
            json!({"stringMap": ["a"]}),
            format!("{AT}.value.stringMap"),
            "must be a map of strings, not a list",
        ),
    ];
    for (value, field, message) in rows {
        let doc = condition(json!({"cond": "Equal", "dataRef": dataref, "value": value}));
        let errors = errors_of(&doc);
        assert_eq!(message_at(&errors, &field), message, "{errors:#?}");
        assert_eq!(errors.len(), 1, "{errors:#?}");
    }

    // Labels are strings: a number or a boolean is quoted.
    let errors = errors_of(&cop(
        "x",
        json!({"resourceSelectors": [{"apiVersion": "v1", "kind": "Pod",
                "labelSelector": {"matchLabels": {"replicas": 3, "canary": true}}}],
               "overrideRules": []}),
    ));
    let at = "spec.resourceSelectors[0].labelSelector.matchLabels";
    assert_eq!(
        message_at(&errors, &format!("{at}.replicas")),
        "must be a string, not an integer (3); write `replicas: \"3\"`"
    );
    assert_eq!(
        message_at(&errors, &format!("{at}.canary")),
        "must be a string, not a boolean (true); write `canary: \"true\"`"
    );

    // A Kubernetes type inside a template: one toleration where a list goes.
    let errors = errors_of(&cop(
        "x",
        json!({"overrideRules": [{"overriders": {"template": {"type": "tolerations", "operation": "add",
                "tolerations": {"key": "dedicated", "operator": "Exists"}}}}]}),
    ));
    assert_eq!(
        message_at(
            &errors,
            "spec.overrideRules[0].overriders.template.tolerations"
        ),
        "must be a list of objects, not an object; write `tolerations: [{key: \"dedicated\", operator: \"Exists\"}]`"
    );

    // An empty list says nothing of what was meant: no rewrite is offered.
    let errors = errors_of(&cop(
        "x",
        json!({"namespaceSelector": [], "overrideRules": []}),
    ));
    assert_eq!(
        message_at(&errors, "spec.namespaceSelector"),
        "must be an object with fields `matchExpressions`, `matchLabels`, not a list"
    );

    // A whole section of the wrong type.
    let errors = errors_of(&json!({"apiVersion": API, "kind": "ClusterOverridePolicy",
                                   "metadata": {"name": "x"}, "spec": "none"}));
    assert_eq!(
        message_at(&errors, "spec"),
        "must be an object with fields `failurePolicy`, `namespaceSelector`, `overrideRules`, \
         `podTemplates`, `resourceSelectors`, not a string (\"none\")"
    );
}

#[test]
fn int_or_string_preserved_values_maps_and_null() {
    let process = |with: Value| {
        condition(
            json!({"cond": "Gt", "dataRef": {"from": "current", "path": "/a"},
                         "value": {"integer": 1}, "valueProcess": {"operation": "*", "operationWith": with}}),
        )
    };
    // x-kubernetes-int-or-string: an integer or a string, nothing else.
    for with in [json!(3), json!("0.5"), json!("50%")] {
        compiled(&process(with));
    }
    let errors = errors_of(&process(json!(0.5)));
    assert_eq!(
        message_at(&errors, &format!("{AT}.valueProcess.operationWith")),
        "must be an integer or a string, not a decimal number (0.5); write `operationWith: \"0.5\"`"
    );
    let errors = errors_of(&process(json!([3])));
    assert_eq!(
        message_at(&errors, &format!("{AT}.valueProcess.operationWith")),
        "must be an integer or a string, not a list"
    );

    // x-kubernetes-preserve-unknown-fields: any value, null included where nullable.
    for value in [
        json!({"any": ["thing", 1]}),
        json!([1, "a"]),
        json!(null),
        json!("s"),
    ] {
        compiled(&cop(
            "x",
            json!({"overrideRules": [{"overriders": {"plaintext": [{"op": "add", "path": "/a", "value": value}]}}]}),
        ));
    }
    compiled(&condition(
        json!({"cond": "Exist", "dataRef": {"from": "http",
        "http": {"url": "https://x.example", "method": "POST", "body": {"nested": [true, {"deep": null}]}}}}),
    ));

    // additionalProperties: any key, checked values; a key of a map is never an unknown field.
    compiled(&cop(
        "x",
        json!({"resourceSelectors": [{"apiVersion": "v1", "kind": "Pod",
                "labelSelector": {"matchLabels": {"anything/at.all": "x"}},
                "fieldSelector": {"matchFields": {"/spec/replicas": "3"}}}],
               "overrideRules": []}),
    ));

    // nullable fields take null; the status of a policy read back may be null too.
    compiled(
        &json!({"apiVersion": API, "kind": "ClusterOverridePolicy", "metadata": {"name": "x"},
        "spec": {"failurePolicy": null, "namespaceSelector": null, "overrideRules": [
            {"overriders": {"template": null, "program": "[]"}}]}, "status": null}),
    );

    // int32 has a range.
    let errors = errors_of(&condition(
        json!({"cond": "Exist", "dataRef": {"from": "http",
        "http": {"url": "u", "timeoutSeconds": 3_000_000_000u64}}}),
    ));
    assert_eq!(
        message_at(&errors, &format!("{AT}.dataRef.http.timeoutSeconds")),
        "must be an integer between -2147483648 and 2147483647, not 3000000000"
    );
}

#[test]
fn unknown_fields_alone_leave_the_policy_usable() {
    let doc = cop(
        "x",
        json!({"overrideRules": [{"overriders": {"program": "[]"}, "targetOperation": ["CREATE"]}]}),
    );
    let problems = check_shape(PolicyKind::ClusterOverridePolicy, &doc);
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert_eq!(problems[0].kind, ProblemKind::UnknownField);
    assert!(!problems[0].is_fatal());
    // Decoded, with the field beside it.
    let (_, found) = PolicyObject::decode_reporting(&doc).expect("decodes");
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(found[0].field, "spec.overrideRules[0].targetOperation");

    // With a wrong type beside it, both are the error.
    let doc = cop(
        "x",
        json!({"overrideRules": [{"overriders": {"program": 1}, "targetOperation": ["CREATE"]}]}),
    );
    let kinds: Vec<ProblemKind> = check_shape(PolicyKind::ClusterOverridePolicy, &doc)
        .iter()
        .map(|p| p.kind)
        .collect();
    assert_eq!(
        kinds,
        [ProblemKind::WrongType, ProblemKind::UnknownField],
        "document order"
    );
    let errors = PolicyObject::decode_reporting(&doc)
        .map(|_| ())
        .expect_err("a wrong type stops decoding")
        .errors;
    assert_eq!(errors.len(), 2, "{errors:#?}");
}

#[test]
fn a_kinitiras_field_is_reported_once_beside_shape_errors() {
    let doc = cop(
        "x",
        json!({"overrideRules": [{"overriders": {"cue": "object: {}"}, "targetOperations": ["create"]}]}),
    );
    let errors = errors_of(&doc);
    let cue = "spec.overrideRules[0].overriders.cue";
    assert!(message_at(&errors, cue).contains("`program`"));
    assert_eq!(errors.iter().filter(|e| e.field == cue).count(), 1);
    assert!(
        message_at(&errors, "spec.overrideRules[0].targetOperations[0]")
            .ends_with("not `create`; did you mean `CREATE`?")
    );
    assert_eq!(errors.len(), 2, "{errors:#?}");
}

#[test]
fn what_serde_still_rejects_keeps_its_path_in_plain_words() {
    // Forms the schema leaves open (a number written as a string or a number), a null the
    // schema does not allow on an optional field, a time that does not parse.
    let rows: Vec<(Value, &str, &str)> = vec![
        (
            condition(
                json!({"cond": "Gt", "dataRef": {"from": "current"}, "value": {"float": true}}),
            ),
            "spec.validateRules[0].template.condition.value.float",
            "must be a number, written as a JSON number (0.5) or as a string (\"0.5\"), not a boolean (true)",
        ),
        (
            cop(
                "x",
                json!({"overrideRules": [{"overriders": {"program": "[]"}, "targetOperations": null}]}),
            ),
            "spec.overrideRules[0].targetOperations",
            "must be a list, each item one of `CREATE`, `UPDATE`, `DELETE`, `CONNECT`, `*`, not null",
        ),
        (
            json!({"apiVersion": API, "kind": "ClusterOverridePolicy",
                   "metadata": {"name": "x", "creationTimestamp": "yesterday"}, "spec": {"overrideRules": []}}),
            "metadata.creationTimestamp",
            "must be a time such as `2024-01-01T00:00:00Z` (RFC 3339): ",
        ),
    ];
    for (doc, field, start) in rows {
        let errors = errors_of(&doc);
        assert!(message_at(&errors, field).starts_with(start), "{errors:#?}");
        assert_eq!(errors.len(), 1, "{errors:#?}");
    }
}

#[test]
fn serde_messages_are_put_in_plain_words() {
    // serde's own messages, as its derived types and k8s-openapi's write them, at a place of a
    // ClusterValidatePolicy: rewritten with the schema and the document where they help (at
    // `nowhere`, neither has anything: serde's words alone are translated).
    let doc = condition(json!({"cond": "Gt", "dataRef": {"from": "current"},
                               "value": {"integer": "2", "float": true}}));
    let value = |field: &str| {
        vec![
            PathStep::Key("spec".into()),
            PathStep::Key("validateRules".into()),
            PathStep::Index(0),
            PathStep::Key("template".into()),
            PathStep::Key("condition".into()),
            PathStep::Key("value".into()),
            PathStep::Key(field.into()),
        ]
    };
    let nowhere = || vec![PathStep::Key("nowhere".into())];
    let rows: Vec<(Vec<PathStep>, String, &str)> = vec![
        (
            value("integer"),
            serde_error::<i64>(json!("2")),
            "must be an integer, not a string (\"2\")",
        ),
        (
            value("float"),
            serde_error::<NumberOrString>(json!(true)),
            "must be a number, written as a JSON number (0.5) or as a string (\"0.5\"), \
             not a boolean (true)",
        ),
        (
            nowhere(),
            serde_error::<ConstantValue>(json!(2)),
            "must be an object, not an integer (2)",
        ),
        (
            nowhere(),
            serde_error::<i32>(json!(3_000_000_000u64)),
            "must be an integer between -2147483648 and 2147483647, not an integer (3000000000)",
        ),
        (
            nowhere(),
            serde_error::<Cond>(json!("exist")),
            "must be one of `Exist`, `NotExist`, `Equal`, `NotEqual`, `In`, `NotIn`, `Gt`, `Gte`, \
             `Lt`, `Lte`, `Regex`, not `exist`; did you mean `Exist`?",
        ),
        (
            nowhere(),
            serde_error::<ValueProcess>(json!({"operation": "+"})),
            "field `operationWith` is required",
        ),
        (
            nowhere(),
            serde_error::<IntOrString>(json!([1])),
            "must be an integer or a string, not a list",
        ),
        // Not serde's own words: kept.
        (nowhere(), "something else".into(), "something else"),
    ];
    for (path, serde_says, plain) in rows {
        let said = kanon_engine::internals::explain_decode_error(
            PolicyKind::ClusterValidatePolicy,
            &doc,
            &path,
            &serde_says,
        );
        assert_eq!(said, plain, "from {serde_says}");
    }
}

#[test]
fn no_message_names_a_rust_type() {
    let dataref = json!({"from": "current", "path": "/a"});
    let docs: Vec<Value> = vec![
        condition(json!({"cond": "Equal", "dataRef": dataref, "value": 2})),
        condition(json!({"cond": "Equal", "dataRef": dataref, "value": "x"})),
        condition(json!({"cond": "Equal", "dataRef": dataref, "value": {"integer": "2"}})),
        condition(json!({"cond": "Equal", "dataRef": dataref, "value": {"integer": 1.5}})),
        condition(json!({"cond": "Equal", "dataRef": dataref, "value": {"integerSlice": "1"}})),
        condition(json!({"cond": "Equal", "dataRef": dataref, "value": {"float": true}})),
        condition(json!({"cond": "Equal", "dataRef": dataref, "value": {"floatSlice": [{}]}})),
        condition(json!({"cond": "Equal", "dataRef": dataref, "value": {"stringMap": {"a": []}}})),
        condition(json!({"cond": "foo", "dataRef": {"from": "nowhere"}})),
        condition(
            json!({"cond": "Gt", "dataRef": dataref, "valueProcess": {"operation": "%", "operationWith": {}}}),
        ),
        condition(
            json!({"cond": "Gt", "dataRef": dataref, "valueProcess": {"operation": "+", "operationWith": 0.5}}),
        ),
        condition(
            json!({"cond": "Exist", "dataRef": {"from": "http", "http": {"url": 1, "timeoutSeconds": "5", "header": []}}}),
        ),
        condition(
            json!({"cond": "Exist", "dataRef": {"from": "k8s", "k8s": {"kind": "Pod", "labelSelector": {"matchExpressions": [{"key": "a"}]}}}}),
        ),
        condition(json!({"cond": "Exist"})),
        condition(json!("Exist")),
        cvp(
            "x",
            json!({"validateRules": {}, "validationActions": "Deny"}),
        ),
        cvp(
            "x",
            json!({"validateRules": [{"template": {"type": "conditions"}}]}),
        ),
        cvp(
            "x",
            json!({"validateRules": [{"template": {"type": "condition", "condition": null}, "program": false}]}),
        ),
        cop(
            "x",
            json!({"overrideRules": [{"overriders": {"plaintext": [{"op": "add", "path": ["a"]}]}}]}),
        ),
        cop(
            "x",
            json!({"overrideRules": [{"overriders": {"plaintext": {"op": "add"}}}]}),
        ),
        cop(
            "x",
            json!({"overrideRules": [{"overriders": {"template": {"type": "labels", "operation": "set", "value": {"string": 1}}}}]}),
        ),
        cop(
            "x",
            json!({"overrideRules": [{"overriders": {"template": {"type": "resources", "operation": "add", "resources": {"limits": {"cpu": 0.5, "memory": []}}}}}]}),
        ),
        cop(
            "x",
            json!({"overrideRules": [{"overriders": {"template": {"type": "resourcesOversell", "operation": "add", "resourcesOversell": {"cpuFactor": [1]}}}}]}),
        ),
        cop(
            "x",
            json!({"overrideRules": [{"overriders": {"template": {"type": "affinity", "operation": "add", "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": "1"}]}}}}}]}),
        ),
        cop(
            "x",
            json!({"overrideRules": [{"overriders": {"template": {"type": "tolerations", "operation": "add", "tolerations": [{"tolerationSeconds": "60"}]}}}]}),
        ),
        cop("x", json!({"overrideRules": [{"overriders": null}]})),
        cop(
            "x",
            json!({"overrideRules": [{"overriders": {"program": "[]"}, "targetOperations": null}]}),
        ),
        cop(
            "x",
            json!({"resourceSelectors": [{"apiVersion": 1, "kind": null, "name": 3, "fieldSelector": {"matchExpressions": [{"field": "/a", "operator": "in"}]}}], "overrideRules": []}),
        ),
        cop(
            "x",
            json!({"namespaceSelector": [], "failurePolicy": 1, "overrideRules": []}),
        ),
        op(
            "ns",
            "x",
            json!({"overrideRules": [{"overriders": {"program": "[]"}}], "failurePolicy": "ignore"}),
        ),
        vp(
            "ns",
            "x",
            json!({"validateRules": [{"program": {"text": "x"}}]}),
        ),
        json!({"apiVersion": API, "kind": "ClusterOverridePolicy", "metadata": 7, "spec": []}),
        json!({"apiVersion": API, "kind": "ClusterOverridePolicy", "metadata": {"name": ["x"], "labels": [], "generation": "1"}, "spec": {"overrideRules": []}}),
        json!({"apiVersion": API, "kind": "ClusterOverridePolicy", "metadata": {"name": "x", "deletionTimestamp": "soon"}, "spec": {"overrideRules": []}}),
        json!({"apiVersion": API, "kind": "ClusterOverridePolicy", "metadata": {"name": "x"}, "spec": {"overrideRules": []},
               "status": {"observedGeneration": "1", "conditions": [{"type": "Ready", "status": "True", "reason": "r", "message": "m", "lastTransitionTime": "never"}]}}),
    ];
    let forbidden = [
        "struct", "enum", "variant", "i32", "i64", "String", "Option", "Vec",
    ];
    let mut messages = 0;
    for doc in &docs {
        assert!(policy_kind_of(doc).is_some());
        for e in errors_of(doc) {
            messages += 1;
            for word in forbidden {
                assert!(
                    !e.message.contains(word),
                    "`{word}` in the message at {}: {}",
                    e.field,
                    e.message
                );
            }
        }
    }
    assert!(messages >= docs.len(), "{messages} messages");
}

#[test]
fn every_example_policy_fits_its_schema() {
    // No false alarms: every policy the repository ships as a working example passes the
    // check with nothing to report (examples/failures holds the broken ones on purpose).
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let mut dirs = vec![root.join("policies"), root.join("suites")];
    let mut checked = 0;
    while let Some(dir) = dirs.pop() {
        let entries = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("examples not found at {}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("readable directory").path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("readable example");
            let Ok(docs) = parse_documents(&text, &path.display().to_string(), false) else {
                continue;
            };
            for doc in docs {
                let Some(kind) = policy_kind_of(&doc) else {
                    continue;
                };
                let problems = check_shape(kind, &doc);
                assert!(problems.is_empty(), "{}: {problems:#?}", path.display());
                checked += 1;
            }
        }
    }
    assert!(checked >= 10, "only {checked} example policies found");
}
