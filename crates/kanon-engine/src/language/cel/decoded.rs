//! What kube-apiserver's decoding of a patched built-in object into its kind's Go type checks
//! and writes back, applied to what a CEL mutation wrote: a value the Go type cannot hold and a
//! field the kind does not declare fail the request; the written values are then written back
//! as Go writes them, for the next mutation to see.

use json_patch::PatchOperation;
use serde_json::Value as Json;

use crate::admission_policy::patch::WrittenOperation;
use crate::rule::RuleError;
use crate::typed::Decoded;

/// What the apiserver's round trip through the kind's Go type makes of the places a mutation
/// changed in a built-in object, applied (and recorded) as operations: each written value as
/// Go writes it back, and a field left empty by it, or by a removal below it, gone when it is
/// `omitempty`. Nothing for kinds without Go facts.
pub(super) fn written_back<'p>(
    working: &mut Json,
    paths: impl IntoIterator<Item = &'p json_patch::jsonptr::Pointer>,
    request: &crate::request::Request,
    changes: &mut crate::diff::Changes,
    field: &str,
) -> Result<(), RuleError> {
    let Some(typed) = request.typed() else {
        return Ok(());
    };
    let failed = |(_, message): (usize, String)| RuleError::Patch {
        field: field.to_owned(),
        message: format!("writing the object back as its Go type: {message}"),
    };
    for path in paths {
        // A string in the object's labels or annotations (Go's map[string]string) is written
        // back as it is: the usual label mutation needs no walk of the kind's Go type.
        if label_or_annotation_string(working, path) {
            continue;
        }
        let mut segments: Vec<String> = path.tokens().map(|t| t.decoded().into_owned()).collect();
        // An item appended at `-` is the list's last; the list is written back whole.
        if segments.last().is_some_and(|last| last == "-") {
            segments.pop();
        }
        // The value written, whole; then, while a field is gone (left out here, or removed by
        // the mutation), the field that held it, which may now be empty.
        let mut whole = true;
        loop {
            // A field that held a removed one is looked at whole: it must have been decoded so.
            if !whole && !changes.reaches_path(segments.iter().map(String::as_str)) {
                break;
            }
            match typed.written_back_op(working, &segments, whole) {
                Some(operation) => {
                    let removed = matches!(operation, PatchOperation::Remove(_));
                    crate::language::apply_recorded(working, vec![operation], changes)
                        .map_err(failed)?;
                    if !removed {
                        break;
                    }
                }
                None if typed.holds(working, &segments) => break,
                None => {}
            }
            if segments.pop().is_none() {
                break;
            }
            whole = false;
        }
    }
    Ok(())
}

/// Whether `path` names one label or annotation of the object and a string lies there.
fn label_or_annotation_string(working: &Json, path: &json_patch::jsonptr::Pointer) -> bool {
    crate::pointer::label_or_annotation(path)
        && value_at(working, path).is_some_and(Json::is_string)
}

/// kube-apiserver decodes what a MutatingAdmissionPolicy's JSON patch leaves of a built-in
/// kind strictly into the Go type of the request's kind: a value its Go type cannot hold fails
/// the request with the decoder's error, and otherwise a field the kind does not declare does
/// (a custom kind is decoded as it is, unknown fields and all). The apiserver's object has
/// neither before the patch, so only what the operations write is checked (an object given
/// offline with a stray field of its own is not the policy's doing).
pub(super) fn strictly_decoded<'o>(
    writes: impl Iterator<Item = (&'o json_patch::jsonptr::Pointer, &'o Json)> + Clone,
    written: &[WrittenOperation],
    clean_for: Option<&std::sync::OnceLock<usize>>,
    field: &str,
    request: &crate::request::Request,
) -> Result<(), RuleError> {
    /// The decoder stops collecting at 100.
    const MOST: usize = 100;
    let Some((schema, root)) = request.builtin_kind() else {
        return Ok(());
    };
    // A prepared patch's values never change: when every operation writes at its path as
    // written, it writes the same fields into the same kind every time.
    let kind = std::ptr::from_ref(root) as usize;
    let as_written = writes.clone().count() == written.len()
        && writes
            .clone()
            .zip(written)
            .all(|((path, _), written)| path.as_str() == written.path);
    if as_written && clean_for.and_then(std::sync::OnceLock::get) == Some(&kind) {
        return Ok(());
    }
    if let Some(typed) = request.typed() {
        // Go's decoder reads the document in order: an error of a type that decodes itself (a
        // quantity, a time) ends it; otherwise the first value of the wrong type is the answer,
        // before any unknown field. The writes are taken in the order of the places they write,
        // as the patched document has them.
        let mut errors: Vec<(bool, Vec<String>, String)> = writes
            .clone()
            .filter_map(|(path, value)| {
                let tokens: smallvec::SmallVec<[_; 8]> = path.tokens().collect();
                let segments: smallvec::SmallVec<[std::borrow::Cow<'_, str>; 8]> =
                    tokens.iter().map(|t| t.decoded()).collect();
                let (immediate, message) = match typed.decode_error_at(&segments, value)? {
                    Decoded::Immediate(message) => (true, message),
                    Decoded::Saved(message) => (false, message),
                };
                Some((!immediate, document_position(&segments), message))
            })
            .collect();
        errors.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        if let Some((_, _, message)) = errors.into_iter().next() {
            return Err(RuleError::TypedDecoding {
                field: field.to_owned(),
                message,
            });
        }
    }
    let mut unknown: Vec<String> = Vec::new();
    for (path, value) in writes {
        let tokens: smallvec::SmallVec<[_; 8]> = path.tokens().collect();
        let segments: smallvec::SmallVec<[std::borrow::Cow<'_, str>; 8]> =
            tokens.iter().map(|t| t.decoded()).collect();
        for found in schema.unknown_fields_at(root, &segments, value, MOST) {
            if unknown.len() < MOST && !unknown.contains(&found) {
                unknown.push(found);
            }
        }
    }
    if unknown.is_empty() {
        if let Some(clean_for) = clean_for.filter(|_| as_written) {
            let _ = clean_for.set(kind);
        }
        return Ok(());
    }
    Err(RuleError::StrictDecoding {
        field: field.to_owned(),
        unknown,
    })
}

/// The value at `path` of `object`, an item appended at `-` being the list's last.
pub(super) fn value_at<'v>(
    object: &'v Json,
    path: &json_patch::jsonptr::Pointer,
) -> Option<&'v Json> {
    // `pointer::find` reads as `serde_json::Value::pointer` does, without copying each
    // token's text (a label's value is looked up this way for every label a mutation writes).
    match path.split_back() {
        Some((parent, token)) if token.decoded() == "-" => {
            crate::pointer::find(object, parent.as_str())?
                .as_array()?
                .last()
        }
        _ => crate::pointer::find(object, path.as_str()),
    }
}

/// Where `path` lies in the order kube-apiserver's decoder reads a patched document: its patch
/// library writes every object it touched with its keys sorted (a Go map), so keys compare as
/// text and list items by position.
fn document_position<S: AsRef<str>>(path: &[S]) -> Vec<String> {
    path.iter()
        .map(|segment| {
            let segment = segment.as_ref();
            match segment.parse::<usize>() {
                Ok(index) => format!("{index:020}"),
                Err(_) if segment == "-" => "~".repeat(21),
                Err(_) => segment.to_owned(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::value_at;

    #[test]
    fn a_value_is_found_as_serde_json_finds_it_and_an_appended_item_is_the_last() {
        let object = json!({
            "metadata": {"labels": {"a/b": "x", "~": "t", "-": "dash"}},
            "spec": {"items": [1, 2, 3], "m": {"0": "zero"}},
        });
        for path in [
            "",
            "/metadata/labels/a~1b",
            "/metadata/labels/~0",
            "/metadata/labels/missing",
            "/spec/items/0",
            "/spec/items/2",
            "/spec/items/3",
            "/spec/items/01",
            "/spec/items/+1",
            "/spec/items/x",
            "/spec/m/0",
            "/spec/items/0/deeper",
        ] {
            let pointer = json_patch::jsonptr::Pointer::parse(path).expect("a pointer");
            assert_eq!(value_at(&object, pointer), object.pointer(path), "{path}");
        }
        let last = json_patch::jsonptr::Pointer::parse("/spec/items/-").expect("a pointer");
        assert_eq!(value_at(&object, last), Some(&json!(3)));
        // `-` names an appended item only in a list.
        let dash = json_patch::jsonptr::Pointer::parse("/metadata/labels/-").expect("a pointer");
        assert_eq!(value_at(&object, dash), None);
    }
}
