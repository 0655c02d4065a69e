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

use crate::ast::{Comprehension, Expr, ExprKind, Literal, operators};
use crate::env::{Env, Overload};
use crate::error::{CompileError, EvalError, Issue};
use crate::types::Type;
use crate::value::{Key, Map, Object, Str, Value};

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
    Variable(usize),
    Local(usize),
    /// A name nothing declares, in a program compiled without checking: an error when reached.
    Missing(Arc<str>),
    /// A call nothing declares, in a program compiled without checking: an error when reached.
    Fail(EvalError),
    Select(Box<Node>, Arc<str>),
    Test(Box<Node>, Arc<str>),
    OptSelect(Box<Node>, Arc<str>),
    Index(Box<Node>, Box<Node>),
    OptIndex(Box<Node>, Box<Node>),
    Call(Box<Call>),
    And(Box<Node>, Box<Node>),
    Or(Box<Node>, Box<Node>),
    Conditional(Box<(Node, Node, Node)>),
    NotStrictlyFalse(Box<Node>),
    /// `a.or(b)` and `a.orValue(b)`: `b` is evaluated only when `a` is empty.
    OptOr(Box<Node>, Box<Node>),
    OptOrValue(Box<Node>, Box<Node>),
    List(Vec<Node>, Vec<bool>),
    Map(Vec<(Node, Node, bool)>),
    Struct(Arc<str>, Vec<(Arc<str>, Node, bool)>),
    Fold(Box<Fold>),
}

#[derive(Debug, Clone)]
struct Call {
    function: Arc<str>,
    overloads: Vec<Arc<Overload>>,
    args: Vec<Node>,
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
        let compiled = regex::RegexBuilder::new(pattern)
            .size_limit(REGEX_SIZE_LIMIT)
            .build()
            .map_err(|error| {
                EvalError::Invalid(format!(
                    "invalid regex {pattern:?}: {}",
                    first_line(&error.to_string())
                ))
            })?;
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

fn first_line(text: &str) -> &str {
    text.lines().last().unwrap_or(text).trim()
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
        checked: bool,
    ) -> Result<Program, CompileError> {
        let mut planner = Planner {
            env,
            locals: Vec::new(),
            issues: Vec::new(),
            checked,
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
                if *test {
                    Node::Test(Box::new(operand_node), field.clone())
                } else {
                    Node::Select(Box::new(operand_node), field.clone())
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
            return Node::Local(slot);
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
            Node::Missing(name.clone())
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
            return Some(Node::Variable(slot));
        }
        type_named(name)
            .or_else(|| {
                self.env
                    .objects
                    .contains_key(name)
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
                return Node::Conditional(Box::new((condition, yes, no)));
            }
            (operators::NOT_STRICTLY_FALSE, None, 1) => {
                return Node::NotStrictlyFalse(Box::new(self.plan(&args[0])));
            }
            (operators::INDEX, None, 2) => {
                let (a, b) = binary(self);
                return Node::Index(Box::new(a), Box::new(b));
            }
            (operators::OPT_INDEX, None, 2) if self.env.parse_options.optional_syntax => {
                let (a, b) = binary(self);
                return Node::OptIndex(Box::new(a), Box::new(b));
            }
            (operators::OPT_SELECT, None, 2) if self.env.parse_options.optional_syntax => {
                let operand = self.plan(&args[0]);
                return match &args[1].kind {
                    ExprKind::Literal(Literal::String(field)) => {
                        Node::OptSelect(Box::new(operand), field.clone())
                    }
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
            return Node::Fail(EvalError::NoSuchOverload {
                function: function.to_string(),
                args: String::new(),
            });
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
        let node = Node::Call(Box::new(Call {
            function: function.clone(),
            overloads,
            args: nodes,
        }));
        if conversion {
            self.fold_constant(expr, node)
        } else {
            node
        }
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
            Node::Map(entries) => entries.iter().all(|(key, value, optional)| {
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
        let mut machine: Machine<'_, 'static, '_, '_> = Machine {
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
        let init = self.plan(&comprehension.accu_init);
        let slot = self.locals.len();
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

/// The type a built-in type name denotes, as a value (`int`, `list`, `google.protobuf.Duration`).
fn type_named(name: &str) -> Option<Type> {
    Some(match name {
        "bool" => Type::Bool,
        "int" => Type::Int,
        "uint" => Type::Uint,
        "double" => Type::Double,
        "string" => Type::String,
        "bytes" => Type::Bytes,
        "list" => Type::list(Type::Dyn),
        "map" => Type::map(Type::Dyn, Type::Dyn),
        "null_type" => Type::Null,
        "type" => Type::Type(None),
        "optional_type" => Type::optional(Type::Dyn),
        "google.protobuf.Duration" => Type::Duration,
        "google.protobuf.Timestamp" => Type::Timestamp,
        _ => return None,
    })
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

struct Machine<'v, 'a, 'e, 'i> {
    variables: &'v mut dyn Activation<'a>,
    /// Comprehension accumulators and iteration variables; an accumulator may hold an error,
    /// which `&&`/`||` later in the fold may absorb, as in cel-go.
    locals: Vec<Outcome<'a>>,
    ctx: Ctx<'e, 'i>,
}

impl<'a> Machine<'_, 'a, '_, '_> {
    fn eval(&mut self, node: &Node) -> Outcome<'a> {
        match node {
            Node::Const(value) => Ok(value.clone()),
            Node::Variable(slot) => {
                self.ctx.budget.charge(1)?;
                self.variables.resolve(*slot, self.ctx.budget)
            }
            Node::Local(slot) => {
                self.ctx.budget.charge(1)?;
                self.locals.get(*slot).cloned().unwrap_or(Ok(Value::Null))
            }
            Node::Missing(name) => Err(EvalError::NoSuchAttribute(name.to_string())),
            Node::Fail(error) => Err(error.clone()),
            Node::Select(operand, field) => {
                let operand = self.eval(operand)?;
                self.ctx.budget.charge(1)?;
                select(operand, field)
            }
            // kube-apiserver sets PresenceTestHasCost(false): `has()` costs nothing of its own.
            Node::Test(operand, field) => {
                let operand = self.eval(operand)?;
                test(&operand, field).map(Value::Bool)
            }
            Node::OptSelect(operand, field) => {
                let operand = self.eval(operand)?;
                self.ctx.budget.charge(1)?;
                optional_select(operand, field)
            }
            Node::Index(operand, index) => {
                let operand = self.eval(operand)?;
                let index = self.eval(index)?;
                self.ctx.budget.charge(1)?;
                match operand {
                    Value::Optional(inner) => optional_index(inner, &index),
                    operand => self::index(operand, &index),
                }
            }
            Node::OptIndex(operand, index) => {
                let operand = self.eval(operand)?;
                let index = self.eval(index)?;
                self.ctx.budget.charge(1)?;
                match operand {
                    Value::Optional(inner) => optional_index(inner, &index),
                    operand => optional_index(Some(Arc::new(operand)), &index),
                }
            }
            Node::Call(call) => self.call(call),
            Node::And(a, b) => self.logical(a, b, false),
            Node::Or(a, b) => self.logical(a, b, true),
            Node::Conditional(parts) => match self.eval(&parts.0)? {
                Value::Bool(true) => self.eval(&parts.1),
                Value::Bool(false) => self.eval(&parts.2),
                other => Err(no_overload(operators::CONDITIONAL, &[other])),
            },
            Node::NotStrictlyFalse(operand) => match self.eval(operand) {
                Ok(Value::Bool(value)) => Ok(Value::Bool(value)),
                Err(error) if cancels(&error) => Err(error),
                _ => Ok(Value::Bool(true)),
            },
            Node::OptOr(receiver, alternative) => match self.eval(receiver)? {
                Value::Optional(Some(inner)) => Ok(Value::Optional(Some(inner))),
                Value::Optional(None) => match self.eval(alternative)? {
                    optional @ Value::Optional(_) => Ok(optional),
                    other => Err(no_overload("or", &[Value::Optional(None), other])),
                },
                other => Err(no_overload("or", &[other])),
            },
            Node::OptOrValue(receiver, alternative) => match self.eval(receiver)? {
                Value::Optional(Some(inner)) => Ok((*inner).clone()),
                Value::Optional(None) => self.eval(alternative),
                other => Err(no_overload("orValue", &[other])),
            },
            Node::List(elements, optional) => {
                let mut values = Vec::with_capacity(elements.len());
                for (element, is_optional) in elements.iter().zip(optional) {
                    let value = self.eval(element)?;
                    if *is_optional {
                        match value {
                            Value::Optional(Some(inner)) => values.push((*inner).clone()),
                            Value::Optional(None) => {}
                            other => return Err(no_overload("optional list element", &[other])),
                        }
                    } else {
                        values.push(value);
                    }
                }
                self.ctx.budget.charge(LIST_CREATE_COST)?;
                Ok(Value::list(values))
            }
            Node::Map(entries) => {
                let mut map = indexmap::IndexMap::with_capacity(entries.len());
                for (key, value, is_optional) in entries {
                    let key_value = self.eval(key)?;
                    let key = Key::from_value(&key_value).ok_or_else(|| {
                        EvalError::Invalid(format!("unsupported key type: {}", key_value.type_of()))
                    })?;
                    let value = self.eval(value)?;
                    let value = if *is_optional {
                        match value {
                            Value::Optional(Some(inner)) => (*inner).clone(),
                            Value::Optional(None) => continue,
                            other => return Err(no_overload("optional map entry", &[other])),
                        }
                    } else {
                        value
                    };
                    if map.contains_key(&key) {
                        return Err(EvalError::Invalid(format!(
                            "Failed with repeated key: {}",
                            key.to_value()
                        )));
                    }
                    map.insert(key, value);
                }
                self.ctx.budget.charge(MAP_CREATE_COST)?;
                Ok(Value::Map(Map::Owned(Arc::new(map))))
            }
            Node::Struct(type_name, fields) => {
                let mut values = indexmap::IndexMap::with_capacity(fields.len());
                for (name, value, is_optional) in fields {
                    let value = self.eval(value)?;
                    let value = if *is_optional {
                        match value {
                            Value::Optional(Some(inner)) => (*inner).clone(),
                            Value::Optional(None) => continue,
                            other => return Err(no_overload("optional field", &[other])),
                        }
                    } else {
                        value
                    };
                    values.insert(name.clone(), value);
                }
                self.ctx.budget.charge(STRUCT_CREATE_COST)?;
                Ok(Value::Object(Arc::new(Object {
                    type_name: type_name.clone(),
                    fields: values,
                })))
            }
            Node::Fold(fold) => self.fold(fold),
        }
    }

    /// `&&` (`or == false`) and `||`: the first decisive operand wins, even over an error in the
    /// other (cel-spec's commutative error handling).
    fn logical(&mut self, a: &Node, b: &Node, or: bool) -> Outcome<'a> {
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
        let function = if or {
            operators::LOGICAL_OR
        } else {
            operators::LOGICAL_AND
        };
        match (left, right) {
            (Ok(Value::Bool(_)), Ok(Value::Bool(_))) => Ok(Value::Bool(!decisive)),
            (Err(error), _) => Err(error),
            (Ok(Value::Bool(_)), Err(error)) => Err(error),
            (Ok(left), Err(_)) => Err(no_overload(function, &[left])),
            (Ok(left), Ok(right)) => Err(no_overload(function, &[left, right])),
        }
    }

    fn call(&mut self, call: &Call) -> Outcome<'a> {
        let mut args = Vec::with_capacity(call.args.len());
        for arg in &call.args {
            args.push(self.eval(arg)?);
        }
        let overload = call
            .overloads
            .iter()
            .find(|overload| accepts(&overload.signature.params, &args))
            .ok_or_else(|| no_overload(&call.function, &args))?;
        let cost = match overload.cost {
            Some(cost) => cost(&args),
            None => 1,
        };
        self.ctx.budget.charge(cost)?;
        (overload.implementation)(&mut self.ctx, &args)
    }

    fn fold(&mut self, fold: &Fold) -> Outcome<'a> {
        let range = self.eval(&fold.range)?;
        let accumulator = self.eval(&fold.init);
        if let Err(error) = &accumulator
            && cancels(error)
        {
            return accumulator;
        }
        self.locals.truncate(fold.slot);
        self.locals.push(accumulator);
        self.locals.push(Ok(Value::Null));
        if fold.two_variables {
            self.locals.push(Ok(Value::Null));
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

    fn iterate(&mut self, fold: &Fold, range: Value<'a>) -> Result<(), EvalError> {
        let first = fold.slot + 1;
        match range {
            Value::List(list) => {
                for (index, item) in list.iter().enumerate() {
                    if fold.two_variables {
                        self.locals[first] = Ok(Value::Int(index as i64));
                        self.locals[first + 1] = Ok(item);
                    } else {
                        self.locals[first] = Ok(item);
                    }
                    if !self.step(fold, index)? {
                        break;
                    }
                }
            }
            Value::Map(map) => {
                for (index, (key, value)) in map.entries().into_iter().enumerate() {
                    self.locals[first] = Ok(key);
                    if fold.two_variables {
                        self.locals[first + 1] = Ok(value);
                    }
                    if !self.step(fold, index)? {
                        break;
                    }
                }
            }
            other => {
                return Err(EvalError::Invalid(format!(
                    "cannot iterate over a value of type {}",
                    other.type_of()
                )));
            }
        }
        Ok(())
    }

    /// One iteration: false when the loop condition ends the fold.
    fn step(&mut self, fold: &Fold, index: usize) -> Result<bool, EvalError> {
        if (index as u32)
            .wrapping_add(1)
            .is_multiple_of(INTERRUPT_EVERY)
            && self.ctx.budget.interrupted()
        {
            return Err(EvalError::Interrupted);
        }
        match self.eval(&fold.condition) {
            Ok(Value::Bool(true)) => {}
            Err(error) if cancels(&error) => return Err(error),
            _ => return Ok(false),
        }
        let next = self.eval(&fold.step);
        if let Err(error) = &next
            && cancels(error)
        {
            return Err(error.clone());
        }
        self.locals[fold.slot] = next;
        Ok(true)
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
        | (Type::List(_), Value::List(_))
        | (Type::Map(_, _), Value::Map(_))
        | (Type::Type(_), Value::Type(_))
        | (Type::Optional(_), Value::Optional(_)) => true,
        (Type::Object(name), Value::Object(object)) => *name == object.type_name,
        _ => false,
    }
}

fn accepts(params: &[Type], args: &[Value<'_>]) -> bool {
    params.len() == args.len() && params.iter().zip(args).all(|(param, arg)| fits(arg, param))
}

/// cel-go's message for a call no overload takes.
pub(crate) fn no_overload(function: &str, args: &[Value<'_>]) -> EvalError {
    EvalError::NoSuchOverload {
        function: function.to_owned(),
        args: args
            .iter()
            .map(|arg| arg.type_of().to_string())
            .collect::<Vec<_>>()
            .join(", "),
    }
}

fn select<'a>(operand: Value<'a>, field: &str) -> Outcome<'a> {
    match operand {
        Value::Map(map) => map
            .get_str(field)
            .ok_or_else(|| EvalError::NoSuchKey(field.to_owned())),
        Value::Object(object) => object
            .fields
            .get(field)
            .cloned()
            .ok_or_else(|| EvalError::Invalid(format!("no such field '{field}'"))),
        Value::Optional(inner) => optional_select(Value::Optional(inner), field),
        other => Err(EvalError::Invalid(format!(
            "type '{}' does not support field selection",
            other.type_of()
        ))),
    }
}

fn test(operand: &Value<'_>, field: &str) -> Result<bool, EvalError> {
    match operand {
        Value::Map(map) => Ok(map.get_str(field).is_some()),
        Value::Object(object) => Ok(object.fields.contains_key(field)),
        Value::Optional(None) => Ok(false),
        Value::Optional(Some(inner)) => test(inner, field),
        other => Err(EvalError::Invalid(format!(
            "invalid type for field selection: {}",
            other.type_of()
        ))),
    }
}

fn optional_select<'a>(operand: Value<'a>, field: &str) -> Outcome<'a> {
    match operand {
        Value::Optional(None) => Ok(Value::Optional(None)),
        Value::Optional(Some(inner)) => optional_select((*inner).clone(), field),
        Value::Map(map) => Ok(Value::Optional(map.get_str(field).map(Arc::new))),
        Value::Object(object) => Ok(Value::Optional(
            object.fields.get(field).cloned().map(Arc::new),
        )),
        other => Err(EvalError::Invalid(format!(
            "type '{}' does not support field selection",
            other.type_of()
        ))),
    }
}

fn index<'a>(operand: Value<'a>, index: &Value<'a>) -> Outcome<'a> {
    match operand {
        Value::List(list) => {
            let position = list_position(index)?;
            usize::try_from(position)
                .ok()
                .and_then(|position| list.get(position))
                // cel-go's wording where an index qualifies a value it reads (`a[3]`).
                .ok_or(EvalError::IndexOutOfBounds(position))
        }
        Value::Map(map) => {
            if Key::from_value(index).is_none() && !matches!(index, Value::Double(_)) {
                return Err(no_overload(
                    operators::INDEX,
                    &[Value::Map(map), index.clone()],
                ));
            }
            map.get(index)
                .ok_or_else(|| EvalError::NoSuchKey(index.to_string()))
        }
        other => Err(no_overload(operators::INDEX, &[other, index.clone()])),
    }
}

fn optional_index<'a>(operand: Option<Arc<Value<'a>>>, index: &Value<'a>) -> Outcome<'a> {
    let Some(operand) = operand else {
        return Ok(Value::Optional(None));
    };
    match &*operand {
        Value::List(list) => {
            let position = list_position(index)?;
            Ok(Value::Optional(
                usize::try_from(position)
                    .ok()
                    .and_then(|position| list.get(position))
                    .map(Arc::new),
            ))
        }
        Value::Map(map) => Ok(Value::Optional(map.get(index).map(Arc::new))),
        Value::Optional(inner) => optional_index(inner.clone(), index),
        other => Err(no_overload(
            operators::OPT_INDEX,
            &[other.clone(), index.clone()],
        )),
    }
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
            "unsupported index value {position} in list"
        ))),
        other => Err(EvalError::Invalid(format!(
            "unsupported index type '{}' in list",
            other.type_of()
        ))),
    }
}
