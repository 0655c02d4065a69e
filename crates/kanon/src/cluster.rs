//! `kanon serve` in a cluster: the apiserver client, the policy reflector, the Namespace cache,
//! status writes and the lookups policies make, wired to the webhook through its publisher and
//! a [`Lookup`].

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use kanon_cluster::ClusterMetrics;
use kanon_cluster::http::{HttpConfig, HttpLookups};
use kanon_cluster::lookup::ClusterLookup;
use kanon_cluster::namespaces::NamespaceCache;
use kanon_cluster::objects::{ObjectConfig, ObjectReader};
use kanon_cluster::reflector::Reflector;
use kanon_cluster::status::StatusWriter;
use kanon_engine::{Lookup, PolicyPublisher};

/// Arguments of cluster mode.
#[derive(Debug, Args)]
pub struct ClusterArgs {
    /// The kubeconfig to reach the apiserver with. Without it: `$KUBECONFIG`, then
    /// `~/.kube/config`, then the in-cluster service account.
    #[arg(long, value_name = "PATH")]
    kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: its current context).
    #[arg(long, value_name = "NAME", requires = "kubeconfig")]
    context: Option<String>,
    /// Do not write policy status (for a replica that only serves; status is the same from
    /// every replica, so this is never needed for correctness).
    #[arg(long)]
    no_status: bool,
    /// Let policies read Secrets through `k8s` references (off: such a lookup is refused, and
    /// kanon needs no RBAC on Secrets for it).
    #[arg(long)]
    allow_secret_lookups: bool,
    /// How long an object read through the apiserver is reused, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 5000)]
    object_cache_ttl_ms: u64,
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
}

async fn client(args: &ClusterArgs) -> Result<kube::Client, ClusterError> {
    let config = match &args.kubeconfig {
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
    };
    kube::Client::try_from(config).map_err(|e| ClusterError::Client(e.to_string()))
}

/// Starts the cluster sources on the current runtime: the reflector publishes into
/// `publisher` once every watch has synced; the returned lookup serves the policies' reads.
pub async fn start(
    args: &ClusterArgs,
    publisher: Arc<dyn PolicyPublisher>,
    metrics: ClusterMetrics,
) -> Result<Arc<dyn Lookup>, ClusterError> {
    let client = client(args).await?;
    let extra_roots_pem = match &args.http_ca_file {
        Some(path) => std::fs::read(path).map_err(|source| ClusterError::CaFile {
            path: path.display().to_string(),
            source,
        })?,
        None => Vec::new(),
    };
    let namespaces = NamespaceCache::start(client.clone(), metrics.clone());
    let objects = Arc::new(ObjectReader::new(
        client.clone(),
        ObjectConfig {
            ttl: Duration::from_millis(args.object_cache_ttl_ms),
            allow_secrets: args.allow_secret_lookups,
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
    let status = (!args.no_status).then(|| StatusWriter::start(client.clone(), metrics.clone()));
    tokio::spawn(
        Reflector {
            client,
            publisher,
            namespaces: namespaces.clone(),
            status,
            metrics: metrics.clone(),
        }
        .run(),
    );
    Ok(Arc::new(ClusterLookup::new(
        namespaces, objects, http, metrics,
    )))
}
