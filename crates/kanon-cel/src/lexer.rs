//! CEL's tokens, as the lexer rules of cel-go's `CEL.g4` define them.
//!
//! The whole source is tokenized up front; characters no rule accepts are reported (as ANTLR
//! reports them, `token recognition error at: '…'`) and skipped, so the parser sees only valid
//! tokens. Like ANTLR's lexer, a token is the longest match, falling back to a shorter accepted
//! prefix when a longer candidate (an unterminated string, say) fails.

/// Token kinds, in the order of the grammar's token types: the parser's "expecting {…}" sets
/// are listed in this order, as ANTLR lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Kind {
    Eq,
    Ne,
    In,
    Lt,
    Le,
    Ge,
    Gt,
    And,
    Or,
    LBracket,
    RBracket,
    LBrace,
    RBrace,
    LParen,
    RParen,
    Dot,
    Comma,
    Minus,
    Bang,
    Question,
    Colon,
    Plus,
    Star,
    Slash,
    Percent,
    True,
    False,
    Null,
    NumFloat,
    NumInt,
    NumUint,
    String,
    Bytes,
    Ident,
    EscIdent,
    Eof,
}

impl Kind {
    /// The name ANTLR gives the token type in "expecting …" messages.
    pub(crate) fn display(self) -> &'static str {
        match self {
            Kind::Eq => "'=='",
            Kind::Ne => "'!='",
            Kind::In => "'in'",
            Kind::Lt => "'<'",
            Kind::Le => "'<='",
            Kind::Ge => "'>='",
            Kind::Gt => "'>'",
            Kind::And => "'&&'",
            Kind::Or => "'||'",
            Kind::LBracket => "'['",
            Kind::RBracket => "']'",
            Kind::LBrace => "'{'",
            Kind::RBrace => "'}'",
            Kind::LParen => "'('",
            Kind::RParen => "')'",
            Kind::Dot => "'.'",
            Kind::Comma => "','",
            Kind::Minus => "'-'",
            Kind::Bang => "'!'",
            Kind::Question => "'?'",
            Kind::Colon => "':'",
            Kind::Plus => "'+'",
            Kind::Star => "'*'",
            Kind::Slash => "'/'",
            Kind::Percent => "'%'",
            Kind::True => "'true'",
            Kind::False => "'false'",
            Kind::Null => "'null'",
            Kind::NumFloat => "NUM_FLOAT",
            Kind::NumInt => "NUM_INT",
            Kind::NumUint => "NUM_UINT",
            Kind::String => "STRING",
            Kind::Bytes => "BYTES",
            Kind::Ident => "IDENTIFIER",
            Kind::EscIdent => "ESC_IDENTIFIER",
            Kind::Eof => "<EOF>",
        }
    }
}

/// A token: its kind and byte range in the source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Token {
    pub kind: Kind,
    pub start: u32,
    pub end: u32,
}

/// A character sequence no lexer rule accepts, reported as ANTLR reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LexError {
    pub start: u32,
    /// The rejected text, from the token's start through the character that failed.
    pub text: String,
}

/// The tokens of `source` (ending with one `Eof`), and the errors met on the way. Lexing stops
/// after `error_limit` errors (the parser then reports that there were too many).
pub(crate) fn tokenize(source: &str, error_limit: usize) -> (Vec<Token>, Vec<LexError>) {
    let mut lexer = Lexer {
        src: source.as_bytes(),
        text: source,
        pos: 0,
    };
    let mut tokens = Vec::new();
    let mut errors = Vec::new();
    loop {
        lexer.skip_trivia();
        let start = lexer.pos;
        if start >= lexer.src.len() {
            break;
        }
        match lexer.next_token() {
            Ok(kind) => tokens.push(Token {
                kind,
                start: start as u32,
                end: lexer.pos as u32,
            }),
            Err(fail) => {
                // ANTLR reports the text through the failing character, then resumes after it.
                let stop = if fail < lexer.src.len() {
                    next_char_boundary(lexer.text, fail)
                } else {
                    lexer.src.len()
                };
                errors.push(LexError {
                    start: start as u32,
                    text: lexer.text.get(start..stop).unwrap_or_default().to_owned(),
                });
                lexer.pos = stop.max(start + 1).min(lexer.src.len());
                while !lexer.text.is_char_boundary(lexer.pos) {
                    lexer.pos += 1;
                }
                if errors.len() > error_limit {
                    break;
                }
            }
        }
    }
    let end = source.len() as u32;
    tokens.push(Token {
        kind: Kind::Eof,
        start: end,
        end,
    });
    (tokens, errors)
}

fn next_char_boundary(text: &str, at: usize) -> usize {
    let mut next = at + 1;
    while next < text.len() && !text.is_char_boundary(next) {
        next += 1;
    }
    next.min(text.len())
}

struct Lexer<'a> {
    src: &'a [u8],
    text: &'a str,
    pos: usize,
}

fn is_ident_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_'
}

fn is_ident_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

impl Lexer<'_> {
    fn at(&self, offset: usize) -> Option<u8> {
        self.src.get(self.pos + offset).copied()
    }

    /// Whitespace (`\t \r \n \f` and space) and `//` comments go to ANTLR's hidden channel.
    fn skip_trivia(&mut self) {
        loop {
            match self.at(0) {
                Some(b' ' | b'\t' | b'\r' | b'\n' | 0x0c) => self.pos += 1,
                Some(b'/') if self.at(1) == Some(b'/') => {
                    while let Some(c) = self.at(0) {
                        if c == b'\n' {
                            break;
                        }
                        self.pos += 1;
                    }
                }
                _ => return,
            }
        }
    }

    /// Lexes one token at `pos`, advancing past it; on failure returns the byte offset of the
    /// character no rule could accept (the source length when the input ended too early).
    fn next_token(&mut self) -> Result<Kind, usize> {
        let c = self.at(0).unwrap_or(0);
        let next = self.at(1);
        let (kind, len) = match c {
            b'=' if next == Some(b'=') => (Kind::Eq, 2),
            b'!' if next == Some(b'=') => (Kind::Ne, 2),
            b'!' => (Kind::Bang, 1),
            b'<' if next == Some(b'=') => (Kind::Le, 2),
            b'<' => (Kind::Lt, 1),
            b'>' if next == Some(b'=') => (Kind::Ge, 2),
            b'>' => (Kind::Gt, 1),
            b'&' if next == Some(b'&') => (Kind::And, 2),
            b'|' if next == Some(b'|') => (Kind::Or, 2),
            b'[' => (Kind::LBracket, 1),
            b']' => (Kind::RBracket, 1),
            b'{' => (Kind::LBrace, 1),
            b'}' => (Kind::RBrace, 1),
            b'(' => (Kind::LParen, 1),
            b')' => (Kind::RParen, 1),
            b'.' if next.is_some_and(|d| d.is_ascii_digit()) => return Ok(self.number()),
            b'.' => (Kind::Dot, 1),
            b',' => (Kind::Comma, 1),
            b'-' => (Kind::Minus, 1),
            b'?' => (Kind::Question, 1),
            b':' => (Kind::Colon, 1),
            b'+' => (Kind::Plus, 1),
            b'*' => (Kind::Star, 1),
            b'/' => (Kind::Slash, 1),
            b'%' => (Kind::Percent, 1),
            b'0'..=b'9' => return Ok(self.number()),
            b'"' | b'\'' => {
                return self.string(self.pos).map(|end| {
                    self.pos = end;
                    Kind::String
                });
            }
            b'`' => return self.escaped_ident(),
            _ if is_ident_start(c) => return self.word(),
            // `&`, `|`, `=` alone, and anything else.
            _ => {
                let is_pair_start = matches!(c, b'&' | b'|' | b'=');
                return Err(if is_pair_start && next.is_some() {
                    self.pos + 1
                } else {
                    self.pos
                });
            }
        };
        self.pos += len;
        Ok(kind)
    }

    /// NUM_FLOAT, NUM_INT or NUM_UINT, the longest that matches (`1e` is the int `1` followed by
    /// the identifier `e`; `1.` is `1` followed by a dot).
    fn number(&mut self) -> Kind {
        let start = self.pos;
        let digits = |from: usize| {
            let mut at = from;
            while self.src.get(at).is_some_and(|c| c.is_ascii_digit()) {
                at += 1;
            }
            at
        };
        if self.src.get(start) == Some(&b'0')
            && self.src.get(start + 1) == Some(&b'x')
            && self
                .src
                .get(start + 2)
                .is_some_and(|c| c.is_ascii_hexdigit())
        {
            let mut at = start + 2;
            while self.src.get(at).is_some_and(|c| c.is_ascii_hexdigit()) {
                at += 1;
            }
            if matches!(self.src.get(at), Some(b'u' | b'U')) {
                self.pos = at + 1;
                return Kind::NumUint;
            }
            self.pos = at;
            return Kind::NumInt;
        }
        let int_end = digits(start);
        let mut end = int_end;
        let mut float = false;
        if self.src.get(end) == Some(&b'.')
            && self.src.get(end + 1).is_some_and(|c| c.is_ascii_digit())
        {
            end = digits(end + 1);
            float = true;
        }
        if matches!(self.src.get(end), Some(b'e' | b'E')) {
            let mut at = end + 1;
            if matches!(self.src.get(at), Some(b'+' | b'-')) {
                at += 1;
            }
            if self.src.get(at).is_some_and(|c| c.is_ascii_digit()) {
                end = digits(at);
                float = true;
            }
        }
        if float {
            self.pos = end;
            return Kind::NumFloat;
        }
        if int_end > start && matches!(self.src.get(int_end), Some(b'u' | b'U')) {
            self.pos = int_end + 1;
            return Kind::NumUint;
        }
        self.pos = int_end;
        Kind::NumInt
    }

    /// An identifier or keyword, or a string or bytes literal behind an `r`, `b` prefix.
    fn word(&mut self) -> Result<Kind, usize> {
        let start = self.pos;
        let c = self.src[start];
        let next = self.at(1);
        let quote = |q: Option<u8>| matches!(q, Some(b'"' | b'\''));
        // Prefixed literals are longer than the one-letter identifier, so they win when they
        // lex; when they do not (unterminated), ANTLR falls back to the identifier.
        let prefixed = match (c, next) {
            (b'r' | b'R', q) if quote(q) => Some((Kind::String, start)),
            (b'b' | b'B', q) if quote(q) => Some((Kind::Bytes, start + 1)),
            (b'b' | b'B', Some(b'r' | b'R')) if quote(self.at(2)) => Some((Kind::Bytes, start + 1)),
            _ => None,
        };
        if let Some((kind, at)) = prefixed
            && let Ok(end) = self.string(at)
        {
            self.pos = end;
            return Ok(kind);
        }
        let mut end = start + 1;
        while self.src.get(end).is_some_and(|&c| is_ident_char(c)) {
            end += 1;
        }
        self.pos = end;
        Ok(match &self.text[start..end] {
            "in" => Kind::In,
            "true" => Kind::True,
            "false" => Kind::False,
            "null" => Kind::Null,
            _ => Kind::Ident,
        })
    }

    /// ESC_IDENTIFIER: `` `…` `` of letters, digits, `_ . - /` and spaces.
    fn escaped_ident(&mut self) -> Result<Kind, usize> {
        let start = self.pos;
        let mut at = start + 1;
        while let Some(&c) = self.src.get(at) {
            if c == b'`' && at > start + 1 {
                self.pos = at + 1;
                return Ok(Kind::EscIdent);
            }
            if !(is_ident_char(c) || matches!(c, b'.' | b'-' | b'/' | b' ')) {
                return Err(at);
            }
            at += 1;
        }
        Err(at)
    }

    /// The end of the quoted literal starting at `at` (an optional `r`/`R` then a quote), or the
    /// offset of the character where it failed.
    fn string(&self, at: usize) -> Result<usize, usize> {
        let src = self.src;
        let mut at = at;
        let raw = matches!(src.get(at), Some(b'r' | b'R'));
        if raw {
            at += 1;
        }
        let quote = src.get(at).copied().unwrap_or(b'"');
        let triple = src.get(at + 1) == Some(&quote) && src.get(at + 2) == Some(&quote);
        if triple {
            let mut i = at + 3;
            loop {
                match src.get(i) {
                    None => break,
                    Some(&c)
                        if c == quote
                            && src.get(i + 1) == Some(&quote)
                            && src.get(i + 2) == Some(&quote) =>
                    {
                        return Ok(i + 3);
                    }
                    Some(b'\\') if !raw => i = self.escape(i)?,
                    Some(_) => i += 1,
                }
            }
            // An unterminated triple quote: the longest accepted prefix is the empty string `""`.
            return Ok(at + 2);
        }
        let mut i = at + 1;
        loop {
            match src.get(i) {
                None => return Err(i),
                Some(&c) if c == quote => return Ok(i + 1),
                Some(b'\n' | b'\r') => return Err(i),
                Some(b'\\') if !raw => i = self.escape(i)?,
                Some(_) => i += 1,
            }
        }
    }

    /// The end of the escape sequence at `at` (a backslash), as the lexer's ESC_SEQ accepts it.
    fn escape(&self, at: usize) -> Result<usize, usize> {
        let src = self.src;
        let hex = |from: usize, count: usize| -> Result<usize, usize> {
            for i in from..from + count {
                if !src.get(i).is_some_and(|c| c.is_ascii_hexdigit()) {
                    return Err(i);
                }
            }
            Ok(from + count)
        };
        match src.get(at + 1) {
            Some(
                b'a' | b'b' | b'f' | b'n' | b'r' | b't' | b'v' | b'"' | b'\'' | b'\\' | b'?' | b'`',
            ) => Ok(at + 2),
            Some(b'x' | b'X') => hex(at + 2, 2),
            Some(b'u') => hex(at + 2, 4),
            Some(b'U') => hex(at + 2, 8),
            Some(b'0'..=b'3') => {
                for i in at + 2..at + 4 {
                    if !matches!(src.get(i), Some(b'0'..=b'7')) {
                        return Err(i);
                    }
                }
                Ok(at + 4)
            }
            _ => Err(at + 1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(source: &str) -> Vec<Kind> {
        tokenize(source, 100)
            .0
            .into_iter()
            .map(|t| t.kind)
            .collect()
    }

    #[test]
    fn numbers_take_the_longest_match() {
        use Kind::*;
        assert_eq!(kinds("1"), [NumInt, Eof]);
        assert_eq!(kinds("1u 1U 0x1fu"), [NumUint, NumUint, NumUint, Eof]);
        assert_eq!(
            kinds("1.5 .5 1e3 1E-3 1.5e+2"),
            [NumFloat; 5]
                .iter()
                .copied()
                .chain([Eof])
                .collect::<Vec<_>>()
        );
        assert_eq!(kinds("1e"), [NumInt, Ident, Eof]);
        assert_eq!(kinds("1."), [NumInt, Dot, Eof]);
        assert_eq!(kinds("0x"), [NumInt, Ident, Eof]);
        assert_eq!(kinds("0X1"), [NumInt, Ident, Eof]);
        assert_eq!(kinds("a.1"), [Ident, NumFloat, Eof]);
    }

    #[test]
    fn words_and_literals() {
        use Kind::*;
        assert_eq!(
            kinds("in inx true false null _a1"),
            [In, Ident, True, False, Null, Ident, Eof]
        );
        assert_eq!(
            kinds(r#"r"a" R'b' b"c" B'd' br"e" bR'''f'''"#),
            [String, String, Bytes, Bytes, Bytes, Bytes, Eof]
        );
        assert_eq!(kinds(r#"rb"x""#), [Ident, String, Eof]);
        assert_eq!(kinds(r#""""""#), [String, String, Eof]);
        assert_eq!(kinds("`a-b`"), [EscIdent, Eof]);
        assert_eq!(kinds("a // comment\n b"), [Ident, Ident, Eof]);
        assert_eq!(
            kinds("== != <= >= < > && || !"),
            [Eq, Ne, Le, Ge, Lt, Gt, And, Or, Bang, Eof]
        );
    }

    #[test]
    fn unrecognized_text_is_reported_and_skipped() {
        let (tokens, errors) = tokenize(r#"'\q' + À"#, 100);
        assert_eq!(
            errors,
            [
                LexError {
                    start: 0,
                    text: r"'\q".into()
                },
                LexError {
                    start: 3,
                    text: "' + À".into()
                },
            ]
        );
        assert_eq!(tokens.len(), 1);
        let (_, errors) = tokenize("1 & 2", 100);
        assert_eq!(
            errors,
            [LexError {
                start: 2,
                text: "& ".into()
            }]
        );
    }
}
