//! Column values read as PostgreSQL sends them in binary, where sqlx's decoders do
//! work a page repeats for every record.

use chrono::DateTime;
use lectern_schema::json::Text;
use lectern_schema::Timestamp;
use sqlx::postgres::PgRow;
use sqlx::Row;

/// Microseconds from the Unix epoch to PostgreSQL's (2000-01-01 00:00:00 UTC).
const POSTGRES_EPOCH_UNIX_MICROS: i64 = 946_684_800_000_000;

/// The value PostgreSQL gives `'infinity'` and `'-infinity'`, and anything else
/// chrono cannot hold.
#[derive(Debug, thiserror::Error)]
#[error("timestamptz of {0} µs from 2000-01-01 is not a representable instant")]
struct OutOfRange(i64);

/// The `timestamptz` at `index` of a row of a prepared statement (binary format: a
/// big-endian count of microseconds from 2000-01-01 UTC).
///
/// sqlx's `DateTime<Utc>` decoder goes through a `FixedOffset` date-time and date
/// arithmetic from 2000-01-01 for every value, a twentieth of a deep page's CPU, and
/// panics on `'infinity'` rather than failing.
pub fn instant(row: &PgRow, index: usize) -> Result<Timestamp, sqlx::Error> {
    let micros: i64 = row.try_get_unchecked(index)?;
    micros
        .checked_add(POSTGRES_EPOCH_UNIX_MICROS)
        .and_then(DateTime::from_timestamp_micros)
        .map(Timestamp::from)
        .ok_or_else(|| sqlx::Error::ColumnDecode { index: index.to_string(), source: Box::new(OutOfRange(micros)) })
}

/// The text at `index`, its UTF-8 checked only when it is written (see [`Text`]).
pub fn text(row: &PgRow, index: usize) -> Result<Text<'_>, sqlx::Error> {
    row.try_get_unchecked::<&[u8], _>(index).map(Text::from_bytes)
}

/// [`text`] of a nullable column.
pub fn optional_text(row: &PgRow, index: usize) -> Result<Option<Text<'_>>, sqlx::Error> {
    Ok(row.try_get_unchecked::<Option<&[u8]>, _>(index)?.map(Text::from_bytes))
}
