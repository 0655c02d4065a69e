//! kanon in a cluster: what `kanon serve` does when its policies come from the apiserver.
//!
//! - [`reflector`]: watches of the four policy kinds and of Namespace metadata; each changed
//!   policy is compiled (only the changed ones) and the new set is handed to a
//!   [`kanon_engine::PolicyPublisher`], once every watch has listed once.
//! - [`custom_kinds`]: a watch of CustomResourceDefinitions, giving the custom kinds (and
//!   their schemas) that policies' kinds and paths are checked against besides the built-in
//!   ones; when they change, every policy's warnings are recomputed.
//! - [`status`]: each policy's `status` (`observedGeneration`, `Ready`, rendered programs),
//!   written by server-side apply only when it changes.
//! - [`objects`], [`http`] and [`lookup`]: the engine's [`kanon_engine::Lookup`] over the
//!   apiserver (short-lived caches), the Namespace cache and HTTP services, with the
//!   operator's limits (Secrets, private addresses).
//! - [`certificates`]: the webhook's CA and serving certificate, kept in a Secret, renewed
//!   before they expire.
//! - [`webhooks`]: the `caBundle` and generated `rules` of kanon's webhook configurations.
//! - [`metrics`]: lookups, compilations, watches and status writes.
//! - [`audit`]: background audit of existing objects, its reports, its Lease and metrics.
//! - [`events`]: Kubernetes Events (opt in) on policies that deny and on objects the audit
//!   finds failing, aggregated into series and rate-limited.
//!
//! Nothing here serves HTTP: the webhook meets this crate only through the publisher, the
//! lookup and (glued by the binary) the Events recorder it hands decisions to.

pub mod apiserver_error;
pub mod audit;
mod backoff;
pub mod certificates;
pub mod custom_kinds;
pub mod discovery;
mod documents;
pub mod events;
pub mod exceptions;
pub mod http;
pub mod lookup;
pub mod metrics;
pub mod namespaces;
pub mod objects;
pub mod permissions;
pub mod policies;
pub mod reflector;
pub mod status;
pub mod webhooks;

pub use metrics::{ClusterMetrics, LookupSource};
