//! Differential test of natively executed templates: every structured template is rendered to
//! a rule program (its documented semantics) and also compiled to a native form. On generated
//! objects and templates of every type, operation and condition operator, the same policy is
//! evaluated twice, once as compiled (native where the native form vouches for the result)
//! and once with the native forms removed (always the program), and the decisions must be the
//! same: operations, patched object (key order included), verdicts, messages and errors.
//!
//! The generator is a seeded SplitMix64, so every run sees the same cases; a failure prints
//! the seed, the policy and the object.

use kanon_api::Operation;
use kanon_engine::NoObjects;
use kanon_engine::RefScope;
use kanon_engine::internals::RuleProgram;
use kanon_engine::internals::{NativeOutcome, NativeRule};
use kanon_engine::{CompiledPolicy, PolicyRules};
use kanon_engine::{Decision, PolicyOutcome, PolicySet, Request, block_on, compile_document};
use serde_json::{Map, Value, json};

// ---------------------------------------------------------------------------------------------
// A small deterministic generator
// ---------------------------------------------------------------------------------------------

/// SplitMix64: tiny, seeded, good enough to spread cases.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n`.
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// True with probability `percent`/100.
    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// A subset of `items`, in order.
    fn subset<T: Clone>(&mut self, items: &[T]) -> Vec<T> {
        items.iter().filter(|_| self.chance(50)).cloned().collect()
    }
}

/// Map keys: ordinary, with the characters JSON pointers and templates treat specially,
/// unicode, empty.
const KEYS: &[&str] = &[
    "team",
    "env",
    "app.kubernetes.io/name",
    "a/b",
    "a~b",
    "a~1b",
    "a.b",
    "ünïcødé",
    "",
    "%}",
    "{{ x }}",
    "quote\"d",
    "<&>'",
    "ctl\u{1}",
    "space key",
];

/// String values, same spirit.
const TEXTS: &[&str] = &[
    "a",
    "b",
    "",
    "b/c",
    "ünï",
    "<script>",
    "\"",
    "{{ object }}",
    "line\nbreak",
    "true",
    "1",
    "500m",
];

const QUANTITIES: &[&str] = &[
    "500m", "1Gi", "0.5", "1e3", "2", "100Mi", "250m", "1", "1000m", "3Ki",
];

const NAMES: &[&str] = &["app", "sidecar", "init", "x/y"];

fn text(rng: &mut Rng) -> Value {
    Value::from(*rng.pick(TEXTS))
}

fn string_map(rng: &mut Rng, max: usize) -> Value {
    let mut map = Map::new();
    for _ in 0..rng.below(max + 1) {
        map.insert(rng.pick(KEYS).to_string(), text(rng));
    }
    Value::Object(map)
}

/// A map field as objects carry it: usually a string map, sometimes absent, null, empty, or
/// of the wrong type.
fn map_field(rng: &mut Rng) -> Option<Value> {
    match rng.below(20) {
        0..=2 => None,
        3 => Some(Value::Null),
        4 => Some(json!({})),
        5 => Some(json!("oops")),
        6 => Some(json!(["team", "x"])),
        7 => Some(json!({"team": 3, "env": true, "n": null})),
        _ => Some(string_map(rng, 4)),
    }
}

/// A quantity as objects may hold it: text, a number, or not a quantity at all.
fn quantity(rng: &mut Rng) -> Value {
    match rng.below(20) {
        0 => json!(1),
        1 => json!(0.5),
        2 => json!("lots"),
        3 => json!(""),
        _ => Value::from(*rng.pick(QUANTITIES)),
    }
}

fn quantity_map(rng: &mut Rng) -> Value {
    let mut map = Map::new();
    for name in ["cpu", "memory", "ephemeral-storage"] {
        if rng.chance(55) {
            map.insert(name.to_string(), quantity(rng));
        }
    }
    Value::Object(map)
}

fn container(rng: &mut Rng, i: usize) -> Value {
    match rng.below(40) {
        0 => return json!("oops"),
        1 => return Value::Null,
        _ => {}
    }
    let mut c = Map::new();
    match rng.below(12) {
        0 => {}
        1 => {
            c.insert("name".into(), json!(7));
        }
        _ => {
            c.insert("name".into(), Value::from(NAMES[i % NAMES.len()]));
        }
    }
    c.insert(
        "image".into(),
        Value::from(*rng.pick(&["nginx", "nginx:1.27", "envoy"])),
    );
    match rng.below(10) {
        0 => {}
        1 => {
            c.insert("resources".into(), Value::Null);
        }
        2 => {
            c.insert("resources".into(), json!({}));
        }
        3 => {
            c.insert("resources".into(), json!("odd"));
        }
        4 => {
            c.insert("resources".into(), json!({"requests": {}, "limits": {}}));
        }
        _ => {
            let mut r = Map::new();
            if rng.chance(70) {
                r.insert("limits".into(), quantity_map(rng));
            }
            if rng.chance(50) {
                r.insert("requests".into(), quantity_map(rng));
            }
            c.insert("resources".into(), Value::Object(r));
        }
    }
    if let Some(context) = security_context(rng) {
        c.insert("securityContext".into(), context);
    }
    Value::Object(c)
}

/// A `securityContext` as a pod spec or a container may hold it, for `field` templates:
/// usually absent, sometimes null, empty, set, or not an object at all.
fn security_context(rng: &mut Rng) -> Option<Value> {
    match rng.below(12) {
        0 => Some(Value::Null),
        1 => Some(json!({})),
        2 => Some(json!({"runAsNonRoot": false, "allowPrivilegeEscalation": true})),
        3 => Some(json!({"runAsNonRoot": true, "runAsUser": 1000})),
        4 => Some(json!("restricted")),
        5 => Some(json!({"allowPrivilegeEscalation": null})),
        _ => None,
    }
}

fn toleration(rng: &mut Rng) -> Value {
    let mut t = Map::new();
    if rng.chance(85) {
        t.insert(
            "key".into(),
            Value::from(*rng.pick(&["a", "b", "c", "x/y"])),
        );
    }
    let exists = rng.chance(40);
    t.insert(
        "operator".into(),
        Value::from(if exists { "Exists" } else { "Equal" }),
    );
    if !exists && rng.chance(80) {
        t.insert("value".into(), Value::from(*rng.pick(&["1", "2", "v"])));
    }
    if rng.chance(70) {
        t.insert(
            "effect".into(),
            Value::from(*rng.pick(&["NoSchedule", "NoExecute", "PreferNoSchedule"])),
        );
    }
    if rng.chance(20) {
        t.insert("tolerationSeconds".into(), json!(300));
    }
    Value::Object(t)
}

fn tolerations(rng: &mut Rng, max: usize) -> Vec<Value> {
    (0..rng.below(max + 1)).map(|_| toleration(rng)).collect()
}

fn node_term(rng: &mut Rng) -> Value {
    json!({"matchExpressions": [{"key": rng.pick(&["zone", "disk"]), "operator": "In",
                                 "values": [rng.pick(&["a", "b"])]}]})
}

fn pod_term(rng: &mut Rng) -> Value {
    json!({"labelSelector": {"matchLabels": {"app": rng.pick(&["web", "db"])}},
           "topologyKey": rng.pick(&["zone", "kubernetes.io/hostname"])})
}

fn list_of(rng: &mut Rng, max: usize, item: fn(&mut Rng) -> Value) -> Vec<Value> {
    (0..rng.below(max + 1)).map(|_| item(rng)).collect()
}

/// An affinity with a random choice of its six term lists (lists may be empty).
fn affinity(rng: &mut Rng) -> Value {
    let mut a = Map::new();
    if rng.chance(60) {
        let mut n = Map::new();
        if rng.chance(60) {
            n.insert(
                "requiredDuringSchedulingIgnoredDuringExecution".into(),
                json!({"nodeSelectorTerms": list_of(rng, 2, node_term)}),
            );
        }
        if rng.chance(50) {
            let list: Vec<Value> = (0..rng.below(3))
                .map(|_| json!({"weight": rng.below(3) as i64 + 1, "preference": node_term(rng)}))
                .collect();
            n.insert(
                "preferredDuringSchedulingIgnoredDuringExecution".into(),
                Value::Array(list),
            );
        }
        a.insert("nodeAffinity".into(), Value::Object(n));
    }
    for kind in ["podAffinity", "podAntiAffinity"] {
        if rng.chance(40) {
            let mut p = Map::new();
            if rng.chance(50) {
                p.insert(
                    "requiredDuringSchedulingIgnoredDuringExecution".into(),
                    Value::Array(list_of(rng, 2, pod_term)),
                );
            }
            if rng.chance(50) {
                let list: Vec<Value> = (0..rng.below(3))
                    .map(|_| json!({"weight": 10, "podAffinityTerm": pod_term(rng)}))
                    .collect();
                p.insert(
                    "preferredDuringSchedulingIgnoredDuringExecution".into(),
                    Value::Array(list),
                );
            }
            a.insert(kind.into(), Value::Object(p));
        }
    }
    Value::Object(a)
}

fn pod_spec(rng: &mut Rng) -> Value {
    let mut spec = Map::new();
    match rng.below(12) {
        0 => {}
        1 => {
            spec.insert("containers".into(), Value::Null);
        }
        2 => {
            spec.insert("containers".into(), json!([]));
        }
        3 => {
            spec.insert("containers".into(), json!("oops"));
        }
        _ => {
            let n = 1 + rng.below(4);
            let list = (0..n).map(|i| container(rng, i)).collect();
            spec.insert("containers".into(), Value::Array(list));
        }
    }
    match rng.below(10) {
        0..=4 => {}
        5 => {
            spec.insert("initContainers".into(), Value::Null);
        }
        6 => {
            spec.insert("initContainers".into(), json!([]));
        }
        _ => {
            // Named after the containers' names, so containerNames select across both lists.
            let list = (0..1 + rng.below(2))
                .map(|i| container(rng, 2 + i))
                .collect();
            spec.insert("initContainers".into(), Value::Array(list));
        }
    }
    if let Some(context) = security_context(rng) {
        spec.insert("securityContext".into(), context);
    }
    if let Some(m) = map_field(rng) {
        spec.insert("nodeSelector".into(), m);
    }
    match rng.below(8) {
        0..=2 => {}
        3 => {
            spec.insert("tolerations".into(), Value::Null);
        }
        4 => {
            spec.insert("tolerations".into(), json!([]));
        }
        5 => {
            // tolerationSeconds as a float: equal to 300 for minijinja, not for JSON.
            let mut list = tolerations(rng, 2);
            list.push(json!({"key": "a", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 300.0}));
            spec.insert("tolerations".into(), Value::Array(list));
        }
        _ => {
            spec.insert("tolerations".into(), Value::Array(tolerations(rng, 3)));
        }
    }
    match rng.below(8) {
        0..=2 => {}
        3 => {
            spec.insert("affinity".into(), Value::Null);
        }
        4 => {
            spec.insert("affinity".into(), json!({}));
        }
        _ => {
            spec.insert("affinity".into(), affinity(rng));
        }
    }
    Value::Object(spec)
}

/// Scalars of every JSON type, numeric strings and quantities, for conditions to read.
fn scalar(rng: &mut Rng) -> Value {
    match rng.below(16) {
        0 => json!(3),
        1 => json!(-4),
        2 => json!(2.5),
        3 => json!(2.0),
        4 => json!(true),
        5 => json!(false),
        6 => json!("3"),
        7 => json!("2.5"),
        8 => json!(" 7 "),
        9 => json!("abc"),
        10 => json!("ABC-123"),
        11 => Value::Null,
        12 => json!(1e21),
        13 => json!(0.1),
        _ => quantity(rng),
    }
}

fn extra(rng: &mut Rng) -> Value {
    let list: Vec<Value> = (0..rng.below(4)).map(|_| scalar(rng)).collect();
    json!({
        "a": scalar(rng), "b": scalar(rng), "c": scalar(rng),
        "list": list,
        "map": string_map(rng, 2),
    })
}

/// An object of one of several kinds, with or without metadata, labels, annotations, spec.
fn object(rng: &mut Rng) -> Value {
    let kind = *rng.pick(&[
        "Pod",
        "Pod",
        "Deployment",
        "StatefulSet",
        "CronJob",
        "ConfigMap",
        "Rollout",
    ]);
    let api_version = match kind {
        "Pod" | "ConfigMap" => "v1",
        "CronJob" => "batch/v1",
        "Rollout" => "argoproj.io/v1alpha1",
        _ => "apps/v1",
    };
    let mut o = Map::new();
    o.insert("apiVersion".into(), Value::from(api_version));
    o.insert("kind".into(), Value::from(kind));
    if rng.chance(92) {
        let mut m = Map::new();
        m.insert(
            "name".into(),
            Value::from(*rng.pick(&["web", "db-0", "a/b"])),
        );
        if rng.chance(70) {
            m.insert("namespace".into(), json!("default"));
        }
        if let Some(l) = map_field(rng) {
            m.insert("labels".into(), l);
        }
        if let Some(a) = map_field(rng) {
            m.insert("annotations".into(), a);
        }
        o.insert("metadata".into(), Value::Object(m));
    }
    let spec = pod_spec(rng);
    let with_spec = rng.chance(90);
    match kind {
        "Pod" if with_spec => {
            o.insert("spec".into(), spec);
        }
        "Deployment" | "StatefulSet" | "Rollout" if with_spec => {
            o.insert(
                "spec".into(),
                json!({"replicas": rng.below(5), "paused": rng.chance(50),
                       "template": {"metadata": {"labels": {"app": "web"}}, "spec": spec}}),
            );
        }
        "CronJob" if with_spec => {
            o.insert(
                "spec".into(),
                json!({"schedule": "* * * * *", "jobTemplate": {"spec": {"template": {"spec": spec}}}}),
            );
        }
        "ConfigMap" => {
            o.insert("data".into(), string_map(rng, 3));
        }
        _ => {}
    }
    o.insert("extra".into(), extra(rng));
    Value::Object(o)
}

// ---------------------------------------------------------------------------------------------
// Templates and conditions
// ---------------------------------------------------------------------------------------------

const OPERATIONS: &[&str] = &["add", "replace", "remove", "default"];

/// Pointers a `field` template may name, below the object, its pod spec or a container:
/// present and absent, with missing parents, escaped keys, and parents that are lists or
/// scalars (an error).
const FIELD_PATHS: &[&str] = &[
    "/securityContext/runAsNonRoot",
    "/securityContext/allowPrivilegeEscalation",
    "/securityContext",
    "/metadata/annotations/a~1b",
    "/metadata/labels/team",
    "/metadata/name",
    "/spec/securityContext/runAsNonRoot",
    "/spec/template/spec/securityContext/runAsNonRoot",
    "/nodeSelector/a~1b",
    "/resources/limits/cpu",
    "/dnsConfig/options",
    "/image",
    "/name/x",
    "/containers/0/image",
    "/extra/a",
    "/extra/a/b",
    "/extra/map/x~0y",
    "/extra/list/0",
    "/new/deep/a~1b/c",
    "/",
];

/// Paths a `valueRef` or `dataRef` may read: pointers and JSONPaths, present or absent, of
/// every type, some selecting several values.
const PATHS: &[&str] = &[
    "/metadata/name",
    "/metadata/namespace",
    "/metadata/labels",
    "/metadata/labels/team",
    "/spec/replicas",
    "/spec/paused",
    "/extra/a",
    "/extra/b",
    "/extra/c",
    "/extra/list",
    "/extra/map",
    "/missing",
    "$.metadata.name",
    "$.extra.a",
    "$.extra.list[*]",
    "$.extra.map.*",
    "$.spec.containers[*].name",
    "$.spec.template.spec.containers[*].resources.limits.cpu",
    "$..image",
    "$.spec.containers[*].resources.limits.memory",
];

fn reference(rng: &mut Rng) -> Value {
    let from = if rng.chance(85) { "current" } else { "old" };
    json!({"from": from, "path": rng.pick(PATHS)})
}

/// A constant of one of the eight kinds.
fn constant(rng: &mut Rng) -> Value {
    match rng.below(12) {
        0..=3 => {
            json!({"string": rng.pick(&["abc", "3", "2.5", "500m", "1Gi", "^a", "[0-9]+", "b/c", "true", "", "ABC-.*"])})
        }
        4 => json!({"integer": rng.pick(&[3i64, -4, 0, 2, i64::MAX, i64::MIN])}),
        5 => json!({"float": rng.pick(&[json!(2.5), json!("0.5"), json!(2.0), json!("3")])}),
        6 => json!({"boolean": rng.chance(50)}),
        7 => {
            let items: Vec<&str> = (0..rng.below(4))
                .map(|_| *rng.pick(&["abc", "3", "500m", "a", "nginx", "web"]))
                .collect();
            json!({"stringSlice": items})
        }
        8 => {
            let items: Vec<i64> = (0..rng.below(4))
                .map(|_| *rng.pick(&[3i64, -4, 1, 2]))
                .collect();
            json!({"integerSlice": items})
        }
        9 => {
            let items: Vec<Value> = (0..rng.below(3))
                .map(|_| rng.pick(&[json!(2.5), json!("0.5"), json!(3)]).clone())
                .collect();
            json!({"floatSlice": items})
        }
        _ => json!({"stringMap": string_map(rng, 2)}),
    }
}

/// An override template of `kind` with random parameters.
fn override_template(rng: &mut Rng, kind: &str) -> Value {
    let operation = *rng.pick(OPERATIONS);
    let mut t = Map::new();
    t.insert("type".into(), Value::from(kind));
    t.insert("operation".into(), Value::from(operation));
    match kind {
        "annotations" | "labels" | "nodeSelector" => match rng.below(10) {
            0..=3 => {
                t.insert("path".into(), Value::from(*rng.pick(KEYS)));
                let value = match rng.below(8) {
                    0 => json!({"integer": 3}),
                    1 => json!({"boolean": true}),
                    2 => json!({"float": 1.5}),
                    _ => json!({"string": rng.pick(TEXTS)}),
                };
                t.insert("value".into(), value);
            }
            4..=5 => {
                t.insert("value".into(), json!({"stringMap": string_map(rng, 3)}));
            }
            6..=8 => {
                t.insert("path".into(), Value::from(*rng.pick(KEYS)));
                t.insert("valueRef".into(), reference(rng));
            }
            _ => {
                t.insert("path".into(), Value::from(*rng.pick(KEYS)));
            }
        },
        "resources" => {
            let mut r = Map::new();
            for section in ["limits", "requests"] {
                if rng.chance(65) {
                    let mut m = Map::new();
                    for name in ["cpu", "memory", "ephemeral-storage"] {
                        if rng.chance(50) {
                            m.insert(name.into(), Value::from(*rng.pick(QUANTITIES)));
                        }
                    }
                    r.insert(section.into(), Value::Object(m));
                }
            }
            t.insert("resources".into(), Value::Object(r));
            t.insert("containerNames".into(), json!(container_names(rng)));
        }
        "resourcesOversell" => {
            let mut f = Map::new();
            for name in ["cpuFactor", "memoryFactor", "diskFactor"] {
                if rng.chance(60) {
                    f.insert(
                        name.into(),
                        rng.pick(&[
                            json!("0.25"),
                            json!(0.5),
                            json!("0.333"),
                            json!(0.1),
                            json!("0.75"),
                        ])
                        .clone(),
                    );
                }
            }
            if f.is_empty() {
                f.insert("cpuFactor".into(), json!("0.5"));
            }
            t.insert("resourcesOversell".into(), Value::Object(f));
            t.insert("containerNames".into(), json!(container_names(rng)));
        }
        "tolerations" => {
            let mut list = tolerations(rng, 3);
            if list.is_empty() {
                list.push(toleration(rng));
            }
            t.insert("tolerations".into(), Value::Array(list));
        }
        "affinity" => {
            t.insert("affinity".into(), affinity(rng));
        }
        "field" => {
            let within = *rng.pick(&["", "object", "podSpec", "containers", "containers"]);
            if !within.is_empty() {
                t.insert("within".into(), Value::from(within));
            }
            t.insert("path".into(), Value::from(*rng.pick(FIELD_PATHS)));
            // Remove takes no value; now and then one anyway (a compile error).
            if operation != "remove" || rng.chance(5) {
                if rng.chance(70) {
                    t.insert("value".into(), constant(rng));
                } else {
                    t.insert("valueRef".into(), reference(rng));
                }
            }
            if within == "containers" {
                t.insert("containerNames".into(), json!(container_names(rng)));
            }
        }
        other => panic!("{other}"),
    }
    Value::Object(t)
}

fn container_names(rng: &mut Rng) -> Vec<&'static str> {
    if rng.chance(40) {
        Vec::new()
    } else {
        rng.subset(NAMES)
    }
}

const CONDS: &[&str] = &[
    "Exist", "NotExist", "Equal", "NotEqual", "In", "NotIn", "Gt", "Gte", "Lt", "Lte", "Regex",
];

fn condition(rng: &mut Rng) -> Value {
    let cond = *rng.pick(CONDS);
    let mut c = Map::new();
    c.insert("cond".into(), Value::from(cond));
    c.insert("dataRef".into(), reference(rng));
    if !matches!(cond, "Exist" | "NotExist") {
        if rng.chance(65) {
            let value = match cond {
                "In" | "NotIn" if rng.chance(80) => match rng.below(3) {
                    0 => {
                        json!({"stringSlice": rng.subset(&["abc", "3", "500m", "a", "nginx", "web", "ABC-123"])})
                    }
                    1 => json!({"integerSlice": rng.subset(&[3, -4, 1, 2])}),
                    _ => json!({"floatSlice": [2.5, "0.5"]}),
                },
                "Regex" if rng.chance(80) => {
                    json!({"string": rng.pick(&["^a", "[0-9]+", "^ng", "ABC-.*", "^$", "e"])})
                }
                _ => constant(rng),
            };
            c.insert("value".into(), value);
        } else {
            c.insert("valueRef".into(), reference(rng));
        }
        if rng.chance(25) {
            let with = rng
                .pick(&[json!(3), json!("0.5"), json!("50%"), json!(2), json!("-1")])
                .clone();
            c.insert(
                "valueProcess".into(),
                json!({"operation": rng.pick(&["+", "-", "*", "/"]), "operationWith": with}),
            );
        }
    }
    if rng.chance(40) {
        c.insert(
            "affectMode".into(),
            Value::from(*rng.pick(&["allow", "reject"])),
        );
    }
    match rng.below(7) {
        0 => {}
        6 => {
            // The item a selected value was read from, and a name that may be absent.
            c.insert(
                "message".into(),
                json!("{{ item.name | default('-') }} in {{ object.metadata.name }}: {{ data | tojson }}"),
            );
        }
        1 => {
            c.insert("message".into(), json!("  plain <reason> & 'quotes'\n"));
        }
        2 => {
            c.insert(
                "message".into(),
                json!("{{ object.metadata.name | default('?') }} fails"),
            );
        }
        3 => {
            c.insert("message".into(), json!("value {{ data | tojson }}"));
        }
        4 => {
            c.insert("message".into(), json!("ünï \"quoted\""));
        }
        _ => {
            c.insert("message".into(), json!(""));
        }
    }
    Value::Object(c)
}

fn override_policy(template: Value) -> Value {
    json!({"apiVersion": "policy.kanon.dev/v1alpha1", "kind": "ClusterOverridePolicy",
           "metadata": {"name": "tpl"},
           "spec": {"overrideRules": [{"overriders": {"template": template}}]}})
}

fn validate_policy(condition: Value) -> Value {
    json!({"apiVersion": "policy.kanon.dev/v1alpha1", "kind": "ClusterValidatePolicy",
           "metadata": {"name": "cond"},
           "spec": {"validateRules": [{"template": {"type": "condition", "condition": condition}}]}})
}

// ---------------------------------------------------------------------------------------------
// Running both ways
// ---------------------------------------------------------------------------------------------

fn templates_of(policy: &mut CompiledPolicy) -> Vec<&mut RuleProgram> {
    match &mut policy.rules {
        PolicyRules::Override(rules) => rules
            .iter_mut()
            .filter_map(|r| r.template.as_mut())
            .collect(),
        PolicyRules::Validate { rules, .. } => rules
            .iter_mut()
            .filter_map(|r| r.template.as_mut())
            .collect(),
    }
}

/// The policy as compiled, and the same policy with its native forms removed.
struct Pair {
    native: PolicySet,
    program: PolicySet,
    /// The template's rule program, native form included.
    rule: RuleProgram,
}

fn pair(document: &Value) -> Option<Pair> {
    let compiled = compile_document(document).ok()?;
    let mut stripped = compiled.clone();
    let mut rule = None;
    for t in templates_of(&mut stripped) {
        assert!(
            t.native.is_some() || t.field.contains("validateRules"),
            "{}",
            t.field
        );
        rule = Some(t.clone());
        t.native = None;
    }
    Some(Pair {
        native: PolicySet::build(vec![compiled]).expect("one policy"),
        program: PolicySet::build(vec![stripped]).expect("one policy"),
        rule: rule.expect("a template"),
    })
}

fn request(rng: &mut Rng, object: &Value) -> Request {
    if rng.chance(20) {
        let old = crate::object(rng);
        Request::from_objects(Operation::Update, Some(object.clone()), Some(old))
    } else {
        Request::from_objects(Operation::Create, Some(object.clone()), None)
    }
    .expect("a request")
}

/// Whether the native form answers for this request on its own (without the program).
fn answered_natively(rule: &RuleProgram, request: &Request) -> Option<NativeOutcome> {
    let native: &NativeRule = rule.native.as_ref()?;
    let object = request.subject()?;
    let policy = "test";
    let scope = RefScope {
        object,
        old_object: request.old_object.as_ref(),
        namespace: request.namespace.as_deref(),
        lookup: &NoObjects,
        policy,
        context: None,
    };
    let mut refs = Map::new();
    for (name, reference) in &rule.refs {
        if let Some(value) = block_on(reference.resolve(&scope)).ok()? {
            refs.insert((*name).to_string(), value);
        }
    }
    native.run(object, &refs, rule.program.limits())
}

/// The decision as text: every field, objects with their key order.
fn shown(d: &Decision) -> String {
    format!(
        "allowed: {}\nmessages: {:?}\nwarnings: {:?}\naudit: {:?}\napplied: {:?}\npatch: {}\npatched: {}",
        d.allowed,
        d.messages,
        d.warnings,
        d.audit_annotations,
        d.applied_policies,
        serde_json::to_string(&d.patch).unwrap(),
        serde_json::to_string(&d.patched).unwrap(),
    )
}

#[derive(Default, Debug)]
struct Tally {
    cases: usize,
    native: usize,
    errors: usize,
    changed_or_denied: usize,
}

/// Runs `pair` both ways on `request` and requires the same decision.
#[track_caller]
fn check(pair: &Pair, request: &Request, document: &Value, tally: &mut Tally, validate: bool) {
    let run = |set: &PolicySet| {
        if validate {
            block_on(set.validate(request, None, &NoObjects))
        } else {
            block_on(set.mutate(request, &NoObjects))
        }
    };
    let (with_native, decision) = (run(&pair.native), run(&pair.program));
    if !validate {
        // The webhook's way: the object changed in place, only the fields reached saved.
        let mut owned = request.clone();
        let in_place = block_on(pair.native.mutate_patch(&mut owned, &NoObjects));
        assert_eq!(
            (
                in_place.allowed,
                serde_json::to_string(&in_place.patch).unwrap()
            ),
            (
                with_native.allowed,
                serde_json::to_string(&with_native.patch).unwrap()
            ),
            "patch in place and patch from a copy disagree\npolicy: {document:#}\nobject: {:#}",
            request.subject().unwrap_or(&Value::Null),
        );
        // The patch in place makes the object the copying path makes (mutate_patch gives no
        // `patched`: it moves added values into the patch).
        if let Some(mut object) = request.subject().cloned() {
            json_patch::patch(&mut object, &in_place.patch).unwrap_or_else(|e| {
                panic!("the patch in place does not apply: {e}\npolicy: {document:#}")
            });
            if with_native.allowed {
                assert_eq!(
                    Some(&object),
                    with_native.patched.as_ref(),
                    "policy: {document:#}"
                );
            }
        }
    }
    assert_eq!(
        shown(&with_native),
        shown(&decision),
        "native and program disagree\npolicy: {document:#}\nobject: {:#}\nold: {:#}",
        request.subject().unwrap_or(&Value::Null),
        request.old_object.as_ref().unwrap_or(&Value::Null)
    );
    tally.cases += 1;
    let native = answered_natively(&pair.rule, request);
    if native.is_some() {
        tally.native += 1;
    }
    // Errors (of the program, of references, of applying the operations) are part of the
    // decisions compared above.
    if decision
        .policy_results
        .iter()
        .any(|r| matches!(r.outcome, PolicyOutcome::Failed { .. }))
    {
        tally.errors += 1;
    }
    if !decision.allowed || !decision.patch.is_empty() {
        tally.changed_or_denied += 1;
    }
    // What the native form answered is what the program gives.
    match native {
        Some(NativeOutcome::Patch(patch)) if decision.allowed => {
            let mut object = request.subject().cloned().unwrap();
            json_patch::patch(&mut object, &patch).expect("the native operations apply");
            assert_eq!(
                serde_json::to_string(&object).unwrap(),
                serde_json::to_string(decision.patched.as_ref().unwrap()).unwrap(),
                "policy: {document:#}"
            );
        }
        Some(NativeOutcome::Verdict(verdict)) => {
            assert_eq!(verdict.valid, decision.allowed, "policy: {document:#}");
        }
        _ => {}
    }
}

const OBJECTS_PER_TEMPLATE: usize = 12;

fn override_cases(kind: &str, seed: u64, templates: usize) -> Tally {
    let mut rng = Rng(seed);
    let mut tally = Tally::default();
    let mut compiled = 0;
    for _ in 0..templates {
        let document = override_policy(override_template(&mut rng, kind));
        let Some(pair) = pair(&document) else {
            continue;
        };
        compiled += 1;
        for _ in 0..OBJECTS_PER_TEMPLATE {
            let object = object(&mut rng);
            let request = request(&mut rng, &object);
            check(&pair, &request, &document, &mut tally, false);
        }
    }
    assert!(
        compiled * 2 > templates,
        "{kind}: only {compiled} of {templates} templates compiled"
    );
    eprintln!("{kind}: {compiled} templates, {tally:?}");
    tally
}

/// The native form must answer most cases itself, or the comparison proves little.
#[track_caller]
fn assert_mostly_native(kind: &str, tally: &Tally) {
    assert!(
        tally.native * 100 >= tally.cases * 60,
        "{kind}: the native form answered only {} of {} cases",
        tally.native,
        tally.cases
    );
    assert!(
        tally.changed_or_denied > 0,
        "{kind}: no case changed anything"
    );
}

#[test]
fn annotations_labels_and_node_selector_agree_with_their_programs() {
    for (i, kind) in ["annotations", "labels", "nodeSelector"].iter().enumerate() {
        let tally = override_cases(kind, 0xA11 + i as u64, 70);
        assert_mostly_native(kind, &tally);
    }
}

#[test]
fn resources_and_oversell_agree_with_their_programs() {
    for (i, kind) in ["resources", "resourcesOversell"].iter().enumerate() {
        let tally = override_cases(kind, 0xB22 + i as u64, 70);
        assert_mostly_native(kind, &tally);
    }
}

#[test]
fn tolerations_and_affinity_agree_with_their_programs() {
    for (i, kind) in ["tolerations", "affinity"].iter().enumerate() {
        let tally = override_cases(kind, 0xC33 + i as u64, 70);
        assert_mostly_native(kind, &tally);
    }
}

#[test]
fn fields_agree_with_their_programs() {
    let tally = override_cases("field", 0xE55, 200);
    assert_mostly_native("field", &tally);
}

#[test]
fn conditions_agree_with_their_programs() {
    let mut rng = Rng(0xD44);
    let mut tally = Tally::default();
    let mut per_cond = std::collections::BTreeMap::<String, (usize, usize)>::new();
    let mut compiled = 0;
    let templates = 350;
    for _ in 0..templates {
        let condition = condition(&mut rng);
        let cond = condition["cond"].as_str().unwrap().to_string();
        let document = validate_policy(condition);
        let Some(pair) = pair(&document) else {
            continue;
        };
        compiled += 1;
        for _ in 0..OBJECTS_PER_TEMPLATE {
            let object = object(&mut rng);
            let request = request(&mut rng, &object);
            let before = tally.native;
            check(&pair, &request, &document, &mut tally, true);
            let entry = per_cond.entry(cond.clone()).or_default();
            entry.0 += 1;
            entry.1 += tally.native - before;
        }
    }
    eprintln!(
        "conditions: {compiled} of {templates} compiled, {tally:?}, per operator (cases, native): {per_cond:?}"
    );
    assert_eq!(per_cond.len(), CONDS.len(), "every operator: {per_cond:?}");
    assert_mostly_native("conditions", &tally);
}

// ---------------------------------------------------------------------------------------------
// The program's limits: near them the native form must step aside
// ---------------------------------------------------------------------------------------------

fn pod_with(containers: usize, annotations: Value) -> Value {
    let list: Vec<Value> = (0..containers)
        .map(|i| {
            json!({"name": format!("c{i}"), "image": "nginx",
                        "resources": {"limits": {"cpu": "500m", "memory": "1Gi"}}})
        })
        .collect();
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "big", "annotations": annotations},
           "spec": {"containers": list}})
}

#[test]
fn near_the_programs_limits_both_agree() {
    let mut tally = Tally::default();
    let resources = override_policy(json!({"type": "resources", "operation": "add",
        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}));
    let oversell = override_policy(json!({"type": "resourcesOversell", "operation": "add",
        "resourcesOversell": {"cpuFactor": "0.5", "memoryFactor": "0.25"}}));
    let annotate = override_policy(json!({"type": "annotations", "operation": "add",
        "path": "kanon.dev/owner", "value": {"string": "platform"}}));
    // Many containers: the native form takes up to 128, the program loops over all.
    for document in [&resources, &oversell] {
        let pair = pair(document).expect("compiles");
        for n in [1, 64, 128, 129, 300] {
            let request =
                Request::from_objects(Operation::Create, Some(pod_with(n, json!({}))), None)
                    .expect("request");
            check(&pair, &request, document, &mut tally, false);
        }
    }
    // Annotations whose `tojson` output approaches and exceeds 256 KiB: escaped characters
    // count six bytes each.
    let annotated = pair(&annotate).expect("compiles");
    for (fill, n) in [
        ('a', 40_000),
        ('a', 250_000),
        ('a', 270_000),
        ('<', 40_000),
        ('<', 43_000),
        ('<', 44_000),
        ('"', 100_000),
        ('"', 140_000),
    ] {
        let big: String = std::iter::repeat_n(fill, n).collect();
        let request = Request::from_objects(
            Operation::Create,
            Some(pod_with(1, json!({"last-applied": big}))),
            None,
        )
        .expect("request");
        check(&annotated, &request, &annotate, &mut tally, false);
    }
    // A condition over many selected values.
    let each = validate_policy(
        json!({"cond": "Gt", "dataRef": {"from": "current", "path": "$.spec.containers[*].resources.limits.cpu"},
        "value": {"string": "100m"}, "affectMode": "allow", "message": "too small"}),
    );
    let pair_each = pair(&each).expect("compiles");
    for n in [0, 1, 300] {
        let request = Request::from_objects(Operation::Create, Some(pod_with(n, json!({}))), None)
            .expect("request");
        check(&pair_each, &request, &each, &mut tally, true);
    }
    // Values JSON tells apart and minijinja does not (`300` and `300.0`).
    let replace = override_policy(json!({"type": "tolerations", "operation": "replace",
        "tolerations": [{"key": "a", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 300}]}));
    let replaced = pair(&replace).expect("compiles");
    for seconds in [json!(300.0), json!(300), json!(301.0)] {
        let mut object = pod_with(1, json!({}));
        object["spec"]["tolerations"] = json!([{"key": "a", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": seconds}]);
        let request =
            Request::from_objects(Operation::Create, Some(object), None).expect("request");
        check(&replaced, &request, &replace, &mut tally, false);
        let native = answered_natively(&replaced.rule, &request);
        assert!(native.is_some(), "{seconds}");
    }
    eprintln!("limits: {tally:?}");
    assert!(
        tally.errors > 0,
        "some case must reach a program limit: {tally:?}"
    );
}
