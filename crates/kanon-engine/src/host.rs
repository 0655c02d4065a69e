//! Where the programs policy authors write run.
//!
//! A hand-written `program` is code from whoever may write policies. Its fuel, recursion and
//! output bounds hold inside the program runtime, but the runtime has operations it does not
//! charge for (a lazy list concatenated with itself 33 times is copied into one list of 2^33
//! items: see SECURITY.md), and nothing inside a process can stop a thread that allocates
//! without end. So the engine hands such programs to a [`ProgramHost`] when the [`Evaluation`]
//! it evaluates in has one ([`Evaluation::with_programs`]): `kanon serve`, `kanon apply` and
//! `kanon test` run them in separate, memory-limited worker processes that they kill at the
//! review's deadline. Without a host (`--program-workers 0`, the engine's tests) programs run
//! in the calling thread. So does a contained program (held to the language of texts but for
//! `{% if %}` branches, see [`crate::program::Program::contained`]), whose reads are charged as
//! a text's: only one that reads more than a text may is handed to the host.
//!
//! The host sees the program's source and a [`ProgramInput`]: the variables the program reads,
//! as plain JSON, so that a worker builds exactly the context the engine would have built.
//!
//! [`Evaluation`]: crate::evaluation::Evaluation
//! [`Evaluation::with_programs`]: crate::evaluation::Evaluation::with_programs

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::program::{Program, ProgramError, ProgramKind, ProgramLimits};
use crate::rule::{Shared, Variables};

/// What [`ProgramHost::run`] returns: the program's output document (`None`: empty output).
pub type ProgramFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Option<Value>, ProgramError>> + Send + 'a>>;

/// Runs hand-written programs somewhere other than the calling thread.
pub trait ProgramHost: Send + Sync {
    /// Runs `program` on `input` within the program's limits (and whatever bounds the host
    /// adds: memory, a deadline), as [`Program::run`] would. A failure names its cause
    /// (`the program ran out of memory`, `... did not finish before the review's deadline`).
    fn run<'a>(&'a self, program: &'a Program, input: ProgramInput) -> ProgramFuture<'a>;
}

/// The variables a rule program sees, as JSON: `object`, `oldObject`, `operation`, `request`,
/// `namespaceObject` and `refs`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProgramInput {
    /// The object as it stands (after earlier policies' changes).
    pub object: Value,
    /// The previous object (UPDATE, DELETE), else `None`.
    pub old_object: Option<Value>,
    /// `CREATE`, `UPDATE`, `DELETE` or `CONNECT`.
    pub operation: String,
    /// The request's fields (uid, namespace, name, kind, resource, subResource, userInfo,
    /// dryRun).
    pub request: Value,
    /// The object's namespace, when known.
    pub namespace_object: Option<Value>,
    /// The rule's resolved references, by name.
    pub refs: Map<String, Value>,
}

impl ProgramInput {
    /// The program context these variables make: the same the engine builds in process.
    pub fn context(self) -> minijinja::Value {
        // The documents move into the context whole: nothing is copied.
        let object = Arc::new(self.object);
        let old_object = self.old_object.map(Arc::new);
        crate::program::context(Variables {
            object: &object,
            old_object: old_object.as_deref(),
            operation: &self.operation,
            request: &self.request,
            namespace_object: self.namespace_object.map(Arc::new),
            refs: self.refs,
            shared: Shared {
                object: Some(object.clone()),
                old_object: old_object.clone(),
                request: None,
            },
        })
    }
}

impl From<Variables<'_>> for ProgramInput {
    fn from(variables: Variables<'_>) -> Self {
        ProgramInput {
            object: variables.object.clone(),
            old_object: variables.old_object.cloned(),
            operation: variables.operation.to_string(),
            request: variables.request.clone(),
            namespace_object: variables.namespace_object.as_deref().cloned(),
            refs: variables.refs,
        }
    }
}

/// One program to run, as a host passes it to a worker.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ProgramCall {
    /// The program's source.
    pub source: String,
    /// What it produces.
    pub kind: ProgramKind,
    /// Its bounds.
    pub limits: ProgramLimits,
    /// Its variables.
    pub input: ProgramInput,
}

impl ProgramCall {
    /// The call for `program` on `input`.
    pub fn new(program: &Program, input: ProgramInput) -> Self {
        ProgramCall {
            source: program.source().to_string(),
            kind: program.kind(),
            limits: *program.limits(),
            input,
        }
    }

    /// Runs the call in this thread, compiling the program (a worker keeps compiled programs
    /// by source: see [`ProgramCall::run_compiled`]).
    pub fn run(self) -> ProgramReply {
        match Program::compile(&self.source, self.kind, self.limits) {
            Ok(program) => ProgramCall::run_compiled(&program, self.input),
            Err(e) => ProgramReply::Failed(e.message),
        }
    }

    /// Runs `program` (compiled from this call's source) on `input`.
    pub fn run_compiled(program: &Program, input: ProgramInput) -> ProgramReply {
        match program.run(&input.context()) {
            Ok(output) => ProgramReply::Output(output),
            Err(e) => ProgramReply::Failed(e.message),
        }
    }
}

/// What a worker answers to a [`ProgramCall`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ProgramReply {
    /// The output document (`None`: empty output).
    Output(Option<Value>),
    /// Why the program failed.
    Failed(String),
}

impl From<ProgramReply> for Result<Option<Value>, ProgramError> {
    fn from(reply: ProgramReply) -> Self {
        match reply {
            ProgramReply::Output(output) => Ok(output),
            ProgramReply::Failed(message) => Err(ProgramError::new(message)),
        }
    }
}
