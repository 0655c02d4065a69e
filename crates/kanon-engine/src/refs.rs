//! References (`dataRef`, `valueRef`): where a value comes from, compiled once and resolved per
//! request through the [`Lookup`] trait.

use std::sync::Arc;

use jsonpath_rust::JsonPath;
use kanon_api::{ObjectRefer, RefSource, ResourceRefer};
use serde_json::Value;

use crate::error::FieldError;
use crate::lookup::Lookup;
use crate::program::{Program, ProgramKind, ProgramLimits};
use crate::selector::{LabelMatcher, labels_of};

/// Where inside the source the value is.
#[derive(Clone, Debug)]
enum RefPath {
    /// The whole source.
    Whole,
    /// A JSON pointer.
    Pointer(String),
    /// A JSONPath; `single` when it can only ever select one node (no wildcard, filter,
    /// slice, union or descent), so its value is that node rather than a list.
    JsonPath { text: String, single: bool },
}

/// A string that may hold `{{ expression }}` placeholders.
#[derive(Clone, Debug)]
enum Text {
    Plain(String),
    Template(Program),
}

impl Text {
    fn compile(text: &str, field: String, errors: &mut Vec<FieldError>) -> Text {
        if !text.contains("{{") && !text.contains("{%") {
            return Text::Plain(text.to_string());
        }
        match Program::compile(text, ProgramKind::Validate, ProgramLimits::default()) {
            Ok(p) => Text::Template(p),
            Err(e) => {
                errors.push(FieldError::new(
                    field,
                    format!("placeholder: {}", e.message),
                ));
                Text::Plain(text.to_string())
            }
        }
    }

    fn render(&self, context: &minijinja::Value) -> Result<String, String> {
        match self {
            Text::Plain(s) => Ok(s.clone()),
            Text::Template(p) => p
                .render(context)
                .map(|s| s.trim().to_string())
                .map_err(|e| e.message),
        }
    }
}

/// A compiled `k8s` reference target.
#[derive(Clone, Debug)]
struct ObjectTarget {
    api_version: Text,
    kind: Text,
    namespace: Option<Text>,
    name: Option<Text>,
    selector: Option<LabelMatcher>,
}

/// A compiled reference.
#[derive(Clone, Debug)]
pub struct CompiledRef {
    source: RefSource,
    path: RefPath,
    target: Option<ObjectTarget>,
    field: String,
}

/// What a reference is resolved against.
pub struct RefScope<'a> {
    /// The object under test.
    pub object: &'a Value,
    /// The previous object, if any.
    pub old_object: Option<&'a Value>,
    /// The object's namespace.
    pub namespace: Option<&'a str>,
    /// Cluster objects.
    pub lookup: &'a dyn Lookup,
    /// The program context, for `{{ }}` placeholders.
    pub context: &'a minijinja::Value,
}

fn compile_path(path: Option<&str>, field: &str, errors: &mut Vec<FieldError>) -> RefPath {
    let Some(path) = path.filter(|p| !p.is_empty()) else {
        return RefPath::Whole;
    };
    if path.starts_with('$') {
        if let Err(e) = jsonpath_rust::parser::parse_json_path(path) {
            errors.push(FieldError::new(
                format!("{field}.path"),
                format!("`{path}` is not a JSONPath: {e}"),
            ));
        }
        let single = !path.contains(['*', '?', ':', ',']) && !path.contains("..");
        return RefPath::JsonPath {
            text: path.to_string(),
            single,
        };
    }
    if let Err(e) = crate::pointer::check(path) {
        errors.push(FieldError::new(
            format!("{field}.path"),
            format!("{e} (or a JSONPath starting with `$`)"),
        ));
    }
    RefPath::Pointer(path.to_string())
}

impl CompiledRef {
    /// Compiles a reference; problems go to `errors` under `field`.
    pub fn compile(r: &ResourceRefer, field: &str, errors: &mut Vec<FieldError>) -> CompiledRef {
        let path = compile_path(r.path.as_deref(), field, errors);
        let mut target = None;
        match r.from {
            RefSource::K8s => match &r.k8s {
                Some(k) => target = Some(compile_target(k, &format!("{field}.k8s"), errors)),
                None => errors.push(FieldError::new(
                    format!("{field}.k8s"),
                    "is required for from: k8s",
                )),
            },
            RefSource::Http => match &r.http {
                Some(h) if h.url.is_empty() => errors.push(FieldError::new(
                    format!("{field}.http.url"),
                    "must not be empty",
                )),
                Some(_) => {}
                None => errors.push(FieldError::new(
                    format!("{field}.http"),
                    "is required for from: http",
                )),
            },
            _ => {}
        }
        if r.from != RefSource::K8s && r.k8s.is_some() {
            errors.push(FieldError::new(
                format!("{field}.k8s"),
                "is only used with from: k8s",
            ));
        }
        if r.from != RefSource::Http && r.http.is_some() {
            errors.push(FieldError::new(
                format!("{field}.http"),
                "is only used with from: http",
            ));
        }
        CompiledRef {
            source: r.from,
            path,
            target,
            field: field.to_string(),
        }
    }

    /// Resolves the value: `Ok(None)` when the source or the path holds nothing (a missing
    /// owner reference, an absent field); an error when a lookup fails or a referenced object
    /// does not exist.
    pub fn resolve(&self, scope: &RefScope<'_>) -> Result<Option<Value>, String> {
        let at = &self.field;
        let source: Option<Arc<Value>> = match self.source {
            RefSource::Current => Some(Arc::new(scope.object.clone())),
            RefSource::Old => scope.old_object.map(|o| Arc::new(o.clone())),
            RefSource::Owner => self.owner(scope)?,
            RefSource::K8s => Some(self.k8s(scope)?),
            RefSource::Http => {
                return Err(format!(
                    "{at}: HTTP references are not available here (offline evaluation has no network; they are resolved by `kanon serve` in a cluster)"
                ));
            }
        };
        let Some(source) = source else {
            return Ok(None);
        };
        Ok(match &self.path {
            RefPath::Whole => Some((*source).clone()),
            RefPath::Pointer(p) => crate::pointer::get(&source, p).cloned(),
            RefPath::JsonPath { text, single } => {
                let found = source.query(text).map_err(|e| format!("{at}.path: {e}"))?;
                match (single, found.len()) {
                    (_, 0) => None,
                    (true, 1) => Some(found[0].clone()),
                    _ => Some(Value::Array(found.into_iter().cloned().collect())),
                }
            }
        })
    }

    fn owner(&self, scope: &RefScope<'_>) -> Result<Option<Arc<Value>>, String> {
        let refs = scope
            .object
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array);
        let Some(refs) = refs.filter(|r| !r.is_empty()) else {
            return Ok(None);
        };
        let owner = refs
            .iter()
            .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
            .unwrap_or(&refs[0]);
        let text = |k: &str| owner.get(k).and_then(Value::as_str).unwrap_or_default();
        let (api_version, kind, name) = (text("apiVersion"), text("kind"), text("name"));
        let found = scope
            .lookup
            .get(api_version, kind, scope.namespace, name)
            .map_err(|e| format!("{}: {e}", self.field))?;
        // Owners of namespaced objects may be cluster-scoped (e.g. a Node).
        let found = match found {
            Some(o) => Some(o),
            None => scope
                .lookup
                .get(api_version, kind, None, name)
                .map_err(|e| format!("{}: {e}", self.field))?,
        };
        match found {
            Some(o) => Ok(Some(o)),
            None => Err(format!(
                "{}: the owner {api_version} {kind} {}{name} was not found",
                self.field,
                scope.namespace.map(|n| format!("{n}/")).unwrap_or_default()
            )),
        }
    }

    fn k8s(&self, scope: &RefScope<'_>) -> Result<Arc<Value>, String> {
        let at = format!("{}.k8s", self.field);
        let Some(t) = &self.target else {
            return Err(format!("{at}: missing"));
        };
        let render = |text: &Text, what: &str| {
            text.render(scope.context)
                .map_err(|e| format!("{at}.{what}: {e}"))
        };
        let api_version = render(&t.api_version, "apiVersion")?;
        let kind = render(&t.kind, "kind")?;
        let namespace = match &t.namespace {
            Some(n) => Some(render(n, "namespace")?).filter(|n| !n.is_empty()),
            None => None,
        };
        if let Some(name) = &t.name {
            let name = render(name, "name")?;
            let found = scope
                .lookup
                .get(&api_version, &kind, namespace.as_deref(), &name)
                .map_err(|e| format!("{at}: {e}"))?;
            return found.ok_or_else(|| {
                format!(
                    "{at}: {api_version} {kind} {}{name} was not found",
                    namespace
                        .as_deref()
                        .map(|n| format!("{n}/"))
                        .unwrap_or_default()
                )
            });
        }
        let selector = t.selector.clone().unwrap_or_default();
        let listed = scope
            .lookup
            .list(&api_version, &kind, namespace.as_deref())
            .map_err(|e| format!("{at}: {e}"))?;
        let items: Vec<Value> = listed
            .into_iter()
            .filter(|o| selector.matches(labels_of(o)))
            .map(|o| (*o).clone())
            .collect();
        Ok(Arc::new(Value::Array(items)))
    }
}

fn compile_target(k: &ObjectRefer, field: &str, errors: &mut Vec<FieldError>) -> ObjectTarget {
    if k.api_version.is_empty() {
        errors.push(FieldError::new(
            format!("{field}.apiVersion"),
            "must not be empty",
        ));
    }
    if k.kind.is_empty() {
        errors.push(FieldError::new(
            format!("{field}.kind"),
            "must not be empty",
        ));
    }
    match (&k.name, &k.label_selector) {
        (Some(_), Some(_)) => errors.push(FieldError::new(
            field,
            "set name or labelSelector, not both",
        )),
        (None, None) => errors.push(FieldError::new(field, "set name or labelSelector")),
        _ => {}
    }
    // Placeholders in selector values are not supported: the selector is compiled once.
    let selector = k
        .label_selector
        .as_ref()
        .map(|s| LabelMatcher::compile(s, &format!("{field}.labelSelector"), errors));
    ObjectTarget {
        api_version: Text::compile(&k.api_version, format!("{field}.apiVersion"), errors),
        kind: Text::compile(&k.kind, format!("{field}.kind"), errors),
        namespace: k
            .namespace
            .as_ref()
            .map(|n| Text::compile(n, format!("{field}.namespace"), errors)),
        name: k
            .name
            .as_ref()
            .map(|n| Text::compile(n, format!("{field}.name"), errors)),
        selector,
    }
}
