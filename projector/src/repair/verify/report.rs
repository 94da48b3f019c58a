//! A verdict as people and machines read it, and as it is remembered.

use std::fmt::Write as _;

use chrono::{DateTime, Utc};
use sqlx::{Connection, PgConnection, PgPool};
use uuid::Uuid;

use super::{Outcome, Verdict};
use crate::dead_letters::printable;
use crate::error::ProjectorError;

/// Most workspaces listed by name in the text output (all are in the JSON).
const WORKSPACES_LISTED: usize = 20;

/// The verdict for a terminal or a log.
pub fn text(verdict: &Verdict) -> String {
    let mut text = String::new();
    let scope = verdict.workspace.map_or_else(|| "every workspace".to_owned(), |id| format!("workspace {id}"));
    let _ = match verdict.outcome {
        Outcome::Undecided => writeln!(
            text,
            "verify: cannot tell ({scope}): {}",
            printable(verdict.reason.as_deref().unwrap_or("no reason given"))
        ),
        outcome => writeln!(
            text,
            "verify: {} ({scope}, stream sequences 1 to {}): {} record(s), {} drifted, {} written since and not compared; \
             {} event(s) read, {} set aside as dead letters, in {:.1} s",
            outcome.as_str(),
            verdict.through_sequence,
            verdict.records,
            verdict.drifted,
            verdict.written_since,
            verdict.events_read,
            verdict.events_set_aside,
            verdict.seconds
        ),
    };
    let drifted: Vec<_> = verdict.per_workspace.iter().filter(|counts| counts.counts.drifted > 0).collect();
    for counts in drifted.iter().take(WORKSPACES_LISTED) {
        let _ = writeln!(
            text,
            "  workspace {} {}: {} of {} record(s) drifted",
            counts.workspace_id, counts.resource, counts.counts.drifted, counts.counts.records
        );
    }
    if drifted.len() > WORKSPACES_LISTED {
        let _ = writeln!(
            text,
            "  … and {} more workspaces (--output json lists them all)",
            drifted.len() - WORKSPACES_LISTED
        );
    }
    for drift in &verdict.first_drifted {
        let _ = writeln!(
            text,
            "  {} {} in workspace {}: {:?}, differs in {}",
            drift.resource,
            drift.id,
            drift.workspace_id,
            drift.kind,
            drift.columns.join(", ")
        );
        for column in &drift.columns {
            let value = |row: &Option<serde_json::Value>| {
                row.as_ref().map_or_else(|| "(no row)".to_owned(), |row| row[column.as_str()].to_string())
            };
            let _ = writeln!(
                text,
                "      {column}: expected {}, stored {}",
                printable(&value(&drift.expected)),
                printable(&value(&drift.stored))
            );
        }
    }
    if (verdict.drifted as usize) > verdict.first_drifted.len() {
        let _ = writeln!(
            text,
            "  ({} drifted record(s) not shown: --show N shows more)",
            verdict.drifted as usize - verdict.first_drifted.len()
        );
    }
    text
}

/// Remembers `verdict` in `read_model_verifications`.
pub async fn record(database_url: &str, verdict: &Verdict) -> Result<(), ProjectorError> {
    let mut connection = PgConnection::connect(database_url).await?;
    sqlx::query(
        "insert into read_model_verifications (workspace_id, through_sequence, outcome, records, drifted, reason) \
         values ($1, $2, $3, $4, $5, $6)",
    )
    .bind(verdict.workspace)
    .bind(i64::try_from(verdict.through_sequence).unwrap_or(i64::MAX))
    .bind(verdict.outcome.as_str())
    .bind(i64::try_from(verdict.records).unwrap_or(i64::MAX))
    .bind(i64::try_from(verdict.drifted).unwrap_or(i64::MAX))
    .bind(verdict.reason.as_deref())
    .execute(&mut connection)
    .await?;
    Ok(())
}

/// The last verify recorded.
#[derive(Clone, Debug, serde::Serialize, sqlx::FromRow)]
#[serde(rename_all = "camelCase")]
pub struct LastVerification {
    pub finished_at: DateTime<Utc>,
    pub workspace_id: Option<Uuid>,
    pub through_sequence: i64,
    pub outcome: String,
    pub records: i64,
    pub drifted: i64,
    pub reason: Option<String>,
    /// Whether it ran in the history the database is in now: false after a restore or a
    /// failover since, when its result says nothing about the rows the database holds now.
    pub in_this_history: bool,
}

impl LastVerification {
    /// The line `status` prints.
    pub fn describe(&self) -> String {
        let outcome = self.describe_outcome();
        if self.in_this_history {
            outcome
        } else {
            format!(
                "{outcome}\n  it ran before this database was restored or failed over, and says nothing about the \
                 read model now: run `lectern-projector verify`"
            )
        }
    }

    fn describe_outcome(&self) -> String {
        let scope = self.workspace_id.map_or_else(|| "every workspace".to_owned(), |id| format!("workspace {id}"));
        match self.reason.as_deref() {
            Some(reason) if self.outcome == Outcome::Undecided.as_str() => {
                format!("last verify {} ({scope}): cannot tell: {}", self.finished_at.to_rfc3339(), printable(reason))
            }
            _ => format!(
                "last verify {} ({scope}, through sequence {}): {}, {} of {} record(s) drifted",
                self.finished_at.to_rfc3339(),
                self.through_sequence,
                self.outcome,
                self.drifted,
                self.records
            ),
        }
    }
}

/// The last verify recorded, if any.
pub async fn last(pool: &PgPool) -> Result<Option<LastVerification>, sqlx::Error> {
    sqlx::query_as(
        "select finished_at, workspace_id, through_sequence, outcome, records, drifted, reason, \
                case when history_id is not null then history_id is not distinct from read_model_server_history() \
                     else coalesce(system_identifier = (pg_control_system()).system_identifier \
                                   and timeline = read_model_timeline(), true) end as in_this_history \
         from read_model_verifications order by id desc limit 1",
    )
    .fetch_optional(pool)
    .await
}
