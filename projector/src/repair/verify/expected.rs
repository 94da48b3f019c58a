//! The read model as the stream says it should be: every valid event written, by the
//! projector's own upserts, into temporary tables of the live tables' columns and
//! constraints. What the projector would write and what `verify` expects come from the
//! same code, so they differ only where the read model drifted.

use std::collections::HashSet;

use sqlx::{Connection, PgConnection};

use crate::apply::{write_events_into, Received, Tables};
use crate::dead_letters;
use crate::error::{is_transient_database_error, ProjectorError};
use crate::repair::set_aside::applied_events;

/// The temporary tables, one per live table.
pub const TABLES: Tables<'static> = Tables { contacts: "verify_contacts", items: "verify_items" };

/// Room for the temporary tables in memory before they spill to disk (the session's
/// own buffers; PostgreSQL's default is 8 MB).
const TEMP_BUFFERS: &str = "1GB";

/// The expected model, on a session of its own.
pub struct Expected {
    connection: PgConnection,
    /// Sequences of dead letters: events the projector set aside, which no row reflects.
    dead_letters: HashSet<i64>,
    /// Valid events written.
    pub applied: u64,
    /// Dead letters, and events that break the contract (the projector sets them aside).
    pub set_aside: u64,
    /// Valid events the database refused that are not among the dead letters.
    pub refused: u64,
}

impl Expected {
    /// Opens a session and creates the tables, empty.
    pub async fn create(database_url: &str) -> Result<Self, ProjectorError> {
        let mut connection = PgConnection::connect(database_url).await?;
        sqlx::query(&format!("set temp_buffers = '{TEMP_BUFFERS}'")).execute(&mut connection).await?;
        for (live, expected) in [("contacts", TABLES.contacts), ("items", TABLES.items)] {
            // Defaults and checks as the live table has them, so that the database
            // refuses what it refuses there; the primary key for the upserts.
            sqlx::query(&format!(
                "create temporary table {expected} (like {live} including defaults including constraints, \
                 primary key (workspace_id, id))"
            ))
            .execute(&mut connection)
            .await?;
        }
        let dead_letters = dead_letters::sequences(&mut connection).await?;
        Ok(Self { connection, dead_letters, applied: 0, set_aside: 0, refused: 0 })
    }

    /// Writes `batch`'s valid events, except dead letters.
    pub async fn write(&mut self, batch: &[Received]) -> Result<(), ProjectorError> {
        let events = applied_events(batch, &self.dead_letters, &mut self.set_aside);
        match write_events_into(&mut self.connection, events.iter(), TABLES).await {
            Ok(()) => self.applied += events.len() as u64,
            Err(error) if is_transient_database_error(&error) => return Err(error.into()),
            // One refused row fails the statement: write them one by one, as the
            // projector does, and count the ones refused.
            Err(_) => {
                for event in &events {
                    match write_events_into(&mut self.connection, std::iter::once(event), TABLES).await {
                        Ok(()) => self.applied += 1,
                        Err(error) if is_transient_database_error(&error) => return Err(error.into()),
                        Err(_) => self.refused += 1,
                    }
                }
            }
        }
        Ok(())
    }

    /// The session, for comparing.
    pub fn connection(&mut self) -> &mut PgConnection {
        &mut self.connection
    }
}
