//! Kubernetes' quantity library: `quantity(string)`, `isQuantity`, `sign`, `isInteger`,
//! `asInteger`, `asApproximateFloat`, `add`, `sub`, `compareTo`, `isGreaterThan`, `isLessThan`,
//! over quantities parsed as k8s.io/apimachinery's `resource.ParseQuantity` parses them.
//!
//! A quantity is a `kubernetes.Quantity` object holding its exact value (canonical, so that `==`
//! is Kubernetes' `Cmp(...) == 0`) and, in a field that never makes two quantities unequal, which
//! of apimachinery's representations it has: `asInteger` works only on an int64 amount with a
//! non-negative scale, so `quantity("1000m").isInteger()` is false although the value is 1.

use std::cmp::Ordering;

use crate::env::Env;
use crate::error::EvalError;
use crate::function::{Ctx, no_overload};
use crate::value::{HELD_BY_POINTER, Value};

use super::{
    QUANTITY_TYPE, STRING_TRAVERSAL, actual_size, canonical, hidden, opaque_with, scaled_cost,
    string_arg,
};

const FORMAT_WRONG: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";
const SUFFIX_WRONG: &str = "unable to parse quantity's suffix";
/// The hidden field recording the representation.
const FORM: &str = "#form";
/// apimachinery's scale of the value ([`Quantity::scale`]): bookkeeping, not compared.
const SCALE: &str = "@scale";
/// Longest digit string an addition may build; apimachinery would compute it (slowly, in
/// memory), we refuse.
const MAX_DIGITS: usize = 100_000;

/// apimachinery's representations, as far as they can be observed from CEL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// An int64 amount with a scale ≥ 0: `asInteger` works if the value fits.
    Integer,
    /// An int64 amount with a negative scale (`1000m`, `1.0`).
    Scaled,
    /// An arbitrary-precision decimal (`inf.Dec`).
    Decimal,
}

/// An exact decimal: `digits × 10^exponent`, digits most significant first, without leading or
/// trailing zeros (zero has no digits).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decimal {
    pub negative: bool,
    pub digits: Vec<u8>,
    pub exponent: i64,
}

impl Decimal {
    fn zero() -> Decimal {
        Decimal {
            negative: false,
            digits: Vec::new(),
            exponent: 0,
        }
    }

    fn from_i64(value: i64) -> Decimal {
        let mut decimal = Decimal {
            negative: value < 0,
            digits: value
                .unsigned_abs()
                .to_string()
                .bytes()
                .map(|digit| digit - b'0')
                .collect(),
            exponent: 0,
        };
        decimal.normalize();
        decimal
    }

    fn normalize(&mut self) {
        let leading = self.digits.iter().take_while(|digit| **digit == 0).count();
        self.digits.drain(..leading);
        while self.digits.last() == Some(&0) {
            self.digits.pop();
            self.exponent += 1;
        }
        if self.digits.is_empty() {
            self.negative = false;
            self.exponent = 0;
        }
    }

    pub fn sign(&self) -> i64 {
        if self.digits.is_empty() {
            0
        } else if self.negative {
            -1
        } else {
            1
        }
    }

    /// The order of the magnitudes.
    fn cmp_magnitude(&self, other: &Decimal) -> Ordering {
        match (self.digits.is_empty(), other.digits.is_empty()) {
            (true, true) => return Ordering::Equal,
            (true, false) => return Ordering::Less,
            (false, true) => return Ordering::Greater,
            _ => {}
        }
        let top = |decimal: &Decimal| decimal.digits.len() as i128 + i128::from(decimal.exponent);
        top(self).cmp(&top(other)).then_with(|| {
            let length = self.digits.len().max(other.digits.len());
            (0..length)
                .map(|index| {
                    (
                        self.digits.get(index).copied().unwrap_or(0),
                        other.digits.get(index).copied().unwrap_or(0),
                    )
                })
                .map(|(a, b)| a.cmp(&b))
                .find(|order| *order != Ordering::Equal)
                .unwrap_or(Ordering::Equal)
        })
    }

    pub fn compare(&self, other: &Decimal) -> Ordering {
        match self.sign().cmp(&other.sign()) {
            Ordering::Equal if self.negative => other.cmp_magnitude(self),
            Ordering::Equal => self.cmp_magnitude(other),
            order => order,
        }
    }

    /// Both magnitudes as digit vectors at the smaller exponent.
    fn aligned(&self, other: &Decimal) -> Result<(Vec<u8>, Vec<u8>, i64), EvalError> {
        let exponent = self.exponent.min(other.exponent);
        let width = |decimal: &Decimal| {
            decimal.digits.len() as i128 + i128::from(decimal.exponent - exponent)
        };
        let longest = width(self).max(width(other));
        if longest > MAX_DIGITS as i128 {
            return Err(EvalError::Invalid(
                "quantity arithmetic exceeds the supported precision".to_owned(),
            ));
        }
        let pad = |decimal: &Decimal| {
            let mut digits = decimal.digits.clone();
            digits.resize(digits.len() + (decimal.exponent - exponent) as usize, 0);
            digits
        };
        Ok((pad(self), pad(other), exponent))
    }

    pub fn add(&self, other: &Decimal) -> Result<Decimal, EvalError> {
        if other.digits.is_empty() {
            return Ok(self.clone());
        }
        if self.digits.is_empty() {
            return Ok(other.clone());
        }
        let (a, b, exponent) = self.aligned(other)?;
        let mut result = if self.negative == other.negative {
            Decimal {
                negative: self.negative,
                digits: add_digits(&a, &b),
                exponent,
            }
        } else {
            match self.cmp_magnitude(other) {
                Ordering::Equal => return Ok(Decimal::zero()),
                Ordering::Greater => Decimal {
                    negative: self.negative,
                    digits: subtract_digits(&a, &b),
                    exponent,
                },
                Ordering::Less => Decimal {
                    negative: other.negative,
                    digits: subtract_digits(&b, &a),
                    exponent,
                },
            }
        };
        result.normalize();
        Ok(result)
    }

    pub fn negated(&self) -> Decimal {
        let mut negated = self.clone();
        negated.negative = !negated.negative && !negated.digits.is_empty();
        negated
    }

    /// The value as an int64, if it is an integer in range.
    pub fn to_i64(&self) -> Option<i64> {
        if self.digits.is_empty() {
            return Some(0);
        }
        if self.exponent < 0 || self.digits.len() as i64 + self.exponent > 19 {
            return None;
        }
        let mut magnitude: i128 = 0;
        for digit in &self.digits {
            magnitude = magnitude * 10 + i128::from(*digit);
        }
        for _ in 0..self.exponent {
            magnitude *= 10;
        }
        i64::try_from(if self.negative { -magnitude } else { magnitude }).ok()
    }

    pub fn to_f64(&self) -> f64 {
        if self.digits.is_empty() {
            return 0.0;
        }
        let digits: String = self
            .digits
            .iter()
            .map(|digit| char::from(b'0' + digit))
            .collect();
        let sign = if self.negative { "-" } else { "" };
        format!("{sign}{digits}e{}", self.exponent)
            .parse()
            .unwrap_or(f64::NAN)
    }

    /// Multiplies the magnitude by 2^power (binary suffixes with a fraction).
    fn times_power_of_two(&mut self, power: u32) {
        for _ in 0..power {
            let mut carry = 0;
            for digit in self.digits.iter_mut().rev() {
                let doubled = *digit * 2 + carry;
                *digit = doubled % 10;
                carry = doubled / 10;
            }
            if carry > 0 {
                self.digits.insert(0, carry);
            }
        }
        self.normalize();
    }

    /// Rounds away from zero to nine decimal places (apimachinery's `RoundUp` to nano).
    fn round_up_to_nano(&mut self) {
        if self.digits.is_empty() || self.exponent >= -9 {
            return;
        }
        let keep = self.digits.len() as i64 + self.exponent + 9;
        let dropped_nonzero;
        if keep <= 0 {
            dropped_nonzero = true;
            self.digits.clear();
        } else {
            dropped_nonzero = self.digits[keep as usize..].iter().any(|digit| *digit != 0);
            self.digits.truncate(keep as usize);
        }
        self.exponent = -9;
        if dropped_nonzero {
            let one = Decimal {
                negative: false,
                digits: vec![1],
                exponent: -9,
            };
            let magnitude = Decimal {
                negative: false,
                digits: std::mem::take(&mut self.digits),
                exponent: -9,
            };
            let mut sum = magnitude;
            sum.normalize();
            // Adding one nano to a magnitude below 10^MAX_DIGITS cannot fail.
            if let Ok(rounded) = sum.add(&one) {
                self.digits = rounded.digits;
                self.exponent = rounded.exponent;
            }
        }
        self.normalize();
    }
}

impl std::fmt::Display for Decimal {
    /// `[-]digitsEexponent`: one text per value.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.negative {
            f.write_str("-")?;
        }
        if self.digits.is_empty() {
            return f.write_str("0");
        }
        for digit in &self.digits {
            write!(f, "{digit}")?;
        }
        write!(f, "e{}", self.exponent)
    }
}

fn add_digits(a: &[u8], b: &[u8]) -> Vec<u8> {
    let length = a.len().max(b.len());
    let mut sum = Vec::with_capacity(length + 1);
    let mut carry = 0;
    for index in 0..length {
        let x = if index < a.len() {
            a[a.len() - 1 - index]
        } else {
            0
        };
        let y = if index < b.len() {
            b[b.len() - 1 - index]
        } else {
            0
        };
        let total = x + y + carry;
        sum.push(total % 10);
        carry = total / 10;
    }
    if carry > 0 {
        sum.push(carry);
    }
    sum.reverse();
    sum
}

/// `a - b` for magnitudes with `a ≥ b`.
fn subtract_digits(a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut difference = Vec::with_capacity(a.len());
    let mut borrow = 0i8;
    for index in 0..a.len() {
        let x = a[a.len() - 1 - index] as i8;
        let y = if index < b.len() {
            b[b.len() - 1 - index] as i8
        } else {
            0
        };
        let mut value = x - y - borrow;
        borrow = 0;
        if value < 0 {
            value += 10;
            borrow = 1;
        }
        difference.push(value as u8);
    }
    difference.reverse();
    difference
}

/// A quantity: its exact value and its representation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quantity {
    pub value: Decimal,
    pub form: Form,
    /// The power of ten apimachinery holds the value at (`value = unscaled × 10^scale`): an
    /// int64 amount's scale, or minus an `inf.Dec`'s. `asApproximateFloat` computes from it.
    pub scale: i64,
}

/// apimachinery's `parseQuantityString`: sign, digits, fraction, suffix.
fn split_quantity(text: &str) -> Result<(bool, &str, &str, &str), &'static str> {
    let bytes = text.as_bytes();
    let end = bytes.len();
    let mut position = 0;
    let mut positive = true;
    if let Some(first) = bytes.first() {
        if *first == b'-' {
            positive = false;
            position += 1;
        } else if *first == b'+' {
            position += 1;
        }
    }
    while position < end && bytes[position] == b'0' {
        position += 1;
    }
    if position >= end {
        return Ok((positive, "0", "", ""));
    }
    let start = position;
    while position < end && bytes[position].is_ascii_digit() {
        position += 1;
    }
    let mut whole = &text[start..position];
    if whole.is_empty() {
        whole = "0";
    }
    let mut fraction = "";
    if position < end && bytes[position] == b'.' {
        position += 1;
        let start = position;
        while position < end && bytes[position].is_ascii_digit() {
            position += 1;
        }
        fraction = &text[start..position];
    }
    let suffix_start = position;
    while position < end && b"eEinumkKMGTP".contains(&bytes[position]) {
        position += 1;
    }
    if position < end && matches!(bytes[position], b'-' | b'+') {
        position += 1;
    }
    while position < end && bytes[position].is_ascii_digit() {
        position += 1;
    }
    if position < end {
        return Err(FORMAT_WRONG);
    }
    Ok((positive, whole, fraction, &text[suffix_start..]))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Format {
    DecimalSI,
    BinarySI,
    DecimalExponent,
}

/// apimachinery's suffixes: (base, exponent, format).
fn interpret_suffix(suffix: &str) -> Option<(u32, i32, Format)> {
    let decimal = |exponent| Some((10, exponent, Format::DecimalSI));
    let binary = |exponent| Some((2, exponent, Format::BinarySI));
    match suffix {
        "" => decimal(0),
        "n" => decimal(-9),
        "u" => decimal(-6),
        "m" => decimal(-3),
        "k" => decimal(3),
        "M" => decimal(6),
        "G" => decimal(9),
        "T" => decimal(12),
        "P" => decimal(15),
        "E" => decimal(18),
        "Ki" => binary(10),
        "Mi" => binary(20),
        "Gi" => binary(30),
        "Ti" => binary(40),
        "Pi" => binary(50),
        "Ei" => binary(60),
        _ if suffix.len() > 1 && (suffix.starts_with('e') || suffix.starts_with('E')) => {
            // Go parses an int64 and keeps its low 32 bits.
            suffix[1..]
                .parse::<i64>()
                .ok()
                .map(|exponent| (10, exponent as i32, Format::DecimalExponent))
        }
        _ => None,
    }
}

/// apimachinery's `ParseQuantity`, with its error texts.
pub fn parse(text: &str) -> Result<Quantity, String> {
    if text.is_empty() {
        return Err(FORMAT_WRONG.to_owned());
    }
    let (positive, whole, fraction, suffix) = split_quantity(text).map_err(str::to_owned)?;
    let (base, exponent, format) =
        interpret_suffix(suffix).ok_or_else(|| SUFFIX_WRONG.to_owned())?;
    let mut value = Decimal {
        negative: !positive,
        digits: whole
            .bytes()
            .chain(fraction.bytes())
            .map(|digit| digit - b'0')
            .collect(),
        exponent: -(fraction.len() as i64),
    };
    value.normalize();

    // apimachinery's fast path: an int64 amount when the digits fit and the scale is ≥ nano.
    let digit_count = (whole.len() + fraction.len()) as i64;
    let (precision, scale, mantissa): (i64, i64, i64) = match format {
        Format::DecimalSI | Format::DecimalExponent => (
            18 - digit_count,
            i64::from(exponent) - fraction.len() as i64,
            1,
        ),
        Format::BinarySI if exponent >= 0 && fraction.is_empty() => {
            let precision = 15 - whole.len() as i64 - (exponent as f32 * 3.0 / 10.0) as i64 - 1;
            (precision, 0, 1i64 << exponent)
        }
        Format::BinarySI => (-1, 0, 1),
    };
    if precision >= 0 && scale >= -9 {
        let shifted: String = whole.chars().chain(fraction.chars()).collect();
        if let Ok(amount) = shifted.parse::<i64>()
            && amount.checked_mul(mantissa).is_some()
        {
            if base == 2 {
                value.times_power_of_two(exponent as u32);
            } else {
                value.exponent += i64::from(exponent);
                value.normalize();
            }
            let form = if scale >= 0 {
                Form::Integer
            } else {
                Form::Scaled
            };
            return Ok(Quantity { value, form, scale });
        }
    }

    if base == 10 {
        value.exponent += i64::from(exponent);
        value.normalize();
    } else {
        value.times_power_of_two(exponent.max(0) as u32);
    }
    // apimachinery rounds a non-zero amount up to nano, which sets its scale to nano; a zero
    // keeps the scale it was written with.
    let mut scale = if value.digits.is_empty() {
        let written = -(fraction.len() as i64);
        if base == 10 {
            written + i64::from(exponent)
        } else {
            written
        }
    } else {
        -9
    };
    value.round_up_to_nano();
    if format == Format::BinarySI
        && value.cmp_magnitude(&Decimal::from_i64(i64::MAX)) == Ordering::Greater
    {
        let negative = value.negative;
        value = Decimal::from_i64(i64::MAX);
        value.negative = negative;
        scale = 0;
    }
    Ok(Quantity {
        value,
        form: Form::Decimal,
        scale,
    })
}

impl Quantity {
    fn from_i64(value: i64) -> Quantity {
        Quantity {
            value: Decimal::from_i64(value),
            form: Form::Integer,
            scale: 0,
        }
    }

    /// apimachinery's `Add`: int64 amounts stay so (at the smaller scale) unless the sum
    /// overflows; anything else becomes a decimal.
    pub fn add(&self, other: &Quantity) -> Result<Quantity, EvalError> {
        let value = self.value.add(&other.value)?;
        let form = match (self.form, other.form) {
            (Form::Decimal, _) | (_, Form::Decimal) => Form::Decimal,
            _ if other.value.digits.is_empty() => self.form,
            _ if self.value.digits.is_empty() => other.form,
            // An int64 step that overflows (scaling either amount, or the sum) makes it an
            // `inf.Dec`, which it then stays: `asInteger` refuses it, `isInteger` is false.
            _ if !other
                .unscaled()
                .is_some_and(|amount| self.int64_sum_fits(amount, other.scale)) =>
            {
                Form::Decimal
            }
            (Form::Integer, Form::Integer) => Form::Integer,
            _ => Form::Scaled,
        };
        // An int64 amount added to zero (or zero added to it) keeps its scale; otherwise the
        // result is at the finer of the two, for int64 amounts and `inf.Dec` alike.
        let decimal = self.form == Form::Decimal || other.form == Form::Decimal;
        let scale = match () {
            _ if !decimal && other.value.digits.is_empty() => self.scale,
            _ if !decimal && self.value.digits.is_empty() => other.scale,
            _ => self.scale.min(other.scale),
        };
        Ok(Quantity { value, form, scale })
    }

    pub fn sub(&self, other: &Quantity) -> Result<Quantity, EvalError> {
        // apimachinery subtracts int64 amounts by adding the negated amount, and Go's negation
        // of the least int64 is itself: `quantity('0').sub(-9223372036854775808)` is that
        // least int64. Only where that sum overflows does it subtract exactly.
        let negated = Quantity {
            value: other.value.negated(),
            form: other.form,
            scale: other.scale,
        };
        if self.form != Form::Decimal
            && other.form != Form::Decimal
            && other.scale == 0
            && other.value.to_i64() == Some(i64::MIN)
        {
            if self.int64_sum_fits(i128::from(i64::MIN), 0) {
                return self.add(other);
            }
            // The int64 step overflowed: apimachinery subtracts exactly, as `inf.Dec`s.
            let mut exact = self.add(&negated)?;
            exact.form = Form::Decimal;
            exact.scale = self.scale.min(other.scale);
            return Ok(exact);
        }
        self.add(&negated)
    }

    /// The amount apimachinery holds unscaled (`value / 10^scale`), as signed decimal text:
    /// `None` where the value is not a whole number at its scale (no scale apimachinery holds).
    fn unscaled_text(&self) -> Option<String> {
        if self.value.digits.is_empty() {
            return Some("0".to_owned());
        }
        let shift = usize::try_from(self.value.exponent - self.scale).ok()?;
        let sign = if self.value.negative { "-" } else { "" };
        let digits: String = self
            .value
            .digits
            .iter()
            .map(|digit| char::from(b'0' + digit))
            .chain(std::iter::repeat_n('0', shift))
            .collect();
        Some(format!("{sign}{digits}"))
    }

    /// The unscaled amount as an integer, where it fits one.
    fn unscaled(&self) -> Option<i128> {
        self.unscaled_text()?.parse().ok()
    }

    /// Whether apimachinery's int64 `Add` of this amount and `other` (unscaled, at `scale`)
    /// stays an int64 amount: each step (bringing the coarser one to the finer scale, then the
    /// sum) must fit an int64, else it adds exactly as `inf.Dec`s.
    fn int64_sum_fits(&self, other: i128, scale: i64) -> bool {
        let Some(own) = self.unscaled() else {
            return false;
        };
        let fits = |value: i128| i64::try_from(value).is_ok();
        let scaled = |value: i128, by: i64| {
            u32::try_from(by)
                .ok()
                .and_then(|by| 10i128.checked_pow(by))
                .and_then(|factor| value.checked_mul(factor))
                .filter(|value| fits(*value))
        };
        if other == 0 || own == 0 {
            return true;
        }
        let (a, b) = match self.scale.cmp(&scale) {
            Ordering::Equal => (Some(own), Some(other)),
            Ordering::Greater => (scaled(own, self.scale - scale), Some(other)),
            Ordering::Less => (Some(own), scaled(other, scale - self.scale)),
        };
        matches!((a, b), (Some(a), Some(b)) if fits(a + b))
    }

    /// apimachinery's `AsApproximateFloat64`: the unscaled amount as a float times Go's
    /// `math.Pow10(scale)`, with the rounding of each step (`quantity('5.1')` is
    /// `5.1000000000000005`).
    pub fn approximate_float(&self) -> f64 {
        let Some(unscaled) = self.unscaled_text() else {
            // Not a scale apimachinery holds; the exact value is the best answer.
            return self.value.to_f64();
        };
        let base: f64 = unscaled.parse().unwrap_or(f64::NAN);
        if self.scale == 0 {
            base
        } else {
            base * go_pow10(self.scale)
        }
    }

    /// apimachinery's `AsInt64`.
    pub fn as_i64(&self) -> Option<i64> {
        match self.form {
            Form::Integer => self.value.to_i64(),
            Form::Scaled | Form::Decimal => None,
        }
    }
}

/// Go's `math.Pow10`: exact powers up to 1e22, then products (or quotients) of two table
/// entries, each step rounded as Go rounds it.
fn go_pow10(n: i64) -> f64 {
    const TABLE: [f64; 32] = [
        1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
        1e17, 1e18, 1e19, 1e20, 1e21, 1e22, 1e23, 1e24, 1e25, 1e26, 1e27, 1e28, 1e29, 1e30, 1e31,
    ];
    const POSITIVE_32: [f64; 10] = [
        1e0, 1e32, 1e64, 1e96, 1e128, 1e160, 1e192, 1e224, 1e256, 1e288,
    ];
    const NEGATIVE_32: [f64; 11] = [
        1e0, 1e-32, 1e-64, 1e-96, 1e-128, 1e-160, 1e-192, 1e-224, 1e-256, 1e-288, 1e-320,
    ];
    if (0..=308).contains(&n) {
        let n = n as usize;
        return POSITIVE_32[n / 32] * TABLE[n % 32];
    }
    if (-323..0).contains(&n) {
        let n = (-n) as usize;
        return NEGATIVE_32[n / 32] / TABLE[n % 32];
    }
    if n > 0 { f64::INFINITY } else { 0.0 }
}

/// A quantity as a CEL value; `by_pointer` for what `add` and `sub` make, which
/// kube-apiserver's library returns as pointers ([`HELD_BY_POINTER`]).
fn quantity_value<'a>(quantity: &Quantity, by_pointer: bool) -> Value<'a> {
    // Int, uint and double zeros are equal under CEL's `==`: the form never makes two
    // quantities unequal.
    let form = match quantity.form {
        Form::Integer => Value::Int(0),
        Form::Scaled => Value::Uint(0),
        Form::Decimal => Value::Double(0.0),
    };
    let mut fields = vec![
        (super::CANONICAL, Value::string(quantity.value.to_string())),
        (FORM, form),
        (SCALE, Value::Int(quantity.scale)),
    ];
    if by_pointer {
        fields.push((HELD_BY_POINTER, Value::Bool(true)));
    }
    opaque_with(QUANTITY_TYPE, fields)
}

fn parse_canonical(text: &str) -> Option<Decimal> {
    let (negative, rest) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    if rest == "0" {
        return Some(Decimal::zero());
    }
    let (digits, exponent) = rest.split_once('e')?;
    Some(Decimal {
        negative,
        digits: digits
            .bytes()
            .map(|digit| digit.wrapping_sub(b'0'))
            .collect(),
        exponent: exponent.parse().ok()?,
    })
}

fn quantity_of(value: &Value<'_>) -> Option<Quantity> {
    let decimal = parse_canonical(canonical(value, QUANTITY_TYPE)?)?;
    let form = match hidden(value, QUANTITY_TYPE, FORM)? {
        Value::Int(_) => Form::Integer,
        Value::Uint(_) => Form::Scaled,
        _ => Form::Decimal,
    };
    let scale = match hidden(value, QUANTITY_TYPE, SCALE) {
        Some(Value::Int(scale)) => *scale,
        _ => decimal.exponent.min(0),
    };
    Some(Quantity {
        value: decimal,
        form,
        scale,
    })
}

fn receiver(args: &[Value<'_>], function: &str) -> Result<Quantity, EvalError> {
    args.first()
        .and_then(quantity_of)
        .ok_or_else(|| no_overload(function, args))
}

fn operand(args: &[Value<'_>], function: &str) -> Result<Quantity, EvalError> {
    match args.get(1) {
        Some(Value::Int(value)) => Ok(Quantity::from_i64(*value)),
        Some(other) => quantity_of(other).ok_or_else(|| no_overload(function, args)),
        None => Err(no_overload(function, args)),
    }
}

pub(crate) fn install(env: &mut Env) {
    env.function(
        "string_to_quantity",
        "quantity(string) -> kubernetes.Quantity",
        |_, args| {
            let quantity = parse(string_arg("quantity", args, 0)?).map_err(EvalError::Invalid)?;
            Ok(quantity_value(&quantity, false))
        },
    );
    env.function(
        "is_quantity_string",
        "isQuantity(string) -> bool",
        |_, args| {
            Ok(Value::Bool(
                parse(string_arg("isQuantity", args, 0)?).is_ok(),
            ))
        },
    );
    for id in ["string_to_quantity", "is_quantity_string"] {
        env.set_name_cost(id, |args| {
            scaled_cost(actual_size(&args[0]), STRING_TRAVERSAL)
        });
    }
    // Declared as a global function, as Kubernetes declares it: `sign(q)`, not `q.sign()`.
    env.function(
        "quantity_sign",
        "sign(kubernetes.Quantity) -> int",
        |_, args| Ok(Value::Int(receiver(args, "sign")?.value.sign())),
    );
    env.method(
        "quantity_is_greater_than",
        "kubernetes.Quantity.isGreaterThan(kubernetes.Quantity) -> bool",
        |_, args| {
            compare(args, "isGreaterThan").map(|order| Value::Bool(order == Ordering::Greater))
        },
    );
    env.method(
        "quantity_is_less_than",
        "kubernetes.Quantity.isLessThan(kubernetes.Quantity) -> bool",
        |_, args| compare(args, "isLessThan").map(|order| Value::Bool(order == Ordering::Less)),
    );
    env.method(
        "quantity_compare_to",
        "kubernetes.Quantity.compareTo(kubernetes.Quantity) -> int",
        |_, args| compare(args, "compareTo").map(|order| Value::Int(order as i64)),
    );
    env.method(
        "quantity_get_float",
        "kubernetes.Quantity.asApproximateFloat() -> double",
        |_, args| {
            Ok(Value::Double(
                receiver(args, "asApproximateFloat")?.approximate_float(),
            ))
        },
    );
    env.method(
        "quantity_get_int",
        "kubernetes.Quantity.asInteger() -> int",
        |_, args| {
            receiver(args, "asInteger")?
                .as_i64()
                .map(Value::Int)
                .ok_or_else(|| EvalError::Invalid("cannot convert value to integer".to_owned()))
        },
    );
    env.method(
        "quantity_is_integer",
        "kubernetes.Quantity.isInteger() -> bool",
        |_, args| Ok(Value::Bool(receiver(args, "isInteger")?.as_i64().is_some())),
    );
    env.method(
        "quantity_add",
        "kubernetes.Quantity.add(kubernetes.Quantity) -> kubernetes.Quantity",
        add,
    );
    env.method(
        "quantity_add_int",
        "kubernetes.Quantity.add(int) -> kubernetes.Quantity",
        add,
    );
    env.method(
        "quantity_sub",
        "kubernetes.Quantity.sub(kubernetes.Quantity) -> kubernetes.Quantity",
        sub,
    );
    env.method(
        "quantity_sub_int",
        "kubernetes.Quantity.sub(int) -> kubernetes.Quantity",
        sub,
    );
}

fn compare(args: &[Value<'_>], function: &str) -> Result<Ordering, EvalError> {
    let a = receiver(args, function)?;
    let b = match args.get(1).and_then(quantity_of) {
        Some(b) => b,
        None => return Err(no_overload(function, args)),
    };
    Ok(a.value.compare(&b.value))
}

fn add<'a>(_: &mut Ctx<'_, '_>, args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    let sum = receiver(args, "add")?.add(&operand(args, "add")?)?;
    Ok(quantity_value(&sum, true))
}

fn sub<'a>(_: &mut Ctx<'_, '_>, args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    let difference = receiver(args, "sub")?.sub(&operand(args, "sub")?)?;
    Ok(quantity_value(&difference, true))
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    fn q(text: &str) -> Value<'static> {
        function("quantity", vec![s(text)]).unwrap_or_else(|error| panic!("{text}: {error}"))
    }

    #[test]
    fn parsing_follows_apimachinery() {
        assert_eq!(
            error_text(function("quantity", vec![s("10Mo")])),
            FORMAT_WRONG
        );
        assert_eq!(
            error_text(function("quantity", vec![s("10Mm")])),
            SUFFIX_WRONG
        );
        assert_eq!(error_text(function("quantity", vec![s("")])), FORMAT_WRONG);
        assert_eq!(
            error_text(function("quantity", vec![s(" 1")])),
            FORMAT_WRONG
        );
        assert_eq!(
            error_text(function("quantity", vec![s("1.5e")])),
            SUFFIX_WRONG
        );
        assert_eq!(
            error_text(function("quantity", vec![s("1ki")])),
            SUFFIX_WRONG
        );
        assert!(truth(function("isQuantity", vec![s("20")])));
        assert!(truth(function("isQuantity", vec![s("20M")])));
        assert!(truth(function("isQuantity", vec![s("20Mi")])));
        assert!(!truth(function("isQuantity", vec![s("20Mo")])));
        assert!(!truth(function("isQuantity", vec![s("10Mm")])));
        assert!(truth(function("isQuantity", vec![s(".5")])));
        assert!(truth(function("isQuantity", vec![s("5.")])));
        assert!(truth(function("isQuantity", vec![s("1e1000000000")])));
        assert_value(method("asInteger", vec![q("+5")]), Value::Int(5));
        assert_value(method("asInteger", vec![q("1Ki")]), Value::Int(1024));
        assert_value(method("asInteger", vec![q("1e3")]), Value::Int(1000));
        // Values below a nano round away from zero.
        assert!(q("0.1n").equals(&q("1n")));
        assert_value(
            method("asApproximateFloat", vec![q("-0.1n")]),
            Value::Double(-1e-9),
        );
        assert_value(
            method("asApproximateFloat", vec![q("8Ei")]),
            Value::Double(9.223372036854776e18),
        );
        assert_value(
            method("asApproximateFloat", vec![q("12E")]),
            Value::Double(1.2e19),
        );
    }

    #[test]
    fn kubernetes_quantity_cases() {
        // From kube-apiserver's quantity_test.go.
        assert!(q("200M").equals(&q("200M")));
        assert!(q("200M").equals(&q("0.2G")) && q("0.2G").equals(&q("200M")));
        assert!(q("2M").equals(&q("0.002G")) && q("2000k").equals(&q("2M")));
        assert!(!q("200M").equals(&q("0.3G")));
        assert!(truth(method("isLessThan", vec![q("50M"), q("50Mi")])));
        assert!(truth(method("isLessThan", vec![q("50M"), q("100M")])));
        assert!(!truth(method("isLessThan", vec![q("100M"), q("50M")])));
        assert!(truth(method("isGreaterThan", vec![q("50Mi"), q("50M")])));
        assert!(truth(method("isGreaterThan", vec![q("150Mi"), q("100Mi")])));
        assert!(!truth(method("isGreaterThan", vec![q("50M"), q("100M")])));
        assert_value(
            method("compareTo", vec![q("200M"), q("0.2G")]),
            Value::Int(0),
        );
        assert_value(
            method("compareTo", vec![q("50M"), q("50Mi")]),
            Value::Int(-1),
        );
        assert_value(
            method("compareTo", vec![q("50Mi"), q("50M")]),
            Value::Int(1),
        );
        assert!(
            method("add", vec![q("50k"), q("20")])
                .unwrap()
                .equals(&q("50.02k"))
        );
        assert!(!truth(method(
            "isLessThan",
            vec![
                method("add", vec![q("50k"), Value::Int(20)]).unwrap(),
                q("50020")
            ]
        )));
        assert!(
            method("sub", vec![q("50k"), q("20")])
                .unwrap()
                .equals(&q("49.98k"))
        );
        assert!(
            method("sub", vec![q("50k"), Value::Int(20)])
                .unwrap()
                .equals(&q("49980"))
        );
        let chain = method(
            "sub",
            vec![
                method("add", vec![q("50k"), Value::Int(20)]).unwrap(),
                q("100k"),
            ],
        )
        .unwrap();
        assert_value(method("asInteger", vec![chain.clone()]), Value::Int(-49980));
        let chain = method("sub", vec![chain, Value::Int(-50000)]).unwrap();
        assert_value(method("asInteger", vec![chain]), Value::Int(20));
        assert_value(method("asInteger", vec![q("50k")]), Value::Int(50000));
        assert_eq!(
            error_text(method(
                "asInteger",
                vec![q("9999999999999999999999999999999999999G")]
            )),
            "cannot convert value to integer"
        );
        assert!(!truth(method(
            "isInteger",
            vec![q("9999999999999999999999999999999999999G")]
        )));
        assert!(truth(method("isInteger", vec![q("50")])));
        assert_value(
            method("asApproximateFloat", vec![q("50.703k")]),
            Value::Double(50703.0),
        );
        assert_value(function("sign", vec![q("-1")]), Value::Int(-1));
        assert_value(function("sign", vec![q("0")]), Value::Int(0));
        assert_value(function("sign", vec![q("1m")]), Value::Int(1));
    }

    #[test]
    fn is_integer_depends_on_the_representation() {
        // As kube-apiserver answers.
        assert!(!truth(method("isInteger", vec![q("1000m")])));
        assert!(!truth(method("isInteger", vec![q("1.0")])));
        assert!(!truth(method("isInteger", vec![q("1.5Ki")])));
        assert!(!truth(method("isInteger", vec![q("1e-3")])));
        assert!(!truth(method(
            "isInteger",
            vec![q("123456789012345678901234567890")]
        )));
        assert!(!truth(method(
            "isInteger",
            vec![method("add", vec![q("1000m"), q("1")]).unwrap()]
        )));
        assert!(!truth(method(
            "isInteger",
            vec![method("add", vec![q("1"), q("1000m")]).unwrap()]
        )));
        assert!(truth(method(
            "isInteger",
            vec![method("sub", vec![q("1"), q("1")]).unwrap()]
        )));
        let big = q("99999999999999999999999");
        assert!(!truth(method(
            "isInteger",
            vec![method("sub", vec![big.clone(), big]).unwrap()]
        )));
        assert!(q("1000m").equals(&q("1")));
    }

    #[test]
    fn quantity_costs() {
        assert_eq!(function_cost("quantity", vec![s("12Mi")]), 1);
        assert_eq!(method_cost("add", vec![q("1"), q("2")]), 1);
    }
}
