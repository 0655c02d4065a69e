//! The certificate files `kanon serve` serves from (`--cert-dir`), followed as they change:
//! kanon's own renewals (cluster mode's Secret), kubelet updating a mounted Secret, or
//! cert-manager renewing one. Both go through the one file poller ([`crate::poll`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use kanon_webhook::tls::CertResolver;
use tokio::sync::watch;

use crate::poll::{fingerprint, poll_files};

/// How often the certificate files are looked at.
const POLL_INTERVAL: Duration = Duration::from_secs(10);

/// Loads the serving pair (`tls.crt`, `tls.key`) in `dir` and reloads it whenever the files
/// change: new TLS handshakes get the new pair, connections already open keep theirs, and a
/// pair that does not load (logged once per change) leaves the one in force serving. Needs a
/// tokio runtime.
pub fn serve_from(dir: &Path) -> Result<Arc<CertResolver>, kanon_webhook::tls::TlsError> {
    follow_pair(dir, POLL_INTERVAL)
}

fn follow_pair(
    dir: &Path,
    interval: Duration,
) -> Result<Arc<CertResolver>, kanon_webhook::tls::TlsError> {
    let files: Vec<PathBuf> = [
        kanon_certificates::TLS_CERT_KEY,
        kanon_certificates::TLS_KEY_KEY,
    ]
    .iter()
    .map(|name| dir.join(name))
    .collect();
    // Taken before the pair is read, so a change while it is read is seen.
    let loaded = fingerprint(&files, false);
    let resolver = CertResolver::load(&files[0], &files[1])?;
    let reloading = resolver.clone();
    tokio::spawn(poll_files(
        files,
        false,
        interval,
        loaded,
        move |_| reloading.reload(),
        |result| match result {
            Ok(Ok(())) => tracing::info!("reloaded the serving certificate"),
            Ok(Err(error)) => tracing::warn!(
                %error,
                "the new serving certificate does not load; the previous one keeps serving"
            ),
            Err(error) => tracing::warn!(%error, "reloading the serving certificate failed"),
        },
    ));
    Ok(resolver)
}

/// The CA bundle of certificates kanon does not keep itself: `ca.crt` in `dir`, re-read when it
/// changes (cert-manager renews it in place). Empty while the file cannot be read. Needs a
/// tokio runtime.
pub fn follow_ca_bundle(dir: &Path) -> watch::Receiver<Vec<u8>> {
    follow_bundle(dir, POLL_INTERVAL)
}

fn follow_bundle(dir: &Path, interval: Duration) -> watch::Receiver<Vec<u8>> {
    let path = dir.join(kanon_certificates::CA_CERT_KEY);
    let loaded = fingerprint(std::slice::from_ref(&path), false);
    let (sender, receiver) = watch::channel(std::fs::read(&path).unwrap_or_default());
    tokio::spawn(poll_files(
        vec![path],
        false,
        interval,
        loaded,
        |paths| std::fs::read(&paths[0]),
        move |read| {
            // A file that went away keeps the bundle last read.
            if let Ok(Ok(bundle)) = read {
                sender.send_if_modified(|current| {
                    let changed = *current != bundle;
                    *current = bundle;
                    changed
                });
            }
        },
    ));
    receiver
}

#[cfg(test)]
mod tests {
    use super::*;
    use kanon_certificates::directory;

    const FAST: Duration = Duration::from_millis(20);

    /// Waits (at most 5 s) for `done`.
    async fn eventually(mut done: impl FnMut() -> bool) -> bool {
        for _ in 0..250 {
            if done() {
                return true;
            }
            tokio::time::sleep(FAST).await;
        }
        done()
    }

    #[tokio::test]
    async fn a_new_pair_is_put_in_force_and_a_broken_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        directory::ensure(dir.path()).unwrap();
        let resolver = follow_pair(dir.path(), FAST).unwrap();
        let first = resolver.current();

        // Another CA and pair, written as kanon writes them.
        let settings = directory::standalone_settings();
        directory::create(dir.path(), &settings, kanon_certificates::unix_now()).unwrap();
        assert!(eventually(|| !Arc::ptr_eq(&first, &resolver.current())).await);

        let second = resolver.current();
        std::fs::write(dir.path().join(kanon_certificates::TLS_CERT_KEY), "broken").unwrap();
        tokio::time::sleep(FAST * 10).await;
        assert!(Arc::ptr_eq(&second, &resolver.current()));
    }

    #[tokio::test]
    async fn the_ca_bundle_follows_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(kanon_certificates::CA_CERT_KEY);
        std::fs::write(&path, "first").unwrap();
        let bundle = follow_bundle(dir.path(), FAST);
        assert_eq!(*bundle.borrow(), b"first");
        std::fs::write(&path, "second, longer").unwrap();
        assert!(eventually(|| *bundle.borrow() == b"second, longer").await);
        std::fs::remove_file(&path).unwrap();
        tokio::time::sleep(FAST * 10).await;
        assert_eq!(*bundle.borrow(), b"second, longer");
    }
}
