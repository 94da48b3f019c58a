//! The run loop: pull a batch, apply it in one transaction, acknowledge once its
//! commit is flushed (see [`crate::daemon::durable_acks`]); beside it, the events the database
//! lost applied again ([`crate::daemon::ledger`]).
//!
//! Up to [`RunSettings::concurrent_batches`] batches are applied at once, each in its
//! own transaction on its own connection. One PostgreSQL session uses one core, and an
//! update of an indexed, searchable row costs it about a third of a millisecond: at
//! 2,000 events a second a single session was busy nearly all the time, so any stall
//! queued every later event behind it. Four by default, not two: at steady load a batch
//! spends much of its time waiting on its commit and round trips rather than on a core;
//! with two the publish→visible p99 was 53-105 ms, with four 39-44 ms, on the same host
//! (bench/history.md, 2026-11-24). Batches in flight together are as safe as as many projectors
//! sharing the consumer: writes are version-guarded and in key order (see
//! `apply`), and each batch is acknowledged only once its own commit is on disk.
//!
//! Transient failures (PostgreSQL or NATS away) are retried with backoff, without
//! acknowledging and without exiting; the messages stay ours meanwhile
//! ([`crate::daemon::in_hand`]), and a batch that stays uncommitted too long is reported
//! ([`crate::daemon::stuck`]). On shutdown the batches in hand are finished, committed and
//! acknowledged before the loop returns.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_nats::jetstream;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;
use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::apply::{apply_batch, CommitMode, Received};
use crate::connections;
use crate::daemon::durable_acks::DurableAcks;
use crate::daemon::in_hand::InHand;
use crate::daemon::ledger;
use crate::daemon::operations::Watched;
use crate::daemon::pending_lists;
use crate::daemon::pull::{pull, PullSize};
use crate::daemon::workspace_indexes::{self, OwnIndexSettings};
use crate::daemon::{staleness, stuck};
use crate::error::ProjectorError;
use crate::stream::{ensure_consumer, ensure_stream, StreamId};

/// How the loop pulls.
#[derive(Clone, Debug)]
pub struct RunSettings {
    /// Most messages applied in one transaction.
    pub batch_size: usize,
    /// How long an idle pull waits for the next message before asking again.
    pub pull_wait: Duration,
    /// Batches applied at once (at least 1).
    pub concurrent_batches: usize,
    /// When large workspaces get a search index of their own.
    pub own_indexes: OwnIndexSettings,
    /// Copies of `CHANGES` when the projector creates it.
    pub stream_replicas: usize,
}

impl Default for RunSettings {
    fn default() -> Self {
        Self {
            batch_size: 1_000,
            pull_wait: Duration::from_secs(1),
            concurrent_batches: 4,
            own_indexes: OwnIndexSettings::default(),
            stream_replicas: crate::stream::DEFAULT_STREAM_REPLICAS,
        }
    }
}

const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// How long each of the last steps of a stop may wait for NATS: a projector told to stop
/// while NATS is unreachable stops within seconds, its unacknowledged messages redelivered.
const LET_GO_WITHIN: Duration = Duration::from_secs(3);

/// The projector's pool for the default settings; see [`pool_for`].
pub fn pool(database_url: &str) -> Result<PgPool, sqlx::Error> {
    pool_for(database_url, RunSettings::default().concurrent_batches)
}

/// The projector's pool, connecting on first use: a connection per batch in flight,
/// one for the flush barriers, one for the search indexes' merges and one for readiness
/// probes (large workspaces' index builds open a session of their own); the name tells
/// operators its sessions apart in `pg_stat_activity`.
pub fn pool_for(database_url: &str, concurrent_batches: usize) -> Result<PgPool, sqlx::Error> {
    let options: PgConnectOptions = database_url.parse()?;
    let connections = u32::try_from(concurrent_batches.max(1)).unwrap_or(u32::MAX).saturating_add(3);
    Ok(PgPoolOptions::new()
        .max_connections(connections)
        .acquire_timeout(Duration::from_secs(5))
        .connect_lazy_with(options.application_name("lectern-projector")))
}

/// Consumes until `shutdown` is cancelled.
pub async fn run(
    client: async_nats::Client,
    pool: PgPool,
    settings: RunSettings,
    shutdown: CancellationToken,
) -> Result<(), ProjectorError> {
    run_watched(client, pool, settings, Watched::default(), shutdown).await
}

/// [`run`], its batches in hand and how far it is behind the stream kept in `watched`,
/// which readiness and the metrics read.
pub async fn run_watched(
    client: async_nats::Client,
    pool: PgPool,
    settings: RunSettings,
    watched: Watched,
    shutdown: CancellationToken,
) -> Result<(), ProjectorError> {
    let Watched { batches, staleness } = watched;
    let jetstream = jetstream::new(client.clone());
    let mut backoff = Backoff::default();
    let (stream, consumer) = loop {
        let attempt = tokio::select! {
            attempt = async {
                let stream = ensure_stream(&jetstream, settings.stream_replicas).await?;
                let consumer = ensure_consumer(&stream).await?;
                Ok::<_, ProjectorError>((stream, consumer))
            } => attempt,
            () = shutdown.cancelled() => return stopped_before_consuming(),
        };
        match attempt {
            Ok(found) => break found,
            Err(error) => {
                tracing::warn!(%error, "cannot reach JetStream yet; retrying");
                if backoff.wait_or_stop(&shutdown).await {
                    return stopped_before_consuming();
                }
            }
        }
    };
    // Which stream the batches pulled from now on are of; found again whenever pulls fail,
    // since the stream may have been deleted and created again (its consumer with it).
    let mut stream_id = StreamId::of(stream.cached_info());
    tracing::info!("projector consuming");
    let committed = Arc::new(Notify::new());
    let merger = tokio::spawn(pending_lists::merge_after_commits(pool.clone(), committed.clone(), shutdown.clone()));
    let indexer = tokio::spawn(workspace_indexes::maintain(pool.clone(), settings.own_indexes, shutdown.clone()));
    let reporter = tokio::spawn(batches.clone().report(jetstream.clone(), shutdown.clone()));
    let looker = tokio::spawn(staleness.watch(stream.clone(), consumer.clone(), shutdown.clone()));
    let ledger = tokio::spawn(ledger::keep(pool.clone(), stream, consumer.clone(), shutdown.clone()));
    let durable_acks = DurableAcks::default();
    // Not `shutdown`: the barriers go on until the last batch's messages are acknowledged.
    let acks_finished = CancellationToken::new();
    let acknowledger = tokio::spawn(durable_acks.clone().run(pool.clone(), acks_finished.clone()));
    backoff = Backoff::default();
    let mut catching_up = true;
    // A batch is pulled only once it can be applied, so that no message waits in our
    // hands, unacknowledged, for a transaction to become free.
    let room = Arc::new(Semaphore::new(settings.concurrent_batches.max(1)));
    let mut in_flight = JoinSet::new();
    while !shutdown.is_cancelled() {
        let permit = tokio::select! {
            permit = room.clone().acquire_owned() => permit,
            () = shutdown.cancelled() => break,
        };
        // The semaphore is never closed; an error would only mean there is no room.
        let Ok(permit) = permit else { break };
        while let Some(finished) = in_flight.try_join_next() {
            report_if_panicked(finished);
        }
        let batch = match pull(
            &consumer,
            &client,
            PullSize { batch_size: settings.batch_size, pull_wait: settings.pull_wait },
            catching_up,
            &shutdown,
        )
        .await
        {
            Ok(batch) => batch,
            Err(error) => {
                tracing::warn!(%error, "pulling from JetStream failed; retrying");
                if backoff.wait_or_stop(&shutdown).await {
                    break;
                }
                // A stream deleted and created again has lost its consumer: both are made
                // again, by name, so the handles every task holds find them.
                if let Ok(found) = ensure_stream(&jetstream, settings.stream_replicas).await {
                    stream_id = StreamId::of(found.cached_info());
                    if let Err(error) = ensure_consumer(&found).await {
                        tracing::warn!(%error, "making the consumer again failed; retrying");
                    }
                }
                continue;
            }
        };
        backoff = Backoff::default();
        catching_up = !batch.is_empty();
        if batch.is_empty() {
            crate::metrics::record_lag(0);
            continue;
        }
        let batch = InHand::new(batch);
        let (pool, shutdown, committed, durable_acks, batches) =
            (pool.clone(), shutdown.clone(), committed.clone(), durable_acks.clone(), batches.clone());
        in_flight.spawn(async move {
            if apply_until_committed(&pool, stream_id, batch, &durable_acks, &batches, &shutdown).await {
                committed.notify_one();
            }
            drop(permit);
        });
    }
    while let Some(finished) = in_flight.join_next().await {
        report_if_panicked(finished);
    }
    merger.abort();
    indexer.abort();
    ledger.abort();
    looker.abort();
    // Each of the last steps talks to NATS, which may be gone: each is given a bound, past
    // which what it would have sent is left to JetStream's redelivery.
    // Ends by itself with `shutdown`, withdrawing any report it made.
    if tokio::time::timeout(LET_GO_WITHIN, reporter).await.is_err() {
        tracing::warn!("could not withdraw the stuck-batch report in time (NATS unreachable?); it expires by itself");
    }
    acks_finished.cancel();
    match tokio::time::timeout(LET_GO_WITHIN, acknowledger).await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => {
            tracing::error!(%error, "the flush barriers ended early; unacknowledged messages will be redelivered");
        }
        Err(_) => {
            tracing::warn!("the last acknowledgements were not sent in time (NATS unreachable?); redelivered later")
        }
    }
    // Acks are buffered by the client; without this the last batch's acks could be
    // lost at exit and its messages redelivered after the ack wait.
    match tokio::time::timeout(LET_GO_WITHIN, client.flush()).await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => {
            tracing::warn!(%error, "could not flush the last acknowledgements; those messages will be redelivered and ignored");
        }
        Err(_) => {
            tracing::warn!("could not flush the last acknowledgements in time (NATS unreachable?); redelivered later")
        }
    }
    tracing::info!("projector stopped");
    Ok(())
}

/// A stop that came before the stream and the consumer were there: nothing was pulled, so
/// nothing is in hand; the log still says the projector stopped, as after any stop.
fn stopped_before_consuming() -> Result<(), ProjectorError> {
    tracing::info!("projector stopped before consuming");
    Ok(())
}

/// A batch task that panicked left its messages unacknowledged: JetStream redelivers
/// them after the ack wait, and the version guard makes that harmless.
fn report_if_panicked(finished: Result<(), tokio::task::JoinError>) {
    if let Err(error) = finished {
        tracing::error!(%error, "a batch task ended without finishing; its messages will be redelivered");
    }
}

/// Applies `batch` until it commits, then has every message of it acknowledged once the
/// commit is flushed. While the database is away the batch is retried with backoff and
/// nothing is acknowledged; on shutdown during such an outage the batch is left
/// unacknowledged for redelivery. Returns whether it committed.
async fn apply_until_committed(
    pool: &PgPool,
    stream: StreamId,
    batch: InHand,
    durable_acks: &DurableAcks,
    batches: &stuck::Batches,
    shutdown: &CancellationToken,
) -> bool {
    let started = std::time::Instant::now();
    let messages = batch.messages();
    if let Some(pending) = messages.last().and_then(|message| message.info().ok()).map(|info| info.pending) {
        crate::metrics::record_lag(pending);
    }
    let received: Vec<Received> = messages
        .iter()
        .map(|message| Received {
            subject: message.subject.to_string(),
            stream_sequence: message.info().map(|info| info.stream_sequence).unwrap_or_default(),
            payload: message.payload.to_vec(),
        })
        .collect();
    let published: Vec<SystemTime> = messages
        .iter()
        .filter_map(|message| message.info().ok().map(|info| staleness::system_time(info.published)))
        .collect();
    let tracked = batches.track(received.first().map_or(0, |message| message.stream_sequence), received.len());
    let mut backoff = Backoff::default();
    let committed_witness = loop {
        // Taken before the transaction begins, so the barrier's connection was there
        // before the commit (see `durable_acks`).
        let witness = durable_acks.witness();
        let mode = if witness.is_some() { CommitMode::BeforeFlush } else { CommitMode::Flushed };
        match apply_batch(pool, stream, &received, mode).await {
            Ok(applied) => {
                let committed_at = SystemTime::now();
                connections::postgres_answered();
                crate::metrics::record_batch(received.len(), started.elapsed());
                crate::metrics::record_publish_to_commit(
                    published.iter().map(|at| committed_at.duration_since(*at).unwrap_or_default()),
                );
                tracing::debug!(events = applied.events, dead_letters = applied.dead_letters, "batch committed");
                if applied.dead_letters > 0 {
                    tracing::warn!(count = applied.dead_letters, "messages broke the contract; stored as dead letters");
                }
                break witness;
            }
            Err(error) => {
                tracing::warn!(%error, messages = received.len(), "applying a batch failed; retrying, nothing acknowledged");
                crate::metrics::record_retry();
                connections::postgres_failed(pool, &error).await;
                tracked.failed(&error);
                if backoff.wait_or_stop(shutdown).await {
                    return false;
                }
            }
        }
    };
    drop(tracked);
    match committed_witness {
        Some(witness) => durable_acks.acknowledge_after_flush(witness, batch),
        None => batch.acknowledge().await,
    }
    true
}

/// Exponential backoff from 100 ms to 5 s.
struct Backoff(Duration);

impl Default for Backoff {
    fn default() -> Self {
        Self(Duration::from_millis(100))
    }
}

impl Backoff {
    /// Waits, or returns `true` at once if shutdown was requested.
    async fn wait_or_stop(&mut self, shutdown: &CancellationToken) -> bool {
        let wait = self.0;
        self.0 = (self.0 * 2).min(MAX_BACKOFF);
        tokio::select! {
            () = tokio::time::sleep(wait) => false,
            () = shutdown.cancelled() => true,
        }
    }
}
