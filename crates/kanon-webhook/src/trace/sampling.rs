//! Which reviews are traced, decided by kanon before any span is made.
//!
//! `tracing-opentelemetry` builds every span it is given (its fields, its builder) and only
//! then asks the SDK's sampler, so a review left out by a 1% ratio would still cost a dozen
//! spans' work. Deciding first makes an untraced review cost one draw: its span is
//! [`Span::none`](tracing::Span::none), and so are its policies', lookups' and programs' (they
//! are made only within a caller's span). The SDK then samples whatever kanon made.

use std::cell::Cell;
use std::hash::{BuildHasher, Hasher, RandomState};

use hyper::HeaderMap;

/// Reads an environment variable (a seam for tests).
type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// Why the sampling asked for cannot be done.
#[derive(Debug, thiserror::Error)]
pub enum SamplingError {
    /// A sampling ratio outside 0..=1, or not a number.
    #[error("trace sampling ratio {0} is not a number between 0 and 1")]
    Ratio(String),
    /// An `OTEL_TRACES_SAMPLER` kanon does not implement.
    #[error(
        "OTEL_TRACES_SAMPLER={0} is not a sampler kanon implements: use always_on, always_off, traceidratio or their parentbased_ forms"
    )]
    Sampler(String),
}

/// How reviews are chosen for tracing, as OpenTelemetry's samplers choose
/// (`OTEL_TRACES_SAMPLER`): a ratio for reviews without a trace context, and whether a caller's
/// `traceparent` decides for its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReviewSampling {
    /// A review without a caller's decision is traced when a draw falls below this, out of
    /// 2^64 (`None`: always).
    below: Option<u64>,
    /// Whether a caller's sampled flag decides (the `parentbased_*` samplers).
    follow_parent: bool,
}

impl Default for ReviewSampling {
    /// OpenTelemetry's default, `parentbased_always_on`.
    fn default() -> Self {
        ReviewSampling {
            below: None,
            follow_parent: true,
        }
    }
}

impl ReviewSampling {
    /// A caller's sampled flag decides; reviews without one are traced at `ratio` (0 to 1).
    pub fn parent_based(ratio: f64) -> Result<Self, SamplingError> {
        Ok(ReviewSampling {
            below: threshold(ratio)?,
            follow_parent: true,
        })
    }

    /// The sampler `OTEL_TRACES_SAMPLER` (and `OTEL_TRACES_SAMPLER_ARG`, the ratio) name, as
    /// OpenTelemetry's SDKs read them; the default when unset. A sampler kanon does not
    /// implement (`jaeger_remote`, `xray`) is an error, not a silent default.
    pub fn from_env(env: Env<'_>) -> Result<Self, SamplingError> {
        let Some(name) = env("OTEL_TRACES_SAMPLER") else {
            return Ok(ReviewSampling::default());
        };
        let ratio = || -> Result<f64, SamplingError> {
            match env("OTEL_TRACES_SAMPLER_ARG") {
                None => Ok(1.0),
                Some(text) => text
                    .trim()
                    .parse::<f64>()
                    .map_err(|_| SamplingError::Ratio(text.clone())),
            }
        };
        let (below, follow_parent) = match name.trim() {
            "always_on" => (None, false),
            "always_off" => (Some(0), false),
            "traceidratio" => (threshold(ratio()?)?, false),
            "parentbased_always_on" => (None, true),
            "parentbased_always_off" => (Some(0), true),
            "parentbased_traceidratio" => (threshold(ratio()?)?, true),
            other => return Err(SamplingError::Sampler(other.to_owned())),
        };
        Ok(ReviewSampling {
            below,
            follow_parent,
        })
    }

    /// Whether the review whose request carries `headers` is traced.
    pub fn traced(&self, headers: &HeaderMap) -> bool {
        if self.follow_parent
            && let Some(sampled) = headers
                .get("traceparent")
                .and_then(|value| value.to_str().ok())
                .and_then(parent_sampled)
        {
            return sampled;
        }
        match self.below {
            None => true,
            Some(0) => false,
            Some(below) => draw() < below,
        }
    }
}

/// The draw a ratio is compared with: `None` for 1 (always), out of 2^64 otherwise.
fn threshold(ratio: f64) -> Result<Option<u64>, SamplingError> {
    if !(0.0..=1.0).contains(&ratio) {
        return Err(SamplingError::Ratio(ratio.to_string()));
    }
    Ok((ratio < 1.0).then_some((ratio * u64::MAX as f64) as u64))
}

/// The sampled flag of a W3C `traceparent` (`00-<trace id>-<parent id>-<flags>`); `None` for
/// one that is not valid, which the propagator ignores too.
fn parent_sampled(header: &str) -> Option<bool> {
    let mut parts = header.trim().split('-');
    let (version, trace, parent, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let hex =
        |text: &str, len: usize| text.len() == len && text.bytes().all(|b| b.is_ascii_hexdigit());
    if !hex(version, 2) || version == "ff" || !hex(trace, 32) || !hex(parent, 16) || !hex(flags, 2)
    {
        return None;
    }
    // Version 00 has exactly four fields; later versions may add more.
    if version == "00" && parts.next().is_some() {
        return None;
    }
    if trace.bytes().all(|b| b == b'0') || parent.bytes().all(|b| b == b'0') {
        return None;
    }
    let flags = u8::from_str_radix(flags, 16).ok()?;
    Some(flags & 1 == 1)
}

/// A uniform draw from a per-thread xorshift generator seeded from the standard library's
/// random hashing keys: cheap, and good enough to choose a share of reviews.
fn draw() -> u64 {
    thread_local! {
        static STATE: Cell<u64> = Cell::new(RandomState::new().build_hasher().finish() | 1);
    }
    STATE.with(|state| {
        let mut x = state.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        state.set(x);
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::env_of;
    use hyper::header::HeaderValue;

    fn headers(traceparent: Option<&'static str>) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Some(value) = traceparent {
            headers.insert("traceparent", HeaderValue::from_static(value));
        }
        headers
    }

    const SAMPLED: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    const UNSAMPLED: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";

    #[test]
    fn a_callers_flag_decides_and_a_ratio_chooses_among_the_rest() {
        let none = ReviewSampling::parent_based(0.0).unwrap();
        assert!(none.traced(&headers(Some(SAMPLED))));
        assert!(!none.traced(&headers(Some(UNSAMPLED))));
        assert!(!none.traced(&headers(None)));
        // An invalid context is no context.
        assert!(!none.traced(&headers(Some(
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01"
        ))));
        assert!(!none.traced(&headers(Some("garbage"))));
        let all = ReviewSampling::parent_based(1.0).unwrap();
        assert!(all.traced(&headers(None)));
        assert!(!all.traced(&headers(Some(UNSAMPLED))));

        let tenth = ReviewSampling::parent_based(0.1).unwrap();
        let traced = (0..100_000)
            .filter(|_| tenth.traced(&headers(None)))
            .count();
        assert!((9_000..11_000).contains(&traced), "{traced} of 100,000");
        assert!(ReviewSampling::parent_based(1.5).is_err());
    }

    #[test]
    fn the_environment_names_the_sampler_as_the_sdks_read_it() {
        let default = ReviewSampling::from_env(&env_of(&[])).unwrap();
        assert_eq!(default, ReviewSampling::default());
        assert!(default.traced(&headers(None)));
        assert!(!default.traced(&headers(Some(UNSAMPLED))));

        let always =
            ReviewSampling::from_env(&env_of(&[("OTEL_TRACES_SAMPLER", "always_on")])).unwrap();
        assert!(
            always.traced(&headers(Some(UNSAMPLED))),
            "always_on ignores the parent"
        );
        let off = ReviewSampling::from_env(&env_of(&[(
            "OTEL_TRACES_SAMPLER",
            "parentbased_always_off",
        )]))
        .unwrap();
        assert!(!off.traced(&headers(None)));
        assert!(off.traced(&headers(Some(SAMPLED))));
        let ratio = ReviewSampling::from_env(&env_of(&[
            ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "0"),
        ]))
        .unwrap();
        assert_eq!(ratio, ReviewSampling::parent_based(0.0).unwrap());

        let unknown = ReviewSampling::from_env(&env_of(&[("OTEL_TRACES_SAMPLER", "xray")]));
        assert!(matches!(unknown, Err(SamplingError::Sampler(s)) if s == "xray"));
        let bad = ReviewSampling::from_env(&env_of(&[
            ("OTEL_TRACES_SAMPLER", "traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "half"),
        ]));
        assert!(matches!(bad, Err(SamplingError::Ratio(_))));
    }
}
