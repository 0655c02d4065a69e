//! The webhook's TLS: the serving certificate loaded from its files (which kanon-certificates
//! or cert-manager write), a certificate resolver that swaps in a new pair when told to reload
//! (no restart: whoever watches the files, the `kanon` binary, calls [`CertResolver::reload`]
//! when kubelet rotates a mounted Secret in place), and the rustls server configuration.
//!
//! Every configuration is built with an explicit ring [`CryptoProvider`]; nothing here depends
//! on a process-wide default provider.

use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// What is wrong with the certificate files.
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

/// The serving certificate, re-read from its files on [`CertResolver::reload`]: new TLS
/// handshakes get the new pair, connections already open keep theirs. A pair that does not
/// load leaves the one in force serving.
pub struct CertResolver {
    cert_path: PathBuf,
    key_path: PathBuf,
    provider: Arc<CryptoProvider>,
    current: RwLock<Arc<CertifiedKey>>,
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
    /// Loads the certificate chain at `cert` and its key at `key` with the ring provider.
    pub fn load(cert: &Path, key: &Path) -> Result<Arc<Self>, TlsError> {
        Self::load_with_provider(
            cert,
            key,
            Arc::new(rustls::crypto::ring::default_provider()),
        )
    }

    /// Loads the pair at `cert` and `key` with `provider`.
    pub fn load_with_provider(
        cert: &Path,
        key: &Path,
        provider: Arc<CryptoProvider>,
    ) -> Result<Arc<Self>, TlsError> {
        let certified = load_certified_key(cert, key, &provider)?;
        Ok(Arc::new(CertResolver {
            cert_path: cert.to_path_buf(),
            key_path: key.to_path_buf(),
            provider,
            current: RwLock::new(Arc::new(certified)),
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

    /// Re-reads the files and puts the pair in force when it loads (new TLS handshakes get
    /// it); otherwise the pair in force stays and the error is returned.
    pub fn reload(&self) -> Result<(), TlsError> {
        let key = load_certified_key(&self.cert_path, &self.key_path, &self.provider)?;
        let key = Arc::new(key);
        match self.current.write() {
            Ok(mut current) => *current = key,
            Err(poisoned) => *poisoned.into_inner() = key,
        }
        Ok(())
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
    use kanon_certificates::directory;
    use kanon_certificates::{TLS_CERT_KEY, TLS_KEY_KEY};

    /// A directory with a pair kanon created.
    fn pair() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let files = directory::ensure(dir.path()).unwrap();
        (dir, files.cert, files.key)
    }

    #[test]
    fn loads_a_pair_and_serves_it() {
        let (_dir, cert, key) = pair();
        let resolver = CertResolver::load(&cert, &key).unwrap();
        server_config(resolver, None).unwrap();
    }

    #[test]
    fn a_missing_file_is_named() {
        let (dir, cert, _) = pair();
        let missing = dir.path().join("absent.key");
        let error = CertResolver::load(&cert, &missing).unwrap_err();
        assert!(matches!(error, TlsError::Read { .. }), "{error}");
        assert!(error.to_string().contains("absent.key"), "{error}");
    }

    #[test]
    fn a_bad_pair_keeps_the_old_one_serving() {
        let (_dir, cert, key) = pair();
        let resolver = CertResolver::load(&cert, &key).unwrap();
        let before = resolver.current();

        fs::write(&cert, "not a certificate").unwrap();
        let error = resolver.reload().unwrap_err();
        assert!(matches!(error, TlsError::BadCertificate { .. }), "{error}");
        assert!(error.to_string().contains(TLS_CERT_KEY), "{error}");
        assert!(Arc::ptr_eq(&before, &resolver.current()));

        // A certificate with another pair's key.
        let (_other_dir, other_cert, other_key) = pair();
        fs::copy(&other_cert, &cert).unwrap();
        let error = resolver.reload().unwrap_err();
        assert!(matches!(error, TlsError::Mismatch { .. }), "{error}");
        assert!(Arc::ptr_eq(&before, &resolver.current()));

        fs::write(&key, "garbage").unwrap();
        let error = resolver.reload().unwrap_err();
        assert!(matches!(error, TlsError::BadKey { .. }), "{error}");
        assert!(error.to_string().contains(TLS_KEY_KEY), "{error}");

        // The matching key arrives: the new pair is put in force.
        fs::copy(&other_key, &key).unwrap();
        resolver.reload().unwrap();
        assert!(!Arc::ptr_eq(&before, &resolver.current()));
    }
}
