//! Expressions evaluated end to end (parse, check, plan, evaluate) over JSON objects, with
//! their costs and bounds.

use std::cell::Cell;

use kanon_cel::{Budget, Env, EvalError, Type, Value};
use serde_json::json;

fn env_with_object() -> Env {
    let mut env = Env::standard();
    env.set_fold_constants(true);
    env.declare_variable("object", Type::Dyn);
    env
}

fn eval_on(expression: &str, object: &serde_json::Value) -> Result<String, EvalError> {
    let env = env_with_object();
    let program = env
        .compile(expression)
        .unwrap_or_else(|error| panic!("{expression}: {error}"));
    let value = program.eval(&[Value::from_json(object)], &mut Budget::new(1_000_000))?;
    Ok(value.to_string())
}

fn pod(containers: serde_json::Value) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"}, "spec": {"containers": containers}})
}

const MEMORY_LIMIT: &str = "object.spec.containers.all(c, has(c.resources) && has(c.resources.limits) && 'memory' in c.resources.limits)";

#[test]
fn every_container_must_have_a_memory_limit() {
    let with_limits = pod(json!([
        {"name": "a", "resources": {"limits": {"memory": "64Mi"}}},
        {"name": "b", "resources": {"limits": {"memory": "1Gi", "cpu": "1"}}}
    ]));
    assert_eq!(eval_on(MEMORY_LIMIT, &with_limits).unwrap(), "true");
    let one_without = pod(json!([
        {"name": "a", "resources": {"limits": {"memory": "64Mi"}}},
        {"name": "b", "resources": {"requests": {"memory": "1Gi"}}}
    ]));
    assert_eq!(eval_on(MEMORY_LIMIT, &one_without).unwrap(), "false");
    let no_resources = pod(json!([{"name": "a"}]));
    assert_eq!(eval_on(MEMORY_LIMIT, &no_resources).unwrap(), "false");
}

#[test]
fn arithmetic_and_comparison_follow_cel_spec() {
    let object = json!({});
    let cases = [
        ("1 + 2 * 3", "7"),
        ("7 / 2", "3"),
        ("-7 % 3", "-1"),
        ("2u + 3u", "5u"),
        ("1.5 * 2.0", "3"),
        ("'ab' + 'cd'", "\"abcd\""),
        ("[1, 2] + [3]", "[1, 2, 3]"),
        ("1 < 2u", "true"),
        ("dyn(1) == 1.0", "true"),
        ("2.5 > 2", "true"),
        ("[1, 2] == [1, 2]", "true"),
        ("{'a': 1} == {'a': 1}", "true"),
        ("dyn(1) == 'a'", "false"),
        ("true ? 'yes' : 'no'", "\"yes\""),
        ("size('héllo')", "5"),
        ("'héllo'.size()", "5"),
        ("string(1.5)", "\"1.5\""),
        ("int('42')", "42"),
        ("double(3)", "3"),
        ("type(1) == int", "true"),
        ("type([]) == list", "true"),
        (
            "'abc'.startsWith('a') && 'abc'.endsWith('c') && 'abc'.contains('b')",
            "true",
        ),
        ("'abc'.matches('^a.c$')", "true"),
        ("2 in [1, 2, 3]", "true"),
        ("'a' in {'a': 1}", "true"),
        ("[1, 2, 3].map(x, x * 2)", "[2, 4, 6]"),
        ("[1, 2, 3].filter(x, x > 1)", "[2, 3]"),
        ("[1, 2, 3].exists_one(x, x == 2)", "true"),
        ("{'a': 1, 'b': 2}.all(k, k != 'c')", "true"),
    ];
    for (expression, expected) in cases {
        assert_eq!(
            eval_on(expression, &object).unwrap(),
            expected,
            "{expression}"
        );
    }
}

#[test]
fn errors_are_worded_as_cel_go_words_them() {
    let object = json!({"spec": {}});
    let cases = [
        ("1 / 0", "division by zero"),
        ("1 % 0", "modulus by zero"),
        ("9223372036854775807 + 1", "integer overflow"),
        ("object.spec.missing", "no such key: missing"),
        ("[1][3]", "index out of bounds: 3"),
        (
            "int('a' + 'bc')",
            "type conversion error from 'string' to 'int'",
        ),
    ];
    for (expression, expected) in cases {
        let error = eval_on(expression, &object).expect_err(expression);
        assert_eq!(error.to_string(), expected, "{expression}");
    }
}

#[test]
fn logical_operators_absorb_errors_when_the_other_side_decides() {
    let object = json!({"spec": {}});
    assert_eq!(
        eval_on("object.spec.missing == 1 || true", &object).unwrap(),
        "true"
    );
    assert_eq!(
        eval_on("false && object.spec.missing == 1", &object).unwrap(),
        "false"
    );
    assert_eq!(
        eval_on("object.spec.missing == 1 && false", &object).unwrap(),
        "false"
    );
    assert!(eval_on("object.spec.missing == 1 || false", &object).is_err());
    // In a comprehension, an error in one element does not decide `all` when another is false.
    assert_eq!(
        eval_on("[0, -1].all(x, 1 / x > 0)", &object).unwrap(),
        "false"
    );
    assert!(eval_on("[0, 1].all(x, 1 / x > 0)", &object).is_err());
    assert!(eval_on("[0, 1].exists(x, 1 / x > 5)", &object).is_err());
}

#[test]
fn compile_errors_name_the_place_and_the_problem() {
    let env = env_with_object();
    let error = env.compile("objekt.spec").expect_err("undeclared");
    assert_eq!(
        error.to_string(),
        "ERROR: <input>:1:1: undeclared reference to 'objekt' (in container '')\n | objekt.spec\n | ^"
    );
    let error = env.compile("1 + 'a'").expect_err("no overload");
    assert!(
        error
            .to_string()
            .contains("found no matching overload for '_+_' applied to '(int, string)'"),
        "{error}"
    );
    let error = env.compile("'a'.frobnicate()").expect_err("no function");
    assert!(
        error
            .to_string()
            .contains("undeclared reference to 'frobnicate'"),
        "{error}"
    );
}

#[test]
fn constant_conversions_fail_when_compiled_where_constants_are_folded() {
    let env = env_with_object();
    let error = env.compile("int('abc')").expect_err("folded");
    assert!(
        error
            .to_string()
            .contains("type conversion error from 'string' to 'int'"),
        "{error}"
    );
    let plain = Env::standard();
    let program = plain.compile("int('abc')").expect("not folded");
    assert!(program.eval(&[], &mut Budget::unlimited()).is_err());
}

#[test]
fn the_checker_types_results() {
    let env = env_with_object();
    assert_eq!(env.compile("1 + 1").unwrap().result_type(), &Type::Int);
    assert_eq!(
        env.compile("[1, 2].map(x, x > 1)").unwrap().result_type(),
        &Type::list(Type::Bool)
    );
    assert_eq!(
        env.compile("object.spec.replicas").unwrap().result_type(),
        &Type::Dyn
    );
    assert_eq!(
        env.compile("object.spec.containers.all(c, has(c.name))")
            .unwrap()
            .result_type(),
        &Type::Bool
    );
    assert_eq!(
        env.compile("'a' + 'b'").unwrap().result_type(),
        &Type::String
    );
}

#[test]
fn a_list_doubled_in_a_loop_ends_at_its_cost_bound() {
    let env = Env::standard();
    // 2^40 elements if it ran: the meter must stop it long before memory grows.
    let source = "[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39]\
        .map(i, [1]).exists(l, [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40]\
        .map(j, [1,2,3,4,5,6,7,8,9,10]).map(x, x + x + x + x).size() < 0)";
    let program = env.compile(source).unwrap();
    let mut budget = Budget::new(1_000_000);
    let outcome = program.eval(&[], &mut budget);
    assert!(matches!(
        outcome,
        Ok(_) | Err(EvalError::CostLimitExceeded { .. })
    ));

    let nested = "[1,2,3,4,5,6,7,8,9,10].all(a, [1,2,3,4,5,6,7,8,9,10].all(b, [1,2,3,4,5,6,7,8,9,10].all(c, \
        [1,2,3,4,5,6,7,8,9,10].all(d, [1,2,3,4,5,6,7,8,9,10].all(e, [1,2,3,4,5,6,7,8,9,10].all(f, a + b + c + d + e + f > 0))))))";
    let program = env.compile(nested).unwrap();
    let mut budget = Budget::new(1_000_000);
    let error = program
        .eval(&[], &mut budget)
        .expect_err("a million iterations of six additions");
    assert_eq!(error, EvalError::CostLimitExceeded { limit: 1_000_000 });
    assert_eq!(
        error.to_string(),
        "operation cancelled: actual cost limit exceeded"
    );
}

#[test]
fn strings_grown_in_a_loop_are_bounded_by_cost() {
    let mut env = Env::standard();
    env.declare_variable("seed", Type::String);
    let program = env
        .compile("[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30].map(i, seed).exists(s, (s + s + s + s + s + s + s + s).size() < 0)")
        .unwrap();
    let seed = "x".repeat(100_000);
    let variables = [Value::string(seed.as_str())];
    let error = program
        .eval(&variables, &mut Budget::new(1_000_000))
        .expect_err("too costly");
    assert!(matches!(error, EvalError::CostLimitExceeded { .. }));
}

#[test]
fn the_interrupt_ends_a_long_comprehension() {
    let env = Env::standard();
    let program = env
        .compile("[1,2,3,4,5,6,7,8,9,10].all(a, [1,2,3,4,5,6,7,8,9,10].all(b, [1,2,3,4,5,6,7,8,9,10].all(c, a + b + c > 0)))")
        .unwrap();
    let polls = Cell::new(0);
    let interrupt = || {
        polls.set(polls.get() + 1);
        true
    };
    let mut budget = Budget::unlimited().with_interrupt(&interrupt);
    // Each inner loop has 10 iterations, so the 100th-iteration poll never comes: still true.
    assert_eq!(program.eval(&[], &mut budget).unwrap().to_string(), "true");

    let long = env.compile("[0, 1, 2, 3, 4, 5, 6, 7, 8, 9].map(x, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9].map(y, x * 10 + y)).all(row, row.all(v, v >= 0))").unwrap();
    let mut budget = Budget::unlimited().with_interrupt(&interrupt);
    assert!(long.eval(&[], &mut budget).is_ok());

    let hundred = (0..150)
        .map(|n| n.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let program = env.compile(&format!("[{hundred}].all(x, x >= 0)")).unwrap();
    let mut budget = Budget::unlimited().with_interrupt(&interrupt);
    assert!(matches!(
        program.eval(&[], &mut budget),
        Err(EvalError::Interrupted)
    ));
    assert!(polls.get() >= 1);
}

#[test]
fn costs_follow_the_apiservers_meter() {
    let mut env = Env::standard();
    env.set_fold_constants(true);
    env.declare_variable("object", Type::Dyn);
    let object = pod(json!([{"name": "a", "resources": {"limits": {"memory": "1Gi"}}}]));
    let cost = |expression: &str| {
        let program = env.compile(expression).unwrap();
        let mut budget = Budget::unlimited();
        program
            .eval(&[Value::from_json(&object)], &mut budget)
            .unwrap();
        budget.spent
    };
    // Constants cost nothing; an identifier and each select cost 1; a call 1.
    assert_eq!(cost("1"), 0);
    assert_eq!(cost("object"), 1);
    assert_eq!(cost("object.spec"), 2);
    assert_eq!(cost("1 + 1"), 1);
    // `has()` costs nothing of its own (kube-apiserver's PresenceTestHasCost(false)).
    assert_eq!(cost("has(object.spec)"), 1);
    // A list literal costs 10 to build, unless it is all constants (built once, when compiled).
    assert_eq!(cost("[object, 2]"), 11);
    assert_eq!(cost("[1, 2]"), 0);
    assert_eq!(cost("{'a': object}"), 31);
    // A chain of fields read from the JSON in place costs 1 a field, a presence test too.
    assert_eq!(cost("object.spec.containers[0].resources.limits.memory"), 7);
    assert_eq!(cost("has(object.spec.containers[0].resources.limits)"), 5);
    assert_eq!(cost("has(object.spec.nothing)"), 2);
    let program = env.compile("object.spec.nothing.deeper").unwrap();
    let mut budget = Budget::unlimited();
    let error = program
        .eval(&[Value::from_json(&object)], &mut budget)
        .unwrap_err();
    assert_eq!(error.to_string(), "no such key: nothing");
    assert_eq!(budget.spent, 3);
}

/// A struct literal of constants is built once, when compiled, but each evaluation is charged
/// what cel-go charges for building it (40 a struct, 10 a list around it), with constants
/// folded or not.
#[test]
fn prebuilt_literals_cost_what_building_them_costs() {
    for fold in [true, false] {
        let mut env = Env::kubernetes();
        env.set_fold_constants(fold);
        env.declare_object("Patch");
        env.declare_variable("object", Type::Dyn);
        let object = json!({"name": "a"});
        let run = |expression: &str| {
            let program = env.compile(expression).unwrap();
            let mut budget = Budget::unlimited();
            let value = program
                .eval(&[Value::from_json(&object)], &mut budget)
                .unwrap();
            (value.to_json().unwrap(), budget.spent)
        };
        let patch = json!({"op": "add", "path": "/a"});
        assert_eq!(run("Patch{op: 'add', path: '/a'}"), (patch.clone(), 40));
        assert_eq!(
            run("[Patch{op: 'add', path: '/a'}, Patch{op: 'add', path: '/a'}]"),
            (json!([patch, patch]), 90)
        );
        assert_eq!(run("{'k': Patch{op: 'add', path: '/a'}}").1, 70);
        // One field read from a variable: built on each evaluation, at the same price plus
        // the read.
        assert_eq!(
            run("[Patch{op: 'add', path: object.name}]"),
            (json!([{"op": "add", "path": "a"}]), 52)
        );
        // An optional field is built on each evaluation.
        assert_eq!(run("Patch{?op: optional.of('add')}").1, 41);
    }
}

/// kube-apiserver's environment refuses list and map literals that mix types (texts and
/// columns as kube-apiserver 1.35 reports them), except as arguments of `format`.
#[test]
fn kubernetes_refuses_mixed_literals_as_the_apiserver_does() {
    let env = Env::kubernetes();
    let cases = [
        (
            "[1, 'a']",
            "ERROR: <input>:1:5: expected type 'int' but found 'string'",
        ),
        (
            "[dyn(1), 'a']",
            "ERROR: <input>:1:10: expected type 'dyn' but found 'string'",
        ),
        (
            "[[1], ['a']]",
            "ERROR: <input>:1:7: expected type 'list(int)' but found 'list(string)'",
        ),
        (
            "{'a': 1, 'b': 'x'}",
            "ERROR: <input>:1:15: expected type 'int' but found 'string'",
        ),
    ];
    for (expression, expected) in cases {
        let error = env.compile(expression).expect_err(expression);
        assert_eq!(
            error.to_string().lines().next(),
            Some(expected),
            "{expression}"
        );
    }
    let program = env
        .compile("'%d items cost %.2f'.format([3, 1234.5])")
        .unwrap();
    let value = program.eval(&[], &mut Budget::new(1_000_000)).unwrap();
    assert_eq!(value.to_string(), "\"3 items cost 1,234.50\"");
    // cel-spec's plain environment joins mixed elements as `dyn`.
    assert_eq!(
        Env::standard().compile("[1, 'a']").unwrap().result_type(),
        &Type::list(Type::Dyn)
    );
}

#[test]
fn an_object_family_builds_apply_configurations_at_any_depth() {
    let mut env = env_with_object();
    env.declare_object_family("Object");
    let program = env
        .compile("Object{spec: Object.spec{replicas: 3, template: Object.spec.template{metadata: Object.spec.template.metadata{labels: {'a': 'b'}}}}}")
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(program.result_type(), &Type::Object("Object".into()));
    let object = json!({});
    let value = program
        .eval(&[Value::from_json(&object)], &mut Budget::new(1_000_000))
        .unwrap();
    assert_eq!(
        value.to_json().unwrap(),
        json!({"spec": {"replicas": 3, "template": {"metadata": {"labels": {"a": "b"}}}}})
    );
    // Only the family's root and its dotted extensions are object types.
    for refused in ["Objects{}", "Object.{}", "Other{}"] {
        let error = env.compile(refused).map(|_| ()).unwrap_err().to_string();
        assert!(
            error.contains("undeclared reference") || error.contains("Syntax error"),
            "{refused}: {error}"
        );
    }
}
