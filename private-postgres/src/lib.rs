//! `lectern-private-postgres`: a PostgreSQL server of one's own, in a temporary
//! directory on a free port, so that the tests and the benchmark can stop, crash,
//! restart and replicate a database without touching the shared server other work uses.
//! Every step returns an error naming what failed; the tests' harness
//! (`lectern_tests::postgres`) turns them into panics, the benchmark into its report's error.
//!
//! `initdb` refuses to run as root: when the caller is root, the server is created and
//! run as the `postgres` system user (`LECTERN_TEST_PG_USER` overrides), in a directory
//! that user owns. The binaries come from the newest `/usr/lib/postgresql/<version>/bin`
//! (`LECTERN_TEST_PG_BIN` overrides).
//!
//! A server can be a streaming-replication primary ([`PrivatePostgres::start_primary`])
//! with real standbys made from it by `pg_basebackup -R` ([`PrivatePostgres::start_standby`])
//! and promoted (`replication.rs`), and can be backed up and restored (`backups.rs`).
//! The caller gives the settings (speed over durability for the tests, the shared
//! server's tuning for the benchmark); the port, socket and replication settings are this
//! crate's.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use sqlx::{Connection, PgConnection};
use tokio::process::Command;

mod backups;
mod replication;

/// How long `pg_ctl` may take to start or stop the server (2 slow cores, shared).
const PG_CTL_WAIT_SECS: u64 = 120;
/// Attempts at finding a port nobody takes between choosing it and binding it.
const PORT_ATTEMPTS: usize = 5;
/// How long a started server may take to settle into the state asked of it (a standby
/// in recovery, a reloaded setting visible).
const SETTLE_SECS: u64 = 60;
/// Between two looks at a server that is settling.
const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// What went wrong, and with which server or command. `what` says what was being done;
/// the cause, when there is one, is the error's source, not part of its message: print
/// the whole chain (as the tests' harness does) to see it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file or directory could not be read, written or created, a program could not
    /// be run, or no port could be had.
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// A statement failed on a server, or the server could not be reached.
    #[error("{what}")]
    Database {
        what: String,
        #[source]
        source: sqlx::Error,
    },
    /// A program ran and failed: `report` holds its exit status and output (and, for
    /// `pg_ctl start`, the server's log).
    #[error("{what}: {report}")]
    Command { what: String, report: String },
    /// The program `what` did not finish within `seconds`.
    #[error("{what} did not finish within {seconds} s")]
    TimedOut { what: String, seconds: u64 },
    /// A server did not reach the state `what` describes within `seconds`.
    #[error("waited {seconds} s for {what}")]
    NotSettled { what: String, seconds: u64 },
    /// The server did not start; the source says why (the last attempt's reason, when
    /// several ports were tried).
    #[error("{what}")]
    NotStarted {
        what: String,
        #[source]
        source: Box<Error>,
    },
    /// A program succeeded but left something other than what this crate relies on:
    /// `found` is what it left.
    #[error("{what}:\n{found}")]
    Unexpected { what: String, found: String },
    /// PostgreSQL's server binaries were not found.
    #[error("{what}")]
    NotInstalled { what: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A private PostgreSQL server; stopped, and its directory removed (unless kept), when
/// dropped.
pub struct PrivatePostgres {
    /// The TCP port on 127.0.0.1; the same after [`PrivatePostgres::start`] again.
    pub port: u16,
    /// Holds the data directory, the socket directory and the server log.
    dir: PathBuf,
    /// Where `initdb`, `pg_ctl` and `postgres` live.
    bin: PathBuf,
    /// The system user the server runs as when the caller is root.
    run_as: Option<String>,
    /// Whether the server is up (as far as this handle knows), so Drop stops it.
    running: bool,
    /// Everything but the port and socket: the role's settings (replication, the
    /// primary's address), then the caller's; written at every start attempt.
    settings: String,
    /// Leave the directory behind when dropped, for a look at the data and the log.
    keep: bool,
}

impl PrivatePostgres {
    /// Creates a fresh cluster (trust authentication, superuser `postgres`) with
    /// `settings` and starts it.
    pub async fn start_new(settings: &str) -> Result<Self> {
        let mut postgres = Self::unstarted(settings.to_owned())?;
        postgres.initdb().await?;
        postgres.start_on_a_free_port().await?;
        Ok(postgres)
    }

    /// The URL of `database` on this server, as the superuser.
    pub fn url_for(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    /// Stops the server the hard way (`pg_ctl stop -m immediate`): every connection is
    /// cut at once, as in a crash; the data stays for [`PrivatePostgres::start`].
    pub async fn stop(&mut self) -> Result<()> {
        let output = self.pg_ctl(&["stop", "-m", "immediate"]).await?;
        if !output.status.success() {
            return Err(Error::Command {
                what: format!("pg_ctl stop on port {} failed", self.port),
                report: describe(&output),
            });
        }
        self.running = false;
        Ok(())
    }

    /// Starts the stopped server again, on the same port, with the same data.
    pub async fn start(&mut self) -> Result<()> {
        self.pg_ctl_start().await.map_err(|source| Error::NotStarted {
            what: format!("the private PostgreSQL did not start again on port {}", self.port),
            source: Box::new(source),
        })?;
        self.running = true;
        Ok(())
    }

    /// The server's log so far, for failure messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// The directory holding the data, the socket and the log.
    pub fn directory(&self) -> &Path {
        &self.dir
    }

    /// Leaves the directory behind when this handle is dropped (the server is stopped).
    pub fn keep_directory(&mut self) {
        self.keep = true;
    }

    /// The postmaster's process id, from `postmaster.pid`, while the server runs: every
    /// other process of the server is its child.
    pub fn postmaster_pid(&self) -> Option<u32> {
        let text = std::fs::read_to_string(self.data_dir().join("postmaster.pid")).ok()?;
        text.lines().next()?.trim().parse().ok()
    }

    /// The one value `sql` selects, on a connection of its own; the error names the
    /// statement and the server.
    pub async fn fetch_one<T>(&self, sql: &str) -> Result<T>
    where
        T: for<'row> sqlx::Decode<'row, sqlx::Postgres> + sqlx::Type<sqlx::Postgres> + Send + Unpin,
    {
        self.try_fetch_one(sql)
            .await
            .map_err(|source| Error::Database { what: format!("{sql} on port {}", self.port), source })
    }

    /// The one value `sql` selects, on a connection of its own (so that it sees the
    /// configuration as of now), or why not (the server may not be up yet).
    pub async fn try_fetch_one<T>(&self, sql: &str) -> Result<T, sqlx::Error>
    where
        T: for<'row> sqlx::Decode<'row, sqlx::Postgres> + sqlx::Type<sqlx::Postgres> + Send + Unpin,
    {
        let mut connection = PgConnection::connect(&self.url_for("postgres")).await?;
        let value = sqlx::query_scalar(sql).fetch_one(&mut connection).await;
        let _ = connection.close().await;
        value
    }

    /// A handle on a new directory, with no cluster in it yet.
    fn unstarted(settings: String) -> Result<Self> {
        let dir = std::env::temp_dir().join(format!("lectern-pg-{}", uuid::Uuid::new_v4().simple()));
        let postgres =
            Self { port: 0, dir, bin: bin_dir()?, run_as: server_user()?, running: false, settings, keep: false };
        postgres.create_dir()?;
        Ok(postgres)
    }

    /// Configures the cluster for a free port and starts it, on another port when
    /// someone took that one first.
    async fn start_on_a_free_port(&mut self) -> Result<()> {
        let mut attempt = 1;
        loop {
            self.port = free_port()?;
            self.configure()?;
            match self.pg_ctl_start().await {
                Ok(()) => {
                    self.running = true;
                    return Ok(());
                }
                Err(source) if attempt >= PORT_ATTEMPTS => {
                    return Err(Error::NotStarted {
                        what: format!("the private PostgreSQL did not start ({PORT_ATTEMPTS} ports tried)"),
                        source: Box::new(source),
                    });
                }
                Err(_) => attempt += 1,
            }
        }
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn socket_dir(&self) -> PathBuf {
        self.dir.join("socket")
    }

    /// Where a primary started by [`PrivatePostgres::start_archiving`] archives its WAL.
    fn archive_dir(&self) -> PathBuf {
        self.dir.join("archive")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join("server.log")
    }

    /// The directory, owned by the user the server runs as.
    fn create_dir(&self) -> Result<()> {
        for dir in [self.socket_dir(), self.archive_dir()] {
            std::fs::create_dir_all(&dir).map_err(|source| Error::Io {
                what: format!("create the private PostgreSQL directory {}", dir.display()),
                source,
            })?;
        }
        if let Some(user) = &self.run_as {
            let chown = std::process::Command::new("chown")
                .arg("-R")
                .arg(format!("{user}:"))
                .arg(&self.dir)
                .output()
                .map_err(|source| Error::Io { what: "run chown".to_owned(), source })?;
            if !chown.status.success() {
                return Err(Error::Command {
                    what: format!("chown {} to {user} failed", self.dir.display()),
                    report: describe(&chown),
                });
            }
        }
        Ok(())
    }

    async fn initdb(&self) -> Result<()> {
        let data = self.data_dir();
        let mut command = self.command(&self.bin.join("initdb"));
        command.arg("-D").arg(&data).args([
            "--username=postgres",
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C.UTF-8",
            // The data dies with the caller: no need to wait for the disk.
            "--no-sync",
            "--no-instructions",
        ]);
        let output = run(command, "initdb").await?;
        if !output.status.success() {
            return Err(Error::Command {
                what: format!("initdb into {} failed", data.display()),
                report: describe(&output),
            });
        }
        Ok(())
    }

    /// Writes this server's port and socket, then its settings, into
    /// `postgresql.auto.conf`, which the server reads last.
    fn configure(&self) -> Result<()> {
        let settings = format!(
            "port = {port}\n\
             listen_addresses = '127.0.0.1'\n\
             unix_socket_directories = '{socket}'\n\
             {settings}",
            port = self.port,
            socket = self.socket_dir().display(),
            settings = self.settings,
        );
        // Written in place: the file keeps the owner initdb gave it.
        let auto_conf = self.data_dir().join("postgresql.auto.conf");
        std::fs::write(&auto_conf, settings)
            .map_err(|source| Error::Io { what: format!("write {}", auto_conf.display()), source })
    }

    /// When pg_ctl fails, the error holds its output and the server's log.
    async fn pg_ctl_start(&self) -> Result<()> {
        let log = self.log_path();
        let output = self.pg_ctl(&["start", "-l", &log.display().to_string()]).await?;
        if output.status.success() {
            Ok(())
        } else {
            Err(Error::Command {
                what: format!("pg_ctl start on port {} failed", self.port),
                report: format!("{}\nserver log:\n{}", describe(&output), self.log()),
            })
        }
    }

    async fn pg_ctl(&self, args: &[&str]) -> Result<Output> {
        let mut command = self.command(&self.bin.join("pg_ctl"));
        command.args(args).arg("-D").arg(self.data_dir()).args(["-w", "-t", &PG_CTL_WAIT_SECS.to_string()]);
        run(command, "pg_ctl").await
    }

    /// `program`, run as the server's user when the caller is root.
    fn command(&self, program: &Path) -> Command {
        let mut command = match &self.run_as {
            Some(user) => {
                let mut command = Command::new("runuser");
                command.args(["-u", user, "--"]).arg(program);
                command
            }
            None => Command::new(program),
        };
        // The server's user may not be allowed into the caller's working directory.
        command.current_dir(&self.dir).kill_on_drop(true);
        command
    }

    /// `pg_ctl stop -m immediate`, blocking: for Drop, which cannot await.
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

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        // Stopped even when the handle thinks it is down: a start that timed out may
        // still have left a server behind.
        if self.running || self.data_dir().join("postmaster.pid").exists() {
            self.stop_blocking();
        }
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Waits until `settled` is true, looking every [`POLL_INTERVAL`]; an error saying what
/// it waited `for_what` after [`SETTLE_SECS`].
pub async fn wait_for<Check, Settled>(for_what: &str, mut settled: Check) -> Result<()>
where
    Check: FnMut() -> Settled,
    Settled: Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(SETTLE_SECS);
    while !settled().await {
        if Instant::now() >= deadline {
            return Err(Error::NotSettled { what: for_what.to_owned(), seconds: SETTLE_SECS });
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
    Ok(())
}

/// A port nothing listens on right now.
pub fn free_port() -> Result<u16> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .map_err(|source| Error::Io { what: "find a free port".to_owned(), source })
}

/// Runs `command` to its end (at most a few minutes), capturing its output.
async fn run(mut command: Command, what: &str) -> Result<Output> {
    let seconds = PG_CTL_WAIT_SECS + 30;
    let output = command.output();
    tokio::time::timeout(Duration::from_secs(seconds), output)
        .await
        .map_err(|_| Error::TimedOut { what: what.to_owned(), seconds })?
        .map_err(|source| Error::Io { what: format!("could not run {what}"), source })
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
fn bin_dir() -> Result<PathBuf> {
    if let Some(bin) = std::env::var_os("LECTERN_TEST_PG_BIN") {
        return Ok(PathBuf::from(bin));
    }
    let versions = std::fs::read_dir("/usr/lib/postgresql").map_err(|source| Error::Io {
        what: "PostgreSQL's server binaries are not installed under /usr/lib/postgresql (install the postgresql \
               package, or set LECTERN_TEST_PG_BIN)"
            .to_owned(),
        source,
    })?;
    versions
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .max_by_key(|(version, _)| *version)
        .map(|(_, bin)| bin)
        .ok_or_else(|| Error::NotInstalled {
            what: "no /usr/lib/postgresql/<version>/bin/initdb (install the postgresql package, or set \
                   LECTERN_TEST_PG_BIN)"
                .to_owned(),
        })
}

/// The user to run the server as: none (ourselves) unless we are root.
fn server_user() -> Result<Option<String>> {
    let uid = std::process::Command::new("id")
        .arg("-u")
        .output()
        .map_err(|source| Error::Io { what: "run id -u".to_owned(), source })?;
    let is_root = String::from_utf8_lossy(&uid.stdout).trim() == "0";
    Ok(is_root.then(|| std::env::var("LECTERN_TEST_PG_USER").unwrap_or_else(|_| "postgres".to_owned())))
}
