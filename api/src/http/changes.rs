//! What the two feed operations share: their strict query, the change type, examples.

use std::sync::Arc;

use poem::Request;
use poem_openapi::Enum;

use super::strict_query::{parses_as, Parameter, QueryContract};
use super::AppState;
use crate::db::listing::Resource;
use crate::feed::params::{FeedLimit, Since, WaitSeconds};
use crate::feed::token::FeedScope;

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
        state.sync_tokens.open(&token, scope).err().map(|problem| format!("since: {problem}"))
    }
}

super::envelope::error_responses! {
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
