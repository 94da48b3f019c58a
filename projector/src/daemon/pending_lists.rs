//! Keeps the search indexes' pending lists short, off the commit path.
//!
//! A GIN index with `fastupdate` (the default) takes new entries into an unsorted
//! pending list and merges it into the index once it passes `gin_pending_list_limit`
//! (4 MB). The insert that crosses the limit pays the whole merge inside its own
//! transaction: at 2,000 updates/s that held a projector commit for up to ~0.7 s every
//! few seconds, and every search meanwhile scanned the whole unsorted list. Merging
//! what a few batches added, from a connection of its own, moves that work beside the
//! commits instead of into them.

use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// How often, at most, the lists are merged while batches keep committing: short
/// enough that a list stays far below the limit, long enough that a merge has a few
/// batches' entries to sort together.
pub const MERGE_EVERY: Duration = Duration::from_millis(200);

/// PostgreSQL's `insufficient_privilege`: merging a pending list needs the index's owner.
const INSUFFICIENT_PRIVILEGE: &str = "42501";

/// Merges the pending lists after commits (signalled on `committed`), at most every
/// [`MERGE_EVERY`], until `shutdown`. Without the privilege it stops for good and
/// PostgreSQL merges the lists in the commits as before.
pub async fn merge_after_commits(pool: PgPool, committed: Arc<Notify>, shutdown: CancellationToken) {
    loop {
        tokio::select! {
            () = committed.notified() => {}
            () = shutdown.cancelled() => return,
        }
        match merge(&pool).await {
            Ok(pages) if pages > 0 => tracing::debug!(pages, "merged search-index pending lists"),
            Ok(_) => {}
            Err(sqlx::Error::Database(error)) if error.code().as_deref() == Some(INSUFFICIENT_PRIVILEGE) => {
                tracing::warn!(
                    "the projector's database user does not own the search indexes, so their pending lists are merged \
                     inside commits; own them to keep publish-to-visible latency low"
                );
                return;
            }
            // The apply loop reports the database being away; the next commit retries.
            Err(error) => tracing::debug!(%error, "merging search-index pending lists failed"),
        }
        tokio::select! {
            () = tokio::time::sleep(MERGE_EVERY) => {}
            () = shutdown.cancelled() => return,
        }
    }
}

/// Pages moved out of the pending lists, every index in one statement: the shared search
/// indexes (migrations/…_read_model.sql) and the large workspaces' own
/// ([`crate::daemon::workspace_indexes`]), whichever exist and are built.
async fn merge(pool: &PgPool) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "select coalesce(sum(gin_clean_pending_list(i.indexrelid::regclass)), 0)::bigint \
         from pg_index i join pg_class c on c.oid = i.indexrelid join pg_am am on am.oid = c.relam \
         where am.amname = 'gin' and i.indisvalid and i.indrelid in ('contacts'::regclass, 'items'::regclass)",
    )
    .fetch_one(pool)
    .await
}
