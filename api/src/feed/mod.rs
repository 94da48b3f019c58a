//! The changes feed (`listContactChanges`, `listItemChanges`): what changed in a
//! workspace since a sync token, in commit order, removals included.
//!
//! Every read-model row carries its position in its workspace's change order for its
//! table (see `docs/architecture.md`, "The changes feed", for why positions can never be
//! committed out of order). A page is the rows after the token's position, each at its
//! state now; its token is the last row's position. Nothing after the token: answered
//! from memory when the process knows the feed's head ([`heads`]), and held until the
//! head moves when the request asks to `wait`, without a database connection.
//!
//! # Layout
//! - [`params`]: `since`, `limit`, `wait`.
//! - [`token`]: signed sync tokens.
//! - [`heads`]: each feed's newest position, kept by notifications; waiting requests.

pub mod heads;
pub mod params;
pub mod token;

use lectern_schema::json::{write_str, WriteJson};
use tokio::time::Instant;
use uuid::Uuid;

use crate::db::changes::{fetch_changes, newest_position, ChangedRow};
use crate::db::listing::Resource;
use crate::error::ApiError;
use crate::http::request_id::RequestId;
use crate::http::AppState;
use crate::operations::names::{FEED_EMPTY_POLLS as EMPTY_POLLS, FEED_WAITING};
use heads::FeedKey;
use params::{FeedLimit, Since, WaitSeconds};
use token::FeedScope;

/// The validated query of a feed operation.
#[derive(Debug)]
pub struct ChangesParams {
    pub since: Option<Since>,
    pub limit: FeedLimit,
    pub wait: WaitSeconds,
}

/// Room for one change's JSON, so a page's buffer is allocated once.
const CHANGE_BYTES: usize = 448;
/// Room for the body around `data`: the token, the request id.
const ENVELOPE_BYTES: usize = 256;

/// The body of one feed page of `R` in `workspace_id`.
pub async fn changes_page<R: Resource>(
    state: &AppState,
    workspace_id: Uuid,
    params: ChangesParams,
) -> Result<Vec<u8>, ApiError> {
    let scope = FeedScope { resource: R::NAME, workspace_id };
    let key: FeedKey = (R::NAME, workspace_id);
    let since = match &params.since {
        None => 0,
        Some(Since::Latest) => {
            let newest = match state.feed_heads.known(key) {
                Some(newest) => newest,
                None => {
                    let ticket = state.feed_heads.ticket();
                    let newest = newest_position::<R>(&state.reads, workspace_id).await?;
                    state.feed_heads.learn(key, ticket, newest);
                    newest
                }
            };
            return body::<R>(state, scope, &[], false, newest);
        }
        Some(Since::Token(token)) => {
            state.sync_tokens.open(token, scope).map_err(|problem| ApiError::invalid("since", problem))?
        }
    };
    let limit = params.limit.get();
    let deadline = Instant::now() + params.wait.duration();
    let mut waiting: Option<Waiting> = None;
    loop {
        // Taken before looking, so that a change committed after the look wakes it.
        let mut watch = state.feed_heads.watch(key);
        let known_empty = state.feed_heads.known(key).is_some_and(|newest| newest <= since);
        let answered = if known_empty { "memory" } else { "database" };
        if !known_empty {
            let ticket = state.feed_heads.ticket();
            // One row more than the page tells whether more are ready.
            let rows =
                fetch_changes::<R>(&state.reads, workspace_id, since, i64::try_from(limit + 1).unwrap_or(101)).await?;
            if let Some(last) = rows.get(..limit.min(rows.len())).and_then(<[ChangedRow]>::last) {
                let has_more = rows.len() > limit;
                if !has_more {
                    state.feed_heads.learn(key, ticket, last.position);
                }
                return body::<R>(state, scope, &rows[..limit.min(rows.len())], has_more, last.position);
            }
            state.feed_heads.learn(key, ticket, since);
        }
        metrics::counter!(EMPTY_POLLS, "resource" => R::NAME, "answered" => answered).increment(1);
        if Instant::now() >= deadline || state.shutdown.is_cancelled() {
            break;
        }
        waiting.get_or_insert_with(|| Waiting::new(R::NAME));
        tokio::select! {
            biased;
            () = state.shutdown.cancelled() => break,
            () = tokio::time::sleep_until(deadline) => break,
            () = watch.changed() => {}
        }
    }
    body::<R>(state, scope, &[], false, since)
}

/// A request counted in the waiting gauge until it is answered (or dropped, when its
/// client goes away).
struct Waiting(&'static str);

impl Waiting {
    fn new(resource: &'static str) -> Self {
        metrics::gauge!(FEED_WAITING, "resource" => resource).increment(1.0);
        Self(resource)
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        metrics::gauge!(FEED_WAITING, "resource" => self.0).decrement(1.0);
    }
}

/// `{"data":[…],"hasMore":…,"syncToken":…,"requestId":…}`.
fn body<R: Resource>(
    state: &AppState,
    scope: FeedScope,
    changes: &[ChangedRow],
    has_more: bool,
    position: i64,
) -> Result<Vec<u8>, ApiError> {
    let mut body = Vec::with_capacity(changes.len() * CHANGE_BYTES + ENVELOPE_BYTES);
    body.extend_from_slice(b"{\"data\":[");
    for (index, change) in changes.iter().enumerate() {
        if index > 0 {
            body.push(b',');
        }
        body.extend_from_slice(b"{\"id\":\"");
        body.extend_from_slice(change.id.hyphenated().encode_lower(&mut Uuid::encode_buffer()).as_bytes());
        if change.active {
            body.extend_from_slice(b"\",\"change\":\"upserted\",\"record\":");
            R::record(&change.row)?.write_json(&mut body).map_err(|error| ApiError::Internal(Box::new(error)))?;
            body.push(b'}');
        } else {
            body.extend_from_slice(b"\",\"change\":\"removed\",\"record\":null}");
        }
    }
    body.extend_from_slice(b"],\"hasMore\":");
    body.extend_from_slice(if has_more { b"true" } else { b"false" });
    body.extend_from_slice(b",\"syncToken\":");
    write_str(&mut body, &state.sync_tokens.issue(scope, position));
    body.extend_from_slice(b",\"requestId\":");
    write_str(&mut body, RequestId::current().as_str());
    body.push(b'}');
    Ok(body)
}
