//! The changes feed's queries: a workspace's rows after a position, in position order,
//! and a feed's newest position.

use sqlx::postgres::PgRow;
use sqlx::Row;
use uuid::Uuid;

use super::connections::{PlanMode, ReadConnections, ReadError};
use super::listing::Resource;
use lectern_read_model::{CHANGE_COUNTERS, CHANGE_POSITION};

/// One row of a feed page: where it stands, whether it is served, and the row itself,
/// which [`Resource::record`] reads when it is active.
pub struct ChangedRow {
    pub position: i64,
    pub id: Uuid,
    pub active: bool,
    pub row: PgRow,
}

/// The statement of a feed page; public so benchmarks run the very same SQL. Binds the
/// workspace, the position after which to start and the number of rows.
pub fn changes_sql<R: Resource>() -> String {
    // The record's columns first, where `Resource::record` reads them; the last three
    // where `fetch_changes` reads them.
    format!(
        "select {columns}, {CHANGE_POSITION}, status = 'active' as active, id as changed_id from {table} \
         where workspace_id = $1 and {CHANGE_POSITION} > $2 order by {CHANGE_POSITION} limit $3",
        columns = R::COLUMNS,
        table = R::NAME,
    )
}

/// The statement of a feed's newest position (0 for a feed with no change yet).
pub fn newest_sql<R: Resource>() -> String {
    format!(
        "select coalesce((select newest_position from {CHANGE_COUNTERS} where workspace_id = $1 and resource = '{}'), 0)",
        R::NAME
    )
}

/// Up to `rows` rows of `workspace_id` after `after`, in position order.
pub async fn fetch_changes<R: Resource>(
    connections: &ReadConnections,
    workspace_id: Uuid,
    after: i64,
    rows: i64,
) -> Result<Vec<ChangedRow>, ReadError> {
    let sql = changes_sql::<R>();
    let query = sqlx::query(&sql).bind(workspace_id).bind(after).bind(rows);
    let fetched = connections.fetch_for(workspace_id, PlanMode::Generic, query).await?;
    fetched
        .into_iter()
        .map(|row| {
            // By position from the end, unchecked, as the records' own columns are read:
            // by name, three lookups per row cost a page about a tenth of its CPU.
            let last = row.len().saturating_sub(1);
            Ok(ChangedRow {
                position: row.try_get_unchecked(last.saturating_sub(2))?,
                active: row.try_get_unchecked(last.saturating_sub(1))?,
                id: row.try_get_unchecked(last)?,
                row,
            })
        })
        .collect::<Result<_, sqlx::Error>>()
        .map_err(ReadError::from)
}

/// The newest position of `workspace_id`'s feed of `R`.
pub async fn newest_position<R: Resource>(connections: &ReadConnections, workspace_id: Uuid) -> Result<i64, ReadError> {
    let sql = newest_sql::<R>();
    let rows = connections.fetch_for(workspace_id, PlanMode::Generic, sqlx::query(&sql).bind(workspace_id)).await?;
    let newest = rows.first().map(|row| row.try_get::<i64, _>(0)).transpose()?;
    Ok(newest.unwrap_or(0))
}
