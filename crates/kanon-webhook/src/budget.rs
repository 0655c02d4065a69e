//! Reading a review's JSON within a memory budget.
//!
//! A parsed JSON value takes far more memory than its text: `[0,0,...]` is two bytes per item
//! on the wire and about 80 in a [`serde_json::Value`] (plus the slack of a growing array), so
//! an 8 MiB body could take over 600 MiB once read. [`parse`] builds the same [`Value`] as
//! `serde_json::from_slice` but charges every allocation it makes (array and object storage,
//! keys, strings) against a [`JsonBudget`] as it goes, and stops with [`OverBudget`] the moment
//! the document would need more, or nests deeper than allowed. The charge is an estimate that
//! errs high (object entries are charged as if their table had just doubled), so what a review
//! holds in memory stays under the budget.

use std::cell::Cell;
use std::fmt;

use serde::de::{self, DeserializeSeed, Error as _, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// The most a review's JSON may take once read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JsonBudget {
    /// Bytes of memory the parsed document may take (values, arrays, objects, keys, strings).
    pub memory_bytes: usize,
    /// How deeply arrays and objects may nest (the review's own envelope counts: the object
    /// of a review starts at depth 3).
    pub max_depth: usize,
}

/// The default [`JsonBudget::memory_bytes`]: 24 MiB. A Pod at etcd's object limit (1.5 MiB of
/// JSON) takes about 10–15 MiB once read; evaluation may copy the object once more (to roll
/// back a policy that fails half way), so one review stays well under 64 MiB.
pub const DEFAULT_REVIEW_MEMORY_BYTES: usize = 24 * 1024 * 1024;

/// The default [`JsonBudget::max_depth`]: 128, what serde_json allows by default.
pub const DEFAULT_MAX_DEPTH: usize = 128;

impl Default for JsonBudget {
    fn default() -> Self {
        JsonBudget {
            memory_bytes: DEFAULT_REVIEW_MEMORY_BYTES,
            max_depth: DEFAULT_MAX_DEPTH,
        }
    }
}

/// Which bound a document passed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OverBudget {
    /// It would take more memory than the budget.
    #[error(
        "the review would take more than {} once read ({values} JSON values and {string_bytes} bytes of strings and keys read when it passed the bound)",
        mib(*.limit)
    )]
    Memory {
        /// The budget in bytes.
        limit: usize,
        /// Values read when the budget ran out.
        values: usize,
        /// Bytes of strings and keys read when the budget ran out.
        string_bytes: usize,
    },
    /// It nests deeper than allowed.
    #[error("the review nests arrays and objects deeper than {limit} levels")]
    Depth {
        /// The deepest nesting allowed.
        limit: usize,
    },
}

fn mib(bytes: usize) -> String {
    if bytes.is_multiple_of(1024 * 1024) {
        format!("{} MiB", bytes / (1024 * 1024))
    } else {
        format!("{bytes} bytes")
    }
}

/// Why [`parse`] returned no value.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    /// A bound of the budget was passed.
    #[error(transparent)]
    OverBudget(#[from] OverBudget),
    /// The text is not JSON.
    #[error(transparent)]
    Syntax(#[from] serde_json::Error),
}

/// Parses `bytes` into the [`Value`] `serde_json::from_slice` would give, charging what it
/// allocates against `budget`; stops at the first bound passed.
///
/// A text too short to pass the memory bound whatever it holds (no JSON text is charged more
/// than [`MAX_CHARGE_PER_BYTE`] per byte), as every review kube-apiserver sends of an ordinary
/// object is, is read by serde_json directly, without the meter; only when that fails is it
/// read again, metered, for the error.
pub fn parse(bytes: &[u8], budget: &JsonBudget) -> Result<Value, ParseError> {
    if unmetered(bytes, budget)
        && let Ok(value) = serde_json::from_slice(bytes)
    {
        return Ok(value);
    }
    parse_metered(bytes, budget).map(|(value, _)| value)
}

/// [`parse`], decoding of the review's object and old object only what `projection` keeps
/// ([`crate::projected`]) when the text is short enough to be read without the meter; the
/// whole text otherwise, and whenever it is refused (for the error).
pub fn parse_projected(
    bytes: &[u8],
    budget: &JsonBudget,
    projection: &kanon_engine::Projection,
) -> Result<Value, ParseError> {
    if unmetered(bytes, budget)
        && let Ok(value) = crate::projected::parse(bytes, projection)
    {
        return Ok(value);
    }
    parse(bytes, budget)
}

/// Whether `bytes` cannot pass the budget whatever they hold, so that serde_json may read them
/// without the meter.
fn unmetered(bytes: &[u8], budget: &JsonBudget) -> bool {
    let most = bytes
        .len()
        .saturating_mul(MAX_CHARGE_PER_BYTE)
        .saturating_add(VALUE_SIZE);
    most <= budget.memory_bytes && budget.max_depth >= SERDE_JSON_DEPTH
}

/// The most [`parse`] charges for one byte of JSON text (160): the costliest shape is an array
/// of one element, two bytes of brackets charged the four places its vector starts with
/// (4 × 80), nested (`[[[0]]]`); a value in a list takes at least two bytes (`0,`) and is
/// charged its place in a vector that may just have doubled (2 × 80); an object entry takes at
/// least five (`"":0,`) and is charged about 250.
/// `tests::no_text_is_charged_more_than_the_most_per_byte` checks the worst shapes.
pub const MAX_CHARGE_PER_BYTE: usize = 2 * VALUE_SIZE;

/// The nesting serde_json's own reader allows (its recursion limit, 128, counts the root).
const SERDE_JSON_DEPTH: usize = 127;

/// [`parse`] with the meter, also giving what it charged.
fn parse_metered(bytes: &[u8], budget: &JsonBudget) -> Result<(Value, usize), ParseError> {
    let meter = Meter::new(budget);
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    // Nesting is bounded by the budget's own depth, with a message that says so.
    deserializer.disable_recursion_limit();
    let parsed = meter
        .charge(VALUE_SIZE)
        .map_err(serde_json::Error::custom)
        .and_then(|()| Seed(&meter).deserialize(&mut deserializer))
        .and_then(|value| deserializer.end().map(|()| value));
    match (parsed, meter.over.take()) {
        (Err(_), Some(over)) => Err(over.into()),
        (Err(error), None) => Err(error.into()),
        (Ok(value), _) => Ok((value, meter.used.get())),
    }
}

/// What one value takes in place (in its array slot or object entry).
const VALUE_SIZE: usize = std::mem::size_of::<Value>();

/// What one object entry takes besides its key's text: the entry (hash, key, value) in the
/// entries vector, charged twice for the slack of a vector that has just doubled, and its
/// index in the hash table (a word and a control byte, at most 7/8 full, also doubling).
const ENTRY_SIZE: usize = 2
    * (std::mem::size_of::<usize>() + std::mem::size_of::<String>() + VALUE_SIZE)
    + 2 * (std::mem::size_of::<usize>() + 2);

/// What a heap string of `len` bytes takes: allocators round up to their size classes.
fn heap(len: usize) -> usize {
    if len == 0 {
        0
    } else {
        len.next_multiple_of(16)
    }
}

/// The running charge of one parse.
struct Meter {
    limit: usize,
    max_depth: usize,
    used: Cell<usize>,
    values: Cell<usize>,
    string_bytes: Cell<usize>,
    depth: Cell<usize>,
    over: Cell<Option<OverBudget>>,
}

impl Meter {
    fn new(budget: &JsonBudget) -> Self {
        Meter {
            limit: budget.memory_bytes,
            max_depth: budget.max_depth,
            used: Cell::new(0),
            values: Cell::new(0),
            string_bytes: Cell::new(0),
            depth: Cell::new(0),
            over: Cell::new(None),
        }
    }

    fn charge(&self, bytes: usize) -> Result<(), OverBudget> {
        let used = self.used.get().saturating_add(bytes);
        self.used.set(used);
        if used > self.limit {
            return Err(self.fail(OverBudget::Memory {
                limit: self.limit,
                values: self.values.get(),
                string_bytes: self.string_bytes.get(),
            }));
        }
        Ok(())
    }

    fn string(&self, len: usize) -> Result<(), OverBudget> {
        self.string_bytes
            .set(self.string_bytes.get().saturating_add(len));
        self.charge(heap(len))
    }

    fn enter(&self) -> Result<(), OverBudget> {
        let depth = self.depth.get() + 1;
        if depth > self.max_depth {
            return Err(self.fail(OverBudget::Depth {
                limit: self.max_depth,
            }));
        }
        self.depth.set(depth);
        Ok(())
    }

    fn leave(&self) {
        self.depth.set(self.depth.get().saturating_sub(1));
    }

    /// Records why the parse stops (the first reason wins), for [`parse`] to return it typed
    /// rather than as serde_json's text.
    fn fail(&self, over: OverBudget) -> OverBudget {
        let first = self.over.take().unwrap_or_else(|| over.clone());
        self.over.set(Some(first));
        over
    }
}

/// Deserializes one value, charging its allocations to the meter. The value's own place (its
/// slot in the parent) is charged by the parent.
struct Seed<'m>(&'m Meter);

impl<'de> DeserializeSeed<'de> for Seed<'_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Seed<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: de::Error>(self, value: bool) -> Result<Value, E> {
        self.0.values.set(self.0.values.get() + 1);
        Ok(Value::Bool(value))
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<Value, E> {
        self.0.values.set(self.0.values.get() + 1);
        Ok(Value::Number(value.into()))
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<Value, E> {
        self.0.values.set(self.0.values.get() + 1);
        Ok(Value::Number(value.into()))
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<Value, E> {
        self.0.values.set(self.0.values.get() + 1);
        // As serde_json's own Value: a float JSON can write but not hold is null.
        Ok(serde_json::Number::from_f64(value).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<Value, E> {
        self.0.values.set(self.0.values.get() + 1);
        self.0.string(value.len()).map_err(E::custom)?;
        Ok(Value::String(value.to_owned()))
    }

    fn visit_string<E: de::Error>(self, value: String) -> Result<Value, E> {
        self.0.values.set(self.0.values.get() + 1);
        self.0.string(value.len()).map_err(E::custom)?;
        Ok(Value::String(value))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        self.0.values.set(self.0.values.get() + 1);
        Ok(Value::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        self.visit_unit()
    }

    fn visit_some<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        self.deserialize(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let meter = self.0;
        meter.values.set(meter.values.get() + 1);
        meter.enter().map_err(A::Error::custom)?;
        let mut items: Vec<Value> = Vec::new();
        while let Some(item) = seq.next_element_seed(Seed(meter))? {
            if items.len() == items.capacity() {
                // Grown here, exactly as charged, rather than by `push`'s own doubling.
                let more = items.capacity().max(4);
                meter
                    .charge(more.saturating_mul(VALUE_SIZE))
                    .map_err(A::Error::custom)?;
                items.reserve_exact(more);
            }
            items.push(item);
        }
        meter.leave();
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let meter = self.0;
        meter.values.set(meter.values.get() + 1);
        meter.enter().map_err(A::Error::custom)?;
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            meter.string(key.len()).map_err(A::Error::custom)?;
            meter.charge(ENTRY_SIZE).map_err(A::Error::custom)?;
            let value = map.next_value_seed(Seed(meter))?;
            // A repeated key keeps its last value, as serde_json's own Value does.
            object.insert(key, value);
        }
        meter.leave();
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(memory_bytes: usize) -> JsonBudget {
        JsonBudget {
            memory_bytes,
            max_depth: DEFAULT_MAX_DEPTH,
        }
    }

    #[test]
    fn gives_what_serde_json_gives() {
        let documents = [
            r#"{"a":1,"b":[true,false,null,-3,4.5,1e300,"x\u00e9\n"],"c":{"d":{}},"e":[],"a":2}"#,
            "[]",
            "0",
            r#""just a string""#,
            r#"{"big":18446744073709551615,"neg":-9223372036854775808,"f":-0.0}"#,
            " [ 1 , [ 2 , [ 3 ] ] ] ",
        ];
        for text in documents {
            let expected: Value = serde_json::from_str(text).unwrap();
            let parsed = parse(text.as_bytes(), &JsonBudget::default()).unwrap();
            assert_eq!(parsed, expected, "{text}");
            // Key order too (preserve_order).
            assert_eq!(parsed.to_string(), expected.to_string(), "{text}");
        }
    }

    #[test]
    fn syntax_errors_are_serde_jsons() {
        for text in ["", "{", "[1,]", r#"{"a" 1}"#, "[1] x", "1e400"] {
            let expected = serde_json::from_str::<Value>(text).unwrap_err().to_string();
            match parse(text.as_bytes(), &JsonBudget::default()) {
                Err(ParseError::Syntax(e)) => assert_eq!(e.to_string(), expected, "{text}"),
                other => panic!("{text}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_large_array_of_small_values_passes_the_memory_bound() {
        // 1 MiB of text, ~520,000 values: over 40 MiB as values (80 MiB of array once it has
        // doubled to hold them all).
        let text = format!("[{}0]", "0,".repeat(512 * 1024));
        match parse(text.as_bytes(), &JsonBudget::default()) {
            Err(ParseError::OverBudget(OverBudget::Memory {
                limit,
                values,
                string_bytes,
            })) => {
                assert_eq!(limit, DEFAULT_REVIEW_MEMORY_BYTES);
                // The bound is met before the whole array is read, and near where it should.
                assert!((100_000..=320_000).contains(&values), "{values}");
                assert_eq!(string_bytes, 0);
            }
            other => panic!("{other:?}"),
        }
        // The same document within a budget that holds it.
        let parsed = parse(text.as_bytes(), &budget(128 * 1024 * 1024)).unwrap();
        assert_eq!(parsed.as_array().map(Vec::len), Some(512 * 1024 + 1));
    }

    #[test]
    fn strings_keys_and_objects_are_charged() {
        let long = "x".repeat(100_000);
        let text = format!(r#"{{"a":"{long}","b":"{long}"}}"#);
        assert!(parse(text.as_bytes(), &budget(150_000)).is_err());
        assert!(parse(text.as_bytes(), &budget(250_000)).is_ok());
        // Many small objects: each entry costs far more than its text.
        let text = format!("[{}{{}}]", r#"{"k":1},"#.repeat(20_000));
        match parse(text.as_bytes(), &budget(1024 * 1024)) {
            Err(ParseError::OverBudget(OverBudget::Memory { .. })) => {}
            other => panic!("{other:?}"),
        }
        let key = "k".repeat(1000);
        let text = format!(r#"{{"{key}":1}}"#);
        match parse(text.as_bytes(), &budget(900)) {
            Err(ParseError::OverBudget(OverBudget::Memory { string_bytes, .. })) => {
                assert_eq!(string_bytes, 1000)
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn no_text_is_charged_more_than_the_most_per_byte() {
        let shapes = [
            format!("[{}0]", "0,".repeat(100_000)),
            format!("[{}[]]", "[],".repeat(100_000)),
            format!("[{}{{}}]", "{},".repeat(100_000)),
            format!("[{}\"\"]", "\"\",".repeat(100_000)),
            format!("{{{}\"\":0}}", "\"\":0,".repeat(100_000)),
            format!(
                "{{{}\"z\":0}}",
                (0..100_000)
                    .map(|n| format!("\"{n:x}\":0,"))
                    .collect::<String>()
            ),
            format!("[{}0]", "[0],".repeat(100_000)),
            format!("[{}0]", "[[[[[[0]]]]]],".repeat(20_000)),
            format!("{}0{}", "[".repeat(120), "]".repeat(120)),
            format!("[{}0]", "{\"\":{\"\":{\"\":[0]}}},".repeat(20_000)),
            format!("[{}0]", "1e9,".repeat(100_000)),
            "0".to_string(),
            "[]".to_string(),
            "[0]".to_string(),
            "{\"\":0}".to_string(),
        ];
        let room = JsonBudget {
            memory_bytes: usize::MAX,
            max_depth: DEFAULT_MAX_DEPTH,
        };
        for text in shapes {
            let (_, charged) = parse_metered(text.as_bytes(), &room).unwrap();
            let most = text.len() * MAX_CHARGE_PER_BYTE + VALUE_SIZE;
            assert!(
                charged <= most,
                "{}...: charged {charged}, more than {most}",
                &text[..text.len().min(20)]
            );
        }
    }

    #[test]
    fn short_texts_read_directly_give_the_same_values_and_errors() {
        let budget = JsonBudget::default();
        let text = format!("[{}0]", "0,".repeat(1000));
        assert!(text.len() * MAX_CHARGE_PER_BYTE < budget.memory_bytes);
        assert_eq!(
            parse(text.as_bytes(), &budget).unwrap(),
            parse_metered(text.as_bytes(), &budget).unwrap().0
        );
        // Nesting at the bound: serde_json alone refuses it, the metered reader does not.
        let nested = |depth: usize| format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        assert!(serde_json::from_str::<Value>(&nested(DEFAULT_MAX_DEPTH)).is_err());
        assert!(parse(nested(DEFAULT_MAX_DEPTH).as_bytes(), &budget).is_ok());
        let err = parse(nested(DEFAULT_MAX_DEPTH + 1).as_bytes(), &budget).unwrap_err();
        assert!(
            matches!(err, ParseError::OverBudget(OverBudget::Depth { .. })),
            "{err}"
        );
    }

    #[test]
    fn depth_is_bounded_by_the_budget() {
        let nested = |depth: usize| format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        let budget = JsonBudget {
            memory_bytes: DEFAULT_REVIEW_MEMORY_BYTES,
            max_depth: 10,
        };
        assert!(parse(nested(10).as_bytes(), &budget).is_ok());
        match parse(nested(11).as_bytes(), &budget) {
            Err(ParseError::OverBudget(OverBudget::Depth { limit: 10 })) => {}
            other => panic!("{other:?}"),
        }
        // Beyond serde_json's own limit of 128 when the budget allows it, and refused by the
        // budget (not a stack overflow) far beyond.
        let deep = JsonBudget {
            memory_bytes: DEFAULT_REVIEW_MEMORY_BYTES,
            max_depth: 200,
        };
        assert!(parse(nested(200).as_bytes(), &deep).is_ok());
        let err = parse(nested(100_000).as_bytes(), &deep).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the review nests arrays and objects deeper than 200 levels"
        );
    }

    #[test]
    fn the_message_names_the_bound_and_what_was_read() {
        let text = format!("[{}0]", "0,".repeat(100_000));
        let err = parse(text.as_bytes(), &budget(1024 * 1024)).unwrap_err();
        let message = err.to_string();
        assert!(
            message.starts_with("the review would take more than 1 MiB once read ("),
            "{message}"
        );
        assert!(message.contains("JSON values"), "{message}");
    }
}
