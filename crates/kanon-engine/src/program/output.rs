//! What a program's output means: the operations of an override program, the verdict of a
//! validate program.

use crate::rule::Verdict;

use super::error::ProgramError;

/// The type of a value with its article, for messages: `an array`, `a string`, `null`.
fn with_article(value: &serde_json::Value) -> String {
    match crate::document::type_name(value) {
        "null" => "null".to_string(),
        name @ ("array" | "object") => format!("an {name}"),
        name => format!("a {name}"),
    }
}

/// Reads an override program's output: a list of operations or `{patches: [...]}`.
pub fn patch_from_output(
    output: Option<serde_json::Value>,
) -> Result<json_patch::Patch, ProgramError> {
    let list = match output {
        None => return Ok(json_patch::Patch(Vec::new())),
        Some(serde_json::Value::Object(mut map))
            if map.contains_key("patches") && map.len() == 1 =>
        {
            map.remove("patches").unwrap_or(serde_json::Value::Null)
        }
        Some(other) => other,
    };
    let list = match list {
        serde_json::Value::Null => return Ok(json_patch::Patch(Vec::new())),
        serde_json::Value::Array(items) => items,
        other => {
            return Err(ProgramError::new(format!(
                "an override program renders a list of operations or {{patches: [...]}}, not {}",
                with_article(&other)
            )));
        }
    };
    let mut ops = Vec::with_capacity(list.len());
    for (i, item) in list.into_iter().enumerate() {
        // Name a bad pointer as such, with the hint of what was probably meant.
        for key in ["path", "from"] {
            if let Some(pointer) = item.get(key).and_then(serde_json::Value::as_str)
                && let Err(e) = crate::pointer::check(pointer)
            {
                return Err(ProgramError::new(format!("operation {i}: {key}: {e}")));
            }
        }
        let op: json_patch::PatchOperation = serde_json::from_value(item.clone()).map_err(|e| {
            ProgramError::new(format!(
                "operation {i} ({item}) is not an RFC 6902 operation: {e}"
            ))
        })?;
        if let Err(e) = crate::pointer::check(op.path().as_str()) {
            return Err(ProgramError::new(format!("operation {i}: {e}")));
        }
        ops.push(op);
    }
    Ok(json_patch::Patch(ops))
}

/// Reads a validate program's output: `{valid, reason, warnings}`; empty output is valid.
pub fn verdict_from_output(output: Option<serde_json::Value>) -> Result<Verdict, ProgramError> {
    let Some(value) = output else {
        return Ok(Verdict::pass());
    };
    let serde_json::Value::Object(map) = value else {
        return Err(ProgramError::new(format!(
            "a validate program renders {{valid, reason, warnings}}, not {}",
            with_article(&value)
        )));
    };
    for key in map.keys() {
        if !matches!(key.as_str(), "valid" | "reason" | "warnings") {
            return Err(ProgramError::new(format!(
                "unknown key `{key}` in the verdict (expected valid, reason, warnings)"
            )));
        }
    }
    let valid = match map.get("valid") {
        Some(serde_json::Value::Bool(b)) => *b,
        Some(other) => {
            return Err(ProgramError::new(format!(
                "`valid` must be true or false, not {other}"
            )));
        }
        None => return Err(ProgramError::new("the verdict has no `valid`")),
    };
    let reason = match map.get("reason") {
        None | Some(serde_json::Value::Null) => String::new(),
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    };
    let warnings = match map.get("warnings") {
        None | Some(serde_json::Value::Null) => Vec::new(),
        Some(serde_json::Value::Array(items)) => items
            .iter()
            .map(|w| {
                w.as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| w.to_string())
            })
            .collect(),
        Some(other) => {
            return Err(ProgramError::new(format!(
                "`warnings` must be a list, not {other}"
            )));
        }
    };
    Ok(Verdict {
        valid,
        reason,
        more_reasons: Vec::new(),
        warnings,
        audit_annotations: Vec::new(),
        status: None,
    })
}
