//! The benchmark's own infrastructure, so it never touches shared data: fresh
//! databases on the local PostgreSQL, a private nats-server, the release binaries,
//! and the external tools, each missing one named in a clear error.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, Executor, PgConnection, PgPool};
use tokio::process::{Child, Command};

use super::{Context, Result};

/// The PostgreSQL server the benchmark creates its databases on.
pub fn admin_url() -> String {
    std::env::var("LECTERN_BENCH_DATABASE_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

/// A migrated database of the benchmark's own.
pub struct Database {
    pub name: String,
    pub url: String,
    pub pool: PgPool,
}

impl Database {
    pub async fn create(name: &str) -> Result<Self> {
        Self::create_on(&admin_url(), name).await
    }

    /// The same on the server `admin` reaches (the `--replicas` run's private primary).
    pub async fn create_on(admin: &str, name: &str) -> Result<Self> {
        let mut connection = PgConnection::connect(admin)
            .await
            .context(format!("cannot reach PostgreSQL at {admin} (start it, or set LECTERN_BENCH_DATABASE_URL)"))?;
        connection.execute(format!(r#"create database "{name}""#).as_str()).await.context("create database")?;
        let options: PgConnectOptions = admin.parse().context("database URL")?;
        let options = options.database(name);
        let url = options.to_url_lossy().to_string();
        let pool = PgPoolOptions::new().max_connections(4).connect_with(options).await.context("connect")?;
        lectern_api::reads::MIGRATOR.run(&pool).await.context("apply the migrations")?;
        Ok(Self { name: name.to_owned(), url, pool })
    }

    /// A database created and migrated by the `lectern-api migrate` of another build, so
    /// that build's projector writes into the schema of its own migrations.
    pub async fn migrated_by(api: &Path, name: &str) -> Result<Self> {
        let options: PgConnectOptions = admin_url().parse().context("database URL")?;
        let options = options.database(name);
        let url = options.to_url_lossy().to_string();
        let output = Command::new(api)
            .arg("migrate")
            .env_clear()
            .env("DATABASE_URL", &url)
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output()
            .await
            .context(format!("run {} migrate", api.display()))?;
        if !output.status.success() {
            return Err(format!(
                "{} migrate failed ({}): {}",
                api.display(),
                output.status,
                String::from_utf8_lossy(&output.stderr)
            )
            .into());
        }
        let pool = PgPoolOptions::new().max_connections(4).connect_with(options).await.context("connect")?;
        Ok(Self { name: name.to_owned(), url, pool })
    }
}

/// Drops `main` and every database named `<main>_…` (the plain-SQL baseline's, the
/// alternated drains' left by a run that stopped early).
pub async fn drop_run_databases(main: &str) -> Result<()> {
    let mut connection = PgConnection::connect(&admin_url()).await.context("connect to PostgreSQL")?;
    let names: Vec<String> = sqlx::query_scalar("select datname from pg_database")
        .fetch_all(&mut connection)
        .await
        .context("list databases")?;
    let prefix = format!("{main}_");
    for name in names.iter().filter(|name| *name == main || name.starts_with(&prefix)) {
        drop_database(name).await?;
    }
    Ok(())
}

/// Drops `name` if it exists, closing whatever still uses it.
pub async fn drop_database(name: &str) -> Result<()> {
    drop_database_on(&admin_url(), name).await
}

/// The same on the server `admin` reaches.
pub async fn drop_database_on(admin: &str, name: &str) -> Result<()> {
    let mut connection = PgConnection::connect(admin).await.context("connect to PostgreSQL")?;
    connection
        .execute(format!(r#"drop database if exists "{name}" with (force)"#).as_str())
        .await
        .context(format!("drop database {name}"))?;
    Ok(())
}

/// A port nothing listens on right now.
pub fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A private nats-server with JetStream, its store in the work directory, or three of
/// them routed into one JetStream cluster.
pub struct Nats {
    /// The first server's address: the bench's own clients connect there, and the
    /// cluster's routes carry what they send to the rest.
    pub url: String,
    /// Every server's address, comma-separated, as the projector's `NATS_URL` takes a cluster.
    pub urls: String,
    processes: Vec<Process>,
}

/// The servers of a cluster, named for [`crate::cpu_shares::CpuShares`].
const CLUSTER: [&str; 3] = ["nats-server 1", "nats-server 2", "nats-server 3"];

impl Nats {
    pub fn pid(&self) -> u32 {
        self.processes.first().map_or(0, |process| process.pid)
    }

    /// Each server, named, for counting their CPU.
    pub fn servers(&self) -> Vec<(&'static str, u32)> {
        let names: &[&'static str] = if self.processes.len() == 1 { &["nats-server"] } else { &CLUSTER };
        names.iter().copied().zip(self.processes.iter().map(|process| process.pid)).collect()
    }

    /// Copies of each stream: one per server.
    pub fn replicas(&self) -> usize {
        self.processes.len()
    }

    /// One server, its store and log named `nats` in the work directory.
    pub async fn start(work: &Path) -> Result<Self> {
        Self::start_named(work, "nats").await
    }

    /// One server, its store and log named `name` in the work directory.
    pub async fn start_named(work: &Path, name: &str) -> Result<Self> {
        let port = free_port()?;
        let process = spawn_nats(work, name, port, Vec::new()).await?;
        let url = format!("nats://127.0.0.1:{port}");
        Ok(Self { urls: url.clone(), url, processes: vec![process] })
    }

    /// Three servers routed into one JetStream cluster (each names every route, as
    /// compose's `scale` profile does), their stores and logs `<name>-1` … `<name>-3`.
    /// JetStream answers once the servers have elected a meta leader, a few seconds later.
    pub async fn start_cluster(work: &Path, name: &str) -> Result<Self> {
        let routes: Vec<String> = (0..CLUSTER.len())
            .map(|_| free_port().map(|port| format!("nats://127.0.0.1:{port}")))
            .collect::<Result<_>>()?;
        let mut processes = Vec::with_capacity(routes.len());
        let mut urls = Vec::with_capacity(routes.len());
        for (number, route) in (1..).zip(&routes) {
            let (node, port) = (format!("{name}-{number}"), free_port()?);
            let cluster =
                format!("--name {node} --cluster_name {name} --cluster {route} --routes {}", routes.join(","));
            let cluster: Vec<String> = cluster.split_whitespace().map(str::to_owned).collect();
            processes.push(spawn_nats(work, &node, port, cluster).await?);
            urls.push(format!("nats://127.0.0.1:{port}"));
        }
        Ok(Self { url: urls.first().cloned().unwrap_or_default(), urls: urls.join(","), processes })
    }
}

/// Starts a nats-server with JetStream on `port` (and `extra` arguments), its store and
/// log named `name` in the work directory, and waits until it listens.
async fn spawn_nats(work: &Path, name: &str, port: u16, extra: Vec<String>) -> Result<Process> {
    let binary = nats_server();
    if !binary.exists() {
        return Err(format!(
            "nats-server not found at {} (apt-get install -y nats-server, or set LECTERN_TEST_NATS_SERVER)",
            binary.display()
        )
        .into());
    }
    let store = work.join(name);
    let mut args: Vec<String> =
        ["-a", "127.0.0.1", "-p", &port.to_string(), "-js", "-sd", &store.to_string_lossy()].map(String::from).into();
    args.extend(extra);
    let process = Process::spawn(&binary, &args, &[], &work.join(format!("{name}.log")))?;
    wait_for_port(port, Duration::from_secs(10)).await.context(format!("nats-server {name} did not start"))?;
    Ok(process)
}

pub async fn wait_for_port(port: u16, within: Duration) -> Result<()> {
    let deadline = Instant::now() + within;
    while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
        if Instant::now() > deadline {
            return Err(format!("nothing listens on port {port} after {within:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// A child process, killed when dropped, its output in a log file.
pub struct Process {
    child: Child,
    pub pid: u32,
    pub log: PathBuf,
}

impl Process {
    /// Starts `binary` with only `env` set, so the caller's environment (RUST_LOG, …)
    /// cannot change what is measured.
    pub fn spawn(binary: &Path, args: &[String], env: &[(&str, String)], log: &Path) -> Result<Self> {
        let file = std::fs::File::create(log).context(format!("create {}", log.display()))?;
        let child = Command::new(binary)
            .args(args)
            .env_clear()
            .envs(env.iter().map(|(name, value)| (*name, value.as_str())))
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .kill_on_drop(true)
            .spawn()
            .context(format!("start {}", binary.display()))?;
        let pid = child.id().ok_or("the process ended at once")?;
        Ok(Self { child, pid, log: log.to_owned() })
    }

    /// An error if the process has exited, with the end of its log.
    pub fn check_running(&mut self) -> Result<()> {
        match self.child.try_wait()? {
            None => Ok(()),
            Some(status) => {
                Err(format!("{} exited ({status}); its log ends:\n{}", self.log.display(), tail(&self.log)).into())
            }
        }
    }

    /// SIGTERM, then SIGKILL if it is still there after ten seconds.
    pub async fn stop(mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.pid.to_string()]).status().await;
        if tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await.is_err() {
            let _ = self.child.kill().await;
        }
    }
}

/// The last lines of a log, for error messages.
pub fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

/// The release binaries of the API and the projector, built (or brought up to date) first.
pub struct Binaries {
    pub api: PathBuf,
    pub projector: PathBuf,
}

/// Brings the binaries up to date with the checkout (a no-op when they are), so the
/// figures are those of the code in front of you; `build: false` takes them as they are.
pub fn build_binaries(build: bool) -> Result<Binaries> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().ok_or("workspace root")?.to_owned();
    // target/<profile>/lectern-bench → target/release
    let target = std::env::current_exe()?
        .parent()
        .and_then(Path::parent)
        .map(|target| target.join("release"))
        .ok_or("cannot locate the target directory")?;
    let binaries = Binaries { api: target.join("lectern-api"), projector: target.join("lectern-projector") };
    if build || !binaries.api.exists() || !binaries.projector.exists() {
        eprintln!("cargo build --release -p lectern-api -p lectern-projector");
        let status = std::process::Command::new(env!("CARGO"))
            .args(["build", "--release", "-p", "lectern-api", "-p", "lectern-projector"])
            .current_dir(&root)
            .status()
            .context("run cargo build")?;
        if !status.success() || !binaries.api.exists() || !binaries.projector.exists() {
            return Err("cargo build --release -p lectern-api -p lectern-projector failed".into());
        }
    }
    Ok(binaries)
}

/// `name` on PATH, or in PostgreSQL's versioned bin directories; a clear error otherwise.
pub fn tool(name: &str, install: &str) -> Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut candidates: Vec<PathBuf> = std::env::split_paths(&path).map(|dir| dir.join(name)).collect();
    if let Ok(versions) = std::fs::read_dir("/usr/lib/postgresql") {
        candidates.extend(versions.flatten().map(|version| version.path().join("bin").join(name)));
    }
    candidates
        .into_iter()
        .find(|candidate| candidate.is_file())
        .ok_or_else(|| format!("{name} is not installed; {install}").into())
}

/// The nats-server binary (`LECTERN_TEST_NATS_SERVER` overrides, as for the tests).
pub fn nats_server() -> PathBuf {
    std::env::var_os("LECTERN_TEST_NATS_SERVER").map_or_else(|| PathBuf::from("/usr/sbin/nats-server"), PathBuf::from)
}
