//! `lectern-projector dead-letters list | retry | discard`: the dead letters as stored,
//! applied again once they pass the contract (a corrected schema, a fixed upstream), and
//! discarded once nothing is left to fix (a corrected event replaced them).

use chrono::{DateTime, Utc};
use lectern_schema::events::ChangeEvent;
use sqlx::PgPool;

use crate::apply::write_events;
use crate::dead_letters::{self, set_reason};

/// A stored dead letter.
#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeadLetter {
    pub id: i64,
    /// The subject exactly as received (JSON escapes a NUL in it as `\u0000`).
    pub subject: String,
    pub stream_sequence: i64,
    pub reason: String,
    pub received_at: DateTime<Utc>,
    /// The payload as text when it is UTF-8 (for reading), else null.
    pub payload_text: Option<String>,
}

pub async fn list(pool: &PgPool) -> Result<Vec<DeadLetter>, sqlx::Error> {
    let rows = dead_letters::stored(pool).await?;
    Ok(rows
        .into_iter()
        .map(|row| DeadLetter {
            id: row.id,
            // Subjects come from NATS as UTF-8; only a row written by hand can be otherwise.
            subject: String::from_utf8(row.subject)
                .unwrap_or_else(|error| String::from_utf8_lossy(error.as_bytes()).into_owned()),
            stream_sequence: row.stream_sequence,
            reason: row.reason,
            received_at: row.received_at,
            payload_text: String::from_utf8(row.payload).ok(),
        })
        .collect())
}

/// What `retry` did with each dead letter.
#[derive(Debug, Default, serde::Serialize)]
pub struct RetryOutcome {
    /// Ids that now validate, were applied and left the table.
    pub applied: Vec<i64>,
    /// Ids that still break the contract, with the reason.
    pub still_failing: Vec<(i64, String)>,
}

/// Re-validates the chosen dead letters (all when `only` is `None`) against their exact
/// subject and payload, and applies those that pass; each is applied and removed in one
/// transaction.
pub async fn retry(pool: &PgPool, only: Option<i64>) -> Result<RetryOutcome, sqlx::Error> {
    let rows = dead_letters::letters(pool, only).await?;
    let mut outcome = RetryOutcome::default();
    for (id, subject, payload) in rows {
        let decoded = match String::from_utf8(subject) {
            Ok(subject) => ChangeEvent::decode_from(&subject, &payload).map_err(|error| error.to_string()),
            Err(_) => Err("the subject is not UTF-8".to_owned()),
        };
        match decoded {
            Ok(event) => {
                let mut transaction = pool.begin().await?;
                write_events(&mut transaction, std::iter::once(&event)).await?;
                dead_letters::remove(&mut *transaction, id).await?;
                transaction.commit().await?;
                outcome.applied.push(id);
            }
            Err(reason) => {
                set_reason(pool, id, &reason).await?;
                outcome.still_failing.push((id, reason));
            }
        }
    }
    Ok(outcome)
}

/// Removes the dead letter `id`; whether there was one.
pub async fn discard(pool: &PgPool, id: i64) -> Result<bool, sqlx::Error> {
    dead_letters::remove(pool, id).await
}

/// What `discard --superseded` did.
#[derive(Debug, Default, serde::Serialize)]
pub struct Discarded {
    /// Ids removed: the read model holds their record at their version or a later one.
    pub discarded: Vec<i64>,
    /// Letters kept: their record is not in the read model at their version, or their
    /// subject or payload does not say which record and version they were.
    pub kept: usize,
}

/// Removes every dead letter whose record the read model holds at the letter's version or
/// later: a corrected event (republished at that version, or a newer one) replaced it, and
/// retrying it would change nothing. A letter that does not say its record and version
/// (a payload that is not JSON, a subject of no record) is kept, for `discard <id>`.
pub async fn discard_superseded(pool: &PgPool) -> Result<Discarded, sqlx::Error> {
    let rows = dead_letters::letters(pool, None).await?;
    let mut outcome = Discarded::default();
    for (id, subject, payload) in rows {
        let Some(letter) = Letter::read(&subject, &payload) else {
            outcome.kept += 1;
            continue;
        };
        let holds: Option<i64> =
            sqlx::query_scalar(&format!("select version from {} where workspace_id = $1 and id = $2", letter.table))
                .bind(letter.workspace)
                .bind(letter.record)
                .fetch_optional(pool)
                .await?;
        if holds.is_some_and(|version| version >= letter.version) && discard(pool, id).await? {
            outcome.discarded.push(id);
        } else {
            outcome.kept += 1;
        }
    }
    Ok(outcome)
}

/// The record and version a dead letter was about.
struct Letter {
    /// The read model's table: its subject's entity, one of the two known.
    table: &'static str,
    workspace: uuid::Uuid,
    record: uuid::Uuid,
    version: i64,
}

impl Letter {
    /// The record from the subject (`changes.<workspace>.<contacts|items>.<id>`, as the
    /// projector routes it), the version from the payload's `version`.
    fn read(subject: &[u8], payload: &[u8]) -> Option<Self> {
        let subject = std::str::from_utf8(subject).ok()?;
        let mut parts = subject.split('.');
        let (Some("changes"), Some(workspace), Some(entity), Some(record), None) =
            (parts.next(), parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return None;
        };
        let table = match entity {
            "contacts" => "contacts",
            "items" => "items",
            _ => return None,
        };
        let version = serde_json::from_slice::<serde_json::Value>(payload).ok()?.get("version")?.as_i64()?;
        Some(Self { table, workspace: workspace.parse().ok()?, record: record.parse().ok()?, version })
    }
}

#[cfg(test)]
mod tests {
    use super::Letter;

    #[test]
    fn a_letter_names_its_record_by_subject_and_its_version_by_payload_or_nothing() {
        let workspace = "3f1c0e7a-0000-4000-8000-000000000001";
        let record = "3f1c0e7a-0000-4000-8000-000000000002";
        let subject = format!("changes.{workspace}.items.{record}");
        let letter = Letter::read(subject.as_bytes(), br#"{"version": 4, "data": null}"#).expect("a letter");
        assert_eq!((letter.table, letter.version), ("items", 4));
        assert_eq!((letter.workspace.to_string(), letter.record.to_string()), (workspace.into(), record.into()));
        for (subject, payload) in [
            (subject.as_str(), &b"not json"[..]),
            (subject.as_str(), br#"{"version": "4"}"#),
            (&format!("changes.{workspace}.orders.{record}"), br#"{"version": 4}"#),
            (&format!("changes.{workspace}.items.{record}.x"), br#"{"version": 4}"#),
        ] {
            assert!(Letter::read(subject.as_bytes(), payload).is_none(), "{subject} {payload:?}");
        }
    }
}
