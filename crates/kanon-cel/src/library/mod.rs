//! kube-apiserver 1.35's CEL libraries, on top of cel-spec's standard definitions: the Kubernetes
//! libraries (URLs, regex, lists, quantity, IP, CIDR, named formats, semver) and the cel-go
//! extensions it enables (strings v2, sets, lists v3, optional types).
//!
//! Not here: the authorizer library (`authorizer`, declared nowhere, so the policy layer refuses
//! it), cross-type numeric comparisons (standard library), two-variable comprehensions and the
//! `sortBy`, `optMap`, `optFlatMap` macros (parser).
//!
//! Kubernetes' opaque types (`net.IP`, `net.CIDR`, `kubernetes.Quantity`, `kubernetes.URL`,
//! `kubernetes.Semver`, `kubernetes.NamedFormat`) are [`Value::Object`]s of that type name whose
//! fields hold a canonical form chosen so that CEL's `==` on objects (same fields, equal values)
//! is Kubernetes' equality of the type. Field names are not identifiers (they start with `#`), so
//! no expression can select them.

use std::sync::Arc;

use indexmap::IndexMap;

pub(crate) use crate::quote::go_quote;

use crate::env::Env;
use crate::error::EvalError;
use crate::value::{Object, Value};

pub mod admission;
pub mod cidr;
pub mod format;
pub mod ip;
pub mod jsonpatch;
pub mod lists;
pub mod optional;
pub mod quantity;
pub mod regex;
pub mod semver;
pub mod sets;
pub mod strings;
pub(crate) mod strings_format;
pub mod urls;

#[cfg(test)]
mod expressions;

/// Type names of Kubernetes' opaque CEL types.
pub const IP_TYPE: &str = "net.IP";
pub const CIDR_TYPE: &str = "net.CIDR";
pub const QUANTITY_TYPE: &str = "kubernetes.Quantity";
pub const URL_TYPE: &str = "kubernetes.URL";
pub const SEMVER_TYPE: &str = "kubernetes.Semver";
pub const FORMAT_TYPE: &str = "kubernetes.NamedFormat";

/// The field holding an opaque value's canonical form.
pub(crate) const CANONICAL: &str = "#";

/// Adds the libraries of kube-apiserver 1.35's base environment (`environment.MustBaseEnvSet`)
/// to `env`, which should already hold the standard definitions.
pub fn install_kubernetes(env: &mut Env) {
    urls::install(env);
    regex::install(env);
    lists::install(env);
    optional::install(env);
    quantity::install(env);
    strings::install(env);
    sets::install(env);
    ip::install(env);
    cidr::install(env);
    format::install(env);
    semver::install(env);
}

/// Adds what MutatingAdmissionPolicy's environment adds to the base one: `jsonpatch.escapeKey`
/// (kube-apiserver adds it only where JSON patches are built).
pub fn install_patch_types(env: &mut Env) {
    jsonpatch::install(env);
}

impl Env {
    /// kube-apiserver 1.35's base CEL environment: the standard definitions and every library
    /// it enables (see [`install_kubernetes`]), with the parser's default options (optional
    /// syntax, two-variable comprehensions and `sortBy` on; `cel.bind` off).
    pub fn kubernetes() -> Env {
        let mut env = Env::standard();
        install_kubernetes(&mut env);
        // kube-apiserver's base environment: HomogeneousAggregateLiterals and OptOptimize.
        env.set_homogeneous_literals(true);
        env.set_fold_constants(true);
        env.set_repeated_keys(true);
        env.set_literal_validators(true);
        // kube-apiserver registers these opaque types by name: `type(ip('…')) == net.IP`.
        env.declare_type(IP_TYPE);
        env.declare_type(CIDR_TYPE);
        env
    }
}

/// An opaque value of `type_name` whose canonical form is `canonical`.
pub(crate) fn opaque<'a>(type_name: &str, canonical: String) -> Value<'a> {
    opaque_with(type_name, vec![(CANONICAL, Value::string(canonical))])
}

/// An opaque value with several hidden fields.
pub(crate) fn opaque_with<'a>(type_name: &str, fields: Vec<(&str, Value<'a>)>) -> Value<'a> {
    let fields: IndexMap<Arc<str>, Value<'a>> = fields
        .into_iter()
        .map(|(name, value)| (Arc::from(name), value))
        .collect();
    Value::Object(Arc::new(Object {
        type_name: Arc::from(type_name),
        fields,
    }))
}

/// The canonical form of an opaque value of `type_name`.
pub(crate) fn canonical<'v>(value: &'v Value<'_>, type_name: &str) -> Option<&'v str> {
    hidden(value, type_name, CANONICAL).and_then(|field| match field {
        Value::String(text) => Some(text.as_str()),
        _ => None,
    })
}

/// A hidden field of an opaque value of `type_name`.
pub(crate) fn hidden<'v, 'a>(
    value: &'v Value<'a>,
    type_name: &str,
    field: &str,
) -> Option<&'v Value<'a>> {
    match value {
        Value::Object(object) if &*object.type_name == type_name => object.fields.get(field),
        _ => None,
    }
}

/// The string argument at `index`, or the standard "no such overload" error.
pub(crate) fn string_arg<'v>(
    function: &str,
    args: &'v [Value<'_>],
    index: usize,
) -> Result<&'v str, EvalError> {
    match args.get(index) {
        Some(Value::String(text)) => Ok(text.as_str()),
        _ => Err(crate::function::no_overload(function, args)),
    }
}

/// The int argument at `index`, or the standard "no such overload" error.
pub(crate) fn int_arg(function: &str, args: &[Value<'_>], index: usize) -> Result<i64, EvalError> {
    match args.get(index) {
        Some(Value::Int(value)) => Ok(*value),
        _ => Err(crate::function::no_overload(function, args)),
    }
}

/// cel-go's `actualSize` as kube-apiserver sees it: the standard sizes, and IPs and CIDRs, which
/// implement `Sizer` (their address or prefix length in bytes).
pub(crate) fn actual_size(value: &Value<'_>) -> u64 {
    if let Some(text) = canonical(value, IP_TYPE) {
        return if text.contains(':') { 16 } else { 4 };
    }
    if let Some(text) = canonical(value, CIDR_TYPE) {
        let bits = text
            .rsplit('/')
            .next()
            .and_then(|bits| bits.parse::<u64>().ok())
            .unwrap_or(0);
        return bits.div_ceil(8);
    }
    crate::stdlib::size_of(value)
}

/// `ceil(size × factor)` computed in f64 as cel-go computes it (so `30 × 0.1` is 4, not 3).
pub(crate) fn scaled_cost(size: u64, factor: f64) -> u64 {
    (size as f64 * factor).ceil() as u64
}

/// kube-apiserver's `traversalCost`: a tenth of a unit per byte of a string or bytes (rounded
/// down), the sum over a list's elements or a map's keys and values, 1 for anything else.
pub(crate) fn traversal_cost(value: &Value<'_>) -> u64 {
    match value {
        Value::String(text) => (text.as_str().len() as f64 * STRING_TRAVERSAL) as u64,
        Value::Bytes(bytes) => (bytes.len() as f64 * STRING_TRAVERSAL) as u64,
        Value::List(list) => list
            .iter()
            .map(|item| traversal_cost(&item))
            .fold(0, u64::saturating_add),
        Value::Map(map) => map
            .entries()
            .iter()
            .map(|(key, value)| traversal_cost(key).saturating_add(traversal_cost(value)))
            .fold(0, u64::saturating_add),
        _ => 1,
    }
}

/// cel-go's string traversal factor (0.1 per character) and regex factor (0.25 per character).
pub(crate) const STRING_TRAVERSAL: f64 = 0.1;
pub(crate) const REGEX_LENGTH: f64 = 0.25;

#[cfg(test)]
pub(crate) mod testing {
    //! Calling implementations directly, without the parser: each argument is a variable, the
    //! call is planned from a hand-built expression and evaluated.

    use std::sync::Arc;

    use crate::ast::{Expr, ExprKind, Span};
    use crate::budget::Budget;
    use crate::env::Env;
    use crate::error::EvalError;
    use crate::program::Program;
    use crate::types::Type;
    use crate::value::Value;

    fn node(kind: ExprKind) -> Expr {
        Expr {
            id: 0,
            span: Span::default(),
            kind,
        }
    }

    fn run(
        function: &str,
        method: bool,
        args: Vec<Value<'static>>,
    ) -> (Result<Value<'static>, EvalError>, u64) {
        let mut env = Env::kubernetes();
        let mut idents = Vec::new();
        for index in 0..args.len() {
            let name = format!("arg{index}");
            env.declare_variable(&name, Type::Dyn);
            idents.push(node(ExprKind::Ident(Arc::from(name.as_str()))));
        }
        let mut idents = idents.into_iter();
        let target = if method {
            idents.next().map(Box::new)
        } else {
            None
        };
        let expr = node(ExprKind::Call {
            target,
            function: Arc::from(function),
            args: idents.collect(),
        });
        let program =
            Program::plan(&env, function, &expr, None).unwrap_or_else(|error| panic!("{error}"));
        let mut budget = Budget::unlimited();
        let result = program.eval(&args, &mut budget);
        // Reading each argument variable costs 1; the call's own cost is the rest.
        (result, budget.spent - args.len() as u64)
    }

    /// Calls the method `function` with `args[0]` as its receiver.
    pub fn method(function: &str, args: Vec<Value<'static>>) -> Result<Value<'static>, EvalError> {
        run(function, true, args).0
    }

    /// Calls the global function `function`.
    pub fn function(
        function: &str,
        args: Vec<Value<'static>>,
    ) -> Result<Value<'static>, EvalError> {
        run(function, false, args).0
    }

    /// The cost of a method call.
    pub fn method_cost(function: &str, args: Vec<Value<'static>>) -> u64 {
        run(function, true, args).1
    }

    /// The cost of a global function call.
    pub fn function_cost(function: &str, args: Vec<Value<'static>>) -> u64 {
        run(function, false, args).1
    }

    pub fn s(text: &str) -> Value<'static> {
        Value::string(text)
    }

    pub fn strings(values: &[&str]) -> Value<'static> {
        Value::list(values.iter().map(|text| Value::string(*text)).collect())
    }

    pub fn ints(values: &[i64]) -> Value<'static> {
        Value::list(values.iter().map(|value| Value::Int(*value)).collect())
    }

    /// The error text of a failed call.
    pub fn error_text(result: Result<Value<'static>, EvalError>) -> String {
        match result {
            Err(error) => error.to_string(),
            Ok(value) => panic!("expected an error, got {value}"),
        }
    }

    pub fn truth(result: Result<Value<'static>, EvalError>) -> bool {
        match result {
            Ok(Value::Bool(value)) => value,
            other => panic!("expected a bool, got {other:?}"),
        }
    }

    /// Asserts the call gave a value CEL-equal to `expected`.
    #[track_caller]
    pub fn assert_value(result: Result<Value<'static>, EvalError>, expected: Value<'static>) {
        match result {
            Ok(value) => assert!(value.equals(&expected), "got {value}, expected {expected}"),
            Err(error) => panic!("got error {error}, expected {expected}"),
        }
    }
}
