//! One batch of messages into the read model, in one transaction.
//!
//! Events are first reduced to the highest version per record (a batch may hold
//! several versions of one record), then written with one set-based upsert per table,
//! guarded by `version < excluded.version`: duplicates, redeliveries, out-of-order
//! arrival and racing projectors all converge on the highest version. Rows are written
//! in key order so two projectors never deadlock on each other.

use std::collections::BTreeMap;

use lectern_read_model::{contacts, items, AppliedSequences, Commit, Key, Status};
use lectern_schema::events::{ChangeEvent, ChangeKind, EntityKind, RecordState};
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use crate::dead_letters;
use crate::error::is_transient_database_error;
pub use crate::message::Received;
use crate::message::Refused;
use crate::stream::StreamId;

/// What a batch did, for logs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Applied {
    pub events: usize,
    pub dead_letters: usize,
}

/// Whether a batch's commit waits for its WAL flush.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommitMode {
    /// The commit returns once flushed: the batch may be acknowledged straight after.
    Flushed,
    /// The commit returns before its flush (`synchronous_commit = off` for that
    /// transaction alone), so its rows are visible sooner; acknowledge only after a flush
    /// barrier ([`crate::daemon::durable_acks`]). A batch of one table's events with nothing
    /// refused, the usual kind, is then a single statement and one round trip.
    BeforeFlush,
    /// Flushed, by the ledger applying again what a failover or a restore made the database
    /// forget: allowed in a history that has not caught up yet (`lectern.applying_again`),
    /// where every other write waits until it has.
    AppliedAgain,
}

impl CommitMode {
    /// How a batch's transaction begins: its commit mode set explicitly, whatever the
    /// server's `synchronous_commit` is (a `Flushed` batch is acknowledged straight after
    /// its commit, so that commit must wait for the flush even on a server configured not
    /// to), and declared a writer of the read model before it writes anything, so that
    /// what it writes after a rolled-back savepoint still has its place in the changes feed
    /// (`read_model_begin_write`). One round trip, like a plain `begin`.
    fn begin(self) -> &'static str {
        match self {
            Self::Flushed => "begin; set local synchronous_commit = on; select read_model_begin_write()",
            Self::BeforeFlush => "begin; set local synchronous_commit = off; select read_model_begin_write()",
            Self::AppliedAgain => {
                "begin; set local synchronous_commit = on; select read_model_begin_write(); \
                 select set_config('lectern.applying_again', 'on', true)"
            }
        }
    }

    /// The single statement's own commit: [`Commit::OnItsOwnBeforeFlush`] before the
    /// flush, or flushed like `Flushed`.
    fn on_its_own(self) -> Commit {
        match self {
            Self::Flushed | Self::AppliedAgain => Commit::OnItsOwnFlushed,
            Self::BeforeFlush => Commit::OnItsOwnBeforeFlush,
        }
    }
}

type Decoded<'a> = (&'a Received, ChangeEvent);

/// Decodes, applies and dead-letters `batch`, messages of `stream`, in one transaction,
/// committed as `mode` says, and records every message of it as applied (see
/// [`crate::daemon::ledger`]) in the same transaction. An `Err` means nothing was
/// committed, and the whole batch may be retried.
pub async fn apply_batch(
    pool: &PgPool,
    stream: StreamId,
    batch: &[Received],
    mode: CommitMode,
) -> Result<Applied, sqlx::Error> {
    let sequences: Vec<i64> =
        batch.iter().map(|message| i64::try_from(message.stream_sequence).unwrap_or(i64::MAX)).collect();
    let sequences = AppliedSequences { stream: stream.nanos(), sequences: &sequences };
    let mut events: Vec<Decoded<'_>> = Vec::with_capacity(batch.len());
    let mut refused: Vec<Refused<'_>> = Vec::new();
    for message in batch {
        match ChangeEvent::decode_from(&message.subject, &message.payload) {
            Ok(event) => events.push((message, event)),
            Err(error) => refused.push((message, error.to_string())),
        }
    }
    // A single statement cannot say it applies again before its statement triggers run.
    let written = if refused.is_empty() && mode != CommitMode::AppliedAgain {
        write_in_one_statement(pool, &events, sequences, mode).await
    } else {
        write_in_a_transaction(pool, &events, &refused, sequences, mode).await
    };
    match written {
        Ok(()) => {
            crate::metrics::record_committed(
                events.iter().map(|(_, event)| event),
                refused.iter().map(|(message, _)| message.subject.as_str()),
            );
            Ok(Applied { events: events.len(), dead_letters: refused.len() })
        }
        Err(error) if is_transient_database_error(&error) => Err(error),
        Err(error) => {
            // The database refused something the contract allowed (a limit such as an
            // enormous field, or a bug). Nothing was committed: find the culprits one by
            // one rather than block.
            tracing::warn!(%error, "batch refused by the database; applying its events one by one");
            apply_one_by_one(pool, events, refused, sequences, mode).await
        }
    }
}

/// The usual batch, events of one table and nothing refused, as a single statement that
/// is its own transaction, recording its sequences as applied. A `begin` and a `commit`
/// around it were two more round trips per batch, each a chance for a busy host to
/// schedule the projector or PostgreSQL out (bench/history.md, 2026-11-25). A batch of
/// contacts and items both goes through [`write_in_a_transaction`], so that it stays
/// atomic.
async fn write_in_one_statement(
    pool: &PgPool,
    events: &[Decoded<'_>],
    sequences: AppliedSequences<'_>,
    mode: CommitMode,
) -> Result<(), sqlx::Error> {
    let (contacts, items) = newest_by_record(events.iter().map(|(_, event)| event));
    let applied = Some(sequences);
    match (contacts.is_empty(), items.is_empty()) {
        (false, true) => {
            let connection = &mut *pool.acquire().await?;
            upsert_contacts(connection, &contacts, mode.on_its_own(), contacts::TABLE, applied).await
        }
        (true, false) => {
            let connection = &mut *pool.acquire().await?;
            upsert_items(connection, &items, mode.on_its_own(), items::TABLE, applied).await
        }
        (false, false) | (true, true) => write_in_a_transaction(pool, events, &[], sequences, mode).await,
    }
}

/// Every write of a batch in one transaction, its sequences recorded as applied,
/// committed as `mode` says; nothing is committed if it fails.
async fn write_in_a_transaction(
    pool: &PgPool,
    events: &[Decoded<'_>],
    refused: &[Refused<'_>],
    sequences: AppliedSequences<'_>,
    mode: CommitMode,
) -> Result<(), sqlx::Error> {
    let mut transaction = pool.begin_with(mode.begin()).await?;
    write_events(&mut transaction, events.iter().map(|(_, event)| event)).await?;
    dead_letters::store(&mut transaction, refused).await?;
    record_applied(&mut transaction, sequences).await?;
    transaction.commit().await
}

/// Records `applied` as applied, inside the caller's transaction.
pub async fn record_applied(connection: &mut PgConnection, applied: AppliedSequences<'_>) -> Result<(), sqlx::Error> {
    if applied.sequences.is_empty() {
        return Ok(());
    }
    sqlx::query(lectern_read_model::RECORD_APPLIED_SQL)
        .bind(applied.sequences)
        .bind(applied.stream)
        .execute(connection)
        .await
        .map(drop)
}

/// A batch the database refused: each event under a savepoint of its own, the refused
/// ones dead-lettered, and the dead letters stored one by one
/// ([`dead_letters::store_one_by_one`]), so that whatever the database refuses ends as a
/// dead letter instead of failing the batch again.
async fn apply_one_by_one<'a>(
    pool: &PgPool,
    events: Vec<Decoded<'a>>,
    mut refused: Vec<Refused<'a>>,
    sequences: AppliedSequences<'_>,
    mode: CommitMode,
) -> Result<Applied, sqlx::Error> {
    let mut transaction = pool.begin_with(mode.begin()).await?;
    let mut applied = Vec::with_capacity(events.len());
    for (message, event) in events {
        sqlx::query("savepoint one_event").execute(&mut *transaction).await?;
        match write_events(&mut transaction, std::iter::once(&event)).await {
            Ok(()) => applied.push(event),
            Err(error) if is_transient_database_error(&error) => return Err(error),
            Err(error) => {
                sqlx::query("rollback to savepoint one_event").execute(&mut *transaction).await?;
                tracing::warn!(%error, event_id = %event.event_id, "event refused by the database; dead-lettered");
                refused.push((message, format!("refused by the database: {error}")));
            }
        }
    }
    dead_letters::store_one_by_one(&mut transaction, &refused).await?;
    record_applied(&mut transaction, sequences).await?;
    transaction.commit().await?;
    crate::metrics::record_committed(applied.iter(), refused.iter().map(|(message, _)| message.subject.as_str()));
    Ok(Applied { events: applied.len(), dead_letters: refused.len() })
}

/// Which tables events are written to: the live read model's, or a model of the same
/// columns built beside it (by `verify` and `rebuild`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tables<'a> {
    pub contacts: &'a str,
    pub items: &'a str,
}

impl Tables<'static> {
    /// The read model the API serves.
    pub const LIVE: Self = Self { contacts: contacts::TABLE, items: items::TABLE };
}

/// Writes the newest event of each record, inside the caller's transaction.
pub async fn write_events<'e>(
    connection: &mut PgConnection,
    events: impl Iterator<Item = &'e ChangeEvent>,
) -> Result<(), sqlx::Error> {
    write_events_into(connection, events, Tables::LIVE).await
}

/// Writes the newest event of each record into `tables`, on `connection` (in the
/// caller's transaction, if it has one), guarded by version as the live writes are.
pub async fn write_events_into<'e>(
    connection: &mut PgConnection,
    events: impl Iterator<Item = &'e ChangeEvent>,
    tables: Tables<'_>,
) -> Result<(), sqlx::Error> {
    let (contacts, items) = newest_by_record(events);
    if !contacts.is_empty() {
        upsert_contacts(connection, &contacts, Commit::WithTheTransaction, tables.contacts, None).await?;
    }
    if !items.is_empty() {
        upsert_items(connection, &items, Commit::WithTheTransaction, tables.items, None).await?;
    }
    Ok(())
}

/// The newest event of each record, contacts and items apart, each in key order; older
/// ones in the batch could not win.
fn newest_by_record<'e>(events: impl Iterator<Item = &'e ChangeEvent>) -> (Vec<&'e ChangeEvent>, Vec<&'e ChangeEvent>) {
    let mut newest: BTreeMap<(EntityKind, Uuid, Uuid), &ChangeEvent> = BTreeMap::new();
    for event in events {
        let key = (event.event_type.entity, event.workspace_id, event.entity_id);
        let entry = newest.entry(key).or_insert(event);
        if event.version > entry.version {
            *entry = event;
        }
    }
    newest.into_values().partition(|event| event.event_type.entity == EntityKind::Contact)
}

/// Whether a stored record is served, after `change`.
fn status(change: ChangeKind) -> Status {
    match change {
        ChangeKind::Created | ChangeKind::Updated | ChangeKind::Restored => Status::Active,
        ChangeKind::Archived => Status::Archived,
        ChangeKind::Deleted => Status::Deleted,
    }
}

fn key(event: &ChangeEvent) -> Key {
    Key {
        workspace_id: event.workspace_id,
        id: event.entity_id,
        version: event.version,
        status: status(event.event_type.change),
    }
}

async fn upsert_contacts(
    connection: &mut PgConnection,
    events: &[&ChangeEvent],
    commit: Commit,
    table: &str,
    applied: Option<AppliedSequences<'_>>,
) -> Result<(), sqlx::Error> {
    let mut batch = contacts::Batch::default();
    for event in events {
        let data = match &event.state {
            Some(RecordState::Contact(data)) => Some(data),
            _ => None,
        };
        batch.push(key(event), data);
    }
    batch.write_recording(connection, table, commit, applied).await
}

async fn upsert_items(
    connection: &mut PgConnection,
    events: &[&ChangeEvent],
    commit: Commit,
    table: &str,
    applied: Option<AppliedSequences<'_>>,
) -> Result<(), sqlx::Error> {
    let mut batch = items::Batch::default();
    for event in events {
        let data = match &event.state {
            Some(RecordState::Item(data)) => Some(data),
            _ => None,
        };
        batch.push(key(event), data);
    }
    batch.write_recording(connection, table, commit, applied).await
}
