//! CEL's grammar (cel-spec `doc/langdef.md`), parsed to [`crate::ast::Expr`] with macros expanded.
//!
//! A hand-written recursive-descent parser that follows cel-go v0.26's ANTLR grammar
//! (`parser/gen/CEL.g4`) rule for rule, so that it accepts the same language, builds the same
//! trees (including cel-go's balancing of `&&`/`||` chains), numbers nodes with the same ids, and
//! enforces cel-go's two depth limits the way cel-go counts them:
//!
//! - the nesting of each grammar rule (cel-go's parse listener, "expression recursion limit
//!   exceeded: N"), reached by deep parentheses, lists, calls, ternaries; the parser recurses
//!   only through such nesting, so this limit also bounds its stack;
//! - the height of the tree in operators, selects, calls and indexes (cel-go's visitor, "max
//!   recursion depth exceeded"), reached by long `a.b.c…` or `1+1+…` chains, which are parsed by
//!   loops; a chain beyond the limit stops growing, so no deep tree is ever built.
//!
//! Syntax errors are reported in ANTLR's words where the common cases allow ("mismatched input
//! 'x' expecting …", "extraneous input …", "missing ')' at …"), with ANTLR's recovery mode: after
//! an error, no other is reported until a token is matched again.

use std::sync::Arc;

use crate::ast::{Expr, ExprId, ExprKind, FieldInit, Literal, MapEntry, Span, operators};
use crate::error::{CompileError, Issue};
use crate::lexer::{Kind, Token, tokenize};
use crate::macros::{self, Factory};
pub use crate::options::{MAX_SUPPORTED_DEPTH, ParseOptions};

/// Parses `source`, expanding macros. Errors name every syntax problem found, with its place.
pub fn parse(source: &str, options: &ParseOptions) -> Result<Expr, CompileError> {
    let length = source.chars().count();
    if length > options.max_length {
        let message = format!(
            "expression code point size exceeds limit: size: {length}, limit {}",
            options.max_length
        );
        return Err(CompileError::new(
            source,
            vec![Issue {
                span: Span::default(),
                message,
            }],
        ));
    }
    let (tokens, lex_errors) = tokenize(source, ERROR_REPORTING_LIMIT);
    let mut parser = Parser {
        source,
        tokens,
        pos: 0,
        options,
        max_depth: options.max_depth.clamp(1, MAX_SUPPORTED_DEPTH),
        next_id: 1,
        rule_depth: [0; RULE_COUNT],
        syntax_errors: Vec::new(),
        semantic_errors: Vec::new(),
        fatal: None,
        aborted: false,
        recovering: false,
        recovery_attempts: 0,
        height_exceeded: false,
    };
    for error in lex_errors {
        let message = format!(
            "token recognition error at: '{}'",
            escape_display(&error.text)
        );
        if parser.push_syntax_error(error.start, message).is_err() {
            break;
        }
    }
    let result = if parser.aborted {
        None
    } else {
        parser.parse_start().ok()
    };
    let mut issues = parser.syntax_errors;
    if parser.aborted {
        // cel-go stops at once: the tree is never visited, so no semantic errors.
        issues.extend(parser.fatal);
    } else if parser.height_exceeded {
        issues.push(Issue {
            span: Span::default(),
            message: "max recursion depth exceeded".to_owned(),
        });
    } else {
        issues.extend(parser.semantic_errors);
    }
    match result {
        Some(node) if issues.is_empty() => Ok(node.expr),
        _ => {
            if issues.is_empty() {
                issues.push(Issue {
                    span: Span::default(),
                    message: "Syntax error: unexpected end of parsing".to_owned(),
                });
            }
            // cel-go lists errors by position (its errors without a place, first).
            issues.sort_by_key(|issue| issue.span.start);
            Err(CompileError::new(source, issues))
        }
    }
}

/// cel-go's `errorReportingLimit`: at most this many syntax errors are listed.
const ERROR_REPORTING_LIMIT: usize = 100;
/// cel-go's `errorRecoveryLimit`: the parser gives up after this many recoveries.
const ERROR_RECOVERY_LIMIT: u32 = 30;

/// The grammar's rules, whose nesting cel-go's parse listener bounds, each on its own.
#[derive(Clone, Copy)]
enum Rule {
    Expr,
    ConditionalOr,
    ConditionalAnd,
    Relation,
    Calc,
    Unary,
    Member,
    Primary,
    ExprList,
    ListInit,
    FieldInitializerList,
    OptField,
    MapInitializerList,
    EscapeIdent,
    OptExpr,
    Literal,
}
const RULE_COUNT: usize = 16;

/// A parsed expression and its height in the nodes cel-go's visitor counts (ternaries,
/// relations, arithmetic, selects, member calls, indexes). Boxed, so that the results the
/// parsing functions pass up are small: their frames add up once per nesting level.
type Node = Box<NodeData>;

struct NodeData {
    expr: Expr,
    height: u32,
}

/// Parsing stopped for good (a depth or error limit); the reason is in `Parser::fatal`.
struct Abort;
type Parsed<T> = Result<T, Abort>;

struct Parser<'a> {
    source: &'a str,
    tokens: Vec<Token>,
    pos: usize,
    options: &'a ParseOptions,
    max_depth: u32,
    next_id: ExprId,
    rule_depth: [u32; RULE_COUNT],
    /// Lexer and grammar errors.
    syntax_errors: Vec<Issue>,
    /// Errors cel-go finds when it visits the parse tree (literals, reserved names, macros,
    /// disabled syntax): dropped when the visit would not have happened or stopped early.
    semantic_errors: Vec<Issue>,
    /// The error that stopped parsing early, when it is not a syntax error.
    fatal: Option<Issue>,
    /// Parsing stopped early (a depth or error limit).
    aborted: bool,
    /// ANTLR's error recovery mode: set by an error, cleared when a token is matched.
    recovering: bool,
    recovery_attempts: u32,
    height_exceeded: bool,
}

/// The tokens that can start an expression, as ANTLR lists them.
const EXPR_START: &[Kind] = &[
    Kind::LBracket,
    Kind::LBrace,
    Kind::LParen,
    Kind::Dot,
    Kind::Minus,
    Kind::Bang,
    Kind::True,
    Kind::False,
    Kind::Null,
    Kind::NumFloat,
    Kind::NumInt,
    Kind::NumUint,
    Kind::String,
    Kind::Bytes,
    Kind::Ident,
];

fn can_start_expr(kind: Kind) -> bool {
    EXPR_START.contains(&kind)
}

fn expecting(kinds: &[Kind]) -> String {
    let mut kinds = kinds.to_vec();
    kinds.sort();
    if let [one] = kinds.as_slice() {
        return one.display().to_owned();
    }
    let names: Vec<&str> = kinds.iter().map(|kind| kind.display()).collect();
    format!("{{{}}}", names.join(", "))
}

/// Token text as ANTLR shows it in messages (line breaks and tabs escaped).
fn escape_display(text: &str) -> String {
    text.replace('\n', "\\n")
        .replace('\r', "\\r")
        .replace('\t', "\\t")
}

/// Words that are not identifiers, though (except `in`, `true`, `false`, `null`, which are
/// tokens of their own) the grammar lexes them as such; they remain valid field names.
const RESERVED: &[&str] = &[
    "as",
    "break",
    "const",
    "continue",
    "else",
    "false",
    "for",
    "function",
    "if",
    "import",
    "in",
    "let",
    "loop",
    "package",
    "namespace",
    "null",
    "return",
    "true",
    "var",
    "void",
    "while",
];

fn span_of(token: Token) -> Span {
    Span {
        start: token.start,
        end: token.end,
    }
}

fn leaf(expr: Expr) -> Node {
    Box::new(NodeData { expr, height: 0 })
}

impl<'a> Parser<'a> {
    // ---- tokens -------------------------------------------------------------------------

    fn token(&self, ahead: usize) -> Token {
        let last = self.tokens.len().saturating_sub(1);
        self.tokens
            .get((self.pos + ahead).min(last))
            .copied()
            .unwrap_or(Token {
                kind: Kind::Eof,
                start: self.source.len() as u32,
                end: self.source.len() as u32,
            })
    }

    fn peek(&self) -> Kind {
        self.token(0).kind
    }

    fn peek_at(&self, ahead: usize) -> Kind {
        self.token(ahead).kind
    }

    fn text(&self, token: Token) -> &'a str {
        self.source
            .get(token.start as usize..token.end as usize)
            .unwrap_or_default()
    }

    /// Matches the current token (ending error recovery, as ANTLR does on a match).
    fn bump(&mut self) -> Token {
        let token = self.token(0);
        if token.kind != Kind::Eof {
            self.pos += 1;
        }
        self.recovering = false;
        token
    }

    /// Skips the current token during recovery.
    fn skip(&mut self) {
        if self.peek() != Kind::Eof {
            self.pos += 1;
        }
    }

    fn quoted(&self, token: Token) -> String {
        if token.kind == Kind::Eof {
            "'<EOF>'".to_owned()
        } else {
            format!("'{}'", escape_display(self.text(token)))
        }
    }

    // ---- errors and limits ----------------------------------------------------------------

    fn push_syntax_error(&mut self, at: u32, message: String) -> Parsed<()> {
        let message = if self.syntax_errors.len() >= ERROR_REPORTING_LIMIT {
            self.aborted = true;
            format!("More than {ERROR_REPORTING_LIMIT} syntax errors")
        } else {
            message
        };
        self.syntax_errors.push(Issue {
            span: Span { start: at, end: at },
            message: format!("Syntax error: {message}"),
        });
        if self.aborted { Err(Abort) } else { Ok(()) }
    }

    /// A grammar error at `at`, unless one is being recovered from.
    fn syntax_error(&mut self, at: Token, message: String) -> Parsed<()> {
        if self.recovering {
            return Ok(());
        }
        self.recovering = true;
        if self.recovery_attempts == ERROR_RECOVERY_LIMIT {
            self.push_syntax_error(
                at.start,
                format!("error recovery attempt limit exceeded: {ERROR_RECOVERY_LIMIT}"),
            )?;
            self.aborted = true;
            return Err(Abort);
        }
        self.recovery_attempts += 1;
        self.push_syntax_error(at.start, message)
    }

    fn semantic_error(&mut self, at: u32, message: impl Into<String>) {
        self.semantic_errors.push(Issue {
            span: Span { start: at, end: at },
            message: message.into(),
        });
    }

    fn enter(&mut self, rule: Rule) -> Parsed<()> {
        let depth = &mut self.rule_depth[rule as usize];
        *depth += 1;
        if *depth > self.max_depth {
            self.fatal = Some(Issue {
                span: Span::default(),
                message: format!("expression recursion limit exceeded: {}", self.max_depth),
            });
            self.aborted = true;
            return Err(Abort);
        }
        Ok(())
    }

    fn exit(&mut self, rule: Rule) {
        let depth = &mut self.rule_depth[rule as usize];
        *depth = depth.saturating_sub(1);
    }

    /// Runs `body` inside `rule`, counting its nesting.
    fn within<T>(&mut self, rule: Rule, body: impl FnOnce(&mut Self) -> Parsed<T>) -> Parsed<T> {
        self.enter(rule)?;
        let result = body(self);
        self.exit(rule);
        result
    }

    fn id(&mut self) -> ExprId {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    fn new_expr(&mut self, span: Span, kind: ExprKind) -> Expr {
        let id = self.id();
        Expr { id, span, kind }
    }

    /// A placeholder for what could not be parsed (the parse fails anyway).
    fn error_node(&mut self, span: Span) -> Node {
        leaf(self.new_expr(span, ExprKind::Ident("<<error>>".into())))
    }

    /// A node cel-go's visitor counts: one above its highest child. Past the limit, the node is
    /// replaced by a placeholder so that chains stop growing.
    fn counted(&mut self, expr: Expr, children: &[u32]) -> Node {
        let height = 1 + children.iter().copied().max().unwrap_or(0);
        if height > self.max_depth {
            self.height_exceeded = true;
            return Box::new(NodeData {
                expr: Expr {
                    id: expr.id,
                    span: expr.span,
                    kind: ExprKind::Ident("<<too deep>>".into()),
                },
                height: self.max_depth + 1,
            });
        }
        Box::new(NodeData { expr, height })
    }

    fn expect_closer(&mut self, closer: Kind, also: &[Kind]) -> Parsed<()> {
        if self.peek() == closer {
            self.bump();
            return Ok(());
        }
        let found = self.token(0);
        let mut expected = vec![closer];
        expected.extend_from_slice(also);
        if found.kind != Kind::Eof && self.peek_at(1) == closer {
            // ANTLR's single-token deletion.
            let message = format!(
                "extraneous input {} expecting {}",
                self.quoted(found),
                expecting(&expected)
            );
            self.syntax_error(found, message)?;
            self.skip();
            self.bump();
            return Ok(());
        }
        let message = if also.is_empty() && found.kind == Kind::Eof {
            format!("missing {} at {}", closer.display(), self.quoted(found))
        } else {
            format!(
                "mismatched input {} expecting {}",
                self.quoted(found),
                expecting(&expected)
            )
        };
        self.syntax_error(found, message)
    }

    /// `':'`, with ANTLR's single-token deletion (`extraneous input`) and insertion (`missing`).
    fn expect_colon(&mut self) -> Parsed<()> {
        let found = self.token(0);
        if found.kind == Kind::Colon {
            self.bump();
            return Ok(());
        }
        if found.kind != Kind::Eof && self.peek_at(1) == Kind::Colon {
            let message = format!("extraneous input {} expecting ':'", self.quoted(found));
            self.syntax_error(found, message)?;
            self.skip();
            self.bump();
            return Ok(());
        }
        let message = if can_start_expr(found.kind) {
            format!("missing ':' at {}", self.quoted(found))
        } else {
            format!("mismatched input {} expecting ':'", self.quoted(found))
        };
        self.syntax_error(found, message)
    }

    /// Before the first element of a list, map or message, or argument of a call, where the
    /// closer, a lone comma and `?` may come too: reports a token that starts none of them (and
    /// skips it when the next token fits, as ANTLR's single-token deletion does).
    fn check_first_item(&mut self, also: &[Kind], starts_expr: bool) -> Parsed<()> {
        let found = self.token(0);
        if also.contains(&found.kind) || (starts_expr && can_start_expr(found.kind)) {
            return Ok(());
        }
        let mut expected = if starts_expr {
            EXPR_START.to_vec()
        } else {
            Vec::new()
        };
        expected.extend_from_slice(also);
        let next = self.peek_at(1);
        let extraneous = found.kind != Kind::Eof
            && (also.contains(&next) || (starts_expr && can_start_expr(next)));
        let kind = if extraneous {
            "extraneous"
        } else {
            "mismatched"
        };
        let message = format!(
            "{kind} input {} expecting {}",
            self.quoted(found),
            expecting(&expected)
        );
        self.syntax_error(found, message)?;
        if extraneous {
            self.skip();
        }
        Ok(())
    }

    // ---- grammar ------------------------------------------------------------------------

    /// `start : expr EOF`
    fn parse_start(&mut self) -> Parsed<Node> {
        let node = self.parse_expr()?;
        if self.peek() != Kind::Eof {
            let found = self.token(0);
            let kind = if self.peek_at(1) == Kind::Eof {
                "extraneous"
            } else {
                "mismatched"
            };
            let message = format!("{kind} input {} expecting <EOF>", self.quoted(found));
            self.syntax_error(found, message)?;
        }
        Ok(node)
    }

    /// `expr : conditionalOr ('?' conditionalOr ':' expr)?`
    ///
    /// The functions on the path of nesting (`parse_expr` down to `parse_primary`) keep their
    /// frames small, leaving operators and errors to helpers, since their frames add up once per
    /// nesting level.
    fn parse_expr(&mut self) -> Parsed<Node> {
        self.enter(Rule::Expr)?;
        let mut node = self.parse_or()?;
        if self.peek() == Kind::Question {
            node = self.finish_ternary(node)?;
        }
        self.exit(Rule::Expr);
        Ok(node)
    }

    #[inline(never)]
    // Nodes stay boxed from leaf to root, so that results passed up are small.
    #[allow(clippy::boxed_local)]
    fn finish_ternary(&mut self, condition: Node) -> Parsed<Node> {
        let question = self.bump();
        let id = self.id();
        let if_true = self.parse_or()?;
        self.expect_colon()?;
        let if_false = self.parse_expr()?;
        let heights = [condition.height, if_true.height, if_false.height];
        let expr = Expr {
            id,
            span: span_of(question),
            kind: call(
                operators::CONDITIONAL,
                vec![condition.expr, if_true.expr, if_false.expr],
            ),
        };
        Ok(self.counted(expr, &heights))
    }

    /// `conditionalOr : conditionalAnd ('||' conditionalAnd)*`
    fn parse_or(&mut self) -> Parsed<Node> {
        self.enter(Rule::ConditionalOr)?;
        let mut node = self.parse_and()?;
        if self.peek() == Kind::Or {
            node = self.finish_logical(node, Kind::Or)?;
        }
        self.exit(Rule::ConditionalOr);
        Ok(node)
    }

    /// `conditionalAnd : relation ('&&' relation)*`
    fn parse_and(&mut self) -> Parsed<Node> {
        self.enter(Rule::ConditionalAnd)?;
        let mut node = self.parse_relation(0)?;
        if self.peek() == Kind::And {
            node = self.finish_logical(node, Kind::And)?;
        }
        self.exit(Rule::ConditionalAnd);
        Ok(node)
    }

    /// The rest of a `||` or `&&` chain, balanced as cel-go balances it.
    #[inline(never)]
    fn finish_logical(&mut self, first: Node, operator: Kind) -> Parsed<Node> {
        let function = if operator == Kind::Or {
            operators::LOGICAL_OR
        } else {
            operators::LOGICAL_AND
        };
        let mut terms = vec![Some(first)];
        let mut ops = Vec::new();
        while self.peek() == operator {
            let token = self.bump();
            let next = if operator == Kind::Or {
                self.parse_and()?
            } else {
                self.parse_relation(0)?
            };
            let id = self.id();
            terms.push(Some(next));
            ops.push((id, span_of(token)));
        }
        Ok(balance(
            function,
            &mut terms,
            &ops,
            0,
            ops.len().saturating_sub(1),
        ))
    }

    /// `relation : calc | relation ('<'|'<='|'>='|'>'|'=='|'!='|'in') relation`, as ANTLR
    /// climbs precedence: the right operand is a nested `relation` that takes no operator.
    fn parse_relation(&mut self, precedence: u8) -> Parsed<Node> {
        self.enter(Rule::Relation)?;
        let mut node = self.parse_calc(0)?;
        if precedence <= 1 && relation_function(self.peek()).is_some() {
            node = self.finish_relation(node)?;
        }
        self.exit(Rule::Relation);
        Ok(node)
    }

    #[inline(never)]
    fn finish_relation(&mut self, mut left: Node) -> Parsed<Node> {
        while let Some(function) = relation_function(self.peek()) {
            let token = self.bump();
            let id = self.id();
            let right = self.parse_relation(2)?;
            let heights = [left.height, right.height];
            let expr = Expr {
                id,
                span: span_of(token),
                kind: call(function, vec![left.expr, right.expr]),
            };
            left = self.counted(expr, &heights);
        }
        Ok(left)
    }

    /// `calc : unary | calc ('*'|'/'|'%') calc | calc ('+'|'-') calc`, climbed as ANTLR climbs
    /// it (`calc[p]`: `*` binds at 2 with a right operand `calc[3]`, `+` at 1 with `calc[2]`).
    fn parse_calc(&mut self, precedence: u8) -> Parsed<Node> {
        self.enter(Rule::Calc)?;
        let mut node = self.parse_unary()?;
        if calc_function(self.peek(), precedence).is_some() {
            node = self.finish_calc(node, precedence)?;
        }
        self.exit(Rule::Calc);
        Ok(node)
    }

    #[inline(never)]
    fn finish_calc(&mut self, mut left: Node, precedence: u8) -> Parsed<Node> {
        while let Some((function, right_precedence)) = calc_function(self.peek(), precedence) {
            let token = self.bump();
            let id = self.id();
            let right = self.parse_calc(right_precedence)?;
            let heights = [left.height, right.height];
            let expr = Expr {
                id,
                span: span_of(token),
                kind: call(function, vec![left.expr, right.expr]),
            };
            left = self.counted(expr, &heights);
        }
        Ok(left)
    }

    /// `unary : member | '!'+ member | '-'+ member`. An even run of `!` or `-` cancels out; a
    /// lone `-` before a number is the number's sign (the `literal` rule), so
    /// `-9223372036854775808` is the int minimum while `-(1)` and `--1` are not folded.
    fn parse_unary(&mut self) -> Parsed<Node> {
        self.enter(Rule::Unary)?;
        let operator = self.peek();
        let signed_number =
            operator == Kind::Minus && matches!(self.peek_at(1), Kind::NumInt | Kind::NumFloat);
        let node = if matches!(operator, Kind::Bang | Kind::Minus) && !signed_number {
            self.parse_prefixed()?
        } else {
            self.parse_member()?
        };
        self.exit(Rule::Unary);
        Ok(node)
    }

    #[inline(never)]
    fn parse_prefixed(&mut self) -> Parsed<Node> {
        let operator = self.peek();
        let first = self.bump();
        let mut count = 1;
        while self.peek() == operator {
            self.bump();
            count += 1;
        }
        if self.peek() == Kind::Bang {
            // `-!x`: no alternative of `unary` fits (`!-x` is refused by `primary`).
            let bang = self.token(0);
            let text = self
                .source
                .get(first.start as usize..bang.end as usize)
                .unwrap_or_default();
            self.syntax_error(
                bang,
                format!("no viable alternative at input '{}'", escape_display(text)),
            )?;
            return Ok(self.error_node(span_of(first)));
        }
        if self.peek() == Kind::Eof {
            // ANTLR's recovery at the end of `'!'+` (the loop's exit) and of `'-'+` (a
            // decision shared with negative numbers) words these two differently.
            let end = self.token(0);
            let message = if operator == Kind::Bang {
                format!(
                    "extraneous input '<EOF>' expecting {}",
                    expecting(EXPR_START)
                )
            } else {
                "no viable alternative at input '-'".to_owned()
            };
            self.syntax_error(end, message)?;
            return Ok(self.error_node(span_of(first)));
        }
        let id = (count % 2 == 1).then(|| self.id());
        let member = self.parse_member()?;
        let Some(id) = id else {
            return Ok(member);
        };
        let function = if operator == Kind::Bang {
            operators::LOGICAL_NOT
        } else {
            operators::NEGATE
        };
        Ok(Box::new(NodeData {
            height: member.height,
            expr: Expr {
                id,
                span: span_of(first),
                kind: call(function, vec![member.expr]),
            },
        }))
    }

    /// `member : primary | member '.' '?'? escapeIdent | member '.' IDENTIFIER '(' exprList? ')'
    /// | member '[' '?'? expr ']'`, as a loop over the suffixes.
    fn parse_member(&mut self) -> Parsed<Node> {
        self.enter(Rule::Member)?;
        let mut node = self.parse_primary()?;
        if matches!(self.peek(), Kind::Dot | Kind::LBracket) {
            node = self.finish_member(node)?;
        }
        self.exit(Rule::Member);
        Ok(node)
    }

    #[inline(never)]
    fn finish_member(&mut self, mut node: Node) -> Parsed<Node> {
        loop {
            match self.peek() {
                Kind::Dot => node = self.parse_select(node)?,
                Kind::LBracket => node = self.parse_index(node)?,
                _ => return Ok(node),
            }
        }
    }

    /// `[index]` or `[?index]` after `operand`.
    // Nodes stay boxed from leaf to root, so that results passed up are small.
    #[allow(clippy::boxed_local)]
    fn parse_index(&mut self, operand: Node) -> Parsed<Node> {
        let open = self.bump();
        let id = self.id();
        let optional = self.peek() == Kind::Question;
        if optional {
            self.bump();
        }
        let index = self.parse_expr()?;
        self.expect_closer(Kind::RBracket, &[])?;
        let heights = [operand.height, index.height];
        let expr = if optional && !self.options.optional_syntax {
            self.semantic_error(open.start, "unsupported syntax '[?'");
            self.error_node(span_of(open)).expr
        } else {
            let function = if optional {
                operators::OPT_INDEX
            } else {
                operators::INDEX
            };
            Expr {
                id,
                span: span_of(open),
                kind: call(function, vec![operand.expr, index.expr]),
            }
        };
        Ok(self.counted(expr, &heights))
    }

    /// `.field`, `.?field`, `.method(args)` after `operand`.
    fn parse_select(&mut self, operand: Node) -> Parsed<Node> {
        let dot = self.bump();
        let optional = self.peek() == Kind::Question;
        let question = optional.then(|| self.bump());
        let name_token = self.token(0);
        match name_token.kind {
            Kind::Ident | Kind::EscIdent => {}
            Kind::True | Kind::False | Kind::Null => {
                // cel-go rewrites ANTLR's message for these to name the identifier expected.
                let message = format!(
                    "mismatched input {} expecting IDENTIFIER",
                    self.quoted(name_token)
                );
                self.syntax_error(name_token, message)?;
                self.skip();
                return Ok(operand);
            }
            _ => {
                let mut text = self.text(dot).to_owned();
                if let Some(question) = question {
                    text.push_str(self.text(question));
                }
                text.push_str(self.text(name_token));
                self.syntax_error(
                    name_token,
                    format!("no viable alternative at input '{}'", escape_display(&text)),
                )?;
                return Ok(operand);
            }
        }
        self.bump();
        if !optional && name_token.kind == Kind::Ident && self.peek() == Kind::LParen {
            let open = self.bump();
            let id = self.id();
            let args = self.parse_call_args()?;
            let mut heights: Vec<u32> = args.iter().map(|arg| arg.height).collect();
            heights.push(operand.height);
            let name = self.text(name_token);
            let args = args.into_iter().map(|arg| arg.expr).collect();
            let expr = self.call_or_macro(id, span_of(open), name, Some(operand.expr), args);
            return Ok(self.counted(expr, &heights));
        }
        let field = self.within(Rule::EscapeIdent, |p| Ok(p.field_name(name_token)))?;
        let expr = if optional {
            if self.options.optional_syntax {
                let name = self.new_expr(
                    span_of(name_token),
                    ExprKind::Literal(Literal::String(field)),
                );
                let id = self.id();
                Expr {
                    id,
                    span: span_of(dot),
                    kind: call(operators::OPT_SELECT, vec![operand.expr, name]),
                }
            } else {
                self.semantic_error(dot.start, "unsupported syntax '.?'");
                self.error_node(span_of(dot)).expr
            }
        } else {
            self.new_expr(
                span_of(dot),
                ExprKind::Select {
                    operand: Box::new(operand.expr),
                    field,
                    test: false,
                },
            )
        };
        Ok(self.counted(expr, &[operand.height]))
    }

    /// The name an `escapeIdent` token stands for: an identifier, or a backtick-quoted name
    /// when [`ParseOptions::escaped_identifiers`] allows it.
    fn field_name(&mut self, token: Token) -> Arc<str> {
        let text = self.text(token);
        if token.kind != Kind::EscIdent {
            return text.into();
        }
        if !self.options.escaped_identifiers {
            self.semantic_error(token.start, "unsupported syntax: '`'");
        }
        text.get(1..text.len().saturating_sub(1))
            .unwrap_or_default()
            .into()
    }

    /// `'(' exprList? ')'`, after the `(`.
    fn parse_call_args(&mut self) -> Parsed<Vec<Node>> {
        let mut args = Vec::new();
        self.check_first_item(&[Kind::RParen], true)?;
        if self.peek() != Kind::RParen {
            self.enter(Rule::ExprList)?;
            args.push(self.parse_expr()?);
            while self.peek() == Kind::Comma {
                self.bump();
                args.push(self.parse_expr()?);
            }
            self.exit(Rule::ExprList);
        }
        self.expect_closer(Kind::RParen, &[])?;
        Ok(args)
    }

    /// A call, or the expansion of the macro it names (cel-go's `globalCallOrMacro` and
    /// `receiverCallOrMacro`).
    fn call_or_macro(
        &mut self,
        id: ExprId,
        span: Span,
        function: &str,
        target: Option<Expr>,
        args: Vec<Expr>,
    ) -> Expr {
        let Some(found) = macros::lookup(function, args.len(), target.as_ref(), self.options)
        else {
            return Expr {
                id,
                span,
                kind: ExprKind::Call {
                    target: target.map(Box::new),
                    function: function.into(),
                    args,
                },
            };
        };
        let mut factory = Factory {
            next_id: &mut self.next_id,
            at: Span {
                start: span.start,
                end: span.start,
            },
        };
        let expanded = macros::expand(&mut factory, found, target, args);
        match expanded {
            Ok(expr) => expr,
            Err(error) => {
                // cel-go gives the call's id back when nothing was numbered after it.
                if id + 1 == self.next_id {
                    self.next_id = id;
                }
                let at = if error.span == Span::default() {
                    span
                } else {
                    error.span
                };
                self.semantic_error(at.start, error.message);
                self.error_node(span).expr
            }
        }
    }

    /// `primary`: identifiers, global calls, parentheses, lists, maps, messages, literals.
    fn parse_primary(&mut self) -> Parsed<Node> {
        self.enter(Rule::Primary)?;
        let node = match self.peek() {
            Kind::Dot | Kind::Ident => self.parse_name()?,
            Kind::LParen => self.parse_parenthesized()?,
            Kind::LBracket => self.parse_list()?,
            Kind::LBrace => self.parse_map()?,
            Kind::Minus if matches!(self.peek_at(1), Kind::NumInt | Kind::NumFloat) => {
                self.parse_literal()?
            }
            Kind::NumInt
            | Kind::NumUint
            | Kind::NumFloat
            | Kind::String
            | Kind::Bytes
            | Kind::True
            | Kind::False
            | Kind::Null => self.parse_literal()?,
            _ => self.primary_error()?,
        };
        self.exit(Rule::Primary);
        Ok(node)
    }

    /// `'(' expr ')'`
    fn parse_parenthesized(&mut self) -> Parsed<Node> {
        self.bump();
        let inner = self.parse_expr()?;
        self.expect_closer(Kind::RParen, &[])?;
        Ok(inner)
    }

    /// A token that starts no `primary`.
    #[cold]
    #[inline(never)]
    fn primary_error(&mut self) -> Parsed<Node> {
        let token = self.token(0);
        if token.kind == Kind::Minus {
            let next = self.token(1);
            let text = format!("{}{}", self.text(token), self.text(next));
            self.syntax_error(
                next,
                format!("no viable alternative at input '{}'", escape_display(&text)),
            )?;
            return Ok(self.error_node(span_of(token)));
        }
        let expected = expecting(EXPR_START);
        if token.kind != Kind::Eof && can_start_expr(self.peek_at(1)) {
            let message = format!(
                "extraneous input {} expecting {expected}",
                self.quoted(token)
            );
            self.syntax_error(token, message)?;
            self.skip();
            return self.parse_primary();
        }
        let message = format!(
            "mismatched input {} expecting {expected}",
            self.quoted(token)
        );
        self.syntax_error(token, message)?;
        Ok(self.error_node(span_of(token)))
    }

    /// `'.'? IDENTIFIER`, `'.'? IDENTIFIER '(' exprList? ')'`, and
    /// `'.'? IDENTIFIER ('.' IDENTIFIER)* '{' fieldInitializerList? ','? '}'`.
    fn parse_name(&mut self) -> Parsed<Node> {
        let start = self.token(0);
        let leading_dot = start.kind == Kind::Dot;
        let first = usize::from(leading_dot);
        if self.peek_at(first) != Kind::Ident {
            let found = self.token(first);
            if leading_dot {
                self.bump();
            }
            let message = format!(
                "mismatched input {} expecting IDENTIFIER",
                self.quoted(found)
            );
            self.syntax_error(found, message)?;
            return Ok(self.error_node(span_of(start)));
        }
        // A message literal is a qualified name followed by `{`.
        let mut last = first;
        while self.peek_at(last + 1) == Kind::Dot && self.peek_at(last + 2) == Kind::Ident {
            last += 2;
        }
        if self.peek_at(last + 1) == Kind::LBrace {
            let mut name = String::new();
            if leading_dot {
                name.push('.');
                self.bump();
            }
            loop {
                let part = self.bump();
                name.push_str(self.text(part));
                if self.peek() != Kind::Dot || self.peek_at(1) != Kind::Ident {
                    break;
                }
                self.bump();
                name.push('.');
            }
            return self.parse_message(name);
        }
        if leading_dot {
            self.bump();
        }
        let ident = self.bump();
        let text = self.text(ident);
        let name: Arc<str> = if leading_dot {
            format!(".{text}").into()
        } else {
            text.into()
        };
        let reserved = RESERVED.contains(&text);
        if self.peek() == Kind::LParen {
            if reserved {
                self.semantic_error(start.start, format!("reserved identifier: {text}"));
            }
            let open = self.bump();
            let id = self.id();
            let args = self.parse_call_args()?;
            if reserved {
                return Ok(self.error_node(span_of(start)));
            }
            let height = args.iter().map(|arg| arg.height).max().unwrap_or(0);
            let args = args.into_iter().map(|arg| arg.expr).collect();
            let expr = self.call_or_macro(id, span_of(open), &name, None, args);
            return Ok(Box::new(NodeData { expr, height }));
        }
        if reserved {
            self.semantic_error(start.start, format!("reserved identifier: {text}"));
            return Ok(self.error_node(span_of(start)));
        }
        Ok(leaf(self.new_expr(span_of(ident), ExprKind::Ident(name))))
    }

    /// `'{' fieldInitializerList? ','? '}'` after a message name.
    fn parse_message(&mut self, type_name: String) -> Parsed<Node> {
        let open = self.bump();
        let id = self.id();
        let mut fields = Vec::new();
        let mut height = 0;
        self.check_first_item(
            &[
                Kind::RBrace,
                Kind::Comma,
                Kind::Question,
                Kind::Ident,
                Kind::EscIdent,
            ],
            false,
        )?;
        let list_start = self.token(0).start;
        if !matches!(self.peek(), Kind::RBrace | Kind::Comma) {
            self.enter(Rule::FieldInitializerList)?;
            loop {
                // cel-go numbers the entry (at its colon) before its value.
                let entry_id = self.id();
                let (optional, name_token) = self.parse_opt_field()?;
                let field = match name_token {
                    Some(token)
                        if token.kind == Kind::EscIdent && !self.options.escaped_identifiers =>
                    {
                        // cel-go places this error at the start of the field list.
                        self.semantic_error(list_start, "unsupported syntax: '`'");
                        Arc::from("")
                    }
                    Some(token) => self.within(Rule::EscapeIdent, |p| Ok(p.field_name(token)))?,
                    None => Arc::from(""),
                };
                self.expect_colon()?;
                let mark = self.semantic_errors.len();
                let value = self.parse_expr()?;
                if optional && !self.options.optional_syntax {
                    // cel-go skips such a field without visiting it.
                    self.semantic_errors.truncate(mark);
                }
                height = height.max(value.height);
                fields.push(FieldInit {
                    id: entry_id,
                    name: field,
                    value: value.expr,
                    optional: optional && self.options.optional_syntax,
                });
                if self.peek() != Kind::Comma || self.peek_at(1) == Kind::RBrace {
                    break;
                }
                self.bump();
            }
            self.exit(Rule::FieldInitializerList);
        }
        if self.peek() == Kind::Comma {
            self.bump();
        }
        self.expect_closer(Kind::RBrace, &[Kind::Comma])?;
        let expr = Expr {
            id,
            span: span_of(open),
            kind: ExprKind::Struct {
                type_name: type_name.into(),
                fields,
            },
        };
        Ok(Box::new(NodeData { expr, height }))
    }

    /// `optField : '?'? escapeIdent`: whether it is optional, and the name's token.
    fn parse_opt_field(&mut self) -> Parsed<(bool, Option<Token>)> {
        self.enter(Rule::OptField)?;
        let question = (self.peek() == Kind::Question).then(|| self.bump());
        if let (Some(question), false) = (question, self.options.optional_syntax) {
            self.semantic_error(question.start, "unsupported syntax '?'");
        }
        let name = self.token(0);
        let name = if matches!(name.kind, Kind::Ident | Kind::EscIdent) {
            self.bump();
            Some(name)
        } else {
            let message = format!(
                "mismatched input {} expecting {}",
                self.quoted(name),
                expecting(&[Kind::Ident, Kind::EscIdent])
            );
            self.syntax_error(name, message)?;
            None
        };
        self.exit(Rule::OptField);
        Ok((question.is_some(), name))
    }

    /// `'[' listInit? ','? ']'`
    fn parse_list(&mut self) -> Parsed<Node> {
        let open = self.bump();
        let id = self.id();
        let mut elements = Vec::new();
        let mut optional_indices = Vec::new();
        let mut height = 0;
        self.check_first_item(&[Kind::RBracket, Kind::Comma, Kind::Question], true)?;
        if !matches!(self.peek(), Kind::RBracket | Kind::Comma) {
            self.enter(Rule::ListInit)?;
            loop {
                let (question, element) = self.parse_opt_expr()?;
                let optional = self.check_optional(question);
                height = height.max(element.height);
                if optional {
                    optional_indices.push(elements.len() as u32);
                }
                elements.push(element.expr);
                if self.peek() != Kind::Comma || self.peek_at(1) == Kind::RBracket {
                    break;
                }
                self.bump();
            }
            self.exit(Rule::ListInit);
        }
        if self.peek() == Kind::Comma {
            self.bump();
        }
        self.expect_closer(Kind::RBracket, &[Kind::Comma])?;
        let expr = Expr {
            id,
            span: span_of(open),
            kind: ExprKind::List {
                elements,
                optional_indices,
            },
        };
        Ok(Box::new(NodeData { expr, height }))
    }

    /// `optExpr : '?'? expr`: the `?`, if any, and the expression.
    fn parse_opt_expr(&mut self) -> Parsed<(Option<Token>, Node)> {
        self.enter(Rule::OptExpr)?;
        let question = (self.peek() == Kind::Question).then(|| self.bump());
        let node = self.parse_expr()?;
        self.exit(Rule::OptExpr);
        Ok((question, node))
    }

    /// Whether an element written with `question` is optional; a `?` without optional syntax
    /// is refused (and the element not marked).
    fn check_optional(&mut self, question: Option<Token>) -> bool {
        match question {
            Some(question) if !self.options.optional_syntax => {
                self.semantic_error(question.start, "unsupported syntax '?'");
                false
            }
            Some(_) => true,
            None => false,
        }
    }

    /// `'{' mapInitializerList? ','? '}'`
    fn parse_map(&mut self) -> Parsed<Node> {
        let open = self.bump();
        let id = self.id();
        let mut entries = Vec::new();
        let mut height = 0;
        self.check_first_item(&[Kind::RBrace, Kind::Comma, Kind::Question], true)?;
        if !matches!(self.peek(), Kind::RBrace | Kind::Comma) {
            self.enter(Rule::MapInitializerList)?;
            loop {
                // cel-go numbers the entry (at its colon) before its key.
                let entry_id = self.id();
                let mark = self.semantic_errors.len();
                let (question, key) = self.parse_opt_expr()?;
                self.expect_colon()?;
                let value = self.parse_expr()?;
                if question.is_some() && !self.options.optional_syntax {
                    // cel-go skips such an entry without visiting it.
                    self.semantic_errors.truncate(mark);
                }
                let optional = self.check_optional(question);
                height = height.max(key.height).max(value.height);
                entries.push(MapEntry {
                    id: entry_id,
                    key: key.expr,
                    value: value.expr,
                    optional,
                });
                if self.peek() != Kind::Comma || self.peek_at(1) == Kind::RBrace {
                    break;
                }
                self.bump();
            }
            self.exit(Rule::MapInitializerList);
        }
        if self.peek() == Kind::Comma {
            self.bump();
        }
        self.expect_closer(Kind::RBrace, &[Kind::Comma])?;
        let expr = Expr {
            id,
            span: span_of(open),
            kind: ExprKind::Map { entries },
        };
        Ok(Box::new(NodeData { expr, height }))
    }

    /// `literal`: numbers (with an optional `-` on ints and doubles), strings, bytes, `true`,
    /// `false`, `null`.
    fn parse_literal(&mut self) -> Parsed<Node> {
        self.within(Rule::Literal, |p| {
            let first = p.bump();
            let (negative, token) = if first.kind == Kind::Minus {
                (true, p.bump())
            } else {
                (false, first)
            };
            let span = Span {
                start: first.start,
                end: token.end,
            };
            let text = p.text(token);
            let value = match token.kind {
                Kind::NumInt => parse_int(text, negative).ok_or("invalid int literal"),
                Kind::NumUint => parse_uint(text).ok_or("invalid uint literal"),
                Kind::NumFloat => parse_double(text, negative).ok_or("invalid double literal"),
                Kind::String => unescape(text, false).map(|bytes| {
                    Literal::String(String::from_utf8(bytes).unwrap_or_default().into())
                }),
                Kind::Bytes => unescape(text.get(1..).unwrap_or_default(), true)
                    .map(|bytes| Literal::Bytes(bytes.into())),
                Kind::True => Ok(Literal::Bool(true)),
                Kind::False => Ok(Literal::Bool(false)),
                _ => Ok(Literal::Null),
            };
            let value = value.unwrap_or_else(|message| {
                p.semantic_error(span.start, message);
                Literal::Null
            });
            Ok(leaf(p.new_expr(span, ExprKind::Literal(value))))
        })
    }
}

fn relation_function(kind: Kind) -> Option<&'static str> {
    Some(match kind {
        Kind::Lt => operators::LESS,
        Kind::Le => operators::LESS_EQUALS,
        Kind::Ge => operators::GREATER_EQUALS,
        Kind::Gt => operators::GREATER,
        Kind::Eq => operators::EQUALS,
        Kind::Ne => operators::NOT_EQUALS,
        Kind::In => operators::IN,
        _ => return None,
    })
}

/// The function of an arithmetic operator allowed at `precedence`, and its right operand's.
fn calc_function(kind: Kind, precedence: u8) -> Option<(&'static str, u8)> {
    Some(match kind {
        Kind::Star if precedence <= 2 => (operators::MULTIPLY, 3),
        Kind::Slash if precedence <= 2 => (operators::DIVIDE, 3),
        Kind::Percent if precedence <= 2 => (operators::MODULO, 3),
        Kind::Plus if precedence <= 1 => (operators::ADD, 2),
        Kind::Minus if precedence <= 1 => (operators::SUBTRACT, 2),
        _ => return None,
    })
}

fn call(function: &str, args: Vec<Expr>) -> ExprKind {
    ExprKind::Call {
        target: None,
        function: function.into(),
        args,
    }
}

/// cel-go's `balancedTree`: `a && b && c && d` becomes `(a && b) && (c && d)`, each operator at
/// the middle of its range keeping its own id and place. Recursion is logarithmic.
fn balance(
    function: &str,
    terms: &mut [Option<Node>],
    ops: &[(ExprId, Span)],
    low: usize,
    high: usize,
) -> Node {
    let mid = (low + high).div_ceil(2);
    let take = |terms: &mut [Option<Node>], index: usize| {
        terms
            .get_mut(index)
            .and_then(Option::take)
            .unwrap_or_else(|| {
                leaf(Expr {
                    id: 0,
                    span: Span::default(),
                    kind: ExprKind::Ident("<<error>>".into()),
                })
            })
    };
    let left = if mid == low {
        take(terms, mid)
    } else {
        balance(function, terms, ops, low, mid - 1)
    };
    let right = if mid == high {
        take(terms, mid + 1)
    } else {
        balance(function, terms, ops, mid + 1, high)
    };
    let (id, span) = ops.get(mid).copied().unwrap_or_default();
    Box::new(NodeData {
        height: left.height.max(right.height),
        expr: Expr {
            id,
            span,
            kind: call(function, vec![left.expr, right.expr]),
        },
    })
}

fn parse_int(text: &str, negative: bool) -> Option<Literal> {
    let (digits, radix) = match text.strip_prefix("0x") {
        Some(hex) => (hex, 16),
        None => (text, 10),
    };
    let signed = if negative {
        format!("-{digits}")
    } else {
        digits.to_owned()
    };
    i64::from_str_radix(&signed, radix).ok().map(Literal::Int)
}

fn parse_uint(text: &str) -> Option<Literal> {
    let text = text.get(..text.len().saturating_sub(1))?;
    let (digits, radix) = match text.strip_prefix("0x") {
        Some(hex) => (hex, 16),
        None => (text, 10),
    };
    u64::from_str_radix(digits, radix).ok().map(Literal::Uint)
}

fn parse_double(text: &str, negative: bool) -> Option<Literal> {
    let value: f64 = text.parse().ok()?;
    // Go's ParseFloat refuses values that round to infinity.
    if value.is_infinite() {
        return None;
    }
    Some(Literal::Double(if negative { -value } else { value }))
}

/// The value of a string literal's text (quotes and an `r` prefix included; the `b` of bytes
/// removed), as cel-go's `unescape` computes it: line breaks normalized to `\n`, escapes decoded
/// (`\x`, octal: code points in strings, bytes in bytes; `\u`, `\U`: strings only).
fn unescape(text: &str, bytes: bool) -> Result<Vec<u8>, &'static str> {
    const MALFORMED: &str = "unable to unescape string";
    let normalized;
    let text = if text.contains('\r') {
        normalized = text.replace("\r\n", "\n").replace('\r', "\n");
        normalized.as_str()
    } else {
        text
    };
    let (raw, quoted) = match text.strip_prefix(['r', 'R']) {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let content =
        if quoted.len() >= 6 && (quoted.starts_with("\"\"\"") || quoted.starts_with("'''")) {
            quoted.get(3..quoted.len() - 3)
        } else if quoted.len() >= 2 {
            quoted.get(1..quoted.len() - 1)
        } else {
            None
        }
        .ok_or(MALFORMED)?;
    if raw || !content.contains('\\') {
        return Ok(content.as_bytes().to_vec());
    }
    let mut out = Vec::with_capacity(content.len());
    let mut chars = content.char_indices();
    let source = content.as_bytes();
    while let Some((at, c)) = chars.next() {
        if c != '\\' {
            let mut buffer = [0; 4];
            out.extend_from_slice(c.encode_utf8(&mut buffer).as_bytes());
            continue;
        }
        let Some((_, escape)) = chars.next() else {
            return Err("unable to unescape string, found '\\' as last character");
        };
        let simple = match escape {
            'a' => Some(0x07),
            'b' => Some(0x08),
            'f' => Some(0x0c),
            'n' => Some(b'\n'),
            'r' => Some(b'\r'),
            't' => Some(b'\t'),
            'v' => Some(0x0b),
            '\\' => Some(b'\\'),
            '\'' => Some(b'\''),
            '"' => Some(b'"'),
            '`' => Some(b'`'),
            '?' => Some(b'?'),
            _ => None,
        };
        if let Some(byte) = simple {
            out.push(byte);
            continue;
        }
        let (digits, radix) = match escape {
            'x' | 'X' => (2, 16),
            'u' if !bytes => (4, 16),
            'U' if !bytes => (8, 16),
            '0'..='3' => (2, 8),
            _ => return Err(MALFORMED),
        };
        let from = at + 2;
        let digit_text = source.get(from..from + digits).ok_or(if radix == 8 {
            "unable to unescape octal sequence in string"
        } else {
            MALFORMED
        })?;
        let mut value: u32 = if radix == 8 {
            escape as u32 - '0' as u32
        } else {
            0
        };
        for &digit in digit_text {
            let digit = (digit as char).to_digit(radix).ok_or(if radix == 8 {
                "unable to unescape octal sequence in string"
            } else {
                MALFORMED
            })?;
            value = value * radix + digit;
        }
        for _ in 0..digits {
            chars.next();
        }
        if bytes && matches!(escape, 'x' | 'X' | '0'..='3') {
            // Octal and hex escapes are byte values in bytes literals (at most 0o377 = 255).
            out.push(value as u8);
            continue;
        }
        let decoded = char::from_u32(value).ok_or("invalid unicode code point")?;
        let mut buffer = [0; 4];
        out.extend_from_slice(decoded.encode_utf8(&mut buffer).as_bytes());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    //! The expectations of the `*_CASES` tables were produced by cel-go v0.26.0 itself (its
    //! parser in a `cel.NewEnv` configured as kube-apiserver 1.35 configures it, printing each
    //! tree as [`sexpr`] does): trees, ids and positions are cel-go's; for errors, the
    //! `ERROR: <input>:line:col: message` lines (cel-go's place-less errors, shown at `-1:0`, are
    //! at 1:1 here).

    use super::*;

    fn q(s: &str) -> String {
        let mut out = String::from("\"");
        for c in s.chars() {
            match c {
                '"' | '\\' => {
                    out.push('\\');
                    out.push(c);
                }
                ' '..='~' => out.push(c),
                _ => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            }
        }
        out.push('"');
        out
    }

    /// The tree as one line, in the format of the cel-go program that produced the expectations:
    /// `(call fn target|_ args…)#id@offset`, offsets in characters.
    fn sexpr(e: &Expr, src: &str) -> String {
        let off = |start: u32| src.get(..start as usize).map_or(0, |s| s.chars().count());
        let adorn = |id: u32, start: u32| format!("#{id}@{}", off(start));
        let body = match &e.kind {
            ExprKind::Literal(l) => match l {
                Literal::Bool(b) => b.to_string(),
                Literal::Int(i) => i.to_string(),
                Literal::Uint(u) => format!("{u}u"),
                Literal::Double(d) => format!("d{:x}", d.to_bits()),
                Literal::String(s) => q(s),
                Literal::Bytes(b) => format!(
                    "b{}",
                    b.iter().map(|x| format!("{x:02x}")).collect::<String>()
                ),
                Literal::Null => "null".into(),
            },
            ExprKind::Ident(n) => n.to_string(),
            ExprKind::Select {
                operand,
                field,
                test,
            } => {
                format!(
                    "({} {} {})",
                    if *test { "has" } else { "sel" },
                    sexpr(operand, src),
                    field
                )
            }
            ExprKind::Call {
                target,
                function,
                args,
            } => {
                let mut parts = vec!["(call".to_string(), function.to_string()];
                parts.push(target.as_ref().map_or("_".to_string(), |t| sexpr(t, src)));
                parts.extend(args.iter().map(|a| sexpr(a, src)));
                parts.join(" ") + ")"
            }
            ExprKind::List {
                elements,
                optional_indices,
            } => {
                let idx: Vec<String> = optional_indices.iter().map(|i| i.to_string()).collect();
                let mut parts = vec!["(list".to_string(), format!("[{}]", idx.join(" "))];
                parts.extend(elements.iter().map(|a| sexpr(a, src)));
                parts.join(" ") + ")"
            }
            ExprKind::Map { entries } => {
                let mut parts = vec!["(map".to_string()];
                for en in entries {
                    parts.push(format!(
                        "(ent{} {} {})#{}",
                        if en.optional { "?" } else { "" },
                        sexpr(&en.key, src),
                        sexpr(&en.value, src),
                        en.id
                    ));
                }
                parts.join(" ") + ")"
            }
            ExprKind::Struct { type_name, fields } => {
                let mut parts = vec!["(struct".to_string(), type_name.to_string()];
                for f in fields {
                    parts.push(format!(
                        "(fld{} {} {})#{}",
                        if f.optional { "?" } else { "" },
                        f.name,
                        sexpr(&f.value, src),
                        f.id
                    ));
                }
                parts.join(" ") + ")"
            }
            ExprKind::Comprehension(c) => format!(
                "(compr {} {} {} {} {} {} {} {})",
                c.iter_var,
                c.iter_var2.as_deref().unwrap_or("_"),
                sexpr(&c.iter_range, src),
                c.accu_var,
                sexpr(&c.accu_init, src),
                sexpr(&c.loop_condition, src),
                sexpr(&c.loop_step, src),
                sexpr(&c.result, src)
            ),
        };
        body + &adorn(e.id, e.span.start)
    }

    /// The error lines of a failure, or the tree.
    fn outcome(source: &str, options: &ParseOptions) -> String {
        match parse(source, options) {
            Ok(expr) => sexpr(&expr, source),
            Err(error) => error
                .to_string()
                .lines()
                .filter(|line| line.starts_with("ERROR"))
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }

    fn check(cases: &[(&str, &str)], options: &ParseOptions) {
        let mut failures = Vec::new();
        for (source, expected) in cases {
            let got = outcome(source, options);
            if got != *expected {
                failures.push(format!(
                    "{source:?}\n  expected: {expected}\n  got:      {got}"
                ));
            }
        }
        assert!(
            failures.is_empty(),
            "{} of {} differ:\n{}",
            failures.len(),
            cases.len(),
            failures.join("\n")
        );
    }

    #[test]
    fn matches_cel_go_with_default_options() {
        check(DEFAULT_CASES, &ParseOptions::default());
    }

    #[test]
    fn matches_cel_go_with_bind() {
        check(
            BIND_CASES,
            &ParseOptions {
                bind_macro: true,
                ..ParseOptions::default()
            },
        );
    }

    #[test]
    fn matches_cel_go_without_extensions() {
        let options = ParseOptions {
            optional_syntax: false,
            two_variable_comprehensions: false,
            sort_by_macro: false,
            ..ParseOptions::default()
        };
        check(NO_EXTENSION_CASES, &options);
    }

    #[test]
    fn matches_cel_go_with_escaped_identifiers() {
        check(
            ESCAPE_CASES,
            &ParseOptions {
                escaped_identifiers: true,
                ..ParseOptions::default()
            },
        );
    }

    fn nested(open: &str, middle: &str, close: &str, count: usize) -> String {
        format!("{}{middle}{}", open.repeat(count), close.repeat(count))
    }

    fn error_of(source: &str, options: &ParseOptions) -> String {
        match parse(source, options) {
            Ok(_) => "parsed".to_owned(),
            Err(error) => error
                .issues
                .iter()
                .map(|issue| issue.message.as_str())
                .collect::<Vec<_>>()
                .join("; "),
        }
    }

    const NESTING_LIMIT: &str = "expression recursion limit exceeded: 250";
    const HEIGHT_LIMIT: &str = "max recursion depth exceeded";

    #[test]
    fn nesting_is_bounded_as_cel_go_bounds_it() {
        let options = ParseOptions::default();
        for (open, middle, close) in [
            ("(", "x", ")"),
            ("[", "x", "]"),
            ("f(", "x", ")"),
            ("{1: ", "x", "}"),
            ("-(", "x", ")"),
        ] {
            assert_eq!(
                error_of(&nested(open, middle, close, 249), &options),
                "parsed",
                "{open}"
            );
            assert_eq!(
                error_of(&nested(open, middle, close, 250), &options),
                NESTING_LIMIT,
                "{open}"
            );
        }
        assert_eq!(
            error_of(&format!("{}c", "a ? b : ".repeat(249)), &options),
            "parsed"
        );
        assert_eq!(
            error_of(&format!("{}c", "a ? b : ".repeat(250)), &options),
            NESTING_LIMIT
        );
        // Each operand of `1 + 2 * (…)` nests `calc` three deep, as ANTLR's rules do.
        assert_eq!(
            error_of(&nested("1 + 2 * (", "x", ")", 83), &options),
            "parsed"
        );
        assert_eq!(
            error_of(&nested("1 + 2 * (", "x", ")", 84), &options),
            NESTING_LIMIT
        );
    }

    #[test]
    fn chains_are_bounded_as_cel_go_bounds_them() {
        let options = ParseOptions::default();
        let chain = |separator: &str, count: usize| vec!["a"; count + 1].join(separator);
        for separator in [" + ", " < ", " * "] {
            assert_eq!(error_of(&chain(separator, 250), &options), "parsed");
            assert_eq!(error_of(&chain(separator, 251), &options), HEIGHT_LIMIT);
        }
        for suffix in [".b", "[0]", ".f()", ".?b"] {
            assert_eq!(
                error_of(&format!("a{}", suffix.repeat(250)), &options),
                "parsed"
            );
            assert_eq!(
                error_of(&format!("a{}", suffix.repeat(251)), &options),
                HEIGHT_LIMIT
            );
        }
        // `&&` and `||` chains are balanced (cel-go's logic manager): no limit but size.
        assert_eq!(error_of(&chain(" && ", 5000), &options), "parsed");
        assert_eq!(
            error_of(&"!".repeat(5001), &options),
            "Syntax error: extraneous input '<EOF>' expecting {'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}"
        );
    }

    #[test]
    fn huge_inputs_are_refused_without_exhausting_the_stack() {
        let options = ParseOptions {
            max_length: usize::MAX,
            ..ParseOptions::default()
        };
        assert_eq!(
            error_of(&nested("(", "x", ")", 100_000), &options),
            NESTING_LIMIT
        );
        assert_eq!(error_of(&"[".repeat(100_000), &options), NESTING_LIMIT);
        assert_eq!(
            error_of(&vec!["1"; 10_001].join("+"), &options),
            HEIGHT_LIMIT
        );
        assert_eq!(
            error_of(&format!("a{}", ".b".repeat(10_000)), &options),
            HEIGHT_LIMIT
        );
        assert_eq!(
            error_of(&format!("a{}", "[0]".repeat(10_000)), &options),
            HEIGHT_LIMIT
        );
    }

    #[test]
    fn the_default_depth_fits_a_small_thread_stack() {
        // Tokio's worker threads have 2 MiB; the nesting the default limit allows must fit.
        let worker = std::thread::Builder::new().stack_size(2 << 20).spawn(|| {
            let options = ParseOptions::default();
            let shapes = [
                ("(", "x", ")"),
                ("[?", "x", "]"),
                ("f(", "x", ")"),
                ("x.all(y, ", "a", ")"),
                ("{1: ", "x", "}"),
                ("A{a: ", "x", "}"),
                ("a[", "x", "]"),
                ("a ? b : ", "c", ""),
            ];
            for (open, middle, close) in shapes {
                let source = nested(open, middle, close, 249);
                assert!(parse(&source, &options).is_ok(), "{open}");
            }
        });
        assert!(worker.is_ok_and(|worker| worker.join().is_ok()));
    }

    #[test]
    fn smaller_limits_count_the_same_way() {
        let options = ParseOptions {
            max_depth: 32,
            ..ParseOptions::default()
        };
        assert_eq!(
            error_of(&nested("[", "'not fine'", "]", 32), &options),
            "expression recursion limit exceeded: 32"
        );
        assert_eq!(
            error_of(&nested("[", "'fine'", "]", 31), &options),
            "parsed"
        );
        let sum = (1..=34)
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(" + ");
        assert_eq!(error_of(&sum, &options), HEIGHT_LIMIT);
        assert_eq!(
            error_of(
                "a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q.r.s.t.u.v.w.x.y.z.A.B.C.D.E.F.G.H",
                &options
            ),
            HEIGHT_LIMIT
        );
    }

    #[test]
    fn length_is_bounded_in_characters() {
        let options = ParseOptions {
            max_length: 5,
            ..ParseOptions::default()
        };
        assert_eq!(error_of("'ééé'", &options), "parsed");
        assert_eq!(
            error_of("'éééé'", &options),
            "expression code point size exceeds limit: size: 6, limit 5"
        );
    }

    #[test]
    fn errors_are_listed_by_position_with_carets() {
        let error = parse(
            "a.?b && [?c] && d.`e`",
            &ParseOptions {
                optional_syntax: false,
                ..ParseOptions::default()
            },
        );
        let Err(error) = error else { panic!("parsed") };
        assert_eq!(
            error.to_string(),
            "ERROR: <input>:1:2: unsupported syntax '.?'\n | a.?b && [?c] && d.`e`\n | .^\n\
             ERROR: <input>:1:10: unsupported syntax '?'\n | a.?b && [?c] && d.`e`\n | .........^\n\
             ERROR: <input>:1:19: unsupported syntax: '`'\n | a.?b && [?c] && d.`e`\n | ..................^"
        );
        let spans: Vec<u32> = error.issues.iter().map(|issue| issue.span.start).collect();
        assert_eq!(spans, [1, 9, 18]);
    }

    #[test]
    fn many_syntax_errors_stop_at_cel_go_limits() {
        let error = error_of(&"@".repeat(500), &ParseOptions::default());
        assert!(
            error.ends_with("Syntax error: More than 100 syntax errors"),
            "{error}"
        );
        assert_eq!(error.matches("token recognition error").count(), 100);
    }

    #[test]
    fn ids_are_unique_and_spans_are_byte_offsets() {
        let source = "'é' + x.map(y, y * 2)[0].z";
        let Ok(expr) = parse(source, &ParseOptions::default()) else {
            panic!("did not parse")
        };
        let mut ids = Vec::new();
        let mut stack = vec![&expr];
        while let Some(node) = stack.pop() {
            ids.push(node.id);
            match &node.kind {
                ExprKind::Select { operand, .. } => stack.push(operand),
                ExprKind::Call { target, args, .. } => {
                    stack.extend(target.as_deref());
                    stack.extend(args);
                }
                ExprKind::List { elements, .. } => stack.extend(elements),
                ExprKind::Comprehension(fold) => {
                    stack.extend([
                        &fold.iter_range,
                        &fold.accu_init,
                        &fold.loop_condition,
                        &fold.loop_step,
                        &fold.result,
                    ]);
                }
                _ => {}
            }
            let text = &source[node.span.start as usize..];
            assert!(source.is_char_boundary(node.span.start as usize), "{text}");
        }
        let count = ids.len();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), count);
        // `+` is the fourth character but the fifth byte.
        assert_eq!(expr.span, Span { start: 5, end: 6 });
    }

    /// Default options (kube-apiserver 1.35's parser).
    const DEFAULT_CASES: &[(&str, &str)] = &[
        (
            "1 + 2 * 3 - 4 / 5 % 6",
            "(call _-_ _ (call _+_ _ 1#1@0 (call _*_ _ 2#3@4 3#5@8)#4@6)#2@2 (call _%_ _ (call _/_ _ 4#7@12 5#9@16)#8@14 6#11@20)#10@18)#6@10",
        ),
        (
            "(1 + 2) * 3",
            "(call _*_ _ (call _+_ _ 1#1@1 2#3@5)#2@3 3#5@10)#4@8",
        ),
        (
            "a || b && c || d",
            "(call _||_ _ (call _||_ _ a#1@0 (call _&&_ _ b#2@5 c#3@10)#4@7)#5@2 d#6@15)#7@12",
        ),
        (
            "a && b && c && d && e",
            "(call _&&_ _ (call _&&_ _ (call _&&_ _ a#1@0 b#2@5)#3@2 c#4@10)#5@7 (call _&&_ _ d#6@15 e#8@20)#9@17)#7@12",
        ),
        (
            "a ? b : c ? d : e",
            "(call _?_:_ _ a#1@0 b#3@4 (call _?_:_ _ c#4@8 d#6@12 e#7@16)#5@10)#2@2",
        ),
        (
            "a ? b || c : d && e",
            "(call _?_:_ _ a#1@0 (call _||_ _ b#3@4 c#4@9)#5@6 (call _&&_ _ d#6@13 e#7@18)#8@15)#2@2",
        ),
        (
            "1 < 2 && 2 <= 3 || 3 > 4 == (4 >= 5) != false",
            "(call _||_ _ (call _&&_ _ (call _<_ _ 1#1@0 2#3@4)#2@2 (call _<=_ _ 2#4@9 3#6@14)#5@11)#7@6 (call _!=_ _ (call _==_ _ (call _>_ _ 3#8@19 4#10@23)#9@21 (call _>=_ _ 4#12@29 5#14@34)#13@31)#11@25 false#16@40)#15@37)#17@16",
        ),
        (
            "x in [1, 2] && !(y in {\"a\": 1})",
            "(call _&&_ _ (call @in _ x#1@0 (list [] 1#4@6 2#5@9)#3@5)#2@2 (call !_ _ (call @in _ y#7@17 (map (ent \"a\"#11@23 1#12@28)#10)#9@22)#8@19)#6@15)#13@12",
        ),
        ("!a", "(call !_ _ a#2@1)#1@0"),
        ("!!a", "a#1@2"),
        ("!!!a", "(call !_ _ a#2@3)#1@0"),
        ("-a", "(call -_ _ a#2@1)#1@0"),
        ("--a", "a#1@2"),
        ("-1", "-1#1@0"),
        ("--1", "1#1@2"),
        ("---1", "(call -_ _ 1#2@3)#1@0"),
        ("-(1)", "(call -_ _ 1#2@2)#1@0"),
        ("- 1", "-1#1@0"),
        ("-1.5", "dbff8000000000000#1@0"),
        ("-1u", "(call -_ _ 1u#2@1)#1@0"),
        ("-0x10", "-16#1@0"),
        ("!-1", "(call !_ _ -1#2@1)#1@0"),
        ("-9223372036854775808", "-9223372036854775808#1@0"),
        ("9223372036854775807", "9223372036854775807#1@0"),
        ("0x7fffffffffffffff", "9223372036854775807#1@0"),
        ("-0x8000000000000000", "-9223372036854775808#1@0"),
        ("18446744073709551615u", "18446744073709551615u#1@0"),
        ("0xFFFFFFFFFFFFFFFFu", "18446744073709551615u#1@0"),
        ("1.5e-3", "d3f589374bc6a7efa#1@0"),
        (".5", "d3fe0000000000000#1@0"),
        ("1e3", "d408f400000000000#1@0"),
        ("1E+3", "d408f400000000000#1@0"),
        ("1e400", "ERROR: <input>:1:1: invalid double literal"),
        (
            "9223372036854775808",
            "ERROR: <input>:1:1: invalid int literal",
        ),
        (
            "-9223372036854775809",
            "ERROR: <input>:1:1: invalid int literal",
        ),
        (
            "18446744073709551616u",
            "ERROR: <input>:1:1: invalid uint literal",
        ),
        ("true", "true#1@0"),
        ("false", "false#1@0"),
        ("null", "null#1@0"),
        ("\"abc\"", "\"abc\"#1@0"),
        ("'abc'", "\"abc\"#1@0"),
        (
            "\"\"\"a",
            "ERROR: <input>:1:3: Syntax error: token recognition error at: '\"a'",
        ),
        (
            "b\"\"\"",
            "ERROR: <input>:1:4: Syntax error: token recognition error at: '\"'",
        ),
        ("'''x'y'''", "\"x'y\"#1@0"),
        ("r\"a\\n\"", "\"a\\\\n\"#1@0"),
        ("R'a\\t'", "\"a\\\\t\"#1@0"),
        ("r\"\"\"raw\\\"\"\"", "\"raw\\\\\"#1@0"),
        (
            "\"\\a\\b\\f\\n\\r\\t\\v\\\\\\?\\\"\\'\\`\"",
            "\"\\u{7}\\u{8}\\u{c}\\u{a}\\u{d}\\u{9}\\u{b}\\\\?\\\"'`\"#1@0",
        ),
        (
            "\"\\x41\\X42\\u00e9\\U0001F600\\101\"",
            "\"AB\\u{e9}\\u{1f600}A\"#1@0",
        ),
        ("\"\\xff\\377\"", "\"\\u{ff}\\u{ff}\"#1@0"),
        ("b\"abc\"", "b616263#1@0"),
        ("b\"\\xff\\000\\377ab\"", "bff00ff6162#1@0"),
        ("B'\\x00'", "b00#1@0"),
        ("br\"\\x\"", "b5c78#1@0"),
        ("b\"é\"", "bc3a9#1@0"),
        ("\"é\"", "\"\\u{e9}\"#1@0"),
        (
            "\"\\ud800\"",
            "ERROR: <input>:1:1: invalid unicode code point",
        ),
        (
            "\"\\U00110000\"",
            "ERROR: <input>:1:1: invalid unicode code point",
        ),
        (
            "b\"\\u0041\"",
            "ERROR: <input>:1:1: unable to unescape string",
        ),
        ("a.b.c", "(sel (sel a#1@0 b)#2@1 c)#3@3"),
        ("a.b(c)", "(call b a#1@0 c#3@4)#2@3"),
        ("a.b.c(d, e)", "(call c (sel a#1@0 b)#2@1 d#4@6 e#5@9)#3@5"),
        (
            "a[0][1]",
            "(call _[_] _ (call _[_] _ a#1@0 0#3@2)#2@1 1#5@5)#4@4",
        ),
        ("a.?b", "(call _?._ _ a#1@0 \"b\"#2@3)#3@1"),
        ("a[?0]", "(call _[?_] _ a#1@0 0#3@3)#2@1"),
        (
            "a.?b.c[?d]",
            "(call _[?_] _ (sel (call _?._ _ a#1@0 \"b\"#2@3)#3@1 c)#4@4 d#6@8)#5@6",
        ),
        ("f()", "(call f _)#1@1"),
        ("f(a, b)", "(call f _ a#2@2 b#3@5)#1@1"),
        (".f(a)", "(call .f _ a#2@3)#1@2"),
        (".a.b", "(sel .a#1@1 b)#2@2"),
        ("a.b.C{}", "(struct a.b.C)#1@5"),
        (".a.b.C{x: 1}", "(struct .a.b.C (fld x 1#3@10)#2)#1@6"),
        (
            "Msg{a: 1, ?b: 2,}",
            "(struct Msg (fld a 1#3@7)#2 (fld? b 2#5@14)#4)#1@3",
        ),
        ("Msg{,}", "(struct Msg)#1@3"),
        ("[]", "(list [])#1@0"),
        ("[,]", "(list [])#1@0"),
        ("[1, 2,]", "(list [] 1#2@1 2#3@4)#1@0"),
        ("[?a, b]", "(list [0] a#2@2 b#3@5)#1@0"),
        ("{}", "(map)#1@0"),
        ("{,}", "(map)#1@0"),
        (
            "{1: 2, ?3: 4,}",
            "(map (ent 1#3@1 2#4@4)#2 (ent? 3#6@8 4#7@11)#5)#1@0",
        ),
        (
            "{\"a\": 1}.a",
            "(sel (map (ent \"a\"#3@1 1#4@6)#2)#1@0 a)#5@8",
        ),
        ("foo.if", "(sel foo#1@0 if)#2@3"),
        ("if", "ERROR: <input>:1:1: reserved identifier: if"),
        ("x.if()", "(call if x#1@0)#2@4"),
        (
            "a.true",
            "ERROR: <input>:1:3: Syntax error: mismatched input 'true' expecting IDENTIFIER",
        ),
        (
            "a.in",
            "ERROR: <input>:1:3: Syntax error: no viable alternative at input '.in'\nERROR: <input>:1:5: Syntax error: mismatched input '<EOF>' expecting {'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}",
        ),
        (
            "a.",
            "ERROR: <input>:1:3: Syntax error: no viable alternative at input '.'",
        ),
        (
            "a b",
            "ERROR: <input>:1:3: Syntax error: extraneous input 'b' expecting <EOF>",
        ),
        (
            "1 +",
            "ERROR: <input>:1:4: Syntax error: mismatched input '<EOF>' expecting {'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}",
        ),
        (
            "(a",
            "ERROR: <input>:1:3: Syntax error: missing ')' at '<EOF>'",
        ),
        (
            "[1, 2",
            "ERROR: <input>:1:6: Syntax error: mismatched input '<EOF>' expecting {']', ','}",
        ),
        (
            "{1: 2",
            "ERROR: <input>:1:6: Syntax error: mismatched input '<EOF>' expecting {'}', ','}",
        ),
        (
            "f(a, b",
            "ERROR: <input>:1:7: Syntax error: missing ')' at '<EOF>'",
        ),
        (
            "a ? b",
            "ERROR: <input>:1:6: Syntax error: mismatched input '<EOF>' expecting ':'",
        ),
        (
            ")",
            "ERROR: <input>:1:1: Syntax error: mismatched input ')' expecting {'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}",
        ),
        (
            "a + * b",
            "ERROR: <input>:1:5: Syntax error: extraneous input '*' expecting {'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}",
        ),
        (
            "f(,)",
            "ERROR: <input>:1:3: Syntax error: extraneous input ',' expecting {'[', '{', '(', ')', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}",
        ),
        (
            "a.b(1,)",
            "ERROR: <input>:1:7: Syntax error: mismatched input ')' expecting {'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}",
        ),
        (
            "\"abc",
            "ERROR: <input>:1:1: Syntax error: token recognition error at: '\"abc'\nERROR: <input>:1:5: Syntax error: mismatched input '<EOF>' expecting {'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}",
        ),
        (
            "'\\q'",
            "ERROR: <input>:1:1: Syntax error: token recognition error at: ''\\q'\nERROR: <input>:1:4: Syntax error: token recognition error at: '''\nERROR: <input>:1:5: Syntax error: mismatched input '<EOF>' expecting {'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}",
        ),
        (
            "!-x",
            "ERROR: <input>:1:3: Syntax error: no viable alternative at input '-x'",
        ),
        (
            "-!x",
            "ERROR: <input>:1:2: Syntax error: no viable alternative at input '-!'",
        ),
        ("a.`b-c`", "ERROR: <input>:1:3: unsupported syntax: '`'"),
        ("has(a.b)", "(has a#2@4 b)#4@3"),
        ("has(a.b.c)", "(has (sel a#2@4 b)#3@5 c)#5@3"),
        (
            "has(a)",
            "ERROR: <input>:1:5: invalid argument to has() macro",
        ),
        (
            "has(a[0])",
            "ERROR: <input>:1:6: invalid argument to has() macro",
        ),
        (
            "x.all(y, y > 0)",
            "(compr y _ x#1@0 @result true#7@5 (call @not_strictly_false _ @result#8@5)#9@5 (call _&&_ _ @result#10@5 (call _>_ _ y#4@9 0#6@13)#5@11)#11@5 @result#12@5)#13@5",
        ),
        (
            "x.exists(y, y > 0)",
            "(compr y _ x#1@0 @result false#7@8 (call @not_strictly_false _ (call !_ _ @result#8@8)#9@8)#10@8 (call _||_ _ @result#11@8 (call _>_ _ y#4@12 0#6@16)#5@14)#12@8 @result#13@8)#14@8",
        ),
        (
            "x.exists_one(y, y > 0)",
            "(compr y _ x#1@0 @result 0#7@12 true#8@12 (call _?_:_ _ (call _>_ _ y#4@16 0#6@20)#5@18 (call _+_ _ @result#9@12 1#10@12)#11@12 @result#12@12)#13@12 (call _==_ _ @result#14@12 1#15@12)#16@12)#17@12",
        ),
        (
            "x.existsOne(y, y > 0)",
            "(call existsOne x#1@0 y#3@12 (call _>_ _ y#4@15 0#6@19)#5@17)#2@11",
        ),
        (
            "x.map(y, y * 2)",
            "(compr y _ x#1@0 @result (list [])#7@5 true#8@5 (call _+_ _ @result#9@5 (list [] (call _*_ _ y#4@9 2#6@13)#5@11)#10@5)#11@5 @result#12@5)#13@5",
        ),
        (
            "x.map(y, y > 0, y * 2)",
            "(compr y _ x#1@0 @result (list [])#10@5 true#11@5 (call _?_:_ _ (call _>_ _ y#4@9 0#6@13)#5@11 (call _+_ _ @result#12@5 (list [] (call _*_ _ y#7@16 2#9@20)#8@18)#13@5)#14@5 @result#15@5)#16@5 @result#17@5)#18@5",
        ),
        (
            "x.filter(y, y > 0)",
            "(compr y _ x#1@0 @result (list [])#7@8 true#8@8 (call _?_:_ _ (call _>_ _ y#4@12 0#6@16)#5@14 (call _+_ _ @result#9@8 (list [] y#3@9)#10@8)#11@8 @result#12@8)#13@8 @result#14@8)#15@8",
        ),
        (
            "x.all(1, y)",
            "ERROR: <input>:1:7: argument must be a simple name",
        ),
        (
            "x.map(1, y)",
            "ERROR: <input>:1:7: argument is not an identifier",
        ),
        (
            "x.filter(a.b, y)",
            "ERROR: <input>:1:11: argument is not an identifier",
        ),
        (
            "x.all(__result__, y)",
            "ERROR: <input>:1:7: iteration variable overwrites accumulator variable",
        ),
        (
            "x.all(k, v, k < v)",
            "(compr k v x#1@0 @result true#8@5 (call @not_strictly_false _ @result#9@5)#10@5 (call _&&_ _ @result#11@5 (call _<_ _ k#5@12 v#7@16)#6@14)#12@5 @result#13@5)#14@5",
        ),
        (
            "x.exists(k, v, k < v)",
            "(compr k v x#1@0 @result false#8@8 (call @not_strictly_false _ (call !_ _ @result#9@8)#10@8)#11@8 (call _||_ _ @result#12@8 (call _<_ _ k#5@15 v#7@19)#6@17)#13@8 @result#14@8)#15@8",
        ),
        (
            "x.existsOne(k, v, k < v)",
            "(compr k v x#1@0 @result 0#8@11 true#9@11 (call _?_:_ _ (call _<_ _ k#5@18 v#7@22)#6@20 (call _+_ _ @result#10@11 1#11@11)#12@11 @result#13@11)#14@11 (call _==_ _ @result#15@11 1#16@11)#17@11)#18@11",
        ),
        (
            "x.exists_one(k, v, k < v)",
            "(compr k v x#1@0 @result 0#8@12 true#9@12 (call _?_:_ _ (call _<_ _ k#5@19 v#7@23)#6@21 (call _+_ _ @result#10@12 1#11@12)#12@12 @result#13@12)#14@12 (call _==_ _ @result#15@12 1#16@12)#17@12)#18@12",
        ),
        (
            "x.transformList(i, v, v * 2)",
            "(compr i v x#1@0 @result (list [])#11@15 true#12@15 (call _+_ _ @result#8@15 (list [] (call _*_ _ v#5@22 2#7@26)#6@24)#9@15)#10@15 @result#13@15)#14@15",
        ),
        (
            "x.transformList(i, v, i > 0, v * 2)",
            "(compr i v x#1@0 @result (list [])#16@15 true#17@15 (call _?_:_ _ (call _>_ _ i#5@22 0#7@26)#6@24 (call _+_ _ @result#11@15 (list [] (call _*_ _ v#8@29 2#10@33)#9@31)#12@15)#13@15 @result#14@15)#15@15 @result#18@15)#19@15",
        ),
        (
            "x.transformMap(k, v, v + 1)",
            "(compr k v x#1@0 @result (map)#11@14 true#12@14 (call cel.@mapInsert _ @result#8@14 k#9@14 (call _+_ _ v#5@21 1#7@25)#6@23)#10@14 @result#13@14)#14@14",
        ),
        (
            "x.transformMap(k, v, k != 'a', v + 1)",
            "(compr k v x#1@0 @result (map)#16@14 true#17@14 (call _?_:_ _ (call _!=_ _ k#5@21 \"a\"#7@26)#6@23 (call cel.@mapInsert _ @result#11@14 k#12@14 (call _+_ _ v#8@31 1#10@35)#9@33)#13@14 @result#14@14)#15@14 @result#18@14)#19@14",
        ),
        (
            "x.transformMapEntry(k, v, {v: k})",
            "(compr k v x#1@0 @result (map)#11@19 true#12@19 (call cel.@mapInsert _ @result#9@19 (map (ent v#7@27 k#8@30)#6)#5@26)#10@19 @result#13@19)#14@19",
        ),
        (
            "x.transformMapEntry(k, v, k != 'a', {v: k})",
            "(compr k v x#1@0 @result (map)#16@19 true#17@19 (call _?_:_ _ (call _!=_ _ k#5@26 \"a\"#7@31)#6@28 (call cel.@mapInsert _ @result#12@19 (map (ent v#10@37 k#11@40)#9)#8@36)#13@19 @result#14@19)#15@19 @result#18@19)#19@19",
        ),
        (
            "x.all(a, a, c)",
            "ERROR: <input>:1:10: duplicate variable name: a",
        ),
        (
            "x.all(a.b, c, d)",
            "ERROR: <input>:1:8: argument must be a simple name",
        ),
        (
            "x.transformMap(k, v, k, v, v)",
            "(call transformMap x#1@0 k#3@15 v#4@18 k#5@21 v#6@24 v#7@27)#2@14",
        ),
        (
            "x.optMap(y, y + 1)",
            "(call _?_:_ _ (call hasValue x#1@0)#7@8 (call optional.of _ (compr #unused _ (list [])#8@8 y (call value x#9@0)#10@8 false#11@8 y#12@8 (call _+_ _ y#4@12 1#6@16)#5@14)#13@8)#14@8 (call optional.none _)#15@8)#16@8",
        ),
        (
            "x.optFlatMap(y, y)",
            "(call _?_:_ _ (call hasValue x#1@0)#5@12 (compr #unused _ (list [])#6@12 y (call value x#7@0)#8@12 false#9@12 y#10@12 y#4@16)#11@12 (call optional.none _)#12@12)#13@12",
        ),
        (
            "{1: 2}.optMap(y, y)",
            "(call _?_:_ _ (call hasValue (map (ent 1#3@1 2#4@4)#2)#1@0)#8@13 (call optional.of _ (compr #unused _ (list [])#9@13 y (call value (map (ent 1#12@1 2#13@4)#11)#10@0)#14@13 false#15@13 y#16@13 y#7@17)#17@13)#18@13 (call optional.none _)#19@13)#20@13",
        ),
        (
            "A{a: 1}.optMap(y, y)",
            "(call _?_:_ _ (call hasValue (struct A (fld a 1#3@5)#2)#1@1)#7@14 (call optional.of _ (compr #unused _ (list [])#8@14 y (call value (struct A (fld a 1#11@5)#10)#9@1)#12@14 false#13@14 y#14@14 y#6@18)#15@14)#16@14 (call optional.none _)#17@14)#18@14",
        ),
        (
            "x.optMap(y.z, y)",
            "ERROR: <input>:1:11: optMap() variable name must be a simple identifier",
        ),
        (
            "[3, 1].sortBy(e, -e)",
            "(compr #unused _ (list [])#19@13 @__sortBy_input__ (list [] 3#2@1 1#3@4)#1@0 false#20@13 @__sortBy_input__#8@13 (call @sortByAssociatedKeys @__sortBy_input__#17@13 (compr e _ @__sortBy_input__#9@13 @result (list [])#10@13 true#11@13 (call _+_ _ @result#12@13 (list [] (call -_ _ e#7@18)#6@17)#13@13)#14@13 @result#15@13)#16@13)#18@13)#21@13",
        ),
        (
            "x.sortBy(e, e.name)",
            "(compr #unused _ (list [])#17@8 @__sortBy_input__ x#1@0 false#18@8 @__sortBy_input__#6@8 (call @sortByAssociatedKeys @__sortBy_input__#15@8 (compr e _ @__sortBy_input__#7@8 @result (list [])#8@8 true#9@8 (call _+_ _ @result#10@8 (list [] (sel e#4@12 name)#5@13)#11@8)#12@8 @result#13@8)#14@8)#16@8)#19@8",
        ),
        (
            "1.sortBy(e, e)",
            "ERROR: <input>:1:1: sortBy can only be applied to a list, identifier, comprehension, call or select expression",
        ),
        (
            "x.sortBy(1, e)",
            "ERROR: <input>:1:10: argument is not an identifier",
        ),
        (
            "cel.bind(x, 1, x)",
            "(call bind cel#1@0 x#3@9 1#4@12 x#5@15)#2@8",
        ),
        (
            "a.map(x, a.filter(y, y == x))",
            "(compr x _ a#1@0 @result (list [])#19@5 true#20@5 (call _+_ _ @result#21@5 (list [] (compr y _ a#4@9 @result (list [])#10@17 true#11@17 (call _?_:_ _ (call _==_ _ y#7@21 x#9@26)#8@23 (call _+_ _ @result#12@17 (list [] y#6@18)#13@17)#14@17 @result#15@17)#16@17 @result#17@17)#18@17)#22@5)#23@5 @result#24@5)#25@5",
        ),
        (
            "[1, 2].all(x, [3].exists(y, x < y))",
            "(compr x _ (list [] 1#2@1 2#3@4)#1@0 @result true#21@10 (call @not_strictly_false _ @result#22@10)#23@10 (call _&&_ _ @result#24@10 (compr y _ (list [] 3#7@15)#6@14 @result false#13@24 (call @not_strictly_false _ (call !_ _ @result#14@24)#15@24)#16@24 (call _||_ _ @result#17@24 (call _<_ _ x#10@28 y#12@32)#11@30)#18@24 @result#19@24)#20@24)#25@10 @result#26@10)#27@10",
        ),
        ("a // comment\n  + b", "(call _+_ _ a#1@0 b#3@17)#2@15"),
    ];

    /// With `cel.bind`.
    const BIND_CASES: &[(&str, &str)] = &[
        (
            "cel.bind(x, 1, x + 1)",
            "(compr #unused _ (list [])#8@8 x 1#4@12 false#9@8 x#10@8 (call _+_ _ x#5@15 1#7@19)#6@17)#11@8",
        ),
        (
            "cel.bind(x.y, 1, x)",
            "ERROR: <input>:1:11: cel.bind() variable names must be simple identifiers",
        ),
        (
            "other.bind(x, 1, x)",
            "(call bind other#1@0 x#3@11 1#4@14 x#5@17)#2@10",
        ),
    ];

    /// Without optional syntax, two-variable comprehensions or `sortBy`.
    const NO_EXTENSION_CASES: &[(&str, &str)] = &[
        (
            "a.?b && a[?b]",
            "ERROR: <input>:1:2: unsupported syntax '.?'\nERROR: <input>:1:10: unsupported syntax '[?'",
        ),
        ("[?a]", "ERROR: <input>:1:2: unsupported syntax '?'"),
        ("{?a: 1}", "ERROR: <input>:1:2: unsupported syntax '?'"),
        ("Msg{?a: 1}", "ERROR: <input>:1:5: unsupported syntax '?'"),
        ("x.optMap(y, y)", "(call optMap x#1@0 y#3@9 y#4@12)#2@8"),
        ("x.all(k, v, k)", "(call all x#1@0 k#3@6 v#4@9 k#5@12)#2@5"),
        (
            "[1].sortBy(e, e)",
            "(call sortBy (list [] 1#2@1)#1@0 e#4@11 e#5@14)#3@10",
        ),
    ];

    /// With backtick-escaped field names.
    const ESCAPE_CASES: &[(&str, &str)] = &[
        ("a.`b-c`", "(sel a#1@0 b-c)#2@1"),
        ("a.`b.c/d e`", "(sel a#1@0 b.c/d e)#2@1"),
        ("Msg{`b-c`: 1}", "(struct Msg (fld b-c 1#3@11)#2)#1@3"),
        ("a.?`b-c`", "(call _?._ _ a#1@0 \"b-c\"#2@3)#3@1"),
    ];
}
