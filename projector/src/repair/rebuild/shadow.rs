//! The shadow tables a rebuild fills from the stream beside the live ones, and how far
//! they are filled.
//!
//! Unlogged (no WAL for a model that is thrown away or folded into the live one), with the
//! live tables' columns, defaults, checks, generated columns and row triggers that shape
//! a row before it is written, so that a row is built as a live write builds it. The
//! position they are filled through is written in the same transaction as each batch.

use std::collections::HashSet;

use lectern_schema::events::EntityKind;
use sqlx::{Connection, PgConnection};
use uuid::Uuid;

use crate::apply::{write_events_into, Received, Tables};
use crate::error::{is_transient_database_error, ProjectorError};
use crate::repair::set_aside::applied_events;

/// The shadow tables, one per live table.
pub const TABLES: Tables<'static> = Tables { contacts: "rebuild_contacts", items: "rebuild_items" };

/// (live, shadow) table names.
pub fn pairs() -> [(&'static str, &'static str); 2] {
    [(Tables::LIVE.contacts, TABLES.contacts), (Tables::LIVE.items, TABLES.items)]
}

/// Where a rebuild starts: from scratch, or where an earlier one stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    Fresh,
    /// The shadow tables hold the stream through this sequence.
    Resumed(u64),
}

/// A rebuild under way, or one killed before it finished, as `status` shows it.
#[derive(Clone, Debug, serde::Serialize, sqlx::FromRow)]
#[serde(rename_all = "camelCase")]
pub struct UnderWay {
    pub started_at: chrono::DateTime<chrono::Utc>,
    /// The shadow tables hold the stream through this sequence.
    pub through_sequence: i64,
}

impl UnderWay {
    /// The line `status` prints.
    pub fn describe(&self) -> String {
        format!(
            "rebuild started {}, its shadow tables hold the stream through sequence {} (running, or killed: \
             `rebuild` resumes it)",
            self.started_at.to_rfc3339(),
            self.through_sequence
        )
    }
}

/// Drops the shadow tables and the rebuild's progress, once folded in (in the fold's
/// transaction).
pub async fn drop_all(connection: &mut PgConnection) -> Result<(), sqlx::Error> {
    for (_, shadow) in pairs() {
        sqlx::query(&format!("drop table {shadow}")).execute(&mut *connection).await?;
    }
    sqlx::query(&format!("drop table {SHADOW_POSITION}")).execute(&mut *connection).await?;
    sqlx::query("delete from read_model_rebuild").execute(&mut *connection).await?;
    Ok(())
}

/// The rebuild under way, if any.
pub async fn under_way(pool: &sqlx::PgPool) -> Result<Option<UnderWay>, sqlx::Error> {
    sqlx::query_as("select started_at, through_sequence from read_model_rebuild").fetch_optional(pool).await
}

/// Where the shadow tables themselves say they are filled through: an unlogged table like
/// them, written in the same transaction as each batch. Crash recovery empties unlogged
/// tables, and a promoted standby or a restored backup has them empty, while the position
/// in `read_model_rebuild` is logged and survives: only when both agree do the shadow
/// tables hold what the position says.
const SHADOW_POSITION: &str = "rebuild_shadow_position";

/// Finds an unfinished rebuild's shadow tables, or creates them empty. Shadow tables that
/// no longer hold what the recorded position says (emptied by a crash, a restart after
/// one, a failover or a restore) are not resumed: the rebuild starts again.
pub async fn prepare(connection: &mut PgConnection) -> Result<Start, ProjectorError> {
    let through: Option<i64> =
        sqlx::query_scalar("select through_sequence from read_model_rebuild").fetch_optional(&mut *connection).await?;
    let tables_exist: bool = sqlx::query_scalar(
        "select count(*) = 3 from pg_class where relname = any($1) and relkind = 'r' and relpersistence = 'u'",
    )
    .bind([TABLES.contacts, TABLES.items, SHADOW_POSITION])
    .fetch_one(&mut *connection)
    .await?;
    if let (Some(through), true) = (through, tables_exist) {
        let held: Option<i64> = sqlx::query_scalar(&format!("select through_sequence from {SHADOW_POSITION}"))
            .fetch_optional(&mut *connection)
            .await?;
        if held == Some(through) {
            return Ok(Start::Resumed(through.unsigned_abs()));
        }
        tracing::warn!(
            recorded = through,
            held = held.unwrap_or(0),
            "the shadow tables do not hold what the rebuild's position says (a crash, a failover or a restore \
             empties unlogged tables): starting the rebuild again"
        );
    }
    let mut transaction = connection.begin().await?;
    sqlx::query(&format!("drop table if exists {SHADOW_POSITION}")).execute(&mut *transaction).await?;
    sqlx::query(&format!("create unlogged table {SHADOW_POSITION} (through_sequence bigint not null)"))
        .execute(&mut *transaction)
        .await?;
    sqlx::query(&format!("insert into {SHADOW_POSITION} values (0)")).execute(&mut *transaction).await?;
    for (live, shadow) in pairs() {
        sqlx::query(&format!("drop table if exists {shadow}")).execute(&mut *transaction).await?;
        sqlx::query(&format!(
            "create unlogged table {shadow} (like {live} including defaults including constraints \
             including generated, primary key (workspace_id, id))"
        ))
        .execute(&mut *transaction)
        .await?;
        let shaping: Vec<String> = sqlx::query_scalar(
            "select pg_get_triggerdef(oid) from pg_trigger where tgrelid = $1::regclass and not tgisinternal \
             and tgtype & 3 = 3",
        )
        .bind(live)
        .fetch_all(&mut *transaction)
        .await?;
        for definition in shaping {
            let definition = definition.replacen(&format!(" ON public.{live} "), &format!(" ON public.{shadow} "), 1);
            sqlx::query(&definition).execute(&mut *transaction).await?;
        }
    }
    sqlx::query("delete from read_model_rebuild").execute(&mut *transaction).await?;
    sqlx::query("insert into read_model_rebuild (through_sequence) values (0)").execute(&mut *transaction).await?;
    transaction.commit().await?;
    Ok(Start::Fresh)
}

/// A record a batch wrote: (live table, workspace, id).
pub type Written = (&'static str, Uuid, Uuid);

/// Writes `batch`'s applied events into the shadow tables and moves the position past it,
/// in one transaction on `connection` (or in the caller's, if one is open). Adds the
/// records written to `written`, when asked.
pub async fn load(
    connection: &mut PgConnection,
    batch: &[Received],
    dead_letters: &HashSet<i64>,
    set_aside: &mut u64,
    written: Option<&mut Vec<Written>>,
) -> Result<(), ProjectorError> {
    let Some(last) = batch.last() else { return Ok(()) };
    let events = applied_events(batch, dead_letters, set_aside);
    if let Some(written) = written {
        written.extend(events.iter().map(|event| {
            let table = match event.event_type.entity {
                EntityKind::Contact => Tables::LIVE.contacts,
                EntityKind::Item => Tables::LIVE.items,
            };
            (table, event.workspace_id, event.entity_id)
        }));
    }
    let mut transaction = connection.begin().await?;
    sqlx::query("savepoint whole_batch").execute(&mut *transaction).await?;
    match write_events_into(&mut transaction, events.iter(), TABLES).await {
        Ok(()) => {}
        Err(error) if is_transient_database_error(&error) => return Err(error.into()),
        // One refused row fails the statement: the events one by one, as the projector
        // writes them, the refused ones left out as it leaves them out.
        Err(_) => {
            sqlx::query("rollback to savepoint whole_batch").execute(&mut *transaction).await?;
            for event in &events {
                sqlx::query("savepoint one_event").execute(&mut *transaction).await?;
                match write_events_into(&mut transaction, std::iter::once(event), TABLES).await {
                    Ok(()) => {}
                    Err(error) if is_transient_database_error(&error) => return Err(error.into()),
                    Err(_) => {
                        sqlx::query("rollback to savepoint one_event").execute(&mut *transaction).await?;
                        *set_aside += 1;
                    }
                }
            }
        }
    }
    let through = i64::try_from(last.stream_sequence).unwrap_or(i64::MAX);
    sqlx::query("update read_model_rebuild set through_sequence = $1").bind(through).execute(&mut *transaction).await?;
    sqlx::query(&format!("update {SHADOW_POSITION} set through_sequence = $1"))
        .bind(through)
        .execute(&mut *transaction)
        .await?;
    transaction.commit().await?;
    Ok(())
}
