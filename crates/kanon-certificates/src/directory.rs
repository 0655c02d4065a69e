//! Standalone mode's certificate directory (`kanon serve --policies`, or a cluster without a
//! certificate Secret): the pair found there is used as it is (cert-manager's, or one written
//! by hand); when there is none, kanon creates a CA and a serving certificate for `localhost`
//! and `127.0.0.1`, valid ten years, with the same producer that keeps cluster mode's Secret.

use std::io;
use std::path::{Path, PathBuf};

use crate::files::{self, CertFile, WriteError};
use crate::{CA_CERT_KEY, CA_KEY_KEY, IssueError, Material, Settings, TLS_CERT_KEY, TLS_KEY_KEY};

/// The names a certificate created here is valid for.
pub const SERVING_NAMES: [&str; 2] = ["localhost", "127.0.0.1"];

/// How long a CA and a serving certificate created here are valid.
const VALIDITY_SECS: i64 = 3650 * 86_400;

/// Where the serving pair (and the CA, when there is one) is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServingFiles {
    /// The serving certificate chain (`tls.crt`).
    pub cert: PathBuf,
    /// The serving key (`tls.key`).
    pub key: PathBuf,
    /// The CA certificate (`ca.crt`), when it exists in the directory.
    pub ca: Option<PathBuf>,
    /// Whether this call created the files.
    pub created: bool,
}

/// What is wrong with the certificate directory.
#[derive(Debug, thiserror::Error)]
pub enum DirectoryError {
    /// A file's existence could not be checked.
    #[error("cannot read {}: {source}", path.display())]
    Read {
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
    /// The certificates could not be made.
    #[error(transparent)]
    Issue(#[from] IssueError),
    /// A file could not be written.
    #[error(transparent)]
    Write(#[from] WriteError),
}

/// The settings of a pair created here: [`SERVING_NAMES`], ten years.
pub fn standalone_settings() -> Settings {
    Settings {
        dns_names: vec![SERVING_NAMES[0].to_string()],
        ip_addresses: vec![std::net::IpAddr::from([127, 0, 0, 1])],
        ca_validity: VALIDITY_SECS,
        cert_validity: VALIDITY_SECS,
        renew_fraction: 0.3,
        overlap: 0,
        margin: 0,
    }
}

/// Uses `tls.crt` and `tls.key` in `dir` when both exist; when neither does, creates the
/// directory if needed, a CA (`ca.crt`, `ca.key`) and a serving certificate signed by it (see
/// [`create`]). One without the other is an error: kanon does not overwrite half a pair.
pub fn ensure(dir: &Path) -> Result<ServingFiles, DirectoryError> {
    let cert = dir.join(TLS_CERT_KEY);
    let key = dir.join(TLS_KEY_KEY);
    let ca = dir.join(CA_CERT_KEY);
    let exists = |path: &Path| {
        path.try_exists().map_err(|source| DirectoryError::Read {
            path: path.to_path_buf(),
            source,
        })
    };
    let created = match (exists(&cert)?, exists(&key)?) {
        (true, true) => false,
        (true, false) => {
            return Err(DirectoryError::Incomplete {
                present: cert,
                missing: key,
            });
        }
        (false, true) => {
            return Err(DirectoryError::Incomplete {
                present: key,
                missing: cert,
            });
        }
        (false, false) => {
            create(dir, &standalone_settings(), crate::unix_now())?;
            tracing::info!(dir = %dir.display(), "created a CA and a serving certificate");
            true
        }
    };
    let ca = exists(&ca)?.then_some(ca);
    Ok(ServingFiles {
        cert,
        key,
        ca,
        created,
    })
}

/// Creates a new CA and a serving certificate signed by it, valid from `now`, and writes them
/// into `dir` (`ca.key`, `ca.crt`, `tls.key`, `tls.crt`, in this order, each atomically, keys
/// readable by the owner only), replacing whatever is there.
pub fn create(dir: &Path, settings: &Settings, now: i64) -> Result<Material, DirectoryError> {
    let material = crate::plan(None, settings, now)?.material;
    let mut files = vec![CertFile {
        name: CA_KEY_KEY,
        content: material.signing.key_pem().as_bytes().to_vec(),
        private: true,
    }];
    files.extend(material.files());
    files::write_changed(dir, &files)?;
    Ok(material)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Cert, LeafCheck, Stored, check_leaf};
    use std::fs;

    #[test]
    fn creates_then_reuses_a_pair() {
        let temp = tempfile::tempdir().unwrap();
        let dir = temp.path().join("certs");
        let files = ensure(&dir).unwrap();
        assert!(files.created);
        assert_eq!(files.ca.as_deref(), Some(dir.join(CA_CERT_KEY).as_path()));
        for file in [TLS_CERT_KEY, TLS_KEY_KEY, CA_CERT_KEY, CA_KEY_KEY] {
            assert!(dir.join(file).is_file(), "{file}");
        }
        #[cfg(unix)]
        for file in [TLS_KEY_KEY, CA_KEY_KEY] {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = fs::metadata(dir.join(file)).unwrap().permissions().mode();
            assert_eq!(mode & 0o077, 0, "{file} is readable by others: {mode:o}");
        }
        let cert = fs::read(dir.join(TLS_CERT_KEY)).unwrap();
        let again = ensure(&dir).unwrap();
        assert!(!again.created);
        assert_eq!(fs::read(dir.join(TLS_CERT_KEY)).unwrap(), cert);
    }

    #[test]
    fn what_is_created_reads_back_and_verifies_for_its_names() {
        let temp = tempfile::tempdir().unwrap();
        let now = crate::unix_now();
        create(temp.path(), &standalone_settings(), now).unwrap();
        let read = |name: &str| fs::read(temp.path().join(name)).unwrap();
        let data = [TLS_CERT_KEY, TLS_KEY_KEY, CA_CERT_KEY, CA_KEY_KEY]
            .into_iter()
            .map(|name| (name.to_string(), read(name)))
            .chain([(crate::CA_SIGNING_CERT_KEY.to_string(), read(CA_CERT_KEY))])
            .collect();
        let stored = Stored::read(&data, None);
        assert!(stored.problems().is_empty(), "{:?}", stored.problems());
        let leaf: &Cert = &stored.leaf.as_ref().unwrap().cert;
        let ca: &Cert = &stored.signing.as_ref().unwrap().cert;
        assert!(leaf.info.not_after >= now + VALIDITY_SECS);
        let names = standalone_settings().server_names();
        assert_eq!(names.len(), SERVING_NAMES.len());
        assert_eq!(check_leaf(leaf, ca, &names, now), LeafCheck::Valid);
    }

    #[test]
    fn half_a_pair_is_an_error() {
        let temp = tempfile::tempdir().unwrap();
        fs::write(temp.path().join(TLS_CERT_KEY), "x").unwrap();
        let error = ensure(temp.path()).unwrap_err();
        assert!(
            matches!(error, DirectoryError::Incomplete { .. }),
            "{error}"
        );
        assert!(error.to_string().contains(TLS_KEY_KEY), "{error}");
        assert!(!temp.path().join(CA_CERT_KEY).exists());
    }
}
