//! The certificates themselves: what a store holds ([`Stored::read`]), a new CA
//! ([`new_ca`]), a serving certificate issued and checked ([`issue_leaf`], [`check_leaf`]),
//! and what to store ([`Material::data`]). Everything here is a function of its inputs and the
//! clock value it is given, except key generation.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use base64::Engine as _;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, PublicKeyData as _, SanType,
};
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::ServerCertVerifier as _;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::ParsedExtension;
use x509_parser::oid_registry::OID_X509_EXT_BASIC_CONSTRAINTS;

use crate::files::CertFile;
use crate::{
    BACKDATE_SECS, CA_CERT_KEY, CA_KEY_KEY, CA_SIGNING_CERT_KEY, ROTATED_AT_KEY, TLS_CERT_KEY,
    TLS_KEY_KEY,
};

/// The ring provider every verification uses (nothing relies on a process-wide default).
fn provider() -> Arc<CryptoProvider> {
    static PROVIDER: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    PROVIDER
        .get_or_init(|| Arc::new(rustls::crypto::ring::default_provider()))
        .clone()
}

/// What is wrong with one key of the Secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The Secret's data key (or annotation) at fault.
    pub key: &'static str,
    /// What is wrong, without any key material.
    pub message: String,
}

impl Problem {
    fn new(key: &'static str, message: impl Into<String>) -> Self {
        Problem {
            key,
            message: message.into(),
        }
    }
}

/// What kanon reads from a certificate (with x509-parser; signatures and names are checked by
/// rustls' verifier, not here).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertInfo {
    /// `notBefore`, in seconds since the UNIX epoch.
    pub not_before: i64,
    /// `notAfter`, in seconds since the UNIX epoch.
    pub not_after: i64,
    /// The subject `Name`, encoded (tag and length included).
    pub subject: Vec<u8>,
    /// The issuer `Name`, encoded.
    pub issuer: Vec<u8>,
    /// The `SubjectPublicKeyInfo`, encoded.
    pub spki: Vec<u8>,
    /// Whether basicConstraints says `cA`.
    pub is_ca: bool,
}

/// Parses one DER certificate (nothing may follow it); the error says what is wrong.
fn parse_x509(der: &[u8]) -> Result<X509Certificate<'_>, String> {
    match x509_parser::parse_x509_certificate(der) {
        Ok(([], x509)) => Ok(x509),
        Ok(_) => Err("data after the certificate".to_string()),
        Err(x509_parser::nom::Err::Error(e) | x509_parser::nom::Err::Failure(e)) => {
            Err(e.to_string())
        }
        Err(x509_parser::nom::Err::Incomplete(_)) => Err("truncated".to_string()),
    }
}

impl CertInfo {
    /// Reads a certificate's fields.
    fn parse(der: &[u8]) -> Result<CertInfo, String> {
        let x509 = parse_x509(der)?;
        let basic_constraints = x509
            .get_extension_unique(&OID_X509_EXT_BASIC_CONSTRAINTS)
            .map_err(|e| format!("basicConstraints: {e}"))?;
        let is_ca = match basic_constraints.map(|extension| extension.parsed_extension()) {
            None => false,
            Some(ParsedExtension::BasicConstraints(constraints)) => constraints.ca,
            Some(_) => return Err("bad basicConstraints".to_string()),
        };
        let validity = x509.validity();
        Ok(CertInfo {
            not_before: validity.not_before.timestamp(),
            not_after: validity.not_after.timestamp(),
            subject: x509.subject().as_raw().to_vec(),
            issuer: x509.issuer().as_raw().to_vec(),
            spki: x509.public_key().raw.to_vec(),
            is_ca,
        })
    }
}

/// A certificate, with the fields kanon reads from it.
#[derive(Clone, PartialEq, Eq)]
pub struct Cert {
    pub der: Vec<u8>,
    pub info: CertInfo,
}

impl std::fmt::Debug for Cert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cert")
            .field("not_before", &rfc3339(self.info.not_before))
            .field("not_after", &rfc3339(self.info.not_after))
            .field("is_ca", &self.info.is_ca)
            .finish_non_exhaustive()
    }
}

impl Cert {
    fn from_der(der: Vec<u8>) -> Result<Cert, String> {
        let info = CertInfo::parse(&der)?;
        Ok(Cert { der, info })
    }

    /// The certificate as one PEM block.
    pub fn pem(&self) -> String {
        pem_block("CERTIFICATE", &self.der)
    }
}

/// The CA that signs serving certificates: its certificate and its key (PEM, PKCS#8).
#[derive(Clone)]
pub struct Signing {
    pub cert: Cert,
    key_pem: String,
}

impl Signing {
    /// The CA's key, PEM.
    pub fn key_pem(&self) -> &str {
        &self.key_pem
    }

    /// rcgen's issuer for this CA: its subject (attribute by attribute) and subject key
    /// identifier as rcgen reads them with x509-parser, and its key. The subject must have passed
    /// [`check_signing`] (which kanon's own CAs do).
    fn issuer(&self) -> Result<Issuer<'static, KeyPair>, rcgen::Error> {
        let key = KeyPair::from_pem(&self.key_pem)?;
        Issuer::from_ca_cert_der(&CertificateDer::from(self.cert.der.as_slice()), key)
    }
}

/// The serving certificate and its key (PEM, PKCS#8).
#[derive(Clone)]
pub struct Leaf {
    pub cert: Cert,
    key_pem: String,
}

impl Leaf {
    /// The key, PEM.
    pub fn key_pem(&self) -> &str {
        &self.key_pem
    }
}

/// Everything the Secret holds, consistent.
#[derive(Clone)]
pub struct Material {
    pub leaf: Leaf,
    pub signing: Signing,
    /// The trusted CAs, the signing one first, then older ones.
    pub bundle: Vec<Cert>,
    /// When the signing CA entered the bundle (seconds since the UNIX epoch).
    pub rotated_at: i64,
}

impl Material {
    /// The trusted bundle, PEM, newest first.
    pub fn bundle_pem(&self) -> String {
        self.bundle.iter().map(Cert::pem).collect()
    }

    /// The files the webhook server reads (no CA key among them): the bundle first (a new CA
    /// is trusted before anything it signed is served), then the key, then the certificate.
    pub fn files(&self) -> Vec<CertFile> {
        vec![
            CertFile {
                name: CA_CERT_KEY,
                content: self.bundle_pem().into_bytes(),
                private: false,
            },
            CertFile {
                name: TLS_KEY_KEY,
                content: self.leaf.key_pem.as_bytes().to_vec(),
                private: true,
            },
            CertFile {
                name: TLS_CERT_KEY,
                content: self.leaf.cert.pem().into_bytes(),
                private: false,
            },
        ]
    }

    /// Everything to store, by key ([`TLS_CERT_KEY`] and the others): a Secret's data keys.
    pub fn data(&self) -> BTreeMap<String, Vec<u8>> {
        let entry = |key: &str, value: String| (key.to_string(), value.into_bytes());
        BTreeMap::from([
            entry(TLS_CERT_KEY, self.leaf.cert.pem()),
            entry(TLS_KEY_KEY, self.leaf.key_pem.clone()),
            entry(CA_CERT_KEY, self.bundle_pem()),
            entry(CA_KEY_KEY, self.signing.key_pem.clone()),
            entry(CA_SIGNING_CERT_KEY, self.signing.cert.pem()),
        ])
    }
}

/// A Secret's content, each part read and checked on its own, so a bad part can be replaced
/// while the good ones are kept.
pub struct Stored {
    pub leaf: Result<Leaf, Problem>,
    pub signing: Result<Signing, Problem>,
    pub bundle: Result<Vec<Cert>, Problem>,
    pub rotated_at: Result<Option<i64>, Problem>,
}

impl Stored {
    /// Reads what was stored (as [`Material::data`] writes it) and the rotation time's text
    /// (RFC 3339).
    pub fn read(data: &BTreeMap<String, Vec<u8>>, rotated_at: Option<&str>) -> Stored {
        let text = |key: &'static str| -> Result<&str, Problem> {
            let bytes = data
                .get(key)
                .filter(|value| !value.is_empty())
                .ok_or_else(|| Problem::new(key, "missing"))?;
            std::str::from_utf8(bytes).map_err(|_| Problem::new(key, "not PEM text"))
        };
        let leaf = (|| {
            let cert = first_cert(TLS_CERT_KEY, text(TLS_CERT_KEY)?)?;
            let key_pem = read_key(TLS_KEY_KEY, text(TLS_KEY_KEY)?, &cert, TLS_CERT_KEY)?;
            Ok(Leaf { cert, key_pem })
        })();
        let signing = (|| {
            let cert = first_cert(CA_SIGNING_CERT_KEY, text(CA_SIGNING_CERT_KEY)?)?;
            if !cert.info.is_ca {
                return Err(Problem::new(CA_SIGNING_CERT_KEY, "not a CA certificate"));
            }
            let key_pem = read_key(CA_KEY_KEY, text(CA_KEY_KEY)?, &cert, CA_SIGNING_CERT_KEY)?;
            let signing = Signing { cert, key_pem };
            check_signing(&signing)?;
            Ok(signing)
        })();
        let bundle = (|| {
            let certs = all_certs(CA_CERT_KEY, text(CA_CERT_KEY)?)?;
            if certs.iter().any(|cert| !cert.info.is_ca) {
                return Err(Problem::new(
                    CA_CERT_KEY,
                    "holds a certificate that is not a CA",
                ));
            }
            Ok(certs)
        })();
        let rotated_at = match rotated_at {
            None => Ok(None),
            Some(value) => parse_rfc3339(value).map(Some).ok_or_else(|| {
                Problem::new(ROTATED_AT_KEY, format!("{value:?} is not an RFC 3339 time"))
            }),
        };
        Stored {
            leaf,
            signing,
            bundle,
            rotated_at,
        }
    }

    /// Every problem, in the Secret's key order.
    pub fn problems(&self) -> Vec<Problem> {
        let mut problems: Vec<Problem> = [
            self.leaf.as_ref().err(),
            self.signing.as_ref().err(),
            self.bundle.as_ref().err(),
            self.rotated_at.as_ref().err(),
        ]
        .into_iter()
        .flatten()
        .cloned()
        .collect();
        problems.sort_by_key(|problem| problem.key);
        problems
    }
}

fn all_certs(key: &'static str, pem: &str) -> Result<Vec<Cert>, Problem> {
    let ders = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Problem::new(key, format!("not PEM certificates: {e}")))?;
    if ders.is_empty() {
        return Err(Problem::new(key, "holds no PEM certificate"));
    }
    ders.into_iter()
        .map(|der| {
            Cert::from_der(der.to_vec())
                .map_err(|e| Problem::new(key, format!("not an X.509 certificate: {e}")))
        })
        .collect()
}

fn first_cert(key: &'static str, pem: &str) -> Result<Cert, Problem> {
    Ok(all_certs(key, pem)?.swap_remove(0))
}

/// Reads a PKCS#8 key and checks it is `cert`'s; returns it re-encoded as kanon writes it.
fn read_key(
    key: &'static str,
    pem: &str,
    cert: &Cert,
    cert_key: &'static str,
) -> Result<String, Problem> {
    // rcgen's errors name what failed, never the key's bytes.
    let pair = KeyPair::from_pem(pem)
        .map_err(|e| Problem::new(key, format!("not a PEM private key kanon can use: {e}")))?;
    if pair.subject_public_key_info() != cert.info.spki {
        return Err(Problem::new(key, format!("is not the key of {cert_key}")));
    }
    Ok(pair.serialize_pem())
}

/// Checks kanon can sign as this CA: rcgen reads its subject back, and a throwaway certificate
/// signed with it names the CA's subject as its issuer byte for byte (an issuer name that
/// differs from the CA's subject breaks every chain; rcgen keeps one attribute of each type,
/// refuses multi-valued components and re-encodes the strings).
fn check_signing(signing: &Signing) -> Result<(), Problem> {
    let unusable = |why: String| {
        Problem::new(
            CA_SIGNING_CERT_KEY,
            format!("kanon cannot sign as this CA: {why}"),
        )
    };
    check_subject_writable(&signing.cert).map_err(|why| unusable(why.to_string()))?;
    let issuer = signing.issuer().map_err(|e| unusable(e.to_string()))?;
    let trial = CertificateParams::default()
        .signed_by(issuer.key(), &issuer)
        .map_err(|e| unusable(e.to_string()))?;
    let reproduced = CertInfo::parse(trial.der()).map_err(unusable)?;
    if reproduced.issuer != signing.cert.info.subject {
        return Err(unusable(
            "its subject name cannot be reproduced".to_string(),
        ));
    }
    Ok(())
}

/// Checks that rcgen can write the CA's subject back without panicking, before it is given it.
/// rcgen takes each attribute's type as the arcs x509-parser reads, which decode an OID's first
/// byte on its own (`0xd5` as 5.13, and 2.999 wrongly), and its DER writer (yasna) panics on an
/// OID it cannot encode: a first arc above 2, or a second arc of 40 or more under arc 0 or 1.
/// rcgen also panics on an empty name component.
fn check_subject_writable(cert: &Cert) -> Result<(), &'static str> {
    let x509 = parse_x509(&cert.der).map_err(|_| "not an X.509 certificate")?;
    for component in x509.subject().iter() {
        let mut attributes = component.iter();
        let (Some(attribute), None) = (attributes.next(), attributes.next()) else {
            return Err("its subject has an empty or multi-valued name component");
        };
        let arcs: Option<Vec<u64>> = attribute.attr_type().iter().map(Iterator::collect);
        let writable = matches!(
            arcs.as_deref(),
            Some(&[first, second, ..])
                if (first < 2 && second < 40) || (first == 2 && second < u64::MAX - 80)
        );
        if !writable {
            return Err("its subject has an attribute type kanon cannot write back");
        }
    }
    Ok(())
}

/// The parameters every kanon CA has, but its name and validity.
fn ca_params() -> CertificateParams {
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
    ];
    params
}

/// Sets `notBefore` and `notAfter` (seconds since the UNIX epoch).
fn set_validity(params: &mut CertificateParams, not_before: i64, not_after: i64) {
    let epoch = rcgen::date_time_ymd(1970, 1, 1);
    let secs = |t: i64| Duration::from_secs(u64::try_from(t).unwrap_or(0));
    params.not_before = epoch + secs(not_before);
    params.not_after = epoch + secs(not_after);
}

/// The configuration, in the units the decisions use.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The DNS names the serving certificate is valid for (the first is its common name).
    pub dns_names: Vec<String>,
    /// The IP addresses it is valid for.
    pub ip_addresses: Vec<IpAddr>,
    /// How long a new CA is valid, in seconds.
    pub ca_validity: i64,
    /// How long a new serving certificate is valid, in seconds (never past its CA's end).
    pub cert_validity: i64,
    /// What fraction of its validity may remain before a certificate is renewed.
    pub renew_fraction: f64,
    /// How long after a CA's rotation the serving certificate moves to the new CA, in seconds.
    pub overlap: i64,
    /// How close to its end a certificate waiting for the overlap is re-issued at once (it
    /// would expire before the check after the overlap).
    pub margin: i64,
}

impl Settings {
    /// Every name the serving certificate must be valid for.
    pub(crate) fn server_names(&self) -> Vec<ServerName<'static>> {
        self.dns_names
            .iter()
            .filter_map(|name| ServerName::try_from(name.clone()).ok())
            .chain(self.ip_addresses.iter().map(|ip| ServerName::from(*ip)))
            .collect()
    }
}

/// Generates a new CA valid from `now` for `ca_validity`.
pub fn new_ca(settings: &Settings, now: i64) -> Result<Signing, rcgen::Error> {
    let key = KeyPair::generate()?;
    let mut params = ca_params();
    // A name of its own for every CA, so that two CAs in one bundle never share a subject.
    let id: String = params
        .key_identifier(&key)
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect();
    params
        .distinguished_name
        .push(DnType::CommonName, format!("kanon webhook CA {id}"));
    set_validity(&mut params, now - BACKDATE_SECS, now + settings.ca_validity);
    let cert = params.self_signed(&key)?;
    let cert =
        Cert::from_der(cert.der().to_vec()).map_err(|_| rcgen::Error::CouldNotParseCertificate)?;
    Ok(Signing {
        cert,
        key_pem: key.serialize_pem(),
    })
}

/// Why a serving certificate could not be issued.
#[derive(Debug, thiserror::Error)]
pub enum IssueError {
    /// rcgen failed making the named part.
    #[error("cannot generate the {0}: {1}")]
    Generate(&'static str, rcgen::Error),
    /// The new certificate does not verify against its CA.
    #[error("the new serving certificate does not verify: {0}")]
    Unverifiable(String),
}

/// Issues a serving certificate signed by `signing`, valid from `now` for `cert_validity` but
/// never past the CA's end, and checks it verifies for every name.
pub fn issue_leaf(signing: &Signing, settings: &Settings, now: i64) -> Result<Leaf, IssueError> {
    let generate = |what| move |e| IssueError::Generate(what, e);
    let issuer = signing.issuer().map_err(generate("signing CA"))?;
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    let common_name = settings
        .dns_names
        .first()
        .filter(|name| name.len() <= 64)
        .cloned()
        .unwrap_or_else(|| "kanon webhook".to_string());
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    for name in &settings.dns_names {
        let name = name
            .clone()
            .try_into()
            .map_err(generate("serving certificate's DNS name"))?;
        params.subject_alt_names.push(SanType::DnsName(name));
    }
    for ip in &settings.ip_addresses {
        params.subject_alt_names.push(SanType::IpAddress(*ip));
    }
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    let not_after = (now + settings.cert_validity).min(signing.cert.info.not_after);
    set_validity(&mut params, now - BACKDATE_SECS, not_after);
    let key = KeyPair::generate().map_err(generate("serving key"))?;
    let cert = params
        .signed_by(&key, &issuer)
        .map_err(generate("serving certificate"))?;
    let cert = Cert::from_der(cert.der().to_vec())
        .map_err(|e| IssueError::Unverifiable(format!("kanon cannot read it back: {e}")))?;
    match check_leaf(&cert, &signing.cert, &settings.server_names(), now) {
        LeafCheck::Valid => Ok(Leaf {
            cert,
            key_pem: key.serialize_pem(),
        }),
        LeafCheck::MissingName(name) => Err(IssueError::Unverifiable(format!(
            "it is not valid for {name}"
        ))),
        LeafCheck::Invalid(why) => Err(IssueError::Unverifiable(why)),
    }
}

/// How a serving certificate relates to one CA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeafCheck {
    /// It chains to the CA, is valid now, and for every name.
    Valid,
    /// It chains to the CA and is valid now, but not for this name.
    MissingName(String),
    /// It does not chain to the CA, or is not valid now (rustls' reason).
    Invalid(String),
}

/// Verifies `leaf` as a client trusting only `ca` would, at `now`, for every name.
pub fn check_leaf(leaf: &Cert, ca: &Cert, names: &[ServerName<'static>], now: i64) -> LeafCheck {
    let mut roots = rustls::RootCertStore::empty();
    if let Err(e) = roots.add(CertificateDer::from(ca.der.clone())) {
        return LeafCheck::Invalid(format!("the CA is not a usable trust anchor: {e}"));
    }
    let verifier =
        match WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider()).build() {
            Ok(verifier) => verifier,
            Err(e) => return LeafCheck::Invalid(e.to_string()),
        };
    let end_entity = CertificateDer::from(leaf.der.as_slice());
    let at = UnixTime::since_unix_epoch(Duration::from_secs(u64::try_from(now).unwrap_or(0)));
    for name in names {
        match verifier.verify_server_cert(&end_entity, &[], name, &[], at) {
            Ok(_) => {}
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForName
                | rustls::CertificateError::NotValidForNameContext { .. },
            )) => return LeafCheck::MissingName(server_name_text(name)),
            Err(e) => return LeafCheck::Invalid(e.to_string()),
        }
    }
    LeafCheck::Valid
}

fn server_name_text(name: &ServerName<'_>) -> String {
    match name {
        ServerName::DnsName(dns) => dns.as_ref().to_string(),
        ServerName::IpAddress(ip) => std::net::IpAddr::from(*ip).to_string(),
        _ => format!("{name:?}"),
    }
}

/// One PEM block.
fn pem_block(label: &str, der: &[u8]) -> String {
    let encoded = base64::engine::general_purpose::STANDARD.encode(der);
    let mut pem = format!("-----BEGIN {label}-----\n");
    for line in encoded.as_bytes().chunks(64) {
        pem.push_str(std::str::from_utf8(line).unwrap_or_default());
        pem.push('\n');
    }
    pem.push_str(&format!("-----END {label}-----\n"));
    pem
}

/// Seconds since the UNIX epoch as RFC 3339 (UTC, whole seconds).
pub fn rfc3339(secs: i64) -> String {
    match jiff::Timestamp::from_second(secs) {
        Ok(t) => t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        Err(_) => secs.to_string(),
    }
}

/// An RFC 3339 time as seconds since the UNIX epoch.
pub fn parse_rfc3339(text: &str) -> Option<i64> {
    text.parse::<jiff::Timestamp>().ok().map(|t| t.as_second())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{T0, settings};
    use crate::plan::plan;

    /// A certificate of `key` made with `params`, as kanon reads it.
    fn read_back(params: &CertificateParams, key: &KeyPair) -> Cert {
        Cert::from_der(params.self_signed(key).unwrap().der().to_vec()).unwrap()
    }

    #[test]
    fn dates() {
        // rcgen writes UTCTime (two-digit years, 1950 to 2049) before 2050 and GeneralizedTime
        // from 2050 on: both are read, to the second.
        let key = KeyPair::generate().unwrap();
        let at = |(year, month, day): (i32, u8, u8), secs: u64| {
            let time = rcgen::date_time_ymd(year, month, day) + Duration::from_secs(secs);
            let expected = parse_rfc3339(&format!("{year:04}-{month:02}-{day:02}T00:00:00Z"))
                .unwrap()
                + i64::try_from(secs).unwrap();
            (time, expected)
        };
        for (not_before, not_after, generalized) in [
            (at((1950, 1, 1), 0), at((2049, 12, 31), 86_399), false),
            (at((2000, 2, 29), 45_296), at((2050, 1, 1), 0), true),
            (at((2026, 1, 1), 1), at((9999, 12, 30), 3_600), true),
        ] {
            let mut params = CertificateParams::default();
            params.not_before = not_before.0;
            params.not_after = not_after.0;
            let cert = read_back(&params, &key);
            assert_eq!(cert.info.not_before, not_before.1);
            assert_eq!(cert.info.not_after, not_after.1);
            let x509 = parse_x509(&cert.der).unwrap();
            assert!(x509.validity().not_before.is_utctime());
            assert_eq!(x509.validity().not_after.is_generalizedtime(), generalized);
        }
    }

    #[test]
    fn reads_what_rcgen_writes() {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec!["a.example".to_string()]).unwrap();
        params.distinguished_name = DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::OrganizationName, "kanon");
        params.distinguished_name.push(DnType::CommonName, "a CA");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.not_before = rcgen::date_time_ymd(2026, 1, 1);
        params.not_after = rcgen::date_time_ymd(2060, 1, 1);
        let ca = read_back(&params, &key);
        assert_eq!(ca.info.not_before, 20_454 * 86_400);
        assert_eq!(
            ca.info.not_after,
            parse_rfc3339("2060-01-01T00:00:00Z").unwrap()
        );
        assert!(ca.info.is_ca);
        assert_eq!(ca.info.subject, ca.info.issuer);
        assert_eq!(ca.info.spki, key.subject_public_key_info());
        let x509 = parse_x509(&ca.der).unwrap();
        assert_eq!(x509.subject().to_string(), "O=kanon, CN=a CA");

        // kanon signs as this CA under its very name, and with its key identifier.
        let signing = Signing {
            cert: ca.clone(),
            key_pem: key.serialize_pem(),
        };
        check_signing(&signing).unwrap();
        let leaf = issue_leaf(&signing, &settings(), T0).unwrap();
        assert_eq!(leaf.cert.info.issuer, ca.info.subject);
        assert!(!leaf.cert.info.is_ca);
        let authority_key_id = parse_x509(&leaf.cert.der)
            .unwrap()
            .iter_extensions()
            .find_map(|extension| match extension.parsed_extension() {
                ParsedExtension::AuthorityKeyIdentifier(aki) => aki.key_identifier.clone(),
                _ => None,
            })
            .unwrap();
        assert_eq!(authority_key_id.0, params.key_identifier(&key));

        params.is_ca = IsCa::NoCa;
        let leaf = params.self_signed(&key).unwrap();
        assert!(!read_back(&params, &key).info.is_ca);
        assert!(Cert::from_der(leaf.der()[..40].to_vec()).is_err());
        let mut trailing = leaf.der().to_vec();
        trailing.push(0);
        assert_eq!(
            Cert::from_der(trailing).unwrap_err(),
            "data after the certificate"
        );
        assert!(Cert::from_der(b"garbage".to_vec()).is_err());
        assert!(Cert::from_der(Vec::new()).is_err());
    }

    #[test]
    fn a_ca_whose_name_rcgen_cannot_reproduce_is_refused() {
        // Two common names (the organisation's attribute type turned into commonName's): rcgen
        // keeps one attribute of each type, so it would name another issuer.
        let key = KeyPair::generate().unwrap();
        let mut params = ca_params();
        params
            .distinguished_name
            .push(DnType::OrganizationName, "kanon");
        params.distinguished_name.push(DnType::CommonName, "a CA");
        let mut der = params.self_signed(&key).unwrap().der().to_vec();
        // In the issuer's name and the subject's.
        let organization = [0x06, 0x03, 0x55, 0x04, 0x0a];
        let mut patched = 0;
        for at in 0..der.len() - organization.len() {
            if der[at..].starts_with(&organization) {
                der[at + 4] = 0x03;
                patched += 1;
            }
        }
        assert_eq!(patched, 2);
        let ca = Cert::from_der(der).unwrap();
        assert!(ca.info.is_ca);
        let mut data = plan(None, &settings(), T0).unwrap().material.data();
        data.insert(CA_SIGNING_CERT_KEY.into(), ca.pem().into_bytes());
        data.insert(CA_KEY_KEY.into(), key.serialize_pem().into_bytes());
        let problems = Stored::read(&data, None).problems();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0].key, CA_SIGNING_CERT_KEY);
        assert!(
            problems[0]
                .message
                .contains("kanon cannot sign as this CA: its subject name cannot be reproduced"),
            "{problems:?}"
        );
    }

    #[test]
    fn tampered_certificates_are_problems_never_panics() {
        let material = plan(None, &settings(), T0).unwrap().material;
        let der = material.signing.cert.der.clone();
        let truncated = (0..der.len()).map(|length| der[..length].to_vec());
        let flipped = (0..der.len()).flat_map(|at| {
            let der = der.clone();
            [0x01, 0x80, 0xff].map(move |mask| {
                let mut flipped = der.clone();
                flipped[at] ^= mask;
                flipped
            })
        });
        let mut refused = 0;
        for variant in truncated.chain(flipped) {
            let pem = pem_block("CERTIFICATE", &variant).into_bytes();
            let mut data = material.data();
            for key in [TLS_CERT_KEY, CA_CERT_KEY, CA_SIGNING_CERT_KEY] {
                data.insert(key.into(), pem.clone());
            }
            let problems = Stored::read(&data, None).problems();
            if variant.len() < der.len() {
                let keys: Vec<_> = problems.iter().map(|problem| problem.key).collect();
                assert_eq!(keys, [CA_SIGNING_CERT_KEY, CA_CERT_KEY, TLS_CERT_KEY]);
            }
            refused += usize::from(!problems.is_empty());
        }
        // Most single-byte changes are caught (those in the signature are not: nothing here
        // checks a CA's own signature).
        assert!(refused > 2 * der.len(), "{refused} of {}", 4 * der.len());

        // Every value of every byte of the CA's subject but its text (tags, lengths, attribute
        // type), through rcgen's reading and writing of it.
        let subject = &material.signing.cert.info.subject;
        let text = parse_x509(&der)
            .unwrap()
            .subject()
            .iter_common_name()
            .next()
            .unwrap()
            .attr_value()
            .data
            .len();
        // The last occurrence: the issuer's name, the same, comes first.
        let start = der
            .windows(subject.len())
            .rposition(|window| window == subject.as_slice())
            .unwrap();
        let (mut usable, mut tried) = (0, 0);
        for at in start..start + subject.len() - text {
            for value in 0..=u8::MAX {
                let mut tampered = der.clone();
                tampered[at] = value;
                let Ok(cert) = Cert::from_der(tampered) else {
                    continue;
                };
                tried += 1;
                let signing = Signing {
                    cert,
                    key_pem: material.signing.key_pem.clone(),
                };
                usable += usize::from(check_signing(&signing).is_ok());
            }
        }
        assert!(usable > 0 && usable < tried, "{usable} of {tried}");
    }

    #[test]
    fn times() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(parse_rfc3339("1970-01-01T00:01:00Z"), Some(60));
        assert_eq!(parse_rfc3339("1970-01-01T01:01:00+01:00"), Some(60));
        assert_eq!(parse_rfc3339("yesterday"), None);
    }
}
