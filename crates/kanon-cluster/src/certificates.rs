//! The webhook's CA and serving certificate, kept by kanon in a Secret of its own namespace,
//! written into the server's certificate directory and renewed well before they expire.
//!
//! **The Secret** (type `kubernetes.io/tls`, label `app.kubernetes.io/managed-by: kanon`):
//!
//! | key | what |
//! |---|---|
//! | `tls.crt` | the serving certificate (PEM, the leaf alone) |
//! | `tls.key` | its key (PEM, PKCS#8, ECDSA P-256) |
//! | `ca.crt` | the trusted bundle: every CA a client must trust (PEM, the signing CA first) |
//! | `ca.key` | the signing CA's key (PEM, PKCS#8) |
//! | `ca-signing.crt` | the signing CA's certificate (PEM) |
//!
//! and the annotation `kanon.dev/ca-rotated-at` (RFC 3339): when the signing CA joined the
//! bundle. Other keys, labels and annotations are left alone.
//!
//! **Replicas converge on one Secret.** Every check reads the Secret and decides, from its
//! content and the clock alone, what it should hold. A replica that finds nothing creates it
//! (`create`: of replicas starting together one wins, the others get `AlreadyExists`, read
//! the winner's and use it); a replica that must change it replaces it with the
//! `resourceVersion` it read (on `Conflict` it reads again and decides again, so a renewal
//! another replica made first is taken, not repeated). Every replica polls the Secret every
//! `check_interval` and rewrites its files when the content changes, so all serve what one
//! renewed.
//!
//! **Renewal and rotation** (defaults: CA 10 years, serving certificate 1 year, renewed when a
//! third remains, overlap 10 minutes):
//! - The serving certificate is re-issued by the same CA when less than `renew_fraction` of
//!   `cert_validity` remains (after about 8 months). No overlap is needed: clients trust the CA.
//! - When less than `renew_fraction` of `ca_validity` remains (after about 6 years 8 months),
//!   a new CA is made: it joins the bundle at once (bundle = new + old; the webhook
//!   configurations' `caBundle` follows [`Certificates::ca_bundle`]) and signs from then on,
//!   but the certificate being served, signed by the old CA, stays.
//! - `overlap` after the rotation (time for every `caBundle` to carry the new CA) the serving
//!   certificate is re-issued by the new CA.
//! - The old CA leaves the bundle when it expires, or at the next rotation.
//!
//! A serving certificate never outlives its CA (it is cut at the CA's end), and the
//! configuration must leave room for the overlap (`overlap` shorter than `renew_fraction` of
//! either validity). The old CA's key is not kept: it has nothing left to sign.
//!
//! **A bad Secret is repaired, never served.** Each part is checked on its own (PEM, X.509,
//! key against certificate, CA flag); each problem is logged as a [`CertificateError::BadSecret`]
//! naming the key (and listed by [`secret_problems`]), and only the bad part is re-issued: a
//! bad serving pair at once; a bad or missing CA (`ca.key`, `ca-signing.crt`) by a new CA,
//! handled as a rotation (the CAs trusted so far stay in the bundle and a good serving
//! certificate keeps serving through the overlap); a bad bundle is rebuilt from the signing CA.
//!
//! **Files.** `tls.crt`, `tls.key` and `ca.crt` are written into `cert_dir` (each through a
//! temporary file and a rename, only when its content changed; the key readable by the owner
//! only; `ca.crt` first, then the key, then the certificate), where the webhook's server picks
//! them up without a restart. No CA key is written there.
//!
//! **Use.** [`Certificates::ensure`] once at start (it returns when the files are written
//! and the bundle is known), then [`Certificates::ca_bundle`] for the webhook configurations
//! and [`Certificates::run`] in a task. A Secret deleted under a running replica is recreated
//! with the certificates in force. RBAC: `get` and `update` on the Secret, `create` on
//! Secrets of the namespace. Metrics: [`CertificateMetrics`].
//!
//! Key material is never logged. Clocks of the replicas and the apiserver must agree within 5
//! minutes (new certificates are valid from 5 minutes before their issue). Replicas should share
//! one configuration: a replica re-issues a serving certificate that lacks one of its own
//! names, so two replicas whose names are not one a subset of the other would keep re-issuing.

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, PostParams};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::sync::watch;
use tracing::{debug, info, warn};

use kanon_certificates::files::{self, WriteError};
use kanon_certificates::{IssueError, Material, Settings, Stored, rfc3339};

pub use kanon_certificates::{
    CA_CERT_KEY, CA_KEY_KEY, CA_SIGNING_CERT_KEY, TLS_CERT_KEY, TLS_KEY_KEY,
};
/// The annotation recording when the signing CA joined the bundle (RFC 3339).
pub const ROTATED_AT_ANNOTATION: &str = kanon_certificates::ROTATED_AT_KEY;
/// The label marking the Secret as kanon's.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// The value of [`MANAGED_BY_LABEL`].
pub const MANAGED_BY: &str = "kanon";
/// The type of a Secret kanon creates.
pub const SECRET_TYPE: &str = "kubernetes.io/tls";

/// How many times one check reads and writes the Secret when other writers keep changing it.
const MAX_ATTEMPTS: u32 = 8;
/// The longest validity accepted (certificate dates must stay representable).
const MAX_VALIDITY: Duration = Duration::from_secs(200 * 366 * 86_400);

/// Where the certificates are kept and how long they live.
#[derive(Debug, Clone)]
pub struct CertificateConfig {
    /// The Secret's namespace (kanon's own).
    pub namespace: String,
    /// The Secret's name.
    pub secret_name: String,
    /// DNS names of the serving certificate (e.g. kanon.kanon-system.svc,
    /// kanon.kanon-system.svc.cluster.local).
    pub dns_names: Vec<String>,
    /// IP addresses in the serving certificate (127.0.0.1 for a kanon run as a process in
    /// tests).
    pub ip_addresses: Vec<IpAddr>,
    /// Lifetime of a CA (default 10 years).
    pub ca_validity: Duration,
    /// Lifetime of a serving certificate (default 1 year), never past its CA's end.
    pub cert_validity: Duration,
    /// Renew when less than this fraction of the validity remains (default 1/3).
    pub renew_fraction: f64,
    /// How long a new CA is trusted before it signs the certificate served (default 10
    /// minutes): time for the webhook configurations' `caBundle` to carry it.
    pub overlap: Duration,
    /// How often the Secret is read and the certificates' ends checked (default 1 minute).
    pub check_interval: Duration,
    /// The server's certificate directory: `tls.crt`, `tls.key`, `ca.crt` are written here.
    pub cert_dir: PathBuf,
}

impl Default for CertificateConfig {
    fn default() -> Self {
        CertificateConfig {
            namespace: "kanon-system".to_string(),
            secret_name: "kanon-tls".to_string(),
            dns_names: vec![
                "kanon.kanon-system.svc".to_string(),
                "kanon.kanon-system.svc.cluster.local".to_string(),
            ],
            ip_addresses: Vec::new(),
            ca_validity: Duration::from_secs(10 * 365 * 86_400),
            cert_validity: Duration::from_secs(365 * 86_400),
            renew_fraction: 1.0 / 3.0,
            overlap: Duration::from_secs(10 * 60),
            check_interval: Duration::from_secs(60),
            cert_dir: std::env::temp_dir().join("kanon-certs"),
        }
    }
}

impl CertificateConfig {
    /// Checks the configuration and converts it to whole seconds.
    fn settings(&self) -> Result<Settings, CertificateError> {
        let invalid = |message: String| Err(CertificateError::Config(message));
        if self.namespace.is_empty() || self.secret_name.is_empty() {
            return invalid("the Secret's namespace and name must not be empty".into());
        }
        if self.dns_names.is_empty() && self.ip_addresses.is_empty() {
            return invalid("the serving certificate needs a DNS name or an IP address".into());
        }
        for name in &self.dns_names {
            let parsed = rustls::pki_types::ServerName::try_from(name.as_str());
            if !matches!(parsed, Ok(rustls::pki_types::ServerName::DnsName(_))) {
                return invalid(format!("{name:?} is not a DNS name"));
            }
        }
        for (what, validity) in [
            ("ca_validity", self.ca_validity),
            ("cert_validity", self.cert_validity),
        ] {
            if validity < Duration::from_secs(1) || validity > MAX_VALIDITY {
                return invalid(format!(
                    "{what} must be between 1 second and 200 years, not {validity:?}"
                ));
            }
        }
        if !(self.renew_fraction > 0.0 && self.renew_fraction < 1.0) {
            return invalid(format!(
                "renew_fraction must be between 0 and 1 (exclusive), not {}",
                self.renew_fraction
            ));
        }
        if self.check_interval.is_zero() {
            return invalid("check_interval must not be zero".into());
        }
        let shorter = self.ca_validity.min(self.cert_validity).as_secs_f64();
        if self.overlap.as_secs_f64() >= self.renew_fraction * shorter {
            return invalid(format!(
                "overlap ({:?}) must be shorter than renew_fraction × the shorter validity \
                 ({:.0} s), or a CA rotation could not wait for it",
                self.overlap,
                self.renew_fraction * shorter
            ));
        }
        let secs = |d: Duration| i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
        Ok(Settings {
            dns_names: self.dns_names.clone(),
            ip_addresses: self.ip_addresses.clone(),
            ca_validity: secs(self.ca_validity),
            cert_validity: secs(self.cert_validity),
            renew_fraction: self.renew_fraction,
            // Rounded up: the overlap promised is never shortened.
            overlap: self.overlap.as_secs_f64().ceil() as i64,
            margin: self.check_interval.as_secs_f64().ceil() as i64,
        })
    }
}

/// What went wrong keeping the certificates.
#[derive(Debug, thiserror::Error)]
pub enum CertificateError {
    /// The configuration cannot work.
    #[error("invalid certificate configuration: {0}")]
    Config(String),
    /// The apiserver refused kanon the Secret (RBAC).
    #[error("forbidden to {verb} Secret {namespace}/{name}: {message}")]
    Forbidden {
        /// `get`, `create` or `update`.
        verb: &'static str,
        /// The Secret's namespace.
        namespace: String,
        /// The Secret's name.
        name: String,
        /// The apiserver's message.
        message: String,
    },
    /// Any other failure of a Secret read or write.
    #[error(
        "cannot {verb} Secret {namespace}/{name}: {}",
        crate::apiserver_error::describe(source)
    )]
    Api {
        /// `get`, `create` or `update`.
        verb: &'static str,
        /// The Secret's namespace.
        namespace: String,
        /// The Secret's name.
        name: String,
        /// The client's error.
        #[source]
        source: Box<kube::Error>,
    },
    /// One key of the Secret holds something unusable (it is re-issued, never served).
    #[error("Secret {namespace}/{name}: {key}: {message}")]
    BadSecret {
        /// The Secret's namespace.
        namespace: String,
        /// The Secret's name.
        name: String,
        /// The data key (or annotation) at fault.
        key: String,
        /// What is wrong (never the content).
        message: String,
    },
    /// A file of the certificate directory could not be written.
    #[error(transparent)]
    Write(#[from] WriteError),
    /// A key or certificate could not be generated.
    #[error("cannot generate the {what}: {message}")]
    Generate {
        /// Which.
        what: &'static str,
        /// Why.
        message: String,
    },
    /// Other writers kept changing the Secret between this replica's read and write.
    #[error("Secret {namespace}/{name} kept changing: gave up after {attempts} attempts")]
    Contention {
        /// The Secret's namespace.
        namespace: String,
        /// The Secret's name.
        name: String,
        /// Reads and writes attempted.
        attempts: u32,
    },
}

impl CertificateError {
    /// Whether the apiserver refused the request for lack of permission.
    pub fn is_forbidden(&self) -> bool {
        matches!(self, CertificateError::Forbidden { .. })
    }
}

/// Every problem of a Secret's content, each naming its key (empty: kanon can use it as is,
/// apart from renewals that are due).
pub fn secret_problems(secret: &Secret) -> Vec<CertificateError> {
    let namespace = secret.metadata.namespace.clone().unwrap_or_default();
    let name = secret.metadata.name.clone().unwrap_or_default();
    read_secret(secret)
        .problems()
        .into_iter()
        .map(|problem| CertificateError::BadSecret {
            namespace: namespace.clone(),
            name: name.clone(),
            key: problem.key.to_string(),
            message: problem.message,
        })
        .collect()
}

fn read_secret(secret: &Secret) -> Stored {
    let rotated_at = secret
        .metadata
        .annotations
        .as_ref()
        .and_then(|annotations| annotations.get(ROTATED_AT_ANNOTATION));
    let data = secret
        .data
        .iter()
        .flatten()
        .map(|(key, value)| (key.clone(), value.0.clone()))
        .collect();
    Stored::read(&data, rotated_at.map(String::as_str))
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CertificateLabels {
    certificate: &'static str,
}

const CA: CertificateLabels = CertificateLabels { certificate: "ca" };
const SERVING: CertificateLabels = CertificateLabels {
    certificate: "serving",
};

/// The certificates' metrics. Cheap to clone: clones share the samples.
///
/// | metric | labels | what |
/// |---|---|---|
/// | `kanon_certificate_expiry_timestamp_seconds` | `certificate` (`ca`, `serving`) | `notAfter` of the signing CA and of the serving certificate in force (UNIX seconds) |
/// | `kanon_certificate_renewals_total` | `certificate` | certificates this replica issued to replace one: renewals, CA rotations, repairs (not the first creation) |
#[derive(Clone, Debug, Default)]
pub struct CertificateMetrics {
    expiry: Family<CertificateLabels, Gauge>,
    renewals: Family<CertificateLabels, Counter>,
}

impl CertificateMetrics {
    /// Fresh families, not yet registered.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers both families into `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "kanon_certificate_expiry_timestamp_seconds",
            "notAfter of the signing CA and of the serving certificate in force, in UNIX seconds",
            self.expiry.clone(),
        );
        // Registered without `_total`: the encoder appends it.
        registry.register(
            "kanon_certificate_renewals",
            "Certificates this replica issued to replace one (renewals, CA rotations, repairs)",
            self.renewals.clone(),
        );
    }

    fn observe(&self, material: &Material) {
        self.expiry
            .get_or_create(&CA)
            .set(material.signing.cert.info.not_after);
        self.expiry
            .get_or_create(&SERVING)
            .set(material.leaf.cert.info.not_after);
    }
}

/// The webhook's certificates, kept: see the [module documentation](self).
pub struct Certificates {
    api: Api<Secret>,
    config: CertificateConfig,
    settings: Settings,
    metrics: CertificateMetrics,
    bundle: watch::Sender<Vec<u8>>,
    /// What was last put in force: recreates the Secret if it is deleted.
    current: Option<Material>,
}

impl fmt::Debug for Certificates {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Certificates")
            .field("namespace", &self.config.namespace)
            .field("secret_name", &self.config.secret_name)
            .field("cert_dir", &self.config.cert_dir)
            .finish_non_exhaustive()
    }
}

impl Certificates {
    /// Loads or creates the Secret (converging with other replicas; renewing or repairing what
    /// is due), writes the files, and returns at once with the bundle known. Errors are
    /// returned, not retried (but conflicts with other replicas, which are resolved).
    pub async fn ensure(
        client: Client,
        config: CertificateConfig,
        metrics: CertificateMetrics,
    ) -> Result<Certificates, CertificateError> {
        let settings = config.settings()?;
        let api = Api::namespaced(client, &config.namespace);
        let (bundle, _) = watch::channel(Vec::new());
        let mut certificates = Certificates {
            api,
            config,
            settings,
            metrics,
            bundle,
            current: None,
        };
        certificates.check().await?;
        Ok(certificates)
    }

    /// The trusted CA bundle (PEM), updated when it changes: what the webhook configurations'
    /// caBundle must hold. It grows (a new CA) before the served certificate moves to the new
    /// CA, and shrinks only after.
    pub fn ca_bundle(&self) -> watch::Receiver<Vec<u8>> {
        self.bundle.subscribe()
    }

    /// Keeps the certificates: checks every `check_interval`, renews when due, follows other
    /// replicas' changes. Runs until dropped; errors are logged and retried, never panic.
    pub async fn run(mut self) {
        let mut ticks = tokio::time::interval(self.config.check_interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The first tick is immediate: `ensure` has just checked.
        ticks.tick().await;
        loop {
            ticks.tick().await;
            if let Err(error) = self.check().await {
                warn!(
                    %error,
                    retry_in = ?self.config.check_interval,
                    "the certificate check failed"
                );
            }
        }
    }

    /// One check: read the Secret, write what is due (again on a conflict), then put its
    /// content in force (bundle, files, metrics).
    async fn check(&mut self) -> Result<(), CertificateError> {
        let name = self.config.secret_name.clone();
        for _ in 0..MAX_ATTEMPTS {
            let existing = self
                .api
                .get_opt(&name)
                .await
                .map_err(|e| self.api_error("get", e))?;
            // A Secret deleted under a running replica is recreated with the certificates in
            // force (a new CA would break every caBundle until it is updated).
            let stored = match (&existing, &self.current) {
                (Some(secret), _) => Some(read_secret(secret)),
                (None, Some(current)) => {
                    warn!(
                        namespace = %self.config.namespace,
                        secret = %name,
                        "the certificate Secret is gone: recreating it with the certificates in force"
                    );
                    Some(Stored::read(
                        &current.data(),
                        Some(&rfc3339(current.rotated_at)),
                    ))
                }
                (None, None) => None,
            };
            let now = kanon_certificates::unix_now();
            let plan = kanon_certificates::plan(stored.as_ref(), &self.settings, now)
                .map_err(generate_error)?;
            let desired = self.desired_secret(existing.as_ref(), &plan.material);
            let result = match &existing {
                None => Some(
                    self.api
                        .create(&PostParams::default(), &desired)
                        .await
                        .map_err(|e| ("create", e)),
                ),
                Some(existing) if *existing != desired => Some(
                    self.api
                        .replace(&name, &PostParams::default(), &desired)
                        .await
                        .map_err(|e| ("update", e)),
                ),
                Some(_) => None,
            };
            match result {
                None => {}
                Some(Ok(_)) => {
                    for problem in stored.as_ref().map(Stored::problems).unwrap_or_default() {
                        let error = CertificateError::BadSecret {
                            namespace: self.config.namespace.clone(),
                            name: name.clone(),
                            key: problem.key.to_string(),
                            message: problem.message,
                        };
                        warn!(%error, "repaired the certificate Secret");
                    }
                    for reason in &plan.reasons {
                        info!(
                            namespace = %self.config.namespace,
                            secret = %name,
                            "{reason}"
                        );
                    }
                    if plan.renewed_ca {
                        self.metrics.renewals.get_or_create(&CA).inc();
                    }
                    if plan.renewed_leaf {
                        self.metrics.renewals.get_or_create(&SERVING).inc();
                    }
                }
                Some(Err((verb, kube::Error::Api(status))))
                    if status.is_conflict()
                        || status.is_already_exists()
                        || (verb == "update" && status.is_not_found()) =>
                {
                    debug!(
                        secret = %name,
                        reason = %status.reason,
                        "the certificate Secret changed meanwhile: reading it again"
                    );
                    continue;
                }
                Some(Err((verb, error))) => return Err(self.api_error(verb, error)),
            }
            return self.put_in_force(&plan.material).await;
        }
        Err(CertificateError::Contention {
            namespace: self.config.namespace.clone(),
            name,
            attempts: MAX_ATTEMPTS,
        })
    }

    /// The Secret holding `material`: the one read with kanon's keys, label and annotation
    /// set (everything else kept), or a new one.
    fn desired_secret(&self, existing: Option<&Secret>, material: &Material) -> Secret {
        let mut secret = existing.cloned().unwrap_or_else(|| Secret {
            metadata: ObjectMeta {
                name: Some(self.config.secret_name.clone()),
                namespace: Some(self.config.namespace.clone()),
                ..ObjectMeta::default()
            },
            type_: Some(SECRET_TYPE.to_string()),
            ..Secret::default()
        });
        secret
            .metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(MANAGED_BY_LABEL.to_string(), MANAGED_BY.to_string());
        secret
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(
                ROTATED_AT_ANNOTATION.to_string(),
                rfc3339(material.rotated_at),
            );
        secret.data.get_or_insert_with(BTreeMap::new).extend(
            material
                .data()
                .into_iter()
                .map(|(key, value)| (key, ByteString(value))),
        );
        secret
    }

    /// Publishes the bundle, then writes the files that changed, and sets the metrics.
    async fn put_in_force(&mut self, material: &Material) -> Result<(), CertificateError> {
        self.current = Some(material.clone());
        let bundle = material.bundle_pem().into_bytes();
        // Before the files: a new CA is trusted before anything it signed is served (and a
        // CA leaves the bundle only long after the certificate moved off it).
        self.bundle.send_if_modified(|current| {
            if *current == bundle {
                false
            } else {
                current.clone_from(&bundle);
                true
            }
        });
        let dir = self.config.cert_dir.clone();
        let files = material.files();
        let written = tokio::task::spawn_blocking({
            let dir = dir.clone();
            move || files::write_changed(&dir, &files)
        })
        .await
        .map_err(|e| WriteError {
            path: dir.clone(),
            source: io::Error::other(e.to_string()),
        })??;
        if !written.is_empty() {
            info!(
                dir = %dir.display(),
                files = %written.join(", "),
                serving_not_after = %rfc3339(material.leaf.cert.info.not_after),
                cas = material.bundle.len(),
                "wrote the certificate files"
            );
        }
        self.metrics.observe(material);
        Ok(())
    }

    fn api_error(&self, verb: &'static str, error: kube::Error) -> CertificateError {
        let namespace = self.config.namespace.clone();
        let name = self.config.secret_name.clone();
        match error {
            kube::Error::Api(status) if status.is_forbidden() => CertificateError::Forbidden {
                verb,
                namespace,
                name,
                message: status.message,
            },
            source => CertificateError::Api {
                verb,
                namespace,
                name,
                source: Box::new(source),
            },
        }
    }
}

fn generate_error(error: IssueError) -> CertificateError {
    match error {
        IssueError::Generate(what, source) => CertificateError::Generate {
            what,
            message: source.to_string(),
        },
        IssueError::Unverifiable(message) => CertificateError::Generate {
            what: "serving certificate",
            message: format!("the new certificate does not verify: {message}"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_configuration_is_valid() {
        let settings = CertificateConfig::default().settings().unwrap();
        assert_eq!(settings.overlap, 600);
        assert_eq!(settings.cert_validity, 365 * 86_400);
    }

    #[test]
    fn unworkable_configurations_are_refused() {
        let refused = |change: fn(&mut CertificateConfig)| {
            let mut config = CertificateConfig::default();
            change(&mut config);
            match config.settings() {
                Err(CertificateError::Config(message)) => message,
                other => panic!("accepted: {other:?}"),
            }
        };
        assert!(refused(|c| c.dns_names.clear()).contains("DNS name or an IP"));
        assert!(refused(|c| c.dns_names = vec!["not a name".into()]).contains("not a DNS name"));
        assert!(refused(|c| c.renew_fraction = 1.0).contains("renew_fraction"));
        assert!(refused(|c| c.cert_validity = Duration::ZERO).contains("cert_validity"));
        assert!(refused(|c| c.overlap = Duration::from_secs(365 * 86_400)).contains("overlap"));
        assert!(refused(|c| c.check_interval = Duration::ZERO).contains("check_interval"));
    }
}
