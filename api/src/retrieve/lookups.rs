//! Retrieves by id that arrive together are answered by one statement.
//!
//! At the top of the hour many integrations fetch records one id at a time. A statement
//! of its own per request costs PostgreSQL several times the primary-key probe it
//! wraps (binding, executor start-up, the round trip, the pool's release ping), and the
//! API a round trip each. Here a request joins a queue; a batch task takes everything
//! queued and reads it with one statement, then hands each request its row. Under
//! light load a batch holds one id and nothing waits for a batch to fill; under heavy
//! load batches grow by themselves, because requests queue while the statements ahead
//! of them run.
//!
//! A batch runs in a task of its own, so a client that goes away abandons only its
//! answer, never a statement half-read on a pooled connection. Rows go back to the
//! requests by (workspace, id): a request only ever receives a row of the workspace
//! its key belongs to, whatever else its batch held.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use sqlx::postgres::PgRow;
use sqlx::{PgPool, Row};
use tokio::sync::oneshot;
use uuid::Uuid;

use crate::error::ApiError;
use crate::reads::connections::PlanMode;
use crate::reads::replicas::{Reads, READ_POSITION};
use crate::resources::Resource;

/// Statements one resource's lookups may have running at once.
pub const CONCURRENT_BATCHES: usize = 4;
/// Normally one batch runs at a time, which keeps batches large: on the benchmark's
/// two cores, retrieves under load averaged 16 ids a statement with one batch at a
/// time and 5 with four, for 21 against 80 µs of PostgreSQL CPU a retrieve. A batch
/// running longer than this (a cold read, a lock) lets another start beside it, so
/// one slow statement does not hold up every retrieve.
const STALLED_AFTER: Duration = Duration::from_millis(5);
/// Ids one statement reads at most.
const MAX_BATCH: usize = 128;

/// Why a lookup has no answer.
#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    /// The batch's statement failed; every request of the batch shares the error.
    #[error("looking up records by id")]
    Database(#[source] Arc<sqlx::Error>),
    /// The batch task ended without answering (a bug: it panicked).
    #[error("the lookup batch ended without answering")]
    Abandoned,
}

impl From<LookupError> for ApiError {
    fn from(error: LookupError) -> Self {
        match error {
            LookupError::Database(error) => error.into(),
            abandoned @ LookupError::Abandoned => Self::Internal(Box::new(abandoned)),
        }
    }
}

/// The record's row (read it with [`Resource::record`]), `None` when it is unknown,
/// inactive or in another workspace. Shared: one batch may answer two requests for
/// the same record.
type Answer = Result<Option<Arc<PgRow>>, LookupError>;

/// The coalescing lookups of one resource.
pub struct Lookups<R: Resource> {
    pool: PgPool,
    /// A batch goes to a replica that has passed the fences of all its workspaces, if any.
    reads: Arc<Reads>,
    /// How long a batch may run before another may start beside it.
    stalled_after: Duration,
    /// One statement for every batch size (the ids travel as arrays), prepared once
    /// per connection.
    sql: String,
    queue: Mutex<Queue>,
    resource: std::marker::PhantomData<fn() -> R>,
}

struct Queue {
    waiting: Vec<Wanted>,
    /// Batch tasks alive; each keeps taking batches until the queue is empty.
    running: usize,
    /// When the latest batch was taken from the queue.
    last_taken: Instant,
}

struct Wanted {
    workspace_id: Uuid,
    id: Uuid,
    reply: oneshot::Sender<Answer>,
}

impl<R: Resource + 'static> Lookups<R> {
    pub fn new(pool: PgPool, reads: Arc<Reads>) -> Arc<Self> {
        Self::with_stalled_after(pool, reads, STALLED_AFTER)
    }

    /// As [`Lookups::new`], with another time after which a batch counts as stalled.
    pub fn with_stalled_after(pool: PgPool, reads: Arc<Reads>, stalled_after: Duration) -> Arc<Self> {
        // The record's columns first, as `Resource::record` reads them; then the
        // workspace, and the position read at last (see `Reads`).
        let sql = format!(
            "select {columns}, workspace_id, {READ_POSITION} from {table} \
             where (workspace_id, id) in (select * from unnest($1::uuid[], $2::uuid[])) and status = 'active'",
            columns = R::COLUMNS,
            table = R::NAME,
        );
        Arc::new(Self {
            pool,
            reads,
            stalled_after,
            sql,
            queue: Mutex::new(Queue { waiting: Vec::new(), running: 0, last_taken: Instant::now() }),
            resource: std::marker::PhantomData,
        })
    }

    /// The active record `id` of `workspace_id`, or `None`: unknown, inactive and
    /// foreign ids are indistinguishable on purpose.
    pub async fn find(self: &Arc<Self>, workspace_id: Uuid, id: Uuid) -> Answer {
        let (reply, answer) = oneshot::channel();
        self.lock().waiting.push(Wanted { workspace_id, id, reply });
        self.start_batch_if_due();
        tokio::pin!(answer);
        loop {
            tokio::select! {
                answered = &mut answer => return answered.unwrap_or(Err(LookupError::Abandoned)),
                // Queued behind batches that have since stalled: no other request may
                // come to start another, so the waiting one checks for itself.
                () = tokio::time::sleep(self.stalled_after) => self.start_batch_if_due(),
            }
        }
    }

    /// Starts a batch task when requests wait and none runs, or when the running ones
    /// have stalled and another may start beside them.
    fn start_batch_if_due(self: &Arc<Self>) {
        let start = {
            let mut queue = self.lock();
            let stalled = queue.last_taken.elapsed() >= self.stalled_after && queue.running < CONCURRENT_BATCHES;
            let due = !queue.waiting.is_empty() && (queue.running == 0 || stalled);
            if due {
                queue.running += 1;
                // Counts as taken now, so that requests arriving before the task runs
                // do not each start one of their own.
                queue.last_taken = Instant::now();
            }
            due
        };
        if start {
            tokio::spawn(Arc::clone(self).answer_until_empty());
        }
    }

    async fn answer_until_empty(self: Arc<Self>) {
        loop {
            let batch = {
                let mut queue = self.lock();
                if queue.waiting.is_empty() {
                    // Under the lock: a request queued after this check finds one task
                    // fewer running and starts its own.
                    queue.running -= 1;
                    return;
                }
                let take = queue.waiting.len().min(MAX_BATCH);
                queue.last_taken = Instant::now();
                queue.waiting.drain(..take).collect::<Vec<_>>()
            };
            // A panic answers this batch with `Abandoned` (its senders are dropped)
            // and must not strand the requests queued behind it.
            let _ = AssertUnwindSafe(self.answer(batch)).catch_unwind().await;
        }
    }

    async fn answer(&self, batch: Vec<Wanted>) {
        let (workspaces, ids): (Vec<Uuid>, Vec<Uuid>) =
            batch.iter().map(|wanted| (wanted.workspace_id, wanted.id)).unzip();
        let query = || sqlx::query(&self.sql).bind(&workspaces).bind(&ids);
        let on_replica = self
            .reads
            .fetch_across(workspaces.iter().copied(), |connections| connections.fetch_all(PlanMode::Generic, query()))
            .await;
        let rows = match on_replica {
            Ok(Some(read)) => Ok(read.rows),
            Ok(None) => query().fetch_all(&self.pool).await,
            Err(error) => Err(error),
        };
        let mut found = match rows.map(|rows| rows.into_iter().map(keyed).collect::<Result<HashMap<_, _>, _>>()) {
            Ok(Ok(found)) => found,
            Ok(Err(error)) | Err(error) => {
                let error = Arc::new(error);
                for wanted in batch {
                    let _ = wanted.reply.send(Err(LookupError::Database(error.clone())));
                }
                return;
            }
        };
        // The same record asked for twice in one batch is rare; each asker gets the row.
        let mut askers: HashMap<(Uuid, Uuid), usize> = HashMap::with_capacity(batch.len());
        for wanted in &batch {
            *askers.entry((wanted.workspace_id, wanted.id)).or_default() += 1;
        }
        for wanted in batch {
            let key = (wanted.workspace_id, wanted.id);
            let later = askers.get_mut(&key).map_or(0, |count| {
                *count -= 1;
                *count
            });
            let row = if later == 0 { found.remove(&key) } else { found.get(&key).cloned() };
            // The asker may have gone away; its answer is simply dropped.
            let _ = wanted.reply.send(Ok(row));
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        // Pushes and drains only: a panic elsewhere cannot leave the queue inconsistent.
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A row of the batch statement under its (workspace, id): the record's id comes first,
/// the workspace just before the read position.
fn keyed(row: PgRow) -> Result<((Uuid, Uuid), Arc<PgRow>), sqlx::Error> {
    let workspace = row.len().checked_sub(2).ok_or(sqlx::Error::ColumnIndexOutOfBounds { index: 0, len: row.len() })?;
    let key = (row.try_get(workspace)?, row.try_get(0)?);
    Ok((key, Arc::new(row)))
}
