//! Hand-written programs (`overriders.program`, `validateRules[].program`): minijinja programs
//! from the policy's author, run in the evaluation's program host when it has one (see
//! [`crate::host`]), else in the calling thread. The runtime itself is [`crate::program`].

use json_patch::Patch;
use serde_json::{Map, Value};

use crate::evaluation::Scope;
use crate::language::RuleProgram;
use crate::program::{Metered, patch_from_output, verdict_from_output};
use crate::rule::{RuleError, Verdict};

/// Runs an override program on `object`: its operations.
pub(crate) async fn patch(
    rule: &RuleProgram,
    scope: &mut Scope<'_, '_>,
    object: &Value,
) -> Result<Patch, RuleError> {
    let output = output(rule, scope, object).await?;
    patch_from_output(output).map_err(|e| rule.error(&e))
}

/// Runs a validate program on `object`: its verdict.
pub(crate) async fn verdict(
    rule: &RuleProgram,
    scope: &mut Scope<'_, '_>,
    object: &Value,
) -> Result<Verdict, RuleError> {
    let output = output(rule, scope, object).await?;
    verdict_from_output(output).map_err(|e| rule.error(&e))
}

/// The program's output on `object`, its references resolved.
async fn output(
    rule: &RuleProgram,
    scope: &mut Scope<'_, '_>,
    object: &Value,
) -> Result<Option<Value>, RuleError> {
    let refs = scope.resolve(&rule.refs, object).await?;
    run(rule, scope, object, refs).await
}

/// Runs the rule's program with its resolved `refs`. A hand-written one runs in the
/// evaluation's program host when there is one, unless it is contained (it fits the language of
/// texts but for branches: see [`RuleProgram::contained`]): that runs here with its reads
/// charged, and in the host only if it reads more than a text may. Any other runs here. A
/// template's program runs here too, when its native form cannot vouch for the result.
pub(crate) async fn run(
    rule: &RuleProgram,
    scope: &mut Scope<'_, '_>,
    object: &Value,
    refs: Map<String, Value>,
) -> Result<Option<Value>, RuleError> {
    let Some(host) = scope.evaluation.programs().filter(|_| rule.authored) else {
        let variables = scope.variables(object, refs).await;
        return rule
            .program
            .run(&crate::program::context(variables))
            .map_err(|e| rule.error(&e));
    };
    if rule.contained {
        // A hand-written program has no references of its own: `refs` is empty.
        let variables = scope.variables(object, refs.clone()).await;
        let context = crate::program::text_context(variables, Vec::new());
        match rule.program.run_metered(&context) {
            Metered::Ran(output) => return output.map_err(|e| rule.error(&e)),
            Metered::ReadTooMuch => {}
        }
    }
    let input = scope.program_input(object, refs).await;
    host.run(&rule.program, input)
        .await
        .map_err(|e| rule.error(&e))
}
