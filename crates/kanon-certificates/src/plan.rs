//! What the certificates should be at a given moment, from what they are: creation, renewal,
//! the CA's rotation with its overlap, and the repair of bad parts.

use rustls::pki_types::ServerName;

use crate::material::{
    Cert, IssueError, Leaf, LeafCheck, Material, Settings, Signing, Stored, check_leaf, issue_leaf,
    new_ca, rfc3339,
};
use crate::{BACKDATE_SECS, TLS_CERT_KEY};

/// What [`plan`] decided.
pub struct Plan {
    pub material: Material,
    /// A new CA was made (a rotation or a repair; not the first creation).
    pub renewed_ca: bool,
    /// A new serving certificate was issued (a renewal or a repair; not the first creation).
    pub renewed_leaf: bool,
    /// Why, one line each, for the log.
    pub reasons: Vec<String>,
}

/// The content the Secret should have at `now`, from what it has (`None`: there is no
/// Secret): the CA is rotated when less than `renew_fraction` of `ca_validity` remains (the
/// new CA signs from then on and joins the bundle at once), the serving certificate is
/// renewed when less than `renew_fraction` of `cert_validity` remains, and a serving
/// certificate of the previous CA is replaced `overlap` after the rotation. Unusable parts
/// are replaced: a bad CA by a new one (a rotation: the old trusted CAs stay in the bundle,
/// a good serving certificate keeps serving through the overlap), a bad serving certificate
/// at once.
pub fn plan(stored: Option<&Stored>, settings: &Settings, now: i64) -> Result<Plan, IssueError> {
    let names = settings.server_names();
    let mut reasons = Vec::new();
    let mut renewed_ca = false;
    let old_bundle: Vec<Cert> = stored
        .and_then(|stored| stored.bundle.as_ref().ok())
        .cloned()
        .unwrap_or_default();
    let old_leaf = stored.and_then(|stored| stored.leaf.as_ref().ok());
    let unexpired = |cert: &&Cert| cert.info.not_after > now;
    let new_ca = || new_ca(settings, now).map_err(|e| IssueError::Generate("CA", e));

    let (signing, bundle, rotated_at) = match stored.map(|stored| &stored.signing) {
        None => {
            reasons.push("no Secret yet: created a CA".to_string());
            let signing = new_ca()?;
            let bundle = vec![signing.cert.clone()];
            (signing, bundle, now)
        }
        Some(Err(problem)) => {
            renewed_ca = true;
            let signing = new_ca()?;
            reasons.push(format!(
                "{}: {}: a new CA replaces it (the CAs trusted so far stay in the bundle)",
                problem.key, problem.message
            ));
            let mut bundle = vec![signing.cert.clone()];
            bundle.extend(old_bundle.iter().filter(unexpired).cloned());
            (signing, bundle, now)
        }
        Some(Ok(current)) if ca_due(current, settings, now) => {
            renewed_ca = true;
            let signing = new_ca()?;
            reasons.push(format!(
                "the CA expires at {}: a new CA joins the bundle and signs from now on; the \
                 serving certificate moves to it after the overlap",
                rfc3339(current.cert.info.not_after)
            ));
            let mut bundle = vec![signing.cert.clone(), current.cert.clone()];
            // The CA of the certificate being served, if another, stays trusted as long as it
            // is valid.
            if let Some(leaf) = old_leaf
                && let Some(issuer) = old_bundle.iter().find(|ca| {
                    !matches!(
                        check_leaf(&leaf.cert, ca, &names, now),
                        LeafCheck::Invalid(_)
                    )
                })
                && !bundle.contains(issuer)
            {
                bundle.push(issuer.clone());
            }
            (signing, bundle, now)
        }
        Some(Ok(current)) => {
            let rotated_at = stored
                .and_then(|stored| stored.rotated_at.clone().ok().flatten())
                .unwrap_or(current.cert.info.not_before + BACKDATE_SECS);
            let mut bundle = vec![current.cert.clone()];
            for ca in old_bundle.iter().filter(unexpired) {
                if !bundle.contains(ca) {
                    bundle.push(ca.clone());
                }
            }
            (current.clone(), bundle, rotated_at)
        }
    };

    // `Some(reason)`: a new serving certificate (an empty reason: the first one).
    let reissue = match stored.map(|stored| &stored.leaf) {
        None => Some(String::new()),
        Some(Err(problem)) => Some(format!("{}: {}", problem.key, problem.message)),
        Some(Ok(leaf)) => leaf_due(leaf, &signing, &bundle, rotated_at, &names, settings, now),
    };
    let (leaf, renewed_leaf) = match (reissue, old_leaf) {
        (None, Some(leaf)) => (leaf.clone(), false),
        (reason, _) => {
            if let Some(reason) = reason.filter(|reason| !reason.is_empty()) {
                reasons.push(format!("{reason}: issued a new serving certificate"));
            }
            (issue_leaf(&signing, settings, now)?, stored.is_some())
        }
    };
    Ok(Plan {
        material: Material {
            leaf,
            signing,
            bundle,
            rotated_at,
        },
        renewed_ca,
        renewed_leaf,
        reasons,
    })
}

/// Whether less than `renew_fraction` of the CA's validity remains.
fn ca_due(current: &Signing, settings: &Settings, now: i64) -> bool {
    let remaining = (current.cert.info.not_after - now) as f64;
    remaining < settings.renew_fraction * settings.ca_validity as f64
}

/// Why the serving certificate must be re-issued now, if it must.
fn leaf_due(
    leaf: &Leaf,
    signing: &Signing,
    bundle: &[Cert],
    rotated_at: i64,
    names: &[ServerName<'static>],
    settings: &Settings,
    now: i64,
) -> Option<String> {
    let mut missing = None;
    let mut issuer = None;
    for ca in bundle {
        match check_leaf(&leaf.cert, ca, names, now) {
            LeafCheck::Valid => {
                issuer = Some(ca);
                break;
            }
            LeafCheck::MissingName(name) => missing = Some(name),
            LeafCheck::Invalid(_) => {}
        }
    }
    let Some(issuer) = issuer else {
        return Some(match missing {
            Some(name) => format!("{TLS_CERT_KEY} is not valid for {name}"),
            None => format!(
                "{TLS_CERT_KEY} is not valid now under any CA of the bundle (expired at {}, \
                 or signed by another CA)",
                rfc3339(leaf.cert.info.not_after)
            ),
        });
    };
    let not_after = leaf.cert.info.not_after;
    if *issuer == signing.cert {
        let remaining = (not_after - now) as f64;
        let renewed_end = (now + settings.cert_validity).min(signing.cert.info.not_after);
        // A certificate cut short by its CA's end gains nothing from a renewal: the CA's
        // rotation replaces it.
        (remaining < settings.renew_fraction * settings.cert_validity as f64
            && renewed_end > not_after)
            .then(|| format!("{TLS_CERT_KEY} expires at {}", rfc3339(not_after)))
    } else {
        let switch_at = rotated_at + settings.overlap;
        if now >= switch_at {
            Some(format!(
                "{TLS_CERT_KEY} is signed by the previous CA and the overlap since the CA's \
                 rotation at {} has passed",
                rfc3339(rotated_at)
            ))
        } else if not_after <= switch_at + settings.margin {
            Some(format!(
                "{TLS_CERT_KEY} (of the previous CA) expires at {}, before the overlap ends",
                rfc3339(not_after)
            ))
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{T0, settings};
    use crate::{CA_CERT_KEY, CA_KEY_KEY, TLS_KEY_KEY};

    /// The Secret's content after writing `material` and reading it back.
    fn round_trip(material: &Material) -> Stored {
        let stored = Stored::read(&material.data(), Some(&rfc3339(material.rotated_at)));
        assert!(stored.problems().is_empty(), "{:?}", stored.problems());
        stored
    }

    fn step(material: &Material, now: i64) -> Plan {
        plan(Some(&round_trip(material)), &settings(), now).unwrap()
    }

    #[test]
    fn creation_then_nothing_to_do() {
        let created = plan(None, &settings(), T0).unwrap();
        assert!(!created.renewed_ca && !created.renewed_leaf);
        let material = created.material;
        assert_eq!(material.bundle, vec![material.signing.cert.clone()]);
        assert_eq!(material.leaf.cert.info.not_after, T0 + 100);
        assert_eq!(material.signing.cert.info.not_after, T0 + 1_000);
        let again = step(&material, T0 + 10);
        assert!(again.reasons.is_empty(), "{:?}", again.reasons);
        assert_eq!(again.material.data(), material.data());
    }

    #[test]
    fn the_leaf_is_renewed_under_the_same_ca_when_due() {
        let material = plan(None, &settings(), T0).unwrap().material;
        // 71 s of 100 in: 29 remain, less than 30.
        let renewed = step(&material, T0 + 71);
        assert!(renewed.renewed_leaf && !renewed.renewed_ca);
        assert_ne!(renewed.material.leaf.cert, material.leaf.cert);
        assert_eq!(renewed.material.signing.cert, material.signing.cert);
        assert_eq!(renewed.material.leaf.cert.info.not_after, T0 + 171);
        assert!(!step(&material, T0 + 69).renewed_leaf);
    }

    #[test]
    fn the_ca_rotates_with_an_overlap() {
        let s = settings();
        let mut material = plan(None, &s, T0).unwrap().material;
        let first_ca = material.signing.cert.clone();
        // Keep the leaf fresh until the CA is due (700 s in: 300 remain, not less).
        let mut now = T0;
        while now < T0 + 700 {
            now += 10;
            material = step(&material, now).material;
        }
        assert_eq!(material.signing.cert, first_ca);
        let served = material.leaf.cert.clone();
        let rotated = step(&material, T0 + 701);
        assert!(rotated.renewed_ca && !rotated.renewed_leaf);
        let material = rotated.material;
        let second_ca = material.signing.cert.clone();
        assert_ne!(second_ca, first_ca);
        assert_eq!(material.bundle, vec![second_ca.clone(), first_ca.clone()]);
        assert_eq!(material.leaf.cert, served, "the leaf waits for the overlap");
        assert_eq!(material.rotated_at, T0 + 701);
        // During the overlap: unchanged, even though the leaf is due by then.
        let waiting = step(&material, T0 + 720);
        assert!(!waiting.renewed_leaf && !waiting.renewed_ca);
        assert_eq!(waiting.material.data(), material.data());
        // After it: a leaf of the new CA; the old CA stays trusted.
        let moved = step(&material, T0 + 721);
        assert!(moved.renewed_leaf && !moved.renewed_ca);
        let material = moved.material;
        assert_eq!(
            check_leaf(&material.leaf.cert, &second_ca, &s.server_names(), T0 + 721),
            LeafCheck::Valid
        );
        assert_eq!(material.bundle, vec![second_ca.clone(), first_ca.clone()]);
        // The old CA expires: it leaves the bundle.
        let pruned = step(&material, T0 + 1_000);
        assert_eq!(pruned.material.bundle, vec![second_ca]);
    }

    #[test]
    fn a_leaf_expiring_during_the_overlap_is_reissued_at_once() {
        let mut s = settings();
        s.cert_validity = 2_000; // cut short at the CA's end
        let material = plan(None, &s, T0).unwrap().material;
        assert_eq!(material.leaf.cert.info.not_after, T0 + 1_000);
        let rotated = plan(Some(&round_trip(&material)), &s, T0 + 701).unwrap();
        assert!(rotated.renewed_ca && !rotated.renewed_leaf);
        // The overlap ends at 721 (+ margin); the old leaf lasts until 1000: it waits.
        assert!(
            !plan(Some(&round_trip(&rotated.material)), &s, T0 + 720)
                .unwrap()
                .renewed_leaf
        );
        s.overlap = 400;
        let urgent = plan(Some(&round_trip(&rotated.material)), &s, T0 + 720).unwrap();
        assert!(urgent.renewed_leaf, "{:?}", urgent.reasons);
    }

    #[test]
    fn bad_parts_are_named_and_replaced() {
        let s = settings();
        let material = plan(None, &s, T0).unwrap().material;
        let mut data = material.data();
        data.insert(TLS_KEY_KEY.into(), b"garbage".to_vec());
        let stored = Stored::read(&data, None);
        let problems = stored.problems();
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].key, TLS_KEY_KEY);
        let repaired = plan(Some(&stored), &s, T0 + 1).unwrap();
        assert!(repaired.renewed_leaf && !repaired.renewed_ca);
        assert_eq!(repaired.material.signing.cert, material.signing.cert);

        // Another pair's key.
        let other = plan(None, &s, T0).unwrap().material;
        data.insert(TLS_KEY_KEY.into(), other.leaf.key_pem().as_bytes().to_vec());
        let problems = Stored::read(&data, None).problems();
        assert_eq!(problems[0].key, TLS_KEY_KEY);
        assert!(
            problems[0].message.contains("not the key of tls.crt"),
            "{problems:?}"
        );

        // No CA key: a new CA, the old one still trusted, the good leaf kept for the overlap.
        let mut data = material.data();
        data.remove(CA_KEY_KEY);
        let stored = Stored::read(&data, None);
        assert_eq!(stored.problems()[0].key, CA_KEY_KEY);
        let repaired = plan(Some(&stored), &s, T0 + 1).unwrap();
        assert!(repaired.renewed_ca && !repaired.renewed_leaf);
        assert_eq!(repaired.material.bundle.len(), 2);
        assert_eq!(repaired.material.bundle[1], material.signing.cert);
        assert_eq!(repaired.material.leaf.cert, material.leaf.cert);

        // A bundle of garbage: rebuilt from the signing CA.
        let mut data = material.data();
        data.insert(CA_CERT_KEY.into(), b"not pem".to_vec());
        let stored = Stored::read(&data, None);
        assert_eq!(stored.problems()[0].key, CA_CERT_KEY);
        let repaired = plan(Some(&stored), &s, T0 + 1).unwrap();
        assert!(!repaired.renewed_ca && !repaired.renewed_leaf);
        assert_eq!(
            repaired.material.bundle,
            vec![material.signing.cert.clone()]
        );
    }

    #[test]
    fn a_new_name_gets_a_new_leaf() {
        let mut s = settings();
        let material = plan(None, &s, T0).unwrap().material;
        s.dns_names
            .push("kanon.kanon-system.svc.cluster.local".into());
        let renewed = plan(Some(&round_trip(&material)), &s, T0 + 1).unwrap();
        assert!(renewed.renewed_leaf);
        assert!(
            renewed.reasons[0].contains("cluster.local"),
            "{:?}",
            renewed.reasons
        );
    }
}
