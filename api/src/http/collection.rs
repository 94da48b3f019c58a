//! Serving one page of any listed resource: cursor check, query, page assembly.

use std::sync::Arc;

use crate::db::first_pages::PageKey;
use crate::db::listing::{fetch_page, Resource};
use crate::error::ApiError;
use crate::keys::Principal;
use crate::listing::cursor::CursorScope;
use crate::listing::{paginate, CursorToken, Limit, ListRequest, PageInfo, SearchText, SortKey};

use super::envelope::error_responses;
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

/// One page of `R` in the caller's workspace.
pub async fn list_page<R: Resource>(
    state: &AppState,
    principal: &Principal,
    params: ListParams<R::Kind>,
) -> Result<(Vec<R::Row>, PageInfo), ApiError> {
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
    let rows = if request.after.is_none() && request.search.is_none() {
        first_page::<R>(state, &request).await?
    } else {
        fetch_page::<R>(&state.pool, &request).await?
    };
    Ok(paginate(rows, request.limit.get(), &state.cursors, &scope))
}

/// A first page without search: from the cache when the workspace has not changed
/// since it was read, else from the database (and then cached).
async fn first_page<R: Resource>(state: &AppState, request: &ListRequest<R::Kind>) -> Result<Vec<R::Row>, ApiError> {
    use crate::listing::KindFilter;

    let key = PageKey {
        resource: R::NAME,
        workspace_id: request.workspace_id,
        kind: request.kind.as_str(),
        sort: request.sort,
        limit: u16::try_from(request.limit.get()).unwrap_or(u16::MAX),
    };
    if let Some(rows) = state.first_pages.get::<R::Row>(&key) {
        metrics::counter!(crate::operations::names::FIRST_PAGE_CACHE, "result" => "hit").increment(1);
        return Ok(rows.as_ref().clone());
    }
    metrics::counter!(crate::operations::names::FIRST_PAGE_CACHE, "result" => "miss").increment(1);
    let ticket = state.first_pages.ticket(request.workspace_id);
    let rows = fetch_page::<R>(&state.pool, request).await?;
    let rows = Arc::new(rows);
    state.first_pages.put(key, ticket, rows.clone());
    Ok(Arc::unwrap_or_clone(rows))
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
