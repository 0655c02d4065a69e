//! Go's `time.Parse` with the layouts of `metav1.Time` (RFC 3339) and `metav1.MicroTime`
//! (RFC 3339 with six fraction digits), for its error: what kube-apiserver answers when a
//! mutation writes a time it cannot read (`parsing time "yesterday" as
//! "2006-01-02T15:04:05Z07:00": cannot parse "yesterday" as "2006"`).

use kanon_cel::go_quote;

/// `metav1.Time`'s layout.
pub(crate) const RFC3339: &str = "2006-01-02T15:04:05Z07:00";
/// `metav1.MicroTime`'s layout.
pub(crate) const RFC3339_MICRO: &str = "2006-01-02T15:04:05.000000Z07:00";

/// The layout elements Go's parser walks, after the literal text before each.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Element {
    Year,
    Month,
    Day,
    Hour,
    Minute,
    Second,
    /// `.000000`: exactly this many fraction digits.
    Fraction(usize),
    Zone,
}

/// `(literal before, element, the element as the layout spells it)`.
fn chunks(micro: bool) -> Vec<(&'static str, Element, &'static str)> {
    let mut chunks = vec![
        ("", Element::Year, "2006"),
        ("-", Element::Month, "01"),
        ("-", Element::Day, "02"),
        ("T", Element::Hour, "15"),
        (":", Element::Minute, "04"),
        (":", Element::Second, "05"),
    ];
    if micro {
        chunks.push(("", Element::Fraction(6), ".000000"));
    }
    chunks.push(("", Element::Zone, "Z07:00"));
    chunks
}

fn digit(s: &[u8], at: usize) -> bool {
    s.get(at).is_some_and(u8::is_ascii_digit)
}

/// Go's `getnum`: one or two digits (exactly two when `fixed`).
fn number(s: &[u8], fixed: bool) -> Option<(u32, usize)> {
    if !digit(s, 0) {
        return None;
    }
    if !digit(s, 1) {
        return (!fixed).then(|| (u32::from(s[0] - b'0'), 1));
    }
    Some((u32::from(s[0] - b'0') * 10 + u32::from(s[1] - b'0'), 2))
}

fn days_in(month: u32, year: i64) -> u32 {
    match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Go's error for `value` under `layout` (one of [`RFC3339`], [`RFC3339_MICRO`]), or `None`
/// when Go reads it.
pub(crate) fn parse_error(value: &str, layout: &str) -> Option<String> {
    let micro = layout == RFC3339_MICRO;
    let whole = go_quote(value);
    let cannot = |value_elem: &str, layout_elem: &str| {
        Some(format!(
            "parsing time {whole} as {}: cannot parse {} as {}",
            go_quote(layout),
            go_quote(value_elem),
            go_quote(layout_elem)
        ))
    };
    let out_of_range = |what: &str| Some(format!("parsing time {whole}: {what} out of range"));
    let mut at = 0;
    let (mut year, mut month, mut day) = (0i64, 0u32, 0u32);
    let chunks = chunks(micro);
    for (index, &(literal, element, spelled)) in chunks.iter().enumerate() {
        let rest = &value[at..];
        if !rest.starts_with(literal) {
            // Go reports the literal as far as it matched: the value from where it stopped.
            let matched = rest
                .bytes()
                .zip(literal.bytes())
                .take_while(|(a, b)| a == b)
                .count();
            return cannot(&rest[matched..], literal);
        }
        at += literal.len();
        let hold = &value[at..];
        let s = hold.as_bytes();
        let mut range = None;
        let taken = match element {
            Element::Year => {
                if s.len() < 4 {
                    None
                } else {
                    let text = &hold[..4];
                    let (negative, digits) = match text.as_bytes()[0] {
                        b'-' => (true, &text[1..]),
                        b'+' => (false, &text[1..]),
                        _ => (false, text),
                    };
                    digits
                        .bytes()
                        .all(|b| b.is_ascii_digit())
                        .then(|| digits.parse::<i64>().ok())
                        .flatten()
                        .map(|parsed| {
                            year = if negative { -parsed } else { parsed };
                            4
                        })
                }
            }
            Element::Month => number(s, true).map(|(n, len)| {
                month = n;
                if !(1..=12).contains(&n) {
                    range = Some("month");
                }
                len
            }),
            Element::Day => number(s, true).map(|(n, len)| {
                day = n;
                len
            }),
            Element::Hour => number(s, false).map(|(n, len)| {
                if n >= 24 {
                    range = Some("hour");
                }
                len
            }),
            Element::Minute => number(s, true).map(|(n, len)| {
                if n >= 60 {
                    range = Some("minute");
                }
                len
            }),
            Element::Second => number(s, true).map(|(n, len)| {
                if n >= 60 {
                    range = Some("second");
                    return len;
                }
                // A fraction the layout does not spell is read anyway.
                let fraction_next =
                    matches!(chunks.get(index + 1), Some((_, Element::Fraction(_), _)));
                if !fraction_next && matches!(s.get(len), Some(b'.' | b',')) && digit(s, len + 1) {
                    let mut end = len + 2;
                    while digit(s, end) {
                        end += 1;
                    }
                    return end;
                }
                len
            }),
            Element::Fraction(digits) => {
                let wanted = 1 + digits;
                (s.len() >= wanted
                    && matches!(s[0], b'.' | b',')
                    && s[1..wanted].iter().all(u8::is_ascii_digit))
                .then_some(wanted)
            }
            Element::Zone => {
                if s.first() == Some(&b'Z') {
                    Some(1)
                } else if s.len() < 6 || s[3] != b':' || !matches!(s[0], b'+' | b'-') {
                    None
                } else {
                    match (number(&s[1..3], true), number(&s[4..6], true)) {
                        (Some((hours, _)), Some((minutes, _))) => {
                            if hours > 24 {
                                range = Some("time zone offset hour");
                            }
                            if minutes > 60 {
                                range = Some("time zone offset minute");
                            }
                            Some(6)
                        }
                        _ => None,
                    }
                }
            }
        };
        let Some(taken) = taken else {
            return cannot(hold, spelled);
        };
        at += taken;
        if let Some(what) = range {
            return out_of_range(what);
        }
    }
    if at < value.len() {
        return Some(format!(
            "parsing time {whole}: extra text: {}",
            go_quote(&value[at..])
        ));
    }
    if day < 1 || day > days_in(month, year) {
        return out_of_range("day");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_gos_words() {
        assert_eq!(parse_error("2024-05-01T10:00:00Z", RFC3339), None);
        assert_eq!(parse_error("2024-05-01T10:00:00.5+02:00", RFC3339), None);
        assert_eq!(
            parse_error("yesterday", RFC3339).as_deref(),
            Some(
                r#"parsing time "yesterday" as "2006-01-02T15:04:05Z07:00": cannot parse "yesterday" as "2006""#
            )
        );
        assert_eq!(
            parse_error("2024-05-01", RFC3339).as_deref(),
            Some(
                r#"parsing time "2024-05-01" as "2006-01-02T15:04:05Z07:00": cannot parse "" as "T""#
            )
        );
        assert_eq!(
            parse_error("2024-13-01T00:00:00Z", RFC3339).as_deref(),
            Some(r#"parsing time "2024-13-01T00:00:00Z": month out of range"#)
        );
        assert_eq!(
            parse_error("2023-02-29T00:00:00Z", RFC3339).as_deref(),
            Some(r#"parsing time "2023-02-29T00:00:00Z": day out of range"#)
        );
        assert_eq!(
            parse_error("2024-05-01T10:00:00Zjunk", RFC3339).as_deref(),
            Some(r#"parsing time "2024-05-01T10:00:00Zjunk": extra text: "junk""#)
        );
        assert_eq!(
            parse_error("2024-05-01T10:00:00.123456Z", RFC3339_MICRO),
            None
        );
        assert_eq!(
            parse_error("2024-05-01T10:00:00Z", RFC3339_MICRO).as_deref(),
            Some(
                r#"parsing time "2024-05-01T10:00:00Z" as "2006-01-02T15:04:05.000000Z07:00": cannot parse "Z" as ".000000""#
            )
        );
    }
}
