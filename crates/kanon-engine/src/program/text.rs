//! Placeholder texts: the part of the program language that kanon renders in its own process.
//!
//! A condition's `message` and a reference's names, URL, query and body hold `{{ expression }}`
//! placeholders. They are rendered often (a reference on every request it serves) and cheaply,
//! in the evaluating thread, not in a worker process like a hand-written program. The runtime
//! has operations fuel does not pay for — a list concatenated with itself 33 levels deep is
//! copied into one list of 2^33 items; a list repeated or printed turns a few bytes of
//! references into gigabytes of text — and an allocation that fails ends the whole process. So a
//! text is held to a language in which every value it builds is paid for:
//!
//! - placeholders only: no statements (`{% %}`: no loops, assignments, macros), which are what
//!   lets a text reuse a value without reading it again;
//! - no `*` (it repeats lists and strings) and at most [`MAX_TEXT_ADDITIONS`] `+` (a list
//!   concatenated that often stays lazy, see above);
//! - the filters in [`TEXT_FILTERS`] and the helper functions in [`TEXT_FUNCTIONS`], whose
//!   results are no larger than what they read (or whose growth the runtime charges), and no
//!   method calls;
//! - every read of a request's value charged against [`TEXT_READ_BYTES`] while it renders
//!   (see [`super::meter`]), on top of the fuel and the output bound every program has.
//!
//! The checks run when the policy is written, on the runtime's own parse of the text, so that
//! what is checked is what runs.

use minijinja::machinery::ast::{self, CallArg, CallType, Expr, Stmt};

use super::error::ProgramError;

/// The most `+` operators a text may hold. The runtime concatenates lists lazily and copies
/// them, without charge, once they are nested 33 deep; without statements a text nests them at
/// most once per operator.
pub const MAX_TEXT_ADDITIONS: usize = 16;

/// The most bytes of the request's values one rendering of a text may read (each variable
/// named, each child of a document, each value a helper converts): 1 MiB, four times the
/// output a text may have. A read past it ends the rendering with an error that says so.
pub const TEXT_READ_BYTES: usize = 1024 * 1024;

/// The filters a text may use. Left out: those that repeat a value (`batch`, `slice` with a
/// fill value, `sum` with a list start), combine several (`chain`, `zip`) or pad (`format`,
/// `indent`, `center`), whose output is not bounded by what they read.
pub const TEXT_FILTERS: &[&str] = &[
    "abs",
    "attr",
    "b64decode",
    "b64encode",
    "bool",
    "capitalize",
    "count",
    "d",
    "default",
    "dictsort",
    "e",
    "escape",
    "escape_pointer",
    "first",
    "float",
    "int",
    "items",
    "join",
    "last",
    "length",
    "lines",
    "list",
    "lower",
    "map",
    "max",
    "min",
    "reject",
    "rejectattr",
    "replace",
    "reverse",
    "round",
    "safe",
    "select",
    "selectattr",
    "sort",
    "split",
    "string",
    "title",
    "tojson",
    "trim",
    "unique",
    "upper",
];

/// The functions a text may call: kanon's helpers that give a scalar or a part of what they
/// are given. Left out: the runtime's own (`range`, `dict`, `namespace`, `debug`, ...), which
/// build values from nothing, and the helpers that build patches or query documents
/// (`jsonpath`, `with_keys`, `resources_with`, ...), which belong in programs.
pub const TEXT_FUNCTIONS: &[&str] = &[
    "compare_quantities",
    "fail",
    "pointer",
    "process_value",
    "quantity",
    "regex_match",
    "scale_quantity",
];

/// Why `source`, a text with placeholders, is outside the language of texts, if it is: the
/// first construct refused, with where it is. A syntax error is the runtime's, reported when
/// the text compiles.
pub(super) fn check(source: &str) -> Result<(), ProgramError> {
    check_in(source, Statements::None)
}

/// Whether `source`, a hand-written program, is held to the language of texts but for `{% if
/// %}` branches: a program kanon may run in its own process, its reads charged as a text's are
/// (see [`super::meter`]). A branch emits its body at most once, so it copies nothing a text
/// could not; loops, assignments, macros and the other statements stay out.
pub(super) fn contained(source: &str) -> bool {
    check_in(source, Statements::Branches).is_ok()
}

/// The statements a checked source may hold.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Statements {
    /// Placeholders and raw text only: a text.
    None,
    /// `{% if %}` / `{% elif %}` / `{% else %}` too: a contained program.
    Branches,
}

fn check_in(source: &str, statements: Statements) -> Result<(), ProgramError> {
    let Ok(template) = minijinja::machinery::parse(source, "text", Default::default()) else {
        // The compiler reports it, with its line.
        return Ok(());
    };
    let mut check = Check {
        additions: 0,
        refusal: None,
        statements,
    };
    check.statement(&template);
    if let Some(refusal) = check.refusal {
        return Err(ProgramError::new(refusal));
    }
    if check.additions > MAX_TEXT_ADDITIONS {
        return Err(ProgramError::new(format!(
            "the placeholders hold {} `+` operators; the limit is {MAX_TEXT_ADDITIONS} \
             (compute more in the rule's program)",
            check.additions
        )));
    }
    Ok(())
}

struct Check {
    additions: usize,
    refusal: Option<String>,
    statements: Statements,
}

impl Check {
    fn refuse(&mut self, line: u16, what: String) {
        if self.refusal.is_none() {
            self.refusal = Some(format!(
                "line {line}: {what} (a text holds `{{{{ expression }}}}` placeholders only; \
                 compute more in the rule's program)"
            ));
        }
    }

    fn statement(&mut self, statement: &Stmt<'_>) {
        match statement {
            Stmt::Template(template) => {
                for child in &template.children {
                    self.statement(child);
                }
            }
            Stmt::EmitRaw(_) => {}
            Stmt::EmitExpr(emit) => self.expression(&emit.expr),
            Stmt::IfCond(branch) if self.statements == Statements::Branches => {
                self.expression(&branch.expr);
                for child in branch.true_body.iter().chain(&branch.false_body) {
                    self.statement(child);
                }
            }
            other => {
                let line = statement_line(other);
                self.refuse(line, "statements (`{% ... %}`) are not allowed".to_string());
            }
        }
    }

    fn expression(&mut self, expression: &Expr<'_>) {
        match expression {
            Expr::Var(_) | Expr::Const(_) => {}
            Expr::Slice(slice) => {
                self.expression(&slice.expr);
                for part in [&slice.start, &slice.stop, &slice.step]
                    .into_iter()
                    .flatten()
                {
                    self.expression(part);
                }
            }
            Expr::UnaryOp(unary) => self.expression(&unary.expr),
            Expr::BinOp(binary) => {
                match binary.op {
                    ast::BinOpKind::Mul => self.refuse(
                        binary.span().start_line,
                        "`*` is not allowed (it repeats lists and strings)".to_string(),
                    ),
                    ast::BinOpKind::Add => self.additions += 1,
                    _ => {}
                }
                self.expression(&binary.left);
                self.expression(&binary.right);
            }
            Expr::Compare(compare) => {
                self.expression(&compare.expr);
                for op in &compare.ops {
                    self.expression(&op.expr);
                }
            }
            Expr::IfExpr(conditional) => {
                self.expression(&conditional.test_expr);
                self.expression(&conditional.true_expr);
                if let Some(otherwise) = &conditional.false_expr {
                    self.expression(otherwise);
                }
            }
            Expr::Filter(filter) => {
                let line = filter.span().start_line;
                if !TEXT_FILTERS.contains(&filter.name) {
                    self.refuse(
                        line,
                        format!(
                            "the filter `{}` is not allowed; a text may use {}",
                            filter.name,
                            TEXT_FILTERS.join(", ")
                        ),
                    );
                }
                if filter.name == "map" {
                    self.mapped_filter(line, &filter.args);
                }
                if let Some(operand) = &filter.expr {
                    self.expression(operand);
                }
                self.arguments(line, &filter.args);
            }
            Expr::Test(test) => {
                self.expression(&test.expr);
                self.arguments(test.span().start_line, &test.args);
            }
            Expr::GetAttr(attribute) => self.expression(&attribute.expr),
            Expr::GetItem(item) => {
                self.expression(&item.expr);
                self.expression(&item.subscript_expr);
            }
            Expr::Call(call) => {
                let line = call.span().start_line;
                match call.identify_call() {
                    CallType::Function(name) if TEXT_FUNCTIONS.contains(&name) => {}
                    CallType::Function(name) => self.refuse(
                        line,
                        format!(
                            "the function `{name}` is not allowed; a text may call {}",
                            TEXT_FUNCTIONS.join(", ")
                        ),
                    ),
                    CallType::Method(_, name) => {
                        self.refuse(line, format!("method calls (`.{name}()`) are not allowed"))
                    }
                    _ => self.refuse(line, "this call is not allowed".to_string()),
                }
                self.arguments(line, &call.args);
            }
            Expr::List(list) => {
                for item in &list.items {
                    self.expression(item);
                }
            }
            Expr::Tuple(tuple) => {
                for item in &tuple.items {
                    self.expression(item);
                }
            }
            Expr::Map(map) => {
                for part in map.keys.iter().chain(&map.values) {
                    self.expression(part);
                }
            }
        }
    }

    fn arguments(&mut self, line: u16, arguments: &[CallArg<'_>]) {
        for argument in arguments {
            match argument {
                CallArg::Pos(e) | CallArg::Kwarg(_, e) => self.expression(e),
                CallArg::PosSplat(_) | CallArg::KwargSplat(_) => self.refuse(
                    line,
                    "spreading arguments (`*args`) is not allowed".to_string(),
                ),
            }
        }
    }

    /// `map` applies the filter its first argument names: that one must be allowed too.
    fn mapped_filter(&mut self, line: u16, arguments: &[CallArg<'_>]) {
        let named = arguments.iter().find_map(|a| match a {
            CallArg::Pos(e) => Some(e),
            _ => None,
        });
        let Some(named) = named else {
            // `map(attribute=...)`.
            return;
        };
        let allowed = match named {
            Expr::Const(c) => c.value.as_str().is_some_and(|f| TEXT_FILTERS.contains(&f)),
            _ => false,
        };
        if !allowed {
            self.refuse(
                line,
                "`map` must name one of the filters a text may use, as a quoted name".to_string(),
            );
        }
    }
}

/// The line a statement starts on.
fn statement_line(statement: &Stmt<'_>) -> u16 {
    let span = match statement {
        Stmt::Template(s) => s.span(),
        Stmt::EmitExpr(s) => s.span(),
        Stmt::EmitRaw(s) => s.span(),
        Stmt::ForLoop(s) => s.span(),
        Stmt::IfCond(s) => s.span(),
        Stmt::WithBlock(s) => s.span(),
        Stmt::Set(s) => s.span(),
        Stmt::SetBlock(s) => s.span(),
        Stmt::AutoEscape(s) => s.span(),
        Stmt::FilterBlock(s) => s.span(),
        Stmt::Macro(s) => s.span(),
        Stmt::CallBlock(s) => s.span(),
        Stmt::Continue(s) => s.span(),
        Stmt::Break(s) => s.span(),
        Stmt::Do(s) => s.span(),
    };
    span.start_line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(source: &str) -> String {
        check(source).err().map(|e| e.message).unwrap_or_default()
    }

    #[test]
    fn placeholders_that_read_and_format_are_texts() {
        for source in [
            "container {{ item.name }}: memory limit {{ data | default('none') }} is over {{ value }}",
            "{{ object.metadata.labels['app'] | lower | replace('-', '_') }}",
            "{{ refs.data | tojson }}",
            "{{ 'a' if object.spec.replicas > 2 else 'b' }} {{ data | join(', ') }}",
            "{{ quantity(value) + 1 }} {{ object.spec.containers | map(attribute='name') | join }}",
            "{{ object.spec.containers | map('string') | list }} {{ x is defined }}",
            "{{ [data, value] | join('/') }} {{ {'a': data}['a'] }} {{ data[1:] }}",
        ] {
            assert_eq!(refusal(source), "", "{source}");
        }
    }

    #[test]
    fn constructs_that_copy_without_reading_are_refused() {
        for (source, said) in [
            (
                "{% set l = namespace(v=[1]) %}{% for i in range(40) %}{% set l.v = l.v + l.v %}{% endfor %}{{ l.v | length }}",
                "line 1: statements (`{% ... %}`) are not allowed",
            ),
            ("{% if x %}a{% endif %}", "statements"),
            ("{% macro f(l) %}{{ f(l + l) }}{% endmacro %}", "statements"),
            ("{{ [data] * 1000 }}", "`*` is not allowed"),
            ("{{ ([data] * 1000) | tojson }}", "`*` is not allowed"),
            (
                "{{ data | batch(100000, fill_with=data) }}",
                "the filter `batch`",
            ),
            ("{{ data | indent(100000) }}", "the filter `indent`"),
            ("{{ data | sum(start=[]) }}", "the filter `sum`"),
            ("{{ range(100000) | join }}", "the function `range`"),
            ("{{ namespace(a=1) }}", "the function `namespace`"),
            ("{{ object.items() }}", "method calls (`.items()`)"),
            ("{{ data | map('indent', 9999) }}", "`map` must name"),
            ("{{ jsonpath(object, '$..*') }}", "the function `jsonpath`"),
            ("x\n{{ fail(*data) }}", "line 2: spreading arguments"),
        ] {
            let refusal = refusal(source);
            assert!(refusal.contains(said), "{source}: {refusal}");
        }
    }

    #[test]
    fn programs_with_branches_are_contained_and_loops_and_assignments_are_not() {
        for source in [
            r#"{"valid": {{ (object.metadata.name != "") | tojson }}}"#,
            "{% if object.spec.replicas > 3 %}{\"valid\": false, \"reason\": \"{{ object.metadata.name }}\"}\n{% elif x %}[]{% else %}{% endif %}",
            "- {op: add, path: /metadata/labels/a, value: {{ object.metadata.name | tojson }}}",
        ] {
            assert!(contained(source), "{source}");
        }
        for source in [
            "{% for c in object.spec.containers %}{{ c.name }}{% endfor %}",
            "{% set x = refs.data %}{{ [x, x] | tojson }}",
            "{% if x %}{% for i in range(9) %}{% endfor %}{% endif %}",
            "{% if x %}{{ [data] * 1000 }}{% endif %}",
            "{% macro f() %}{% endmacro %}",
            "{% with a = data %}{{ a }}{% endwith %}",
            "{{ jsonpath(object, '$..*') }}",
        ] {
            assert!(!contained(source), "{source}");
        }
        // A text stays a text: branches are a program's.
        assert!(refusal("{% if x %}a{% endif %}").contains("statements"));
    }

    #[test]
    fn additions_are_counted() {
        let within = format!(
            "{{{{ {} }}}}",
            vec!["data"; MAX_TEXT_ADDITIONS + 1].join(" + ")
        );
        assert_eq!(refusal(&within), "");
        let over = format!(
            "{{{{ {} }}}}",
            vec!["data"; MAX_TEXT_ADDITIONS + 2].join(" + ")
        );
        assert!(refusal(&over).contains("17 `+` operators; the limit is 16"));
    }
}
