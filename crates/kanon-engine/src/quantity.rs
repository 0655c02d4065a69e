//! Kubernetes resource quantities (`500m`, `1.5Gi`, `2e3`), exact: parsed into integer
//! nano-units, compared by value, scaled by decimal factors and written back in canonical
//! form, so that `500m × 0.25` is `125m` and never a rounded float.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

/// Nano-units per unit.
const NANO: i128 = 1_000_000_000;
/// The largest magnitude of a quantity, in nano-units (10^21 units, far above any resource):
/// parsed and scaled quantities stay within it, so that rounding never overflows and every
/// quantity's canonical form reads back.
const MAX_NANOS: u128 = 10u128.pow(30);

/// How a quantity is written, which its canonical form keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuantityFormat {
    /// Decimal SI suffixes: `n u m "" k M G T P E`.
    DecimalSi,
    /// Binary SI suffixes: `Ki Mi Gi Ti Pi Ei`.
    BinarySi,
    /// Decimal exponent: `1e3`, `5E-3`.
    DecimalExponent,
}

/// A resource quantity.
#[derive(Clone, Copy, Debug)]
pub struct Quantity {
    nanos: i128,
    format: QuantityFormat,
}

/// A string that is not a quantity.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{text}` is not a Kubernetes quantity: {reason}")]
pub struct QuantityError {
    text: String,
    reason: &'static str,
}

/// A decimal number, exact: `digits × 10^-scale`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decimal {
    digits: i128,
    scale: u32,
}

impl Decimal {
    /// Parses `1`, `-0.25`, `+3.5`; no exponent, at most 18 fractional digits, and no more
    /// digits in all than an `i128` holds (the canonical form of the largest quantity has 31).
    pub fn parse(text: &str) -> Option<Decimal> {
        let (negative, rest) = match text.as_bytes().first() {
            Some(b'-') => (true, &text[1..]),
            Some(b'+') => (false, &text[1..]),
            _ => (false, text),
        };
        // One pass: digits with at most one dot among them.
        let (mut digits, mut count, mut scale, mut dot) = (0i128, 0usize, 0u32, false);
        for &b in rest.as_bytes() {
            match b {
                b'0'..=b'9' => {
                    digits = digits.checked_mul(10)?.checked_add(i128::from(b - b'0'))?;
                    count += 1;
                    scale += u32::from(dot);
                }
                b'.' if !dot => dot = true,
                _ => return None,
            }
        }
        if count == 0 || scale > 18 {
            return None;
        }
        Some(Decimal {
            digits: if negative { -digits } else { digits },
            scale,
        })
    }

    /// The value as a float (for display and loose arithmetic only).
    pub fn to_f64(self) -> f64 {
        self.digits as f64 / 10f64.powi(self.scale as i32)
    }

    /// Whether `0 < self < 1`.
    pub fn is_proper_fraction(self) -> bool {
        self.digits > 0 && self.digits < 10i128.pow(self.scale)
    }
}

/// Powers of ten an i128 holds (10^0 to 10^38), looked up rather than multiplied out.
const POWERS_OF_TEN: [i128; 39] = {
    let mut powers = [1i128; 39];
    let mut i = 1;
    while i < powers.len() {
        powers[i] = powers[i - 1] * 10;
        i += 1;
    }
    powers
};

/// 10^`exp`, `None` beyond what an i128 holds.
fn power_of_ten(exp: u32) -> Option<i128> {
    POWERS_OF_TEN.get(exp as usize).copied()
}

/// `a / b` and `a % b`, in i64 arithmetic when both fit one: most quantities do, and an i64
/// division is a machine instruction where an i128's is a library call.
fn div_rem(a: i128, b: i128) -> (i128, i128) {
    match (i64::try_from(a), i64::try_from(b)) {
        // `i64::MIN / -1` overflows an i64.
        (Ok(x), Ok(y)) if y != -1 => (i128::from(x / y), i128::from(x % y)),
        _ => (a / b, a % b),
    }
}

/// Divides rounding toward positive infinity, as Kubernetes rounds quantities up.
fn div_ceil(a: i128, b: i128) -> i128 {
    let (q, r) = div_rem(a, b);
    if r != 0 && ((a > 0) == (b > 0)) {
        q + 1
    } else {
        q
    }
}

impl FromStr for Quantity {
    type Err = QuantityError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let err = |reason| QuantityError {
            text: text.to_string(),
            reason,
        };
        // Quantities seldom carry whitespace: trimmed (Unicode) only when an end is not a
        // visible ASCII character.
        let trimmed = match (text.as_bytes().first(), text.as_bytes().last()) {
            (Some(a), Some(z)) if a.is_ascii_graphic() && z.is_ascii_graphic() => text,
            _ => text.trim(),
        };
        if trimmed.is_empty() {
            return Err(err("it is empty"));
        }
        // Split the number from the suffix: the number is sign, digits and one dot.
        let bytes = trimmed.as_bytes();
        let mut end = 0;
        if matches!(bytes.first(), Some(b'+' | b'-')) {
            end = 1;
        }
        while end < bytes.len() && (bytes[end].is_ascii_digit() || bytes[end] == b'.') {
            end += 1;
        }
        let (number, suffix) = trimmed.split_at(end);
        let number = Decimal::parse(number).ok_or_else(|| err("the number is malformed"))?;
        // value = digits × 10^-scale × 10^exp10 × 1024^exp2
        let (exp10, exp2, format): (i32, u32, QuantityFormat) = match suffix {
            "" => (0, 0, QuantityFormat::DecimalSi),
            "n" => (-9, 0, QuantityFormat::DecimalSi),
            "u" => (-6, 0, QuantityFormat::DecimalSi),
            "m" => (-3, 0, QuantityFormat::DecimalSi),
            "k" => (3, 0, QuantityFormat::DecimalSi),
            "M" => (6, 0, QuantityFormat::DecimalSi),
            "G" => (9, 0, QuantityFormat::DecimalSi),
            "T" => (12, 0, QuantityFormat::DecimalSi),
            "P" => (15, 0, QuantityFormat::DecimalSi),
            "E" => (18, 0, QuantityFormat::DecimalSi),
            "Ki" => (0, 1, QuantityFormat::BinarySi),
            "Mi" => (0, 2, QuantityFormat::BinarySi),
            "Gi" => (0, 3, QuantityFormat::BinarySi),
            "Ti" => (0, 4, QuantityFormat::BinarySi),
            "Pi" => (0, 5, QuantityFormat::BinarySi),
            "Ei" => (0, 6, QuantityFormat::BinarySi),
            s if s.starts_with(['e', 'E']) => {
                let exp: i32 = s[1..]
                    .parse()
                    .map_err(|_| err("the suffix is not a unit or an exponent"))?;
                if !(-30..=30).contains(&exp) {
                    return Err(err("the exponent is out of range"));
                }
                (exp, 0, QuantityFormat::DecimalExponent)
            }
            _ => {
                return Err(err(
                    "unknown suffix (use n, u, m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei or an exponent)",
                ));
            }
        };
        let overflow = || err("the value is too large");
        let mut value = number
            .digits
            .checked_mul(1i128 << (10 * exp2))
            .ok_or_else(overflow)?;
        // Scale to nano-units: × 10^(9 + exp10 - scale), rounding up below a nano-unit.
        let shift = 9 + exp10 - number.scale as i32;
        if shift >= 0 {
            value = value
                .checked_mul(power_of_ten(shift as u32).ok_or_else(overflow)?)
                .ok_or_else(overflow)?;
        } else {
            value = div_ceil(value, power_of_ten((-shift) as u32).ok_or_else(overflow)?);
        }
        if value.unsigned_abs() > MAX_NANOS {
            return Err(overflow());
        }
        Ok(Quantity {
            nanos: value,
            format,
        })
    }
}

impl PartialEq for Quantity {
    fn eq(&self, other: &Self) -> bool {
        self.nanos == other.nanos
    }
}

impl Eq for Quantity {}

impl PartialOrd for Quantity {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Quantity {
    fn cmp(&self, other: &Self) -> Ordering {
        self.nanos.cmp(&other.nanos)
    }
}

impl Quantity {
    /// The quantity × `factor`, rounded up to a nano-unit, in the same format; `None` when
    /// the result is larger than any quantity can be (as parsing refuses it).
    pub fn scaled(self, factor: Decimal) -> Option<Quantity> {
        let product = self.nanos.checked_mul(factor.digits)?;
        let nanos = div_ceil(product, power_of_ten(factor.scale)?);
        (nanos.unsigned_abs() <= MAX_NANOS).then_some(Quantity {
            nanos,
            format: self.format,
        })
    }

    /// The quantity rounded up to a multiple of `unit_nanos` nano-units (`1_000_000` for
    /// millicores, `1_000_000_000` for whole units such as bytes; positive).
    pub fn rounded_up(self, unit_nanos: i128) -> Quantity {
        Quantity {
            nanos: div_ceil(self.nanos, unit_nanos) * unit_nanos,
            format: self.format,
        }
    }

    /// The quantity rounded to a multiple of `unit_nanos` away from zero, as apimachinery's
    /// `RoundUp` rounds (`-1.5m` to millis is `-2m`); in the same format.
    pub fn rounded_away_from_zero(self, unit_nanos: i128) -> Quantity {
        let magnitude = div_ceil(self.nanos.abs(), unit_nanos) * unit_nanos;
        Quantity {
            nanos: if self.nanos < 0 {
                -magnitude
            } else {
                magnitude
            },
            format: self.format,
        }
    }

    /// The sum, in this quantity's format (apimachinery's `Add` keeps the receiver's); `None`
    /// when it is larger than any quantity can be.
    pub fn plus(self, other: Quantity) -> Option<Quantity> {
        let nanos = self.nanos.checked_add(other.nanos)?;
        (nanos.unsigned_abs() <= MAX_NANOS).then_some(Quantity {
            nanos,
            format: self.format,
        })
    }

    /// The value as a float (units, e.g. cores or bytes); exact for the usual sizes.
    pub fn to_f64(self) -> f64 {
        self.nanos as f64 / NANO as f64
    }

    /// The value in nano-units.
    pub fn nanos(self) -> i128 {
        self.nanos
    }

    /// The format the quantity was written in.
    pub fn format(self) -> QuantityFormat {
        self.format
    }
}

impl Quantity {
    /// The canonical form's parts: the integer mantissa and what follows it (a suffix, or an
    /// exponent for the decimal exponent format).
    fn canonical(self) -> (i128, Tail) {
        let nanos = self.nanos;
        if nanos == 0 {
            return (0, Tail::Suffix(""));
        }
        let whole = match div_rem(nanos, NANO) {
            (units, 0) => Some(units),
            _ => None,
        };
        if let (QuantityFormat::BinarySi, Some(units)) = (self.format, whole)
            && units.abs() >= 1024
        {
            let suffixes = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
            let mut mantissa = units;
            let mut k = 0;
            while k < 6 && mantissa % 1024 == 0 {
                mantissa /= 1024;
                k += 1;
            }
            return (mantissa, Tail::Suffix(suffixes[k]));
        }
        // Decimal: largest power of 1000 (from nano) dividing the value.
        let (mut mantissa, mut exp) = (nanos, -9);
        while exp < 18 {
            let (q, r) = div_rem(mantissa, 1000);
            if r != 0 {
                break;
            }
            mantissa = q;
            exp += 3;
        }
        if self.format == QuantityFormat::DecimalExponent {
            return (mantissa, Tail::Exponent(exp));
        }
        let suffix = match exp {
            -9 => "n",
            -6 => "u",
            -3 => "m",
            0 => "",
            3 => "k",
            6 => "M",
            9 => "G",
            12 => "T",
            15 => "P",
            _ => "E",
        };
        (mantissa, Tail::Suffix(suffix))
    }
}

/// What follows the mantissa of a canonical form.
enum Tail {
    Suffix(&'static str),
    Exponent(i32),
}

/// `value` in decimal digits, written into `buffer` (an i128 has at most 40 characters).
fn integer_text(value: i128, buffer: &mut [u8; 40]) -> &str {
    let mut at = buffer.len();
    let mut rest = value.unsigned_abs();
    // The digits above 64 bits with u128 division (a library call per digit), the rest in u64.
    while rest > u128::from(u64::MAX) {
        at -= 1;
        buffer[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
    }
    let mut rest = rest as u64;
    loop {
        at -= 1;
        // A digit: always ASCII.
        buffer[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    if value < 0 {
        at -= 1;
        buffer[at] = b'-';
    }
    std::str::from_utf8(&buffer[at..]).unwrap_or("0")
}

impl Quantity {
    /// The canonical form as a new string: what `to_string` gives, built in one allocation
    /// without the formatting machinery (requests are written this way on the request path).
    pub fn canonical_text(self) -> String {
        let (mantissa, tail) = self.canonical();
        let mut buffer = [0; 40];
        let mut text = String::with_capacity(24);
        text.push_str(integer_text(mantissa, &mut buffer));
        match tail {
            Tail::Suffix(suffix) => text.push_str(suffix),
            Tail::Exponent(0) => {}
            Tail::Exponent(exp) => {
                text.push('e');
                text.push_str(integer_text(i128::from(exp), &mut buffer));
            }
        }
        text
    }
}

impl fmt::Display for Quantity {
    /// The canonical form Kubernetes writes: the largest suffix that keeps an integer mantissa
    /// (binary suffixes only for whole multiples of 1024, decimal below that).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.canonical_text())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        s.parse().unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn parses_and_writes_canonical_forms() {
        for (input, canonical) in [
            ("500m", "500m"),
            ("0.5", "500m"),
            ("1", "1"),
            ("1000m", "1"),
            ("1500m", "1500m"),
            ("2k", "2k"),
            ("1Gi", "1Gi"),
            ("1024Mi", "1Gi"),
            ("1.5Gi", "1536Mi"),
            ("512", "512"),
            ("1e3", "1e3"),
            ("100n", "100n"),
            ("-2", "-2"),
            ("0", "0"),
            ("+7", "7"),
            ("129M", "129M"),
            ("4096Gi", "4Ti"),
            // Around the largest i64 of nano-units, where the decimal form leaves i64 arithmetic.
            ("9223372036854775807n", "9223372036854775807n"),
            ("9223372036854775808n", "9223372036854775808n"),
            ("-9223372036854775808n", "-9223372036854775808n"),
            ("-9223372036854775809n", "-9223372036854775809n"),
            ("9223372036854775808000n", "9223372036854775808u"),
            ("123456789012345678k", "123456789012345678k"),
            ("1e0", "1"),
            ("5e-3", "5e-3"),
            ("-1500e6", "-1500e6"),
        ] {
            assert_eq!(q(input).to_string(), canonical, "{input}");
            assert_eq!(q(input).canonical_text(), canonical, "{input}");
        }
    }

    #[test]
    fn compares_by_value_across_units() {
        assert_eq!(q("1"), q("1000m"));
        assert!(q("1Gi") > q("1G"));
        assert!(q("500m") < q("1"));
        assert_eq!(q("1Ki"), q("1024"));
        assert!(q("2e3") == q("2k"));
    }

    #[test]
    fn scales_exactly() {
        let d = |s| Decimal::parse(s).unwrap();
        assert_eq!(q("500m").scaled(d("0.25")).unwrap().to_string(), "125m");
        assert_eq!(q("1").scaled(d("0.5")).unwrap().to_string(), "500m");
        assert_eq!(q("1Gi").scaled(d("0.5")).unwrap().to_string(), "512Mi");
        assert_eq!(q("100Mi").scaled(d("0.33")).unwrap().to_string(), "33Mi");
        assert_eq!(q("1Mi").scaled(d("0.3")).unwrap().to_string(), "314572800m");
        assert_eq!(q("3").scaled(d("0.333333333333")).unwrap().to_string(), "1");
        assert_eq!(q("1Ki").scaled(d("0.1")).unwrap().to_string(), "102400m");
    }

    #[test]
    fn rounds_up_to_a_unit() {
        assert_eq!(q("2100u").rounded_up(1_000_000).to_string(), "3m");
        assert_eq!(q("322122547200m").rounded_up(NANO).to_string(), "322122548");
        assert_eq!(q("125m").rounded_up(1_000_000).to_string(), "125m");
    }

    #[test]
    fn rejects_malformed_quantities() {
        for bad in ["", "abc", "1.2.3", "1Qi", "--1", "1e99", "m", "1 Gi"] {
            assert!(bad.parse::<Quantity>().is_err(), "{bad}");
        }
        let e = "12x".parse::<Quantity>().unwrap_err().to_string();
        assert!(
            e.starts_with("`12x` is not a Kubernetes quantity: unknown suffix"),
            "{e}"
        );
    }

    #[test]
    fn decimals() {
        assert!(Decimal::parse("0.5").unwrap().is_proper_fraction());
        assert!(!Decimal::parse("1").unwrap().is_proper_fraction());
        assert!(!Decimal::parse("0").unwrap().is_proper_fraction());
        assert!(!Decimal::parse("1.5").unwrap().is_proper_fraction());
        assert_eq!(Decimal::parse("x"), None);
        assert_eq!(Decimal::parse("."), None);
        let d = |digits, scale| Some(Decimal { digits, scale });
        for (text, expected) in [
            ("1.", d(1, 0)),
            (".5", d(5, 1)),
            ("-0.25", d(-25, 2)),
            ("+3.50", d(350, 2)),
            ("007", d(7, 0)),
            ("0.123456789012345678", d(123_456_789_012_345_678, 18)),
            ("0.1234567890123456789", None),
            ("170141183460469231731687303715884105727", d(i128::MAX, 0)),
            ("170141183460469231731687303715884105728", None),
            ("1.2.3", None),
            ("1e3", None),
            ("", None),
            ("+", None),
            ("-", None),
            ("-.", None),
            (" 1", None),
            ("1,5", None),
        ] {
            assert_eq!(Decimal::parse(text), expected, "{text:?}");
        }
    }
}
