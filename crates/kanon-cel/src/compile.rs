//! Compiling an expression in an environment: parse (macros expanded), check, validate as
//! kube-apiserver does, and plan.

use crate::check::check;
use crate::env::Env;
use crate::error::CompileError;
use crate::parser::parse;
use crate::program::Program;
use crate::validate::validate;

impl Env {
    /// Parses, checks and plans `source` once; the program is then evaluated per request.
    pub fn compile(&self, source: &str) -> Result<Program, CompileError> {
        let expr = parse(source, &self.parse_options)?;
        let checked = check(self, &expr).map_err(|issues| CompileError::new(source, issues))?;
        validate(self, &expr, &checked).map_err(|issues| CompileError::new(source, issues))?;
        let mut program = Program::plan(self, source, &expr, Some(&checked))?;
        program.result_type = checked.result;
        Ok(program)
    }

    /// Parses and plans `source` without type checking: every name and overload is resolved at
    /// run time (cel-spec conformance tests marked `disable_check`).
    pub fn compile_unchecked(&self, source: &str) -> Result<Program, CompileError> {
        let expr = parse(source, &self.parse_options)?;
        Program::plan(self, source, &expr, None)
    }
}
