//! A long poll that waits outside its request's stack.
//!
//! A request that waits for its feed to move would otherwise hold, for up to 30 s, every
//! future between the connection and the feed: poem's router, the operation's
//! extractors, the request itself. The envelope offers a [`Parking`] to the feed
//! operations instead; one that finds nothing to serve leaves a [`Parked`] there and
//! returns, the stack unwinds, and the envelope holds only the parked record and a copy
//! of the request's head. When the feed (or the bound, or a key) moves, the deadline
//! passes or the server shuts down, the envelope sends the request through the stack
//! again with the [`Resume`]: the key is checked again, the feed looked at again, and
//! the request keeps its id, its single rate-limit charge and its single log line.

use std::sync::{Arc, Mutex, PoisonError};

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::bound::BoundWatch;
use super::heads::{Waiting, Watch};
use super::token::{FeedScope, Standing};
use crate::keys::KeyChanges;

/// Offered to a feed operation by the envelope; holds what passes between its passes.
#[derive(Clone, Default)]
pub struct Parking(Arc<Mutex<Slot>>);

#[derive(Default)]
struct Slot {
    parked: Option<Parked>,
    resume: Option<Resume>,
}

impl Parking {
    /// For the pass after `resume`.
    pub fn resuming(resume: Resume) -> Self {
        Self(Arc::new(Mutex::new(Slot { parked: None, resume: Some(resume) })))
    }

    /// Whether this pass continues a request that already waited (and so was already
    /// counted against its key's rate limit).
    pub fn is_resumed(&self) -> bool {
        self.lock().resume.is_some()
    }

    /// Where the request stood when it was parked; `None` on its first pass.
    pub(super) fn take_resume(&self) -> Option<Resume> {
        self.lock().resume.take()
    }

    pub(super) fn park(&self, parked: Parked) {
        self.lock().parked = Some(parked);
    }

    /// The request's parked record, if the pass just ended parked it.
    pub fn take_parked(&self) -> Option<Parked> {
        self.lock().parked.take()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Slot> {
        // Plain moves of values in and out: a poisoned lock still holds valid ones.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Where a waiting request stands between two looks at its feed.
pub struct Resume {
    /// Where its feed stands: position, history, and the WAL position last read at.
    pub(super) standing: Standing,
    /// The feed it waits on: a key moved to another workspace meanwhile is refused, not
    /// answered from the other workspace's feed at this one's position.
    pub(super) scope: FeedScope,
    pub(super) deadline: Instant,
    /// Keeps the request counted among its workspace's waiting ones.
    pub(super) waiting: Waiting,
    /// Set when the wait ended for want of time (deadline or shutdown), not because
    /// something moved: the next pass answers with no data without looking again.
    pub(super) out_of_time: bool,
}

/// A request that found nothing to serve and waits for its feed to move.
pub struct Parked {
    pub(super) resume: Resume,
    /// Each taken before the look that found nothing, so that nothing after it is missed.
    pub(super) head: Watch,
    pub(super) bound: BoundWatch,
    pub(super) keys: KeyChanges,
    /// Changes are committed that the bound does not let through yet.
    pub(super) not_yet_served: bool,
    pub(super) shutdown: CancellationToken,
}

impl Parked {
    /// Waits until the request is worth looking at again: its feed's head, the bound
    /// (when it holds changes back) or a key moved, or it is out of time.
    pub async fn until_worth_looking(self) -> Resume {
        let Self { mut resume, mut head, mut bound, mut keys, not_yet_served, shutdown } = self;
        let out_of_time = tokio::select! {
            biased;
            () = shutdown.cancelled() => true,
            () = tokio::time::sleep_until(resume.deadline) => true,
            () = head.changed() => false,
            () = bound.moved(), if not_yet_served => false,
            () = keys.changed() => false,
        };
        resume.out_of_time = out_of_time;
        resume
    }
}
