//! The read runtime every feature reads through, knowing no feature: the pool and the
//! migrations, the connections listings and feeds borrow with each workspace's share,
//! the replicas and their fences, and the notifications that keep caches fresh.
//!
//! - [`connections`]: the connections reads borrow, planned per execution or generically.
//! - [`workspace_shares`]: how many of them one workspace may hold at once.
//! - [`replicas`]: reads routed to streaming replicas that have replayed far enough.
//! - [`notifications`]: the one LISTEN connection, with its heartbeat.
//! - [`change`]: what a notification says changed, parsed once; the followers' trait.
//! - [`freshness`]: the one staleness guard every cache keeps its answers under.
//! - [`history`]: which history of the database the process talks to; what a change drops.

pub mod change;
pub mod connections;
pub mod freshness;
pub mod history;
pub mod notifications;
pub mod replicas;
pub mod workspace_shares;

use std::str::FromStr;
use std::time::Duration;

use sqlx::migrate::{MigrateDatabase, Migrator};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{PgPool, Postgres};

use connections::{PlanMode, ReadConnections};

/// The schema, from the workspace's `migrations/` (the only place it is defined).
pub static MIGRATOR: Migrator = sqlx::migrate!("../migrations");

/// How the API talks to PostgreSQL.
#[derive(Clone, Debug)]
pub struct PoolSettings {
    pub max_connections: u32,
    /// How long a request waits for a free connection before it is answered 503.
    pub acquire_timeout: Duration,
    /// Server-side cap on one statement, so a slow database cannot hang requests.
    pub statement_timeout: Duration,
    /// Listing connections one workspace may use at once (see [`workspace_shares`]).
    pub connections_per_workspace: u32,
}

impl PoolSettings {
    /// The default share of one workspace: a quarter of the connections, at least one,
    /// so that three others always find a quarter free each.
    pub fn default_share(max_connections: u32) -> u32 {
        (max_connections / 4).max(1)
    }
}

/// Opens a pool without connecting yet: the API starts (and answers 503) even while
/// PostgreSQL is down, and recovers by itself when it comes back.
pub fn lazy_pool(url: &str, settings: &PoolSettings) -> Result<PgPool, sqlx::Error> {
    // Key lookups and retrieves: one plan fits every execution, and PostgreSQL left to
    // choose plans the retrieve statement again each time (see `PlanMode::Generic`).
    let options = PlanMode::Generic.connect_options(&connect_options(url, settings)?);
    Ok(PgPoolOptions::new()
        .max_connections(settings.max_connections)
        .acquire_timeout(settings.acquire_timeout)
        // sqlx pings every connection before handing it out by default: a second round
        // trip per request. A connection that died is noticed by its query instead (that
        // request gets a 503 and the pool drops the connection).
        .test_before_acquire(false)
        .connect_lazy_with(options))
}

/// The connections listings and searches borrow; like [`lazy_pool`], connected on
/// first use.
pub fn read_connections(url: &str, settings: &PoolSettings) -> Result<ReadConnections, sqlx::Error> {
    Ok(ReadConnections::new(connect_options(url, settings)?, settings))
}

/// How the API connects to the server at `url`: named, and with the statement timeout.
pub fn connect_options(url: &str, settings: &PoolSettings) -> Result<PgConnectOptions, sqlx::Error> {
    let statement_timeout = settings.statement_timeout.as_millis().to_string();
    Ok(PgConnectOptions::from_str(url)?
        .application_name("lectern-api")
        .options([("statement_timeout", statement_timeout.as_str())]))
}

/// Creates the database named in `url` if it does not exist yet (first run on a
/// fresh machine), then applies every pending migration.
pub async fn create_and_migrate(url: &str) -> Result<(), sqlx::Error> {
    if !Postgres::database_exists(url).await? {
        Postgres::create_database(url).await?;
    }
    let pool = PgPoolOptions::new().max_connections(2).connect(url).await?;
    MIGRATOR.run(&pool).await?;
    pool.close().await;
    Ok(())
}

/// Errors that mean "the database cannot serve now" (503) rather than a bug (500).
pub fn is_unavailable(error: &sqlx::Error) -> bool {
    lectern_runtime::is_transient_database_error(error)
}

/// `url` with any password replaced, for messages and logs.
pub fn redacted(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some("REDACTED"));
            parsed.to_string()
        }
        Ok(parsed) => parsed.to_string(),
        Err(_) => "<unparseable database URL>".to_owned(),
    }
}
