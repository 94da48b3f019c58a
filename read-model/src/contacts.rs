//! The `contacts` table, defined once: the columns the API reads and how it decodes
//! them, the columns a batch writes and how it fills them from [`ContactData`].
//!
//! Adding a field: its column in a migration, its field in `lectern_schema::contact`,
//! and here one entry in [`SELECTED`], one line in [`decode`], one in `DATA_COLUMNS`
//! and one in [`Batch`]. The compiler points at `decode` and `Batch::push`;
//! `tests/tests/api/columns.rs` at a column left out anywhere else.

use chrono::{DateTime, Utc};
use lectern_schema::contact::ContactData;
use lectern_schema::ContactRef;
use sqlx::postgres::PgRow;
use sqlx::{PgConnection, Row};

use crate::values::{instant, optional_text, text};
use crate::{names, position, selected_columns, upsert_sql, AppliedSequences, Commit, Key, Keys, Written};

/// The table.
pub const TABLE: &str = "contacts";

selected_columns! {
    /// What the API selects of a contact, read by name (at compile time) in [`decode`].
    "id", "name", "email", "phone", "address", "tin", "is_customer", "is_supplier", "created_at"
}

/// The searchable columns, for the exact per-field check a search containing a newline
/// needs (the search document joins them with newlines).
pub const SEARCH_FIELDS: &[&str] = &["name", "email", "phone", "tin"];

/// A selected row as served. By position and without sqlx's type check: the statement
/// selects [`SELECT_LIST`], and every column passes through the API's tests. Looking
/// each column up by name and checking its type was a tenth of a page's CPU.
pub fn decode(row: &PgRow) -> Result<ContactRef<'_>, sqlx::Error> {
    const fn at(column: &str) -> usize {
        position(SELECTED, column)
    }
    Ok(ContactRef {
        id: row.try_get_unchecked(const { at("id") })?,
        name: text(row, const { at("name") })?,
        email: optional_text(row, const { at("email") })?,
        phone: optional_text(row, const { at("phone") })?,
        address: optional_text(row, const { at("address") })?,
        tin: optional_text(row, const { at("tin") })?,
        is_customer: row.try_get_unchecked(const { at("is_customer") })?,
        is_supplier: row.try_get_unchecked(const { at("is_supplier") })?,
        created_at: instant(row, const { at("created_at") })?,
    })
}

/// The columns a batch writes after the key, in the order [`Batch::write`] binds them.
const DATA_COLUMNS: &[Written] = &[
    Written::as_sent("name", "text"),
    Written::as_sent("email", "text"),
    Written::as_sent("phone", "text"),
    Written::as_sent("address", "text"),
    Written::as_sent("tin", "text"),
    Written::as_sent("is_customer", "bool"),
    Written::as_sent("is_supplier", "bool"),
    Written::as_sent("created_at", "timestamptz"),
];

/// Every column a batch writes, the key's first: all the table's columns but the
/// generated ones.
pub fn written_columns() -> Vec<&'static str> {
    names(DATA_COLUMNS)
}

/// Rows to write, one array per column; a tombstone's data columns are null.
#[derive(Debug, Default)]
pub struct Batch {
    keys: Keys,
    name: Vec<Option<String>>,
    email: Vec<Option<String>>,
    phone: Vec<Option<String>>,
    address: Vec<Option<String>>,
    tin: Vec<Option<String>>,
    is_customer: Vec<Option<bool>>,
    is_supplier: Vec<Option<bool>>,
    created_at: Vec<Option<DateTime<Utc>>>,
}

impl Batch {
    /// Adds the row `key` with `data` (`None` for a tombstone).
    pub fn push(&mut self, key: Key, data: Option<&ContactData>) {
        self.keys.push(key);
        // Destructured whole: a field added to the contract is a compile error here.
        match data {
            Some(ContactData { name, email, phone, address, tin, is_customer, is_supplier, created_at }) => {
                self.name.push(Some(name.clone()));
                self.email.push(email.clone());
                self.phone.push(phone.clone());
                self.address.push(address.clone());
                self.tin.push(tin.clone());
                self.is_customer.push(Some(*is_customer));
                self.is_supplier.push(Some(*is_supplier));
                self.created_at.push(Some(created_at.as_datetime()));
            }
            None => {
                self.name.push(None);
                self.email.push(None);
                self.phone.push(None);
                self.address.push(None);
                self.tin.push(None);
                self.is_customer.push(None);
                self.is_supplier.push(None);
                self.created_at.push(None);
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Writes every row in one statement on `connection`, committed as `commit` says.
    pub async fn write(&self, connection: &mut PgConnection, commit: Commit) -> Result<(), sqlx::Error> {
        self.write_to(connection, TABLE, commit).await
    }

    /// Writes every row into `table`, a table of [`TABLE`]'s columns (a model built
    /// beside the live one: `verify`'s, `rebuild`'s), as [`Batch::write`] does.
    pub async fn write_to(
        &self,
        connection: &mut PgConnection,
        table: &str,
        commit: Commit,
    ) -> Result<(), sqlx::Error> {
        self.write_recording(connection, table, commit, None).await
    }

    /// Writes every row into `table`, as [`Batch::write_to`] does, and in the same
    /// statement records `applied`, the stream sequences the rows come from, as applied
    /// ([`crate::APPLIED`]).
    pub async fn write_recording(
        &self,
        connection: &mut PgConnection,
        table: &str,
        commit: Commit,
        applied: Option<AppliedSequences<'_>>,
    ) -> Result<(), sqlx::Error> {
        let sql = upsert_sql(table, DATA_COLUMNS, commit, applied.is_some());
        let query = self
            .keys
            .bound(&sql)
            .bind(&self.name)
            .bind(&self.email)
            .bind(&self.phone)
            .bind(&self.address)
            .bind(&self.tin)
            .bind(&self.is_customer)
            .bind(&self.is_supplier)
            .bind(&self.created_at);
        match applied {
            Some(applied) => query.bind(applied.sequences).bind(applied.stream).execute(connection).await?,
            None => query.execute(connection).await?,
        };
        Ok(())
    }
}
