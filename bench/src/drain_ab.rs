//! The backlog drained by two projector builds in alternated runs, A B A B A: A is this
//! checkout's projector, B another build's (`--baseline-projector`), each run into an
//! empty read model migrated by its own build's `lectern-api migrate`, so a change to the
//! write path is measured against the build before it on the same stream, host and hour.
//! Alternating spreads the host's drift over both builds; the last run is A's, into the
//! benchmark's own database, and its projector keeps running for the measurements after.
//!
//! Every run reads the same stream from its start: the durable consumer is deleted
//! before each run, and the projector creates it again as it does on first use.

use std::path::{Path, PathBuf};

use async_nats::jetstream;

use super::cpu_shares::CpuShares;
use super::drain::{self, Drained};
use super::infra::{drop_database, Database, Nats, Process};
use super::report::thousands;
use super::wal::WalMark;
use super::{Context, Result, Setup};
use lectern_fixtures::generator::plan::Plan;

/// Runs before the last one: A B A B, then the kept A. Two pairs keep a full-scale run
/// within forty minutes on a slow host and give each build two figures at least.
const ALTERNATED: [Build; 4] = [Build::A, Build::B, Build::A, Build::B];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Build {
    /// This checkout.
    A,
    /// `--baseline-projector`.
    B,
}

/// A projector build and the `lectern-api` whose migrations go with it.
pub struct Binaries {
    pub projector: PathBuf,
    pub api: PathBuf,
}

impl Binaries {
    /// The baseline's projector and the `lectern-api` beside it, both present.
    pub fn beside(projector: &Path) -> Result<Self> {
        let api = projector.with_file_name("lectern-api");
        for binary in [projector, api.as_path()] {
            if !binary.is_file() {
                return Err(format!(
                    "{} not found (--baseline-projector needs lectern-projector and lectern-api from one build)",
                    binary.display()
                )
                .into());
            }
        }
        Ok(Self { projector: projector.to_owned(), api })
    }
}

/// One run's drain, and where its time went: the projector's own account of its batches,
/// the WAL written and the CPU of the processes involved.
pub struct Run {
    pub build: Build,
    pub drained: Drained,
    pub detail: String,
}

/// Every run's drain, by build, in the order run; the last A run's projector, still running.
pub struct Alternated {
    pub runs: Vec<Run>,
    pub projector: Process,
    pub metrics: String,
}

impl Alternated {
    /// Events/s of each run of `build`, in the order run.
    pub fn rates(&self, build: Build) -> Vec<f64> {
        self.runs.iter().filter(|run| run.build == build).map(|run| run.drained.per_second()).collect()
    }

    /// The last run: A's, into the benchmark's database.
    pub fn last(&self) -> Option<&Drained> {
        self.runs.last().map(|run| &run.drained)
    }
}

/// Drains `events` from `nats`' stream: with a baseline, A B into databases
/// of their own (dropped after each run), then A into `database`; without one, only the
/// last run.
pub async fn alternate(
    setup: &Setup,
    plan: &Plan,
    nats: &Nats,
    database: &Database,
    events: u64,
    baseline: Option<&Binaries>,
) -> Result<Alternated> {
    let head = Binaries { projector: setup.binaries.projector.clone(), api: setup.binaries.api.clone() };
    let mut runs = Vec::new();
    if let Some(baseline) = baseline {
        for (number, build) in ALTERNATED.into_iter().enumerate() {
            let binaries = match build {
                Build::A => &head,
                Build::B => baseline,
            };
            let name = format!("{}_drain{}_{}", database.name, number + 1, if build == Build::A { "a" } else { "b" });
            let own = Database::migrated_by(&binaries.api, &name).await?;
            let label = format!("{build:?}");
            let (projector, _, drained, detail) =
                drain_fresh(setup, plan, nats, &own, &binaries.projector, events, &label).await?;
            projector.stop().await;
            own.pool.close().await;
            if !setup.options.keep {
                drop_database(&name).await?;
            }
            runs.push(Run { build, drained, detail });
        }
    }
    let (projector, metrics, drained, detail) =
        drain_fresh(setup, plan, nats, database, &head.projector, events, "A").await?;
    runs.push(Run { build: Build::A, drained, detail });
    Ok(Alternated { runs, projector, metrics })
}

/// Drains the whole stream of `nats` from its first event with a fresh durable consumer:
/// `projector` started, timed until it has applied and acknowledged every event, the read
/// model counted. Returns the projector (still running), its operations address, the
/// drain and where its time went (the projector's batches, the WAL written and the CPU of
/// the projector and every nats-server); `label` names the run in the progress lines.
pub async fn drain_fresh(
    setup: &Setup,
    plan: &Plan,
    nats: &Nats,
    database: &Database,
    projector: &Path,
    events: u64,
    label: &str,
) -> Result<(Process, String, Drained, String)> {
    restart_consumer(&nats.url).await?;
    let wal = WalMark::take(&database.pool).await?;
    let mut process = drain::start_projector(projector, nats, database, &setup.work)?;
    let mut processes = vec![("projector", process.pid)];
    processes.extend(nats.servers());
    let cpu = CpuShares::start(&processes);
    let metrics = drain::metrics_address(&mut process).await?;
    let drained = drain::drain(&mut process, &metrics, &nats.url, events).await?;
    let (cpu, batches) = (cpu.describe(), drain::Batches::scrape(&metrics).await?);
    let wal = wal.describe_until(&WalMark::take(&database.pool).await?, drained.elapsed);
    drain::verify(database, plan.contacts(), plan.items()).await?;
    eprintln!(
        "      {label} ({}): {:.1} s, {} events/s",
        projector.display(),
        drained.elapsed.as_secs_f64(),
        thousands(drained.per_second())
    );
    let detail = format!("{}; {wal}; CPU {cpu}", batches.describe(drained.elapsed));
    Ok((process, metrics, drained, detail))
}

/// Deletes the durable consumer, if there is one, so the next projector reads the stream
/// from its first event.
async fn restart_consumer(nats_url: &str) -> Result<()> {
    let client = async_nats::connect(nats_url).await.context("connect to the private nats-server")?;
    let context = jetstream::new(client);
    let stream = context.get_stream(lectern_projector::stream::STREAM).await.context("CHANGES")?;
    // Before the first run there is none to delete: JetStream answers "consumer not found".
    let existed = stream.consumer_info(lectern_projector::stream::CONSUMER).await.is_ok();
    if existed {
        stream.delete_consumer(lectern_projector::stream::CONSUMER).await.context("delete the durable consumer")?;
    }
    Ok(())
}

/// The median of `values` (the mean of the middle two for an even count); 0 for none.
pub fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    match sorted.len() {
        0 => 0.0,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}
