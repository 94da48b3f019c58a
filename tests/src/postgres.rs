//! A private PostgreSQL server per test, in a temporary directory on a free port, so a
//! test can stop, crash and restart the database under the API without touching the
//! shared server every other test uses.
//!
//! The server itself (initdb, settings files, `pg_ctl`, `pg_basebackup`, running as the
//! `postgres` system user when the tests run as root) is `lectern_private_postgres`'s,
//! shared with the benchmark; this wraps it with the tests' settings and panics.
//!
//! A server can also be a streaming-replication primary ([`TestPostgres::start_primary`])
//! with real standbys made from it by `pg_basebackup` ([`TestPostgres::start_standby`]),
//! optionally applying the primary's commits with a delay.

use std::time::Duration;

use lectern_private_postgres::{wait_for, PrivatePostgres};
use sqlx::{Connection, PgConnection};

/// The tests' data dies with the test: speed over durability, and little memory, as
/// many servers may run at once.
const TEST_SETTINGS: &str = "fsync = off\n\
                             synchronous_commit = off\n\
                             full_page_writes = off\n\
                             shared_buffers = '16MB'\n\
                             max_connections = 60\n\
                             max_wal_size = '256MB'\n\
                             huge_pages = off\n\
                             dynamic_shared_memory_type = mmap\n\
                             max_parallel_workers_per_gather = 0\n\
                             logging_collector = off\n\
                             log_min_messages = warning\n";

/// A private PostgreSQL server; stopped, and its directory removed, when dropped.
pub struct TestPostgres {
    /// The TCP port on 127.0.0.1; the same after [`TestPostgres::start`] again.
    pub port: u16,
    server: PrivatePostgres,
}

impl TestPostgres {
    fn new(server: PrivatePostgres) -> Self {
        Self { port: server.port, server }
    }

    /// Creates a fresh cluster (trust authentication, superuser `postgres`) and starts it.
    pub async fn start_new() -> Self {
        Self::new(PrivatePostgres::start_new(TEST_SETTINGS).await.unwrap_or_else(fail))
    }

    /// [`TestPostgres::start_new`] with `extra` settings after the tests' own.
    pub async fn start_new_with(extra: &str) -> Self {
        let settings = format!("{TEST_SETTINGS}{extra}");
        Self::new(PrivatePostgres::start_new(&settings).await.unwrap_or_else(fail))
    }

    /// Creates a fresh cluster, as [`TestPostgres::start_new`], that standbys can stream
    /// from ([`TestPostgres::start_standby`]), and starts it.
    pub async fn start_primary() -> Self {
        Self::new(PrivatePostgres::start_primary(TEST_SETTINGS).await.unwrap_or_else(fail))
    }

    /// A streaming standby of this primary, on its own port and in its own directory:
    /// a `pg_basebackup -R` of this server, started in hot standby, applying each commit
    /// `apply_delay` after the primary made it (`recovery_min_apply_delay`) when given.
    /// Returns once it accepts connections and is in recovery.
    pub async fn start_standby(&self, apply_delay: Option<Duration>) -> Self {
        let mut settings = TEST_SETTINGS.to_owned();
        if let Some(delay) = apply_delay {
            settings.push_str(&format!("recovery_min_apply_delay = '{}'\n", milliseconds(delay)));
        }
        Self::new(self.server.start_standby(&settings).await.unwrap_or_else(fail))
    }

    /// A primary, as [`TestPostgres::start_primary`], archiving its WAL for a point-in-time
    /// restore ([`TestPostgres::base_backup`], [`TestPostgres::start_recovering_to`]).
    pub async fn start_archiving() -> Self {
        Self::new(PrivatePostgres::start_archiving(TEST_SETTINGS).await.unwrap_or_else(fail))
    }

    /// A base backup of this archiving primary, not started.
    pub async fn base_backup(&self) -> Self {
        Self::new(self.server.base_backup().await.unwrap_or_else(fail))
    }

    /// Restores this base backup to `target_lsn` of `archived`'s history with
    /// `recovery.signal` and its WAL archive, then promotes it, as a point-in-time restore
    /// does. Returns once it takes writes.
    pub async fn start_recovering_to(&mut self, archived: &Self, target_lsn: &str) {
        self.server.start_recovering_to(&archived.server, target_lsn, TEST_SETTINGS).await.unwrap_or_else(fail);
        self.port = self.server.port;
    }

    /// [`TestPostgres::start_recovering_to`] with the WAL `lost` (stopped) wrote, for a
    /// primary that was never set to archive: see
    /// `PrivatePostgres::start_recovering_from_wal_of`.
    pub async fn start_recovering_from_wal_of(&mut self, lost: &Self, target_lsn: &str) {
        self.server.start_recovering_from_wal_of(&lost.server, target_lsn, TEST_SETTINGS).await.unwrap_or_else(fail);
        self.port = self.server.port;
    }

    /// Archives the WAL written so far (`pg_switch_wal`), waiting until it is archived.
    pub async fn archive_wal(&self) {
        self.server.archive_wal().await.unwrap_or_else(fail);
    }

    /// A copy of this primary's data directory started as it was, on the same timeline (no
    /// `recovery.signal`), as a restored disk snapshot is: see
    /// `PrivatePostgres::start_copy`.
    pub async fn start_copy(&self) -> Self {
        Self::new(self.server.start_copy(TEST_SETTINGS).await.unwrap_or_else(fail))
    }

    /// Changes a standby's `recovery_min_apply_delay` (`None`: apply at once) without a
    /// restart: `ALTER SYSTEM` (allowed on a hot standby: it writes no WAL) and a reload.
    /// Returns once new sessions see the new value; the reload has then been signalled
    /// to the startup process too, and a commit it is holding back is released at once.
    pub async fn set_apply_delay(&self, apply_delay: Option<Duration>) {
        let statement = match apply_delay {
            Some(delay) => format!("alter system set recovery_min_apply_delay = '{}'", milliseconds(delay)),
            None => "alter system reset recovery_min_apply_delay".to_owned(),
        };
        let mut connection = PgConnection::connect(&self.url_for("postgres")).await.unwrap_or_else(|error| {
            panic!("connect to the private PostgreSQL on port {}: {error}\n{}", self.port, self.log())
        });
        for sql in [statement.as_str(), "select pg_reload_conf()"] {
            if let Err(error) = sqlx::query(sql).execute(&mut connection).await {
                panic!("{sql} on port {} failed: {error}", self.port);
            }
        }
        let _ = connection.close().await;

        // pg_settings gives the value in the setting's unit (ms), where SHOW rounds it
        // into the largest unit that divides it ("30s").
        let expected = &apply_delay.map_or(0, |delay| delay.as_millis()).to_string();
        let current = "select setting from pg_settings where name = 'recovery_min_apply_delay'";
        let server = &self.server;
        wait_for(&format!("recovery_min_apply_delay to be {expected} ms on port {}", self.port), move || async move {
            server.try_fetch_one::<String>(current).await.is_ok_and(|setting| setting == *expected)
        })
        .await
        .unwrap_or_else(fail);
    }

    /// Where this primary's WAL ends (`pg_current_wal_insert_lsn()`), e.g. `0/3016060`:
    /// past every commit made so far, including those not yet written out (the server
    /// runs with `synchronous_commit = off`, so `pg_current_wal_lsn()` can lag them).
    pub async fn current_lsn(&self) -> String {
        self.fetch_one("select pg_current_wal_insert_lsn()::text").await
    }

    /// How far this standby has received and stored the primary's WAL
    /// (`pg_last_wal_receive_lsn()`), applied or not.
    pub async fn receive_lsn(&self) -> String {
        let lsn: Option<String> = self.fetch_one("select pg_last_wal_receive_lsn()::text").await;
        lsn.unwrap_or_else(|| panic!("the server on port {} has received no WAL: it is no standby", self.port))
    }

    /// How far this standby has applied the primary's WAL (`pg_last_wal_replay_lsn()`).
    pub async fn replay_lsn(&self) -> String {
        let lsn: Option<String> = self.fetch_one("select pg_last_wal_replay_lsn()::text").await;
        lsn.unwrap_or_else(|| panic!("the server on port {} has replayed no WAL: it is no standby", self.port))
    }

    /// `postgres://postgres@127.0.0.1:<port>/lectern`: the database the API uses (it is
    /// created by `lectern_api::reads::create_and_migrate`).
    pub fn url(&self) -> String {
        self.url_for("lectern")
    }

    /// The URL of `database` on this server.
    pub fn url_for(&self, database: &str) -> String {
        self.server.url_for(database)
    }

    /// Stops the server the hard way (`pg_ctl stop -m immediate`): every connection is
    /// cut at once, as in a crash; the data stays for [`TestPostgres::start`].
    pub async fn stop(&mut self) {
        self.server.stop().await.unwrap_or_else(fail);
    }

    /// Starts the stopped server again, on the same port, with the same data.
    pub async fn start(&mut self) {
        self.server.start().await.unwrap_or_else(fail);
    }

    /// Promotes this standby (`pg_ctl promote`): a failover. Returns once it takes writes.
    pub async fn promote(&self) {
        self.server.promote().await.unwrap_or_else(fail);
    }

    /// `pg_dump --format=custom` of the API's database, into a file in this server's
    /// directory (gone with the server).
    pub async fn dump(&self) -> std::path::PathBuf {
        self.server.dump("lectern").await.unwrap_or_else(fail)
    }

    /// Creates the API's database on this server from a [`TestPostgres::dump`] of another:
    /// `createdb` and `pg_restore`, as an operator restores a backup into a fresh server.
    pub async fn restore(&self, dump: &std::path::Path) {
        self.server.restore("lectern", dump).await.unwrap_or_else(fail);
    }

    /// The server's log so far, for failure messages.
    pub fn log(&self) -> String {
        self.server.log()
    }

    /// The one value `sql` selects, on a connection of its own.
    async fn fetch_one<T>(&self, sql: &str) -> T
    where
        T: for<'row> sqlx::Decode<'row, sqlx::Postgres> + sqlx::Type<sqlx::Postgres> + Send + Unpin,
    {
        self.server.fetch_one(sql).await.unwrap_or_else(fail)
    }
}

/// Panics with `error` and every cause under it: the server's error says what was being
/// done, its sources why.
fn fail<T>(error: lectern_private_postgres::Error) -> T {
    panic!("{}", lectern_runtime::with_causes(&error))
}

/// `duration` as a PostgreSQL time setting, in whole milliseconds.
fn milliseconds(duration: Duration) -> String {
    format!("{}ms", duration.as_millis())
}
