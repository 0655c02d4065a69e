//! Planning a parsed (and usually checked) expression into a [`Program`]: names are resolved
//! once (variables to slots, comprehension variables to stack positions, functions to their
//! overloads, type names to type values), `&&`, `||`, `?:` and the optional operators become
//! nodes of their own, and, where the environment folds constants as kube-apiserver's
//! `OptOptimize` does, constant literals and conversions are computed once and constant
//! patterns compiled.

use std::sync::Arc;

use crate::ast::{ACCUMULATOR, Comprehension, Expr, ExprKind, Literal, operators};
use crate::check::Checked;
use crate::env::Env;
use crate::error::{CompileError, EvalError, Issue};
use crate::eval::evaluate_constant;
use crate::function::Overload;
use crate::program::{Attr, Call, Fold, MAP_INSERT, Node, Program, QualKey, Qualifier, Root};
use crate::re2;
use crate::types::Type;
use crate::value::{Str, Value, go_type_name};

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
            read: Vec::new(),
            issues: Vec::new(),
            checked: checked.is_some(),
            ambiguous: checked.map(|checked| &checked.ambiguous),
            resolved: checked.map(|checked| &checked.overloads),
        };
        let root = planner.plan(expr);
        if !planner.issues.is_empty() {
            return Err(CompileError::new(source, planner.issues));
        }
        let mut program = Program::new(source, root);
        planner.read.sort_unstable();
        planner.read.dedup();
        program.reads = planner
            .read
            .iter()
            .filter_map(|&slot| {
                env.variables
                    .get(slot)
                    .map(|(name, _)| (name.clone(), slot))
            })
            .collect();
        Ok(program)
    }
}

struct Planner<'e> {
    env: &'e Env,
    locals: Vec<Arc<str>>,
    /// The slots of the declared variables the expression names.
    read: Vec<usize>,
    issues: Vec<Issue>,
    checked: bool,
    ambiguous: Option<&'e std::collections::HashSet<u32>>,
    resolved: Option<&'e std::collections::HashMap<u32, Vec<Arc<str>>>>,
}

/// A list, map or struct literal made of constants and such literals, built once here: evaluating
/// it charges what building it costs cel-go, which builds it on every evaluation (its
/// `OptOptimize` folds only list and map literals of plain constants, and those for free). A
/// literal whose building fails stays as it is, to fail when evaluated.
fn prebuild(node: Node) -> Node {
    let fixed = |node: &Node| match node {
        Node::Const(_) => Some(0),
        Node::Built(_, cost) => Some(*cost),
        _ => None,
    };
    let (parts, own) = match &node {
        Node::List(elements, optional) if !optional.contains(&true) => (
            elements.iter().map(fixed).sum::<Option<u64>>(),
            crate::eval::LIST_CREATE_COST,
        ),
        Node::Map(entries, _) if entries.iter().all(|(_, _, optional)| !optional) => (
            entries
                .iter()
                .map(|(key, value, _)| Some(fixed(key)? + fixed(value)?))
                .sum::<Option<u64>>(),
            crate::eval::MAP_CREATE_COST,
        ),
        Node::Struct(_, fields) if fields.iter().all(|(_, _, optional)| !optional) => (
            fields
                .iter()
                .map(|(_, value, _)| fixed(value))
                .sum::<Option<u64>>(),
            crate::eval::STRUCT_CREATE_COST,
        ),
        _ => (None, 0),
    };
    let Some(parts) = parts else {
        return node;
    };
    match evaluate_constant(&node) {
        Ok(value) => Node::Built(value, own + parts),
        Err(_) => node,
    }
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
                if !*test && let Some(name) = expr.qualified_name() {
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
                if !self.env.is_object(&name) {
                    return self.issue(
                        expr,
                        format!("undeclared reference to '{name}' (in container '')"),
                    );
                }
                let node = Node::Struct(
                    name,
                    fields
                        .iter()
                        .map(|field| (field.name.clone(), self.plan(&field.value), field.optional))
                        .collect(),
                );
                prebuild(node)
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
    fn resolve_qualified(&mut self, name: &str) -> Option<Node> {
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
            self.read.push(slot);
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
            && let Some(namespace) = target.qualified_name()
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
                let resolved = self.resolved_one(expr, &overloads);
                let overloads = self.bound(expr, overloads);
                let args = args.iter().map(|arg| self.plan(arg)).collect();
                return Node::Call(Box::new(Call {
                    function: Arc::from(qualified.as_str()),
                    overloads,
                    resolved,
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
        let overloads = self.bound(expr, overloads);
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
            && let Err(message) = re2::compile(pattern.as_str())
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
            if elements.iter().all(Value::is_primitive) {
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
            resolved: self.resolved_one(expr, &overloads),
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

    /// The overload the checker resolved the call to, when it resolved exactly one.
    fn resolved_one(&self, expr: &Expr, overloads: &[Arc<Overload>]) -> Option<Arc<Overload>> {
        match self.resolved?.get(&expr.id)?.as_slice() {
            [id] => overloads
                .iter()
                .find(|overload| overload.id == *id)
                .cloned(),
            _ => None,
        }
    }

    /// The overloads a call may run: those the checker resolved it to, in declaration order,
    /// as cel-go binds them (all of them without a check).
    fn bound(&self, expr: &Expr, overloads: Vec<Arc<Overload>>) -> Vec<Arc<Overload>> {
        let Some(resolved) = self.resolved.and_then(|resolved| resolved.get(&expr.id)) else {
            return overloads;
        };
        if overloads
            .first()
            .is_some_and(|overload| crate::function::singleton(&overload.function))
        {
            return overloads;
        }
        let kept: Vec<Arc<Overload>> = overloads
            .iter()
            .filter(|overload| resolved.contains(&overload.id))
            .cloned()
            .collect();
        if kept.is_empty() { overloads } else { kept }
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
            return prebuild(node);
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
            return prebuild(node);
        }
        match evaluate_constant(&node) {
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
