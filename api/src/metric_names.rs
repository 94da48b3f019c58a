//! The names of the metrics the API records, in one place, so that
//! `docs/operations.md` and the tests agree with the code.

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
/// Feed reads by requests looking at the same page at once (`started`: read for all who
/// joined; `joined`: served a read another request started; `stale`: joined, but a change
/// was announced after the read began, so read again).
pub const FEED_SHARED_READS: &str = "lectern_api_feed_shared_reads_total";
/// Times the database behind the address turned out to be another history than before (a
/// failover, the old primary back, a restore) and what was learnt of the other was dropped.
pub const HISTORY_CHANGES: &str = "lectern_api_database_history_changes_total";
/// Cursors and sync tokens that verified under a previous cursor secret, by the secret's
/// fingerprint (`secret`); 0 from the start for each listed one.
pub const PREVIOUS_SECRET_VERIFIED: &str = "lectern_api_previous_cursor_secret_verifications_total";
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
/// Webhook delivery attempts, by `outcome` (`delivered`: 2xx; `failed`: retried later;
/// `gave_up`: retried for too long, the endpoint disabled).
pub const WEBHOOK_ATTEMPTS: &str = "lectern_api_webhook_attempts_total";
/// Seconds from a delivery's first change being seen to its 2xx.
pub const WEBHOOK_DELIVERY_SECONDS: &str = lectern_runtime::server::WEBHOOK_DELIVERY;
/// Endpoints disabled because their deliveries failed for too long.
pub const WEBHOOK_ENDPOINTS_FAILING: &str = "lectern_api_webhook_endpoints_disabled_by_failures";
/// Enabled endpoints whose signing secrets are sealed under a key pepper this process does
/// not have: nothing is delivered to them until it is listed again.
pub const WEBHOOK_ENDPOINTS_CANNOT_SIGN: &str = "lectern_api_webhook_endpoints_cannot_sign";
