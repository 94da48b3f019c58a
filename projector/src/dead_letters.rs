//! Dead letters: storing the messages that break the contract, whatever bytes they hold;
//! and every other statement on the `dead_letters` table, for the running projector's
//! metrics and `status`, and for the operator's tools that list, retry and discard them
//! (`repair::dead_letters`) and leave them out of `verify` and `rebuild`.
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
//! unacknowledged, in view of `status` and readiness (see [`crate::daemon::stuck`]).

use std::borrow::Cow;
use std::collections::HashSet;

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgExecutor, PgPool};

use crate::error::is_transient_database_error;
use crate::message::{Received, Refused};

/// The subject exactly as received: its bytes when `subject` holds it escaped.
const EXACT_SUBJECT: &str = "coalesce(subject_bytes, convert_to(subject, 'UTF8'))";

/// A dead-letter row as stored, its subject exactly as received.
#[derive(sqlx::FromRow)]
pub struct StoredDeadLetter {
    pub id: i64,
    pub subject: Vec<u8>,
    pub stream_sequence: i64,
    pub reason: String,
    pub received_at: DateTime<Utc>,
    pub payload: Vec<u8>,
}

/// How many dead letters are stored.
pub async fn count(pool: &PgPool) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("select count(*) from dead_letters").fetch_one(pool).await
}

/// Every dead letter, in the order they were stored.
pub async fn stored(pool: &PgPool) -> Result<Vec<StoredDeadLetter>, sqlx::Error> {
    sqlx::query_as(&format!(
        "select id, {EXACT_SUBJECT} as subject, stream_sequence, reason, received_at, payload
         from dead_letters order by id"
    ))
    .fetch_all(pool)
    .await
}

/// The id, exact subject and payload of the dead letter `only`, or of every one, in the
/// order they were stored.
pub async fn letters(pool: &PgPool, only: Option<i64>) -> Result<Vec<(i64, Vec<u8>, Vec<u8>)>, sqlx::Error> {
    sqlx::query_as(&format!(
        "select id, {EXACT_SUBJECT}, payload from dead_letters where $1::int8 is null or id = $1 order by id"
    ))
    .bind(only)
    .fetch_all(pool)
    .await
}

/// The stream sequences of the dead letters: events the projector set aside, which no row
/// reflects (until a retry applies them and they leave the table).
pub async fn sequences(connection: &mut PgConnection) -> Result<HashSet<i64>, sqlx::Error> {
    let sequences: Vec<i64> =
        sqlx::query_scalar("select stream_sequence from dead_letters").fetch_all(connection).await?;
    Ok(sequences.into_iter().collect())
}

/// Removes the dead letter `id` (in the caller's transaction, when it is one); whether
/// there was one.
pub async fn remove(executor: impl PgExecutor<'_>, id: i64) -> Result<bool, sqlx::Error> {
    let removed = sqlx::query("delete from dead_letters where id = $1").bind(id).execute(executor).await?;
    Ok(removed.rows_affected() > 0)
}

/// Stores a dead letter's new reason, as [`store_one_by_one`] would: NUL escaped, or all
/// in printable ASCII if the database refuses it so.
pub async fn set_reason(pool: &PgPool, id: i64, reason: &str) -> Result<(), sqlx::Error> {
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
pub(crate) fn without_nul(text: &str) -> Cow<'_, str> {
    if text.contains('\0') {
        Cow::Owned(text.replace('\0', "\\u{0}"))
    } else {
        Cow::Borrowed(text)
    }
}

/// `text` in printable ASCII, which every server encoding holds: a backslash doubled and
/// every other character outside printable ASCII written `\u{…}`, so nothing is lost.
pub(crate) fn in_ascii(text: &str) -> Cow<'_, str> {
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
