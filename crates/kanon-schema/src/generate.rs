//! Building a [`Schema`] from a running kube-apiserver: its `/openapi/v3` documents for the
//! types, its discovery lists for the kinds (the OpenAPI documents do not say which kinds are
//! namespaced, nor their resource names).
//!
//! The caller supplies the HTTP GET ([`generate`] takes a function from a server path to the
//! response body), so this crate needs no HTTP client and `cargo xtask schema` and the
//! end-to-end staleness check read the server the same way (through `kubectl get --raw`).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use crate::convert::{Dialect, collect_refs, convert};
use crate::model::{Kind, SchemaFile, Type};
use crate::{LoadError, Schema};

/// Why a schema could not be generated.
#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    /// The fetch function failed.
    #[error("fetching {path}: {message}")]
    Fetch {
        /// The server path asked for.
        path: String,
        /// What the fetch function said.
        message: String,
    },
    /// A response is not JSON.
    #[error("{path} did not answer JSON: {source}")]
    Json {
        /// The server path.
        path: String,
        /// The parse error.
        #[source]
        source: serde_json::Error,
    },
    /// A response is JSON but not of the form expected, or uses an OpenAPI keyword the
    /// converter does not know (teach it the keyword rather than drop it unseen).
    #[error("{path}: {message}")]
    Unexpected {
        /// The server path.
        path: String,
        /// What was wrong, and where in the document.
        message: String,
    },
    /// The result does not hold together (a reference to a type no document defines, a kind
    /// listed twice).
    #[error(transparent)]
    Inconsistent(#[from] LoadError),
}

/// Reads the server through `fetch` (called with paths such as `/openapi/v3` and
/// `/apis/apps/v1`; it returns the response body or an error message) and converts what it
/// serves into a [`Schema`]:
///
/// - `/version` for the server's `gitVersion`;
/// - the `/openapi/v3` index, then each group-version document it lists (`api/v1`,
///   `apis/<group>/<version>`), except those of CustomResourceDefinitions and of aggregated API
///   servers (read from `/apis/apiextensions.k8s.io/v1/customresourcedefinitions` and
///   `/apis/apiregistration.k8s.io/v1/apiservices`): only built-in kinds are kept;
/// - for each, its discovery list (`/api/v1`, `/apis/<group>/<version>`): every resource that
///   is not a subresource becomes a [`Kind`], whose root type is the component that names its
///   group, version and kind in `x-kubernetes-group-version-kind`;
/// - every type a root type reaches, converted once and shared by name.
pub fn generate(
    fetch: &mut dyn FnMut(&str) -> Result<String, String>,
) -> Result<Schema, GenerateError> {
    let version = get(fetch, "/version")?;
    let kubernetes = version
        .get("gitVersion")
        .and_then(Value::as_str)
        .ok_or_else(|| unexpected("/version", "no `gitVersion`"))?
        .to_string();
    let custom = custom_group_versions(fetch)?;
    let builtin = builtin_group_versions(fetch)?;
    let index = get(fetch, "/openapi/v3")?;
    let paths = index
        .get("paths")
        .and_then(Value::as_object)
        .ok_or_else(|| unexpected("/openapi/v3", "no `paths` object"))?;

    let mut kinds = Vec::new();
    let mut types = BTreeMap::new();
    for key in paths.keys() {
        let Some((group, version)) = group_version(key) else {
            continue;
        };
        let gv = (group.to_string(), version.to_string());
        if custom.contains(&gv) {
            continue;
        }
        let document_path = format!("/openapi/v3/{key}");
        let document = match get(fetch, &document_path) {
            Ok(document) => document,
            // The index may still list the group of a CRD deleted a moment ago, gone by now.
            Err(_) if !builtin.contains(&gv) => continue,
            Err(e) => return Err(e),
        };
        let schemas = document
            .pointer("/components/schemas")
            .and_then(Value::as_object)
            .ok_or_else(|| unexpected(&document_path, "no `components.schemas`"))?;
        let discovery_path = format!("/{key}");
        let discovery = get(fetch, &discovery_path)?;
        let resources = discovery
            .get("resources")
            .and_then(Value::as_array)
            .ok_or_else(|| unexpected(&discovery_path, "no `resources` list"))?;
        let mut converter = Converter {
            path: &document_path,
            schemas,
            types: &mut types,
            done: BTreeSet::new(),
        };
        for resource in resources {
            let field = |name: &str| resource.get(name);
            let text = |name: &str| {
                field(name).and_then(Value::as_str).ok_or_else(|| {
                    unexpected(&discovery_path, &format!("a resource has no {name}"))
                })
            };
            let resource_name = text("name")?;
            // `deployments/status`, `pods/log`: subresources are not kinds of their own.
            if resource_name.contains('/') {
                continue;
            }
            let kind = text("kind")?;
            let namespaced = field("namespaced")
                .and_then(Value::as_bool)
                .ok_or_else(|| {
                    unexpected(
                        &discovery_path,
                        &format!("{resource_name} does not say whether it is namespaced"),
                    )
                })?;
            let root = root_type(schemas, group, version, kind)
                .map_err(|message| unexpected(&document_path, &message))?;
            converter.convert_reachable(&root)?;
            kinds.push(Kind {
                api_version: if group.is_empty() {
                    version.to_string()
                } else {
                    format!("{group}/{version}")
                },
                kind: kind.to_string(),
                resource: resource_name.to_string(),
                namespaced,
                type_name: root,
            });
        }
    }
    kinds.sort_by(|a, b| (a.group(), a.version(), &a.kind).cmp(&(b.group(), b.version(), &b.kind)));
    Ok(Schema::from_file(SchemaFile {
        kubernetes,
        kinds,
        types,
    })?)
}

/// `GET path` through `fetch`, parsed as JSON.
fn get(
    fetch: &mut dyn FnMut(&str) -> Result<String, String>,
    path: &str,
) -> Result<Value, GenerateError> {
    let body = fetch(path).map_err(|message| GenerateError::Fetch {
        path: path.to_string(),
        message,
    })?;
    serde_json::from_str(&body).map_err(|source| GenerateError::Json {
        path: path.to_string(),
        source,
    })
}

fn unexpected(path: &str, message: &str) -> GenerateError {
    GenerateError::Unexpected {
        path: path.to_string(),
        message: message.to_string(),
    }
}

/// The group and version of an `/openapi/v3` index key: `api/v1` is the core group;
/// `apis/apps/v1` is `apps`, `v1`. `None` for every other key (`apis/apps`, `version`, ...).
fn group_version(key: &str) -> Option<(&str, &str)> {
    if key == "api/v1" {
        return Some(("", "v1"));
    }
    let (group, version) = key.strip_prefix("apis/")?.split_once('/')?;
    (!version.contains('/')).then_some((group, version))
}

/// The group-versions served by CustomResourceDefinitions or by aggregated API servers (an
/// APIService with a `service`): not built in.
fn custom_group_versions(
    fetch: &mut dyn FnMut(&str) -> Result<String, String>,
) -> Result<BTreeSet<(String, String)>, GenerateError> {
    let mut custom = BTreeSet::new();
    let path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
    for crd in items(&get(fetch, path)?, path)? {
        let group = crd.pointer("/spec/group").and_then(Value::as_str);
        let versions = crd.pointer("/spec/versions").and_then(Value::as_array);
        let (Some(group), Some(versions)) = (group, versions) else {
            return Err(unexpected(
                path,
                "a CRD without spec.group or spec.versions",
            ));
        };
        for version in versions {
            let name = version.get("name").and_then(Value::as_str);
            let name = name.ok_or_else(|| unexpected(path, "a CRD version without a name"))?;
            custom.insert((group.to_string(), name.to_string()));
        }
    }
    let path = "/apis/apiregistration.k8s.io/v1/apiservices";
    for service in items(&get(fetch, path)?, path)? {
        if service.pointer("/spec/service").is_none_or(Value::is_null) {
            continue;
        }
        let group = service.pointer("/spec/group").and_then(Value::as_str);
        let version = service.pointer("/spec/version").and_then(Value::as_str);
        if let (Some(group), Some(version)) = (group, version) {
            custom.insert((group.to_string(), version.to_string()));
        }
    }
    Ok(custom)
}

/// The group-versions kube-apiserver registers as its own at start (APIServices labelled
/// `kube-aggregator.kubernetes.io/automanaged: onstart`, with no backing service): a document of
/// one of these that cannot be read is an error, while one of another group (a CRD deleted
/// between listing the CRDs and reading the OpenAPI index) is skipped.
fn builtin_group_versions(
    fetch: &mut dyn FnMut(&str) -> Result<String, String>,
) -> Result<BTreeSet<(String, String)>, GenerateError> {
    let mut builtin = BTreeSet::new();
    let path = "/apis/apiregistration.k8s.io/v1/apiservices";
    for service in items(&get(fetch, path)?, path)? {
        let onstart = service
            .pointer("/metadata/labels/kube-aggregator.kubernetes.io~1automanaged")
            .and_then(Value::as_str)
            == Some("onstart");
        if !onstart
            || service
                .pointer("/spec/service")
                .is_some_and(|s| !s.is_null())
        {
            continue;
        }
        // The core group's APIService (`v1.`) has no group.
        let group = service
            .pointer("/spec/group")
            .and_then(Value::as_str)
            .unwrap_or("");
        let version = service.pointer("/spec/version").and_then(Value::as_str);
        let version = version.ok_or_else(|| unexpected(path, "an APIService without a version"))?;
        builtin.insert((group.to_string(), version.to_string()));
    }
    Ok(builtin)
}

/// The `items` of a list response.
fn items<'v>(list: &'v Value, path: &str) -> Result<&'v Vec<Value>, GenerateError> {
    list.get("items")
        .and_then(Value::as_array)
        .ok_or_else(|| unexpected(path, "no `items` list"))
}

/// The one component whose `x-kubernetes-group-version-kind` names this group, version and
/// kind.
fn root_type(
    schemas: &Map<String, Value>,
    group: &str,
    version: &str,
    kind: &str,
) -> Result<String, String> {
    let names_it = |gvk: &Value| {
        gvk.get("group").and_then(Value::as_str) == Some(group)
            && gvk.get("version").and_then(Value::as_str) == Some(version)
            && gvk.get("kind").and_then(Value::as_str) == Some(kind)
    };
    let mut matches = schemas.iter().filter(|(_, schema)| {
        schema
            .get("x-kubernetes-group-version-kind")
            .and_then(Value::as_array)
            .is_some_and(|gvks| gvks.iter().any(names_it))
    });
    let api_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    match (matches.next(), matches.next()) {
        (Some((name, _)), None) => Ok(name.clone()),
        (None, _) => Err(format!("no component is {api_version} {kind}")),
        (Some((a, _)), Some((b, _))) => Err(format!(
            "both `{a}` and `{b}` say they are {api_version} {kind}"
        )),
    }
}

/// Converts the components of one group-version document into `types`.
struct Converter<'a> {
    /// The document's server path, for messages.
    path: &'a str,
    schemas: &'a Map<String, Value>,
    types: &'a mut BTreeMap<String, Type>,
    /// Components of this document already converted.
    done: BTreeSet<String>,
}

impl Converter<'_> {
    /// Converts `root` and every component it reaches. A component another document already
    /// gave must convert to the same type (the same Go type is published in every document that
    /// uses it), else the server contradicts itself.
    fn convert_reachable(&mut self, root: &str) -> Result<(), GenerateError> {
        let mut pending = vec![root.to_string()];
        while let Some(name) = pending.pop() {
            if !self.done.insert(name.clone()) {
                continue;
            }
            let schema = self.schemas.get(&name).ok_or_else(|| {
                unexpected(
                    self.path,
                    &format!("`{name}` is referred to but not defined"),
                )
            })?;
            let ty = convert(schema, &name, Dialect::OpenApi)
                .map_err(|message| unexpected(self.path, &message))?;
            collect_refs(&ty, &mut pending);
            match self.types.get(&name) {
                Some(known) if *known != ty => {
                    return Err(unexpected(
                        self.path,
                        &format!("`{name}` differs from the same component in another document"),
                    ));
                }
                Some(_) => {}
                None => {
                    self.types.insert(name, ty);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_versions_of_index_keys() {
        assert_eq!(group_version("api/v1"), Some(("", "v1")));
        assert_eq!(group_version("apis/apps/v1"), Some(("apps", "v1")));
        assert_eq!(group_version("apis/apps"), None);
        assert_eq!(group_version("api"), None);
        assert_eq!(group_version("openid/v1/jwks"), None);
        assert_eq!(group_version(".well-known/openid-configuration"), None);
    }
}
