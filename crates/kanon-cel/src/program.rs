//! A compiled program: the plan the planner makes of a checked expression and the interpreter
//! walks. Names are resolved already (variables to slots, comprehension variables to stack
//! positions, functions to their overloads, type names to type values).

use std::sync::Arc;

use crate::error::EvalError;
use crate::function::Overload;
use crate::re2::RegexCache;
use crate::types::Type;
use crate::value::Value;

/// The insertion function the `transformMap` expansions call.
pub(crate) const MAP_INSERT: &str = "cel.@mapInsert";

/// A compiled expression, evaluated any number of times (it is `Send + Sync`).
#[derive(Debug)]
pub struct Program {
    pub(crate) source: String,
    pub(crate) result_type: Type,
    pub(crate) root: Node,
    pub(crate) regexes: RegexCache,
    /// The declared variables the expression names, with their slots, sorted by slot.
    pub(crate) reads: Box<[(Arc<str>, usize)]>,
}

impl Clone for Program {
    fn clone(&self) -> Self {
        Program {
            source: self.source.clone(),
            result_type: self.result_type.clone(),
            root: self.root.clone(),
            regexes: RegexCache::default(),
            reads: self.reads.clone(),
        }
    }
}

impl Program {
    /// A program of `root`, typed `dyn` until the checker's type is set.
    pub(crate) fn new(source: &str, root: Node) -> Program {
        Program {
            source: source.to_owned(),
            result_type: Type::Dyn,
            root,
            regexes: RegexCache::default(),
            reads: Box::default(),
        }
    }

    /// Whether the expression names the declared variable `name` (`namespaceObject`,
    /// `params`): a caller may leave out what no program of a rule reads. A name a
    /// comprehension variable shadows is not the variable.
    pub fn reads(&self, name: &str) -> bool {
        self.reads.iter().any(|(read, _)| &**read == name)
    }

    /// The type the checker gave the whole expression (`dyn` when compiled unchecked).
    pub fn result_type(&self) -> &Type {
        &self.result_type
    }

    /// The expression's text, as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The value the program always gives, when it reads nothing (a literal of constants):
    /// a caller may prepare what it derives from it once. Evaluating it still charges what
    /// building it costs.
    pub fn constant(&self) -> Option<&Value<'static>> {
        match &self.root {
            Node::Const(value) | Node::Built(value, _) => Some(value),
            _ => None,
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) enum Node {
    Const(Value<'static>),
    /// A variable, a comprehension variable, a select or index chain or a conditional, as
    /// cel-go plans them: an attribute, resolved as a whole. Evaluating it costs its
    /// qualifiers and, for all but a conditional, 1 of its own.
    Attr(Box<Attr>),
    /// `has(…)`: an attribute whose last qualifier tests presence; it costs its qualifiers only
    /// (kube-apiserver sets PresenceTestHasCost(false)).
    Test(Box<Attr>),
    /// A call nothing declares, in a program compiled without checking: an error when reached.
    Fail(EvalError),
    Call(Box<Call>),
    And(Box<Node>, Box<Node>),
    Or(Box<Node>, Box<Node>),
    NotStrictlyFalse(Box<Node>),
    /// `a.or(b)` and `a.orValue(b)`: `b` is evaluated only when `a` is empty; no cost of their
    /// own (cel-go plans them as its own nodes, not as calls).
    OptOr(Box<Node>, Box<Node>),
    OptOrValue(Box<Node>, Box<Node>),
    /// `x in [constants]`: cel-go's OptOptimize makes it a set lookup that costs nothing of its
    /// own.
    SetMembership(Box<Node>, Arc<Vec<Value<'static>>>),
    List(Vec<Node>, Vec<bool>),
    /// With `true`, a repeated key replaces the earlier entry (cel-go); else it is an error
    /// (cel-spec).
    Map(Vec<(Node, Node, bool)>, bool),
    Struct(Arc<str>, Vec<(Arc<str>, Node, bool)>),
    /// A list, map or struct literal of constants, built when planning, and what building it
    /// costs cel-go on each evaluation.
    Built(Value<'static>, u64),
    Fold(Box<Fold>),
}

/// cel-go's attribute: a root and the qualifiers (field names and indexes) applied to it.
#[derive(Debug, Clone)]
pub(crate) struct Attr {
    pub(crate) root: Root,
    pub(crate) qualifiers: Vec<Qualifier>,
    /// What evaluating it as an expression costs of its own: 1, or 0 for a conditional.
    pub(crate) cost: u64,
}

#[derive(Debug, Clone)]
pub(crate) enum Root {
    Variable(usize),
    Local(usize),
    /// A name nothing declares, in a program compiled without checking: an error when reached.
    Missing(Arc<str>),
    /// Any other expression, qualified relative to its value.
    Value(Box<Node>),
    /// `c ? a : b`: the qualifiers apply to the branch taken.
    Conditional(Box<(Node, Attr, Attr)>),
}

#[derive(Debug, Clone)]
pub(crate) struct Qualifier {
    pub(crate) key: QualKey,
    /// `.?f` and `[?i]`: from here on, a missing field or index makes the result
    /// `optional.none()`.
    pub(crate) optional: bool,
    /// The presence test of `has()`.
    pub(crate) test: bool,
}

#[derive(Debug, Clone)]
pub(crate) enum QualKey {
    Const(Value<'static>),
    /// A computed index: resolved as an attribute, without the attribute's own cost.
    Attr(Box<Attr>),
}

#[derive(Debug, Clone)]
pub(crate) struct Call {
    pub(crate) function: Arc<str>,
    pub(crate) overloads: Vec<Arc<Overload>>,
    pub(crate) args: Vec<Node>,
    /// The checker left the overload to run-time dispatch: only costs by name apply.
    pub(crate) dispatched: bool,
    /// The one overload the checker resolved a singleton's call to (its `overloads` keep all of
    /// them, for the value to choose): cel-go charges a call whose argument failed by it.
    pub(crate) resolved: Option<Arc<Overload>>,
    /// `@result + [x]` and `cel.@mapInsert(@result, …)` in a comprehension's step: the
    /// accumulator in this slot is moved out, not copied, and grown in place (as cel-go grows
    /// its mutable accumulators), so that building a list or map is linear, not quadratic.
    pub(crate) accumulator: Option<usize>,
}

#[derive(Debug, Clone)]
pub(crate) struct Fold {
    pub(crate) two_variables: bool,
    /// The accumulator's stack slot; the iteration variables follow it.
    pub(crate) slot: usize,
    pub(crate) range: Node,
    pub(crate) init: Node,
    pub(crate) condition: Node,
    pub(crate) step: Node,
    pub(crate) result: Node,
}
