//! `lectern-read-model`: the read model's tables, each defined once. For every record
//! kind one module lists the table's columns and holds the three things that must agree
//! on them: how the API decodes a row, how the projector writes a batch of rows, and
//! (through the same batch) how tests seed rows. A column added to one and not the
//! others is a compile error (rows and record types are built field by field) or a
//! failing round-trip test (`tests/tests/api/columns.rs`).
//!
//! # Layout
//! - [`contacts`], [`items`]: one table each.
//! - [`values`]: column values read as PostgreSQL sends them.

pub mod contacts;
pub mod items;
pub mod values;

use sqlx::postgres::PgArguments;
use sqlx::query::Query;
use sqlx::Postgres;
use uuid::Uuid;

/// How a batch's statement is committed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Commit {
    /// By the transaction the statement runs in.
    WithTheTransaction,
    /// The statement is its own transaction, committed without waiting for its flush.
    OnItsOwnBeforeFlush,
    /// The statement is its own transaction, whose commit returns once flushed, whatever
    /// the server's own `synchronous_commit` is.
    OnItsOwnFlushed,
}

impl Commit {
    /// The common table expression that sets the commit's mode, if any. `set local`
    /// has no effect outside a transaction block, but `set_config(…, true)` lasts until
    /// the end of the statement's own transaction, whose commit is the one that reads
    /// it; the session keeps the server's setting.
    fn setting(self) -> &'static str {
        match self {
            Self::WithTheTransaction => "",
            Self::OnItsOwnBeforeFlush => "commit_mode as (select set_config('synchronous_commit', 'off', true)), ",
            Self::OnItsOwnFlushed => "commit_mode as (select set_config('synchronous_commit', 'on', true)), ",
        }
    }

    /// What the upsert's rows are selected from besides its arrays: the setting's row,
    /// so that it is evaluated.
    fn source(self) -> &'static str {
        match self {
            Self::WithTheTransaction => "",
            Self::OnItsOwnBeforeFlush | Self::OnItsOwnFlushed => "commit_mode, ",
        }
    }
}

/// Whether a stored record is served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Active,
    Archived,
    Deleted,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Active => "active",
            Self::Archived => "archived",
            Self::Deleted => "deleted",
        }
    }
}

/// Which row, at which version, in which state: the columns every table has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Key {
    pub workspace_id: Uuid,
    pub id: Uuid,
    pub version: i64,
    pub status: Status,
}

/// The key columns of a batch, one array each.
#[derive(Debug, Default)]
struct Keys {
    workspace_id: Vec<Uuid>,
    id: Vec<Uuid>,
    version: Vec<i64>,
    status: Vec<&'static str>,
}

impl Keys {
    fn push(&mut self, key: Key) {
        self.workspace_id.push(key.workspace_id);
        self.id.push(key.id);
        self.version.push(key.version);
        self.status.push(key.status.as_str());
    }

    fn is_empty(&self) -> bool {
        self.id.is_empty()
    }

    /// `sql` (an [`upsert_sql`]) with the key's arrays bound, its first four parameters.
    fn bound<'q>(&'q self, sql: &'q str) -> Query<'q, Postgres, PgArguments> {
        sqlx::query(sql).bind(&self.workspace_id).bind(&self.id).bind(&self.version).bind(&self.status)
    }
}

/// A column a batch writes after the key: its name, the array type its values travel
/// in, and the cast to its stored type where that differs (amounts travel as text, so
/// that `0.10` is not a float on the way).
#[derive(Clone, Copy, Debug)]
struct Written {
    column: &'static str,
    sent_as: &'static str,
    stored_as: Option<&'static str>,
}

impl Written {
    const fn as_sent(column: &'static str, sent_as: &'static str) -> Self {
        Self { column, sent_as, stored_as: None }
    }

    const fn cast(column: &'static str, sent_as: &'static str, stored_as: &'static str) -> Self {
        Self { column, sent_as, stored_as: Some(stored_as) }
    }

    fn selected(&self) -> String {
        match self.stored_as {
            Some(stored_as) => format!("u.{}::{stored_as}", self.column),
            None => format!("u.{}", self.column),
        }
    }
}

/// The key's columns, which every table has, with the array types they travel in.
const KEY_COLUMNS: [Written; 4] = [
    Written::as_sent("workspace_id", "uuid"),
    Written::as_sent("id", "uuid"),
    Written::as_sent("version", "int8"),
    Written::as_sent("status", "text"),
];

/// The names of the key's columns and of `data`: every column a batch writes but the
/// change's position, which the statement computes.
fn names(data: &[Written]) -> Vec<&'static str> {
    KEY_COLUMNS.iter().chain(data).map(|written| written.column).collect()
}

/// The column that orders the changes feed, with the record's id: the feed position of
/// the transaction that last wrote the row, its id offset by the server history it ran in
/// (`migrations/…_feed_positions_across_histories.sql`).
pub const CHANGE_TRANSACTION: &str = "change_xid";

/// The table where the projector's live writes record the stream sequences they applied,
/// in the same statement as the rows (`migrations/…_stream_ledger.sql`).
pub const APPLIED: &str = "read_model_applied";

/// The statement that records `$1`, an array of stream sequences of the stream `$2`, as
/// applied.
pub const RECORD_APPLIED_SQL: &str = "insert into read_model_applied (stream, sequences) \
     select $2, range_agg(int8range(s, s, '[]')) from unnest($1::int8[]) as s";

/// Stream sequences a statement records as applied, and the stream they are of (named by
/// when it was created: `migrations/…_histories_of_their_own.sql`).
#[derive(Clone, Copy, Debug)]
pub struct AppliedSequences<'a> {
    pub stream: i64,
    pub sequences: &'a [i64],
}

/// The feed position of what the writing transaction writes (`read_model_position()`,
/// `migrations/…_feed_positions_across_histories.sql`), as a sub-select: PostgreSQL
/// evaluates it once per statement, not once per row.
const POSITION: &str = "(select read_model_position())";

/// The batch upsert of `table`: one `unnest` of each column's array (the key's four,
/// then `data`, bound in that order), guarded by the version, so duplicates,
/// redeliveries and out-of-order arrival converge on the highest version. Every column
/// takes the winning row's value: a tombstone (archived or deleted, which carry no data)
/// holds none, so the row is a function of the highest version alone.
///
/// Every row written also takes the writing transaction's feed position, which orders the
/// changes feed. No lock is taken for it: the feed serves a transaction's rows only once
/// every older writer of the read model has ended.
///
/// With `records_applied`, the statement also records the stream sequences bound after
/// `data`, of the stream bound after them, as applied ([`APPLIED`]), in the same
/// transaction as the rows.
fn upsert_sql(table: &str, data: &[Written], commit: Commit, records_applied: bool) -> String {
    let written: Vec<&Written> = KEY_COLUMNS.iter().chain(data).collect();
    let columns: Vec<&str> = written.iter().map(|column| column.column).collect();
    let arrays: Vec<String> =
        written.iter().enumerate().map(|(index, column)| format!("${}::{}[]", index + 1, column.sent_as)).collect();
    let selected: Vec<String> = written.iter().map(|column| column.selected()).collect();
    let incoming: Vec<String> = columns.iter().map(|column| format!("incoming.{column}")).collect();
    let updates: Vec<String> =
        data.iter().map(|Written { column, .. }| format!("{column} = excluded.{column}")).collect();
    let applied = if records_applied {
        format!(
            "applied as (insert into {APPLIED} (stream, sequences) select ${}, range_agg(int8range(s, s, '[]')) \
             from unnest(${}::int8[]) as s), ",
            written.len() + 2,
            written.len() + 1
        )
    } else {
        String::new()
    };
    format!(
        "with {setting}{applied}incoming as (
             select {selected}, {POSITION} as {CHANGE_TRANSACTION} from {source}unnest({arrays}) as u({columns})
         )
         insert into {table} as t ({columns}, {CHANGE_TRANSACTION})
         select {incoming}, incoming.{CHANGE_TRANSACTION} from incoming
         on conflict (workspace_id, id) do update set
             version = excluded.version, status = excluded.status, {updates},
             {CHANGE_TRANSACTION} = excluded.{CHANGE_TRANSACTION}
         where t.version < excluded.version",
        setting = commit.setting(),
        source = commit.source(),
        columns = columns.join(", "),
        selected = selected.join(", "),
        incoming = incoming.join(", "),
        arrays = arrays.join(", "),
        updates = updates.join(", "),
    )
}

/// The position of `column` in `columns`, for decoders that read by position: used in
/// a `const` block, a column that is not selected is a compile error.
const fn position(columns: &[&str], column: &str) -> usize {
    let mut index = 0;
    while index < columns.len() {
        if same(columns[index].as_bytes(), column.as_bytes()) {
            return index;
        }
        index += 1;
    }
    panic!("the column is not among those selected")
}

const fn same(left: &[u8], right: &[u8]) -> bool {
    if left.len() != right.len() {
        return false;
    }
    let mut index = 0;
    while index < left.len() {
        if left[index] != right[index] {
            return false;
        }
        index += 1;
    }
    true
}

/// The columns a decoder reads, once: as a list for [`position`] and as SQL. A column
/// may be read through a cast (`"sale_price_amount" :: "text"`), still under its name.
macro_rules! selected_columns {
    ($(#[$meta:meta])* $first:literal $(:: $first_cast:literal)? $(, $column:literal $(:: $cast:literal)?)* $(,)?) => {
        $(#[$meta])*
        pub const SELECTED: &[&str] = &[$first $(, $column)*];
        /// [`SELECTED`] as a select list.
        pub const SELECT_LIST: &str = concat!(
            $crate::selected_column!($first $(:: $first_cast)?)
            $(, ", ", $crate::selected_column!($column $(:: $cast)?))*
        );
    };
}
pub(crate) use selected_columns;

/// One entry of a select list: the column, or its cast under its own name.
macro_rules! selected_column {
    ($column:literal) => {
        $column
    };
    ($column:literal :: $cast:literal) => {
        concat!($column, "::", $cast, " as ", $column)
    };
}
pub(crate) use selected_column;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_column_is_found_at_its_position() {
        assert_eq!(position(&["id", "name", "email"], "email"), 2);
        assert_eq!(const { position(&["id", "name"], "id") }, 0);
    }

    #[test]
    fn the_upsert_lists_every_column_once_and_binds_one_array_each() {
        let data = [Written::as_sent("name", "text"), Written::cast("amount", "text", "numeric")];
        let sql = upsert_sql("items", &data, Commit::WithTheTransaction, false);
        assert!(
            sql.contains("insert into items as t (workspace_id, id, version, status, name, amount, change_xid)"),
            "{sql}"
        );
        assert!(sql.contains("select u.workspace_id, u.id, u.version, u.status, u.name, u.amount::numeric, "), "{sql}");
        assert!(
            sql.contains("unnest($1::uuid[], $2::uuid[], $3::int8[], $4::text[], $5::text[], $6::text[])"),
            "{sql}"
        );
        assert!(sql.contains("name = excluded.name, amount = excluded.amount"), "{sql}");
        assert!(!sql.contains(APPLIED), "records nothing unless asked: {sql}");
    }

    #[test]
    fn the_position_is_taken_once_per_statement_and_the_applied_sequences_and_their_stream_follow_the_data() {
        let data = [Written::as_sent("name", "text")];
        let sql = upsert_sql("items", &data, Commit::OnItsOwnBeforeFlush, true);
        assert!(sql.contains("(select read_model_position()) as change_xid"), "{sql}");
        assert!(sql.contains(&format!("insert into {APPLIED} (stream, sequences) select $7,")), "{sql}");
        assert!(sql.contains("unnest($6::int8[]) as s"), "the sequences are the parameter after the data: {sql}");
    }

    mod cast {
        crate::selected_columns! { "id", "amount" :: "text", "currency" }
    }

    #[test]
    fn a_cast_column_is_selected_under_its_own_name() {
        assert_eq!(cast::SELECTED, ["id", "amount", "currency"]);
        assert_eq!(cast::SELECT_LIST, "id, amount::text as amount, currency");
    }
}
