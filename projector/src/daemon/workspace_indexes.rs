//! Gives each large workspace a search index of its own.
//!
//! Why: the shared search indexes (`contacts_search`, `items_search`) key trigrams by
//! workspace, but PostgreSQL still walks the posting list of a term's rarest trigram
//! across every workspace before the workspace narrows it down. On the benchmark's
//! million contacts, a rare term in the workspace of 200,000 ("66043831") spent 2.2 ms
//! in that index scan; on a partial index holding only that workspace's rows the same
//! scan took 0.3-0.45 ms. Searches are planned per execution with the real workspace
//! (lectern-api, `reads/connections.rs`), so PostgreSQL takes a workspace's own index
//! whenever it is the cheaper path; the API's SQL does not change.
//!
//! Which workspaces: candidates come from the planner's statistics of `workspace_id`
//! (its most common values, so finding them scans nothing), and an exact count of the
//! active rows decides. An index is built once a workspace reaches `from_rows` active
//! rows and dropped once it falls below half of that, so a workspace near the line
//! does not flap. Builds and drops run `concurrently`: projection and reads go on
//! meanwhile. A build that failed leaves an invalid index behind, which the next round
//! drops and builds again.
//!
//! Any number of projectors may run, so a round holds an advisory lock for its whole
//! length: without it one projector would take another's build in progress (invalid
//! until it ends) for a failed one, drop it and build it again, and the other would do
//! the same in turn. The round has a session of its own, so the lock goes with the
//! session however the round ends.

use std::time::{Duration, Instant};

use sqlx::{Connection, PgConnection, PgPool};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// The tables whose large workspaces get their own index, each with a shared `*_search`
/// index over the same generated `search_text` column.
const TABLES: [&str; 2] = ["contacts", "items"];

/// PostgreSQL's `insufficient_privilege`: building an index needs the table's owner.
const INSUFFICIENT_PRIVILEGE: &str = "42501";

/// The advisory lock key a round holds ("lectern" and a number, in one bigint).
pub const ROUND_LOCK: i64 = 0x6c65_6374_6572_6e01;

/// When a workspace gets an index of its own, and how often that is looked at.
#[derive(Clone, Copy, Debug)]
pub struct OwnIndexSettings {
    /// Active rows from which a workspace's records get an index of their own.
    pub from_rows: i64,
    /// Pause between two rounds of looking.
    pub check_every: Duration,
}

impl Default for OwnIndexSettings {
    fn default() -> Self {
        Self { from_rows: 50_000, check_every: Duration::from_secs(60) }
    }
}

/// The name of `workspace`'s own search index on `table`: within PostgreSQL's 63 bytes,
/// and the workspace is read back from it.
pub fn index_name(table: &'static str, workspace: Uuid) -> String {
    format!("{table}_search_ws_{}", workspace.simple())
}

/// Whether the index `name` exists (`None` if not) and is valid: a build in progress or
/// one that failed is not.
pub async fn validity(pool: &PgPool, name: &str) -> Result<Option<bool>, sqlx::Error> {
    sqlx::query_scalar(
        "select i.indisvalid from pg_index i join pg_class c on c.oid = i.indexrelid where c.relname = $1",
    )
    .bind(name)
    .fetch_optional(pool)
    .await
}

/// Looks every `check_every` until `shutdown`. Without the privilege to build indexes it
/// says so once and stops; searches then use the shared indexes alone.
pub async fn maintain(pool: PgPool, settings: OwnIndexSettings, shutdown: CancellationToken) {
    loop {
        match round(&pool, settings.from_rows).await {
            Ok(()) => {}
            Err(sqlx::Error::Database(error)) if error.code().as_deref() == Some(INSUFFICIENT_PRIVILEGE) => {
                tracing::warn!(
                    "the projector's database user does not own the read model's tables, so large workspaces get no \
                     search index of their own; own them to keep searches in large workspaces fast"
                );
                return;
            }
            Err(error) => tracing::warn!(%error, "maintaining workspace search indexes failed; trying again later"),
        }
        tokio::select! {
            () = tokio::time::sleep(settings.check_every) => {}
            () = shutdown.cancelled() => return,
        }
    }
}

/// One look at every table, unless another projector is having its own.
async fn round(pool: &PgPool, from_rows: i64) -> Result<(), sqlx::Error> {
    let mut session = PgConnection::connect_with(&pool.connect_options()).await?;
    let locked: bool =
        sqlx::query_scalar("select pg_try_advisory_lock($1)").bind(ROUND_LOCK).fetch_one(&mut session).await?;
    if locked {
        for table in TABLES {
            reconcile(&mut session, table, from_rows).await?;
        }
    }
    session.close().await
}

/// Builds the indexes `table`'s large workspaces lack, and drops those of workspaces that
/// have shrunk and those a failed build left invalid.
async fn reconcile(session: &mut PgConnection, table: &'static str, from_rows: i64) -> Result<(), sqlx::Error> {
    let mut kept = Vec::new();
    for (workspace, valid) in own_indexes(session, table).await? {
        if valid && active_rows(session, table, workspace).await? >= from_rows / 2 {
            kept.push(workspace);
        } else {
            let name = index_name(table, workspace);
            simple_statement(session, format!("drop index concurrently if exists {name}")).await?;
            tracing::info!(index = name, valid, "dropped a workspace's own search index");
        }
    }
    for workspace in candidates(session, table, from_rows / 2).await? {
        if kept.contains(&workspace) {
            continue;
        }
        let rows = active_rows(session, table, workspace).await?;
        if rows >= from_rows {
            build(session, table, workspace, rows).await?;
        }
    }
    Ok(())
}

async fn build(session: &mut PgConnection, table: &'static str, workspace: Uuid, rows: i64) -> Result<(), sqlx::Error> {
    let name = index_name(table, workspace);
    let started = Instant::now();
    // The statement is assembled from constants and a UUID's canonical text: nothing of it
    // comes from outside. `concurrently` cannot run in a transaction, hence the simple
    // protocol.
    simple_statement(
        session,
        format!(
            "create index concurrently if not exists {name} on {table} using gin (search_text gin_trgm_ops) \
             where workspace_id = '{workspace}' and status = 'active'"
        ),
    )
    .await?;
    tracing::info!(
        index = name,
        rows,
        seconds = started.elapsed().as_secs_f64(),
        "built a workspace's own search index"
    );
    Ok(())
}

/// The workspaces with an index of their own on `table`, and whether it is valid.
async fn own_indexes(session: &mut PgConnection, table: &'static str) -> Result<Vec<(Uuid, bool)>, sqlx::Error> {
    let rows: Vec<(String, bool)> = sqlx::query_as(
        "select c.relname::text, i.indisvalid from pg_index i join pg_class c on c.oid = i.indexrelid \
         where i.indrelid = $1::regclass and c.relname like $2",
    )
    .bind(table)
    .bind(format!("{table}\\_search\\_ws\\_%"))
    .fetch_all(&mut *session)
    .await?;
    Ok(rows
        .into_iter()
        .filter_map(|(name, valid)| Some((Uuid::try_parse(name.rsplit('_').next()?).ok()?, valid)))
        .collect())
}

/// Workspaces the planner's statistics estimate at `at_least` rows or more: a loose bar,
/// as the statistics are sampled and count every status; the exact count decides.
async fn candidates(session: &mut PgConnection, table: &'static str, at_least: i64) -> Result<Vec<Uuid>, sqlx::Error> {
    sqlx::query_scalar(
        "select common.workspace_id from pg_class c \
         join pg_namespace n on n.oid = c.relnamespace \
         join pg_stats s on s.schemaname = n.nspname and s.tablename = c.relname and s.attname = 'workspace_id' \
         cross join lateral unnest(s.most_common_vals::text::uuid[], s.most_common_freqs) \
             as common(workspace_id, frequency) \
         where c.oid = $1::regclass and common.frequency * greatest(c.reltuples, 0) >= $2",
    )
    .bind(table)
    .bind(at_least as f64)
    .fetch_all(&mut *session)
    .await
}

async fn active_rows(session: &mut PgConnection, table: &'static str, workspace: Uuid) -> Result<i64, sqlx::Error> {
    let sql = format!("select count(*) from {table} where workspace_id = $1 and status = 'active'");
    sqlx::query_scalar(&sql).bind(workspace).fetch_one(&mut *session).await
}

/// A statement without parameters: sqlx sends a bare string by the simple protocol, which
/// `concurrently` needs (it refuses to run inside a transaction, which the extended
/// protocol can open implicitly).
async fn simple_statement(session: &mut PgConnection, sql: String) -> Result<(), sqlx::Error> {
    sqlx::Executor::execute(session, sql.as_str()).await.map(drop)
}
