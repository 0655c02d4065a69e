//! kube-apiserver's validators of a checked expression (cel-go's AST validators, which its
//! environment adds): duration, timestamp and regex literals must be valid, the strings
//! extension's `'<literal>'.format([…])` must fit its clauses, and list and map literals must not
//! mix types (HomogeneousAggregateLiterals). Every issue is reported, in the order of the source.

use crate::ast::{Expr, ExprKind, Literal, Span};
use crate::budget::Budget;
use crate::check::Checked;
use crate::env::Env;
use crate::error::Issue;
use crate::format_clauses;
use crate::program::Program;
use crate::re2;
use crate::types::Type;

/// The validators `env` enables, over `expr` as checked.
pub(crate) fn validate(env: &Env, expr: &Expr, checked: &Checked) -> Result<(), Vec<Issue>> {
    let mut issues = Vec::new();
    if env.literal_validators {
        validate_literals(env, expr, &mut issues);
        validate_formats(expr, checked, &mut issues);
    }
    if env.homogeneous_literals {
        visit_literals(expr, checked, &mut issues);
    }
    if !issues.is_empty() {
        issues.sort_by_key(|issue| issue.span.start);
        return Err(issues);
    }
    Ok(())
}

/// The type the checker gave `node` (`dyn` where it gave none).
fn checked_type(checked: &Checked, node: &Expr) -> Type {
    checked.types.get(&node.id).cloned().unwrap_or(Type::Dyn)
}

/// Functions whose arguments may be literals of mixed types (cel-go exempts `format`).
const MIXED_LITERALS_ALLOWED: &[&str] = &["format"];

/// kube-apiserver's HomogeneousAggregateLiterals: every element of a list literal, and every
/// key and every value of a map literal, has exactly the type of the first (`dyn` is no
/// wildcard here: `[dyn(1), 'a']` is refused, as the apiserver refuses it).
fn visit_literals(expr: &Expr, checked: &Checked, issues: &mut Vec<Issue>) {
    // A list stops at its first mismatch; a map's keys and values report every one (cel-go's
    // validator breaks out of its list loop only).
    let same = |nodes: Vec<(&Expr, bool)>, every: bool, issues: &mut Vec<Issue>| {
        let mut first: Option<Type> = None;
        for (node, optional) in nodes {
            let kind = match (optional, checked_type(checked, node)) {
                (true, Type::Optional(inner)) => (*inner).clone(),
                // cel-go's validator takes the optional's parameter without looking, and fails
                // (a panic) on a `dyn`: kube-apiserver cannot compile such a literal.
                (true, other) => {
                    issues.push(Issue {
                        span: node.span,
                        message: format!(
                            "an optional element or value must have an optional type, not '{other}': \
                             kube-apiserver cannot compile this literal (cel-go's check of \
                             literals fails on it); make the value optional (`optional.of(...)`, \
                             `a.?b`, `m[?k]` on a typed map)"
                        ),
                    });
                    return;
                }
                (false, kind) => kind,
            };
            match &first {
                None => first = Some(kind),
                Some(expected) if *expected != kind => {
                    issues.push(Issue {
                        span: node.span,
                        message: format!("expected type '{expected}' but found '{kind}'"),
                    });
                    if !every {
                        return;
                    }
                }
                Some(_) => {}
            }
        }
    };
    match &expr.kind {
        ExprKind::List {
            elements,
            optional_indices,
        } => {
            let nodes = elements
                .iter()
                .enumerate()
                .map(|(index, element)| (element, optional_indices.contains(&(index as u32))))
                .collect();
            same(nodes, false, issues);
            for element in elements {
                visit_literals(element, checked, issues);
            }
        }
        ExprKind::Map { entries } => {
            same(
                entries.iter().map(|entry| (&entry.key, false)).collect(),
                true,
                issues,
            );
            same(
                entries
                    .iter()
                    .map(|entry| (&entry.value, entry.optional))
                    .collect(),
                true,
                issues,
            );
            for entry in entries {
                visit_literals(&entry.key, checked, issues);
                visit_literals(&entry.value, checked, issues);
            }
        }
        ExprKind::Call {
            target,
            function,
            args,
        } => {
            if let Some(target) = target {
                visit_literals(target, checked, issues);
            }
            if !MIXED_LITERALS_ALLOWED.contains(&&**function) {
                for arg in args {
                    visit_literals(arg, checked, issues);
                }
            }
        }
        ExprKind::Select { operand, .. } => visit_literals(operand, checked, issues),
        ExprKind::Struct { fields, .. } => {
            for field in fields {
                visit_literals(&field.value, checked, issues);
            }
        }
        ExprKind::Comprehension(comprehension) => {
            for part in [
                &comprehension.iter_range,
                &comprehension.accu_init,
                &comprehension.loop_condition,
                &comprehension.loop_step,
                &comprehension.result,
            ] {
                visit_literals(part, checked, issues);
            }
        }
        ExprKind::Literal(_) | ExprKind::Ident(_) => {}
    }
}

/// cel-go's `ValidateDurationLiterals`, `ValidateTimestampLiterals` and `ValidateRegexLiterals`:
/// a call of `duration`, `timestamp` or `matches` whose first argument (the receiver aside) is a
/// literal must succeed (a valid RE2 pattern for `matches`).
fn validate_literals(env: &Env, expr: &Expr, issues: &mut Vec<Issue>) {
    let mut stack = vec![expr];
    while let Some(node) = stack.pop() {
        if let ExprKind::Call { function, args, .. } = &node.kind
            && let Some(
                first @ Expr {
                    kind: ExprKind::Literal(literal),
                    ..
                },
            ) = args.first()
        {
            let valid = match &**function {
                "duration" | "timestamp" => {
                    let call = Expr {
                        id: node.id,
                        span: node.span,
                        kind: ExprKind::Call {
                            target: None,
                            function: function.clone(),
                            args: vec![first.clone()],
                        },
                    };
                    Program::plan(env, "", &call, None)
                        .is_ok_and(|program| program.eval(&[], &mut Budget::new(1_000)).is_ok())
                }
                "matches" => match literal {
                    Literal::String(pattern) => re2::compile(pattern).is_ok(),
                    _ => true,
                },
                _ => true,
            };
            if !valid {
                issues.push(Issue {
                    span: first.span,
                    message: format!("invalid {function} argument"),
                });
            }
        }
        node.push_children(&mut stack);
    }
}

/// The strings extension's validator of `'<literal>'.format([<list literal>])`.
fn validate_formats(expr: &Expr, checked: &Checked, issues: &mut Vec<Issue>) {
    let type_of = |node: &Expr| checked_type(checked, node);
    let mut stack = vec![expr];
    while let Some(node) = stack.pop() {
        if let ExprKind::Call {
            target: Some(target),
            function,
            args,
        } = &node.kind
            && &**function == "format"
            && let ExprKind::Literal(Literal::String(template)) = &target.kind
            && let [list] = args.as_slice()
            && let ExprKind::List { elements, .. } = &list.kind
        {
            let kinds: Vec<Type> = elements.iter().map(&type_of).collect();
            // `%s` looks into list and map literals, element by element.
            fn verify(node: &Expr, type_of: &dyn Fn(&Expr) -> Type) -> Result<(), (Span, String)> {
                let kind = type_of(node);
                if !format_clauses::string_formattable(&kind) {
                    return Err((node.span, kind.runtime_name().to_owned()));
                }
                match &node.kind {
                    ExprKind::List { elements, .. } => {
                        for element in elements {
                            verify(element, type_of)?;
                        }
                    }
                    ExprKind::Map { entries } => {
                        for entry in entries {
                            verify(&entry.key, type_of)?;
                            verify(&entry.value, type_of)?;
                        }
                    }
                    _ => {}
                }
                Ok(())
            }
            let bad_span = std::cell::Cell::new(None);
            let element_kinds = |index: usize| {
                verify(&elements[index], &type_of).map_err(|(span, given)| {
                    bad_span.set(Some(span));
                    (index, given)
                })
            };
            match format_clauses::check(template, &kinds, &element_kinds) {
                Ok(requested) if elements.len() > requested => issues.push(Issue {
                    span: node.span,
                    message: format!(
                        "too many arguments supplied to string.format (expected {requested}, got {})",
                        elements.len()
                    ),
                }),
                Ok(_) => {}
                Err((at, message)) => issues.push(Issue {
                    span: bad_span
                        .get()
                        .or_else(|| at.map(|index| elements[index].span))
                        .unwrap_or(node.span),
                    message,
                }),
            }
        }
        node.push_children(&mut stack);
    }
}
