use super::FieldsRead;
use crate::{Env, Type};

fn read(source: &str) -> FieldsRead {
    let mut env = Env::kubernetes();
    env.declare_variable("object", Type::Dyn);
    env.declare_variable("oldObject", Type::Dyn);
    let program = env
        .compile(source)
        .unwrap_or_else(|e| panic!("{source}: {e}"));
    program.fields_read("object")
}

fn paths(paths: &[&[&str]]) -> FieldsRead {
    FieldsRead::of_paths(paths)
}

#[test]
fn selections_by_constant_names_are_paths_read_whole_below() {
    let cases: &[(&str, FieldsRead)] = &[
        ("oldObject.spec.x == 1", paths(&[])),
        ("object.spec.replicas > 1", paths(&[&["spec", "replicas"]])),
        (
            "object.spec.containers.all(c, has(c.resources) && 'memory' in c.resources.limits)",
            paths(&[&["spec", "containers"]]),
        ),
        ("has(object.status)", paths(&[&["status"]])),
        (
            "object.metadata.labels['app'] == 'x'",
            paths(&[&["metadata", "labels", "app"]]),
        ),
        (
            "object.spec.containers[0].image == 'x'",
            paths(&[&["spec", "containers"]]),
        ),
        (
            "object.?spec.?paused.orValue(false)",
            paths(&[&["spec", "paused"]]),
        ),
        (
            "[1, 2].exists(i, i == object.spec.replicas)",
            paths(&[&["spec", "replicas"]]),
        ),
    ];
    for (source, want) in cases {
        assert_eq!(&read(source), want, "{source}");
    }
}

#[test]
fn the_variable_named_bare_or_indexed_by_a_computed_key_is_read_whole() {
    for source in [
        "object == oldObject",
        "size(object) > 0",
        "object[oldObject.spec.field] == 1",
        "(true ? object : oldObject).spec.x == 1",
        "object.exists(k, k == 'spec')",
        "has(object.spec) && object.spec.x == 1 && string(object) != ''",
    ] {
        assert_eq!(read(source), FieldsRead::Whole, "{source}");
    }
}

#[test]
fn a_comprehension_variable_that_shadows_the_variable_is_not_it() {
    assert_eq!(
        read("[{'a': 1}].all(object, object.a == 1) && object.spec.x == 1"),
        paths(&[&["spec", "x"]])
    );
}
