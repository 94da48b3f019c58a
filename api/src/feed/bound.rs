//! The feed's bound: the position below which every row is committed, on disk, and below
//! every position a writer can still take, on this server and after any crash of it
//! (`read_model_feed_bound()`, `migrations/…_feed_positions_across_histories.sql`). A page
//! serves only rows below it, so no later page can hold a change that belongs before a
//! token already handed out.
//!
//! One task per process samples it, and only when someone needs a newer one: requests wait
//! on it while a commit was announced at or past it, or a request asked for one. So however
//! many requests wait for a change that is committed but not yet below the bound (an older
//! writer of the read model is still running), the database sees one statement at a time
//! from this process, at most one every [`MIN_SPACING`], and fewer while the bound stays
//! held ([`HELD_BACKOFF_MAX`]); with nobody reading, none. Transactions that do not write
//! the read model never hold it.
//!
//! While the change listener is down, commits go unannounced: the bound is then sampled
//! for every page that asks, and every [`UNANNOUNCED_EVERY`] while requests wait on it.
//!
//! A bound belongs to the history of the database it was sampled in (`reads::history`),
//! and bounds of one history only grow. A sample from another history (the database changed
//! under the same address) replaces everything known of the one before rather than being
//! compared with it: the old primary coming back has lower positions than the standby it
//! replaced.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use sqlx::PgPool;
use tokio::sync::{watch, Notify};

use crate::metric_names::FEED_BOUND_SAMPLES;
use crate::reads::change::{Change, Channel, Follower};
use crate::reads::freshness::Trust;
use crate::reads::history::{HistoryId, ServerHistory};
use crate::reads::replicas::WalPosition;

/// The fewest milliseconds between two samples: at most this many a second, whatever
/// the load.
pub const MIN_SPACING: Duration = Duration::from_millis(5);
/// While the bound stays held below an announced commit, samples are spaced further
/// apart, doubling up to this.
pub const HELD_BACKOFF_MAX: Duration = Duration::from_millis(100);
/// How often the bound is sampled for waiting requests while commits go unannounced.
pub const UNANNOUNCED_EVERY: Duration = Duration::from_millis(100);
/// How often the bound served is recorded for the server's history (what a restore into
/// another server must pass).
const RECORD_EVERY: Duration = Duration::from_secs(1);
/// Longest a sample may take before it is abandoned and tried again.
const SAMPLE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a request waits for the sampler before it samples the bound itself.
const FRESH_WITHIN: Duration = Duration::from_secs(1);
/// How old a sample `since=latest` takes while commits are announced that the newest does
/// not let through: at most this long before the request. Its token then repeats the
/// changes committed meanwhile, which a client applies harmlessly, and read-only
/// traffic causes at most a few samples a second, not one write per request.
pub const LATEST_WITHIN: Duration = Duration::from_millis(250);
/// Between failed samples.
const RETRY_AFTER: Duration = Duration::from_millis(250);

/// Recent bounds kept for reads on a replica that has not replayed the newest.
const RECENT: usize = 64;

/// The statement of one sample: whether to record the bound, and this process's name for
/// its flush row.
const SAMPLE_SQL: &str = "select bound, wal_position, history_id from read_model_feed_bound_in_history($1, $2)";

/// One sample: the position every served row is below, the WAL position a replica must
/// have replayed to serve it, and the history both belong to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Bound {
    pub position: i64,
    pub wal: WalPosition,
    pub history: HistoryId,
}

/// A bound, and when the sample that found it began.
#[derive(Clone, Copy, Debug)]
struct Sample {
    bound: Bound,
    began: Instant,
}

/// The process's bound, the commits announced past it, and the requests waiting on it.
pub struct FeedBound {
    current: watch::Sender<Option<Sample>>,
    /// The newest committed position a notification announced.
    announced: AtomicI64,
    /// Wakes the sampler.
    wanted: Notify,
    /// A sample is wanted whatever was announced: commits may have gone unannounced.
    look_once: AtomicBool,
    listening: Trust,
    /// This process's row of `read_model_flushes`, which each sample writes so that its
    /// commit waits for the WAL flush.
    process: String,
    /// The last [`RECENT`] bounds of the current history, oldest first.
    recent: Mutex<VecDeque<Bound>>,
    /// Told the history of every sample.
    history: std::sync::Arc<ServerHistory>,
    /// Samples taken so far (what the metric counts, for this process alone).
    samples: std::sync::atomic::AtomicU64,
}

impl FeedBound {
    pub fn new(history: std::sync::Arc<ServerHistory>) -> Self {
        Self {
            current: watch::Sender::new(None),
            announced: AtomicI64::new(0),
            wanted: Notify::new(),
            look_once: AtomicBool::new(true),
            listening: Trust::default(),
            process: format!("lectern-api-{}", uuid::Uuid::new_v4().simple()),
            recent: Mutex::default(),
            history,
            samples: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Samples taken so far by this process: each is a write committed synchronously.
    pub fn samples(&self) -> u64 {
        self.samples.load(Ordering::Relaxed)
    }

    /// The newest bound sampled, if any; only ever grows within a history.
    pub fn current(&self) -> Option<Bound> {
        self.current.borrow().map(|sample| sample.bound)
    }

    /// The bound of `since=latest`: the newest, when every commit announced is below it
    /// and announcements are being heard; otherwise one sampled at most [`LATEST_WITHIN`]
    /// before `began`, shared with every request that asks meanwhile.
    pub async fn for_latest(&self, pool: &PgPool, began: Instant) -> Result<Bound, sqlx::Error> {
        match self.current() {
            Some(bound) if self.listening.get() && !self.held() => Ok(bound),
            _ => self.sampled_since(pool, began.checked_sub(LATEST_WITHIN).unwrap_or(began)).await,
        }
    }

    /// The bound to read a page with: the newest sampled, or, when there is none or commits
    /// go unannounced, one sampled from now on (requests at once share the sample).
    pub async fn for_reading(&self, pool: &PgPool) -> Result<Bound, sqlx::Error> {
        match self.current() {
            Some(bound) if self.listening.get() => Ok(bound),
            _ => self.sampled_since(pool, Instant::now()).await,
        }
    }

    /// A look found a committed change at `position`, which notifications may not have
    /// announced (it was committed before the listener was up): the sampler keeps sampling
    /// for the requests that wait on it until the bound lets it through.
    pub fn committed(&self, position: i64) {
        self.announced.fetch_max(position, Ordering::AcqRel);
        if self.held() {
            self.wanted.notify_one();
        }
    }

    /// A bound sampled by a sample that began at `since` or later: it lets through every
    /// commit made before `since` that no older writer of the read model still holds back.
    /// Concurrent callers share the sampler's samples; one is taken here only if the
    /// sampler does not answer within [`FRESH_WITHIN`].
    pub async fn sampled_since(&self, pool: &PgPool, since: Instant) -> Result<Bound, sqlx::Error> {
        let mut receiver = self.current.subscribe();
        let deadline = tokio::time::Instant::now() + FRESH_WITHIN;
        loop {
            if let Some(sample) = *receiver.borrow_and_update() {
                if sample.began >= since {
                    return Ok(sample.bound);
                }
            }
            self.look_once.store(true, Ordering::Release);
            self.wanted.notify_one();
            match tokio::time::timeout_at(deadline, receiver.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) | Err(_) => return self.sample(pool, false).await,
            }
        }
    }

    /// The newest bound a server that has replayed the WAL up to `replayed` can serve: a
    /// replica a little behind the primary serves a page below a bound a little older,
    /// rather than sending the read to the primary.
    pub fn replayed_by(&self, replayed: WalPosition) -> Option<Bound> {
        let recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        recent.iter().rev().find(|bound| bound.wal <= replayed).copied()
    }

    /// A view of the bound that wakes when it moves; the sampler keeps sampling while
    /// such views wait and commits go unannounced.
    pub fn watch(&self) -> BoundWatch {
        let receiver = self.current.subscribe();
        let position = receiver.borrow().map(|sample| sample.bound.position);
        BoundWatch { receiver, position }
    }

    /// Samples the bound now and publishes it.
    async fn sample(&self, pool: &PgPool, record: bool) -> Result<Bound, sqlx::Error> {
        let began = Instant::now();
        let query = sqlx::query_as::<_, (i64, i64, i64)>(SAMPLE_SQL).bind(record).bind(&self.process).fetch_one(pool);
        let (position, wal, history) = match tokio::time::timeout(SAMPLE_TIMEOUT, query).await {
            Ok(sampled) => sampled?,
            Err(_) => return Err(sqlx::Error::PoolTimedOut),
        };
        metrics::counter!(FEED_BOUND_SAMPLES).increment(1);
        self.samples.fetch_add(1, Ordering::Relaxed);
        // Another history than the last sample's: everything known of that one is dropped
        // (`new_history`, below) before this sample is published.
        self.history.saw(Some(history), "a sample of the feed's bound");
        let sampled = Bound { position, wal, history };
        {
            let mut recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
            if recent.back().is_some_and(|newest| newest.history != history) {
                recent.clear();
            }
            if recent.back().is_none_or(|newest| newest.position < position) {
                if recent.len() == RECENT {
                    recent.pop_front();
                }
                recent.push_back(sampled);
            }
        }
        // Always sent: a sample that finds the bound where it was still says it is fresh.
        self.current.send_modify(|current| {
            *current = Some(match *current {
                Some(known) if known.bound.history == history && known.bound.position >= sampled.position => {
                    Sample { bound: known.bound, began: known.began.max(began) }
                }
                _ => Sample { bound: sampled, began },
            });
        });
        Ok(self.current().unwrap_or(sampled))
    }

    /// Whether a commit was announced that the bound does not let through yet.
    fn held(&self) -> bool {
        let announced = self.announced.load(Ordering::Acquire);
        self.current().is_none_or(|bound| announced >= bound.position)
    }

    /// Samples whenever someone needs a newer bound, until the process ends.
    pub async fn keep(self: std::sync::Arc<Self>, pool: PgPool) {
        let mut held_for = MIN_SPACING;
        let mut recorded = Instant::now() - RECORD_EVERY;
        loop {
            // Only for someone: a request waiting on the bound, or one that asked. Commits
            // nobody waits for are let through by the next sample anyone needs.
            let waiting = self.current.receiver_count() > 0;
            let look_once = self.look_once.swap(false, Ordering::AcqRel);
            if !look_once && !(waiting && (self.held() || !self.listening.get())) {
                let wanted = self.wanted.notified();
                tokio::select! {
                    () = wanted => {}
                    () = tokio::time::sleep(UNANNOUNCED_EVERY), if !self.listening.get() => {}
                }
                continue;
            }
            let before = self.current();
            let record = recorded.elapsed() >= RECORD_EVERY;
            match self.sample(&pool, record).await {
                Ok(_) => {
                    if record {
                        recorded = Instant::now();
                    }
                }
                Err(error) => {
                    tracing::warn!(error = %crate::error::chain(&error), "sampling the feed's bound failed; trying again");
                    self.look_once.store(true, Ordering::Release);
                    tokio::time::sleep(RETRY_AFTER).await;
                    continue;
                }
            }
            let moved = self.current() != before;
            held_for = if moved { MIN_SPACING } else { (held_for * 2).min(HELD_BACKOFF_MAX) };
            if !self.listening.get() {
                held_for = held_for.max(UNANNOUNCED_EVERY);
            }
            tokio::time::sleep(if self.held() { held_for } else { MIN_SPACING }).await;
        }
    }
}

/// A request's view of the bound.
pub struct BoundWatch {
    receiver: watch::Receiver<Option<Sample>>,
    position: Option<i64>,
}

impl BoundWatch {
    /// Returns once the bound has moved since this watch was taken or last returned.
    pub async fn moved(&mut self) {
        loop {
            if self.receiver.changed().await.is_err() {
                // The sender lives as long as the state; without it nothing moves.
                std::future::pending::<()>().await;
            }
            let position = self.receiver.borrow_and_update().map(|sample| sample.bound.position);
            if position != self.position {
                self.position = position;
                return;
            }
        }
    }
}

impl Follower for FeedBound {
    fn channel(&self) -> Channel {
        Channel::ReadModel
    }

    /// A commit at `position`, to let through.
    fn changed(&self, change: &Change) {
        match *change {
            Change::Rows { position: Some(position), .. } => {
                self.announced.fetch_max(position, Ordering::AcqRel);
                if self.held() {
                    self.wanted.notify_one();
                }
            }
            Change::AnyRows => self.forget_everything(),
            Change::Rows { position: None, .. } | Change::Key(_) | Change::AnyKey => {}
        }
    }

    fn forget_everything(&self) {
        // Commits may have gone unannounced: look once, whatever is known.
        self.look_once.store(true, Ordering::Release);
        self.wanted.notify_one();
    }

    /// Bounds and announcements of another history say nothing of this one: a bound kept
    /// from the standby that served before would hold every feed back for good once the old
    /// primary, with lower positions, is back.
    fn new_history(&self) {
        self.current.send_replace(None);
        self.recent.lock().unwrap_or_else(PoisonError::into_inner).clear();
        self.announced.store(0, Ordering::Release);
        self.forget_everything();
    }

    fn trust(&self) -> &Trust {
        &self.listening
    }
}
