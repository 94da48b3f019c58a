//! What every collection endpoint shares: its parameters, keyset positions, signed
//! cursors and page assembly. A resource plugs in with [`Resource`]; nothing here knows
//! about contacts or items.

pub mod cursor;
mod page;
pub(crate) mod params;

use chrono::{DateTime, Utc};
use uuid::Uuid;

pub use page::PageInfo;
pub(crate) use params::query_enum;
pub use params::{CursorToken, Limit, SearchText, SortKey};

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

/// A resource's type filter (`type=`): its name in cursors and its SQL condition.
pub trait KindFilter: Copy + Send + Sync {
    fn as_str(self) -> &'static str;
    /// A condition on the resource's table, or `None` for "all".
    fn condition(self) -> Option<&'static str>;
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
