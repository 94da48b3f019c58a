//! Reads from a PostgreSQL streaming replica (`--replicas`, issue 27), after the same load
//! as the comparisons:
//!
//! - the servers: the run's own primary, a private PostgreSQL server
//!   (`lectern_private_postgres`) with the tuning of the server the other modes use, read
//!   from it, so the shared server's other databases are never copied; after the load, a
//!   standby of it made by `pg_basebackup -R`;
//! - throughput: an API on the primary alone (A) beside one reading the standby
//!   (`--read-database-url`, B), wrk on a first page, a deep page and a retrieve, A B A B,
//!   with the CPU per request of each server's processes, told apart by their postmasters;
//! - publish→visible through each API's changes feed ([`super::feed_latency`]), and in SQL
//!   on the standby against on the primary ([`super::latency`]);
//! - the projector's drain from a three-node NATS cluster with the stream at R3, against a
//!   single server, alternated, each into a fresh database on the primary
//!   ([`super::drain_ab::drain_fresh`]).
//!
//! A ratio is always B over A, or the cluster over the single server, measured in the same
//! run on the same machine.

use std::time::{Duration, Instant};

use async_nats::jetstream;
use lectern_api::metric_names::{READS, REPLICA_IN_ROTATION};
use lectern_private_postgres::PrivatePostgres;
use lectern_projector::daemon::workspace_indexes::OwnIndexSettings;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, PgConnection};

use super::api::{self, Api};
use super::api_side;
use super::drain::Drained;
use super::drain_ab::{drain_fresh, median};
use super::feed_latency::{self, FeedLatency, Quantiles};
use super::infra::{self, Database, Nats};
use super::load::Http;
use super::machine::{cpu_seconds, tree_cpu_seconds};
use super::projector_side::STEADY_RATE;
use super::report::{millis, thousands, Report, Row};
use super::scenarios::{self, Scenario};
use super::{drain, latency, publish, Context, Result, Setup};
use lectern_fixtures::generator::plan::Plan;

/// The settings of the server the other modes run on that decide how PostgreSQL performs,
/// copied to the private primary and its standby so that their figures stand beside
/// those runs' (a hot standby also needs `max_connections` no lower than its primary's:
/// both get the same).
const TUNING: &[&str] = &[
    "shared_buffers",
    "max_connections",
    "work_mem",
    "maintenance_work_mem",
    "effective_cache_size",
    "random_page_cost",
    "effective_io_concurrency",
    "jit",
    "max_parallel_workers_per_gather",
    "max_wal_size",
    "min_wal_size",
    "checkpoint_timeout",
    "checkpoint_completion_target",
    "wal_compression",
    "wal_buffers",
    "synchronous_commit",
    "fsync",
    "full_page_writes",
    "autovacuum",
];

/// The drains write gigabytes of WAL at full scale while the standby replays on the same
/// two cores: the primary keeps this much for it to catch up from, where the shared
/// crate's default (256 MB) could leave it without the segments it still needs.
const KEEP_FOR_THE_STANDBY: &str = "wal_keep_size = '2GB'\n";

/// The scenarios of [`scenarios::all`] measured here, by how their names begin: a first
/// page (served from the API's cache after the first request), a deep keyset page of the
/// big workspace and a retrieve (both a statement per request, or per batch).
const SCENARIOS: [&str; 3] =
    ["contacts: first page, random small workspace", "contacts: deep keyset page", "contacts: retrieve by id"];
/// A B A B: each API measured twice per scenario, alternated, so the host's drift falls
/// on both.
const ROUNDS: usize = 2;
/// Each API's warm-up per scenario (key cache, prepared statements, page cache).
const WARM_UP: Duration = Duration::from_secs(2);
/// Single server and cluster drained alternately, S C S C.
const DRAIN_ROUNDS: usize = 2;
/// As `projector_side`: the projector looks once a minute, the build takes about 11 s.
const OWN_INDEX_WITHIN: Duration = Duration::from_secs(180);
/// How long the standby may take to replay what the primary has written.
const CATCH_UP_WITHIN: Duration = Duration::from_secs(300);
/// How long API B's replica may take to enter the rotation (the monitor samples every 100 ms).
const ROTATION_WITHIN: Duration = Duration::from_secs(30);
/// How long a new JetStream cluster may take to elect its meta leader and take a stream.
const CLUSTER_READY_WITHIN: Duration = Duration::from_secs(60);

/// The run's own primary, and the settings its standby gets too.
pub struct Primary {
    pub server: PrivatePostgres,
    /// Everything beyond the port, the socket and replication's settings.
    settings: String,
    /// `host:port` of the server the tuning was read from.
    source: String,
}

impl Primary {
    /// Reads the tuning of the server the other modes use and starts a private primary with it.
    pub async fn start(setup: &Setup) -> Result<Self> {
        let admin = infra::admin_url();
        let options: PgConnectOptions = admin.parse().context("LECTERN_BENCH_DATABASE_URL")?;
        // The URL may hold a password: the report names only the host and port.
        let source = format!("{}:{}", options.get_host(), options.get_port());
        let mut connection = PgConnection::connect_with(&options)
            .await
            .context(format!("connect to {source} to read its tuning (or set LECTERN_BENCH_DATABASE_URL)"))?;
        let mut settings = String::new();
        for name in TUNING {
            let value: String = sqlx::query_scalar("select current_setting($1)")
                .bind(*name)
                .fetch_one(&mut connection)
                .await
                .context(format!("read {name} on {source}"))?;
            settings.push_str(&format!("{name} = '{}'\n", value.replace('\'', "''")));
        }
        let _ = connection.close().await;
        settings.push_str(KEEP_FOR_THE_STANDBY);
        eprintln!("[0/6] a private PostgreSQL primary (initdb, the tuning of {source}, wal_level replica)");
        let mut server = PrivatePostgres::start_primary(&settings).await.context("start the private primary")?;
        if setup.options.keep {
            server.keep_directory();
        }
        Ok(Self { server, settings, source })
    }

    /// The superuser's URL of the primary's `postgres` database.
    pub fn admin_url(&self) -> String {
        self.server.url_for("postgres")
    }

    /// For the report's header: which server this is.
    pub fn describe(&self) -> String {
        format!(
            "a private primary (port {}) and, after the load, its streaming standby, both with the tuning of the \
             server on {} (below) and `wal_level = replica`; they share the machine with the bench, the apps and the \
             load generators.",
            self.server.port, self.source
        )
    }
}

pub async fn measure(
    setup: &Setup,
    plan: &Plan,
    database: &Database,
    primary: &Primary,
    report: &mut Report,
) -> Result<()> {
    eprintln!(
        "[1/6] the load: {} created events published to a private JetStream, drained into the primary",
        thousands((plan.contacts() + plan.items()) as f64)
    );
    let nats = Nats::start(&setup.work).await?;
    let (published, _) = publish::backlog(plan, &nats.url).await?;
    let mut projector = drain::start_projector(&setup.binaries.projector, &nats, database, &setup.work)?;
    let metrics = drain::metrics_address(&mut projector).await?;
    let loaded = drain::drain(&mut projector, &metrics, &nats.url, published).await?;
    drain::verify(database, plan.contacts(), plan.items()).await?;
    eprintln!("      {:.1} s, {} events/s", loaded.elapsed.as_secs_f64(), thousands(loaded.per_second()));
    if i64::from(plan.big().contacts) >= OwnIndexSettings::default().from_rows {
        // Built before the standby is made, so neither the copy nor the measurements wait on it.
        eprintln!("      waiting for the big workspace's own search index");
        if drain::own_index_built(database, plan.big().id, OWN_INDEX_WITHIN).await?.is_none() {
            report.notes.push(format!(
                "The big workspace's own search index was not ready {} s after the load; the scenarios ran without it.",
                OWN_INDEX_WITHIN.as_secs()
            ));
        }
    }

    eprintln!("[2/6] a streaming standby of the primary (pg_basebackup -R)");
    let mut standby = primary.server.start_standby(&primary.settings).await.context("make the standby")?;
    if setup.options.keep {
        standby.keep_directory();
        eprintln!(
            "kept (stopped at the end): the primary in {}, the standby in {}",
            primary.server.directory().display(),
            standby.directory().display()
        );
    }
    let postmasters = Postmasters::of(&primary.server, &standby)?;
    let standby_url = on_port(&database.url, standby.port)?;

    eprintln!("[3/6] API A (the primary alone) and API B (reads on the standby), wrk A B A B per scenario");
    let (mut a, prepared) = api_side::prepare(setup, plan, database).await?;
    // The keys and lookup tables `prepare` wrote, and its vacuum, on the standby too.
    caught_up(&primary.server, &standby).await?;
    let mut b = api::start_named(
        &setup.binaries.api,
        database,
        &setup.work,
        "api-b",
        &[("LECTERN_READ_DATABASE_URL", standby_url.clone())],
    )
    .await?;
    in_rotation(&b).await?;
    let all = scenarios::all(&prepared.inputs(plan))?;
    let mut compared = Vec::new();
    for prefix in SCENARIOS {
        let scenario = all
            .iter()
            .find(|scenario| scenario.name.starts_with(prefix))
            .ok_or_else(|| format!("no API scenario named \"{prefix}…\""))?;
        eprintln!("      {}", scenario.name);
        for api in [&mut a, &mut b] {
            api_side::run_wrk(setup, api, scenario, WARM_UP).await?;
        }
        let (mut runs_a, mut runs_b) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            runs_a.push(wrk_run(setup, &mut a, scenario, &postmasters).await?);
            runs_b.push(wrk_run(setup, &mut b, scenario, &postmasters).await?);
        }
        let pair = Compared { name: scenario.name.clone(), a: runs_a, b: runs_b };
        eprintln!(
            "        A {} req/s, B {} req/s ({:.2}); primary CPU/request A {:.0} µs, B {:.0} µs",
            thousands(pair.per_second(Side::A)),
            thousands(pair.per_second(Side::B)),
            pair.ratio(),
            pair.mean(Side::A, |run| run.primary_us),
            pair.mean(Side::B, |run| run.primary_us)
        );
        compared.push(pair);
    }

    eprintln!("[4/6] publish→visible through the changes feed: API A, then API B");
    let key = &prepared.keys[0];
    let latency_a = feed_latency::measure(plan, &nats.url, &a.base, key, &database.url, 0).await?;
    let before = Reads::of(&b).await?;
    let latency_b = feed_latency::measure(plan, &nats.url, &b.base, key, &database.url, 1).await?;
    let latency_reads = Reads::of(&b).await?.since(before);
    for api in [&mut a, &mut b] {
        api.process.check_running()?;
    }
    a.process.stop().await;
    b.process.stop().await;
    eprintln!(
        "      and at {STEADY_RATE} events/s for {} s, polled in SQL: on the primary, then on the standby",
        setup.options.steady_for.as_secs()
    );
    // Versions 3 and 4: the feed's samples made some of these contacts version 2 already.
    let steady_for = setup.options.steady_for;
    let on_primary = latency::measure(plan, &nats.url, &database.pool, STEADY_RATE, steady_for, 3).await?;
    let standby_pool =
        PgPoolOptions::new().max_connections(2).connect(&standby_url).await.context("connect to the standby")?;
    let on_standby = latency::measure(plan, &nats.url, &standby_pool, STEADY_RATE, steady_for, 4).await?;
    standby_pool.close().await;
    projector.check_running()?;
    projector.stop().await;
    drop(nats);

    eprintln!("[5/6] the backlog published again: to a fresh nats-server, and to a three-node cluster at R3");
    let single = Nats::start_named(&setup.work, "nats-single").await?;
    let (single_events, single_publish) = publish::backlog(plan, &single.url).await?;
    let cluster = Nats::start_cluster(&setup.work, "nats-cluster").await?;
    stream_on_every_server(&cluster).await?;
    let (cluster_events, cluster_publish) = publish::backlog(plan, &cluster.url).await?;
    let publish_rate = |events: u64, took: Duration| events as f64 / took.as_secs_f64().max(1e-9);
    let (single_publish, cluster_publish) =
        (publish_rate(single_events, single_publish), publish_rate(cluster_events, cluster_publish));
    eprintln!("      single {} events/s, cluster {} events/s", thousands(single_publish), thousands(cluster_publish));

    eprintln!(
        "[6/6] drains, single server (S) and cluster (C) alternated, {}, each into a fresh database on the primary",
        ["S C"; DRAIN_ROUNDS].join(" ")
    );
    let mut drains: Vec<(Nodes, Drained, String)> = Vec::new();
    for round in 1..=DRAIN_ROUNDS {
        for (nodes, nats, events) in
            [(Nodes::Single, &single, single_events), (Nodes::Cluster, &cluster, cluster_events)]
        {
            let name = format!("{}_drain{round}_{}", database.name, nodes.short());
            let fresh = Database::create_on(&primary.admin_url(), &name).await?;
            let (process, _, drained, detail) =
                drain_fresh(setup, plan, nats, &fresh, &setup.binaries.projector, events, nodes.short()).await?;
            process.stop().await;
            fresh.pool.close().await;
            if !setup.options.keep {
                infra::drop_database_on(&primary.admin_url(), &name).await?;
            }
            drains.push((nodes, drained, detail));
        }
    }
    drop((single, cluster, standby));

    // The table.
    for pair in &compared {
        pair.report(report);
    }
    latency_rows(report, &latency_a, &latency_b);
    let seen = |latency: &latency::Latency| format!("{} of {} seen", latency.seen, latency.sent);
    report.rows.push(versus(
        format!(
            "projector: publish→visible at {} events/s, polled on the standby against on the primary (ratio of p99s)",
            thousands(f64::from(STEADY_RATE))
        ),
        ("standby", on_standby.p50, on_standby.p99, seen(&on_standby)),
        ("primary", on_primary.p50, on_primary.p99, seen(&on_primary)),
    ));
    report.targets.push((
        "steady publish→visible on the standby p99 < 50 ms (the comparisons' target on the primary)".to_owned(),
        on_standby.p99 < Duration::from_millis(50) && on_standby.seen == on_standby.sent,
        format!(
            "p99 {}, max {}, {} of {} seen (primary p99 {})",
            millis(on_standby.p99),
            millis(on_standby.max),
            on_standby.seen,
            on_standby.sent,
            millis(on_primary.p99)
        ),
    ));
    let rates = |nodes: Nodes| -> Vec<f64> {
        drains.iter().filter(|(of, ..)| *of == nodes).map(|(_, drained, _)| drained.per_second()).collect()
    };
    let (single_rates, cluster_rates) = (rates(Nodes::Single), rates(Nodes::Cluster));
    let list = |rates: &[f64]| rates.iter().map(|rate| thousands(*rate)).collect::<Vec<_>>().join(", ");
    let (single_rate, cluster_rate) = (median(&single_rates), median(&cluster_rates));
    report.rows.push(Row {
        scenario: format!(
            "projector: drain {} events from a three-node NATS cluster at R3 against a single server, {}",
            thousands(cluster_events as f64),
            ["S C"; DRAIN_ROUNDS].join(" ")
        ),
        lectern: format!("{} events/s (cluster; median of {})", thousands(cluster_rate), list(&cluster_rates)),
        baseline: format!("{} events/s (single; median of {})", thousands(single_rate), list(&single_rates)),
        ratio: Some(cluster_rate / single_rate),
        rss: drains
            .iter()
            .rev()
            .find(|(nodes, ..)| *nodes == Nodes::Cluster)
            .map_or_else(|| "–".to_owned(), |(_, drained, _)| drained.rss.summary()),
        ..Row::dashes()
    });
    report.rows.push(Row {
        scenario: "publish the backlog (pipelined, every publish acknowledged) to the cluster at R3 against a single \
                   server"
            .to_owned(),
        lectern: format!("{} events/s (cluster)", thousands(cluster_publish)),
        baseline: format!("{} events/s (single)", thousands(single_publish)),
        ratio: Some(cluster_publish / single_publish),
        ..Row::dashes()
    });

    // How it was measured.
    report.notes.push(format!(
        "Servers: the run's own PostgreSQL primary (initdb into a temporary directory, run as the `postgres` system \
         user), with the settings of the server on {source} that decide its performance: {tuning}, and \
         `wal_level = replica`, `hot_standby = on`; the standby is a `pg_basebackup -R -X stream --checkpoint=fast` of \
         it taken after the load, with the same settings, streaming from then on. The load itself (the single \
         nats-server, before the standby existed): {loaded} events/s.",
        source = primary.source,
        tuning = primary.settings.lines().collect::<Vec<_>>().join(", "),
        loaded = thousands(loaded.per_second()),
    ));
    report.notes.push(format!(
        "Throughput: release `lectern-api serve` twice, side by side for the whole phase: A with `DATABASE_URL` the \
         primary alone, B with `LECTERN_READ_DATABASE_URL` the standby too (`--max-replica-lag-ms` at its default); \
         B's replica was in its rotation before the first run. Per scenario, {warm} s of wrk warm-up against each, \
         then wrk -t2 -c64 -d{s}s against A, B, A, B; req/s are medians, p50 and p99 B's medians. CPU per request \
         is read from /proc over each wrk run: the API process's, and each server's whole process tree (its \
         postmaster, the children running, and the children it reaped), the two servers told apart by the pid in \
         their `postmaster.pid`. The primary's CPU includes the idle API's background work (B's replica monitor \
         samples the primary every 100 ms, both poll key revocations) and the standby's its WAL replay. B's reads \
         by where they went are the API's own `{READS}`.",
        warm = WARM_UP.as_secs(),
        s = setup.options.run_for.as_secs(),
    ));
    report.notes.push(format!(
        "Publish→visible through the feed: `--feed`'s measurement, first through A (contacts 0 to 599 of the big \
         workspace), then through B (contacts 600 to 1,199), the projector writing to the primary. B reads a \
         workspace from the primary while a change it was notified of is not known to be replayed on the standby \
         (`reads::replicas`' fences, which the monitor's samples every 100 ms or a read on the standby lift): over \
         B's samples, {} reads on the standby and {} on the primary. Through A, {} Through B, {} Publish→visible \
         in SQL: as the comparisons' steady latency ({} events/s of distinct contacts for {} s, the oldest \
         outstanding rows polled every ~2 ms, a row visible at the start of the first poll that sees its version), \
         polled on the primary (version 3), then on the standby (version 4; the same contacts).",
        thousands(latency_reads.replica),
        thousands(latency_reads.primary),
        latency_a.describe(),
        latency_b.describe(),
        thousands(f64::from(STEADY_RATE)),
        steady_for.as_secs()
    ));
    let runs: Vec<String> = drains
        .iter()
        .map(|(nodes, drained, detail)| {
            format!(
                "{} {} events/s in {:.1} s ({detail})",
                nodes.short(),
                thousands(drained.per_second()),
                drained.elapsed.as_secs_f64()
            )
        })
        .collect();
    report.notes.push(format!(
        "Drains: the backlog published once to a fresh nats-server and once to three nats-servers routed into one \
         JetStream cluster (`--cluster`/`--routes`, as compose's `scale` profile), the CHANGES stream created with \
         three replicas; then the release projector (`NATS_URL` every server, `LECTERN_STREAM_REPLICAS` 1 or 3) \
         drained each in turn from its first event (durable consumer deleted before each run) into an empty \
         database on the primary, with the standby streaming it, timed as in the comparisons; medians. Runs in \
         order: {}.",
        runs.join("; ")
    ));
    report.notes.push(
        "Noise: two shared cores run both servers, both APIs, the projector, up to three nats-servers and the load \
         generators, and other work on the host may run too; the alternation spreads drift over both sides of each \
         ratio, but a few percent either way is within this host's noise."
            .to_owned(),
    );
    Ok(())
}

/// Which API a wrk run measured.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    /// The primary alone.
    A,
    /// Reads on the standby.
    B,
}

/// One wrk run against one API.
struct Run {
    http: Http,
    /// Mean time per request by the API's own histogram, µs.
    inside_us: f64,
    /// CPU per request, µs: the API process's, the primary's processes', the standby's.
    api_us: f64,
    primary_us: f64,
    standby_us: f64,
    reads: Reads,
}

/// One scenario's runs, A's and B's, in the order run.
struct Compared {
    name: String,
    a: Vec<Run>,
    b: Vec<Run>,
}

impl Compared {
    fn runs(&self, side: Side) -> &[Run] {
        match side {
            Side::A => &self.a,
            Side::B => &self.b,
        }
    }

    fn per_second(&self, side: Side) -> f64 {
        median(&self.runs(side).iter().map(|run| run.http.per_second).collect::<Vec<_>>())
    }

    fn ratio(&self) -> f64 {
        self.per_second(Side::B) / self.per_second(Side::A).max(1e-9)
    }

    /// The mean of `figure` over `side`'s runs.
    fn mean(&self, side: Side, figure: impl Fn(&Run) -> f64) -> f64 {
        let runs = self.runs(side);
        runs.iter().map(figure).sum::<f64>() / runs.len().max(1) as f64
    }

    fn quantile(&self, side: Side, of: impl Fn(&Http) -> Duration) -> Duration {
        let runs: Vec<f64> = self.runs(side).iter().map(|run| of(&run.http).as_secs_f64()).collect();
        Duration::from_secs_f64(median(&runs))
    }

    /// The scenario's row, its targets and its lines in the breakdown.
    fn report(&self, report: &mut Report) {
        let list = |side: Side| {
            self.runs(side).iter().map(|run| thousands(run.http.per_second)).collect::<Vec<_>>().join(", ")
        };
        let ratio = self.ratio();
        report.rows.push(Row {
            scenario: format!("API {}: B (reads on the standby) against A (the primary alone), A B A B", self.name),
            lectern: format!("{} req/s (B: {})", thousands(self.per_second(Side::B)), list(Side::B)),
            baseline: format!("{} req/s (A: {})", thousands(self.per_second(Side::A)), list(Side::A)),
            ratio: Some(ratio),
            p50: millis(self.quantile(Side::B, |http| http.p50)),
            p99: millis(self.quantile(Side::B, |http| http.p99)),
            rss: self.b.last().map_or_else(|| "–".to_owned(), |run| run.http.rss.summary()),
        });
        report.targets.push((
            format!("B within 5 % of A (≥ 0.95×), {}", self.name),
            ratio >= 0.95,
            format!("{ratio:.2}×"),
        ));
        let (with_a, with_b) = (self.mean(Side::A, |run| run.primary_us), self.mean(Side::B, |run| run.primary_us));
        report.targets.push((
            format!(
                "the primary's PostgreSQL CPU per request near zero with B (≤ 10 % of A's, or ≤ 2 µs), {}",
                self.name
            ),
            with_b <= (0.1 * with_a).max(2.0),
            format!("B {with_b:.1} µs, A {with_a:.1} µs"),
        ));
        for side in [Side::A, Side::B] {
            let reads = self.runs(side).iter().fold(Reads::default(), |sum, run| sum.plus(run.reads));
            let label = match side {
                Side::A => "A (the primary alone)",
                Side::B => "B (reads on the standby)",
            };
            report.breakdown.push([
                format!("{}, {label}", self.name),
                millis(self.quantile(side, |http| http.mean)),
                millis(Duration::from_secs_f64(self.mean(side, |run| run.inside_us) / 1e6)),
                format!("{:.0} µs", self.mean(side, |run| run.api_us)),
                format!(
                    "primary {:.1} µs, standby {:.1} µs; reads {} on the primary, {} on the standby",
                    self.mean(side, |run| run.primary_us),
                    self.mean(side, |run| run.standby_us),
                    thousands(reads.primary),
                    thousands(reads.replica)
                ),
            ]);
        }
    }
}

/// The postmasters of the primary and the standby, whose process trees hold each server's CPU.
struct Postmasters {
    primary: u32,
    standby: u32,
}

impl Postmasters {
    fn of(primary: &PrivatePostgres, standby: &PrivatePostgres) -> Result<Self> {
        let pid = |server: &PrivatePostgres, role: &str| {
            server.postmaster_pid().ok_or_else(|| {
                format!("no postmaster.pid for the {role} in {} (is it running?)", server.directory().display())
            })
        };
        Ok(Self { primary: pid(primary, "primary")?, standby: pid(standby, "standby")? })
    }

    /// CPU seconds so far of the primary's processes and the standby's.
    fn seconds(&self) -> Result<(f64, f64)> {
        let tree = |pid: u32, role: &str| {
            tree_cpu_seconds(pid).ok_or_else(|| format!("the {role}'s postmaster (pid {pid}) is gone"))
        };
        Ok((tree(self.primary, "primary")?, tree(self.standby, "standby")?))
    }
}

/// wrk against `api` for the run's duration, with the CPU of the API and of each server
/// and the API's reads by where they went, read around it.
async fn wrk_run(setup: &Setup, api: &mut Api, scenario: &Scenario, postmasters: &Postmasters) -> Result<Run> {
    let pid = api.process.pid;
    let (servers, own, served, reads) =
        (postmasters.seconds()?, cpu_seconds(pid).unwrap_or_default(), api.served().await?, Reads::of(api).await?);
    let http = api_side::run_wrk(setup, api, scenario, setup.options.run_for).await?;
    let (servers_after, own_after) = (postmasters.seconds()?, cpu_seconds(pid).unwrap_or_default());
    let (served_after, reads) = (api.served().await?, Reads::of(api).await?.since(reads));
    let per_request = |seconds: f64| seconds * 1e6 / http.requests.max(1) as f64;
    Ok(Run {
        inside_us: (served_after.1 - served.1) * 1e6 / (served_after.0 - served.0).max(1.0),
        api_us: per_request(own_after - own),
        primary_us: per_request(servers_after.0 - servers.0),
        standby_us: per_request(servers_after.1 - servers.1),
        reads,
        http,
    })
}

/// An API's reads so far, by where they went (its `lectern_api_reads_total`).
#[derive(Clone, Copy, Debug, Default)]
struct Reads {
    primary: f64,
    replica: f64,
}

impl Reads {
    async fn of(api: &Api) -> Result<Self> {
        let samples = api.samples(READS).await.context(format!("read {READS}"))?;
        let count = |source: &str| {
            let label = format!("source=\"{source}\"");
            samples.iter().filter(|(labels, _)| labels.contains(&label)).map(|(_, value)| value).sum::<f64>()
        };
        Ok(Self { primary: count("primary"), replica: count("replica") })
    }

    fn since(self, before: Self) -> Self {
        Self { primary: self.primary - before.primary, replica: self.replica - before.replica }
    }

    fn plus(self, other: Self) -> Self {
        Self { primary: self.primary + other.primary, replica: self.replica + other.replica }
    }
}

/// Where a drain read its events from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Nodes {
    Single,
    Cluster,
}

impl Nodes {
    fn short(self) -> &'static str {
        match self {
            Self::Single => "single",
            Self::Cluster => "cluster",
        }
    }
}

/// The table's rows for publish→visible and the long poll's wake-up, B beside A.
fn latency_rows(report: &mut Report, a: &FeedLatency, b: &FeedLatency) {
    let rows = [
        ("feed: publish→visible (polled from the previous token until served)", &a.visible, &b.visible),
        ("feed: a long poll's wake-up (commit heard by LISTEN → response)", &a.wake, &b.wake),
    ];
    for (scenario, a, b) in rows {
        let samples = |quantiles: &Quantiles| format!("{} samples", quantiles.count);
        report.rows.push(versus(
            format!("{scenario}: B against A (ratio of p99s)"),
            ("B", b.p50, b.p99, samples(b)),
            ("A", a.p50, a.p99, samples(a)),
        ));
    }
    report.targets.push((
        "publish→visible in the feed p99 < 50 ms through B (as `--feed`'s target through A)".to_owned(),
        b.visible.p99 < Duration::from_millis(50),
        format!("B p99 {}, A p99 {}", millis(b.visible.p99), millis(a.visible.p99)),
    ));
}

/// A latency's p50 and p99, what it was measured through and how many samples.
type Latencies<'a> = (&'a str, Duration, Duration, String);

/// A row of one latency measured two ways: `measured` in the columns, beside `baseline`,
/// the ratio that of their p99s.
fn versus(scenario: String, measured: Latencies<'_>, baseline: Latencies<'_>) -> Row {
    let figure = |(name, p50, p99, count): &Latencies<'_>| {
        format!("{name} p50 {}, p99 {} ({count})", millis(*p50), millis(*p99))
    };
    Row {
        scenario,
        lectern: figure(&measured),
        baseline: figure(&baseline),
        ratio: Some(measured.2.as_secs_f64() / baseline.2.as_secs_f64().max(1e-9)),
        p50: millis(measured.1),
        p99: millis(measured.2),
        ..Row::dashes()
    }
}

/// `url` with another port: the same database and user on the standby.
fn on_port(url: &str, port: u16) -> Result<String> {
    let options: PgConnectOptions = url.parse().context("the database URL")?;
    Ok(options.port(port).to_url_lossy().to_string())
}

/// Waits until the standby has replayed everything the primary had written when asked.
async fn caught_up(primary: &PrivatePostgres, standby: &PrivatePostgres) -> Result<()> {
    // The insert position: the projector commits without waiting for the flush.
    let written: String =
        primary.fetch_one("select pg_current_wal_insert_lsn()::text").await.context("read the primary's position")?;
    // An LSN as PostgreSQL printed it: no quoting needed.
    let replayed = format!("select coalesce(pg_last_wal_replay_lsn() >= '{written}'::pg_lsn, false)");
    let deadline = Instant::now() + CATCH_UP_WITHIN;
    while !standby.fetch_one::<bool>(&replayed).await.context("read the standby's replay position")? {
        if Instant::now() > deadline {
            return Err(format!(
                "the standby had not replayed the primary's WAL up to {written} after {} s",
                CATCH_UP_WITHIN.as_secs()
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// Waits until API B's monitor has put the standby into its rotation.
async fn in_rotation(api: &Api) -> Result<()> {
    let deadline = Instant::now() + ROTATION_WITHIN;
    loop {
        let samples = api.samples(REPLICA_IN_ROTATION).await.context(format!("read {REPLICA_IN_ROTATION}"))?;
        if samples.iter().any(|(_, value)| *value > 0.5) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "API B's replica was not in its rotation within {} s ({REPLICA_IN_ROTATION}: {samples:?}); see {}",
                ROTATION_WITHIN.as_secs(),
                api.process.log.display()
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Creates the CHANGES stream with a copy on every server of `nats`, as the projector
/// would with `LECTERN_STREAM_REPLICAS`, once the cluster takes streams (its servers first
/// elect a meta leader). The publisher's own `ensure_stream` then keeps it.
async fn stream_on_every_server(nats: &Nats) -> Result<()> {
    let client = async_nats::connect(&nats.url).await.context("connect to the NATS cluster")?;
    let context = jetstream::new(client);
    let deadline = Instant::now() + CLUSTER_READY_WITHIN;
    loop {
        match lectern_projector::stream::ensure_stream(&context, nats.replicas()).await {
            Ok(stream) if stream.cached_info().config.num_replicas == nats.replicas() => return Ok(()),
            Ok(stream) => {
                return Err(format!(
                    "the CHANGES stream has {} replicas, not {}",
                    stream.cached_info().config.num_replicas,
                    nats.replicas()
                )
                .into())
            }
            Err(error) if Instant::now() > deadline => {
                return Err(error).context(format!(
                    "create the CHANGES stream at R{} within {} s",
                    nats.replicas(),
                    CLUSTER_READY_WITHIN.as_secs()
                ))
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}
