//! `listItems` and `getItem`: products and services (`docs/api.md`, "Item").

use std::sync::Arc;

use lectern_schema::Item;
use poem::web::Data;
use poem_openapi::param::{Path, Query};
use poem_openapi::{Object, OpenApi};

use super::auth::ItemsReader;
use super::contracts::{
    feed_limit_example, id_example, limit_example, sort_example, wait_example, ChangeType, ChangesError, ChangesQuery,
    GetError, ListError, ListQuery, NoQuery, RecordId,
};
use super::long_poll::WaitSlot;
use super::payload::{Described, JsonBody};
use super::request_id::RequestId;
use super::strict_query::StrictQuery;
use crate::app::AppState;
use crate::error::ApiError;
use crate::feed::params::{FeedLimit, Since, WaitSeconds};
use crate::feed::ChangesParams;
use crate::listing::page::PageInfo;
use crate::listing::params::{CursorToken, Limit, SearchText, SortKey};
use crate::listing::ListParams;
use crate::resources::items::{ItemKind, Items};

/// A page of items.
#[derive(Debug, Object, serde::Serialize)]
#[oai(rename_all = "camelCase", deny_unknown_fields)]
#[serde(rename_all = "camelCase")]
pub struct ItemList {
    pub data: Vec<Item>,
    pub page: PageInfo,
    pub request_id: RequestId,
}

impl Described for ItemList {
    const DESCRIPTION: &'static str =
        "A page of the workspace's active items; `page.nextCursor` leads to the next one.";
}

/// One change in the items feed. The document states it more exactly than this struct
/// can, as a union discriminated by `change` (`http::openapi::discriminate_changes`).
#[derive(Debug, Object, serde::Serialize)]
#[oai(rename_all = "camelCase", deny_unknown_fields)]
#[serde(rename_all = "camelCase")]
pub struct ItemChange {
    /// The item's id.
    pub id: uuid::Uuid,
    /// `upserted`: the item is active now; `removed`: it is archived or deleted.
    pub change: ChangeType,
    /// The item as the listing serves it, or null when removed.
    #[oai(nullable)]
    pub record: Option<Item>,
}

/// A page of the items feed.
#[derive(Debug, Object, serde::Serialize)]
#[oai(rename_all = "camelCase", deny_unknown_fields)]
#[serde(rename_all = "camelCase")]
pub struct ItemChanges {
    /// The items whose last change comes after `since`, in commit order, each once.
    pub data: Vec<ItemChange>,
    /// True: more changes are ready now; call again at once with `syncToken`.
    pub has_more: bool,
    /// Where the next call starts; pass it as `since`. Sync tokens never expire: keep the
    /// last one for the next sync, however far off.
    #[oai(validator(min_length = 1))]
    pub sync_token: String,
    pub request_id: RequestId,
}

impl Described for ItemChanges {
    const DESCRIPTION: &'static str =
        "The items changed after `since`, in commit order, and the token to continue from.";
}

/// One item.
#[derive(Debug, Object, serde::Serialize)]
#[oai(rename_all = "camelCase", deny_unknown_fields)]
#[serde(rename_all = "camelCase")]
pub struct ItemEnvelope {
    pub data: Item,
    pub request_id: RequestId,
}

impl Described for ItemEnvelope {
    const DESCRIPTION: &'static str = "The item, active and in the key's workspace.";
}

/// listItems' query parameters.
pub type ListItemsQuery = ListQuery<Items>;

/// The example search the document gives (see [`limit_example`]).
fn search_example() -> Option<SearchText> {
    "widget".parse().ok()
}

/// The example `type` the document gives.
fn kind_example() -> ItemKind {
    ItemKind::Service
}

#[derive(Debug, poem_openapi::Tags)]
enum Tags {
    /// Products and services.
    Items,
}

/// The items area.
#[derive(Debug)]
pub struct ItemsApi;

#[OpenApi(prefix_path = "/v1", tag = "Tags::Items")]
impl ItemsApi {
    /// List active items
    ///
    /// Active products and services of the key's workspace, in pages. Ordered ascending
    /// by `createdAt` (default) or `name`, ties broken by `id`. Pass `page.nextCursor` as
    /// `cursor` to get the next page, with the same `search`, `type` and `sort`.
    #[expect(clippy::too_many_arguments, reason = "poem-openapi takes each query parameter as an argument of its own")]
    #[oai(path = "/items", method = "get", operation_id = "listItems")]
    async fn list_items(
        &self,
        state: Data<&Arc<AppState>>,
        request_id: Data<&RequestId>,
        key: ItemsReader,
        _strict: StrictQuery<ListItemsQuery>,
        /// Case-insensitive substring of name, sku or description; `%`, `_` and `\`
        /// match themselves. Empty means no filter.
        #[oai(example = "search_example")]
        search: Query<Option<SearchText>>,
        /// The `page.nextCursor` of the previous page, unchanged.
        cursor: Query<Option<CursorToken>>,
        /// Page size.
        #[oai(default, example = "limit_example")]
        limit: Query<Limit>,
        /// `product` or `service`; `all` lists both.
        #[oai(name = "type", default, example = "kind_example")]
        kind: Query<ItemKind>,
        /// Sort order, always ascending with ties broken by id.
        #[oai(default, example = "sort_example")]
        sort: Query<SortKey>,
    ) -> Result<JsonBody<ItemList>, ListError> {
        let params = ListParams { search: search.0, cursor: cursor.0, limit: limit.0, kind: kind.0, sort: sort.0 };
        let page = state.listing.page::<Items>(key.0.workspace_id, params, request_id.as_str()).await?;
        Ok(JsonBody::assembled(page))
    }

    /// List changes to items
    ///
    /// The items of the key's workspace that changed after `since`, in the order the
    /// changes were committed, each once at its state now: `upserted` with the record
    /// when it is active, `removed` when it is archived or deleted. Without `since` the
    /// feed starts at the beginning, so every item the workspace ever had appears.
    /// Follow `syncToken` while `hasMore` is true; keep the last one for the next sync.
    #[expect(clippy::too_many_arguments, reason = "poem-openapi takes each query parameter as an argument of its own")]
    #[oai(path = "/items/changes", method = "get", operation_id = "listItemChanges")]
    async fn list_item_changes(
        &self,
        state: Data<&Arc<AppState>>,
        request_id: Data<&RequestId>,
        waits: Data<&WaitSlot>,
        key: ItemsReader,
        _strict: StrictQuery<ChangesQuery<Items>>,
        /// A `syncToken` of an earlier response of this operation, unchanged; `latest` for
        /// a token at the newest change with no data; absent to start from the beginning.
        since: Query<Option<Since>>,
        /// Most changes in the response.
        #[oai(default, example = "feed_limit_example")]
        limit: Query<FeedLimit>,
        /// Seconds to hold the request when nothing changed after `since`: it is answered
        /// as soon as a change commits, or after this long with no data.
        #[oai(default, example = "wait_example")]
        wait: Query<WaitSeconds>,
    ) -> Result<JsonBody<ItemChanges>, ChangesError> {
        let params = ChangesParams { since: since.0, limit: limit.0, wait: wait.0 };
        // Boxed, as in `listContactChanges`.
        let answer = Box::pin(state.feeds.page::<Items>(&key.0, params, request_id.as_str())).await?;
        Ok(JsonBody::assembled(waits.body_of(answer)))
    }

    /// Retrieve an active item
    ///
    /// An id that is unknown, inactive or in another workspace is the same 404.
    #[oai(path = "/items/:id", method = "get", operation_id = "getItem")]
    async fn get_item(
        &self,
        state: Data<&Arc<AppState>>,
        request_id: Data<&RequestId>,
        key: ItemsReader,
        _strict: StrictQuery<NoQuery>,
        /// The item's id.
        #[oai(name = "id", example = "id_example")]
        id: Path<RecordId>,
    ) -> Result<JsonBody<ItemEnvelope>, GetError> {
        let id = id.0.parse()?;
        let body = state.retrieves.item(key.0.workspace_id, id, request_id.as_str()).await?;
        let body =
            body.ok_or_else(|| ApiError::NotFound("No active item with this id in this workspace.".to_owned()))?;
        Ok(JsonBody::assembled(body))
    }
}
