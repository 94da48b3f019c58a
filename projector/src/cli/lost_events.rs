//! `lectern-projector lost-events list | accept`, as the operator reads them.

use sqlx::PgPool;

use super::{to_json, write_stdout, Output};
use crate::dead_letters::printable;
use crate::error::ProjectorError;
use crate::lost_events;
use crate::stream::StreamId;

/// Lists the lost events, as JSON or one paragraph each.
pub async fn list(pool: &PgPool, output: Output) -> Result<(), ProjectorError> {
    let lost = lost_events::list(pool).await?;
    match output {
        Output::Json => write_stdout(&format!("{}\n", to_json(&lost)?)),
        Output::Text if lost.is_empty() => write_stdout("No lost events.\n"),
        Output::Text => write_stdout(
            &lost
                .iter()
                .map(|lost| {
                    format!(
                        "{} event(s) of {}, sequences {}, found {}{}\n    {}\n",
                        lost.events,
                        StreamId::from_nanos(lost.stream),
                        lost.sequences,
                        lost.found_at.to_rfc3339(),
                        lost.accepted_at.map_or_else(String::new, |at| format!(", accepted {}", at.to_rfc3339())),
                        printable(&lost.reason)
                    )
                })
                .collect::<String>(),
        ),
    }
}

/// Accepts every lost event not accepted yet.
pub async fn accept(pool: &PgPool) -> Result<(), ProjectorError> {
    let accepted = lost_events::accept(pool).await?;
    write_stdout(&format!("{accepted} lost event(s) accepted\n"))
}
