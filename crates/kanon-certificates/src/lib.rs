//! kanon's webhook certificates, made and kept by kanon itself in both modes: a CA and a
//! serving certificate signed by it, read back and checked part by part, renewed before they
//! expire and the CA rotated with an overlap ([`plan`]), and the files the server reads written
//! atomically ([`files`]).
//!
//! Standalone (`kanon serve --policies`), [`directory::ensure`] creates a long-lived pair in the
//! certificate directory when it holds none. In a cluster, kanon-cluster keeps the same
//! [`Material`] in a Secret, re-plans it on a schedule and writes the files with
//! [`files::write_changed`]. The webhook only loads, reloads and serves what these wrote.
//!
//! Nothing here reads the clock but [`unix_now`]: every decision takes the time it is given,
//! so rotation is tested without waiting.

pub mod directory;
pub mod files;
mod material;
mod plan;

pub use material::{
    Cert, CertInfo, IssueError, Leaf, LeafCheck, Material, Problem, Settings, Signing, Stored,
    check_leaf, issue_leaf, new_ca, parse_rfc3339, rfc3339,
};
pub use plan::{Plan, plan};

/// The serving certificate: a Secret's data key and its file name in the certificate directory.
pub const TLS_CERT_KEY: &str = "tls.crt";
/// The serving key (PEM, PKCS#8): data key and file name.
pub const TLS_KEY_KEY: &str = "tls.key";
/// The trusted CA bundle, the signing CA first (what a client or a `caBundle` trusts): data key
/// and file name.
pub const CA_CERT_KEY: &str = "ca.crt";
/// The signing CA's key: data key (and, standalone, file name).
pub const CA_KEY_KEY: &str = "ca.key";
/// The signing CA's certificate: data key.
pub const CA_SIGNING_CERT_KEY: &str = "ca-signing.crt";
/// Where the time the signing CA joined the bundle is kept (a Secret's annotation), as
/// [`Problem::key`] names it.
pub const ROTATED_AT_KEY: &str = "kanon.dev/ca-rotated-at";

/// How far back `notBefore` is set, so that a clock a little behind ours (the apiserver's, another
/// replica's) already accepts a new certificate. Clocks must agree within this much.
pub const BACKDATE_SECS: i64 = 300;

/// Now, in whole seconds since the UNIX epoch (0 before it).
pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| {
            i64::try_from(elapsed.as_secs()).unwrap_or(i64::MAX)
        })
}

#[cfg(test)]
pub(crate) mod fixtures {
    use crate::Settings;

    /// A moment in 2027.
    pub const T0: i64 = 1_800_000_000;

    /// Short validities, so that a test steps through renewals and a rotation.
    pub fn settings() -> Settings {
        Settings {
            dns_names: vec!["kanon.kanon-system.svc".into()],
            ip_addresses: vec!["127.0.0.1".parse().unwrap()],
            ca_validity: 1_000,
            cert_validity: 100,
            renew_fraction: 0.3,
            overlap: 20,
            margin: 2,
        }
    }
}
