//! The declarations an expression is compiled against: variables, function overloads and the
//! parser's options.

use std::collections::HashMap;
use std::sync::Arc;

use crate::check::{ObjectTypes, check};
use crate::error::{CompileError, EvalError};
use crate::eval::{Ctx, Program};
use crate::parser::{ParseOptions, parse};
use crate::types::Type;
use crate::value::Value;

/// A function's implementation: receives the arguments (the receiver first for a method call)
/// and the evaluation context (cost meter, regex cache).
pub type Implementation =
    for<'a> fn(&mut Ctx<'_, '_>, &[Value<'a>]) -> Result<Value<'a>, EvalError>;

/// The cost of one call, from its arguments, when it is not cel-go's default of 1 (string
/// functions cost in proportion to their lengths, as kube-apiserver meters them).
pub type CostFn = for<'a> fn(&[Value<'a>]) -> u64;

/// One overload of a function: `string.contains(string) -> bool` is the overload
/// `contains_string` of `contains`, called as a method.
#[derive(Clone)]
pub struct Overload {
    pub id: Arc<str>,
    pub function: Arc<str>,
    pub signature: Signature,
    pub implementation: Implementation,
    pub cost: Option<CostFn>,
    /// The cost is kube-apiserver's estimator's, which meters by the function's name, so it
    /// applies even where the checker left the overload to run-time dispatch; cel-go's own
    /// costs are by overload and are then the default of 1.
    pub cost_by_name: bool,
    /// The cost where the overload is chosen at run time, when kube-apiserver's estimator
    /// meters that case differently (it also looks at the overload's id).
    pub dispatched_cost: Option<CostFn>,
}

impl std::fmt::Debug for Overload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.id, self.signature)
    }
}

/// The types an overload takes and gives. `receiver` marks a method (`x.f(y)`): its first
/// parameter is the receiver.
#[derive(Debug, Clone, PartialEq)]
pub struct Signature {
    pub receiver: bool,
    pub params: Vec<Type>,
    pub result: Type,
}

impl std::fmt::Display for Signature {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut params = self.params.iter();
        if self.receiver
            && let Some(receiver) = params.next()
        {
            write!(f, "{receiver}.")?;
        }
        f.write_str("(")?;
        for (index, param) in params.enumerate() {
            if index > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{param}")?;
        }
        write!(f, ") -> {}", self.result)
    }
}

/// The environment expressions are compiled in.
#[derive(Debug, Clone, Default)]
pub struct Env {
    pub(crate) variables: Vec<(Arc<str>, Type)>,
    pub(crate) functions: HashMap<Arc<str>, Vec<Arc<Overload>>>,
    pub(crate) parse_options: ParseOptions,
    pub(crate) objects: HashMap<Arc<str>, ()>,
    /// Type names usable as type values (`type(x) == net.IP`) that no struct literal builds.
    pub(crate) type_names: std::collections::HashSet<Arc<str>>,
    pub(crate) object_types: Option<Arc<dyn ObjectTypes>>,
    /// List and map literals must not mix element types (kube-apiserver's
    /// HomogeneousAggregateLiterals); off in cel-spec's plain environment.
    pub(crate) homogeneous_literals: bool,
    /// Build constant list and map literals and constant conversions when compiling, as
    /// kube-apiserver's `OptOptimize` does (a failing constant conversion is then a compile
    /// error); off in cel-spec's plain environment, where such errors are evaluation errors.
    pub(crate) fold_constants: bool,
    /// A map literal's repeated key replaces the earlier entry, as in cel-go (kube-apiserver);
    /// off in cel-spec's plain environment, where it is an error.
    pub(crate) repeated_keys: bool,
    /// kube-apiserver's literal validators: `duration('…')`, `timestamp('…')` and
    /// `matches('…')` with an invalid literal are compile errors.
    pub(crate) literal_validators: bool,
}

impl Env {
    /// An environment with nothing declared.
    pub fn empty() -> Env {
        Env::default()
    }

    /// cel-spec's standard definitions: operators, conversions, `size`, `matches`, string
    /// tests, durations and timestamps.
    pub fn standard() -> Env {
        let mut env = Env::empty();
        crate::stdlib::install(&mut env);
        env
    }

    pub fn parse_options(&self) -> &ParseOptions {
        &self.parse_options
    }

    pub fn set_parse_options(&mut self, options: ParseOptions) {
        self.parse_options = options;
    }

    /// Declares a variable; its position in declaration order is its slot in the values passed
    /// to [`Program::eval`]. Declaring a name again replaces its type, keeping its slot.
    pub fn declare_variable(&mut self, name: &str, kind: Type) -> usize {
        if let Some(slot) = self
            .variables
            .iter()
            .position(|(known, _)| &**known == name)
        {
            self.variables[slot].1 = kind;
            return slot;
        }
        self.variables.push((Arc::from(name), kind));
        self.variables.len() - 1
    }

    pub fn variables(&self) -> &[(Arc<str>, Type)] {
        &self.variables
    }

    /// Adds a global overload, written as a signature: `"size(list(A)) -> int"` or
    /// `"optional.of(A) -> optional_type(A)"` (the name may hold dots; single capital letters are
    /// type parameters).
    ///
    /// # Panics
    /// When the signature does not parse: signatures are constants of this crate and its callers,
    /// checked by their tests.
    pub fn function(&mut self, id: &str, signature: &str, implementation: Implementation) {
        self.add(id, signature, false, implementation);
    }

    /// Adds a method overload: `"string.contains(string) -> bool"`; the receiver's type is
    /// everything before the last dot outside parentheses, and its first parameter.
    ///
    /// # Panics
    /// As [`Env::function`].
    pub fn method(&mut self, id: &str, signature: &str, implementation: Implementation) {
        self.add(id, signature, true, implementation);
    }

    fn add(&mut self, id: &str, text: &str, method: bool, implementation: Implementation) {
        let (function, signature) = parse_signature(text, method)
            .unwrap_or_else(|problem| panic!("overload {id}: signature {text:?}: {problem}"));
        let function: Arc<str> = Arc::from(function.as_str());
        let overload = Arc::new(Overload {
            id: Arc::from(id),
            function: function.clone(),
            signature,
            implementation,
            cost: None,
            cost_by_name: false,
            dispatched_cost: None,
        });
        self.functions.entry(function).or_default().push(overload);
    }

    /// Sets the cost of an overload already added (by id).
    pub fn set_cost(&mut self, id: &str, cost: CostFn) {
        for overloads in self.functions.values_mut() {
            for overload in overloads.iter_mut() {
                if &*overload.id == id {
                    Arc::make_mut(overload).cost = Some(cost);
                }
            }
        }
    }

    /// Sets the cost of an overload already added (by id), as kube-apiserver's estimator meters
    /// its function by name: it applies even where the overload is chosen at run time.
    pub fn set_name_cost(&mut self, id: &str, cost: CostFn) {
        for overloads in self.functions.values_mut() {
            for overload in overloads.iter_mut() {
                if &*overload.id == id {
                    let overload = Arc::make_mut(overload);
                    overload.cost = Some(cost);
                    overload.cost_by_name = true;
                }
            }
        }
    }

    /// Sets the cost of an overload (by id) where it is chosen at run time.
    pub fn set_dispatched_cost(&mut self, id: &str, cost: CostFn) {
        for overloads in self.functions.values_mut() {
            for overload in overloads.iter_mut() {
                if &*overload.id == id {
                    Arc::make_mut(overload).dispatched_cost = Some(cost);
                }
            }
        }
    }

    /// Where object types find their fields when checked (a Kubernetes schema).
    pub fn set_object_types(&mut self, types: Arc<dyn ObjectTypes>) {
        self.object_types = Some(types);
    }

    /// Refuse list and map literals that mix element types, as kube-apiserver does.
    pub fn set_homogeneous_literals(&mut self, homogeneous: bool) {
        self.homogeneous_literals = homogeneous;
    }

    /// Fold constants at compile time, as kube-apiserver's `OptOptimize` does.
    pub fn set_fold_constants(&mut self, fold: bool) {
        self.fold_constants = fold;
    }

    /// Validate duration, timestamp and regex literals when compiling, as kube-apiserver does.
    pub fn set_literal_validators(&mut self, validate: bool) {
        self.literal_validators = validate;
    }

    /// Let a map literal's repeated key replace the earlier entry, as cel-go does.
    pub fn set_repeated_keys(&mut self, allowed: bool) {
        self.repeated_keys = allowed;
    }

    /// Declares an object type that struct literals may build (`Object`, `JSONPatch`, …).
    pub fn declare_object(&mut self, name: &str) {
        self.objects.insert(Arc::from(name), ());
    }

    /// Declares a type name that expressions may use as a type value (`net.IP`), without
    /// letting a struct literal build it (see [`Env::declare_object`] for that).
    pub fn declare_type(&mut self, name: &str) {
        self.type_names.insert(Arc::from(name));
    }

    /// Is `name` a declared object or type name?
    pub(crate) fn names_type(&self, name: &str) -> bool {
        self.objects.contains_key(name) || self.type_names.contains(name)
    }

    /// Removes a function entirely (every overload): for environments that must refuse it.
    pub fn remove_function(&mut self, function: &str) {
        self.functions.remove(function);
    }

    pub fn overloads(&self, function: &str) -> &[Arc<Overload>] {
        self.functions.get(function).map_or(&[], Vec::as_slice)
    }

    /// Parses, checks and plans `source` once; the program is then evaluated per request.
    pub fn compile(&self, source: &str) -> Result<Program, CompileError> {
        let expr = parse(source, &self.parse_options)?;
        let checked = check(self, &expr).map_err(|issues| CompileError::new(source, issues))?;
        let mut program = Program::plan(self, source, &expr, Some(&checked))?;
        program.result_type = checked.result;
        Ok(program)
    }

    /// Parses and plans `source` without type checking: every name and overload is resolved at
    /// run time (cel-spec conformance tests marked `disable_check`).
    pub fn compile_unchecked(&self, source: &str) -> Result<Program, CompileError> {
        let expr = parse(source, &self.parse_options)?;
        Program::plan(self, source, &expr, None)
    }
}

/// Parses `name(T, …) -> R`, or `T.name(…) -> R` for a method.
fn parse_signature(text: &str, method: bool) -> Result<(String, Signature), String> {
    let (call, result) = text.split_once("->").ok_or("no `-> result`")?;
    let result = parse_type(result.trim())?;
    let call = call.trim();
    if !call.ends_with(')') {
        return Err("no closing `)`".to_owned());
    }
    // The argument list opens at the `(` that matches the final `)`.
    let mut depth = 0i32;
    let mut open = None;
    for (index, character) in call.char_indices().rev() {
        match character {
            ')' => depth += 1,
            '(' => {
                depth -= 1;
                if depth == 0 {
                    open = Some(index);
                    break;
                }
            }
            _ => {}
        }
    }
    let open = open.ok_or("no `(`")?;
    let head = &call[..open];
    let inner = &call[open + 1..call.len() - 1];
    let mut params = split_types(inner)?;
    // A method's receiver is everything before the last dot outside parentheses.
    let name = if method {
        let dot = last_dot_outside_parens(head).ok_or("a method without a receiver")?;
        params.insert(0, parse_type(&head[..dot])?);
        head[dot + 1..].to_owned()
    } else {
        head.to_owned()
    };
    Ok((
        name,
        Signature {
            receiver: method,
            params,
            result,
        },
    ))
}

fn last_dot_outside_parens(text: &str) -> Option<usize> {
    let mut depth = 0i32;
    let mut last = None;
    for (index, character) in text.char_indices() {
        match character {
            '(' => depth += 1,
            ')' => depth -= 1,
            '.' if depth == 0 => last = Some(index),
            _ => {}
        }
    }
    last
}

fn split_types(text: &str) -> Result<Vec<Type>, String> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(Vec::new());
    }
    let mut types = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (index, character) in text.char_indices() {
        match character {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                types.push(parse_type(text[start..index].trim())?);
                start = index + 1;
            }
            _ => {}
        }
    }
    types.push(parse_type(text[start..].trim())?);
    Ok(types)
}

/// Parses a type as signatures write it: `int`, `list(A)`, `map(string, dyn)`, `Object.spec`, ….
pub fn parse_type(text: &str) -> Result<Type, String> {
    let text = text.trim();
    if let Some(open) = text.find('(') {
        if !text.ends_with(')') {
            return Err(format!("{text}: no closing `)`"));
        }
        let mut args = split_types(&text[open + 1..text.len() - 1])?;
        let name = &text[..open];
        return match (name, args.len()) {
            ("list", 1) => Ok(Type::list(args.remove(0))),
            ("map", 2) => {
                let value = args.remove(1);
                Ok(Type::map(args.remove(0), value))
            }
            ("optional_type", 1) => Ok(Type::optional(args.remove(0))),
            ("type", 1) => Ok(Type::type_of(args.remove(0))),
            _ => Err(format!("{text}: unknown generic type")),
        };
    }
    Ok(match text {
        "dyn" => Type::Dyn,
        "null_type" => Type::Null,
        "bool" => Type::Bool,
        "int" => Type::Int,
        "uint" => Type::Uint,
        "double" => Type::Double,
        "string" => Type::String,
        "bytes" => Type::Bytes,
        "duration" | "google.protobuf.Duration" => Type::Duration,
        "timestamp" | "google.protobuf.Timestamp" => Type::Timestamp,
        "type" => Type::Type(None),
        "" => return Err("an empty type".to_owned()),
        name if name.len() == 1 && name.chars().all(|c| c.is_ascii_uppercase()) => {
            Type::Param(Arc::from(name))
        }
        name => Type::Object(Arc::from(name)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_parse_functions_and_methods() {
        let (name, signature) = parse_signature("string.contains(string) -> bool", true).unwrap();
        assert_eq!(name, "contains");
        assert!(signature.receiver);
        assert_eq!(signature.params, vec![Type::String, Type::String]);
        assert_eq!(signature.result, Type::Bool);

        let (name, signature) = parse_signature("size(map(K, V)) -> int", false).unwrap();
        assert_eq!(name, "size");
        assert!(!signature.receiver);
        assert_eq!(
            signature.params,
            vec![Type::map(Type::Param("K".into()), Type::Param("V".into()))]
        );

        let (name, signature) = parse_signature("list(A).indexOf(A) -> int", true).unwrap();
        assert_eq!(name, "indexOf");
        assert_eq!(signature.params.len(), 2);
        assert_eq!(signature.to_string(), "list(A).(A) -> int");

        let (name, _) = parse_signature("_+_(int, int) -> int", false).unwrap();
        assert_eq!(name, "_+_");
        assert!(parse_signature("size(int", false).is_err());
        let (name, signature) =
            parse_signature("optional.of(A) -> optional_type(A)", false).unwrap();
        assert_eq!(name, "optional.of");
        assert_eq!(signature.params, vec![Type::Param("A".into())]);
    }
}
