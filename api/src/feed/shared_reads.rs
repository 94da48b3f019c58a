//! One read for the requests that look at the same feed page at the same moment.
//!
//! A change wakes every request waiting on its feed at once, and each looks at the feed
//! again from the same token: fifty waiting in a workspace would read the same page fifty
//! times, queueing for the workspace's share of the connections. Instead, the first to
//! look starts the read and those that look while it is under way, at the same position,
//! below the same bound or a newer one of the same history, join it: any bound sampled
//! since the one a request holds serves it, and the sampler moves the bound while the
//! requests woken by one change come through one after another.
//!
//! A joined read is served only as a read would find it now: no change of its feed
//! announced since it began, the listener up throughout (the promise of a page read
//! ahead, and of an empty poll answered from memory). Otherwise, and when the read
//! failed, the request reads on its own and reports its own error.
//!
//! Requests woken together do not always look together: on a busy host they come through
//! one after another, each after the one before has read. So a finished read is kept for
//! [`KEPT_FOR`] and served, under the same promise, to those that look at the same page
//! meanwhile.
//!
//! The read runs in whichever of its requests is polled, so it goes on when the one that
//! started it is gone. The map holds weak handles: a read nobody waits for any more is
//! dropped with its last request, and its entry is swept once the map grows.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures_util::future::{BoxFuture, Shared, WeakShared};
use futures_util::FutureExt;

use super::bound::Bound;
use super::heads::{FeedHeads, Watch};
use super::query::Changes;
use super::read_ahead::PageKey;
use crate::metric_names::FEED_SHARED_READS;
use crate::reads::freshness::Ticket;
use crate::reads::replicas::WalPosition;

/// Entries past which a new read first sweeps the ones nobody waits for.
const SWEEP_ABOVE: usize = 1_024;
/// How long a finished read is served to requests that look at its page after it.
pub const KEPT_FOR: Duration = Duration::from_millis(250);
/// Finished reads kept at most: past it, those past [`KEPT_FOR`] are dropped as reads end.
const KEEP_AT_MOST: usize = 16;

/// Which read: the page `page`, by a reader that has seen `seen`, below `bound` (or a newer
/// bound of its history), with the feed's head known (`head_known`: one statement) or not
/// (two).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReadKey {
    pub page: PageKey,
    pub seen: WalPosition,
    pub bound: Bound,
    pub head_known: bool,
}

impl ReadKey {
    pub fn new(page: PageKey, seen: WalPosition, bound: Bound, head_known: bool) -> Self {
        Self { page, seen, bound, head_known }
    }

    /// What a read is found by: all but the bound, which a joined read may exceed.
    fn slot(&self) -> Slot {
        (self.page, self.seen, self.head_known)
    }
}

type Slot = (PageKey, WalPosition, bool);

/// A finished read, and what tells whether it is still what a read would find.
pub struct SharedRead {
    /// Taken before the read, for [`FeedHeads::learn`].
    pub ticket: Ticket,
    watch: Watch,
    pub changes: Arc<Changes>,
}

/// `None`: the read failed.
type Outcome = Option<Arc<SharedRead>>;
type Read = Shared<BoxFuture<'static, Outcome>>;

struct Entry {
    id: u64,
    /// The bound the read is below.
    bound: Bound,
    read: WeakShared<BoxFuture<'static, Outcome>>,
    /// The read's result once it finished, and when.
    finished: Option<(Instant, Arc<SharedRead>)>,
}

impl Entry {
    /// What a request that looks now can be given: the read under way, or its result
    /// while it is kept.
    fn serving(&self) -> Option<Read> {
        if let Some((at, result)) = &self.finished {
            let result = result.clone();
            return (at.elapsed() < KEPT_FOR).then(|| std::future::ready(Some(result)).boxed().shared());
        }
        self.read.upgrade()
    }
}

/// The reads under way, shared by every request of a process.
#[derive(Default)]
pub struct SharedReads {
    reads: Mutex<HashMap<Slot, Entry>>,
    next_id: AtomicU64,
    /// Reads started, for tests that count them.
    started: AtomicU64,
}

impl SharedReads {
    /// The read `key`: joined when one is under way, else started with `read` for every
    /// request that looks meanwhile. `None`: read on your own (the read failed, or was
    /// joined and a change of the feed has been announced since it began).
    pub async fn read<F>(&self, key: ReadKey, heads: &FeedHeads, read: F) -> Option<Arc<SharedRead>>
    where
        F: Future<Output = Option<Changes>> + Send + 'static,
    {
        let (id, shared, started_here) = self.join_or_start(key, heads, read);
        let outcome = shared.await;
        self.finish(&key, id, outcome.as_ref());
        let read = outcome?;
        // The one who started it began its read after it looked; one who joined may
        // have looked after the read began.
        let current = started_here || heads.unchanged_since(read.ticket, &read.watch);
        let outcome = match (started_here, current) {
            (true, _) => "started",
            (false, true) => "joined",
            (false, false) => "stale",
        };
        metrics::counter!(FEED_SHARED_READS, "outcome" => outcome).increment(1);
        current.then_some(read)
    }

    /// Reads started since the process started.
    pub fn started(&self) -> u64 {
        self.started.load(Ordering::Acquire)
    }

    fn join_or_start<F>(&self, key: ReadKey, heads: &FeedHeads, read: F) -> (u64, Read, bool)
    where
        F: Future<Output = Option<Changes>> + Send + 'static,
    {
        let mut reads = self.lock();
        let serves =
            |entry: &Entry| entry.bound.history == key.bound.history && entry.bound.position >= key.bound.position;
        let joined = reads.get(&key.slot()).filter(|entry| serves(entry));
        if let Some((id, shared)) = joined.and_then(|entry| Some((entry.id, entry.serving()?))) {
            return (id, shared, false);
        }
        if reads.len() >= SWEEP_ABOVE {
            reads.retain(|_, entry| entry.read.upgrade().is_some());
        }
        // Both taken before the read: a change announced after it began moves the watch.
        let ticket = heads.ticket();
        let watch = heads.watch(key.page.feed);
        let shared =
            async move { read.await.map(|changes| Arc::new(SharedRead { ticket, watch, changes: Arc::new(changes) })) }
                .boxed()
                .shared();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        if let Some(read) = shared.downgrade() {
            reads.insert(key.slot(), Entry { id, bound: key.bound, read, finished: None });
        }
        self.started.fetch_add(1, Ordering::Release);
        (id, shared, true)
    }

    /// Keeps the result of read `id` in `key`'s entry, if it is still that read's, for
    /// [`KEPT_FOR`]; a failed read's entry is dropped.
    fn finish(&self, key: &ReadKey, id: u64, outcome: Option<&Arc<SharedRead>>) {
        let mut reads = self.lock();
        let Some(entry) = reads.get_mut(&key.slot()).filter(|entry| entry.id == id) else { return };
        match outcome {
            Some(result) if entry.finished.is_none() => entry.finished = Some((Instant::now(), result.clone())),
            Some(_) => {}
            None => {
                reads.remove(&key.slot());
            }
        }
        if reads.len() > KEEP_AT_MOST {
            reads.retain(|_, entry| {
                entry
                    .finished
                    .as_ref()
                    .map_or_else(|| entry.read.upgrade().is_some(), |(at, _)| at.elapsed() < KEPT_FOR)
            });
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Slot, Entry>> {
        // Every change is one insert, one remove or one retain: a poisoned lock holds a
        // consistent map.
        self.reads.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
