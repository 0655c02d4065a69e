//! The short-lived cache of HTTP answers and its key.
//!
//! Admission requests come in bursts (a Deployment rollout creates many Pods), and the policies
//! evaluated for each make the same calls: a few seconds of caching spare the service most of
//! them. Only successful (2xx) answers are kept, so that a service that recovers is seen at
//! once.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use kanon_engine::HttpMethod;
use kanon_engine::{HttpAnswer, HttpCall, HttpToken};

/// Everything that defines a call, hence its answer. Deliberately not `Debug`: it holds a
/// static token's value.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct CallKey {
    method: &'static str,
    url: String,
    params: BTreeMap<String, String>,
    headers: BTreeMap<String, String>,
    /// The body as sent (serialized JSON).
    body: Option<String>,
    token: TokenKey,
}

/// Whose identity the answer was given to.
#[derive(Clone, PartialEq, Eq, Hash)]
enum TokenKey {
    None,
    /// A static token is keyed by its value: two policies with different tokens may get
    /// different answers. Kept in memory only, never printed.
    Static(String),
    /// A Secret's token is keyed by the Secret and key, not by the value, so that the key is
    /// known before the Secret is read (a hit reads nothing). A rotated token is used once
    /// the cached answer expires.
    Secret {
        namespace: String,
        name: String,
        key: String,
    },
}

impl CallKey {
    /// The key of `call`.
    pub(crate) fn new(call: &HttpCall) -> Self {
        CallKey {
            method: match call.method {
                HttpMethod::Get => "GET",
                HttpMethod::Post => "POST",
            },
            url: call.url.clone(),
            params: call.params.clone(),
            headers: call.headers.clone(),
            body: call.body.as_ref().map(ToString::to_string),
            token: match &call.token {
                None => TokenKey::None,
                Some(HttpToken::Static(token)) => TokenKey::Static(token.clone()),
                Some(HttpToken::Secret {
                    namespace,
                    name,
                    key,
                }) => TokenKey::Secret {
                    namespace: namespace.clone(),
                    name: name.clone(),
                    key: key.clone(),
                },
            },
        }
    }
}

struct Stored {
    answer: HttpAnswer,
    at: Instant,
}

/// Answers by call, each for `ttl`, at most `capacity` of them.
pub(crate) struct AnswerCache {
    entries: HashMap<CallKey, Stored>,
    ttl: Duration,
    capacity: usize,
}

impl AnswerCache {
    /// An empty cache.
    pub(crate) fn new(ttl: Duration, capacity: usize) -> Self {
        AnswerCache {
            entries: HashMap::new(),
            ttl,
            capacity,
        }
    }

    /// Whether anything is ever kept.
    pub(crate) fn enabled(&self) -> bool {
        !self.ttl.is_zero() && self.capacity > 0
    }

    /// The answer to `key` if it is fresh at `now`; a stale one is dropped.
    pub(crate) fn get(&mut self, key: &CallKey, now: Instant) -> Option<HttpAnswer> {
        let fresh = self
            .entries
            .get(key)
            .map(|stored| now.saturating_duration_since(stored.at) < self.ttl)?;
        if fresh {
            self.entries.get(key).map(|stored| stored.answer.clone())
        } else {
            self.entries.remove(key);
            None
        }
    }

    /// Keeps `answer` for `key` from `now`, making room first: expired entries go, then the
    /// oldest one.
    pub(crate) fn insert(&mut self, key: CallKey, answer: HttpAnswer, now: Instant) {
        if !self.enabled() {
            return;
        }
        if !self.entries.contains_key(&key) && self.entries.len() >= self.capacity {
            let ttl = self.ttl;
            self.entries
                .retain(|_, stored| now.saturating_duration_since(stored.at) < ttl);
            // Still full of fresh answers: a linear scan for the oldest is cheap next to an
            // HTTP call, and the cache is small.
            while self.entries.len() >= self.capacity {
                let oldest = self
                    .entries
                    .iter()
                    .min_by_key(|(_, stored)| stored.at)
                    .map(|(key, _)| key.clone());
                match oldest {
                    Some(oldest) => {
                        self.entries.remove(&oldest);
                    }
                    None => break,
                }
            }
        }
        self.entries.insert(key, Stored { answer, at: now });
    }

    /// How many answers are held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(url: &str) -> HttpCall {
        HttpCall {
            method: HttpMethod::Get,
            url: url.to_string(),
            params: BTreeMap::new(),
            headers: BTreeMap::new(),
            body: None,
            token: None,
            timeout: None,
            policy: String::new(),
        }
    }

    fn answer(status: u16) -> HttpAnswer {
        HttpAnswer {
            status,
            headers: BTreeMap::new(),
            body: Vec::new(),
        }
    }

    #[test]
    fn expires_after_the_ttl() {
        let mut cache = AnswerCache::new(Duration::from_secs(10), 4);
        let key = CallKey::new(&call("http://a"));
        let start = Instant::now();
        cache.insert(key.clone(), answer(200), start);
        assert!(cache.get(&key, start + Duration::from_secs(9)).is_some());
        assert!(cache.get(&key, start + Duration::from_secs(10)).is_none());
        assert_eq!(cache.len(), 0);
    }

    #[test]
    fn evicts_expired_then_oldest() {
        let mut cache = AnswerCache::new(Duration::from_secs(10), 2);
        let start = Instant::now();
        let [a, b, c, d] =
            ["http://a", "http://b", "http://c", "http://d"].map(|u| CallKey::new(&call(u)));
        cache.insert(a.clone(), answer(200), start);
        cache.insert(b.clone(), answer(200), start + Duration::from_secs(8));
        // a expired at 11 s: it goes, b stays.
        cache.insert(c.clone(), answer(200), start + Duration::from_secs(11));
        let now = start + Duration::from_secs(12);
        assert!(cache.get(&b, now).is_some());
        assert!(cache.get(&c, now).is_some());
        // Both fresh: the oldest (b) goes.
        cache.insert(d.clone(), answer(200), now);
        assert!(cache.get(&b, now).is_none());
        assert!(cache.get(&c, now).is_some());
        assert!(cache.get(&d, now).is_some());
        assert_eq!(cache.len(), 2);
    }

    #[test]
    fn keys_differ_by_token() {
        let mut with_a = call("http://a");
        with_a.token = Some(HttpToken::Static("one".into()));
        let mut with_b = call("http://a");
        with_b.token = Some(HttpToken::Static("two".into()));
        assert!(CallKey::new(&with_a) != CallKey::new(&with_b));
        assert!(CallKey::new(&with_a) == CallKey::new(&with_a.clone()));
    }

    #[test]
    fn disabled_keeps_nothing() {
        let mut cache = AnswerCache::new(Duration::ZERO, 4);
        let key = CallKey::new(&call("http://a"));
        let now = Instant::now();
        cache.insert(key.clone(), answer(200), now);
        assert!(cache.get(&key, now).is_none());
    }
}
