//! What operators see of the projector: its readiness (connected to NATS, PostgreSQL
//! reachable, no batch stuck; degraded while acknowledged events are lost) on the
//! operations listener beside `/metrics` and `/healthz`.

use std::sync::Arc;

use async_nats::connection::State;
use lectern_runtime::database_check::answer_within;
use lectern_runtime::server::{BeforeScrape, Degraded, Problems, ReadinessCheck};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::connections;
use crate::daemon::{staleness, stuck};
use crate::{dead_letters, lost_events, verifications};

/// Ready when the NATS connection is up, PostgreSQL answers a statement and no batch is
/// stuck: a stuck batch's events are not becoming visible, whatever the connections say.
/// Degraded, still ready, while lost events wait for an operator: this process can do its
/// work, but the read model may lack what they wrote.
pub async fn readiness(
    client: &async_nats::Client,
    pool: &PgPool,
    batches: &stuck::Batches,
) -> Result<Degraded, Problems> {
    let mut problems = Vec::new();
    let mut degraded = Degraded::new();
    if client.connection_state() != State::Connected {
        problems.push(format!("not connected to NATS (connection {})", describe(client.connection_state())));
    }
    // The statement that proves PostgreSQL answers.
    match answer_within(pool, lost_events::unaccepted(pool)).await {
        Ok(Ok(lost)) => {
            connections::postgres_answered();
            crate::metrics::record_lost_unaccepted(lost);
            if lost > 0 {
                degraded.push(format!(
                    "{lost} acknowledged event(s) are lost: the database lost them and the stream no longer holds \
                     them (`lectern-projector lost-events list`)"
                ));
            }
        }
        Ok(Err(error)) => {
            connections::postgres_failed(pool, &error).await;
            problems.push(connections::describe_failure(pool, &error).await);
        }
        Err(no_answer) => {
            connections::postgres_lost(&no_answer);
            problems.push(no_answer);
        }
    }
    problems.extend(batches.problem());
    if problems.is_empty() {
        Ok(degraded)
    } else {
        Err(problems)
    }
}

fn describe(state: State) -> &'static str {
    match state {
        State::Connected => "connected",
        State::Disconnected => "disconnected",
        State::Pending => "pending",
    }
}

/// The readiness check as the operations listener takes it.
pub fn readiness_check(client: async_nats::Client, pool: PgPool, batches: stuck::Batches) -> ReadinessCheck {
    Arc::new(move || {
        let client = client.clone();
        let pool = pool.clone();
        let batches = batches.clone();
        Box::pin(async move { readiness(&client, &pool, &batches).await })
    })
}

/// What the run loop keeps for readiness and the metrics to read.
#[derive(Clone, Default)]
pub struct Watched {
    pub batches: stuck::Batches,
    pub staleness: staleness::Staleness,
}

/// Before a scrape, the gauges that change by time passing, not by anything happening:
/// stuck batches and how far behind the stream the read model is. Every other projector
/// metric is recorded as it happens.
pub fn before_scrape(watched: Watched) -> BeforeScrape {
    Arc::new(move || {
        watched.batches.record_gauge();
        crate::metrics::record_lag_now(watched.batches.messages_in_hand());
        watched.staleness.record_gauges();
    })
}

/// How often the running projector reads what the database holds for its metrics.
const FROM_THE_DATABASE_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// Exports what the database holds for every process (the last verify recorded, the
/// dead letters stored, the lost events not accepted) as metrics, until `shutdown`: read from the tables, so a restart
/// or another projector does not change what they say.
pub async fn export_from_the_database(pool: PgPool, shutdown: CancellationToken) {
    loop {
        match verifications::last(&pool).await {
            Ok(Some(last)) => crate::metrics::record_last_verification(
                last.finished_at.timestamp_millis() as f64 / 1000.0,
                last.drifted,
                // A verify from before a restore or a failover says nothing about the rows now.
                if last.in_this_history { &last.outcome } else { crate::metrics::STALE_VERIFY },
            ),
            Ok(None) => crate::metrics::record_last_verification(0.0, 0, ""),
            Err(error) => tracing::debug!(%error, "reading the last verify for the metrics"),
        }
        match dead_letters::count(&pool).await {
            Ok(stored) => crate::metrics::record_dead_letters(stored),
            Err(error) => tracing::debug!(%error, "counting the dead letters for the metrics"),
        }
        match lost_events::unaccepted(&pool).await {
            Ok(lost) => crate::metrics::record_lost_unaccepted(lost),
            Err(error) => tracing::debug!(%error, "counting the lost events for the metrics"),
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(FROM_THE_DATABASE_EVERY) => {}
        }
    }
}
