//! How much WAL PostgreSQL wrote over a phase, and how many checkpoints it ran: the
//! publish→visible tail follows both (full-page images after every checkpoint, and the
//! flushes they lengthen), so a run's figures are read beside them.

use std::time::Duration;

use sqlx::PgPool;

use super::{Context, Result};

/// The server's WAL position and checkpoint counters at one moment.
#[derive(Clone, Copy, Debug)]
pub struct WalMark {
    /// Bytes of WAL written since the cluster began (`pg_current_wal_lsn()`).
    position: i64,
    /// Checkpoints started by time and by request (WAL volume, mostly); `None` where
    /// the server's statistics could not be read.
    checkpoints: Option<(i64, i64)>,
}

impl WalMark {
    pub async fn take(pool: &PgPool) -> Result<Self> {
        let position: i64 = sqlx::query_scalar("select pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint")
            .fetch_one(pool)
            .await
            .context("read the WAL position")?;
        Ok(Self { position, checkpoints: checkpoints(pool).await })
    }

    /// "1,234 MB of WAL (51 MB/s); 3 checkpoints (1 by time, 2 requested)", from `self`
    /// to `later`, over `elapsed`.
    pub fn describe_until(&self, later: &Self, elapsed: Duration) -> String {
        let megabytes = (later.position - self.position) as f64 / 1e6;
        let wal = format!(
            "{} MB of WAL ({:.0} MB/s)",
            super::report::thousands(megabytes),
            megabytes / elapsed.as_secs_f64().max(1e-9)
        );
        match (self.checkpoints, later.checkpoints) {
            (Some((timed, requested)), Some((timed_later, requested_later))) => {
                let (timed, requested) = (timed_later - timed, requested_later - requested);
                let count = timed + requested;
                let noun = if count == 1 { "checkpoint" } else { "checkpoints" };
                format!("{wal}; {count} {noun} ({timed} by time, {requested} requested)")
            }
            _ => format!("{wal}; checkpoints not counted (no checkpoint statistics)"),
        }
    }
}

/// PostgreSQL 17 moved the counters from `pg_stat_bgwriter` to `pg_stat_checkpointer`;
/// the version decides which is asked, so the server's log gets no error.
async fn checkpoints(pool: &PgPool) -> Option<(i64, i64)> {
    let version: i32 =
        sqlx::query_scalar("select current_setting('server_version_num')::int").fetch_one(pool).await.ok()?;
    let sql = if version >= 170_000 {
        "select num_timed, num_requested from pg_stat_checkpointer"
    } else {
        "select checkpoints_timed, checkpoints_req from pg_stat_bgwriter"
    };
    sqlx::query_as::<_, (i64, i64)>(sql).fetch_one(pool).await.ok()
}
