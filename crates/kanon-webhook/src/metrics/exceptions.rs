//! The `exception` label's values, bounded: a tenant who may write PolicyExceptions can write
//! any number of them, each exempting from several policies, and every (exception, policy)
//! pair counted would be a series of its own for as long as the server runs.

use std::collections::HashSet;
use std::sync::{Arc, PoisonError, RwLock};

use super::ExceptionLabels;

/// At most this many (exception, policy) pairs have series of their own in
/// `kanon_exceptions_applied_total`; exemptions by any other pair are counted with
/// `exception="other"` under their policy.
pub const MAX_EXCEPTION_SERIES: usize = 256;

/// The (exception, policy) pairs counted so far with their own series.
#[derive(Debug, Default)]
pub(super) struct ExceptionSeries {
    counted: RwLock<HashSet<(Arc<str>, Arc<str>)>>,
}

impl ExceptionSeries {
    /// The labels an exemption of `policy` by `exception` is counted under: the pair itself
    /// when it already has a series or there is room for one, else `other` for the exception.
    pub(super) fn labels(&self, exception: &Arc<str>, policy: &Arc<str>) -> ExceptionLabels {
        let pair = (exception.clone(), policy.clone());
        let own = || ExceptionLabels {
            exception: exception.clone(),
            policy: policy.clone(),
        };
        let other = || ExceptionLabels {
            exception: Arc::from("other"),
            policy: policy.clone(),
        };
        {
            let counted = self.counted.read().unwrap_or_else(PoisonError::into_inner);
            if counted.contains(&pair) {
                return own();
            }
            if counted.len() >= MAX_EXCEPTION_SERIES {
                return other();
            }
        }
        let mut counted = self.counted.write().unwrap_or_else(PoisonError::into_inner);
        if counted.len() >= MAX_EXCEPTION_SERIES && !counted.contains(&pair) {
            return other();
        }
        counted.insert(pair);
        own()
    }
}
