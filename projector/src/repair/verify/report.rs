//! A verdict as people and machines read it, as it is remembered, and the last one
//! remembered in words.

use std::fmt::Write as _;

use sqlx::{Connection, PgConnection};

use super::{Outcome, Verdict};
use crate::dead_letters::printable;
use crate::error::ProjectorError;
use crate::verifications::LastVerification;

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

/// The line `status` prints for the last verify recorded.
pub fn describe_last(last: &LastVerification) -> String {
    let outcome = describe_last_outcome(last);
    if last.in_this_history {
        outcome
    } else {
        format!(
            "{outcome}\n  it ran before this database was restored or failed over, and says nothing about the \
             read model now: run `lectern-projector verify`"
        )
    }
}

fn describe_last_outcome(last: &LastVerification) -> String {
    let scope = last.workspace_id.map_or_else(|| "every workspace".to_owned(), |id| format!("workspace {id}"));
    match last.reason.as_deref() {
        Some(reason) if last.outcome == Outcome::Undecided.as_str() => {
            format!("last verify {} ({scope}): cannot tell: {}", last.finished_at.to_rfc3339(), printable(reason))
        }
        _ => format!(
            "last verify {} ({scope}, through sequence {}): {}, {} of {} record(s) drifted",
            last.finished_at.to_rfc3339(),
            last.through_sequence,
            last.outcome,
            last.drifted,
            last.records
        ),
    }
}
