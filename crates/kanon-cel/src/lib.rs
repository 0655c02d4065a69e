//! CEL (the Common Expression Language) as kube-apiserver 1.35 speaks it.
//!
//! An [`Env`] holds the declarations an expression may use (variables, functions, types); it
//! compiles a source once into a [`Program`] (parse, expand macros, check, plan), which is then
//! evaluated any number of times over borrowed JSON, bounded by a [`Budget`] of cost units and an
//! optional interrupt (the caller's deadline). The crate never touches the clock or the network.

pub mod ast;
mod budget;
pub mod check;
mod compile;
pub mod composition;
pub mod env;
pub mod error;
pub mod eval;
mod fields;
mod format_clauses;
mod function;
mod lexer;
pub mod library;
mod macros;
mod options;
pub mod parser;
mod plan;
mod program;
mod quote;
mod re2;
pub mod stdlib;
pub mod time;
pub mod types;
mod validate;
pub mod value;

pub use budget::Budget;
pub use check::Checked;
pub use env::{Env, ObjectTypes};
pub use error::{CompileError, EvalError, Issue};
pub use eval::{Activation, Values};
pub use fields::FieldsRead;
pub use function::{Ctx, Overload, Signature};
pub use parser::{ParseOptions, parse};
pub use program::Program;
pub use quote::go_quote;
pub use time::{Duration, Timestamp};
pub use types::Type;
pub use value::{Concat, Key, List, Map, Object, Str, Value};
