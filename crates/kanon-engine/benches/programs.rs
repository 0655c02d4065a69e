//! Rule programs per evaluation: an annotations template on a Pod, a condition, a hand-written
//! program; what rendering and compiling per request would cost instead (it is done once per
//! policy generation); and how long a runaway loop runs before its fuel ends it.

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use kanon_api::Operation;
use kanon_engine::program::{Program, ProgramKind, ProgramLimits};
use kanon_engine::{NoObjects, PolicySet, Request, compile_document};
use serde_json::{Value, json};

fn pod() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web-0", "namespace": "shop", "labels": {"app": "web", "tier": "frontend"},
                     "annotations": {"kubernetes.io/psp": "restricted"}},
        "spec": {
            "containers": [
                {"name": "nginx", "image": "nginx:1.27", "ports": [{"containerPort": 80}],
                 "resources": {"limits": {"cpu": "500m", "memory": "256Mi"}}},
                {"name": "sidecar", "image": "busybox:1.36", "command": ["sh", "-c", "sleep 3600"]}
            ],
            "restartPolicy": "Always"
        }
    })
}

fn set_of(policy: Value) -> PolicySet {
    let compiled = compile_document(&policy).unwrap_or_else(|e| panic!("{e}"));
    PolicySet::build(vec![compiled]).expect("one policy")
}

fn annotations_template() -> Value {
    json!({
        "apiVersion": "policy.kanon.dev/v1alpha1", "kind": "ClusterOverridePolicy",
        "metadata": {"name": "owner"},
        "spec": {"resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
                 "overrideRules": [{"overriders": {"template": {
                     "type": "annotations", "operation": "add", "path": "kanon.dev/owner",
                     "value": {"string": "platform"}}}}]}
    })
}

fn condition() -> Value {
    json!({
        "apiVersion": "policy.kanon.dev/v1alpha1", "kind": "ClusterValidatePolicy",
        "metadata": {"name": "cpu-limit"},
        "spec": {"resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
                 "validateRules": [{"template": {"type": "condition", "condition": {
                     "cond": "Gt", "dataRef": {"from": "current", "path": "/spec/containers/0/resources/limits/cpu"},
                     "value": {"string": "2"}, "message": "{{ object.metadata.name }} asks for too much CPU"}}}]}
    })
}

const PROGRAM: &str = r#"{%- set images = jsonpath(object, "$.spec.containers[*].image") -%}
{%- set bad = [] -%}
{%- for image in images if not regex_match(image, ":[A-Za-z0-9._-]+$") -%}{%- set bad = bad + [image] -%}{%- endfor -%}
valid: {{ bad | length == 0 }}
reason: "images without a tag: {{ bad | join(', ') }}"
"#;

fn program() -> Value {
    json!({
        "apiVersion": "policy.kanon.dev/v1alpha1", "kind": "ClusterValidatePolicy",
        "metadata": {"name": "image-tags"},
        "spec": {"resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
                 "validateRules": [{"program": PROGRAM}]}
    })
}

fn runaway() -> Value {
    json!({
        "apiVersion": "policy.kanon.dev/v1alpha1", "kind": "ClusterValidatePolicy",
        "metadata": {"name": "runaway"},
        "spec": {"failurePolicy": "Ignore", "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
                 "validateRules": [{"program": "{% for i in range(100000) %}{% for j in range(100000) %}{% set x = i * j %}{% endfor %}{% endfor %}"}]}
    })
}

fn bench(c: &mut Criterion) {
    let request = Request::from_objects(Operation::Create, Some(pod()), None).expect("request");

    let template = set_of(annotations_template());
    let d = kanon_engine::block_on(template.mutate(&request, &NoObjects));
    assert_eq!(
        d.patch.len(),
        1,
        "the template adds one annotation: {:?}",
        d
    );
    let condition = set_of(condition());
    let d = kanon_engine::block_on(condition.validate(&request, None, &NoObjects));
    assert!(d.allowed && d.applied_policies.len() == 1, "{d:?}");
    let hand_written = set_of(program());
    let d = kanon_engine::block_on(hand_written.validate(&request, None, &NoObjects));
    assert!(d.allowed && d.applied_policies.len() == 1, "{d:?}");
    let looping = set_of(runaway());
    let d = kanon_engine::block_on(looping.validate(&request, None, &NoObjects));
    assert!(
        d.allowed && d.warnings[0].contains("ran out of fuel"),
        "{d:?}"
    );

    let mut group = c.benchmark_group("program");
    group.bench_function("annotations template (mutate)", |b| {
        b.iter(|| kanon_engine::block_on(template.mutate(&request, &NoObjects)))
    });
    group.bench_function("condition template (validate)", |b| {
        b.iter(|| kanon_engine::block_on(condition.validate(&request, None, &NoObjects)))
    });
    group.bench_function("hand-written program (validate)", |b| {
        b.iter(|| kanon_engine::block_on(hand_written.validate(&request, None, &NoObjects)))
    });
    // What a per-request render would add: rendering the template to a program and compiling
    // it (kanon does both once per policy generation).
    let source = template.policies()[0].rendered[0].source.clone();
    group.bench_function("compile the rendered annotations program", |b| {
        b.iter(|| {
            Program::compile(&source, ProgramKind::Override, ProgramLimits::default())
                .expect("compiles")
        })
    });
    group.bench_function("compile the whole template policy", |b| {
        b.iter_batched(
            annotations_template,
            |p| compile_document(&p).expect("compiles"),
            BatchSize::SmallInput,
        )
    });
    group.sample_size(20);
    group.bench_function("runaway loop until fuel runs out", |b| {
        b.iter(|| kanon_engine::block_on(looping.validate(&request, None, &NoObjects)))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
