//! MutatingAdmissionPolicies generated at random from a seed (JSONPatch and ApplyConfiguration
//! mutations over a Deployment and a ConfigMap: right and wrong types, empty lists and maps,
//! nulls, removals of what is not there, duplicate keys, atomic fields, several mutations per
//! policy under `Fail` and `Ignore`, match conditions that hold, do not or fail, a variable that
//! a mutation reads), each applied by kube-apiserver (a server-side dry run) and
//! by `kanon apply` to the object admission saw, bare and as the AdmissionReview a webhook
//! receives: verdict, message, reason and mutated object must agree.
//!
//! The suite runs `KANON_MAP_RANDOM_CASES` cases (default 40) from `KANON_MAP_RANDOM_SEED`
//! (default fixed); `scripts/map-random.sh [CASES] [SEED]` runs more on a fresh seed.

use std::fmt::Write as _;

use serde_json::{Value, json};

use crate::Scenario;
use crate::admission_policies::{Case, Outcome, kanon_outcome, kanon_review_outcome, send};
use crate::env::{Env, text};
use crate::random::{Random, setting};

pub const SCENARIOS: &[Scenario] = &[(
    "map_random::random_mutating_policies_agree_with_kube_apiserver",
    random_mutating_policies_agree_with_kube_apiserver,
)];

const NAMESPACE: &str = "map-random";
const DEFAULT_SEED: u64 = 20_261_129;
const DEFAULT_CASES: usize = 40;

/// CEL literals of values of every type, for a place that wants `right` (a CEL literal of the
/// right type) — wrong types, nulls and empties included.
fn scalar_or_wrong(random: &mut Random, right: &[&str]) -> String {
    let wrong = [
        "5",
        "1.5",
        "2.0",
        "true",
        "null",
        "'text'",
        "{'a': 'b'}",
        "['x']",
        "[]",
        "{}",
    ];
    if random.chance(60) {
        (*random.pick(right)).to_owned()
    } else {
        (*random.pick(&wrong)).to_owned()
    }
}

/// One JSON Patch operation over a Deployment.
fn deployment_operation(random: &mut Random) -> String {
    const CONTAINER: &str = "/spec/template/spec/containers/0";
    let (path, value): (String, String) = match random.below(17) {
        0 => (
            format!("/metadata/labels/{}", random.pick(&["tier", "team", "app"])),
            scalar_or_wrong(random, &["'web'", "''"]),
        ),
        1 => (
            "/metadata/annotations".into(),
            (*random.pick(&["{}", "{'a': 'b'}", "null"])).to_owned(),
        ),
        2 => (
            "/metadata/annotations/note".into(),
            scalar_or_wrong(random, &["'x'"]),
        ),
        // The apiserver defaults the kind after each mutation: a `replicas` removed or null
        // is 1 again.
        3 => (
            "/spec/replicas".into(),
            (*random.pick(&["0", "3", "2.0", "1.5", "'text'", "true", "{}", "null"])).to_owned(),
        ),
        // Never null or empty: the apiserver's validation after admission (which kanon does not
        // run) would refuse the object for the missing image.
        4 => (
            format!("{CONTAINER}/image"),
            (*random.pick(&[
                "'nginx:2'",
                "'nginx:3'",
                "5",
                "2.0",
                "true",
                "{'a': 'b'}",
                "['x']",
            ]))
            .to_owned(),
        ),
        5 => (
            format!("{CONTAINER}/env"),
            (*random.pick(&[
                "[]",
                "[{'name': 'A', 'value': 'a'}]",
                "null",
                "{'name': 'A'}",
            ]))
            .to_owned(),
        ),
        6 => (
            format!("{CONTAINER}/env/{}", random.pick(&["0", "-"])),
            (*random.pick(&[
                "{'name': 'B', 'value': 'b'}",
                "{'name': dyn('B'), 'value': dyn(5)}",
                "'B'",
            ]))
            .to_owned(),
        ),
        7 => (
            format!("{CONTAINER}/ports"),
            (*random.pick(&[
                "[]",
                "[{'containerPort': dyn(80), 'protocol': dyn('TCP')}]",
                "[{'containerPort': 'http', 'protocol': 'TCP'}]",
                "[{'containerPort': dyn(80.5), 'protocol': dyn('TCP')}]",
            ]))
            .to_owned(),
        ),
        8 => (
            format!("{CONTAINER}/resources/limits/cpu"),
            scalar_or_wrong(random, &["'100m'", "'1000m'", "2"]),
        ),
        9 => (
            "/spec/template/spec/nodeSelector".into(),
            (*random.pick(&["{}", "{'disk': 'ssd'}", "{'disk': 1}", "null"])).to_owned(),
        ),
        10 => (
            "/spec/template/spec/hostNetwork".into(),
            scalar_or_wrong(random, &["true", "false"]),
        ),
        11 => (
            "/spec/paused".into(),
            scalar_or_wrong(random, &["true", "false"]),
        ),
        12 => (
            "/spec/minReadySeconds".into(),
            scalar_or_wrong(random, &["0", "5"]),
        ),
        // What the kind's defaulting fills in: a container's pull policy and termination
        // message, a strategy, a probe's timings, a port's protocol.
        // Each added container has a name of its own: two of one name are refused by the
        // apiserver's validation after admission (which kanon does not run).
        13 => {
            let shape = *random.pick(&[
                "{'name': 'NAME', 'image': 'busybox'}",
                "{'name': dyn('NAME'), 'image': dyn('busybox:1.36'), 'ports': dyn([{'containerPort': 9000}])}",
                "{'name': 'NAME', 'image': 'Busybox'}",
                "{'name': dyn('NAME'), 'image': dyn('busybox'), 'resources': dyn({})}",
            ]);
            let name = format!("side-{}", random.below(1_000_000_000));
            (
                "/spec/template/spec/containers/-".into(),
                shape.replace("NAME", &name),
            )
        }
        14 => (
            "/spec/strategy".into(),
            (*random.pick(&["{'type': 'Recreate'}", "{}", "{'type': 'RollingUpdate'}"])).to_owned(),
        ),
        15 => (
            format!("{CONTAINER}/readinessProbe"),
            (*random.pick(&[
                "{'httpGet': {'port': 80}}",
                "{'tcpSocket': dyn({'port': 80}), 'periodSeconds': dyn(5)}",
            ]))
            .to_owned(),
        ),
        _ => (
            format!("/spec/{}", random.pick(&["colour", "template/spec/colour"])),
            "'blue'".into(),
        ),
    };
    // A container's image is required: without it the apiserver's validation, which kanon does
    // not run, refuses the object after admission.
    let ops: &[&str] = if path.ends_with("/-") {
        &["add"]
    } else if path.ends_with("/image") {
        &["add", "replace", "test"]
    } else {
        &["add", "add", "add", "replace", "remove", "test"]
    };
    let op = *random.pick(ops);
    match op {
        "remove" => format!("JSONPatch{{op: 'remove', path: '{path}'}}"),
        _ => format!("JSONPatch{{op: '{op}', path: '{path}', value: {value}}}"),
    }
}

/// One JSON Patch operation over a ConfigMap.
fn configmap_operation(random: &mut Random) -> String {
    let (path, value): (&str, String) = match random.below(5) {
        0 => ("/data/extra", scalar_or_wrong(random, &["'x'", "''"])),
        1 => (
            "/data",
            (*random.pick(&["{}", "{'k': 'v'}", "null"])).to_owned(),
        ),
        2 => (
            "/metadata/labels",
            (*random.pick(&["{}", "{'a': 'b'}"])).to_owned(),
        ),
        3 => ("/metadata/labels/a", scalar_or_wrong(random, &["'b'"])),
        _ => ("/binaryData/blob", scalar_or_wrong(random, &["'aGVsbG8='"])),
    };
    match *random.pick(&["add", "add", "replace", "remove"]) {
        "remove" => format!("JSONPatch{{op: 'remove', path: '{path}'}}"),
        op => format!("JSONPatch{{op: '{op}', path: '{path}', value: {value}}}"),
    }
}

/// One ApplyConfiguration over a Deployment.
fn deployment_configuration(random: &mut Random) -> String {
    const SPEC: &str = "Object.spec.template.spec";
    let container = |random: &mut Random| {
        let mut fields = vec!["name: 'app'".to_owned()];
        if random.chance(50) {
            fields.push(format!(
                "image: {}",
                scalar_or_wrong(random, &["'nginx:3'"])
            ));
        }
        if random.chance(40) {
            let entry = |name: &str, value: &str| {
                format!("{SPEC}.containers.env{{name: '{name}', value: {value}}}")
            };
            let entries = match random.below(4) {
                0 => String::new(),
                1 => entry("C", "'1'"),
                2 => format!("{}, {}", entry("C", "'1'"), entry("C", "'2'")),
                _ => format!("{}, {}", entry("C", "'1'"), entry("D", "5")),
            };
            fields.push(format!("env: [{entries}]"));
        }
        if random.chance(30) {
            fields.push(format!(
                "ports: [{SPEC}.containers.ports{{containerPort: {}, protocol: 'TCP'}}]",
                scalar_or_wrong(random, &["8080"])
            ));
        }
        format!("{SPEC}.containers{{{}}}", fields.join(", "))
    };
    match random.below(5) {
        0 | 1 => format!(
            "Object{{spec: Object.spec{{template: Object.spec.template{{spec: {SPEC}{{containers: [{}]}}}}}}}}",
            container(random)
        ),
        2 => format!(
            "Object{{metadata: Object.metadata{{labels: {{'tier': {}}}}}}}",
            scalar_or_wrong(random, &["'web'"])
        ),
        3 => format!(
            "Object{{spec: Object.spec{{replicas: {}}}}}",
            scalar_or_wrong(random, &["4", "0"])
        ),
        _ => format!(
            "Object{{spec: Object.spec{{template: Object.spec.template{{spec: {SPEC}{{{}}}}}}}}}",
            random.pick(&[
                "tolerations: [Object.spec.template.spec.tolerations{key: 'k', operator: 'Exists'}]",
                "nodeSelector: {'disk': 'ssd'}",
                "hostNetwork: true",
                "colour: 'blue'",
            ])
        ),
    }
}

/// The `index`th generated policy and its binding, selecting the object labelled with its index.
fn policy(random: &mut Random, index: usize, deployment: bool) -> String {
    let failure_policy = *random.pick(&["Fail", "Ignore"]);
    let (group, resource) = if deployment {
        ("apps", "deployments")
    } else {
        ("", "configmaps")
    };
    let mut mutations = String::new();
    for _ in 0..1 + random.below(3) {
        if deployment && random.chance(35) {
            let expression = deployment_configuration(random);
            let _ = write!(
                mutations,
                "    - patchType: ApplyConfiguration\n      applyConfiguration:\n        expression: >-\n          {expression}\n"
            );
        } else {
            let operations: Vec<String> = (0..1 + random.below(3))
                .map(|_| {
                    if deployment {
                        deployment_operation(random)
                    } else {
                        configmap_operation(random)
                    }
                })
                .collect();
            let _ = write!(
                mutations,
                "    - patchType: JSONPatch\n      jsonPatch:\n        expression: >-\n          [{}]\n",
                operations.join(", ")
            );
        }
    }
    // Match conditions that hold, do not hold, or fail (a key the object lacks), and a variable
    // a mutation may read.
    let mut extra = String::new();
    if random.chance(30) {
        let condition = *random.pick(&[
            "object.metadata.name.startsWith('random')",
            "has(object.metadata.annotations)",
            "object.metadata.labels['absent'] == 'x'",
            "object.metadata.name.size() > 100",
        ]);
        let _ = write!(
            extra,
            "  matchConditions:\n    - name: condition\n      expression: \"{condition}\"\n"
        );
    }
    if random.chance(30) {
        let variable = *random.pick(&[
            "'from-a-variable'",
            "object.metadata.name",
            "object.spec.absent",
        ]);
        let _ = write!(
            extra,
            "  variables:\n    - name: chosen\n      expression: \"{variable}\"\n"
        );
        let _ = write!(
            mutations,
            "    - patchType: JSONPatch\n      jsonPatch:\n        expression: >-\n          [JSONPatch{{op: 'add', path: '/metadata/annotations', value: {{'chosen': string(variables.chosen)}}}}]\n"
        );
    }
    format!(
        "apiVersion: admissionregistration.k8s.io/v1beta1
kind: MutatingAdmissionPolicy
metadata:
  name: random-{index}
spec:
  failurePolicy: {failure_policy}
  reinvocationPolicy: Never
{extra}  matchConstraints:
    objectSelector:
      matchLabels: {{random-case: '{index}'}}
    resourceRules:
      - apiGroups: [\"{group}\"]
        apiVersions: [v1]
        operations: [CREATE]
        resources: [{resource}]
  mutations:
{mutations}---
apiVersion: admissionregistration.k8s.io/v1beta1
kind: MutatingAdmissionPolicyBinding
metadata:
  name: random-{index}
spec:
  policyName: random-{index}
"
    )
}

/// The object the `index`th policy selects.
fn object(index: usize, deployment: bool) -> Value {
    let labels = json!({"random-case": index.to_string(), "app": "random"});
    if deployment {
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": format!("random-{index}"), "namespace": NAMESPACE, "labels": labels},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "random"}},
                "template": {
                    "metadata": {"labels": {"app": "random"}},
                    "spec": {"containers": [{
                        "name": "app",
                        "image": "nginx:1",
                        "env": [{"name": "E", "value": "e"}],
                        "resources": {"limits": {"memory": "64Mi"}}
                    }]}
                }
            }
        })
    } else {
        json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": format!("random-{index}"), "namespace": NAMESPACE, "labels": labels},
            "data": {"mode": "lax"}
        })
    }
}

fn clean(env: &Env, policies: &std::path::Path) {
    let _ = env.kubectl(&[
        "delete",
        "-f",
        &policies.display().to_string(),
        "--ignore-not-found",
    ]);
    let _ = env.kubectl(&[
        "delete",
        "namespace",
        NAMESPACE,
        "--ignore-not-found",
        "--wait=true",
        "--timeout=60s",
    ]);
}

fn random_mutating_policies_agree_with_kube_apiserver(env: &mut Env) {
    let seed = setting("KANON_MAP_RANDOM_SEED", DEFAULT_SEED);
    let count = setting("KANON_MAP_RANDOM_CASES", DEFAULT_CASES);
    let mut random = Random(seed);
    let work = tempfile::tempdir().expect("a temporary directory");
    let policies_path = work.path().join("policies.yaml");
    let mut policies = Vec::with_capacity(count);
    let mut cases = Vec::with_capacity(count);
    for index in 0..count {
        let deployment = random.chance(75);
        policies.push(policy(&mut random, index, deployment));
        let object = object(index, deployment);
        cases.push(Case {
            title: format!("random-{index} ({})", text_of_kind(&object)),
            operation: "CREATE".into(),
            object,
            old: None,
        });
    }
    std::fs::write(&policies_path, policies.join("---\n")).expect("write the policies");
    clean(env, &policies_path);

    let namespace =
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}});
    env.apply(&namespace);
    let out = env.kubectl(&["get", "namespace", NAMESPACE, "-o", "json"]);
    assert!(out.status.success(), "{}", text(&out));
    let held: Value = serde_json::from_slice(&out.stdout).expect("the namespace");
    std::fs::write(
        work.path().join("context.json"),
        Value::Array(vec![held]).to_string(),
    )
    .expect("write the context");
    // What admission sees of each object, before any policy is in force.
    let seen: Vec<Value> = cases
        .iter()
        .map(|case| {
            let out = send(env, case);
            assert!(out.status.success(), "{}: {}", case.title, text(&out));
            serde_json::from_slice(&out.stdout).expect("an object")
        })
        .collect();

    let out = env.kubectl(&["apply", "-f", &policies_path.display().to_string()]);
    assert!(out.status.success(), "{}", text(&out));
    let expected: Vec<Outcome> = cases
        .iter()
        .zip(&seen)
        .map(|(case, seen)| kanon_outcome(&policies_path, work.path(), case, seen, None))
        .collect();
    // The same objects as the AdmissionReviews kube-apiserver sends a webhook: kanon takes
    // them as already defaulted (as `kanon serve` does), a path of its own that must decide
    // the same.
    let reviewed: Vec<(String, Outcome, Outcome)> = cases
        .iter()
        .zip(&seen)
        .zip(&expected)
        .map(|((case, seen), bare)| {
            let review = kanon_review_outcome(&policies_path, work.path(), case, seen);
            (case.title.clone(), bare.clone(), review)
        })
        .filter(|(_, bare, review)| bare != review)
        .collect();
    let (_, differences) = crate::admission_policies::until_agreed(env, &cases, &expected, agree);
    let policies_text = policies;
    clean(env, &policies_path);
    let mut differences = differences;
    for (title, bare, review) in &reviewed {
        differences.push(format!(
            "{title}: kanon decides the object and its AdmissionReview apart:\n  object: {bare:?}\n  review: {review:?}"
        ));
    }
    if !differences.is_empty() {
        let mut report = format!(
            "kanon and kube-apiserver disagree on {} of {count} random MutatingAdmissionPolicies (seed {seed}):\n",
            differences.len()
        );
        for difference in &differences {
            let index: usize = difference
                .strip_prefix("random-")
                .and_then(|rest| rest.split(' ').next())
                .and_then(|n| n.parse().ok())
                .unwrap_or(usize::MAX);
            let _ = writeln!(report, "{difference}");
            if let Some(policy) = policies_text.get(index) {
                let _ = writeln!(report, "policy:\n{policy}");
            }
        }
        panic!("{report}");
    }
    // The generator must reach every kind of outcome, or agreement means little.
    assert!(expected.iter().any(|o| o.allowed), "{expected:?}");
    assert!(
        expected
            .iter()
            .any(|o| !o.allowed && o.reason.as_deref() == Some("InternalError")),
        "no mistyped value among {count} cases"
    );
    assert!(
        expected
            .iter()
            .any(|o| !o.allowed && o.reason.as_deref() == Some("Invalid")),
        "no failing mutation under Fail among {count} cases"
    );
}

/// The outcomes agree; where the apiserver gave no answer at all (its patch library panicked and
/// the stream was reset), kanon must fail the request and say so.
fn agree(apiserver: &Outcome, kanon: &Outcome) -> bool {
    if apiserver.reason.as_deref() == Some("no answer") {
        return !kanon.allowed
            && kanon
                .message
                .as_deref()
                .is_some_and(|m| m.contains("answers the request with no response"));
    }
    // A dry run also answers with the warnings the apiserver's registry gives for the object it
    // would store (a Pod template's `env` naming a variable twice: "spec.template.spec.
    // containers[0].env[1]: hides previous definition of ..."), which come after admission and
    // name the field they are about. A MutatingAdmissionPolicy itself never warns.
    let admission_only = |outcome: &Outcome| Outcome {
        warnings: outcome
            .warnings
            .iter()
            .filter(|warning| !warning.starts_with("spec."))
            .cloned()
            .collect(),
        ..outcome.clone()
    };
    let (apiserver, kanon) = (&admission_only(apiserver), &admission_only(kanon));
    if apiserver == kanon {
        return true;
    }
    // structured-merge-diff lists a configuration's errors in the order it meets them while it
    // walks Go maps, which is random: the same policy gives the errors in another order from one
    // run to the next. The list is compared as a set.
    let unordered = |outcome: &Outcome| Outcome {
        message: outcome.message.as_deref().map(errors_as_a_set),
        ..outcome.clone()
    };
    unordered(apiserver) == unordered(kanon)
}

/// A message with its `errors:` list (one error a line, indented by two spaces) sorted.
fn errors_as_a_set(message: &str) -> String {
    let Some((head, list)) = message.split_once("errors:\n  ") else {
        return message.to_owned();
    };
    let mut errors: Vec<&str> = list.split("\n  ").collect();
    errors.sort_unstable();
    format!("{head}errors:\n  {}", errors.join("\n  "))
}

fn text_of_kind(object: &Value) -> &str {
    object.get("kind").and_then(Value::as_str).unwrap_or("?")
}
