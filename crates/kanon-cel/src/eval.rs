//! Planning and evaluating a compiled expression.
//!
//! Planning resolves names once (variables to slots, comprehension variables to stack
//! positions, functions to their overloads, type names to type values); evaluation walks the
//! plan. Costs follow cel-go's runtime cost tracker (kube-apiserver's meter): 1 per identifier,
//! select and index, nothing for constants, per overload for calls (1 unless the overload says
//! otherwise), 10/30/40 to build a list/map/object; `&&`, `||` and `?:` cost nothing of their own.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use regex::Regex;

use crate::ast::{ACCUMULATOR, Comprehension, Expr, ExprKind, Literal, operators};

/// The insertion function the `transformMap` expansions call.
const MAP_INSERT: &str = "cel.@mapInsert";
use crate::check::Checked;
use crate::env::{Env, Overload};
use crate::error::{CompileError, EvalError, Issue};
use crate::types::Type;
use crate::value::{Key, List, Map, Object, Str, Value};

/// cel-go's constants for the cost of building values.
const LIST_CREATE_COST: u64 = 10;
const MAP_CREATE_COST: u64 = 30;
const STRUCT_CREATE_COST: u64 = 40;
/// How often a comprehension polls the interrupt, in iterations (kube-apiserver's setting).
const INTERRUPT_EVERY: u32 = 100;
/// Compiled regular expressions kept per program; patterns are usually constants, so a few
/// suffice, and the bound keeps a hostile stream of patterns from growing memory.
const REGEX_CACHE_SIZE: usize = 32;
/// Largest compiled form of one regular expression (RE2-like bound on "huge regexes").
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// A compiled expression, evaluated any number of times (it is `Send + Sync`).
#[derive(Debug)]
pub struct Program {
    source: String,
    pub(crate) result_type: Type,
    root: Node,
    regexes: Mutex<HashMap<String, Arc<Regex>>>,
}

impl Clone for Program {
    fn clone(&self) -> Self {
        Program {
            source: self.source.clone(),
            result_type: self.result_type.clone(),
            root: self.root.clone(),
            regexes: Mutex::new(HashMap::new()),
        }
    }
}

#[derive(Debug, Clone)]
enum Node {
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
    Fold(Box<Fold>),
}

/// cel-go's attribute: a root and the qualifiers (field names and indexes) applied to it.
#[derive(Debug, Clone)]
struct Attr {
    root: Root,
    qualifiers: Vec<Qualifier>,
    /// What evaluating it as an expression costs of its own: 1, or 0 for a conditional.
    cost: u64,
}

#[derive(Debug, Clone)]
enum Root {
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
struct Qualifier {
    key: QualKey,
    /// `.?f` and `[?i]`: from here on, a missing field or index makes the result
    /// `optional.none()`.
    optional: bool,
    /// The presence test of `has()`.
    test: bool,
}

#[derive(Debug, Clone)]
enum QualKey {
    Const(Value<'static>),
    /// A computed index: resolved as an attribute, without the attribute's own cost.
    Attr(Box<Attr>),
}

#[derive(Debug, Clone)]
struct Call {
    function: Arc<str>,
    overloads: Vec<Arc<Overload>>,
    args: Vec<Node>,
    /// The checker left the overload to run-time dispatch: only costs by name apply.
    dispatched: bool,
    /// `@result + [x]` and `cel.@mapInsert(@result, …)` in a comprehension's step: the
    /// accumulator in this slot is moved out, not copied, and grown in place (as cel-go grows
    /// its mutable accumulators), so that building a list or map is linear, not quadratic.
    accumulator: Option<usize>,
}

#[derive(Debug, Clone)]
struct Fold {
    two_variables: bool,
    /// The accumulator's stack slot; the iteration variables follow it.
    slot: usize,
    range: Node,
    init: Node,
    condition: Node,
    step: Node,
    result: Node,
}

/// The cost an evaluation may spend, and an optional interrupt polled as it goes (every 100
/// comprehension iterations): the caller's deadline.
pub struct Budget<'i> {
    pub limit: u64,
    pub spent: u64,
    pub interrupt: Option<&'i dyn Fn() -> bool>,
}

impl<'i> Budget<'i> {
    pub fn new(limit: u64) -> Self {
        Budget {
            limit,
            spent: 0,
            interrupt: None,
        }
    }

    pub fn unlimited() -> Self {
        Budget::new(u64::MAX)
    }

    pub fn with_interrupt(mut self, interrupt: &'i dyn Fn() -> bool) -> Self {
        self.interrupt = Some(interrupt);
        self
    }

    /// Spends `cost`; fails once the total passes the limit.
    pub fn charge(&mut self, cost: u64) -> Result<(), EvalError> {
        self.spent = self.spent.saturating_add(cost);
        if self.spent > self.limit {
            Err(EvalError::CostLimitExceeded { limit: self.limit })
        } else {
            Ok(())
        }
    }

    fn interrupted(&self) -> bool {
        self.interrupt.is_some_and(|interrupt| interrupt())
    }
}

/// What a function implementation may use while it runs.
pub struct Ctx<'e, 'i> {
    pub budget: &'e mut Budget<'i>,
    regexes: &'e Mutex<HashMap<String, Arc<Regex>>>,
}

impl Ctx<'_, '_> {
    /// The compiled form of `pattern` (RE2 syntax as far as Rust's `regex` shares it), cached
    /// per program. A pattern that does not compile or is too large is an error naming it.
    pub fn regex(&mut self, pattern: &str) -> Result<Arc<Regex>, EvalError> {
        if let Ok(cache) = self.regexes.lock()
            && let Some(found) = cache.get(pattern)
        {
            return Ok(found.clone());
        }
        let compiled = compile_regex(pattern).map_err(EvalError::Invalid)?;
        let compiled = Arc::new(compiled);
        if let Ok(mut cache) = self.regexes.lock() {
            if cache.len() >= REGEX_CACHE_SIZE {
                cache.clear();
            }
            cache.insert(pattern.to_owned(), compiled.clone());
        }
        Ok(compiled)
    }
}

/// Compiles an RE2 pattern (Go's syntax, as kube-apiserver's CEL reads it); the error is Go's
/// message (`error parsing regexp: …`).
pub(crate) fn compile_regex(pattern: &str) -> Result<Regex, String> {
    let translated = crate::re2::translate(pattern)?;
    regex::RegexBuilder::new(&translated)
        .size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|error| crate::re2::go_message(pattern, &error.to_string()))
}

/// Is this error the end of the whole evaluation (a bound reached), not a value that `&&`,
/// `||` or a comprehension may absorb?
fn cancels(error: &EvalError) -> bool {
    matches!(
        error,
        EvalError::CostLimitExceeded { .. } | EvalError::Interrupted
    )
}

type Outcome<'a> = Result<Value<'a>, EvalError>;

impl Program {
    pub(crate) fn plan(
        env: &Env,
        source: &str,
        expr: &Expr,
        checked: Option<&Checked>,
    ) -> Result<Program, CompileError> {
        let mut planner = Planner {
            env,
            locals: Vec::new(),
            issues: Vec::new(),
            checked: checked.is_some(),
            ambiguous: checked.map(|checked| &checked.ambiguous),
        };
        let root = planner.plan(expr);
        if !planner.issues.is_empty() {
            return Err(CompileError::new(source, planner.issues));
        }
        Ok(Program {
            source: source.to_owned(),
            result_type: Type::Dyn,
            root,
            regexes: Mutex::new(HashMap::new()),
        })
    }

    /// The type the checker gave the whole expression (`dyn` when compiled unchecked).
    pub fn result_type(&self) -> &Type {
        &self.result_type
    }

    /// The expression's text, as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Evaluates the program; `variables` holds one value per declared variable, in declaration
    /// order (a missing one reads as an error naming it).
    pub fn eval<'a>(
        &self,
        variables: &[Value<'a>],
        budget: &mut Budget<'_>,
    ) -> Result<Value<'a>, EvalError> {
        self.eval_with(&mut Values(variables), budget)
    }

    /// Evaluates the program, asking `activation` for each declared variable the evaluation
    /// reaches (so a variable can be computed on first use, as ValidatingAdmissionPolicy's
    /// `variables` are).
    pub fn eval_with<'a>(
        &self,
        activation: &mut dyn Activation<'a>,
        budget: &mut Budget<'_>,
    ) -> Result<Value<'a>, EvalError> {
        let mut machine = Machine {
            variables: activation,
            locals: Vec::new(),
            ctx: Ctx {
                budget,
                regexes: &self.regexes,
            },
        };
        machine.eval(&self.root)
    }
}

struct Planner<'e> {
    env: &'e Env,
    locals: Vec<Arc<str>>,
    issues: Vec<Issue>,
    checked: bool,
    ambiguous: Option<&'e std::collections::HashSet<u32>>,
}

impl Planner<'_> {
    fn issue(&mut self, expr: &Expr, message: String) -> Node {
        self.issues.push(Issue {
            span: expr.span,
            message,
        });
        Node::Const(Value::Null)
    }

    fn plan(&mut self, expr: &Expr) -> Node {
        match &expr.kind {
            ExprKind::Literal(literal) => Node::Const(literal_value(literal)),
            ExprKind::Ident(name) => self.plan_name(expr, name),
            ExprKind::Select {
                operand,
                field,
                test,
            } => {
                if !*test && let Some(name) = qualified_name(expr) {
                    // `a.b.c` may name a variable, a type or a namespaced constant as a whole.
                    if let Some(node) = self.resolve_qualified(&name) {
                        return node;
                    }
                }
                let operand_node = self.plan(operand);
                let mut attr = into_attr(operand_node);
                attr.qualifiers.push(Qualifier {
                    key: QualKey::Const(Value::String(Str::Owned(field.clone()))),
                    optional: false,
                    test: *test,
                });
                if *test {
                    Node::Test(Box::new(attr))
                } else {
                    Node::Attr(Box::new(attr))
                }
            }
            ExprKind::Call {
                target,
                function,
                args,
            } => self.plan_call(expr, target.as_deref(), function, args),
            ExprKind::List {
                elements,
                optional_indices,
            } => {
                let nodes = elements.iter().map(|element| self.plan(element)).collect();
                let optional = (0..elements.len())
                    .map(|index| optional_indices.contains(&(index as u32)))
                    .collect();
                self.fold_constant(expr, Node::List(nodes, optional))
            }
            ExprKind::Map { entries } => {
                let node = Node::Map(
                    entries
                        .iter()
                        .map(|entry| {
                            (
                                self.plan(&entry.key),
                                self.plan(&entry.value),
                                entry.optional,
                            )
                        })
                        .collect(),
                    self.env.repeated_keys,
                );
                self.fold_constant(expr, node)
            }
            ExprKind::Struct { type_name, fields } => {
                let name: Arc<str> = Arc::from(type_name.trim_start_matches('.'));
                if !self.env.objects.contains_key(&name) {
                    return self.issue(
                        expr,
                        format!("undeclared reference to '{name}' (in container '')"),
                    );
                }
                Node::Struct(
                    name,
                    fields
                        .iter()
                        .map(|field| (field.name.clone(), self.plan(&field.value), field.optional))
                        .collect(),
                )
            }
            ExprKind::Comprehension(comprehension) => self.plan_fold(comprehension),
        }
    }

    fn plan_name(&mut self, expr: &Expr, name: &Arc<str>) -> Node {
        if let Some(slot) = self.locals.iter().rposition(|local| local == name) {
            return attr_node(Root::Local(slot));
        }
        if let Some(node) = self.resolve_qualified(name) {
            return node;
        }
        if self.checked {
            self.issue(
                expr,
                format!("undeclared reference to '{name}' (in container '')"),
            )
        } else {
            attr_node(Root::Missing(name.clone()))
        }
    }

    /// A dotted name as a declared variable or type, unless a comprehension variable shadows its
    /// first part.
    fn resolve_qualified(&self, name: &str) -> Option<Node> {
        let name = name.strip_prefix('.').unwrap_or(name);
        let root = name.split('.').next().unwrap_or(name);
        if self.locals.iter().any(|local| &**local == root) {
            return None;
        }
        if let Some(slot) = self
            .env
            .variables
            .iter()
            .position(|(known, _)| &**known == name)
        {
            return Some(attr_node(Root::Variable(slot)));
        }
        Type::denoted(name)
            .or_else(|| {
                self.env
                    .names_type(name)
                    .then(|| Type::Object(Arc::from(name)))
            })
            .map(|kind| Node::Const(Value::Type(kind)))
    }

    fn plan_call(
        &mut self,
        expr: &Expr,
        target: Option<&Expr>,
        function: &Arc<str>,
        args: &[Expr],
    ) -> Node {
        let binary = |planner: &mut Self| (planner.plan(&args[0]), planner.plan(&args[1]));
        match (&**function, target, args.len()) {
            (operators::LOGICAL_AND, None, 2) => {
                let (a, b) = binary(self);
                return Node::And(Box::new(a), Box::new(b));
            }
            (operators::LOGICAL_OR, None, 2) => {
                let (a, b) = binary(self);
                return Node::Or(Box::new(a), Box::new(b));
            }
            (operators::CONDITIONAL, None, 3) => {
                let condition = self.plan(&args[0]);
                let (yes, no) = (self.plan(&args[1]), self.plan(&args[2]));
                return Node::Attr(Box::new(Attr {
                    root: Root::Conditional(Box::new((condition, into_attr(yes), into_attr(no)))),
                    qualifiers: Vec::new(),
                    cost: 0,
                }));
            }
            (operators::NOT_STRICTLY_FALSE, None, 1) => {
                return Node::NotStrictlyFalse(Box::new(self.plan(&args[0])));
            }
            (operators::INDEX, None, 2) => {
                let (a, b) = binary(self);
                return self.index_node(expr, a, b, false);
            }
            (operators::OPT_INDEX, None, 2) if self.env.parse_options.optional_syntax => {
                let (a, b) = binary(self);
                return self.index_node(expr, a, b, true);
            }
            (operators::OPT_SELECT, None, 2) if self.env.parse_options.optional_syntax => {
                let operand = self.plan(&args[0]);
                return match &args[1].kind {
                    ExprKind::Literal(Literal::String(field)) => index_node(
                        operand,
                        Node::Const(Value::String(Str::Owned(field.clone()))),
                        true,
                    ),
                    _ => self.issue(
                        expr,
                        "the field of an optional select must be a name".to_owned(),
                    ),
                };
            }
            ("or" | "orValue", Some(target), 1)
                if !self.env.overloads("optional.of").is_empty() =>
            {
                let (receiver, alternative) = (self.plan(target), self.plan(&args[0]));
                return if &**function == "or" {
                    Node::OptOr(Box::new(receiver), Box::new(alternative))
                } else {
                    Node::OptOrValue(Box::new(receiver), Box::new(alternative))
                };
            }
            _ => {}
        }

        // `ns.f(x)`: a global function whose name is qualified, unless `ns` is a value.
        if let Some(target) = target
            && let Some(namespace) = qualified_name(target)
        {
            let qualified = format!("{}.{function}", namespace.trim_start_matches('.'));
            let root = namespace.split('.').next().unwrap_or(&namespace);
            let shadowed = self.locals.iter().any(|local| &**local == root)
                || self.env.variables.iter().any(|(known, _)| &**known == root);
            let overloads: Vec<Arc<Overload>> = self
                .env
                .overloads(&qualified)
                .iter()
                .filter(|overload| {
                    !overload.signature.receiver && overload.signature.params.len() == args.len()
                })
                .cloned()
                .collect();
            if !shadowed && !overloads.is_empty() {
                let args = args.iter().map(|arg| self.plan(arg)).collect();
                return Node::Call(Box::new(Call {
                    function: Arc::from(qualified.as_str()),
                    overloads,
                    args,
                    dispatched: self
                        .ambiguous
                        .is_some_and(|ambiguous| ambiguous.contains(&expr.id)),
                    accumulator: None,
                }));
            }
        }

        let method = target.is_some();
        let arity = args.len() + usize::from(method);
        let overloads: Vec<Arc<Overload>> = self
            .env
            .overloads(function)
            .iter()
            .filter(|overload| {
                overload.signature.receiver == method && overload.signature.params.len() == arity
            })
            .cloned()
            .collect();
        if overloads.is_empty() && !self.checked {
            // cel-spec: without checking, an unknown function is an evaluation error.
            return Node::Fail(EvalError::NoSuchOverload(format!(
                "no such overload: {function}"
            )));
        }
        if overloads.is_empty() {
            let known = !self.env.overloads(function).is_empty();
            let message = if known {
                let shape = if method {
                    "a method call"
                } else {
                    "a function call"
                };
                format!(
                    "found no matching overload for '{function}' as {shape} with {} argument(s)",
                    args.len()
                )
            } else {
                format!("undeclared reference to '{function}' (in container '')")
            };
            return self.issue(expr, message);
        }
        let mut nodes = Vec::with_capacity(arity);
        if let Some(target) = target {
            nodes.push(self.plan(target));
        }
        nodes.extend(args.iter().map(|arg| self.plan(arg)));
        let conversion = !method && CONVERSIONS.contains(&&**function);
        // kube-apiserver compiles a constant pattern of `matches`, `find` and `findAll` when it
        // plans the program (cel-go's regex optimisations): a bad one refuses the expression.
        if (&**function == "matches" || (method && matches!(&**function, "find" | "findAll")))
            && self.env.fold_constants
            && let Some(Node::Const(Value::String(pattern))) = nodes.get(1)
            && let Err(message) = compile_regex(pattern.as_str())
        {
            return self.issue(expr, message);
        }
        if &**function == operators::IN
            && !method
            && self.env.fold_constants
            && let [_, Node::Const(Value::List(list))] = nodes.as_slice()
        {
            // cel-go's OptOptimize: membership in a list of constant primitives is a set lookup.
            let elements: Vec<Value<'static>> = list.iter().collect();
            if elements.is_empty() {
                return Node::Const(Value::Bool(false));
            }
            if elements.iter().all(|element| {
                matches!(
                    element,
                    Value::Bool(_)
                        | Value::Int(_)
                        | Value::Uint(_)
                        | Value::Double(_)
                        | Value::String(_)
                )
            }) {
                let element = nodes.swap_remove(0);
                return Node::SetMembership(Box::new(element), Arc::new(elements));
            }
        }
        let accumulator = match nodes.first() {
            Some(Node::Attr(attr))
                if matches!(&**function, operators::ADD | MAP_INSERT)
                    && !method
                    && attr.qualifiers.is_empty() =>
            {
                match attr.root {
                    Root::Local(slot) if &*self.locals[slot] == ACCUMULATOR => Some(slot),
                    _ => None,
                }
            }
            _ => None,
        };
        let node = Node::Call(Box::new(Call {
            function: function.clone(),
            overloads,
            args: nodes,
            dispatched: self
                .ambiguous
                .is_some_and(|ambiguous| ambiguous.contains(&expr.id)),
            accumulator,
        }));
        if conversion {
            self.fold_constant(expr, node)
        } else {
            node
        }
    }

    /// An index whose key is a constant of a type no qualifier takes is refused when planned,
    /// as cel-go's planner refuses it.
    fn index_node(&mut self, expr: &Expr, operand: Node, index: Node, optional: bool) -> Node {
        if let Node::Const(key) = &index
            && !matches!(
                key,
                Value::String(_)
                    | Value::Int(_)
                    | Value::Uint(_)
                    | Value::Bool(_)
                    | Value::Double(_)
            )
        {
            let message = format!("invalid qualifier type: {}", go_type_name(key));
            return self.issue(expr, message);
        }
        index_node(operand, index, optional)
    }

    /// Computes a node made only of constants once, at compile time, as cel-go's optimizer does
    /// for list and map literals and type conversions (they then cost nothing per evaluation; a
    /// conversion that fails is a compile error, as there).
    fn fold_constant(&mut self, expr: &Expr, node: Node) -> Node {
        if !self.env.fold_constants {
            return node;
        }
        let constant = match &node {
            Node::List(elements, optional) => {
                elements
                    .iter()
                    .all(|element| matches!(element, Node::Const(_)))
                    && !optional.contains(&true)
            }
            Node::Map(entries, _) => entries.iter().all(|(key, value, optional)| {
                matches!((key, value), (Node::Const(_), Node::Const(_))) && !optional
            }),
            Node::Call(call) => call.args.iter().all(|arg| matches!(arg, Node::Const(_))),
            _ => false,
        };
        if !constant {
            return node;
        }
        let regexes = Mutex::new(HashMap::new());
        let mut budget = Budget::unlimited();
        let mut nothing = Values(&[]);
        let mut machine: Machine<'_, '_, 'static, '_, '_> = Machine {
            variables: &mut nothing,
            locals: Vec::new(),
            ctx: Ctx {
                budget: &mut budget,
                regexes: &regexes,
            },
        };
        match machine.eval(&node) {
            Ok(value) => Node::Const(value),
            Err(error) => self.issue(expr, error.to_string()),
        }
    }

    fn plan_fold(&mut self, comprehension: &Comprehension) -> Node {
        let range = self.plan(&comprehension.iter_range);
        let slot = self.locals.len();
        // The initial value is evaluated lazily, with this fold's variables in place: its own
        // comprehensions must take slots above them (under names nothing can refer to).
        self.locals.push(Arc::from(""));
        self.locals.push(Arc::from(""));
        if comprehension.iter_var2.is_some() {
            self.locals.push(Arc::from(""));
        }
        let init = self.plan(&comprehension.accu_init);
        self.locals.truncate(slot);
        self.locals.push(comprehension.accu_var.clone());
        self.locals.push(comprehension.iter_var.clone());
        if let Some(second) = &comprehension.iter_var2 {
            self.locals.push(second.clone());
        }
        let condition = self.plan(&comprehension.loop_condition);
        let step = self.plan(&comprehension.loop_step);
        self.locals.truncate(slot + 1);
        let result = self.plan(&comprehension.result);
        self.locals.truncate(slot);
        Node::Fold(Box::new(Fold {
            two_variables: comprehension.iter_var2.is_some(),
            slot,
            range,
            init,
            condition,
            step,
            result,
        }))
    }
}

/// cel-go's type conversion functions, folded when their argument is a constant.
const CONVERSIONS: &[&str] = &[
    "int",
    "uint",
    "double",
    "bool",
    "string",
    "bytes",
    "timestamp",
    "duration",
    "type",
    "dyn",
];

/// An attribute with no qualifiers yet, as an expression.
fn attr_node(root: Root) -> Node {
    Node::Attr(Box::new(Attr {
        root,
        qualifiers: Vec::new(),
        cost: 1,
    }))
}

/// The attribute a select or index extends: the operand's own, or one relative to its value.
fn into_attr(node: Node) -> Attr {
    match node {
        Node::Attr(attr) => *attr,
        other => Attr {
            root: Root::Value(Box::new(other)),
            qualifiers: Vec::new(),
            cost: 1,
        },
    }
}

/// `operand[index]`, `operand[?index]` and `operand.?field`.
fn index_node(operand: Node, index: Node, optional: bool) -> Node {
    let mut attr = into_attr(operand);
    let key = match index {
        Node::Const(value) => QualKey::Const(value),
        other => QualKey::Attr(Box::new(into_attr(other))),
    };
    attr.qualifiers.push(Qualifier {
        key,
        optional,
        test: false,
    });
    Node::Attr(Box::new(attr))
}

/// `a.b.c` as one dotted name, when the expression is only identifiers and selects.
fn qualified_name(expr: &Expr) -> Option<String> {
    match &expr.kind {
        ExprKind::Ident(name) => Some(name.to_string()),
        ExprKind::Select {
            operand,
            field,
            test: false,
        } => qualified_name(operand).map(|prefix| format!("{prefix}.{field}")),
        _ => None,
    }
}

fn literal_value(literal: &Literal) -> Value<'static> {
    match literal {
        Literal::Null => Value::Null,
        Literal::Bool(value) => Value::Bool(*value),
        Literal::Int(value) => Value::Int(*value),
        Literal::Uint(value) => Value::Uint(*value),
        Literal::Double(value) => Value::Double(*value),
        Literal::String(text) => Value::String(Str::Owned(text.clone())),
        Literal::Bytes(bytes) => Value::Bytes(bytes.clone()),
    }
}

/// Where a program's declared variables come from when it runs: values at hand, or computed on
/// first use.
pub trait Activation<'a> {
    /// The value of the variable declared `slot`-th.
    fn resolve(&mut self, slot: usize, budget: &mut Budget<'_>) -> Result<Value<'a>, EvalError>;
}

/// Variables given as values, in declaration order; a missing one is null.
pub struct Values<'s, 'a>(pub &'s [Value<'a>]);

impl<'a> Activation<'a> for Values<'_, 'a> {
    fn resolve(&mut self, slot: usize, _: &mut Budget<'_>) -> Result<Value<'a>, EvalError> {
        Ok(self.0.get(slot).cloned().unwrap_or(Value::Null))
    }
}

struct Machine<'n, 'v, 'a, 'e, 'i> {
    variables: &'v mut dyn Activation<'a>,
    /// Comprehension accumulators and iteration variables; an accumulator may hold an error,
    /// which `&&`/`||` later in the fold may absorb, as in cel-go.
    locals: Vec<Local<'n, 'a>>,
    ctx: Ctx<'e, 'i>,
}

/// A comprehension variable: its value, or an accumulator's initial expression, evaluated
/// when first read (cel-go initialises accumulators lazily).
enum Local<'n, 'a> {
    Ready(Outcome<'a>),
    Lazy(&'n Node),
}

impl<'n, 'a> Machine<'n, '_, 'a, '_, '_> {
    /// The value of a comprehension variable, initialising a lazy accumulator.
    fn local(&mut self, slot: usize) -> &mut Outcome<'a> {
        if let Some(Local::Lazy(init)) = self.locals.get(slot) {
            let init: &'n Node = init;
            // The initial value may be first read deep inside the fold, with other folds'
            // variables above it: they are kept aside while it is computed.
            let above = self.locals.split_off(slot + 1);
            let value = self.eval(init);
            self.locals.truncate(slot + 1);
            self.locals.extend(above);
            self.locals[slot] = Local::Ready(value);
        }
        match self.locals.get_mut(slot) {
            Some(Local::Ready(value)) => value,
            _ => unreachable!("a comprehension variable outside its comprehension"),
        }
    }

    fn eval(&mut self, node: &'n Node) -> Outcome<'a> {
        match node {
            Node::Const(value) => Ok(value.clone()),
            Node::Attr(attr) => {
                let value = self.resolve(attr);
                if let Err(error) = &value
                    && cancels(error)
                {
                    return value;
                }
                self.ctx.budget.charge(attr.cost)?;
                value
            }
            Node::Test(attr) => match self.resolve(attr)? {
                Value::Optional(inner) => Ok(Value::Bool(inner.is_some())),
                other => Ok(other),
            },
            Node::Fail(error) => Err(error.clone()),
            Node::Call(call) => self.call(call),
            Node::And(a, b) => self.logical(a, b, false),
            Node::Or(a, b) => self.logical(a, b, true),
            Node::NotStrictlyFalse(operand) => {
                let value = self.eval(operand);
                if let Err(error) = &value
                    && cancels(error)
                {
                    return value;
                }
                self.ctx.budget.charge(1)?;
                match value {
                    Ok(Value::Bool(value)) => Ok(Value::Bool(value)),
                    _ => Ok(Value::Bool(true)),
                }
            }
            Node::OptOr(receiver, alternative) => match self.eval(receiver)? {
                Value::Optional(None) => self.eval(alternative),
                other => Ok(other),
            },
            Node::OptOrValue(receiver, alternative) => match self.eval(receiver)? {
                Value::Optional(Some(inner)) => Ok((*inner).clone()),
                Value::Optional(None) => self.eval(alternative),
                other => Ok(other),
            },
            Node::SetMembership(element, set) => {
                let element = self.eval(element)?;
                Ok(Value::Bool(
                    set.iter().any(|member| member.equals(&element)),
                ))
            }
            Node::List(elements, optional) => {
                let values = self.list(elements, optional);
                self.charge_unless_cancelled(&values, LIST_CREATE_COST)?;
                Ok(Value::list(values?))
            }
            Node::Map(entries, repeated_keys) => {
                let map = self.map(entries, repeated_keys);
                self.charge_unless_cancelled(&map, MAP_CREATE_COST)?;
                Ok(Value::Map(Map::Owned(Arc::new(map?))))
            }
            Node::Struct(type_name, fields) => {
                let values = self.fields(fields);
                self.charge_unless_cancelled(&values, STRUCT_CREATE_COST)?;
                Ok(Value::Object(Arc::new(Object {
                    type_name: type_name.clone(),
                    fields: values?,
                })))
            }
            Node::Fold(fold) => self.fold(fold),
        }
    }

    /// Charges `cost` after a step, whether it succeeded or failed, unless it was cancelled.
    fn charge_unless_cancelled<T>(
        &mut self,
        outcome: &Result<T, EvalError>,
        cost: u64,
    ) -> Result<(), EvalError> {
        match outcome {
            Err(error) if cancels(error) => Err(error.clone()),
            _ => self.ctx.budget.charge(cost),
        }
    }

    fn list(
        &mut self,
        elements: &'n [Node],
        optional: &[bool],
    ) -> Result<Vec<Value<'a>>, EvalError> {
        let mut values = Vec::with_capacity(elements.len());
        for (element, is_optional) in elements.iter().zip(optional) {
            let value = self.eval(element)?;
            if *is_optional {
                match value {
                    Value::Optional(Some(inner)) => values.push((*inner).clone()),
                    Value::Optional(None) => {}
                    other => {
                        return Err(EvalError::Invalid(format!(
                            "cannot initialize optional list element from non-optional value {other}"
                        )));
                    }
                }
            } else {
                values.push(value);
            }
        }
        Ok(values)
    }

    fn map(
        &mut self,
        entries: &'n [(Node, Node, bool)],
        repeated_keys: &bool,
    ) -> Result<indexmap::IndexMap<Key<'a>, Value<'a>>, EvalError> {
        let mut map = indexmap::IndexMap::with_capacity(entries.len());
        for (key, value, is_optional) in entries {
            let key_value = self.eval(key)?;
            let value = self.eval(value)?;
            let key = if *repeated_keys {
                Key::from_any(&key_value)
            } else {
                Key::from_value(&key_value).ok_or_else(|| {
                    EvalError::Invalid(format!(
                        "unsupported key type: {}",
                        key_value.type_of().runtime_text()
                    ))
                })?
            };
            let value = if *is_optional {
                match value {
                    Value::Optional(Some(inner)) => (*inner).clone(),
                    Value::Optional(None) => {
                        map.shift_remove(&key);
                        continue;
                    }
                    other => {
                        return Err(EvalError::Invalid(format!(
                            "cannot initialize optional entry '{}' from non-optional value {other}",
                            go_text(&key_value)
                        )));
                    }
                }
            } else {
                value
            };
            if !*repeated_keys && map.contains_key(&key) {
                return Err(EvalError::Invalid(format!(
                    "Failed with repeated key: {}",
                    key.to_value()
                )));
            }
            map.insert(key, value);
        }
        Ok(map)
    }

    fn fields(
        &mut self,
        fields: &'n [(Arc<str>, Node, bool)],
    ) -> Result<indexmap::IndexMap<Arc<str>, Value<'a>>, EvalError> {
        let mut values = indexmap::IndexMap::with_capacity(fields.len());
        for (name, value, is_optional) in fields {
            let value = self.eval(value)?;
            let value = if *is_optional {
                match value {
                    Value::Optional(Some(inner)) => (*inner).clone(),
                    Value::Optional(None) => {
                        values.shift_remove(name);
                        continue;
                    }
                    other => {
                        return Err(EvalError::Invalid(format!(
                            "cannot initialize optional entry '{name}' from non-optional value {other}"
                        )));
                    }
                }
            } else {
                value
            };
            values.insert(name.clone(), value);
        }
        Ok(values)
    }

    /// Resolves an attribute as cel-go does (`applyQualifiers`): each qualifier costs 1 when it
    /// is applied (an optional one only when it finds something); the attribute's own cost is
    /// the caller's.
    fn resolve(&mut self, attr: &'n Attr) -> Outcome<'a> {
        let mut value = match &attr.root {
            Root::Variable(slot) => self.variables.resolve(*slot, self.ctx.budget)?,
            Root::Local(slot) => self.local(*slot).clone()?,
            Root::Missing(name) => return Err(EvalError::NoSuchAttribute(name.to_string())),
            Root::Value(node) => self.eval(node)?,
            Root::Conditional(parts) => match self.eval(&parts.0)? {
                Value::Bool(true) => self.resolve(&parts.1)?,
                Value::Bool(false) => self.resolve(&parts.2)?,
                _ => return Err(EvalError::Invalid("no such overload".to_owned())),
            },
        };
        if attr.qualifiers.is_empty() {
            return Ok(value);
        }
        let mut optional = false;
        if let Value::Optional(inner) = &value {
            match inner {
                None => return Ok(value),
                Some(inner) => {
                    value = (**inner).clone();
                    optional = true;
                }
            }
        }
        for qualifier in &attr.qualifiers {
            optional = optional || qualifier.optional;
            let key = match &qualifier.key {
                QualKey::Const(key) => Ok(key.clone()),
                QualKey::Attr(key) => self.resolve(key),
            };
            if optional {
                // QualifyIfPresent: observed (costed) only when something is found.
                let key = key?;
                match lookup(&value, &key, true)? {
                    Some(found) => {
                        self.ctx.budget.charge(1)?;
                        value = if qualifier.test {
                            Value::Bool(true)
                        } else {
                            found
                        };
                    }
                    None => return Ok(Value::Optional(None)),
                }
            } else {
                let found = key.and_then(|key| {
                    if qualifier.test {
                        lookup(&value, &key, true).map(|found| Value::Bool(found.is_some()))
                    } else {
                        lookup(&value, &key, false).map(|found| found.unwrap_or(Value::Null))
                    }
                });
                self.charge_unless_cancelled(&found, 1)?;
                value = found?;
            }
        }
        if optional {
            Ok(Value::Optional(Some(Arc::new(value))))
        } else {
            Ok(value)
        }
    }

    /// `&&` (`or == false`) and `||`: the first decisive operand wins, even over an error in the
    /// other (cel-spec's commutative error handling).
    fn logical(&mut self, a: &'n Node, b: &'n Node, or: bool) -> Outcome<'a> {
        let decisive = or;
        let left = self.eval(a);
        match &left {
            Ok(Value::Bool(value)) if *value == decisive => return Ok(Value::Bool(decisive)),
            Err(error) if cancels(error) => return left,
            _ => {}
        }
        let right = self.eval(b);
        match &right {
            Ok(Value::Bool(value)) if *value == decisive => return Ok(Value::Bool(decisive)),
            Err(error) if cancels(error) => return right,
            _ => {}
        }
        match (left, right) {
            (Ok(Value::Bool(_)), Ok(Value::Bool(_))) => Ok(Value::Bool(!decisive)),
            (Err(error), _) => Err(error),
            (Ok(Value::Bool(_)), Err(error)) => Err(error),
            (Ok(_), _) => Err(EvalError::Invalid("no such overload".to_owned())),
        }
    }

    /// A call, as cel-go evaluates one: the arguments of a unary or binary call are all
    /// evaluated (the first error is the result) and the call is charged even when one failed;
    /// a call of more arguments stops at the first error, uncharged.
    fn call(&mut self, call: &'n Call) -> Outcome<'a> {
        let mut args = Vec::with_capacity(call.args.len());
        let mut failed = None;
        for (index, arg) in call.args.iter().enumerate() {
            let value = match call.accumulator {
                Some(slot) if index == 0 => {
                    // Moved out: the step's result replaces it.
                    self.ctx.budget.charge(1)?;
                    std::mem::replace(self.local(slot), Ok(Value::Null))
                }
                _ => self.eval(arg),
            };
            match value {
                Ok(value) => args.push(value),
                Err(error) if cancels(&error) => return Err(error),
                Err(error) if call.args.len() > 2 => return Err(error),
                Err(error) => {
                    failed.get_or_insert(error);
                    args.push(Value::Null);
                }
            }
        }
        if let Some(error) = failed {
            self.ctx.budget.charge(1)?;
            return Err(error);
        }
        if call.accumulator.is_some() {
            match (&call.function[..], args.as_mut_slice()) {
                (operators::ADD, [Value::List(list), Value::List(other)]) => {
                    self.ctx.budget.charge(1)?;
                    let list = std::mem::replace(list, List::from_values(Vec::new()));
                    return Ok(Value::List(list.append(other)));
                }
                (MAP_INSERT, [map @ Value::Map(_), rest @ ..]) => {
                    self.ctx.budget.charge(1)?;
                    let map = std::mem::replace(map, Value::Null);
                    return match rest {
                        [key, value] => {
                            crate::stdlib::map_insert_owned(map, &[(key.clone(), value.clone())])
                        }
                        [Value::Map(entries)] => {
                            crate::stdlib::map_insert_owned(map, &entries.entries())
                        }
                        _ => Err(no_overload(&call.function, rest)),
                    };
                }
                _ => {}
            }
        }
        let Some(overload) = call
            .overloads
            .iter()
            .find(|overload| accepts(&overload.signature.params, &args))
            .or_else(|| {
                // cel-go's `sort` is one implementation for every element type: it refuses
                // elements it cannot order itself.
                matches!(&*call.function, "sort" | "@sortByAssociatedKeys")
                    .then(|| call.overloads.first())
                    .flatten()
                    .filter(|_| args.iter().all(|arg| matches!(arg, Value::List(_))))
            })
        else {
            self.ctx.budget.charge(1)?;
            if &*call.function == "matches" && matches!(call.args.get(1), Some(Node::Const(_))) {
                // cel-go's regex optimisation: its call refuses a non-string with the bare message.
                return Err(no_overload(&call.function, &args));
            }
            return Err(dispatch_failure(&call.function, &args));
        };
        let cost = match (overload.cost, overload.dispatched_cost) {
            (_, Some(cost)) if call.dispatched => cost(&args),
            (Some(cost), _) if overload.cost_by_name || !call.dispatched => cost(&args),
            _ => 1,
        };
        self.ctx.budget.charge(cost)?;
        (overload.implementation)(&mut self.ctx, &args)
    }

    fn fold(&mut self, fold: &'n Fold) -> Outcome<'a> {
        let range = self.eval(&fold.range)?;
        self.locals
            .resize_with(fold.slot, || Local::Ready(Ok(Value::Null)));
        self.locals.push(match &fold.init {
            Node::Const(value) => Local::Ready(Ok(value.clone())),
            init => Local::Lazy(init),
        });
        self.locals.push(Local::Ready(Ok(Value::Null)));
        if fold.two_variables {
            self.locals.push(Local::Ready(Ok(Value::Null)));
        }
        let outcome = self.iterate(fold, range);
        self.locals.truncate(fold.slot + 1);
        let result = match outcome {
            Ok(()) => self.eval(&fold.result),
            Err(error) => Err(error),
        };
        self.locals.truncate(fold.slot);
        result
    }

    fn iterate(&mut self, fold: &'n Fold, range: Value<'a>) -> Result<(), EvalError> {
        let first = fold.slot + 1;
        match range {
            Value::List(list) => {
                for (index, item) in list.iter().enumerate() {
                    if fold.two_variables {
                        self.locals[first] = Local::Ready(Ok(Value::Int(index as i64)));
                        self.locals[first + 1] = Local::Ready(Ok(item));
                    } else {
                        self.locals[first] = Local::Ready(Ok(item));
                    }
                    if !self.step(fold, index)? {
                        break;
                    }
                }
            }
            Value::Map(map) => {
                for (index, (key, value)) in map.entries().into_iter().enumerate() {
                    self.locals[first] = Local::Ready(Ok(key));
                    if fold.two_variables {
                        self.locals[first + 1] = Local::Ready(Ok(value));
                    }
                    if !self.step(fold, index)? {
                        break;
                    }
                }
            }
            other if fold.two_variables => {
                return Err(EvalError::Invalid(format!(
                    "unsupported comprehension range type: {}",
                    go_type_name(&other)
                )));
            }
            other => {
                return Err(EvalError::Invalid(format!(
                    "got '{}', expected iterable type",
                    go_type_name(&other)
                )));
            }
        }
        Ok(())
    }

    /// One iteration: false when the loop condition ends the fold (a condition that is not a
    /// bool, an error, does not end it, as in cel-go).
    fn step(&mut self, fold: &'n Fold, index: usize) -> Result<bool, EvalError> {
        match self.eval(&fold.condition) {
            Ok(Value::Bool(true)) => {}
            Ok(Value::Bool(false)) => return Ok(false),
            Err(error) if cancels(&error) => return Err(error),
            _ => {}
        }
        let next = self.eval(&fold.step);
        if let Err(error) = &next
            && cancels(error)
        {
            return Err(error.clone());
        }
        self.locals[fold.slot] = Local::Ready(next);
        if (index as u32)
            .wrapping_add(1)
            .is_multiple_of(INTERRUPT_EVERY)
            && self.ctx.budget.interrupted()
        {
            return Err(EvalError::Interrupted);
        }
        Ok(true)
    }
}

/// cel-go's `refQualify`: the value under `key` in `value`. With `presence`, a missing field
/// or index is `None` (and selecting on a value that has no fields is too); without, it is an
/// error.
fn lookup<'a>(
    value: &Value<'a>,
    key: &Value<'a>,
    presence: bool,
) -> Result<Option<Value<'a>>, EvalError> {
    match value {
        Value::Map(map) => {
            if !matches!(
                key,
                Value::String(_)
                    | Value::Int(_)
                    | Value::Uint(_)
                    | Value::Bool(_)
                    | Value::Double(_)
            ) {
                return Err(EvalError::Invalid(format!(
                    "invalid qualifier type: {}",
                    go_type_name(key)
                )));
            }
            match map.get(key) {
                Some(found) => Ok(Some(found)),
                None if presence => Ok(None),
                None => Err(EvalError::NoSuchKey(go_text(key))),
            }
        }
        Value::List(list) => {
            let position = list_position(key)?;
            match usize::try_from(position)
                .ok()
                .and_then(|position| list.get(position))
            {
                Some(found) => Ok(Some(found)),
                None if presence => Ok(None),
                None => Err(EvalError::IndexOutOfBounds(go_text(key))),
            }
        }
        Value::Object(object) if !is_opaque(&object.type_name) => match key {
            Value::String(name) => match object.fields.get(name.as_str()) {
                Some(found) => Ok(Some(found.clone())),
                None if presence => Ok(None),
                None => Err(EvalError::Invalid(format!(
                    "no such field '{}'",
                    name.as_str()
                ))),
            },
            other => Err(EvalError::Invalid(format!(
                "no such overload: {}",
                go_type_name(other)
            ))),
        },
        _ if presence => Ok(None),
        _ => Err(EvalError::NoSuchKey(go_text(key))),
    }
}

/// Kubernetes' opaque types (IP, CIDR, quantity, …) have no fields to select.
fn is_opaque(type_name: &str) -> bool {
    type_name.starts_with("net.") || type_name.starts_with("kubernetes.")
}

/// A value as Go's `%v` writes a cel-go value (in messages: `no such key: a`).
pub(crate) fn go_text(value: &Value<'_>) -> String {
    match value {
        Value::String(text) => text.as_str().to_owned(),
        Value::Uint(value) => value.to_string(),
        Value::Double(value) => crate::stdlib::format_double(*value),
        Value::Null => "NULL_VALUE".to_owned(),
        other => other.to_string(),
    }
}

/// The Go type of a cel-go value, as `%T` writes it (in cel-go's messages).
pub(crate) fn go_type_name(value: &Value<'_>) -> &'static str {
    match value {
        Value::Null => "types.Null",
        Value::Bool(_) => "types.Bool",
        Value::Int(_) => "types.Int",
        Value::Uint(_) => "types.Uint",
        Value::Double(_) => "types.Double",
        Value::String(_) => "types.String",
        Value::Bytes(_) => "types.Bytes",
        Value::List(_) => "*types.baseList",
        Value::Map(_) => "*types.baseMap",
        Value::Duration(_) => "types.Duration",
        Value::Timestamp(_) => "types.Timestamp",
        Value::Type(_) => "*types.Type",
        Value::Optional(_) => "*types.Optional",
        Value::Object(_) => "*types.Object",
    }
}

/// Does a value fit an overload's parameter type at run time?
fn fits(value: &Value<'_>, kind: &Type) -> bool {
    match (kind, value) {
        (Type::Dyn | Type::Param(_), _) => true,
        (Type::Null, Value::Null)
        | (Type::Bool, Value::Bool(_))
        | (Type::Int, Value::Int(_))
        | (Type::Uint, Value::Uint(_))
        | (Type::Double, Value::Double(_))
        | (Type::String, Value::String(_))
        | (Type::Bytes, Value::Bytes(_))
        | (Type::Duration, Value::Duration(_))
        | (Type::Timestamp, Value::Timestamp(_))
        | (Type::Type(_), Value::Type(_))
        | (Type::Optional(_), Value::Optional(_)) => true,
        (Type::Object(name), Value::Object(object)) => *name == object.type_name,
        // cel-go's run-time guard looks at the first element (and entry) only.
        (Type::List(element), Value::List(list)) => {
            list.get(0).is_none_or(|first| fits(&first, element))
        }
        (Type::Map(key, value), Value::Map(map)) => match map.first() {
            None => true,
            Some((first_key, first_value)) => fits(&first_key, key) && fits(&first_value, value),
        },
        _ => false,
    }
}

fn accepts(params: &[Type], args: &[Value<'_>]) -> bool {
    params.len() == args.len() && params.iter().zip(args).all(|(param, arg)| fits(arg, param))
}

/// cel-go's error where a function's implementation refuses its arguments
/// (`types.MaybeNoSuchOverloadErr`): a bare `no such overload`.
pub(crate) fn no_overload(_function: &str, _args: &[Value<'_>]) -> EvalError {
    EvalError::NoSuchOverload("no such overload".to_owned())
}

/// cel-go's error where no overload of `function` takes `args` at run time. cel-go's standard
/// operators are singletons that need a trait of their first operand (`no such overload: -_`
/// without it, else the implementation's bare `no such overload`); `contains`, `startsWith`
/// and `endsWith` skip the type guards (bare); other functions' guards name the argument types
/// (`no such overload: charAt(int, int)`).
pub(crate) fn dispatch_failure(function: &str, args: &[Value<'_>]) -> EvalError {
    let has = |kinds: &[&str]| {
        args.first()
            .is_some_and(|first| kinds.contains(&first.type_of().runtime_name()))
    };
    const NUMBERS: &[&str] = &["int", "uint", "double"];
    let trait_held = match function {
        operators::ADD => Some(has(&[
            "int",
            "uint",
            "double",
            "string",
            "bytes",
            "list",
            "google.protobuf.Duration",
            "google.protobuf.Timestamp",
        ])),
        operators::SUBTRACT => Some(has(&[
            "int",
            "uint",
            "double",
            "google.protobuf.Duration",
            "google.protobuf.Timestamp",
        ])),
        operators::MULTIPLY | operators::DIVIDE => Some(has(NUMBERS)),
        operators::MODULO => Some(has(&["int", "uint"])),
        operators::NEGATE => Some(has(&["int", "double", "google.protobuf.Duration"])),
        operators::LESS
        | operators::LESS_EQUALS
        | operators::GREATER
        | operators::GREATER_EQUALS => Some(has(&[
            "bool",
            "int",
            "uint",
            "double",
            "string",
            "bytes",
            "google.protobuf.Duration",
            "google.protobuf.Timestamp",
        ])),
        "size" => Some(has(&["string", "bytes", "list", "map"])),
        "matches" => Some(has(&["string"])),
        operators::INDEX => Some(has(&["list", "map"])),
        operators::LOGICAL_NOT
        | operators::LOGICAL_AND
        | operators::LOGICAL_OR
        | operators::CONDITIONAL
        | operators::IN
        | "contains"
        | "startsWith"
        | "endsWith" => Some(true),
        _ => None,
    };
    // Without the trait, a receiver type (string, duration, timestamp) is asked to take the
    // call, and refuses it with the bare message.
    let receiver = has(&[
        "string",
        "google.protobuf.Duration",
        "google.protobuf.Timestamp",
    ]);
    EvalError::NoSuchOverload(match trait_held {
        Some(true) => "no such overload".to_owned(),
        Some(false) if receiver => "no such overload".to_owned(),
        Some(false) => format!("no such overload: {function}"),
        None => format!(
            "no such overload: {function}({})",
            args.iter()
                .map(|arg| arg.type_of().runtime_name().to_owned())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    })
}

/// A list index: an int, a uint, or a double with no fraction (cel-spec's heterogeneous
/// indexing).
fn list_position(index: &Value<'_>) -> Result<i64, EvalError> {
    match index {
        Value::Int(position) => Ok(*position),
        Value::Uint(position) => i64::try_from(*position)
            .map_err(|_| EvalError::Invalid(format!("unsupported index value {position} in list"))),
        Value::Double(position) if position.fract() == 0.0 && position.abs() < 9.2e18 => {
            Ok(*position as i64)
        }
        Value::Double(position) => Err(EvalError::Invalid(format!(
            "unsupported index value {} in list",
            crate::stdlib::format_double(*position)
        ))),
        other => Err(EvalError::Invalid(format!(
            "unsupported index type '{}' in list",
            other.type_of().runtime_name()
        ))),
    }
}
