//! Page assembly: fetch one record more than asked, and the extra one says whether a
//! next page exists (no count query, no second round trip).

use poem_openapi::Object;

use super::cursor::{CursorScope, CursorSigner};
use super::Keyed;

/// The contract's Page object.
#[derive(Debug, Object, serde::Serialize)]
#[oai(rename = "Page", rename_all = "camelCase", deny_unknown_fields)]
#[serde(rename_all = "camelCase")]
pub struct PageInfo {
    /// True when another page follows; pass `nextCursor` to get it.
    pub has_more: bool,
    /// The cursor of the next page, or null on the last page.
    #[oai(nullable, validator(min_length = 1))]
    pub next_cursor: Option<String>,
}

/// Cuts `rows` (fetched with `limit + 1`) to the page and signs the next cursor.
pub fn paginate<R: Keyed>(
    mut rows: Vec<R>,
    limit: usize,
    signer: &CursorSigner,
    scope: &CursorScope<'_>,
) -> (Vec<R>, PageInfo) {
    let has_more = rows.len() > limit;
    rows.truncate(limit);
    let next_cursor = match rows.last() {
        Some(last) if has_more => Some(signer.issue(scope, &last.position(scope.sort))),
        _ => None,
    };
    (rows, PageInfo { has_more, next_cursor })
}
