//! Custom kinds: what a cluster's CustomResourceDefinitions serve, read from their structural
//! schemas (`spec.versions[].schema.openAPIV3Schema`) into the crate's model, so a path in a
//! custom resource is checked the way one in a built-in kind is.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::convert::{Dialect, add_resource_fields, collect_refs, convert};
use crate::model::{Kind, Object, SchemaFile, Shape, Type};
use crate::{LoadError, Schema};

/// Why a CustomResourceDefinition could not be read. The apiserver validates CRDs, so this
/// means the object is not one (or is of a newer form than `apiextensions.k8s.io/v1`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CrdError {
    /// A field every CRD has is missing or of the wrong type.
    #[error("the CustomResourceDefinition {crd:?} has no {field}")]
    Missing {
        /// The CRD's `metadata.name` (empty when that is what is missing).
        crd: String,
        /// The field, `spec.group`.
        field: &'static str,
    },
    /// The schema of one version could not be converted.
    #[error("the CustomResourceDefinition {crd:?}, version {version}: {message}")]
    Schema {
        /// The CRD's `metadata.name`.
        crd: String,
        /// The version's name.
        version: String,
        /// What was wrong, and where in the schema.
        message: String,
    },
}

/// The kinds one CustomResourceDefinition serves: one [`Kind`] per served version, each with
/// its root type. Combine several into a [`Schema`] with [`Schema::from_custom_resources`].
///
/// ```
/// let crd = serde_json::json!({
///     "apiVersion": "apiextensions.k8s.io/v1",
///     "kind": "CustomResourceDefinition",
///     "metadata": {"name": "widgets.example.com"},
///     "spec": {
///         "group": "example.com",
///         "names": {"kind": "Widget", "plural": "widgets"},
///         "scope": "Namespaced",
///         "versions": [{"name": "v1", "served": true, "storage": true, "schema": {
///             "openAPIV3Schema": {"type": "object", "properties": {"spec": {
///                 "type": "object", "properties": {"size": {"type": "integer"}}}}}}}],
///     },
/// });
/// let widgets = kanon_schema::CustomResource::from_crd(&crd)?;
/// let builtin = kanon_schema::Schema::builtin()?;
/// let custom = kanon_schema::Schema::from_custom_resources(builtin, [&widgets])?;
/// let widget = custom.kind("example.com/v1", "Widget").ok_or("no Widget")?;
/// let path = ["spec", "sise"];
/// let resolution = custom.resolve(widget, &path);
/// assert_eq!(resolution.suggested_pointer(&path).as_deref(), Some("/spec/size"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CustomResource {
    name: String,
    group: String,
    kinds: Vec<Kind>,
    /// Root type name to root type, one per kind.
    types: BTreeMap<String, Type>,
}

impl CustomResource {
    /// Reads a CustomResourceDefinition (`apiextensions.k8s.io/v1`, as JSON): the kind at each
    /// served version (`<group>/<version>`, `spec.names.kind`, the plural, namespaced when
    /// `spec.scope` is `Namespaced`), its fields from the version's schema. A version without a
    /// schema, or a CRD that preserves unknown fields, leaves what it does not name open. Its
    /// `metadata` is `ObjectMeta`, whatever the schema says of it (the apiserver keeps every
    /// `ObjectMeta` field). Versions that are not served are left out.
    pub fn from_crd(crd: &Value) -> Result<CustomResource, CrdError> {
        let name = crd
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let text = |pointer: &str, field: &'static str| {
            crd.pointer(pointer)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .ok_or_else(|| CrdError::Missing {
                    crd: name.clone(),
                    field,
                })
        };
        if name.is_empty() {
            return Err(CrdError::Missing {
                crd: name,
                field: "metadata.name",
            });
        }
        let group = text("/spec/group", "spec.group")?;
        let kind = text("/spec/names/kind", "spec.names.kind")?;
        let plural = text("/spec/names/plural", "spec.names.plural")?;
        let namespaced = text("/spec/scope", "spec.scope")? == "Namespaced";
        // Legacy CRDs (created as v1beta1) may keep every unknown field.
        let preserve_all = crd
            .pointer("/spec/preserveUnknownFields")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let versions = crd
            .pointer("/spec/versions")
            .and_then(Value::as_array)
            .ok_or_else(|| CrdError::Missing {
                crd: name.clone(),
                field: "spec.versions",
            })?;
        let mut kinds = Vec::new();
        let mut types = BTreeMap::new();
        for version in versions {
            let version_name = version
                .get("name")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .ok_or_else(|| CrdError::Missing {
                    crd: name.clone(),
                    field: "spec.versions[].name",
                })?;
            if !version
                .get("served")
                .and_then(Value::as_bool)
                .unwrap_or(false)
            {
                continue;
            }
            let api_version = format!("{group}/{version_name}");
            let type_name = format!("{api_version}/{kind}");
            let schema = version.pointer("/schema/openAPIV3Schema");
            let root = root_type(schema, &type_name, preserve_all).map_err(|message| {
                CrdError::Schema {
                    crd: name.clone(),
                    version: version_name.to_string(),
                    message,
                }
            })?;
            types.insert(type_name.clone(), root);
            kinds.push(Kind {
                api_version,
                kind: kind.to_string(),
                resource: plural.to_string(),
                namespaced,
                type_name,
            });
        }
        Ok(CustomResource {
            name,
            group: group.to_string(),
            kinds,
            types,
        })
    }

    /// The CRD's name, `widgets.example.com`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The API group it serves, `example.com`.
    pub fn group(&self) -> &str {
        &self.group
    }

    /// Its kind at each served version, in the CRD's order.
    pub fn kinds(&self) -> &[Kind] {
        &self.kinds
    }
}

/// The root type of a custom kind: the schema's object with `apiVersion`, `kind` and
/// `metadata` (as `ObjectMeta`) added.
fn root_type(schema: Option<&Value>, at: &str, preserve_all: bool) -> Result<Type, String> {
    let mut root = match schema {
        Some(schema) => convert(schema, at, Dialect::Crd)?,
        // No schema: nothing is known beyond what every object has.
        None => Type {
            preserve_unknown_fields: true,
            ..Type::new(Shape::Any)
        },
    };
    match &mut root.shape {
        Shape::Object(object) => add_resource_fields(&mut object.fields),
        Shape::Any => {
            let mut object = Object::default();
            add_resource_fields(&mut object.fields);
            root.shape = Shape::Object(object);
            root.preserve_unknown_fields = true;
        }
        _ => return Err(format!("{at}: the root schema is not an object")),
    }
    root.preserve_unknown_fields |= preserve_all;
    Ok(root)
}

impl Schema {
    /// The custom kinds of `resources` as one schema, for
    /// [`Kinds::with_custom`](crate::Kinds::with_custom). Their `metadata` refers to `ObjectMeta`,
    /// copied with the types it reaches from `builtin` (the built-in schema), so that
    /// `/metadata/labels/app` resolves in a custom resource too.
    ///
    /// A kind that an earlier resource already serves at the same apiVersion is left out (the
    /// apiserver would not accept the second CRD's names either). Its
    /// [`kubernetes_version`](Self::kubernetes_version) is empty. Fails only if `builtin` lacks
    /// `ObjectMeta`.
    pub fn from_custom_resources<'c>(
        builtin: &Schema,
        resources: impl IntoIterator<Item = &'c CustomResource>,
    ) -> Result<Schema, LoadError> {
        let mut kinds: Vec<Kind> = Vec::new();
        let mut types: BTreeMap<String, Type> = BTreeMap::new();
        let mut served: BTreeSet<(String, String)> = BTreeSet::new();
        for resource in resources {
            for kind in &resource.kinds {
                if !served.insert((kind.api_version.clone(), kind.kind.clone())) {
                    continue;
                }
                let Some(root) = resource.types.get(&kind.type_name) else {
                    continue;
                };
                types.insert(kind.type_name.clone(), root.clone());
                kinds.push(kind.clone());
            }
        }
        // ObjectMeta and what it reaches, from the built-in types.
        let mut pending = Vec::new();
        for ty in types.values() {
            collect_refs(ty, &mut pending);
        }
        while let Some(name) = pending.pop() {
            if types.contains_key(&name) {
                continue;
            }
            let ty = builtin.named_type(&name).ok_or_else(|| {
                LoadError::Inconsistent(format!(
                    "custom kinds refer to `{name}`, which the built-in schema lacks"
                ))
            })?;
            collect_refs(ty, &mut pending);
            types.insert(name, ty.clone());
        }
        kinds.sort_by(|a, b| {
            (a.group(), a.version(), &a.kind).cmp(&(b.group(), b.version(), &b.kind))
        });
        Schema::from_file(SchemaFile {
            kubernetes: String::new(),
            kinds,
            types,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::{Value, json};

    use super::*;
    use crate::{KindSuggestion, Kinds, Origin, Resolution};

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    /// A CRD modelled on cert-manager's Certificate (trimmed): an old version no longer
    /// served, enums, a list, a nested reference, a status with a list-map of conditions.
    fn certificates() -> Value {
        let schema = json!({
            "type": "object",
            "description": "A Certificate resource should be created to ensure an up to date and signed X.509 certificate is stored in the Kubernetes Secret resource named in `spec.secretName`.",
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": {"type": "object"},
                "spec": {
                    "type": "object",
                    "required": ["issuerRef", "secretName"],
                    "properties": {
                        "commonName": {"type": "string", "maxLength": 64},
                        "dnsNames": {"type": "array", "items": {"type": "string"}},
                        "duration": {"type": "string"},
                        "isCA": {"type": "boolean"},
                        "issuerRef": {
                            "type": "object",
                            "required": ["name"],
                            "properties": {
                                "group": {"type": "string"},
                                "kind": {"type": "string"},
                                "name": {"type": "string"}
                            }
                        },
                        "privateKey": {
                            "type": "object",
                            "properties": {
                                "algorithm": {"type": "string", "enum": ["RSA", "ECDSA", "Ed25519"]},
                                "size": {"type": "integer"},
                                "rotationPolicy": {"type": "string", "enum": ["Never", "Always"]}
                            }
                        },
                        "secretName": {"type": "string"},
                        "secretTemplate": {
                            "type": "object",
                            "properties": {
                                "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
                                "labels": {"type": "object", "additionalProperties": {"type": "string"}}
                            }
                        },
                        "renewBefore": {"type": "string"},
                        "revisionHistoryLimit": {"type": "integer", "format": "int32", "nullable": true}
                    }
                },
                "status": {
                    "type": "object",
                    "properties": {
                        "conditions": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "required": ["status", "type"],
                                "properties": {
                                    "lastTransitionTime": {"type": "string", "format": "date-time"},
                                    "message": {"type": "string"},
                                    "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
                                    "type": {"type": "string"}
                                }
                            },
                            "x-kubernetes-list-map-keys": ["type"],
                            "x-kubernetes-list-type": "map"
                        },
                        "notAfter": {"type": "string", "format": "date-time"}
                    }
                }
            }
        });
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "certificates.cert-manager.io"},
            "spec": {
                "group": "cert-manager.io",
                "names": {"kind": "Certificate", "listKind": "CertificateList", "plural": "certificates",
                          "shortNames": ["cert", "certs"], "singular": "certificate"},
                "scope": "Namespaced",
                "versions": [
                    {"name": "v1alpha2", "served": false, "storage": false,
                     "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}},
                    {"name": "v1", "served": true, "storage": true,
                     "subresources": {"status": {}},
                     "schema": {"openAPIV3Schema": schema}}
                ]
            },
            "status": {"acceptedNames": {"kind": "Certificate", "plural": "certificates"}}
        })
    }

    /// A small cluster-scoped Widget CRD with the Kubernetes extensions: an embedded
    /// resource, preserved unknown fields, int-or-string, a map, a set.
    fn widgets(group: &str) -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("widgets.{group}")},
            "spec": {
                "group": group,
                "names": {"kind": "Widget", "plural": "widgets"},
                "scope": "Cluster",
                "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {"spec": {"type": "object", "properties": {
                        "replicas": {"type": "integer", "minimum": 0},
                        "port": {"x-kubernetes-int-or-string": true,
                                 "anyOf": [{"type": "integer"}, {"type": "string"}]},
                        "settings": {"type": "object", "additionalProperties": {"type": "string"}},
                        "config": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        "zones": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
                        "template": {"type": "object", "x-kubernetes-embedded-resource": true,
                                     "x-kubernetes-preserve-unknown-fields": true}
                    }}}
                }}}]
            }
        })
    }

    fn custom(crds: &[Value]) -> Result<Schema, Box<dyn std::error::Error>> {
        let resources = crds
            .iter()
            .map(CustomResource::from_crd)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Schema::from_custom_resources(
            Schema::builtin()?,
            &resources,
        )?)
    }

    #[test]
    fn a_crd_serves_one_kind_per_served_version() -> TestResult {
        let certificates = CustomResource::from_crd(&certificates())?;
        assert_eq!(certificates.name(), "certificates.cert-manager.io");
        assert_eq!(certificates.group(), "cert-manager.io");
        let kinds: Vec<(&str, &str, &str, bool)> = certificates
            .kinds()
            .iter()
            .map(|k| {
                (
                    k.api_version.as_str(),
                    k.kind.as_str(),
                    k.resource.as_str(),
                    k.namespaced,
                )
            })
            .collect();
        // v1alpha2 is no longer served.
        assert_eq!(
            kinds,
            [("cert-manager.io/v1", "Certificate", "certificates", true)]
        );
        let widgets = CustomResource::from_crd(&widgets("example.com"))?;
        assert!(widgets.kinds().iter().all(|k| !k.namespaced));
        Ok(())
    }

    #[test]
    fn a_typo_in_a_custom_kind_names_the_nearest_field() -> TestResult {
        let schema = custom(&[certificates()])?;
        let certificate = schema
            .kind("cert-manager.io/v1", "Certificate")
            .ok_or("no Certificate")?;
        let path = ["spec", "secretNme"];
        let resolution = schema.resolve(certificate, &path);
        assert_eq!(
            resolution.suggested_pointer(&path).as_deref(),
            Some("/spec/secretName")
        );
        let Resolution::NoSuchField { depth, fields, .. } = &resolution else {
            return Err(format!("{resolution:?}").into());
        };
        assert_eq!(*depth, 1);
        assert!(fields.contains(&"issuerRef"), "{fields:?}");

        let path = ["spec", "issuerRef", "nmae"];
        let resolution = schema.resolve(certificate, &path);
        assert_eq!(
            resolution.suggested_pointer(&path).as_deref(),
            Some("/spec/issuerRef/name")
        );

        let algorithm = schema.resolve(certificate, &["spec", "privateKey", "algorithm"]);
        let site = algorithm.found().ok_or("no algorithm")?;
        assert_eq!(site.target.enum_values, ["RSA", "ECDSA", "Ed25519"]);
        let limit = schema.resolve(certificate, &["spec", "revisionHistoryLimit"]);
        let site = limit.found().ok_or("no revisionHistoryLimit")?;
        assert!(site.target.nullable);
        assert_eq!(site.target.format.as_deref(), Some("int32"));
        // A list is indexed by number; the conditions are a list-map keyed by type.
        let path = ["spec", "dnsNames", "first"];
        assert!(matches!(
            schema.resolve(certificate, &path),
            Resolution::NotAnIndex { depth: 2, .. }
        ));
        let conditions = schema.resolve(certificate, &["status", "conditions"]);
        let Shape::List(list) = &conditions.found().ok_or("no conditions")?.target.shape else {
            return Err("conditions are not a list".into());
        };
        assert_eq!(
            list.list_type.as_ref().map(|t| t.map_keys()),
            Some(&["type".to_string()][..])
        );
        Ok(())
    }

    #[test]
    fn metadata_is_object_meta_whatever_the_crd_says() -> TestResult {
        let schema = custom(&[certificates(), widgets("example.com")])?;
        let certificate = schema
            .kind("cert-manager.io/v1", "Certificate")
            .ok_or("no Certificate")?;
        let label = schema.resolve(certificate, &["metadata", "labels", "app"]);
        let site = label.found().ok_or(format!("{label:?}"))?;
        assert_eq!(site.target.shape, Shape::String);
        let owner = schema.resolve(certificate, &["metadata", "ownerReferences", "0", "uid"]);
        assert!(owner.found().is_some(), "{owner:?}");
        let path = ["metadata", "lables", "app"];
        assert_eq!(
            schema
                .resolve(certificate, &path)
                .suggested_pointer(&path)
                .as_deref(),
            Some("/metadata/labels/app")
        );
        // apiVersion and kind are there whether or not the schema names them.
        let widget = schema.kind("example.com/v1", "Widget").ok_or("no Widget")?;
        assert!(schema.resolve(widget, &["kind"]).found().is_some());
        assert!(schema.resolve(widget, &["apiVersion"]).found().is_some());
        Ok(())
    }

    #[test]
    fn the_kubernetes_extensions_keep_their_meaning() -> TestResult {
        let schema = custom(&[widgets("example.com")])?;
        let widget = schema.kind("example.com/v1", "Widget").ok_or("no Widget")?;
        let found = |path: &[&str]| -> Result<Type, String> {
            let resolution = schema.resolve(widget, path);
            resolution
                .found()
                .map(|site| site.target.clone())
                .ok_or_else(|| format!("{path:?}: {resolution:?}"))
        };
        assert_eq!(found(&["spec", "port"])?.shape, Shape::IntOrString);
        assert_eq!(
            found(&["spec", "settings", "any-key"])?.shape,
            Shape::String
        );
        let zones = found(&["spec", "zones"])?;
        assert!(
            matches!(&zones.shape, Shape::List(l) if l.list_type == Some(crate::ListType::Set))
        );
        assert_eq!(found(&["spec", "replicas"])?.shape, Shape::Integer);
        // Preserved unknown fields: anything below is open, not wrong.
        assert!(matches!(
            schema.resolve(widget, &["spec", "config", "anything", "deeper"]),
            Resolution::Open { depth: 2, .. }
        ));
        // The embedded resource has ObjectMeta, and keeps what it does not name.
        assert_eq!(
            found(&["spec", "template", "metadata", "labels", "x"])?.shape,
            Shape::String
        );
        assert!(found(&["spec", "template", "kind"]).is_ok());
        assert!(matches!(
            schema.resolve(widget, &["spec", "template", "spec", "containers"]),
            Resolution::Open { depth: 2, .. }
        ));
        // The root is as pruned as the apiserver prunes it: a misspelt top-level field is
        // caught.
        let path = ["sepc", "replicas"];
        assert_eq!(
            schema
                .resolve(widget, &path)
                .suggested_pointer(&path)
                .as_deref(),
            Some("/spec/replicas")
        );
        // Nothing is a scalar that cannot hold fields by mistake.
        assert!(matches!(
            schema.resolve(widget, &["spec", "replicas", "x"]),
            Resolution::NotAContainer { .. }
        ));
        Ok(())
    }

    #[test]
    fn a_crd_without_a_schema_or_preserving_everything_is_open() -> TestResult {
        let mut crd = widgets("example.com");
        crd["spec"]["versions"][0]
            .as_object_mut()
            .ok_or("version")?
            .remove("schema");
        let schema = custom(&[crd])?;
        let widget = schema.kind("example.com/v1", "Widget").ok_or("no Widget")?;
        assert!(matches!(
            schema.resolve(widget, &["spec", "anything"]),
            Resolution::Open { depth: 0, .. }
        ));
        assert!(
            schema
                .resolve(widget, &["metadata", "name"])
                .found()
                .is_some()
        );

        let mut crd = widgets("example.com");
        crd["spec"]["preserveUnknownFields"] = json!(true);
        let schema = custom(&[crd])?;
        let widget = schema.kind("example.com/v1", "Widget").ok_or("no Widget")?;
        assert!(matches!(
            schema.resolve(widget, &["sepc"]),
            Resolution::Open { depth: 0, .. }
        ));
        Ok(())
    }

    #[test]
    fn a_kind_served_twice_is_kept_once_and_what_is_not_a_crd_is_refused() -> TestResult {
        let mut other = widgets("example.com");
        other["metadata"]["name"] = json!("gadgets.example.com");
        other["spec"]["names"]["plural"] = json!("gadgets");
        let schema = custom(&[widgets("example.com"), other])?;
        let served: Vec<&Kind> = schema.kinds_named("Widget").collect();
        assert_eq!(served.len(), 1);
        assert_eq!(served[0].resource, "widgets");

        let mut crd = widgets_without("/spec/group")?;
        assert_eq!(
            CustomResource::from_crd(&crd),
            Err(CrdError::Missing {
                crd: "widgets.example.com".to_string(),
                field: "spec.group"
            })
        );
        crd = json!({"kind": "ConfigMap", "metadata": {"name": "x"}, "data": {}});
        assert!(CustomResource::from_crd(&crd).is_err());
        let mut crd = widgets("example.com");
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"] = json!({"type": "string"});
        let error = CustomResource::from_crd(&crd).err().ok_or("accepted")?;
        assert!(error.to_string().contains("version v1"), "{error}");
        Ok(())
    }

    fn widgets_without(pointer: &str) -> Result<Value, String> {
        let mut crd = widgets("example.com");
        let (parent, key) = pointer.rsplit_once('/').ok_or("a pointer")?;
        crd.pointer_mut(parent)
            .and_then(Value::as_object_mut)
            .ok_or("a parent")?
            .remove(key);
        Ok(crd)
    }

    #[test]
    fn kinds_look_in_both_and_suggest_within_a_custom_group() -> TestResult {
        let builtin = Schema::builtin()?;
        // A CRD may not take a built-in group: kanon never looks it up there.
        let custom = Arc::new(custom(&[
            certificates(),
            widgets("example.com"),
            widgets("apps"),
        ])?);
        let kinds = Kinds::with_custom(builtin, custom);
        let pod = kinds.kind("v1", "Pod").ok_or("no Pod")?;
        assert_eq!(pod.origin, Origin::BuiltIn);
        let widget = kinds.kind("example.com/v1", "Widget").ok_or("no Widget")?;
        assert_eq!(widget.origin, Origin::Custom);
        assert!(widget.resolve(&["spec", "replicas"]).found().is_some());
        assert!(kinds.kind("apps/v1", "Widget").is_none());
        assert!(kinds.is_builtin_group("apps/v1") && !kinds.is_custom_group("apps/v1"));
        assert!(kinds.is_custom_group("example.com/v2"));
        assert!(!kinds.is_custom_group("other.io/v1"));

        let suggestion = |api_version: &str, kind: &str| {
            kinds
                .suggest_custom_kind(api_version, kind)
                .map(|s| s.to_string())
        };
        assert_eq!(
            suggestion("example.com/v1", "widget").as_deref(),
            Some("did you mean `Widget` (example.com/v1)?")
        );
        assert_eq!(
            suggestion("example.com/v1", "Widgte").as_deref(),
            Some("did you mean `Widget` (example.com/v1)?")
        );
        assert_eq!(
            suggestion("example.com/v2", "Widget").as_deref(),
            Some("`Widget` is served at `example.com/v1`")
        );
        // Nothing near, a kind that exists, a group no CRD serves, a kind of another group.
        assert_eq!(suggestion("example.com/v1", "Gizmo"), None);
        assert_eq!(suggestion("example.com/v1", "Widget"), None);
        assert_eq!(suggestion("other.io/v1", "Widget"), None);
        assert_eq!(suggestion("example.com/v1", "Certificate"), None);
        assert!(matches!(
            kinds.suggest_custom_kind("cert-manager.io/v1", "certificate"),
            Some(KindSuggestion::DidYouMean(_))
        ));
        Ok(())
    }
}
