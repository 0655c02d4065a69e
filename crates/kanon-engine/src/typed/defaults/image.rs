//! What the apiserver's defaulting reads of a container image reference: its tag, parsed as
//! `k8s.io/kubernetes/pkg/util/parsers.ParseImageName` parses it (the container registry
//! grammar of `distribution/reference`, Docker Hub's name normalisation first). A reference
//! that does not parse has no tag; one with neither tag nor digest has the tag `latest`.

/// Whether the image's pull policy defaults to `Always` (the tag is `latest`, written or
/// implied) rather than `IfNotPresent` (another tag, a digest only, or no valid reference).
pub(super) fn pulls_always(image: &str) -> bool {
    tag(image).as_deref() == Some("latest")
}

/// The reference's tag: the written one, `latest` when it has neither tag nor digest, `None`
/// when it does not parse or has a digest only.
fn tag(image: &str) -> Option<String> {
    if image.len() == 64
        && image
            .bytes()
            .all(|b| matches!(b, b'a'..=b'f' | b'0'..=b'9'))
    {
        return None;
    }
    let (domain, remainder) = split_domain(image);
    let remote = remainder.split(':').next().unwrap_or(remainder);
    if remote.to_lowercase() != remote {
        return None;
    }
    let (reference, digest) = match remainder.split_once('@') {
        Some((reference, digest)) => (reference, Some(digest)),
        None => (remainder, None),
    };
    if digest.is_some_and(|digest| !is_digest(digest)) {
        return None;
    }
    // A tag follows the last `:` of the last path component.
    let last_slash = reference.rfind('/').map_or(0, |at| at + 1);
    let (path, tag) = match reference[last_slash..].rfind(':') {
        Some(at) => (
            &reference[..last_slash + at],
            Some(&reference[last_slash + at + 1..]),
        ),
        None => (reference, None),
    };
    if tag.is_some_and(|tag| !is_tag(tag)) {
        return None;
    }
    if !path.split('/').all(is_path_component) || !(is_domain(domain) || is_path_component(domain))
    {
        return None;
    }
    if domain.len() + 1 + path.len() > 255 {
        return None;
    }
    match (tag, digest) {
        (Some(tag), _) => Some(tag.to_owned()),
        (None, None) => Some("latest".to_owned()),
        (None, Some(_)) => None,
    }
}

/// Docker Hub's normalisation: the first component is a registry when it has a `.` or `:`,
/// is `localhost`, or has capitals; otherwise the name is on `docker.io`.
fn split_domain(name: &str) -> (&str, &str) {
    match name.split_once('/') {
        Some((first, rest))
            if first.contains(['.', ':'])
                || first == "localhost"
                || first.to_lowercase() != first =>
        {
            (first, rest)
        }
        _ => ("docker.io", name),
    }
}

/// `[a-z0-9]+` joined by `.`, `_`, `__` or one or more `-`.
fn is_path_component(component: &str) -> bool {
    let bytes = component.as_bytes();
    let alphanumeric = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    if bytes.is_empty() || !alphanumeric(bytes[0]) || !alphanumeric(bytes[bytes.len() - 1]) {
        return false;
    }
    let mut at = 0;
    while at < bytes.len() {
        if alphanumeric(bytes[at]) {
            at += 1;
            continue;
        }
        let start = at;
        while at < bytes.len() && !alphanumeric(bytes[at]) {
            at += 1;
        }
        let separator = &component[start..at];
        let dashes = separator.bytes().all(|b| b == b'-');
        if !(dashes || matches!(separator, "." | "_" | "__")) {
            return false;
        }
    }
    true
}

/// A host (DNS labels of letters, digits and inner `-` joined by `.`, or a bracketed IPv6
/// address) with an optional numeric port.
fn is_domain(domain: &str) -> bool {
    let (host, port) = match (domain.starts_with('['), domain.find(']'), domain.find(':')) {
        (true, Some(end), _) => domain.split_at(end + 1),
        (true, None, _) => return false,
        (false, _, Some(at)) => domain.split_at(at),
        (false, _, None) => (domain, ""),
    };
    let port_ok = port.is_empty()
        || port
            .strip_prefix(':')
            .is_some_and(|port| !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()));
    let host_ok = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(address) => {
            !address.is_empty() && address.bytes().all(|b| b.is_ascii_hexdigit() || b == b':')
        }
        None => host.split('.').all(|label| {
            let bytes = label.as_bytes();
            !bytes.is_empty()
                && bytes[0].is_ascii_alphanumeric()
                && bytes[bytes.len() - 1].is_ascii_alphanumeric()
                && bytes
                    .iter()
                    .all(|b| b.is_ascii_alphanumeric() || *b == b'-')
        }),
    };
    port_ok && host_ok
}

/// `[\w][\w.-]{0,127}`.
fn is_tag(tag: &str) -> bool {
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let bytes = tag.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 128
        && word(bytes[0])
        && bytes.iter().all(|&b| word(b) || b == b'.' || b == b'-')
}

/// An algorithm (`sha256`, `multihash+base58`) and at least 32 hex digits.
fn is_digest(digest: &str) -> bool {
    let Some((algorithm, hex)) = digest.split_once(':') else {
        return false;
    };
    let component_ok = |part: &str| {
        let bytes = part.as_bytes();
        !bytes.is_empty()
            && bytes[0].is_ascii_alphabetic()
            && bytes.iter().all(u8::is_ascii_alphanumeric)
    };
    hex.len() >= 32
        && hex.bytes().all(|b| b.is_ascii_hexdigit())
        && algorithm.split(['-', '_', '+', '.']).all(component_ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tag_decides_as_the_apiserver_reads_it() {
        for (image, expected) in [
            ("nginx", Some("latest")),
            ("nginx:latest", Some("latest")),
            ("nginx:1.27", Some("1.27")),
            ("registry.example.com:5000/team/app", Some("latest")),
            ("registry.example.com:5000/team/app:v2", Some("v2")),
            ("localhost/app:dev", Some("dev")),
            ("[::1]:5000/app:x", Some("x")),
            (
                "ghcr.io/org/app@sha256:0123456789abcdef0123456789abcdef",
                None,
            ),
            (
                "ghcr.io/org/app:latest@sha256:0123456789abcdef0123456789abcdef",
                Some("latest"),
            ),
            // Capitals in the repository, an empty tag, a short digest: no valid reference.
            ("Nginx", None),
            ("nginx:", None),
            ("nginx@sha256:abc", None),
            ("", None),
            ("a--b__c.d_e/x", Some("latest")),
            ("a___b", None),
            ("UPPER.example.com/app", Some("latest")),
        ] {
            assert_eq!(tag(image).as_deref(), expected, "{image}");
        }
        assert!(pulls_always("nginx") && !pulls_always("nginx:1.27") && !pulls_always("Nginx"));
    }
}
