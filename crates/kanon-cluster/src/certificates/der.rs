//! The few fields of an X.509 certificate kanon needs to keep its certificates (validity,
//! names, public key, whether it is a CA), read from its DER encoding.
//!
//! rcgen writes certificates but (without its `x509-parser` feature) does not read them, and
//! rustls verifies them without showing their fields; this reader covers exactly what the
//! certificate keeper decides on. Signatures and names are checked by rustls' verifier, not
//! here.

use std::fmt;

/// The universal and context tags this reader meets.
mod tag {
    pub const BOOLEAN: u8 = 0x01;
    pub const INTEGER: u8 = 0x02;
    pub const OCTET_STRING: u8 = 0x04;
    pub const OID: u8 = 0x06;
    pub const UTF8_STRING: u8 = 0x0c;
    pub const PRINTABLE_STRING: u8 = 0x13;
    pub const IA5_STRING: u8 = 0x16;
    pub const UTC_TIME: u8 = 0x17;
    pub const GENERALIZED_TIME: u8 = 0x18;
    pub const SEQUENCE: u8 = 0x30;
    pub const SET: u8 = 0x31;
    /// `[0] EXPLICIT Version` of a TBSCertificate.
    pub const VERSION: u8 = 0xa0;
    /// `[3] EXPLICIT Extensions` of a TBSCertificate.
    pub const EXTENSIONS: u8 = 0xa3;
}

/// The DER-encoded OID 2.5.29.19 (basicConstraints).
const BASIC_CONSTRAINTS: &[u8] = &[0x55, 0x1d, 0x13];

/// Why a certificate could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DerError(&'static str);

impl fmt::Display for DerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

/// What kanon reads from a certificate.
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

/// One attribute of a `Name`: its type (OID arcs), the string's tag and its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameAttribute {
    pub oid: Vec<u64>,
    pub tag: u8,
    pub value: Vec<u8>,
}

/// The string tags [`NameAttribute::tag`] may carry for kanon to re-encode the name.
pub const UTF8_STRING: u8 = tag::UTF8_STRING;
/// See [`UTF8_STRING`].
pub const PRINTABLE_STRING: u8 = tag::PRINTABLE_STRING;
/// See [`UTF8_STRING`].
pub const IA5_STRING: u8 = tag::IA5_STRING;

/// One element: its tag, its contents and the whole encoding.
struct Element<'a> {
    tag: u8,
    contents: &'a [u8],
    whole: &'a [u8],
}

/// Reads the next element of `input` and advances past it.
fn next<'a>(input: &mut &'a [u8]) -> Result<Element<'a>, DerError> {
    let data = *input;
    let (&tag, rest) = data.split_first().ok_or(DerError("truncated"))?;
    if tag & 0x1f == 0x1f {
        return Err(DerError("unsupported high tag number"));
    }
    let (&first, rest) = rest.split_first().ok_or(DerError("truncated length"))?;
    let (length, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let count = usize::from(first & 0x7f);
        if count == 0 || count > 4 || rest.len() < count {
            return Err(DerError("unsupported length"));
        }
        let length = rest[..count]
            .iter()
            .fold(0usize, |length, &byte| (length << 8) | usize::from(byte));
        (length, &rest[count..])
    };
    if rest.len() < length {
        return Err(DerError("truncated contents"));
    }
    let header = data.len() - rest.len();
    *input = &rest[length..];
    Ok(Element {
        tag,
        contents: &rest[..length],
        whole: &data[..header + length],
    })
}

/// Reads the next element, which must have tag `expected`.
fn expect<'a>(
    input: &mut &'a [u8],
    expected: u8,
    what: &'static str,
) -> Result<Element<'a>, DerError> {
    let element = next(input)?;
    if element.tag == expected {
        Ok(element)
    } else {
        Err(DerError(what))
    }
}

/// Reads a certificate's fields.
pub fn parse_certificate(der: &[u8]) -> Result<CertInfo, DerError> {
    let mut input = der;
    let certificate = expect(&mut input, tag::SEQUENCE, "not a certificate (no SEQUENCE)")?;
    if !input.is_empty() {
        return Err(DerError("data after the certificate"));
    }
    let mut certificate = certificate.contents;
    let mut tbs = expect(&mut certificate, tag::SEQUENCE, "no TBSCertificate")?.contents;
    if tbs.first() == Some(&tag::VERSION) {
        next(&mut tbs)?;
    }
    expect(&mut tbs, tag::INTEGER, "no serial number")?;
    expect(&mut tbs, tag::SEQUENCE, "no signature algorithm")?;
    let issuer = expect(&mut tbs, tag::SEQUENCE, "no issuer")?.whole;
    let mut validity = expect(&mut tbs, tag::SEQUENCE, "no validity")?.contents;
    let not_before = parse_time(&next(&mut validity)?)?;
    let not_after = parse_time(&next(&mut validity)?)?;
    let subject = expect(&mut tbs, tag::SEQUENCE, "no subject")?.whole;
    let spki = expect(&mut tbs, tag::SEQUENCE, "no subject public key info")?.whole;
    let mut is_ca = false;
    while !tbs.is_empty() {
        let element = next(&mut tbs)?;
        if element.tag == tag::EXTENSIONS {
            is_ca = parse_basic_constraints(element.contents)?;
        }
    }
    Ok(CertInfo {
        not_before,
        not_after,
        subject: subject.to_vec(),
        issuer: issuer.to_vec(),
        spki: spki.to_vec(),
        is_ca,
    })
}

/// Whether the extensions (`SEQUENCE OF Extension`) say `cA: TRUE`.
fn parse_basic_constraints(extensions: &[u8]) -> Result<bool, DerError> {
    let mut input = extensions;
    let mut list = expect(&mut input, tag::SEQUENCE, "bad extensions")?.contents;
    while !list.is_empty() {
        let mut extension = expect(&mut list, tag::SEQUENCE, "bad extension")?.contents;
        let oid = expect(&mut extension, tag::OID, "bad extension id")?;
        if oid.contents != BASIC_CONSTRAINTS {
            continue;
        }
        let mut value = next(&mut extension)?;
        if value.tag == tag::BOOLEAN {
            value = next(&mut extension)?;
        }
        if value.tag != tag::OCTET_STRING {
            return Err(DerError("bad basicConstraints"));
        }
        let mut octets = value.contents;
        let mut constraints = expect(&mut octets, tag::SEQUENCE, "bad basicConstraints")?.contents;
        if constraints.first() == Some(&tag::BOOLEAN) {
            let ca = next(&mut constraints)?;
            return Ok(ca.contents.first().is_some_and(|&b| b != 0));
        }
        return Ok(false);
    }
    Ok(false)
}

/// A `UTCTime` or `GeneralizedTime` (UTC, `Z`), in seconds since the UNIX epoch.
fn parse_time(element: &Element<'_>) -> Result<i64, DerError> {
    let text = std::str::from_utf8(element.contents).map_err(|_| DerError("bad time"))?;
    let (year, rest) = match element.tag {
        tag::UTC_TIME => {
            let year: i64 = digits(text, 0, 2)?;
            (
                if year >= 50 { 1900 + year } else { 2000 + year },
                &text[2..],
            )
        }
        tag::GENERALIZED_TIME => (digits(text, 0, 4)?, text.get(4..).unwrap_or_default()),
        _ => return Err(DerError("bad time")),
    };
    if !rest.ends_with('Z') || rest.len() < 11 {
        return Err(DerError("time not in UTC"));
    }
    let month = digits(rest, 0, 2)?;
    let day = digits(rest, 2, 4)?;
    let hour = digits(rest, 4, 6)?;
    let minute = digits(rest, 6, 8)?;
    let second = digits(rest, 8, 10)?;
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return Err(DerError("bad time"));
    }
    Ok(days_from_civil(year, month, day) * 86_400 + hour * 3_600 + minute * 60 + second)
}

fn digits(text: &str, from: usize, to: usize) -> Result<i64, DerError> {
    text.get(from..to)
        .filter(|s| s.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|s| s.parse().ok())
        .ok_or(DerError("bad time"))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let yoe = year - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The attributes of an encoded `Name`, in order. A multi-valued RDN is refused (kanon could not
/// write it back the same).
pub fn name_attributes(name: &[u8]) -> Result<Vec<NameAttribute>, DerError> {
    let mut input = name;
    let mut rdns = expect(&mut input, tag::SEQUENCE, "bad name")?.contents;
    let mut attributes = Vec::new();
    while !rdns.is_empty() {
        let mut set = expect(&mut rdns, tag::SET, "bad name")?.contents;
        let mut pair = expect(&mut set, tag::SEQUENCE, "bad name")?.contents;
        if !set.is_empty() {
            return Err(DerError("multi-valued name component"));
        }
        let oid = expect(&mut pair, tag::OID, "bad name")?;
        let value = next(&mut pair)?;
        attributes.push(NameAttribute {
            oid: oid_arcs(oid.contents)?,
            tag: value.tag,
            value: value.contents.to_vec(),
        });
    }
    Ok(attributes)
}

fn oid_arcs(encoded: &[u8]) -> Result<Vec<u64>, DerError> {
    let mut arcs = Vec::new();
    let mut value: u64 = 0;
    for (i, &byte) in encoded.iter().enumerate() {
        if value > u64::MAX >> 7 {
            return Err(DerError("OID arc too large"));
        }
        value = (value << 7) | u64::from(byte & 0x7f);
        if byte & 0x80 == 0 {
            if arcs.is_empty() {
                let first = (value / 40).min(2);
                arcs.push(first);
                arcs.push(value - first * 40);
            } else {
                arcs.push(value);
            }
            value = 0;
        } else if i + 1 == encoded.len() {
            return Err(DerError("truncated OID"));
        }
    }
    if arcs.is_empty() {
        return Err(DerError("empty OID"));
    }
    Ok(arcs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 2, 29), 11_016);
        assert_eq!(days_from_civil(2026, 1, 1), 20_454);
        let utc = Element {
            tag: tag::UTC_TIME,
            contents: b"260101000001Z",
            whole: &[],
        };
        assert_eq!(parse_time(&utc), Ok(20_454 * 86_400 + 1));
        let generalized = Element {
            tag: tag::GENERALIZED_TIME,
            contents: b"20500101000000Z",
            whole: &[],
        };
        assert_eq!(
            parse_time(&generalized),
            Ok(days_from_civil(2050, 1, 1) * 86_400)
        );
        let local = Element {
            tag: tag::UTC_TIME,
            contents: b"2601010000+0100",
            whole: &[],
        };
        assert!(parse_time(&local).is_err());
    }

    #[test]
    fn reads_what_rcgen_writes() {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec!["a.example".to_string()]).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::OrganizationName, "kanon");
        params.distinguished_name.push(DnType::CommonName, "a CA");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.not_before = rcgen::date_time_ymd(2026, 1, 1);
        params.not_after = rcgen::date_time_ymd(2060, 1, 1);
        let cert = params.self_signed(&key).unwrap();
        let info = parse_certificate(cert.der()).unwrap();
        assert_eq!(info.not_before, 20_454 * 86_400);
        assert_eq!(info.not_after, days_from_civil(2060, 1, 1) * 86_400);
        assert!(info.is_ca);
        assert_eq!(info.subject, info.issuer);
        assert_eq!(
            info.spki,
            rcgen::PublicKeyData::subject_public_key_info(&key)
        );
        let attributes = name_attributes(&info.subject).unwrap();
        assert_eq!(attributes.len(), 2);
        assert_eq!(attributes[0].oid, [2, 5, 4, 10]);
        assert_eq!(attributes[1].oid, [2, 5, 4, 3]);
        assert_eq!(attributes[1].value, b"a CA");
        assert_eq!(attributes[1].tag, UTF8_STRING);

        params.is_ca = IsCa::NoCa;
        let leaf = params.self_signed(&key).unwrap();
        assert!(!parse_certificate(leaf.der()).unwrap().is_ca);
        assert!(parse_certificate(&leaf.der()[..40]).is_err());
        assert!(parse_certificate(b"garbage").is_err());
    }
}
