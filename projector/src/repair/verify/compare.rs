//! The expected model against the live one, record by record, in one statement per
//! table: only the records that differ come back, each as both rows.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use futures_util::TryStreamExt;
use lectern_read_model::{contacts, items};
use serde::Serialize;
use serde_json::Value;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::apply::Tables;
use crate::error::ProjectorError;

/// Bookkeeping columns that differ between two correct models: the derived search text
/// and the transaction that wrote the row.
const NOT_COMPARED: [&str; 2] = ["search_text", lectern_read_model::CHANGE_TRANSACTION];

/// A record both models hold, or one of them: how the row differs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum DriftKind {
    /// The stream says the record exists; the read model has no row.
    Missing,
    /// The read model has a row the stream never wrote.
    Unexpected,
    /// The row is at an older version than the stream's newest.
    Behind,
    /// The row is at a newer version than any event of the stream's.
    Ahead,
    /// Same version, other values.
    Changed,
}

/// One drifted record.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Drift {
    pub resource: &'static str,
    pub workspace_id: Uuid,
    pub id: Uuid,
    pub kind: DriftKind,
    /// The columns whose values differ (every column for a missing or unexpected row).
    pub columns: Vec<String>,
    /// The row as the stream says it should be; `null` when it should not exist.
    pub expected: Option<Value>,
    /// The row as stored; `null` when there is none.
    pub stored: Option<Value>,
}

/// A record written by an event after the verified history, as the row holds it.
pub type WrittenSince = HashSet<(&'static str, Uuid, Uuid, i64)>;

/// Counts of one workspace's records of one resource.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Counts {
    /// Records the verified history holds.
    pub records: u64,
    /// Records whose row is not what the history says.
    pub drifted: u64,
    /// Records whose row an event after the verified history wrote: not compared.
    pub written_since: u64,
}

/// A record whose rows differ, by versions only (a broken model may differ in every
/// record: this is what is kept of each).
#[derive(Clone, Copy, Debug)]
pub struct Difference {
    pub resource: &'static str,
    pub workspace_id: Uuid,
    pub id: Uuid,
    pub expected_version: Option<i64>,
    pub stored_version: Option<i64>,
    /// Whether the stored row is served (status active).
    pub stored_active: bool,
}

/// What one look found: the records per (workspace, resource), and every difference.
#[derive(Debug, Default)]
pub struct Differences {
    pub records: BTreeMap<(Uuid, &'static str), u64>,
    pub found: Vec<Difference>,
}

/// What comparing concluded: counts per (workspace, resource) and the first drifts.
#[derive(Debug, Default)]
pub struct Comparison {
    pub counts: BTreeMap<(Uuid, &'static str), Counts>,
    pub first: Vec<Drift>,
}

/// The resources: the live table, its expected one, and the columns compared.
fn resources(tables: Tables<'_>) -> [(&'static str, &str, Vec<&'static str>); 2] {
    [
        (contacts::TABLE, tables.contacts, contacts::written_columns()),
        (items::TABLE, tables.items, items::written_columns()),
    ]
}

/// The differing rows of one resource: (workspace, id, expected version, stored version).
fn differing_sql(resource: &str, expected: &str, compared: &[&str]) -> String {
    let tuple = |alias: &str| compared.iter().map(|column| format!("{alias}.{column}")).collect::<Vec<_>>().join(", ");
    format!(
        "select coalesce(e.workspace_id, l.workspace_id), coalesce(e.id, l.id), e.version, l.version, \
                coalesce(l.status = 'active', false) \
         from (select * from {expected} where $1::uuid is null or workspace_id = $1) as e \
         full join (select * from {resource} where $1::uuid is null or workspace_id = $1) as l \
         on l.workspace_id = e.workspace_id and l.id = e.id \
         where e.id is null or l.id is null or ({expected_tuple}) is distinct from ({stored_tuple})",
        expected_tuple = tuple("e"),
        stored_tuple = tuple("l"),
    )
}

/// Every record whose row in `tables` (the expected model) differs from the live one,
/// in `workspace` or all, as of one snapshot per table.
pub async fn differences(
    connection: &mut PgConnection,
    tables: Tables<'_>,
    workspace: Option<Uuid>,
) -> Result<Differences, ProjectorError> {
    let mut differences = Differences::default();
    for (resource, expected, compared) in resources(tables) {
        let counted: Vec<(Uuid, i64)> = sqlx::query_as(&format!(
            "select workspace_id, count(*) from {expected} where $1::uuid is null or workspace_id = $1 group by 1"
        ))
        .bind(workspace)
        .fetch_all(&mut *connection)
        .await?;
        for (workspace_id, records) in counted {
            differences.records.insert((workspace_id, resource), records.unsigned_abs());
        }
        let sql = differing_sql(resource, expected, &compared);
        let mut rows = sqlx::query_as::<_, (Uuid, Uuid, Option<i64>, Option<i64>, bool)>(&sql)
            .bind(workspace)
            .fetch(&mut *connection);
        while let Some((workspace_id, id, expected_version, stored_version, stored_active)) = rows.try_next().await? {
            let difference = Difference { resource, workspace_id, id, expected_version, stored_version, stored_active };
            differences.found.push(difference);
        }
    }
    Ok(differences)
}

/// Counts the differences, apart from the rows events after the verified history wrote
/// (`written_since`), and describes the first `show` drifts column by column.
pub async fn conclude(
    connection: &mut PgConnection,
    tables: Tables<'_>,
    differences: Differences,
    written_since: &WrittenSince,
    show: usize,
) -> Result<Comparison, ProjectorError> {
    let mut comparison = Comparison::default();
    for (key, records) in differences.records {
        comparison.counts.entry(key).or_default().records = records;
    }
    let mut shown = Vec::new();
    for difference in differences.found {
        let counts = comparison.counts.entry((difference.workspace_id, difference.resource)).or_default();
        match classify(&difference, written_since) {
            Classified::WrittenSince => counts.written_since += 1,
            Classified::RemovedUnknown => {}
            Classified::Drift(kind) => {
                counts.drifted += 1;
                if shown.len() < show {
                    shown.push((difference, kind));
                }
            }
        }
    }
    for (difference, kind) in shown {
        let (expected, stored) = rows_of(connection, tables, &difference).await?;
        let columns = differing_columns(expected.as_ref(), stored.as_ref());
        let Difference { resource, workspace_id, id, .. } = difference;
        comparison.first.push(Drift { resource, workspace_id, id, kind, columns, expected, stored });
    }
    Ok(comparison)
}

/// Both rows of one record as JSON, the bookkeeping columns left out.
async fn rows_of(
    connection: &mut PgConnection,
    tables: Tables<'_>,
    difference: &Difference,
) -> Result<(Option<Value>, Option<Value>), ProjectorError> {
    let expected_table = if difference.resource == contacts::TABLE { tables.contacts } else { tables.items };
    let removed: String = NOT_COMPARED.iter().map(|column| format!(" - '{column}'")).collect();
    let row =
        |table: &str| format!("(select to_jsonb(t){removed} from {table} as t where workspace_id = $1 and id = $2)");
    let sql = format!("select {}, {}", row(expected_table), row(difference.resource));
    Ok(sqlx::query_as(&sql).bind(difference.workspace_id).bind(difference.id).fetch_one(&mut *connection).await?)
}

/// What a difference is.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Classified {
    /// The row is one an event after the verified history wrote.
    WrittenSince,
    /// A removed row of a record the stream does not know (a rebuild leaves one where it
    /// removed a row no event wrote): readers see what they would without it.
    RemovedUnknown,
    Drift(DriftKind),
}

fn classify(difference: &Difference, written_since: &WrittenSince) -> Classified {
    let Difference { resource, workspace_id, id, expected_version, stored_version, stored_active } = *difference;
    if let Some(stored) = stored_version {
        if written_since.contains(&(resource, workspace_id, id, stored)) {
            return Classified::WrittenSince;
        }
    }
    Classified::Drift(match (expected_version, stored_version) {
        (Some(_), None) => DriftKind::Missing,
        (None, _) if !stored_active => return Classified::RemovedUnknown,
        (None, _) => DriftKind::Unexpected,
        (Some(expected), Some(stored)) if stored < expected => DriftKind::Behind,
        (Some(expected), Some(stored)) if stored > expected => DriftKind::Ahead,
        _ => DriftKind::Changed,
    })
}

/// The columns whose values differ between the two rows.
fn differing_columns(expected: Option<&Value>, stored: Option<&Value>) -> Vec<String> {
    let empty = serde_json::Map::new();
    let columns = |row: Option<&Value>| row.and_then(Value::as_object).unwrap_or(&empty).clone();
    let (expected, stored) = (columns(expected), columns(stored));
    let mut names: Vec<String> =
        expected.keys().chain(stored.keys()).cloned().collect::<BTreeSet<_>>().into_iter().collect();
    names.retain(|name| expected.get(name) != stored.get(name));
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_at_a_version_an_event_after_the_verified_history_wrote_is_not_drift() {
        let (workspace_id, id) = (Uuid::new_v4(), Uuid::new_v4());
        let since: WrittenSince = [("contacts", workspace_id, id, 3)].into_iter().collect();
        let classified = |resource, expected_version, stored_version| {
            let difference =
                Difference { resource, workspace_id, id, expected_version, stored_version, stored_active: true };
            classify(&difference, &since)
        };
        let drift = Classified::Drift;
        assert_eq!(classified("contacts", Some(2), Some(3)), Classified::WrittenSince, "updated since");
        assert_eq!(classified("contacts", None, Some(3)), Classified::WrittenSince, "created since");
        assert_eq!(classified("contacts", Some(2), Some(4)), drift(DriftKind::Ahead), "no event wrote version 4");
        assert_eq!(classified("contacts", Some(3), Some(2)), drift(DriftKind::Behind));
        assert_eq!(classified("contacts", Some(3), None), drift(DriftKind::Missing));
        assert_eq!(classified("contacts", Some(5), Some(5)), drift(DriftKind::Changed));
        assert_eq!(classified("items", None, Some(3)), drift(DriftKind::Unexpected), "another resource's event");
    }

    #[test]
    fn a_removed_row_no_event_wrote_is_not_drift_but_a_served_one_is() {
        let (workspace_id, id) = (Uuid::new_v4(), Uuid::new_v4());
        let unknown = |stored_active| Difference {
            resource: "contacts",
            workspace_id,
            id,
            expected_version: None,
            stored_version: Some(1),
            stored_active,
        };
        assert_eq!(classify(&unknown(false), &WrittenSince::new()), Classified::RemovedUnknown);
        assert_eq!(classify(&unknown(true), &WrittenSince::new()), Classified::Drift(DriftKind::Unexpected));
    }

    #[test]
    fn the_differing_columns_are_named_and_the_equal_ones_are_not() {
        let expected = serde_json::json!({ "version": 2, "name": "A", "email": null });
        let stored = serde_json::json!({ "version": 2, "name": "B", "email": null });
        assert_eq!(differing_columns(Some(&expected), Some(&stored)), ["name"]);
        assert_eq!(differing_columns(Some(&expected), None), ["email", "name", "version"]);
    }
}
