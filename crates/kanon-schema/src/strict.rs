//! The fields a value has that its type does not declare, named as kube-apiserver's strict
//! decoding into a built-in kind's Go types names them (`spec.containers[0].foo`).

use std::fmt::Write as _;

use serde_json::Value;

use crate::{Schema, Shape, Type};

impl Schema {
    /// The fields of `value` that `ty` does not declare, at most `limit` of them, in the value's
    /// order: the paths strict decoding reports as `unknown field "<path>"`, keys joined by `.`
    /// and list items as `[<index>]`. Places the schema leaves free-form (no type, an object
    /// without fields such as `RawExtension`, preserved unknown fields, an embedded resource)
    /// hold no unknown field, and neither do values of the wrong type (decoding refuses those
    /// for another reason).
    pub fn unknown_fields(&self, ty: &Type, value: &Value, limit: usize) -> Vec<String> {
        let mut found = Vec::new();
        let mut path = String::new();
        self.unknown_below(ty, value, &mut path, &mut found, limit);
        found
    }

    /// [`Schema::unknown_fields`] of `value` written at `path` (JSON pointer segments, list
    /// indexes as numbers) below `ty`, the paths from `ty`'s root: `[<path>]` itself when the
    /// path goes through a field that is not declared. Allocates nothing when nothing is found.
    pub fn unknown_fields_at<S: AsRef<str>>(
        &self,
        ty: &Type,
        path: &[S],
        value: &Value,
        limit: usize,
    ) -> Vec<String> {
        let mut at = ty;
        for (depth, segment) in path.iter().enumerate() {
            let Some((target, _)) = self.deref(at) else {
                return Vec::new();
            };
            if target.preserve_unknown_fields || target.embedded_resource {
                return Vec::new();
            }
            at = match &target.shape {
                Shape::Object(object) if !object.fields.is_empty() => {
                    match object.fields.get(segment.as_ref()) {
                        Some(field) => field,
                        None => return vec![self.go_path(ty, &path[..=depth])],
                    }
                }
                Shape::Map(values) => values,
                Shape::List(list) => &list.items,
                _ => return Vec::new(),
            };
        }
        let mut found = Vec::new();
        self.unknown_below(at, value, &mut String::new(), &mut found, limit);
        if found.is_empty() {
            return found;
        }
        let prefix = self.go_path(ty, path);
        found
            .into_iter()
            .map(|below| match below.starts_with('[') || prefix.is_empty() {
                true => format!("{prefix}{below}"),
                false => format!("{prefix}.{below}"),
            })
            .collect()
    }

    /// `path` below `ty` as the decoder names it: keys joined by `.`, list items as `[<index>]`.
    fn go_path<S: AsRef<str>>(&self, ty: &Type, path: &[S]) -> String {
        let mut named = String::new();
        let mut at = Some(ty);
        for segment in path {
            let segment = segment.as_ref();
            let target = at.and_then(|ty| self.deref(ty)).map(|(target, _)| target);
            at = match target.map(|t| &t.shape) {
                Some(Shape::List(list)) => {
                    let _ = write!(named, "[{segment}]");
                    Some(&list.items)
                }
                Some(Shape::Object(object)) => {
                    push_key(&mut named, segment);
                    object.fields.get(segment)
                }
                Some(Shape::Map(values)) => {
                    push_key(&mut named, segment);
                    Some(values)
                }
                _ => {
                    push_key(&mut named, segment);
                    None
                }
            };
        }
        named
    }

    fn unknown_below(
        &self,
        ty: &Type,
        value: &Value,
        path: &mut String,
        found: &mut Vec<String>,
        limit: usize,
    ) {
        let Some((ty, _)) = self.deref(ty) else {
            return;
        };
        if found.len() >= limit || ty.preserve_unknown_fields || ty.embedded_resource {
            return;
        }
        let depth = path.len();
        match (&ty.shape, value) {
            (Shape::Object(object), Value::Object(fields)) if !object.fields.is_empty() => {
                for (name, field) in fields {
                    push_key(path, name);
                    match object.fields.get(name) {
                        Some(declared) => self.unknown_below(declared, field, path, found, limit),
                        None if found.len() < limit => found.push(path.clone()),
                        None => {}
                    }
                    path.truncate(depth);
                }
            }
            (Shape::Map(values), Value::Object(entries)) => {
                for (key, entry) in entries {
                    push_key(path, key);
                    self.unknown_below(values, entry, path, found, limit);
                    path.truncate(depth);
                }
            }
            (Shape::List(list), Value::Array(items)) => {
                for (index, item) in items.iter().enumerate() {
                    let _ = write!(path, "[{index}]");
                    self.unknown_below(&list.items, item, path, found, limit);
                    path.truncate(depth);
                }
            }
            _ => {}
        }
    }
}

fn push_key(path: &mut String, key: &str) {
    if !path.is_empty() {
        path.push('.');
    }
    path.push_str(key);
}
