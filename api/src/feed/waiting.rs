//! A long poll's wait, owned here from the look that found nothing to the page that ends it.
//!
//! A feed operation answers a page or a [`Parked`] request: one that found nothing after
//! its position and asked to `wait`. The record holds what wakes it (its feed's head, the
//! bound when it holds changes back, any key's change, its deadline, the server's shutdown)
//! and its next look (which holds the caller, where it stands and its place among its
//! workspace's waiting requests), and nothing of the request's stack,
//! which unwinds: the HTTP shell keeps the record alone, over HTTP/1.1 in the connection's
//! task after dropping hyper's state, and asks it for its [`Answer`] when it is worth looking
//! again. The next look checks the key first: a key revoked, expired, stripped of the scope
//! or moved to another workspace while the request waited is refused then.

use futures_util::future::BoxFuture;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::bound::BoundWatch;
use super::heads::Watch;
use crate::error::ApiError;
use crate::keys::KeyChanges;

/// What a feed operation answers.
pub enum Answer {
    /// The response's body.
    Page(Vec<u8>),
    /// Nothing to serve yet: the request waits as this record.
    Wait(Box<Parked>),
}

/// A request that found nothing to serve and waits for its feed to move.
pub struct Parked {
    pub(super) deadline: Instant,
    /// Each taken before the look that found nothing, so that nothing after it is missed.
    pub(super) head: Watch,
    pub(super) bound: BoundWatch,
    pub(super) keys: KeyChanges,
    /// Changes are committed that the bound does not let through yet.
    pub(super) not_yet_served: bool,
    pub(super) shutdown: CancellationToken,
    /// Set when the wait ended for want of time (deadline or shutdown), not because
    /// something moved: the answer is a page with no data, once the key is checked.
    pub(super) out_of_time: bool,
    /// The next look, told whether the wait ran out of time: it holds where the request
    /// stands, its caller and its place among its workspace's waiting requests.
    pub(super) look_again: LookAgain,
}

/// A parked request's next look at its feed.
pub type LookAgain = Box<dyn FnOnce(bool) -> BoxFuture<'static, Result<Answer, ApiError>> + Send>;

impl Parked {
    /// Waits until the request is worth looking at again: its feed's head, the bound (when
    /// it holds changes back) or a key moved, or it is out of time.
    pub async fn until_worth_looking(&mut self) {
        self.out_of_time = tokio::select! {
            biased;
            () = self.shutdown.cancelled() => true,
            () = tokio::time::sleep_until(self.deadline) => true,
            () = self.head.changed() => false,
            () = self.bound.moved(), if self.not_yet_served => false,
            () = self.keys.changed() => false,
        };
    }

    /// The request's answer now: a page, or a wait again when what woke it let nothing
    /// through. Boxed by the look, so the record stays small while it waits.
    pub async fn answer(self: Box<Self>) -> Result<Answer, ApiError> {
        (self.look_again)(self.out_of_time).await
    }
}
