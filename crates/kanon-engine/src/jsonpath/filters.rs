//! Whether a JSONPath descends (`..`) inside a filter: the library runs a filter once per
//! node it tests, and each descent there walks the node's subtree building a path string per
//! node, so such a path costs the document's size times its depth, per filter.

use jsonpath_rust::parser::model::{
    Comparable, Comparison, Filter, FilterAtom, FnArg, Segment, Selector, Test, TestFunction,
};

/// Whether a filter anywhere in `segments` descends.
pub(super) fn descend(segments: &[Segment]) -> bool {
    segments.iter().any(segment_filters_descend)
}

fn segment_filters_descend(segment: &Segment) -> bool {
    match segment {
        Segment::Descendant(inner) => segment_filters_descend(inner),
        Segment::Selector(selector) => selector_descends(selector),
        Segment::Selectors(selectors) => selectors.iter().any(selector_descends),
    }
}

fn selector_descends(selector: &Selector) -> bool {
    match selector {
        Selector::Filter(filter) => filter_descends(filter),
        Selector::Name(_) | Selector::Wildcard | Selector::Index(_) | Selector::Slice(..) => false,
    }
}

fn filter_descends(filter: &Filter) -> bool {
    match filter {
        Filter::Or(filters) | Filter::And(filters) => filters.iter().any(filter_descends),
        Filter::Atom(FilterAtom::Filter { expr, .. }) => filter_descends(expr),
        Filter::Atom(FilterAtom::Test { expr, .. }) => test_descends(expr),
        Filter::Atom(FilterAtom::Comparison(comparison)) => {
            let (a, b) = match comparison.as_ref() {
                Comparison::Eq(a, b)
                | Comparison::Ne(a, b)
                | Comparison::Gt(a, b)
                | Comparison::Gte(a, b)
                | Comparison::Lt(a, b)
                | Comparison::Lte(a, b) => (a, b),
            };
            comparable_descends(a) || comparable_descends(b)
        }
    }
}

/// A query inside a filter descends itself, or through its own filters.
fn test_descends(test: &Test) -> bool {
    let query_descends = |segments: &[Segment]| {
        segments
            .iter()
            .any(|s| matches!(s, Segment::Descendant(_)) || segment_filters_descend(s))
    };
    match test {
        Test::RelQuery(segments) => query_descends(segments),
        Test::AbsQuery(query) => query_descends(&query.segments),
        Test::Function(function) => function_descends(function),
    }
}

fn comparable_descends(comparable: &Comparable) -> bool {
    match comparable {
        Comparable::Function(function) => function_descends(function),
        // Singular queries are names and indexes only.
        Comparable::Literal(_) | Comparable::SingularQuery(_) => false,
    }
}

fn function_descends(function: &TestFunction) -> bool {
    match function {
        TestFunction::Custom(_, args) => args.iter().any(arg_descends),
        TestFunction::Length(arg) => arg_descends(arg),
        TestFunction::Value(arg) | TestFunction::Count(arg) => arg_descends(arg),
        TestFunction::Search(a, b) | TestFunction::Match(a, b) => {
            arg_descends(a) || arg_descends(b)
        }
    }
}

fn arg_descends(arg: &FnArg) -> bool {
    match arg {
        FnArg::Literal(_) => false,
        FnArg::Test(test) => test_descends(test),
        FnArg::Filter(filter) => filter_descends(filter),
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse_jsonpath;

    #[test]
    fn a_descent_inside_a_filter_is_refused_and_one_outside_is_not() {
        for path in [
            "$.spec[?@..image]",
            "$.spec.containers[?(@..name)]",
            "$[?count(@..*) > 1]",
            "$[?length(@..*) > 1]",
            "$[?$..x]",
            "$..[?(@.a[?@..b])]",
            "$[?(@.a == 1 || @..b)]",
            "$[?!(@..b)]",
            "$[?match(value(@..b), 'x')]",
        ] {
            let error = parse_jsonpath(path).err();
            assert!(
                error
                    .as_deref()
                    .is_some_and(|e| e.contains("inside a filter")),
                "{path}: {error:?}"
            );
        }
        for path in [
            "$..image",
            "$..*",
            "$..[?(@.name == 'app')].image",
            "$..[?(@.ports[?(@.port == 80)])].name",
            "$.spec.containers[?(@.name == '..')]",
            "$[?count(@.*) > 1]",
            "$[?@.a == $.b]",
        ] {
            assert!(parse_jsonpath(path).is_ok(), "{path}");
        }
    }
}
