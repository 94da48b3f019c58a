//! Folding the shadow model into the live one: only the rows that differ are written, so
//! they alone take a new position in the changes feed.
//!
//! Comparing two whole models takes seconds at a million rows, too long to hold the
//! projectors' writes for. So the records that differ are found first, with nobody held
//! ([`find_candidates`]); the swap's transaction then adds the records its own last events
//! wrote into the shadow, and compares those alone ([`fold`]). A live row the projectors
//! write meanwhile needs no look: it is an event's, and the shadow has every event up to
//! the swap, so it either equals its shadow row or is a candidate already (its shadow row
//! was ahead). A row changed by hand in that window is not seen; `verify` would name it.

use sqlx::PgConnection;

use uuid::Uuid;

use super::shadow::{pairs, Written};
use crate::error::ProjectorError;

/// Columns never copied: the transaction id (each written row takes the folding
/// transaction's, its new feed position) and generated columns.
const NOT_COPIED: &str = lectern_read_model::CHANGE_TRANSACTION;
/// A row's identity and bookkeeping: kept when a row is turned into a removal.
const KEY: [&str; 4] = ["workspace_id", "id", "version", "status"];
/// The records to compare in the swap, in the rebuild's session.
const CANDIDATES: &str = "rebuild_candidates";

/// What folding changed in the live model.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Folded {
    /// Rows written with the shadow's values (corrected, or missing before).
    pub corrected: u64,
    /// Served rows no event wrote, now removals.
    pub removed: u64,
    /// Records compared inside the swap.
    pub compared_in_swap: u64,
}

/// The columns of `table` a write sets: every one but generated ones and the
/// transaction id.
async fn written_columns(connection: &mut PgConnection, table: &str) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar(
        "select attname::text from pg_attribute where attrelid = $1::regclass and attnum > 0 \
         and not attisdropped and attgenerated = '' and attname <> $2 order by attnum",
    )
    .bind(table)
    .bind(NOT_COPIED)
    .fetch_all(connection)
    .await
}

/// `alias.column, …` of `columns`.
fn tuple(alias: &str, columns: &[String]) -> String {
    columns.iter().map(|column| format!("{alias}.{column}")).collect::<Vec<_>>().join(", ")
}

/// Records, in the rebuild's session, every record whose shadow and live rows differ now,
/// holding nobody.
pub async fn find_candidates(connection: &mut PgConnection) -> Result<(), ProjectorError> {
    sqlx::query(&format!("drop table if exists {CANDIDATES}")).execute(&mut *connection).await?;
    sqlx::query(&format!("create temporary table {CANDIDATES} (resource text, workspace_id uuid, id uuid)"))
        .execute(&mut *connection)
        .await?;
    for (live, shadow) in pairs() {
        let columns = written_columns(connection, live).await?;
        sqlx::query(&format!(
            "insert into {CANDIDATES} select '{live}', coalesce(s.workspace_id, l.workspace_id), coalesce(s.id, l.id) \
             from {shadow} as s full join {live} as l on l.workspace_id = s.workspace_id and l.id = s.id \
             where s.id is null or l.id is null or ({}) is distinct from ({})",
            tuple("s", &columns),
            tuple("l", &columns),
        ))
        .execute(&mut *connection)
        .await?;
    }
    Ok(())
}

/// A fold may turn at most this share of a workspace's active records into removals
/// without `--force`: beyond it, more likely the shadow lost its rows than the live model
/// holds that many rows no event wrote.
pub const MOST_REMOVED_SHARE: f64 = 0.10;
/// ... and may always remove this many in a workspace: a few rows written by hand are
/// what a rebuild is for.
pub const REMOVED_WITHOUT_QUESTION: i64 = 10;

/// The workspaces whose removals the fold would refuse without `--force`, as the error
/// says them: `(resource, workspace, to remove, active)`.
async fn too_many_removals(
    connection: &mut PgConnection,
    live: &str,
    shadow: &str,
    keys: &str,
) -> Result<Vec<(String, Uuid, i64, i64)>, sqlx::Error> {
    sqlx::query_as(&format!(
        "with removed as (select l.workspace_id, count(*) as removed from {live} as l join {keys} \
             on l.workspace_id = k.workspace_id and l.id = k.id where l.status = 'active' \
             and not exists (select 1 from {shadow} as s where s.workspace_id = l.workspace_id and s.id = l.id) \
             group by l.workspace_id) \
         select '{live}', r.workspace_id, r.removed, \
                (select count(*) from {live} as a where a.workspace_id = r.workspace_id and a.status = 'active') \
         from removed as r where r.removed > $1"
    ))
    .bind(REMOVED_WITHOUT_QUESTION)
    .fetch_all(connection)
    .await
    .map(|rows: Vec<(String, Uuid, i64, i64)>| {
        rows.into_iter()
            .filter(|(_, _, removed, active)| *removed as f64 > MOST_REMOVED_SHARE * *active as f64)
            .collect()
    })
}

/// Inside the caller's transaction, which holds the live tables against other writers
/// and has read the last events into the shadow (the records they wrote: `last_written`):
/// writes into the live tables every candidate's shadow row that differs from its live
/// row, and turns served live rows no event wrote into removals. Unless `force`, refuses
/// (writing nothing) when that would remove more than [`MOST_REMOVED_SHARE`] of a
/// workspace's active records, and more than [`REMOVED_WITHOUT_QUESTION`].
pub async fn fold(
    connection: &mut PgConnection,
    last_written: &[Written],
    force: bool,
) -> Result<Folded, ProjectorError> {
    let mut folded = Folded::default();
    let (tables, workspaces, ids): (Vec<&str>, Vec<Uuid>, Vec<Uuid>) =
        last_written.iter().map(|(table, workspace, id)| (*table, *workspace, *id)).collect();
    sqlx::query(&format!("insert into {CANDIDATES} select * from unnest($1::text[], $2::uuid[], $3::uuid[])"))
        .bind(tables)
        .bind(workspaces)
        .bind(ids)
        .execute(&mut *connection)
        .await?;
    // A few rows looked up by key in two large tables: index lookups, whatever the
    // estimates say (a hash join reads both tables whole, seconds with writers held).
    sqlx::query("set local enable_hashjoin = off").execute(&mut *connection).await?;
    sqlx::query("set local enable_mergejoin = off").execute(&mut *connection).await?;
    sqlx::query(&format!("analyze {CANDIDATES}")).execute(&mut *connection).await?;
    folded.compared_in_swap = sqlx::query_scalar::<_, i64>(&format!(
        "select count(*) from (select distinct resource, workspace_id, id from {CANDIDATES}) as distinct_candidates"
    ))
    .fetch_one(&mut *connection)
    .await?
    .unsigned_abs();
    if !force {
        let mut refused = Vec::new();
        for (live, shadow) in pairs() {
            let keys = format!("(select distinct workspace_id, id from {CANDIDATES} where resource = '{live}') as k");
            refused.extend(too_many_removals(connection, live, shadow, &keys).await?);
        }
        if !refused.is_empty() {
            let named: Vec<String> = refused
                .iter()
                .map(|(resource, workspace, removed, active)| {
                    format!("{removed} of the {active} active {resource} of workspace {workspace}")
                })
                .collect();
            return Err(ProjectorError::Usage(format!(
                "the rebuild would remove {} as written by no event; that many more likely means the stream or the \
                 shadow tables lack them than that they were written by hand. Nothing was changed; the shadow tables \
                 are kept. Check the stream holds every event (`lectern-projector verify`), then run `rebuild --force` \
                 to remove them",
                named.join(", ")
            )));
        }
    }
    for (live, shadow) in pairs() {
        let columns = written_columns(connection, live).await?;
        let updates: Vec<String> = columns
            .iter()
            .filter(|column| !["workspace_id", "id"].contains(&column.as_str()))
            .map(|column| format!("{column} = excluded.{column}"))
            .collect();
        let keys = format!("(select distinct workspace_id, id from {CANDIDATES} where resource = '{live}') as k");
        let corrected = sqlx::query(&format!(
            "insert into {live} as t ({list}) \
             select {shadow_columns} from {keys} join {shadow} as s on s.workspace_id = k.workspace_id and s.id = k.id \
             left join {live} as l on l.workspace_id = s.workspace_id and l.id = s.id \
             where l.id is null or ({shadow_columns}) is distinct from ({live_columns}) \
             on conflict (workspace_id, id) do update set {updates}, {NOT_COPIED} = excluded.{NOT_COPIED}",
            list = columns.join(", "),
            shadow_columns = tuple("s", &columns),
            live_columns = tuple("l", &columns),
            updates = updates.join(", "),
        ))
        .execute(&mut *connection)
        .await?;
        folded.corrected += corrected.rows_affected();
        // A removal a client following the feed receives: the row stays, as a tombstone.
        let emptied: Vec<String> = columns
            .iter()
            .filter(|column| !KEY.contains(&column.as_str()))
            .map(|column| format!("{column} = null"))
            .collect();
        let removed = sqlx::query(&format!(
            "update {live} as l set status = 'deleted', {emptied} from {keys} \
             where l.workspace_id = k.workspace_id and l.id = k.id and l.status = 'active' \
             and not exists (select 1 from {shadow} as s where s.workspace_id = l.workspace_id and s.id = l.id)",
            emptied = emptied.join(", "),
        ))
        .execute(&mut *connection)
        .await?;
        folded.removed += removed.rows_affected();
    }
    Ok(folded)
}
