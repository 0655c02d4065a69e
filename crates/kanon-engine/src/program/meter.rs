//! What a placeholder text may read while it renders in kanon's own process.
//!
//! Fuel bounds the runtime's instructions, not the bytes a value turns into: a text that names
//! a 3 MiB annotation a thousand times in one list literal, then prints or serializes that list,
//! asks the runtime for gigabytes in one unfueled step, and an allocation that fails aborts the
//! whole process. So every read of a request's value by a text is charged here — each lookup of
//! a variable, each child of a document, each value a helper converts — against a budget of
//! bytes set for that render ([`metered`]). A read past the budget unwinds out of the runtime
//! and the render fails with [`TextError::OverBudget`]; nothing the text builds can then be much
//! larger than what it was charged for (the constructs that copy without reading again are
//! refused when the text compiles, see [`super::text`]).
//!
//! The budget is per thread and only while a metered render runs on it: programs (which run in
//! worker processes, or in process with `--program-workers 0`) read without charge.

use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::Once;

thread_local! {
    /// Bytes the render running on this thread may still read; `None` outside a metered render.
    static REMAINING: Cell<Option<usize>> = const { Cell::new(None) };
}

/// The unwinding payload of a read past the budget (never seen outside [`metered`]).
struct OverBudget;

/// Charges `bytes` to the render running on this thread, if it is metered; past its budget,
/// unwinds to [`metered`].
pub(super) fn charge(bytes: usize) {
    REMAINING.with(|remaining| {
        if let Some(left) = remaining.get() {
            match left.checked_sub(bytes) {
                Some(left) => remaining.set(Some(left)),
                None => {
                    remaining.set(Some(0));
                    std::panic::panic_any(OverBudget);
                }
            }
        }
    });
}

/// Whether a metered render runs on this thread (so that a charge worth computing is computed).
pub(super) fn active() -> bool {
    REMAINING.with(|remaining| remaining.get().is_some())
}

/// Charges what `value` holds: its strings' bytes, 8 for every other value and key.
pub(super) fn charge_json(value: &serde_json::Value) {
    if active() {
        charge(json_size(value));
    }
}

/// What [`charge_json`] charges for `value`.
pub(super) fn json_size(value: &serde_json::Value) -> usize {
    match value {
        serde_json::Value::String(s) => s.len().max(8),
        serde_json::Value::Array(items) => items.iter().map(json_size).sum::<usize>() + 8,
        serde_json::Value::Object(map) => {
            map.iter()
                .map(|(k, v)| k.len().max(8) + json_size(v))
                .sum::<usize>()
                + 8
        }
        _ => 8,
    }
}

/// Why a metered render gave no text.
#[derive(Debug)]
pub(super) enum TextError<E> {
    /// The render's own error.
    Failed(E),
    /// It read more than its budget.
    OverBudget,
}

/// Runs `render` with a budget of `bytes` for the reads it charges; the budget of an enclosing
/// metered render (there is none today) is restored afterwards.
pub(super) fn metered<T, E>(
    bytes: usize,
    render: impl FnOnce() -> Result<T, E>,
) -> Result<T, TextError<E>> {
    quiet_over_budget();
    let outer = REMAINING.with(|remaining| remaining.replace(Some(bytes)));
    let outcome = catch_unwind(AssertUnwindSafe(render));
    REMAINING.with(|remaining| remaining.set(outer));
    match outcome {
        Ok(result) => result.map_err(TextError::Failed),
        Err(payload) if payload.is::<OverBudget>() => Err(TextError::OverBudget),
        Err(payload) => resume_unwind(payload),
    }
}

/// Keeps the panic hook from printing the unwinding that ends a text over its budget (an
/// expected outcome, reported as the render's error); every other panic is printed as before.
fn quiet_over_budget() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !info.payload().is::<OverBudget>() {
                previous(info);
            }
        }));
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_within_the_budget_pass_and_past_it_end_the_render() {
        let within = metered(100, || {
            charge(60);
            charge(40);
            Ok::<_, ()>("done")
        });
        assert!(matches!(within, Ok("done")));
        let past = metered(100, || {
            charge(60);
            charge(41);
            Ok::<_, ()>("never")
        });
        assert!(matches!(past, Err(TextError::OverBudget)));
        // Outside a metered render nothing is charged, and nothing unwinds.
        assert!(!active());
        charge(usize::MAX);
    }

    #[test]
    fn other_panics_are_not_taken_for_the_budget() {
        let outcome = catch_unwind(|| metered(10, || -> Result<(), ()> { panic!("a defect") }));
        assert!(outcome.is_err(), "the defect's panic goes on unwinding");
        assert!(!active(), "the budget is gone with the render");
    }
}
