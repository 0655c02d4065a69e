//! cel-spec's standard definitions.

use crate::env::Env;

mod conversions;
mod operators;
mod strings;
mod time;

pub(crate) use conversions::format_double;
pub(crate) use operators::{map_insert_owned, size_of};

pub(crate) fn install(env: &mut Env) {
    operators::install(env);
    operators::install_planned(env);
    conversions::install(env);
    strings::install(env);
    time::install(env);
}

/// cel-go's cost of traversing `size` characters: a tenth of a unit each, rounded up.
pub(crate) fn string_cost(size: u64) -> u64 {
    size.div_ceil(10)
}
