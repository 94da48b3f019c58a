//! Where a feed stands, in the order the feed is read.

use uuid::Uuid;

/// Where a feed stands: after every row of transaction `transaction` whose id is at most
/// `id`. Ordered as the feed is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FeedPosition {
    pub transaction: i64,
    pub id: Uuid,
}

impl FeedPosition {
    /// Before every change (transaction ids start above 0).
    pub const START: Self = Self::after_transaction(0);

    /// After every row of `transaction`.
    pub const fn after_transaction(transaction: i64) -> Self {
        Self { transaction, id: Uuid::max() }
    }

    /// After every row of the positions below `bound`.
    pub const fn below(bound: i64) -> Self {
        Self::after_transaction(bound.saturating_sub(1))
    }
}
