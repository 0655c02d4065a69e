//! Cases generated systematically: operators and functions crossed with edge-case arguments,
//! where writing them by hand would miss combinations. Their categories start with `gen:`.

use crate::corpus::{Case, NO_VARIABLES};

const INTS: [&str; 6] = [
    "0",
    "1",
    "-1",
    "7",
    "9223372036854775807",
    "-9223372036854775808",
];
const UINTS: [&str; 4] = ["0u", "1u", "7u", "18446744073709551615u"];
const DOUBLES: [&str; 6] = ["0.0", "-0.0", "1.5", "-2.5", "1e308", "double('NaN')"];
const ARITHMETIC: [&str; 5] = ["+", "-", "*", "/", "%"];

/// Numbers of every numeric type around the edges where they compare differently.
const MIXED_NUMBERS: [&str; 9] = [
    "1",
    "1u",
    "1.0",
    "-1",
    "2.5",
    "9223372036854775807",
    "18446744073709551615u",
    "9223372036854775808.0",
    "double('NaN')",
];
const COMPARISONS: [&str; 4] = ["<", "<=", "==", "!="];

const STRINGS: [&str; 6] = [
    "''",
    "'abc'",
    "'héllo wörld'",
    "'  a b \\t'",
    "'ÀÉÎ ß'",
    "'a,b,,c'",
];
const STRING_CALLS: [&str; 21] = [
    "charAt(0)",
    "charAt(3)",
    "charAt(-1)",
    "indexOf('l')",
    "indexOf('')",
    "indexOf('b', 2)",
    "indexOf('x', 9)",
    "lastIndexOf('o')",
    "lastIndexOf('', 1)",
    "lowerAscii()",
    "upperAscii()",
    "replace('l', 'L')",
    "replace('', '_')",
    "replace('b', 'B', 1)",
    "split(',')",
    "split('', 3)",
    "substring(1)",
    "substring(1, 3)",
    "substring(2, 1)",
    "trim()",
    "size()",
];

const CONVERSIONS: [&str; 10] = [
    "int",
    "uint",
    "double",
    "string",
    "bytes",
    "bool",
    "duration",
    "timestamp",
    "type",
    "dyn",
];
const CONVERTED: [&str; 22] = [
    "1",
    "-1",
    "1u",
    "1.5",
    "-1.5",
    "1e19",
    "-9.3e18",
    "'12'",
    "'-3'",
    "'1.5'",
    "'abc'",
    "'true'",
    "'1h1m'",
    "'2023-06-01T12:00:00Z'",
    "b'abc'",
    "true",
    "null",
    "duration('90s')",
    "timestamp('2023-01-01T00:00:00Z')",
    "[1]",
    "double('Infinity')",
    "9223372036854775807",
];

const LISTS: [&str; 7] = [
    "[]",
    "[1, 2, 3]",
    "[3, 1, 2, 1]",
    "['b', 'a', 'b']",
    "[1.5, -0.5]",
    "[[1], [2, 3]]",
    "[duration('1s'), duration('-1s')]",
];
const LIST_CALLS: [&str; 17] = [
    "isSorted()",
    "sum()",
    "min()",
    "max()",
    "indexOf(1)",
    "lastIndexOf(1)",
    "slice(0, 1)",
    "slice(1, 5)",
    "flatten()",
    "distinct()",
    "reverse()",
    "sort()",
    "size()",
    "first()",
    "last()",
    "exists(x, x == 1)",
    "map(x, [x])",
];

const SET_LISTS: [&str; 5] = ["[]", "[1]", "[1, 2]", "[2, 1, 2]", "[1.0, 3u]"];
const SET_FUNCTIONS: [&str; 3] = ["sets.contains", "sets.equivalent", "sets.intersects"];

pub fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    let mut add = |category: &str, expr: String| {
        cases.push(Case::new(category, NO_VARIABLES, &expr));
    };
    for values in [&INTS[..], &UINTS[..], &DOUBLES[..]] {
        for a in values {
            for b in values {
                for op in ARITHMETIC {
                    add("gen: arithmetic", format!("{a} {op} {b}"));
                }
            }
        }
    }
    for a in MIXED_NUMBERS {
        for b in MIXED_NUMBERS {
            for op in COMPARISONS {
                add("gen: numeric comparison", format!("{a} {op} {b}"));
            }
            // Through dyn, where equality is heterogeneous at run time.
            add("gen: numeric comparison", format!("dyn({a}) == dyn({b})"));
        }
    }
    for receiver in STRINGS {
        for call in STRING_CALLS {
            add("gen: strings", format!("{receiver}.{call}"));
        }
        add("gen: strings", format!("strings.quote({receiver})"));
    }
    for function in CONVERSIONS {
        for value in CONVERTED {
            add("gen: conversions", format!("{function}({value})"));
        }
    }
    for receiver in LISTS {
        for call in LIST_CALLS {
            add("gen: lists", format!("{receiver}.{call}"));
        }
    }
    for function in SET_FUNCTIONS {
        for a in SET_LISTS {
            for b in SET_LISTS {
                add("gen: sets", format!("{function}({a}, {b})"));
            }
        }
    }
    cases
}
