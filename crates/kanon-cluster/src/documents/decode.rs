//! Objects decoded from the apiserver's JSON as policies see them, with the memory they take
//! charged as they are built, so that a read stops at its bound rather than after allocating
//! past it (a megabyte of `[0,0,...]` in a custom resource takes some sixteen once decoded).
//! Objects get their `apiVersion` and `kind` (list items leave them out), and
//! `metadata.managedFields` (often the larger part of an object, and read by policies only by
//! mistake) are skipped, never built.

use std::cell::Cell;

use kube::core::ApiResource;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// What a [`Value`] node takes besides its text: the enum itself.
const VALUE_BYTES: usize = std::mem::size_of::<Value>();
/// What an object's entry takes besides its key's text and its value: the key's `String`,
/// and the index map's hash and slot.
const ENTRY_BYTES: usize = 48;

/// The memory decoded objects may still take; charged as they are built.
#[derive(Debug)]
pub(crate) struct Charge {
    left: Cell<usize>,
    spent: Cell<usize>,
    over: Cell<bool>,
}

impl Charge {
    /// A charge of at most `bound` bytes (`usize::MAX`: counted, never refused).
    pub(crate) fn new(bound: usize) -> Self {
        Charge {
            left: Cell::new(bound),
            spent: Cell::new(0),
            over: Cell::new(false),
        }
    }

    /// What was charged so far.
    pub(crate) fn spent(&self) -> usize {
        self.spent.get()
    }

    fn take<E: de::Error>(&self, bytes: usize) -> Result<(), E> {
        match self.left.get().checked_sub(bytes) {
            Some(left) => {
                self.left.set(left);
                self.spent.set(self.spent.get() + bytes);
                Ok(())
            }
            None => {
                self.over.set(true);
                Err(E::custom("the decoded objects exceed their bound"))
            }
        }
    }
}

/// Why a body could not be decoded.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DecodeError {
    /// The objects would take more than the charge allows.
    #[error("the decoded objects exceed their bound")]
    OverBound,
    /// Not the JSON of an object or a list.
    #[error("{0}")]
    Json(serde_json::Error),
}

fn decoded<T>(result: Result<T, serde_json::Error>, charge: &Charge) -> Result<T, DecodeError> {
    result.map_err(|e| {
        if charge.over.get() {
            DecodeError::OverBound
        } else {
            DecodeError::Json(e)
        }
    })
}

/// One object (the body of a GET), typed from `resource`.
pub(crate) fn object(
    body: &[u8],
    resource: &ApiResource,
    charge: &Charge,
) -> Result<Value, DecodeError> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let map = decoded(
        ObjectSeed {
            charge,
            metadata: false,
        }
        .deserialize(&mut de)
        .and_then(|map| de.end().map(|()| map)),
        charge,
    )?;
    typed(map, resource, charge)
}

/// One LIST page: its objects, typed from `resource`, and the token of the next page.
pub(crate) fn page(
    body: &[u8],
    resource: &ApiResource,
    charge: &Charge,
) -> Result<(Vec<Value>, Option<String>), DecodeError> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let (items, next) = decoded(
        PageSeed { charge }
            .deserialize(&mut de)
            .and_then(|page| de.end().map(|()| page)),
        charge,
    )?;
    let objects = items
        .into_iter()
        .map(|map| typed(map, resource, charge))
        .collect::<Result<_, _>>()?;
    Ok((objects, next.filter(|t| !t.is_empty())))
}

/// The object with its `apiVersion` and `kind` set (list items leave them out).
fn typed(
    mut map: Map<String, Value>,
    resource: &ApiResource,
    charge: &Charge,
) -> Result<Value, DecodeError> {
    let (api_version, kind) = (resource.api_version.as_str(), resource.kind.as_str());
    let cost = 2 * (ENTRY_BYTES + VALUE_BYTES) + "apiVersion".len() + "kind".len();
    decoded(
        charge.take::<serde_json::Error>(cost + api_version.len() + kind.len()),
        charge,
    )?;
    map.insert("apiVersion".into(), Value::from(api_version));
    map.insert("kind".into(), Value::from(kind));
    Ok(Value::Object(map))
}

/// A LIST body: `metadata.continue` and the `items` (`null` in some apiservers' empty lists).
struct PageSeed<'c> {
    charge: &'c Charge,
}

type Page = (Vec<Map<String, Value>>, Option<String>);

impl<'de> DeserializeSeed<'de> for PageSeed<'_> {
    type Value = Page;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Page, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for PageSeed<'_> {
    type Value = Page;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a list")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Page, A::Error> {
        #[derive(serde::Deserialize, Default)]
        struct ListMetadata {
            #[serde(rename = "continue")]
            continue_token: Option<String>,
        }
        let (mut items, mut next) = (Vec::new(), None);
        while let Some(key) = access.next_key::<std::borrow::Cow<'de, str>>()? {
            match key.as_ref() {
                "metadata" => next = access.next_value::<ListMetadata>()?.continue_token,
                "items" => {
                    items = access
                        .next_value_seed(ItemsSeed {
                            charge: self.charge,
                        })?
                        .unwrap_or_default()
                }
                _ => {
                    access.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok((items, next))
    }
}

struct ItemsSeed<'c> {
    charge: &'c Charge,
}

impl<'de> DeserializeSeed<'de> for ItemsSeed<'_> {
    type Value = Option<Vec<Map<String, Value>>>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for ItemsSeed<'_> {
    type Value = Option<Vec<Map<String, Value>>>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a list of objects or null")
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_seq(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut access: A) -> Result<Self::Value, A::Error> {
        let mut items = Vec::new();
        loop {
            self.charge.take::<A::Error>(VALUE_BYTES)?;
            match access.next_element_seed(ObjectSeed {
                charge: self.charge,
                metadata: false,
            })? {
                Some(item) => items.push(item),
                None => return Ok(Some(items)),
            }
        }
    }
}

/// An object; in `metadata`, without `managedFields`.
#[derive(Clone, Copy)]
struct ObjectSeed<'c> {
    charge: &'c Charge,
    metadata: bool,
}

impl<'de> DeserializeSeed<'de> for ObjectSeed<'_> {
    type Value = Map<String, Value>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for ObjectSeed<'_> {
    type Value = Map<String, Value>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Self::Value, A::Error> {
        let mut map = Map::new();
        while let Some(key) = access.next_key::<std::borrow::Cow<'de, str>>()? {
            if self.metadata && key == "managedFields" {
                access.next_value::<IgnoredAny>()?;
                continue;
            }
            self.charge
                .take::<A::Error>(ENTRY_BYTES + VALUE_BYTES + key.len())?;
            let value = if !self.metadata && key == "metadata" {
                Value::Object(access.next_value_seed(ObjectSeed {
                    charge: self.charge,
                    metadata: true,
                })?)
            } else {
                access.next_value_seed(ValueSeed {
                    charge: self.charge,
                })?
            };
            map.insert(key.into_owned(), value);
        }
        Ok(map)
    }
}

/// Any JSON value, charged node by node (the node itself is charged by its container).
#[derive(Clone, Copy)]
struct ValueSeed<'c> {
    charge: &'c Charge,
}

impl<'de> DeserializeSeed<'de> for ValueSeed<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ValueSeed<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        self.charge.take::<E>(v.len())?;
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        self.charge.take::<E>(v.len())?;
        Ok(Value::String(v))
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        self.deserialize(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut access: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        loop {
            self.charge.take::<A::Error>(VALUE_BYTES)?;
            match access.next_element_seed(self)? {
                Some(item) => items.push(item),
                None => return Ok(Value::Array(items)),
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Value, A::Error> {
        let mut map = Map::new();
        while let Some(key) = access.next_key::<std::borrow::Cow<'de, str>>()? {
            self.charge
                .take::<A::Error>(ENTRY_BYTES + VALUE_BYTES + key.len())?;
            let value = access.next_value_seed(self)?;
            map.insert(key.into_owned(), value);
        }
        Ok(Value::Object(map))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::GroupVersionKind;
    use serde_json::json;

    fn config_maps() -> ApiResource {
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("", "v1", "ConfigMap"),
            "configmaps",
        )
    }

    #[test]
    fn a_page_is_decoded_typed_and_without_managed_fields() {
        let body = br#"{"kind": "ConfigMapList", "apiVersion": "v1",
            "metadata": {"resourceVersion": "7", "continue": "abc"},
            "items": [{"metadata": {"name": "a", "namespace": "n",
                "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:data": {}}}],
                "labels": {"managedFields": "kept"}},
              "data": {"metadata": "kept", "managedFields": "kept", "n": [1, 2.5, null, true]}}]}"#;
        let charge = Charge::new(1 << 20);
        let (items, next) = page(body, &config_maps(), &charge).expect("a page");
        assert_eq!(next.as_deref(), Some("abc"));
        assert_eq!(
            items,
            vec![json!({"metadata": {"name": "a", "namespace": "n",
                                     "labels": {"managedFields": "kept"}},
                        "data": {"metadata": "kept", "managedFields": "kept",
                                 "n": [1, 2.5, null, true]},
                        "apiVersion": "v1", "kind": "ConfigMap"})]
        );
        assert!(charge.spent() > 0);
        let empty = page(
            br#"{"metadata": {"continue": ""}, "items": null}"#,
            &config_maps(),
            &charge,
        )
        .expect("an empty page");
        assert_eq!(empty, (Vec::new(), None));
        assert!(matches!(
            page(br#"{"items": [3]}"#, &config_maps(), &charge),
            Err(DecodeError::Json(_))
        ));
        assert!(matches!(
            object(br#"{"metadata": {}} trailing"#, &config_maps(), &charge),
            Err(DecodeError::Json(_))
        ));
    }

    #[test]
    fn an_object_gets_its_type() {
        let deployments = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apps", "v1", "Deployment"),
            "deployments",
        );
        let charge = Charge::new(1 << 20);
        assert_eq!(
            object(
                br#"{"metadata": {"name": "a", "managedFields": []}}"#,
                &deployments,
                &charge
            )
            .expect("an object"),
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "a"}})
        );
    }

    #[test]
    fn decoding_stops_at_its_bound() {
        // 100,000 zeros: 200 KB of JSON, over 3 MB once decoded.
        let zeros = format!(
            r#"{{"metadata": {{"name": "z"}}, "data": [{}0]}}"#,
            "0,".repeat(99_999)
        );
        let charge = Charge::new(1 << 20);
        assert!(matches!(
            object(zeros.as_bytes(), &config_maps(), &charge),
            Err(DecodeError::OverBound)
        ));
        assert!(charge.spent() <= 1 << 20);
        // Within its bound, what it charged is about what serde_json holds.
        let charge = Charge::new(8 << 20);
        object(zeros.as_bytes(), &config_maps(), &charge).expect("decoded");
        assert!(charge.spent() > 100_000 * VALUE_BYTES, "{}", charge.spent());
        let text = format!(r#"{{"data": {{"k": "{}"}}}}"#, "x".repeat(900 << 10));
        let charge = Charge::new(1 << 20);
        object(text.as_bytes(), &config_maps(), &charge).expect("decoded");
        assert!((900 << 10..(900 << 10) + 1024).contains(&charge.spent()));
    }
}
