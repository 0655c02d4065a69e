//! JSON pointers (RFC 6901), the one way kanon addresses a field of an object.

use std::borrow::Cow;

use serde_json::{Map, Value};

/// Checks that `text` is a JSON pointer: empty (the whole document) or `/`-separated tokens in
/// which `~` is only ever followed by `0` or `1`. The message says what is wrong and shows the
/// escaped form a policy author probably meant.
pub fn check(text: &str) -> Result<(), String> {
    if text.is_empty() {
        return Ok(());
    }
    if !text.starts_with('/') {
        let hint = text.replace('~', "~0").replace('/', "~1");
        let dotted = text.replace('.', "/");
        return Err(format!(
            "`{text}` is not a JSON pointer: it must start with `/` (e.g. `/{dotted}`, or `/{hint}` if the whole text is one key)"
        ));
    }
    let bytes = text.as_bytes();
    for (i, b) in bytes.iter().enumerate() {
        if *b == b'~' && !matches!(bytes.get(i + 1), Some(b'0') | Some(b'1')) {
            return Err(format!(
                "`{text}` is not a JSON pointer: `~` at offset {i} must be followed by `0` (for `~`) or `1` (for `/`)"
            ));
        }
    }
    Ok(())
}

/// Escapes one key as a pointer token (`a/b` → `a~1b`, `a~b` → `a~0b`); borrowed when the key
/// needs no escape, as most do.
pub fn escape(token: &str) -> Cow<'_, str> {
    if token.bytes().any(|b| b == b'~' || b == b'/') {
        Cow::Owned(token.replace('~', "~0").replace('/', "~1"))
    } else {
        Cow::Borrowed(token)
    }
}

/// The text of the pointer `base` followed by `tokens`, each escaped: one string sized once
/// (jsonptr's `push_back` grows the pointer token by token). A pointer when `base` is one.
pub(crate) fn join(base: &str, tokens: &[&str]) -> String {
    let extra: usize = tokens.iter().map(|t| t.len() + 1).sum();
    let mut text = String::with_capacity(base.len() + extra + 2);
    text.push_str(base);
    for token in tokens {
        text.push('/');
        text.push_str(&escape(token));
    }
    text
}

/// An array index as serde_json reads one in a pointer: digits, no sign, no leading zero.
pub(crate) fn index(token: &str) -> Option<usize> {
    if token.starts_with('+') || (token.starts_with('0') && token.len() != 1) {
        return None;
    }
    token.parse().ok()
}

/// The unescaped tokens of a pointer, each found in one pass over its bytes (the `/` that ends
/// it and whether it holds a `~`), and unescaped only when it holds an escape.
struct Tokens<'p> {
    /// What follows the last `/` read; `None` once the last token is out.
    rest: Option<&'p str>,
}

impl<'p> Iterator for Tokens<'p> {
    type Item = Cow<'p, str>;

    fn next(&mut self) -> Option<Cow<'p, str>> {
        let rest = self.rest?;
        let bytes = rest.as_bytes();
        let mut end = bytes.len();
        let mut escaped = false;
        for (i, &byte) in bytes.iter().enumerate() {
            if byte == b'/' {
                end = i;
                break;
            }
            escaped |= byte == b'~';
        }
        let token = &rest[..end];
        // Past the end (no `/` left): no more tokens; `/` last: one more, empty.
        self.rest = rest.get(end + 1..);
        Some(if escaped {
            Cow::Owned(token.replace("~1", "/").replace("~0", "~"))
        } else {
            Cow::Borrowed(token)
        })
    }
}

/// The unescaped tokens of `pointer`, owned, or `None` when it is not a pointer.
pub(crate) fn token_list(pointer: &str) -> Option<Vec<String>> {
    Some(tokens(pointer)?.map(Cow::into_owned).collect())
}

/// The unescaped tokens of `pointer`, or `None` when it is not a pointer (not empty and not
/// starting with `/`).
fn tokens(pointer: &str) -> Option<Tokens<'_>> {
    let rest = match pointer {
        "" => None,
        _ => Some(pointer.strip_prefix('/')?),
    };
    Some(Tokens { rest })
}

/// Objects of at most this many keys are searched key by key: cheaper than hashing the key
/// (serde_json's map hashes every lookup with SipHash), and most objects of a Kubernetes
/// object are that small.
const SCANNED_KEYS: usize = 8;

/// `map.get(key)`, searching small maps key by key instead of hashing the key.
pub(crate) fn entry<'v>(map: &'v Map<String, Value>, key: &str) -> Option<&'v Value> {
    if map.len() <= SCANNED_KEYS {
        map.iter().find(|(k, _)| k.as_str() == key).map(|(_, v)| v)
    } else {
        map.get(key)
    }
}

/// Whether `map` has no value under `key`: no entry, or `null` (which Kubernetes reads as
/// unset). What `default` operations fill in.
pub(crate) fn absent_in(map: &Map<String, Value>, key: &str) -> bool {
    entry(map, key).is_none_or(Value::is_null)
}

/// `value.get(key)` for an object's member (`None` for anything else), as [`entry`] searches.
pub(crate) fn member<'v>(value: &'v Value, key: &str) -> Option<&'v Value> {
    match value {
        Value::Object(map) => entry(map, key),
        _ => None,
    }
}

/// `map.get_mut(key)`, as [`entry`] searches.
fn entry_mut<'v>(map: &'v mut Map<String, Value>, key: &str) -> Option<&'v mut Value> {
    if map.len() <= SCANNED_KEYS {
        map.iter_mut()
            .find(|(k, _)| k.as_str() == key)
            .map(|(_, v)| v)
    } else {
        map.get_mut(key)
    }
}

/// `doc.pointer(pointer)`, exactly, without its two allocations for every token (serde_json
/// unescapes each token whether it holds an escape or not). On the request path.
pub fn find<'v>(doc: &'v Value, pointer: &str) -> Option<&'v Value> {
    tokens(pointer)?.try_fold(doc, |target, token| match target {
        Value::Object(map) => entry(map, &token),
        Value::Array(list) => list.get(index(&token)?),
        _ => None,
    })
}

/// `doc.pointer_mut(pointer)`, exactly, as [`find`] does `pointer`.
pub fn find_mut<'v>(doc: &'v mut Value, pointer: &str) -> Option<&'v mut Value> {
    tokens(pointer)?.try_fold(doc, |target, token| match target {
        Value::Object(map) => entry_mut(map, &token),
        Value::Array(list) => list.get_mut(index(&token)?),
        _ => None,
    })
}

/// Reads the value at `pointer`, treating an explicit `null` as absent (Kubernetes does).
pub fn get<'v>(doc: &'v Value, pointer: &str) -> Option<&'v Value> {
    find(doc, pointer).filter(|v| !v.is_null())
}

/// The deepest prefix of `pointer` that exists in `doc`, for error messages.
pub fn deepest_existing(doc: &Value, pointer: &str) -> String {
    let mut end = pointer.len();
    loop {
        let prefix = &pointer[..end];
        if find(doc, prefix).is_some() {
            return if prefix.is_empty() {
                "/".to_string()
            } else {
                prefix.to_string()
            };
        }
        match prefix.rfind('/') {
            Some(i) => end = i,
            None => return "/".to_string(),
        }
    }
}

/// Puts `value` at `path` as `json_patch` would for an `add` into an object or a `replace`,
/// without its allocations for every pointer token and its undo record, and gives the value it
/// took the place of (`None`: nothing was there); gives `value` back, `doc` unchanged, for
/// anything else (an array to insert into, a root to add, a missing target).
pub fn put(
    doc: &mut Value,
    path: &json_patch::jsonptr::Pointer,
    value: Value,
    replace: bool,
) -> Result<Option<Value>, Value> {
    if replace {
        return match find_mut(doc, path.as_str()) {
            Some(target) => Ok(Some(std::mem::replace(target, value))),
            None => Err(value),
        };
    }
    let Some((parent, last)) = path.split_back() else {
        return Err(value);
    };
    match find_mut(doc, parent.as_str()) {
        // An existing key keeps its place, as in `json_patch`.
        Some(Value::Object(map)) => Ok(map.insert(last.decoded().into_owned(), value)),
        _ => Err(value),
    }
}

/// Whether `pointer` lies in the object's labels or annotations. Read from the pointer's text:
/// `metadata`, `labels` and `annotations` hold no character a pointer escapes, so a token is
/// one of them exactly when its text is.
pub(crate) fn labels_or_annotations(pointer: &json_patch::jsonptr::Pointer) -> bool {
    label_map_and_rest(pointer).is_some()
}

/// Whether `pointer` names one label or annotation (a key of the map, not the map or below a
/// key).
pub(crate) fn label_or_annotation(pointer: &json_patch::jsonptr::Pointer) -> bool {
    label_map_and_rest(pointer)
        .is_some_and(|rest| rest.strip_prefix('/').is_some_and(|key| !key.contains('/')))
}

/// The text after `/metadata/labels` or `/metadata/annotations` when `pointer` starts so.
fn label_map_and_rest(pointer: &json_patch::jsonptr::Pointer) -> Option<&str> {
    let rest = pointer.as_str().strip_prefix("/metadata/")?;
    ["labels", "annotations"].into_iter().find_map(|map| {
        rest.strip_prefix(map)
            .filter(|rest| rest.is_empty() || rest.starts_with('/'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn accepts_pointers() {
        for p in [
            "",
            "/",
            "/metadata/labels/app.kubernetes.io~1name",
            "/a~0b",
            "/spec/containers/0",
        ] {
            assert_eq!(check(p), Ok(()), "{p}");
        }
    }

    #[test]
    fn rejects_dotted_paths_with_a_hint() {
        let err = check("metadata.labels.app").unwrap_err();
        assert!(err.contains("must start with `/`"), "{err}");
        assert!(err.contains("`/metadata/labels/app`"), "{err}");
    }

    #[test]
    fn rejects_bad_escapes() {
        let err = check("/a~2b").unwrap_err();
        assert!(err.contains("`~` at offset 2"), "{err}");
        assert!(check("/a~").is_err());
    }

    #[test]
    fn escape_round_trips_through_lookup() {
        let doc = json!({"metadata": {"labels": {"a/b~c": "x"}}});
        let p = format!("/metadata/labels/{}", escape("a/b~c"));
        assert_eq!(p, "/metadata/labels/a~1b~0c");
        assert_eq!(get(&doc, &p), Some(&json!("x")));
    }

    #[test]
    fn joined_pointers_escape_their_tokens() {
        assert!(matches!(escape("app"), Cow::Borrowed("app")));
        for index in [0, 7, 10, 1234, usize::MAX] {
            let joined = join("/spec", &["containers", &index.to_string(), "a/b~c"]);
            assert_eq!(joined, format!("/spec/containers/{index}/a~1b~0c"));
            assert_eq!(check(&joined), Ok(()));
        }
        assert_eq!(join("", &[""]), "/");
    }

    #[test]
    fn null_is_absent() {
        let doc = json!({"a": null});
        assert_eq!(get(&doc, "/a"), None);
    }

    #[test]
    fn deepest_existing_prefix() {
        let doc = json!({"metadata": {"labels": {}}});
        assert_eq!(
            deepest_existing(&doc, "/metadata/labels/x/y"),
            "/metadata/labels"
        );
        assert_eq!(deepest_existing(&doc, "/spec/x"), "/");
    }

    #[test]
    fn find_reads_what_serde_json_reads() {
        let mut doc = json!({
            "a": {"b/c": {"d~e": [10, {"": "empty key"}, [true]]}, "0": "zero", "01": "one"},
            "list": ["x", "y"], "": {"": 1}, "~": 2, "~1": 3, "/": 4, "n": null,
            "k1": 5, "k2": 6, "k3": 7
        });
        // Small objects are searched key by key, larger ones through the map's index: both kinds
        // at the root (above SCANNED_KEYS keys, counted) and below it.
        assert!(doc.as_object().is_some_and(|m| m.len() > SCANNED_KEYS));
        assert!(
            doc["a"]
                .as_object()
                .is_some_and(|m| m.len() <= SCANNED_KEYS)
        );
        let tokens = [
            "a",
            "b~1c",
            "b/c",
            "d~0e",
            "d~e",
            "0",
            "01",
            "1",
            "2",
            "+1",
            "-",
            "list",
            "",
            "~0",
            "~01",
            "~1",
            "n",
            "x",
            "00",
            "18446744073709551616",
        ];
        let mut pointers = vec![String::new(), "a".to_string(), "/".to_string()];
        for a in tokens {
            pointers.push(format!("/{a}"));
            for b in tokens {
                pointers.push(format!("/{a}/{b}"));
                for c in ["0", "1", "2", "", "d~0e"] {
                    pointers.push(format!("/{a}/{b}/{c}"));
                    pointers.push(format!("/{a}/{b}/{c}/"));
                }
            }
        }
        let mut found = 0;
        for p in &pointers {
            assert_eq!(find(&doc, p), doc.pointer(p), "{p}");
            found += usize::from(find(&doc, p).is_some());
        }
        // Deep hits, not only misses.
        assert_eq!(find(&doc, "/a/b~1c/d~0e/1/"), Some(&json!("empty key")));
        assert!(found > 10, "{found}");
        for p in &pointers {
            let expected = doc.clone().pointer_mut(p).map(|v| v.clone());
            assert_eq!(find_mut(&mut doc, p).map(|v| v.clone()), expected, "{p}");
        }
    }

    #[test]
    fn labels_and_annotations_are_told_from_the_pointer_text_as_from_its_tokens() {
        for path in [
            "",
            "/metadata",
            "/metadata/labels",
            "/metadata/labels/",
            "/metadata/labels/app",
            "/metadata/labels/a~1b",
            "/metadata/labels/a/b",
            "/metadata/labelsx/a",
            "/metadata/annotations/kanon.dev~1x",
            "/metadata/annotations",
            "/metadata/annotationsx",
            "/metadata/name",
            "/metadat~0a/labels/a",
            "/metadata/label~1s/a",
            "/spec/labels/a",
            "/metadata//labels",
        ] {
            let pointer = json_patch::jsonptr::Pointer::parse(path).expect("a pointer");
            let tokens: Vec<String> = pointer
                .tokens()
                .map(|token| token.decoded().into_owned())
                .collect();
            let in_map = tokens.first().is_some_and(|t| t == "metadata")
                && tokens
                    .get(1)
                    .is_some_and(|t| t == "labels" || t == "annotations");
            assert_eq!(labels_or_annotations(pointer), in_map, "{path}");
            assert_eq!(
                label_or_annotation(pointer),
                in_map && tokens.len() == 3,
                "{path}"
            );
        }
    }
}
