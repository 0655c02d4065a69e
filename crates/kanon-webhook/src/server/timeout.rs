//! A review's time bound from its `?timeout=`, as kube-apiserver writes it, clamped to what
//! kube-apiserver can ask for.

use std::time::Duration;

/// The longest bound a review gets, whatever its `?timeout=` says: kube-apiserver's own
/// maximum for a webhook's `timeoutSeconds`. A client cannot hold a review open longer.
pub const MAX_REVIEW_TIMEOUT: Duration = Duration::from_secs(30);

/// The bound of a review whose query is `query`: its `timeout` (clamped to
/// [`MAX_REVIEW_TIMEOUT`]), else `default`.
pub(super) fn review_timeout(query: Option<&str>, default: Duration) -> Duration {
    query
        .and_then(query_timeout)
        .unwrap_or(default)
        .min(MAX_REVIEW_TIMEOUT)
}

/// `timeout` of a query string, as kube-apiserver writes it (a Go duration: `10s`, `1m30s`,
/// `500ms`). Absent, unreadable or zero: `None`.
fn query_timeout(query: &str) -> Option<Duration> {
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(key, _)| *key == "timeout")
        .and_then(|(_, value)| parse_go_duration(value))
        .filter(|timeout| !timeout.is_zero())
}

/// A Go `time.Duration` string (`10s`, `1m30s`, `500ms`; units `ns`, `us`, `µs`, `ms`, `s`,
/// `m`, `h`), read exactly as Go's `time.ParseDuration` reads it (kanon-cel's parser, the one
/// CEL's `duration()` uses). Negative, or too long for Go: `None`.
pub fn parse_go_duration(text: &str) -> Option<Duration> {
    let nanos = kanon_cel::Duration::parse(text).ok()?.as_nanos();
    u64::try_from(nanos).ok().map(Duration::from_nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("10s"), Some(Duration::from_secs(10)));
        assert_eq!(parse_go_duration("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_go_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_go_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_go_duration("0"), Some(Duration::ZERO));
        for bad in ["", "10", "s", "10x", "-1s", "1s2"] {
            assert_eq!(parse_go_duration(bad), None, "{bad}");
        }
        assert_eq!(
            parse_go_duration("1h2m3.5s"),
            Some(Duration::from_millis(3_723_500))
        );
        assert_eq!(parse_go_duration("1.5µs"), Some(Duration::from_nanos(1500)));
        // Past what Go's durations hold (about 292 years).
        assert_eq!(parse_go_duration("99999999999999999999999s"), None);
        assert_eq!(parse_go_duration("3000000h"), None);
        assert_eq!(parse_go_duration(&format!("{}h", "9".repeat(400))), None);
    }

    #[test]
    fn query_timeouts() {
        assert_eq!(query_timeout("timeout=10s"), Some(Duration::from_secs(10)));
        assert_eq!(
            query_timeout("a=b&timeout=2s&c"),
            Some(Duration::from_secs(2))
        );
        assert_eq!(query_timeout("timeout=0s"), None);
        assert_eq!(query_timeout("timeout=soon"), None);
        assert_eq!(query_timeout("other=1s"), None);
    }

    #[test]
    fn a_client_cannot_ask_for_more_than_thirty_seconds() {
        let default = Duration::from_secs(10);
        assert_eq!(review_timeout(None, default), default);
        assert_eq!(
            review_timeout(Some("timeout=5s"), default),
            Duration::from_secs(5)
        );
        assert_eq!(
            review_timeout(Some("timeout=30s"), default),
            MAX_REVIEW_TIMEOUT
        );
        for long in ["timeout=31s", "timeout=1000h", "timeout=2562047h"] {
            assert_eq!(
                review_timeout(Some(long), default),
                MAX_REVIEW_TIMEOUT,
                "{long}"
            );
        }
        // Unreadable (past Go's durations, which kube-apiserver writes): the default, itself
        // clamped.
        for unreadable in [
            "timeout=15000000000000000000s",
            "timeout=99999999999999999999999s",
        ] {
            assert_eq!(
                review_timeout(Some(unreadable), default),
                default,
                "{unreadable}"
            );
        }
        assert_eq!(
            review_timeout(None, Duration::from_secs(3600)),
            MAX_REVIEW_TIMEOUT
        );
    }
}
