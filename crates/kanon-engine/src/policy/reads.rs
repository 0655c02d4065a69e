//! What a policy may read of the objects it judges, when its rules say (see
//! [`crate::projection`]).

use super::{CompiledPolicy, PolicyRules};
use crate::projection::Projection;

/// What `policy` may read of the objects it judges beyond [`Projection::base`], when that is
/// known (`None`: the whole object).
pub(crate) fn read_by(policy: &CompiledPolicy) -> Option<Projection> {
    // An object a policy with the `Audit` action admitted is handed to the audit whole, for
    // its reports (`AdmissionRecorder`).
    if policy.defect.is_some()
        || policy.audits()
        || policy
            .selectors
            .iter()
            .any(crate::selector::ResourceMatcher::selects_fields)
    {
        return None;
    }
    let mut read = Projection::nothing();
    match &policy.rules {
        PolicyRules::Validate { rules, .. } => {
            for rule in rules {
                let cel = rule
                    .cel
                    .as_ref()
                    .map(|cel| (&cel.references, &cel.object_read));
                add_rule(&mut read, rule.template.iter().chain(&rule.program), cel)?;
            }
        }
        PolicyRules::Override(rules) => {
            for rule in rules {
                let cel = rule
                    .cel
                    .as_ref()
                    .map(|cel| (&cel.references, &cel.object_read));
                add_rule(&mut read, rule.template.iter().chain(&rule.program), cel)?;
                // Constant operations write and read where they say.
                for op in &rule.patch {
                    for pointer in crate::diff::operation_pointers(op) {
                        read.add_pointer(pointer);
                    }
                }
            }
        }
    }
    (!read.is_whole()).then_some(read)
}

/// Adds what one rule's programs and CEL expressions (with their references, and what they
/// read) read; `None` when that is not known.
fn add_rule<'r, R>(
    read: &mut Projection,
    programs: impl Iterator<Item = &'r crate::language::RuleProgram>,
    cel: Option<(&Vec<R>, &Projection)>,
) -> Option<()> {
    for program in programs {
        read.union(&program.object_read()?);
    }
    if let Some((references, object_read)) = cel {
        // A reference is looked up by what the object holds.
        if !references.is_empty() {
            return None;
        }
        read.union(object_read);
    }
    Some(())
}
