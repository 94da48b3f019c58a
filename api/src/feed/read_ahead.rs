//! Reading a feed's next page before its client asks for it.
//!
//! A client catching up calls again at once whenever `hasMore` is true, with the token
//! of the page it has just received. So when a page is full, the page after it is read,
//! and its entries written, while the first is still being sent and read; the client's
//! next call finds it ready, or waits for the read already under way instead of starting
//! its own. On a catch-up the database's share of each page and most of the API's then
//! overlap the client's.
//!
//! A page read ahead is served only as a read would find it now: while no change of its
//! feed has been announced since the read began (the notifications that keep the
//! [`heads`](super::heads); one announced since throws the page away) and while the
//! listener has been up throughout. That is the promise an empty poll answered from
//! memory already makes.
//!
//! Bounded: at most [`MAX_PAGES`] pages held (one unclaimed for [`KEPT_FOR`] is dropped
//! when the next read ahead starts), and at most [`MAX_READING`] reads at once, each
//! through its workspace's share of the connections; past a bound a page is simply not
//! read ahead.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{oneshot, Semaphore};
use tokio::time::Instant;

use super::heads::{FeedHeads, FeedKey, Watch};
use super::position::FeedPosition;
use super::query::Changes;
use crate::metric_names::FEED_READ_AHEAD;
use crate::reads::freshness::Ticket;

/// Pages held at once, over every feed: about 40 KB each at 100 rows.
pub const MAX_PAGES: usize = 128;
/// A page nobody asked for within this long is dropped: its client has gone.
pub const KEPT_FOR: Duration = Duration::from_secs(10);
/// Reads ahead under way at once, so that they never take more than a few of the
/// connections from the requests clients are waiting on.
pub const MAX_READING: usize = 4;

/// Which page: the one after `after` in `feed`, read as `rows` rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PageKey {
    pub feed: FeedKey,
    pub after: FeedPosition,
    pub rows: i64,
}

/// A page read ahead, its entries written.
pub struct ReadPage {
    pub changes: Changes,
    /// The body's `{"data":[…]`.
    pub data: Vec<u8>,
}

/// What a finished read hands to the request that claims it.
struct Finished {
    ticket: Ticket,
    watch: Watch,
    page: ReadPage,
}

/// A read under way or done, not yet claimed.
struct Held {
    since: Instant,
    read: oneshot::Receiver<Finished>,
}

/// The pages read ahead, shared by every request of a process.
pub struct ReadAhead {
    pages: Mutex<HashMap<PageKey, Held>>,
    reading: Arc<Semaphore>,
    /// Reads finished, served or not (for tests that must know a page is held).
    finished: Arc<AtomicU64>,
}

impl Default for ReadAhead {
    fn default() -> Self {
        Self { pages: Mutex::default(), reading: Arc::new(Semaphore::new(MAX_READING)), finished: Arc::default() }
    }
}

impl ReadAhead {
    /// Starts `read` of the page `key` in the background, unless a bound is reached or it
    /// is read already. `heads` must be trusted: a page read while the listener is down
    /// could never be served.
    pub fn start<F>(&self, key: PageKey, heads: &FeedHeads, read: F)
    where
        F: Future<Output = Option<ReadPage>> + Send + 'static,
    {
        let ticket = heads.ticket();
        if !ticket.trusted() {
            return;
        }
        let Ok(permit) = self.reading.clone().try_acquire_owned() else {
            return;
        };
        let (sender, receiver) = oneshot::channel();
        {
            let mut pages = self.lock();
            let now = Instant::now();
            pages.retain(|_, held| {
                let kept = now.duration_since(held.since) < KEPT_FOR;
                if !kept {
                    metrics::counter!(FEED_READ_AHEAD, "outcome" => "unclaimed").increment(1);
                }
                kept
            });
            if pages.len() >= MAX_PAGES || pages.contains_key(&key) {
                return;
            }
            pages.insert(key, Held { since: now, read: receiver });
        }
        // Taken before the read: a change committed after it began moves the watch.
        let watch = heads.watch(key.feed);
        let finished = self.finished.clone();
        tokio::spawn(async move {
            let page = read.await;
            drop(permit);
            finished.fetch_add(1, Ordering::Release);
            if let Some(page) = page {
                // The client may have gone meanwhile: nobody to hand the page to.
                let _unclaimed = sender.send(Finished { ticket, watch, page });
            }
        });
    }

    /// The page `key` if it was read ahead and is still as a read would find it now,
    /// waiting for its read when that is under way, with the ticket taken before the read
    /// (for [`FeedHeads::learn`]). `None`: read it.
    pub async fn take(&self, key: &PageKey, heads: &FeedHeads) -> Option<(Ticket, ReadPage)> {
        let mut held = self.lock().remove(key)?;
        let (finished, served) = match held.read.try_recv() {
            Ok(finished) => (finished, "served"),
            Err(oneshot::error::TryRecvError::Empty) => match held.read.await {
                Ok(finished) => (finished, "served_after_wait"),
                Err(_) => return None,
            },
            // The read failed; the request's own read reports why.
            Err(oneshot::error::TryRecvError::Closed) => return None,
        };
        let Finished { ticket, watch, page } = finished;
        let current = heads.unchanged_since(ticket, &watch);
        metrics::counter!(FEED_READ_AHEAD, "outcome" => if current { served } else { "stale" }).increment(1);
        current.then_some((ticket, page))
    }

    /// Reads ahead that have finished since the process started.
    pub fn finished(&self) -> u64 {
        self.finished.load(Ordering::Acquire)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<PageKey, Held>> {
        // Every change is one insert, one remove or one retain: a poisoned lock holds a
        // consistent map.
        self.pages.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
