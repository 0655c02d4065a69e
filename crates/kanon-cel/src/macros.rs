//! Macro expansion, as cel-go expands each macro (`parser/macro.go`, `ext/comprehensions.go`,
//! `ext/lists.go`, `ext/bindings.go`, the optional library in `cel/library.go`).
//!
//! Expansions build exactly cel-go's shapes and allocate ids in the order cel-go allocates them
//! (the order Go evaluates the expander's calls), so that ids match cel-go's for the same source.
//! Nodes made by an expansion are placed at the macro call's position, as cel-go places them.

use std::sync::Arc;

use crate::ast::{
    ACCUMULATOR, Comprehension, Expr, ExprId, ExprKind, FieldInit, Literal, MapEntry, Span,
    operators,
};
use crate::options::ParseOptions;

/// cel-go's legacy accumulator name: an iteration variable may not take it either.
const LEGACY_ACCUMULATOR: &str = "__result__";
/// The iteration variable of the one-element folds `cel.bind`, `optMap` and `sortBy` build.
const UNUSED_ITER_VAR: &str = "#unused";
/// The accumulator of `sortBy`'s binding of its input.
const SORT_BY_INPUT: &str = "@__sortBy_input__";
/// The insertion function the `transformMap`/`transformMapEntry` expansions call.
const MAP_INSERT: &str = "cel.@mapInsert";

/// The macros cel-go knows, by the name, argument count and style they are called with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Macro {
    Has,
    All,
    Exists,
    ExistsOne,
    Map,
    Filter,
    All2,
    Exists2,
    ExistsOne2,
    TransformList,
    TransformMap,
    TransformMapEntry,
    OptMap,
    OptFlatMap,
    SortBy,
    Bind,
}

/// The macro a call names, if any. kube-apiserver's environment (`cel.NewEnv`) has the standard
/// macros, which spell the one-variable form `exists_one` only (`existsOne` with two arguments
/// is an ordinary call there); the two-variable extension adds both spellings.
pub(crate) fn lookup(
    function: &str,
    argc: usize,
    target: Option<&Expr>,
    options: &ParseOptions,
) -> Option<Macro> {
    let Some(target) = target else {
        return (function == "has" && argc == 1).then_some(Macro::Has);
    };
    let two = options.two_variable_comprehensions;
    let found = match (function, argc) {
        ("all", 2) => Macro::All,
        ("exists", 2) => Macro::Exists,
        ("exists_one", 2) => Macro::ExistsOne,
        ("map", 2 | 3) => Macro::Map,
        ("filter", 2) => Macro::Filter,
        ("all", 3) if two => Macro::All2,
        ("exists", 3) if two => Macro::Exists2,
        ("existsOne" | "exists_one", 3) if two => Macro::ExistsOne2,
        ("transformList", 3 | 4) if two => Macro::TransformList,
        ("transformMap", 3 | 4) if two => Macro::TransformMap,
        ("transformMapEntry", 3 | 4) if two => Macro::TransformMapEntry,
        ("optMap", 2) if options.optional_syntax => Macro::OptMap,
        ("optFlatMap", 2) if options.optional_syntax => Macro::OptFlatMap,
        ("sortBy", 2) if options.sort_by_macro => Macro::SortBy,
        // cel-go's expander declines (the call stays a call) unless the receiver is `cel`.
        ("bind", 3)
            if options.bind_macro
                && matches!(&target.kind, ExprKind::Ident(name) if &**name == "cel") =>
        {
            Macro::Bind
        }
        _ => return None,
    };
    Some(found)
}

/// Why a macro's arguments were refused: the message and where (cel-go's wording).
pub(crate) struct MacroError {
    pub span: Span,
    pub message: String,
}

/// Builds expansion nodes with fresh ids, all placed at the macro call.
pub(crate) struct Factory<'a> {
    pub next_id: &'a mut ExprId,
    /// The call's position: its start, empty (cel-go gives macro nodes the call's location).
    pub at: Span,
}

impl Factory<'_> {
    fn id(&mut self) -> ExprId {
        let id = *self.next_id;
        *self.next_id += 1;
        id
    }

    fn node(&mut self, kind: ExprKind) -> Expr {
        let id = self.id();
        Expr {
            id,
            span: self.at,
            kind,
        }
    }

    fn literal(&mut self, value: Literal) -> Expr {
        self.node(ExprKind::Literal(value))
    }

    fn ident(&mut self, name: &str) -> Expr {
        self.node(ExprKind::Ident(name.into()))
    }

    fn accu(&mut self) -> Expr {
        self.ident(ACCUMULATOR)
    }

    fn call(&mut self, function: &str, args: Vec<Expr>) -> Expr {
        self.node(ExprKind::Call {
            target: None,
            function: function.into(),
            args,
        })
    }

    fn member_call(&mut self, function: &str, target: Expr, args: Vec<Expr>) -> Expr {
        self.node(ExprKind::Call {
            target: Some(Box::new(target)),
            function: function.into(),
            args,
        })
    }

    fn list(&mut self, elements: Vec<Expr>) -> Expr {
        self.node(ExprKind::List {
            elements,
            optional_indices: Vec::new(),
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn fold(
        &mut self,
        iter_range: Expr,
        iter_var: &str,
        iter_var2: Option<&str>,
        accu_var: &str,
        accu_init: Expr,
        loop_condition: Expr,
        loop_step: Expr,
        result: Expr,
    ) -> Expr {
        self.node(ExprKind::Comprehension(Box::new(Comprehension {
            iter_var: iter_var.into(),
            iter_var2: iter_var2.map(Arc::from),
            iter_range,
            accu_var: accu_var.into(),
            accu_init,
            loop_condition,
            loop_step,
            result,
        })))
    }

    /// A copy of `expr` with fresh ids (cel-go's `ExprHelper.Copy`): each node keeps its
    /// position; map entries and struct fields take the macro's. Recursion is bounded by the
    /// parser's depth limits.
    fn copy(&mut self, expr: &Expr) -> Expr {
        let id = self.id();
        let kind = match &expr.kind {
            ExprKind::Literal(value) => ExprKind::Literal(value.clone()),
            ExprKind::Ident(name) => ExprKind::Ident(name.clone()),
            ExprKind::Select {
                operand,
                field,
                test,
            } => ExprKind::Select {
                operand: Box::new(self.copy(operand)),
                field: field.clone(),
                test: *test,
            },
            ExprKind::Call {
                target,
                function,
                args,
            } => {
                // cel-go copies the arguments before the receiver.
                let args = args.iter().map(|arg| self.copy(arg)).collect();
                let target = target.as_ref().map(|target| Box::new(self.copy(target)));
                ExprKind::Call {
                    target,
                    function: function.clone(),
                    args,
                }
            }
            ExprKind::List {
                elements,
                optional_indices,
            } => ExprKind::List {
                elements: elements.iter().map(|element| self.copy(element)).collect(),
                optional_indices: optional_indices.clone(),
            },
            ExprKind::Map { entries } => ExprKind::Map {
                entries: entries
                    .iter()
                    .map(|entry| {
                        let id = self.id();
                        MapEntry {
                            id,
                            key: self.copy(&entry.key),
                            value: self.copy(&entry.value),
                            optional: entry.optional,
                        }
                    })
                    .collect(),
            },
            ExprKind::Struct { type_name, fields } => ExprKind::Struct {
                type_name: type_name.clone(),
                fields: fields
                    .iter()
                    .map(|field| {
                        let id = self.id();
                        FieldInit {
                            id,
                            name: field.name.clone(),
                            value: self.copy(&field.value),
                            optional: field.optional,
                        }
                    })
                    .collect(),
            },
            ExprKind::Comprehension(fold) => {
                let iter_range = self.copy(&fold.iter_range);
                let accu_init = self.copy(&fold.accu_init);
                let loop_condition = self.copy(&fold.loop_condition);
                let loop_step = self.copy(&fold.loop_step);
                let result = self.copy(&fold.result);
                ExprKind::Comprehension(Box::new(Comprehension {
                    iter_var: fold.iter_var.clone(),
                    iter_var2: fold.iter_var2.clone(),
                    iter_range,
                    accu_var: fold.accu_var.clone(),
                    accu_init,
                    loop_condition,
                    loop_step,
                    result,
                }))
            }
        };
        Expr {
            id,
            span: expr.span,
            kind,
        }
    }
}

fn error(at: &Expr, message: impl Into<String>) -> MacroError {
    MacroError {
        span: at.span,
        message: message.into(),
    }
}

fn simple_name(expr: &Expr) -> Option<Arc<str>> {
    match &expr.kind {
        ExprKind::Ident(name) => Some(name.clone()),
        _ => None,
    }
}

fn is_accumulator(name: &str) -> bool {
    name == ACCUMULATOR || name == LEGACY_ACCUMULATOR
}

/// The one iteration variable of `all`, `exists`, `exists_one`, `map` and `filter`.
fn iter_var(arg: &Expr, not_simple: &str) -> Result<Arc<str>, MacroError> {
    let name = simple_name(arg).ok_or_else(|| error(arg, not_simple))?;
    if is_accumulator(&name) {
        return Err(error(
            arg,
            "iteration variable overwrites accumulator variable",
        ));
    }
    Ok(name)
}

/// The two iteration variables of the two-variable comprehensions.
fn iter_vars(first: &Expr, second: &Expr) -> Result<(Arc<str>, Arc<str>), MacroError> {
    let name1 = simple_name(first).ok_or_else(|| error(first, "argument must be a simple name"))?;
    let name2 =
        simple_name(second).ok_or_else(|| error(second, "argument must be a simple name"))?;
    if name1 == name2 {
        return Err(error(second, format!("duplicate variable name: {name1}")));
    }
    if is_accumulator(&name1) {
        return Err(error(
            first,
            "iteration variable overwrites accumulator variable",
        ));
    }
    if is_accumulator(&name2) {
        return Err(error(
            second,
            "iteration variable overwrites accumulator variable",
        ));
    }
    Ok((name1, name2))
}

/// Expands `macro_` applied to `target` and `args` (as [`lookup`] matched them).
pub(crate) fn expand(
    factory: &mut Factory<'_>,
    macro_: Macro,
    target: Option<Expr>,
    args: Vec<Expr>,
) -> Result<Expr, MacroError> {
    let mut args = args.into_iter();
    // `lookup` matched the argument count, so running out is a bug, reported rather than panicked.
    let mut arg = || {
        args.next().ok_or_else(|| MacroError {
            span: Span::default(),
            message: "wrong number of macro arguments".to_owned(),
        })
    };
    match macro_ {
        Macro::Has => {
            let arg = arg()?;
            match arg.kind {
                ExprKind::Select { operand, field, .. } => Ok(factory.node(ExprKind::Select {
                    operand,
                    field,
                    test: true,
                })),
                _ => Err(error(&arg, "invalid argument to has() macro")),
            }
        }
        Macro::All | Macro::Exists | Macro::ExistsOne => {
            let target = receiver(target)?;
            let var = arg()?;
            let predicate = arg()?;
            let name = iter_var(&var, "argument must be a simple name")?;
            Ok(quantifier(factory, macro_, target, &name, None, predicate))
        }
        Macro::All2 | Macro::Exists2 | Macro::ExistsOne2 => {
            let target = receiver(target)?;
            let (var1, var2) = (arg()?, arg()?);
            let predicate = arg()?;
            let (name1, name2) = iter_vars(&var1, &var2)?;
            Ok(quantifier(
                factory,
                macro_,
                target,
                &name1,
                Some(&name2),
                predicate,
            ))
        }
        Macro::Map | Macro::Filter => {
            let target = receiver(target)?;
            let var = arg()?;
            let rest: Vec<Expr> = std::iter::from_fn(|| arg().ok()).collect();
            if macro_ == Macro::Filter {
                let name = iter_var(&var, "argument is not an identifier")?;
                let predicate = rest
                    .into_iter()
                    .next()
                    .ok_or_else(|| error(&var, "missing predicate"))?;
                return Ok(filter(factory, target, &name, var, predicate));
            }
            make_map(factory, target, var, rest)
        }
        Macro::TransformList | Macro::TransformMap | Macro::TransformMapEntry => {
            let target = receiver(target)?;
            let (var1, var2) = (arg()?, arg()?);
            let (name1, name2) = iter_vars(&var1, &var2)?;
            let mut rest: Vec<Expr> = std::iter::from_fn(|| arg().ok()).collect();
            let transform = rest
                .pop()
                .ok_or_else(|| error(&var2, "missing transform"))?;
            let filter = rest.pop();
            Ok(transform_fold(
                factory, macro_, target, &name1, &name2, filter, transform,
            ))
        }
        Macro::OptMap | Macro::OptFlatMap => {
            let target = receiver(target)?;
            let var = arg()?;
            let body = arg()?;
            let Some(name) = simple_name(&var) else {
                let which = if macro_ == Macro::OptMap {
                    "optMap"
                } else {
                    "optFlatMap"
                };
                return Err(error(
                    &var,
                    format!("{which}() variable name must be a simple identifier"),
                ));
            };
            Ok(opt_map(
                factory,
                macro_ == Macro::OptMap,
                target,
                &name,
                body,
            ))
        }
        Macro::SortBy => {
            let target = receiver(target)?;
            let var = arg()?;
            let key = arg()?;
            sort_by(factory, target, var, key)
        }
        Macro::Bind => {
            let var = arg()?;
            let init = arg()?;
            let body = arg()?;
            let Some(name) = simple_name(&var) else {
                return Err(error(
                    &var,
                    "cel.bind() variable names must be simple identifiers",
                ));
            };
            let range = factory.list(Vec::new());
            let condition = factory.literal(Literal::Bool(false));
            let step = factory.ident(&name);
            Ok(factory.fold(
                range,
                UNUSED_ITER_VAR,
                None,
                &name,
                init,
                condition,
                step,
                body,
            ))
        }
    }
}

/// [`lookup`] matches receiver macros only with a receiver; this never fails in practice.
fn receiver(target: Option<Expr>) -> Result<Expr, MacroError> {
    target.ok_or_else(|| MacroError {
        span: Span::default(),
        message: "macro needs a receiver".to_owned(),
    })
}

/// `all`, `exists`, `exists_one` (one or two variables), as `makeQuantifier` builds them.
fn quantifier(
    f: &mut Factory<'_>,
    macro_: Macro,
    target: Expr,
    var: &str,
    var2: Option<&str>,
    predicate: Expr,
) -> Expr {
    let (init, condition, step, result) = match macro_ {
        Macro::All | Macro::All2 => {
            let init = f.literal(Literal::Bool(true));
            let accu = f.accu();
            let condition = f.call(operators::NOT_STRICTLY_FALSE, vec![accu]);
            let accu = f.accu();
            let step = f.call(operators::LOGICAL_AND, vec![accu, predicate]);
            let result = f.accu();
            (init, condition, step, result)
        }
        Macro::Exists | Macro::Exists2 => {
            let init = f.literal(Literal::Bool(false));
            let accu = f.accu();
            let not = f.call(operators::LOGICAL_NOT, vec![accu]);
            let condition = f.call(operators::NOT_STRICTLY_FALSE, vec![not]);
            let accu = f.accu();
            let step = f.call(operators::LOGICAL_OR, vec![accu, predicate]);
            let result = f.accu();
            (init, condition, step, result)
        }
        _ => {
            let init = f.literal(Literal::Int(0));
            let condition = f.literal(Literal::Bool(true));
            let accu = f.accu();
            let one = f.literal(Literal::Int(1));
            let add = f.call(operators::ADD, vec![accu, one]);
            let accu = f.accu();
            let step = f.call(operators::CONDITIONAL, vec![predicate, add, accu]);
            let accu = f.accu();
            let one = f.literal(Literal::Int(1));
            let result = f.call(operators::EQUALS, vec![accu, one]);
            (init, condition, step, result)
        }
    };
    f.fold(
        target,
        var,
        var2,
        ACCUMULATOR,
        init,
        condition,
        step,
        result,
    )
}

/// `map(v, t)` and `map(v, p, t)` (`MakeMap`).
fn make_map(
    f: &mut Factory<'_>,
    target: Expr,
    var: Expr,
    mut rest: Vec<Expr>,
) -> Result<Expr, MacroError> {
    let name = iter_var(&var, "argument is not an identifier")?;
    let transform = rest.pop().ok_or_else(|| error(&var, "missing transform"))?;
    let filter = rest.pop();
    let init = f.list(Vec::new());
    let condition = f.literal(Literal::Bool(true));
    let accu = f.accu();
    let element = f.list(vec![transform]);
    let mut step = f.call(operators::ADD, vec![accu, element]);
    if let Some(filter) = filter {
        let accu = f.accu();
        step = f.call(operators::CONDITIONAL, vec![filter, step, accu]);
    }
    let result = f.accu();
    Ok(f.fold(
        target,
        &name,
        None,
        ACCUMULATOR,
        init,
        condition,
        step,
        result,
    ))
}

/// `filter(v, p)` (`MakeFilter`): the element list reuses the variable's own node.
fn filter(f: &mut Factory<'_>, target: Expr, name: &str, var: Expr, predicate: Expr) -> Expr {
    let init = f.list(Vec::new());
    let condition = f.literal(Literal::Bool(true));
    let accu = f.accu();
    let element = f.list(vec![var]);
    let add = f.call(operators::ADD, vec![accu, element]);
    let accu = f.accu();
    let step = f.call(operators::CONDITIONAL, vec![predicate, add, accu]);
    let result = f.accu();
    f.fold(
        target,
        name,
        None,
        ACCUMULATOR,
        init,
        condition,
        step,
        result,
    )
}

/// `transformList`, `transformMap`, `transformMapEntry` (`ext/comprehensions.go`).
fn transform_fold(
    f: &mut Factory<'_>,
    macro_: Macro,
    target: Expr,
    var1: &str,
    var2: &str,
    filter: Option<Expr>,
    transform: Expr,
) -> Expr {
    let mut step = match macro_ {
        Macro::TransformList => {
            let accu = f.accu();
            let element = f.list(vec![transform]);
            f.call(operators::ADD, vec![accu, element])
        }
        Macro::TransformMap => {
            let accu = f.accu();
            let key = f.ident(var1);
            f.call(MAP_INSERT, vec![accu, key, transform])
        }
        _ => {
            let accu = f.accu();
            f.call(MAP_INSERT, vec![accu, transform])
        }
    };
    if let Some(filter) = filter {
        let accu = f.accu();
        step = f.call(operators::CONDITIONAL, vec![filter, step, accu]);
    }
    let init = if macro_ == Macro::TransformList {
        f.list(Vec::new())
    } else {
        f.node(ExprKind::Map {
            entries: Vec::new(),
        })
    };
    let condition = f.literal(Literal::Bool(true));
    let result = f.accu();
    f.fold(
        target,
        var1,
        Some(var2),
        ACCUMULATOR,
        init,
        condition,
        step,
        result,
    )
}

/// `optMap` and `optFlatMap` (cel-go's optional library): `target.hasValue() ?
/// [optional.of](bind name = target.value() in body) : optional.none()`.
fn opt_map(f: &mut Factory<'_>, wrap: bool, target: Expr, name: &str, body: Expr) -> Expr {
    let copy_source = target.clone();
    let has_value = f.member_call("hasValue", target, Vec::new());
    let range = f.list(Vec::new());
    let copy = f.copy(&copy_source);
    let value = f.member_call("value", copy, Vec::new());
    let condition = f.literal(Literal::Bool(false));
    let step = f.ident(name);
    let mut present = f.fold(
        range,
        UNUSED_ITER_VAR,
        None,
        name,
        value,
        condition,
        step,
        body,
    );
    if wrap {
        present = f.call("optional.of", vec![present]);
    }
    let none = f.call("optional.none", Vec::new());
    f.call(operators::CONDITIONAL, vec![has_value, present, none])
}

/// `sortBy(e, key)` (`ext/lists.go`): binds the input once, then sorts it by the keys the
/// `map` expansion computes.
fn sort_by(f: &mut Factory<'_>, target: Expr, var: Expr, key: Expr) -> Result<Expr, MacroError> {
    let input = f.ident(SORT_BY_INPUT);
    if !matches!(
        target.kind,
        ExprKind::List { .. }
            | ExprKind::Select { .. }
            | ExprKind::Ident(_)
            | ExprKind::Comprehension(_)
            | ExprKind::Call { .. }
    ) {
        return Err(error(
            &target,
            "sortBy can only be applied to a list, identifier, comprehension, call or select expression",
        ));
    }
    let range = f.copy(&input);
    let keys = make_map(f, range, var, vec![key])?;
    let receiver = f.copy(&input);
    let sorted = f.member_call("@sortByAssociatedKeys", receiver, vec![keys]);
    let empty = f.list(Vec::new());
    let condition = f.literal(Literal::Bool(false));
    Ok(f.fold(
        empty,
        UNUSED_ITER_VAR,
        None,
        SORT_BY_INPUT,
        target,
        condition,
        input,
        sorted,
    ))
}
