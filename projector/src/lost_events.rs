//! Lost events: acknowledged by JetStream, not held by the database, and no longer in the
//! stream to be applied again (`read_model_lost`).
//!
//! The ledger ([`crate::daemon::ledger`]) applies again what a failover, a restore or a
//! crash made the database forget, from the stream. An event the stream no longer holds
//! (aged out by a limit, purged, deleted, or of a stream deleted and created again) cannot
//! come back that way: the record it wrote may stay at an older version, or missing;
//! clients that had the newer one keep it, until an older version sent again is applied
//! over what the database holds and served to them. Such sequences are recorded here rather than
//! as held, in the same breath counted by a metric, shown by `status` and by readiness
//! (degraded) and named in an ERROR line, until an operator has dealt with them (published
//! the events again from the upstream's outbox, or accepted the loss) and says so
//! (`lectern-projector lost-events accept`).

use sqlx::{PgConnection, PgExecutor, PgPool};

use crate::message::{as_sequence, Span};
use crate::stream::StreamId;

/// Why the sequences are lost, as the table records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    /// The stream no longer held them when they were to be applied again.
    NotInTheStream,
    /// The stream they belong to was deleted (and created again) before they were.
    StreamRecreated,
}

impl Why {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NotInTheStream => {
                "acknowledged, lost by the database, and no longer in the stream (aged out by a limit, purged or deleted)"
            }
            Self::StreamRecreated => {
                "acknowledged, lost by the database, and the stream they belong to was deleted and created again"
            }
        }
    }
}

/// The sequences of the stream `$2` recorded as lost, as a subquery (a multirange, null
/// when none): for the ledger's reckoning of what the database does not hold.
pub const LOST_OF_STREAM_2: &str =
    "(select range_agg(r) from read_model_lost, unnest(sequences) as r where stream = $2)";

/// Records `spans` of `stream` as lost, inside the caller's transaction if one is open.
pub async fn record(
    connection: &mut PgConnection,
    stream: StreamId,
    spans: &[Span],
    why: Why,
) -> Result<(), sqlx::Error> {
    if spans.is_empty() {
        return Ok(());
    }
    let firsts: Vec<i64> = spans.iter().map(|span| as_sequence(span.first)).collect();
    let lasts: Vec<i64> = spans.iter().map(|span| as_sequence(span.last)).collect();
    sqlx::query(
        "insert into read_model_lost (stream, sequences, reason) \
         select $1, range_agg(int8range(first, last, '[]')), $4 from unnest($2::int8[], $3::int8[]) as s(first, last)",
    )
    .bind(stream.nanos())
    .bind(firsts)
    .bind(lasts)
    .bind(why.as_str())
    .execute(connection)
    .await?;
    let events: u64 = spans.iter().map(|span| span.events()).sum();
    crate::metrics::record_lost(events);
    tracing::error!(
        events,
        stream = %stream,
        spans = ?spans,
        reason = why.as_str(),
        "acknowledged events are lost: the database does not hold them and they cannot be applied again; the \
         records they wrote may be at older versions or missing. Publish them again from the upstream's outbox, or \
         accept the loss, then run `lectern-projector lost-events accept` (docs/operations.md, \"Lost events\")"
    );
    Ok(())
}

/// Lost events no operator has accepted yet.
pub async fn unaccepted(database: impl PgExecutor<'_>) -> Result<u64, sqlx::Error> {
    let events: i64 = sqlx::query_scalar(
        "select coalesce(sum(upper(r) - lower(r)), 0)::int8 from read_model_lost, unnest(sequences) as r \
         where accepted_at is null",
    )
    .fetch_one(database)
    .await?;
    Ok(events.unsigned_abs())
}

/// One record of lost events, as `lost-events list` shows it.
#[derive(Debug, serde::Serialize, sqlx::FromRow)]
#[serde(rename_all = "camelCase")]
pub struct Lost {
    /// The stream's creation time, in nanoseconds since 1970 (0: before streams were named).
    pub stream: i64,
    /// `[first,last]` ranges of stream sequences.
    pub sequences: String,
    pub events: i64,
    pub reason: String,
    pub found_at: chrono::DateTime<chrono::Utc>,
    pub accepted_at: Option<chrono::DateTime<chrono::Utc>>,
}

/// Every record of lost events, newest first.
pub async fn list(pool: &PgPool) -> Result<Vec<Lost>, sqlx::Error> {
    sqlx::query_as(
        "select stream, sequences::text as sequences, \
                (select coalesce(sum(upper(r) - lower(r)), 0) from unnest(sequences) as r)::int8 as events, \
                reason, found_at, accepted_at \
         from read_model_lost order by found_at desc",
    )
    .fetch_all(pool)
    .await
}

/// Marks every lost event not accepted yet as accepted; returns how many events that was.
pub async fn accept(pool: &PgPool) -> Result<u64, sqlx::Error> {
    let accepted: Option<i64> = sqlx::query_scalar(
        "with accepted as (update read_model_lost set accepted_at = now() where accepted_at is null \
                           returning sequences) \
         select sum(upper(r) - lower(r))::int8 from accepted, unnest(sequences) as r",
    )
    .fetch_one(pool)
    .await?;
    Ok(accepted.unwrap_or(0).unsigned_abs())
}

/// The sentence `verify` and `rebuild` add when events are lost and not accepted, if any.
pub async fn describe(database: impl PgExecutor<'_>) -> Result<Option<String>, sqlx::Error> {
    let events = unaccepted(database).await?;
    Ok((events > 0).then(|| {
        format!(
            "{events} acknowledged event(s) are recorded as lost: the database lost them and the stream no longer \
             holds them (`lectern-projector lost-events list`); publish them again from the upstream's outbox, or \
             accept the loss (`lectern-projector lost-events accept`)"
        )
    }))
}
