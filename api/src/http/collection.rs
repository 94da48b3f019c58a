//! Serving one page of any listed resource: cursor check, query (or the first-page
//! cache), and the body, whose `data` array is written once per page read.

use std::sync::Arc;

use crate::db::first_pages::PageKey;
use crate::db::listing::{fetch_page, Resource};
use crate::error::ApiError;
use crate::keys::Principal;
use crate::listing::cursor::{CursorScope, CursorSigner};
use crate::listing::{CursorToken, Keyed, Limit, ListRequest, PageInfo, Position, SearchText, SortKey};

use super::envelope::error_responses;
use super::payload::write_json;
use super::request_id::RequestId;
use super::strict_query::{parses_as, Parameter, QueryContract};
use super::AppState;

/// The validated query of a listing operation.
#[derive(Debug)]
pub struct ListParams<K> {
    pub search: Option<SearchText>,
    pub cursor: Option<CursorToken>,
    pub limit: Limit,
    pub kind: K,
    pub sort: SortKey,
}

/// A listed resource as the API presents its records.
pub trait Presented: Resource {
    /// Appends `rows` to `out` as the JSON array of the body's `data`.
    fn write_data(rows: Vec<Self::Row>, out: &mut Vec<u8>) -> Result<(), ApiError>;
}

/// One page as it is served: its records' JSON and where the next page starts. This is
/// what the first-page cache keeps, so a cached page is neither copied nor written again.
#[derive(Debug)]
pub struct RenderedPage {
    /// The body's `data` array.
    data: Box<[u8]>,
    /// The last record's position, when another page follows.
    next: Option<Position>,
}

/// Room for one record's JSON, so a page's buffer is allocated once.
const RECORD_BYTES: usize = 384;

impl RenderedPage {
    /// Cuts `rows` (fetched with `limit + 1`) to the page and writes it.
    pub fn new<R: Presented>(mut rows: Vec<R::Row>, limit: usize, sort: SortKey) -> Result<Self, ApiError> {
        let has_more = rows.len() > limit;
        rows.truncate(limit);
        let next = rows.last().filter(|_| has_more).map(|last| last.position(sort));
        let mut data = Vec::with_capacity(2 + rows.len() * RECORD_BYTES);
        R::write_data(rows, &mut data)?;
        Ok(Self { data: data.into_boxed_slice(), next })
    }

    /// Memory the page takes.
    pub fn bytes(&self) -> usize {
        std::mem::size_of::<Self>() + self.data.len()
    }

    /// The listing's body `{data, page, requestId}`, with a freshly signed cursor.
    pub fn body(
        &self,
        signer: &CursorSigner,
        scope: &CursorScope<'_>,
        request_id: &RequestId,
    ) -> Result<Vec<u8>, ApiError> {
        let page = PageInfo {
            has_more: self.next.is_some(),
            next_cursor: self.next.as_ref().map(|next| signer.issue(scope, next)),
        };
        let mut body = Vec::with_capacity(self.data.len() + 320);
        body.extend_from_slice(b"{\"data\":");
        body.extend_from_slice(&self.data);
        body.extend_from_slice(b",\"page\":");
        write_json(&page, &mut body)?;
        body.extend_from_slice(b",\"requestId\":");
        write_json(request_id, &mut body)?;
        body.push(b'}');
        Ok(body)
    }
}

/// The body of one page of `R` in the caller's workspace.
pub async fn list_page<R: Presented>(
    state: &AppState,
    principal: &Principal,
    params: ListParams<R::Kind>,
) -> Result<Vec<u8>, ApiError> {
    use crate::listing::KindFilter;

    let mut request = ListRequest {
        workspace_id: principal.workspace_id,
        search: params.search.and_then(SearchText::into_filter),
        kind: params.kind,
        sort: params.sort,
        limit: params.limit,
        after: None,
    };
    let scope = CursorScope {
        resource: R::NAME,
        workspace_id: request.workspace_id,
        kind: request.kind.as_str(),
        search: request.search.as_ref().map(SearchText::as_str),
        sort: request.sort,
    };
    if let Some(token) = &params.cursor {
        let position =
            state.cursors.open(token.as_str(), &scope).map_err(|problem| ApiError::invalid("cursor", problem))?;
        request.after = Some(position);
    }
    let page = if request.after.is_none() && request.search.is_none() {
        first_page::<R>(state, &request).await?
    } else {
        let rows = fetch_page::<R>(&state.reads, &request).await?;
        Arc::new(RenderedPage::new::<R>(rows, request.limit.get(), request.sort)?)
    };
    page.body(&state.cursors, &scope, &RequestId::current())
}

/// A first page without search: from the cache when the workspace has not changed
/// since it was read, else from the database (and then cached).
async fn first_page<R: Presented>(
    state: &AppState,
    request: &ListRequest<R::Kind>,
) -> Result<Arc<RenderedPage>, ApiError> {
    use crate::listing::KindFilter;

    let key = PageKey {
        resource: R::NAME,
        workspace_id: request.workspace_id,
        kind: request.kind.as_str(),
        sort: request.sort,
        limit: u16::try_from(request.limit.get()).unwrap_or(u16::MAX),
    };
    if let Some(page) = state.first_pages.get::<RenderedPage>(&key) {
        metrics::counter!(crate::operations::names::FIRST_PAGE_CACHE, "result" => "hit").increment(1);
        return Ok(page);
    }
    metrics::counter!(crate::operations::names::FIRST_PAGE_CACHE, "result" => "miss").increment(1);
    let ticket = state.first_pages.ticket(request.workspace_id);
    let rows = fetch_page::<R>(&state.reads, request).await?;
    let page = Arc::new(RenderedPage::new::<R>(rows, request.limit.get(), request.sort)?);
    state.first_pages.put(key, ticket, page.clone(), page.bytes());
    Ok(page)
}

error_responses! {
    /// The errors a listing operation documents.
    ListError {
        BadRequest = 400,
        Unauthorized = 401,
        Forbidden = 403,
        TooManyRequests = 429,
        InternalError = 500,
        ServiceUnavailable = 503,
    }
}

error_responses! {
    /// The errors a retrieve operation documents.
    GetError {
        BadRequest = 400,
        Unauthorized = 401,
        Forbidden = 403,
        NotFound = 404,
        TooManyRequests = 429,
        InternalError = 500,
        ServiceUnavailable = 503,
    }
}

/// The query parameters of every listing; `K` is the resource's `type` filter.
#[derive(Debug)]
pub struct ListQuery<K>(std::marker::PhantomData<K>);

impl<K> QueryContract for ListQuery<K>
where
    K: std::str::FromStr<Err = String> + Send + Sync + 'static,
{
    const PARAMETERS: &'static [Parameter] = &[
        ("search", parses_as::<SearchText>),
        ("cursor", parses_as::<CursorToken>),
        ("limit", parses_as::<Limit>),
        ("type", parses_as::<K>),
        ("sort", parses_as::<SortKey>),
    ];
}

/// Retrieve operations: a record id at the end of the path, no query parameters.
#[derive(Debug)]
pub struct NoQuery;

impl QueryContract for NoQuery {
    const PARAMETERS: &'static [Parameter] = &[];
    const PATH_ENDS_IN_ID: bool = true;
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use chrono::{TimeZone, Utc};
    use lectern_schema::{Contact, Item};
    use secrecy::SecretString;
    use serde_json::Value;
    use uuid::Uuid;

    use super::*;
    use crate::db::contacts::{ContactRow, Contacts};
    use crate::db::items::{ItemRow, Items};
    use crate::http::contacts::ContactList;
    use crate::http::items::ItemList;

    fn contact(n: u128) -> ContactRow {
        ContactRow {
            id: Uuid::from_u128(n),
            name: format!("Müller & \"Söhne\" {n}"),
            email: Some(format!("a{n}@example.com")),
            phone: None,
            address: Some("Hauptstr. 1\nBerlin".to_owned()),
            tin: None,
            is_customer: true,
            is_supplier: n.is_multiple_of(2),
            created_at: Utc.timestamp_opt(1_700_000_000 + n as i64, 120_000_000).unwrap(),
        }
    }

    fn item(n: u128) -> ItemRow {
        ItemRow {
            id: Uuid::from_u128(n),
            name: format!("Consulting ☕ {n}"),
            sku: None,
            description: Some("Per hour".to_owned()),
            kind: "service".to_owned(),
            unit: Some("hour".to_owned()),
            sale_price_amount: Some("0.10".to_owned()),
            sale_price_currency: Some("EUR".to_owned()),
            purchase_price_amount: None,
            purchase_price_currency: None,
            created_at: Utc.timestamp_opt(1_700_000_000 + n as i64, 0).unwrap(),
        }
    }

    fn signer() -> CursorSigner {
        CursorSigner::new(
            SecretString::from("a test cursor secret of enough length".to_owned()),
            Duration::from_secs(60),
        )
    }

    fn scope(resource: &'static str) -> CursorScope<'static> {
        CursorScope { resource, workspace_id: Uuid::from_u128(1), kind: "all", search: None, sort: SortKey::CreatedAt }
    }

    /// The assembled body, parsed, with its cursor (signed at serving time) taken out.
    fn served(page: &RenderedPage, scope: &CursorScope<'_>) -> (Value, Option<String>) {
        let request_id = RequestId::from_client("req-1").unwrap();
        let body: Value = serde_json::from_slice(&page.body(&signer(), scope, &request_id).unwrap()).unwrap();
        let cursor = body["page"]["nextCursor"].as_str().map(str::to_owned);
        (body, cursor)
    }

    #[test]
    fn an_assembled_contact_page_is_exactly_the_documented_list_and_its_cursor_resumes_after_its_last_record() {
        let page = RenderedPage::new::<Contacts>((1..=3).map(contact).collect(), 2, SortKey::CreatedAt).unwrap();
        let scope = scope("contacts");

        let (body, cursor) = served(&page, &scope);

        let documented = ContactList {
            data: (1..=2).map(contact).map(Contact::from).collect(),
            page: PageInfo { has_more: true, next_cursor: cursor.clone() },
            request_id: RequestId::from_client("req-1").unwrap(),
        };
        assert_eq!(body, serde_json::to_value(&documented).unwrap());
        let last = contact(2);
        assert_eq!(
            signer().open(&cursor.unwrap(), &scope).unwrap(),
            Position::CreatedAt { at: last.created_at, id: last.id }
        );
    }

    #[test]
    fn an_assembled_last_item_page_is_exactly_the_documented_list_without_a_cursor() {
        let page = RenderedPage::new::<Items>((1..=2).map(item).collect(), 2, SortKey::CreatedAt).unwrap();

        let (body, cursor) = served(&page, &scope("items"));

        let documented = ItemList {
            data: (1..=2).map(|n| Item::try_from(item(n)).unwrap()).collect(),
            page: PageInfo { has_more: false, next_cursor: None },
            request_id: RequestId::from_client("req-1").unwrap(),
        };
        assert_eq!(cursor, None);
        assert_eq!(body, serde_json::to_value(&documented).unwrap());
    }
}
