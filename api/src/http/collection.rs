//! Serving one page of any listed resource: cursor check, query (or the first-page
//! cache), and the body, whose `data` array is written once per page read.

use std::sync::Arc;

use lectern_schema::json::{write_str, WriteJson};
use poem::Request;
use sqlx::postgres::PgRow;

use crate::db::first_pages::PageKey;
use crate::db::listing::{read_page, Resource, SearchShape};
use crate::db::replicas::WalPosition;
use crate::error::ApiError;
use crate::keys::Principal;
use crate::listing::cursor::{CursorScope, CursorSigner};
use crate::listing::{CursorToken, Keyed, Limit, ListRequest, PageInfo, Position, SearchText, SortKey};

use super::envelope::error_responses;
use super::payload::write_json;
use super::request_id::RequestId;
use super::strict_query::{parses_as, Parameter, QueryContract};
use super::{AppState, RecordId};

/// The validated query of a listing operation.
#[derive(Debug)]
pub struct ListParams<K> {
    pub search: Option<SearchText>,
    pub cursor: Option<CursorToken>,
    pub limit: Limit,
    pub kind: K,
    pub sort: SortKey,
}

/// One page as it is served: its records' JSON and where the next page starts. This is
/// what the first-page cache keeps, so a cached page is neither copied nor written again.
#[derive(Debug)]
pub struct RenderedPage {
    /// The body's `data` array.
    data: Box<[u8]>,
    /// The last record's position, when another page follows.
    next: Option<Position>,
    /// Where in the WAL the page was read: its cursor carries it.
    read_at: WalPosition,
}

/// Room for one record's JSON, so a page's buffer is allocated once.
const RECORD_BYTES: usize = 384;
/// Room for the body around `data`: the page object with its cursor, the request id.
const ENVELOPE_BYTES: usize = 320;

impl RenderedPage {
    /// Cuts `rows` (fetched with `limit + 1`) to the page and writes it.
    pub fn new<R: Resource>(
        rows: &[PgRow],
        limit: usize,
        sort: SortKey,
        read_at: WalPosition,
    ) -> Result<Self, ApiError> {
        let (page, next) = cut::<R>(rows, limit, sort)?;
        let mut data = Vec::with_capacity(2 + page.len() * RECORD_BYTES);
        write_records::<R>(page, &mut data)?;
        Ok(Self { data: data.into_boxed_slice(), next, read_at })
    }

    /// Memory the page takes.
    pub fn bytes(&self) -> usize {
        std::mem::size_of::<Self>() + self.data.len()
    }

    /// The listing's body `{data, page, requestId}`, with a freshly signed cursor.
    pub fn body(&self, around: &BodyParts<'_>) -> Result<Vec<u8>, ApiError> {
        let mut body = Vec::with_capacity(self.data.len() + ENVELOPE_BYTES);
        around.write(&mut body, self.next.as_ref(), self.read_at, |out| {
            out.extend_from_slice(&self.data);
            Ok(())
        })?;
        Ok(body)
    }
}

/// What a listing's body holds besides its records.
pub struct BodyParts<'a> {
    pub signer: &'a CursorSigner,
    pub scope: &'a CursorScope<'a>,
    pub request_id: &'a RequestId,
}

impl BodyParts<'_> {
    /// The body of a page that is served once and not kept: written straight from its
    /// rows into the response, without a `data` buffer of its own.
    pub fn fresh<R: Resource>(
        &self,
        rows: &[PgRow],
        limit: usize,
        sort: SortKey,
        read_at: WalPosition,
    ) -> Result<Vec<u8>, ApiError> {
        let (page, next) = cut::<R>(rows, limit, sort)?;
        let mut body = Vec::with_capacity(2 + page.len() * RECORD_BYTES + ENVELOPE_BYTES);
        self.write(&mut body, next.as_ref(), read_at, |out| write_records::<R>(page, out))?;
        Ok(body)
    }

    /// `{"data":…,"page":…,"requestId":…}`, the records written by `data`.
    fn write(
        &self,
        body: &mut Vec<u8>,
        next: Option<&Position>,
        read_at: WalPosition,
        data: impl FnOnce(&mut Vec<u8>) -> Result<(), ApiError>,
    ) -> Result<(), ApiError> {
        let page = PageInfo {
            has_more: next.is_some(),
            next_cursor: next.map(|next| self.signer.issue_read_at(self.scope, next, read_at)),
        };
        body.extend_from_slice(b"{\"data\":");
        data(body)?;
        body.extend_from_slice(b",\"page\":");
        write_json(&page, body)?;
        body.extend_from_slice(b",\"requestId\":");
        write_str(body, self.request_id.as_str());
        body.push(b'}');
        Ok(())
    }
}

/// `rows` (fetched with `limit + 1`) cut to the page, and where the next page starts
/// when there is one.
fn cut<R: Resource>(rows: &[PgRow], limit: usize, sort: SortKey) -> Result<(&[PgRow], Option<Position>), ApiError> {
    let page = &rows[..rows.len().min(limit)];
    let next = match page.last() {
        Some(last) if rows.len() > limit => Some(R::record(last)?.position(sort).map_err(unservable)?),
        _ => None,
    };
    Ok((page, next))
}

/// `rows` as the JSON array of a body's `data`.
fn write_records<R: Resource>(rows: &[PgRow], out: &mut Vec<u8>) -> Result<(), ApiError> {
    out.push(b'[');
    for (index, row) in rows.iter().enumerate() {
        if index > 0 {
            out.push(b',');
        }
        R::record(row)?.write_json(out).map_err(unservable)?;
    }
    out.push(b']');
    Ok(())
}

/// Text PostgreSQL sent that is not UTF-8: only a database in another encoding than
/// Lectern's migrations expect could hold it.
fn unservable(error: std::str::Utf8Error) -> ApiError {
    ApiError::Internal(Box::new(error))
}

/// `{"data":…,"requestId":…}`: the body of a retrieve, documented as the resource's
/// envelope type.
pub fn record_body<R: Resource>(row: &PgRow) -> Result<Vec<u8>, ApiError> {
    let mut body = Vec::with_capacity(RECORD_BYTES + ENVELOPE_BYTES);
    body.extend_from_slice(b"{\"data\":");
    R::record(row)?.write_json(&mut body).map_err(unservable)?;
    body.extend_from_slice(b",\"requestId\":");
    write_str(&mut body, RequestId::current().as_str());
    body.push(b'}');
    Ok(body)
}

/// The body of one page of `R` in the caller's workspace.
pub async fn list_page<R: Resource>(
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
    let mut seen = 0;
    if let Some(token) = &params.cursor {
        let (position, read_at) = state
            .cursors
            .open_read_at(token.as_str(), &scope)
            .map_err(|problem| ApiError::invalid("cursor", problem))?;
        request.after = Some(position);
        seen = read_at;
    }
    let request_id = RequestId::current();
    let around = BodyParts { signer: &state.cursors, scope: &scope, request_id: &request_id };
    if request.after.is_none() && request.search.is_none() {
        first_page::<R>(state, &request).await?.body(&around)
    } else {
        let shape = state.workspace_sizes.shape_for::<R>(state.reads.primary(), &request).await?;
        let read = read_page::<R>(&state.reads, &request, shape, seen).await?;
        around.fresh::<R>(&read.rows, request.limit.get(), request.sort, read.position.unwrap_or(seen))
    }
}

/// A first page without search: from the cache when the workspace has not changed
/// since it was read, else from the database (and then cached).
async fn first_page<R: Resource>(
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
    // A first page without search: the shape does not apply.
    let read = read_page::<R>(&state.reads, request, SearchShape::Planned, 0).await?;
    let read_at = read.position.unwrap_or(0);
    let page = Arc::new(RenderedPage::new::<R>(&read.rows, request.limit.get(), request.sort, read_at)?);
    state.first_pages.put(key, ticket, page.clone(), page.bytes());
    Ok(page)
}

error_responses! {
    /// The errors a listing operation documents.
    ListError {
        /// A query parameter, the cursor or the request is invalid; `details` names each problem.
        BadRequest = 400,
        /// The API key is missing, malformed, unknown or revoked.
        Unauthorized = 401,
        /// The key lacks the scope this operation needs.
        Forbidden = 403,
        /// The request target is too long for the HTTP parser (over 65,534 bytes).
        TargetTooLong = 414,
        /// The key's rate limit, or the workspace's share of the database, is spent for now.
        TooManyRequests = 429,
        /// The request line and headers take more than 16 KiB, or there are more than 64 headers.
        HeadTooLarge = 431,
        /// An unexpected failure, logged under the request id.
        InternalError = 500,
        /// The read model cannot answer in time; retry after `Retry-After`.
        ServiceUnavailable = 503,
    }
}

error_responses! {
    /// The errors a retrieve operation documents.
    GetError {
        /// A query parameter, the cursor or the request is invalid; `details` names each problem.
        BadRequest = 400,
        /// The API key is missing, malformed, unknown or revoked.
        Unauthorized = 401,
        /// The key lacks the scope this operation needs.
        Forbidden = 403,
        /// No active record of the key's workspace has this id.
        NotFound = 404,
        /// The request target is too long for the HTTP parser (over 65,534 bytes).
        TargetTooLong = 414,
        /// The key's rate limit, or the workspace's share of the database, is spent for now.
        TooManyRequests = 429,
        /// The request line and headers take more than 16 KiB, or there are more than 64 headers.
        HeadTooLarge = 431,
        /// An unexpected failure, logged under the request id.
        InternalError = 500,
        /// The read model cannot answer in time; retry after `Retry-After`.
        ServiceUnavailable = 503,
    }
}

/// The example page size the document gives: what Redoc shows, and what schemathesis's
/// examples phase sends.
pub fn limit_example() -> Limit {
    "20".parse().unwrap_or_default()
}

/// The example order the document gives.
pub fn sort_example() -> SortKey {
    SortKey::Name
}

/// The example record id the document gives: well formed, in no workspace.
pub fn id_example() -> RecordId {
    RecordId("b3c6a1d2-2f0e-4c1b-9a9e-7e3d5c2b1a00".to_owned())
}

/// The query parameters of every listing of `R`.
#[derive(Debug)]
pub struct ListQuery<R>(std::marker::PhantomData<R>);

impl<R> QueryContract for ListQuery<R>
where
    R: Resource + Send + Sync + 'static,
    R::Kind: std::str::FromStr<Err = String> + Default + Send + Sync + 'static,
{
    const PARAMETERS: &'static [Parameter] = &[
        ("search", parses_as::<SearchText>),
        ("cursor", parses_as::<CursorToken>),
        ("limit", parses_as::<Limit>),
        ("type", parses_as::<R::Kind>),
        ("sort", parses_as::<SortKey>),
    ];

    /// The cursor opened as [`list_page`] opens it, against the scope the query names.
    fn cursor_problem(request: &Request, query: &[(&'static str, String)]) -> Option<String> {
        use crate::listing::KindFilter;

        let value = |name: &str| query.iter().find(|(given, _)| *given == name).map(|(_, value)| value.as_str());
        let cursor = value("cursor")?;
        let state = request.data::<Arc<AppState>>()?;
        let workspace_id = super::caller::workspace_id()?;
        // Every value here passed its own check; one that did not is reported already.
        let search = value("search").map(str::parse::<SearchText>).transpose().ok()?.and_then(SearchText::into_filter);
        let kind = value("type").map(str::parse::<R::Kind>).transpose().ok()?.unwrap_or_default();
        let sort = value("sort").map(str::parse::<SortKey>).transpose().ok()?.unwrap_or_default();
        let scope = CursorScope {
            resource: R::NAME,
            workspace_id,
            kind: kind.as_str(),
            search: search.as_ref().map(SearchText::as_str),
            sort,
        };
        state.cursors.open(cursor, &scope).err().map(|problem| format!("cursor: {problem}"))
    }
}

/// Retrieve operations: a record id at the end of the path, no query parameters.
#[derive(Debug)]
pub struct NoQuery;

impl QueryContract for NoQuery {
    const PARAMETERS: &'static [Parameter] = &[];
    const PATH_ENDS_IN_ID: bool = true;
}
