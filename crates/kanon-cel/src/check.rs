//! The type checker: infers every expression's type from the declarations, as cel-go's checker
//! does, and reports what it cannot type (an undeclared name, a call no overload takes, a field
//! a type does not have) with the place and cel-go's wording. What kube-apiserver refuses
//! beyond that (invalid literals, a list mixing types) its validators find, in `validate`.
//!
//! Generic overloads (`size(list(A))`) are instantiated with fresh type variables and unified
//! with the arguments; `dyn` unifies with everything, so expressions over untyped JSON are
//! checked only as far as their types are known.

use std::collections::HashMap;
use std::sync::Arc;

use crate::ast::{Comprehension, Expr, ExprKind, Literal, operators};
use crate::env::Env;
pub use crate::env::ObjectTypes;
use crate::error::Issue;
use crate::function::Overload;
use crate::types::Type;

/// The types the checker found: the whole expression's, and each node's by id.
#[derive(Debug, Clone)]
pub struct Checked {
    pub result: Type,
    pub types: HashMap<u32, Type>,
    /// The calls whose overload the checker could not narrow to one (an argument of type
    /// `dyn` fits several): cel-go then dispatches at run time and meters the call by its
    /// function's name only.
    pub ambiguous: std::collections::HashSet<u32>,
    /// The overloads each call resolved to, by the call's id: cel-go binds only these, so a
    /// value whose run-time type is none of theirs fails the call (`string(l.reverse()[0])`
    /// over a JSON list of numbers resolves to `string(string)`, as the element's type is
    /// free, and fails on an `int`).
    pub overloads: HashMap<u32, Vec<Arc<str>>>,
}

pub(crate) fn check(env: &Env, expr: &Expr) -> Result<Checked, Vec<Issue>> {
    let mut checker = Checker {
        env,
        scopes: Vec::new(),
        substitution: HashMap::new(),
        fresh: 0,
        issues: Vec::new(),
        types: HashMap::new(),
        ambiguous: std::collections::HashSet::new(),
        overloads: HashMap::new(),
    };
    let result = checker.check(expr);
    if !checker.issues.is_empty() {
        // cel-go lists its errors in the order of the source.
        checker.issues.sort_by_key(|issue| issue.span.start);
        return Err(checker.issues);
    }
    let result = unbound_to_dyn(checker.resolve(&result));
    let types = std::mem::take(&mut checker.types)
        .into_iter()
        .map(|(id, kind)| (id, unbound_to_dyn(checker.resolve(&kind))))
        .collect();
    Ok(Checked {
        result,
        types,
        ambiguous: std::mem::take(&mut checker.ambiguous),
        overloads: std::mem::take(&mut checker.overloads),
    })
}

struct Checker<'e> {
    env: &'e Env,
    scopes: Vec<(Arc<str>, Type)>,
    substitution: HashMap<Arc<str>, Type>,
    fresh: u32,
    issues: Vec<Issue>,
    types: HashMap<u32, Type>,
    ambiguous: std::collections::HashSet<u32>,
    overloads: HashMap<u32, Vec<Arc<str>>>,
}

impl Checker<'_> {
    fn error(&mut self, expr: &Expr, message: String) -> Type {
        self.issues.push(Issue {
            span: expr.span,
            message,
        });
        Type::Error
    }

    fn fresh_variable(&mut self) -> Type {
        self.fresh += 1;
        Type::Param(Arc::from(format!("_var{}", self.fresh)))
    }

    fn check(&mut self, expr: &Expr) -> Type {
        let kind = self.infer(expr);
        self.types.insert(expr.id, kind.clone());
        kind
    }

    fn infer(&mut self, expr: &Expr) -> Type {
        match &expr.kind {
            ExprKind::Literal(literal) => match literal {
                Literal::Null => Type::Null,
                Literal::Bool(_) => Type::Bool,
                Literal::Int(_) => Type::Int,
                Literal::Uint(_) => Type::Uint,
                Literal::Double(_) => Type::Double,
                Literal::String(_) => Type::String,
                Literal::Bytes(_) => Type::Bytes,
            },
            ExprKind::Ident(name) => match self.name_type(name) {
                Some(kind) => kind,
                None => self.error(
                    expr,
                    format!("undeclared reference to '{name}' (in container '')"),
                ),
            },
            ExprKind::Select {
                operand,
                field,
                test,
            } => {
                if !*test
                    && let Some(name) = expr.qualified_name()
                    && let Some(kind) = self.name_type(&name)
                {
                    return kind;
                }
                let operand_type = self.check(operand);
                let operand_type = self.resolve(&operand_type);
                let kind = self.field_type(expr, &operand_type, field);
                if *test { Type::Bool } else { kind }
            }
            ExprKind::Call {
                target,
                function,
                args,
            } => self.call(expr, target.as_deref(), function, args),
            ExprKind::List {
                elements,
                optional_indices,
            } => {
                let mut element_type: Option<Type> = None;
                for (index, element) in elements.iter().enumerate() {
                    let mut kind = self.check(element);
                    if optional_indices.contains(&(index as u32)) {
                        kind = match self.resolve(&kind) {
                            Type::Optional(inner) => (*inner).clone(),
                            Type::Dyn | Type::Error => Type::Dyn,
                            other => {
                                self.error(
                                    element,
                                    format!(
                                        "expected type 'optional_type({other})' but found '{other}'"
                                    ),
                                );
                                Type::Error
                            }
                        };
                    }
                    element_type = Some(self.join(element_type, kind));
                }
                Type::list(element_type.unwrap_or_else(|| self.fresh_variable()))
            }
            ExprKind::Map { entries } => {
                let mut key_type: Option<Type> = None;
                let mut value_type: Option<Type> = None;
                for entry in entries {
                    let key = self.check(&entry.key);
                    match self.resolve(&key) {
                        Type::Bool
                        | Type::Int
                        | Type::Uint
                        | Type::String
                        | Type::Dyn
                        | Type::Error
                        | Type::Param(_) => {}
                        // cel-go's checker takes any key type (kube-apiserver's maps do).
                        _ if self.env.repeated_keys => {}
                        other => {
                            self.error(&entry.key, format!("unsupported map key type: {other}"));
                        }
                    }
                    key_type = Some(self.join(key_type, key));
                    let mut value = self.check(&entry.value);
                    if entry.optional {
                        value = match self.resolve(&value) {
                            Type::Optional(inner) => (*inner).clone(),
                            Type::Dyn | Type::Error | Type::Param(_) => Type::Dyn,
                            other => self.error(
                                &entry.value,
                                format!(
                                    "expected type 'optional_type({other})' but found '{other}'"
                                ),
                            ),
                        };
                    }
                    value_type = Some(self.join(value_type, value));
                }
                let key = key_type.unwrap_or_else(|| self.fresh_variable());
                let value = value_type.unwrap_or_else(|| self.fresh_variable());
                Type::map(key, value)
            }
            ExprKind::Struct { type_name, fields } => {
                let name: Arc<str> = Arc::from(type_name.trim_start_matches('.'));
                if !self.env.is_object(&name) {
                    for field in fields {
                        self.check(&field.value);
                    }
                    if self.env.type_names.contains(&name) {
                        return self.error(expr, format!("'{name}' is not a message type"));
                    }
                    return self.error(
                        expr,
                        format!("undeclared reference to '{name}' (in container '')"),
                    );
                }
                let object = Type::Object(name);
                for field in fields {
                    let value = self.check(&field.value);
                    let declared = self.field_type(&field.value, &object, &field.name);
                    let value = if field.optional {
                        match self.resolve(&value) {
                            Type::Optional(inner) => (*inner).clone(),
                            _ => Type::Dyn,
                        }
                    } else {
                        value
                    };
                    if !self.assignable(&declared, &value) {
                        let (declared, value) = (self.resolve(&declared), self.resolve(&value));
                        self.error(
                            &field.value,
                            format!("expected type of field '{}' is '{declared}' but provided type is '{value}'", field.name),
                        );
                    }
                }
                object
            }
            ExprKind::Comprehension(comprehension) => self.comprehension(comprehension),
        }
    }

    /// The element type of a list literal so far, joined with one more element's: mixed types
    /// make it `dyn` (kube-apiserver then refuses the literal: see `validate`).
    fn join(&mut self, so_far: Option<Type>, next: Type) -> Type {
        let Some(so_far) = so_far else {
            return next;
        };
        if self.assignable(&so_far, &next) {
            return most_general(&so_far, &next);
        }
        Type::Dyn
    }

    fn name_type(&self, name: &str) -> Option<Type> {
        let name = name.strip_prefix('.').unwrap_or(name);
        if let Some((_, kind)) = self.scopes.iter().rev().find(|(local, _)| &**local == name) {
            return Some(kind.clone());
        }
        let root = name.split('.').next().unwrap_or(name);
        if self.scopes.iter().any(|(local, _)| &**local == root) {
            return None;
        }
        if let Some((_, kind)) = self
            .env
            .variables
            .iter()
            .find(|(known, _)| &**known == name)
        {
            return Some(kind.clone());
        }
        let type_value = match Type::denoted(name) {
            Some(denoted) => denoted,
            None if self.env.names_type(name) => Type::Object(Arc::from(name)),
            None => return None,
        };
        Some(Type::type_of(type_value))
    }

    fn field_type(&mut self, at: &Expr, operand: &Type, field: &str) -> Type {
        match operand {
            Type::Dyn | Type::Error => Type::Dyn,
            // cel-go binds the variable to `dyn` so that nothing later binds it otherwise.
            Type::Param(_) => {
                self.assignable(&Type::Dyn, operand);
                Type::Dyn
            }
            Type::Map(key, value) => {
                if matches!(self.resolve(key), Type::String | Type::Dyn | Type::Param(_)) {
                    (**value).clone()
                } else {
                    self.error(
                        at,
                        format!("type '{operand}' does not support field selection"),
                    )
                }
            }
            Type::Optional(inner) => {
                let inner = self.resolve(inner);
                Type::optional(self.field_type(at, &inner, field))
            }
            Type::Object(name) => match self
                .env
                .object_types
                .iter()
                .find_map(|types| types.field(name, field))
            {
                None => Type::Dyn,
                Some(Some(kind)) => kind,
                Some(None) => self.error(at, format!("undefined field '{field}'")),
            },
            // cel-go reports the error but types the selection `dyn`, so that checking goes on
            // without an error type that later overloads would absorb differently.
            other => {
                self.error(
                    at,
                    format!("type '{other}' does not support field selection"),
                );
                Type::Dyn
            }
        }
    }

    fn comprehension(&mut self, comprehension: &Comprehension) -> Type {
        let range = self.check(&comprehension.iter_range);
        let range = self.resolve(&range);
        let (first, second) = match (&range, comprehension.iter_var2.is_some()) {
            (Type::List(element), false) => ((**element).clone(), None),
            (Type::List(element), true) => (Type::Int, Some((**element).clone())),
            (Type::Map(key, _), false) => ((**key).clone(), None),
            (Type::Map(key, value), true) => ((**key).clone(), Some((**value).clone())),
            (Type::Dyn | Type::Error | Type::Param(_), two) => {
                (Type::Dyn, two.then_some(Type::Dyn))
            }
            (other, _) => {
                let message = format!(
                    "expression of type '{other}' cannot be range of a comprehension (must be list, map, or dynamic)"
                );
                self.error(&comprehension.iter_range, message);
                (
                    Type::Dyn,
                    comprehension.iter_var2.as_ref().map(|_| Type::Dyn),
                )
            }
        };
        let accumulator = self.check(&comprehension.accu_init);
        let depth = self.scopes.len();
        self.scopes
            .push((comprehension.accu_var.clone(), accumulator.clone()));
        self.scopes.push((comprehension.iter_var.clone(), first));
        if let (Some(name), Some(kind)) = (&comprehension.iter_var2, second) {
            self.scopes.push((name.clone(), kind));
        }
        let condition = self.check(&comprehension.loop_condition);
        if !self.assignable(&Type::Bool, &condition) {
            let found = self.resolve(&condition);
            self.error(
                &comprehension.loop_condition,
                format!("expected type 'bool' but found '{found}'"),
            );
        }
        let step = self.check(&comprehension.loop_step);
        if !self.assignable(&accumulator, &step) {
            let (expected, found) = (self.resolve(&accumulator), self.resolve(&step));
            self.error(
                &comprehension.loop_step,
                format!("expected type '{expected}' but found '{found}'"),
            );
        }
        self.scopes.truncate(depth + 1);
        let result = self.check(&comprehension.result);
        self.scopes.truncate(depth);
        // cel-go gives the comprehension its result's type with the variables bound so far
        // substituted: what comes after cannot widen it (`[[1].map(x, x), dyn(l).map(x, x)]`
        // joins list(int) with list(dyn), which kube-apiserver's literal check refuses).
        self.resolve(&result)
    }

    fn call(&mut self, expr: &Expr, target: Option<&Expr>, function: &str, args: &[Expr]) -> Type {
        // `ns.f(x)` naming a global function.
        if let Some(target) = target
            && let Some(namespace) = target.qualified_name()
        {
            let qualified = format!("{}.{function}", namespace.trim_start_matches('.'));
            let root = namespace.split('.').next().unwrap_or(&namespace);
            let shadowed = self.scopes.iter().any(|(local, _)| &**local == root)
                || self.env.variables.iter().any(|(known, _)| &**known == root);
            if !shadowed && !self.env.overloads(&qualified).is_empty() {
                let arg_types: Vec<Type> = args.iter().map(|arg| self.check(arg)).collect();
                return self.resolve_overload(expr, &qualified, false, &arg_types);
            }
        }
        match (function, target, args.len()) {
            (operators::LOGICAL_AND | operators::LOGICAL_OR, None, 2) => {
                for arg in args {
                    let kind = self.check(arg);
                    if !self.assignable(&Type::Bool, &kind) {
                        let found = self.resolve(&kind);
                        self.error(arg, format!("expected type 'bool' but found '{found}'"));
                    }
                }
                return Type::Bool;
            }
            (operators::NOT_STRICTLY_FALSE, None, 1) => {
                self.check(&args[0]);
                return Type::Bool;
            }
            (operators::OPT_SELECT, None, 2) => {
                let operand = self.check(&args[0]);
                let operand = self.resolve(&operand);
                let ExprKind::Literal(Literal::String(field)) = &args[1].kind else {
                    return self.error(
                        expr,
                        "the field of an optional select must be a name".to_owned(),
                    );
                };
                let inner = match operand {
                    Type::Optional(inner) => self.resolve(&inner),
                    other => other,
                };
                let kind = self.field_type(expr, &inner, field);
                return match kind {
                    Type::Optional(_) => kind,
                    other => Type::optional(other),
                };
            }
            _ => {}
        }
        let mut arg_types = Vec::with_capacity(args.len() + 1);
        if let Some(target) = target {
            arg_types.push(self.check(target));
        }
        arg_types.extend(args.iter().map(|arg| self.check(arg)));
        self.resolve_overload(expr, function, target.is_some(), &arg_types)
    }

    fn resolve_overload(
        &mut self,
        expr: &Expr,
        function: &str,
        method: bool,
        args: &[Type],
    ) -> Type {
        let candidates: Vec<Arc<Overload>> = self
            .env
            .overloads(function)
            .iter()
            .filter(|overload| {
                overload.signature.receiver == method
                    && overload.signature.params.len() == args.len()
            })
            .cloned()
            .collect();
        if self.env.overloads(function).is_empty() {
            return self.error(
                expr,
                format!("undeclared reference to '{function}' (in container '')"),
            );
        }
        let mut result: Option<Type> = None;
        let mut matched = 0;
        let mut resolved = Vec::new();
        for overload in &candidates {
            // Instantiate the overload's type parameters afresh for this call.
            let mut renamed: HashMap<Arc<str>, Type> = HashMap::new();
            let params: Vec<Type> = overload
                .signature
                .params
                .iter()
                .map(|param| self.instantiate(param, &mut renamed))
                .collect();
            let result_type = self.instantiate(&overload.signature.result, &mut renamed);
            let saved = self.substitution.clone();
            if params
                .iter()
                .zip(args)
                .all(|(param, arg)| self.assignable(param, arg))
            {
                matched += 1;
                resolved.push(overload.id.clone());
                let found = self.resolve(&result_type);
                result = Some(match result {
                    None => found,
                    Some(previous) if previous == found => previous,
                    // Several overloads fit (a `dyn` argument): the result is known only at run time.
                    Some(_) => {
                        self.substitution = saved;
                        Type::Dyn
                    }
                });
            } else {
                self.substitution = saved;
            }
        }
        if matched > 1 {
            self.ambiguous.insert(expr.id);
        }
        if !resolved.is_empty() {
            self.overloads.insert(expr.id, resolved);
        }
        match result {
            Some(kind) => kind,
            None => {
                let resolved: Vec<String> = args
                    .iter()
                    .map(|arg| unbound_to_dyn(self.resolve(arg)).to_string())
                    .collect();
                let shown = if method {
                    format!("{}.({})", resolved[0], resolved[1..].join(", "))
                } else {
                    format!("({})", resolved.join(", "))
                };
                self.error(
                    expr,
                    format!("found no matching overload for '{function}' applied to '{shown}'"),
                )
            }
        }
    }

    fn instantiate(&mut self, kind: &Type, renamed: &mut HashMap<Arc<str>, Type>) -> Type {
        match kind {
            Type::Param(name) => {
                if let Some(fresh) = renamed.get(name) {
                    return fresh.clone();
                }
                let fresh = self.fresh_variable();
                renamed.insert(name.clone(), fresh.clone());
                fresh
            }
            Type::List(element) => Type::list(self.instantiate(element, renamed)),
            Type::Map(key, value) => {
                let key = self.instantiate(key, renamed);
                Type::map(key, self.instantiate(value, renamed))
            }
            Type::Optional(inner) => Type::optional(self.instantiate(inner, renamed)),
            Type::Type(Some(inner)) => Type::type_of(self.instantiate(inner, renamed)),
            other => other.clone(),
        }
    }

    /// Follows type variables to what they are bound to, all the way down.
    fn resolve(&self, kind: &Type) -> Type {
        match kind {
            Type::Param(name) => match self.substitution.get(name) {
                Some(bound) => self.resolve(bound),
                None => kind.clone(),
            },
            Type::List(element) => Type::list(self.resolve(element)),
            Type::Map(key, value) => Type::map(self.resolve(key), self.resolve(value)),
            Type::Optional(inner) => Type::optional(self.resolve(inner)),
            Type::Type(Some(inner)) => Type::type_of(self.resolve(inner)),
            other => other.clone(),
        }
    }

    /// Can a value of type `source` be used where `target` is expected? Binds type variables as
    /// cel-go's checker does (`internalIsAssignable`): a variable already bound keeps the more
    /// general of its binding and the new type, so `true ? 0 : dyn` is `dyn`, and a variable
    /// matched against `dyn` stays free for what comes next (`dyn[?'k'].orValue('')` is a
    /// `string`).
    fn assignable(&mut self, target: &Type, source: &Type) -> bool {
        if let Type::Param(name) = target {
            let (valid, bound) = self.substitute(name, source);
            if valid {
                return true;
            }
            if bound {
                return false;
            }
        }
        if let Type::Param(name) = source {
            return self.substitute(name, target).0;
        }
        match (target, source) {
            (Type::Dyn | Type::Error, _) | (_, Type::Dyn | Type::Error) => true,
            (Type::List(a), Type::List(b)) => self.assignable(a, b),
            (Type::Map(ka, va), Type::Map(kb, vb)) => {
                self.assignable(ka, kb) && self.assignable(va, vb)
            }
            (Type::Optional(a), Type::Optional(b)) => self.assignable(a, b),
            // Every type value is of type `type`: `type(1) == type(1u)` is well-typed (and false).
            (Type::Type(_), Type::Type(_)) => true,
            // Null fits object types and cel-go's google.protobuf.Duration and Timestamp (message
            // types), either way round.
            (Type::Object(_) | Type::Duration | Type::Timestamp, Type::Null)
            | (Type::Null, Type::Object(_) | Type::Duration | Type::Timestamp) => true,
            (a, b) => a == b,
        }
    }

    /// Whether `kind` may stand for the type variable `name` (cel-go's
    /// `isValidTypeSubstitution`), binding or widening it; and whether `name` was bound before.
    fn substitute(&mut self, name: &Arc<str>, kind: &Type) -> (bool, bool) {
        if let Type::Param(other) = kind
            && other == name
        {
            return (true, true);
        }
        if let Some(bound) = self.substitution.get(name).cloned() {
            if bound == *kind {
                return (true, true);
            }
            if self.assignable(&bound, kind) {
                let general = most_general(kind, &bound);
                if !occurs(name, &general, self) {
                    self.substitution.insert(name.clone(), general);
                }
                return (true, true);
            }
            return (false, true);
        }
        if !occurs(name, kind, self) {
            self.substitution.insert(name.clone(), kind.clone());
            return (true, false);
        }
        (false, false)
    }

    fn shallow(&self, kind: &Type) -> Type {
        let mut current = kind.clone();
        while let Type::Param(name) = &current {
            match self.substitution.get(name) {
                Some(bound) => current = bound.clone(),
                None => break,
            }
        }
        current
    }
}
/// A type variable nothing bound is `dyn` in the checked result, as cel-go reports it.
fn unbound_to_dyn(kind: Type) -> Type {
    match kind {
        Type::Param(_) => Type::Dyn,
        Type::List(element) => Type::list(unbound_to_dyn((*element).clone())),
        Type::Map(key, value) => Type::map(
            unbound_to_dyn((*key).clone()),
            unbound_to_dyn((*value).clone()),
        ),
        Type::Optional(inner) => Type::optional(unbound_to_dyn((*inner).clone())),
        Type::Type(Some(inner)) => Type::type_of(unbound_to_dyn((*inner).clone())),
        other => other,
    }
}

/// The more general of two types that fit each other (cel-go's `mostGeneral`): `first` unless
/// `second` is less specific.
fn most_general(first: &Type, second: &Type) -> Type {
    if equal_or_less_specific(first, second) {
        first.clone()
    } else {
        second.clone()
    }
}

/// cel-go's `isEqualOrLessSpecific`: `dyn` and type variables are less specific than anything.
fn equal_or_less_specific(first: &Type, second: &Type) -> bool {
    match (first, second) {
        (Type::Dyn | Type::Param(_), _) => true,
        (_, Type::Dyn | Type::Param(_)) => false,
        (Type::List(a), Type::List(b)) | (Type::Optional(a), Type::Optional(b)) => {
            equal_or_less_specific(a, b)
        }
        (Type::Map(ka, va), Type::Map(kb, vb)) => {
            equal_or_less_specific(ka, kb) && equal_or_less_specific(va, vb)
        }
        (Type::Type(_), Type::Type(_)) => true,
        (a, b) => a == b,
    }
}

fn occurs(name: &str, kind: &Type, checker: &Checker<'_>) -> bool {
    match checker.shallow(kind) {
        Type::Param(other) => &*other == name,
        Type::List(element) => occurs(name, &element, checker),
        Type::Map(key, value) => occurs(name, &key, checker) || occurs(name, &value, checker),
        Type::Optional(inner) => occurs(name, &inner, checker),
        Type::Type(Some(inner)) => occurs(name, &inner, checker),
        _ => false,
    }
}
