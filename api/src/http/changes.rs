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
