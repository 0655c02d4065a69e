//! CEL (the Common Expression Language) as kube-apiserver 1.35 speaks it.
//!
//! An [`Env`] holds the declarations an expression may use (variables, functions, types); it
//! compiles a source once into a [`Program`] (parse, expand macros, check, plan), which is then
//! evaluated any number of times over borrowed JSON, bounded by a [`Budget`] of cost units and an
//! optional interrupt (the caller's deadline). The crate never touches the clock or the network.

pub mod ast;
pub mod check;
pub mod env;
pub mod error;
pub mod eval;
mod lexer;
pub mod library;
mod macros;
mod options;
pub mod parser;
mod re2;
pub mod stdlib;
pub mod time;
pub mod types;
pub mod value;

pub use check::{Checked, ObjectTypes};
pub use env::{Env, Overload, Signature};
pub use error::{CompileError, EvalError, Issue};
pub use eval::{Activation, Budget, Ctx, Program, Values};
pub use parser::{ParseOptions, parse};
pub use time::{Duration, Timestamp};
pub use types::Type;
pub use value::{Concat, Key, List, Map, Object, Str, Value};
