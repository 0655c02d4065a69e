//! Tests against the embedded Kubernetes 1.35 data.

use super::*;

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn builtin() -> Result<&'static Schema, LoadError> {
    Schema::builtin()
}

fn kind<'s>(schema: &'s Schema, api_version: &str, name: &str) -> Result<&'s Kind, String> {
    schema
        .kind(api_version, name)
        .ok_or_else(|| format!("no {api_version} {name}"))
}

fn found<'s>(resolution: Resolution<'s>) -> Result<Site<'s>, String> {
    resolution
        .found()
        .ok_or_else(|| format!("not found: {resolution:?}"))
}

#[test]
fn the_embedded_data_loads_and_is_written_as_xtask_writes_it() -> TestResult {
    let schema = builtin()?;
    assert!(
        schema.kubernetes_version().starts_with("v1.35."),
        "{}",
        schema.kubernetes_version()
    );
    assert!(schema.kinds().len() > 50, "{} kinds", schema.kinds().len());
    // The committed file is exactly what `to_json` writes, so regenerating changes no line
    // that the server did not change.
    assert!(
        schema.to_json()? == BUILTIN_JSON,
        "the data file is not in canonical form"
    );
    Ok(())
}

#[test]
fn kinds_know_their_scope_resource_and_root_type() -> TestResult {
    let schema = builtin()?;
    let deployment = kind(schema, "apps/v1", "Deployment")?;
    assert!(deployment.namespaced);
    assert_eq!(deployment.resource, "deployments");
    assert_eq!(deployment.type_name, "io.k8s.api.apps.v1.Deployment");
    assert_eq!((deployment.group(), deployment.version()), ("apps", "v1"));
    let namespace = kind(schema, "v1", "Namespace")?;
    assert!(!namespace.namespaced);
    assert_eq!((namespace.group(), namespace.version()), ("", "v1"));
    assert!(schema.root_type(namespace).is_some());
    assert!(schema.kind("v1", "pod").is_none());
    // Subresources are not kinds.
    assert!(schema.kind("policy/v1", "Eviction").is_none());
    let hpa: Vec<&str> = schema
        .kinds_named("HorizontalPodAutoscaler")
        .map(|k| k.api_version.as_str())
        .collect();
    assert_eq!(hpa, ["autoscaling/v1", "autoscaling/v2"]);
    Ok(())
}

#[test]
fn a_quantity_in_a_pod_resolves_to_a_string_or_number() -> TestResult {
    let schema = builtin()?;
    let pod = kind(schema, "v1", "Pod")?;
    let path = ["spec", "containers", "0", "resources", "limits", "memory"];
    let site = found(schema.resolve(pod, &path))?;
    assert_eq!(
        site.type_name,
        Some("io.k8s.apimachinery.pkg.api.resource.Quantity")
    );
    // /openapi/v3 publishes Quantity as `oneOf: [string, number]`.
    assert_eq!(
        site.target.shape,
        Shape::OneOf(vec![Scalar::Number, Scalar::String])
    );
    assert!(site.target.accepts_string());
    Ok(())
}

#[test]
fn an_unknown_field_is_reported_with_the_nearest_real_one() -> TestResult {
    let schema = builtin()?;
    let deployment = kind(schema, "apps/v1", "Deployment")?;
    let path = ["spec", "replica"];
    let resolution = schema.resolve(deployment, &path);
    let Resolution::NoSuchField {
        at,
        depth,
        nearest,
        fields,
    } = &resolution
    else {
        return Err(format!("{resolution:?}").into());
    };
    assert_eq!(*depth, 1);
    assert_eq!(*nearest, Some("replicas"));
    assert_eq!(at.type_name, Some("io.k8s.api.apps.v1.DeploymentSpec"));
    assert!(fields.contains(&"template"));
    assert_eq!(
        resolution.suggested_pointer(&path).as_deref(),
        Some("/spec/replicas")
    );
    // The same through a pointer, with later segments kept in the suggestion.
    let resolution = schema
        .resolve_pointer(deployment, "/spec/tempalte/spec")
        .ok_or("not a pointer")?;
    assert_eq!(
        resolution
            .suggested_pointer(&["spec", "tempalte", "spec"])
            .as_deref(),
        Some("/spec/template/spec")
    );
    // Nothing near: no suggestion, but still not found.
    let resolution = schema.resolve(deployment, &["spec", "frobnicate"]);
    assert!(matches!(
        resolution,
        Resolution::NoSuchField { nearest: None, .. }
    ));
    Ok(())
}

#[test]
fn replicas_is_an_integer() -> TestResult {
    let schema = builtin()?;
    let deployment = kind(schema, "apps/v1", "Deployment")?;
    let site = found(schema.resolve(deployment, &["spec", "replicas"]))?;
    assert_eq!(site.target.shape, Shape::Integer);
    assert_eq!(site.target.format.as_deref(), Some("int32"));
    assert_eq!(site.type_name, None);
    let site = found(schema.resolve(
        deployment,
        &["spec", "strategy", "rollingUpdate", "maxSurge"],
    ))?;
    assert_eq!(site.target.shape, Shape::IntOrString);
    let strategy = found(schema.resolve(deployment, &["spec", "strategy"]))?;
    assert_eq!(strategy.ty.patch_strategy.as_deref(), Some("retainKeys"));
    Ok(())
}

#[test]
fn containers_is_a_list_map_keyed_by_name() -> TestResult {
    let schema = builtin()?;
    let pod = kind(schema, "v1", "Pod")?;
    let site = found(schema.resolve(pod, &["spec", "containers"]))?;
    let Shape::List(list) = &site.target.shape else {
        return Err(format!("not a list: {:?}", site.target).into());
    };
    assert_eq!(
        list.list_type,
        Some(ListType::Map(vec!["name".to_string()]))
    );
    assert_eq!(
        list.list_type.as_ref().map(ListType::map_keys),
        Some(&["name".to_string()][..])
    );
    assert_eq!(site.target.patch_strategy.as_deref(), Some("merge"));
    assert_eq!(site.target.patch_merge_key.as_deref(), Some("name"));
    let image = found(schema.resolve(pod, &["spec", "containers", "3", "image"]))?;
    assert_eq!(image.target.shape, Shape::String);
    // A list is indexed by number (or `-`), not by a key's value.
    let resolution = schema.resolve(pod, &["spec", "containers", "app", "image"]);
    assert!(
        matches!(resolution, Resolution::NotAnIndex { depth: 2, .. }),
        "{resolution:?}"
    );
    Ok(())
}

#[test]
fn maps_take_any_key_and_scalars_stop_the_path() -> TestResult {
    let schema = builtin()?;
    let pod = kind(schema, "v1", "Pod")?;
    let label = found(
        schema
            .resolve_pointer(pod, "/metadata/labels/app.kubernetes.io~1name")
            .ok_or("not a pointer")?,
    )?;
    assert_eq!(label.target.shape, Shape::String);
    let selector = found(schema.resolve(pod, &["spec", "nodeSelector"]))?;
    assert_eq!(selector.target.map_type, Some(MapType::Atomic));
    let resolution = schema.resolve(pod, &["metadata", "name", "x"]);
    assert!(
        matches!(resolution, Resolution::NotAContainer { depth: 2, .. }),
        "{resolution:?}"
    );
    let created = found(schema.resolve(pod, &["metadata", "creationTimestamp"]))?;
    assert_eq!(created.target.format.as_deref(), Some("date-time"));
    Ok(())
}

#[test]
fn free_form_values_are_open_not_wrong() -> TestResult {
    let schema = builtin()?;
    let revision = kind(schema, "apps/v1", "ControllerRevision")?;
    let resolution = schema.resolve(revision, &["data", "spec", "anything"]);
    let Resolution::Open { at, depth } = resolution else {
        return Err(format!("{resolution:?}").into());
    };
    assert_eq!(depth, 1);
    assert_eq!(
        at.type_name,
        Some("io.k8s.apimachinery.pkg.runtime.RawExtension")
    );
    Ok(())
}

#[test]
fn the_root_resolves_to_the_kinds_type() -> TestResult {
    let schema = builtin()?;
    let pod = kind(schema, "v1", "Pod")?;
    let site = found(schema.resolve::<&str>(pod, &[]))?;
    assert_eq!(site.type_name, Some("io.k8s.api.core.v1.Pod"));
    Ok(())
}

#[test]
fn a_kind_in_the_wrong_case_suggests_the_right_one() -> TestResult {
    let schema = builtin()?;
    let suggestion = schema.suggest_kind("v1", "pod").ok_or("no suggestion")?;
    let KindSuggestion::DidYouMean(pod) = &suggestion else {
        return Err(format!("{suggestion:?}").into());
    };
    assert_eq!((pod.api_version.as_str(), pod.kind.as_str()), ("v1", "Pod"));
    assert_eq!(suggestion.to_string(), "did you mean `Pod` (v1)?");
    // At another apiVersion as well.
    let suggestion = schema
        .suggest_kind("apps/v1", "pod")
        .ok_or("no suggestion")?;
    assert_eq!(suggestion.to_string(), "did you mean `Pod` (v1)?");
    let suggestion = schema
        .suggest_kind("apps/v1", "Deploymnet")
        .ok_or("no suggestion")?;
    assert_eq!(
        suggestion.to_string(),
        "did you mean `Deployment` (apps/v1)?"
    );
    Ok(())
}

#[test]
fn a_kind_at_the_wrong_api_version_says_where_it_is_served() -> TestResult {
    let schema = builtin()?;
    let suggestion = schema
        .suggest_kind("apps/v1", "Pod")
        .ok_or("no suggestion")?;
    let KindSuggestion::ServedAt(kinds) = &suggestion else {
        return Err(format!("{suggestion:?}").into());
    };
    assert_eq!(kinds.len(), 1);
    assert_eq!(kinds[0].api_version, "v1");
    assert_eq!(suggestion.to_string(), "`Pod` is served at `v1`");
    let suggestion = schema
        .suggest_kind("autoscaling/v2beta2", "HorizontalPodAutoscaler")
        .ok_or("no suggestion")?;
    assert_eq!(
        suggestion.to_string(),
        "`HorizontalPodAutoscaler` is served at `autoscaling/v1` and `autoscaling/v2`"
    );
    assert_eq!(schema.suggest_kind("v1", "Pod"), None);
    assert_eq!(schema.suggest_kind("v1", "Frobnicator"), None);
    Ok(())
}

#[test]
fn loading_refuses_data_that_does_not_hold_together() {
    let dangling = r#"{"kubernetes":"v0","kinds":[],"types":{"A":{"type":"object","fields":{"b":{"ref":"B"}}}}}"#;
    assert!(matches!(
        Schema::from_json(dangling),
        Err(LoadError::Inconsistent(_))
    ));
    let kind = r#"{"apiVersion":"v1","kind":"A","resource":"as","namespaced":true,"type":"A"}"#;
    let twice = format!(
        r#"{{"kubernetes":"v0","kinds":[{kind},{kind}],"types":{{"A":{{"type":"object"}}}}}}"#
    );
    assert!(matches!(
        Schema::from_json(&twice),
        Err(LoadError::Inconsistent(_))
    ));
    for bad_type in [
        r#"{"type":"string","items":{"type":"string"}}"#,
        r#"{"type":"list"}"#,
        r#"{"ref":"A","type":"string"}"#,
        r#"{"type":"list","items":{"type":"string"},"listType":"set","listMapKeys":["a"]}"#,
        r#"{"type":"wat"}"#,
        r#"{"type":["string","object"]}"#,
        r#"{"type":"string","surprise":true}"#,
    ] {
        let text = format!(r#"{{"kubernetes":"v0","kinds":[],"types":{{"A":{bad_type}}}}}"#);
        assert!(
            matches!(Schema::from_json(&text), Err(LoadError::Parse { .. })),
            "{bad_type}"
        );
    }
}

#[test]
fn the_first_difference_names_the_type_and_field() -> TestResult {
    let text = r#"{"kubernetes":"v0","kinds":[],"types":{"A":{"type":"object","fields":{"b":{"type":"string"}}}}}"#;
    let data = Schema::from_json(text)?;
    assert_eq!(data.first_difference(&data), None);
    let served = Schema::from_json(&text.replace(r#""b""#, r#""c""#))?;
    assert_eq!(
        data.first_difference(&served).as_deref(),
        Some("type A field `c` is served but not in the data")
    );
    let served = Schema::from_json(&text.replace("string", "integer"))?;
    assert_eq!(
        data.first_difference(&served).as_deref(),
        Some(r#"type A field `b`: the data has {"type":"string"}, the server {"type":"integer"}"#)
    );
    Ok(())
}

#[test]
fn unknown_fields_are_named_as_strict_decoding_names_them() -> TestResult {
    let schema = builtin()?;
    let pod = kind(schema, "v1", "Pod")?;
    let root = schema.root_type(pod).ok_or("no Pod type")?;
    let object = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "labels": {"app": "web"}, "colour": "blue"},
        "spec": {
            "containers": [
                {"name": "a", "image": "a"},
                {"name": "b", "image": "b", "resources": {"limits": {"cpu": "1"}, "limit": {}}},
            ],
            "tolerations": null,
            "bogus": 1,
        },
    });
    assert_eq!(
        schema.unknown_fields(root, &object, 100),
        [
            "metadata.colour",
            "spec.containers[1].resources.limit",
            "spec.bogus"
        ]
    );
    assert_eq!(schema.unknown_fields(root, &object, 1), ["metadata.colour"]);
    // The same, for a value written at a path.
    let container = serde_json::json!({"name": "c", "resources": {"limit": {}}, "colour": 1});
    assert_eq!(
        schema.unknown_fields_at(root, &["spec", "containers", "2"], &container, 100),
        [
            "spec.containers[2].resources.limit",
            "spec.containers[2].colour"
        ]
    );
    assert_eq!(
        schema.unknown_fields_at(root, &["spec", "bogus", "deeper"], &container, 100),
        ["spec.bogus"]
    );
    assert_eq!(
        schema.unknown_fields_at(
            root,
            &["metadata", "labels", "x"],
            &serde_json::json!("y"),
            100
        ),
        Vec::<String>::new()
    );
    // A declared object's value of the wrong type is not an unknown field; neither is anything
    // in a free-form place.
    let revision = kind(schema, "apps/v1", "ControllerRevision")?;
    let root = schema
        .root_type(revision)
        .ok_or("no ControllerRevision type")?;
    let object = serde_json::json!({"metadata": "text", "data": {"anything": {"at": "all"}}});
    assert!(schema.unknown_fields(root, &object, 100).is_empty());
    Ok(())
}

#[test]
fn scalar_defaults_are_kept_for_list_map_keys() -> TestResult {
    let schema = builtin()?;
    let port = schema
        .named_type("io.k8s.api.core.v1.ContainerPort")
        .ok_or("no ContainerPort")?;
    let Shape::Object(object) = &port.shape else {
        return Err("ContainerPort is not an object".into());
    };
    let protocol = object.fields.get("protocol").ok_or("no protocol")?;
    assert_eq!(protocol.default, Some(serde_json::json!("TCP")));
    let name = object.fields.get("name").ok_or("no name")?;
    assert_eq!(name.default, None);
    Ok(())
}
