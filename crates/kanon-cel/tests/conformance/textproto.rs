//! A small, schema-less reader of protobuf text format (`.textproto`): just enough of the
//! language spec (<https://protobuf.dev/reference/protobuf/textformat-spec/>) for cel-spec's test
//! data. It builds a tree of fields; the schema is applied later by whoever reads the tree.
//!
//! Strings are kept as bytes: `bytes_value: "\377"` is not UTF-8, and only the reader knows
//! whether a field is `string` or `bytes`.

use std::fmt;

/// A message: its fields in the order written. A repeated field appears once per element (a list
/// `f: [a, b]` is stored as `f: a f: b`, which the text format defines it to mean).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Message {
    pub fields: Vec<Field>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    /// The field's name; an extension or an expanded `Any` keeps its brackets:
    /// `[type.googleapis.com/google.protobuf.Duration]`.
    pub name: String,
    pub value: Node,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    /// A string literal (adjacent literals already joined), escapes decoded.
    Str(Vec<u8>),
    /// A number as written, sign included (`-12`, `0x1F`, `1e-40`, `-inf`, `nan`, `2.5f`).
    Number(String),
    /// A bare identifier: `true`, `NULL_VALUE`, `STRING`.
    Ident(String),
    Message(Message),
}

/// A problem in the text, at a 1-based line and column.
#[derive(Debug, Clone, PartialEq)]
pub struct ParseError {
    pub line: usize,
    pub column: usize,
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.line, self.column, self.message)
    }
}

impl std::error::Error for ParseError {}

/// Parses a whole document: the fields of the top-level message.
pub fn parse(text: &str) -> Result<Message, ParseError> {
    let mut parser = Parser {
        text: text.as_bytes(),
        pos: 0,
    };
    let message = parser.fields(None)?;
    parser.skip_blank();
    if parser.pos < parser.text.len() {
        return Err(parser.error("unexpected text after the last field"));
    }
    Ok(message)
}

impl Message {
    /// The last value of a field (the text format lets a singular field be written twice; the
    /// last one wins).
    pub fn get(&self, name: &str) -> Option<&Node> {
        self.fields
            .iter()
            .rev()
            .find(|field| field.name == name)
            .map(|field| &field.value)
    }

    /// Every value of a repeated field, in order.
    pub fn all<'m>(&'m self, name: &'m str) -> impl Iterator<Item = &'m Node> + 'm {
        self.fields
            .iter()
            .filter(move |field| field.name == name)
            .map(|field| &field.value)
    }

    pub fn has(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// A sub-message field.
    pub fn message(&self, name: &str) -> Result<Option<&Message>, String> {
        match self.get(name) {
            None => Ok(None),
            Some(Node::Message(message)) => Ok(Some(message)),
            Some(other) => Err(format!("{name}: expected a message, found {other}")),
        }
    }

    /// A `string` field, decoded as UTF-8; absent is the empty string (proto3's default).
    pub fn string(&self, name: &str) -> Result<String, String> {
        match self.get(name) {
            None => Ok(String::new()),
            Some(node) => node
                .string()
                .map_err(|problem| format!("{name}: {problem}")),
        }
    }

    /// A `bool` field; absent is false.
    pub fn bool(&self, name: &str) -> Result<bool, String> {
        match self.get(name) {
            None => Ok(false),
            Some(node) => node.bool().map_err(|problem| format!("{name}: {problem}")),
        }
    }
}

impl Node {
    pub fn bytes(&self) -> Result<&[u8], String> {
        match self {
            Node::Str(bytes) => Ok(bytes),
            other => Err(format!("expected a string, found {other}")),
        }
    }

    pub fn string(&self) -> Result<String, String> {
        String::from_utf8(self.bytes()?.to_vec())
            .map_err(|_| "a string field holds bytes that are not UTF-8".to_owned())
    }

    pub fn bool(&self) -> Result<bool, String> {
        match self {
            Node::Ident(name) if matches!(name.as_str(), "true" | "True" | "t") => Ok(true),
            Node::Ident(name) if matches!(name.as_str(), "false" | "False" | "f") => Ok(false),
            Node::Number(text) if text == "1" => Ok(true),
            Node::Number(text) if text == "0" => Ok(false),
            other => Err(format!("expected a bool, found {other}")),
        }
    }

    pub fn i64(&self) -> Result<i64, String> {
        let text = self.number_text()?;
        parse_integer(text)
            .and_then(|value| i64::try_from(value).ok())
            .ok_or_else(|| format!("{text} is not an int64"))
    }

    pub fn u64(&self) -> Result<u64, String> {
        let text = self.number_text()?;
        parse_integer(text)
            .and_then(|value| u64::try_from(value).ok())
            .ok_or_else(|| format!("{text} is not a uint64"))
    }

    pub fn f64(&self) -> Result<f64, String> {
        let text = self.number_text()?;
        parse_float(text).ok_or_else(|| format!("{text} is not a number"))
    }

    /// An enum field: its symbolic name, or its number as written.
    pub fn enum_name(&self) -> Result<&str, String> {
        match self {
            Node::Ident(name) | Node::Number(name) => Ok(name),
            other => Err(format!("expected an enum value, found {other}")),
        }
    }

    pub fn as_message(&self) -> Result<&Message, String> {
        match self {
            Node::Message(message) => Ok(message),
            other => Err(format!("expected a message, found {other}")),
        }
    }

    fn number_text(&self) -> Result<&str, String> {
        match self {
            Node::Number(text) => Ok(text),
            // `inf`/`nan` without a sign lex as identifiers.
            Node::Ident(text) => Ok(text),
            other => Err(format!("expected a number, found {other}")),
        }
    }
}

impl fmt::Display for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Node::Str(bytes) => write!(f, "{:?}", String::from_utf8_lossy(bytes)),
            Node::Number(text) | Node::Ident(text) => f.write_str(text),
            Node::Message(message) => write!(f, "{{ {} fields }}", message.fields.len()),
        }
    }
}

/// Decimal, hex (`0x`) or octal (leading `0`) integers, with an optional sign.
fn parse_integer(text: &str) -> Option<i128> {
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let magnitude = if let Some(hex) = digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        i128::from_str_radix(hex, 16).ok()?
    } else if digits.len() > 1 && digits.starts_with('0') {
        i128::from_str_radix(&digits[1..], 8).ok()?
    } else {
        digits.parse::<i128>().ok()?
    };
    Some(if negative { -magnitude } else { magnitude })
}

/// Floats as the text format writes them: `1.5`, `1e-40`, `2.5f`, `inf`, `-Infinity`, `nan`,
/// and integers (hex included).
fn parse_float(text: &str) -> Option<f64> {
    let (negative, body) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let lower = body.to_ascii_lowercase();
    let magnitude = match lower.as_str() {
        "inf" | "infinity" => f64::INFINITY,
        "nan" => f64::NAN,
        _ => {
            if let Some(value) = parse_integer(body)
                && (!lower.contains(['.', 'e']) || lower.starts_with("0x"))
            {
                return Some(if negative {
                    -(value as f64)
                } else {
                    value as f64
                });
            }
            let trimmed = lower.strip_suffix('f').unwrap_or(&lower);
            trimmed.parse::<f64>().ok()?
        }
    };
    Some(if negative { -magnitude } else { magnitude })
}

struct Parser<'t> {
    text: &'t [u8],
    pos: usize,
}

impl Parser<'_> {
    fn error(&self, message: impl Into<String>) -> ParseError {
        let before = &self.text[..self.pos.min(self.text.len())];
        let line = before.iter().filter(|&&byte| byte == b'\n').count() + 1;
        let line_start = before
            .iter()
            .rposition(|&byte| byte == b'\n')
            .map_or(0, |index| index + 1);
        ParseError {
            line,
            column: String::from_utf8_lossy(&before[line_start..])
                .chars()
                .count()
                + 1,
            message: message.into(),
        }
    }

    fn peek(&self) -> Option<u8> {
        self.text.get(self.pos).copied()
    }

    /// Skips whitespace and `#` comments.
    fn skip_blank(&mut self) {
        while let Some(byte) = self.peek() {
            if byte.is_ascii_whitespace() {
                self.pos += 1;
            } else if byte == b'#' {
                while let Some(byte) = self.peek() {
                    self.pos += 1;
                    if byte == b'\n' {
                        break;
                    }
                }
            } else {
                break;
            }
        }
    }

    fn eat(&mut self, byte: u8) -> bool {
        self.skip_blank();
        if self.peek() == Some(byte) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    /// The fields of a message up to its closing delimiter (`}` or `>`), or to the end of the
    /// text for the top level (`close` = None).
    fn fields(&mut self, close: Option<u8>) -> Result<Message, ParseError> {
        let mut message = Message::default();
        loop {
            self.skip_blank();
            match (self.peek(), close) {
                (None, None) => return Ok(message),
                (None, Some(close)) => {
                    return Err(self.error(format!(
                        "the text ends before the closing `{}`",
                        close as char
                    )));
                }
                (Some(byte), Some(close)) if byte == close => {
                    self.pos += 1;
                    return Ok(message);
                }
                _ => {}
            }
            let name = self.field_name()?;
            self.field_value(&name, &mut message)?;
            // Fields may be separated by `,` or `;`.
            if !self.eat(b',') {
                self.eat(b';');
            }
        }
    }

    fn field_name(&mut self) -> Result<String, ParseError> {
        self.skip_blank();
        if self.peek() == Some(b'[') {
            // `[ext.name]` or `[type.googleapis.com/pkg.Type]`: kept with brackets, blanks dropped.
            let start = self.pos;
            let mut name = String::from("[");
            self.pos += 1;
            loop {
                match self.peek() {
                    None => {
                        self.pos = start;
                        return Err(self.error("an unclosed `[` in a field name"));
                    }
                    Some(b']') => {
                        self.pos += 1;
                        name.push(']');
                        return Ok(name);
                    }
                    Some(byte) if byte.is_ascii_whitespace() => self.pos += 1,
                    Some(byte) if byte.is_ascii_alphanumeric() || b"._/-".contains(&byte) => {
                        name.push(byte as char);
                        self.pos += 1;
                    }
                    Some(byte) => {
                        return Err(
                            self.error(format!("unexpected `{}` in a field name", byte as char))
                        );
                    }
                }
            }
        }
        self.identifier()
            .ok_or_else(|| self.error("expected a field name"))
    }

    fn identifier(&mut self) -> Option<String> {
        let start = self.pos;
        match self.peek() {
            Some(byte) if byte.is_ascii_alphabetic() || byte == b'_' => {}
            _ => return None,
        }
        while matches!(self.peek(), Some(byte) if byte.is_ascii_alphanumeric() || byte == b'_') {
            self.pos += 1;
        }
        Some(String::from_utf8_lossy(&self.text[start..self.pos]).into_owned())
    }

    fn field_value(&mut self, name: &str, message: &mut Message) -> Result<(), ParseError> {
        let colon = self.eat(b':');
        self.skip_blank();
        match self.peek() {
            Some(b'[') => {
                self.pos += 1;
                if self.eat(b']') {
                    return Ok(());
                }
                loop {
                    let value = self.value(colon)?;
                    message.fields.push(Field {
                        name: name.to_owned(),
                        value,
                    });
                    if self.eat(b']') {
                        return Ok(());
                    }
                    if !self.eat(b',') {
                        return Err(self.error("expected `,` or `]` in a list"));
                    }
                }
            }
            _ => {
                let value = self.value(colon)?;
                message.fields.push(Field {
                    name: name.to_owned(),
                    value,
                });
                Ok(())
            }
        }
    }

    /// One value: a message, or (only after a `:`) a scalar.
    fn value(&mut self, colon: bool) -> Result<Node, ParseError> {
        self.skip_blank();
        match self.peek() {
            Some(open @ (b'{' | b'<')) => {
                self.pos += 1;
                let close = if open == b'{' { b'}' } else { b'>' };
                Ok(Node::Message(self.fields(Some(close))?))
            }
            _ if !colon => Err(self.error("expected `:` or a message after a field name")),
            Some(b'"' | b'\'') => {
                // Adjacent string literals are one string.
                let mut bytes = Vec::new();
                while matches!(self.peek(), Some(b'"' | b'\'')) {
                    self.string(&mut bytes)?;
                    self.skip_blank();
                }
                Ok(Node::Str(bytes))
            }
            Some(byte) if byte == b'-' || byte == b'+' || byte == b'.' || byte.is_ascii_digit() => {
                self.number()
            }
            Some(_) => match self.identifier() {
                Some(name) => Ok(Node::Ident(name)),
                None => Err(self.error("expected a value")),
            },
            None => Err(self.error("the text ends where a value was expected")),
        }
    }

    fn number(&mut self) -> Result<Node, ParseError> {
        let start = self.pos;
        let mut text = String::new();
        if let Some(sign @ (b'-' | b'+')) = self.peek() {
            if sign == b'-' {
                text.push('-');
            }
            self.pos += 1;
            // The grammar allows blanks and comments between the sign and the number.
            self.skip_blank();
        }
        if let Some(name) = self.identifier() {
            if matches!(
                name.to_ascii_lowercase().as_str(),
                "inf" | "infinity" | "nan"
            ) {
                text.push_str(&name);
                return Ok(Node::Number(text));
            }
            self.pos = start;
            return Err(self.error(format!("`{name}` after a sign is not a number")));
        }
        let digits = self.pos;
        let hex =
            self.text[self.pos..].starts_with(b"0x") || self.text[self.pos..].starts_with(b"0X");
        while let Some(byte) = self.peek() {
            let exponent_sign = !hex
                && (byte == b'-' || byte == b'+')
                && matches!(self.text.get(self.pos.wrapping_sub(1)), Some(b'e' | b'E'));
            if byte.is_ascii_alphanumeric() || byte == b'.' || exponent_sign {
                self.pos += 1;
            } else {
                break;
            }
        }
        if self.pos == digits {
            return Err(self.error("expected digits"));
        }
        text.push_str(&String::from_utf8_lossy(&self.text[digits..self.pos]));
        let looks_numeric = parse_integer(&text).is_some() || parse_float(&text).is_some();
        if !looks_numeric {
            self.pos = start;
            return Err(self.error(format!("`{text}` is not a number")));
        }
        Ok(Node::Number(text))
    }

    /// One quoted literal, appended to `out` with its escapes decoded.
    fn string(&mut self, out: &mut Vec<u8>) -> Result<(), ParseError> {
        let quote = self.text[self.pos];
        self.pos += 1;
        loop {
            let Some(byte) = self.peek() else {
                return Err(self.error("an unterminated string"));
            };
            self.pos += 1;
            match byte {
                b'\n' => return Err(self.error("a newline inside a string")),
                byte if byte == quote => return Ok(()),
                b'\\' => self.escape(out)?,
                byte => out.push(byte),
            }
        }
    }

    fn escape(&mut self, out: &mut Vec<u8>) -> Result<(), ParseError> {
        let Some(byte) = self.peek() else {
            return Err(self.error("a string ends in `\\`"));
        };
        self.pos += 1;
        match byte {
            b'a' => out.push(0x07),
            b'b' => out.push(0x08),
            b'f' => out.push(0x0c),
            b'n' => out.push(b'\n'),
            b'r' => out.push(b'\r'),
            b't' => out.push(b'\t'),
            b'v' => out.push(0x0b),
            b'?' => out.push(b'?'),
            b'\\' | b'\'' | b'"' => out.push(byte),
            b'0'..=b'7' => {
                // Up to three octal digits: one byte (a value over 255 wraps, as protoc does).
                let mut value = u32::from(byte - b'0');
                for _ in 0..2 {
                    match self.peek() {
                        Some(digit @ b'0'..=b'7') => {
                            value = value * 8 + u32::from(digit - b'0');
                            self.pos += 1;
                        }
                        _ => break,
                    }
                }
                out.push(value as u8);
            }
            b'x' | b'X' => {
                let value = self.hex_digits(1, 2)?;
                out.push(value as u8);
            }
            b'u' | b'U' => {
                let count = if byte == b'u' { 4 } else { 8 };
                let value = self.hex_digits(count, count)?;
                let character = char::from_u32(value).ok_or_else(|| {
                    self.error(format!(
                        "\\{} escape {value:#x} is not a Unicode scalar value",
                        byte as char
                    ))
                })?;
                let mut buffer = [0; 4];
                out.extend_from_slice(character.encode_utf8(&mut buffer).as_bytes());
            }
            other => return Err(self.error(format!("an unknown escape `\\{}`", other as char))),
        }
        Ok(())
    }

    fn hex_digits(&mut self, min: usize, max: usize) -> Result<u32, ParseError> {
        let mut value = 0u32;
        let mut count = 0;
        while count < max {
            match self.peek().and_then(|byte| (byte as char).to_digit(16)) {
                Some(digit) => {
                    value = value * 16 + digit;
                    self.pos += 1;
                    count += 1;
                }
                None => break,
            }
        }
        if count < min {
            return Err(self.error(format!("expected {min} hex digits in an escape")));
        }
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(text: &str) -> Node {
        let message = parse(text).unwrap();
        assert_eq!(message.fields.len(), 1, "{message:?}");
        message.fields[0].value.clone()
    }

    #[test]
    fn scalars() {
        assert_eq!(one("a: 12").i64(), Ok(12));
        assert_eq!(one("a: -9223372036854775808").i64(), Ok(i64::MIN));
        assert_eq!(one("a: 18446744073709551615").u64(), Ok(u64::MAX));
        assert_eq!(one("a: 0x1F").i64(), Ok(31));
        assert_eq!(one("a: -0x10").i64(), Ok(-16));
        assert_eq!(one("a: 1e-40").f64(), Ok(1e-40));
        assert_eq!(one("a: 2.99792e8").f64(), Ok(2.99792e8));
        assert_eq!(one("a: 1.5f").f64(), Ok(1.5));
        assert_eq!(one("a: .5").f64(), Ok(0.5));
        assert_eq!(one("a: 3").f64(), Ok(3.0));
        assert_eq!(one("a: inf").f64(), Ok(f64::INFINITY));
        assert_eq!(one("a: -inf").f64(), Ok(f64::NEG_INFINITY));
        assert_eq!(one("a: Infinity").f64(), Ok(f64::INFINITY));
        assert_eq!(one("a: - Infinity").f64(), Ok(f64::NEG_INFINITY));
        assert!(one("a: nan").f64().unwrap().is_nan());
        assert!(one("a: -0.0").f64().unwrap().is_sign_negative());
        assert_eq!(one("a: NULL_VALUE"), Node::Ident("NULL_VALUE".into()));
        assert_eq!(one("a: true").bool(), Ok(true));
        assert_eq!(one("a: 0").bool(), Ok(false));
        assert!(one("a: 1.5").i64().is_err());
        assert!(parse("a: -foo").is_err());
    }

    #[test]
    fn strings_and_escapes() {
        assert_eq!(one(r#"a: "x\ny""#), Node::Str(b"x\ny".to_vec()));
        assert_eq!(one(r#"a: 'it\'s'"#), Node::Str(b"it's".to_vec()));
        assert_eq!(one(r#"a: "\"q\" \\""#), Node::Str(b"\"q\" \\".to_vec()));
        assert_eq!(one(r#"a: "\301\103\0""#), Node::Str(vec![0xc1, 0x43, 0]));
        assert_eq!(
            one(r#"a: "\x41\xff\x7""#),
            Node::Str(vec![0x41, 0xff, 0x07])
        );
        assert_eq!(
            one(r#"a: "\u00e9\U0001F431""#),
            Node::Str("é🐱".as_bytes().to_vec())
        );
        assert_eq!(one(r#"a: "a\tb\?""#), Node::Str(b"a\tb?".to_vec()));
        assert_eq!(one("a: 'é'").string(), Ok("é".to_owned()));
        // Adjacent literals join, across lines, quotes and comments.
        assert_eq!(
            one("a: \"ab\"\n  'cd' # note\n \"ef\""),
            Node::Str(b"abcdef".to_vec())
        );
        assert!(one(r#"a: "\377""#).string().is_err());
        assert!(parse(r#"a: "open"#).is_err());
        assert!(parse("a: \"line\nbreak\"").is_err());
        assert!(parse(r#"a: "\q""#).is_err());
    }

    #[test]
    fn messages_lists_and_names() {
        let text = r#"
            # a comment
            name: "file"   # trailing comment
            section {
              test: { name: "t1", expr: "1 + 1"; value < int64_value: 2 > }
              test { name: 't2' }
            }
            values: [1, 2, 3]
            empty: []
            msgs [{ x: 1 }, { x: 2 }]
            object_value {
              [type.googleapis.com/google.protobuf.Duration] { seconds: 1 nanos: 2 }
            }
            [ext.name]: 5
        "#;
        let message = parse(text).unwrap();
        assert_eq!(message.string("name"), Ok("file".to_owned()));
        let section = message.message("section").unwrap().unwrap();
        let tests: Vec<_> = section.all("test").collect();
        assert_eq!(tests.len(), 2);
        let first = tests[0].as_message().unwrap();
        assert_eq!(first.string("expr"), Ok("1 + 1".to_owned()));
        let value = first.message("value").unwrap().unwrap();
        assert_eq!(value.get("int64_value").unwrap().i64(), Ok(2));
        assert_eq!(
            tests[1].as_message().unwrap().string("name"),
            Ok("t2".to_owned())
        );
        let values: Vec<i64> = message
            .all("values")
            .map(|node| node.i64().unwrap())
            .collect();
        assert_eq!(values, [1, 2, 3]);
        assert!(!message.has("empty"));
        assert_eq!(message.all("msgs").count(), 2);
        let object = message.message("object_value").unwrap().unwrap();
        let duration = object
            .message("[type.googleapis.com/google.protobuf.Duration]")
            .unwrap()
            .unwrap();
        assert_eq!(duration.get("nanos").unwrap().i64(), Ok(2));
        assert_eq!(message.get("[ext.name]").unwrap().i64(), Ok(5));
        // The last of a singular field written twice wins.
        assert_eq!(parse("a: 1 a: 2").unwrap().get("a").unwrap().i64(), Ok(2));
    }

    #[test]
    fn errors_have_places() {
        let error = parse("a {\n  b: 1\n").unwrap_err();
        assert!(error.message.contains("closing"), "{error}");
        let error = parse("a: 1\nb 2").unwrap_err();
        assert_eq!((error.line, error.column), (2, 3), "{error}");
        assert!(parse("a: 1 }").is_err());
        assert!(parse("a: [1, 2").is_err());
        assert!(parse("[unclosed: 1").is_err());
    }
}
