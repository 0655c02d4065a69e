//! cel-spec's `SimpleTestFile` (proto/cel/expr/conformance/test/simple.proto), read from the
//! textproto tree. Values (`cel.expr.Value`) and types (`cel.expr.Type`) are kept as trees here
//! and interpreted by `expected.rs`, which knows what kanon-cel can represent.

use super::textproto::{Message, Node};

#[derive(Debug)]
pub struct TestFile {
    pub sections: Vec<Section>,
}

#[derive(Debug)]
pub struct Section {
    pub name: String,
    pub tests: Vec<Case>,
}

#[derive(Debug, Clone)]
pub struct Case {
    pub name: String,
    pub expr: String,
    pub disable_macros: bool,
    pub disable_check: bool,
    pub check_only: bool,
    pub type_env: Vec<Decl>,
    pub container: String,
    pub locale: String,
    /// `map<string, ExprValue>`, in the order written.
    pub bindings: Vec<(String, Binding)>,
    pub expect: Expect,
}

/// A `cel.expr.Decl`.
#[derive(Debug, Clone)]
pub enum Decl {
    Ident { name: String, kind: Message },
    Function { name: String },
}

/// A `cel.expr.ExprValue`.
#[derive(Debug, Clone)]
pub enum Binding {
    Value(Message),
    Error,
    Unknown,
}

/// The `result_matcher` oneof.
#[derive(Debug, Clone)]
pub enum Expect {
    /// `value`; an absent matcher means `value { bool_value: true }`.
    Value(Message),
    TypedResult {
        result: Option<Message>,
        deduced_type: Option<Message>,
    },
    /// `eval_error` and `any_eval_errors`: the messages of the errors accepted.
    EvalError(Vec<String>),
    /// `unknown` and `any_unknowns`.
    Unknown,
}

impl TestFile {
    pub fn from_tree(root: &Message) -> Result<TestFile, String> {
        let mut sections = Vec::new();
        for node in root.all("section") {
            let section = node.as_message()?;
            let name = section.string("name")?;
            let mut tests = Vec::new();
            for node in section.all("test") {
                let test = node.as_message()?;
                let case = Case::from_tree(test).map_err(|problem| {
                    let test_name = test.string("name").unwrap_or_default();
                    format!("section {name:?}, test {test_name:?}: {problem}")
                })?;
                tests.push(case);
            }
            sections.push(Section { name, tests });
        }
        Ok(TestFile { sections })
    }
}

impl Case {
    fn from_tree(test: &Message) -> Result<Case, String> {
        let mut type_env = Vec::new();
        for node in test.all("type_env") {
            let decl = node.as_message()?;
            let name = decl.string("name")?;
            if let Some(ident) = decl.message("ident")? {
                let kind = ident.message("type")?.cloned().unwrap_or_default();
                type_env.push(Decl::Ident { name, kind });
            } else if decl.has("function") {
                type_env.push(Decl::Function { name });
            } else {
                return Err(format!(
                    "type_env {name:?} is neither an ident nor a function"
                ));
            }
        }

        let mut bindings = Vec::new();
        for node in test.all("bindings") {
            let entry = node.as_message()?;
            let key = entry.string("key")?;
            let value = entry.message("value")?.cloned().unwrap_or_default();
            let binding = if let Some(value) = value.message("value")? {
                Binding::Value(value.clone())
            } else if value.has("error") {
                Binding::Error
            } else if value.has("unknown") {
                Binding::Unknown
            } else {
                // An empty ExprValue: a default `cel.expr.Value` holds no kind at all.
                Binding::Value(Message::default())
            };
            bindings.push((key, binding));
        }

        Ok(Case {
            name: test.string("name")?,
            expr: test.string("expr")?,
            disable_macros: test.bool("disable_macros")?,
            disable_check: test.bool("disable_check")?,
            check_only: test.bool("check_only")?,
            type_env,
            container: test.string("container")?,
            locale: test.string("locale")?,
            bindings,
            expect: expect(test)?,
        })
    }
}

fn expect(test: &Message) -> Result<Expect, String> {
    // A oneof: the last member written wins, as for any singular field.
    let matcher = test.fields.iter().rev().find(|field| {
        matches!(
            field.name.as_str(),
            "value"
                | "typed_result"
                | "eval_error"
                | "any_eval_errors"
                | "unknown"
                | "any_unknowns"
        )
    });
    let Some(matcher) = matcher else {
        let mut truth = Message::default();
        truth.fields.push(super::textproto::Field {
            name: "bool_value".to_owned(),
            value: Node::Ident("true".to_owned()),
        });
        return Ok(Expect::Value(truth));
    };
    let body = matcher.value.as_message()?;
    Ok(match matcher.name.as_str() {
        "value" => Expect::Value(body.clone()),
        "typed_result" => Expect::TypedResult {
            result: body.message("result")?.cloned(),
            deduced_type: body.message("deduced_type")?.cloned(),
        },
        "eval_error" => Expect::EvalError(error_messages(body)?),
        "any_eval_errors" => {
            let mut messages = Vec::new();
            for set in body.all("errors") {
                messages.extend(error_messages(set.as_message()?)?);
            }
            Expect::EvalError(messages)
        }
        _ => Expect::Unknown,
    })
}

/// The messages of an `ErrorSet`'s statuses.
fn error_messages(set: &Message) -> Result<Vec<String>, String> {
    set.all("errors")
        .map(|status| {
            status
                .as_message()
                .and_then(|status| status.string("message"))
        })
        .collect()
}
