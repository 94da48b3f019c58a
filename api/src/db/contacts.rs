//! The `contacts` table as the API reads it.

use chrono::{DateTime, Utc};
use lectern_schema::Contact;
use uuid::Uuid;

use super::listing::Resource;
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

/// One active contact row.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct ContactRow {
    pub id: Uuid,
    pub name: String,
    pub email: Option<String>,
    pub phone: Option<String>,
    pub address: Option<String>,
    pub tin: Option<String>,
    pub is_customer: bool,
    pub is_supplier: bool,
    pub created_at: DateTime<Utc>,
}

const COLUMNS: &str = "id, name, email, phone, address, tin, is_customer, is_supplier, created_at";

pub struct Contacts;

impl Resource for Contacts {
    const NAME: &'static str = "contacts";
    const COLUMNS: &'static str = COLUMNS;
    const SEARCH_FIELDS: &'static [&'static str] = &["name", "email", "phone", "tin"];
    type Kind = ContactType;
    type Row = ContactRow;
}

impl Keyed for ContactRow {
    fn position(&self, sort: SortKey) -> Position {
        match sort {
            SortKey::CreatedAt => Position::CreatedAt { at: self.created_at, id: self.id },
            SortKey::Name => Position::Name { name: self.name.clone(), id: self.id },
        }
    }
}

impl From<ContactRow> for Contact {
    fn from(row: ContactRow) -> Self {
        Self {
            id: row.id,
            name: row.name,
            email: row.email,
            phone: row.phone,
            address: row.address,
            tin: row.tin,
            is_customer: row.is_customer,
            is_supplier: row.is_supplier,
            created_at: row.created_at.into(),
        }
    }
}
