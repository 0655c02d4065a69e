//! Rule programs per evaluation: an annotations template on a Pod, a condition, a hand-written
//! program; what rendering and compiling per request would cost instead (it is done once per
//! policy generation); and how long a runaway loop runs before its fuel ends it.
//!
//! `template`: one matched structured template of each type, and one condition, each run
//! natively (as compiled) and as its rendered program (the same policy with its native forms
//! removed), with a plaintext `add` as the floor of a mutation. `template_in_place`: the native
//! forms and the floor the way the webhook runs them (`mutate_patch`, the object changed in place).

mod cases;

/// The allocator of the `kanon` binary, so that the request path is measured as it runs there
/// (glibc's allocator takes markedly longer to free a request's many small values).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use cases::{override_template, pod, templates};
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use kanon_api::Operation;
use kanon_engine::{CompiledPolicy, PolicyRules};
use kanon_engine::{NoObjects, PolicySet, Request, compile_document};
use kanon_engine::{Program, ProgramKind, ProgramLimits};
use serde_json::{Value, json};

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

/// The policy with its templates' native forms removed: every template runs its program.
fn programs_only(mut policy: CompiledPolicy) -> CompiledPolicy {
    match &mut policy.rules {
        PolicyRules::Override(rules) => {
            for t in rules.iter_mut().filter_map(|r| r.template.as_mut()) {
                t.native = None;
            }
        }
        PolicyRules::Validate { rules, .. } => {
            for t in rules.iter_mut().filter_map(|r| r.template.as_mut()) {
                t.native = None;
            }
        }
    }
    policy
}

/// The policy as compiled, and as programs only.
fn both(policy: Value) -> (PolicySet, PolicySet) {
    let compiled = compile_document(&policy).unwrap_or_else(|e| panic!("{e}"));
    let programs = programs_only(compiled.clone());
    (
        PolicySet::build(vec![compiled]).expect("one policy"),
        PolicySet::build(vec![programs]).expect("one policy"),
    )
}

fn bench_templates(c: &mut Criterion) {
    let request = Request::from_objects(Operation::Create, Some(pod()), None).expect("request");
    let mut group = c.benchmark_group("template");
    let floor = set_of(cases::floor());
    let d = kanon_engine::block_on(floor.mutate(&request, &NoObjects));
    assert_eq!(d.patch.len(), 1, "{d:?}");
    group.bench_function("plaintext add (floor of a mutation)", |b| {
        b.iter(|| kanon_engine::block_on(floor.mutate(&request, &NoObjects)))
    });
    for (name, template) in templates() {
        let (native, program) = both(override_template(template));
        let a = kanon_engine::block_on(native.mutate(&request, &NoObjects));
        let b = kanon_engine::block_on(program.mutate(&request, &NoObjects));
        assert!(a.allowed && !a.patch.is_empty(), "{name}: {a:?}");
        assert_eq!(a, b, "{name}: native and program agree");
        group.bench_function(format!("{name}/native"), |b| {
            b.iter(|| kanon_engine::block_on(native.mutate(&request, &NoObjects)))
        });
        group.bench_function(format!("{name}/program"), |b| {
            b.iter(|| kanon_engine::block_on(program.mutate(&request, &NoObjects)))
        });
    }
    let (native, program) = both(condition());
    let a = kanon_engine::block_on(native.validate(&request, None, &NoObjects));
    let b = kanon_engine::block_on(program.validate(&request, None, &NoObjects));
    assert!(a.allowed && a.applied_policies.len() == 1, "{a:?}");
    assert_eq!(a, b, "condition: native and program agree");
    group.bench_function("condition/native", |b| {
        b.iter(|| kanon_engine::block_on(native.validate(&request, None, &NoObjects)))
    });
    group.bench_function("condition/program", |b| {
        b.iter(|| kanon_engine::block_on(program.validate(&request, None, &NoObjects)))
    });
    group.finish();

    // The webhook's way (`mutate_patch`): the request's object changed in place; its copy for
    // each iteration is made outside the timed part, just before (batches of 16), so that the
    // object is as fresh in the caches as the webhook's just-parsed one. (Criterion's
    // `SmallInput` makes a tenth of all iterations' copies ahead: each came cold from memory.)
    // Dropping what the evaluation leaves of the object is timed: `mutate_patch` consumes it.
    let mut group = c.benchmark_group("template_in_place");
    let in_place = |b: &mut criterion::Bencher, set: &PolicySet| {
        b.iter_batched(
            || request.clone(),
            |mut request| kanon_engine::block_on(set.mutate_patch(&mut request, &NoObjects)),
            BatchSize::NumIterations(16),
        )
    };
    group.bench_function("plaintext add (floor of a mutation)", |b| {
        in_place(b, &floor)
    });
    for (name, template) in templates() {
        let (native, _) = both(override_template(template));
        let copied = kanon_engine::block_on(native.mutate(&request, &NoObjects));
        let mut owned = request.clone();
        let changed = kanon_engine::block_on(native.mutate_patch(&mut owned, &NoObjects));
        assert_eq!(
            changed.patch, copied.patch,
            "{name}: in place and from a copy agree"
        );
        group.bench_function(format!("{name}/native"), |b| in_place(b, &native));
    }
    group.finish();
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

criterion_group!(benches, bench, bench_templates);
criterion_main!(benches);
