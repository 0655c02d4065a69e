//! Go's way of quoting text in messages (`%q`, `strconv.Quote`): kube-apiserver's CEL errors
//! quote their input so, and kanon's must read the same.

/// Go's `strconv.Quote`: the string in double quotes, with Go's escapes (Kubernetes' messages
/// quote their input with `%q`).
pub fn go_quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for character in text.chars() {
        match character {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if go_printable(c) => out.push(c),
            c if (c as u32) < 0x80 => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if (c as u32) < 0x10000 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push_str(&format!("\\U{:08x}", c as u32)),
        }
    }
    out.push('"');
    out
}

/// An approximation of Go's `unicode.IsPrint`: not a control, format, private-use or separator
/// character other than the ASCII space.
fn go_printable(c: char) -> bool {
    let code = c as u32;
    if c == ' ' {
        return true;
    }
    !(c.is_control()
        || c.is_whitespace()
        || matches!(code, 0xAD | 0x600..=0x605 | 0x61C | 0x6DD | 0x70F | 0x180E | 0x200B..=0x200F | 0x202A..=0x202E | 0x2060..=0x2064 | 0x2066..=0x206F | 0xFEFF | 0xFFF9..=0xFFFB)
        || (0xE000..=0xF8FF).contains(&code)
        || code >= 0xF0000
        || (code & 0xFFFE) == 0xFFFE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_quote_escapes_as_strconv_does() {
        assert_eq!(go_quote("a\"b\\c"), r#""a\"b\\c""#);
        assert_eq!(
            go_quote("\n\t\u{1}\u{7f}\u{85}é"),
            "\"\\n\\t\\x01\\x7f\\u0085é\""
        );
    }
}
