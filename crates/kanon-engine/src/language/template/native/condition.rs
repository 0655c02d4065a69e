//! The native form of a validate `condition`.

use std::sync::Arc;

use kanon_api::Cond;
use serde_json::{Map, Value};

use super::MAX_SELECTED;
use crate::helpers;
use crate::language::template::message::{Compared, ConditionVerdict};

/// The native form of a validate `condition`.
#[derive(Clone, Debug)]
pub struct NativeCondition {
    cond: Cond,
    compared: Compared,
    /// `affectMode: allow`: deny when the condition does not hold.
    allow: bool,
    /// `dataRef` selects several values, each tested on its own.
    each: bool,
    /// The pattern of a `Regex` condition against a constant.
    pattern: Option<Arc<regex::Regex>>,
    /// Patterns that come from `valueRef`.
    patterns: helpers::RegexCache,
}

impl NativeCondition {
    /// A condition; `None` when its program fails on every run.
    pub(crate) fn new(cond: Cond, compared: Compared, allow: bool, each: bool) -> Option<Self> {
        let pattern = match (&compared, cond) {
            (Compared::Constant(Value::String(p)), Cond::Regex) => {
                Some(helpers::RegexCache::default().get(p).ok()?)
            }
            // A constant that is not a pattern fails the policy; nothing to run.
            (Compared::Constant(_), Cond::Regex) => return None,
            _ => None,
        };
        Some(NativeCondition {
            cond,
            compared,
            allow,
            each,
            pattern,
            patterns: helpers::RegexCache::default(),
        })
    }

    pub(super) fn run(&self, refs: &Map<String, Value>) -> Option<ConditionVerdict> {
        let present = |name: &str| refs.get(name).filter(|v| !v.is_null());
        let processed;
        let value = match &self.compared {
            Compared::Nothing => None,
            Compared::Constant(v) => Some(v),
            Compared::Reference(process) => match (present("value"), process) {
                (None, _) => None,
                (Some(v), None) => Some(v),
                (Some(v), Some((op, operand))) => {
                    processed = helpers::process_value(v, op, operand).ok()?;
                    Some(&processed)
                }
            },
        };
        let (hit, item) = if self.each {
            // An empty selection is one absent value.
            let selected: &[Value] = match present("data") {
                None => &[Value::Null],
                Some(Value::Array(items)) if items.len() <= MAX_SELECTED => items,
                Some(_) => return None,
            };
            // Every value is tested (an error on any one fails the program); the first that
            // hits and the first that misses are kept for the message.
            let (mut first_hit, mut first_miss) = (None, None);
            for (i, data) in selected.iter().enumerate() {
                if self.test(Some(data).filter(|d| !d.is_null()), value)? {
                    first_hit.get_or_insert(i);
                } else {
                    first_miss.get_or_insert(i);
                }
            }
            if self.allow {
                (first_miss.is_none(), first_miss)
            } else {
                (first_hit.is_some(), first_hit)
            }
        } else {
            (self.test(present("data"), value)?, None)
        };
        let valid = if self.allow { hit } else { !hit };
        Some(ConditionVerdict {
            valid,
            item: if valid { None } else { item },
        })
    }

    /// Whether one value hits; `None` when the program's helper would fail.
    pub(super) fn test(&self, data: Option<&Value>, value: Option<&Value>) -> Option<bool> {
        match self.cond {
            Cond::Exist => return Some(data.is_some()),
            Cond::NotExist => return Some(data.is_none()),
            _ => {}
        }
        // A missing value on either side is never hit.
        let (Some(data), Some(value)) = (data, value) else {
            return Some(false);
        };
        Some(match self.cond {
            Cond::Exist | Cond::NotExist => unreachable!("answered above"),
            Cond::Equal => helpers::values_equal(data, value),
            Cond::NotEqual => !helpers::values_equal(data, value),
            Cond::In => helpers::contains_all(value, data).ok()?,
            Cond::NotIn => helpers::contains_none(value, data).ok()?,
            Cond::Gt => helpers::compare(data, value).ok()? > 0,
            Cond::Gte => helpers::compare(data, value).ok()? >= 0,
            Cond::Lt => helpers::compare(data, value).ok()? < 0,
            Cond::Lte => helpers::compare(data, value).ok()? <= 0,
            Cond::Regex => {
                let regex = match (&self.pattern, value) {
                    (Some(regex), _) => regex.clone(),
                    (None, Value::String(pattern)) => self.patterns.get(pattern).ok()?,
                    // minijinja would take the value's display text as the pattern.
                    (None, _) => return None,
                };
                regex.is_match(&helpers::regex_text(data))
            }
        })
    }
}
