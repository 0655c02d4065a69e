//! References (`dataRef`, `valueRef`): where a value a rule reads comes from, compiled once
//! and resolved per request through the [`Lookup`](crate::Lookup) trait, the same for every
//! rule language.

mod http;
mod objects;
mod path;
mod resolve;
mod target;
mod text;

use kanon_api::{RefSource, ResourceRefer};

use crate::error::FieldError;
use path::{RefPath, compile_path};
use target::{Target, compile_http, compile_target};

pub use crate::jsonpath::parse_jsonpath;
pub use path::selects_many;
pub use resolve::RefScope;

/// A compiled reference.
#[derive(Clone, Debug)]
pub struct CompiledRef {
    source: RefSource,
    path: RefPath,
    target: Option<Target>,
    field: String,
    /// The namespace of a namespaced policy, whose `k8s` references may read objects only in
    /// that namespace (and cluster-scoped ones).
    own_namespace: Option<String>,
    /// A JSONPath through items gives one value per item, null where the item lacks the field
    /// (see `path::Items`): for the value a condition tests, whose quantifier must see every item.
    per_item: bool,
}

impl CompiledRef {
    /// What resolving it reads of the request's object or old object, when that is known
    /// (`None`: it may read anything of them: a lookup whose target is written with
    /// placeholders, a JSONPath).
    pub(crate) fn object_read(&self) -> Option<kanon_cel::FieldsRead> {
        use kanon_cel::FieldsRead;
        match self.source {
            RefSource::Current | RefSource::Old if self.target.is_none() => {}
            // The owner is found by the object's metadata, which every projection keeps.
            RefSource::Owner if self.target.is_none() => {
                return Some(FieldsRead::Paths(Vec::new()));
            }
            _ => return None,
        }
        Some(match &self.path {
            RefPath::Whole | RefPath::JsonPath { .. } => FieldsRead::Whole,
            RefPath::Pointer(pointer) => FieldsRead::Paths(vec![
                crate::pointer::token_list(pointer)?
                    .into_iter()
                    .map(std::sync::Arc::from)
                    .collect(),
            ]),
        })
    }

    /// Compiles a reference of a policy (`own_namespace`: the namespace of a namespaced
    /// policy); problems go to `errors` under `field`.
    pub fn compile(
        r: &ResourceRefer,
        field: &str,
        own_namespace: Option<&str>,
        errors: &mut Vec<FieldError>,
    ) -> CompiledRef {
        let path = compile_path(r.path.as_deref(), field, errors);
        let mut target = None;
        match r.from {
            RefSource::K8s => match &r.k8s {
                Some(k) => {
                    target = Some(Target::Object(compile_target(
                        k,
                        &format!("{field}.k8s"),
                        own_namespace,
                        errors,
                    )))
                }
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
                Some(h) => {
                    target = Some(Target::Http(compile_http(
                        h,
                        &format!("{field}.http"),
                        own_namespace,
                        errors,
                    )))
                }
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
            own_namespace: own_namespace.map(str::to_string),
            per_item: false,
        }
    }

    /// The reference, resolving a JSONPath through items (`$.spec.containers[*].image`) to one
    /// value per item, null where an item lacks the field, instead of dropping that item.
    pub fn per_item(mut self) -> Self {
        self.per_item = true;
        self
    }

    /// Whether resolving needs the program context (for `{{ }}` placeholders).
    pub fn needs_context(&self) -> bool {
        matches!(self.source, RefSource::K8s | RefSource::Http)
    }
}
