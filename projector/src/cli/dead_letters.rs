//! `lectern-projector dead-letters list | retry | discard`, as the operator reads them.

use sqlx::PgPool;

use super::{to_json, write_stdout, Output};
use crate::dead_letters::printable;
use crate::error::ProjectorError;
use crate::repair::dead_letters;

/// Lists the dead letters, as JSON or one paragraph each.
pub async fn list(pool: &PgPool, output: Output) -> Result<(), ProjectorError> {
    let letters = dead_letters::list(pool).await?;
    match output {
        Output::Json => write_stdout(&format!("{}\n", to_json(&letters)?)),
        Output::Text if letters.is_empty() => write_stdout("No dead letters.\n"),
        Output::Text => write_stdout(
            &letters
                .iter()
                .map(|letter| {
                    format!(
                        "{}  seq {}  {}  {}\n    {}\n",
                        letter.id,
                        letter.stream_sequence,
                        letter.received_at.to_rfc3339(),
                        printable(&letter.subject),
                        printable(&letter.reason)
                    )
                })
                .collect::<String>(),
        ),
    }
}

/// Applies again the dead letter `id` (or `all`) that now passes the contract; fails
/// (after listing them) while any still breaks it.
pub async fn retry(pool: &PgPool, id: Option<i64>, all: bool) -> Result<(), ProjectorError> {
    let outcome = dead_letters::retry(pool, if all { None } else { id }).await?;
    if !all && outcome.applied.is_empty() && outcome.still_failing.is_empty() {
        return Err(ProjectorError::Usage(format!("no dead letter with id {}", id.unwrap_or_default())));
    }
    let mut text = format!("{} applied and removed", outcome.applied.len());
    for (id, reason) in &outcome.still_failing {
        text.push_str(&format!("\n{id} still fails: {}", printable(reason)));
    }
    write_stdout(&format!("{text}\n"))?;
    match outcome.still_failing.len() {
        0 => Ok(()),
        failing => Err(ProjectorError::DeadLettersStillFail(failing)),
    }
}

/// Removes the dead letter `id`, or every letter a newer version of its record replaced.
pub async fn discard(pool: &PgPool, id: Option<i64>, superseded: bool) -> Result<(), ProjectorError> {
    if superseded {
        let outcome = dead_letters::discard_superseded(pool).await?;
        let ids: Vec<String> = outcome.discarded.iter().map(ToString::to_string).collect();
        return write_stdout(&format!(
            "{} superseded dead letter(s) discarded{}; {} kept (discard them by id once nothing is left to fix)\n",
            ids.len(),
            if ids.is_empty() { String::new() } else { format!(": {}", ids.join(", ")) },
            outcome.kept
        ));
    }
    let id = id.unwrap_or_default();
    if !dead_letters::discard(pool, id).await? {
        return Err(ProjectorError::Usage(format!("no dead letter with id {id}")));
    }
    write_stdout(&format!("dead letter {id} discarded\n"))
}
