//! One read from the apiserver for a reference, bounded in bytes: a GET, or a LIST filtered
//! by the apiserver (`labelSelector`) and paged (`limit`, `continue`) so that no answer is
//! larger than what is left of the read's bound. The body is read as it arrives and given up
//! once past the bound; objects are decoded with their memory charged ([`super::decode`]).

use std::sync::Arc;

use kube::Client;
use kube::api::{DynamicObject, GetParams, ListParams};
use kube::core::ApiResource;
use serde_json::Value;

use crate::documents::decode::{self, Charge, DecodeError};
use crate::documents::{Within, read_within};

/// What a read found, and the memory its objects take (as decoded, estimated).
#[derive(Debug)]
pub(super) struct Fetched {
    /// The object or the objects.
    pub(super) read: Read,
    /// What they take.
    pub(super) bytes: usize,
}

/// An object (or none), or a listing's objects ordered by namespace and name.
#[derive(Debug, Clone)]
pub(super) enum Read {
    One(Option<Arc<Value>>),
    Many(Vec<Arc<Value>>),
}

impl Read {
    /// The objects, each one `Arc` that readers share.
    pub(super) fn objects(&self) -> &[Arc<Value>] {
        match self {
            Read::One(found) => found.as_slice(),
            Read::Many(items) => items,
        }
    }
}

/// Why a read failed.
#[derive(Debug, thiserror::Error)]
pub(super) enum ReadError {
    /// The apiserver or the connection failed.
    #[error(transparent)]
    Api(#[from] kube::Error),
    /// The answer, or its objects once decoded, would take more than the read's bound.
    #[error("the objects read take more than {}, the bound on one read", size(*.bound))]
    TooLarge {
        /// The bound, in bytes.
        bound: usize,
    },
    /// The answer is not the JSON of an object or a list.
    #[error("the apiserver's answer is not an object or a list: {0}")]
    Decode(serde_json::Error),
}

/// `bytes` for a person: in MiB or KiB when whole, else in bytes.
pub(super) fn size(bytes: usize) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} bytes"),
    }
}

/// Objects asked for in a listing's first page.
const FIRST_PAGE: u32 = 16;

/// The bounds of one read.
#[derive(Debug, Clone, Copy)]
pub(super) struct Bounds {
    /// The most the answers' bodies may hold together, and the most their objects may take
    /// decoded.
    pub(super) bytes: usize,
    /// The most objects asked for per LIST page.
    pub(super) page_objects: u32,
}

fn decoded<T>(result: Result<T, DecodeError>, bound: usize) -> Result<T, ReadError> {
    result.map_err(|e| match e {
        DecodeError::OverBound => ReadError::TooLarge { bound },
        DecodeError::Json(e) => ReadError::Decode(e),
    })
}

/// The object `name` of `resource` (in `namespace`, for a namespaced type); `None` when the
/// apiserver has none (404).
pub(super) async fn get(
    client: &Client,
    resource: &ApiResource,
    namespace: Option<&str>,
    name: &str,
    bounds: Bounds,
) -> Result<Fetched, ReadError> {
    let url = <DynamicObject as kube::Resource>::url_path(resource, namespace);
    let request = kube::core::Request::new(url)
        .get(name, &GetParams::default())
        .map_err(kube::Error::BuildRequest)?;
    let body = match client.request_stream(request).await {
        Ok(stream) => body(stream, bounds.bytes).await?,
        Err(kube::Error::Api(status)) if status.code == 404 => {
            return Ok(Fetched {
                read: Read::One(None),
                bytes: 0,
            });
        }
        Err(error) => return Err(error.into()),
    };
    let charge = Charge::new(bounds.bytes);
    let object = decoded(decode::object(&body, resource, &charge), bounds.bytes)?;
    Ok(Fetched {
        read: Read::One(Some(Arc::new(object))),
        bytes: charge.spent(),
    })
}

/// The objects of `resource` in `namespace` (or everywhere) that `selector` matches (every
/// object without one), page by page, ordered by namespace and name.
pub(super) async fn list(
    client: &Client,
    resource: &ApiResource,
    namespace: Option<&str>,
    selector: Option<&str>,
    bounds: Bounds,
) -> Result<Fetched, ReadError> {
    let url = <DynamicObject as kube::Resource>::url_path(resource, namespace);
    // A first page of a few objects tells their size; later pages ask for about what is left
    // of the bound, so that the apiserver never builds a page much larger than kanon reads.
    let mut params = ListParams::default().limit(FIRST_PAGE.min(bounds.page_objects));
    if let Some(selector) = selector {
        params = params.labels(selector);
    }
    // Bodies are counted together, so that many small pages cannot add up past the bound.
    let (mut received, charge) = (0, Charge::new(bounds.bytes));
    let mut objects = Vec::new();
    loop {
        let request = kube::core::Request::new(url.clone())
            .list(&params)
            .map_err(kube::Error::BuildRequest)?;
        let left = bounds.bytes.saturating_sub(received);
        let stream = client.request_stream(request).await?;
        let body = body(stream, left).await.map_err(|e| match e {
            ReadError::TooLarge { .. } => ReadError::TooLarge {
                bound: bounds.bytes,
            },
            e => e,
        })?;
        received += body.len();
        let (page, next) = decoded(decode::page(&body, resource, &charge), bounds.bytes)?;
        drop(body);
        objects.extend(page.into_iter().map(Arc::new));
        match next {
            Some(token) => params.continue_token = Some(token),
            None => break,
        }
        let each = received / objects.len().max(1);
        let fits = bounds.bytes.saturating_sub(received) / each.max(1) + 1;
        params.limit = Some(fits.clamp(1, bounds.page_objects as usize) as u32);
    }
    let key = |o: &Arc<Value>| {
        let text = |p: &str| {
            o.pointer(p)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        (text("/metadata/namespace"), text("/metadata/name"))
    };
    objects.sort_by_cached_key(key);
    Ok(Fetched {
        read: Read::Many(objects),
        bytes: charge.spent(),
    })
}

/// The body of an answer, given up once it holds more than `bound` bytes.
async fn body(stream: impl futures::AsyncBufRead, bound: usize) -> Result<Vec<u8>, ReadError> {
    match read_within(stream, bound)
        .await
        .map_err(|e| ReadError::Api(kube::Error::ReadEvents(e)))?
    {
        Within::Whole(body) => Ok(body),
        Within::Over(_) => Err(ReadError::TooLarge { bound }),
    }
}

#[cfg(test)]
mod tests {
    use super::size;

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(size(4 << 20), "4 MiB");
        assert_eq!(size(900 << 10), "900 KiB");
        assert_eq!(size(1000), "1000 bytes");
    }
}
