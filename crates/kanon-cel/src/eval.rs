//! Evaluating a program: the interpreter walks the plan over the variables' values, metered by
//! the budget. Costs follow cel-go's runtime cost tracker (kube-apiserver's meter): 1 per
//! identifier, select and index, nothing for constants, per overload for calls (1 unless the
//! overload says otherwise), 10/30/40 to build a list/map/object; `&&`, `||` and `?:` cost
//! nothing of their own.

use std::sync::Arc;

use smallvec::SmallVec;

use crate::ast::operators;
pub use crate::budget::Budget;
use crate::error::EvalError;
pub use crate::function::Ctx;
use crate::function::{dispatch_failure, no_overload};
pub use crate::program::Program;
use crate::program::{Attr, Call, Fold, MAP_INSERT, Node, QualKey, Root};
use crate::re2::RegexCache;
use crate::types::Type;
use crate::value::{
    Key, List, Map, Object, Value, format_double, go_text, go_type_name, json_get, map_insert_owned,
};

/// cel-go's constants for the cost of building values.
pub(crate) const LIST_CREATE_COST: u64 = 10;
pub(crate) const MAP_CREATE_COST: u64 = 30;
pub(crate) const STRUCT_CREATE_COST: u64 = 40;
/// How often a comprehension polls the interrupt, in iterations (kube-apiserver's setting).
const INTERRUPT_EVERY: u32 = 100;

/// Is this error the end of the whole evaluation (a bound reached), not a value that `&&`,
/// `||` or a comprehension may absorb?
fn cancels(error: &EvalError) -> bool {
    matches!(
        error,
        EvalError::CostLimitExceeded { .. } | EvalError::Interrupted | EvalError::Aborted(_)
    )
}

/// Whether cel-go's cost tracker for the overload `id` crashes when the argument at `position`
/// failed: the lists extension's trackers take it as a list (`distinct`, `sort`, and
/// `@sortByAssociatedKeys`'s keys) or an int (`flatten`'s depth) without looking.
fn tracker_crashes(id: &str, position: usize) -> bool {
    match position {
        0 => id == "list_distinct" || (id.starts_with("list_") && id.ends_with("_sort")),
        1 => {
            id == "list_flatten_int"
                || (id.starts_with("list_") && id.ends_with("_sortByAssociatedKeys"))
        }
        _ => false,
    }
}

type Outcome<'a> = Result<Value<'a>, EvalError>;

impl Program {
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
            locals: SmallVec::new(),
            ctx: Ctx {
                budget,
                regexes: &self.regexes,
            },
        };
        machine.eval(&self.root)
    }
}

/// The value of a node made only of constants, computed once when planning (constant folding).
pub(crate) fn evaluate_constant(node: &Node) -> Result<Value<'static>, EvalError> {
    let regexes = RegexCache::default();
    let mut budget = Budget::unlimited();
    let mut nothing = Values(&[]);
    let mut machine: Machine<'_, '_, 'static, '_, '_> = Machine {
        variables: &mut nothing,
        locals: SmallVec::new(),
        ctx: Ctx {
            budget: &mut budget,
            regexes: &regexes,
        },
    };
    machine.eval(node)
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
    locals: SmallVec<[Local<'n, 'a>; 6]>,
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
            self.initialise(slot, init);
        }
        match self.locals.get_mut(slot) {
            Some(Local::Ready(value)) => value,
            _ => unreachable!("a comprehension variable outside its comprehension"),
        }
    }

    /// Computes a lazy accumulator's initial value.
    #[cold]
    #[inline(never)]
    fn initialise(&mut self, slot: usize, init: &'n Node) {
        // The initial value may be first read deep inside the fold, with other folds'
        // variables above it: they are kept aside while it is computed.
        let above: SmallVec<[Local<'n, 'a>; 6]> = self.locals.drain(slot + 1..).collect();
        let value = self.eval(init);
        self.locals.truncate(slot + 1);
        self.locals.extend(above);
        self.locals[slot] = Local::Ready(value);
    }

    fn eval(&mut self, node: &'n Node) -> Outcome<'a> {
        match node {
            Node::Const(value) => Ok(value.clone()),
            Node::Built(value, cost) => {
                self.ctx.budget.charge(*cost)?;
                Ok(value.clone())
            }
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

    // Kept out of `eval`, whose frame every node's evaluation pays for.
    #[inline(never)]
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

    // Kept out of `eval`, whose frame every node's evaluation pays for.
    #[inline(never)]
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

    // Kept out of `eval`, whose frame every node's evaluation pays for.
    #[inline(never)]
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
        let mut qualifiers = attr.qualifiers.iter();
        while let Some(qualifier) = qualifiers.next() {
            optional = optional || qualifier.optional;
            // The usual case, a field selected from the request's JSON: the JSON is walked in
            // place while the fields go on, and a value is made of the last one only.
            if !optional
                && let (Value::Map(Map::Json(entries)), QualKey::Const(Value::String(name))) =
                    (&value, &qualifier.key)
            {
                value =
                    self.select_json(entries, name.as_str(), qualifier.test, &mut qualifiers)?;
                continue;
            }
            // A constant key is read in place, not cloned, on every lookup.
            let computed;
            let key: Result<&Value<'a>, EvalError> = match &qualifier.key {
                QualKey::Const(key) => Ok(key),
                QualKey::Attr(key) => {
                    computed = self.resolve(key);
                    computed.as_ref().map_err(Clone::clone)
                }
            };
            if optional {
                // QualifyIfPresent: observed (costed) only when something is found.
                let key = key?;
                match lookup(&value, key, true)? {
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
                        lookup(&value, key, true).map(|found| Value::Bool(found.is_some()))
                    } else {
                        lookup(&value, key, false).map(|found| found.unwrap_or(Value::Null))
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

    /// `name` (or, with `test`, its presence) looked up in `entries`, then on through
    /// the non-optional field names that follow in `rest` (taken from it) while they meet JSON
    /// objects, each charged 1 as [`lookup`] is: the value reached.
    fn select_json(
        &mut self,
        mut entries: &'a serde_json::Map<String, serde_json::Value>,
        mut name: &'n str,
        mut test: bool,
        rest: &mut std::slice::Iter<'n, crate::program::Qualifier>,
    ) -> Outcome<'a> {
        loop {
            self.ctx.budget.charge(1)?;
            let found = json_get(entries, name);
            if test {
                return Ok(Value::Bool(found.is_some()));
            }
            let Some(found) = found else {
                return Err(EvalError::NoSuchKey(name.to_owned()));
            };
            if let serde_json::Value::Object(inner) = found
                && let Some(next) = rest.as_slice().first()
                && !next.optional
                && let QualKey::Const(Value::String(next_name)) = &next.key
            {
                rest.next();
                entries = inner;
                name = next_name.as_str();
                test = next.test;
                continue;
            }
            return Ok(Value::from_json(found));
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
    /// a call of more arguments, or one dispatched at run time to a function bound per overload,
    /// stops at the first error, uncharged unless it was the last.
    // Kept out of `eval`, whose frame every node's evaluation pays for.
    #[inline(never)]
    fn call(&mut self, call: &'n Call) -> Outcome<'a> {
        let mut args: SmallVec<[Value<'a>; 3]> = SmallVec::with_capacity(call.args.len());
        let mut failed = None;
        let mut failed_at: SmallVec<[usize; 2]> = SmallVec::new();
        // cel-go plans a call of more than two arguments, and one it dispatches at run time to a
        // function bound per overload (no singleton), as variadic: it stops at the first failed
        // argument, and charges the call only when every argument was evaluated.
        // So is a `matches`, `find` or `findAll` whose pattern is a constant: its regex is
        // compiled once when planned (cel-go's regex optimization, on in kube-apiserver).
        let stops_early = call.args.len() > 2
            || (call.dispatched && !crate::function::singleton(&call.function))
            || (matches!(&*call.function, "matches" | "find" | "findAll")
                && matches!(call.args.get(1), Some(Node::Const(_))));
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
                Err(error) if stops_early && index + 1 < call.args.len() => {
                    return Err(error);
                }
                Err(error) => {
                    failed.get_or_insert(error);
                    failed_at.push(index);
                    args.push(Value::Null);
                }
            }
        }
        if let Some(error) = failed {
            // cel-go charges the call as if it had run, the failed argument standing as a value
            // of size 1 (here `null`): a call bound to one overload costs what its cost says.
            // Dispatched at run time, only a cost kept by the function's name applies (the
            // overload is not known).
            let charged = match call.overloads.as_slice() {
                [only] if !call.dispatched => Some(only),
                _ if !call.dispatched => call.resolved.as_ref(),
                overloads => overloads.iter().find(|overload| overload.cost_by_name),
            };
            if let Some(overload) = charged
                && failed_at
                    .iter()
                    .any(|position| tracker_crashes(&overload.id, *position))
            {
                return Err(EvalError::Aborted(format!(
                    "{error} (kube-apiserver ends the whole expression here: its cost accounting of {} cannot take a failed argument)",
                    call.function
                )));
            }
            let cost = charged.map_or(1, |overload| overload.cost.map_or(1, |cost| cost(&args)));
            self.ctx.budget.charge(cost)?;
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
                        [key, value] => map_insert_owned(map, &[(key.clone(), value.clone())]),
                        [Value::Map(entries)] => map_insert_owned(map, &entries.entries()),
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
            // cel-go charges a call bound to one overload that refuses its arguments by the
            // overload's cost over its result, an error of size 1: as if over `null`s; a cost
            // Kubernetes keeps by the function's name reads the arguments as they are (a
            // dispatched call has no other).
            let by_name = call.overloads.iter().find(|overload| overload.cost_by_name);
            let cost = match (call.overloads.as_slice(), by_name) {
                (_, Some(named)) => named.cost.map_or(1, |cost| cost(&args)),
                ([only], None) if !call.dispatched => {
                    let nulls: SmallVec<[Value<'a>; 3]> =
                        args.iter().map(|_| Value::Null).collect();
                    only.cost.map_or(1, |cost| cost(&nulls))
                }
                _ => 1,
            };
            self.ctx.budget.charge(cost)?;
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

    // Kept out of `eval`, whose frame every node's evaluation pays for.
    #[inline(never)]
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
            if !key.is_primitive() {
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
            format_double(*position)
        ))),
        // cel-go makes a qualifier of the index's value first: a list or map is none.
        other if !other.is_primitive() => Err(EvalError::Invalid(format!(
            "invalid qualifier type: {}",
            go_type_name(other)
        ))),
        other => Err(EvalError::Invalid(format!(
            "unsupported index type '{}' in list",
            other.type_of().runtime_name()
        ))),
    }
}
