//! What operators see: readiness (PostgreSQL reachable, schema current), the metrics
//! the API records, and the listener that serves them apart from the public port.

use std::sync::Arc;
use std::time::Duration;

use lectern_runtime::database_check::answer_within;
use lectern_runtime::server::{BeforeScrape, Degraded, Problems, ReadinessCheck};
use sqlx::PgPool;

use crate::app::AppState;
use crate::reads;
use crate::reads::notifications::ListenerHealth;
use crate::reads::replicas::Reads;

/// Ready when a statement runs and every migration this build knows is applied
/// (a newer schema from a later release is fine: migrations only add); degraded while
/// the change listener is down (the caches are bypassed, every answer still correct) or a
/// replica is out of the rotation (the primary and the others serve its reads).
pub async fn readiness(pool: &PgPool, listener: &ListenerHealth, reads: &Reads) -> Result<Degraded, Problems> {
    let query = sqlx::query_scalar("select version from _sqlx_migrations where success").fetch_all(pool);
    let applied: Vec<i64> = answer_within(pool, query)
        .await
        .map_err(|no_answer| vec![no_answer])?
        .map_err(|error| vec![describe_database_problem(&error)])?;
    let missing: Vec<String> = reads::MIGRATOR
        .iter()
        .filter(|migration| !applied.contains(&migration.version))
        .map(|migration| format!("{} {}", migration.version, migration.description))
        .collect();
    if missing.is_empty() {
        let replicas = reads.replica_statuses().into_iter().filter_map(|replica| {
            replica.problem.map(|problem| {
                format!(
                    "replica {} is out of the rotation ({problem}): the primary and the other replicas serve its reads",
                    replica.name
                )
            })
        });
        Ok(listener.problem().into_iter().chain(replicas).collect())
    } else {
        Err(vec![format!("migrations not applied (run `lectern-api migrate`): {}", missing.join(", "))])
    }
}

fn describe_database_problem(error: &sqlx::Error) -> String {
    match error {
        sqlx::Error::Database(db) if db.code().as_deref() == Some("42P01") => {
            "the database has no schema yet (run `lectern-api migrate`)".to_owned()
        }
        error if reads::is_unavailable(error) => format!("PostgreSQL is unreachable: {error}"),
        error => format!("PostgreSQL refused the readiness query: {error}"),
    }
}

/// The readiness check of `state` as both listeners take it: not ready once shutdown has
/// begun (load balancers move traffic away while the process still serves), else
/// [`readiness`].
pub fn readiness_check(state: &AppState) -> ReadinessCheck {
    let (pool, listener, reads) = (state.pool.clone(), state.change_listener.clone(), state.reads.clone());
    let (stopping, webhooks) = (state.shutdown.clone(), state.webhooks.clone());
    Arc::new(move || {
        let (pool, listener, reads) = (pool.clone(), listener.clone(), reads.clone());
        let (stopping, webhooks) = (stopping.clone(), webhooks.clone());
        Box::pin(async move {
            if stopping.is_cancelled() {
                return Err(vec![SHUTTING_DOWN.to_owned()]);
            }
            // A disabled endpoint is the receiver's problem, not this process's: a
            // detail of a ready answer, never a 503.
            let mut degraded = readiness(&pool, &listener, &reads).await?;
            degraded.extend(webhooks.problems());
            Ok(degraded)
        })
    })
}

/// What readiness says while the process shuts down.
pub const SHUTTING_DOWN: &str = "shutting down: finishing in-flight requests, send new ones elsewhere";

/// Pool usage is a reading, not an event: refreshed just before each scrape. Each of
/// the two sets of connections (`pool="shared"` for key checks, retrieves and
/// readiness, `pool="reads"` for listings and searches) has `max_connections`.
pub fn pool_gauges(pool: PgPool, reads: Arc<Reads>, max_connections: u32) -> BeforeScrape {
    Arc::new(move || {
        let open = pool.size();
        let idle = u32::try_from(pool.num_idle()).unwrap_or(open);
        record_pool("shared", open, idle);
        let (open, idle) = reads.primary().usage();
        record_pool("reads", open, idle);
        metrics::gauge!(crate::metric_names::POOL_MAX).set(f64::from(max_connections));
    })
}

fn record_pool(name: &'static str, open: u32, idle: u32) {
    metrics::gauge!(crate::metric_names::POOL_CONNECTIONS, "pool" => name, "state" => "idle").set(f64::from(idle));
    metrics::gauge!(crate::metric_names::POOL_CONNECTIONS, "pool" => name, "state" => "in_use")
        .set(f64::from(open.saturating_sub(idle)));
}

/// Counts one request under its route template (never the raw path: ids would make
/// every record a new time series).
pub fn record_request(route: &'static str, method: &str, status: u16, elapsed: Duration) {
    let status = status.to_string();
    metrics::counter!(crate::metric_names::HTTP_REQUESTS, "route" => route, "method" => method.to_owned(), "status" => status.clone())
        .increment(1);
    metrics::histogram!(crate::metric_names::HTTP_DURATION, "route" => route, "status" => status)
        .record(elapsed.as_secs_f64());
}

/// The route template a path belongs to.
pub fn route_of(path: &str) -> &'static str {
    let mut segments = path.trim_end_matches('/').split('/').skip(1);
    match (segments.next(), segments.next(), segments.next(), segments.next()) {
        (Some("v1"), Some("contacts"), None, _) => "/v1/contacts",
        (Some("v1"), Some("contacts"), Some("changes"), None) => "/v1/contacts/changes",
        (Some("v1"), Some("contacts"), Some(_), None) => "/v1/contacts/{id}",
        (Some("v1"), Some("items"), None, _) => "/v1/items",
        (Some("v1"), Some("items"), Some("changes"), None) => "/v1/items/changes",
        (Some("v1"), Some("items"), Some(_), None) => "/v1/items/{id}",
        (Some("v1"), Some("openapi.json"), None, _) => "/v1/openapi.json",
        (Some("healthz"), None, _, _) => "/healthz",
        (Some("readyz"), None, _, _) => "/readyz",
        (Some("docs"), _, _, _) => "/docs",
        _ => "unmatched",
    }
}

#[cfg(test)]
mod tests {
    use super::route_of;

    #[test]
    fn metrics_label_requests_by_route_template_never_by_raw_path() {
        assert_eq!(route_of("/v1/contacts"), "/v1/contacts");
        assert_eq!(route_of("/v1/contacts/"), "/v1/contacts");
        assert_eq!(route_of("/v1/contacts/3f1c0e7a-0000-4000-8000-000000000000"), "/v1/contacts/{id}");
        assert_eq!(route_of("/v1/items/anything"), "/v1/items/{id}");
        assert_eq!(route_of("/v1/contacts/changes"), "/v1/contacts/changes");
        assert_eq!(route_of("/v1/items/changes"), "/v1/items/changes");
        assert_eq!(route_of("/v1/items/a/b"), "unmatched");
        assert_eq!(route_of("/wp-admin/login.php"), "unmatched");
        assert_eq!(route_of("/readyz"), "/readyz");
    }
}
