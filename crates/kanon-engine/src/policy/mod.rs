//! Policy objects: decoding (strict: unknown fields and kinitiras leftovers are errors) and
//! compiling into the checked form the index and evaluation use.

mod compile;
mod compiled;
mod object;
mod operations;
mod reads;

pub use compile::{compile, compile_with, kinds_warnings};
pub use compiled::{
    Compiled, CompiledOverrideRule, CompiledPolicy, CompiledValidateRule, PolicyRules,
};
pub use object::{PolicyId, PolicyObject, policy_kind_of};
pub(crate) use object::{decode_reporting_unknown, ignored_path};
pub use operations::OperationSet;
pub(crate) use reads::read_by;
