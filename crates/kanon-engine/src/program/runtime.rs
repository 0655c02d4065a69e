//! The program runtime: a minijinja environment per program, in a sandbox with no loader, an
//! instruction budget (fuel), a recursion limit and an output bound.

use std::io::Write;
use std::sync::{Arc, OnceLock};

use minijinja::{Environment, Error, ErrorKind, UndefinedBehavior, Value};

use super::error::{ProgramError, shorten};
use super::library::add_helpers;

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
    /// Text: a reference's field with placeholders (a name, a URL, a query value, a body).
    Reference,
}

impl ProgramKind {
    /// Whether programs of this kind are placeholder texts, rendered in kanon's own process
    /// and held to the language of texts (see [`super::text`]).
    pub fn is_text(self) -> bool {
        matches!(self, ProgramKind::Message | ProgramKind::Reference)
    }
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
        if kind.is_text() {
            super::text::check(&source)?;
        }
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
        let env = self.env()?;
        self.metered(|| render_in(env, &self.source, self.limits, context))
    }

    /// Runs `render`, charging a text's reads against its budget (see [`super::meter`]).
    fn metered(
        &self,
        render: impl FnOnce() -> Result<String, ProgramError>,
    ) -> Result<String, ProgramError> {
        if !self.kind.is_text() {
            return render();
        }
        super::meter::metered(super::text::TEXT_READ_BYTES, render).map_err(|e| match e {
            super::meter::TextError::Failed(e) => e,
            super::meter::TextError::OverBudget => ProgramError::new(format!(
                "the text reads more than {} KiB of the request's values (each value it names \
                 counts, every time it names it)",
                super::text::TEXT_READ_BYTES / 1024
            )),
        })
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
        self.metered(|| render_in(&env, &self.source, self.limits, context))
    }

    /// Renders the program and parses its output as a document (YAML or JSON); `None` when the
    /// output is empty or only whitespace.
    pub fn run(&self, context: &Value) -> Result<Option<serde_json::Value>, ProgramError> {
        document(&self.render(context)?)
    }

    /// Whether this program is held to the language of texts but for `{% if %}` branches (see
    /// [`super::text`]), so that [`Program::run_metered`] may run it in kanon's own process.
    /// It parses the source again: ask once, when the policy compiles.
    pub fn contained(&self) -> bool {
        super::text::contained(&self.source)
    }

    /// Runs the program as [`Program::run`] does, with every read of the request's values
    /// charged against [`super::TEXT_READ_BYTES`], as a text's are: for a [`contained`] program,
    /// whose context is built by [`super::text_context`]. A run that reads more gives
    /// [`Metered::ReadTooMuch`], not an error: the caller runs it again where it may read all
    /// it wants (a worker process), so the bound never changes a result.
    ///
    /// [`contained`]: Program::contained
    pub fn run_metered(&self, context: &Value) -> Metered {
        let env = match self.env() {
            Ok(env) => env,
            Err(e) => return Metered::Ran(Err(e)),
        };
        let rendered = super::meter::metered(super::TEXT_READ_BYTES, || {
            render_in(env, &self.source, self.limits, context)
        });
        match rendered {
            Ok(text) => Metered::Ran(document(&text)),
            Err(super::meter::TextError::Failed(e)) => Metered::Ran(Err(e)),
            Err(super::meter::TextError::OverBudget) => Metered::ReadTooMuch,
        }
    }
}

/// How [`Program::run_metered`] ended.
#[derive(Debug)]
pub enum Metered {
    /// It ran within its reads: what [`Program::run`] gives.
    Ran(Result<Option<serde_json::Value>, ProgramError>),
    /// It read more than a text may; run it where reads are not charged.
    ReadTooMuch,
}

/// A program's output parsed as a document (YAML or JSON); `None` when it is empty or only
/// whitespace.
fn document(text: &str) -> Result<Option<serde_json::Value>, ProgramError> {
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
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(text).map_err(|e| {
        let e = e.without_snippet().to_string();
        ProgramError::new(format!(
            "the output is not YAML or JSON: {e}\noutput:\n{}",
            excerpt(text)
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
