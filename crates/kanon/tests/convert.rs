//! `kanon convert` end to end: the converted policies decide what the originals decide.
//!
//! The corpus (`tests/convert/policies`) holds ValidatingAdmissionPolicies and
//! MutatingAdmissionPolicies with their bindings; `kanon apply -o json` runs once with them and
//! once with what `kanon convert` makes of them, on the same resources (`tests/convert/resources`:
//! plain objects, created, and AdmissionReviews: updates, a subresource, deletes) in the same
//! namespaces (`tests/convert/context`). Per resource: the same verdict, the same patch and the
//! same patched object, as many messages and warnings, and each kanon message ends with the
//! text kube-apiserver's wording gives after `denied request: `.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/convert")
}

fn kanon(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kanon"))
        .current_dir(fixtures())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the kanon binary runs");
    let mut input = child.stdin.take().expect("stdin");
    input
        .write_all(stdin.unwrap_or_default().as_bytes())
        .expect("write stdin");
    drop(input);
    child.wait_with_output().expect("kanon finishes")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `kanon convert ARGS`, which must succeed; its standard output.
fn convert(args: &[&str], stdin: Option<&str>) -> String {
    let mut all = vec!["convert"];
    all.extend_from_slice(args);
    let out = kanon(&all, stdin);
    assert_eq!(
        out.status.code(),
        Some(0),
        "kanon convert {args:?} failed: {}",
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// `kanon apply -o json` of the corpus's resources under `policies`.
fn apply(policies: &Path) -> Vec<Value> {
    let policies = policies.to_str().expect("a UTF-8 path");
    let out = kanon(
        &[
            "apply",
            "-o",
            "json",
            "-p",
            policies,
            "-r",
            "resources",
            "-c",
            "context",
        ],
        None,
    );
    // 1: some resource is denied, which the corpus means.
    assert_eq!(
        out.status.code(),
        Some(1),
        "kanon apply -p {policies}: {}",
        text(&out.stderr)
    );
    let verdicts: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is JSON ({e}); stderr: {}", text(&out.stderr)));
    verdicts.as_array().expect("a JSON array").clone()
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .expect("a list")
        .iter()
        .map(|s| s.as_str().expect("a string").to_owned())
        .collect()
}

/// The text after kube-apiserver's words: `... denied request: <text>` and
/// `Validation failed for ... '<binding>': <text>`.
fn original_text<'a>(message: &'a str, marker: &str) -> &'a str {
    message
        .split_once(marker)
        .unwrap_or_else(|| panic!("`{message}` has no `{marker}`"))
        .1
}

/// Pairs each original text with a kanon message that ends with it (each used once).
fn assert_paired(resource: &str, originals: &[&str], converted: &[String]) {
    assert_eq!(
        originals.len(),
        converted.len(),
        "{resource}: {originals:?} against {converted:?}"
    );
    let mut left: Vec<&String> = converted.iter().collect();
    for original in originals {
        let at = left
            .iter()
            .position(|m| m.ends_with(&format!(": {original}")))
            .unwrap_or_else(|| {
                panic!("{resource}: no kanon message ends with `{original}` among {left:?}")
            });
        left.remove(at);
    }
}

const IGNORED: &str = ": skipped (failurePolicy Ignore): ";

#[test]
fn converted_policies_decide_as_the_originals() {
    let yaml = convert(&["-f", "policies"], None);
    assert!(yaml.starts_with("# Converted by `kanon convert`"), "{yaml}");
    assert!(yaml.contains("denied request: <message>"), "{yaml}");
    let dir = tempfile::tempdir().expect("temp dir");
    let converted = dir.path().join("converted.yaml");
    std::fs::write(&converted, &yaml).expect("write the converted policies");

    let originals = apply(&fixtures().join("policies"));
    let kanons = apply(&converted);
    assert_eq!(originals.len(), kanons.len());
    assert!(originals.len() >= 25, "{}", originals.len());

    let (mut denied, mut warned, mut patched) = (0, 0, 0);
    for (original, kanon) in originals.iter().zip(&kanons) {
        let name = format!(
            "{} {}/{}",
            original["operation"],
            original["resource"]["kind"].as_str().unwrap_or_default(),
            original["resource"]["name"].as_str().unwrap_or_default()
        );
        assert_eq!(original["resource"], kanon["resource"], "{name}");
        assert_eq!(original["operation"], kanon["operation"], "{name}");
        assert_eq!(original["allowed"], kanon["allowed"], "{name}");
        assert_eq!(original["patch"], kanon["patch"], "{name}");
        assert_eq!(original["patched"], kanon["patched"], "{name}");

        let messages = strings(&original["messages"]);
        let texts: Vec<&str> = messages
            .iter()
            .map(|m| original_text(m, " denied request: "))
            .collect();
        assert_paired(&name, &texts, &strings(&kanon["messages"]));

        let warnings = strings(&original["warnings"]);
        let texts: Vec<&str> = warnings
            .iter()
            .map(|m| {
                assert!(m.starts_with("Validation failed for "), "{name}: {m}");
                original_text(m, "': ")
            })
            .collect();
        // kanon warns about an error it ignores (failurePolicy Ignore), kube-apiserver does
        // not: the one difference, said in the converted policy's comment.
        let (ignored, kanon_warnings): (Vec<String>, Vec<String>) = strings(&kanon["warnings"])
            .into_iter()
            .partition(|w| w.contains(IGNORED));
        for warning in &ignored {
            assert!(
                warning.starts_with("ClusterValidatePolicy/strict-mode-audit: "),
                "{name}: {warning}"
            );
        }
        assert_paired(&name, &texts, &kanon_warnings);

        denied += usize::from(original["allowed"] == false);
        warned += usize::from(!warnings.is_empty());
        patched += usize::from(!original["patch"].as_array().expect("patch").is_empty());
    }
    // The corpus is not vacuous: it denies, warns and patches.
    assert!(denied >= 8, "{denied} denied");
    assert!(warned >= 5, "{warned} warned");
    assert!(patched >= 3, "{patched} patched");
    assert!(
        yaml.contains("failurePolicy Ignore: an expression that fails to evaluate is ignored"),
        "{yaml}"
    );

    // Verdicts the corpus was written for, so that the comparison is not of two empty runs.
    let verdict = |verdicts: &[Value], operation: &str, name: &str| -> Value {
        verdicts
            .iter()
            .find(|v| v["operation"] == operation && v["resource"]["name"] == name)
            .unwrap_or_else(|| panic!("no verdict for {operation} {name}"))
            .clone()
    };
    for (operation, name, allowed) in [
        // require-team/prod: the policy's and the binding's namespace selectors.
        ("CREATE", "web-a", false),
        ("CREATE", "web-d", true),
        // The old object's labels meet the object selector on UPDATE.
        ("UPDATE", "relabel", false),
        // pods/status: only the subresource rule.
        ("UPDATE", "web-status", false),
        ("DELETE", "protected", false),
        ("DELETE", "scratch", true),
        ("UPDATE", "prod", false),
        ("CREATE", "big", false),
        ("CREATE", "big-unmanaged", true),
        ("CREATE", "db", false),
        ("CREATE", "creds", false),
    ] {
        assert_eq!(
            verdict(&kanons, operation, name)["allowed"],
            allowed,
            "{operation} {name}"
        );
    }
    let web_c = verdict(&kanons, "CREATE", "web-c");
    assert_eq!(web_c["warnings"].as_array().map(Vec::len), Some(2));
    assert_eq!(web_c["patched"]["metadata"]["labels"]["env"], "staging");
    let relabelled = verdict(&kanons, "UPDATE", "relabelled");
    assert_eq!(relabelled["patched"]["spec"]["replicas"], 2);
    let pinned = verdict(&kanons, "CREATE", "pinned");
    assert_eq!(pinned["patch"], json!([]));
}

/// The converted policies as a JSON list (`-o json`), the manifests read from standard input.
fn converted_json(file: &str) -> Vec<Value> {
    let manifests =
        std::fs::read_to_string(fixtures().join("policies").join(file)).expect("read the fixture");
    let out = convert(&["-o", "json", "-f", "-"], Some(&manifests));
    let list: Value = serde_json::from_str(&out).expect("a JSON list");
    list.as_array().expect("a JSON list").clone()
}

fn conditions(rule: &Value) -> Vec<(String, String)> {
    rule["cel"]["matchConditions"]
        .as_array()
        .expect("match conditions")
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap_or_default().to_owned(),
                c["expression"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

#[test]
fn one_policy_per_binding_with_merged_namespace_selectors() {
    let policies = converted_json("01-require-team.yaml");
    assert_eq!(policies.len(), 2);
    let prod = &policies[0];
    assert_eq!(prod["apiVersion"], "policy.kanon.dev/v1alpha1");
    assert_eq!(prod["kind"], "ClusterValidatePolicy");
    assert_eq!(prod["metadata"]["name"], "require-team-prod");
    assert_eq!(policies[1]["metadata"]["name"], "require-team-staging");
    let spec = &prod["spec"];
    assert_eq!(
        spec["resourceSelectors"],
        json!([{"apiVersion": "v1", "kind": "Pod"}])
    );
    assert_eq!(spec["failurePolicy"], "Fail");
    assert_eq!(spec["validationActions"], json!(["Deny"]));
    assert_eq!(policies[1]["spec"]["validationActions"], json!(["Warn"]));
    // The policy's requirement and the binding's, on the one namespace selector.
    assert_eq!(
        spec["namespaceSelector"],
        json!({
            "matchLabels": {"env": "prod"},
            "matchExpressions": [
                {"key": "env", "operator": "In", "values": ["prod", "staging"]},
                {"key": "tier", "operator": "NotIn", "values": ["legacy"]}
            ]
        })
    );
    let rule = &spec["validateRules"][0];
    assert_eq!(rule["targetOperations"], json!(["CREATE", "UPDATE"]));
    let names: Vec<String> = conditions(rule).into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        [
            "kanon-convert-no-subresource",
            "kanon-convert-object-selector"
        ]
    );
    // The validations are copied as written.
    assert_eq!(
        rule["cel"]["validations"],
        json!([{
            "expression": "has(object.metadata.labels) && 'team' in object.metadata.labels",
            "messageExpression": "'pod ' + object.metadata.name + ' has no team label'"
        }])
    );
}

#[test]
fn an_object_selector_without_updates_is_a_label_selector() {
    let policies = converted_json("02-replicas-limit.yaml");
    let policy = &policies[0];
    // The binding has the policy's name.
    assert_eq!(policy["metadata"]["name"], "replicas-limit");
    let labels = json!({"matchLabels": {"managed": "true"}});
    assert_eq!(
        policy["spec"]["resourceSelectors"],
        json!([
            {"apiVersion": "apps/v1", "kind": "Deployment", "labelSelector": labels},
            {"apiVersion": "apps/v1", "kind": "StatefulSet", "labelSelector": labels},
        ])
    );
    let rule = &policy["spec"]["validateRules"][0];
    assert_eq!(rule["targetOperations"], json!(["CREATE"]));
    assert_eq!(
        conditions(rule),
        [(
            "kanon-convert-no-subresource".to_owned(),
            "request.?subResource.orValue('') == ''".to_owned()
        )]
    );
    assert_eq!(rule["cel"]["variables"][0]["name"], "replicas");
}

#[test]
fn wildcards_and_the_bindings_rules_are_match_conditions() {
    let policies = converted_json("05-owner-label.yaml");
    let spec = &policies[0]["spec"];
    // apiGroups `*`: any kind, narrowed to the kinds of the binding's rules.
    assert_eq!(
        spec["resourceSelectors"],
        json!([
            {"apiVersion": "v1", "kind": "ConfigMap"},
            {"apiVersion": "v1", "kind": "Namespace"},
        ])
    );
    let rule = &spec["validateRules"][0];
    assert_eq!(rule["targetOperations"], json!(["CREATE"]));
    let conditions = conditions(rule);
    let names: Vec<&str> = conditions.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "kanon-convert-resource-rules",
            "kanon-convert-binding-resource-rules",
            "kanon-convert-binding-exclude-resource-rules"
        ]
    );
    assert!(conditions[2].1.contains("['exempt']"), "{conditions:?}");

    let subresource = converted_json("07-pod-status.yaml");
    let spec = &subresource[0]["spec"];
    assert!(spec.get("resourceSelectors").is_none(), "{spec}");
    let conditions = self::conditions(&spec["validateRules"][0]);
    assert!(
        conditions[0]
            .1
            .contains("request.?subResource.orValue('') == 'status'"),
        "{conditions:?}"
    );

    let mutating = converted_json("08-env-label.yaml");
    let policy = &mutating[0];
    assert_eq!(policy["kind"], "ClusterOverridePolicy");
    assert_eq!(policy["metadata"]["name"], "env-label-not-legacy");
    let rule = &policy["spec"]["overrideRules"][0];
    assert_eq!(rule["targetOperations"], json!(["CREATE"]));
    let cel = &rule["overriders"]["cel"];
    assert_eq!(cel["mutations"][0]["patchType"], "JSONPatch");
    assert_eq!(cel["variables"][0]["name"], "env");
    assert_eq!(
        cel["matchConditions"].as_array().map(|c| c.last().cloned()),
        Some(Some(
            json!({"name": "not-set", "expression": "!('env' in object.metadata.labels)"})
        ))
    );
}

/// `kanon convert -f PATH`, which must be refused (exit 2); its standard error.
fn refused(path: &str) -> String {
    let out = kanon(&["convert", "-f", path], None);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{path}: stdout {}",
        text(&out.stdout)
    );
    assert!(out.stdout.is_empty(), "{path}: {}", text(&out.stdout));
    text(&out.stderr)
}

#[test]
fn params_are_refused_by_field() {
    let stderr = refused("refused/params.yaml");
    assert!(
        stderr.contains(
            "ValidatingAdmissionPolicy/max-replicas: spec.paramKind: cannot be converted"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "ValidatingAdmissionPolicyBinding/max-replicas: spec.paramRef: cannot be converted"
        ),
        "{stderr}"
    );
    assert!(stderr.contains("through `references`"), "{stderr}");
}

#[test]
fn a_policy_without_binding_and_a_binding_without_policy_are_refused() {
    let stderr = refused("refused/no-binding.yaml");
    assert!(
        stderr.contains("ValidatingAdmissionPolicy/lonely is invalid:\n  no ValidatingAdmissionPolicyBinding among the documents names it"),
        "{stderr}"
    );
    let stderr = refused("refused/no-policy.yaml");
    assert!(
        stderr.contains("MutatingAdmissionPolicyBinding/orphan is invalid:\n  spec.policyName: no MutatingAdmissionPolicy named `not-given`"),
        "{stderr}"
    );
    // kanon's own kinds are not converted.
    let stderr = refused("context/namespaces.yaml");
    assert!(
        stderr.contains("v1 Namespace is not a ValidatingAdmissionPolicy"),
        "{stderr}"
    );
}

#[test]
fn help_says_how_the_wording_differs() {
    let out = kanon(&["convert", "--help"], None);
    assert_eq!(out.status.code(), Some(0));
    let help = text(&out.stdout);
    assert!(
        help.contains("ClusterValidatePolicy/<name>: <message>"),
        "{help}"
    );
    assert!(help.contains("denied request"), "{help}");
}
