//! The resources the API serves, each a table of the read model: what every feature
//! needs to know of one (its table, its columns, how a row is read and written as
//! JSON, its `type` filter), and nothing of how a feature uses it.
//!
//! - [`contacts`]: customers and suppliers.
//! - [`items`]: products and services.

pub mod contacts;
pub mod items;

use std::str::Utf8Error;

use chrono::{DateTime, Utc};
use sqlx::postgres::PgRow;
use uuid::Uuid;

/// A table that can be listed and read by id. Implemented once per resource.
pub trait Resource: 'static {
    /// Table name, also the resource name bound into cursors.
    const NAME: &'static str;
    /// The columns a record is read from, in SQL, in the order [`Resource::record`]
    /// reads them.
    const COLUMNS: &'static str;
    /// The searchable columns, for the exact per-field check a search containing a
    /// newline needs (the index document joins fields with newlines).
    const SEARCH_FIELDS: &'static [&'static str];
    type Kind: KindFilter;
    /// One record as served, borrowing its text from the row it was read from: a page
    /// is written from the rows PostgreSQL sent, without a copy of each field.
    type Record<'r>: Ordered + lectern_schema::json::WriteJson;
    /// Reads a row that starts with [`Resource::COLUMNS`].
    fn record(row: &PgRow) -> Result<Self::Record<'_>, sqlx::Error>;
}

/// What a record's place in either listing order is made of.
pub trait Ordered {
    /// Fails only when the stored name is not UTF-8.
    fn sort_keys(&self) -> Result<SortKeys<'_>, Utf8Error>;
}

/// A record's id, creation time and name: what the listing orders sort by.
pub struct SortKeys<'a> {
    pub id: Uuid,
    pub created_at: DateTime<Utc>,
    pub name: &'a str,
}

/// A resource's type filter (`type=`): its name in cursors and its SQL condition.
pub trait KindFilter: Copy + Send + Sync {
    fn as_str(self) -> &'static str;
    /// A condition on the resource's table, or `None` for "all".
    fn condition(self) -> Option<&'static str>;
}

/// Room for one record's JSON, so a body's buffer is allocated once.
pub const RECORD_BYTES: usize = 384;
