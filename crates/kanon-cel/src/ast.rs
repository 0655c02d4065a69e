//! The parsed form of a CEL expression.
//!
//! Operators are calls to functions with the names cel-go gives them (`_+_`, `_&&_`, `_[_]`,
//! `@in`, …), so that one table of overloads, costs and type signatures serves operators and
//! functions alike. Macros (`has`, `all`, `exists`, `map`, …) are expanded by the parser: `has` to
//! a [`ExprKind::Select`] with `test: true`, the others to a [`Comprehension`].

use std::sync::Arc;

/// An expression's identity: unique within one parsed expression, assigned in parse order.
/// The checker keys the types it infers by it.
pub type ExprId = u32;

/// Byte offsets `start..end` into the expression's source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Span {
    pub start: u32,
    pub end: u32,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Expr {
    pub id: ExprId,
    pub span: Span,
    pub kind: ExprKind,
}

impl Expr {
    /// `a.b.c` as one dotted name, when the expression is only identifiers and selects (the
    /// checker and the planner read variable and namespace names so).
    pub(crate) fn qualified_name(&self) -> Option<String> {
        match &self.kind {
            ExprKind::Ident(name) => Some(name.to_string()),
            ExprKind::Select {
                operand,
                field,
                test: false,
            } => operand
                .qualified_name()
                .map(|prefix| format!("{prefix}.{field}")),
            _ => None,
        }
    }

    /// Pushes the expressions directly under this one onto `stack`, for walks that must not
    /// recurse (the depth of a tree is bounded by the parser, not by the walker's stack).
    pub fn push_children<'e>(&'e self, stack: &mut Vec<&'e Expr>) {
        match &self.kind {
            ExprKind::Call { target, args, .. } => {
                stack.extend(target.as_deref());
                stack.extend(args.iter());
            }
            ExprKind::Select { operand, .. } => stack.push(operand),
            ExprKind::List { elements, .. } => stack.extend(elements.iter()),
            ExprKind::Map { entries } => {
                for entry in entries {
                    stack.push(&entry.key);
                    stack.push(&entry.value);
                }
            }
            ExprKind::Struct { fields, .. } => {
                stack.extend(fields.iter().map(|field| &field.value))
            }
            ExprKind::Comprehension(fold) => stack.extend([
                &fold.iter_range,
                &fold.accu_init,
                &fold.loop_condition,
                &fold.loop_step,
                &fold.result,
            ]),
            ExprKind::Literal(_) | ExprKind::Ident(_) => {}
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum ExprKind {
    Literal(Literal),
    /// A name, possibly qualified with dots as written (`a.b.c` is parsed as selects; the checker
    /// resolves qualified names against declarations).
    Ident(Arc<str>),
    /// `operand.field`; with `test: true` it is `has(operand.field)`.
    Select {
        operand: Box<Expr>,
        field: Arc<str>,
        test: bool,
    },
    /// A function or operator call; `target` is the receiver of `target.function(args)`.
    Call {
        target: Option<Box<Expr>>,
        function: Arc<str>,
        args: Vec<Expr>,
    },
    /// `[a, ?b]`: `optional_indices` lists the elements written with `?`.
    List {
        elements: Vec<Expr>,
        optional_indices: Vec<u32>,
    },
    /// `{k: v, ?k2: v2}`
    Map {
        entries: Vec<MapEntry>,
    },
    /// `Name{field: value, ?field2: value}`: the type name as written (may be qualified).
    Struct {
        type_name: Arc<str>,
        fields: Vec<FieldInit>,
    },
    Comprehension(Box<Comprehension>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct MapEntry {
    pub id: ExprId,
    pub key: Expr,
    pub value: Expr,
    pub optional: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct FieldInit {
    pub id: ExprId,
    pub name: Arc<str>,
    pub value: Expr,
    pub optional: bool,
}

/// A fold over a list or map, as cel-spec defines it: for each element of `range` (with
/// `iter_var` bound to the element, or to the index/key when `iter_var2` is set, and `iter_var2`
/// to the value), while `loop_condition` holds, `accu_var = loop_step`; the value is `result`.
#[derive(Debug, Clone, PartialEq)]
pub struct Comprehension {
    pub iter_var: Arc<str>,
    pub iter_var2: Option<Arc<str>>,
    pub iter_range: Expr,
    pub accu_var: Arc<str>,
    pub accu_init: Expr,
    pub loop_condition: Expr,
    pub loop_step: Expr,
    pub result: Expr,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Literal {
    Null,
    Bool(bool),
    Int(i64),
    Uint(u64),
    Double(f64),
    String(Arc<str>),
    Bytes(Arc<[u8]>),
}

/// The accumulator's name in macro expansions; it cannot clash with a user's identifier.
pub const ACCUMULATOR: &str = "@result";

/// Operator function names, as cel-go names them.
pub mod operators {
    pub const CONDITIONAL: &str = "_?_:_";
    pub const LOGICAL_AND: &str = "_&&_";
    pub const LOGICAL_OR: &str = "_||_";
    pub const LOGICAL_NOT: &str = "!_";
    pub const EQUALS: &str = "_==_";
    pub const NOT_EQUALS: &str = "_!=_";
    pub const LESS: &str = "_<_";
    pub const LESS_EQUALS: &str = "_<=_";
    pub const GREATER: &str = "_>_";
    pub const GREATER_EQUALS: &str = "_>=_";
    pub const ADD: &str = "_+_";
    pub const SUBTRACT: &str = "_-_";
    pub const MULTIPLY: &str = "_*_";
    pub const DIVIDE: &str = "_/_";
    pub const MODULO: &str = "_%_";
    pub const NEGATE: &str = "-_";
    pub const INDEX: &str = "_[_]";
    pub const OPT_INDEX: &str = "_[?_]";
    pub const OPT_SELECT: &str = "_?._";
    pub const IN: &str = "@in";
    /// Used by the `all`/`exists` expansions: true unless its argument is `false` (errors count as true).
    pub const NOT_STRICTLY_FALSE: &str = "@not_strictly_false";
}
