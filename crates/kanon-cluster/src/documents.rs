//! Objects read from the apiserver as policies see them: JSON documents with their
//! `apiVersion` and `kind` set (list items leave them out) and without
//! `metadata.managedFields`, which are skipped while the answer is decoded (no typed object and
//! no second copy is built). The audit reads through here; object lookups decode the same
//! way with their memory charged (`objects::decode`).

use kube::Client;
use kube::api::{DynamicObject, ListParams};
use kube::core::ApiResource;
use serde::Deserialize;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::{Map, Value};

/// A LIST read within a bound of bytes ([`list_within`]).
#[derive(Debug)]
pub enum BoundedList {
    /// The whole response.
    Page {
        /// The objects, typed.
        objects: Vec<Value>,
        /// The token of the next page (`None`: this was the last).
        next: Option<String>,
        /// How many bytes the response took.
        bytes: usize,
    },
    /// The response is longer than the bound: nothing of it is kept. `fitted` whole objects came
    /// within the bound (ask for that many).
    TooLarge {
        /// Objects wholly within the bound.
        fitted: usize,
    },
}

/// One LIST of `resource` (in `namespace`, or everywhere) with `params`, its response read from the stream only up to `max_bytes` and
/// decoded once read: a page never holds more than `max_bytes` of response (and the documents
/// decoded from it), however large its objects. A longer response is given up
/// ([`BoundedList::TooLarge`], with how many objects fitted) rather than read.
pub async fn list_within(
    client: &Client,
    resource: &ApiResource,
    namespace: Option<&str>,
    params: &ListParams,
    max_bytes: usize,
) -> Result<BoundedList, kube::Error> {
    use futures::{AsyncBufRead, AsyncBufReadExt};
    let url = <DynamicObject as kube::Resource>::url_path(resource, namespace);
    let request = kube::core::Request::new(url)
        .list(params)
        .map_err(kube::Error::BuildRequest)?;
    let reader = client.request_stream(request).await?;
    let mut reader = std::pin::pin!(reader);
    // Room for the bound at once, so that the buffer never grows by copying; pages of memory
    // the response does not reach are never touched.
    let mut body = Vec::with_capacity(max_bytes.saturating_add(1));
    loop {
        let chunk = reader.fill_buf().await.map_err(kube::Error::ReadEvents)?;
        if chunk.is_empty() {
            break;
        }
        let room = max_bytes.saturating_add(1) - body.len();
        let taken = chunk.len().min(room);
        body.extend_from_slice(&chunk[..taken]);
        reader.as_mut().consume(taken);
        if body.len() > max_bytes {
            return Ok(BoundedList::TooLarge {
                fitted: whole_items(&body),
            });
        }
    }
    let bytes = body.len();
    let list: ListBody = serde_json::from_slice(&body).map_err(kube::Error::SerdeError)?;
    drop(body);
    let next = list.metadata.continue_token.filter(|t| !t.is_empty());
    let objects = list
        .items
        .unwrap_or_default()
        .into_iter()
        .map(|document| typed(document, resource))
        .collect();
    Ok(BoundedList::Page {
        objects,
        next,
        bytes,
    })
}

/// How many whole objects of a LIST response's `items` the response's beginning `partial`
/// holds: each is skipped as it is read, nothing is built.
fn whole_items(partial: &[u8]) -> usize {
    let count = std::cell::Cell::new(0);
    let mut deserializer = serde_json::Deserializer::from_slice(partial);
    // The cut ends it with an error; the objects counted before it stand.
    let _ = deserializer.deserialize_map(CountItems(&count));
    count.get()
}

/// Counts the elements of a list's `items` into its cell.
#[derive(Clone, Copy)]
struct CountItems<'c>(&'c std::cell::Cell<usize>);

impl<'de> Visitor<'de> for CountItems<'_> {
    type Value = ();

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str("a list")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<(), A::Error> {
        while let Some(key) = access.next_key::<String>()? {
            if key == "items" {
                access.next_value_seed(self)?;
            } else {
                access.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut access: A) -> Result<(), A::Error> {
        while access.next_element::<IgnoredAny>()?.is_some() {
            self.0.set(self.0.get() + 1);
        }
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
}

impl<'de> DeserializeSeed<'de> for CountItems<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

/// The document with its type set from `resource`.
fn typed(Document(mut map): Document, resource: &ApiResource) -> Value {
    map.insert(
        "apiVersion".into(),
        Value::from(resource.api_version.as_str()),
    );
    map.insert("kind".into(), Value::from(resource.kind.as_str()));
    Value::Object(map)
}

/// A LIST response, its items decoded straight into documents.
#[derive(Deserialize)]
struct ListBody {
    #[serde(default)]
    metadata: ListMetadata,
    // `null` in some apiservers' empty lists.
    #[serde(default)]
    items: Option<Vec<Document>>,
}

#[derive(Default, Deserialize)]
struct ListMetadata {
    #[serde(rename = "continue")]
    continue_token: Option<String>,
}

/// One object, as policies see it: its `metadata.managedFields` (often the larger part of an
/// object, and read by policies only by mistake) are skipped while decoding, never built.
struct Document(Map<String, Value>);

impl<'de> Deserialize<'de> for Document {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer
            .deserialize_map(Fields { metadata: false })
            .map(Document)
    }
}

/// Reads a JSON object into a map; in `metadata`, without `managedFields`.
#[derive(Clone, Copy)]
struct Fields {
    metadata: bool,
}

impl<'de> Visitor<'de> for Fields {
    type Value = Map<String, Value>;

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str("an object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Self::Value, A::Error> {
        let mut map = Map::new();
        while let Some(key) = access.next_key::<String>()? {
            if self.metadata && key == "managedFields" {
                access.next_value::<IgnoredAny>()?;
            } else if !self.metadata && key == "metadata" {
                let metadata = access.next_value_seed(Fields { metadata: true })?;
                map.insert(key, Value::Object(metadata));
            } else {
                map.insert(key, access.next_value()?);
            }
        }
        Ok(map)
    }
}

impl<'de> DeserializeSeed<'de> for Fields {
    type Value = Map<String, Value>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_listed_page_is_decoded_without_managed_fields() {
        let body = r#"{"kind": "ConfigMapList", "apiVersion": "v1",
            "metadata": {"resourceVersion": "7", "continue": "abc"},
            "items": [{"metadata": {"name": "a", "namespace": "n",
                "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:data": {}}}],
                "labels": {"managedFields": "kept"}},
              "data": {"metadata": "kept", "managedFields": "kept"}}]}"#;
        let list: ListBody = serde_json::from_str(body).expect("a list");
        assert_eq!(list.metadata.continue_token.as_deref(), Some("abc"));
        let items: Vec<Value> = list
            .items
            .unwrap_or_default()
            .into_iter()
            .map(|Document(map)| Value::Object(map))
            .collect();
        assert_eq!(
            items,
            vec![json!({"metadata": {"name": "a", "namespace": "n",
                                     "labels": {"managedFields": "kept"}},
                        "data": {"metadata": "kept", "managedFields": "kept"}})]
        );
        let empty: ListBody =
            serde_json::from_str(r#"{"metadata": {}, "items": null}"#).expect("an empty list");
        assert!(empty.items.is_none() && empty.metadata.continue_token.is_none());
        assert!(serde_json::from_str::<ListBody>(r#"{"items": [3]}"#).is_err());
    }

    #[test]
    fn the_whole_items_of_a_cut_response_are_counted() {
        let body = br#"{"kind": "ConfigMapList", "apiVersion": "v1", "metadata": {"continue": "x"},
            "items": [{"metadata": {"name": "a"}, "data": {"k": "[{\"items\": 1}]"}},
                      {"metadata": {"name": "b"}}, {"metadata": {"name": "c"}}]}"#;
        let whole: Vec<usize> = (0..=body.len())
            .map(|end| whole_items(&body[..end]))
            .collect();
        assert_eq!(whole[body.len()], 3);
        let second_ends = body.windows(5).position(|w| w == br#""b"}}"#).expect("b") + 5;
        assert_eq!(
            whole[second_ends],
            2,
            "{}",
            String::from_utf8_lossy(&body[..second_ends])
        );
        assert_eq!(whole[second_ends - 1], 1);
        assert!(whole.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(whole_items(br#"{"metadata": {}, "items": null}"#), 0);
    }

    #[test]
    fn a_document_gets_its_type() {
        let document: Document =
            serde_json::from_value(json!({"metadata": {"name": "a", "managedFields": []}}))
                .expect("an object");
        let resource = ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk("apps", "v1", "Deployment"),
            "deployments",
        );
        assert_eq!(
            typed(document, &resource),
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "a"}})
        );
    }
}
