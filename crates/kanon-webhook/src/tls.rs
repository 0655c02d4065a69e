//! The webhook's TLS: the serving certificate (created, with its own CA, when the certificate
//! directory has none), a certificate resolver that swaps in a new pair when the files change
//! (no restart: kubelet rotates mounted Secrets in place), and the rustls server configuration.
//!
//! Every configuration is built with an explicit ring [`CryptoProvider`]; nothing here depends
//! on a process-wide default provider.

use std::fmt;
use std::fs;
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// The serving certificate's file name in the certificate directory.
pub const CERT_FILE: &str = "tls.crt";
/// The serving key's file name in the certificate directory.
pub const KEY_FILE: &str = "tls.key";
/// The generated CA certificate's file name (what a client, or a `caBundle`, trusts).
pub const CA_CERT_FILE: &str = "ca.crt";
/// The generated CA key's file name.
pub const CA_KEY_FILE: &str = "ca.key";

/// The names the generated serving certificate is valid for.
pub const SERVING_NAMES: [&str; 2] = ["localhost", "127.0.0.1"];

/// How long generated certificates are valid.
const VALIDITY_DAYS: i64 = 3650;

/// What is wrong with the certificate directory or its files.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file or directory could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// A file or directory could not be written.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// Only one of the certificate and the key exists.
    #[error("{} exists but {} does not: provide both or neither", present.display(), missing.display())]
    Incomplete {
        /// The file that exists.
        present: PathBuf,
        /// The file that does not.
        missing: PathBuf,
    },
    /// The certificate file holds no valid PEM certificate.
    #[error("{} is not a PEM certificate chain: {message}", path.display())]
    BadCertificate {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The key file holds no valid PEM private key.
    #[error("{} is not a PEM private key: {message}", path.display())]
    BadKey {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The key is not usable with the certificate (unsupported, or not the certificate's key).
    #[error("{} and {} are not a usable pair: {source}", cert.display(), key.display())]
    Mismatch {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// rustls' reason.
        source: rustls::Error,
    },
    /// A certificate could not be generated.
    #[error("cannot generate the {what}: {source}")]
    Generate {
        /// Which certificate.
        what: &'static str,
        /// rcgen's reason.
        source: rcgen::Error,
    },
    /// rustls refused the server configuration.
    #[error("cannot build the TLS configuration: {0}")]
    Config(rustls::Error),
    /// The client CA file holds no usable CA certificate.
    #[error("{} cannot be used to verify client certificates: {message}", path.display())]
    BadClientCa {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// The CAs a client certificate must be signed by, read from the PEM file at `path` (one or
/// more certificates).
pub fn load_client_roots(path: &Path) -> Result<Arc<rustls::RootCertStore>, TlsError> {
    let bad = |message: String| TlsError::BadClientCa {
        path: path.to_path_buf(),
        message,
    };
    let pem = fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let certificates = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(e.to_string()))?;
    if certificates.is_empty() {
        return Err(bad("it holds no PEM certificate".to_string()));
    }
    let mut roots = rustls::RootCertStore::empty();
    for certificate in certificates {
        roots
            .add(certificate)
            .map_err(|e| bad(format!("a certificate is not a usable CA: {e}")))?;
    }
    Ok(Arc::new(roots))
}

/// Where the serving pair (and the CA, when kanon created it) is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertPaths {
    /// The serving certificate chain (`tls.crt`).
    pub cert: PathBuf,
    /// The serving key (`tls.key`).
    pub key: PathBuf,
    /// The CA certificate (`ca.crt`), when it exists in the directory.
    pub ca: Option<PathBuf>,
    /// Whether this call created the files.
    pub generated: bool,
}

/// Uses `tls.crt` and `tls.key` in `dir` when both exist; when neither does, creates the
/// directory if needed, a CA (`ca.crt`, `ca.key`) and a serving certificate signed by it for
/// `localhost` and `127.0.0.1` (keys readable by the owner only). One without the other is an
/// error (kanon does not overwrite half a pair).
pub fn ensure_certificates(dir: &Path) -> Result<CertPaths, TlsError> {
    let cert = dir.join(CERT_FILE);
    let key = dir.join(KEY_FILE);
    let ca = dir.join(CA_CERT_FILE);
    let exists = |path: &Path| {
        path.try_exists().map_err(|source| TlsError::Read {
            path: path.to_path_buf(),
            source,
        })
    };
    match (exists(&cert)?, exists(&key)?) {
        (true, true) => {
            let ca = exists(&ca)?.then_some(ca);
            Ok(CertPaths {
                cert,
                key,
                ca,
                generated: false,
            })
        }
        (true, false) => Err(TlsError::Incomplete {
            present: cert,
            missing: key,
        }),
        (false, true) => Err(TlsError::Incomplete {
            present: key,
            missing: cert,
        }),
        (false, false) => {
            generate_certificates(dir)?;
            tracing::info!(dir = %dir.display(), "created a CA and a serving certificate");
            Ok(CertPaths {
                cert,
                key,
                ca: Some(ca),
                generated: true,
            })
        }
    }
}

/// Creates a new CA and a serving certificate for [`SERVING_NAMES`] signed by it in `dir`
/// (`ca.crt`, `ca.key`, `tls.crt`, `tls.key`), replacing whatever is there. Each file is
/// written to a temporary name and renamed into place, the key before the certificate, so a
/// reader never sees half a file.
pub fn generate_certificates(dir: &Path) -> Result<(), TlsError> {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
        KeyPair, KeyUsagePurpose,
    };
    let generate = |what| move |source| TlsError::Generate { what, source };

    let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(generate("CA"))?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "kanon webhook CA");
    ca_params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
    ];
    set_validity(&mut ca_params);
    let ca_key = KeyPair::generate().map_err(generate("CA key"))?;
    let ca_cert = ca_params.self_signed(&ca_key).map_err(generate("CA"))?;
    let ca_key_pem = ca_key.serialize_pem();
    let issuer = Issuer::new(ca_params, ca_key);

    let names: Vec<String> = SERVING_NAMES.iter().map(ToString::to_string).collect();
    let mut params = CertificateParams::new(names).map_err(generate("serving certificate"))?;
    params
        .distinguished_name
        .push(DnType::CommonName, SERVING_NAMES[0]);
    params.use_authority_key_identifier_extension = true;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    set_validity(&mut params);
    let key = KeyPair::generate().map_err(generate("serving key"))?;
    let cert = params
        .signed_by(&key, &issuer)
        .map_err(generate("serving certificate"))?;

    fs::create_dir_all(dir).map_err(|source| TlsError::Write {
        path: dir.to_path_buf(),
        source,
    })?;
    write_file(&dir.join(CA_KEY_FILE), ca_key_pem.as_bytes(), true)?;
    write_file(&dir.join(CA_CERT_FILE), ca_cert.pem().as_bytes(), false)?;
    write_file(&dir.join(KEY_FILE), key.serialize_pem().as_bytes(), true)?;
    write_file(&dir.join(CERT_FILE), cert.pem().as_bytes(), false)?;
    Ok(())
}

/// Sets the validity of `params`: from a day ago (clock skew) to [`VALIDITY_DAYS`] from now.
fn set_validity(params: &mut rcgen::CertificateParams) {
    let now_days = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() / 86_400);
    let today = i64::try_from(now_days).unwrap_or(0);
    let date = |days: i64| {
        let (y, m, d) = civil_from_days(days);
        rcgen::date_time_ymd(y, m, d)
    };
    params.not_before = date(today - 1);
    params.not_after = date(today + VALIDITY_DAYS);
}

/// The proleptic Gregorian date `days` after 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i32, u8, u8) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (
        i32::try_from(year).unwrap_or(i32::MAX),
        u8::try_from(month).unwrap_or(1),
        u8::try_from(day).unwrap_or(1),
    )
}

/// Writes `contents` to `path` through a temporary file in the same directory and a rename;
/// `private` files are created readable and writable by the owner only.
fn write_file(path: &Path, contents: &[u8], private: bool) -> Result<(), TlsError> {
    let error = |source| TlsError::Write {
        path: path.to_path_buf(),
        source,
    };
    let file_name = path
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temporary = path.with_file_name(format!(".{file_name}.{}.tmp", std::process::id()));
    let mut options = fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(if private { 0o600 } else { 0o644 });
    }
    #[cfg(not(unix))]
    let _ = private;
    let result = options
        .open(&temporary)
        .and_then(|mut file| {
            file.write_all(contents)?;
            file.sync_all()
        })
        .and_then(|()| fs::rename(&temporary, path));
    if result.is_err() {
        let _ = fs::remove_file(&temporary);
    }
    result.map_err(error)
}

/// Reads a certificate chain and its key, and checks they belong together.
pub fn load_certified_key(
    cert: &Path,
    key: &Path,
    provider: &CryptoProvider,
) -> Result<CertifiedKey, TlsError> {
    let cert_pem = fs::read(cert).map_err(|source| TlsError::Read {
        path: cert.to_path_buf(),
        source,
    })?;
    let key_pem = fs::read(key).map_err(|source| TlsError::Read {
        path: key.to_path_buf(),
        source,
    })?;
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, pem::Error>>()
        .map_err(|e| TlsError::BadCertificate {
            path: cert.to_path_buf(),
            message: e.to_string(),
        })?;
    if chain.is_empty() {
        return Err(TlsError::BadCertificate {
            path: cert.to_path_buf(),
            message: "no CERTIFICATE block".to_string(),
        });
    }
    let private_key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| TlsError::BadKey {
        path: key.to_path_buf(),
        message: match e {
            pem::Error::NoItemsFound => "no PRIVATE KEY block".to_string(),
            e => e.to_string(),
        },
    })?;
    CertifiedKey::from_der(chain, private_key, provider).map_err(|source| TlsError::Mismatch {
        cert: cert.to_path_buf(),
        key: key.to_path_buf(),
        source,
    })
}

/// What the files looked like when last read: a change of any of it triggers a reload.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp(Vec<Option<(SystemTime, u64, u64)>>);

impl Stamp {
    fn of(paths: &[&Path]) -> Self {
        Stamp(
            paths
                .iter()
                .map(|path| {
                    // Follows symlinks: kubelet swaps a `..data` link, which changes the inode.
                    let meta = fs::metadata(path).ok()?;
                    #[cfg(unix)]
                    let inode = std::os::unix::fs::MetadataExt::ino(&meta);
                    #[cfg(not(unix))]
                    let inode = 0;
                    Some((meta.modified().ok()?, meta.len(), inode))
                })
                .collect(),
        )
    }
}

#[derive(Debug, Default)]
struct WatchState {
    /// The files as they were when the pair in force was read.
    loaded: Option<Stamp>,
    /// The files as they were at the last failed reload (logged once per change).
    failed: Option<Stamp>,
}

/// The serving certificate, re-read from its files on [`CertResolver::reload`]: new TLS
/// handshakes get the new pair, connections already open keep theirs. A pair that does not
/// load leaves the one in force serving.
pub struct CertResolver {
    cert_path: PathBuf,
    key_path: PathBuf,
    provider: Arc<CryptoProvider>,
    current: RwLock<Arc<CertifiedKey>>,
    watch: Mutex<WatchState>,
}

impl fmt::Debug for CertResolver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CertResolver")
            .field("cert_path", &self.cert_path)
            .field("key_path", &self.key_path)
            .finish_non_exhaustive()
    }
}

impl CertResolver {
    /// Loads the pair at `paths` with the ring provider.
    pub fn load(paths: &CertPaths) -> Result<Arc<Self>, TlsError> {
        Self::load_with_provider(paths, Arc::new(rustls::crypto::ring::default_provider()))
    }

    /// Loads the pair at `paths` with `provider`.
    pub fn load_with_provider(
        paths: &CertPaths,
        provider: Arc<CryptoProvider>,
    ) -> Result<Arc<Self>, TlsError> {
        let stamp = Stamp::of(&[&paths.cert, &paths.key]);
        let key = load_certified_key(&paths.cert, &paths.key, &provider)?;
        Ok(Arc::new(CertResolver {
            cert_path: paths.cert.clone(),
            key_path: paths.key.clone(),
            provider,
            current: RwLock::new(Arc::new(key)),
            watch: Mutex::new(WatchState {
                loaded: Some(stamp),
                failed: None,
            }),
        }))
    }

    /// The crypto provider the pair was loaded with.
    pub fn provider(&self) -> &Arc<CryptoProvider> {
        &self.provider
    }

    /// The pair in force.
    pub fn current(&self) -> Arc<CertifiedKey> {
        match self.current.read() {
            Ok(current) => current.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Re-reads the files and puts the pair in force when it loads; otherwise the pair in
    /// force stays and the error is returned.
    pub fn reload(&self) -> Result<(), TlsError> {
        let stamp = Stamp::of(&[&self.cert_path, &self.key_path]);
        let key = load_certified_key(&self.cert_path, &self.key_path, &self.provider)?;
        self.install(key);
        let mut state = self.watch_state();
        state.loaded = Some(stamp);
        state.failed = None;
        Ok(())
    }

    fn install(&self, key: CertifiedKey) {
        let key = Arc::new(key);
        match self.current.write() {
            Ok(mut current) => *current = key,
            Err(poisoned) => *poisoned.into_inner() = key,
        }
    }

    fn watch_state(&self) -> std::sync::MutexGuard<'_, WatchState> {
        self.watch.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reloads when the files changed since the pair in force was read (or since the last
    /// attempt failed: a half-written pair is retried on every poll, logged once). Returns
    /// whether a new pair was put in force.
    pub fn reload_if_changed(&self) -> bool {
        let stamp = Stamp::of(&[&self.cert_path, &self.key_path]);
        let retry = {
            let state = self.watch_state();
            if state.loaded.as_ref() == Some(&stamp) {
                return false;
            }
            state.failed.is_some()
        };
        match load_certified_key(&self.cert_path, &self.key_path, &self.provider) {
            Ok(key) => {
                self.install(key);
                let mut state = self.watch_state();
                state.loaded = Some(stamp);
                state.failed = None;
                tracing::info!(cert = %self.cert_path.display(), "reloaded the serving certificate");
                true
            }
            Err(error) => {
                let mut state = self.watch_state();
                if !retry || state.failed.as_ref() != Some(&stamp) {
                    tracing::warn!(%error, "the new serving certificate does not load; the previous one keeps serving");
                }
                state.failed = Some(stamp);
                false
            }
        }
    }

    /// Polls the files' metadata every `interval` and reloads on change, until the returned
    /// task is aborted. Needs a tokio runtime.
    pub fn spawn_watcher(self: &Arc<Self>, interval: Duration) -> tokio::task::JoinHandle<()> {
        let resolver = Arc::downgrade(self);
        let interval = interval.max(Duration::from_millis(10));
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(interval);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            ticks.tick().await;
            loop {
                ticks.tick().await;
                let Some(resolver) = resolver.upgrade() else {
                    return;
                };
                // File reads are blocking; they are small, but keep them off the workers.
                let _ = tokio::task::spawn_blocking(move || resolver.reload_if_changed()).await;
            }
        })
    }
}

impl ResolvesServerCert for CertResolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// The rustls server configuration: TLS 1.2 and 1.3 with the resolver's provider, the
/// resolver's certificate, ALPN `http/1.1` (kube-apiserver calls webhooks over HTTP/1.1), and,
/// given `client_roots`, a client certificate required and verified against them (without
/// them, none is asked for).
pub fn server_config(
    resolver: Arc<CertResolver>,
    client_roots: Option<Arc<rustls::RootCertStore>>,
) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let provider = resolver.provider().clone();
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Config)?;
    let builder = match client_roots {
        Some(roots) => {
            let verifier =
                rustls::server::WebPkiClientVerifier::builder_with_provider(roots, provider)
                    .build()
                    .map_err(|e| TlsError::Config(rustls::Error::General(e.to_string())))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("kanon-tls-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(20_454), (2026, 1, 1));
    }

    #[test]
    fn creates_then_reuses_a_pair() {
        let dir = temp_dir("create");
        let paths = ensure_certificates(&dir).unwrap();
        assert!(paths.generated);
        assert_eq!(paths.ca.as_deref(), Some(dir.join(CA_CERT_FILE).as_path()));
        for file in [CERT_FILE, KEY_FILE, CA_CERT_FILE, CA_KEY_FILE] {
            assert!(dir.join(file).is_file(), "{file}");
        }
        #[cfg(unix)]
        for file in [KEY_FILE, CA_KEY_FILE] {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = fs::metadata(dir.join(file)).unwrap().permissions().mode();
            assert_eq!(mode & 0o077, 0, "{file} is readable by others: {mode:o}");
        }
        let cert = fs::read(dir.join(CERT_FILE)).unwrap();
        let again = ensure_certificates(&dir).unwrap();
        assert!(!again.generated);
        assert_eq!(fs::read(dir.join(CERT_FILE)).unwrap(), cert);
        let resolver = CertResolver::load(&again).unwrap();
        server_config(resolver, None).unwrap();
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn half_a_pair_is_an_error() {
        let dir = temp_dir("half");
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join(CERT_FILE), "x").unwrap();
        let error = ensure_certificates(&dir).unwrap_err();
        assert!(matches!(error, TlsError::Incomplete { .. }), "{error}");
        assert!(error.to_string().contains(KEY_FILE), "{error}");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_bad_pair_keeps_the_old_one_serving() {
        let dir = temp_dir("bad");
        let paths = ensure_certificates(&dir).unwrap();
        let resolver = CertResolver::load(&paths).unwrap();
        let before = resolver.current();

        fs::write(&paths.cert, "not a certificate").unwrap();
        let error = resolver.reload().unwrap_err();
        assert!(matches!(error, TlsError::BadCertificate { .. }), "{error}");
        assert!(error.to_string().contains(CERT_FILE), "{error}");
        assert!(!resolver.reload_if_changed());
        assert!(Arc::ptr_eq(&before, &resolver.current()));

        // A certificate with another pair's key.
        let other = temp_dir("bad-other");
        generate_certificates(&other).unwrap();
        fs::copy(other.join(CERT_FILE), &paths.cert).unwrap();
        let error = resolver.reload().unwrap_err();
        assert!(matches!(error, TlsError::Mismatch { .. }), "{error}");
        assert!(Arc::ptr_eq(&before, &resolver.current()));

        fs::write(&paths.key, "garbage").unwrap();
        let error = resolver.reload().unwrap_err();
        assert!(matches!(error, TlsError::BadKey { .. }), "{error}");
        assert!(error.to_string().contains(KEY_FILE), "{error}");

        // The matching key arrives: the new pair is put in force.
        fs::copy(other.join(KEY_FILE), &paths.key).unwrap();
        assert!(resolver.reload_if_changed());
        assert!(!Arc::ptr_eq(&before, &resolver.current()));
        assert!(!resolver.reload_if_changed());
        fs::remove_dir_all(&dir).unwrap();
        fs::remove_dir_all(&other).unwrap();
    }
}
