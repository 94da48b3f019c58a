//! The changes feed's queries: a workspace's rows after a position, in the order of the
//! transactions that wrote them, and the horizon below which every transaction has ended.

use sqlx::postgres::PgRow;
use sqlx::Row;
use uuid::Uuid;

use super::connections::{PlanMode, ReadConnections, ReadError};
use super::listing::Resource;
use crate::feed::FeedPosition;
use lectern_read_model::CHANGE_TRANSACTION;

/// One row of a feed page: where it stands, whether it is served, and the row itself,
/// which [`Resource::record`] reads when it is active.
pub struct ChangedRow {
    pub position: FeedPosition,
    pub active: bool,
    pub row: PgRow,
}

/// What one look at a feed found.
pub struct Changes {
    /// The rows after the position asked for, below the horizon, in feed order.
    pub rows: Vec<ChangedRow>,
    /// Every writing transaction with a smaller id had ended when the rows were read.
    pub horizon: i64,
    /// The newest transaction that wrote a row of the feed and had committed by then,
    /// served or not yet (`None`: the feed has no row).
    pub newest: Option<i64>,
}

/// The statement of a feed page; public so benchmarks run the very same SQL. Binds the
/// workspace, the position after which to start (transaction, id) and the number of rows.
///
/// Always one row at least: the horizon and the feed's newest transaction, with the
/// page's rows (or nulls where there is none) beside them.
pub fn changes_sql<R: Resource>() -> String {
    // The record's columns first, where `Resource::record` reads them; the last five
    // where `fetch_changes` reads them.
    format!(
        "select page.*, feed.horizon, feed.newest from \
         (select pg_snapshot_xmin(pg_current_snapshot())::text::int8 as horizon, \
                 (select {CHANGE_TRANSACTION} from {table} where workspace_id = $1 \
                  order by {CHANGE_TRANSACTION} desc limit 1) as newest) as feed \
         left join lateral \
         (select {columns}, {CHANGE_TRANSACTION} as changed_in, status = 'active' as active, id as changed_id \
          from {table} where workspace_id = $1 and ({CHANGE_TRANSACTION}, id) > ($2, $3) \
          and {CHANGE_TRANSACTION} < feed.horizon order by {CHANGE_TRANSACTION}, id limit $4) as page on true",
        columns = R::COLUMNS,
        table = R::NAME,
    )
}

/// The statement of the horizon alone, for `since=latest`.
pub const HORIZON_SQL: &str = "select pg_snapshot_xmin(pg_current_snapshot())::text::int8";

/// Up to `rows` rows of `workspace_id` after `after`, in feed order, below the horizon.
pub async fn fetch_changes<R: Resource>(
    connections: &ReadConnections,
    workspace_id: Uuid,
    after: FeedPosition,
    rows: i64,
) -> Result<Changes, ReadError> {
    let sql = changes_sql::<R>();
    let query = sqlx::query(&sql).bind(workspace_id).bind(after.transaction).bind(after.id).bind(rows);
    let fetched = connections.fetch_for(workspace_id, PlanMode::Generic, query).await?;
    let mut changes = Changes { rows: Vec::with_capacity(fetched.len()), horizon: 0, newest: None };
    for row in fetched {
        // By position from the end, unchecked, as the records' own columns are read:
        // by name, the lookups per row cost a page about a tenth of its CPU.
        let last = row.len().saturating_sub(1);
        changes.horizon = row.try_get_unchecked(last.saturating_sub(1))?;
        changes.newest = row.try_get_unchecked(last)?;
        let changed_in: Option<i64> = row.try_get_unchecked(last.saturating_sub(4))?;
        let active: Option<bool> = row.try_get_unchecked(last.saturating_sub(3))?;
        let id: Option<Uuid> = row.try_get_unchecked(last.saturating_sub(2))?;
        if let (Some(transaction), Some(active), Some(id)) = (changed_in, active, id) {
            changes.rows.push(ChangedRow { position: FeedPosition { transaction, id }, active, row });
        }
    }
    Ok(changes)
}

/// The horizon now: every writing transaction with a smaller id has ended.
pub async fn horizon(connections: &ReadConnections, workspace_id: Uuid) -> Result<i64, ReadError> {
    let rows = connections.fetch_for(workspace_id, PlanMode::Generic, sqlx::query(HORIZON_SQL)).await?;
    let horizon = rows.first().map(|row| row.try_get::<i64, _>(0)).transpose()?;
    Ok(horizon.unwrap_or(0))
}
