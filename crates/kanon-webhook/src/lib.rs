//! kanon's admission webhook: the [`admission`] codec (AdmissionReview bytes in, read within a
//! memory [`budget`], the engine's verdict, AdmissionReview bytes out, in exactly the shape
//! kube-apiserver accepts), the HTTPS
//! [`server`] that moves those bytes, its [`tls`] certificates, [`metrics`], and the policy
//! [`source`] read from files (and kept in step with them by [`poll`]) with the [`state`] that
//! publishes policy sets to requests.

pub mod admission;
pub mod budget;
pub mod lookup;
pub mod metrics;
pub mod sandbox;
pub mod server;
pub mod slot;
pub mod state;
pub mod tls;

pub use admission::{BadReview, DEFAULT_MAX_BODY_BYTES, Limits, Outcome, Reply, decide, review};
pub use budget::JsonBudget;
pub use metrics::Metrics;
pub use state::{PolicyState, Publisher};
