//! The write path: the backlog published, drained by the release projector, checked;
//! publish→visible latency at a steady 2,000 events/s; then the same rows written by
//! plain SQL into a second empty database.

use lectern_projector::daemon::workspace_indexes::OwnIndexSettings;

use super::cpu_shares::CpuShares;
use super::infra::{Database, Nats};
use super::machine::RssSampler;
use super::report::{millis, thousands, Report, Row};
use super::wal::WalMark;
use super::{drain, latency, plain_sql, publish, Context, Result, Setup};
use lectern_fixtures::generator::plan::Plan;

/// Events/s of the steady publish→visible measurement (also `--replicas`').
pub const STEADY_RATE: u32 = 2_000;

/// The projector looks for large workspaces every minute (its default) and builds an
/// index of 200,000 rows in about 11 s on an idle machine here.
const OWN_INDEX_WITHIN: std::time::Duration = std::time::Duration::from_secs(180);

pub async fn measure(setup: &Setup, plan: &Plan, database: &Database, report: &mut Report) -> Result<()> {
    let events = plan.contacts() + plan.items();
    eprintln!("[1/5] publishing {} created events to a private JetStream", thousands(events as f64));
    let nats = Nats::start(&setup.work).await?;
    let (published, publish_time) = publish::backlog(plan, &nats.url).await?;
    eprintln!(
        "      {:.1} s, {} events/s",
        publish_time.as_secs_f64(),
        thousands(published as f64 / publish_time.as_secs_f64())
    );

    eprintln!("[2/5] lectern-projector draining the backlog into an empty read model");
    let drain_wal = WalMark::take(&database.pool).await?;
    let mut projector = drain::start_projector(&setup.binaries.projector, &nats, database, &setup.work)?;
    let metrics = drain::metrics_address(&mut projector).await?;
    let drained = drain::drain(&mut projector, &metrics, &nats.url, published).await?;
    let drain_batches = drain::Batches::scrape(&metrics).await?;
    let drain_wal = drain_wal.describe_until(&WalMark::take(&database.pool).await?, drained.elapsed);
    drain::verify(database, plan.contacts(), plan.items()).await?;
    eprintln!("      {:.1} s, {} events/s", drained.elapsed.as_secs_f64(), thousands(drained.per_second()));
    let own_index = if i64::from(plan.big().contacts) >= OwnIndexSettings::default().from_rows {
        eprintln!("      waiting for the big workspace's own search index");
        let built = drain::own_index_built(database, plan.big().id, OWN_INDEX_WITHIN).await?;
        Some(built)
    } else {
        None
    };

    eprintln!("[3/5] publish→visible latency at {STEADY_RATE} events/s for {} s", setup.options.steady_for.as_secs());
    let rss = RssSampler::start(projector.pid);
    let steady_wal = WalMark::take(&database.pool).await?;
    let steady_cpu = CpuShares::start(&[
        ("projector", projector.pid),
        ("nats-server", nats.pid()),
        ("the bench (publisher and poller)", std::process::id()),
    ]);
    let steady_started = std::time::Instant::now();
    let steady = latency::measure(plan, &nats.url, &database.pool, STEADY_RATE, setup.options.steady_for, 2).await?;
    let steady_batches = drain::Batches::scrape(&metrics).await?.since(drain_batches);
    let steady_wall = steady_started.elapsed();
    let steady_cpu = steady_cpu.describe();
    let steady_wal = steady_wal.describe_until(&WalMark::take(&database.pool).await?, steady_wall);
    let steady_rss = rss.stop();
    let csv: String = steady.samples.iter().map(|(at, latency)| format!("{at:.1},{latency:.1}\n")).collect();
    let latency_csv = setup.work.join("latency.csv");
    std::fs::write(&latency_csv, format!("published_ms,visible_after_ms\n{csv}"))
        .context(format!("write {}", latency_csv.display()))?;
    projector.check_running()?;
    projector.stop().await;
    drop(nats);

    eprintln!("[4/5] the same rows by plain SQL (unnest upserts, one connection) into a second database");
    let written = plain_sql::write_into_second_database(setup, plan).await?;

    let ratio = drained.per_second() / written.per_second();
    report.rows.push(Row {
        scenario: format!("projector: drain a backlog of {} events", thousands(published as f64)),
        lectern: format!("{} events/s", thousands(drained.per_second())),
        baseline: format!("{} rows/s", thousands(written.per_second())),
        ratio: Some(ratio),
        p50: "–".to_owned(),
        p99: "–".to_owned(),
        rss: drained.rss.summary(),
    });
    report.rows.push(Row {
        scenario: format!("projector: publish→visible at {} events/s", thousands(f64::from(STEADY_RATE))),
        lectern: format!("{} events/s ({} of {} seen)", thousands(steady.rate), steady.seen, steady.sent),
        baseline: "–".to_owned(),
        ratio: None,
        p50: millis(steady.p50),
        p99: millis(steady.p99),
        rss: steady_rss.summary(),
    });
    report.targets.push(("projector drain ≥ 0.8× plain SQL".to_owned(), ratio >= 0.8, format!("{ratio:.2}×")));
    report.targets.push((
        "steady publish→visible p99 < 50 ms".to_owned(),
        steady.p99.as_millis() < 50 && steady.seen == steady.sent,
        format!("p99 {}, max {}, {} of {} seen", millis(steady.p99), millis(steady.max), steady.seen, steady.sent),
    ));
    report.notes.push(format!(
        "Projector: release `lectern-projector run` (default batch 1,000) started on a stream already holding every \
         event (published in creation order across workspaces, {} events/s with acks), timed from its start until its own \
         counter of committed events (`lectern_projector_events_applied_total`, scraped every 50 ms) reached the total; \
         the acknowledgements are then awaited and the read model counted. \
         Baseline: the same rows in the same batches of 1,000 (sorted by key), one transaction each, \
         `insert … select from unnest(…) on conflict … do update … where version < excluded.version`, one connection, \
         arguments encoded before timing, each commit without waiting for its flush (`synchronous_commit = off`, as \
         the projector's) and one synchronous commit at the end, timed. The projector's own metrics for the drain: {}. \
         PostgreSQL over the drain: {drain_wal}.",
        thousands(published as f64 / publish_time.as_secs_f64()),
        drain_batches.describe(drained.elapsed)
    ));
    if let Some(built) = own_index {
        report.notes.push(match built {
            Some(after) => format!(
                "The big workspace's own search index (`lectern_projector::daemon::workspace_indexes`, built by the projector \
                 at {} active contacts): ready {:.0} s after the drain and an `analyze` (its candidates come from the planner's statistics; \
                 this machine's PostgreSQL runs without autovacuum); the measurements below ran with it.",
                thousands(OwnIndexSettings::default().from_rows as f64),
                after.as_secs_f64()
            ),
            None => format!(
                "The big workspace's own search index was not ready {} s after the drain; the measurements below ran \
                 without it.",
                OWN_INDEX_WITHIN.as_secs()
            ),
        });
    }
    report.notes.push(format!(
        "Latency: `contact.updated` events of distinct contacts published every 5 ms ({} per tick); a poller queries \
         the outstanding rows' versions every ~2 ms and counts an event visible at the start of the first poll that \
         sees it (an upper bound within one poll). RSS is the projector's during that phase. The projector's \
         metrics for the phase: {}. PostgreSQL over the phase: {steady_wal}. \
         CPU over the phase: {steady_cpu}.",
        STEADY_RATE / 200,
        steady_batches.describe(steady_wall)
    ));
    Ok(())
}
