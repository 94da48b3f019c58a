//! The `contacts` table as the API serves it; its columns and decoder are
//! [`lectern_read_model::contacts`]'s.

use std::str::Utf8Error;

use lectern_read_model::contacts;
use lectern_schema::ContactRef;
use sqlx::postgres::PgRow;

use super::{KindFilter, Ordered, Resource, SortKeys};
use crate::query_values::query_enum;

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

pub struct Contacts;

impl Resource for Contacts {
    const NAME: &'static str = contacts::TABLE;
    const COLUMNS: &'static str = contacts::SELECT_LIST;
    const SEARCH_FIELDS: &'static [&'static str] = contacts::SEARCH_FIELDS;
    type Kind = ContactType;
    type Record<'r> = ContactRef<'r>;

    fn record(row: &PgRow) -> Result<ContactRef<'_>, sqlx::Error> {
        contacts::decode(row)
    }
}

impl Ordered for ContactRef<'_> {
    fn sort_keys(&self) -> Result<SortKeys<'_>, Utf8Error> {
        Ok(SortKeys { id: self.id, created_at: self.created_at.as_datetime(), name: self.name.as_str()? })
    }
}
