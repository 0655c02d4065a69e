//! kanon's admission webhook: the [`admission`] codec (AdmissionReview bytes in, read within a
//! memory [`budget`] and, on the validating webhook, only as far as the policies read the
//! object ([`projected`]), the engine's verdict, AdmissionReview bytes out, in exactly the shape
//! kube-apiserver accepts; [`review`](mod@review) answers one in process), the HTTPS
//! [`server`] that moves those bytes (serving the certificate its [`tls`] resolver holds,
//! answering reviews no policy selects at once ([`triage`]), evaluating the others on threads
//! of their own within [`slot`]s shared fairly between namespaces), hand-written
//! programs run in worker processes ([`sandbox`]), lookups bounded by the review's deadline
//! ([`lookup`]), [`metrics`], OpenTelemetry traces of reviews ([`trace`]), the [`decisions`]
//! log and the other [`observer`]s of decisions (Kubernetes Events in a cluster), and the
//! [`state`] that publishes policy sets to requests.
//!
//! What it serves comes from outside: policy sets through [`Publisher`] (the binary reads
//! files, the cluster crate watches the apiserver), certificates made by kanon-certificates or
//! cert-manager and reloaded by whoever watches their files.

pub mod admission;
pub mod budget;
pub mod decisions;
pub mod lookup;
pub mod metrics;
pub mod observer;
pub mod projected;
pub mod review;
pub mod sandbox;
pub mod server;
pub mod slot;
pub mod state;
pub mod tls;
pub mod trace;
pub mod triage;

pub use admission::{BadReview, DEFAULT_MAX_BODY_BYTES, Limits, Outcome, Reply, decide};
pub use budget::JsonBudget;
pub use metrics::Metrics;
pub use review::review;
pub use state::{PolicyState, Publisher};
