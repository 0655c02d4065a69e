//! What the parser accepts beyond CEL's core grammar, and its bounds: read by the parser and
//! by the macro expansions it calls.

/// What the parser accepts beyond the core grammar, and its bounds.
#[derive(Debug, Clone)]
pub struct ParseOptions {
    /// cel-go's `MaxRecursionDepth` (default 250): the deepest nesting of any one grammar rule
    /// (so 249 nested parentheses or lists parse, 250 do not) and the most operators, selects,
    /// calls and indexes on one path of the tree (so a chain of 250 `+` or `.f` parses, 251 does
    /// not). Values above [`MAX_SUPPORTED_DEPTH`] are treated as that, to keep the stack safe;
    /// 0 is treated as 1.
    pub max_depth: u32,
    /// Longest source accepted, in characters (kube-apiserver: 100,000 per expression is cel-go's
    /// default code point limit).
    pub max_length: usize,
    /// `a.?b`, `a[?b]`, `[?x]`, `{?k: v}`, `Msg{?f: v}`, and the `optMap`/`optFlatMap` macros
    /// (cel-go's `cel.OptionalTypes()`, which kube-apiserver enables).
    pub optional_syntax: bool,
    /// The two-variable comprehensions of cel-go's `ext.TwoVarComprehensions` (`all(k, v, …)`,
    /// `exists`, `existsOne`, `transformList`, `transformMap`, `transformMapEntry`).
    pub two_variable_comprehensions: bool,
    /// cel-go's `cel.bind(name, init, expr)` (an extension kube-apiserver does not enable).
    pub bind_macro: bool,
    /// `list.sortBy(e, key)` of cel-go's lists extension v2+ (kube-apiserver 1.34+).
    pub sort_by_macro: bool,
    /// Backtick-quoted field names, ``a.`b-c` `` and ``Msg{`b-c`: v}`` (cel-go's
    /// `cel.EnableIdentifierEscapeSyntax()`; kube-apiserver 1.35's base environment does not
    /// enable it, so it is off by default and such names are refused with cel-go's error).
    pub escaped_identifiers: bool,
}

/// The largest depth limit honoured. The parser recurses once per nesting level, using up to
/// about 6 KiB of stack per level in an unoptimised build (far less optimised): the default
/// limit of 250 fits a 2 MiB thread with room to spare, this one needs 4 MiB unoptimised.
pub const MAX_SUPPORTED_DEPTH: u32 = 500;

impl Default for ParseOptions {
    fn default() -> Self {
        ParseOptions {
            max_depth: 250,
            max_length: 100_000,
            optional_syntax: true,
            two_variable_comprehensions: true,
            bind_macro: false,
            sort_by_macro: true,
            escaped_identifiers: false,
        }
    }
}
