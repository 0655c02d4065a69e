//! Running a JSONPath by reference. The library's own run builds, for every node it passes, a
//! string of the node's whole path from the root: a document nested 120 deep cost some 600
//! bytes per node a descent (`..`) passed, and a node under a long key carried that key into
//! the path of every node below it. Here kanon walks the segments, descents and selectors
//! itself, keeping references only, and asks the library only whether a filter holds for a
//! node. The nodes come out in the library's order (a descent's nodes in document order, a
//! union's selectors one after the other over all nodes), so a result reads as it did.

use std::slice;

use jsonpath_rust::parser::model::{Filter, FilterAtom, JpQuery, Segment, Selector};
use jsonpath_rust::query::Query;
use jsonpath_rust::query::state::State;
use serde_json::Value;

use super::SelectionError;

/// The most nodes one JSONPath run may visit in descents and select in its segments,
/// together. A review's JSON budget (24 MiB) holds at most some 300,000 values, so `$..*`
/// on any review stays well inside it; a path that descends from every node (`$..*..*`)
/// visits each node once per ancestor, and ends here.
pub const MAX_JSONPATH_NODES: usize = 1_000_000;

/// The nodes of `root` that `query` selects, in the order the JSONPath library gives them,
/// as references into `root`; an error when the run would pass [`MAX_JSONPATH_NODES`].
pub fn select<'a>(query: &JpQuery, root: &'a Value) -> Result<Vec<&'a Value>, SelectionError> {
    let mut meter = Meter { nodes: 0 };
    let mut nodes = vec![root];
    for segment in &query.segments {
        nodes = run_segment(segment, &nodes, root, &mut meter)?;
    }
    Ok(nodes)
}

/// Nodes visited and selected so far in one run.
struct Meter {
    nodes: usize,
}

impl Meter {
    fn count(&mut self, more: usize) -> Result<(), SelectionError> {
        self.nodes = self.nodes.saturating_add(more);
        if self.nodes > MAX_JSONPATH_NODES {
            return Err(SelectionError::TooManyNodes {
                limit: MAX_JSONPATH_NODES,
            });
        }
        Ok(())
    }
}

fn run_segment<'a>(
    segment: &Segment,
    nodes: &[&'a Value],
    root: &'a Value,
    meter: &mut Meter,
) -> Result<Vec<&'a Value>, SelectionError> {
    let selectors = match segment {
        Segment::Descendant(inner) => {
            let all = descendants_or_self(nodes, meter)?;
            return run_segment(inner, &all, root, meter);
        }
        Segment::Selector(selector) => slice::from_ref(selector),
        // The library reads an empty union as the root; the parser writes none.
        Segment::Selectors(selectors) if selectors.is_empty() => return Ok(vec![root]),
        Segment::Selectors(selectors) => selectors.as_slice(),
    };
    let mut out = Vec::new();
    for selector in selectors {
        for node in nodes {
            let before = out.len();
            run_selector(selector, node, root, &mut out)?;
            meter.count(out.len() - before)?;
        }
    }
    Ok(out)
}

/// Each of `nodes` followed by all its descendants, in document order, as the library's
/// descent lists them.
fn descendants_or_self<'a>(
    nodes: &[&'a Value],
    meter: &mut Meter,
) -> Result<Vec<&'a Value>, SelectionError> {
    let mut out = Vec::new();
    let mut stack = Vec::new();
    for node in nodes {
        stack.push(*node);
        while let Some(node) = stack.pop() {
            meter.count(1)?;
            out.push(node);
            match node {
                Value::Array(items) => stack.extend(items.iter().rev()),
                Value::Object(map) => stack.extend(map.values().rev()),
                _ => {}
            }
        }
    }
    Ok(out)
}

/// What `selector` selects of `node`, as the library selects it, with `$` in filters still
/// `root`.
fn run_selector<'a>(
    selector: &Selector,
    node: &'a Value,
    root: &'a Value,
    out: &mut Vec<&'a Value>,
) -> Result<(), SelectionError> {
    match (selector, node) {
        (Selector::Name(key), Value::Object(map)) => out.extend(map.get(key)),
        (Selector::Index(index), Value::Array(items)) => out.extend(at_index(items, *index)),
        (Selector::Wildcard, Value::Array(items)) => out.extend(items),
        (Selector::Wildcard, Value::Object(map)) => out.extend(map.values()),
        (Selector::Slice(start, end, step), Value::Array(items)) => {
            slice(items, *start, *end, *step, out)
        }
        (Selector::Filter(filter), Value::Array(items)) => {
            out.extend(items.iter().filter(|item| holds(filter, item, root)));
        }
        (Selector::Filter(filter), Value::Object(map)) => {
            out.extend(map.values().filter(|item| holds(filter, item, root)));
        }
        _ => {}
    }
    Ok(())
}

/// The item at `index`, counted from the end when negative.
fn at_index(items: &[Value], index: i64) -> Option<&Value> {
    let at = if index >= 0 {
        usize::try_from(index).ok()?
    } else {
        let back = usize::try_from(index.unsigned_abs()).ok()?;
        items.len().checked_sub(back)?
    };
    items.get(at)
}

/// The items a slice `[start:end:step]` selects (RFC 9535 §2.3.4), as the library selects
/// them; the arithmetic saturates where the library's would overflow.
fn slice<'a>(
    items: &'a [Value],
    start: Option<i64>,
    end: Option<i64>,
    step: Option<i64>,
    out: &mut Vec<&'a Value>,
) {
    let len = i64::try_from(items.len()).unwrap_or(i64::MAX);
    let norm = |i: i64| if i >= 0 { i } else { len.saturating_add(i) };
    let get = |i: i64| usize::try_from(i).ok().and_then(|i| items.get(i));
    match step.unwrap_or(1) {
        step if step > 0 => {
            let lower = norm(start.unwrap_or(0)).clamp(0, len);
            let upper = norm(end.unwrap_or(len)).clamp(0, len);
            let mut i = lower;
            while i < upper {
                out.extend(get(i));
                i = i.saturating_add(step);
            }
        }
        step if step < 0 => {
            let lower =
                norm(end.unwrap_or(len.saturating_neg().saturating_sub(1))).clamp(-1, len - 1);
            let upper = norm(start.unwrap_or(len - 1)).clamp(-1, len - 1);
            let mut i = upper;
            while lower < i {
                out.extend(get(i));
                i = i.saturating_add(step);
            }
        }
        _ => {}
    }
}

/// Whether `filter` holds for `item`: the library's own test of an item, save that the item
/// is given to it as a node of its own, so that what a test reads of it (`@.ports[*]`) gets
/// paths from the item, not from the root. A group (`(…)`, `!(…)`) is taken apart here: the
/// library reads a group on such a node as a selection of its children.
fn holds(filter: &Filter, item: &Value, root: &Value) -> bool {
    match filter {
        Filter::Or(filters) => filters.iter().any(|f| holds(f, item, root)),
        Filter::And(filters) => filters.iter().all(|f| holds(f, item, root)),
        Filter::Atom(FilterAtom::Filter { expr, not }) => holds(expr, item, root) != *not,
        Filter::Atom(atom) => {
            let mut state = State::root(item);
            state.root = root;
            atom.process(state)
                .ok_val()
                .and_then(|v| v.as_bool())
                .unwrap_or_default()
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::{MAX_JSONPATH_NODES, select};
    use crate::jsonpath::{SelectionError, parse_jsonpath};

    fn pod() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "labels": {"app": "web", "tier": "front"}},
            "spec": {
                "initContainers": [{"name": "init", "image": "busybox"}],
                "containers": [
                    {"name": "app", "image": "nginx", "ports": [{"port": 80}, {"port": 443}]},
                    {"name": "sidecar", "image": "envoy", "ports": [{"port": 9901}],
                     "resources": {"limits": {"memory": "64Mi"}}},
                ],
                "nested": [[1, [2, 3]], {"a": {"b": [4]}}],
            },
        })
    }

    /// kanon's run gives the very nodes the library's own run gives, in the same order.
    #[test]
    fn the_selection_is_the_librarys_own() {
        let object = pod();
        for path in [
            "$",
            "$.spec.containers[*].image",
            "$.spec['initContainers','containers'][*].name",
            "$.spec.containers[0:1].name",
            "$.spec.containers[-1].name",
            "$.spec.containers[?(@.name == 'sidecar')].image",
            "$.spec.containers[?@.resources].name",
            "$.spec.containers[?(@.name == $.metadata.labels.app)]",
            "$..*",
            "$..image",
            "$..[0]",
            "$..[*]",
            "$..['name','image']",
            "$..[?(@.port >= 443)].port",
            "$..[?(@.ports[?(@.port == 80)])].name",
            "$..ports..port",
            "$.spec.nested..*",
            "$.metadata.labels.*",
            "$.spec.nope[*]",
            "$[*,*]",
            "$..*..*",
            "$.spec.containers[::-1].name",
            "$.spec.containers[-1:].name",
            "$.spec.containers[1:0:-1].name",
            "$.spec.nested[0][::2]",
            "$.spec.containers[?!(@.name == 'app')].name",
            "$.spec.containers[?!@.resources].name",
            "$.spec.containers[?(@.name == 'app' && @.ports) || @.resources].name",
            "$.spec.containers[?length(@.ports) > 1].name",
            "$.spec.containers[?count(@.*) > 3].name",
            "$.spec.containers[?match(@.name, 'a.*')].name",
            "$.spec.containers[?search(@.image, 'ng')].name",
            "$.spec.containers[?@.ports[?@.port == 80]].name",
            "$.spec.containers[?value(@.ports[0].port) == 9901].name",
            "$..[?@.port > 100 && @.port < 1000]",
            "$.metadata.labels[?@ == 'web']",
        ] {
            let query = parse_jsonpath(path).unwrap_or_else(|e| panic!("{path}: {e}"));
            let ours = select(&query, &object).unwrap_or_else(|e| panic!("{path}: {e}"));
            let theirs = jsonpath_rust::query::js_path_process(&query, &object)
                .unwrap_or_else(|e| panic!("{path}: {e}"));
            let theirs: Vec<&Value> = theirs.into_iter().map(|r| r.val()).collect();
            assert_eq!(ours.len(), theirs.len(), "{path}");
            for (a, b) in ours.iter().zip(&theirs) {
                assert!(std::ptr::eq(*a, *b), "{path}: {a} is not {b}");
            }
        }
    }

    /// A document of 100,000 items: one descent selects them all; a descent from every node
    /// of a deep chain visits each node once per ancestor and ends at the bound.
    #[test]
    fn a_run_visits_at_most_its_bound_of_nodes() {
        let wide = Value::Array(vec![json!(0); 100_000]);
        let query = parse_jsonpath("$..*").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(select(&query, &wide).map(|v| v.len()).ok(), Some(100_000));

        let mut deep = json!(0);
        for _ in 0..100 {
            deep = Value::Array(vec![deep; 100]);
            // Keep one branch only: 100 levels, 100 items each.
            if let Value::Array(items) = &mut deep {
                for item in items.iter_mut().skip(1) {
                    *item = json!(0);
                }
            }
        }
        let query = parse_jsonpath("$..*..*..*").unwrap_or_else(|e| panic!("{e}"));
        let error = select(&query, &deep).err();
        assert!(
            matches!(
                error,
                Some(SelectionError::TooManyNodes {
                    limit: MAX_JSONPATH_NODES
                })
            ),
            "{error:?}"
        );
        assert!(
            error
                .map(|e| e.to_string())
                .is_some_and(|m| m.contains("1000000 nodes")),
        );
    }
}
