//! The cost an evaluation may spend, and the caller's interrupt.

use crate::error::EvalError;

/// The cost an evaluation may spend, and an optional interrupt polled as it goes (every 100
/// comprehension iterations): the caller's deadline.
pub struct Budget<'i> {
    pub limit: u64,
    pub spent: u64,
    pub interrupt: Option<&'i dyn Fn() -> bool>,
}

impl<'i> Budget<'i> {
    pub fn new(limit: u64) -> Self {
        Budget {
            limit,
            spent: 0,
            interrupt: None,
        }
    }

    pub fn unlimited() -> Self {
        Budget::new(u64::MAX)
    }

    pub fn with_interrupt(mut self, interrupt: &'i dyn Fn() -> bool) -> Self {
        self.interrupt = Some(interrupt);
        self
    }

    /// Spends `cost`; fails once the total passes the limit.
    pub fn charge(&mut self, cost: u64) -> Result<(), EvalError> {
        self.spent = self.spent.saturating_add(cost);
        if self.spent > self.limit {
            Err(EvalError::CostLimitExceeded { limit: self.limit })
        } else {
            Ok(())
        }
    }

    pub(crate) fn interrupted(&self) -> bool {
        self.interrupt.is_some_and(|interrupt| interrupt())
    }
}
