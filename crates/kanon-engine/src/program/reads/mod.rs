//! Which fields of a document variable (`object`, `oldObject`) a program or text may read, on
//! the runtime's own parse of its source: each use of the variable followed as far as constant
//! attribute and item names go (`object.spec["containers"]`), the subtree below read whole. A
//! variable named bare (passed to a filter or function, printed, assigned), a method called on
//! what a chain reaches (`object.spec.items()`: read whole from there), an item picked by a
//! computed key, or a statement this walk does not know reads whole.
//!
//! A variable a template assigns itself under the same name (`{% set object = … %}`) is taken
//! for the document: that only reads more.

use std::sync::Arc;

use kanon_cel::FieldsRead;
use minijinja::machinery::ast::{CallArg, CallType, Expr, Stmt};

/// The fields of `name` that `source` may read.
pub(crate) fn fields_read(source: &str, name: &str) -> FieldsRead {
    let Ok(template) = minijinja::machinery::parse(source, "reads", Default::default()) else {
        return FieldsRead::Whole;
    };
    let mut walk = Walk {
        name,
        read: FieldsRead::Paths(Vec::new()),
        pointer_calls: false,
        pointer_assigned: false,
    };
    walk.statement(&template);
    // `pointer` assigned by the template is not the helper its calls were taken for.
    if walk.pointer_calls && walk.pointer_assigned {
        return FieldsRead::Whole;
    }
    walk.read
}

struct Walk<'n> {
    name: &'n str,
    read: FieldsRead,
    /// Whether a call `pointer(<the variable>, "<pointer>")` was read as a path.
    pointer_calls: bool,
    /// Whether the template assigns a variable named `pointer`.
    pointer_assigned: bool,
}

impl Walk<'_> {
    fn statements(&mut self, statements: &[Stmt<'_>]) {
        for statement in statements {
            self.statement(statement);
        }
    }

    fn statement(&mut self, statement: &Stmt<'_>) {
        match statement {
            Stmt::Template(template) => self.statements(&template.children),
            Stmt::EmitRaw(_) | Stmt::Continue(_) | Stmt::Break(_) => {}
            Stmt::EmitExpr(emit) => self.expression(&emit.expr),
            Stmt::ForLoop(each) => {
                self.target(&each.target);
                self.expression(&each.iter);
                if let Some(filter) = &each.filter_expr {
                    self.expression(filter);
                }
                self.statements(&each.body);
                self.statements(&each.else_body);
            }
            Stmt::IfCond(branch) => {
                self.expression(&branch.expr);
                self.statements(&branch.true_body);
                self.statements(&branch.false_body);
            }
            Stmt::WithBlock(with) => {
                for (target, value) in &with.assignments {
                    self.target(target);
                    self.expression(value);
                }
                self.statements(&with.body);
            }
            Stmt::Set(set) => {
                self.target(&set.target);
                self.expression(&set.expr);
            }
            Stmt::SetBlock(set) => {
                self.target(&set.target);
                if let Some(filter) = &set.filter {
                    self.expression(filter);
                }
                self.statements(&set.body);
            }
            Stmt::AutoEscape(escape) => {
                self.expression(&escape.enabled);
                self.statements(&escape.body);
            }
            Stmt::FilterBlock(block) => {
                self.expression(&block.filter);
                self.statements(&block.body);
            }
            Stmt::Do(call) => self.call(&call.call),
            // Macros and calls with bodies: not walked.
            _ => self.read = FieldsRead::Whole,
        }
    }

    /// An assignment's target (a name, or names unpacked).
    fn target(&mut self, target: &Expr<'_>) {
        match target {
            Expr::Var(variable) if variable.id == "pointer" => self.pointer_assigned = true,
            Expr::Tuple(tuple) => tuple.items.iter().for_each(|item| self.target(item)),
            _ => {}
        }
        self.expression(target);
    }

    fn arguments(&mut self, arguments: &[CallArg<'_>]) {
        for argument in arguments {
            match argument {
                CallArg::Pos(value)
                | CallArg::Kwarg(_, value)
                | CallArg::PosSplat(value)
                | CallArg::KwargSplat(value) => self.expression(value),
            }
        }
    }

    fn call(&mut self, call: &minijinja::machinery::ast::Call<'_>) {
        // The `pointer` helper at a constant pointer reads the subtree there.
        if let (
            CallType::Function("pointer"),
            [
                CallArg::Pos(Expr::Var(variable)),
                CallArg::Pos(Expr::Const(at)),
            ],
        ) = (call.identify_call(), &call.args[..])
            && let Some(tokens) = at.value.as_str().and_then(crate::pointer::token_list)
        {
            if variable.id == self.name {
                self.pointer_calls = true;
                self.read.add(tokens.into_iter().map(Arc::from).collect());
            }
            return;
        }
        match call.identify_call() {
            // A method reads its receiver whole.
            CallType::Method(receiver, _) => self.expression(receiver),
            CallType::Function(_) => {}
            CallType::Object(callee) => self.expression(callee),
            #[allow(unreachable_patterns)]
            _ => self.read = FieldsRead::Whole,
        }
        self.arguments(&call.args);
    }

    fn expression(&mut self, expression: &Expr<'_>) {
        // A chain of constant names from the variable: one path.
        let mut names: Vec<Arc<str>> = Vec::new();
        let mut at = expression;
        loop {
            match at {
                Expr::GetAttr(attribute) => {
                    names.push(Arc::from(attribute.name));
                    at = &attribute.expr;
                }
                Expr::GetItem(item) => match &item.subscript_expr {
                    Expr::Const(key) if key.value.as_str().is_some() => {
                        names.push(Arc::from(key.value.as_str().unwrap_or_default()));
                        at = &item.expr;
                    }
                    other => {
                        // What lies before a computed key is read whole.
                        self.expression(other);
                        names.clear();
                        at = &item.expr;
                    }
                },
                _ => break,
            }
        }
        if let Expr::Var(variable) = at {
            if variable.id == self.name {
                names.reverse();
                self.read.add(names);
            }
            return;
        }
        if !names.is_empty() {
            // Names selected from another value: what that value reads is read.
            self.expression(at);
            return;
        }
        match expression {
            Expr::Var(_) | Expr::Const(_) | Expr::GetAttr(_) | Expr::GetItem(_) => {}
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
                self.expression(&binary.left);
                self.expression(&binary.right);
            }
            Expr::Compare(compare) => {
                self.expression(&compare.expr);
                for operation in &compare.ops {
                    self.expression(&operation.expr);
                }
            }
            Expr::IfExpr(choice) => {
                self.expression(&choice.test_expr);
                self.expression(&choice.true_expr);
                if let Some(otherwise) = &choice.false_expr {
                    self.expression(otherwise);
                }
            }
            Expr::Filter(filter) => {
                if let Some(value) = &filter.expr {
                    self.expression(value);
                }
                self.arguments(&filter.args);
            }
            Expr::Test(test) => {
                self.expression(&test.expr);
                self.arguments(&test.args);
            }
            Expr::Call(call) => self.call(call),
            Expr::List(list) => list.items.iter().for_each(|item| self.expression(item)),
            Expr::Tuple(tuple) => tuple.items.iter().for_each(|item| self.expression(item)),
            Expr::Map(map) => {
                for (key, value) in map.keys.iter().zip(&map.values) {
                    self.expression(key);
                    self.expression(value);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
