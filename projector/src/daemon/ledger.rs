//! What the read model holds of the stream, kept by PostgreSQL, and the events it lost
//! applied again.
//!
//! Every batch records its messages' stream sequences in `read_model_applied` in the same
//! transaction as its rows ([`crate::apply`]), so what the table says is exactly what the
//! database in hand holds, whatever happened to it. JetStream's acknowledgements say what
//! the projectors applied on the server they wrote to. The two part when PostgreSQL forgets
//! commits: a failover to a standby that had not received them, a restore to an earlier
//! point, a crash of a server running without durable commits. Then sequences are
//! acknowledged that the database does not hold, JetStream will never deliver them again,
//! and [`reconcile`] applies them again from the stream. It runs when the projector starts
//! and every [`RECONCILE_EVERY`] after; the only step an operator takes after a failover is
//! pointing `DATABASE_URL` at the new primary.
//!
//! Acknowledgements are read before the ledger: a message is acknowledged only after its
//! batch committed, so every sequence acknowledged by then is in the ledger unless the
//! database lost it.
//!
//! Sequences are recorded with the stream they are of ([`StreamId`]): a stream deleted and
//! created again numbers its messages from 1 again, and the old stream's sequences must not
//! pass for the new one's. What cannot be applied again, because the stream no longer holds
//! it or the stream it belonged to is gone, is recorded as lost ([`crate::lost_events`]),
//! never as held.

use std::collections::BTreeSet;
use std::time::Duration;

use async_nats::jetstream::consumer::PullConsumer;
use async_nats::jetstream::stream::{RawMessageErrorKind, Stream};
use sqlx::postgres::PgRow;
use sqlx::{Connection, PgConnection, PgPool, Row};
use tokio_util::sync::CancellationToken;

use crate::apply::{apply_batch, CommitMode, Received};
use crate::error::ProjectorError;
use crate::history::{self, read_through, subjects};
use crate::lost_events::{self, Why};
use crate::message::as_sequence;
pub use crate::message::Span;
use crate::stream::StreamId;

/// How often the ledger is compared with the acknowledgements.
pub const RECONCILE_EVERY: Duration = Duration::from_secs(5);
/// Ranges of at most this many missing sequences are fetched one message at a time;
/// longer ones are read through an ordered consumer.
const FETCH_ONE_BY_ONE: u64 = 32;
/// The advisory lock a projector holds while it folds the ledger and applies what the
/// database lost, so that projectors sharing the consumer do it one at a time.
const LEDGER_LOCK: i64 = 0x6c65_6374_6c65_6467;

/// What one reconciliation found and did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reconciled {
    /// The consumer's acknowledgement floor it compared with.
    pub acknowledged_through: u64,
    /// Sequences acknowledged that the database did not hold.
    pub missing: Vec<Span>,
    /// Messages applied again (missing sequences the stream still had).
    pub applied_again: u64,
    /// Missing sequences the stream no longer had: recorded as lost.
    pub lost: Vec<Span>,
}

/// Starts the ledger of a database that held a read model before the ledger existed (the
/// migration that added it left `trusted_through` null): it takes the acknowledgements at
/// their word once, as the projector always had. A database that was empty then holds
/// nothing it was not told about, and takes nothing at its word.
pub async fn start(pool: &PgPool, stream: StreamId, acknowledged_through: u64) -> Result<(), ProjectorError> {
    let mut transaction = pool.begin().await?;
    let took = sqlx::query(
        "update read_model_ledger set trusted_through = $1, started_at = now() where trusted_through is null",
    )
    .bind(as_sequence(acknowledged_through))
    .execute(&mut *transaction)
    .await?
    .rows_affected();
    if took == 1 && acknowledged_through > 0 {
        record_span(&mut transaction, stream, Span { first: 1, last: acknowledged_through }).await?;
        tracing::info!(
            acknowledged_through,
            "the read model's ledger starts: events 1 to this sequence taken as applied"
        );
    }
    transaction.commit().await?;
    Ok(())
}

/// The ranges of sequences 1 to `$1` of the stream `$2` that the ledger neither holds nor
/// has recorded as lost, one row each. Rows recorded before streams were named (0) count as
/// the stream's, as a projector adopts them when it next compares.
fn not_held_through_1() -> String {
    format!(
        "unnest(int8multirange(int8range(1, $1 + 1)) \
         - coalesce((select range_agg(r) from read_model_applied, unnest(sequences) as r where stream in ($2, 0)), '{{}}') \
         - coalesce({lost}, '{{}}'))",
        lost = lost_events::LOST_OF_STREAM_2
    )
}

/// Which stream the ledger follows, and the acknowledgement floor it last saw of it.
struct Followed {
    stream: Option<StreamId>,
    acknowledged_through: u64,
}

/// Makes `stream` the stream the ledger follows, inside the caller's transaction. Rows
/// recorded before streams were named (0) are the followed stream's. When the ledger
/// followed another stream, that one was deleted and created again: whatever of it was
/// acknowledged and not held can no longer be applied, and is recorded as lost.
async fn follow(connection: &mut PgConnection, stream: StreamId) -> Result<Option<Vec<Span>>, sqlx::Error> {
    let followed: Followed = sqlx::query("select stream, acknowledged_through from read_model_ledger for update")
        .fetch_optional(&mut *connection)
        .await?
        .map(|row| {
            Ok::<_, sqlx::Error>(Followed {
                stream: row.try_get::<Option<i64>, _>(0)?.map(StreamId::from_nanos),
                acknowledged_through: row.try_get::<i64, _>(1)?.unsigned_abs(),
            })
        })
        .transpose()?
        .unwrap_or(Followed { stream: None, acknowledged_through: 0 });
    let mut recreated = None;
    if let Some(old) = followed.stream.filter(|old| *old != stream) {
        sqlx::query("update read_model_applied set stream = $1 where stream = 0")
            .bind(old.nanos())
            .execute(&mut *connection)
            .await?;
        // What the ledger last saw acknowledged, or the highest it holds when that is later:
        // the floor is noted once a turn, and the old stream's last seconds may be past it.
        let highest_held: Option<i64> = sqlx::query_scalar(
            "select max(upper(r) - 1) from read_model_applied, unnest(sequences) as r where stream = $1",
        )
        .bind(old.nanos())
        .fetch_one(&mut *connection)
        .await?;
        let through = followed.acknowledged_through.max(highest_held.unwrap_or(0).unsigned_abs());
        let lost = not_held(connection, old, through).await?;
        lost_events::record(connection, old, &lost, Why::StreamRecreated).await?;
        sqlx::query("delete from read_model_applied where stream = $1")
            .bind(old.nanos())
            .execute(&mut *connection)
            .await?;
        tracing::warn!(
            old = %old,
            new = %stream,
            "the stream was deleted and created again: the ledger follows the new one from its first sequence"
        );
        recreated = Some(lost);
    }
    sqlx::query("update read_model_ledger set stream = $1, acknowledged_through = case when stream = $1 then acknowledged_through else 0 end")
        .bind(stream.nanos())
        .execute(&mut *connection)
        .await?;
    sqlx::query("update read_model_applied set stream = $1 where stream = 0")
        .bind(stream.nanos())
        .execute(&mut *connection)
        .await?;
    Ok(recreated)
}

/// The sequences of `stream` up to `acknowledged_through` neither held nor recorded lost.
async fn not_held(
    connection: &mut PgConnection,
    stream: StreamId,
    acknowledged_through: u64,
) -> Result<Vec<Span>, sqlx::Error> {
    sqlx::query(&format!("select lower(r), upper(r) - 1 from {} as r", not_held_through_1()))
        .bind(as_sequence(acknowledged_through))
        .bind(stream.nanos())
        .fetch_all(&mut *connection)
        .await?
        .iter()
        .map(span)
        .collect()
}

/// Folds the ledger's rows of `stream` into one, notes `acknowledged_through` as the floor
/// seen, and returns the sequences up to `through` (the floor, or past it) neither held nor
/// lost, inside the caller's transaction.
async fn fold_and_find_missing(
    connection: &mut PgConnection,
    stream: StreamId,
    acknowledged_through: u64,
    through: u64,
) -> Result<Vec<Span>, sqlx::Error> {
    sqlx::query(
        "with folded as (delete from read_model_applied where stream = $1 returning sequences) \
         insert into read_model_applied (stream, sequences) \
         select $1, range_agg(r) from folded, unnest(folded.sequences) as r having count(*) > 0",
    )
    .bind(stream.nanos())
    .execute(&mut *connection)
    .await?;
    sqlx::query("update read_model_ledger set acknowledged_through = greatest(acknowledged_through, $1)")
        .bind(as_sequence(acknowledged_through))
        .execute(&mut *connection)
        .await?;
    not_held(connection, stream, through).await
}

/// How many sequences of `stream` up to `acknowledged_through` the database does not hold
/// and are not recorded as lost: events JetStream saw acknowledged that a restore or a
/// failover made the database forget, which a running projector applies again. None before
/// a projector first started the ledger.
pub async fn not_held_count(
    pool: &PgPool,
    stream: StreamId,
    acknowledged_through: u64,
) -> Result<Option<u64>, sqlx::Error> {
    let missing: Option<i64> = sqlx::query_scalar(&format!(
        "select (select coalesce(sum(upper(r) - lower(r)), 0) from {} as r)::bigint \
         from read_model_ledger where trusted_through is not null",
        not_held_through_1()
    ))
    .bind(as_sequence(acknowledged_through))
    .bind(stream.nanos())
    .fetch_optional(pool)
    .await?;
    Ok(missing.map(|missing| u64::try_from(missing).unwrap_or(0)))
}

fn span(row: &PgRow) -> Result<Span, sqlx::Error> {
    let first: i64 = row.try_get(0)?;
    let last: i64 = row.try_get(1)?;
    Ok(Span { first: first.unsigned_abs(), last: last.unsigned_abs() })
}

/// Records `span` of `stream` as applied, on `connection` (inside its transaction, if one
/// is open).
async fn record_span(connection: &mut PgConnection, stream: StreamId, span: Span) -> Result<(), sqlx::Error> {
    sqlx::query(
        "insert into read_model_applied (stream, sequences) values ($3, int8multirange(int8range($1, $2, '[]')))",
    )
    .bind(as_sequence(span.first))
    .bind(as_sequence(span.last))
    .bind(stream.nanos())
    .execute(connection)
    .await
    .map(drop)
}

/// The consumer's acknowledgement floor (every message up to it is acknowledged) and the
/// last stream sequence it delivered (messages between the two may be acknowledged too).
async fn acknowledged_through(consumer: &PullConsumer) -> Result<(u64, u64), ProjectorError> {
    let info = consumer.get_info().await.map_err(ProjectorError::nats("reading the consumer's acknowledgements"))?;
    Ok((info.ack_floor.stream_sequence, info.delivered.stream_sequence))
}

/// The stream as it is now (deleted and created again, it is another).
async fn stream_now(stream: &Stream) -> Result<StreamId, ProjectorError> {
    let info = stream.get_info().await.map_err(ProjectorError::nats("reading the stream's info"))?;
    Ok(StreamId::of(&info))
}

/// Compares the ledger with the consumer's acknowledgements and applies again, from the
/// stream, every acknowledged event the database does not hold; what the stream no longer
/// holds is recorded as lost. Does nothing while another projector is doing it, or before
/// the ledger has started. `connection` is the ledger's own: it holds [`LEDGER_LOCK`] for
/// the turn (a session lock, so no transaction stays open while events are applied again);
/// the caller drops it after an error, and the lock with it.
pub async fn reconcile(
    connection: &mut PgConnection,
    pool: &PgPool,
    stream: &Stream,
    consumer: &PullConsumer,
) -> Result<Reconciled, ProjectorError> {
    // First the acknowledgements, then the ledger (see the module's documentation); and the
    // stream on both sides of them: a floor read across a replacement of the stream is the old
    // one's, and taken for the new one's it would make lost events of the new one's first.
    let before = stream_now(stream).await?;
    let (acknowledged_through, delivered_through) = acknowledged_through(consumer).await?;
    let stream_id = stream_now(stream).await?;
    let mut reconciled = Reconciled { acknowledged_through, ..Reconciled::default() };
    if before != stream_id {
        return Ok(reconciled);
    }
    let started: bool =
        sqlx::query_scalar("select exists (select from read_model_ledger where trusted_through is not null)")
            .fetch_one(&mut *connection)
            .await?;
    if !started {
        return Ok(reconciled);
    }
    let locked: bool =
        sqlx::query_scalar("select pg_try_advisory_lock($1)").bind(LEDGER_LOCK).fetch_one(&mut *connection).await?;
    if !locked {
        return Ok(reconciled);
    }
    let mut transaction = connection.begin().await?;
    // The history the turn reconciles: marked caught up at the end unless it changed.
    let history: i64 =
        sqlx::query_scalar("select history_id from read_model_history()").fetch_one(&mut *transaction).await?;
    if let Some(lost) = follow(&mut transaction, stream_id).await? {
        reconciled.lost = lost;
    }
    // A history that has not caught up (a failover, a restore) takes back everything
    // delivered, not only what is below the floor: a batch in hand when a projector died
    // holds the floor back, and the messages acknowledged above it were lost with the rest.
    // Left out, an older version of one of their records, redelivered with that batch,
    // would be applied to a database that forgot the newer ones, and served as a change.
    // A message delivered but not yet acknowledged is in the stream: applying it again is
    // harmless.
    let caught_up: bool = sqlx::query_scalar("select caught_up from read_model_histories where history_id = $1")
        .bind(history)
        .fetch_optional(&mut *transaction)
        .await?
        .unwrap_or(true);
    let through = if caught_up { acknowledged_through } else { acknowledged_through.max(delivered_through) };
    reconciled.missing = fold_and_find_missing(&mut transaction, stream_id, acknowledged_through, through).await?;
    transaction.commit().await?;
    if !reconciled.missing.is_empty() {
        let events: u64 = reconciled.missing.iter().map(|span| span.events()).sum();
        tracing::warn!(
            events,
            acknowledged_through,
            spans = ?reconciled.missing,
            "the database does not hold events JetStream saw acknowledged (a failover, a restore or a crash \
             lost their commits); applying them again from the stream"
        );
    }
    // Each record once, at the newest version all that is missing holds of it: clients
    // following the feed already had the newest, and an older one committed on the way (an
    // earlier event, one an upstream sent again late, or one of an earlier span: a copy
    // taken while a catch-up was half done lacks events on both sides of what that half
    // applied) would be served to them as a change. Dying midway leaves some applied and
    // the rest found missing again next time: harmless, as the database then holds newer.
    if !reconciled.missing.is_empty() {
        let again = apply_again(pool, stream, stream_id, &reconciled.missing).await?;
        reconciled.applied_again += again.applied;
        lost_events::record(&mut *connection, stream_id, &again.not_in_stream, Why::NotInTheStream).await?;
        reconciled.lost.extend(again.not_in_stream);
    }
    let caught_up: Option<bool> =
        sqlx::query_scalar("select read_model_mark_caught_up($1)").bind(history).fetch_one(&mut *connection).await?;
    if caught_up == Some(true) {
        tracing::info!(history, "the read model's history has taken back what it lacked; applying resumes");
    }
    sqlx::query("select pg_advisory_unlock($1)").bind(LEDGER_LOCK).execute(&mut *connection).await?;
    if reconciled.applied_again > 0 {
        crate::metrics::record_applied_again(reconciled.applied_again);
        tracing::info!(events = reconciled.applied_again, "events the database had lost are applied again");
    }
    Ok(reconciled)
}

/// What applying a span again did.
struct AppliedAgain {
    applied: u64,
    /// The span's sequences the stream no longer holds.
    not_in_stream: Vec<Span>,
}

/// Applies the events of `spans` again: first it reads them all, keeping the newest event
/// of each record (and every event that does not decode, for the dead letters), then it
/// applies those in batches, each of which records its own sequences, and records the
/// spans' older events as applied at the end. So no version is committed after a newer one
/// of the same record, whatever the order of the events and however they are spread over
/// the spans. Every sequence is either read or found missing from the stream (deleted, or
/// before its first event) one by one: none is taken as lost on the word of a read that may
/// have ended early.
async fn apply_again(
    pool: &PgPool,
    stream: &Stream,
    stream_id: StreamId,
    spans: &[Span],
) -> Result<AppliedAgain, ProjectorError> {
    let mut newest = Newest::default();
    let mut not_in_stream: Vec<Span> = Vec::new();
    for span in spans {
        not_in_stream.extend(read_span(stream, *span, &mut newest).await?);
    }
    let mut applied = 0;
    let to_apply = newest.into_messages();
    for batch in to_apply.chunks(history::BATCH) {
        applied += apply(pool, stream_id, batch).await?;
    }
    // The older events, which the newest of their records made moot: held now.
    let mut connection = pool.acquire().await?;
    for span in spans {
        for held in held_spans(*span, &not_in_stream) {
            record_span(&mut connection, stream_id, held).await?;
        }
    }
    Ok(AppliedAgain { applied, not_in_stream })
}

/// Reads every event of `span` into `newest`; returns the sequences the stream no longer
/// holds.
async fn read_span(stream: &Stream, span: Span, newest: &mut Newest) -> Result<Vec<Span>, ProjectorError> {
    let mut received = BTreeSet::new();
    if span.events() > FETCH_ONE_BY_ONE {
        let mut reading = read_through(stream, subjects(None), span.first, span.last).await?;
        while let Some(batch) = reading.batches.recv().await {
            for message in batch? {
                received.insert(message.stream_sequence);
                newest.keep(message);
            }
        }
    }
    let mut one_by_one = Vec::new();
    let mut not_in_stream: Vec<Span> = Vec::new();
    for sequence in (span.first..=span.last).filter(|sequence| !received.contains(sequence)) {
        match stream.get_raw_message(sequence).await {
            Ok(message) => {
                one_by_one.push(sequence);
                newest.keep(Received {
                    subject: message.subject.to_string(),
                    stream_sequence: sequence,
                    payload: message.payload.to_vec(),
                });
            }
            Err(error) if error.kind() == RawMessageErrorKind::NoMessageFound => match not_in_stream.last_mut() {
                Some(last) if last.last + 1 == sequence => last.last = sequence,
                _ => not_in_stream.push(Span { first: sequence, last: sequence }),
            },
            Err(error) => return Err(ProjectorError::nats("reading an event to apply again")(error)),
        }
    }
    if span.events() > FETCH_ONE_BY_ONE && !one_by_one.is_empty() {
        tracing::warn!(
            sequences = ?one_by_one,
            "reading the stream through an ordered consumer left out these events; fetched one by one"
        );
    }
    Ok(not_in_stream)
}

/// The newest event of each record read so far, and every event that does not decode.
#[derive(Default)]
struct Newest {
    by_record: std::collections::HashMap<(lectern_schema::events::EntityKind, uuid::Uuid, uuid::Uuid), (i64, Received)>,
    undecodable: Vec<Received>,
}

impl Newest {
    fn keep(&mut self, message: Received) {
        let Ok(event) = lectern_schema::events::ChangeEvent::decode_from(&message.subject, &message.payload) else {
            self.undecodable.push(message);
            return;
        };
        let key = (event.event_type.entity, event.workspace_id, event.entity_id);
        match self.by_record.get(&key) {
            Some((version, _)) if *version >= event.version => {}
            _ => {
                self.by_record.insert(key, (event.version, message));
            }
        }
    }

    /// What to apply, in stream order.
    fn into_messages(self) -> Vec<Received> {
        let mut messages: Vec<Received> =
            self.by_record.into_values().map(|(_, message)| message).chain(self.undecodable).collect();
        messages.sort_by_key(|message| message.stream_sequence);
        messages
    }
}

/// `span` without the sequences `not_in_stream` names (sorted; those of other spans are
/// passed over).
fn held_spans(span: Span, not_in_stream: &[Span]) -> Vec<Span> {
    let mut held = Vec::new();
    let mut next = span.first;
    for gap in not_in_stream.iter().filter(|gap| gap.first <= span.last && gap.last >= span.first) {
        if gap.first > next {
            held.push(Span { first: next, last: gap.first - 1 });
        }
        next = gap.last + 1;
    }
    if next <= span.last {
        held.push(Span { first: next, last: span.last });
    }
    held
}

/// Applies `batch` with a flushed commit: nothing acknowledges it afterwards.
async fn apply(pool: &PgPool, stream: StreamId, batch: &[Received]) -> Result<u64, ProjectorError> {
    if batch.is_empty() {
        return Ok(0);
    }
    apply_batch(pool, stream, batch, CommitMode::AppliedAgain).await?;
    Ok(batch.len() as u64)
}

/// Starts the ledger, then reconciles every [`RECONCILE_EVERY`] until `shutdown`, on a
/// connection of its own. Failures are logged and tried again at the next turn, on a new
/// connection.
pub async fn keep(pool: PgPool, stream: Stream, consumer: PullConsumer, shutdown: CancellationToken) {
    let mut started = false;
    let mut connection: Option<PgConnection> = None;
    loop {
        let turn = async {
            if !started {
                start(&pool, stream_now(&stream).await?, acknowledged_through(&consumer).await?.0).await?;
                started = true;
            }
            let ledger = match &mut connection {
                Some(open) => open,
                None => connection.insert(PgConnection::connect_with(&pool.connect_options()).await?),
            };
            reconcile(ledger, &pool, &stream, &consumer).await
        };
        if let Err(error) = turn.await {
            // Closed, with any lock it holds.
            connection = None;
            tracing::warn!(
                error = %lectern_runtime::with_causes(&error),
                "comparing the ledger with the acknowledgements failed; trying again"
            );
        }
        tokio::select! {
            () = tokio::time::sleep(RECONCILE_EVERY) => {}
            () = shutdown.cancelled() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_span_is_held_but_for_what_the_stream_no_longer_has() {
        let span = Span { first: 10, last: 30 };
        assert_eq!(held_spans(span, &[]), vec![span]);
        let gaps = [Span { first: 10, last: 12 }, Span { first: 20, last: 20 }, Span { first: 30, last: 30 }];
        assert_eq!(held_spans(span, &gaps), vec![Span { first: 13, last: 19 }, Span { first: 21, last: 29 }]);
        // Gaps found in the other spans of the same turn.
        let elsewhere = [Span { first: 2, last: 4 }, Span { first: 15, last: 15 }, Span { first: 40, last: 41 }];
        assert_eq!(held_spans(span, &elsewhere), vec![Span { first: 10, last: 14 }, Span { first: 16, last: 30 }]);
    }

    fn message(sequence: u64, entity: &str, version: i64) -> Received {
        let workspace = "6d1f0b7e-3c55-4a3b-8f9f-5d1f0e2a7c11";
        let payload = serde_json::json!({
            "eventId": uuid::Uuid::new_v4(),
            "type": "contact.updated",
            "workspaceId": workspace,
            "entityId": entity,
            "version": version,
            "occurredAt": "2026-11-29T10:15:30.120Z",
            "data": {
                "name": format!("v{version}"), "email": null, "phone": null, "address": null, "tin": null,
                "isCustomer": true, "isSupplier": false, "createdAt": "2025-01-01T00:00:00.000Z",
            },
        });
        Received {
            subject: format!("changes.{workspace}.contacts.{entity}"),
            stream_sequence: sequence,
            payload: payload.to_string().into_bytes(),
        }
    }

    #[test]
    fn each_record_is_applied_again_once_at_the_newest_version_of_the_span_whatever_its_order() {
        let (first, second) = ("0a3c7f52-8f6e-4d6b-9d36-1b2f3c4d5e6f", "1b4d8a63-9a7f-4e7c-8e47-2c3d4e5f6a7b");
        let mut newest = Newest::default();
        // Version 3 of the first record, then an old version 2 sent again late in the span.
        for received in [message(1, first, 1), message(2, first, 3), message(3, second, 1), message(4, first, 2)] {
            newest.keep(received);
        }
        newest.keep(Received { subject: "changes.x".into(), stream_sequence: 5, payload: b"not json".to_vec() });
        let kept: Vec<u64> = newest.into_messages().iter().map(|message| message.stream_sequence).collect();
        assert_eq!(kept, vec![2, 3, 5]);
    }
}
