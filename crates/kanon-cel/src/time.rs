//! CEL's `google.protobuf.Duration` and `google.protobuf.Timestamp`, as cel-go v0.26 has them on
//! top of Go's `time.Duration` and `time.Time`: parsing (`time.ParseDuration`, `time.Parse` with
//! RFC 3339), formatting, arithmetic with cel-go's range errors, and the calendar fields in UTC, at
//! a fixed offset or in an IANA time zone.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::OnceLock;

use crate::error::EvalError;
use crate::quote::go_quote;

const NANOS_PER_SECOND: i64 = 1_000_000_000;
const NANOS_PER_MINUTE: i64 = 60 * NANOS_PER_SECOND;
const NANOS_PER_HOUR: i64 = 60 * NANOS_PER_MINUTE;
const SECONDS_PER_DAY: i64 = 86_400;

/// The error cel-go gives when a value cannot be converted: `type conversion error from 'string'
/// to 'google.protobuf.Duration'`.
pub(crate) fn conversion_error(from: &str, to: &str) -> EvalError {
    EvalError::Invalid(format!("type conversion error from '{from}' to '{to}'"))
}

/// cel-go's error for arithmetic whose result does not fit an int64 (durations included).
fn integer_overflow() -> EvalError {
    EvalError::Overflow("integer")
}

/// cel-go's error for a timestamp outside 0001-01-01T00:00:00Z..9999-12-31T23:59:59.999999999Z.
fn timestamp_overflow() -> EvalError {
    EvalError::Overflow("timestamp")
}

/// A signed span of time in nanoseconds. cel-go's range is that of Go's `time.Duration` (an
/// int64 of nanoseconds, about ±292 years); it adds no limit of its own.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Duration {
    pub nanos: i64,
}

impl Duration {
    pub const MIN: Duration = Duration { nanos: i64::MIN };
    pub const MAX: Duration = Duration { nanos: i64::MAX };

    pub const fn from_nanos(nanos: i64) -> Duration {
        Duration { nanos }
    }

    /// The duration in nanoseconds (negative for a negative duration).
    pub const fn as_nanos(self) -> i64 {
        self.nanos
    }

    /// Parses a duration as Go's `time.ParseDuration` does (`"1h2m3.5s"`, `"-1.5h"`, `"300ms"`;
    /// units `ns`, `us`, `µs`, `μs`, `ms`, `s`, `m`, `h`), which is what cel-go's
    /// `duration(string)` calls. Any failure, overflow included, is cel-go's conversion error.
    pub fn parse(text: &str) -> Result<Duration, EvalError> {
        go_parse_duration(text.as_bytes())
            .map(Duration::from_nanos)
            .ok_or_else(|| conversion_error("string", "google.protobuf.Duration"))
    }

    /// `self + other`; cel-go reports overflow as `integer overflow`.
    pub fn checked_add(self, other: Duration) -> Result<Duration, EvalError> {
        self.nanos
            .checked_add(other.nanos)
            .map(Duration::from_nanos)
            .ok_or_else(integer_overflow)
    }

    /// `self - other`; cel-go reports overflow as `integer overflow`.
    pub fn checked_sub(self, other: Duration) -> Result<Duration, EvalError> {
        self.nanos
            .checked_sub(other.nanos)
            .map(Duration::from_nanos)
            .ok_or_else(integer_overflow)
    }

    /// `-self`; only the most negative duration overflows (`integer overflow`).
    pub fn checked_neg(self) -> Result<Duration, EvalError> {
        self.nanos
            .checked_neg()
            .map(Duration::from_nanos)
            .ok_or_else(integer_overflow)
    }

    /// `getHours()`: the whole hours, as cel-go computes them (Go's `Hours()` truncated).
    pub fn hours(self) -> i64 {
        go_float_units(self.nanos, NANOS_PER_HOUR) as i64
    }

    /// `getMinutes()`: the whole minutes, as cel-go computes them (Go's `Minutes()` truncated).
    pub fn minutes(self) -> i64 {
        go_float_units(self.nanos, NANOS_PER_MINUTE) as i64
    }

    /// `getSeconds()`: the whole seconds, as cel-go computes them (Go's `Seconds()` truncated).
    pub fn seconds(self) -> i64 {
        go_float_units(self.nanos, NANOS_PER_SECOND) as i64
    }

    /// `getMilliseconds()`: the whole milliseconds (not the millisecond part), truncated.
    pub fn milliseconds(self) -> i64 {
        self.nanos / 1_000_000
    }
}

/// Go's `Duration.Hours()`/`Minutes()`/`Seconds()`: the whole units and the remainder are
/// converted apart and then added in floating point. cel-go truncates that float, so near a unit
/// boundary of a large duration the rounding of the addition shows (`getMinutes()` of
/// `153722866m59.999999999s` is 153722867); computing it the same way gives the same answers.
fn go_float_units(nanos: i64, unit: i64) -> f64 {
    (nanos / unit) as f64 + (nanos % unit) as f64 / unit as f64
}

impl fmt::Display for Duration {
    /// cel-go's `string(duration)`: the seconds as Go's `strconv.FormatFloat(s, 'f', -1, 64)`
    /// writes them (the shortest decimal that reads back as the same float, never an exponent,
    /// which is also what Rust's `Display` for `f64` writes) and an `s`: `"1.5s"`, `"5400s"`,
    /// `"0.000000001s"`. Past 2^53 ns the float rounds: the maximum is `"9223372036.854776s"`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}s", go_float_units(self.nanos, NANOS_PER_SECOND))
    }
}

/// Go's `time.ParseDuration`, quirks included (`"1.s.5s"` is 1.5s; two halves of 2^63 ns wrap to
/// zero). `None` for what Go refuses.
fn go_parse_duration(mut text: &[u8]) -> Option<i64> {
    let mut negative = false;
    if let Some(&sign @ (b'-' | b'+')) = text.first() {
        negative = sign == b'-';
        text = &text[1..];
    }
    if text == b"0" {
        return Some(0);
    }
    if text.is_empty() {
        return None;
    }
    let mut total: u64 = 0;
    while !text.is_empty() {
        if !(text[0] == b'.' || text[0].is_ascii_digit()) {
            return None;
        }
        let before = text.len();
        let (whole, rest) = go_leading_int(text)?;
        text = rest;
        let has_whole = text.len() != before;

        let mut fraction = 0u64;
        let mut scale = 1f64;
        let mut has_fraction = false;
        if text.first() == Some(&b'.') {
            text = &text[1..];
            let before = text.len();
            let (digits, digits_scale, rest) = go_leading_fraction(text);
            fraction = digits;
            scale = digits_scale;
            text = rest;
            has_fraction = text.len() != before;
        }
        if !has_whole && !has_fraction {
            return None;
        }

        let unit_len = text
            .iter()
            .position(|&c| c == b'.' || c.is_ascii_digit())
            .unwrap_or(text.len());
        let unit: u64 = match &text[..unit_len] {
            b"ns" => 1,
            // ASCII, the micro sign (U+00B5) and the Greek mu (U+03BC).
            b"us" | b"\xc2\xb5s" | b"\xce\xbcs" => 1_000,
            b"ms" => 1_000_000,
            b"s" => 1_000_000_000,
            b"m" => 60_000_000_000,
            b"h" => 3_600_000_000_000,
            _ => return None,
        };
        text = &text[unit_len..];

        if whole > (1u64 << 63) / unit {
            return None;
        }
        let mut value = whole * unit;
        if fraction > 0 {
            // Go goes through float64 here (exact to the nanosecond for fractions of an hour).
            value += (fraction as f64 * (unit as f64 / scale)) as u64;
            if value > 1u64 << 63 {
                return None;
            }
        }
        // Go's uint64 addition wraps; both terms are at most 2^63, so only 2^63 + 2^63 does.
        total = total.wrapping_add(value);
        if total > 1u64 << 63 {
            return None;
        }
    }
    if negative {
        // -(2^63) is the most negative duration; Go gets there by wrapping too.
        return Some((total as i64).wrapping_neg());
    }
    i64::try_from(total).ok()
}

/// Go's `leadingInt`: the digits at the start, at most 2^63; `None` past that.
fn go_leading_int(text: &[u8]) -> Option<(u64, &[u8])> {
    let mut value: u64 = 0;
    let mut used = 0;
    for &c in text {
        if !c.is_ascii_digit() {
            break;
        }
        if value > (1u64 << 63) / 10 {
            return None;
        }
        value = value * 10 + u64::from(c - b'0');
        if value > 1u64 << 63 {
            return None;
        }
        used += 1;
    }
    Some((value, &text[used..]))
}

/// Go's `leadingFraction`: the digits after a decimal point and their scale (10^digits kept);
/// digits past what fits are consumed and ignored.
fn go_leading_fraction(text: &[u8]) -> (u64, f64, &[u8]) {
    let mut value: u64 = 0;
    let mut scale = 1f64;
    let mut overflow = false;
    let mut used = 0;
    for &c in text {
        if !c.is_ascii_digit() {
            break;
        }
        used += 1;
        if overflow {
            continue;
        }
        if value > (i64::MAX as u64) / 10 {
            overflow = true;
            continue;
        }
        let next = value * 10 + u64::from(c - b'0');
        if next > 1u64 << 63 {
            overflow = true;
            continue;
        }
        value = next;
        scale *= 10.0;
    }
    (value, scale, &text[used..])
}

/// An instant: seconds since the Unix epoch (UTC) and nanoseconds within the second, between
/// 0001-01-01T00:00:00Z and 9999-12-31T23:59:59.999999999Z.
///
/// Like Go's `time.Time` in cel-go, a timestamp also remembers the UTC offset it was written
/// with (`timestamp("2009-02-13T23:31:30+01:00")`), which arithmetic keeps and `string()` shows;
/// equality, order and hashing look at the instant only, and the calendar getters read UTC unless
/// given a zone.
#[derive(Debug, Clone, Copy)]
pub struct Timestamp {
    pub seconds: i64,
    pub nanos: u32,
    /// Seconds east of UTC, for display only; 0 shows as `Z`.
    pub offset: i32,
}

impl PartialEq for Timestamp {
    fn eq(&self, other: &Self) -> bool {
        (self.seconds, self.nanos) == (other.seconds, other.nanos)
    }
}

impl Eq for Timestamp {}

impl PartialOrd for Timestamp {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Timestamp {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.seconds, self.nanos).cmp(&(other.seconds, other.nanos))
    }
}

impl Hash for Timestamp {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (self.seconds, self.nanos).hash(state);
    }
}

/// A timestamp's calendar fields at some UTC offset, as Go's `time.Time` reports them
/// (proleptic Gregorian calendar; a year can reach 0 or 10000 once an offset is applied).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Civil {
    pub year: i64,
    /// 1 (January) to 12.
    pub month: u32,
    /// 1 to 31.
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
    pub nanos: u32,
    /// 0 (Sunday) to 6 (Saturday).
    pub weekday: u32,
    /// 1 to 366.
    pub day_of_year: u32,
}

impl Timestamp {
    /// Unix seconds of 0001-01-01T00:00:00Z.
    pub const MIN_SECONDS: i64 = -62_135_596_800;
    /// Unix seconds of 9999-12-31T23:59:59Z.
    pub const MAX_SECONDS: i64 = 253_402_300_799;

    /// A UTC timestamp; `timestamp overflow` outside cel-go's range, and an error for nanos past
    /// the second.
    pub fn new(seconds: i64, nanos: u32) -> Result<Timestamp, EvalError> {
        if nanos >= NANOS_PER_SECOND as u32 {
            return Err(EvalError::Invalid(format!(
                "timestamp nanos out of range: {nanos}"
            )));
        }
        if !(Self::MIN_SECONDS..=Self::MAX_SECONDS).contains(&seconds) {
            return Err(timestamp_overflow());
        }
        Ok(Timestamp {
            seconds,
            nanos,
            offset: 0,
        })
    }

    /// cel-go's `timestamp(int)`: Unix seconds, in UTC.
    pub fn from_unix_seconds(seconds: i64) -> Result<Timestamp, EvalError> {
        Timestamp::new(seconds, 0)
    }

    /// cel-go's `int(timestamp)`: Unix seconds, rounded down.
    pub fn unix_seconds(self) -> i64 {
        self.seconds
    }

    /// The same instant shown in UTC.
    pub fn to_utc(self) -> Timestamp {
        Timestamp { offset: 0, ..self }
    }

    /// Parses an RFC 3339 timestamp as cel-go's `timestamp(string)` does, with Go's
    /// `time.Parse(time.RFC3339, …)`: `2009-02-13T23:31:30Z`, `…30.123456789Z`,
    /// `…30-08:00`. Go also takes a one-digit hour, a comma before the fraction, fraction digits
    /// past the ninth (ignored) and offsets up to `±24:60`; so does this. A malformed text is
    /// cel-go's conversion error, an instant out of range `timestamp overflow`.
    pub fn parse(text: &str) -> Result<Timestamp, EvalError> {
        let parts = parse_rfc3339(text.as_bytes())
            .ok_or_else(|| conversion_error("string", "google.protobuf.Timestamp"))?;
        let days = days_from_civil(parts.year, parts.month, parts.day);
        let seconds = days * SECONDS_PER_DAY
            + i64::from(parts.hour) * 3600
            + i64::from(parts.minute) * 60
            + i64::from(parts.second)
            - i64::from(parts.offset);
        let timestamp = Timestamp::new(seconds, parts.nanos)?;
        Ok(Timestamp {
            offset: parts.offset,
            ..timestamp
        })
    }

    /// `timestamp + duration` (and `duration + timestamp`), keeping the timestamp's offset.
    pub fn checked_add(self, duration: Duration) -> Result<Timestamp, EvalError> {
        // As cel-go: seconds and nanoseconds apart, the nanoseconds then carried.
        let mut seconds = self
            .seconds
            .checked_add(duration.nanos / NANOS_PER_SECOND)
            .ok_or_else(integer_overflow)?;
        let nanos = i64::from(self.nanos) + duration.nanos % NANOS_PER_SECOND;
        seconds = seconds
            .checked_add(nanos.div_euclid(NANOS_PER_SECOND))
            .ok_or_else(integer_overflow)?;
        let nanos = nanos.rem_euclid(NANOS_PER_SECOND) as u32;
        let timestamp = Timestamp::new(seconds, nanos)?;
        Ok(Timestamp {
            offset: self.offset,
            ..timestamp
        })
    }

    /// `timestamp - duration`: the duration negated (`integer overflow` for the most negative
    /// one, as cel-go), then added.
    pub fn checked_sub(self, duration: Duration) -> Result<Timestamp, EvalError> {
        self.checked_add(duration.checked_neg()?)
    }

    /// `self - earlier` as a duration; `integer overflow` when it does not fit, checked in cel-go's
    /// steps (the seconds scaled to nanoseconds first, so a difference just under the limit whose
    /// whole seconds are over it overflows too).
    pub fn since(self, earlier: Timestamp) -> Result<Duration, EvalError> {
        let seconds = self
            .seconds
            .checked_sub(earlier.seconds)
            .ok_or_else(integer_overflow)?;
        let nanos = i64::from(self.nanos) - i64::from(earlier.nanos);
        seconds
            .checked_mul(NANOS_PER_SECOND)
            .and_then(|scaled| scaled.checked_add(nanos))
            .map(Duration::from_nanos)
            .ok_or_else(integer_overflow)
    }

    /// The calendar fields at `offset` seconds east of UTC.
    pub fn civil_at(self, offset: i64) -> Civil {
        // Offsets from zone arguments stay within ±2^34 s; saturate rather than panic on others.
        let local = self.seconds.saturating_add(offset);
        let days = local.div_euclid(SECONDS_PER_DAY);
        let second_of_day = local.rem_euclid(SECONDS_PER_DAY) as u32;
        let (year, month, day) = civil_from_days(days);
        Civil {
            year,
            month,
            day,
            hour: second_of_day / 3600,
            minute: second_of_day / 60 % 60,
            second: second_of_day % 60,
            nanos: self.nanos,
            // 1970-01-01 was a Thursday.
            weekday: (days + 4).rem_euclid(7) as u32,
            day_of_year: (days - days_from_civil(year, 1, 1) + 1) as u32,
        }
    }

    /// The calendar fields in UTC: what the getters without a zone read.
    pub fn civil_utc(self) -> Civil {
        self.civil_at(0)
    }

    /// The calendar fields in a zone as cel-go's getters take it: an IANA name
    /// (`America/Los_Angeles`, `UTC`, or empty for UTC), or, when it holds a colon, an offset
    /// `[+-]hours:minutes` (`+05:30`, `-08:00`, `02:00`).
    pub fn civil_in(self, zone: &str) -> Result<Civil, EvalError> {
        Ok(self.civil_at(zone_offset(zone, self)?))
    }
}

impl fmt::Display for Timestamp {
    /// cel-go's `string(timestamp)`: Go's `time.RFC3339Nano` at the timestamp's own offset,
    /// fraction without trailing zeros: `2009-02-13T23:31:30Z`, `2009-02-13T23:31:30.5+01:00`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let civil = self.civil_at(i64::from(self.offset));
        if civil.year < 0 {
            write!(f, "-{:04}", civil.year.unsigned_abs())?;
        } else {
            write!(f, "{:04}", civil.year)?;
        }
        write!(
            f,
            "-{:02}-{:02}T{:02}:{:02}:{:02}",
            civil.month, civil.day, civil.hour, civil.minute, civil.second
        )?;
        if civil.nanos != 0 {
            let digits = format!("{:09}", civil.nanos);
            write!(f, ".{}", digits.trim_end_matches('0'))?;
        }
        if self.offset == 0 {
            return f.write_str("Z");
        }
        // Go writes whole minutes of the offset (its seconds are dropped).
        let minutes = self.offset / 60;
        let sign = if minutes < 0 { '-' } else { '+' };
        let minutes = minutes.unsigned_abs();
        write!(f, "{sign}{:02}:{:02}", minutes / 60, minutes % 60)
    }
}

struct Rfc3339 {
    year: i64,
    month: u32,
    day: u32,
    hour: u32,
    minute: u32,
    second: u32,
    nanos: u32,
    offset: i32,
}

/// What Go's `time.Parse(time.RFC3339, text)` accepts: its strict fast path or, when that fails,
/// its general layout parser, whichever takes the text (the general one is the more lenient).
fn parse_rfc3339(text: &[u8]) -> Option<Rfc3339> {
    fn digits(text: &[u8], at: usize, count: usize) -> Option<u32> {
        let slice = text.get(at..at + count)?;
        slice.iter().try_fold(0u32, |value, &c| {
            c.is_ascii_digit().then(|| value * 10 + u32::from(c - b'0'))
        })
    }
    fn literal(text: &[u8], at: usize, expected: u8) -> Option<()> {
        (text.get(at) == Some(&expected)).then_some(())
    }

    let year = digits(text, 0, 4)?;
    literal(text, 4, b'-')?;
    let month = digits(text, 5, 2)?;
    literal(text, 7, b'-')?;
    let day = digits(text, 8, 2)?;
    literal(text, 10, b'T')?;
    // The general parser reads the hour with one digit or two.
    let hour_len = if text.get(12).is_some_and(u8::is_ascii_digit) {
        2
    } else {
        1
    };
    let hour = digits(text, 11, hour_len)?;
    let mut at = 11 + hour_len;
    literal(text, at, b':')?;
    let minute = digits(text, at + 1, 2)?;
    literal(text, at + 3, b':')?;
    let second = digits(text, at + 4, 2)?;
    at += 6;
    if !(1..=12).contains(&month) || hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let year = i64::from(year);
    if day < 1 || day > days_in_month(year, month) {
        return None;
    }

    let mut nanos = 0;
    if matches!(text.get(at), Some(b'.' | b',')) && text.get(at + 1).is_some_and(u8::is_ascii_digit)
    {
        let count = text[at + 1..]
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .count();
        // Only the first nine digits count; the rest are read and dropped.
        let kept = count.min(9);
        nanos = digits(text, at + 1, kept)? * 10u32.pow(9 - kept as u32);
        at += 1 + count;
    }

    let rest = &text[at..];
    let offset = if rest == b"Z" {
        0
    } else {
        if rest.len() != 6 || rest[3] != b':' {
            return None;
        }
        let hours = digits(rest, 1, 2)?;
        let minutes = digits(rest, 4, 2)?;
        // Go's general parser lets 24 hours and 60 minutes through ("some people do write them").
        if hours > 24 || minutes > 60 {
            return None;
        }
        let offset = ((hours * 60 + minutes) * 60) as i32;
        match rest[0] {
            b'+' => offset,
            b'-' => -offset,
            _ => return None,
        }
    };
    Some(Rfc3339 {
        year,
        month,
        day,
        hour,
        minute,
        second,
        nanos,
        offset,
    })
}

fn is_leap_year(year: i64) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        2 if is_leap_year(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (years within ±10^15). Counts in
/// 400-year eras of 146097 days, with years starting in March so that the leap day ends them.
pub fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let (month, day) = (i64::from(month), i64::from(day));
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year.rem_euclid(400);
    let month_from_march = (month + 9) % 12;
    let day_of_year = (153 * month_from_march + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    // 719468 days lie between 0000-03-01 and 1970-01-01.
    era * 146_097 + day_of_era - 719_468
}

/// The proleptic Gregorian date (year, month 1..=12, day 1..=31) of a day counted from
/// 1970-01-01; the inverse of [`days_from_civil`].
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let shifted = days + 719_468;
    let era = shifted.div_euclid(146_097);
    let day_of_era = shifted.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * month_from_march + 2) / 5 + 1) as u32;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    } as u32;
    let year = era * 400 + year_of_era + i64::from(month <= 2);
    (year, month, day)
}

/// The UTC offset, in seconds east, that cel-go's getters apply for a zone argument at an
/// instant: `inTimeZone` of cel-go's standard library.
pub fn zone_offset(zone: &str, at: Timestamp) -> Result<i64, EvalError> {
    if let Some(colon) = zone.find(':') {
        // Any integers around the first colon, each as Go's strconv.Atoi reads it; a leading
        // minus makes the minutes count against the hours too.
        let hours = go_atoi(&zone[..colon])?;
        let minutes = go_atoi(&zone[colon + 1..])?;
        let total_minutes = if zone.starts_with('-') {
            hours.wrapping_mul(60).wrapping_sub(minutes)
        } else {
            hours.wrapping_mul(60).wrapping_add(minutes)
        };
        // cel-go goes through a time.Duration (which wraps in Go) and its float seconds.
        let nanos = total_minutes.wrapping_mul(NANOS_PER_MINUTE);
        return Ok(go_float_units(nanos, NANOS_PER_SECOND) as i64);
    }
    // Go's time.LoadLocation.
    match zone {
        // kube-apiserver runs with its local zone set to UTC.
        "" | "UTC" | "Local" => return Ok(0),
        _ => {}
    }
    if zone.contains("..") || zone.starts_with('/') || zone.starts_with('\\') {
        return Err(EvalError::Invalid("time: invalid location name".to_owned()));
    }
    iana_offset(zone, at).ok_or_else(|| EvalError::Invalid(format!("unknown time zone {zone}")))
}

/// The offset of an IANA zone at an instant, from the tz database bundled into the binary (the
/// system's could be missing or differ, as kube-apiserver embeds Go's).
fn iana_offset(name: &str, at: Timestamp) -> Option<i64> {
    static DATABASE: OnceLock<jiff::tz::TimeZoneDatabase> = OnceLock::new();
    let zone = DATABASE
        .get_or_init(jiff::tz::TimeZoneDatabase::bundled)
        .get(name)
        .ok()?;
    // jiff finds names without regard to case; Go opens a file by that name, which minds it.
    // (jiff's `Etc/Unknown` has no IANA name, so it fails here too, as in Go.)
    if zone.iana_name() != Some(name) {
        return None;
    }
    // jiff's instants stop a day short of year 10000's edges; no zone changes its offset there.
    let second = at.seconds.clamp(
        jiff::Timestamp::MIN.as_second(),
        jiff::Timestamp::MAX.as_second(),
    );
    let instant = jiff::Timestamp::from_second(second).ok()?;
    Some(i64::from(zone.to_offset(instant).seconds()))
}

/// Go's `strconv.Atoi` on a 64-bit platform, with its error text.
fn go_atoi(text: &str) -> Result<i64, EvalError> {
    let failure = |reason: &str| {
        EvalError::Invalid(format!(
            "strconv.Atoi: parsing {}: {reason}",
            go_quote(text)
        ))
    };
    let bytes = text.as_bytes();
    let (negative, digits) = match bytes.first() {
        Some(b'-') => (true, &bytes[1..]),
        Some(b'+') => (false, &bytes[1..]),
        _ => (false, bytes),
    };
    if digits.is_empty() {
        return Err(failure("invalid syntax"));
    }
    let mut value: u64 = 0;
    for &c in digits {
        if !c.is_ascii_digit() {
            return Err(failure("invalid syntax"));
        }
        // Go reports the overflow at the digit that causes it, before looking further.
        value = value
            .checked_mul(10)
            .and_then(|value| value.checked_add(u64::from(c - b'0')))
            .ok_or_else(|| failure("value out of range"))?;
    }
    if negative {
        if value > 1u64 << 63 {
            return Err(failure("value out of range"));
        }
        Ok((value as i64).wrapping_neg())
    } else {
        i64::try_from(value).map_err(|_| failure("value out of range"))
    }
}

pub(crate) fn base64_encode(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (index, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if index <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> shift) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const DURATION_ERROR: &str =
        "type conversion error from 'string' to 'google.protobuf.Duration'";
    const TIMESTAMP_ERROR: &str =
        "type conversion error from 'string' to 'google.protobuf.Timestamp'";

    fn nanos(text: &str) -> i64 {
        Duration::parse(text)
            .unwrap_or_else(|error| panic!("{text}: {error}"))
            .nanos
    }

    fn timestamp(text: &str) -> Timestamp {
        Timestamp::parse(text).unwrap_or_else(|error| panic!("{text}: {error}"))
    }

    fn error_text<T: fmt::Debug>(result: Result<T, EvalError>) -> String {
        result.expect_err("an error").to_string()
    }

    #[test]
    fn durations_parse_as_go_does() {
        let cases: &[(&str, i64)] = &[
            ("1h2m3.5s", 3_723_500_000_000),
            ("-1.5h", -5_400_000_000_000),
            ("300ms", 300_000_000),
            ("1us", 1_000),
            ("1µs", 1_000),
            ("1μs", 1_000),
            ("7ns", 7),
            ("+5s", 5_000_000_000),
            ("0", 0),
            ("-0", 0),
            ("+0", 0),
            ("0s", 0),
            (".5s", 500_000_000),
            ("5.s", 5_000_000_000),
            ("1.5h1.5m", 5_490_000_000_000),
            ("0.1h", 360_000_000_000),
            // Go's quirks: a bare "1." takes the unit, fraction digits past 1 ns are dropped.
            ("1.s.5s", 1_500_000_000),
            ("1.0000000001s", 1_000_000_000),
            ("0.0000000009s", 0),
            ("1.9999999999s", 1_999_999_999),
            ("1000000s", 1_000_000_000_000_000),
            ("9223372036854775807ns", i64::MAX),
            ("-9223372036854775808ns", i64::MIN),
            ("2562047h47m16.854775807s", i64::MAX),
            ("-2562047h47m16.854775808s", i64::MIN),
            ("2562047.7880152155h", 9_223_372_036_854_775_800),
            // Go's sum of two 2^63 ns wraps to zero.
            ("9223372036854775808ns9223372036854775808ns", 0),
        ];
        for &(text, expected) in cases {
            assert_eq!(nanos(text), expected, "{text}");
        }
    }

    #[test]
    fn durations_that_go_refuses() {
        for text in [
            "",
            "abc",
            "1",
            "00",
            "+",
            "-",
            ".s",
            "-.s",
            "1h-5m",
            "1e3s",
            "5m.",
            "1sm",
            " 1s",
            "1s ",
            "1d",
            "1S",
            "9223372036854775808ns",
            "2562047h47m16.854775808s",
            "9223372036.854775808s",
            "99999999999999999999s",
            // cel-spec's duration_range cases: beyond Go's range, so unparsable in cel-go.
            "320000000000s",
            "-320000000000s",
            "200000000000s",
        ] {
            assert_eq!(
                error_text(Duration::parse(text)),
                DURATION_ERROR,
                "{text:?}"
            );
        }
    }

    #[test]
    fn durations_format_as_cel_go_does() {
        let cases: &[(&str, &str)] = &[
            ("1.5s", "1.5s"),
            ("-1.5h", "-5400s"),
            ("1h30m", "5400s"),
            ("1ns", "0.000000001s"),
            ("-1ns", "-0.000000001s"),
            ("0s", "0s"),
            ("-0s", "0s"),
            ("1000000s", "1000000s"),
            ("1.999999999s", "1.999999999s"),
            ("123.321456789s", "123.321456789s"),
            ("0.1h", "360s"),
            ("1h45m47s", "6347s"),
            ("2h", "7200s"),
            // Past 2^53 ns the float rounds, as in cel-go.
            ("2562047h47m16.854775807s", "9223372036.854776s"),
            ("-2562047h47m16.854775808s", "-9223372036.854776s"),
            ("2562047.78801521h", "9223372036.854755s"),
        ];
        for &(text, expected) in cases {
            assert_eq!(
                Duration::parse(text).map(|d| d.to_string()).as_deref(),
                Ok(expected),
                "{text}"
            );
        }
    }

    #[test]
    fn duration_getters_convert_the_whole_duration() {
        let d =
            |text: &str| Duration::parse(text).unwrap_or_else(|error| panic!("{text}: {error}"));
        // cel-spec's duration_converters.
        assert_eq!(d("10000s").hours(), 2);
        assert_eq!(d("3730s").minutes(), 62);
        assert_eq!(d("3730s").seconds(), 3730);
        // cel-spec expects 321 (the millisecond field); cel-go gives all the milliseconds.
        assert_eq!(d("123.321456789s").milliseconds(), 123_321);
        assert_eq!(d("3723s").hours(), 1);
        assert_eq!(d("3723.456s").seconds(), 3723);
        // Negative durations truncate toward zero.
        assert_eq!(d("-3723s").minutes(), -62);
        assert_eq!(d("-1.5s").seconds(), -1);
        assert_eq!(d("-1.5s").milliseconds(), -1500);
        assert_eq!(d("-90m").hours(), -1);
        // Go's float arithmetic rounds up at the edge of a unit of a large duration.
        assert_eq!(d("153722866m59.999999999s").minutes(), 153_722_867);
        assert_eq!(Duration::MAX.seconds(), 9_223_372_036);
        assert_eq!(Duration::MAX.minutes(), 153_722_867);
        assert_eq!(Duration::MAX.hours(), 2_562_047);
        assert_eq!(Duration::MIN.hours(), -2_562_047);
        assert_eq!(Duration::MIN.milliseconds(), -9_223_372_036_854);
    }

    #[test]
    fn duration_arithmetic_overflows_as_integers() {
        let d =
            |text: &str| Duration::parse(text).unwrap_or_else(|error| panic!("{text}: {error}"));
        assert_eq!(d("600s").checked_add(d("50s")), Ok(d("650s")));
        assert_eq!(d("900s").checked_sub(d("42s")), Ok(d("858s")));
        assert_eq!(
            error_text(d("9223372036s").checked_add(d("1s"))),
            "integer overflow"
        );
        assert_eq!(
            error_text(Duration::MIN.checked_sub(Duration::from_nanos(1))),
            "integer overflow"
        );
        assert_eq!(error_text(Duration::MIN.checked_neg()), "integer overflow");
        assert_eq!(
            Duration::MAX.checked_neg(),
            Ok(Duration::from_nanos(-i64::MAX))
        );
        assert_eq!(
            Duration::MAX.checked_add(Duration::MIN),
            Ok(Duration::from_nanos(-1))
        );
    }

    #[test]
    fn timestamps_parse_and_format_as_cel_go_does() {
        let cases: &[(&str, i64, u32, &str)] = &[
            (
                "2009-02-13T23:31:30Z",
                1_234_567_890,
                0,
                "2009-02-13T23:31:30Z",
            ),
            ("1970-01-01T00:00:00Z", 0, 0, "1970-01-01T00:00:00Z"),
            (
                "9999-12-31T23:59:59.999999999Z",
                253_402_300_799,
                999_999_999,
                "9999-12-31T23:59:59.999999999Z",
            ),
            (
                "0001-01-01T00:00:00Z",
                -62_135_596_800,
                0,
                "0001-01-01T00:00:00Z",
            ),
            (
                "2004-09-16T23:59:59Z",
                1_095_379_199,
                0,
                "2004-09-16T23:59:59Z",
            ),
            (
                "2009-02-13T23:31:30.123000Z",
                1_234_567_890,
                123_000_000,
                "2009-02-13T23:31:30.123Z",
            ),
            (
                "2009-02-13T23:31:30.000000000Z",
                1_234_567_890,
                0,
                "2009-02-13T23:31:30Z",
            ),
            (
                "1969-12-31T23:59:59.5Z",
                -1,
                500_000_000,
                "1969-12-31T23:59:59.5Z",
            ),
            // The offset is kept for display; the instant is UTC.
            (
                "2009-02-13T23:31:30+01:00",
                1_234_564_290,
                0,
                "2009-02-13T23:31:30+01:00",
            ),
            (
                "2009-02-13T23:31:30+05:30",
                1_234_548_090,
                0,
                "2009-02-13T23:31:30+05:30",
            ),
            (
                "2009-02-13T23:31:30-00:00",
                1_234_567_890,
                0,
                "2009-02-13T23:31:30Z",
            ),
            (
                "2023-02-03T23:31:20+00:00",
                1_675_467_080,
                0,
                "2023-02-03T23:31:20Z",
            ),
            (
                "0000-12-31T23:00:00-01:00",
                -62_135_596_800,
                0,
                "0000-12-31T23:00:00-01:00",
            ),
            // What Go's lenient fallback parser lets through.
            (
                "2009-02-13T3:31:30Z",
                1_234_495_890,
                0,
                "2009-02-13T03:31:30Z",
            ),
            (
                "2009-02-13T23:31:30,5Z",
                1_234_567_890,
                500_000_000,
                "2009-02-13T23:31:30.5Z",
            ),
            (
                "2009-02-13T23:31:30+24:00",
                1_234_481_490,
                0,
                "2009-02-13T23:31:30+24:00",
            ),
            (
                "2009-02-13T23:31:30+23:60",
                1_234_481_490,
                0,
                "2009-02-13T23:31:30+24:00",
            ),
            (
                "2008-02-29T23:31:30.1234567891Z",
                1_204_327_890,
                123_456_789,
                "2008-02-29T23:31:30.123456789Z",
            ),
        ];
        for &(text, seconds, nanos, shown) in cases {
            let parsed = timestamp(text);
            assert_eq!((parsed.seconds, parsed.nanos), (seconds, nanos), "{text}");
            assert_eq!(parsed.to_string(), shown, "{text}");
            assert_eq!(timestamp(shown), parsed, "{shown} reads back");
        }
    }

    #[test]
    fn timestamps_that_go_refuses() {
        for text in [
            "",
            "2009-02-13",
            "2009-02-13T23:31:30",
            "2009-02-13t23:31:30Z",
            "2009-02-13T23:31:30z",
            "2009-02-13 23:31:30Z",
            "2009-2-13T23:31:30Z",
            "2009-02-29T23:31:30Z",
            "2009-04-31T00:00:00Z",
            "2009-00-10T00:00:00Z",
            "2009-13-10T00:00:00Z",
            "2009-02-00T00:00:00Z",
            "2009-02-13T24:00:00Z",
            "2009-02-13T23:60:00Z",
            "2009-02-13T23:31:60Z",
            "2009-02-13T23:31:30.Z",
            "2009-02-13T23:31:30.1",
            "2009-02-13T23:31:30+0100",
            "2009-02-13T23:31:30+1:00",
            "2009-02-13T23:31:30+01:00 ",
            "2009-02-13T23:31:30x01:00",
            "2009-02-13T23:31:30+24:01Z",
            "2009-02-13T23:31:30+25:00",
            "2009-02-13T23:31:30+23:61",
            " 2009-02-13T23:31:30Z",
            "２009-02-13T23:31:30Z",
            // cel-spec's from_string_over: a five-digit year does not parse in Go at all.
            "10000-01-01T00:00:00Z",
        ] {
            assert_eq!(
                error_text(Timestamp::parse(text)),
                TIMESTAMP_ERROR,
                "{text:?}"
            );
        }
    }

    #[test]
    fn timestamps_out_of_range_overflow() {
        for text in [
            // cel-spec's from_string_under.
            "0000-01-01T00:00:00Z",
            "0001-01-01T00:00:00+01:00",
            "0000-12-31T23:59:59.999999999Z",
            "0000-02-29T23:31:30+24:60",
        ] {
            assert_eq!(
                error_text(Timestamp::parse(text)),
                "timestamp overflow",
                "{text}"
            );
        }
        assert_eq!(
            error_text(Timestamp::from_unix_seconds(253_402_300_800)),
            "timestamp overflow"
        );
        assert_eq!(
            error_text(Timestamp::from_unix_seconds(-62_135_596_801)),
            "timestamp overflow"
        );
        assert_eq!(
            Timestamp::from_unix_seconds(253_402_300_799)
                .map(|t| t.to_string())
                .as_deref(),
            Ok("9999-12-31T23:59:59Z")
        );
        assert_eq!(
            Timestamp::from_unix_seconds(-62_135_596_800)
                .map(|t| t.to_string())
                .as_deref(),
            Ok("0001-01-01T00:00:00Z")
        );
        assert_eq!(
            Timestamp::from_unix_seconds(1_000_000_000)
                .map(|t| t.to_string())
                .as_deref(),
            Ok("2001-09-09T01:46:40Z")
        );
        assert!(Timestamp::new(0, 1_000_000_000).is_err());
    }

    #[test]
    fn timestamp_equality_order_and_hash_ignore_the_offset() {
        use std::collections::hash_map::DefaultHasher;
        let hash = |t: Timestamp| {
            let mut hasher = DefaultHasher::new();
            t.hash(&mut hasher);
            hasher.finish()
        };
        let offset = timestamp("2009-02-13T23:31:30+05:30");
        let utc = timestamp("2009-02-13T18:01:30Z");
        assert_eq!(offset, utc);
        assert_eq!(hash(offset), hash(utc));
        assert_eq!(offset.unix_seconds(), 1_234_548_090);
        assert_eq!(offset.to_utc().to_string(), "2009-02-13T18:01:30Z");
        assert!(timestamp("2009-02-13T23:00:00Z") < timestamp("2009-03-13T23:00:00Z"));
        assert!(timestamp("2009-02-13T23:00:00.000000001Z") > timestamp("2009-02-13T23:00:00Z"));
        // cel-spec's int conversions: Unix seconds, rounded down.
        assert_eq!(
            timestamp("2009-02-13T23:31:30Z").unix_seconds(),
            1_234_567_890
        );
        assert_eq!(
            timestamp("0001-01-01T00:00:00.5Z").unix_seconds(),
            -62_135_596_800
        );
        assert_eq!(timestamp("1969-12-31T23:59:59.5Z").unix_seconds(), -1);
    }

    #[test]
    fn timestamp_arithmetic_as_cel_go_does() {
        let d =
            |text: &str| Duration::parse(text).unwrap_or_else(|error| panic!("{text}: {error}"));
        // cel-spec's timestamp_arithmetic.
        assert_eq!(
            timestamp("2009-02-13T23:00:00Z").checked_add(d("240s")),
            Ok(timestamp("2009-02-13T23:04:00Z"))
        );
        assert_eq!(
            timestamp("2009-02-13T23:10:00Z").checked_sub(d("600s")),
            Ok(timestamp("2009-02-13T23:00:00Z"))
        );
        assert_eq!(
            timestamp("0001-01-01T00:00:01.000000001Z").checked_add(d("-999999999ns")),
            Ok(timestamp("0001-01-01T00:00:00.000000002Z"))
        );
        assert_eq!(
            timestamp("0001-01-01T00:00:01.999999999Z").checked_add(d("999999999ns")),
            Ok(timestamp("0001-01-01T00:00:02.999999998Z"))
        );
        assert_eq!(
            timestamp("2009-02-13T23:31:00Z").since(timestamp("2009-02-13T23:29:00Z")),
            Ok(d("120s"))
        );
        assert_eq!(
            timestamp("1969-12-31T23:59:59.999999999Z").since(timestamp("1970-01-01T00:00:00.5Z")),
            Ok(d("-500.000001ms"))
        );
        assert_eq!(
            timestamp("1969-12-31T23:59:59.999999999Z")
                .checked_sub(d("1.5s"))
                .map(|t| t.to_string())
                .as_deref(),
            Ok("1969-12-31T23:59:58.499999999Z")
        );
        // The offset the timestamp was written with is kept.
        assert_eq!(
            timestamp("2009-02-13T23:31:30+01:00")
                .checked_add(d("1h"))
                .map(|t| t.to_string())
                .as_deref(),
            Ok("2009-02-14T00:31:30+01:00")
        );
        assert_eq!(
            timestamp("2009-02-13T23:31:30-23:59")
                .checked_add(d("-1ns"))
                .map(|t| t.to_string())
                .as_deref(),
            Ok("2009-02-13T23:31:29.999999999-23:59")
        );
        // A local year of 10000 is shown as Go shows it.
        assert_eq!(
            timestamp("9999-12-31T12:00:00+05:00")
                .checked_add(d("16h59m59s"))
                .map(|t| t.to_string())
                .as_deref(),
            Ok("10000-01-01T04:59:59+05:00")
        );
    }

    #[test]
    fn timestamp_arithmetic_range_errors() {
        let d =
            |text: &str| Duration::parse(text).unwrap_or_else(|error| panic!("{text}: {error}"));
        // cel-spec's timestamp_range.
        let overflows = [
            timestamp("0001-01-01T00:00:00Z").checked_add(d("-1s")),
            timestamp("9999-12-31T23:59:59Z").checked_add(d("1s")),
            timestamp("9999-12-31T23:59:59.999999999Z").checked_add(d("1ns")),
            timestamp("0001-01-01T00:00:00Z").checked_add(d("-1ns")),
            timestamp("0001-01-01T00:00:00Z").checked_sub(d("1ns")),
        ];
        for result in overflows {
            assert_eq!(error_text(result), "timestamp overflow");
        }
        assert_eq!(
            error_text(timestamp("9999-12-31T23:59:59Z").since(timestamp("0001-01-01T00:00:00Z"))),
            "integer overflow"
        );
        assert_eq!(
            error_text(timestamp("0001-01-01T00:00:00Z").since(timestamp("9999-12-31T23:59:59Z"))),
            "integer overflow"
        );
        // The edges of a duration.
        let epoch = timestamp("1970-01-01T00:00:00Z");
        assert_eq!(
            timestamp("2262-04-11T23:47:16.854775807Z").since(epoch),
            Ok(Duration::MAX)
        );
        assert_eq!(
            timestamp("1677-09-21T00:12:44Z").since(epoch),
            Ok(Duration::from_nanos(-9_223_372_036_000_000_000))
        );
        // The most negative duration itself is out of reach: its whole seconds, scaled, are not.
        assert_eq!(
            error_text(timestamp("1677-09-21T00:12:43.145224192Z").since(epoch)),
            "integer overflow"
        );
        assert_eq!(
            error_text(timestamp("2262-04-11T23:47:16.854775808Z").since(epoch)),
            "integer overflow"
        );
        // cel-go scales the whole seconds first: these overflow though the difference would fit.
        assert_eq!(
            error_text(
                timestamp("2262-04-11T23:47:17.5Z").since(timestamp("1970-01-01T00:00:00.9Z"))
            ),
            "integer overflow"
        );
        // Subtracting the most negative duration fails on negating it.
        assert_eq!(
            error_text(epoch.checked_sub(Duration::MIN)),
            "integer overflow"
        );
    }

    #[test]
    fn civil_dates_round_trip() {
        for days in (-800_000..3_000_000)
            .step_by(997)
            .chain([-719_162, -1, 0, 1, 2_932_896])
        {
            let (year, month, day) = civil_from_days(days);
            assert!((1..=12).contains(&month) && (1..=days_in_month(year, month)).contains(&day));
            assert_eq!(days_from_civil(year, month, day), days);
        }
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(-719_162), (1, 1, 1));
        assert_eq!(civil_from_days(-719_163), (0, 12, 31));
        assert_eq!(civil_from_days(2_932_896), (9999, 12, 31));
        assert_eq!(
            days_from_civil(2000, 3, 1) - days_from_civil(2000, 2, 28),
            2
        );
        assert_eq!(
            days_from_civil(1900, 3, 1) - days_from_civil(1900, 2, 28),
            1
        );
        assert_eq!(days_from_civil(0, 3, 1) - days_from_civil(0, 2, 28), 2);
        assert_eq!(days_from_civil(-1, 1, 1) - days_from_civil(-2, 1, 1), 365);
        assert_eq!(
            civil_from_days(days_from_civil(-4713, 11, 24)),
            (-4713, 11, 24)
        );
    }

    #[test]
    fn calendar_fields_in_utc() {
        let civil = timestamp("2009-02-13T23:31:20.123456789Z").civil_utc();
        assert_eq!(
            civil,
            Civil {
                year: 2009,
                month: 2,
                day: 13,
                hour: 23,
                minute: 31,
                second: 20,
                nanos: 123_456_789,
                weekday: 5,
                day_of_year: 44,
            }
        );
        // The getters read UTC whatever offset the timestamp was written with.
        assert_eq!(timestamp("2009-02-14T00:31:30+01:00").civil_utc().hour, 23);
        let day_of_year = |text: &str| timestamp(text).civil_utc().day_of_year;
        assert_eq!(day_of_year("2024-12-31T12:00:00Z"), 366);
        assert_eq!(day_of_year("2023-12-31T12:00:00Z"), 365);
        assert_eq!(day_of_year("2000-02-29T12:00:00Z"), 60);
        assert_eq!(day_of_year("1900-03-01T00:00:00Z"), 60);
        // 0001-01-01 was a Monday; the Unix epoch a Thursday; the day before it a Wednesday.
        assert_eq!(timestamp("0001-01-01T00:00:00Z").civil_utc().weekday, 1);
        assert_eq!(timestamp("1970-01-01T00:00:00Z").civil_utc().weekday, 4);
        assert_eq!(timestamp("1969-12-31T23:59:59Z").civil_utc().weekday, 3);
        assert_eq!(timestamp("9999-12-31T23:59:59Z").civil_utc().weekday, 5);
    }

    #[test]
    fn calendar_fields_at_fixed_offsets() {
        let at = timestamp("2009-02-13T23:31:30Z");
        let field = |zone: &str, pick: fn(Civil) -> i64| at.civil_in(zone).map(pick);
        let hour = |c: Civil| i64::from(c.hour);
        // cel-spec's timestamp_selectors_tz.
        assert_eq!(field("+11:00", |c| i64::from(c.day)), Ok(14));
        assert_eq!(field("-09:30", |c| c.year), Ok(2009));
        assert_eq!(field("02:00", hour), Ok(1));
        assert_eq!(field("-00:00", |c| i64::from(c.second)), Ok(30));
        assert_eq!(
            timestamp("2009-02-13T02:00:00Z")
                .civil_in("-02:30")
                .map(|c| c.day),
            Ok(12)
        );
        assert_eq!(field("+05:30", hour), Ok(5));
        assert_eq!(field("5:30", hour), Ok(5));
        assert_eq!(field("+0005:30", hour), Ok(5));
        // A leading minus counts the minutes against the hours, whatever their own sign.
        assert_eq!(field("-5:-30", hour), Ok(19));
        assert_eq!(field("+5:-30", hour), Ok(4));
        // Huge offsets are taken as they come, wrapping as Go's Duration does.
        assert_eq!(field("100000:00", hour), Ok(15));
        assert_eq!(field("2562047:00", |c| c.year), Ok(2301));
        assert_eq!(field("-2562047:00", |c| c.year), Ok(1716));
        assert_eq!(field("153722867:00", |c| c.year), Ok(2009));
        // Years 0 and 10000 appear at the edges.
        let first = timestamp("0001-01-01T00:00:00Z").civil_in("-01:00");
        assert_eq!(
            first.map(|c| (c.year, c.weekday, c.day_of_year)),
            Ok((0, 0, 366))
        );
        let last = timestamp("9999-12-31T23:59:59.999Z").civil_in("+01:00");
        assert_eq!(
            last.map(|c| (c.year, c.nanos / 1_000_000)),
            Ok((10000, 999))
        );
    }

    #[test]
    fn bad_fixed_offsets_fail_as_strconv_does() {
        let at = timestamp("2009-02-13T23:31:30Z");
        let cases = [
            ("x:30", r#"strconv.Atoi: parsing "x": invalid syntax"#),
            (":30", r#"strconv.Atoi: parsing "": invalid syntax"#),
            ("5:", r#"strconv.Atoi: parsing "": invalid syntax"#),
            ("1:2:3", r#"strconv.Atoi: parsing "2:3": invalid syntax"#),
            (
                "+05:30:00",
                r#"strconv.Atoi: parsing "30:00": invalid syntax"#,
            ),
            (" 5:30", r#"strconv.Atoi: parsing " 5": invalid syntax"#),
            ("+-5:30", r#"strconv.Atoi: parsing "+-5": invalid syntax"#),
            ("5:３0", r#"strconv.Atoi: parsing "３0": invalid syntax"#),
            ("\t5:30", r#"strconv.Atoi: parsing "\t5": invalid syntax"#),
            (
                "99999999999999999999:00",
                r#"strconv.Atoi: parsing "99999999999999999999": value out of range"#,
            ),
            (
                "99999999999999999999x:00",
                r#"strconv.Atoi: parsing "99999999999999999999x": value out of range"#,
            ),
            (
                "9223372036854775808:00",
                r#"strconv.Atoi: parsing "9223372036854775808": value out of range"#,
            ),
        ];
        for (zone, message) in cases {
            assert_eq!(error_text(at.civil_in(zone)), message, "{zone:?}");
        }
        assert!(at.civil_in("-9223372036854775808:00").is_ok());
    }

    #[test]
    fn calendar_fields_in_iana_zones() {
        let at = timestamp("2009-02-13T23:31:30Z");
        // cel-spec's timestamp_selectors_tz.
        assert_eq!(at.civil_in("Australia/Sydney").map(|c| c.day), Ok(14));
        assert_eq!(at.civil_in("US/Central").map(|c| c.day - 1), Ok(12));
        assert_eq!(at.civil_in("US/Central").map(|c| c.day_of_year - 1), Ok(43));
        assert_eq!(at.civil_in("UTC").map(|c| c.weekday), Ok(5));
        assert_eq!(at.civil_in("UTC").map(|c| c.month - 1), Ok(1));
        assert_eq!(at.civil_in("Asia/Kathmandu").map(|c| c.minute), Ok(16));
        assert_eq!(
            timestamp("2009-02-13T02:00:00Z")
                .civil_in("America/St_Johns")
                .map(|c| c.day - 1),
            Ok(11)
        );
        // cel-go's documented examples (with the real Los Angeles offset).
        let hours = |text: &str, zone: &str| timestamp(text).civil_in(zone).map(|c| c.hour);
        assert_eq!(
            hours("2023-07-14T10:30:45.123Z", "America/Los_Angeles"),
            Ok(3)
        );
        assert_eq!(
            timestamp("2023-07-01T05:00:00Z")
                .civil_in("America/Los_Angeles")
                .map(|c| c.day),
            Ok(30)
        );
        assert_eq!(
            timestamp("2023-07-16T05:00:00Z")
                .civil_in("America/Los_Angeles")
                .map(|c| c.weekday),
            Ok(6)
        );
        assert_eq!(
            timestamp("2023-01-01T05:00:00Z")
                .civil_in("America/Los_Angeles")
                .map(|c| c.day_of_year - 1),
            Ok(364)
        );
        // Daylight saving time starts at 10:00Z on 2024-03-10 in Los Angeles.
        assert_eq!(hours("2024-03-10T07:30:00Z", "America/Los_Angeles"), Ok(23));
        assert_eq!(hours("2024-03-10T10:30:00Z", "America/Los_Angeles"), Ok(3));
        assert_eq!(hours("2024-03-10T10:30:00Z", "US/Pacific"), Ok(3));
        assert_eq!(hours("2024-07-10T10:30:00Z", "Europe/Dublin"), Ok(11));
        assert_eq!(hours("2024-03-10T10:30:00Z", "Europe/Dublin"), Ok(10));
        assert_eq!(hours("2009-02-13T23:31:30Z", "Etc/GMT+5"), Ok(18));
        assert_eq!(hours("2009-02-13T23:31:30Z", "Zulu"), Ok(23));
        // Before a zone's first transition its local mean time applies, as in Go.
        assert_eq!(hours("0001-01-01T00:00:00Z", "Pacific/Kiritimati"), Ok(13));
        let first = timestamp("0001-01-01T00:00:00Z").civil_in("America/New_York");
        assert_eq!(first.map(|c| (c.minute, c.second)), Ok((3, 58)));
        // Past the last transition the zone's rule goes on; at the top of the range too.
        assert_eq!(hours("9999-12-31T23:59:59Z", "Pacific/Kiritimati"), Ok(13));
        assert_eq!(hours("9999-07-01T12:00:00Z", "America/Los_Angeles"), Ok(5));
        // "", "UTC" and "Local" (kube-apiserver runs in UTC) need no database.
        for zone in ["", "UTC", "Local"] {
            assert_eq!(hours("2009-02-13T23:31:30Z", zone), Ok(23), "{zone:?}");
        }
    }

    #[test]
    fn unknown_zones_fail_as_go_does() {
        let at = timestamp("2009-02-13T23:31:30Z");
        let cases = [
            ("America/Nowhere", "unknown time zone America/Nowhere"),
            // Go opens a file of that name: case matters.
            ("america/new_york", "unknown time zone america/new_york"),
            ("utc", "unknown time zone utc"),
            ("Etc/Unknown", "unknown time zone Etc/Unknown"),
            ("../etc/passwd", "time: invalid location name"),
            ("America/../UTC", "time: invalid location name"),
            ("/etc", "time: invalid location name"),
            ("\\UTC", "time: invalid location name"),
        ];
        for (zone, message) in cases {
            assert_eq!(error_text(at.civil_in(zone)), message, "{zone:?}");
        }
    }
}
