//! `listContacts` and `getContact`.

use std::sync::Arc;

use lectern_schema::Contact;
use poem::web::Data;
use poem_openapi::param::{Path, Query};
use poem_openapi::{Object, OpenApi};

use super::auth::ContactsReader;
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
use crate::resources::contacts::{ContactType, Contacts};

/// A page of contacts.
#[derive(Debug, Object, serde::Serialize)]
#[oai(rename_all = "camelCase", deny_unknown_fields)]
#[serde(rename_all = "camelCase")]
pub struct ContactList {
    pub data: Vec<Contact>,
    pub page: PageInfo,
    pub request_id: RequestId,
}

impl Described for ContactList {
    const DESCRIPTION: &'static str =
        "A page of the workspace's active contacts; `page.nextCursor` leads to the next one.";
}

/// One change in the contacts feed. The document states it more exactly than this struct
/// can, as a union discriminated by `change` (`http::openapi::discriminate_changes`).
#[derive(Debug, Object, serde::Serialize)]
#[oai(rename_all = "camelCase", deny_unknown_fields)]
#[serde(rename_all = "camelCase")]
pub struct ContactChange {
    /// The contact's id.
    pub id: uuid::Uuid,
    /// `upserted`: the contact is active now; `removed`: it is archived or deleted.
    pub change: ChangeType,
    /// The contact as the listing serves it, or null when removed.
    #[oai(nullable)]
    pub record: Option<Contact>,
}

/// A page of the contacts feed.
#[derive(Debug, Object, serde::Serialize)]
#[oai(rename_all = "camelCase", deny_unknown_fields)]
#[serde(rename_all = "camelCase")]
pub struct ContactChanges {
    /// The contacts whose last change comes after `since`, in commit order, each once.
    pub data: Vec<ContactChange>,
    /// True: more changes are ready now; call again at once with `syncToken`.
    pub has_more: bool,
    /// Where the next call starts; pass it as `since`. Sync tokens never expire: keep the
    /// last one for the next sync, however far off.
    #[oai(validator(min_length = 1))]
    pub sync_token: String,
    pub request_id: RequestId,
}

impl Described for ContactChanges {
    const DESCRIPTION: &'static str =
        "The contacts changed after `since`, in commit order, and the token to continue from.";
}

/// One contact.
#[derive(Debug, Object, serde::Serialize)]
#[oai(rename_all = "camelCase", deny_unknown_fields)]
#[serde(rename_all = "camelCase")]
pub struct ContactEnvelope {
    pub data: Contact,
    pub request_id: RequestId,
}

impl Described for ContactEnvelope {
    const DESCRIPTION: &'static str = "The contact, active and in the key's workspace.";
}

/// listContacts' query parameters.
pub type ListContactsQuery = ListQuery<Contacts>;

/// The example search the document gives (see [`limit_example`]).
fn search_example() -> Option<SearchText> {
    "acme".parse().ok()
}

/// The example `type` the document gives.
fn kind_example() -> ContactType {
    ContactType::Customer
}

#[derive(Debug, poem_openapi::Tags)]
enum Tags {
    /// Customers and suppliers.
    Contacts,
}

/// The contacts area.
#[derive(Debug)]
pub struct ContactsApi;

#[OpenApi(prefix_path = "/v1", tag = "Tags::Contacts")]
impl ContactsApi {
    /// List active contacts
    ///
    /// Active contacts of the key's workspace, in pages. Ordered ascending by
    /// `createdAt` (default) or `name`, ties broken by `id`. Pass `page.nextCursor` as
    /// `cursor` to get the next page, with the same `search`, `type` and `sort`.
    #[expect(clippy::too_many_arguments, reason = "poem-openapi takes each query parameter as an argument of its own")]
    #[oai(path = "/contacts", method = "get", operation_id = "listContacts")]
    async fn list_contacts(
        &self,
        state: Data<&Arc<AppState>>,
        request_id: Data<&RequestId>,
        key: ContactsReader,
        _strict: StrictQuery<ListContactsQuery>,
        /// Case-insensitive substring of name, email, phone or tin; `%`, `_` and `\`
        /// match themselves. Empty means no filter.
        #[oai(example = "search_example")]
        search: Query<Option<SearchText>>,
        /// The `page.nextCursor` of the previous page, unchanged.
        cursor: Query<Option<CursorToken>>,
        /// Page size.
        #[oai(default, example = "limit_example")]
        limit: Query<Limit>,
        /// `customer`: isCustomer is true; `supplier`: isSupplier is true.
        #[oai(name = "type", default, example = "kind_example")]
        kind: Query<ContactType>,
        /// Sort order, always ascending with ties broken by id.
        #[oai(default, example = "sort_example")]
        sort: Query<SortKey>,
    ) -> Result<JsonBody<ContactList>, ListError> {
        let params = ListParams { search: search.0, cursor: cursor.0, limit: limit.0, kind: kind.0, sort: sort.0 };
        let page = state.listing.page::<Contacts>(key.0.workspace_id, params, request_id.as_str()).await?;
        Ok(JsonBody::assembled(page))
    }

    /// List changes to contacts
    ///
    /// The contacts of the key's workspace that changed after `since`, in the order the
    /// changes were committed, each once at its state now: `upserted` with the record
    /// when it is active, `removed` when it is archived or deleted. Without `since` the
    /// feed starts at the beginning, so every contact the workspace ever had appears.
    /// Follow `syncToken` while `hasMore` is true; keep the last one for the next sync.
    #[expect(clippy::too_many_arguments, reason = "poem-openapi takes each query parameter as an argument of its own")]
    #[oai(path = "/contacts/changes", method = "get", operation_id = "listContactChanges")]
    async fn list_contact_changes(
        &self,
        state: Data<&Arc<AppState>>,
        request_id: Data<&RequestId>,
        waits: Data<&WaitSlot>,
        key: ContactsReader,
        _strict: StrictQuery<ChangesQuery<Contacts>>,
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
    ) -> Result<JsonBody<ContactChanges>, ChangesError> {
        let params = ChangesParams { since: since.0, limit: limit.0, wait: wait.0 };
        // Boxed, so that the operation's future is not as large as the feed's.
        let answer = Box::pin(state.feeds.page::<Contacts>(&key.0, params, request_id.as_str())).await?;
        Ok(JsonBody::assembled(waits.body_of(answer)))
    }

    /// Retrieve an active contact
    ///
    /// An id that is unknown, inactive or in another workspace is the same 404.
    #[oai(path = "/contacts/:id", method = "get", operation_id = "getContact")]
    async fn get_contact(
        &self,
        state: Data<&Arc<AppState>>,
        request_id: Data<&RequestId>,
        key: ContactsReader,
        _strict: StrictQuery<NoQuery>,
        /// The contact's id.
        #[oai(name = "id", example = "id_example")]
        id: Path<RecordId>,
    ) -> Result<JsonBody<ContactEnvelope>, GetError> {
        let id = id.0.parse()?;
        let body = state.retrieves.contact(key.0.workspace_id, id, request_id.as_str()).await?;
        let body =
            body.ok_or_else(|| ApiError::NotFound("No active contact with this id in this workspace.".to_owned()))?;
        Ok(JsonBody::assembled(body))
    }
}
