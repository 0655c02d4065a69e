//! A MutatingAdmissionPolicy's JSON Patch as kube-apiserver 1.35 applies it: with the meanings
//! and the words of its patch library (gopkg.in/evanphx/json-patch.v4), which are not RFC 6902's.
//!
//! Where that library departs from the RFC, the apiserver does too, so kanon does: `replace` of
//! an absent object member adds it; a negative array index counts from the end; `add` and
//! `copy` without a value write `null`; `test` of an absent member holds only without a value;
//! a path is split at every `/` and its first piece dropped, whatever it is; adding at the root
//! is an error. Each written operation is turned into RFC 6902 operations that do the same to
//! the object, array positions as numbers (kanon's patch machinery applies and records those),
//! or into the library's error.

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, PatchOperation, RemoveOperation, ReplaceOperation};
use kanon_cel::go_quote;
use serde_json::Value;

/// One `JSONPatch{op, path, from, value}` as the expression gave it: the apiserver hands its
/// fields to the patch library unchecked.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct WrittenOperation {
    pub(crate) op: String,
    pub(crate) path: String,
    /// `None` when empty (the apiserver leaves an empty `from` out).
    pub(crate) from: Option<String>,
    /// `None` when the expression set no value.
    pub(crate) value: Option<Value>,
}

impl WrittenOperation {
    /// Where and what an `add` or `replace` of a value at a well-formed pointer below the root
    /// writes. Wherever RFC 6902 applies such an operation it does what the apiserver's library
    /// does, so it may be tried as RFC 6902 first (the library's meaning sought only when that
    /// does not apply).
    pub(crate) fn rfc_target(&self) -> Option<(PointerBuf, &Value)> {
        let value = self.value.as_ref()?;
        if !matches!(self.op.as_str(), "add" | "replace") {
            return None;
        }
        let pointer = PointerBuf::parse(self.path.as_str()).ok()?;
        (!pointer.is_root()).then_some((pointer, value))
    }
}

/// Why a patch does not apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// A `test` did not hold: the whole patch is left out, which is not an error.
    TestFailed,
    /// The library's error, as it words it.
    Error(String),
    /// The library panics on this patch (kube-apiserver then answers the request with no
    /// response at all): why, in kanon's words.
    Panics(String),
}

const MISSING: &str = "missing value";
const INVALID_INDEX: &str = "invalid index referenced";

/// kube-apiserver's cap on the bytes one patch's `copy` operations may add
/// (`JSONPatchMaxCopyBytes`, 3 MiB).
const COPY_LIMIT: usize = 3 * 1024 * 1024;

/// The RFC 6902 operations that do to `doc` what `written` does in kube-apiserver, or why the
/// patch does not apply. `doc` is not changed.
pub(crate) fn resolve(
    doc: &Value,
    written: &[WrittenOperation],
) -> Result<Vec<PatchOperation>, Refusal> {
    // One operation that moves nothing is resolved against the object as it is; anything
    // else needs each operation's result before the next resolves.
    if let [only] = written
        && matches!(only.op.as_str(), "add" | "remove" | "replace" | "test")
    {
        return plan(doc, only);
    }
    let mut scratch = doc.clone();
    let mut resolved = Vec::with_capacity(written.len());
    let mut copied = 0;
    // Where this patch wrote `null`: the library holds such a value as a node it opens as an
    // empty object with no map behind it (a `null` of the object itself is no container at
    // all). Its members are absent: removing one is a missing key, not a missing path; a
    // `test` of one holds only without a value; copying one copies `null`; writing one panics
    // (assignment to entry in nil map). A `test` of the null itself for `{}` holds.
    let mut nulls: Vec<&str> = Vec::new();
    for operation in written {
        let written_null =
            |path: &str| nulls.contains(&path) && scratch.pointer(path).is_some_and(Value::is_null);
        let from = operation.from.as_deref();
        let from_under_null = from.and_then(|from| under(from, &written_null));
        match (operation.op.as_str(), under(&operation.path, &written_null)) {
            ("remove", Some((_, key))) => {
                return Err(error(format!(
                    "error in remove for path: '{}': Unable to remove nonexistent key: {}: {MISSING}",
                    operation.path,
                    unescape(key)
                )));
            }
            ("test", Some(_)) if operation.value.is_none() => continue,
            ("test", Some(_)) => return Err(Refusal::TestFailed),
            ("test", None)
                if written_null(&operation.path)
                    && matches!(&operation.value, Some(Value::Object(members)) if members.is_empty()) =>
            {
                continue;
            }
            ("move", _) if let Some((_, key)) = from_under_null => {
                let key = unescape(key);
                return Err(error(format!(
                    "error in move for path: '{key}': Unable to remove nonexistent key: {key}: {MISSING}"
                )));
            }
            // `replace` of an absent member adds it, so it meets the same nil map.
            ("add" | "replace", Some((parent, _))) => {
                return Err(nil_map_panic(operation, parent));
            }
            // A copy or a move gets there once its source is found (a move out of the null's
            // own path leaves no destination, which the plan below words).
            ("copy" | "move", Some((parent, _))) => {
                let source_found = from_under_null.is_some()
                    || from
                        .and_then(|from| find(&scratch, from))
                        .is_some_and(|source| source.get().is_ok());
                let moves_out_of_the_null = operation.op == "move"
                    && from.is_some_and(|from| operation.path.starts_with(&format!("{from}/")));
                if source_found && !moves_out_of_the_null {
                    return Err(nil_map_panic(operation, parent));
                }
            }
            _ => {}
        }
        let null_written = match operation.op.as_str() {
            "add" | "replace" => matches!(operation.value, None | Some(Value::Null)),
            "copy" | "move" => from.is_some_and(written_null),
            _ => false,
        };
        if null_written {
            nulls.push(&operation.path);
        }
        let operations = match operation.op.as_str() {
            "move" => plan_move(&mut scratch, operation)?,
            "copy" if from_under_null.is_some() => {
                plan_copy_of(&scratch, operation, None, &mut copied)?
            }
            "copy" => plan_copy(&scratch, operation, &mut copied)?,
            _ => plan(&scratch, operation)?,
        };
        if operation.op != "move" {
            operations
                .iter()
                .for_each(|planned| apply(&mut scratch, planned));
        }
        resolved.extend(operations);
    }
    Ok(resolved)
}

/// The parent and key of `path`, when its parent is one of the nulls `null` says the patch
/// wrote.
fn under<'p>(path: &'p str, null: &dyn Fn(&str) -> bool) -> Option<(&'p str, &'p str)> {
    path.rsplit_once('/').filter(|(parent, _)| null(parent))
}

/// Applies a resolved operation, which cannot fail: resolving checked everything it needs.
fn apply(doc: &mut Value, operation: &PatchOperation) {
    let _ = json_patch::patch(doc, std::slice::from_ref(operation));
}

/// `add`, `remove`, `replace`, `test`, or the library's error for an unknown op.
fn plan(doc: &Value, written: &WrittenOperation) -> Result<Vec<PatchOperation>, Refusal> {
    let path = written.path.as_str();
    let value = || written.value.clone().unwrap_or(Value::Null);
    match written.op.as_str() {
        "add" => {
            let Some(place) = find(doc, path) else {
                return Err(error(format!(
                    "add operation does not apply: doc is missing path: \"{path}\": {MISSING}"
                )));
            };
            let at = place
                .insertion()
                .map_err(|e| error(format!("error in add for path: '{path}': {e}")))?;
            Ok(vec![PatchOperation::Add(AddOperation {
                path: at,
                value: value(),
            })])
        }
        "remove" => {
            let Some(place) = find(doc, path) else {
                return Err(error(format!(
                    "remove operation does not apply: doc is missing path: \"{path}\": {MISSING}"
                )));
            };
            let at = place
                .removal()
                .map_err(|e| error(format!("error in remove for path: '{path}': {e}")))?;
            Ok(vec![PatchOperation::Remove(RemoveOperation { path: at })])
        }
        "replace" => {
            if path.is_empty() {
                return match &written.value {
                    Some(whole @ (Value::Object(_) | Value::Array(_))) => {
                        Ok(vec![PatchOperation::Replace(ReplaceOperation {
                            path: PointerBuf::root(),
                            value: whole.clone(),
                        })])
                    }
                    // The library wraps an error that is nil here, which Go prints so.
                    _ => Err(error(
                        "replace operation value must be object or array: %!w(<nil>)".to_owned(),
                    )),
                };
            }
            let Some(place) = find(doc, path) else {
                return Err(error(format!(
                    "replace operation does not apply: doc is missing path: {path}: {MISSING}"
                )));
            };
            let (at, present) = place.get().map_err(|_| {
                error(format!(
                    "replace operation does not apply: doc is missing key: {path}: {MISSING}"
                ))
            })?;
            // An absent object member is set all the same: the library's `replace` adds it.
            Ok(vec![if present.is_some() {
                PatchOperation::Replace(ReplaceOperation {
                    path: at,
                    value: value(),
                })
            } else {
                PatchOperation::Add(AddOperation {
                    path: at,
                    value: value(),
                })
            }])
        }
        "test" => {
            let holds = if path.is_empty() {
                written.value.as_ref().is_some_and(|value| same(doc, value))
            } else {
                let Some(place) = find(doc, path) else {
                    return Err(error(format!(
                        "test operation does not apply: is missing path: {path}: {MISSING}"
                    )));
                };
                let (_, present) = place
                    .get()
                    .map_err(|e| error(format!("error in test for path: '{path}': {e}")))?;
                // The library reads a `null` member as an absent one.
                match (present.filter(|v| !v.is_null()), &written.value) {
                    (None, None) => true,
                    (Some(present), Some(value)) => same(present, value),
                    _ => false,
                }
            };
            if holds {
                Ok(Vec::new())
            } else {
                Err(Refusal::TestFailed)
            }
        }
        other => Err(error(format!("Unexpected kind: {other}"))),
    }
}

/// `move`: the value taken out at `from`, then added at `path` as found after the removal.
/// Both are applied to `scratch` (left half-changed on error; the caller drops it then).
fn plan_move(
    scratch: &mut Value,
    written: &WrittenOperation,
) -> Result<Vec<PatchOperation>, Refusal> {
    let from = written.from.as_deref().ok_or_else(|| {
        error(format!(
            "move operation failed to decode from: operation, missing from field: {MISSING}"
        ))
    })?;
    let Some(source) = find(scratch, from) else {
        return Err(error(format!(
            "move operation does not apply: doc is missing from path: {from}: {MISSING}"
        )));
    };
    let key = source.key.clone();
    let (_, value) = source
        .get()
        .map_err(|e| error(format!("error in move for path: '{key}': {e}")))?;
    let value = value.cloned().unwrap_or(Value::Null);
    let at = source
        .removal()
        .map_err(|e| error(format!("error in move for path: '{key}': {e}")))?;
    let removal = PatchOperation::Remove(RemoveOperation { path: at });
    apply(scratch, &removal);
    let path = written.path.as_str();
    let Some(destination) = find(scratch, path) else {
        return Err(error(format!(
            "move operation does not apply: doc is missing destination path: {path}: {MISSING}"
        )));
    };
    let at = destination
        .insertion()
        .map_err(|e| error(format!("error in move for path: '{path}': {e}")))?;
    let addition = PatchOperation::Add(AddOperation { path: at, value });
    apply(scratch, &addition);
    Ok(vec![removal, addition])
}

/// `copy`: the value at `from` (`null` when an object has no such member) added at `path`.
/// `copied` counts the bytes the patch's copies have added so far, which kube-apiserver caps.
fn plan_copy(
    doc: &Value,
    written: &WrittenOperation,
    copied: &mut usize,
) -> Result<Vec<PatchOperation>, Refusal> {
    let from = written.from.as_deref().ok_or_else(|| {
        error(format!(
            "copy operation failed to decode from: operation, missing from field: {MISSING}"
        ))
    })?;
    let Some(source) = find(doc, from) else {
        return Err(error(format!(
            "copy operation does not apply: doc is missing from path: {from}: {MISSING}"
        )));
    };
    let (_, value) = source
        .get()
        .map_err(|e| error(format!("error in copy for from: '{from}': {e}")))?;
    plan_copy_of(doc, written, value, copied)
}

/// The rest of a `copy` once its source is found: `value` (absent copies `null`) added at
/// `path`.
fn plan_copy_of(
    doc: &Value,
    written: &WrittenOperation,
    value: Option<&Value>,
    copied: &mut usize,
) -> Result<Vec<PatchOperation>, Refusal> {
    let path = written.path.as_str();
    let Some(destination) = find(doc, path) else {
        return Err(error(format!(
            "copy operation does not apply: doc is missing destination path: {path}: {MISSING}"
        )));
    };
    // The library measures a copy as the JSON it writes; an absent member copies nothing.
    *copied += value.map_or(0, |value| value.to_string().len());
    if *copied > COPY_LIMIT {
        return Err(error(format!(
            "Unable to complete the copy, the accumulated size increase of copy is {copied}, exceeding the limit {COPY_LIMIT}"
        )));
    }
    let value = value.cloned().unwrap_or(Value::Null);
    let at = destination
        .insertion()
        .map_err(|e| error(format!("error while adding value during copy: {e}")))?;
    Ok(vec![PatchOperation::Add(AddOperation { path: at, value })])
}

/// The library's panic when an operation writes a member into a `null` the patch wrote at
/// `parent`.
fn nil_map_panic(operation: &WrittenOperation, parent: &str) -> Refusal {
    Refusal::Panics(format!(
        "kube-apiserver's JSON patch library panics on this patch (assignment to entry in nil map: its {} writes '{}' into the null an earlier operation of the patch wrote at '{parent}'), and the apiserver answers the request with no response",
        operation.op, operation.path
    ))
}

fn error(message: String) -> Refusal {
    Refusal::Error(message)
}

/// The container a path's last piece is looked up in, found as the library finds it.
struct Place<'d> {
    /// The container's pointer, with array indexes made non-negative.
    pointer: PointerBuf,
    container: &'d Value,
    /// The last piece, unescaped.
    key: String,
}

/// The library's `findObject`: the path split at every `/`, the first piece dropped, the
/// pieces between it and the last walked through objects and arrays (a missing, `null` or
/// scalar value on the way, or an index that does not read, finds nothing).
fn find<'d>(doc: &'d Value, path: &str) -> Option<Place<'d>> {
    let (_, rest) = path.split_once('/')?;
    let (between, last) = match rest.rsplit_once('/') {
        Some((between, last)) => (Some(between), last),
        None => (None, rest),
    };
    if !doc.is_object() && !doc.is_array() {
        return None;
    }
    let mut pointer = PointerBuf::root();
    let mut container = doc;
    for piece in between.into_iter().flat_map(|b| b.split('/')) {
        let key = unescape(piece);
        let next = match container {
            Value::Object(members) => {
                pointer.push_back(key.as_ref());
                members.get(key.as_ref())
            }
            Value::Array(items) => {
                let index = array_index(&key, items.len()).ok()?;
                pointer.push_back(index.to_string().as_str());
                items.get(index)
            }
            _ => None,
        };
        container = next.filter(|v| v.is_object() || v.is_array())?;
    }
    Some(Place {
        pointer,
        container,
        key: unescape(last).into_owned(),
    })
}

impl<'d> Place<'d> {
    fn at(&self, key: &str) -> PointerBuf {
        let mut pointer = self.pointer.clone();
        pointer.push_back(key);
        pointer
    }

    /// The member or item the key names, and where it is: an object's absent member is no
    /// error; an array's index must name an item.
    fn get(&self) -> Result<(PointerBuf, Option<&'d Value>), String> {
        match self.container {
            Value::Array(items) => {
                let index = array_index(&self.key, items.len())?;
                Ok((self.at(&index.to_string()), items.get(index)))
            }
            Value::Object(members) => Ok((self.at(&self.key), members.get(&self.key))),
            _ => Ok((self.at(&self.key), None)),
        }
    }

    /// Where an `add` puts its value: an object's member, or an array's position (`-` or
    /// one past the last item appends; a negative index counts from one past the end), always
    /// as a number.
    fn insertion(&self) -> Result<PointerBuf, String> {
        let Value::Array(items) = self.container else {
            return Ok(self.at(&self.key));
        };
        if self.key == "-" {
            return Ok(self.at(&items.len().to_string()));
        }
        let index = atoi(&self.key)
            .map_err(|e| format!("value was not a proper array index: '{}': {e}", self.key))?;
        // One past the last item is a place to insert at.
        let index = from_end(index, items.len() + 1)?;
        Ok(self.at(&index.to_string()))
    }

    /// Where a `remove` takes its value from: an object's member that must exist, or an
    /// array's item.
    fn removal(&self) -> Result<PointerBuf, String> {
        match self.container {
            Value::Array(items) => {
                let index = array_index(&self.key, items.len())?;
                Ok(self.at(&index.to_string()))
            }
            Value::Object(members) if members.contains_key(&self.key) => Ok(self.at(&self.key)),
            _ => Err(format!(
                "Unable to remove nonexistent key: {}: {MISSING}",
                self.key
            )),
        }
    }
}

/// An index into an array of `len` items, as the library reads one: Go's `strconv.Atoi`, a
/// negative index counted from the end.
fn array_index(key: &str, len: usize) -> Result<usize, String> {
    from_end(atoi(key)?, len)
}

/// `index` among `len` places, a negative one counted from the end, as the library reads it.
fn from_end(index: i64, len: usize) -> Result<usize, String> {
    let invalid = || format!("Unable to access invalid index: {index}: {INVALID_INDEX}");
    let len = i64::try_from(len).map_err(|_| invalid())?;
    let from_start = if index < 0 { index + len } else { index };
    if index >= len || from_start < 0 {
        return Err(invalid());
    }
    usize::try_from(from_start).map_err(|_| invalid())
}

/// Go's `strconv.Atoi`: an optional sign and decimal digits that fit in 64 bits.
fn atoi(text: &str) -> Result<i64, String> {
    let failure = |why: &str| format!("strconv.Atoi: parsing {}: {why}", go_quote(text));
    let digits = text.strip_prefix(['+', '-']).unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(failure("invalid syntax"));
    }
    let magnitude: i128 = digits
        .bytes()
        .try_fold(0i128, |n, b| {
            let n = n * 10 + i128::from(b - b'0');
            (n <= i128::from(u64::MAX)).then_some(n)
        })
        .ok_or_else(|| failure("value out of range"))?;
    let signed = if text.starts_with('-') {
        -magnitude
    } else {
        magnitude
    };
    i64::try_from(signed).map_err(|_| failure("value out of range"))
}

/// The library's unescaping of a path piece: `~1` to `/`, then `~0` to `~`.
fn unescape(piece: &str) -> std::borrow::Cow<'_, str> {
    if piece.contains('~') {
        piece.replace("~1", "/").replace("~0", "~").into()
    } else {
        piece.into()
    }
}

/// The library's equality: objects by members (a `null` member equal only to a `null` one),
/// arrays item by item, numbers by value.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(a), Value::Number(b)) => a == b || a.as_f64() == b.as_f64(),
        (Value::Object(a), Value::Object(b)) => {
            a.len() == b.len()
                && a.iter()
                    .all(|(key, value)| b.get(key).is_some_and(|other| same(value, other)))
        }
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(a, b)| same(a, b))
        }
        _ => a == b,
    }
}

#[cfg(test)]
mod tests;
