//! The changes feed (`listContactChanges`, `listItemChanges`): what changed in a
//! workspace since a sync token, in commit order, removals included.
//!
//! Every read-model row carries the position of the transaction that last wrote it, and
//! the feed is ordered by (position, record id); a row is served only below the feed's
//! bound ([`bound`]: every older writer of the read model has ended, and its commit is on
//! disk), so no later page can hold a change that belongs before a token already handed
//! out (see `docs/architecture.md`, "The changes feed"). A page is the rows after the
//! token's position, each at its state now; its token is the last row's position, or the
//! bound once the feed is read to the end.
//! Nothing after the token: answered from memory when the process knows the feed's
//! newest transaction ([`heads`]), and held until it moves when the request asks to
//! `wait`, without a database connection.
//!
//! # Layout
//! - [`params`]: `since`, `limit`, `wait`.
//! - [`position`]: where a feed stands.
//! - [`token`]: signed sync tokens.
//! - [`query`]: the feed's statements.
//! - [`bound`]: the position below which every row is committed, durable and final.
//! - [`lineage`]: the histories the database descends from; which tokens continue here.
//! - [`heads`]: each feed's newest position, kept by notifications; waiting requests.
//! - [`waiting`]: a long poll's wait: the request parked, and its next answer.
//! - [`read_ahead`]: the page after a full one, read before its client asks.
//! - [`shared_reads`]: one read for the requests looking at the same page at once.

pub mod bound;
pub mod heads;
pub mod lineage;
pub mod params;
pub mod position;
pub mod query;
pub mod read_ahead;
pub mod shared_reads;
pub mod token;
pub mod waiting;

use std::marker::PhantomData;

use futures_util::future::BoxFuture;

use lectern_schema::json::{write_str, WriteJson};
use tokio::time::Instant;
use uuid::Uuid;

use std::sync::Arc;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::error::ApiError;
use crate::keys::{Authenticator, Principal};
use crate::metric_names::FEED_EMPTY_POLLS as EMPTY_POLLS;
use crate::reads::history::{HistoryId, ServerHistory};
use crate::reads::replicas::{Reads, WalPosition};
use crate::resources::Resource;
use bound::{Bound, FeedBound};
use heads::{FeedHeads, FeedKey, Waiting};
use lineage::Lineage;
use params::{FeedLimit, Since, WaitSeconds};
use position::FeedPosition;
use query::{fetch_changes, ChangedRow};
use read_ahead::{PageKey, ReadAhead, ReadPage};
use shared_reads::{ReadKey, SharedRead, SharedReads};
use token::{FeedScope, Standing, SyncTokens, TokenError};
use waiting::{Answer, Parked};

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
/// Looks at a feed that found the database in another history than the bound they read
/// below, before the request is answered 503.
const LOOKS_ACROSS_HISTORIES: usize = 3;

/// What feeds need, shared by every request of a process.
pub struct Feeds {
    /// Samples the bound on the primary.
    pool: PgPool,
    reads: Arc<Reads>,
    /// Signs the feed's tokens, with the cursor secret.
    pub tokens: SyncTokens,
    /// Each feed's newest position, kept by the read model's notifications.
    pub heads: Arc<FeedHeads>,
    /// The position below which feed pages serve rows, sampled by one task.
    pub bound: Arc<FeedBound>,
    /// Feed pages read before their clients ask for them.
    pub read_ahead: ReadAhead,
    /// Reads joined by every request looking at the same page meanwhile.
    pub shared_reads: SharedReads,
    /// Which history of the database the process talks to now.
    history: Arc<ServerHistory>,
    /// The histories the database descends from: whose tokens continue here.
    lineage: Lineage,
    /// A waiting request checks its key again whenever a key changes.
    authenticator: Arc<Authenticator>,
    /// Cancelled when the server begins to shut down: waiting requests answer at once.
    shutdown: CancellationToken,
}

impl Feeds {
    pub fn new(
        pool: PgPool,
        reads: Arc<Reads>,
        tokens: SyncTokens,
        authenticator: Arc<Authenticator>,
        history: Arc<ServerHistory>,
        shutdown: CancellationToken,
    ) -> Self {
        Self {
            pool,
            reads,
            tokens,
            heads: Arc::default(),
            bound: Arc::new(FeedBound::new(history.clone())),
            read_ahead: ReadAhead::default(),
            shared_reads: SharedReads::default(),
            history,
            lineage: Lineage::default(),
            authenticator,
            shutdown,
        }
    }

    /// One answer of the feed of `R` in the workspace of `caller`'s key, to request
    /// `request_id`: a page, or, when nothing follows `since` and the request asks to
    /// `wait`, the request parked ([`waiting`]) until its feed moves. A parked request
    /// checks its key again before each look: a key revoked (or moved to another workspace)
    /// while it waits is refused then, and nothing changed after that is served.
    ///
    /// Whatever touches the database is boxed: a future is as large as its largest
    /// state, so inline database futures would make every operation's future as large
    /// (see `docs/architecture.md`, "What a waiting request costs").
    pub async fn page<R: Resource>(
        self: &Arc<Self>,
        caller: &Principal,
        params: ChangesParams,
        request_id: &str,
    ) -> Result<Answer, ApiError> {
        let began = std::time::Instant::now();
        let scope = FeedScope { resource: R::NAME, workspace_id: caller.workspace_id };
        // Where the client stands: a position, the history it belongs to, and the WAL position
        // its last page was read at (no later page is read anywhere that has not replayed it).
        // Each look admits it into the history the database is in then.
        let standing = match &params.since {
            None => Standing { position: FeedPosition::START, history: None, read_at: 0 },
            Some(Since::Latest) => {
                let feed = Feed::<R> { state: self, scope, request_id, resource: PhantomData };
                let latest = Box::pin(feed.latest(began)).await?;
                return feed.body(write_data::<R>(&[])?, false, latest).map(Answer::Page);
            }
            Some(Since::Token(token)) => self.tokens.open(token, scope).map_err(ApiError::from)?,
        };
        let looking = Looking {
            standing,
            limit: params.limit.get(),
            deadline: Instant::now() + params.wait.duration(),
            waiting: None,
        };
        Box::pin(self.look_or_wait::<R>(caller, request_id, looking)).await
    }

    /// A page after `looking.standing`, or, while there is none and the deadline is ahead,
    /// the request parked.
    async fn look_or_wait<R: Resource>(
        self: &Arc<Self>,
        caller: &Principal,
        request_id: &str,
        looking: Looking,
    ) -> Result<Answer, ApiError> {
        let began = std::time::Instant::now();
        let scope = FeedScope { resource: R::NAME, workspace_id: caller.workspace_id };
        let feed = Feed::<R> { state: self, scope, request_id, resource: PhantomData };
        // Taken before looking, so that a change committed after the look wakes it, a bound
        // that moves after the look lets it see what was committed but not final, and a key
        // changed meanwhile is checked again.
        let keys = self.authenticator.watch_keys();
        let head = self.heads.watch(feed.key());
        let bound = self.bound.watch();
        let (standing, not_yet_served) = match Box::pin(feed.look(looking.standing, looking.limit, began)).await? {
            Look::Page(page) => return Ok(Answer::Page(page)),
            Look::Nothing { caught_up, not_yet_served, read_at, history } => {
                (Standing { position: caught_up, history: Some(history), read_at }, not_yet_served)
            }
        };
        if Instant::now() >= looking.deadline {
            return feed.body(write_data::<R>(&[])?, false, standing).map(Answer::Page);
        }
        if self.shutdown.is_cancelled() {
            // A request that waited is answered now, empty; one that would begin to wait
            // is sent elsewhere, not answered empty at once, which its client would take
            // as "nothing yet" and ask again at once, for the whole grace.
            return match looking.waiting {
                Some(_) => feed.body(write_data::<R>(&[])?, false, standing).map(Answer::Page),
                None => Err(ApiError::ShuttingDown),
            };
        }
        let waiting = match looking.waiting {
            Some(counted) => counted,
            None => {
                self.heads.start_waiting(feed.key()).ok_or(ApiError::TooManyWaiting(heads::WAITING_PER_WORKSPACE))?
            }
        };
        let (feeds, caller, request_id) = (self.clone(), caller.clone(), Box::<str>::from(request_id));
        let deadline = looking.deadline;
        let next = Looking { standing, limit: looking.limit, deadline, waiting: Some(waiting) };
        Ok(Answer::Wait(Box::new(Parked {
            deadline,
            head,
            bound,
            keys,
            not_yet_served,
            shutdown: self.shutdown.clone(),
            out_of_time: false,
            look_again: Box::new(move |out_of_time| look_again::<R>(feeds, caller, request_id, next, out_of_time)),
        })))
    }
}

/// Where a look at a feed starts and how long its request may wait.
struct Looking {
    standing: Standing,
    limit: usize,
    deadline: Instant,
    /// Set for a request that already waited: it stays counted.
    waiting: Option<Waiting>,
}

/// The next answer of a request waiting on the feed of `R` at `looking`, once its key is
/// checked again; `out_of_time`: its wait ended with nothing to serve.
fn look_again<R: Resource>(
    feeds: Arc<Feeds>,
    caller: Principal,
    request_id: Box<str>,
    looking: Looking,
    out_of_time: bool,
) -> BoxFuture<'static, Result<Answer, ApiError>> {
    Box::pin(async move {
        let scope = FeedScope { resource: R::NAME, workspace_id: caller.workspace_id };
        let caller = Box::pin(feeds.authenticator.still_valid(&caller)).await?;
        // The key was moved to another workspace while the request waited: where it stood
        // belongs to the other workspace's feed.
        if caller.workspace_id != scope.workspace_id {
            return Err(ApiError::from(TokenError::Mismatch));
        }
        if out_of_time {
            let feed = Feed::<R> { state: &feeds, scope, request_id: &request_id, resource: PhantomData };
            return feed.body(write_data::<R>(&[])?, false, looking.standing).map(Answer::Page);
        }
        feeds.look_or_wait::<R>(&caller, &request_id, looking).await
    })
}

/// Where a look starts, once a token's history was found to be the database's or one it
/// descends from.
#[derive(Clone, Copy, Debug)]
struct Admitted {
    /// The WAL position to read at least at (0 when the token's is another history's).
    seen: WalPosition,
    /// The history it was admitted into; `None` for a token without one (the formats
    /// before histories, or none at all), which any history serves.
    within: Option<HistoryId>,
    /// Where the token stood (the look starts after its position), handed back as it was by
    /// a look that finds nothing past it.
    asked: Standing,
}

/// What a look at a feed found.
enum Look {
    /// A page of changes, its body written.
    Page(Vec<u8>),
    /// No change after the position asked for; the feed is read up to `caught_up`, in
    /// `history`. `not_yet_served`: changes are committed that the bound does not let through
    /// yet. `read_at`: the WAL position the look saw (the client's own when from memory).
    Nothing { caught_up: FeedPosition, not_yet_served: bool, read_at: WalPosition, history: HistoryId },
}

/// `{"data":[…]` with an entry per change: the part of a page's body that depends only
/// on what was read, so that a page read ahead is written ahead too.
fn write_data<R: Resource>(changes: &[ChangedRow]) -> Result<Vec<u8>, ApiError> {
    let mut body = Vec::with_capacity(changes.len() * CHANGE_BYTES + ENVELOPE_BYTES);
    body.extend_from_slice(b"{\"data\":[");
    for (index, change) in changes.iter().enumerate() {
        if index > 0 {
            body.push(b',');
        }
        body.extend_from_slice(b"{\"id\":\"");
        body.extend_from_slice(change.position.id.hyphenated().encode_lower(&mut Uuid::encode_buffer()).as_bytes());
        if change.active {
            body.extend_from_slice(b"\",\"change\":\"upserted\",\"record\":");
            R::record(&change.row)?.write_json(&mut body).map_err(|error| ApiError::Internal(Box::new(error)))?;
            body.push(b'}');
        } else {
            body.extend_from_slice(b"\",\"change\":\"removed\",\"record\":null}");
        }
    }
    body.push(b']');
    Ok(body)
}

/// One workspace's feed of `R`.
struct Feed<'a, R> {
    state: &'a Feeds,
    scope: FeedScope,
    request_id: &'a str,
    /// `fn() -> R`: a feed is `Send` and `Sync` whatever `R` is.
    resource: PhantomData<fn() -> R>,
}

impl<R: Resource> Feed<'_, R> {
    fn key(&self) -> FeedKey {
        (self.scope.resource, self.scope.workspace_id)
    }

    /// Where `since=latest` stands: after every change committed before the request
    /// `began` that no older writer of the read model holds back, or, while commits are
    /// announced past the newest bound, before a moment at most
    /// [`bound::LATEST_WITHIN`] earlier (a bound sampled then, shared by every such request);
    /// with the WAL position a replica must have replayed to serve from it.
    async fn latest(&self, began: std::time::Instant) -> Result<Standing, ApiError> {
        let bound = self.state.bound.for_latest(&self.state.pool, began).await?;
        Ok(Standing { position: FeedPosition::below(bound.position), history: Some(bound.history), read_at: bound.wal })
    }

    /// Where to start from `standing`: refused with `startOver` unless its history is the
    /// one the database is in now or one it descends from ([`lineage`]). A position of an
    /// earlier history is kept, its WAL position is not (it is another history's WAL).
    /// Tokens of the formats before histories carry none and are taken as they always were.
    async fn admit(&self, standing: Standing) -> Result<Admitted, ApiError> {
        let Some(history) = standing.history else {
            return Ok(Admitted { seen: standing.read_at, within: None, asked: standing });
        };
        let state = self.state;
        let mut current = match state.bound.current() {
            Some(bound) => bound.history,
            None => state.bound.for_reading(&state.pool).await?.history,
        };
        if current == history {
            return Ok(Admitted { seen: standing.read_at, within: Some(current), asked: standing });
        }
        // Asked in the history this process saw last; then, when the database is no longer in
        // it or it does not descend from the token's (this process may be the one behind), in
        // the history a fresh sample finds.
        let mut sampled = false;
        for _ in 0..LOOKS_ACROSS_HISTORIES {
            match state.lineage.descends(&state.pool, current, history).await? {
                Some(true) => return Ok(Admitted { seen: 0, within: Some(current), asked: standing }),
                Some(false) if sampled => {
                    tracing::warn!(
                        resource = R::NAME,
                        workspace_id = %self.scope.workspace_id,
                        token_history = history,
                        history = current,
                        "a sync token of a history this database does not descend from (a sibling failover, \
                         another restore of the same backup, or the primary this one replaced); the client is told \
                         to start over"
                    );
                    return Err(ApiError::from(TokenError::FromAnotherHistory));
                }
                Some(false) | None => {}
            }
            current = state.bound.sampled_since(&state.pool, std::time::Instant::now()).await?.history;
            sampled = true;
            if current == history {
                return Ok(Admitted { seen: standing.read_at, within: Some(current), asked: standing });
            }
        }
        Err(history_keeps_changing())
    }

    /// The page of up to `limit` changes after `standing`, or how far there is nothing (see
    /// [`Feed::look_once`]), once `standing` is admitted into the history the database is in.
    /// When the look finds the database in another history than the one it was admitted
    /// into, it is admitted again there (and refused if it does not belong there) before the
    /// next look: a position is never read in a history it was not checked for.
    async fn look(&self, standing: Standing, limit: usize, began: std::time::Instant) -> Result<Look, ApiError> {
        for _ in 0..LOOKS_ACROSS_HISTORIES {
            let admitted = self.admit(standing).await?;
            if let Some(look) = self.look_once(admitted, limit, began).await? {
                return Ok(look);
            }
        }
        Err(history_keeps_changing())
    }

    /// The page of up to `limit` changes after `since`, or how far there is nothing: from
    /// memory when the feed's newest transaction is known to be at or before `since`.
    /// A page that reaches the bound reflects every commit made and announced before the
    /// request `began` that no older writer of the read model still holds back: when such a
    /// change is past its bound, it is read again below one sampled since. `None` when the
    /// rows read may come from another history than the bound's (the database changed under
    /// the same address meanwhile): the process has dropped that bound by then.
    async fn look_once(
        &self,
        admitted: Admitted,
        limit: usize,
        began: std::time::Instant,
    ) -> Result<Option<Look>, ApiError> {
        let Admitted { seen, within, asked } = admitted;
        let since = asked.position;
        // A token of an earlier history that finds nothing past it is handed back as it came.
        // Moved to the bound, it would claim a place in the history read now, of which the
        // client was served nothing; and should the database go back to the earlier one (the
        // old primary back behind the address, or this process behind the database), a
        // client that synced only that one would be told to start over for nothing.
        let from_elsewhere = |history: HistoryId| asked.history.filter(|own| *own != history);
        // A bound of another history than the one `since` was admitted into: admitted again.
        let elsewhere = |history: HistoryId| within.is_some_and(|within| within != history);
        let heads = &self.state.heads;
        let known = heads.known(self.key());
        // A token at or past every bound this process has seen is looked up in the
        // database, which alone can tell whether it is from a history the database lost.
        let current = self.state.bound.current().filter(|bound| since.transaction < bound.position);
        if let (Some(bound), Some(newest)) = (current, known) {
            if elsewhere(bound.history) {
                return Ok(None);
            }
            if FeedPosition::after_transaction(newest) <= since {
                metrics::counter!(EMPTY_POLLS, "resource" => R::NAME, "answered" => "memory").increment(1);
                let (history, read_at) = match from_elsewhere(bound.history) {
                    Some(own) => (own, asked.read_at),
                    None => (bound.history, seen),
                };
                return Ok(Some(Look::Nothing { caught_up: since, not_yet_served: false, read_at, history }));
            }
        }
        // One row more than the page tells whether more are ready.
        let rows = i64::try_from(limit + 1).unwrap_or(i64::from(FeedLimit::MAX) + 1);
        let key = PageKey { feed: self.key(), after: since, rows };
        let read = |bound| async move {
            let ticket = heads.ticket();
            let workspace_id = self.scope.workspace_id;
            let changes =
                fetch_changes::<R>(&self.state.reads, workspace_id, since, rows, seen, bound, known.is_some()).await?;
            Ok::<_, ApiError>((ticket, Arc::new(changes), None))
        };
        // Shared with every request looking at the same page below the same bound meanwhile.
        // Requests woken together stand at WAL positions their own earlier looks read at,
        // each a little apart; they matter only where a replica may serve.
        let shared_seen = if self.state.reads.has_replicas() { seen } else { 0 };
        let read_below = |bound: Bound| async move {
            match self.read_shared(ReadKey::new(key, shared_seen, bound, known.is_some()), bound).await {
                Some(shared) => Ok((shared.ticket, shared.changes.clone(), None)),
                None => read(bound).await,
            }
        };
        let (mut ticket, mut changes, mut written) = match self.state.read_ahead.take(&key, heads).await {
            Some((ticket, read)) => (ticket, Arc::new(read.changes), Some(read.data)),
            None => {
                let bound = self.state.bound.for_reading(&self.state.pool).await?;
                read_below(self.replica_can_serve(since, bound)).await?
            }
        };
        // A change at or past the bound read below is committed but was not let through:
        // if the bound is older than the request, one sampled since may let it through.
        let newest = changes.newest.or(known).unwrap_or(i64::MAX);
        if changes.rows.len() <= limit && newest >= changes.bound {
            let fresh = self.state.bound.sampled_since(&self.state.pool, began).await?;
            if fresh.position > changes.bound || fresh.history != changes.history {
                (ticket, changes, written) = read_below(fresh).await?;
            }
        }
        // Read on a connection to another server than the bound was sampled on: its rows are
        // not that history's, and nothing they say is learnt.
        let read_elsewhere = changes.read_in.is_some_and(|read_in| read_in != changes.history);
        if !self.state.history.is(changes.history) || elsewhere(changes.history) || read_elsewhere {
            return Ok(None);
        }
        if let Some(newest) = changes.newest {
            heads.learn(self.key(), ticket, newest);
            if newest >= changes.bound {
                self.state.bound.committed(newest);
            }
        }
        let page = &changes.rows[..limit.min(changes.rows.len())];
        let has_more = changes.rows.len() > limit;
        // Read to the end: everything below the bound is behind the client.
        let read_to = |position: FeedPosition| position.max(FeedPosition::below(changes.bound));
        let Some(last) = page.last() else {
            if since.transaction >= changes.bound
                && !self.refuse_if_ahead_of_database(since, began, changes.history).await?
            {
                return Ok(None);
            }
            metrics::counter!(EMPTY_POLLS, "resource" => R::NAME, "answered" => "database").increment(1);
            let (caught_up, read_at, history) = match from_elsewhere(changes.history) {
                Some(own) => (since, asked.read_at, own),
                None => (read_to(since), changes.read_at, changes.history),
            };
            return Ok(Some(Look::Nothing {
                caught_up,
                not_yet_served: changes
                    .newest
                    .is_some_and(|newest| FeedPosition::after_transaction(newest) > caught_up),
                read_at,
                history,
            }));
        };
        let position = if has_more { last.position } else { read_to(last.position) };
        if has_more {
            let below = Bound { position: changes.bound, wal: changes.read_at, history: changes.history };
            self.read_ahead(PageKey { after: position, ..key }, below);
        }
        let data = match written {
            Some(data) => data,
            None => write_data::<R>(page)?,
        };
        let standing = Standing { position, history: Some(changes.history), read_at: changes.read_at };
        self.body(data, has_more, standing).map(Look::Page).map(Some)
    }

    /// The read `key` below `bound`, shared with every request that looks at the same
    /// page meanwhile (see [`shared_reads`]). `None`: read on your own.
    async fn read_shared(&self, key: ReadKey, bound: Bound) -> Option<Arc<SharedRead>> {
        let reads = self.state.reads.clone();
        let (workspace_id, after, rows, seen, head_known) =
            (key.page.feed.1, key.page.after, key.page.rows, key.seen, key.head_known);
        let read = async move {
            fetch_changes::<R>(&reads, workspace_id, after, rows, seen, bound, head_known)
                .await
                .map_err(|error| tracing::debug!(error = %error, "a shared feed read failed; its requests read again"))
                .ok()
        };
        self.state.shared_reads.read(key, &self.state.heads, read).await
    }

    /// Refuses `since` when it is at or past the primary's bound sampled after the request
    /// `began`. Every token is below a bound some process sampled, and bounds sampled later
    /// in one history are never lower, so such a token comes from a time the database no
    /// longer has: it went back to an earlier point without starting a new history (a copy
    /// of its data directory started as it was). Answering it with empty pages would leave
    /// the client waiting for positions the database will hand out again to other changes.
    /// `Ok(false)`: the fresh sample is of another history than `history`, the one the look
    /// read in, and tells nothing of it.
    async fn refuse_if_ahead_of_database(
        &self,
        since: FeedPosition,
        began: std::time::Instant,
        history: HistoryId,
    ) -> Result<bool, ApiError> {
        let fresh = self.state.bound.sampled_since(&self.state.pool, began).await?;
        if fresh.history != history {
            // The database changed history meanwhile: `since` is admitted into that one first.
            return Ok(false);
        }
        if since.transaction >= fresh.position {
            tracing::warn!(
                resource = R::NAME,
                workspace_id = %self.scope.workspace_id,
                token_position = since.transaction,
                bound = fresh.position,
                "a sync token is ahead of the database: it was restored to an earlier point without a new history; \
                 the client is told to start over"
            );
            return Err(ApiError::from(TokenError::AheadOfDatabase));
        }
        Ok(true)
    }

    /// `bound`, or an older bound that a replica in the rotation has replayed when that one
    /// still lets rows after `since` through: a catch-up's pages then go to the replica
    /// rather than to the primary, below a bound a replica's lag older. A page that reaches
    /// such a bound with newer changes past it is read again below a fresh one.
    fn replica_can_serve(&self, since: FeedPosition, bound: Bound) -> Bound {
        let replayed = self.state.reads.replica_statuses().into_iter().filter(|status| status.in_rotation());
        let Some(replayed) = replayed.map(|status| status.replayed).max() else { return bound };
        if bound.wal <= replayed {
            return bound;
        }
        match self.state.bound.replayed_by(replayed) {
            Some(older) if older.history == bound.history && FeedPosition::below(older.position) > since => older,
            _ => bound,
        }
    }

    /// Starts reading the page `key`, and writing its entries, for the client that will
    /// ask for it next: both then happen while this page is sent and read. `below`: the
    /// bound this page was read below, at the WAL position it was read at.
    fn read_ahead(&self, key: PageKey, below: Bound) {
        let reads = self.state.reads.clone();
        let seen = below.wal;
        // The bound this page was read below, or a newer one of its history: either serves
        // the page after.
        let bound = self
            .state
            .bound
            .current()
            .filter(|known| known.history == below.history && known.position > below.position)
            .unwrap_or(below);
        let read = async move {
            let (workspace_id, after, rows) = (key.feed.1, key.after, key.rows);
            // This page's read found the head known, or learnt it.
            let changes = fetch_changes::<R>(&reads, workspace_id, after, rows, seen, bound, true)
                .await
                .map_err(|error| tracing::debug!(error = %error, "a feed page read ahead failed; its request reads it again"))
                .ok()?;
            let limit = usize::try_from(rows - 1).unwrap_or(0);
            let data = write_data::<R>(&changes.rows[..limit.min(changes.rows.len())]).ok()?;
            Some(ReadPage { changes, data })
        };
        self.state.read_ahead.start(key, &self.state.heads, read);
    }

    /// `data` (as [`write_data`] writes it), then `,"hasMore":…,"syncToken":…,"requestId":…}`
    /// with the token of `standing`.
    fn body(&self, mut body: Vec<u8>, has_more: bool, standing: Standing) -> Result<Vec<u8>, ApiError> {
        body.extend_from_slice(b",\"hasMore\":");
        body.extend_from_slice(if has_more { b"true" } else { b"false" });
        body.extend_from_slice(b",\"syncToken\":");
        write_str(&mut body, &self.state.tokens.issue(self.scope, standing));
        body.extend_from_slice(b",\"requestId\":");
        write_str(&mut body, self.request_id);
        body.push(b'}');
        Ok(body)
    }
}

/// The answer when the database changed history under a request each time it looked: 503,
/// to be tried again once it has settled.
fn history_keeps_changing() -> ApiError {
    ApiError::from(sqlx::Error::Io(std::io::Error::other(
        "the database behind the address changed history while the feed was read",
    )))
}
