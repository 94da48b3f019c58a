//! Acknowledging batches once their commits are on disk, without each batch waiting
//! for a WAL flush of its own.
//!
//! A batch commits with `synchronous_commit = off`: its rows are visible the moment the
//! commit returns, not after the commit's WAL flush (5 to 15 ms on this project's
//! hosts, and taken one batch at a time behind PostgreSQL's notify lock:
//! bench/history.md, 2026-11-25). Such a commit can still be lost in a crash, so its messages are not
//! acknowledged then. They are acknowledged after a *flush barrier*: a transaction
//! committed with `synchronous_commit = on` on one long-lived connection. PostgreSQL
//! flushes its WAL in order, so once the barrier's commit is flushed, so is every
//! commit that returned before the barrier was sent, and one barrier covers every batch
//! that committed meanwhile.
//!
//! The barrier must run on the server the batches committed to, with no crash in
//! between. A crash or restart ends every session, so the barrier's connection is the
//! witness: a batch notes the connection's generation before it begins, and if that
//! connection is gone by the time of the barrier, the batch's messages are handed back
//! for redelivery (`nak`) instead, which the version guard makes harmless. While there
//! is no barrier connection (PostgreSQL away), batches commit synchronously and are
//! acknowledged after their own commit, as every batch once was.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use sqlx::pool::PoolConnection;
use sqlx::{Executor, PgConnection, PgPool, Postgres};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::daemon::in_hand::InHand;

/// Longest a barrier (or getting its connection) may take before the connection is
/// given up for a new one. A flush takes milliseconds; a hung server must not keep
/// acknowledgements, or shutdown, waiting for ever.
const BARRIER_TIMEOUT: Duration = Duration::from_secs(10);

/// How long to wait before trying again for a barrier connection.
const RECONNECT_AFTER: Duration = Duration::from_millis(500);

/// Commits synchronously whatever went before it, on whatever `synchronous_commit` the
/// server is configured with. The transaction must write WAL before its commit record:
/// PostgreSQL flushes at commit only for a transaction that did, and one that only took an
/// id (`select pg_current_xact_id()`, as this barrier once did) commits without flushing
/// anything, so its batches were acknowledged with their commits still in memory, lost by
/// a crash. `read_model_flush` writes this process's row of `read_model_flushes` and sets
/// the commit synchronous (`migrations/…_feed_positions_across_histories.sql`).
fn barrier_sql(process: &str) -> String {
    format!("begin; select read_model_flush('{process}'); commit")
}

/// A name of this process's own for its barrier's row: letters and digits only, so it is
/// written into the statement as it is.
fn process_name() -> String {
    format!("lectern-projector-{}", uuid::Uuid::new_v4().simple())
}

/// The connection that witnessed a batch's commit, by generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Witness(u64);

/// One committed batch waiting for a barrier.
struct Committed {
    witness: Witness,
    committed_at: Instant,
    messages: InHand,
}

/// The queue of committed batches and the barrier connection's generation, shared by
/// the batch tasks and [`DurableAcks::run`].
#[derive(Clone, Default)]
pub struct DurableAcks {
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    /// The barrier connection's generation; 0 while there is none.
    generation: AtomicU64,
    waiting: Mutex<Vec<Committed>>,
    queued: Notify,
}

impl DurableAcks {
    /// The barrier connection as it is now, or `None` when there is none, in which case
    /// the batch must commit synchronously and acknowledge itself. Take it before the
    /// batch's transaction begins.
    pub fn witness(&self) -> Option<Witness> {
        match self.shared.generation.load(Ordering::Acquire) {
            0 => None,
            generation => Some(Witness(generation)),
        }
    }

    /// Hands over the messages of a batch that committed asynchronously after
    /// [`DurableAcks::witness`] returned `witness`; they are acknowledged after the next
    /// barrier on that connection, or handed back for redelivery.
    pub fn acknowledge_after_flush(&self, witness: Witness, messages: InHand) {
        let committed = Committed { witness, committed_at: Instant::now(), messages };
        self.shared.waiting.lock().unwrap_or_else(PoisonError::into_inner).push(committed);
        self.shared.queued.notify_one();
    }

    fn take_waiting(&self) -> Vec<Committed> {
        std::mem::take(&mut *self.shared.waiting.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Runs barriers for handed-over batches until `finish` is cancelled and nothing is
    /// waiting any more. Cancel `finish` only once no batch can hand anything over.
    pub async fn run(self, pool: PgPool, finish: CancellationToken) {
        let mut connection: Option<PoolConnection<Postgres>> = None;
        let mut generation = 0;
        let mut history = SeenHistory::default();
        loop {
            if connection.is_none() {
                match tokio::time::timeout(BARRIER_TIMEOUT, open_barrier(&pool, &mut history)).await {
                    Ok(Ok(opened)) => {
                        generation += 1;
                        connection = Some(opened);
                        self.shared.generation.store(generation, Ordering::Release);
                    }
                    Ok(Err(_)) | Err(_) => {
                        // The batches report the database being away; they commit
                        // synchronously until a barrier connection is back.
                        hand_back(self.take_waiting()).await;
                        if finish.is_cancelled() {
                            return;
                        }
                        tokio::select! {
                            () = tokio::time::sleep(RECONNECT_AFTER) => {}
                            () = finish.cancelled() => {}
                        }
                        continue;
                    }
                }
            }
            let committed = self.take_waiting();
            if committed.is_empty() {
                if finish.is_cancelled() {
                    return;
                }
                tokio::select! {
                    () = self.shared.queued.notified() => {}
                    () = finish.cancelled() => {}
                }
                continue;
            }
            let Some(open) = connection.as_mut() else { continue };
            let barrier = match tokio::time::timeout(BARRIER_TIMEOUT, flush_barrier(open)).await {
                Ok(flushed) => flushed.map_err(|error| error.to_string()),
                Err(_) => Err(format!("no answer within {BARRIER_TIMEOUT:?}")),
            };
            match barrier {
                Ok(()) => {
                    let witnessed = Witness(generation);
                    let (flushed, unwitnessed) = committed.into_iter().partition(|batch| batch.witness == witnessed);
                    acknowledge(flushed).await;
                    hand_back(unwitnessed).await;
                }
                Err(problem) => {
                    tracing::warn!(%problem, "the flush barrier failed; its batches' messages will be redelivered");
                    self.lose_connection(&mut connection);
                    hand_back(committed).await;
                }
            }
        }
    }

    /// From here on batches commit synchronously until a new connection is open; the
    /// old one is closed rather than returned to the pool, so it witnesses nothing more.
    fn lose_connection(&self, connection: &mut Option<PoolConnection<Postgres>>) {
        self.shared.generation.store(0, Ordering::Release);
        if let Some(lost) = connection.take() {
            drop(lost.detach());
        }
    }
}

/// The history of the database the last barrier connection reached, once one reached a
/// primary.
#[derive(Default)]
struct SeenHistory(Option<i64>);

/// A barrier connection, and a look at the history of the database it reaches: behind a
/// stable address the database can change between two connections (a failover, the old
/// primary back, a restore). Batches the old connection witnessed are handed back by their
/// generation whatever it finds; what it adds is telling operators. What the database lost
/// meanwhile comes back through the ledger. A standby (no history) says nothing.
async fn open_barrier(pool: &PgPool, seen: &mut SeenHistory) -> Result<PoolConnection<Postgres>, sqlx::Error> {
    let mut connection = pool.acquire().await?;
    let history: Option<i64> =
        sqlx::query_scalar("select read_model_server_history()").fetch_one(&mut *connection).await?;
    let Some(history) = history else { return Ok(connection) };
    if seen.0.replace(history).is_some_and(|before| before != history) {
        crate::metrics::record_history_change();
        tracing::warn!(
            to = history,
            "the database is another history than before under the same address (a failover, the old primary \
             back, a restore); batches waiting for a flush are handed back, and the ledger applies again what \
             this one lacks"
        );
    }
    Ok(connection)
}

/// Commits synchronously on `connection`, so every commit that returned before this call
/// is on disk when it returns. A query without arguments goes as a simple query, so its
/// statements run in one round trip. (`sqlx::raw_sql` would do the same, but its future
/// trips the compiler's higher-ranked lifetime check inside a spawned task.)
pub async fn flush_barrier(connection: &mut PgConnection) -> Result<(), sqlx::Error> {
    static BARRIER: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let barrier = BARRIER.get_or_init(|| barrier_sql(&process_name()));
    connection.execute(barrier.as_str()).await.map(drop)
}

async fn acknowledge(flushed: Vec<Committed>) {
    for batch in flushed {
        crate::metrics::record_flush_wait(batch.committed_at.elapsed());
        batch.messages.acknowledge().await;
    }
}

/// Messages whose commit no barrier can vouch for: redelivered at once rather than
/// after the ack wait.
async fn hand_back(unwitnessed: Vec<Committed>) {
    for batch in unwitnessed {
        crate::metrics::record_handed_back(batch.messages.messages().len());
        batch.messages.hand_back().await;
    }
}
