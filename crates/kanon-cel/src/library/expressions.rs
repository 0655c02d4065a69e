//! The libraries through whole expressions, compiled in [`crate::Env::kubernetes`]; expected
//! values and messages are kube-apiserver 1.35's for the same expressions.

use crate::budget::Budget;
use crate::env::Env;
use crate::value::Value;

/// Compiles and evaluates `source`; its value's text or its error's text.
fn run(source: &str) -> Result<String, String> {
    let env = Env::kubernetes();
    let program = env
        .compile(source)
        .map_err(|error| format!("compile: {error}"))?;
    let mut budget = Budget::unlimited();
    program
        .eval(&[], &mut budget)
        .map(|value| match value {
            Value::String(text) => text.as_str().to_owned(),
            other => other.to_string(),
        })
        .map_err(|error| error.to_string())
}

#[track_caller]
fn value(source: &str, expected: &str) {
    assert_eq!(run(source), Ok(expected.to_owned()), "{source}");
}

#[track_caller]
fn error(source: &str, expected: &str) {
    assert_eq!(run(source), Err(expected.to_owned()), "{source}");
}

#[test]
fn kubernetes_libraries_in_expressions() {
    value("'a 1 b 2'.find('[0-9]') == '1'", "true");
    value("isURL('http://example.com')", "true");
    value("[1, 2, 3].indexOf(2) == 1", "true");
    value("[3, 1, 2].sort() == [1, 2, 3]", "true");
    value("lists.range(3)", "[0, 1, 2]");
    value("sets.contains([1, 2, 3], [2])", "true");
    value("quantity('200M') == quantity('0.2G')", "true");
    value(
        "quantity('50k').add(20).sub(quantity('100k')).asInteger()",
        "-49980",
    );
    value("sign(quantity('-1'))", "-1");
    value("ip('10.0.0.1').family()", "4");
    value("cidr('10.0.0.0/8').containsIP(ip('10.1.2.3'))", "true");
    value("string(cidr('192.168.0.1/24').masked())", "192.168.0.0/24");
    value(
        "semver('1.2.3-alpha.1') == semver('1.2.3-alpha.1+build')",
        "true",
    );
    value("semver('v01.2', true).minor()", "2");
    value("url('https://example.com:80/').getPort()", "80");
    value(
        "format.dns1123Label().validate('my-name').hasValue()",
        "false",
    );
    value(
        "'%d items cost %.2f'.format([3, 1234.5])",
        "3 items cost 1,234.50",
    );
    value("'a,b,c'.split(',').join('-')", "a-b-c");
    value("[1, 2].first().value()", "1");
    error(
        "ip('1.2.3')",
        "IP Address \"1.2.3\" parse error during conversion from string: ParseAddr(\"1.2.3\"): IPv4 address too short",
    );
    error("quantity('10Mm')", "unable to parse quantity's suffix");
    error("[].min()", "min called on empty list");
}

#[test]
fn sort_by_uses_the_associated_keys() {
    value("[{'n': 2}, {'n': 1}].sortBy(e, e.n).map(e, e.n)", "[1, 2]");
}
