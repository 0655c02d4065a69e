use super::*;
use kanon_engine::Projection;

const FIXTURES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../fixtures/admission-reviews"
);

/// A projection that keeps `paths` (with kanon's own reads).
fn keeping(paths: &[&str]) -> Projection {
    let mut env = kanon_cel::Env::kubernetes();
    env.declare_variable("object", kanon_cel::Type::Dyn);
    let mut projection = Projection::base();
    for path in paths {
        let program = env
            .compile(&format!("has(object.{path})"))
            .expect("compiles");
        projection.add_read(&program.fields_read("object"));
    }
    projection
}

#[test]
fn a_projected_reading_is_the_whole_reading_without_the_skipped_fields() {
    let projections = [
        Projection::base(),
        keeping(&["spec.containers", "status"]),
        keeping(&["spec.template.spec", "data", "metadata.managedFields"]),
        Projection::whole(),
    ];
    let mut read = 0;
    for entry in std::fs::read_dir(FIXTURES).expect("the fixtures") {
        let path = entry.expect("an entry").path();
        if path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        let text = std::fs::read(&path).expect("a fixture");
        let whole: Value = serde_json::from_slice(&text).expect("JSON");
        for projection in &projections {
            let projected = parse(&text, projection).expect("read");
            assert_eq!(
                projected,
                pruned(whole.clone(), projection),
                "{}",
                path.display()
            );
            // Key order is kept too (answers and patches are written in it).
            assert_eq!(
                serde_json::to_string(&projected).expect("text"),
                serde_json::to_string(&pruned(whole.clone(), projection)).expect("text"),
            );
        }
        read += 1;
    }
    assert!(read >= 10, "only {read} fixtures");
    // Something is skipped: the managed fields of a fixture that has them.
    let text = std::fs::read(format!("{FIXTURES}/pod-create.json")).expect("a fixture");
    let projected = parse(&text, &Projection::base()).expect("read");
    assert!(projected["request"]["object"]["metadata"]["managedFields"].is_null());
    assert!(projected["request"]["object"]["spec"].is_null());
    assert!(projected["request"]["object"]["metadata"]["labels"].is_object());
    assert!(
        projected["request"]["userInfo"].is_object(),
        "the request whole"
    );
}

#[test]
fn a_body_is_refused_in_a_skipped_field_exactly_when_the_whole_reading_refuses_it() {
    let review = |spec: &str| {
        format!(
            r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"u","object":{{"kind":"Pod","spec":{spec},"metadata":{{"name":"p"}}}}}}}}"#
        )
        .into_bytes()
    };
    let deep = |depth: usize| format!("{}{}", "[".repeat(depth), "]".repeat(depth));
    let mut bodies: Vec<Vec<u8>> = [
        r#"{"a": "\ud800"}"#.to_owned(),
        r#"{"a": "\ud83d\ude00 \u00e9 \n"}"#.to_owned(),
        r#"{"a": 1e400}"#.to_owned(),
        r#"{"a": -0.0, "b": 18446744073709551615, "c": -9223372036854775808}"#.to_owned(),
        r#"{"a": "\x"}"#.to_owned(),
        "{\"a\": \"tab\there\"}".to_owned(),
        r#"{"a": 1, "a": {"b": [1, 2, {"c": null}]}}"#.to_owned(),
        r#"{"a": [1, 2,]}"#.to_owned(),
        r#"{"a": tru}"#.to_owned(),
        deep(100),
        deep(140),
    ]
    .iter()
    .map(|spec| review(spec))
    .collect();
    let mut bad_utf8 = review(r#"{"a": "XX"}"#);
    let at = bad_utf8
        .windows(2)
        .position(|w| w == b"XX")
        .expect("the marker");
    bad_utf8[at] = 0xff;
    bodies.push(bad_utf8);
    bodies.push(b"{\"request\": {\"object\": {\"spec\": 1}}} trailing".to_vec());
    bodies.push(b"{\"request\": {\"object\": {\"spec\": [1, 2".to_vec());
    for body in &bodies {
        let whole = serde_json::from_slice::<Value>(body);
        let projected = parse(body, &Projection::base());
        assert_eq!(
            whole.is_ok(),
            projected.is_ok(),
            "{}: whole {whole:?}, projected {projected:?}",
            String::from_utf8_lossy(body)
        );
        if let (Ok(whole), Ok(projected)) = (whole, projected) {
            assert_eq!(projected, pruned(whole, &Projection::base()));
        }
    }
}

#[test]
fn the_fuzz_corpus_reads_projected_as_it_reads_whole() {
    let corpus = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fuzz/corpus/admission_review"
    );
    let projections = [Projection::base(), keeping(&["spec.containers", "status"])];
    let mut read = 0;
    for entry in std::fs::read_dir(corpus).expect("the corpus") {
        let body = std::fs::read(entry.expect("an entry").path()).expect("a seed");
        for projection in &projections {
            match (
                parse(&body, projection),
                serde_json::from_slice::<Value>(&body),
            ) {
                (Ok(projected), Ok(whole)) => assert_eq!(projected, pruned(whole, projection)),
                (Err(_), Err(_)) => {}
                (projected, whole) => panic!("projected {projected:?}, whole {whole:?}"),
            }
        }
        read += 1;
    }
    assert!(read >= 5, "only {read} seeds");
}
