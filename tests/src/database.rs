//! One fresh database per test, so tests run in parallel and never see each other.

use std::time::{SystemTime, UNIX_EPOCH};

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, Executor, PgConnection, PgPool};
use tokio::sync::OnceCell;

/// The server tests create their databases on.
pub fn admin_url() -> String {
    std::env::var("LECTERN_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

const PREFIX: &str = "lectern_test_";
/// Databases older than this were left by earlier runs (a test run takes a few
/// minutes); each run sweeps them once, so they never pile up.
const STALE_AFTER_SECS: u64 = 600;

static SWEPT: OnceCell<()> = OnceCell::const_new();

/// A migrated database of its own, and its URL for the binaries.
pub struct TestDatabase {
    pub pool: PgPool,
    pub url: String,
    pub name: String,
}

impl TestDatabase {
    pub async fn create() -> Self {
        let database = Self::create_with("").await;
        database.migrate_up_to(i64::MAX).await;
        database
    }

    /// A database with the migrations up to `version` applied, as a deployment of an
    /// earlier release has it; [`TestDatabase::migrate_up_to`] upgrades it.
    pub async fn create_at_version(version: i64) -> Self {
        let database = Self::create_with("").await;
        database.migrate_up_to(version).await;
        database
    }

    /// Applies the migrations up to `version` that are not applied yet.
    pub async fn migrate_up_to(&self, version: i64) {
        let all = &lectern_api::reads::MIGRATOR;
        let migrator = sqlx::migrate::Migrator {
            migrations: all.migrations.iter().filter(|migration| migration.version <= version).cloned().collect(),
            ignore_missing: all.ignore_missing,
            locking: all.locking,
            no_tx: all.no_tx,
        };
        migrator.run(&self.pool).await.expect("apply migrations");
    }

    /// A database whose server encoding is `encoding` (e.g. `LATIN1`), which refuses in
    /// `text` the characters it lacks, as a deployment's older database might.
    pub async fn create_with_encoding(encoding: &str) -> Self {
        let database =
            Self::create_with(&format!("encoding '{encoding}' template template0 lc_collate 'C' lc_ctype 'C'")).await;
        database.migrate_up_to(i64::MAX).await;
        database
    }

    async fn create_with(options: &str) -> Self {
        let admin = admin_url();
        let mut connection = PgConnection::connect(&admin).await.expect("connect to the test PostgreSQL server");
        SWEPT.get_or_init(|| sweep_stale(admin.clone())).await;
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or_default();
        let name = format!("{PREFIX}{now}_{}", uuid::Uuid::new_v4().simple());
        connection
            .execute(format!(r#"create database "{name}" {options}"#).as_str())
            .await
            .expect("create test database");
        let options: PgConnectOptions = admin.parse().expect("test database URL");
        let options = options.database(&name);
        let url = options.to_url_lossy().to_string();
        let pool =
            PgPoolOptions::new().max_connections(20).connect_with(options).await.expect("connect to test database");
        Self { pool, url, name }
    }

    /// Sessions of this database waiting for a lock: how tests know that a statement
    /// they blocked on purpose has reached the block.
    pub async fn sessions_waiting_on_a_lock(&self) -> i64 {
        sqlx::query_scalar(
            "select count(*) from pg_locks l join pg_stat_activity a on a.pid = l.pid \
             where not l.granted and a.datname = $1",
        )
        .bind(&self.name)
        .fetch_one(&self.pool)
        .await
        .expect("count sessions waiting on a lock")
    }
}

async fn sweep_stale(admin: String) {
    let Ok(mut connection) = PgConnection::connect(&admin).await else { return };
    let names: Vec<String> =
        sqlx::query_scalar("select datname from pg_database where datname like 'lectern\\_test\\_%'")
            .fetch_all(&mut connection)
            .await
            .unwrap_or_default();
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or_default();
    for name in names {
        let created = name.trim_start_matches(PREFIX).split('_').next().and_then(|secs| secs.parse::<u64>().ok());
        if created.is_some_and(|created| now.saturating_sub(created) > STALE_AFTER_SECS) {
            // Without FORCE: a database some other run is still connected to stays.
            let _ = connection.execute(format!(r#"drop database if exists "{name}""#).as_str()).await;
        }
    }
}
