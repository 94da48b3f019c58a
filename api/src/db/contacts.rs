//! The `contacts` table as the API reads it.

use std::str::Utf8Error;

use lectern_schema::ContactRef;
use sqlx::postgres::PgRow;
use sqlx::Row;

use super::listing::Resource;
use super::values::{instant, optional_text, text};
use crate::listing::{query_enum, Keyed, KindFilter, Position, SortKey};

query_enum! {
    /// `type` of listContacts: which contacts to list.
    ContactType { All = "all", Customer = "customer", Supplier = "supplier" }
}

impl KindFilter for ContactType {
    fn as_str(self) -> &'static str {
        ContactType::as_str(self)
    }

    fn condition(self) -> Option<&'static str> {
        match self {
            Self::All => None,
            Self::Customer => Some("is_customer"),
            Self::Supplier => Some("is_supplier"),
        }
    }
}

/// Read by position in [`Contacts::record`]: keep the two in the same order.
const COLUMNS: &str = "id, name, email, phone, address, tin, is_customer, is_supplier, created_at";

pub struct Contacts;

impl Resource for Contacts {
    const NAME: &'static str = "contacts";
    const COLUMNS: &'static str = COLUMNS;
    const SEARCH_FIELDS: &'static [&'static str] = &["name", "email", "phone", "tin"];
    type Kind = ContactType;
    type Record<'r> = ContactRef<'r>;

    fn record(row: &PgRow) -> Result<ContactRef<'_>, sqlx::Error> {
        // By position and without sqlx's type check: the statement is this module's
        // own, and every column passes through the API's tests. Looking each column up
        // by name and checking its type was a tenth of a page's CPU.
        Ok(ContactRef {
            id: row.try_get_unchecked(0)?,
            name: text(row, 1)?,
            email: optional_text(row, 2)?,
            phone: optional_text(row, 3)?,
            address: optional_text(row, 4)?,
            tin: optional_text(row, 5)?,
            is_customer: row.try_get_unchecked(6)?,
            is_supplier: row.try_get_unchecked(7)?,
            created_at: instant(row, 8)?,
        })
    }
}

impl Keyed for ContactRef<'_> {
    fn position(&self, sort: SortKey) -> Result<Position, Utf8Error> {
        Ok(Position::of(sort, self.created_at.as_datetime(), self.name.as_str()?, self.id))
    }
}
