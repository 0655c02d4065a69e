//! Kubernetes' URL library: `url(string)`, `isURL`, and the getters `getScheme`, `getHost`,
//! `getHostname`, `getPort`, `getEscapedPath`, `getQuery`, over URLs parsed as Go's `net/url`
//! parses them (`url` must pass `ParseRequestURI`, then is `Parse`d). A URL is a
//! `kubernetes.URL` object whose canonical form is Go's `URL.String()` (Kubernetes compares URLs
//! by it).

use std::sync::Arc;

use indexmap::IndexMap;

use crate::env::Env;
use crate::error::EvalError;
use crate::function::no_overload;
use crate::value::{Key, Map, Str, Value};

use super::ip::{Addr, parse_addr};
use super::{
    STRING_TRAVERSAL, URL_TYPE, actual_size, canonical, go_quote, opaque, scaled_cost, string_arg,
};

/// A URL as Go's `net/url.URL` holds it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Url {
    pub scheme: String,
    pub opaque: String,
    /// The user name and, if one was given, the password.
    pub user: Option<(String, Option<String>)>,
    pub host: String,
    pub path: String,
    pub raw_path: String,
    pub omit_host: bool,
    pub force_query: bool,
    pub raw_query: String,
    pub fragment: String,
    pub raw_fragment: String,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Path,
    Host,
    Zone,
    UserPassword,
    QueryComponent,
    Fragment,
}

/// Go's `shouldEscape`.
fn should_escape(c: u8, mode: Mode) -> bool {
    if c.is_ascii_alphanumeric() {
        return false;
    }
    if matches!(mode, Mode::Host | Mode::Zone)
        && matches!(
            c,
            b'!' | b'$'
                | b'&'
                | b'\''
                | b'('
                | b')'
                | b'*'
                | b'+'
                | b','
                | b';'
                | b'='
                | b':'
                | b'['
                | b']'
                | b'<'
                | b'>'
                | b'"'
        )
    {
        return false;
    }
    match c {
        b'-' | b'_' | b'.' | b'~' => return false,
        b'$' | b'&' | b'+' | b',' | b'/' | b':' | b';' | b'=' | b'?' | b'@' => {
            return match mode {
                Mode::Path => c == b'?',
                Mode::UserPassword => matches!(c, b'@' | b'/' | b'?' | b':'),
                Mode::QueryComponent => true,
                Mode::Fragment => false,
                Mode::Host | Mode::Zone => true,
            };
        }
        _ => {}
    }
    if mode == Mode::Fragment && matches!(c, b'!' | b'(' | b')' | b'*') {
        return false;
    }
    true
}

fn unhex(c: u8) -> u8 {
    match c {
        b'0'..=b'9' => c - b'0',
        b'a'..=b'f' => c - b'a' + 10,
        b'A'..=b'F' => c - b'A' + 10,
        _ => 0,
    }
}

fn byte_text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Go's `unescape`.
fn unescape(text: &str, mode: Mode) -> Result<String, String> {
    let bytes = text.as_bytes();
    let mut escapes = 0;
    let mut has_plus = false;
    let mut index = 0;
    while index < bytes.len() {
        match bytes[index] {
            b'%' => {
                escapes += 1;
                if index + 2 >= bytes.len()
                    || !bytes[index + 1].is_ascii_hexdigit()
                    || !bytes[index + 2].is_ascii_hexdigit()
                {
                    let end = (index + 3).min(bytes.len());
                    return Err(format!(
                        "invalid URL escape {}",
                        go_quote(&byte_text(&bytes[index..end]))
                    ));
                }
                let escape = &bytes[index..index + 3];
                if mode == Mode::Host && unhex(bytes[index + 1]) < 8 && escape != b"%25" {
                    return Err(format!(
                        "invalid URL escape {}",
                        go_quote(&byte_text(escape))
                    ));
                }
                if mode == Mode::Zone {
                    let value = unhex(bytes[index + 1]) << 4 | unhex(bytes[index + 2]);
                    if escape != b"%25" && value != b' ' && should_escape(value, Mode::Host) {
                        return Err(format!(
                            "invalid URL escape {}",
                            go_quote(&byte_text(escape))
                        ));
                    }
                }
                index += 3;
            }
            b'+' => {
                has_plus = mode == Mode::QueryComponent;
                index += 1;
            }
            c => {
                if matches!(mode, Mode::Host | Mode::Zone) && c < 0x80 && should_escape(c, mode) {
                    return Err(format!(
                        "invalid character {} in host name",
                        go_quote(&byte_text(&[c]))
                    ));
                }
                index += 1;
            }
        }
    }
    if escapes == 0 && !has_plus {
        return Ok(text.to_owned());
    }
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        match bytes[index] {
            b'%' => {
                out.push(unhex(bytes[index + 1]) << 4 | unhex(bytes[index + 2]));
                index += 2;
            }
            b'+' => out.push(if mode == Mode::QueryComponent {
                b' '
            } else {
                b'+'
            }),
            c => out.push(c),
        }
        index += 1;
    }
    // Go strings may hold any bytes; a CEL string holds text.
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// Go's `escape`.
fn escape(text: &str, mode: Mode) -> String {
    let mut out = String::with_capacity(text.len());
    for &c in text.as_bytes() {
        if c == b' ' && mode == Mode::QueryComponent {
            out.push('+');
        } else if should_escape(c, mode) {
            out.push_str(&format!("%{c:02X}"));
        } else {
            out.push(char::from(c));
        }
    }
    out
}

fn get_scheme(raw: &str) -> Result<(&str, &str), String> {
    for (index, c) in raw.bytes().enumerate() {
        match c {
            b'a'..=b'z' | b'A'..=b'Z' => {}
            b'0'..=b'9' | b'+' | b'-' | b'.' if index > 0 => {}
            b':' if index == 0 => return Err("missing protocol scheme".to_owned()),
            b':' => return Ok((&raw[..index], &raw[index + 1..])),
            _ => return Ok(("", raw)),
        }
    }
    Ok(("", raw))
}

fn valid_optional_port(port: &str) -> bool {
    port.is_empty() || (port.starts_with(':') && port[1..].bytes().all(|c| c.is_ascii_digit()))
}

fn valid_userinfo(text: &str) -> bool {
    text.chars().all(|c| {
        c.is_ascii_alphanumeric()
            || matches!(
                c,
                '-' | '.'
                    | '_'
                    | ':'
                    | '~'
                    | '!'
                    | '$'
                    | '&'
                    | '\''
                    | '('
                    | ')'
                    | '*'
                    | '+'
                    | ','
                    | ';'
                    | '='
                    | '%'
                    | '@'
            )
    })
}

fn parse_host(host: &str) -> Result<String, String> {
    if let Some(open) = host.rfind('[') {
        if open > 0 {
            return Err("invalid IP-literal".to_owned());
        }
        let Some(close) = host.rfind(']') else {
            return Err("missing ']' in host".to_owned());
        };
        let colon_port = &host[close + 1..];
        if !valid_optional_port(colon_port) {
            return Err(format!("invalid port {} after host", go_quote(colon_port)));
        }
        let colon_port = unescape(colon_port, Mode::Host)?;
        let hostname = &host[1..close];
        let unescaped = match hostname.find("%25") {
            Some(zone) => {
                unescape(&hostname[..zone], Mode::Host)? + &unescape(&hostname[zone..], Mode::Zone)?
            }
            None => unescape(hostname, Mode::Host)?,
        };
        match parse_addr(&unescaped) {
            Err(error) => return Err(format!("invalid host: {error}")),
            Ok(Addr::V4(_)) => return Err("invalid IP-literal".to_owned()),
            Ok(_) => {}
        }
        return Ok(format!("[{unescaped}]{colon_port}"));
    }
    // Go 1.25 (kube-apiserver 1.35's) checks the port after the last colon.
    if let Some(colon) = host.rfind(':') {
        let colon_port = &host[colon..];
        if !valid_optional_port(colon_port) {
            return Err(format!("invalid port {} after host", go_quote(colon_port)));
        }
    }
    unescape(host, Mode::Host)
}

type User = Option<(String, Option<String>)>;

fn parse_authority(authority: &str) -> Result<(User, String), String> {
    let at = authority.rfind('@');
    let host = parse_host(at.map_or(authority, |at| &authority[at + 1..]))?;
    let Some(at) = at else {
        return Ok((None, host));
    };
    let userinfo = &authority[..at];
    if !valid_userinfo(userinfo) {
        return Err("net/url: invalid userinfo".to_owned());
    }
    let user = match userinfo.split_once(':') {
        None => (unescape(userinfo, Mode::UserPassword)?, None),
        Some((name, password)) => (
            unescape(name, Mode::UserPassword)?,
            Some(unescape(password, Mode::UserPassword)?),
        ),
    };
    Ok((Some(user), host))
}

fn parse_inner(raw: &str, via_request: bool) -> Result<Url, String> {
    if raw.bytes().any(|c| c < b' ' || c == 0x7f) {
        return Err("net/url: invalid control character in URL".to_owned());
    }
    if raw.is_empty() && via_request {
        return Err("empty url".to_owned());
    }
    let mut url = Url::default();
    if raw == "*" {
        url.path = "*".to_owned();
        return Ok(url);
    }
    let (scheme, mut rest) = get_scheme(raw)?;
    url.scheme = scheme.to_ascii_lowercase();
    if rest.ends_with('?') && rest.matches('?').count() == 1 {
        url.force_query = true;
        rest = &rest[..rest.len() - 1];
    } else if let Some((before, query)) = rest.split_once('?') {
        url.raw_query = query.to_owned();
        rest = before;
    }
    if !rest.starts_with('/') {
        if !url.scheme.is_empty() {
            url.opaque = rest.to_owned();
            return Ok(url);
        }
        if via_request {
            return Err("invalid URI for request".to_owned());
        }
        let segment = rest.split('/').next().unwrap_or("");
        if segment.contains(':') {
            return Err("first path segment in URL cannot contain colon".to_owned());
        }
    }
    if (!url.scheme.is_empty() || !via_request && !rest.starts_with("///"))
        && rest.starts_with("//")
    {
        let authority_and_path = &rest[2..];
        let (authority, path) = match authority_and_path.find('/') {
            Some(slash) => (&authority_and_path[..slash], &authority_and_path[slash..]),
            None => (authority_and_path, ""),
        };
        let (user, host) = parse_authority(authority)?;
        url.user = user;
        url.host = host;
        rest = path;
    } else if !url.scheme.is_empty() && rest.starts_with('/') {
        url.omit_host = true;
    }
    url.path = unescape(rest, Mode::Path)?;
    url.raw_path = if escape(&url.path, Mode::Path) == rest {
        String::new()
    } else {
        rest.to_owned()
    };
    Ok(url)
}

fn url_error(input: &str, error: String) -> String {
    format!("parse {}: {error}", go_quote(input))
}

/// Go's `url.Parse`.
pub fn parse(raw: &str) -> Result<Url, String> {
    let (without_fragment, fragment) = match raw.split_once('#') {
        Some((before, fragment)) => (before, Some(fragment)),
        None => (raw, None),
    };
    let mut url =
        parse_inner(without_fragment, false).map_err(|error| url_error(without_fragment, error))?;
    if let Some(fragment) = fragment.filter(|fragment| !fragment.is_empty()) {
        url.fragment = unescape(fragment, Mode::Fragment).map_err(|error| url_error(raw, error))?;
        url.raw_fragment = if escape(&url.fragment, Mode::Fragment) == fragment {
            String::new()
        } else {
            fragment.to_owned()
        };
    }
    Ok(url)
}

/// Go's `url.ParseRequestURI`.
pub fn parse_request_uri(raw: &str) -> Result<Url, String> {
    parse_inner(raw, true).map_err(|error| url_error(raw, error))
}

fn valid_encoded(text: &str, mode: Mode) -> bool {
    text.bytes().all(|c| {
        matches!(
            c,
            b'!' | b'$'
                | b'&'
                | b'\''
                | b'('
                | b')'
                | b'*'
                | b'+'
                | b','
                | b';'
                | b'='
                | b':'
                | b'@'
                | b'['
                | b']'
                | b'%'
        ) || !should_escape(c, mode)
    })
}

impl Url {
    /// Go's `EscapedPath`.
    pub fn escaped_path(&self) -> String {
        if !self.raw_path.is_empty()
            && valid_encoded(&self.raw_path, Mode::Path)
            && unescape(&self.raw_path, Mode::Path).is_ok_and(|path| path == self.path)
        {
            return self.raw_path.clone();
        }
        if self.path == "*" {
            return "*".to_owned();
        }
        escape(&self.path, Mode::Path)
    }

    fn escaped_fragment(&self) -> String {
        if !self.raw_fragment.is_empty()
            && valid_encoded(&self.raw_fragment, Mode::Fragment)
            && unescape(&self.raw_fragment, Mode::Fragment)
                .is_ok_and(|fragment| fragment == self.fragment)
        {
            return self.raw_fragment.clone();
        }
        escape(&self.fragment, Mode::Fragment)
    }

    /// Go's `splitHostPort` of the host: (hostname, port).
    fn host_port(&self) -> (&str, &str) {
        let mut host = self.host.as_str();
        let mut port = "";
        if let Some(colon) = host.rfind(':')
            && valid_optional_port(&host[colon..])
        {
            port = &host[colon + 1..];
            host = &host[..colon];
        }
        if host.starts_with('[') && host.ends_with(']') && host.len() >= 2 {
            host = &host[1..host.len() - 1];
        }
        (host, port)
    }

    /// Go's `Query()`: the query's values by key, in order; malformed pairs are dropped.
    fn query(&self) -> IndexMap<String, Vec<String>> {
        let mut values: IndexMap<String, Vec<String>> = IndexMap::new();
        for pair in self.raw_query.split('&') {
            if pair.is_empty() || pair.contains(';') {
                continue;
            }
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let (Ok(key), Ok(value)) = (
                unescape(key, Mode::QueryComponent),
                unescape(value, Mode::QueryComponent),
            ) else {
                continue;
            };
            values.entry(key).or_default().push(value);
        }
        values
    }
}

impl std::fmt::Display for Url {
    /// Go's `URL.String()`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut out = String::new();
        if !self.scheme.is_empty() {
            out.push_str(&self.scheme);
            out.push(':');
        }
        if !self.opaque.is_empty() {
            out.push_str(&self.opaque);
        } else {
            let has_authority =
                !self.scheme.is_empty() || !self.host.is_empty() || self.user.is_some();
            let omitted = self.omit_host && self.host.is_empty() && self.user.is_none();
            if has_authority && !omitted {
                if !self.host.is_empty() || !self.path.is_empty() || self.user.is_some() {
                    out.push_str("//");
                }
                if let Some((name, password)) = &self.user {
                    out.push_str(&escape(name, Mode::UserPassword));
                    if let Some(password) = password {
                        out.push(':');
                        out.push_str(&escape(password, Mode::UserPassword));
                    }
                    out.push('@');
                }
                if !self.host.is_empty() {
                    out.push_str(&escape(&self.host, Mode::Host));
                }
            }
            let path = self.escaped_path();
            if !path.is_empty() && !path.starts_with('/') && !self.host.is_empty() {
                out.push('/');
            }
            if out.is_empty()
                && path
                    .split('/')
                    .next()
                    .is_some_and(|segment| segment.contains(':'))
            {
                out.push_str("./");
            }
            out.push_str(&path);
        }
        if self.force_query || !self.raw_query.is_empty() {
            out.push('?');
            out.push_str(&self.raw_query);
        }
        if !self.fragment.is_empty() {
            out.push('#');
            out.push_str(&self.escaped_fragment());
        }
        f.write_str(&out)
    }
}

/// Kubernetes' `url(string)`: the string must be a request URI; the URL is then parsed whole.
pub fn url_from_string(raw: &str) -> Result<Url, String> {
    let prefix = "URL parse error during conversion from string: ";
    parse_request_uri(raw).map_err(|error| format!("{prefix}{error}"))?;
    parse(raw).map_err(|error| format!("{prefix}{error}"))
}

fn url_of(value: &Value<'_>) -> Option<Url> {
    canonical(value, URL_TYPE).and_then(|text| parse(text).ok())
}

pub(crate) fn install(env: &mut Env) {
    env.function(
        "string_to_url",
        "url(string) -> kubernetes.URL",
        |_, args| {
            let url = url_from_string(string_arg("url", args, 0)?).map_err(EvalError::Invalid)?;
            Ok(opaque(URL_TYPE, url.to_string()))
        },
    );
    env.set_name_cost("string_to_url", |args| {
        scaled_cost(actual_size(&args[0]), STRING_TRAVERSAL)
    });
    env.function("is_url_string", "isURL(string) -> bool", |_, args| {
        Ok(Value::Bool(
            parse_request_uri(string_arg("isURL", args, 0)?).is_ok(),
        ))
    });
    env.method(
        "url_get_scheme",
        "kubernetes.URL.getScheme() -> string",
        |_, args| getter(args, "getScheme", |url| url.scheme.clone()),
    );
    env.method(
        "url_get_host",
        "kubernetes.URL.getHost() -> string",
        |_, args| getter(args, "getHost", |url| url.host.clone()),
    );
    env.method(
        "url_get_hostname",
        "kubernetes.URL.getHostname() -> string",
        |_, args| getter(args, "getHostname", |url| url.host_port().0.to_owned()),
    );
    env.method(
        "url_get_port",
        "kubernetes.URL.getPort() -> string",
        |_, args| getter(args, "getPort", |url| url.host_port().1.to_owned()),
    );
    env.method(
        "url_get_escaped_path",
        "kubernetes.URL.getEscapedPath() -> string",
        |_, args| getter(args, "getEscapedPath", Url::escaped_path),
    );
    env.method(
        "url_get_query",
        "kubernetes.URL.getQuery() -> map(string, list(string))",
        |_, args| {
            let url = url_of(&args[0]).ok_or_else(|| no_overload("getQuery", args))?;
            let entries: IndexMap<Key<'_>, Value<'_>> = url
                .query()
                .into_iter()
                .map(|(key, values)| {
                    (
                        Key::String(Str::Owned(Arc::from(key))),
                        Value::list(values.into_iter().map(Value::string).collect()),
                    )
                })
                .collect();
            Ok(Value::Map(Map::Owned(Arc::new(entries))))
        },
    );
}

fn getter<'a>(
    args: &[Value<'a>],
    function: &str,
    get: fn(&Url) -> String,
) -> Result<Value<'a>, EvalError> {
    let url = url_of(&args[0]).ok_or_else(|| no_overload(function, args))?;
    Ok(Value::string(get(&url)))
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    fn url(text: &str) -> Value<'static> {
        function("url", vec![s(text)]).unwrap_or_else(|error| panic!("{error}"))
    }

    fn get(name: &str, text: &str) -> Value<'static> {
        method(name, vec![url(text)]).unwrap_or_else(|error| panic!("{error}"))
    }

    #[test]
    fn getters_follow_go() {
        assert!(get("getScheme", "https://example.com/").equals(&s("https")));
        assert!(get("getScheme", "HTTPS://example.com/").equals(&s("https")));
        assert!(get("getHost", "https://example.com:80/").equals(&s("example.com:80")));
        assert!(get("getHost", "https://[::1]:80/").equals(&s("[::1]:80")));
        assert!(get("getHostname", "https://[::1]:80/").equals(&s("::1")));
        assert!(get("getHostname", "https://example.com:80/").equals(&s("example.com")));
        assert!(get("getPort", "https://example.com:80/").equals(&s("80")));
        assert!(get("getPort", "https://example.com/").equals(&s("")));
        assert!(
            get("getEscapedPath", "https://example.com/path with spaces/")
                .equals(&s("/path%20with%20spaces/"))
        );
        assert!(get("getEscapedPath", "https://example.com/%7Efoo").equals(&s("/%7Efoo")));
        assert!(get("getEscapedPath", "https://example.com").equals(&s("")));
        assert!(get("getHost", "https://user:pass@example.com/").equals(&s("example.com")));
        let query = get("getQuery", "https://example.com/?k=a&k=b&x=%20y&z");
        let expected = crate::Value::Map(Map::Owned(Arc::new(
            [
                (Key::String(Str::Owned("k".into())), strings(&["a", "b"])),
                (Key::String(Str::Owned("x".into())), strings(&[" y"])),
                (Key::String(Str::Owned("z".into())), strings(&[""])),
            ]
            .into_iter()
            .collect(),
        )));
        assert!(query.equals(&expected), "{query}");
    }

    #[test]
    fn parse_errors_follow_go() {
        assert_eq!(
            error_text(function("url", vec![s("x")])),
            "URL parse error during conversion from string: parse \"x\": invalid URI for request"
        );
        assert_eq!(
            error_text(function("url", vec![s("http://[::1")])),
            "URL parse error during conversion from string: parse \"http://[::1\": missing ']' in host"
        );
        assert_eq!(
            url_from_string("http://example.com:8a/").unwrap_err(),
            "URL parse error during conversion from string: parse \"http://example.com:8a/\": invalid port \":8a\" after host"
        );
        assert_eq!(
            url_from_string("http://[1.2.3.4]/").unwrap_err(),
            "URL parse error during conversion from string: parse \"http://[1.2.3.4]/\": invalid IP-literal"
        );
        assert_eq!(
            url_from_string("/a%zz").unwrap_err(),
            "URL parse error during conversion from string: parse \"/a%zz\": invalid URL escape \"%zz\""
        );
        assert_eq!(
            url_from_string("http://a b/").unwrap_err(),
            "URL parse error during conversion from string: parse \"http://a b/\": invalid character \" \" in host name"
        );
        assert_eq!(
            url_from_string(":foo").unwrap_err(),
            "URL parse error during conversion from string: parse \":foo\": missing protocol scheme"
        );
        assert!(truth(function("isURL", vec![s("https://example.com/")])));
        assert!(truth(function("isURL", vec![s("/absolute-path")])));
        assert!(!truth(function("isURL", vec![s("../relative-path")])));
        assert!(!truth(function("isURL", vec![s("")])));
    }

    #[test]
    fn urls_compare_by_their_string() {
        assert!(url("https://example.com/").equals(&url("HTTPS://example.com/")));
        assert!(!url("https://example.com/a").equals(&url("https://example.com/b")));
        assert_eq!(
            parse("https://u:p@example.com/a%2Fb?q=1#f%20g").map(|url| url.to_string()),
            Ok("https://u:p@example.com/a%2Fb?q=1#f%20g".to_owned())
        );
    }
}
