//! Listing and retrying dead letters.

use chrono::{DateTime, Utc};
use lectern_schema::events::ChangeEvent;
use sqlx::PgPool;

use crate::apply::write_events;

/// A stored dead letter.
#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeadLetter {
    pub id: i64,
    pub subject: String,
    pub stream_sequence: i64,
    pub reason: String,
    pub received_at: DateTime<Utc>,
    /// The payload as text when it is UTF-8 (for reading), else null.
    pub payload_text: Option<String>,
}

/// A dead-letter row as stored.
#[derive(sqlx::FromRow)]
struct StoredDeadLetter {
    id: i64,
    subject: String,
    stream_sequence: i64,
    reason: String,
    received_at: DateTime<Utc>,
    payload: Vec<u8>,
}

pub async fn list(pool: &PgPool) -> Result<Vec<DeadLetter>, sqlx::Error> {
    let rows: Vec<StoredDeadLetter> = sqlx::query_as(
        "select id, subject, stream_sequence, reason, received_at, payload from dead_letters order by id",
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|row| DeadLetter {
            id: row.id,
            subject: row.subject,
            stream_sequence: row.stream_sequence,
            reason: row.reason,
            received_at: row.received_at,
            payload_text: String::from_utf8(row.payload).ok(),
        })
        .collect())
}

pub async fn count(pool: &PgPool) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("select count(*) from dead_letters").fetch_one(pool).await
}

/// What `retry` did with each dead letter.
#[derive(Debug, Default, serde::Serialize)]
pub struct RetryOutcome {
    /// Ids that now validate, were applied and left the table.
    pub applied: Vec<i64>,
    /// Ids that still break the contract, with the reason.
    pub still_failing: Vec<(i64, String)>,
}

/// Re-validates the chosen dead letters (all when `only` is `None`) and applies those
/// that pass; each is applied and removed in one transaction.
pub async fn retry(pool: &PgPool, only: Option<i64>) -> Result<RetryOutcome, sqlx::Error> {
    let rows: Vec<(i64, String, Vec<u8>)> =
        sqlx::query_as("select id, subject, payload from dead_letters where $1::int8 is null or id = $1 order by id")
            .bind(only)
            .fetch_all(pool)
            .await?;
    let mut outcome = RetryOutcome::default();
    for (id, subject, payload) in rows {
        match ChangeEvent::decode_from(&subject, &payload) {
            Ok(event) => {
                let mut transaction = pool.begin().await?;
                write_events(&mut transaction, std::iter::once(&event)).await?;
                sqlx::query("delete from dead_letters where id = $1").bind(id).execute(&mut *transaction).await?;
                transaction.commit().await?;
                outcome.applied.push(id);
            }
            Err(error) => {
                sqlx::query("update dead_letters set reason = $2 where id = $1")
                    .bind(id)
                    .bind(error.to_string())
                    .execute(pool)
                    .await?;
                outcome.still_failing.push((id, error.to_string()));
            }
        }
    }
    Ok(outcome)
}
