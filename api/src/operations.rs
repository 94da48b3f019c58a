//! What operators see: readiness (PostgreSQL reachable, schema current), the metrics
//! the API records, and the listener that serves them apart from the public port.

use std::sync::Arc;
use std::time::Duration;

use lectern_runtime::server::{BeforeScrape, Degraded, Problems, ReadinessCheck, DEPENDENCY_TIMEOUT};
use sqlx::PgPool;

use crate::db;
use crate::db::notifications::ListenerHealth;
use crate::db::replicas::Reads;

/// Names of the metrics the API records (one place, so docs/operations.md and tests agree).
pub mod names {
    pub const HTTP_REQUESTS: &str = "lectern_http_requests_total";
    /// Looks at a feed that found nothing new (a poll, or a long poll's wake-up), by
    /// where the answer came from (`memory`: the process knew the feed's head;
    /// `database`: it had to query).
    pub const FEED_EMPTY_POLLS: &str = "lectern_api_feed_empty_polls_total";
    /// Feed requests waiting for a change now (`wait`), holding no connection.
    pub const FEED_WAITING: &str = "lectern_api_feed_waiting_requests";
    /// Samples of the feed's bound this process took (`feed::bound`): one statement each,
    /// however many requests wait.
    pub const FEED_BOUND_SAMPLES: &str = "lectern_api_feed_bound_samples_total";
    /// Feed pages read before their client asked, by `outcome` (`served`: ready when asked
    /// for; `served_after_wait`: still being read; `stale`: a change of the feed was
    /// announced after the read; `unclaimed`: nobody asked in time).
    pub const FEED_READ_AHEAD: &str = "lectern_api_feed_read_ahead_pages_total";
    pub const HTTP_DURATION: &str = "lectern_http_request_duration_seconds";
    pub const KEY_CACHE: &str = "lectern_api_key_cache_lookups_total";
    pub const FIRST_PAGE_CACHE: &str = "lectern_first_page_cache_lookups_total";
    pub const POOL_CONNECTIONS: &str = "lectern_db_pool_connections";
    pub const POOL_MAX: &str = "lectern_db_pool_max_connections";
    pub const RATE_LIMITED: &str = "lectern_rate_limited_total";
    /// 1 while the change listener is up and proved alive, else 0 (caches bypassed).
    pub const LISTENER_UP: &str = "lectern_api_change_listener_up";
    /// Times the change listener was given up, by `reason`.
    pub const LISTENER_FAILURES: &str = "lectern_api_change_listener_failures_total";
    /// Statements of listings, retrieves and feeds, by `source` (`primary` or `replica`).
    pub const READS: &str = "lectern_api_reads_total";
    /// Seconds each replica (`replica` label) is behind the primary (NaN while unknown).
    pub const REPLICA_LAG: &str = "lectern_api_replica_lag_seconds";
    /// 1 while a replica serves reads, 0 while it is out of the rotation.
    pub const REPLICA_IN_ROTATION: &str = "lectern_api_replica_in_rotation";
    pub const CONNECTIONS_REFUSED: &str = "lectern_http_connections_refused_total";
    /// Connections closed for sending no request head in time (`reason="no_request"`)
    /// or for staying idle after their last response (`reason="idle"`).
    pub const CONNECTIONS_EXPIRED: &str = "lectern_http_connections_expired_total";
}

/// Ready when a statement runs and every migration this build knows is applied
/// (a newer schema from a later release is fine: migrations only add); degraded while
/// the change listener is down (the caches are bypassed, every answer still correct) or a
/// replica is out of the rotation (the primary and the others serve its reads).
pub async fn readiness(pool: &PgPool, listener: &ListenerHealth, reads: &Reads) -> Result<Degraded, Problems> {
    let query = sqlx::query_scalar("select version from _sqlx_migrations where success").fetch_all(pool);
    let applied: Vec<i64> = tokio::time::timeout(DEPENDENCY_TIMEOUT, query)
        .await
        .map_err(|_| vec![format!("PostgreSQL did not answer within {DEPENDENCY_TIMEOUT:?}")])?
        .map_err(|error| vec![describe_database_problem(&error)])?;
    let missing: Vec<String> = db::MIGRATOR
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
        error if db::is_unavailable(error) => format!("PostgreSQL is unreachable: {error}"),
        error => format!("PostgreSQL refused the readiness query: {error}"),
    }
}

/// The readiness check as the operations listener takes it.
pub fn readiness_check(pool: PgPool, listener: Arc<ListenerHealth>, reads: Arc<Reads>) -> ReadinessCheck {
    Arc::new(move || {
        let pool = pool.clone();
        let listener = listener.clone();
        let reads = reads.clone();
        Box::pin(async move { readiness(&pool, &listener, &reads).await })
    })
}

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
        metrics::gauge!(names::POOL_MAX).set(f64::from(max_connections));
    })
}

fn record_pool(name: &'static str, open: u32, idle: u32) {
    metrics::gauge!(names::POOL_CONNECTIONS, "pool" => name, "state" => "idle").set(f64::from(idle));
    metrics::gauge!(names::POOL_CONNECTIONS, "pool" => name, "state" => "in_use")
        .set(f64::from(open.saturating_sub(idle)));
}

/// Counts one request under its route template (never the raw path: ids would make
/// every record a new time series).
pub fn record_request(route: &'static str, method: &str, status: u16, elapsed: Duration) {
    let status = status.to_string();
    metrics::counter!(names::HTTP_REQUESTS, "route" => route, "method" => method.to_owned(), "status" => status.clone())
        .increment(1);
    metrics::histogram!(names::HTTP_DURATION, "route" => route, "status" => status).record(elapsed.as_secs_f64());
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
