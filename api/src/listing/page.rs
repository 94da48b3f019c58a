//! The contract's Page object. A listing fetches one record more than asked, and the
//! extra one says whether a next page exists (no count query, no second round trip);
//! see `http::collection::RenderedPage`.

use poem_openapi::Object;

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
