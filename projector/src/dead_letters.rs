//! Dead letters: storing the messages that break the contract, whatever bytes they
//! hold, and listing and retrying them.
//!
//! A dead letter must be stored, or its message would be retried for ever and every
//! message pulled with it would wait too. The payload is `bytea` and takes anything,
//! but the subject (NATS's bytes, NUL included) and the reason (which quotes the
//! payload) are `text`, which refuses NUL, and, in a database whose encoding is not
//! UTF-8, the characters that encoding lacks. So text is stored with NUL escaped, and a
//! subject that had to be escaped keeps its exact bytes in `subject_bytes`. A dead
//! letter the database still refuses is stored again with its text escaped to printable
//! ASCII, which every encoding holds ([`store_one_by_one`]). Only if even that is refused
//! (the table is gone, a permission is missing) does its batch fail and retry,
//! unacknowledged, in view of `status` and readiness (see [`crate::stuck`]).

use std::borrow::Cow;

use chrono::{DateTime, Utc};
use lectern_schema::events::ChangeEvent;
use sqlx::{PgConnection, PgPool};

use crate::apply::{write_events, Received};
use crate::error::is_transient_database_error;

/// A message that broke the contract, or that the database refused, and why.
pub type Refused<'a> = (&'a Received, String);

/// Stores `refused` in one statement, inside the caller's transaction.
pub async fn store(connection: &mut PgConnection, refused: &[Refused<'_>]) -> Result<(), sqlx::Error> {
    if refused.is_empty() {
        return Ok(());
    }
    let rows: Vec<Row<'_>> = refused.iter().map(|(message, reason)| Row::as_received(message, reason)).collect();
    insert(connection, &rows).await
}

/// Stores `refused` one at a time, inside the caller's transaction, once [`store`] was
/// refused: a dead letter the database refuses as it is goes in again with its text in
/// printable ASCII, beside its exact bytes.
pub async fn store_one_by_one(connection: &mut PgConnection, refused: &[Refused<'_>]) -> Result<(), sqlx::Error> {
    for (message, reason) in refused {
        sqlx::query("savepoint dead_letter").execute(&mut *connection).await?;
        let refusal = match insert(connection, &[Row::as_received(message, reason)]).await {
            Ok(()) => continue,
            Err(error) if is_transient_database_error(&error) => return Err(error),
            Err(refusal) => refusal,
        };
        sqlx::query("rollback to savepoint dead_letter").execute(&mut *connection).await?;
        tracing::warn!(
            error = %refusal,
            stream_sequence = message.stream_sequence,
            "dead letter refused by the database; storing it with its text escaped to ASCII"
        );
        insert(connection, &[Row::in_ascii(message, reason, &refusal)]).await?;
    }
    Ok(())
}

/// A dead letter's columns, as an insert writes them.
struct Row<'a> {
    subject: Cow<'a, str>,
    /// The exact subject, when `subject` had to be escaped.
    subject_bytes: Option<&'a [u8]>,
    stream_sequence: i64,
    payload: &'a [u8],
    reason: Cow<'a, str>,
}

impl<'a> Row<'a> {
    /// The dead letter as received, NUL escaped.
    fn as_received(message: &'a Received, reason: &'a str) -> Self {
        Self::with_text(message, without_nul(&message.subject), without_nul(reason))
    }

    /// The dead letter with its text in printable ASCII, for a database that refused it
    /// as it was; the reason says so, and why.
    fn in_ascii(message: &'a Received, reason: &str, refusal: &sqlx::Error) -> Self {
        let reason = format!("{reason} (text escaped to ASCII: the database refused it as it was: {refusal})");
        Self::with_text(message, in_ascii(&message.subject), Cow::Owned(in_ascii(&reason).into_owned()))
    }

    fn with_text(message: &'a Received, subject: Cow<'a, str>, reason: Cow<'a, str>) -> Self {
        let escaped = subject != message.subject.as_str();
        Self {
            subject,
            subject_bytes: escaped.then_some(message.subject.as_bytes()),
            stream_sequence: i64::try_from(message.stream_sequence).unwrap_or(i64::MAX),
            payload: &message.payload,
            reason,
        }
    }
}

async fn insert(connection: &mut PgConnection, rows: &[Row<'_>]) -> Result<(), sqlx::Error> {
    let subjects: Vec<&str> = rows.iter().map(|row| row.subject.as_ref()).collect();
    let subject_bytes: Vec<Option<&[u8]>> = rows.iter().map(|row| row.subject_bytes).collect();
    let sequences: Vec<i64> = rows.iter().map(|row| row.stream_sequence).collect();
    let payloads: Vec<&[u8]> = rows.iter().map(|row| row.payload).collect();
    let reasons: Vec<&str> = rows.iter().map(|row| row.reason.as_ref()).collect();
    // A redelivered poison message (acked but the ack lost) is stored once.
    sqlx::query(
        "insert into dead_letters (subject, subject_bytes, stream_sequence, payload, reason)
         select * from unnest($1::text[], $2::bytea[], $3::int8[], $4::bytea[], $5::text[])
         on conflict (stream_sequence) do nothing",
    )
    .bind(&subjects)
    .bind(&subject_bytes)
    .bind(&sequences)
    .bind(&payloads)
    .bind(&reasons)
    .execute(connection)
    .await?;
    Ok(())
}

/// `text` with NUL, the one character PostgreSQL's `text` refuses in a UTF-8 database,
/// written `\u{0}`.
fn without_nul(text: &str) -> Cow<'_, str> {
    if text.contains('\0') {
        Cow::Owned(text.replace('\0', "\\u{0}"))
    } else {
        Cow::Borrowed(text)
    }
}

/// `text` in printable ASCII, which every server encoding holds: a backslash doubled and
/// every other character outside printable ASCII written `\u{…}`, so nothing is lost.
fn in_ascii(text: &str) -> Cow<'_, str> {
    escape(text, |c| c == ' ' || (c.is_ascii_graphic() && c != '\\'))
}

/// `text` safe to print on a terminal: control characters (NUL, escape sequences, line
/// breaks) written `\u{…}`, and a backslash doubled so that those stay unambiguous.
pub fn printable(text: &str) -> Cow<'_, str> {
    escape(text, |c| !c.is_control() && c != '\\')
}

fn escape(text: &str, keep: impl Fn(char) -> bool) -> Cow<'_, str> {
    if text.chars().all(&keep) {
        return Cow::Borrowed(text);
    }
    let mut escaped = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            c if keep(c) => escaped.push(c),
            '\\' => escaped.push_str("\\\\"),
            c => escaped.extend(c.escape_unicode()),
        }
    }
    Cow::Owned(escaped)
}

/// The subject exactly as received: its bytes when `subject` holds it escaped.
const EXACT_SUBJECT: &str = "coalesce(subject_bytes, convert_to(subject, 'UTF8'))";

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

/// A dead-letter row as stored.
#[derive(sqlx::FromRow)]
struct StoredDeadLetter {
    id: i64,
    subject: Vec<u8>,
    stream_sequence: i64,
    reason: String,
    received_at: DateTime<Utc>,
    payload: Vec<u8>,
}

pub async fn list(pool: &PgPool) -> Result<Vec<DeadLetter>, sqlx::Error> {
    let rows: Vec<StoredDeadLetter> = sqlx::query_as(&format!(
        "select id, {EXACT_SUBJECT} as subject, stream_sequence, reason, received_at, payload
         from dead_letters order by id"
    ))
    .fetch_all(pool)
    .await?;
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

/// Re-validates the chosen dead letters (all when `only` is `None`) against their exact
/// subject and payload, and applies those that pass; each is applied and removed in one
/// transaction.
pub async fn retry(pool: &PgPool, only: Option<i64>) -> Result<RetryOutcome, sqlx::Error> {
    let rows: Vec<(i64, Vec<u8>, Vec<u8>)> = sqlx::query_as(&format!(
        "select id, {EXACT_SUBJECT}, payload from dead_letters where $1::int8 is null or id = $1 order by id"
    ))
    .bind(only)
    .fetch_all(pool)
    .await?;
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
                sqlx::query("delete from dead_letters where id = $1").bind(id).execute(&mut *transaction).await?;
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

/// Stores a dead letter's new reason, as [`store_one_by_one`] would: NUL escaped, or all
/// in printable ASCII if the database refuses it so.
async fn set_reason(pool: &PgPool, id: i64, reason: &str) -> Result<(), sqlx::Error> {
    const UPDATE: &str = "update dead_letters set reason = $2 where id = $1";
    match sqlx::query(UPDATE).bind(id).bind(without_nul(reason).as_ref()).execute(pool).await {
        Err(error) if !is_transient_database_error(&error) => {
            sqlx::query(UPDATE).bind(id).bind(in_ascii(reason).as_ref()).execute(pool).await?;
        }
        updated => {
            updated?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{in_ascii, printable, without_nul};

    #[test]
    fn nul_is_the_only_character_escaped_for_text() {
        assert_eq!(without_nul("type \"a\0b\" Grüße\n"), "type \"a\\u{0}b\" Grüße\n");
        assert!(matches!(without_nul("no nul, ß"), std::borrow::Cow::Borrowed(_)));
    }

    #[test]
    fn ascii_escaping_keeps_printable_ascii_and_can_be_read_back() {
        assert_eq!(in_ascii("changes.ws.contacts.a b"), "changes.ws.contacts.a b");
        assert_eq!(in_ascii("a\0ü😀\\u{0}"), "a\\u{0}\\u{fc}\\u{1f600}\\\\u{0}");
    }

    #[test]
    fn printable_text_escapes_control_characters_and_keeps_the_rest() {
        assert_eq!(printable("Grüße\u{1b}[2J\0\\"), "Grüße\\u{1b}[2J\\u{0}\\\\");
        assert!(matches!(printable("changes.ws.contacts.Grüße"), std::borrow::Cow::Borrowed(_)));
    }
}
