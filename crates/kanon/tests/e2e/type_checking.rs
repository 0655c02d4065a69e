//! The warnings kanon gives a ValidatingAdmissionPolicy manifest against those
//! kube-controller-manager writes in its `status.typeChecking`: hand-picked policies (fields a
//! kind does not have, quantities, timestamps, lists of different places joined, several kinds,
//! params, variables, a schema's circle, more than ten kinds) and policies generated from a seed
//! by walking the kinds' schemas (real and misspelled fields, list items and map values, read
//! whole, optionally, compared with literals of every type, joined, converted) are applied to
//! the control plane; once the controller has checked each, kanon's warnings must be its
//! warnings, field by field and word for word (but for the nanosecond the controller appends to
//! each kind's type name). A policy the apiserver refuses must be refused by kanon too.
//!
//! `KANON_TYPE_CHECKING_CASES` generated policies (default 40) from `KANON_TYPE_CHECKING_SEED`
//! (default fixed).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kanon_schema::{Kinds, Shape};
use serde_json::{Value, json};

use crate::Scenario;
use crate::env::{Env, text};
use crate::random::{Random, setting};

pub const SCENARIOS: &[Scenario] = &[(
    "type_checking::kanon_warns_as_kube_controller_manager_writes_in_status",
    kanon_warns_as_kube_controller_manager_writes_in_status,
)];

const DEFAULT_SEED: u64 = 20_261_129;
const DEFAULT_CASES: usize = 40;
const PREFIX: &str = "typecheck-";

/// Literals of every type a field may be compared with.
const LITERALS: [&str; 12] = [
    "'a'",
    "1",
    "1u",
    "1.5",
    "true",
    "null",
    "timestamp('2020-01-01T00:00:00Z')",
    "duration('1s')",
    "b'x'",
    "[]",
    "{}",
    "['a']",
];

/// The resources the generator writes policies for: (group, resource, apiVersion, kind).
const RESOURCES: [(&str, &str, &str, &str); 6] = [
    ("", "pods", "v1", "Pod"),
    ("apps", "deployments", "apps/v1", "Deployment"),
    ("", "configmaps", "v1", "ConfigMap"),
    ("", "services", "v1", "Service"),
    ("batch", "cronjobs", "batch/v1", "CronJob"),
    ("", "namespaces", "v1", "Namespace"),
];

/// A path read from `object` by walking `kind`'s schema: the CEL text, its optional form
/// (`object.?spec.?containers[?0]`), and whether it ends in a field (so `has()` may test it).
struct Path {
    plain: String,
    optional: String,
    ends_in_field: bool,
}

fn walk(random: &mut Random, kinds: &Kinds, api_version: &str, kind: &str) -> Path {
    let known = kinds.kind(api_version, kind).expect("a built-in kind");
    let schema = known.schema;
    let mut ty = schema.root_type(known.kind).expect("a root type");
    let mut path = Path {
        plain: "object".into(),
        optional: "object".into(),
        ends_in_field: false,
    };
    for depth in 0..7 {
        if depth > 0 && random.chance(25) {
            break;
        }
        let Some((resolved, _)) = schema.deref(ty) else {
            break;
        };
        match &resolved.shape {
            Shape::Object(object) if !object.fields.is_empty() => {
                let names: Vec<&String> = object.fields.keys().collect();
                let name = random.pick(&names).to_string();
                if random.chance(12) {
                    let wrong = format!("{name}z");
                    path.plain.push_str(&format!(".{wrong}"));
                    path.optional.push_str(&format!(".?{wrong}"));
                    path.ends_in_field = true;
                    break;
                }
                path.plain.push_str(&format!(".{name}"));
                path.optional.push_str(&format!(".?{name}"));
                path.ends_in_field = true;
                ty = &object.fields[&name];
            }
            Shape::List(list) if random.chance(75) => {
                path.plain.push_str("[0]");
                path.optional.push_str("[?0]");
                path.ends_in_field = false;
                ty = &list.items;
            }
            Shape::Map(values) if random.chance(75) => {
                path.plain.push_str("['k']");
                path.optional.push_str("[?'k']");
                path.ends_in_field = false;
                ty = values;
            }
            _ => break,
        }
    }
    path
}

/// One validation's expression over `kind`: a path read and judged one of several ways.
fn expression(random: &mut Random, kinds: &Kinds, api_version: &str, kind: &str) -> String {
    let path = walk(random, kinds, api_version, kind);
    let literal = *random.pick(&LITERALS);
    match random.below(9) {
        0 | 1 => format!("{} == {literal}", path.plain),
        2 if path.ends_in_field => format!("has({})", path.plain),
        3 => format!("{}.size() > 0", path.plain),
        4 => {
            let other = walk(random, kinds, api_version, kind);
            format!("size({} + {}) > 0", path.plain, other.plain)
        }
        5 => {
            let other = walk(random, kinds, api_version, kind);
            format!("{} == {}", path.plain, other.plain)
        }
        6 => format!("{}.orValue({literal}) == {literal}", path.optional),
        7 => format!("{}.exists(x, x == {literal})", path.plain),
        _ => format!("string({}) == 'a'", path.plain),
    }
}

/// A generated policy: one or two of the resources, three or four validations, a message
/// expression on some, a variable on some.
fn generated(random: &mut Random, kinds: &Kinds, index: usize) -> Value {
    let first = *random.pick(&RESOURCES);
    let mut chosen = vec![first];
    if random.chance(25) {
        let second = *random.pick(&RESOURCES);
        if second != first {
            chosen.push(second);
        }
    }
    let (_, _, api_version, kind) = chosen[0];
    let mut validations = Vec::new();
    for _ in 0..3 + random.below(2) {
        let mut validation = json!({"expression": expression(random, kinds, api_version, kind)});
        if random.chance(30) {
            let path = walk(random, kinds, api_version, kind);
            validation["messageExpression"] = json!(format!("'found: ' + string({})", path.plain));
        }
        validations.push(validation);
    }
    let mut spec = json!({
        "matchConstraints": {"resourceRules": chosen.iter().map(|(group, resource, _, _)| json!({
            "apiGroups": [group], "apiVersions": ["v1"], "operations": ["CREATE"],
            "resources": [resource],
        })).collect::<Vec<_>>()},
        "validations": validations,
    });
    if random.chance(25) {
        let path = walk(random, kinds, api_version, kind);
        spec["variables"] = json!([{"name": "v", "expression": path.plain}]);
        spec["validations"]
            .as_array_mut()
            .expect("validations")
            .push(json!({"expression": format!("variables.v == {}", random.pick(&LITERALS))}));
    }
    policy(&format!("{PREFIX}g{index:03}"), spec)
}

fn policy(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": spec,
    })
}

fn pods() -> Value {
    json!({"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                              "operations": ["CREATE"], "resources": ["pods"]}]})
}

/// Policies picked by hand for what a generator reaches rarely.
fn hand_picked() -> Vec<Value> {
    let checks = |validations: &[&str]| -> Vec<Value> {
        validations
            .iter()
            .map(|e| json!({"expression": e, "messageExpression": "'m' + object.metadata.namee"}))
            .collect()
    };
    vec![
        policy(
            &format!("{PREFIX}h-pod"),
            json!({"matchConstraints": pods(), "validations": checks(&[
                "object.spec.containerz.size() > 0",
                "object.metadata.namespace == 'x' && object.metadata.labels['a'] == 'b'",
                "object.spec.containers[0].resources.limits['cpu'] == '1'",
                "object.metadata.creationTimestamp == ''",
                "size(object.spec.containers + object.spec.initContainers) > 0",
                "object.spec.containers[0] == 1 || object.spec == 1",
                "object.metadata.managedFields[0].fieldsV1.x == 1",
                "object.spec.containers.map(c, c.imagez).size() > 0",
                "object.spec.containers[0].ports[0].containerPort == 'a'",
                "oldObject.spec.nodeNamee == 'a'",
                "object.metadata.deletionGracePeriodSeconds == 1.0",
                "object.x == 1 && object.y == 2",
                "object.spec.nodeName == null && has(object.spec.nodeNamee)",
                "object.?spec.?containerz.orValue(1) == 1",
                "object.spec.activeDeadlineSeconds + 1.5 > 0.0",
                "object.spec.containers[0].livenessProbe.httpGet.port == 'a'",
            ])}),
        ),
        policy(
            &format!("{PREFIX}h-kinds"),
            json!({"matchConstraints": {"resourceRules": [
                {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                 "resources": ["pods", "configmaps"]},
                {"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE"],
                 "resources": ["deployments", "deployments/status"]},
                {"apiGroups": ["*"], "apiVersions": ["v1"], "operations": ["CREATE"],
                 "resources": ["services"]},
            ]}, "validations": checks(&[
                "object.spec.containers.size() > 0",
                "object.data.size() > 0 && object.spec.replicas > 'a'",
            ])}),
        ),
        policy(
            &format!("{PREFIX}h-eleven"),
            json!({"matchConstraints": {"resourceRules": [{"apiGroups": [""],
                "apiVersions": ["v1"], "operations": ["CREATE"], "resources": [
                    "configmaps", "endpoints", "events", "limitranges", "namespaces", "nodes",
                    "persistentvolumeclaims", "persistentvolumes", "pods", "podtemplates",
                    "replicationcontrollers"]}]},
                "validations": [{"expression": "object.x == 1"}]}),
        ),
        policy(
            &format!("{PREFIX}h-params"),
            json!({"paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
                   "matchConstraints": pods(), "validations": checks(&[
                "params.data.x == 'a' && params.dataa == 1",
                "params.metadata == object.metadata",
            ])}),
        ),
        policy(
            &format!("{PREFIX}h-variables"),
            json!({"matchConstraints": pods(),
                   "variables": [
                       {"name": "o", "expression": "object.?spec"},
                       {"name": "u", "expression": "request.userInfo"},
                       {"name": "s", "expression": "object.spec"},
                       {"name": "l", "expression": "[request.kind]"},
                   ],
                   "validations": checks(&[
                "variables.o + 1 > 0 && variables.u.usernamee == '' && variables.l[0].x == 1",
                "variables.s.containerz == 1",
            ])}),
        ),
        policy(
            &format!("{PREFIX}h-circle"),
            json!({"matchConstraints": {"resourceRules": [{"apiGroups": ["apiextensions.k8s.io"],
                "apiVersions": ["v1"], "operations": ["CREATE"],
                "resources": ["customresourcedefinitions"]}]},
                "validations": [{"expression": "object.spec.versions[0].schema.openAPIV3Schema.properties['a'].properties['b'].type == 1 && object.spec.versions[0].schema.openAPIV3Schema.properties['a'].x == 1"}]}),
        ),
    ]
}

/// What kube-controller-manager appends to a kind's type name, the nanosecond it checked at
/// (`Pod470222652.spec`), after any built-in kind's name: the longest names first, so that
/// `PodTemplate123` is not read as `Pod` followed by something else.
fn nanoseconds(kinds: &Kinds) -> regex::Regex {
    let names: std::collections::BTreeSet<&str> = kinds
        .builtin_schema()
        .kinds()
        .iter()
        .map(|k| k.kind.as_str())
        .collect();
    let mut names: Vec<&str> = names.into_iter().collect();
    names.sort_by_key(|name| std::cmp::Reverse(name.len()));
    let alternatives: Vec<String> = names.iter().map(|name| regex::escape(name)).collect();
    regex::Regex::new(&format!(r"\b({})[0-9]+([.,)'])", alternatives.join("|"))).expect("a pattern")
}

/// `warning` without the nanosecond kube-controller-manager appends to a kind's type name
/// (`Pod470222652.spec` → `Pod.spec`).
fn without_nanoseconds(warning: &str, nanoseconds: &regex::Regex) -> String {
    nanoseconds.replace_all(warning, "$1$2").into_owned()
}

/// kanon's warnings for one policy (given a binding, as kanon needs one), or its problems.
fn kanon_warnings(policy: &Value) -> Result<Vec<(String, String)>, Vec<String>> {
    let name = policy["metadata"]["name"].as_str().expect("a name");
    let binding = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    });
    let mut policies = kanon_engine::AdmissionPolicies::new();
    policies.add(policy);
    policies.add(&binding);
    let compiled = policies.compile()?;
    Ok(compiled
        .iter()
        .flat_map(|p| p.warnings.iter())
        .map(|w| (w.field.clone(), w.message.clone()))
        .collect())
}

fn delete_all(env: &Env, names: &[String]) {
    let mut args = vec![
        "delete",
        "validatingadmissionpolicies",
        "--ignore-not-found",
    ];
    args.extend(names.iter().map(String::as_str));
    let _ = env.kubectl(&args);
}

fn kanon_warns_as_kube_controller_manager_writes_in_status(env: &mut Env) {
    let seed = setting("KANON_TYPE_CHECKING_SEED", DEFAULT_SEED);
    let count = setting("KANON_TYPE_CHECKING_CASES", DEFAULT_CASES);
    let kinds = Kinds::builtin().expect("the built-in kinds");
    let nanoseconds = nanoseconds(&kinds);
    let mut random = Random(seed);
    let mut policies = hand_picked();
    for index in 0..count {
        policies.push(generated(&mut random, &kinds, index));
    }
    let names: Vec<String> = policies
        .iter()
        .map(|p| p["metadata"]["name"].as_str().expect("a name").to_owned())
        .collect();
    delete_all(env, &names);

    // Each on its own, so that one the apiserver refuses does not stop the others.
    let mut refused = BTreeMap::new();
    for policy in &policies {
        let out = env.kubectl_stdin(&["create", "-f", "-"], &policy.to_string());
        if !out.status.success() {
            let name = policy["metadata"]["name"].as_str().expect("a name");
            refused.insert(name.to_owned(), text(&out));
        }
    }
    // Until the controller has checked every policy the apiserver took.
    let started = Instant::now();
    let statuses = loop {
        let out = env.kubectl(&["get", "validatingadmissionpolicies", "-o", "json"]);
        assert!(out.status.success(), "{}", text(&out));
        let list: Value = serde_json::from_slice(&out.stdout).expect("a list");
        let statuses: BTreeMap<String, Value> = list["items"]
            .as_array()
            .expect("items")
            .iter()
            .filter(|p| {
                let name = p["metadata"]["name"].as_str().unwrap_or_default();
                name.starts_with(PREFIX)
                    && p.pointer("/status/observedGeneration") == p.pointer("/metadata/generation")
            })
            .map(|p| {
                let name = p["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                (name, p["status"].clone())
            })
            .collect();
        if statuses.len() + refused.len() == policies.len() {
            break statuses;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "kube-controller-manager checked {} of {} policies in 60 s",
            statuses.len(),
            policies.len() - refused.len()
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    delete_all(env, &names);

    let mut differences = Vec::new();
    let mut warned = 0;
    for policy in &policies {
        let name = policy["metadata"]["name"].as_str().expect("a name");
        let kanon = kanon_warnings(policy);
        if let Some(why) = refused.get(name) {
            if kanon.is_ok() {
                differences.push(format!(
                    "{name}: the apiserver refuses it, kanon does not:\n  {why}\n  {policy}"
                ));
            }
            continue;
        }
        let expected: Vec<(String, String)> = statuses[name]
            .pointer("/typeChecking/expressionWarnings")
            .and_then(Value::as_array)
            .map(|warnings| {
                warnings
                    .iter()
                    .map(|w| {
                        (
                            w["fieldRef"].as_str().unwrap_or_default().to_owned(),
                            without_nanoseconds(
                                w["warning"].as_str().unwrap_or_default(),
                                &nanoseconds,
                            ),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        warned += usize::from(!expected.is_empty());
        match kanon {
            Ok(found) if found == expected => {}
            Ok(found) => differences.push(format!(
                "{name}:\n  kube-controller-manager: {expected:#?}\n  kanon: {found:#?}\n  {policy}"
            )),
            Err(problems) => differences.push(format!(
                "{name}: kanon refuses what the apiserver took: {problems:?}\n  {policy}"
            )),
        }
    }
    assert!(
        differences.is_empty(),
        "kanon's type-checking warnings differ from kube-controller-manager's on {} of {} policies (seed {seed}):\n{}",
        differences.len(),
        policies.len(),
        differences.join("\n")
    );
    // The comparison says something only if the cluster warned about a good share of them.
    assert!(
        warned * 3 >= policies.len() - refused.len(),
        "only {warned} of {} policies got warnings",
        policies.len()
    );
}
