//! Certificates and keys of one control plane, made fresh for every start.
//!
//! All keys are ECDSA P-256 (rcgen's default): quick to generate (a few milliseconds, where RSA
//! would take a noticeable part of the start time), and accepted everywhere they are used:
//! kube-apiserver's serving and client-CA certificates, its client certificate for admission
//! webhooks, the service-account token signer (`ES256`; verified by the tests, which
//! authenticate with a token it signed) and kube-controller-manager's
//! `--service-account-private-key-file` and CSR signer.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SigningKey,
};

/// Names the serving certificate is valid for: the loopback address and name clients use, and
/// the in-cluster names and Service IP (first address of `--service-cluster-ip-range`), so a
/// client that follows the `kubernetes` Service's conventions also verifies.
const SERVING_NAMES: [&str; 7] = [
    "127.0.0.1",
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
    "10.0.0.1",
];

/// The user the admin kubeconfig authenticates as. `system:masters` is the group RBAC lets do
/// everything, without any binding.
pub(crate) const ADMIN_USER: &str = "kanon-admin";
const ADMIN_GROUP: &str = "system:masters";

/// The common name of the client certificate kube-apiserver presents to admission webhooks.
pub const WEBHOOK_CLIENT_NAME: &str = "kube-apiserver-webhook-client";

/// PEM texts of everything one control plane needs.
pub(crate) struct Pki {
    pub(crate) ca_cert: String,
    pub(crate) ca_key: String,
    pub(crate) serving_cert: String,
    pub(crate) serving_key: String,
    pub(crate) admin_cert: String,
    pub(crate) admin_key: String,
    /// The client certificate kube-apiserver presents to admission webhooks.
    pub(crate) webhook_client_cert: String,
    pub(crate) webhook_client_key: String,
    /// PKCS#8 private key that signs service-account tokens.
    pub(crate) service_account_key: String,
    /// Its public half (SPKI), which kube-apiserver verifies tokens with.
    pub(crate) service_account_pub: String,
}

/// Where [`Pki::write`] put the files.
#[derive(Debug, Clone)]
pub(crate) struct PkiFiles {
    pub(crate) ca_cert: PathBuf,
    pub(crate) ca_key: PathBuf,
    pub(crate) serving_cert: PathBuf,
    pub(crate) serving_key: PathBuf,
    pub(crate) webhook_client_cert: PathBuf,
    pub(crate) webhook_client_key: PathBuf,
    pub(crate) service_account_key: PathBuf,
    pub(crate) service_account_pub: PathBuf,
}

fn name(common_name: &str, organization: Option<&str>) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    if let Some(organization) = organization {
        dn.push(DnType::OrganizationName, organization);
    }
    dn
}

impl Pki {
    /// Generates a CA, a serving certificate, an admin client certificate, kube-apiserver's
    /// client certificate for webhooks and a service-account key pair. rcgen's default
    /// validity (1975 to 4096) is kept: these live as long as one test run, and a wide window
    /// can never be "not yet valid" on a machine whose clock is off.
    pub(crate) fn generate() -> Result<Pki> {
        let ca_key = KeyPair::generate().context("generating the CA key")?;
        let mut ca_params = CertificateParams::default();
        ca_params.distinguished_name = name("kanon-control-plane-ca", None);
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca_params
            .self_signed(&ca_key)
            .context("signing the CA certificate")?;
        let issuer = Issuer::from_params(&ca_params, &ca_key);

        let serving_key = KeyPair::generate().context("generating the serving key")?;
        let names: Vec<String> = SERVING_NAMES.iter().map(|s| s.to_string()).collect();
        let mut serving_params =
            CertificateParams::new(names).context("naming the serving certificate")?;
        serving_params.distinguished_name = name("kube-apiserver", None);
        serving_params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        serving_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let serving_cert = serving_params
            .signed_by(&serving_key, &issuer)
            .context("signing the serving certificate")?;

        let (admin_cert, admin_key) = client_certificate(
            name(ADMIN_USER, Some(ADMIN_GROUP)),
            &issuer,
            "the admin client certificate",
        )?;
        let (webhook_client_cert, webhook_client_key) = client_certificate(
            name(WEBHOOK_CLIENT_NAME, None),
            &issuer,
            "the webhook client certificate",
        )?;

        let service_account =
            KeyPair::generate().context("generating the service-account signing key")?;

        Ok(Pki {
            ca_cert: ca_cert.pem(),
            ca_key: ca_key.serialize_pem(),
            serving_cert: serving_cert.pem(),
            serving_key: serving_key.serialize_pem(),
            admin_cert,
            admin_key,
            webhook_client_cert,
            webhook_client_key,
            service_account_key: service_account.serialize_pem(),
            service_account_pub: service_account.public_key_pem(),
        })
    }

    /// Writes the files the control-plane processes read into `dir` (private keys readable by
    /// the owner only). The admin credentials go into the kubeconfig instead.
    pub(crate) fn write(&self, dir: &Path) -> Result<PkiFiles> {
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let files = PkiFiles {
            ca_cert: dir.join("ca.crt"),
            ca_key: dir.join("ca.key"),
            serving_cert: dir.join("apiserver.crt"),
            serving_key: dir.join("apiserver.key"),
            webhook_client_cert: dir.join("webhook-client.crt"),
            webhook_client_key: dir.join("webhook-client.key"),
            service_account_key: dir.join("service-account.key"),
            service_account_pub: dir.join("service-account.pub"),
        };
        for (path, text, private) in [
            (&files.ca_cert, &self.ca_cert, false),
            (&files.ca_key, &self.ca_key, true),
            (&files.serving_cert, &self.serving_cert, false),
            (&files.serving_key, &self.serving_key, true),
            (&files.webhook_client_cert, &self.webhook_client_cert, false),
            (&files.webhook_client_key, &self.webhook_client_key, true),
            (&files.service_account_key, &self.service_account_key, true),
            (&files.service_account_pub, &self.service_account_pub, false),
        ] {
            write_file(path, text, private)?;
        }
        Ok(files)
    }
}

/// A client certificate (`clientAuth` only) for `subject`, signed by `issuer`, and its key: PEM
/// texts.
fn client_certificate(
    subject: DistinguishedName,
    issuer: &Issuer<'_, impl SigningKey>,
    what: &str,
) -> Result<(String, String)> {
    let key = KeyPair::generate().with_context(|| format!("generating the key of {what}"))?;
    let mut params = CertificateParams::default();
    params.distinguished_name = subject;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let cert = params
        .signed_by(&key, issuer)
        .with_context(|| format!("signing {what}"))?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// Writes `text` to `path`; when `private`, readable by the owner only (created that way, so
/// the key is never readable by others, not even for a moment).
pub(crate) fn write_file(path: &Path, text: &str, private: bool) -> Result<()> {
    let mut options = OpenOptions::new();
    options.write(true).create(true).truncate(true);
    if private {
        options.mode(0o600);
    }
    let mut file = options
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    if private {
        // An existing file keeps its mode on open: restrict it too.
        file.set_permissions(fs::Permissions::from_mode(0o600))
            .with_context(|| format!("restricting {}", path.display()))?;
    }
    file.write_all(text.as_bytes())
        .with_context(|| format!("writing {}", path.display()))
}
