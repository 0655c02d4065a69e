//! The operations a rule applies to, as a set.

use kanon_api::Operation;

/// A set of admission operations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OperationSet(u8);

impl OperationSet {
    /// Every operation.
    pub const ALL: OperationSet = OperationSet(0b1111);
    /// No operation.
    pub const NONE: OperationSet = OperationSet(0);

    /// The operations in either set.
    pub fn union(self, other: OperationSet) -> OperationSet {
        OperationSet(self.0 | other.0)
    }

    fn bit(op: Operation) -> u8 {
        match op {
            Operation::Create => 0b0001,
            Operation::Update => 0b0010,
            Operation::Delete => 0b0100,
            Operation::Connect => 0b1000,
            Operation::All => 0b1111,
        }
    }

    /// The set a rule's `targetOperations` describes: empty or `*` means all.
    pub fn from_targets(targets: &[Operation]) -> Self {
        if targets.is_empty() {
            return Self::ALL;
        }
        OperationSet(targets.iter().fold(0, |acc, op| acc | Self::bit(*op)))
    }

    /// Whether `op` (a concrete operation) is in the set.
    pub fn contains(self, op: Operation) -> bool {
        self.0 & Self::bit(op) != 0 && op != Operation::All
    }
}
