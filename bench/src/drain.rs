//! The projector draining a backlog into an empty read model: the release binary
//! started once the stream holds every event, timed until its durable consumer has
//! acknowledged the last one (acks follow commits), RSS sampled throughout.

use std::path::Path;
use std::time::{Duration, Instant};

use async_nats::jetstream;
use lectern_projector::daemon::workspace_indexes;
use uuid::Uuid;

use super::infra::{Database, Nats, Process};
use super::machine::{Rss, RssSampler};
use super::{Context, Result};

pub struct Drained {
    pub events: u64,
    pub elapsed: Duration,
    pub rss: Rss,
}

impl Drained {
    pub fn per_second(&self) -> f64 {
        self.events as f64 / self.elapsed.as_secs_f64()
    }
}

/// Starts `lectern-projector run` against the private NATS (every server of a cluster,
/// the stream asked for with a copy on each) and `database`.
pub fn start_projector(binary: &Path, nats: &Nats, database: &Database, work: &Path) -> Result<Process> {
    Process::spawn(
        binary,
        &["run".to_owned()],
        &[
            ("NATS_URL", nats.urls.clone()),
            ("LECTERN_STREAM_REPLICAS", nats.replicas().to_string()),
            ("DATABASE_URL", database.url.clone()),
            ("LECTERN_PROJECTOR_METRICS_LISTEN", "127.0.0.1:0".to_owned()),
            ("RUST_LOG", "info".to_owned()),
            ("LECTERN_LOG_FORMAT", "json".to_owned()),
        ],
        &work.join("projector.log"),
    )
}

/// Runs the projector until it has committed every event (by its own counter of
/// applied events, a cheap scrape), then waits for the acknowledgements. The
/// consumer's info is not polled meanwhile: with a million subjects in the stream,
/// each such request costs nats-server a scan of its per-subject index.
/// The projector keeps running for the latency measurement.
pub async fn drain(projector: &mut Process, metrics: &str, nats_url: &str, events: u64) -> Result<Drained> {
    let started = Instant::now();
    let rss = RssSampler::start(projector.pid);
    let mut reported = Instant::now();
    loop {
        projector.check_running()?;
        let applied = applied_events(metrics).await?;
        if applied >= events as f64 {
            break;
        }
        if reported.elapsed() > Duration::from_secs(15) {
            eprintln!("  projector: {applied} of {events} events applied");
            reported = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let elapsed = started.elapsed();
    let rss = rss.stop();
    let client = async_nats::connect(nats_url).await.context("connect to the private nats-server")?;
    let stream = jetstream::new(client).get_stream(lectern_projector::stream::STREAM).await.context("CHANGES")?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let info = stream.consumer_info(lectern_projector::stream::CONSUMER).await.context("consumer info")?;
        if info.ack_floor.stream_sequence >= events && info.num_ack_pending == 0 {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("events applied but not acknowledged after a minute: {info:?}").into());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Ok(Drained { events, elapsed, rss })
}

/// `lectern_projector_events_applied_total`, summed over event types.
pub async fn applied_events(metrics: &str) -> Result<f64> {
    let text = reqwest::get(format!("http://{metrics}/metrics")).await?.text().await?;
    Ok(text
        .lines()
        .filter(|line| line.starts_with("lectern_projector_events_applied_total{"))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum())
}

/// Checks the read model holds what was published, and no dead letters.
pub async fn verify(database: &Database, contacts: u64, items: u64) -> Result<()> {
    let count = |sql: &'static str| async move {
        sqlx::query_scalar::<_, i64>(sql).fetch_one(&database.pool).await.context(sql)
    };
    let found = (
        count("select count(*) from contacts").await?,
        count("select count(*) from items").await?,
        count("select count(*) from dead_letters").await?,
    );
    if found != (contacts as i64, items as i64, 0) {
        return Err(format!(
            "the read model holds {} contacts, {} items and {} dead letters; expected {contacts}, {items} and 0",
            found.0, found.1, found.2
        )
        .into());
    }
    Ok(())
}

/// How long, after the drain and an analyze, the projector took to finish the big
/// workspace's own search index; `None` if it was not there within `within`. The wait
/// keeps the build out of the latency and API measurements.
pub async fn own_index_built(database: &Database, workspace: Uuid, within: Duration) -> Result<Option<Duration>> {
    let name = workspace_indexes::index_name("contacts", workspace);
    let started = Instant::now();
    // The projector finds large workspaces in the planner's statistics, which autovacuum
    // refreshes soon after a load; this machine's PostgreSQL runs without autovacuum.
    sqlx::raw_sql("analyze contacts, items").execute(&database.pool).await.context("analyze after the drain")?;
    while started.elapsed() < within {
        let valid = workspace_indexes::validity(&database.pool, &name).await;
        if valid.context("look for the big workspace's own search index")? == Some(true) {
            return Ok(Some(started.elapsed()));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok(None)
}

/// The projector's own account of its batches, from its `/metrics`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Batches {
    pub count: f64,
    pub events: f64,
    /// Pull-to-commit time, summed.
    pub seconds: f64,
}

impl Batches {
    pub async fn scrape(metrics: &str) -> Result<Self> {
        let text = reqwest::get(format!("http://{metrics}/metrics")).await?.text().await?;
        let value = |name: &str| {
            text.lines()
                .find_map(|line| line.strip_prefix(name).and_then(|rest| rest.strip_prefix(' ')))
                .and_then(|number| number.trim().parse::<f64>().ok())
                .unwrap_or_default()
        };
        Ok(Self {
            count: value("lectern_projector_batch_size_count"),
            events: value("lectern_projector_batch_size_sum"),
            seconds: value("lectern_projector_apply_duration_seconds_sum"),
        })
    }

    pub fn since(self, before: Self) -> Self {
        Self {
            count: self.count - before.count,
            events: self.events - before.events,
            seconds: self.seconds - before.seconds,
        }
    }

    /// "1,200 batches of 1,000 events, 52 ms pull to commit each (97 % of the time)".
    pub fn describe(self, wall: Duration) -> String {
        let count = self.count.max(1.0);
        format!(
            "{:.0} batches of {:.0} events on average, {:.1} ms from pull to commit each ({:.0} % of the time)",
            self.count,
            self.events / count,
            self.seconds * 1000.0 / count,
            100.0 * self.seconds / wall.as_secs_f64().max(1e-9)
        )
    }
}

/// The projector's operations address, from its JSON log.
pub async fn metrics_address(projector: &mut Process) -> Result<String> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        projector.check_running()?;
        let log = std::fs::read_to_string(&projector.log).unwrap_or_default();
        let found =
            log.lines().filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok()).find_map(|record| {
                (record["fields"]["message"] == "operations listener ready")
                    .then(|| record["fields"]["metrics"].as_str().map(str::to_owned))
                    .flatten()
            });
        if let Some(address) = found {
            return Ok(address);
        }
        if Instant::now() > deadline {
            return Err("the projector logged no operations address within 15 s".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
