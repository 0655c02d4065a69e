//! Where inside a reference's source its value is: the whole source, a JSON pointer, or a
//! JSONPath (parsed once, when the policy compiles).

use std::sync::Arc;

use jsonpath_rust::parser::model::JpQuery;
use serde_json::Value;

use crate::error::FieldError;
use crate::jsonpath::{SelectionError, copied, parse_jsonpath, select};
use crate::rule::RuleError;

/// Where inside the source the value is.
#[derive(Clone, Debug)]
pub(super) enum RefPath {
    /// The whole source.
    Whole,
    /// A JSON pointer.
    Pointer(String),
    /// A JSONPath; `single` when it can only ever select one node (no wildcard, filter,
    /// slice, union or descent), so its value is that node rather than a list.
    JsonPath {
        text: String,
        query: Option<Arc<JpQuery>>,
        single: bool,
        /// How a path that selects several nodes reads them as items, when it can.
        items: Option<Items>,
    },
}

/// A JSONPath that selects items and then reads the same field of each
/// (`$.spec.containers[*].resources.limits.memory`): the query up to its last segment that
/// selects several nodes, and the plain steps after it. Such a path gives one value per
/// item, null where the item lacks the field: a standard JSONPath would drop those items, and
/// a condition that every container has a memory limit would never see the container that
/// has none.
#[derive(Clone, Debug)]
pub(super) struct Items {
    query: Arc<JpQuery>,
    tail: Vec<TailStep>,
}

#[derive(Clone, Debug)]
enum TailStep {
    Key(String),
    Index(usize),
}

impl Items {
    /// The items of `query` and the field each is read at, if the path reads a plain field
    /// (names and non-negative indexes) after its last segment that selects several nodes.
    fn of(query: &JpQuery) -> Option<Items> {
        use jsonpath_rust::parser::model::{Segment, Selector};
        let many = |segment: &Segment| match segment {
            Segment::Descendant(_) => true,
            Segment::Selectors(selectors) => {
                selectors.len() != 1
                    || matches!(
                        selectors[0],
                        Selector::Wildcard | Selector::Slice(..) | Selector::Filter(_)
                    )
            }
            Segment::Selector(s) => {
                matches!(
                    s,
                    Selector::Wildcard | Selector::Slice(..) | Selector::Filter(_)
                )
            }
        };
        let last = query.segments.iter().rposition(many)?;
        let mut tail = Vec::new();
        for segment in &query.segments[last + 1..] {
            let selector = match segment {
                Segment::Selector(s) => s,
                Segment::Selectors(list) if list.len() == 1 => &list[0],
                _ => return None,
            };
            tail.push(match selector {
                Selector::Name(name) => TailStep::Key(name.clone()),
                Selector::Index(i) => TailStep::Index(usize::try_from(*i).ok()?),
                _ => return None,
            });
        }
        Some(Items {
            query: Arc::new(JpQuery::new(query.segments[..=last].to_vec())),
            tail,
        })
    }

    /// The selected items of `source`, in place.
    fn select<'s>(&self, source: &'s Value) -> Result<Vec<&'s Value>, SelectionError> {
        select(&self.query, source)
    }

    /// The field of `item` the path reads, if the item has it.
    fn field<'s>(&self, item: &'s Value) -> Option<&'s Value> {
        self.tail.iter().try_fold(item, |node, step| match step {
            TailStep::Key(k) => node.get(k.as_str()),
            TailStep::Index(i) => node.get(*i),
        })
    }
}

impl RefPath {
    /// The value at this path in `source`: `Ok(None)` when it holds nothing. `per_item`: a
    /// JSONPath through items gives one value per item (see [`Items`]). An error names the
    /// path's field, `{at}.path`.
    pub(super) fn read(
        &self,
        source: &Value,
        per_item: bool,
        at: &str,
    ) -> Result<Option<Value>, RuleError> {
        Ok(match self {
            RefPath::Whole => Some(source.clone()),
            RefPath::Pointer(p) => crate::pointer::get(source, p).cloned(),
            RefPath::JsonPath {
                text,
                query,
                single,
                items,
            } => {
                let path_error = |e: SelectionError| RuleError::Reference {
                    field: format!("{at}.path"),
                    message: format!("JSONPath `{text}`: {e}"),
                };
                let Some(query) = query else {
                    return Err(RuleError::Reference {
                        field: format!("{at}.path"),
                        message: format!("`{text}` is not a JSONPath"),
                    });
                };
                // The selection refers into `source`; only what is kept is copied, within
                // the bound of one JSONPath's result.
                if let Some(items) = items.as_ref().filter(|_| per_item) {
                    let selected = items.select(source).map_err(path_error)?;
                    if selected.is_empty() {
                        return Ok(None);
                    }
                    let fields: Vec<&Value> = selected
                        .into_iter()
                        .map(|item| items.field(item).unwrap_or(&Value::Null))
                        .collect();
                    return Ok(Some(Value::Array(copied(&fields).map_err(path_error)?)));
                }
                let found = select(query, source).map_err(path_error)?;
                match (single, found.len()) {
                    (_, 0) => None,
                    (true, 1) => copied(&found).map_err(path_error)?.pop(),
                    _ => Some(Value::Array(copied(&found).map_err(path_error)?)),
                }
            }
        })
    }

    /// The item at `index` of what a JSONPath through items selects in `source` (see
    /// [`Items`]); `None` for other paths.
    pub(super) fn item(&self, source: &Value, index: usize) -> Option<Value> {
        let RefPath::JsonPath {
            items: Some(items), ..
        } = self
        else {
            return None;
        };
        items
            .select(source)
            .ok()?
            .get(index)
            .map(|item| (*item).clone())
    }
}

/// Whether a reference `path` is a JSONPath that may select several nodes (a wildcard,
/// filter, slice, union or descent): its value is then the list of the nodes it selects.
pub fn selects_many(path: Option<&str>) -> bool {
    path.is_some_and(|p| {
        p.starts_with('$') && (p.contains(['*', '?', ':', ',']) || p.contains(".."))
    })
}

pub(super) fn compile_path(
    path: Option<&str>,
    field: &str,
    errors: &mut Vec<FieldError>,
) -> RefPath {
    let Some(path) = path.filter(|p| !p.is_empty()) else {
        return RefPath::Whole;
    };
    if path.starts_with('$') {
        // Parsed once, here; a path that does not parse makes the policy invalid.
        let query = match parse_jsonpath(path) {
            Ok(q) => Some(Arc::new(q)),
            Err(e) => {
                errors.push(FieldError::new(
                    format!("{field}.path"),
                    format!("`{path}` is not a JSONPath: {e}"),
                ));
                None
            }
        };
        let single = !selects_many(Some(path));
        let items = query.as_deref().filter(|_| !single).and_then(Items::of);
        return RefPath::JsonPath {
            text: path.to_string(),
            query,
            single,
            items,
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
