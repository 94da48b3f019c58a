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

use std::marker::PhantomData;

use lectern_schema::json::{write_str, WriteJson};
use tokio::time::Instant;
use uuid::Uuid;

use crate::db::changes::{fetch_changes, newest_position, ChangedRow};
use crate::db::listing::Resource;
use crate::error::ApiError;
use crate::http::request_id::RequestId;
use crate::http::AppState;
use crate::operations::names::FEED_EMPTY_POLLS as EMPTY_POLLS;
use heads::{FeedKey, Waiting};
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
    let feed = Feed::<R> { state, scope: FeedScope { resource: R::NAME, workspace_id }, resource: PhantomData };
    let since = match &params.since {
        None => 0,
        Some(Since::Latest) => return feed.body(&[], false, feed.newest().await?),
        Some(Since::Token(token)) => {
            state.sync_tokens.open(token, feed.scope).map_err(|problem| ApiError::invalid("since", problem))?
        }
    };
    let deadline = Instant::now() + params.wait.duration();
    let mut waiting: Option<Waiting> = None;
    loop {
        // Taken before looking, so that a change committed after the look wakes it.
        let mut watch = state.feed_heads.watch(feed.key());
        if let Some(page) = feed.look(since, params.limit.get()).await? {
            return Ok(page);
        }
        if Instant::now() >= deadline || state.shutdown.is_cancelled() {
            break;
        }
        if waiting.is_none() {
            let counted = state.feed_heads.start_waiting(feed.key());
            waiting = Some(counted.ok_or(ApiError::TooManyWaiting(heads::WAITING_PER_WORKSPACE))?);
        }
        tokio::select! {
            biased;
            () = state.shutdown.cancelled() => break,
            () = tokio::time::sleep_until(deadline) => break,
            () = watch.changed() => {}
        }
    }
    feed.body(&[], false, since)
}

/// One workspace's feed of `R`.
struct Feed<'a, R> {
    state: &'a AppState,
    scope: FeedScope,
    resource: PhantomData<R>,
}

impl<R: Resource> Feed<'_, R> {
    fn key(&self) -> FeedKey {
        (self.scope.resource, self.scope.workspace_id)
    }

    /// The feed's newest position: its known head, or the counter's value.
    async fn newest(&self) -> Result<i64, ApiError> {
        let heads = &self.state.feed_heads;
        if let Some(newest) = heads.known(self.key()) {
            return Ok(newest);
        }
        let ticket = heads.ticket();
        let newest = newest_position::<R>(&self.state.reads, self.scope.workspace_id).await?;
        heads.learn(self.key(), ticket, newest);
        Ok(newest)
    }

    /// The page of up to `limit` changes after `since`, or `None` when there is none:
    /// from memory when the feed's head is known to be at or before `since`.
    async fn look(&self, since: i64, limit: usize) -> Result<Option<Vec<u8>>, ApiError> {
        let heads = &self.state.feed_heads;
        if heads.known(self.key()).is_some_and(|newest| newest <= since) {
            metrics::counter!(EMPTY_POLLS, "resource" => R::NAME, "answered" => "memory").increment(1);
            return Ok(None);
        }
        let ticket = heads.ticket();
        // One row more than the page tells whether more are ready.
        let rows = i64::try_from(limit + 1).unwrap_or(i64::from(FeedLimit::MAX) + 1);
        let rows = fetch_changes::<R>(&self.state.reads, self.scope.workspace_id, since, rows).await?;
        let page = &rows[..limit.min(rows.len())];
        let Some(last) = page.last() else {
            heads.learn(self.key(), ticket, since);
            metrics::counter!(EMPTY_POLLS, "resource" => R::NAME, "answered" => "database").increment(1);
            return Ok(None);
        };
        let has_more = rows.len() > limit;
        if !has_more {
            heads.learn(self.key(), ticket, last.position);
        }
        self.body(page, has_more, last.position).map(Some)
    }

    /// `{"data":[…],"hasMore":…,"syncToken":…,"requestId":…}`, the token at `position`.
    fn body(&self, changes: &[ChangedRow], has_more: bool, position: i64) -> Result<Vec<u8>, ApiError> {
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
        write_str(&mut body, &self.state.sync_tokens.issue(self.scope, position));
        body.extend_from_slice(b",\"requestId\":");
        write_str(&mut body, RequestId::current().as_str());
        body.push(b'}');
        Ok(body)
    }
}
