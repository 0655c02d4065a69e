//! Objects read from the apiserver as policies see them: an answer read from its stream within
//! a bound of bytes ([`read_within`]), then decoded into JSON documents with their `apiVersion`
//! and `kind` set and without `metadata.managedFields` ([`decode`]). The audit's pages and the
//! object lookups read through here.

pub(crate) mod decode;

use kube::Client;
use kube::api::{DynamicObject, ListParams};
use kube::core::ApiResource;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::Value;

use decode::{Charge, DecodeError};

/// An answer read from its stream within a bound ([`read_within`]).
#[derive(Debug)]
pub(crate) enum Within {
    /// The whole answer.
    Whole(Vec<u8>),
    /// The answer is longer than the bound: its first `bound + 1` bytes.
    Over(Vec<u8>),
}

/// Reads `stream` to its end, keeping at most `bound + 1` bytes: room for the bound is taken
/// at once, so that the buffer never grows by copying (pages of memory the answer does not
/// reach are never touched).
pub(crate) async fn read_within(
    stream: impl futures::AsyncBufRead,
    bound: usize,
) -> std::io::Result<Within> {
    use futures::AsyncBufReadExt;
    let mut stream = std::pin::pin!(stream);
    let mut body = Vec::with_capacity(bound.saturating_add(1));
    loop {
        let chunk = stream.fill_buf().await?;
        if chunk.is_empty() {
            return Ok(Within::Whole(body));
        }
        let room = bound.saturating_add(1) - body.len();
        let taken = chunk.len().min(room);
        body.extend_from_slice(&chunk[..taken]);
        stream.as_mut().consume(taken);
        if body.len() > bound {
            return Ok(Within::Over(body));
        }
    }
}

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
    let url = <DynamicObject as kube::Resource>::url_path(resource, namespace);
    let request = kube::core::Request::new(url)
        .list(params)
        .map_err(kube::Error::BuildRequest)?;
    let stream = client.request_stream(request).await?;
    let body = match read_within(stream, max_bytes)
        .await
        .map_err(kube::Error::ReadEvents)?
    {
        Within::Whole(body) => body,
        Within::Over(partial) => {
            return Ok(BoundedList::TooLarge {
                fitted: whole_items(&partial),
            });
        }
    };
    let bytes = body.len();
    // Counted, not bounded: the page's bound is on its bytes, as the response arrives.
    let (objects, next) =
        decode::page(&body, resource, &Charge::new(usize::MAX)).map_err(|e| match e {
            DecodeError::Json(e) => kube::Error::SerdeError(e),
            DecodeError::OverBound => {
                kube::Error::SerdeError(serde::de::Error::custom("a page past usize::MAX"))
            }
        })?;
    drop(body);
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
