//! The CRD manifests: the committed copies are exactly what the types generate (kanon's own and,
//! in their `openreports/` subfolders, the OpenReports ones), every schema is structural (the
//! apiserver rejects anything else at apply time, and kube does not check), and the CRDs have
//! the shape the policy API promises (kinds, scopes, names, closed enums and the kinitiras
//! compatibility fields). The OpenReports CRDs' own shape is checked in `reports.rs`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{Value, json};

/// Folders that hold a copy of every CRD of kanon's kinds, relative to the repository root (as
/// in xtask).
const CRD_DIRS: [&str; 2] = ["crds", "charts/kanon/crds"];

/// The subfolder of each [`CRD_DIRS`] folder that holds the OpenReports CRDs (as in xtask).
const REPORT_CRD_SUBDIR: &str = "openreports";

const REGENERATE: &str = "run `cargo xtask crds` to regenerate them";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The generated CRDs, generated once per test binary (schema generation is not cheap).
fn crds() -> &'static [CustomResourceDefinition] {
    static CRDS: OnceLock<Vec<CustomResourceDefinition>> = OnceLock::new();
    CRDS.get_or_init(kanon_api::crds)
}

/// The generated OpenReports CRDs.
fn report_crds() -> &'static [CustomResourceDefinition] {
    static CRDS: OnceLock<Vec<CustomResourceDefinition>> = OnceLock::new();
    CRDS.get_or_init(kanon_api::report_crds)
}

/// Every folder of generated CRDs: its path, the CRDs it holds and the subfolders it may have.
fn crd_folders() -> Vec<(
    String,
    &'static [CustomResourceDefinition],
    &'static [&'static str],
)> {
    CRD_DIRS
        .iter()
        .flat_map(|dir| {
            [
                (dir.to_string(), crds(), &[REPORT_CRD_SUBDIR][..]),
                (format!("{dir}/{REPORT_CRD_SUBDIR}"), report_crds(), &[][..]),
            ]
        })
        .collect()
}

/// The `openAPIV3Schema` of one kind (kanon's or an OpenReports one), as JSON.
fn schema(kind: &str) -> Value {
    let crd = crds()
        .iter()
        .chain(report_crds())
        .find(|c| c.spec.names.kind == kind)
        .unwrap_or_else(|| panic!("kanon_api::crds() and report_crds() have no {kind}"));
    let crd = serde_json::to_value(crd).expect("a CRD serializes to JSON");
    crd.pointer("/spec/versions/0/schema/openAPIV3Schema")
        .cloned()
        .unwrap_or_else(|| panic!("{kind} has no openAPIV3Schema"))
}

/// The schema node at `path`: dot-separated property names, each followed by `[]` for the
/// array's items or `{}` for a map's values (`spec.overrideRules[].overriders.plaintext[].op`).
fn node<'a>(schema: &'a Value, path: &str) -> &'a Value {
    let mut cur = schema;
    for segment in path.split('.') {
        let name = segment.trim_end_matches(['[', ']', '{', '}']);
        cur = cur
            .get("properties")
            .and_then(|p| p.get(name))
            .unwrap_or_else(|| panic!("schema has no property `{name}` on the way to `{path}`"));
        let mut suffix = &segment[name.len()..];
        while !suffix.is_empty() {
            let key = if suffix.starts_with("[]") {
                "items"
            } else if suffix.starts_with("{}") {
                "additionalProperties"
            } else {
                panic!("bad path segment `{segment}` in `{path}`");
            };
            cur = cur
                .get(key)
                .filter(|v| v.is_object())
                .unwrap_or_else(|| panic!("schema node `{name}` in `{path}` has no `{key}`"));
            suffix = &suffix[2..];
        }
    }
    cur
}

// ---------------------------------------------------------------------------------------------
// Committed files
// ---------------------------------------------------------------------------------------------

/// The first line (1-based) where two texts differ, with both versions of it.
fn first_difference(committed: &str, generated: &str) -> String {
    let mut committed_lines = committed.lines();
    let mut generated_lines = generated.lines();
    for line in 1.. {
        match (committed_lines.next(), generated_lines.next()) {
            (Some(c), Some(g)) if c == g => continue,
            (None, None) => return "only in line endings or a trailing newline".to_string(),
            (c, g) => {
                return format!(
                    "first difference at line {line}: committed {:?}, generated {:?}",
                    c.unwrap_or("<end of file>"),
                    g.unwrap_or("<end of file>")
                );
            }
        }
    }
    unreachable!()
}

#[test]
fn committed_crds_match_generated() {
    let root = repo_root();
    let mut problems = Vec::new();
    for (dir, generated, subfolders) in crd_folders() {
        let mut expected = BTreeMap::new();
        for crd in generated {
            let yaml = kanon_api::crds_yaml(crd).expect("a CRD serializes to YAML");
            expected.insert(kanon_api::crd_file_name(crd), yaml);
        }
        assert_eq!(
            expected.len(),
            generated.len(),
            "{dir}: CRDs with distinct file names"
        );
        let dir_path = root.join(&dir);
        for (name, yaml) in &expected {
            let path = dir_path.join(name);
            match std::fs::read_to_string(&path) {
                Ok(committed) if committed == *yaml => {}
                Ok(committed) => problems.push(format!(
                    "{dir}/{name} is out of date ({})",
                    first_difference(&committed, yaml)
                )),
                Err(e) => problems.push(format!("{dir}/{name} is missing or unreadable: {e}")),
            }
        }
        // Nothing but the generated CRDs may live there: Helm installs every file of the
        // chart's crds/ folder (subfolders included), and crds/ is what users `kubectl apply`.
        if let Ok(entries) = std::fs::read_dir(&dir_path) {
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                let subfolder = subfolders.contains(&name.as_str())
                    && entry.file_type().is_ok_and(|t| t.is_dir());
                if expected.contains_key(&name) || subfolder {
                    continue;
                }
                if name.ends_with(".yaml") {
                    problems.push(format!(
                        "{dir}/{name} is not generated by kanon-api (`cargo xtask crds` removes it)"
                    ));
                } else {
                    problems.push(format!(
                        "{dir}/{name} is not a generated CRD; only generated CRDs belong in {dir}/ \
                         (delete it by hand)"
                    ));
                }
            }
        }
    }
    assert!(
        problems.is_empty(),
        "the committed CRDs differ from the ones the kanon-api types generate; {REGENERATE}:\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn committed_crds_round_trip_through_yaml() {
    let root = repo_root();
    for (dir, crds, _) in crd_folders() {
        for generated in crds {
            let name = kanon_api::crd_file_name(generated);
            let path = root.join(&dir).join(&name);
            let Ok(text) = std::fs::read_to_string(&path) else {
                // Missing files are reported by `committed_crds_match_generated`.
                continue;
            };
            let parsed: CustomResourceDefinition = serde_saphyr::from_str(&text)
                .unwrap_or_else(|e| panic!("{dir}/{name} does not parse as a CRD: {e}"));
            assert!(
                parsed == *generated,
                "{dir}/{name} parses to a different CRD than the types generate; {REGENERATE}"
            );
            // And the parsed value serializes back to the same text: nothing was lost.
            let again = kanon_api::crds_yaml(&parsed).expect("a CRD serializes to YAML");
            assert!(
                again == text,
                "{dir}/{name} does not survive parse and print"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Structural-schema lint
// ---------------------------------------------------------------------------------------------

/// Keys a structural schema must not set inside `allOf`, `anyOf`, `oneOf` or `not`.
const FORBIDDEN_IN_JUNCTORS: [&str; 5] = [
    "type",
    "description",
    "default",
    "nullable",
    "additionalProperties",
];
const JUNCTORS: [&str; 4] = ["allOf", "anyOf", "oneOf", "not"];

fn is_true(obj: &serde_json::Map<String, Value>, key: &str) -> bool {
    obj.get(key) == Some(&Value::Bool(true))
}

/// The branches of a junctor: `not` holds one schema, the others a list.
fn junctor_branches(value: &Value) -> Vec<&Value> {
    match value {
        Value::Array(branches) => branches.iter().collect(),
        other => vec![other],
    }
}

/// Appends `path: problem` for every way `schema` is not a structural schema
/// (<https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/#specifying-a-structural-schema>).
///
/// Walks `properties`, `items` and `additionalProperties`.
fn lint_structural(schema: &Value, path: &str, out: &mut Vec<String>) {
    let Some(obj) = schema.as_object() else {
        out.push(format!("{path}: schema is not an object"));
        return;
    };
    let preserve = is_true(obj, "x-kubernetes-preserve-unknown-fields");
    let int_or_string = is_true(obj, "x-kubernetes-int-or-string");
    match obj.get("type") {
        Some(Value::String(t)) if !t.is_empty() => {}
        Some(other) => out.push(format!(
            "{path}: `type` must be a non-empty string, is {other}"
        )),
        None if preserve || int_or_string => {}
        None => out.push(format!(
            "{path}: no `type` (and neither x-kubernetes-preserve-unknown-fields: true nor \
             x-kubernetes-int-or-string: true)"
        )),
    }
    match obj.get("additionalProperties") {
        None => {}
        Some(Value::Bool(false)) => out.push(format!("{path}: additionalProperties: false")),
        Some(_) if obj.contains_key("properties") => {
            out.push(format!("{path}: both properties and additionalProperties"));
        }
        Some(Value::Bool(true)) => {}
        Some(ap) => lint_structural(ap, &format!("{path}{{}}"), out),
    }
    if let Some(props) = obj.get("properties") {
        match props.as_object() {
            Some(props) => {
                for (name, sub) in props {
                    lint_structural(sub, &format!("{path}.{name}"), out);
                }
            }
            None => out.push(format!("{path}: properties is not an object")),
        }
    }
    if let Some(items) = obj.get("items") {
        if items.is_object() {
            lint_structural(items, &format!("{path}[]"), out);
        } else {
            out.push(format!("{path}: items must be a single schema, is {items}"));
        }
    }
    for junctor in JUNCTORS {
        if let Some(value) = obj.get(junctor) {
            for (i, branch) in junctor_branches(value).into_iter().enumerate() {
                lint_junctor_branch(obj, branch, &format!("{path}:{junctor}[{i}]"), out);
            }
        }
    }
}

/// A branch of a junctor may only carry value validations (required, enum, pattern, ...), and
/// only for fields and items that the node itself already specifies outside the junctor.
fn lint_junctor_branch(
    outer: &serde_json::Map<String, Value>,
    branch: &Value,
    path: &str,
    out: &mut Vec<String>,
) {
    let Some(obj) = branch.as_object() else {
        out.push(format!("{path}: branch is not an object"));
        return;
    };
    // The one exception: `anyOf: [{type: integer}, {type: string}]` under int-or-string.
    let int_or_string_pattern = is_true(outer, "x-kubernetes-int-or-string")
        && obj.len() == 1
        && matches!(
            obj.get("type").and_then(Value::as_str),
            Some("integer" | "string")
        );
    for key in FORBIDDEN_IN_JUNCTORS {
        if obj.contains_key(key) && !int_or_string_pattern {
            out.push(format!("{path}: `{key}` inside a junctor"));
        }
    }
    if let Some(props) = obj.get("properties").and_then(Value::as_object) {
        let outer_props = outer.get("properties").and_then(Value::as_object);
        for name in props.keys() {
            if !outer_props.is_some_and(|p| p.contains_key(name)) {
                out.push(format!(
                    "{path}: property `{name}` inside a junctor but not outside it"
                ));
            }
        }
    }
    if obj.contains_key("items") && !outer.contains_key("items") {
        out.push(format!("{path}: items inside a junctor but not outside it"));
    }
    // The sub-schemas of a branch obey the same restrictions, against the matching sub-schema
    // outside the junctor; so do nested junctors.
    let empty = serde_json::Map::new();
    let outer_sub = |key: &str, name: Option<&str>| {
        let sub = outer.get(key);
        let sub = match name {
            Some(name) => sub.and_then(|p| p.get(name)),
            None => sub,
        };
        sub.and_then(Value::as_object).unwrap_or(&empty)
    };
    if let Some(props) = obj.get("properties").and_then(Value::as_object) {
        for (name, sub) in props {
            let outer = outer_sub("properties", Some(name));
            lint_junctor_branch(outer, sub, &format!("{path}.{name}"), out);
        }
    }
    if let Some(items) = obj.get("items") {
        lint_junctor_branch(outer_sub("items", None), items, &format!("{path}[]"), out);
    }
    for junctor in JUNCTORS {
        if let Some(value) = obj.get(junctor) {
            for (i, b) in junctor_branches(value).into_iter().enumerate() {
                lint_junctor_branch(outer, b, &format!("{path}:{junctor}[{i}]"), out);
            }
        }
    }
}

/// The root-level rules: an object, and `metadata` restricted to name and generateName.
fn lint_root(schema: &Value, out: &mut Vec<String>) {
    if schema.get("type").and_then(Value::as_str) != Some("object") {
        out.push("<root>: type must be object".to_string());
    }
    if let Some(metadata) = schema
        .pointer("/properties/metadata")
        .and_then(Value::as_object)
    {
        for (key, value) in metadata {
            match key.as_str() {
                "type" if value == "object" => {}
                "properties" => {
                    for name in value.as_object().into_iter().flat_map(|p| p.keys()) {
                        if name != "name" && name != "generateName" {
                            out.push(format!(
                                "metadata.{name}: only name and generateName may be restricted"
                            ));
                        }
                    }
                }
                _ => out.push(format!("metadata: `{key}` is not allowed")),
            }
        }
    }
}

fn structural_problems(schema: &Value) -> Vec<String> {
    let mut out = Vec::new();
    lint_root(schema, &mut out);
    lint_structural(schema, "", &mut out);
    out
}

#[test]
fn every_crd_schema_is_structural() {
    let mut problems = Vec::new();
    for crd in crds().iter().chain(report_crds()) {
        let kind = &crd.spec.names.kind;
        for p in structural_problems(&schema(kind)) {
            problems.push(format!("{kind} {p}"));
        }
    }
    assert!(
        problems.is_empty(),
        "non-structural CRD schemas (the apiserver rejects them); give the field a `type`, or a \
         `schema_with` returning x-kubernetes-preserve-unknown-fields or \
         x-kubernetes-int-or-string:\n  {}",
        problems.join("\n  ")
    );
}

/// The lint itself catches what it claims to, and reports every path at once.
#[test]
fn structural_lint_reports_every_offending_path() {
    let bad = json!({
        "type": "object",
        "properties": {
            "metadata": {"type": "object", "properties": {"labels": {"type": "object"}}},
            "spec": {
                "type": "object",
                "properties": {
                    "raw": {"description": "a bare serde_json::Value"},
                    "list": {"type": "array", "items": {"format": "int64"}},
                    "map": {"type": "object", "additionalProperties": {"nullable": true}},
                    "closed": {"type": "object", "additionalProperties": false},
                    "both": {
                        "type": "object",
                        "properties": {"a": {"type": "string"}},
                        "additionalProperties": {"type": "string"}
                    },
                    "untagged": {"anyOf": [{"type": "integer", "format": "int64"}, {}]},
                    "tagged": {
                        "type": "object",
                        "properties": {"a": {"type": "string"}},
                        "oneOf": [
                            {"required": ["a"]},
                            {"properties": {"b": {"type": "string"}}}
                        ]
                    },
                    "any": {"x-kubernetes-preserve-unknown-fields": true},
                    "quantity": {
                        "x-kubernetes-int-or-string": true,
                        "anyOf": [{"type": "integer"}, {"type": "string"}]
                    }
                }
            }
        }
    });
    let problems = structural_problems(&bad);
    let expected = [
        "metadata.labels: only name and generateName may be restricted",
        ".spec.raw: no `type`",
        ".spec.list[]: no `type`",
        ".spec.map{}: no `type`",
        ".spec.closed: additionalProperties: false",
        ".spec.both: both properties and additionalProperties",
        ".spec.untagged: no `type`",
        ".spec.untagged:anyOf[0]: `type` inside a junctor",
        ".spec.tagged:oneOf[1]: property `b` inside a junctor but not outside it",
        ".spec.tagged:oneOf[1].b: `type` inside a junctor",
    ];
    for e in expected {
        assert!(
            problems.iter().any(|p| p.starts_with(e)),
            "lint misses `{e}`; it reported:\n  {}",
            problems.join("\n  ")
        );
    }
    assert_eq!(
        problems.len(),
        expected.len(),
        "unexpected reports:\n  {}",
        problems.join("\n  ")
    );
}

// ---------------------------------------------------------------------------------------------
// Shape
// ---------------------------------------------------------------------------------------------

#[test]
fn five_kinds_with_scopes_names_and_versions() {
    let expected = [
        (
            "ClusterOverridePolicy",
            "clusteroverridepolicies",
            "cop",
            "Cluster",
        ),
        ("OverridePolicy", "overridepolicies", "op", "Namespaced"),
        (
            "ClusterValidatePolicy",
            "clustervalidatepolicies",
            "cvp",
            "Cluster",
        ),
        ("ValidatePolicy", "validatepolicies", "vp", "Namespaced"),
        ("PolicyException", "policyexceptions", "kex", "Namespaced"),
    ];
    let crds = crds();
    let kinds: Vec<&str> = crds.iter().map(|c| c.spec.names.kind.as_str()).collect();
    assert_eq!(
        kinds,
        expected.map(|e| e.0),
        "kanon_api::crds() must list the four policy kinds in PolicyKind::ALL order, then PolicyException"
    );
    for (crd, (kind, plural, short, scope)) in crds.iter().zip(expected) {
        let names = &crd.spec.names;
        assert_eq!(crd.spec.group, kanon_api::GROUP, "{kind}: group");
        assert_eq!(
            crd.metadata.name.as_deref(),
            Some(format!("{plural}.{}", kanon_api::GROUP).as_str()),
            "{kind}: metadata.name"
        );
        assert_eq!(names.plural, plural, "{kind}: plural");
        let policy_kind = kanon_api::PolicyKind::from_kind(kind);
        assert_eq!(
            policy_kind
                .map(|k| k.plural())
                .unwrap_or("policyexceptions"),
            plural,
            "{kind}: PolicyKind::plural"
        );
        assert_eq!(
            names.singular.as_deref(),
            Some(kind.to_lowercase().as_str()),
            "{kind}: singular"
        );
        assert_eq!(
            names.short_names.as_deref(),
            Some(&[short.to_string()][..]),
            "{kind}: shortNames"
        );
        assert_eq!(
            names.categories.as_deref(),
            Some(&["kanon".to_string()][..]),
            "{kind}: categories"
        );
        assert_eq!(crd.spec.scope, scope, "{kind}: scope");
        assert_eq!(
            policy_kind.is_none_or(|k| k.is_namespaced()),
            scope == "Namespaced",
            "{kind}: PolicyKind::is_namespaced"
        );
        assert_eq!(
            kanon_api::crd_file_name(crd),
            format!("policy.kanon.dev_{plural}.yaml"),
            "{kind}: file name"
        );

        assert_eq!(crd.spec.versions.len(), 1, "{kind}: one version");
        let version = &crd.spec.versions[0];
        assert_eq!(version.name, kanon_api::VERSION, "{kind}: version");
        assert!(
            version.served && version.storage,
            "{kind}: served and stored"
        );
        assert_ne!(version.deprecated, Some(true), "{kind}: not deprecated");
    }
}

#[test]
fn status_subresource_and_printer_columns() {
    for crd in crds() {
        let kind = &crd.spec.names.kind;
        if kind == "PolicyException" {
            continue;
        }
        let version = &crd.spec.versions[0];
        let subresources = version.subresources.as_ref();
        assert!(
            subresources.is_some_and(|s| s.status.is_some()),
            "{kind}: status subresource"
        );
        assert!(
            subresources.is_some_and(|s| s.scale.is_none()),
            "{kind}: no scale subresource"
        );
        let columns: Vec<(&str, &str, &str)> = version
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| (c.name.as_str(), c.type_.as_str(), c.json_path.as_str()))
            .collect();
        assert_eq!(
            columns,
            [
                (
                    "Ready",
                    "string",
                    ".status.conditions[?(@.type==\"Ready\")].status"
                ),
                ("Age", "date", ".metadata.creationTimestamp"),
            ],
            "{kind}: printer columns"
        );
        // The status the columns read.
        let s = schema(kind);
        assert_eq!(node(&s, "status.conditions[].type")["type"], "string");
        assert_eq!(node(&s, "status.conditions[].status")["type"], "string");
        assert_eq!(node(&s, "status.observedGeneration")["type"], "integer");
        assert_eq!(
            node(&s, "status.renderedPrograms[].program")["type"],
            "string"
        );
    }
}

#[test]
fn a_policy_exception_shows_whether_it_is_ready_and_when_it_expires() {
    let crd = crds()
        .iter()
        .find(|c| c.spec.names.kind == "PolicyException")
        .expect("the PolicyException CRD");
    let version = &crd.spec.versions[0];
    assert!(
        version
            .subresources
            .as_ref()
            .is_some_and(|s| s.status.is_some())
    );
    let columns: Vec<&str> = version
        .additional_printer_columns
        .iter()
        .flatten()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(columns, ["Ready", "Expires", "Age"]);
    let s = schema("PolicyException");
    assert_eq!(node(&s, "spec.expiresAt")["format"], "date-time");
    assert_eq!(node(&s, "status.policies[]")["type"], "string");
    let required = node(&s, "spec")["required"].clone();
    assert_eq!(
        required,
        serde_json::json!(["policies", "reason", "resourceSelectors"])
    );
}

#[test]
fn top_level_descriptions_are_written_by_hand() {
    for crd in crds().iter().chain(report_crds()) {
        let kind = &crd.spec.names.kind;
        let description = schema(kind)["description"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(
            description.starts_with(kind.as_str()) && !description.contains("Auto-generated"),
            "{kind}: give the kind a `#[kube(doc = \"...\")]` (description is {description:?})"
        );
    }
}

/// Asserts the node at `path` is `type: string` with exactly the enum `values`.
fn assert_enum(schema: &Value, kind: &str, path: &str, values: &[&str]) {
    let n = node(schema, path);
    assert_eq!(n["type"], "string", "{kind} {path}: type");
    assert_eq!(n["enum"], json!(values), "{kind} {path}: enum");
}

const OVERRIDE_KINDS: [&str; 2] = ["ClusterOverridePolicy", "OverridePolicy"];
const VALIDATE_KINDS: [&str; 2] = ["ClusterValidatePolicy", "ValidatePolicy"];
const OPERATIONS: [&str; 5] = ["CREATE", "UPDATE", "DELETE", "CONNECT", "*"];
const REF_SOURCES: [&str; 5] = ["current", "old", "owner", "k8s", "http"];

#[test]
fn closed_enums_are_present() {
    for kind in OVERRIDE_KINDS.into_iter().chain(VALIDATE_KINDS) {
        let s = schema(kind);
        assert_enum(&s, kind, "spec.failurePolicy", &["Fail", "Ignore"]);
        assert_enum(
            &s,
            kind,
            "spec.resourceSelectors[].fieldSelector.matchExpressions[].operator",
            &["In", "NotIn", "Exists", "DoesNotExist"],
        );
    }
    for kind in OVERRIDE_KINDS {
        let s = schema(kind);
        assert_enum(
            &s,
            kind,
            "spec.overrideRules[].targetOperations[]",
            &OPERATIONS,
        );
        assert_enum(
            &s,
            kind,
            "spec.overrideRules[].overriders.plaintext[].op",
            &["add", "remove", "replace", "copy", "move", "test"],
        );
        assert_enum(
            &s,
            kind,
            "spec.overrideRules[].overriders.template.type",
            &[
                "annotations",
                "labels",
                "nodeSelector",
                "resources",
                "resourcesOversell",
                "tolerations",
                "affinity",
                "field",
            ],
        );
        assert_enum(
            &s,
            kind,
            "spec.overrideRules[].overriders.template.operation",
            &["add", "replace", "remove", "default"],
        );
        assert_enum(
            &s,
            kind,
            "spec.overrideRules[].overriders.template.within",
            &["object", "podSpec", "containers"],
        );
        assert_enum(
            &s,
            kind,
            "spec.overrideRules[].overriders.template.valueRef.http.method",
            &["GET", "POST"],
        );
    }
    for kind in VALIDATE_KINDS {
        let s = schema(kind);
        assert_enum(
            &s,
            kind,
            "spec.validateRules[].targetOperations[]",
            &OPERATIONS,
        );
        assert_enum(
            &s,
            kind,
            "spec.validationActions[]",
            &["Deny", "Warn", "Audit"],
        );
        assert_enum(
            &s,
            kind,
            "spec.validateRules[].template.type",
            &["condition"],
        );
        let condition = "spec.validateRules[].template.condition";
        assert_enum(
            &s,
            kind,
            &format!("{condition}.cond"),
            &[
                "Exist", "NotExist", "Equal", "NotEqual", "In", "NotIn", "Gt", "Gte", "Lt", "Lte",
                "Regex",
            ],
        );
        assert_enum(
            &s,
            kind,
            &format!("{condition}.affectMode"),
            &["reject", "allow"],
        );
        assert_enum(
            &s,
            kind,
            &format!("{condition}.valueProcess.operation"),
            &["+", "-", "*", "/"],
        );
        let operand = node(&s, &format!("{condition}.valueProcess.operationWith"));
        assert_eq!(
            operand["x-kubernetes-int-or-string"], true,
            "{kind}: valueProcess.operationWith is int-or-string"
        );
    }
}

/// Asserts the ConstantValue fields under `path` keep kinitiras' names and types.
fn assert_constant_value(schema: &Value, kind: &str, path: &str) {
    let v = node(schema, path);
    assert_eq!(v["type"], "object", "{kind} {path}: type");
    let field = |name: &str| node(v, name);
    assert_eq!(field("string")["type"], "string", "{kind} {path}.string");
    assert_eq!(field("integer")["type"], "integer", "{kind} {path}.integer");
    assert_eq!(
        field("float")["x-kubernetes-preserve-unknown-fields"],
        true,
        "{kind} {path}.float: a number or a string"
    );
    assert_eq!(field("boolean")["type"], "boolean", "{kind} {path}.boolean");
    assert_eq!(
        field("stringSlice[]")["type"],
        "string",
        "{kind} {path}.stringSlice"
    );
    assert_eq!(
        field("integerSlice[]")["type"],
        "integer",
        "{kind} {path}.integerSlice"
    );
    assert_eq!(
        field("floatSlice")["type"],
        "array",
        "{kind} {path}.floatSlice"
    );
    assert_eq!(
        field("stringMap{}")["type"],
        "string",
        "{kind} {path}.stringMap"
    );
    let mut names: Vec<&str> = v["properties"]
        .as_object()
        .map(|p| p.keys().map(String::as_str).collect())
        .unwrap_or_default();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "boolean",
            "float",
            "floatSlice",
            "integer",
            "integerSlice",
            "string",
            "stringMap",
            "stringSlice"
        ],
        "{kind} {path}: ConstantValue fields"
    );
}

/// Asserts the ResourceRefer under `path` has `from` with kinitiras' sources, `path`, `k8s` and
/// `http`.
fn assert_resource_refer(schema: &Value, kind: &str, path: &str) {
    assert_enum(schema, kind, &format!("{path}.from"), &REF_SOURCES);
    assert_eq!(node(schema, &format!("{path}.path"))["type"], "string");
    assert_eq!(
        node(schema, &format!("{path}.k8s.apiVersion"))["type"],
        "string"
    );
    assert_eq!(node(schema, &format!("{path}.http.url"))["type"], "string");
    let required = &node(schema, path)["required"];
    assert_eq!(*required, json!(["from"]), "{kind} {path}: required");
}

#[test]
fn kinitiras_compatibility_fields_exist() {
    for kind in OVERRIDE_KINDS.into_iter().chain(VALIDATE_KINDS) {
        let s = schema(kind);
        let expr = "spec.resourceSelectors[].fieldSelector.matchExpressions[]";
        // kinitiras spells the list `value`; kanon accepts it next to `values`.
        for list in ["value", "values"] {
            assert_eq!(
                node(&s, &format!("{expr}.{list}[]"))["type"],
                "string",
                "{kind} {expr}.{list}"
            );
        }
        assert_eq!(
            node(&s, "spec.resourceSelectors[].fieldSelector.matchFields{}")["type"],
            "string",
            "{kind}: fieldSelector.matchFields"
        );
    }
    for kind in OVERRIDE_KINDS {
        let s = schema(kind);
        let template = "spec.overrideRules[].overriders.template";
        assert_constant_value(&s, kind, &format!("{template}.value"));
        assert_resource_refer(&s, kind, &format!("{template}.valueRef"));
        for factor in ["cpuFactor", "memoryFactor", "diskFactor"] {
            let factor_node = node(&s, &format!("{template}.resourcesOversell.{factor}"));
            assert_eq!(
                factor_node["x-kubernetes-preserve-unknown-fields"], true,
                "{kind} resourcesOversell.{factor}: a number or a string"
            );
        }
    }
    for kind in VALIDATE_KINDS {
        let s = schema(kind);
        let condition = "spec.validateRules[].template.condition";
        assert_constant_value(&s, kind, &format!("{condition}.value"));
        assert_resource_refer(&s, kind, &format!("{condition}.dataRef"));
        assert_resource_refer(&s, kind, &format!("{condition}.valueRef"));
    }
}

#[test]
fn required_fields() {
    for kind in OVERRIDE_KINDS {
        let s = schema(kind);
        assert_eq!(s["required"], json!(["spec"]), "{kind}: spec required");
        assert_eq!(
            node(&s, "spec")["required"],
            json!(["overrideRules"]),
            "{kind}"
        );
        assert_eq!(
            node(&s, "spec.overrideRules[].overriders.plaintext[]")["required"],
            json!(["op", "path"]),
            "{kind}: plaintext"
        );
    }
    for kind in VALIDATE_KINDS {
        let s = schema(kind);
        assert_eq!(s["required"], json!(["spec"]), "{kind}: spec required");
        assert_eq!(
            node(&s, "spec")["required"],
            json!(["validateRules"]),
            "{kind}"
        );
        assert_eq!(
            node(&s, "spec.validateRules[].template.condition")["required"],
            json!(["cond", "dataRef"]),
            "{kind}: condition"
        );
    }
}
