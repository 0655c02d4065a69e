//! `kanon serve` in a cluster: the apiserver client, the policy reflector, the Namespace cache,
//! status writes and the lookups policies make, wired to the webhook through its publisher and
//! a [`Lookup`].

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use kanon_cluster::ClusterMetrics;
use kanon_cluster::audit::admitted::AdmittedReports;
use kanon_cluster::certificates::{CertificateConfig, CertificateMetrics, Certificates};
use kanon_cluster::custom_kinds::CustomKinds;
use kanon_cluster::http::{HttpConfig, HttpLookups};
use kanon_cluster::lookup::ClusterLookup;
use kanon_cluster::namespaces::NamespaceCache;
use kanon_cluster::objects::{ObjectConfig, ObjectReader};
use kanon_cluster::permissions::{self, Needs};
use kanon_cluster::reflector::Reflector;
use kanon_cluster::status::StatusWriter;
use kanon_cluster::webhooks::{RuleMode, WebhookConfig, WebhookConfigurations};
use kanon_engine::{Lookup, PolicyPublisher, Targets};
use tokio::sync::watch;

/// How to reach the apiserver.
#[derive(Debug, Args)]
pub struct ConnectionArgs {
    /// The kubeconfig to reach the apiserver with. Without it: `$KUBECONFIG`, then
    /// `~/.kube/config`, then the in-cluster service account.
    #[arg(long, value_name = "PATH")]
    kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: its current context).
    #[arg(long, value_name = "NAME", requires = "kubeconfig")]
    context: Option<String>,
}

/// What the lookups policies make may read, and how long answers are reused.
#[derive(Debug, Args)]
pub struct LookupArgs {
    /// Let policies read Secrets through `k8s` references (off: such a lookup is refused, and
    /// kanon needs no RBAC on Secrets for it).
    #[arg(long)]
    allow_secret_lookups: bool,
    /// How long an object read through the apiserver is reused, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 5000)]
    object_cache_ttl_ms: u64,
    /// The most one object read may hold, in MiB: an object, or the objects a label selector
    /// lists (the apiserver's answers, and the objects decoded); past it the lookup fails and
    /// the policy fails under its `failurePolicy`.
    #[arg(long, value_name = "MIB", default_value_t = 4,
          value_parser = clap::value_parser!(u64).range(1..=1024))]
    object_read_max_mib: u64,
    /// The most the objects read for references take together, in MiB: reads in progress
    /// (each reserves twice `--object-read-max-mib`), cached, or still held by reviews. At
    /// least twice `--object-read-max-mib`.
    #[arg(long, value_name = "MIB", default_value_t = 32,
          value_parser = clap::value_parser!(u64).range(2..=65_536))]
    object_cache_mib: u64,
    /// Networks HTTP references may reach although they are loopback, link-local, private or
    /// metadata addresses (refused by default); repeat for several, e.g. `10.0.0.0/8`.
    #[arg(long = "http-allow-cidr", value_name = "CIDR")]
    http_allow_cidrs: Vec<ipnet::IpNet>,
    /// Extra CA certificates (PEM) trusted by HTTP references, besides the public roots.
    #[arg(long, value_name = "PATH")]
    http_ca_file: Option<PathBuf>,
    /// How long a successful HTTP answer is reused, in milliseconds (0: never).
    #[arg(long, value_name = "MS", default_value_t = 10_000)]
    http_cache_ttl_ms: u64,
    /// The largest HTTP answer read, in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = 1 << 20)]
    http_max_body_bytes: usize,
}

/// Arguments of cluster mode.
#[derive(Debug, Args)]
pub struct ClusterArgs {
    #[command(flatten)]
    connection: ConnectionArgs,
    #[command(flatten)]
    lookups: LookupArgs,
    /// Do not write policy status (for a replica that only serves; status is the same from
    /// every replica, so this is never needed for correctness).
    #[arg(long)]
    no_status: bool,
    /// kanon's own namespace (where its certificate Secret lives).
    #[arg(
        long,
        env = "POD_NAMESPACE",
        value_name = "NAME",
        default_value = "kanon-system"
    )]
    namespace: String,
    /// Keep the webhook's CA and serving certificate in this Secret (in `--namespace`):
    /// created by the first replica, renewed before expiry, written to `--cert-dir` for the
    /// server. Without it the certificate files in `--cert-dir` are used as they are (e.g. from
    /// cert-manager).
    #[arg(long, value_name = "NAME")]
    cert_secret: Option<String>,
    /// A DNS name of the serving certificate kept in `--cert-secret`; repeat for several.
    #[arg(long = "cert-dns-name", value_name = "NAME")]
    cert_dns_names: Vec<String>,
    /// An IP address of the serving certificate kept in `--cert-secret` (for a kanon called by
    /// address, outside the cluster); repeat for several.
    #[arg(long = "cert-ip", value_name = "IP")]
    cert_ips: Vec<std::net::IpAddr>,
    /// Lifetime of the CA kept in `--cert-secret`, in hours.
    #[arg(long, value_name = "HOURS", default_value_t = 87_600)]
    ca_validity_hours: u64,
    /// Lifetime of the serving certificate kept in `--cert-secret`, in hours.
    #[arg(long, value_name = "HOURS", default_value_t = 8_760)]
    cert_validity_hours: u64,
    /// How often the certificate Secret is checked (renewal, other replicas' changes), in
    /// seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    cert_check_interval_seconds: u64,
    /// Keep the Mutating- and ValidatingWebhookConfiguration of this name (as the chart
    /// installs them): kanon writes their `caBundle` and the `rules` of `mutate.kanon.dev` and
    /// `validate.kanon.dev`.
    #[arg(long, value_name = "NAME")]
    webhook_configuration: Option<String>,
    /// Rules of kanon's webhooks: `generated` (only the types and operations the installed
    /// policies select) or `all` (every type and operation).
    #[arg(long, value_enum, default_value_t = WebhookRules::Generated)]
    webhook_rules: WebhookRules,
    #[command(flatten)]
    audit: crate::auditor::AuditArgs,
    #[command(flatten)]
    events: crate::events::EventsArgs,
}

/// How the webhook rules are chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum WebhookRules {
    /// Only what the installed policies select.
    Generated,
    /// Every type and operation.
    All,
}

/// Why cluster mode could not start.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The kubeconfig could not be read or used.
    #[error("the kubeconfig {path}: {message}")]
    Kubeconfig {
        /// Which kubeconfig.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// No client could be made.
    #[error("cannot reach the apiserver: {0}")]
    Client(String),
    /// `--http-ca-file` could not be read.
    #[error("--http-ca-file {path}: {source}")]
    CaFile {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The HTTP client could not be built.
    #[error("HTTP references: {0}")]
    Http(String),
    /// The certificate options do not fit together.
    #[error("certificates: {0}")]
    Certificates(String),
}

/// A client of the apiserver `args` name.
pub async fn client(args: &ConnectionArgs) -> Result<kube::Client, ClusterError> {
    kube::Client::try_from(config(args).await?).map_err(|e| ClusterError::Client(e.to_string()))
}

/// How to reach the apiserver `args` name.
pub async fn config(args: &ConnectionArgs) -> Result<kube::Config, ClusterError> {
    Ok(match &args.kubeconfig {
        Some(path) => {
            let shown = path.display().to_string();
            let bad = |message: String| ClusterError::Kubeconfig {
                path: shown.clone(),
                message,
            };
            let kubeconfig =
                kube::config::Kubeconfig::read_from(path).map_err(|e| bad(e.to_string()))?;
            let options = kube::config::KubeConfigOptions {
                context: args.context.clone(),
                ..Default::default()
            };
            kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .map_err(|e| bad(e.to_string()))?
        }
        None => kube::Config::infer()
            .await
            .map_err(|e| ClusterError::Client(e.to_string()))?,
    })
}

/// Logs every permission kanon's identity lacks for what it was asked to do.
async fn check_permissions(
    client: &kube::Client,
    args: &ClusterArgs,
    exception_namespaces: &[String],
) {
    let needs = Needs {
        status: !args.no_status,
        certificate_secret: args
            .cert_secret
            .clone()
            .map(|name| (args.namespace.clone(), name)),
        webhook_configuration: args.webhook_configuration.clone(),
        exception_namespaces: exception_namespaces.to_vec(),
        audit: (!args.audit.disabled()).then(|| args.namespace.clone()),
        events: args.events.kinds().any(),
    };
    match permissions::missing(client, &needs.permissions()).await {
        Ok(missing) if missing.is_empty() => {
            tracing::info!("kanon has every permission it needs")
        }
        Ok(missing) => {
            for permission in &missing {
                tracing::error!(%permission, "missing permission: {permission}");
            }
        }
        Err(error) => tracing::warn!(%error, "could not check kanon's permissions"),
    }
}

/// The certificate Secret's contents, kept: created or loaded (retrying until the apiserver
/// answers), written to `cert_dir`, renewed in the background. Its CA bundle.
async fn keep_certificates(
    client: &kube::Client,
    args: &ClusterArgs,
    secret: &str,
    cert_dir: &Path,
    metrics: CertificateMetrics,
) -> Result<watch::Receiver<Vec<u8>>, ClusterError> {
    let mut dns_names = args.cert_dns_names.clone();
    if dns_names.is_empty() && args.cert_ips.is_empty() {
        dns_names.push("localhost".to_string());
    }
    let config = CertificateConfig {
        namespace: args.namespace.clone(),
        secret_name: secret.to_string(),
        dns_names,
        ip_addresses: args.cert_ips.clone(),
        ca_validity: Duration::from_secs(args.ca_validity_hours.saturating_mul(3600)),
        cert_validity: Duration::from_secs(args.cert_validity_hours.saturating_mul(3600)),
        check_interval: Duration::from_secs(args.cert_check_interval_seconds.max(1)),
        cert_dir: cert_dir.to_path_buf(),
        ..CertificateConfig::default()
    };
    let mut delay = Duration::from_millis(500);
    loop {
        match Certificates::ensure(client.clone(), config.clone(), metrics.clone()).await {
            Ok(certificates) => {
                let bundle = certificates.ca_bundle();
                tokio::spawn(certificates.run());
                return Ok(bundle);
            }
            Err(e @ kanon_cluster::certificates::CertificateError::Config(_)) => {
                return Err(ClusterError::Certificates(e.to_string()));
            }
            Err(error) => {
                tracing::warn!(%error, retry_in = ?delay, "the certificate Secret is not ready yet");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(10));
            }
        }
    }
}

/// What cluster mode gives the server.
pub struct Started {
    /// The lookups policies make.
    pub lookup: Arc<dyn Lookup>,
    /// Where admitted objects go into the audit's reports (unless `--no-audit`).
    pub recorder: Option<Arc<dyn kanon_engine::AdmissionRecorder>>,
    /// The Kubernetes Events recorder (with `--events`).
    pub events: Option<kanon_cluster::events::Events>,
}

/// Prepares the certificates before the server starts: with `--cert-secret`, the Secret's
/// certificate is written into `cert_dir` (so the server serves it from the first request).
/// Returns the CA bundle to inject into the webhook configurations.
pub async fn prepare_certificates(
    args: &ClusterArgs,
    cert_dir: &Path,
    metrics: CertificateMetrics,
) -> Result<watch::Receiver<Vec<u8>>, ClusterError> {
    match &args.cert_secret {
        Some(secret) => {
            let client = client(&args.connection).await?;
            keep_certificates(&client, args, secret, cert_dir, metrics).await
        }
        None => {
            // The server would create them when it binds; the bundle is needed before.
            kanon_certificates::directory::ensure(cert_dir)
                .map_err(|e| ClusterError::Certificates(e.to_string()))?;
            Ok(crate::certificate_files::follow_ca_bundle(cert_dir))
        }
    }
}

/// The lookups policies make in a cluster, with the caches they read.
pub struct Lookups {
    /// The Namespace cache.
    pub namespaces: NamespaceCache,
    /// The kinds the cluster serves.
    pub kinds: CustomKinds,
    /// The lookups.
    pub lookup: Arc<ClusterLookup>,
}

/// Starts the caches and builds the lookups policies make, as `args` allow them.
pub fn lookups(
    client: &kube::Client,
    args: &LookupArgs,
    metrics: ClusterMetrics,
) -> Result<Lookups, ClusterError> {
    let extra_roots_pem = match &args.http_ca_file {
        Some(path) => std::fs::read(path).map_err(|source| ClusterError::CaFile {
            path: path.display().to_string(),
            source,
        })?,
        None => Vec::new(),
    };
    let namespaces = NamespaceCache::start(client.clone(), metrics.clone());
    // Optional: without the permission, policies are checked against built-in kinds only.
    let kinds = CustomKinds::start(client.clone(), metrics.clone());
    let objects = Arc::new(ObjectReader::new(
        client.clone(),
        ObjectConfig {
            ttl: Duration::from_millis(args.object_cache_ttl_ms),
            allow_secrets: args.allow_secret_lookups,
            read_max_bytes: (args.object_read_max_mib << 20) as usize,
            memory_bytes: (args.object_cache_mib << 20) as usize,
            ..ObjectConfig::default()
        },
        metrics.clone(),
    ));
    let http = HttpLookups::new(
        HttpConfig {
            allowed_networks: args.http_allow_cidrs.clone(),
            cache_ttl: Duration::from_millis(args.http_cache_ttl_ms),
            max_body_bytes: args.http_max_body_bytes,
            extra_roots_pem,
            ..HttpConfig::default()
        },
        objects.clone(),
        metrics.clone(),
    )
    .map_err(|e| ClusterError::Http(e.to_string()))?;
    let lookup = Arc::new(
        ClusterLookup::new(namespaces.clone(), objects, http, metrics).with_kinds(kinds.clone()),
    );
    Ok(Lookups {
        namespaces,
        kinds,
        lookup,
    })
}

/// Starts the cluster sources on the current runtime: the reflector publishes into
/// `publisher` once every watch has synced; the webhook configurations (with
/// `--webhook-configuration`) follow the policies and `ca_bundle`; the auditor (unless
/// `--no-audit`) audits with the sets `audit_policies` receives; the Events recorder (with
/// `--events`) writes with `event_metrics`; the returned lookup serves the policies' reads.
pub async fn start(
    args: &ClusterArgs,
    exception_namespaces: &[String],
    publisher: Arc<dyn PolicyPublisher>,
    ca_bundle: watch::Receiver<Vec<u8>>,
    metrics: ClusterMetrics,
    audit: crate::auditor::AuditStart,
    event_metrics: kanon_cluster::events::EventMetrics,
) -> Result<Started, ClusterError> {
    let config = config(&args.connection).await?;
    let client =
        kube::Client::try_from(config.clone()).map_err(|e| ClusterError::Client(e.to_string()))?;
    check_permissions(&client, args, exception_namespaces).await;
    let Lookups {
        namespaces,
        kinds,
        lookup,
    } = lookups(&client, &args.lookups, metrics.clone())?;
    let status = (!args.no_status).then(|| StatusWriter::start(client.clone(), metrics.clone()));
    let events = args
        .events
        .start(&client, args.audit.interval(), event_metrics);
    let targets = match &args.webhook_configuration {
        Some(name) => {
            let (sender, mut receiver) = watch::channel((Targets::default(), Targets::default()));
            let webhooks = WebhookConfigurations::new(
                client.clone(),
                WebhookConfig {
                    name: name.clone(),
                    mode: match args.webhook_rules {
                        WebhookRules::Generated => RuleMode::Generated,
                        WebhookRules::All => RuleMode::CatchAll,
                    },
                    ..WebhookConfig::default()
                },
            );
            tokio::spawn(async move {
                // Rules come from a complete policy set only, never from the channel's initial
                // value: wait for the first set.
                if receiver.changed().await.is_ok() {
                    webhooks.run(receiver, ca_bundle).await;
                }
            });
            Some(sender)
        }
        None => None,
    };
    let recorder = (!args.audit.disabled()).then(|| {
        let (queue, admitted) = AdmittedReports::queue();
        let audit_args = args.audit.clone();
        let namespace = args.namespace.clone();
        let webhook_configuration = args.webhook_configuration.clone();
        let lookup = lookup.clone();
        let events = events.clone().filter(|events| events.kinds().audit);
        // The audit's own client, on the audit's thread: the connections, TLS and decoding of
        // every page it reads stay off the runtime that answers reviews.
        crate::auditor::in_background(config, move |client| async move {
            let reports = audit_args.admitted_reports(client.clone(), lookup.clone(), &audit);
            let mut auditor =
                audit_args.auditor(client, &namespace, webhook_configuration, lookup, audit);
            auditor.events = events;
            tokio::join!(reports.run(admitted), auditor.run());
        });
        Arc::new(queue) as Arc<dyn kanon_engine::AdmissionRecorder>
    });
    tokio::spawn(
        Reflector {
            client,
            publisher,
            namespaces,
            status,
            targets,
            kinds: Some(kinds),
            metrics,
            exception_namespaces: exception_namespaces.to_vec(),
        }
        .run(),
    );
    Ok(Started {
        lookup,
        recorder,
        events,
    })
}
