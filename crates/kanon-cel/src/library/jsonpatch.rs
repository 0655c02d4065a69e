//! `jsonpatch.escapeKey`: a key escaped for use in a JSON Pointer (RFC 6901), as
//! MutatingAdmissionPolicy's `JSONPatch` paths need it.

use crate::env::Env;
use crate::value::Value;

use super::{STRING_TRAVERSAL, actual_size, scaled_cost, string_arg};

pub(crate) fn install(env: &mut Env) {
    env.function(
        "string_jsonpatch_escapeKey_string",
        "jsonpatch.escapeKey(string) -> string",
        |_, args| {
            let key = string_arg("jsonpatch.escapeKey", args, 0)?;
            Ok(Value::string(escape_key(key)))
        },
    );
    env.set_name_cost("string_jsonpatch_escapeKey_string", |args| {
        scaled_cost(actual_size(&args[0]), STRING_TRAVERSAL)
    });
}

/// `~` becomes `~0` and `/` becomes `~1`, in one pass (so `~1` written by the user stays `~01`).
pub fn escape_key(key: &str) -> String {
    let mut escaped = String::with_capacity(key.len());
    for character in key.chars() {
        match character {
            '~' => escaped.push_str("~0"),
            '/' => escaped.push_str("~1"),
            other => escaped.push(other),
        }
    }
    escaped
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    #[test]
    fn keys_are_escaped_as_json_pointers_need() {
        assert_eq!(escape_key("k8s.io/name"), "k8s.io~1name");
        assert_eq!(escape_key("a~b/c"), "a~0b~1c");
        assert_eq!(escape_key("~1"), "~01");
        assert_eq!(escape_key(""), "");
    }

    #[test]
    fn escape_key_is_a_kubernetes_patch_function() {
        // Not in the base environment: only MutatingAdmissionPolicy's adds it.
        assert!(
            crate::Env::kubernetes()
                .overloads("jsonpatch.escapeKey")
                .is_empty()
        );
        let mut env = crate::Env::kubernetes();
        super::super::install_patch_types(&mut env);
        assert_eq!(env.overloads("jsonpatch.escapeKey").len(), 1);
        let _ = s;
    }
}
