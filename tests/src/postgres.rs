//! A private PostgreSQL server per test, in a temporary directory on a free port, so a
//! test can stop, crash and restart the database under the API without touching the
//! shared server every other test uses.
//!
//! `initdb` refuses to run as root: when the tests run as root, the server is created
//! and run as the `postgres` system user (`LECTERN_TEST_PG_USER` overrides), in a
//! directory that user owns. The binaries come from the newest
//! `/usr/lib/postgresql/<version>/bin` (`LECTERN_TEST_PG_BIN` overrides).

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use tokio::process::Command;

/// How long `pg_ctl` may take to start or stop the server (2 slow cores, shared).
const PG_CTL_WAIT_SECS: u64 = 120;
/// Attempts at finding a port nobody takes between choosing it and binding it.
const PORT_ATTEMPTS: usize = 5;

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
}

impl TestPostgres {
    /// Creates a fresh cluster (trust authentication, superuser `postgres`) and starts it.
    pub async fn start_new() -> Self {
        let bin = bin_dir();
        let run_as = server_user();
        let dir = std::env::temp_dir().join(format!("lectern-pg-{}", uuid::Uuid::new_v4().simple()));
        let mut postgres = Self { port: 0, dir, bin, run_as, running: false };
        postgres.create_dir();
        postgres.initdb().await;
        for attempt in 1..=PORT_ATTEMPTS {
            postgres.port = crate::nats::free_port();
            postgres.configure();
            match postgres.pg_ctl_start().await {
                Ok(()) => {
                    postgres.running = true;
                    return postgres;
                }
                Err(report) if attempt == PORT_ATTEMPTS => panic!("the private PostgreSQL did not start: {report}"),
                Err(_) => continue,
            }
        }
        unreachable!("the loop returns or panics on its last attempt")
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

    /// Writes this server's settings (its port and socket, and speed over durability)
    /// into `postgresql.auto.conf`, which the server reads last.
    fn configure(&self) {
        let settings = format!(
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
        // Written in place: the file keeps the owner initdb gave it.
        std::fs::write(self.data_dir().join("postgresql.auto.conf"), settings).expect("write postgresql.auto.conf");
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
