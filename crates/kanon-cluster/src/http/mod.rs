//! HTTP services of `http` references: the engine renders a reference into an
//! [`HttpCall`], and [`HttpLookups::call`] sends it and reads the answer.
//!
//! What it adds to a plain HTTP client, and why:
//! - a guard against server-side request forgery (module `guard`): policy authors choose URLs, and
//!   kanon must not become their way into the cloud metadata service or the cluster's private
//!   network. Literal addresses are checked before anything is sent, resolved ones inside the
//!   client's resolver, so a DNS answer cannot slip a refused address past the check;
//! - no redirects (a redirect could lead past the guard's intent, and the engine reports a
//!   3xx as an error anyway), no proxy from the environment, http and https only;
//! - bounds: a timeout per call, a limit on the answer's size;
//! - a short-lived cache of successful answers, shared by identical concurrent calls
//!   (module `cache`);
//! - tokens (static, or read from Secrets through a [`TokenSource`]) that never appear in an
//!   error, a log line or a `Debug` output, nor in the answer handed to the policy (a service
//!   that echoes the token has it replaced by `<redacted>`).
//!
//! Whether the answer is usable (2xx, JSON) is the engine's judgement, not this module's.

mod cache;
mod guard;

use std::collections::{BTreeMap, HashMap};
use std::error::Error as StdError;
use std::fmt;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use ipnet::IpNet;
use kanon_engine::HttpMethod;
use kanon_engine::{HttpAnswer, HttpCall, HttpToken, LookupError, LookupFuture};
use reqwest::Url;
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use crate::metrics::{ClusterMetrics, LookupSource};
use cache::{AnswerCache, CallKey};
use guard::{AddressGuard, GuardedResolver, Refused};

/// How kanon calls HTTP services: the operator's settings.
#[derive(Clone)]
pub struct HttpConfig {
    /// Networks the operator allows although they are refused by default (e.g. 10.0.0.0/8
    /// for an in-cluster service, 127.0.0.1/32 in tests).
    pub allowed_networks: Vec<IpNet>,
    /// How long a successful answer is reused; [`Duration::ZERO`] disables caching (and the
    /// sharing of identical concurrent calls).
    pub cache_ttl: Duration,
    /// At most this many answers are cached: the bound on the cache's memory (each answer
    /// is at most [`HttpConfig::max_body_bytes`]).
    pub cache_entries: usize,
    /// The largest answer body read; a larger one fails the call.
    pub max_body_bytes: usize,
    /// The bound on a call whose reference sets no `timeoutSeconds`.
    pub default_timeout: Duration,
    /// Extra trusted CAs (PEM), besides the web's public roots; may be empty.
    pub extra_roots_pem: Vec<u8>,
}

impl Default for HttpConfig {
    /// Nothing private allowed, 10 s × 1024 answers of cache, 1 MiB answers, 5 s calls, the
    /// web's public roots only.
    fn default() -> Self {
        HttpConfig {
            allowed_networks: Vec::new(),
            cache_ttl: Duration::from_secs(10),
            cache_entries: 1024,
            max_body_bytes: 1024 * 1024,
            default_timeout: Duration::from_secs(5),
            extra_roots_pem: Vec::new(),
        }
    }
}

impl fmt::Debug for HttpConfig {
    // The PEM bytes would drown everything else.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpConfig")
            .field("allowed_networks", &self.allowed_networks)
            .field("cache_ttl", &self.cache_ttl)
            .field("cache_entries", &self.cache_entries)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("default_timeout", &self.default_timeout)
            .field(
                "extra_roots_pem",
                &format_args!("<{} bytes>", self.extra_roots_pem.len()),
            )
            .finish()
    }
}

/// Where bearer tokens of `auth.secretRef` come from (implemented over the apiserver).
pub trait TokenSource: Send + Sync {
    /// The value of `key` in Secret `namespace/name`. Surrounding whitespace is ignored (a
    /// trailing newline is a common accident of `kubectl create secret --from-file`).
    fn token<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        key: &'a str,
    ) -> LookupFuture<'a, String>;
}

/// Why the HTTP client could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum HttpSetupError {
    /// The extra trusted CAs are not valid PEM.
    #[error("the extra trusted CAs are not valid PEM: {source}")]
    ExtraRootsPem {
        /// The PEM parser's reason.
        source: rustls::pki_types::pem::Error,
    },
    /// The extra trusted CAs were given but hold no certificate.
    #[error("the extra trusted CAs hold no PEM certificate (`-----BEGIN CERTIFICATE-----`)")]
    NoExtraRoots,
    /// An extra trusted CA is not usable as a trust anchor.
    #[error("extra trusted CA number {number} is not usable: {source}")]
    ExtraRoot {
        /// Its position among the PEM certificates, from 1.
        number: usize,
        /// rustls' reason.
        source: rustls::Error,
    },
    /// rustls refused the client configuration.
    #[error("cannot build the TLS configuration: {0}")]
    Tls(rustls::Error),
    /// reqwest could not build the client.
    #[error("cannot build the HTTP client: {}", chain(.0))]
    Client(reqwest::Error),
}

/// Sends the HTTP calls of policies: the cluster's side of [`kanon_engine::Lookup::http`].
/// Cheap to clone: clones share the client, the cache and the calls in flight.
#[derive(Clone)]
pub struct HttpLookups {
    inner: Arc<Inner>,
}

impl fmt::Debug for HttpLookups {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpLookups")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

/// What the answer of a call is: one value, cloned to every caller that shares it.
type Outcome = Result<HttpAnswer, LookupError>;

/// A call being sent, awaited by every identical call made meanwhile.
type InFlight = Shared<BoxFuture<'static, Outcome>>;

/// Identical calls share one request only when their timeouts are equal too, so that each
/// caller's own bound holds exactly.
type FlightKey = (CallKey, Duration);

struct Inner {
    config: HttpConfig,
    client: reqwest::Client,
    guard: Arc<AddressGuard>,
    tokens: Arc<dyn TokenSource>,
    metrics: ClusterMetrics,
    state: Mutex<State>,
}

struct State {
    cache: AnswerCache,
    in_flight: HashMap<FlightKey, InFlight>,
}

/// A call with everything owned, so that a spawned task can send it.
struct Request {
    what: String,
    method: reqwest::Method,
    url: Url,
    headers: BTreeMap<String, String>,
    body: Option<Vec<u8>>,
    token: Option<HttpToken>,
}

impl Request {
    fn new(call: &HttpCall, url: Url) -> Self {
        Request {
            what: call.describe(),
            method: match call.method {
                HttpMethod::Get => reqwest::Method::GET,
                HttpMethod::Post => reqwest::Method::POST,
            },
            url,
            headers: call.headers.clone(),
            body: call.body.as_ref().map(|body| body.to_string().into_bytes()),
            token: call.token.clone(),
        }
    }
}

const USER_AGENT: &str = concat!("kanon/", env!("CARGO_PKG_VERSION"));

impl HttpLookups {
    /// A client with the operator's `config`; Secret tokens are read through `tokens`, and
    /// lookups are counted in `metrics`.
    pub fn new(
        config: HttpConfig,
        tokens: Arc<dyn TokenSource>,
        metrics: ClusterMetrics,
    ) -> Result<Self, HttpSetupError> {
        let tls = tls_config(&config.extra_roots_pem)?;
        let guard = Arc::new(AddressGuard::new(config.allowed_networks.clone()));
        let client = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .dns_resolver(GuardedResolver::new(guard.clone()))
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .user_agent(USER_AGENT)
            .build()
            .map_err(HttpSetupError::Client)?;
        let cache = AnswerCache::new(config.cache_ttl, config.cache_entries);
        Ok(HttpLookups {
            inner: Arc::new(Inner {
                config,
                client,
                guard,
                tokens,
                metrics,
                state: Mutex::new(State {
                    cache,
                    in_flight: HashMap::new(),
                }),
            }),
        })
    }

    /// Sends `call` (or answers it from the cache) within its timeout
    /// (`call.timeout`, else [`HttpConfig::default_timeout`]).
    ///
    /// Errors: `Forbidden` for a refused scheme or address (nothing is sent), `TimedOut`,
    /// `Failed` for an invalid call, a connection or TLS failure or an answer over
    /// [`HttpConfig::max_body_bytes`], and the [`TokenSource`]'s own errors. Any status is an
    /// answer, not an error.
    pub async fn call(&self, call: &HttpCall) -> Result<HttpAnswer, LookupError> {
        let inner = &self.inner;
        let url = match inner.target(call) {
            Ok(url) => url,
            Err(error) => {
                inner.metrics.lookup_error(LookupSource::Http, &error);
                tracing::debug!(
                    call = %call.describe(),
                    policy = %call.policy,
                    %error,
                    "HTTP lookup refused"
                );
                return Err(error);
            }
        };
        let after = call.timeout.unwrap_or(inner.config.default_timeout);
        let started = Instant::now();
        let result = match inner.join(call, url, after, started) {
            Joined::Cached(answer) => {
                inner.metrics.lookup_hit(LookupSource::Http);
                tracing::debug!(
                    call = %call.describe(),
                    policy = %call.policy,
                    "HTTP lookup answered from the cache"
                );
                return Ok(answer);
            }
            Joined::InFlight(flight) => flight.await,
            Joined::Alone(request) => inner.fetch(&request, after).await,
        };
        match &result {
            // Refused by the resolver: the service was never reached.
            Err(error @ LookupError::Forbidden { .. }) => {
                inner.metrics.lookup_error(LookupSource::Http, error);
            }
            _ => inner
                .metrics
                .lookup_miss(LookupSource::Http, started.elapsed(), &result),
        }
        match &result {
            Ok(answer) => tracing::debug!(
                call = %call.describe(),
                policy = %call.policy,
                status = answer.status,
                bytes = answer.body.len(),
                elapsed_ms = started.elapsed().as_millis(),
                "HTTP lookup answered"
            ),
            Err(error) => tracing::debug!(
                call = %call.describe(),
                policy = %call.policy,
                %error,
                "HTTP lookup failed"
            ),
        }
        result
    }
}

/// How a call is answered.
enum Joined {
    /// From the cache.
    Cached(HttpAnswer),
    /// By a request in flight, this caller's or an identical earlier one's.
    InFlight(InFlight),
    /// By a request of its own, outside the cache (caching is off, or no runtime to spawn
    /// the shared request on).
    Alone(Request),
}

impl Inner {
    fn state(&self) -> MutexGuard<'_, State> {
        // The state is consistent after every statement (no invariant spans a panic), so a
        // poisoned lock is still usable.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The URL to send `call` to, with its parameters: refused unless http(s) and, when the
    /// host is a literal address, an address kanon may call. Nothing is sent here.
    fn target(&self, call: &HttpCall) -> Result<Url, LookupError> {
        let what = call.describe();
        let mut url = Url::parse(&call.url).map_err(|e| LookupError::Failed {
            what: what.clone(),
            message: format!("the URL is not valid: {e}"),
        })?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(LookupError::Forbidden {
                what,
                reason: format!(
                    "kanon calls only http and https URLs, not `{}`",
                    url.scheme()
                ),
            });
        }
        let Some(host) = url.host_str() else {
            return Err(LookupError::Failed {
                what,
                message: "the URL has no host".to_string(),
            });
        };
        // The URL parser has already normalized odd IPv4 spellings (`127.1`, `0x7f000001`)
        // to dotted quads, so a literal address is always recognized here.
        let literal = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        if let Ok(ip) = literal.parse::<IpAddr>() {
            self.guard
                .check_literal(ip)
                .map_err(|refused| LookupError::Forbidden {
                    what: what.clone(),
                    reason: refused.to_string(),
                })?;
        }
        if !call.params.is_empty() {
            // Appended after any query already in the URL.
            url.query_pairs_mut().extend_pairs(&call.params);
        }
        Ok(url)
    }

    /// The cached answer of `call`, or the request in flight for it (started here if there
    /// is none).
    fn join(self: &Arc<Self>, call: &HttpCall, url: Url, after: Duration, now: Instant) -> Joined {
        let mut state = self.state();
        if !state.cache.enabled() {
            return Joined::Alone(Request::new(call, url));
        }
        let key = CallKey::new(call);
        if let Some(answer) = state.cache.get(&key, now) {
            return Joined::Cached(answer);
        }
        let flight = (key, after);
        if let Some(in_flight) = state.in_flight.get(&flight) {
            return Joined::InFlight(in_flight.clone());
        }
        let request = Request::new(call, url);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return Joined::Alone(request);
        };
        let what = request.what.clone();
        // The request runs in a task of its own so that it completes (and fills the cache)
        // even when the caller that started it gives up, e.g. at its admission deadline; its
        // timeout bounds it.
        let landing = Landing {
            inner: self.clone(),
            flight: flight.clone(),
        };
        let task = runtime.spawn(async move {
            let result = landing.inner.fetch(&request, after).await;
            if let Ok(answer) = &result
                && (200..300).contains(&answer.status)
            {
                landing.inner.state().cache.insert(
                    landing.flight.0.clone(),
                    answer.clone(),
                    Instant::now(),
                );
            }
            result
        });
        let in_flight = async move {
            task.await.unwrap_or_else(|e| {
                Err(LookupError::Failed {
                    what,
                    message: format!("the call ended abnormally: {e}"),
                })
            })
        }
        .boxed()
        .shared();
        state.in_flight.insert(flight, in_flight.clone());
        Joined::InFlight(in_flight)
    }

    /// Sends `request` within `after`.
    async fn fetch(&self, request: &Request, after: Duration) -> Outcome {
        match tokio::time::timeout(after, self.send(request)).await {
            Ok(result) => result,
            Err(_) => Err(LookupError::TimedOut {
                what: request.what.clone(),
                after,
            }),
        }
    }

    /// Sends `request` and reads its answer, up to the size limit.
    async fn send(&self, request: &Request) -> Outcome {
        let what = &request.what;
        let failed = |message: String| LookupError::Failed {
            what: what.clone(),
            message,
        };
        let mut headers = HeaderMap::new();
        headers.insert(ACCEPT, HeaderValue::from_static("application/json"));
        if request.body.is_some() {
            headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        }
        // The policy's headers may replace the defaults above (a vendor JSON type).
        for (name, value) in &request.headers {
            let header = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| failed(format!("`{name}` is not a valid HTTP header name")))?;
            // The value is not shown: it may be a credential.
            let value = HeaderValue::from_str(value).map_err(|_| {
                failed(format!(
                    "the value of header `{name}` is not a valid HTTP header value"
                ))
            })?;
            headers.insert(header, value);
        }
        // The token's text, to take out of the answer: a service that echoes what it was sent
        // (an error page quoting the `Authorization` header) must not hand it to the policy,
        // whose messages reach the user of the request and kanon's logs.
        let mut sent_token = None;
        if let Some(token) = &request.token {
            let (header, value) = self.bearer(what, token).await?;
            headers.insert(AUTHORIZATION, header);
            sent_token = Some(value);
        }
        let mut builder = self
            .client
            .request(request.method.clone(), request.url.clone())
            .headers(headers);
        if let Some(body) = &request.body {
            builder = builder.body(body.clone());
        }
        let mut response = builder
            .send()
            .await
            .map_err(|error| send_error(what, error))?;
        let status = response.status().as_u16();
        let headers = answer_headers(response.headers());
        let limit = self.config.max_body_bytes;
        let too_large = || {
            failed(format!(
                "the answer is larger than the limit of {limit} bytes"
            ))
        };
        // A declared length over the limit fails before any of the body is read.
        if response
            .content_length()
            .is_some_and(|length| length > u64::try_from(limit).unwrap_or(u64::MAX))
        {
            return Err(too_large());
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|error| {
            failed(format!(
                "reading the answer: {}",
                chain(&error.without_url())
            ))
        })? {
            if body.len().saturating_add(chunk.len()) > limit {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        let mut answer = HttpAnswer {
            status,
            headers,
            body,
        };
        if let Some(token) = &sent_token {
            redact_answer(&mut answer, token);
        }
        Ok(answer)
    }

    /// The `Authorization` header of `token`, marked sensitive (hyper then keeps it out of
    /// HPACK tables and `Debug`), and the token's text as sent.
    async fn bearer(
        &self,
        what: &str,
        token: &HttpToken,
    ) -> Result<(HeaderValue, String), LookupError> {
        let (value, source) = match token {
            HttpToken::Static(value) => (value.clone(), "the static token".to_string()),
            HttpToken::Secret {
                namespace,
                name,
                key,
            } => (
                self.tokens.token(namespace, name, key).await?,
                format!("the token in Secret {namespace}/{name}, key {key},"),
            ),
        };
        let failed = |message: String| LookupError::Failed {
            what: what.to_string(),
            message,
        };
        let value = value.trim();
        if value.is_empty() {
            return Err(failed(format!("{source} is empty")));
        }
        // The token itself is never part of a message.
        let mut header = HeaderValue::from_str(&format!("Bearer {value}")).map_err(|_| {
            failed(format!(
                "{source} is not usable in an HTTP header \
                 (it holds control or non-ASCII characters)"
            ))
        })?;
        header.set_sensitive(true);
        Ok((header, value.to_string()))
    }
}

/// What replaces a token the service sent back.
const REDACTED: &str = "<redacted>";

/// `answer` with every verbatim occurrence of `token` in its body and header values replaced
/// by [`REDACTED`].
fn redact_answer(answer: &mut HttpAnswer, token: &str) {
    if token.is_empty() {
        return;
    }
    let needle = token.as_bytes();
    if answer.body.windows(needle.len()).any(|w| w == needle) {
        let mut redacted = Vec::with_capacity(answer.body.len());
        let mut rest = answer.body.as_slice();
        while let Some((&first, tail)) = rest.split_first() {
            if let Some(after) = rest.strip_prefix(needle) {
                redacted.extend_from_slice(REDACTED.as_bytes());
                rest = after;
            } else {
                redacted.push(first);
                rest = tail;
            }
        }
        answer.body = redacted;
    }
    for value in answer.headers.values_mut() {
        if value.contains(token) {
            *value = value.replace(token, REDACTED);
        }
    }
}

/// Removes a finished call from the calls in flight, however its task ends (a panic
/// included), so that a later call starts afresh instead of waiting on a dead one.
struct Landing {
    inner: Arc<Inner>,
    flight: FlightKey,
}

impl Drop for Landing {
    fn drop(&mut self) {
        self.inner.state().in_flight.remove(&self.flight);
    }
}

/// The TLS configuration: the web's public roots and the operator's extra CAs, with ring.
fn tls_config(extra_roots_pem: &[u8]) -> Result<rustls::ClientConfig, HttpSetupError> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    if !extra_roots_pem.iter().all(u8::is_ascii_whitespace) {
        let mut added = 0;
        for (index, cert) in CertificateDer::pem_slice_iter(extra_roots_pem).enumerate() {
            let cert = cert.map_err(|source| HttpSetupError::ExtraRootsPem { source })?;
            roots
                .add(cert)
                .map_err(|source| HttpSetupError::ExtraRoot {
                    number: index + 1,
                    source,
                })?;
            added += 1;
        }
        // Given but empty is a mistake (a key file, a wrong path), not "no extra CAs".
        if added == 0 {
            return Err(HttpSetupError::NoExtraRoots);
        }
    }
    // The provider is given explicitly rather than taken from the process default, so that
    // the client works whether or not the binary installed one.
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(HttpSetupError::Tls)?
        .with_root_certificates(roots)
        .with_no_client_auth();
    // reqwest sets ALPN only on configurations it builds itself.
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// The error of a request that got no answer: `Forbidden` when the resolver refused every
/// address of the host, otherwise `Failed` with the cause chain.
fn send_error(what: &str, error: reqwest::Error) -> LookupError {
    if let Some(refused) = find_source::<Refused>(&error) {
        return LookupError::Forbidden {
            what: what.to_string(),
            reason: refused.to_string(),
        };
    }
    // Without the URL: its query may carry data of the object, and `what` names the call.
    let error = error.without_url();
    let message = match error.source() {
        // reqwest's own text ("error sending request") says less than "cannot connect".
        Some(source) if error.is_connect() => format!("cannot connect: {}", chain(source)),
        _ => chain(&error),
    };
    LookupError::Failed {
        what: what.to_string(),
        message,
    }
}

/// The first error of type `T` in `error`'s source chain.
fn find_source<'a, T: StdError + 'static>(error: &'a (dyn StdError + 'static)) -> Option<&'a T> {
    let mut current = Some(error);
    while let Some(error) = current {
        if let Some(found) = error.downcast_ref::<T>() {
            return Some(found);
        }
        current = error.source();
    }
    None
}

/// `error` and its sources, `: `-separated, skipping a source whose text its predecessors
/// already show.
fn chain(error: &(dyn StdError + 'static)) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(error) = source {
        let text = error.to_string();
        if !text.is_empty() && !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = error.source();
    }
    message
}

/// The answer's headers: names in lower case (as the `http` crate keeps them), repeated
/// headers joined with `, `; a value that is not UTF-8 is kept lossily.
fn answer_headers(headers: &HeaderMap) -> BTreeMap<String, String> {
    let mut answer: BTreeMap<String, String> = BTreeMap::new();
    for (name, value) in headers {
        let value = String::from_utf8_lossy(value.as_bytes());
        answer
            .entry(name.as_str().to_string())
            .and_modify(|joined| {
                joined.push_str(", ");
                joined.push_str(&value);
            })
            .or_insert_with(|| value.into_owned());
    }
    answer
}
