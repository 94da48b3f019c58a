//! The verifies recorded in `read_model_verifications`, as every process reads them: the
//! running projector exports the last one as metrics ([`crate::daemon::operations`]) and
//! `status` shows it. Only `verify` writes the table, and words a row for people
//! ([`crate::repair::verify::report`]).

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;

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
