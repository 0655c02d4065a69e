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
    for (function, order) in CEL_GO_ORDER {
        env.order_overloads(function, order);
    }
}

/// The order cel-go's checker tries the standard overloads in (its declarations'), where it
/// is not the order they are declared in here. The checker keeps the type bindings of the first
/// overload that fits, so where an argument's type is still free (`[].map(x, x * y)`, an
/// element of a list derived from JSON) this order decides the expression's type and the one
/// overload it runs. tests/oracle.rs holds every function to cel-go's order.
const CEL_GO_ORDER: &[(&str, &[&str])] = &[
    ("-_", &["negate_double", "negate_int64"]),
    (
        "_*_",
        &["multiply_double", "multiply_int64", "multiply_uint64"],
    ),
    (
        "_+_",
        &[
            "add_bytes",
            "add_double",
            "add_duration_duration",
            "add_duration_timestamp",
            "add_timestamp_duration",
            "add_int64",
            "add_list",
            "add_string",
            "add_uint64",
        ],
    ),
    (
        "_-_",
        &[
            "subtract_double",
            "subtract_duration_duration",
            "subtract_int64",
            "subtract_timestamp_duration",
            "subtract_timestamp_timestamp",
            "subtract_uint64",
        ],
    ),
    ("_/_", &["divide_double", "divide_int64", "divide_uint64"]),
    ("_<_", &comparisons::LESS),
    ("_<=_", &comparisons::LESS_EQUALS),
    ("_>_", &comparisons::GREATER),
    ("_>=_", &comparisons::GREATER_EQUALS),
    (
        "double",
        &[
            "double_to_double",
            "int64_to_double",
            "string_to_double",
            "uint64_to_double",
        ],
    ),
    (
        "int",
        &[
            "int64_to_int64",
            "double_to_int64",
            "duration_to_int64",
            "string_to_int64",
            "timestamp_to_int64",
            "uint64_to_int64",
        ],
    ),
    (
        "size",
        &[
            "size_bytes",
            "bytes_size",
            "size_list",
            "list_size",
            "size_map",
            "map_size",
            "size_string",
            "string_size",
        ],
    ),
    (
        "string",
        &[
            "string_to_string",
            "bool_to_string",
            "bytes_to_string",
            "double_to_string",
            "duration_to_string",
            "int64_to_string",
            "timestamp_to_string",
            "uint64_to_string",
        ],
    ),
    (
        "uint",
        &[
            "uint64_to_uint64",
            "double_to_uint64",
            "int64_to_uint64",
            "string_to_uint64",
        ],
    ),
];

/// The comparisons' order in cel-go: by the left operand's type, then the right's.
mod comparisons {
    macro_rules! order {
        ($name:ident, $prefix:literal) => {
            pub(super) const $name: [&str; 14] = [
                concat!($prefix, "_bool"),
                concat!($prefix, "_int64"),
                concat!($prefix, "_int64_double"),
                concat!($prefix, "_int64_uint64"),
                concat!($prefix, "_uint64"),
                concat!($prefix, "_uint64_double"),
                concat!($prefix, "_uint64_int64"),
                concat!($prefix, "_double"),
                concat!($prefix, "_double_int64"),
                concat!($prefix, "_double_uint64"),
                concat!($prefix, "_string"),
                concat!($prefix, "_bytes"),
                concat!($prefix, "_timestamp"),
                concat!($prefix, "_duration"),
            ];
        };
    }
    order!(LESS, "less");
    order!(LESS_EQUALS, "less_equals");
    order!(GREATER, "greater");
    order!(GREATER_EQUALS, "greater_equals");
}

/// cel-go's cost of traversing `size` characters: a tenth of a unit each, rounded up.
pub(crate) fn string_cost(size: u64) -> u64 {
    size.div_ceil(10)
}
