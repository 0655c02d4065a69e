//! cel-spec's standard definitions, and [`Env::standard`], the environment that holds them.

use crate::env::Env;

mod conversions;
mod operators;
mod strings;
mod time;

pub(crate) use operators::size_of;

impl Env {
    /// cel-spec's standard definitions: operators, conversions, `size`, `matches`, string
    /// tests, durations and timestamps.
    pub fn standard() -> Env {
        let mut env = Env::empty();
        install(&mut env);
        env
    }
}

fn install(env: &mut Env) {
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
