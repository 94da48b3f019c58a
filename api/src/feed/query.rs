//! The changes feed's queries: a workspace's rows after a position, in the order of the
//! transactions that wrote them, below the feed's bound (see `feed::bound`).

use sqlx::postgres::PgRow;
use sqlx::Row;
use uuid::Uuid;

use super::bound::Bound;
use super::position::FeedPosition;
use crate::reads::connections::{PlanMode, ReadError};
use crate::reads::history::HistoryId;
use crate::reads::replicas::{Reads, WalPosition, READ_POSITION};
use crate::resources::Resource;
use lectern_read_model::CHANGE_TRANSACTION;

/// The newest transaction that wrote a row of `table` in `workspace_id` below `bound` (0
/// when none): how far the workspace's feed of that table reads, for a webhook endpoint
/// deciding what to announce.
pub async fn newest_below(
    pool: &sqlx::PgPool,
    table: &'static str,
    workspace_id: Uuid,
    bound: i64,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(&format!(
        "select coalesce(max({CHANGE_TRANSACTION}), 0) from {table} where workspace_id = $1 and {CHANGE_TRANSACTION} < $2"
    ))
    .bind(workspace_id)
    .bind(bound)
    .fetch_one(pool)
    .await
}

/// One row of a feed page: where it stands, whether it is served, and the row itself,
/// which [`Resource::record`] reads when it is active.
pub struct ChangedRow {
    pub position: FeedPosition,
    pub active: bool,
    pub row: PgRow,
}

/// What one look at a feed found.
pub struct Changes {
    /// The rows after the position asked for, below the bound, in feed order.
    pub rows: Vec<ChangedRow>,
    /// The bound the rows were read below: every row under it is final.
    pub bound: i64,
    /// The history of the database the bound was sampled in; the rows are that history's
    /// only if the process still sees it afterwards (`reads::history`).
    pub history: HistoryId,
    /// The newest transaction that wrote a row of the feed and had committed by then,
    /// served or not yet (0: the feed has no row); `None` when it was not read (see
    /// [`fetch_changes`]).
    pub newest: Option<i64>,
    /// Where in the WAL the rows were read.
    pub read_at: WalPosition,
    /// The history the rows were read in, when the connection knows it (a primary's: see
    /// [`READ_HISTORY`]); a replica's serves only while it holds the primary's history.
    pub read_in: Option<HistoryId>,
}

/// The history the statement's session is in, as the session named it when it connected
/// (`read_model_server_history()` caches it in `lectern.history`): a setting read, not a
/// lookup. Behind one address a connection kept from before a change of server reads
/// another history than the bound it reads below, and says so here.
/// A sub-select, so it is evaluated once per statement, not per row.
const READ_HISTORY: &str =
    "(select nullif(split_part(current_setting('lectern.history', true), '/', 4), '')::int8) as read_history";

/// The statement of a feed page; public so benchmarks run the very same SQL. Binds the
/// workspace, the position after which to start (transaction, id), the number of rows and
/// the bound.
///
/// Always one row at least: the bound, the feed's newest transaction and the position
/// read at, with the page's rows (or nulls where there is none) beside them.
pub fn changes_sql<R: Resource>() -> String {
    // The record's columns first, where `Resource::record` reads them; the last seven
    // where `fetch_changes` reads them.
    format!(
        "select page.*, feed.bound, feed.newest, {READ_HISTORY}, {READ_POSITION} from \
         (select $5::int8 as bound, \
                 (select {CHANGE_TRANSACTION} from {table} where workspace_id = $1 \
                  order by {CHANGE_TRANSACTION} desc limit 1) as newest) as feed \
         left join lateral \
         (select {columns}, {CHANGE_TRANSACTION} as changed_in, status = 'active' as active, id as changed_id \
          from {table} where workspace_id = $1 and ({CHANGE_TRANSACTION}, id) > ($2, $3) \
          and {CHANGE_TRANSACTION} < feed.bound order by {CHANGE_TRANSACTION}, id limit $4) as page on true",
        columns = R::COLUMNS,
        table = R::NAME,
    )
}

/// The statement of a feed page whose head the process already knows: the page's rows
/// alone, each with the bound, without the feed's newest transaction and without the
/// join that keeps a row when the page is empty. The same columns as [`changes_sql`]
/// (`newest` null), so one reader serves both. On the benchmark's kept database, a
/// fifth cheaper than [`changes_sql`] (`pgbench -M prepared`, 0.24 against 0.29 ms a
/// page of 100, round trip included): catching up is a run of full pages.
pub fn page_sql<R: Resource>() -> String {
    format!(
        "select {columns}, {CHANGE_TRANSACTION} as changed_in, status = 'active' as active, id as changed_id, \
         $5::int8 as bound, null::int8 as newest, {READ_HISTORY}, {READ_POSITION} \
         from {table} where workspace_id = $1 and ({CHANGE_TRANSACTION}, id) > ($2, $3) \
         and {CHANGE_TRANSACTION} < $5 order by {CHANGE_TRANSACTION}, id limit $4",
        columns = R::COLUMNS,
        table = R::NAME,
    )
}

/// Up to `rows` rows of `workspace_id` after `after`, in feed order, below `bound`, read
/// where at least `seen` and the bound's own WAL position are replayed. When the process knows the feed's head
/// (`head_known`), the page's rows alone are read ([`page_sql`]), and the feed's newest
/// transaction is not; the whole statement ([`changes_sql`]) only when that finds none,
/// since only it tells the bound of an empty page.
pub async fn fetch_changes<R: Resource>(
    reads: &Reads,
    workspace_id: Uuid,
    after: FeedPosition,
    rows: i64,
    seen: WalPosition,
    bound: Bound,
    head_known: bool,
) -> Result<Changes, ReadError> {
    let reading =
        Reading { workspace_id, after, rows, seen: seen.max(bound.wal), bound: bound.position, history: bound.history };
    if head_known {
        let changes = read_changes(reads, &page_sql::<R>(), &reading).await?;
        if !changes.rows.is_empty() {
            return Ok(changes);
        }
    }
    let mut changes = read_changes(reads, &changes_sql::<R>(), &reading).await?;
    changes.newest = Some(changes.newest.unwrap_or(0));
    Ok(changes)
}

/// What one statement of a page reads.
#[derive(Clone, Copy)]
struct Reading {
    workspace_id: Uuid,
    after: FeedPosition,
    rows: i64,
    seen: WalPosition,
    bound: i64,
    history: HistoryId,
}

/// The rows `sql` (either statement) finds.
async fn read_changes(reads: &Reads, sql: &str, reading: &Reading) -> Result<Changes, ReadError> {
    let Reading { workspace_id, after, rows, seen, bound, history } = *reading;
    let read = reads
        .fetch_for(workspace_id, seen, |connections| {
            let query =
                sqlx::query(sql).bind(workspace_id).bind(after.transaction).bind(after.id).bind(rows).bind(bound);
            connections.fetch_for(workspace_id, PlanMode::Generic, query)
        })
        .await?;
    let read_at = read.position.unwrap_or(seen).max(seen);
    let mut changes =
        Changes { rows: Vec::with_capacity(read.rows.len()), bound: 0, history, newest: None, read_at, read_in: None };
    for row in read.rows {
        // By position from the end, unchecked, as the records' own columns are read:
        // by name, the lookups per row cost a page about a tenth of its CPU.
        let last = row.len().saturating_sub(1);
        changes.read_in = row.try_get_unchecked(last.saturating_sub(1))?;
        changes.bound = row.try_get_unchecked(last.saturating_sub(3))?;
        changes.newest = row.try_get_unchecked(last.saturating_sub(2))?;
        let changed_in: Option<i64> = row.try_get_unchecked(last.saturating_sub(6))?;
        let active: Option<bool> = row.try_get_unchecked(last.saturating_sub(5))?;
        let id: Option<Uuid> = row.try_get_unchecked(last.saturating_sub(4))?;
        if let (Some(transaction), Some(active), Some(id)) = (changed_in, active, id) {
            changes.rows.push(ChangedRow { position: FeedPosition { transaction, id }, active, row });
        }
    }
    Ok(changes)
}
