//! The `items` table as the API serves it; its columns and decoder are
//! [`lectern_read_model::items`]'s.

use std::str::Utf8Error;

use lectern_read_model::items;
use lectern_schema::ItemRef;
use sqlx::postgres::PgRow;

use super::{KindFilter, Ordered, Resource, SortKeys};
use crate::query_values::query_enum;

query_enum! {
    /// `type` of listItems: which items to list.
    ItemKind { All = "all", Product = "product", Service = "service" }
}

impl KindFilter for ItemKind {
    fn as_str(self) -> &'static str {
        ItemKind::as_str(self)
    }

    fn condition(self) -> Option<&'static str> {
        match self {
            Self::All => None,
            Self::Product => Some("type = 'product'"),
            Self::Service => Some("type = 'service'"),
        }
    }
}

pub struct Items;

impl Resource for Items {
    const NAME: &'static str = items::TABLE;
    const COLUMNS: &'static str = items::SELECT_LIST;
    const SEARCH_FIELDS: &'static [&'static str] = items::SEARCH_FIELDS;
    type Kind = ItemKind;
    type Record<'r> = ItemRef<'r>;

    fn record(row: &PgRow) -> Result<ItemRef<'_>, sqlx::Error> {
        items::decode(row)
    }
}

impl Ordered for ItemRef<'_> {
    fn sort_keys(&self) -> Result<SortKeys<'_>, Utf8Error> {
        Ok(SortKeys { id: self.id, created_at: self.created_at.as_datetime(), name: self.name.as_str()? })
    }
}
