//! `lectern-bench`: the reproducible benchmark. It loads a million contacts
//! and 200,000 items through the real path (JetStream, then the release projector),
//! measures the projector and the release API under load from separate processes, and
//! measures PostgreSQL doing the same work without Lectern, side by side in one run.
//! Never a timed assertion: a binary that prints and writes a table.
//!
//! # Layout
//! - [`options`]: the command line.
//! - The data, derived from positions alone, is `lectern_fixtures::generator`'s.
//! - [`infra`]: private databases, nats-server, release binaries, external tools.
//! - [`publish`]: pipelined, acknowledged publishing.
//! - [`projector_side`]: the backlog drain ([`drain`]), its plain-SQL baseline
//!   ([`plain_sql`]) and the steady publish→visible latency ([`latency`]).
//! - [`api_side`]: the API ([`api`]) under wrk and the same SQL under pgbench
//!   ([`scenarios`], [`load`]).
//! - [`machine`]: the machine's description and process RSS; [`report`]: the table;
//!   [`cpu_shares`]: where the CPU went over a phase.
//! - [`soak`]: with `--soak`, the bounded soak of issue 6 instead of the comparisons.
//! - [`feed`]: with `--feed`, the changes feed's scenarios instead of the comparisons:
//!   catch-up and empty polls ([`feed`]), its latencies ([`feed_latency`]) and the
//!   drain against the projector before the feed ([`drain_ab`]); the feed's client
//!   ([`feed_client`]).
//! - [`replicas`]: with `--replicas`, reads from a streaming replica (issue 27) instead of
//!   the comparisons: a private primary and its standby, an API on each arrangement, the
//!   projector on a NATS cluster.
//! - [`wal`]: WAL written and checkpoints run over a phase.
//! - [`webhooks`]: with `--webhooks`, commit → delivery latency of webhook deliveries
//!   against a plain LISTEN's, on a database of its own (no load, no NATS, no wrk).
//! - [`long_polls`]: with `--long-polls`, the API's memory while 10,000 long polls wait
//!   and after, on a database of its own.
//! - [`nemesis`]: with `--nemesis`, random schedules of faults against a private
//!   deployment while publishers and feed clients run, and the check of every promise.

pub mod api;
pub mod api_side;
pub mod cpu_shares;
pub mod drain;
pub mod drain_ab;
pub mod feed;
pub mod feed_client;
pub mod feed_latency;
pub mod infra;
pub mod latency;
pub mod load;
pub mod long_polls;
pub mod machine;
pub mod nemesis;
pub mod options;
pub mod plain_sql;
pub mod projector_side;
pub mod publish;
pub mod replicas;
pub mod report;
pub mod scenarios;
pub mod soak;
pub mod verify;
pub mod wal;
pub mod webhooks;

use std::fmt::Display;
use std::path::PathBuf;

use sqlx::Connection;

pub use options::Options;

pub type Error = Box<dyn std::error::Error + Send + Sync>;
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `.context("what was being done")` on any error, or any message.
pub trait Context<T> {
    fn context(self, what: impl Display) -> Result<T>;
}

impl<T, E: Into<Error>> Context<T> for std::result::Result<T, E> {
    fn context(self, what: impl Display) -> Result<T> {
        self.map_err(|error| Failed { what: what.to_string(), source: error.into() }.into())
    }
}

/// An error and what was being done when it happened. The error stays its source, so
/// that its own causes are not lost; the message quotes it and every cause below it not
/// already in its text, as the binary prints only the message.
#[derive(Debug)]
struct Failed {
    what: String,
    source: Error,
}

impl Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.what, lectern_runtime::with_causes(self.source.as_ref()))
    }
}

impl std::error::Error for Failed {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(self.source.as_ref())
    }
}

/// Everything a run uses, found before any work starts.
pub struct Setup {
    pub options: Options,
    pub wrk: PathBuf,
    pub pgbench: PathBuf,
    pub binaries: infra::Binaries,
    pub work: PathBuf,
    /// The read model's database and the plain-SQL baseline's.
    pub databases: (String, String),
}

/// Runs the whole benchmark and returns the markdown report (also written to the output file).
pub async fn run(options: Options) -> Result<String> {
    if options.webhooks {
        return on_own_database(options, "webhooks", |options, api, work, name| async move {
            webhooks::measure(&options, &api, &work, &name).await
        })
        .await;
    }
    if options.long_polls {
        return on_own_database(options, "long_polls", |options, api, work, name| async move {
            long_polls::measure(&options, &api, &work, &name).await
        })
        .await;
    }
    if let Some(nemesis) = options.nemesis.clone() {
        return run_nemesis(&options, nemesis).await;
    }
    let wrk = infra::tool("wrk", "install it with `apt-get install -y wrk`")?;
    let pgbench = infra::tool("pgbench", "it ships with PostgreSQL (`apt-get install -y postgresql-client`)")?;
    if !infra::nats_server().exists() {
        return Err(format!(
            "nats-server not found at {} (install nats-server, or set LECTERN_TEST_NATS_SERVER)",
            infra::nats_server().display()
        )
        .into());
    }
    sqlx::PgConnection::connect(&infra::admin_url())
        .await
        .context(format!("cannot reach PostgreSQL at {} (or set LECTERN_BENCH_DATABASE_URL)", infra::admin_url()))?;
    let binaries = infra::build_binaries(options.build)?;
    let stamp = chrono::Utc::now().format("%Y%m%d_%H%M%S").to_string();
    let work = std::env::temp_dir().join(format!("lectern-bench-{stamp}"));
    std::fs::create_dir_all(&work).context(format!("create {}", work.display()))?;
    let databases = (format!("lectern_bench_{stamp}"), format!("lectern_bench_{stamp}_plain"));
    let setup = Setup { options, wrk, pgbench, binaries, work, databases };
    let outcome = tokio::select! {
        outcome = measure(&setup) => outcome,
        () = interrupted() => Err("interrupted".into()),
    };
    // The measuring future is gone here, and with it every child process (kill on drop).
    if setup.options.keep {
        eprintln!(
            "kept: databases {} and {}, work directory {}",
            setup.databases.0,
            setup.databases.1,
            setup.work.display()
        );
    } else {
        if let Err(error) = infra::drop_run_databases(&setup.databases.0).await {
            eprintln!("warning: could not drop the databases {}*: {error}", setup.databases.0);
        }
        if outcome.is_ok() {
            let _ = std::fs::remove_dir_all(&setup.work);
        } else {
            eprintln!("the processes' logs are kept in {}", setup.work.display());
        }
    }
    let markdown = outcome?.markdown();
    if let Some(parent) = setup.options.output.parent().filter(|parent| !parent.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).context(format!("create {}", parent.display()))?;
    }
    std::fs::write(&setup.options.output, &markdown).context(format!("write {}", setup.options.output.display()))?;
    Ok(markdown)
}

/// `--nemesis`: the release binaries against the nemesis' private deployment; the report is
/// written whatever it found, and the run fails when it found a violation.
async fn run_nemesis(options: &Options, nemesis: options::NemesisOptions) -> Result<String> {
    let binaries = infra::build_binaries(options.build)?;
    let directory = binaries.api.parent().ok_or("the release binaries' directory")?;
    lectern_tests::binaries::use_built_in(directory);
    let settings = nemesis::Settings {
        seed: nemesis.seed,
        topology: nemesis.topology,
        run_for: std::time::Duration::from_secs(nemesis.minutes * 60),
        most_schedules: None,
        first_schedule: nemesis.first_schedule,
        replay: nemesis.replay,
        window: nemesis::WINDOW,
    };
    let outcome = tokio::select! {
        outcome = nemesis::run(&settings) => outcome,
        () = interrupted() => return Err("interrupted".into()),
    };
    let markdown = nemesis::report::markdown(&settings, &outcome, &options.command_line, &machine::describe());
    write_output(options, &markdown)?;
    if !outcome.violations.is_empty() {
        return Err(format!(
            "the nemesis found {} violations (seed {}); see {}",
            outcome.violations.len(),
            settings.seed,
            options.output.display()
        )
        .into());
    }
    Ok(markdown)
}

/// Runs a scenario that needs only PostgreSQL and the release API: `measure` gets the
/// API binary, a work directory and the name of a database of its own
/// (`lectern_bench_<stamp>_<label>`, for it to create). Returns the report's markdown,
/// also written to the output file.
pub(crate) async fn on_own_database<F, Fut>(options: Options, label: &str, measure: F) -> Result<String>
where
    F: FnOnce(Options, PathBuf, PathBuf, String) -> Fut,
    Fut: std::future::Future<Output = Result<report::Report>>,
{
    sqlx::PgConnection::connect(&infra::admin_url())
        .await
        .context(format!("cannot reach PostgreSQL at {} (or set LECTERN_BENCH_DATABASE_URL)", infra::admin_url()))?;
    let binaries = infra::build_binaries(options.build)?;
    let stamp = chrono::Utc::now().format("%Y%m%d_%H%M%S").to_string();
    let work = std::env::temp_dir().join(format!("lectern-bench-{}-{stamp}", label.replace('_', "-")));
    std::fs::create_dir_all(&work).context(format!("create {}", work.display()))?;
    let name = format!("lectern_bench_{stamp}_{label}");
    let outcome = tokio::select! {
        outcome = measure(options.clone(), binaries.api, work.clone(), name.clone()) => outcome,
        () = interrupted() => Err("interrupted".into()),
    };
    finish_own_database(&options, &name, &work, outcome.is_ok()).await;
    let markdown = outcome?.markdown();
    write_output(&options, &markdown)?;
    Ok(markdown)
}

/// After a scenario run on a database of its own (`name`) with the work directory
/// `work`: both kept with `--keep`; otherwise the database dropped, and the work
/// directory removed unless the run failed (it holds the API's log).
async fn finish_own_database(options: &Options, name: &str, work: &std::path::Path, succeeded: bool) {
    if options.keep {
        eprintln!("kept: database {name}, work directory {}", work.display());
        return;
    }
    if let Err(error) = infra::drop_database(name).await {
        eprintln!("warning: could not drop the database {name}: {error}");
    }
    if succeeded {
        let _ = std::fs::remove_dir_all(work);
    } else {
        eprintln!("the API's log is kept in {}", work.display());
    }
}

/// Writes the report to the run's output file, creating its folder.
fn write_output(options: &Options, markdown: &str) -> Result<()> {
    if let Some(parent) = options.output.parent().filter(|parent| !parent.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).context(format!("create {}", parent.display()))?;
    }
    std::fs::write(&options.output, markdown).context(format!("write {}", options.output.display()))
}

/// Ctrl-C or SIGTERM: either way the run stops and cleans up.
pub(crate) async fn interrupted() {
    let mut terminate = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(signal) => signal,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        _ = terminate.recv() => {},
    }
}

async fn measure(setup: &Setup) -> Result<report::Report> {
    let plan = lectern_fixtures::generator::plan::Plan::new(setup.options.contacts);
    let machine = machine::describe();
    // Declared before the database, so dropped (stopped) after its pool is closed.
    let primary = if setup.options.replicas { Some(replicas::Primary::start(setup).await?) } else { None };
    let database = match &primary {
        Some(primary) => infra::Database::create_on(&primary.admin_url(), &setup.databases.0).await?,
        None => infra::Database::create(&setup.databases.0).await?,
    };
    let server_version: String =
        sqlx::query_scalar("select current_setting('server_version')").fetch_one(&database.pool).await?;
    let (shared_buffers, max_wal_size, checkpoint_timeout, wal_compression): (String, String, String, String) =
        sqlx::query_as(
            "select current_setting('shared_buffers'), current_setting('max_wal_size'), \
             current_setting('checkpoint_timeout'), current_setting('wal_compression')",
        )
        .fetch_one(&database.pool)
        .await?;
    let mut report = match (setup.options.soak_for, setup.options.feed, &primary) {
        (Some(_), _, _) => report::Report::new("Lectern soak", "Targets (issue 6)"),
        (None, true, _) => report::Report::new("Lectern changes feed benchmark", "Targets (changes feed)"),
        (None, false, Some(_)) => report::Report::new("Lectern on a streaming replica", "Targets (issue 27)"),
        (None, false, None) if setup.options.verify => {
            report::Report::new("Lectern's read model checked against the stream", "Targets (issue 28)")
        }
        (None, false, None) => report::Report::new("Lectern benchmark", "Targets (issue 7)"),
    };
    let server = match &primary {
        Some(primary) => primary.describe(),
        None => "shared by the bench, the app and the load generators.".to_owned(),
    };
    report.header = vec![
        format!(
            "Machine: {machine}; PostgreSQL {server_version} (shared_buffers {shared_buffers}, max_wal_size \
             {max_wal_size}, checkpoint_timeout {checkpoint_timeout}, wal_compression {wal_compression}), {server}"
        ),
        format!(
            "Data (scale {}): {} contacts in {} workspaces ({} of about {}, one of {}) and {} items, published to JetStream and projected.",
            setup.options.scale.as_str(),
            report::thousands(plan.contacts() as f64),
            report::thousands(plan.workspaces.len() as f64),
            report::thousands(plan.small().len() as f64),
            plan.small().first().map_or(0, |workspace| workspace.contacts),
            report::thousands(f64::from(plan.big().contacts)),
            report::thousands(plan.items() as f64),
        ),
        format!("Command: `{}`", setup.options.command_line),
    ];
    match (setup.options.soak_for, &primary) {
        (Some(soak_for), _) => soak::measure(setup, &plan, &database, soak_for, &mut report).await?,
        (None, Some(primary)) => replicas::measure(setup, &plan, &database, primary, &mut report).await?,
        (None, None) if setup.options.feed => feed::measure(setup, &plan, &database, &mut report).await?,
        (None, None) if setup.options.verify => verify::measure(setup, &plan, &database, &mut report).await?,
        (None, None) => {
            projector_side::measure(setup, &plan, &database, &mut report).await?;
            if !setup.options.projector_only {
                api_side::measure(setup, &plan, &database, &mut report).await?;
            }
        }
    }
    database.pool.close().await;
    Ok(report)
}
