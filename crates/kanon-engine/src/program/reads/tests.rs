use kanon_cel::FieldsRead;

use super::fields_read;

fn paths(paths: &[&[&str]]) -> FieldsRead {
    FieldsRead::of_paths(paths)
}

#[test]
fn chains_of_constant_names_are_paths_read_whole_below() {
    let cases: &[(&str, FieldsRead)] = &[
        ("{{ oldObject.spec.x }}", paths(&[])),
        (
            "{{ object.metadata.name }}",
            paths(&[&["metadata", "name"]]),
        ),
        (
            "{{ object.spec[\"containers\"][0].image }}",
            paths(&[&["spec", "containers"]]),
        ),
        (
            "{% for c in object.spec.containers %}{{ c.name | upper }}{% endfor %}",
            paths(&[&["spec", "containers"]]),
        ),
        (
            "{% if object.status.phase == \"Running\" %}x{% endif %}{{ object.spec.nodeName | default(\"none\") }}",
            paths(&[&["status", "phase"], &["spec", "nodeName"]]),
        ),
        (
            "{% set s = object.spec %}{{ s.items() | list | length }}",
            paths(&[&["spec"]]),
        ),
    ];
    for (source, want) in cases {
        assert_eq!(&fields_read(source, "object"), want, "{source}");
    }
}

#[test]
fn the_variable_named_bare_called_on_or_indexed_by_a_computed_key_is_read_whole() {
    for source in [
        "{{ object | tojson }}",
        "{{ object.items() | list }}",
        "{{ object[request.name] }}",
        "{% set o = object %}{{ o.spec }}",
        "{% macro m(x) %}{{ x }}{% endmacro %}{{ m(object.spec) }}",
        "{{ object.spec[request.x].y }}",
        "{{ ",
    ] {
        let read = fields_read(source, "object");
        if source == "{{ object.spec[request.x].y }}" {
            assert_eq!(read, paths(&[&["spec"]]), "{source}");
        } else {
            assert_eq!(read, FieldsRead::Whole, "{source}");
        }
    }
}

#[test]
fn the_pointer_helper_at_a_constant_pointer_reads_the_subtree_there() {
    let cases: &[(&str, FieldsRead)] = &[
        (
            "{{ pointer(object, \"/metadata/labels\") | default({}) }}",
            paths(&[&["metadata", "labels"]]),
        ),
        (
            "{{ pointer(object, \"/spec/a~1b/0\") }}{{ pointer(oldObject, \"/x\") }}",
            paths(&[&["spec", "a/b", "0"]]),
        ),
        ("{{ pointer(object, \"\") }}", FieldsRead::Whole),
        // Not a pointer, or not a constant one: the object is passed bare.
        ("{{ pointer(object, \"spec.x\") }}", FieldsRead::Whole),
        (
            "{% set p = \"/spec\" %}{{ pointer(object, p) }}",
            FieldsRead::Whole,
        ),
        // `pointer` is the template's own.
        (
            "{% set pointer = other %}{{ pointer(object, \"/spec\") }}",
            FieldsRead::Whole,
        ),
        (
            "{% for pointer in x %}{% endfor %}{{ pointer(object, \"/spec\") }}",
            FieldsRead::Whole,
        ),
    ];
    for (source, want) in cases {
        assert_eq!(&fields_read(source, "object"), want, "{source}");
    }
}
