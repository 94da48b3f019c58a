//! One listing request, and where in its order a page starts.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::params::{Limit, SearchText, SortKey};
use crate::resources::Ordered;

/// A position in a listing: the sort key of the last record served, and its id, which
/// breaks ties so the order is total.
#[derive(Clone, Debug, PartialEq)]
pub enum Position {
    CreatedAt { at: DateTime<Utc>, id: Uuid },
    Name { name: String, id: Uuid },
}

impl Position {
    /// Where a record with these keys stands in `sort` order.
    pub fn of(sort: SortKey, created_at: DateTime<Utc>, name: &str, id: Uuid) -> Self {
        match sort {
            SortKey::CreatedAt => Self::CreatedAt { at: created_at, id },
            SortKey::Name => Self::Name { name: name.to_owned(), id },
        }
    }
}

/// A record that can say where it stands in either order.
pub trait Keyed {
    /// Fails only when the name a position by name holds is not UTF-8.
    fn position(&self, sort: SortKey) -> Result<Position, std::str::Utf8Error>;
}

impl<R: Ordered> Keyed for R {
    fn position(&self, sort: SortKey) -> Result<Position, std::str::Utf8Error> {
        let keys = self.sort_keys()?;
        Ok(match sort {
            SortKey::CreatedAt => Position::CreatedAt { at: keys.created_at, id: keys.id },
            SortKey::Name => Position::Name { name: keys.name.to_owned(), id: keys.id },
        })
    }
}

/// One listing request, fully validated.
#[derive(Debug)]
pub struct ListRequest<K> {
    pub workspace_id: Uuid,
    pub search: Option<SearchText>,
    pub kind: K,
    pub sort: SortKey,
    pub limit: Limit,
    pub after: Option<Position>,
}
