//! How Go's `fmt` prints the values structured-merge-diff holds for an apply configuration that
//! came from CEL, for its errors: `%#v` (`&value.valueUnstructured{Value:"x"}`), `%v` (`&{x}`)
//! and `%T` (`string`). CEL's `null` reaches it as protobuf's `NullValue`, an enum: `0` in
//! `%#v`, `NULL_VALUE` in `%v`, `structpb.NullValue` in `%T`. A CEL list or map written as an
//! `Object` field's value is converted to Go's own (`[]interface {}`, `map[string]interface
//! {}`); one inside a list or map stays as cel-go holds it (`[]ref.Val`, `map[ref.Val]ref.Val`).

use serde_json::Value;

/// `%#v` of the value; `nested` when it lies inside a CEL list or map, not at an `Object` field.
pub(super) fn sharp(value: &Value, nested: bool) -> String {
    match value {
        Value::Null => "0".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => number(n),
        Value::String(s) => kanon_cel::go_quote(s),
        // The apiserver converts an `Object` field's list by appending to a nil slice: an empty
        // one stays nil.
        Value::Array(items) if items.is_empty() && !nested => "[]interface {}(nil)".to_owned(),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(|item| sharp(item, true)).collect();
            let spelled = if nested {
                "[]ref.Val"
            } else {
                "[]interface {}"
            };
            format!("{spelled}{{{}}}", items.join(", "))
        }
        Value::Object(map) => {
            // Go prints a map's keys sorted.
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            let entries: Vec<String> = entries
                .into_iter()
                .map(|(k, v)| format!("{}:{}", kanon_cel::go_quote(k), sharp(v, true)))
                .collect();
            let spelled = if nested {
                "map[ref.Val]ref.Val"
            } else {
                "map[string]interface {}"
            };
            format!("{spelled}{{{}}}", entries.join(", "))
        }
    }
}

/// `%v` of the value.
pub(super) fn plain(value: &Value) -> String {
    match value {
        Value::Null => "NULL_VALUE".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => number(n),
        Value::String(s) => s.clone(),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(plain).collect();
            format!("[{}]", items.join(" "))
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            let entries: Vec<String> = entries
                .into_iter()
                .map(|(k, v)| format!("{k}:{}", plain(v)))
                .collect();
            format!("map[{}]", entries.join(" "))
        }
    }
}

/// A key field's value as structured-merge-diff's `value.ToString` writes it in a path
/// (`[containerPort=80,protocol="TCP"]`): strings quoted as Go quotes them, numbers as `%v`,
/// lists `[a,b]`, a map its `key=value` pairs run together (`a="b"`; an empty one nothing), its
/// keys sorted (Go's map order is random: sorted is what one run of the apiserver may print).
pub(super) fn key_text(value: &Value) -> String {
    match value {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => number(n),
        Value::String(s) => kanon_cel::go_quote(s),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(key_text).collect();
            format!("[{}]", items.join(","))
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            entries
                .into_iter()
                .map(|(k, v)| format!("{k}={}", key_text(v)))
                .collect()
        }
    }
}

/// `%T` of the value; `nested` as for [`sharp`].
pub(super) fn type_name(value: &Value, nested: bool) -> &'static str {
    match value {
        Value::Array(_) if !nested => "[]interface {}",
        Value::Object(_) if !nested => "map[string]interface {}",
        Value::Null => "structpb.NullValue",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float64",
        Value::Number(_) => "int64",
        Value::String(_) => "string",
        Value::Array(_) => "[]ref.Val",
        Value::Object(_) => "map[ref.Val]ref.Val",
    }
}

/// A number as `%v` prints it: an integer as is, a float in `%g`'s shortest form, with an
/// exponent from 1e+06 and below 1e-04 (`2`, `1.5`, `1e+06`, `1e-05`).
fn number(n: &serde_json::Number) -> String {
    let Some(float) = n.as_f64().filter(|_| n.is_f64()) else {
        return n.to_string();
    };
    if float == 0.0 {
        return if float.is_sign_negative() { "-0" } else { "0" }.to_owned();
    }
    // Rust's `{:e}` gives the shortest digits: `1.234567e6`.
    let text = format!("{float:e}");
    let Some((mantissa, exponent)) = text.split_once('e') else {
        return text;
    };
    let Ok(exponent) = exponent.parse::<i32>() else {
        return text;
    };
    if !(-4..6).contains(&exponent) {
        let sign = if exponent < 0 { '-' } else { '+' };
        return format!("{mantissa}e{sign}{:02}", exponent.abs());
    }
    format!("{float}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn key_values_print_as_structured_merge_diff_prints_them() {
        use serde_json::json;
        assert_eq!(super::key_text(&json!("TCP")), "\"TCP\"");
        assert_eq!(super::key_text(&json!(8080)), "8080");
        assert_eq!(super::key_text(&json!(8080.0)), "8080");
        // Found by the randomized comparison with kube-apiserver (seed 85977926605167).
        assert_eq!(super::key_text(&json!({"a": "b"})), "a=\"b\"");
        assert_eq!(super::key_text(&json!({})), "");
        assert_eq!(
            super::key_text(&json!({"b": 1, "a": [true, "x"]})),
            "a=[true,\"x\"]b=1"
        );
    }

    use super::*;
    use serde_json::json;

    #[test]
    fn values_print_as_gos_fmt_prints_them() {
        assert_eq!(sharp(&json!(2.0), false), "2");
        assert_eq!(sharp(&json!(1_000_000.0), false), "1e+06");
        assert_eq!(sharp(&json!(123_456.0), false), "123456");
        assert_eq!(sharp(&json!(0.00001), false), "1e-05");
        assert_eq!(sharp(&json!(5), false), "5");
        assert_eq!(sharp(&Value::Null, false), "0");
        // kube-apiserver 1.35.8's words for `labels: {'tier': ['x']}`, `labels: {'tier': {'a':
        // 'b'}}` and `image: {'a': 'b'}`.
        assert_eq!(sharp(&json!(["x"]), true), r#"[]ref.Val{"x"}"#);
        assert_eq!(
            sharp(&json!({"a": "b"}), true),
            r#"map[ref.Val]ref.Val{"a":"b"}"#
        );
        assert_eq!(
            sharp(&json!({"a": "b"}), false),
            r#"map[string]interface {}{"a":"b"}"#
        );
        // `image: []` (map_random seed 6302731802555): the empty list is a nil slice.
        assert_eq!(sharp(&json!([]), false), "[]interface {}(nil)");
        assert_eq!(sharp(&json!(["x"]), false), r#"[]interface {}{"x"}"#);
        assert_eq!(plain(&Value::Null), "NULL_VALUE");
        assert_eq!(plain(&json!("y")), "y");
        assert_eq!(type_name(&json!("x"), false), "string");
        assert_eq!(type_name(&Value::Null, false), "structpb.NullValue");
        assert_eq!(type_name(&json!([]), false), "[]interface {}");
        assert_eq!(type_name(&json!({}), false), "map[string]interface {}");
    }
}
