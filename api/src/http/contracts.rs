//! What the operations promise before a feature runs: the query parameters each
//! accepts (checked by [`super::strict_query`], with the cursor or token opened so that
//! its problem is reported beside the others), the errors each documents, and the
//! examples the document gives.

use std::str::FromStr;
use std::sync::Arc;

use poem::Request;
use poem_openapi::registry::MetaSchema;
use poem_openapi::Enum;
use uuid::Uuid;

use super::envelope::error_responses;
use super::strict_query::{parses_as, Parameter, QueryContract};
use crate::app::AppState;
use crate::error::ApiError;
use crate::feed::params::{FeedLimit, Since, WaitSeconds};
use crate::feed::token::FeedScope;
use crate::listing::cursor::CursorScope;
use crate::listing::params::{CursorToken, Limit, SearchText, SortKey};
use crate::query_values::query_param_type;
use crate::resources::{KindFilter, Resource};

/// A record id as it arrives in a path, checked by [`RecordId::parse`].
///
/// poem-openapi reports path parse failures under its internal route name
/// (`param0`), so the UUID check happens here, where the error can name `id`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordId(String);

impl RecordId {
    pub fn parse(&self) -> Result<Uuid, ApiError> {
        Uuid::try_parse(&self.0).map_err(|_| ApiError::invalid("id", "must be a UUID"))
    }
}

impl FromStr for RecordId {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        Ok(Self(text.to_owned()))
    }
}

query_param_type!(RecordId, "RecordId", MetaSchema::new_with_format("string", "uuid"), |id: &RecordId| {
    serde_json::Value::String(id.0.clone())
});

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

    /// The cursor opened as a listing opens it, against the scope the query names.
    fn cursor_problem(request: &Request, query: &[(&'static str, String)]) -> Option<String> {
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
        state.listing.cursors().open(cursor, &scope).err().map(|problem| format!("cursor: {problem}"))
    }
}

/// Retrieve operations: a record id at the end of the path, no query parameters.
#[derive(Debug)]
pub struct NoQuery;

impl QueryContract for NoQuery {
    const PARAMETERS: &'static [Parameter] = &[];
    const PATH_ENDS_IN_ID: bool = true;
}

/// What happened to a record, as the feed reports it.
#[derive(Clone, Copy, Debug, Enum, PartialEq, Eq, serde::Serialize)]
#[oai(rename_all = "lowercase")]
#[serde(rename_all = "lowercase")]
pub enum ChangeType {
    /// The record is active now; `record` holds it.
    Upserted,
    /// The record is not active now (archived or deleted); `record` is null.
    Removed,
}

/// The example page size the document gives.
pub fn feed_limit_example() -> FeedLimit {
    "100".parse().unwrap_or_default()
}

/// The example wait the document gives.
pub fn wait_example() -> WaitSeconds {
    "25".parse().unwrap_or_default()
}

/// The query parameters of the feed of `R`.
#[derive(Debug)]
pub struct ChangesQuery<R>(std::marker::PhantomData<R>);

impl<R: Resource + Send + Sync + 'static> QueryContract for ChangesQuery<R> {
    const PARAMETERS: &'static [Parameter] =
        &[("since", parses_as::<Since>), ("limit", parses_as::<FeedLimit>), ("wait", parses_as::<WaitSeconds>)];

    /// The token opened as the feed opens it, so that a bad token is reported with the
    /// query's other problems.
    fn cursor_problem(request: &Request, query: &[(&'static str, String)]) -> Option<String> {
        let (_, since) = query.iter().find(|(name, _)| *name == "since")?;
        let Ok(Since::Token(token)) = since.parse::<Since>() else { return None };
        let state = request.data::<Arc<AppState>>()?;
        let scope = FeedScope { resource: R::NAME, workspace_id: super::caller::workspace_id()? };
        state.feeds.tokens.open(&token, scope).err().map(|problem| format!("since: {problem}"))
    }
}

error_responses! {
    /// The errors a feed operation documents.
    ChangesError {
        /// A query parameter or `since` is invalid; `details` names each problem.
        BadRequest = 400,
        /// The API key is missing, malformed, unknown or revoked.
        Unauthorized = 401,
        /// The key lacks the scope this operation needs.
        Forbidden = 403,
        /// The request target is too long for the HTTP parser (over 65,534 bytes).
        TargetTooLong = 414,
        /// The key's rate limit, the workspace's share of the database, or its waiting
        /// requests (64 with `wait` at once) are spent for now.
        TooManyRequests = 429,
        /// The request line and headers take more than 16 KiB, or there are more than 64 headers.
        HeadTooLarge = 431,
        /// An unexpected failure, logged under the request id.
        InternalError = 500,
        /// The read model cannot answer in time; retry after `Retry-After`.
        ServiceUnavailable = 503,
    }
}
