//! Folding the shadow model into the live one, in one transaction: only the rows that
//! differ are written, so they alone take a new position in the changes feed.

use sqlx::PgConnection;

use super::shadow::pairs;
use crate::error::ProjectorError;

/// Columns never copied: the transaction id (each written row takes the folding
/// transaction's, its new feed position) and generated columns.
const NOT_COPIED: &str = lectern_read_model::CHANGE_TRANSACTION;
/// A row's identity and bookkeeping: kept when a row is turned into a removal.
const KEY: [&str; 4] = ["workspace_id", "id", "version", "status"];

/// What folding changed in the live model.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Folded {
    /// Rows written with the shadow's values (corrected, or missing before).
    pub corrected: u64,
    /// Served rows no event wrote, now removals.
    pub removed: u64,
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

/// Writes into the live tables every shadow row that differs from its live row, and turns
/// served live rows no event wrote into removals, inside the caller's transaction (which
/// holds the live tables against other writers).
pub async fn fold(connection: &mut PgConnection) -> Result<Folded, ProjectorError> {
    let mut folded = Folded::default();
    for (live, shadow) in pairs() {
        let columns = written_columns(connection, live).await?;
        let list = columns.join(", ");
        let tuple =
            |alias: &str| columns.iter().map(|column| format!("{alias}.{column}")).collect::<Vec<_>>().join(", ");
        let updates: Vec<String> = columns
            .iter()
            .filter(|column| !["workspace_id", "id"].contains(&column.as_str()))
            .map(|column| format!("{column} = excluded.{column}"))
            .collect();
        let corrected = sqlx::query(&format!(
            "insert into {live} as t ({list}) \
             select {shadow_columns} from {shadow} as s left join {live} as l \
             on l.workspace_id = s.workspace_id and l.id = s.id \
             where l.id is null or ({shadow_tuple}) is distinct from ({live_tuple}) \
             on conflict (workspace_id, id) do update set {updates}, {NOT_COPIED} = excluded.{NOT_COPIED}",
            shadow_columns = tuple("s"),
            shadow_tuple = tuple("s"),
            live_tuple = tuple("l"),
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
            "update {live} as l set status = 'deleted', {emptied} where l.status = 'active' \
             and not exists (select 1 from {shadow} as s where s.workspace_id = l.workspace_id and s.id = l.id)",
            emptied = emptied.join(", "),
        ))
        .execute(&mut *connection)
        .await?;
        folded.removed += removed.rows_affected();
    }
    Ok(folded)
}
