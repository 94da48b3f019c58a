//! A private PostgreSQL server per test, in a temporary directory on a free port, so a
//! test can stop, crash and restart the database under the API without touching the
//! shared server every other test uses.
//!
//! `initdb` refuses to run as root: when the tests run as root, the server is created
//! and run as the `postgres` system user (`LECTERN_TEST_PG_USER` overrides), in a
//! directory that user owns. The binaries come from the newest
//! `/usr/lib/postgresql/<version>/bin` (`LECTERN_TEST_PG_BIN` overrides).
//!
//! A server can also be a streaming-replication primary ([`TestPostgres::start_primary`])
//! with real standbys made from it by `pg_basebackup` ([`TestPostgres::start_standby`]),
//! optionally applying the primary's commits with a delay.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use sqlx::{Connection, PgConnection};
use tokio::process::Command;

/// How long `pg_ctl` may take to start or stop the server (2 slow cores, shared).
const PG_CTL_WAIT_SECS: u64 = 120;
/// Attempts at finding a port nobody takes between choosing it and binding it.
const PORT_ATTEMPTS: usize = 5;
/// How long a started server may take to settle into the state asked of it (a standby
/// in recovery, a reloaded setting visible).
const SETTLE_SECS: u64 = 60;
/// Between two looks at a server that is settling.
const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// What a primary needs for standbys to stream from it. A standby gets the same: hot
/// standby refuses to run with fewer WAL senders than its primary has.
const REPLICATION_SETTINGS: &str = "wal_level = replica\n\
                                    max_wal_senders = 5\n\
                                    hot_standby = on\n\
                                    wal_keep_size = '256MB'\n";

/// Trust for everyone from 127.0.0.1 and the socket, replication connections included
/// (`pg_basebackup` and the standby's WAL receiver connect to the `replication`
/// pseudo-database, which `all` does not cover).
const REPLICATION_HBA: &str = "local all all trust\n\
                               host all all 127.0.0.1/32 trust\n\
                               local replication all trust\n\
                               host replication all 127.0.0.1/32 trust\n";

/// A private PostgreSQL server; stopped, and its directory removed, when dropped.
pub struct TestPostgres {
    /// The TCP port on 127.0.0.1; the same after [`TestPostgres::start`] again.
    pub port: u16,
    /// Holds the data directory, the socket directory and the server log.
    dir: PathBuf,
    /// Where `initdb`, `pg_ctl` and `postgres` live.
    bin: PathBuf,
    /// The system user the server runs as when the tests run as root.
    run_as: Option<String>,
    /// Whether the server is up (as far as this handle knows), so Drop stops it.
    running: bool,
    /// Settings beyond the common ones (replication on a primary; the primary's address
    /// and the apply delay on a standby), written with them at every start attempt.
    role_settings: String,
}

impl TestPostgres {
    /// Creates a fresh cluster (trust authentication, superuser `postgres`) and starts it.
    pub async fn start_new() -> Self {
        let mut postgres = Self::unstarted(String::new());
        postgres.initdb().await;
        postgres.start_on_a_free_port().await;
        postgres
    }

    /// Creates a fresh cluster, as [`TestPostgres::start_new`], that standbys can stream
    /// from ([`TestPostgres::start_standby`]), and starts it.
    pub async fn start_primary() -> Self {
        let mut primary = Self::unstarted(REPLICATION_SETTINGS.to_owned());
        primary.initdb().await;
        // Written in place: the file keeps the owner initdb gave it.
        std::fs::write(primary.data_dir().join("pg_hba.conf"), REPLICATION_HBA).expect("write pg_hba.conf");
        primary.start_on_a_free_port().await;
        primary
    }

    /// A streaming standby of this primary, on its own port and in its own directory:
    /// a `pg_basebackup -R` of this server, started in hot standby, applying each commit
    /// `apply_delay` after the primary made it (`recovery_min_apply_delay`) when given.
    /// Returns once it accepts connections and is in recovery.
    pub async fn start_standby(&self, apply_delay: Option<Duration>) -> Self {
        let mut standby = Self::unstarted(String::new());
        standby.base_backup_of(self.port).await;
        // pg_basebackup -R wrote how to reach the primary into the copy of the primary's
        // postgresql.auto.conf, which `configure` replaces: it is kept from there.
        let backup_settings = std::fs::read_to_string(standby.data_dir().join("postgresql.auto.conf"))
            .expect("read the base backup's postgresql.auto.conf");
        let primary_conninfo = backup_settings
            .lines()
            .find(|line| line.starts_with("primary_conninfo"))
            .unwrap_or_else(|| panic!("pg_basebackup -R wrote no primary_conninfo:\n{backup_settings}"));
        standby.role_settings = format!("{REPLICATION_SETTINGS}{primary_conninfo}\n");
        if let Some(delay) = apply_delay {
            standby.role_settings.push_str(&format!("recovery_min_apply_delay = '{}'\n", milliseconds(delay)));
        }
        standby.start_on_a_free_port().await;
        let server = &standby;
        wait_for(&format!("the standby on port {} to be in recovery", server.port), move || async move {
            server.try_fetch_one::<bool>("select pg_is_in_recovery()").await.unwrap_or(false)
        })
        .await;
        standby
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
        let mut connection = self.connect().await;
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
        wait_for(&format!("recovery_min_apply_delay to be {expected} ms on port {}", self.port), move || async move {
            self.try_fetch_one::<String>(current).await.is_ok_and(|setting| setting == *expected)
        })
        .await;
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
    /// created by `lectern_api::db::create_and_migrate`).
    pub fn url(&self) -> String {
        self.url_for("lectern")
    }

    /// The URL of `database` on this server.
    pub fn url_for(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    /// Stops the server the hard way (`pg_ctl stop -m immediate`): every connection is
    /// cut at once, as in a crash; the data stays for [`TestPostgres::start`].
    pub async fn stop(&mut self) {
        let output = self.pg_ctl(&["stop", "-m", "immediate"]).await;
        assert!(output.status.success(), "pg_ctl stop failed: {}", describe(&output));
        self.running = false;
    }

    /// Starts the stopped server again, on the same port, with the same data.
    pub async fn start(&mut self) {
        if let Err(report) = self.pg_ctl_start().await {
            panic!("the private PostgreSQL did not start again on port {}: {report}", self.port);
        }
        self.running = true;
    }

    /// The server's log so far, for failure messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// A handle on a new directory, with no cluster in it yet.
    fn unstarted(role_settings: String) -> Self {
        let bin = bin_dir();
        let run_as = server_user();
        let dir = std::env::temp_dir().join(format!("lectern-pg-{}", uuid::Uuid::new_v4().simple()));
        let postgres = Self { port: 0, dir, bin, run_as, running: false, role_settings };
        postgres.create_dir();
        postgres
    }

    /// Configures the cluster for a free port and starts it, on another port when
    /// someone took that one first.
    async fn start_on_a_free_port(&mut self) {
        for attempt in 1..=PORT_ATTEMPTS {
            self.port = crate::nats::free_port();
            self.configure();
            match self.pg_ctl_start().await {
                Ok(()) => {
                    self.running = true;
                    return;
                }
                Err(report) if attempt == PORT_ATTEMPTS => panic!("the private PostgreSQL did not start: {report}"),
                Err(_) => continue,
            }
        }
        unreachable!("the loop returns or panics on its last attempt")
    }

    /// A connection to the `postgres` database, as the superuser.
    async fn connect(&self) -> PgConnection {
        PgConnection::connect(&self.url_for("postgres")).await.unwrap_or_else(|error| {
            panic!("connect to the private PostgreSQL on port {}: {error}\n{}", self.port, self.log())
        })
    }

    /// The one value `sql` selects, on a connection of its own.
    async fn fetch_one<T>(&self, sql: &str) -> T
    where
        T: for<'row> sqlx::Decode<'row, sqlx::Postgres> + sqlx::Type<sqlx::Postgres> + Send + Unpin,
    {
        self.try_fetch_one(sql).await.unwrap_or_else(|error| panic!("{sql} on port {}: {error}", self.port))
    }

    /// The one value `sql` selects, on a connection of its own (so that it sees the
    /// configuration as of now), or why not (the server may not be up yet).
    async fn try_fetch_one<T>(&self, sql: &str) -> Result<T, sqlx::Error>
    where
        T: for<'row> sqlx::Decode<'row, sqlx::Postgres> + sqlx::Type<sqlx::Postgres> + Send + Unpin,
    {
        let mut connection = PgConnection::connect(&self.url_for("postgres")).await?;
        let value = sqlx::query_scalar(sql).fetch_one(&mut connection).await;
        let _ = connection.close().await;
        value
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn socket_dir(&self) -> PathBuf {
        self.dir.join("socket")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join("server.log")
    }

    /// The directory, owned by the user the server runs as.
    fn create_dir(&self) {
        std::fs::create_dir_all(self.socket_dir()).expect("create the private PostgreSQL directory");
        if let Some(user) = &self.run_as {
            let chown = std::process::Command::new("chown")
                .arg("-R")
                .arg(format!("{user}:"))
                .arg(&self.dir)
                .output()
                .expect("run chown");
            assert!(chown.status.success(), "chown {} to {user} failed: {}", self.dir.display(), describe(&chown));
        }
    }

    async fn initdb(&self) {
        let initdb = self.bin.join("initdb");
        let data = self.data_dir();
        let mut command = self.command(&initdb);
        command.arg("-D").arg(&data).args([
            "--username=postgres",
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C.UTF-8",
            // The data dies with the test: no need to wait for the disk.
            "--no-sync",
            "--no-instructions",
        ]);
        let output = run(command, "initdb").await;
        assert!(output.status.success(), "initdb into {} failed: {}", data.display(), describe(&output));
    }

    /// Writes this server's settings (its port and socket, speed over durability, and
    /// its role's) into `postgresql.auto.conf`, which the server reads last.
    fn configure(&self) {
        let mut settings = format!(
            "port = {port}\n\
             listen_addresses = '127.0.0.1'\n\
             unix_socket_directories = '{socket}'\n\
             fsync = off\n\
             synchronous_commit = off\n\
             full_page_writes = off\n\
             shared_buffers = '16MB'\n\
             max_connections = 60\n\
             max_wal_size = '256MB'\n\
             huge_pages = off\n\
             dynamic_shared_memory_type = mmap\n\
             max_parallel_workers_per_gather = 0\n\
             logging_collector = off\n\
             log_min_messages = warning\n",
            port = self.port,
            socket = self.socket_dir().display(),
        );
        settings.push_str(&self.role_settings);
        // Written in place: the file keeps the owner initdb gave it.
        std::fs::write(self.data_dir().join("postgresql.auto.conf"), settings).expect("write postgresql.auto.conf");
    }

    /// Copies the primary on `primary_port` into this server's data directory, with
    /// `standby.signal` and the primary's address (`-R`) and the WAL written meanwhile
    /// (`-X stream`).
    async fn base_backup_of(&self, primary_port: u16) {
        let pg_basebackup = self.bin.join("pg_basebackup");
        let data = self.data_dir();
        let mut command = self.command(&pg_basebackup);
        command.args(["-h", "127.0.0.1", "-p", &primary_port.to_string(), "-U", "postgres", "-D"]).arg(&data).args([
            "-R",
            "-X",
            "stream",
            // A spread checkpoint would make the backup wait on the primary's pace.
            "--checkpoint=fast",
            // As initdb's: the copy dies with the test.
            "--no-sync",
        ]);
        let output = run(command, "pg_basebackup").await;
        assert!(
            output.status.success(),
            "pg_basebackup of port {primary_port} into {} failed: {}",
            data.display(),
            describe(&output)
        );
    }

    async fn pg_ctl_start(&self) -> Result<(), String> {
        let log = self.log_path();
        let output = self.pg_ctl(&["start", "-l", &log.display().to_string()]).await;
        if output.status.success() {
            Ok(())
        } else {
            Err(format!("{}\nserver log:\n{}", describe(&output), self.log()))
        }
    }

    async fn pg_ctl(&self, args: &[&str]) -> Output {
        let pg_ctl = self.bin.join("pg_ctl");
        let mut command = self.command(&pg_ctl);
        command.args(args).arg("-D").arg(self.data_dir()).args(["-w", "-t", &PG_CTL_WAIT_SECS.to_string()]);
        run(command, "pg_ctl").await
    }

    /// `program`, run as the server's user when the tests run as root.
    fn command(&self, program: &Path) -> Command {
        let mut command = match &self.run_as {
            Some(user) => {
                let mut command = Command::new("runuser");
                command.args(["-u", user, "--"]).arg(program);
                command
            }
            None => Command::new(program),
        };
        // The server's user may not be allowed into the test's working directory.
        command.current_dir(&self.dir).kill_on_drop(true);
        command
    }

    fn stop_blocking(&self) {
        let pg_ctl = self.bin.join("pg_ctl");
        let mut command = match &self.run_as {
            Some(user) => {
                let mut command = std::process::Command::new("runuser");
                command.args(["-u", user, "--"]).arg(&pg_ctl);
                command
            }
            None => std::process::Command::new(&pg_ctl),
        };
        let _ = command
            .current_dir(&self.dir)
            .args(["stop", "-m", "immediate", "-w", "-t", "30", "-D"])
            .arg(self.data_dir())
            .output();
    }
}

impl Drop for TestPostgres {
    fn drop(&mut self) {
        // Stopped even when the handle thinks it is down: a start that timed out may
        // still have left a server behind.
        if self.running || self.data_dir().join("postmaster.pid").exists() {
            self.stop_blocking();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Waits until `settled` is true, looking every [`POLL_INTERVAL`]; panics saying what it
/// waited `for_what` after [`SETTLE_SECS`].
async fn wait_for<Check, Settled>(for_what: &str, mut settled: Check)
where
    Check: FnMut() -> Settled,
    Settled: Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(SETTLE_SECS);
    while !settled().await {
        assert!(Instant::now() < deadline, "waited {SETTLE_SECS} s for {for_what}");
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// `duration` as a PostgreSQL time setting, in whole milliseconds.
fn milliseconds(duration: Duration) -> String {
    format!("{}ms", duration.as_millis())
}

/// Runs `command` to its end (at most a few minutes), capturing its output.
async fn run(mut command: Command, what: &str) -> Output {
    let output = command.output();
    tokio::time::timeout(Duration::from_secs(PG_CTL_WAIT_SECS + 30), output)
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish within {} s", PG_CTL_WAIT_SECS + 30))
        .unwrap_or_else(|error| panic!("could not run {what}: {error}"))
}

fn describe(output: &Output) -> String {
    format!(
        "{}\nstdout: {}\nstderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The newest installed PostgreSQL's binaries.
fn bin_dir() -> PathBuf {
    if let Some(bin) = std::env::var_os("LECTERN_TEST_PG_BIN") {
        return PathBuf::from(bin);
    }
    let versions = std::fs::read_dir("/usr/lib/postgresql").expect(
        "PostgreSQL's server binaries are not installed under /usr/lib/postgresql \
         (install the postgresql package, or set LECTERN_TEST_PG_BIN)",
    );
    versions
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .max_by_key(|(version, _)| *version)
        .map(|(_, bin)| bin)
        .expect(
            "no /usr/lib/postgresql/<version>/bin/initdb (install the postgresql package, or set LECTERN_TEST_PG_BIN)",
        )
}

/// The user to run the server as: none (ourselves) unless we are root.
fn server_user() -> Option<String> {
    let uid = std::process::Command::new("id").arg("-u").output().expect("run id -u");
    let is_root = String::from_utf8_lossy(&uid.stdout).trim() == "0";
    is_root.then(|| std::env::var("LECTERN_TEST_PG_USER").unwrap_or_else(|_| "postgres".to_owned()))
}
