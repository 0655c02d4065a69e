//! A CEL expression fuzzed through kube-apiserver's environment: parsed, checked, planned and
//! evaluated over a Pod with a small cost budget (and unchecked as well). Nothing may panic or
//! overflow the stack, whatever the text; every failure must be an error value.

#![no_main]

use std::sync::LazyLock;

use kanon_cel::{Budget, Env, Type, Value};
use libfuzzer_sys::fuzz_target;

static ENV: LazyLock<Env> = LazyLock::new(|| {
    let mut env = Env::kubernetes();
    env.declare_variable("object", Type::Dyn);
    env.declare_variable("oldObject", Type::Dyn);
    env
});
static POD: LazyLock<serde_json::Value> = LazyLock::new(kanon_fuzz::web_pod);

fuzz_target!(|data: &[u8]| {
    let Ok(source) = std::str::from_utf8(data) else {
        return;
    };
    let variables = [Value::from_json(&POD), Value::Null];
    if let Ok(program) = ENV.compile(source) {
        let _ = program.eval(&variables, &mut Budget::new(100_000));
    }
    if let Ok(program) = ENV.compile_unchecked(source) {
        let _ = program.eval(&variables, &mut Budget::new(100_000));
    }
});
