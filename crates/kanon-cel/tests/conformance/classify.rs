//! Which tests kanon-cel can run at all, and which belong to kube-apiserver's CEL environment.
//!
//! kanon-cel evaluates over JSON and has no protobuf messages: tests that build, read or expect
//! messages (`TestAllTypes`, `google.protobuf.*` wrappers, `Any`, `Struct`, enums) are skipped,
//! found by their container, declarations, bindings, expected values and expression text.

/// The files (and sections) testing what kube-apiserver 1.35's CEL environment does not enable
/// (k8s.io/apiserver/pkg/cel/environment/base.go: no ext.Bindings, ext.Encoders, ext.Math,
/// cel.block, ident escapes; protobuf files are listed because kube-apiserver has no messages):
/// `(file, section or "" for the whole file, what it needs)`.
pub const NOT_IN_KUBE: &[(&str, &str, &str)] = &[
    ("bindings_ext", "", "cel.bind (ext.Bindings)"),
    ("block_ext", "", "cel.block"),
    ("encoders_ext", "", "base64 (ext.Encoders)"),
    ("math_ext", "", "math.* (ext.Math)"),
    ("proto2_ext", "", "protobuf extensions"),
    ("proto2", "", "protobuf messages"),
    ("proto3", "", "protobuf messages"),
    ("wrappers", "", "protobuf wrapper types"),
    ("enums", "", "protobuf enums"),
    ("unknowns", "", "partial evaluation"),
    (
        "fields",
        "quoted_map_fields",
        "backquoted field names (cel.EnableIdentEscapeSyntax)",
    ),
];

/// Why a test is outside kube-apiserver's environment, if it is.
pub fn not_in_kube(file: &str, section: &str) -> Option<&'static str> {
    NOT_IN_KUBE
        .iter()
        .find(|(f, s, _)| *f == file && (s.is_empty() || *s == section))
        .map(|(_, _, why)| *why)
}

/// Message and enum names of cel-spec's test protos and of google.protobuf, as an expression
/// names them (unqualified inside a container, or as the last part of a qualified name).
const PROTO_NAMES: &[&str] = &[
    "TestAllTypes",
    "NestedTestAllTypes",
    "TestRequired",
    "NestedMessage",
    "NestedEnum",
    "GlobalEnum",
    "Proto2ExtensionScopedMessage",
    "BoolValue",
    "BytesValue",
    "DoubleValue",
    "FloatValue",
    "Int32Value",
    "Int64Value",
    "StringValue",
    "UInt32Value",
    "UInt64Value",
    "Any",
    "Struct",
    "ListValue",
    "NullValue",
    "Empty",
    "FieldMask",
];

/// Whether a container names protobuf packages.
pub fn protobuf_container(container: &str) -> bool {
    container.starts_with("cel.expr.conformance") || container.starts_with("google.protobuf")
}

/// What in an expression needs protobuf messages, if anything: a message literal (`Name{…}`), a
/// message or enum name, `google.protobuf.*` other than the Duration and Timestamp type names,
/// or `proto.getExt`/`proto.hasExt`. String literals are not looked into.
pub fn protobuf_in_expr(expr: &str) -> Option<String> {
    let code = blank_strings(expr);
    let bytes = code.as_bytes();
    let mut pos = 0;
    while pos < bytes.len() {
        let byte = bytes[pos];
        let starts_name = (byte.is_ascii_alphabetic() || byte == b'_')
            && (pos == 0 || !(bytes[pos - 1].is_ascii_alphanumeric() || bytes[pos - 1] == b'_'));
        if !starts_name {
            pos += 1;
            continue;
        }
        // A dotted name as written: `google.protobuf.Int64Value`, `x.single_int64`.
        let start = pos;
        loop {
            while pos < bytes.len() && (bytes[pos].is_ascii_alphanumeric() || bytes[pos] == b'_') {
                pos += 1;
            }
            let next_is_name = pos + 1 < bytes.len()
                && bytes[pos] == b'.'
                && (bytes[pos + 1].is_ascii_alphabetic() || bytes[pos + 1] == b'_');
            if !next_is_name {
                break;
            }
            pos += 1;
        }
        let name = &code[start..pos];
        let literal = code[pos..].trim_start().starts_with('{') && name != "in";
        if let Some(reason) = protobuf_name(name, literal) {
            return Some(reason);
        }
    }
    None
}

fn protobuf_name(name: &str, literal: bool) -> Option<String> {
    if literal {
        return Some(format!("message literal {name}{{…}}"));
    }
    if name.starts_with("cel.expr.conformance") {
        return Some("a name in package cel.expr.conformance".to_owned());
    }
    if let Some(rest) = name.strip_prefix("google.protobuf.")
        && rest != "Duration"
        && rest != "Timestamp"
    {
        return Some(format!("protobuf name {name}"));
    }
    if name.starts_with("proto.getExt") || name.starts_with("proto.hasExt") {
        return Some("protobuf extensions (proto.getExt/hasExt)".to_owned());
    }
    name.split('.')
        .find(|part| PROTO_NAMES.contains(part))
        .map(|part| format!("protobuf type {part}"))
}

/// The expression with the contents of its string and bytes literals (all CEL forms: quotes,
/// triple quotes, raw and bytes prefixes) replaced by spaces, byte offsets kept.
fn blank_strings(expr: &str) -> String {
    let bytes = expr.as_bytes();
    let mut out = bytes.to_vec();
    let mut pos = 0;
    while pos < bytes.len() {
        let byte = bytes[pos];
        if byte != b'"' && byte != b'\'' {
            pos += 1;
            continue;
        }
        // A raw prefix (`r`, `R`, `rb`, `br`, …) right before the quote turns escapes off.
        let mut prefix = pos;
        while prefix > 0
            && matches!(bytes[prefix - 1], b'r' | b'R' | b'b' | b'B')
            && pos - prefix < 2
        {
            prefix -= 1;
        }
        let standalone = prefix == 0
            || !(bytes[prefix - 1].is_ascii_alphanumeric() || bytes[prefix - 1] == b'_');
        let raw = standalone && bytes[prefix..pos].iter().any(|b| matches!(b, b'r' | b'R'));
        let triple = bytes[pos..].starts_with(&[byte; 3]);
        let quote_len = if triple { 3 } else { 1 };
        let mut end = pos + quote_len;
        loop {
            if end >= bytes.len() {
                break;
            }
            if !raw && bytes[end] == b'\\' {
                end += 2;
                continue;
            }
            if bytes[end..].starts_with(&[byte; 3][..quote_len]) {
                end += quote_len;
                break;
            }
            end += 1;
        }
        let end = end.min(bytes.len());
        for slot in &mut out[pos..end] {
            *slot = b' ';
        }
        pos = end;
    }
    // Only ASCII quote bytes and the bytes between them were replaced, so the text may have lost
    // UTF-8 validity only inside literals, which are now all spaces.
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_protobuf_in_code_not_in_strings() {
        assert_eq!(protobuf_in_expr("1 + 1"), None);
        assert_eq!(protobuf_in_expr("'TestAllTypes{}' == x"), None);
        assert_eq!(
            protobuf_in_expr(r#"r"Int64Value\" + "" == '''Any'''"#),
            None
        );
        assert_eq!(
            protobuf_in_expr("type(duration('1s')) == google.protobuf.Duration"),
            None
        );
        assert_eq!(protobuf_in_expr("1 in {1: 2}"), None);
        assert_eq!(protobuf_in_expr("x.exists(e, e in {'a': 1})"), None);
        assert!(protobuf_in_expr("TestAllTypes{single_int64: 1}").is_some());
        assert!(protobuf_in_expr("google.protobuf.Int64Value{value: 1}").is_some());
        assert!(protobuf_in_expr("google.protobuf.Duration{seconds: 1}").is_some());
        assert!(protobuf_in_expr("dyn(x) == google.protobuf.Value").is_some());
        assert!(protobuf_in_expr("type(x) == cel.expr.conformance.proto3.TestAllTypes").is_some());
        assert!(protobuf_in_expr("proto.getExt(x, y)").is_some());
        assert!(protobuf_in_expr("x == GlobalEnum.GAR").is_some());
    }

    #[test]
    fn scopes() {
        assert_eq!(
            not_in_kube("math_ext", "greatest"),
            Some("math.* (ext.Math)")
        );
        assert!(not_in_kube("fields", "quoted_map_fields").is_some());
        assert_eq!(not_in_kube("fields", "map_fields"), None);
        assert_eq!(not_in_kube("basic", "self_eval_zeroish"), None);
    }
}
