//! Rule programs: minijinja templates run in a sandbox.
//!
//! A program has no loader (no file access), no network, an instruction budget (fuel), a
//! recursion limit and an output size limit. Undefined values are semi-strict: printing or
//! reading through an undefined value is an error (a typo fails loudly), while `if x` and
//! `x is defined` may probe for absence. Programs compile once per policy generation.
//!
//! An override program renders a list of RFC 6902 operations (YAML or JSON), or
//! `{patches: [...]}`; a validate program renders `{valid, reason, warnings}`. Empty output
//! means no operations, or valid.

use std::collections::HashMap;
use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};

use base64::Engine as _;
use minijinja::value::{Rest, Serde};
use minijinja::{Environment, Error, ErrorKind, UndefinedBehavior, Value};

use crate::quantity::{Decimal, Quantity};

/// The bounds every program runs within.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProgramLimits {
    /// Instruction budget per run.
    pub fuel: u64,
    /// Maximum nesting of macro calls and includes.
    pub recursion: usize,
    /// Maximum size of the rendered output, in bytes.
    pub output_bytes: usize,
    /// Maximum size of the program source, in bytes.
    pub source_bytes: usize,
}

impl Default for ProgramLimits {
    /// 500,000 instructions (about 20 ms of a runaway loop on this project's reference
    /// machine, see BENCHMARKS.md), recursion 64, 256 KiB of output, 64 KiB of source.
    fn default() -> Self {
        ProgramLimits {
            fuel: 500_000,
            recursion: 64,
            output_bytes: 256 * 1024,
            source_bytes: 64 * 1024,
        }
    }
}

/// What a program produces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ProgramKind {
    /// RFC 6902 operations.
    Override,
    /// A verdict.
    Validate,
    /// Text: the denial message of a validate condition.
    Message,
}

/// A program that failed to compile or to run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ProgramError {
    /// What went wrong, with the line when known.
    pub message: String,
    /// What went wrong without the line and its code, when `message` has them: how to say it
    /// for a program kanon rendered from a template, whose lines its author never wrote.
    pub brief: Option<String>,
}

impl ProgramError {
    /// An error with `message`.
    pub fn new(message: impl Into<String>) -> Self {
        ProgramError {
            message: message.into(),
            brief: None,
        }
    }

    /// The error of a minijinja failure in `source`.
    fn from_minijinja(err: &Error, source: &str) -> Self {
        let (message, brief) = describe(err, source);
        ProgramError { message, brief }
    }

    /// What went wrong, without a line of the program.
    pub fn brief(&self) -> &str {
        self.brief.as_deref().unwrap_or(&self.message)
    }
}

/// Marks the message of `fail(...)`, which is shown as the author wrote it.
const FAIL_MARK: &str = "\u{2063}fail:";

/// Describes a minijinja error in one line with its line number and the text of that line
/// (never the debug dump, which would print context values), and, when there is a line, the
/// same without it.
fn describe(err: &Error, source: &str) -> (String, Option<String>) {
    let detail = err.detail().unwrap_or_default();
    if let Some(message) = detail.strip_prefix(FAIL_MARK) {
        return match err.line() {
            Some(line) => (format!("line {line}: {message}"), Some(message.to_string())),
            None => (message.to_string(), None),
        };
    }
    let mut text = match err.kind() {
        ErrorKind::OutOfFuel => "the program ran out of fuel (instruction limit): it loops too long".to_string(),
        ErrorKind::UndefinedError => "undefined value: a name or attribute does not exist (probe optional fields with `is defined` or `| default(...)`)".to_string(),
        ErrorKind::InvalidOperation if detail.contains("recursion limit") => {
            "the program nests macro calls deeper than the recursion limit".to_string()
        }
        // The details of invalid operations speak for themselves.
        ErrorKind::InvalidOperation if !detail.is_empty() => detail.to_string(),
        _ if !detail.is_empty() => format!("{}: {detail}", err.kind()),
        _ => err.kind().to_string(),
    };
    let Some(line) = err.line() else {
        return (text, None);
    };
    let brief = text.clone();
    text = format!("line {line}: {text}");
    if let Some(code) = source.lines().nth(line.saturating_sub(1)) {
        let code = code.trim();
        if !code.is_empty() {
            text = format!("{text} (in `{}`)", shorten(code, 120));
        }
    }
    (text, Some(brief))
}

/// `text` cut to at most `max` bytes (at a character boundary), marked with `…` when cut.
fn shorten(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// Writer that fails once the output exceeds its budget, so a program cannot fill memory.
struct BoundedWriter {
    buffer: Vec<u8>,
    limit: usize,
}

impl Write for BoundedWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        if self.buffer.len() + data.len() > self.limit {
            return Err(std::io::Error::other("output limit exceeded"));
        }
        self.buffer.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The value at a JSON pointer inside a program value, navigated in place (no conversion of
/// the whole object); undefined when absent or null.
fn pointer_get(value: &Value, pointer: &str) -> Value {
    use minijinja::value::ValueKind;
    if pointer.is_empty() {
        return value.clone();
    }
    // Checked by the caller: a pointer that is not empty starts with `/`.
    let Some(rest) = pointer.strip_prefix('/') else {
        return Value::UNDEFINED;
    };
    let mut current = value.clone();
    for token in rest.split('/') {
        let token = token.replace("~1", "/").replace("~0", "~");
        let key = match current.kind() {
            ValueKind::Map => Value::from(token),
            ValueKind::Seq => match token.parse::<usize>() {
                Ok(i) => Value::from(i),
                Err(_) => return Value::UNDEFINED,
            },
            _ => return Value::UNDEFINED,
        };
        match current.get_item(&key) {
            Ok(next) if !next.is_undefined() && !next.is_none() => current = next,
            _ => return Value::UNDEFINED,
        }
    }
    current
}

/// A helper's JSON result as a program value, `null` as `none`.
fn json_or_none(result: serde_json::Value) -> Value {
    if result.is_null() {
        Value::from(())
    } else {
        Value::from(Serde(result))
    }
}

fn invalid(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidOperation, message.into())
}

fn to_json(value: &Value) -> Result<serde_json::Value, Error> {
    if let Some(node) = value.downcast_object_ref::<JsonNode>() {
        return Ok(node.node().clone());
    }
    serde_json::to_value(value).map_err(|e| invalid(format!("cannot convert to JSON: {e}")))
}

fn parse_quantity(value: &Value) -> Result<Quantity, Error> {
    let text = match value.as_str() {
        Some(s) => s.to_string(),
        None if value.is_number() => value.to_string(),
        None => {
            return Err(invalid(format!(
                "expected a quantity, got {}",
                value.kind()
            )));
        }
    };
    text.parse::<Quantity>().map_err(|e| invalid(e.to_string()))
}

pub use crate::helpers::{compare_values, process_value, values_equal};

/// JSONPaths parsed by programs, cached per program environment.
type JsonPathCache = Arc<Mutex<HashMap<String, Arc<jsonpath_rust::parser::model::JpQuery>>>>;

fn cached_jsonpath(
    cache: &JsonPathCache,
    path: &str,
) -> Result<Arc<jsonpath_rust::parser::model::JpQuery>, Error> {
    let mut map = cache
        .lock()
        .map_err(|_| invalid("JSONPath cache poisoned"))?;
    if let Some(q) = map.get(path) {
        return Ok(q.clone());
    }
    let query = Arc::new(
        crate::jsonpath::parse_jsonpath(path)
            .map_err(|e| invalid(format!("invalid JSONPath `{path}`: {e}")))?,
    );
    if map.len() < 256 {
        map.insert(path.to_string(), query.clone());
    }
    Ok(query)
}

/// The helpers every program may call. Documented in the README's program reference.
fn add_helpers(env: &mut Environment<'static>) {
    // jsonpath(value, "$.spec.containers[*].image") → list of matches.
    // pointer(value, "/a/b~1c") → the value there, or undefined; an error for text that is
    // not a JSON pointer (`resources.limits.memory`), which would otherwise read as absent.
    env.add_function(
        "pointer",
        |value: Value, pointer: String| -> Result<Value, Error> {
            crate::pointer::check(&pointer).map_err(|e| invalid(format!("pointer(): {e}")))?;
            Ok(pointer_get(&value, &pointer))
        },
    );
    // "a/b" | escape_pointer → "a~1b": a map key as a JSON pointer token.
    env.add_filter("escape_pointer", |key: String| {
        crate::pointer::escape(&key).into_owned()
    });
    // quantity("500m") → the value as a number (cores, bytes).
    env.add_function("quantity", |value: Value| -> Result<f64, Error> {
        Ok(parse_quantity(&value)?.to_f64())
    });
    // compare_quantities(a, b) → -1, 0 or 1.
    env.add_function(
        "compare_quantities",
        |a: Value, b: Value| -> Result<i32, Error> {
            Ok(match parse_quantity(&a)?.cmp(&parse_quantity(&b)?) {
                std::cmp::Ordering::Less => -1,
                std::cmp::Ordering::Equal => 0,
                std::cmp::Ordering::Greater => 1,
            })
        },
    );
    // scale_quantity("500m", "0.25") → "125m", exact and canonical.
    env.add_function(
        "scale_quantity",
        |value: Value, factor: Value| -> Result<String, Error> {
            let q = parse_quantity(&value)?;
            let text = factor
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| factor.to_string());
            let d = Decimal::parse(&text)
                .ok_or_else(|| invalid(format!("`{text}` is not a decimal factor")))?;
            q.scaled(d)
                .map(|r| r.to_string())
                .ok_or_else(|| invalid("quantity overflow"))
        },
    );
    env.add_filter("b64encode", |s: String| {
        base64::engine::general_purpose::STANDARD.encode(s.as_bytes())
    });
    env.add_filter("b64decode", |s: String| -> Result<String, Error> {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(s.trim())
            .map_err(|e| invalid(format!("invalid base64: {e}")))?;
        String::from_utf8(bytes).map_err(|_| invalid("decoded base64 is not UTF-8 text"))
    });
    // {{ fail("message") }} stops the program with an evaluation error.
    env.add_function("fail", |message: String| -> Result<Value, Error> {
        Err(invalid(format!("{FAIL_MARK}{message}")))
    });
    // with_keys(map, {"k": "v"}) → a copy of map with those keys set.
    env.add_function(
        "with_keys",
        |map: Value, keys: Value| -> Result<Value, Error> {
            crate::helpers::with_keys(to_json(&map)?, to_json(&keys)?)
                .map(|v| Value::from(Serde(v)))
                .map_err(invalid)
        },
    );
    // without_keys(map, ["k", ...]) → a copy of map without those keys.
    env.add_function(
        "without_keys",
        |map: Value, keys: Rest<Value>| -> Result<Value, Error> {
            let map = to_json(&map)?;
            let keys = keys.iter().map(to_json).collect::<Result<Vec<_>, _>>()?;
            crate::helpers::without_keys(map, &keys)
                .map(|v| Value::from(Serde(v)))
                .map_err(invalid)
        },
    );
    // with_defaults(map, {"k": "v"}) → a copy of map with those keys set where it has none.
    env.add_function(
        "with_defaults",
        |map: Value, keys: Value| -> Result<Value, Error> {
            crate::helpers::with_defaults(to_json(&map)?, to_json(&keys)?)
                .map(|v| Value::from(Serde(v)))
                .map_err(invalid)
        },
    );
    // field_op(doc, base, "/a/b", value, op) → the operation that sets (add, replace,
    // default) or removes (remove) the field at /a/b of doc (found at the pointer base),
    // creating missing parents; none when nothing changes.
    env.add_function(
        "field_op",
        |doc: Value,
         base: String,
         path: String,
         value: Value,
         op: String|
         -> Result<Value, Error> {
            let edit = crate::podspec::Edit::parse(&op).map_err(invalid)?;
            let value = if value.is_undefined() || value.is_none() {
                None
            } else {
                Some(to_json(&value)?)
            };
            let found =
                crate::helpers::field_op(&to_json(&doc)?, &base, &path, value.as_ref(), edit)
                    .map_err(invalid)?;
            Ok(found.map_or(Value::from(()), |op| Value::from(Serde(op.into_json()))))
        },
    );
    // pod_spec_pointer(object) → where the kind keeps its pod spec, or undefined.
    env.add_function(
        "pod_spec_pointer",
        |object: Value| -> Result<Value, Error> {
            let json = to_json(&object)?;
            Ok(crate::podspec::pod_spec_pointer(&json)
                .map(Value::from)
                .unwrap_or(Value::UNDEFINED))
        },
    );
    // Pod spec edits used by override templates; see the podspec module.
    env.add_function(
        "resources_with",
        |current: Value, template: Value, op: String| -> Result<Value, Error> {
            let edit = crate::podspec::Edit::parse(&op).map_err(invalid)?;
            Ok(Value::from(Serde(crate::podspec::resources_with(
                &to_json(&current)?,
                &to_json(&template)?,
                edit,
            ))))
        },
    );
    env.add_function(
        "oversold",
        |current: Value, factors: Value, op: String| -> Result<Value, Error> {
            let edit = crate::podspec::Edit::parse(&op).map_err(invalid)?;
            crate::podspec::oversold(&to_json(&current)?, &to_json(&factors)?, edit)
                .map(|v| Value::from(Serde(v)))
                .map_err(invalid)
        },
    );
    env.add_function(
        "tolerations_with",
        |current: Value, template: Value, op: String| -> Result<Value, Error> {
            let edit = crate::podspec::Edit::parse(&op).map_err(invalid)?;
            let result =
                crate::podspec::tolerations_with(&to_json(&current)?, &to_json(&template)?, edit);
            Ok(json_or_none(result))
        },
    );
    env.add_function(
        "affinity_with",
        |current: Value, template: Value, op: String| -> Result<Value, Error> {
            let edit = crate::podspec::Edit::parse(&op).map_err(invalid)?;
            let result =
                crate::podspec::affinity_with(&to_json(&current)?, &to_json(&template)?, edit);
            Ok(json_or_none(result))
        },
    );
    // equal(a, b): condition equality (numbers and quantities by value).
    env.add_function("equal", |a: Value, b: Value| -> Result<bool, Error> {
        Ok(values_equal(&to_json(&a)?, &to_json(&b)?))
    });
    // contains_all(list, x): x (or every item of x, when x is a list) is in list.
    env.add_function(
        "contains_all",
        |list: Value, x: Value| -> Result<bool, Error> {
            crate::helpers::contains_all(&to_json(&list)?, &to_json(&x)?).map_err(invalid)
        },
    );
    // contains_none(list, x): x (or no item of x, when x is a list) is in list.
    env.add_function(
        "contains_none",
        |list: Value, x: Value| -> Result<bool, Error> {
            crate::helpers::contains_none(&to_json(&list)?, &to_json(&x)?).map_err(invalid)
        },
    );
    // process_value(value, "+", "0.5"): valueProcess arithmetic; quantities stay exact under
    // * and /.
    env.add_function(
        "process_value",
        |value: Value, op: String, operand: String| -> Result<Value, Error> {
            process_value(&to_json(&value)?, &op, &operand)
                .map(|v| Value::from(Serde(v)))
                .map_err(invalid)
        },
    );
    // compare(a, b) → -1, 0, 1 with condition semantics (numbers, quantities, text); fails
    // when the two cannot be ordered.
    env.add_function("compare", |a: Value, b: Value| -> Result<i32, Error> {
        crate::helpers::compare(&to_json(&a)?, &to_json(&b)?).map_err(invalid)
    });
}

/// A sandboxed environment holding `source` compiled, with the helpers.
/// What printing an undefined value does.
#[derive(Clone, Copy)]
enum Absent {
    /// An error (semi-strict): a typo fails loudly.
    Fails,
    /// Prints this text, and reading through it gives undefined again (chainable): for
    /// rendering a message as far as it goes once the strict rendering failed.
    Prints(&'static str),
}

fn environment(
    source: &str,
    limits: ProgramLimits,
    absent: Absent,
) -> Result<Environment<'static>, ProgramError> {
    if source.len() > limits.source_bytes {
        return Err(ProgramError::new(format!(
            "the program is {} bytes long; the limit is {}",
            source.len(),
            limits.source_bytes
        )));
    }
    let mut env = Environment::new();
    match absent {
        Absent::Fails => env.set_undefined_behavior(UndefinedBehavior::SemiStrict),
        Absent::Prints(text) => {
            env.set_undefined_behavior(UndefinedBehavior::Chainable);
            env.set_formatter(move |out, state, value| {
                if value.is_undefined() {
                    out.write_str(text).map_err(Error::from)
                } else {
                    minijinja::escape_formatter(out, state, value)
                }
            });
        }
    }
    env.set_fuel(Some(limits.fuel));
    env.set_recursion_limit(limits.recursion);
    add_helpers(&mut env);
    // jsonpath(value, "$.spec.containers[*].image") → list of matches; each path is parsed
    // once per program.
    let paths: JsonPathCache = Arc::default();
    env.add_function(
        "jsonpath",
        move |value: Value, path: String| -> Result<Value, Error> {
            let query = cached_jsonpath(&paths, &path)?;
            // A document passed in from the context is queried in place.
            let converted;
            let json = match value.downcast_object_ref::<JsonNode>() {
                Some(node) => node.node(),
                None => {
                    converted = to_json(&value)?;
                    &converted
                }
            };
            let found = jsonpath_rust::query::js_path_process(&query, json)
                .map_err(|e| invalid(format!("JSONPath `{path}`: {e}")))?;
            Ok(Value::from(Serde(
                found
                    .into_iter()
                    .map(|r| r.val().clone())
                    .collect::<Vec<_>>(),
            )))
        },
    );
    let cache = crate::helpers::RegexCache::default();
    // regex_match(text, pattern): text as is; numbers and booleans as JSON writes them
    // (`3`, `1.5`, `false`), never minijinja's `False`.
    env.add_function(
        "regex_match",
        move |text: Value, pattern: String| -> Result<bool, Error> {
            let converted;
            let text = match text.as_str() {
                Some(s) => s,
                None => {
                    converted = crate::helpers::regex_text(&to_json(&text)?).into_owned();
                    converted.as_str()
                }
            };
            Ok(cache.get(&pattern).map_err(invalid)?.is_match(text))
        },
    );
    env.add_template_owned(NAME, source.to_string())
        .map_err(|e| ProgramError::from_minijinja(&e, source))?;
    Ok(env)
}

/// A compiled program.
///
/// Its minijinja environment (the helpers, caches and compiled instructions, some kilobytes) is
/// built at compile time, or, for a program compiled with [`Program::compile_lazily`], checked
/// then dropped and built again on the first run: a structured template whose native form
/// answers nearly every request then costs only its source until it is needed.
#[derive(Clone)]
pub struct Program {
    /// Shared by clones, so a lazily built environment is built once.
    env: Arc<OnceLock<Environment<'static>>>,
    source: Arc<str>,
    kind: ProgramKind,
    limits: ProgramLimits,
}

impl std::fmt::Debug for Program {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Program")
            .field("kind", &self.kind)
            .field("source", &self.source())
            .finish()
    }
}

const NAME: &str = "program";

impl Program {
    /// Compiles `source`. A syntax error names the line.
    pub fn compile(
        source: &str,
        kind: ProgramKind,
        limits: ProgramLimits,
    ) -> Result<Program, ProgramError> {
        Program::compile_shared(source.into(), kind, limits, false)
    }

    /// Compiles `source` to check it, like [`Program::compile`], but keeps only the source: the
    /// environment is built again on the first [`Program::render`]. For programs that seldom run.
    pub fn compile_lazily(
        source: &str,
        kind: ProgramKind,
        limits: ProgramLimits,
    ) -> Result<Program, ProgramError> {
        Program::compile_shared(source.into(), kind, limits, true)
    }

    /// [`Program::compile`] or, `lazily`, [`Program::compile_lazily`] of a source the caller
    /// keeps too (a template's rendered program, shown by `kanon render` and in the status).
    pub(crate) fn compile_shared(
        source: Arc<str>,
        kind: ProgramKind,
        limits: ProgramLimits,
        lazily: bool,
    ) -> Result<Program, ProgramError> {
        let env = environment(&source, limits, Absent::Fails)?;
        Ok(Program {
            env: Arc::new(if lazily {
                OnceLock::new()
            } else {
                OnceLock::from(env)
            }),
            source,
            kind,
            limits,
        })
    }

    /// The environment, built now if it was compiled lazily and never ran.
    fn env(&self) -> Result<&Environment<'static>, ProgramError> {
        if let Some(env) = self.env.get() {
            return Ok(env);
        }
        let env = environment(&self.source, self.limits, Absent::Fails)?;
        Ok(self.env.get_or_init(|| env))
    }

    /// The source text.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// What the program produces.
    pub fn kind(&self) -> ProgramKind {
        self.kind
    }

    /// The bounds it runs within.
    pub fn limits(&self) -> &ProgramLimits {
        &self.limits
    }

    /// Renders the program with `context` and returns its output text.
    pub fn render(&self, context: &Value) -> Result<String, ProgramError> {
        render_in(self.env()?, &self.source, self.limits, context)
    }

    /// Renders the program with `context` where an undefined value prints as `absent` instead
    /// of failing (and reading through it gives undefined again). Builds a second environment
    /// on each call: for the rare rendering that already failed strictly.
    pub fn render_leniently(
        &self,
        context: &Value,
        absent: &'static str,
    ) -> Result<String, ProgramError> {
        let env = environment(&self.source, self.limits, Absent::Prints(absent))?;
        render_in(&env, &self.source, self.limits, context)
    }

    /// Renders the program and parses its output as a document (YAML or JSON); `None` when the
    /// output is empty or only whitespace.
    pub fn run(&self, context: &Value) -> Result<Option<serde_json::Value>, ProgramError> {
        let text = self.render(context)?;
        if text.trim().is_empty() {
            return Ok(None);
        }
        // Templates render JSON; parse that directly, and YAML otherwise.
        let trimmed = text.trim_start();
        if (trimmed.starts_with('[') || trimmed.starts_with('{'))
            && let Ok(value) = serde_json::from_str::<serde_json::Value>(trimmed)
        {
            return Ok(Some(value));
        }
        let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text).map_err(|e| {
            let e = e.without_snippet().to_string();
            ProgramError::new(format!(
                "the output is not YAML or JSON: {e}\noutput:\n{}",
                excerpt(&text)
            ))
        })?;
        match docs.len() {
            0 => Ok(None),
            1 => Ok(docs.into_iter().next()),
            n => Err(ProgramError::new(format!(
                "the output holds {n} documents; a program renders one"
            ))),
        }
    }
}

/// Renders the program held by `env` with `context`, within the output limit of `limits`.
fn render_in(
    env: &Environment<'static>,
    source: &str,
    limits: ProgramLimits,
    context: &Value,
) -> Result<String, ProgramError> {
    let template = env
        .get_template(NAME)
        .map_err(|e| ProgramError::from_minijinja(&e, source))?;
    let mut out = BoundedWriter {
        buffer: Vec::new(),
        limit: limits.output_bytes,
    };
    match template.render_captured_to(context, &mut out) {
        Ok(_) => {}
        Err(e) if e.kind() == ErrorKind::WriteFailure => {
            return Err(ProgramError::new(format!(
                "the program's output exceeds {} bytes",
                limits.output_bytes
            )));
        }
        Err(e) => return Err(ProgramError::from_minijinja(&e, source)),
    }
    String::from_utf8(out.buffer)
        .map_err(|_| ProgramError::new("the program's output is not UTF-8"))
}

/// The start of a long output, for error messages.
fn excerpt(text: &str) -> String {
    shorten(text, 400)
}

/// The type of a value with its article, for messages: `an array`, `a string`, `null`.
fn with_article(value: &serde_json::Value) -> String {
    match crate::document::type_name(value) {
        "null" => "null".to_string(),
        name @ ("array" | "object") => format!("an {name}"),
        name => format!("a {name}"),
    }
}

/// The verdict of a validate program.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProgramVerdict {
    /// Whether the object passes.
    pub valid: bool,
    /// Why not, when it does not.
    pub reason: String,
    /// Warnings, whatever the verdict.
    pub warnings: Vec<String>,
}

/// Reads an override program's output: a list of operations or `{patches: [...]}`.
pub fn patch_from_output(
    output: Option<serde_json::Value>,
) -> Result<json_patch::Patch, ProgramError> {
    let list = match output {
        None => return Ok(json_patch::Patch(Vec::new())),
        Some(serde_json::Value::Object(mut map))
            if map.contains_key("patches") && map.len() == 1 =>
        {
            map.remove("patches").unwrap_or(serde_json::Value::Null)
        }
        Some(other) => other,
    };
    let list = match list {
        serde_json::Value::Null => return Ok(json_patch::Patch(Vec::new())),
        serde_json::Value::Array(items) => items,
        other => {
            return Err(ProgramError::new(format!(
                "an override program renders a list of operations or {{patches: [...]}}, not {}",
                with_article(&other)
            )));
        }
    };
    let mut ops = Vec::with_capacity(list.len());
    for (i, item) in list.into_iter().enumerate() {
        // Name a bad pointer as such, with the hint of what was probably meant.
        for key in ["path", "from"] {
            if let Some(pointer) = item.get(key).and_then(serde_json::Value::as_str)
                && let Err(e) = crate::pointer::check(pointer)
            {
                return Err(ProgramError::new(format!("operation {i}: {key}: {e}")));
            }
        }
        let op: json_patch::PatchOperation = serde_json::from_value(item.clone()).map_err(|e| {
            ProgramError::new(format!(
                "operation {i} ({item}) is not an RFC 6902 operation: {e}"
            ))
        })?;
        if let Err(e) = crate::pointer::check(op.path().as_str()) {
            return Err(ProgramError::new(format!("operation {i}: {e}")));
        }
        ops.push(op);
    }
    Ok(json_patch::Patch(ops))
}

/// Reads a validate program's output: `{valid, reason, warnings}`; empty output is valid.
pub fn verdict_from_output(
    output: Option<serde_json::Value>,
) -> Result<ProgramVerdict, ProgramError> {
    let Some(value) = output else {
        return Ok(ProgramVerdict {
            valid: true,
            ..Default::default()
        });
    };
    let serde_json::Value::Object(map) = value else {
        return Err(ProgramError::new(format!(
            "a validate program renders {{valid, reason, warnings}}, not {}",
            with_article(&value)
        )));
    };
    for key in map.keys() {
        if !matches!(key.as_str(), "valid" | "reason" | "warnings") {
            return Err(ProgramError::new(format!(
                "unknown key `{key}` in the verdict (expected valid, reason, warnings)"
            )));
        }
    }
    let valid = match map.get("valid") {
        Some(serde_json::Value::Bool(b)) => *b,
        Some(other) => {
            return Err(ProgramError::new(format!(
                "`valid` must be true or false, not {other}"
            )));
        }
        None => return Err(ProgramError::new("the verdict has no `valid`")),
    };
    let reason = match map.get("reason") {
        None | Some(serde_json::Value::Null) => String::new(),
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    };
    let warnings = match map.get("warnings") {
        None | Some(serde_json::Value::Null) => Vec::new(),
        Some(serde_json::Value::Array(items)) => items
            .iter()
            .map(|w| {
                w.as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| w.to_string())
            })
            .collect(),
        Some(other) => {
            return Err(ProgramError::new(format!(
                "`warnings` must be a list, not {other}"
            )));
        }
    };
    Ok(ProgramVerdict {
        valid,
        reason,
        warnings,
    })
}

/// A step from a JSON node to one of its children.
#[derive(Clone, Debug)]
enum Step {
    Key(String),
    Index(usize),
}

/// A JSON document (or a node inside it) as programs see it, without converting it: children
/// are read on access, and helpers get the JSON back as it is.
#[derive(Debug)]
struct JsonNode {
    root: Arc<serde_json::Value>,
    path: Vec<Step>,
}

static JSON_NULL: serde_json::Value = serde_json::Value::Null;

impl JsonNode {
    /// The node this wrapper stands for.
    fn node(&self) -> &serde_json::Value {
        let mut node: &serde_json::Value = &self.root;
        for step in &self.path {
            let next = match step {
                Step::Key(k) => node.get(k.as_str()),
                Step::Index(i) => node.get(*i),
            };
            match next {
                Some(n) => node = n,
                None => return &JSON_NULL,
            }
        }
        node
    }

    fn child(&self, step: Step, value: &serde_json::Value) -> Value {
        match value {
            serde_json::Value::Object(_) | serde_json::Value::Array(_) => {
                let mut path = self.path.clone();
                path.push(step);
                Value::from_object(JsonNode {
                    root: self.root.clone(),
                    path,
                })
            }
            scalar => json_scalar(scalar),
        }
    }
}

fn json_scalar(value: &serde_json::Value) -> Value {
    match value {
        serde_json::Value::Null => Value::from(()),
        serde_json::Value::Bool(b) => Value::from(*b),
        serde_json::Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Value::from(i),
            (None, Some(u)) => Value::from(u),
            _ => Value::from(n.as_f64().unwrap_or(f64::NAN)),
        },
        serde_json::Value::String(s) => Value::from(s.as_str()),
        other => Value::from(Serde(other.clone())),
    }
}

impl minijinja::value::Object for JsonNode {
    fn repr(self: &Arc<Self>) -> minijinja::value::ObjectRepr {
        match self.node() {
            serde_json::Value::Array(_) => minijinja::value::ObjectRepr::Seq,
            _ => minijinja::value::ObjectRepr::Map,
        }
    }

    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        match self.node() {
            serde_json::Value::Object(map) => {
                let k = key.as_str()?;
                map.get(k).map(|v| self.child(Step::Key(k.to_string()), v))
            }
            serde_json::Value::Array(items) => {
                let i = key.as_usize()?;
                items.get(i).map(|v| self.child(Step::Index(i), v))
            }
            _ => None,
        }
    }

    fn enumerate(self: &Arc<Self>) -> minijinja::value::Enumerator {
        match self.node() {
            serde_json::Value::Object(map) => minijinja::value::Enumerator::Values(
                map.keys().map(|k| Value::from(k.as_str())).collect(),
            ),
            serde_json::Value::Array(items) => minijinja::value::Enumerator::Seq(items.len()),
            _ => minijinja::value::Enumerator::Empty,
        }
    }

    fn enumerator_len(self: &Arc<Self>) -> Option<usize> {
        match self.node() {
            serde_json::Value::Object(map) => Some(map.len()),
            serde_json::Value::Array(items) => Some(items.len()),
            _ => Some(0),
        }
    }
}

/// A JSON document as a program value, read lazily (no up-front conversion).
pub fn json_value(document: Arc<serde_json::Value>) -> Value {
    match &*document {
        serde_json::Value::Object(_) | serde_json::Value::Array(_) => {
            Value::from_object(JsonNode {
                root: document,
                path: Vec::new(),
            })
        }
        scalar => json_scalar(scalar),
    }
}
