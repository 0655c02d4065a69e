//! The OpenReports kinds (`openreports.io/v1alpha1` Report and ClusterReport): their CRDs have
//! OpenReports' names, scopes and columns and the same fields, types, enums and required fields
//! as OpenReports' own CRDs (a cluster may have either installed: what kanon writes must pass
//! theirs, what others write must pass ours), and the Rust types read and write that wire form.
//!
//! The schema checks run a small validator here (types, enums, required and unknown fields:
//! what the apiserver checks or prunes for these schemas), so that no cluster is needed.

use std::collections::BTreeMap;
use std::time::{Duration, UNIX_EPOCH};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kanon_api::{
    ClusterReport, Report, ReportResult, ReportSummary, ResultStatus, Severity, Timestamp,
};
use kube::{CustomResourceExt, Resource};
use serde_json::{Value, json};

fn crd(kind: &str) -> CustomResourceDefinition {
    kanon_api::report_crds()
        .into_iter()
        .find(|c| c.spec.names.kind == kind)
        .unwrap_or_else(|| panic!("kanon_api::report_crds() has no {kind}"))
}

/// The `openAPIV3Schema` of one kind, as JSON.
fn schema(kind: &str) -> Value {
    let crd = serde_json::to_value(crd(kind)).expect("a CRD serializes to JSON");
    crd.pointer("/spec/versions/0/schema/openAPIV3Schema")
        .cloned()
        .unwrap_or_else(|| panic!("{kind} has no openAPIV3Schema"))
}

fn yaml(text: &str) -> Value {
    serde_saphyr::from_str(text).expect("the sample is YAML")
}

// ---------------------------------------------------------------------------------------------
// Names, scopes, columns
// ---------------------------------------------------------------------------------------------

#[test]
fn two_kinds_with_openreports_names_scopes_and_columns() {
    let crds = kanon_api::report_crds();
    let kinds: Vec<&str> = crds.iter().map(|c| c.spec.names.kind.as_str()).collect();
    assert_eq!(kinds, ["Report", "ClusterReport"]);
    assert_eq!(kanon_api::crds().len(), 5, "kanon's own CRDs stay apart");

    for (kind, plural, short, scope) in [
        ("Report", "reports", "reps", "Namespaced"),
        ("ClusterReport", "clusterreports", "creps", "Cluster"),
    ] {
        let crd = crd(kind);
        assert_eq!(crd.spec.group, "openreports.io", "{kind}: group");
        assert_eq!(
            crd.metadata.name.as_deref(),
            Some(format!("{plural}.openreports.io").as_str())
        );
        let names = &crd.spec.names;
        assert_eq!(names.plural, plural, "{kind}: plural");
        assert_eq!(
            names.singular.as_deref(),
            Some(kind.to_lowercase().as_str())
        );
        assert_eq!(
            names.list_kind.as_deref(),
            Some(format!("{kind}List").as_str())
        );
        assert_eq!(names.short_names, Some(vec![short.to_string()]));
        assert_eq!(
            names.categories, None,
            "{kind}: OpenReports sets no category"
        );
        assert_eq!(crd.spec.scope, scope, "{kind}: scope");
        assert_eq!(
            kanon_api::crd_file_name(&crd),
            format!("openreports.io_{plural}.yaml"),
            "{kind}: the file name OpenReports uses"
        );

        assert_eq!(crd.spec.versions.len(), 1);
        let version = &crd.spec.versions[0];
        assert_eq!(version.name, "v1alpha1");
        assert!(version.served && version.storage);
        assert_eq!(version.subresources, None, "{kind}: no status subresource");
        let columns: Vec<(&str, &str, &str, Option<i32>)> = version
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| {
                (
                    c.name.as_str(),
                    c.type_.as_str(),
                    c.json_path.as_str(),
                    c.priority,
                )
            })
            .collect();
        assert_eq!(
            columns,
            [
                ("Kind", "string", ".scope.kind", Some(1)),
                ("Name", "string", ".scope.name", Some(1)),
                ("Pass", "integer", ".summary.pass", None),
                ("Fail", "integer", ".summary.fail", None),
                ("Warn", "integer", ".summary.warn", None),
                ("Error", "integer", ".summary.error", None),
                ("Skip", "integer", ".summary.skip", None),
                ("Age", "date", ".metadata.creationTimestamp", None),
            ],
            "{kind}: printer columns"
        );
    }

    // The Rust side agrees with the CRDs.
    assert_eq!(Report::crd(), crd("Report"));
    assert_eq!(Report::crd_name(), "reports.openreports.io");
    assert_eq!(ClusterReport::crd_name(), "clusterreports.openreports.io");
    assert_eq!(Report::shortnames(), ["reps"]);
    assert_eq!(ClusterReport::shortnames(), ["creps"]);
    assert_eq!(Report::api_version(&()), kanon_api::REPORT_API_VERSION);
    assert_eq!(Report::group(&()), kanon_api::REPORT_GROUP);
    assert_eq!(Report::version(&()), kanon_api::REPORT_VERSION);
    assert_eq!(Report::kind(&()), "Report");
    assert_eq!(Report::plural(&()), "reports");
    assert_eq!(ClusterReport::kind(&()), "ClusterReport");
    assert_eq!(ClusterReport::plural(&()), "clusterreports");
    let resource = ClusterReport::api_resource();
    assert_eq!(resource.api_version, "openreports.io/v1alpha1");
    assert_eq!(resource.plural, "clusterreports");
}

// ---------------------------------------------------------------------------------------------
// The same fields as OpenReports' CRDs
// ---------------------------------------------------------------------------------------------

/// Every node of a schema, one line each: `path: type`, then its sorted `enum`, its sorted
/// `required` and `x-kubernetes-map-type`. Paths as in crds.rs: `.` for properties, `[]` for
/// items, `{}` for map values. Descriptions, `nullable`, `format` and `title` are left out
/// (annotations, or null values a producer does not write).
fn field_set(schema: &Value) -> Vec<String> {
    fn walk(node: &Value, path: &str, out: &mut Vec<String>) {
        let mut line = format!(
            "{}: {}",
            if path.is_empty() { "<root>" } else { path },
            node["type"].as_str().unwrap_or("<no type>")
        );
        let sorted = |key: &str| {
            let mut values: Vec<String> = node[key]
                .as_array()
                .into_iter()
                .flatten()
                .map(|v| v.as_str().unwrap_or("<not a string>").to_string())
                .collect();
            values.sort();
            values.join(",")
        };
        if node.get("enum").is_some() {
            line += &format!(" enum={}", sorted("enum"));
        }
        if node.get("required").is_some() {
            line += &format!(" required={}", sorted("required"));
        }
        if let Some(map_type) = node.get("x-kubernetes-map-type") {
            line += &format!(" map={}", map_type.as_str().unwrap_or("?"));
        }
        out.push(line);
        if let Some(props) = node.get("properties").and_then(Value::as_object) {
            for (name, sub) in props {
                let sub_path = if path.is_empty() {
                    name.clone()
                } else {
                    format!("{path}.{name}")
                };
                walk(sub, &sub_path, out);
            }
        }
        if let Some(items) = node.get("items").filter(|i| i.is_object()) {
            walk(items, &format!("{path}[]"), out);
        }
        if let Some(values) = node.get("additionalProperties").filter(|v| v.is_object()) {
            walk(values, &format!("{path}{{}}"), out);
        }
    }
    let mut out = Vec::new();
    walk(schema, "", &mut out);
    out.sort();
    out
}

/// The lines of a core/v1 ObjectReference at `path` (a map replaced whole on apply).
fn object_reference(path: &str) -> Vec<String> {
    let mut lines = vec![format!("{path}: object map=atomic")];
    for field in [
        "apiVersion",
        "fieldPath",
        "kind",
        "name",
        "namespace",
        "resourceVersion",
        "uid",
    ] {
        lines.push(format!("{path}.{field}: string"));
    }
    lines
}

/// The lines of a meta/v1 LabelSelector at `path` (a map replaced whole on apply).
fn label_selector(path: &str) -> Vec<String> {
    let e = format!("{path}.matchExpressions");
    vec![
        format!("{path}: object map=atomic"),
        format!("{e}: array"),
        format!("{e}[]: object required=key,operator"),
        format!("{e}[].key: string"),
        format!("{e}[].operator: string"),
        format!("{e}[].values: array"),
        format!("{e}[].values[]: string"),
        format!("{path}.matchLabels: object"),
        format!("{path}.matchLabels{{}}: string"),
    ]
}

/// The field set of OpenReports' CRDs (github.com/openreports/reports-api,
/// `crd/openreports.io/v1alpha1/openreports.io_{reports,clusterreports}.yaml`; the two have the
/// same schema), written out from them by hand. Left out: their root `apiVersion`, `kind` and
/// `metadata: {type: object}`, which the apiserver handles whatever a CRD says (kube's derive
/// leaves them out too), and their `x-kubernetes-list-type: atomic` on a LabelSelector's lists,
/// which is what a list without the extension is anyway.
fn upstream_field_set() -> Vec<String> {
    let statuses = "enum=error,fail,pass,skip,warn";
    let mut lines: Vec<String> = [
        "<root>: object".to_string(),
        "configuration: object required=limits".into(),
        "configuration.limits: object".into(),
        "configuration.limits.maxResults: integer".into(),
        "configuration.limits.statusFilter: array".into(),
        format!("configuration.limits.statusFilter[]: string {statuses}"),
        "results: array".into(),
        "results[]: object required=policy".into(),
        "results[].category: string".into(),
        "results[].message: string".into(),
        "results[].policy: string".into(),
        "results[].properties: object".into(),
        "results[].properties{}: string".into(),
        "results[].resources: array".into(),
        format!("results[].result: string {statuses}"),
        "results[].rule: string".into(),
        "results[].scored: boolean".into(),
        "results[].severity: string enum=critical,high,info,low,medium".into(),
        "results[].source: string".into(),
        "results[].timestamp: object required=nanos,seconds".into(),
        "results[].timestamp.nanos: integer".into(),
        "results[].timestamp.seconds: integer".into(),
        "source: string".into(),
        "summary: object".into(),
        "summary.error: integer".into(),
        "summary.fail: integer".into(),
        "summary.pass: integer".into(),
        "summary.skip: integer".into(),
        "summary.warn: integer".into(),
    ]
    .into_iter()
    .collect();
    lines.extend(label_selector("results[].resourceSelector"));
    lines.extend(object_reference("results[].resources[]"));
    lines.extend(object_reference("scope"));
    lines.extend(label_selector("scopeSelector"));
    lines.sort();
    lines
}

#[test]
fn the_schemas_have_openreports_fields_types_enums_and_required_fields() {
    let upstream = upstream_field_set();
    for kind in ["Report", "ClusterReport"] {
        let ours = field_set(&schema(kind));
        let missing: Vec<&String> = upstream.iter().filter(|l| !ours.contains(l)).collect();
        let extra: Vec<&String> = ours.iter().filter(|l| !upstream.contains(l)).collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "{kind}'s schema differs from OpenReports' CRD:\n  only in OpenReports': {missing:?}\n  \
             only in ours: {extra:?}"
        );
    }
}

#[test]
fn the_schemas_set_no_defaults() {
    // The apiserver would write a default into every report, other producers' included.
    for kind in ["Report", "ClusterReport"] {
        let text = serde_json::to_string(&schema(kind)).unwrap();
        assert!(!text.contains("\"default\""), "{kind}: a default in {text}");
    }
}

// ---------------------------------------------------------------------------------------------
// A small validator: what the apiserver checks for these schemas
// ---------------------------------------------------------------------------------------------

/// Appends every way `value` does not satisfy `schema`: wrong type, a value outside `enum`, a
/// missing required field, an unknown field (which the apiserver would prune, i.e. lose).
fn validate(schema: &Value, value: &Value, path: &str, out: &mut Vec<String>) {
    if value.is_null() {
        if schema["nullable"] != true {
            out.push(format!("{path}: null"));
        }
        return;
    }
    let type_ok = match schema["type"].as_str() {
        Some("object") => value.is_object(),
        Some("array") => value.is_array(),
        Some("string") => value.is_string(),
        Some("integer") => value.is_i64() || value.is_u64(),
        Some("number") => value.is_number(),
        Some("boolean") => value.is_boolean(),
        _ => true,
    };
    if !type_ok {
        out.push(format!("{path}: {value} is not of type {}", schema["type"]));
        return;
    }
    if schema["format"] == "int32" && value.as_i64().is_none_or(|n| i32::try_from(n).is_err()) {
        out.push(format!("{path}: {value} is not an int32"));
    }
    if let Some(values) = schema["enum"].as_array()
        && !values.contains(value)
    {
        out.push(format!("{path}: {value} is not one of {values:?}"));
    }
    if let Some(object) = value.as_object() {
        for name in schema["required"].as_array().into_iter().flatten() {
            if !object.contains_key(name.as_str().unwrap_or_default()) {
                out.push(format!("{path}: {name} is required"));
            }
        }
        let properties = schema["properties"].as_object();
        for (name, sub) in object {
            let sub_path = format!("{path}.{name}");
            if path.is_empty() && ["apiVersion", "kind", "metadata"].contains(&name.as_str()) {
                continue;
            }
            match (
                properties.and_then(|p| p.get(name)),
                schema.get("additionalProperties"),
            ) {
                (Some(sub_schema), _) => validate(sub_schema, sub, &sub_path, out),
                (None, Some(values)) if values.is_object() => validate(values, sub, &sub_path, out),
                _ if schema["x-kubernetes-preserve-unknown-fields"] == true => {}
                _ => out.push(format!("{sub_path}: unknown field (pruned)")),
            }
        }
    }
    if let (Some(items), Some(schema_items)) = (value.as_array(), schema.get("items")) {
        for (i, item) in items.iter().enumerate() {
            validate(schema_items, item, &format!("{path}[{i}]"), out);
        }
    }
}

fn problems(kind: &str, value: &Value) -> Vec<String> {
    let mut out = Vec::new();
    validate(&schema(kind), value, "", &mut out);
    out
}

/// A Report as kanon writes one, every field set.
const FULL_REPORT: &str = r#"
apiVersion: openreports.io/v1alpha1
kind: Report
metadata:
  name: kanon-deployment-web
  namespace: shop
  labels:
    app.kubernetes.io/managed-by: kanon
source: kanon
scope:
  apiVersion: apps/v1
  kind: Deployment
  name: web
  namespace: shop
  uid: 9f1c2d3e-0000-4000-8000-000000000001
configuration:
  limits:
    maxResults: 100
    statusFilter: [fail, warn, error]
summary:
  pass: 1
  fail: 1
  warn: 1
  error: 0
  skip: 1
results:
- source: kanon
  policy: ClusterValidatePolicy/require-probes
  rule: liveness
  category: Best Practices
  severity: medium
  timestamp:
    seconds: 1767225600
    nanos: 250000000
  result: fail
  scored: true
  resources:
  - apiVersion: apps/v1
    kind: Deployment
    name: web
    namespace: shop
    uid: 9f1c2d3e-0000-4000-8000-000000000001
  message: container web has no livenessProbe
  properties:
    validationAction: Audit
    path: /spec/template/spec/containers/0
- policy: ValidatePolicy/shop/team-label
  result: pass
  severity: low
  resourceSelector:
    matchLabels:
      app: web
    matchExpressions:
    - key: tier
      operator: In
      values: [frontend]
- policy: ClusterValidatePolicy/disallow-latest-tag
  result: warn
  severity: high
  timestamp:
    seconds: 1767225600
    nanos: 0
  message: image nginx:latest uses the latest tag
- policy: ClusterValidatePolicy/pss-restricted
  rule: run-as-non-root
  result: skip
  severity: critical
  properties:
    exception: PolicyException/policy-exceptions/web
"#;

/// A ClusterReport as Go producers write one (Kyverno, say): `source: ""` and a result's
/// `source: ""` (no omitempty in OpenReports' Go types), zero counters, a result without
/// `result`.
const GO_CLUSTER_REPORT: &str = r#"
apiVersion: openreports.io/v1alpha1
kind: ClusterReport
metadata:
  name: cpol-require-labels
  creationTimestamp: "2026-01-01T00:00:00Z"
source: ""
scope:
  apiVersion: v1
  kind: Namespace
  name: shop
summary:
  pass: 0
  fail: 0
  warn: 0
  error: 0
  skip: 0
results:
- source: ""
  policy: require-labels
  timestamp:
    seconds: 0
    nanos: 0
"#;

#[test]
fn a_full_report_validates_against_the_schema_and_round_trips() {
    let written = yaml(FULL_REPORT);
    assert_eq!(problems("Report", &written), Vec::<String>::new());

    let report: Report = serde_json::from_value(written.clone()).expect("a Report");
    assert_eq!(report.results.len(), 4);
    assert_eq!(report.summary, ReportSummary::of(&report.results));
    assert_eq!(report.results[0].severity, Some(Severity::Medium));
    assert_eq!(
        report.results[0].timestamp,
        Some(Timestamp {
            seconds: 1_767_225_600,
            nanos: 250_000_000
        })
    );
    assert_eq!(
        report.results[0].message,
        "container web has no livenessProbe"
    );
    // Everything read is written back, and nothing else: no field renamed, added or lost.
    let again = serde_json::to_value(&report).expect("a Report serializes");
    assert_eq!(again, written);
    assert_eq!(problems("Report", &again), Vec::<String>::new());

    // The same fields as a ClusterReport.
    let mut cluster = written.clone();
    cluster["kind"] = json!("ClusterReport");
    cluster["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("namespace");
    assert_eq!(problems("ClusterReport", &cluster), Vec::<String>::new());
    let cluster_report: ClusterReport = serde_json::from_value(cluster.clone()).unwrap();
    assert_eq!(serde_json::to_value(&cluster_report).unwrap(), cluster);
}

#[test]
fn what_go_producers_write_reads_and_validates() {
    let written = yaml(GO_CLUSTER_REPORT);
    assert_eq!(problems("ClusterReport", &written), Vec::<String>::new());
    let report: ClusterReport = serde_json::from_value(written).expect("a ClusterReport");
    assert_eq!(report.source, "", "an empty source reads as unset");
    assert_eq!(report.summary, ReportSummary::default());
    assert_eq!(report.results[0].result, None);
    assert_eq!(report.results[0].source, "");
    assert_eq!(
        report.results[0].timestamp,
        Some(Timestamp {
            seconds: 0,
            nanos: 0
        })
    );
    // Written back without the empty strings, which mean the same.
    let again = serde_json::to_value(&report).unwrap();
    assert_eq!(again.get("source"), None);
    assert_eq!(again["results"][0].get("source"), None);
    assert_eq!(problems("ClusterReport", &again), Vec::<String>::new());
}

#[test]
fn a_new_report_serializes_with_api_version_kind_and_a_summary_only() {
    let report = Report::default();
    assert_eq!(
        serde_json::to_value(&report).unwrap(),
        json!({
            "apiVersion": "openreports.io/v1alpha1",
            "kind": "Report",
            "metadata": {},
            "summary": {"pass": 0, "fail": 0, "warn": 0, "error": 0, "skip": 0},
        })
    );
    let cluster = serde_json::to_value(ClusterReport::default()).unwrap();
    assert_eq!(cluster["kind"], "ClusterReport");
    assert_eq!(cluster["apiVersion"], "openreports.io/v1alpha1");

    // A result with only a policy and a status writes just those.
    let result = ReportResult {
        policy: "ClusterValidatePolicy/p".into(),
        result: Some(ResultStatus::Pass),
        ..Default::default()
    };
    assert_eq!(
        serde_json::to_value(&result).unwrap(),
        json!({"policy": "ClusterValidatePolicy/p", "result": "pass"})
    );
}

#[test]
fn the_validator_catches_what_openreports_refuses() {
    // Each mistake, reported at its path.
    let mut bad = yaml(FULL_REPORT);
    let result = &mut bad["results"][0];
    result["description"] = json!("renamed from message");
    result["subjects"] = json!([]);
    result["severity"] = json!("severe");
    result["result"] = json!("passed");
    result["timestamp"] = json!({"seconds": 1});
    result.as_object_mut().unwrap().remove("policy");
    bad["summary"]["pass"] = json!("1");
    bad["spec"] = json!({});
    let found = problems("Report", &bad);
    for expected in [
        ".results[0].description: unknown field",
        ".results[0].subjects: unknown field",
        ".results[0].severity: \"severe\" is not one of",
        ".results[0].result: \"passed\" is not one of",
        ".results[0].timestamp: \"nanos\" is required",
        ".results[0]: \"policy\" is required",
        ".summary.pass: \"1\" is not of type",
        ".spec: unknown field",
    ] {
        assert!(
            found.iter().any(|p| p.starts_with(expected)),
            "missed `{expected}`; found:\n  {}",
            found.join("\n  ")
        );
    }
    assert_eq!(found.len(), 8, "{found:#?}");
}

// ---------------------------------------------------------------------------------------------
// The Rust API
// ---------------------------------------------------------------------------------------------

#[test]
fn severities_are_ordered_and_parse_in_any_case() {
    assert!(Severity::Info < Severity::Low);
    assert!(Severity::Low < Severity::Medium);
    assert!(Severity::Medium < Severity::High);
    assert!(Severity::High < Severity::Critical);
    assert_eq!(
        [Severity::Low, Severity::Critical, Severity::Info]
            .into_iter()
            .max(),
        Some(Severity::Critical)
    );
    for severity in Severity::ALL {
        assert_eq!(severity.as_str().parse(), Ok(severity));
        assert_eq!(severity.to_string().to_uppercase().parse(), Ok(severity));
        assert_eq!(
            serde_json::to_value(severity).unwrap(),
            json!(severity.as_str())
        );
    }
    assert_eq!(" High ".parse(), Ok(Severity::High));
    let error = "severe".parse::<Severity>().unwrap_err();
    assert_eq!(
        error.to_string(),
        "`severe` is not a severity: expected info, low, medium, high or critical"
    );
}

#[test]
fn result_statuses_parse_and_count() {
    for status in ResultStatus::ALL {
        assert_eq!(status.as_str().parse(), Ok(status));
        assert_eq!(
            serde_json::to_value(status).unwrap(),
            json!(status.to_string())
        );
    }
    assert!("passed".parse::<ResultStatus>().is_err());

    let results: Vec<ReportResult> = [
        Some(ResultStatus::Fail),
        Some(ResultStatus::Fail),
        Some(ResultStatus::Pass),
        None,
        Some(ResultStatus::Error),
    ]
    .into_iter()
    .map(|result| ReportResult {
        policy: "p".into(),
        result,
        ..Default::default()
    })
    .collect();
    let summary = ReportSummary::of(&results);
    assert_eq!(
        summary,
        ReportSummary {
            pass: 1,
            fail: 2,
            warn: 0,
            error: 1,
            skip: 0
        }
    );
    let counts: BTreeMap<ResultStatus, i64> = ResultStatus::ALL
        .into_iter()
        .map(|s| (s, summary.count(s)))
        .collect();
    assert_eq!(counts.values().sum::<i64>(), 4);
}

#[test]
fn timestamps_count_nanos_forward() {
    let after = UNIX_EPOCH + Duration::new(1_767_225_600, 5);
    assert_eq!(
        Timestamp::from(after),
        Timestamp {
            seconds: 1_767_225_600,
            nanos: 5
        }
    );
    // 1.25 s before the epoch: -2 s + 0.75 s.
    let before = UNIX_EPOCH - Duration::from_millis(1250);
    assert_eq!(
        Timestamp::from(before),
        Timestamp {
            seconds: -2,
            nanos: 750_000_000
        }
    );
    assert_eq!(
        Timestamp::from(UNIX_EPOCH - Duration::from_secs(3)),
        Timestamp {
            seconds: -3,
            nanos: 0
        }
    );
    assert!(Timestamp::now().seconds > 1_700_000_000);
    assert_eq!(
        serde_json::to_value(Timestamp::default()).unwrap(),
        json!({"seconds": 0, "nanos": 0}),
        "both always written: OpenReports' schema requires both"
    );
}
