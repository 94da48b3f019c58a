//! `--verify`: `lectern-projector verify` over the benchmark's whole backlog, against the
//! drain of the same backlog in the same run; then `lectern-projector rebuild` of the same
//! model with a share of its rows corrupted, timed against the drain, with the API's
//! latency under wrk during the rebuild against without one. The release binaries, as an
//! operator runs them.

use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::Command;

use super::api_side;
use super::infra::{Database, Nats};
use super::report::{millis, thousands, Report, Row};
use super::scenarios;
use super::{drain, publish, Context, Result, Setup};
use lectern_fixtures::generator::plan::Plan;

/// Verifies run over the same history: the first reads the stream from nats-server's
/// files, the second also from its page cache.
const ROUNDS: usize = 2;

/// Rows corrupted by SQL before the rebuild: one in this many contacts.
const CORRUPT_ONE_IN: u64 = 100;
/// The API scenario measured with and without a rebuild: a statement per request.
const SCENARIO: &str = "contacts: retrieve by id";

/// One verify's run.
struct Verified {
    wall: Duration,
    events: u64,
    records: u64,
    outcome: String,
}

pub async fn measure(setup: &Setup, plan: &Plan, database: &Database, report: &mut Report) -> Result<()> {
    eprintln!(
        "[1/3] publishing {} created events to a private JetStream",
        thousands((plan.contacts() + plan.items()) as f64)
    );
    let nats = Nats::start(&setup.work).await?;
    let (published, _) = publish::backlog(plan, &nats.url).await?;

    eprintln!("[2/5] lectern-projector draining the backlog into an empty read model");
    let mut projector = drain::start_projector(&setup.binaries.projector, &nats, database, &setup.work)?;
    let metrics = drain::metrics_address(&mut projector).await?;
    let drained = drain::drain(&mut projector, &metrics, &nats.url, published).await?;
    drain::verify(database, plan.contacts(), plan.items()).await?;
    eprintln!("      {:.1} s, {} events/s", drained.elapsed.as_secs_f64(), thousands(drained.per_second()));

    let mut rounds = Vec::with_capacity(ROUNDS);
    for round in 1..=ROUNDS {
        eprintln!("[3/5] lectern-projector verify, round {round} of {ROUNDS}, beside the idle projector");
        let verified = verify(setup, &nats, database).await?;
        eprintln!(
            "      {:.1} s, {} events/s, {} records, {}",
            verified.wall.as_secs_f64(),
            thousands(verified.events as f64 / verified.wall.as_secs_f64()),
            thousands(verified.records as f64),
            verified.outcome
        );
        if verified.outcome != "agreed" || verified.events != published {
            return Err(format!(
                "verify found the freshly drained model {} after reading {} of {published} events",
                verified.outcome, verified.events
            )
            .into());
        }
        rounds.push(verified);
    }
    eprintln!("[4/5] the API under wrk ({SCENARIO}) without a rebuild");
    let (mut api, prepared) = api_side::prepare(setup, plan, database).await?;
    let all = scenarios::all(&prepared.inputs(plan))?;
    let scenario = all
        .iter()
        .find(|scenario| scenario.name.starts_with(SCENARIO))
        .ok_or_else(|| format!("no API scenario named \"{SCENARIO}…\""))?;
    api_side::run_wrk(setup, &mut api, scenario, Duration::from_secs(2)).await?;
    let quiet = api_side::run_wrk(setup, &mut api, scenario, setup.options.run_for).await?;
    eprintln!("      {} req/s, p99 {}", thousands(quiet.per_second), millis(quiet.p99));

    eprintln!(
        "[5/5] lectern-projector rebuild, one contact in {CORRUPT_ONE_IN} corrupted, the API under wrk meanwhile"
    );
    let corrupted = sqlx::query(&format!(
        "update contacts set name = name || ' (corrupted)' where status = 'active' and abs(hashtext(id::text)) % {CORRUPT_ONE_IN} = 0"
    ))
    .execute(&database.pool)
    .await?
    .rows_affected();
    let rebuilding = rebuild(setup, &nats, database);
    tokio::pin!(rebuilding);
    let mut during = Vec::new();
    let rebuilt = loop {
        tokio::select! {
            rebuilt = &mut rebuilding => break rebuilt?,
            http = api_side::run_wrk(setup, &mut api, scenario, setup.options.run_for) => during.push(http?),
        }
    };
    if rebuilt["corrected"].as_u64() != Some(corrupted) {
        return Err(
            format!("the rebuild corrected {} rows, not the {corrupted} corrupted", rebuilt["corrected"]).into()
        );
    }
    let number = |field: &str| rebuilt[field].as_f64().unwrap_or(f64::NAN);
    let rebuild_rate = number("eventsRead") / number("buildSeconds");
    eprintln!(
        "      {} events/s, swap {:.3} s; {} wrk runs during it",
        thousands(rebuild_rate),
        number("swapSeconds"),
        during.len()
    );
    projector.check_running()?;
    projector.stop().await;

    for (index, verified) in rounds.iter().enumerate() {
        let rate = verified.events as f64 / verified.wall.as_secs_f64();
        report.rows.push(Row {
            scenario: format!(
                "verify round {} of {} events ({} records), against the drain of the same backlog",
                index + 1,
                thousands(verified.events as f64),
                thousands(verified.records as f64)
            ),
            lectern: format!("{} events/s ({:.1} s)", thousands(rate), verified.wall.as_secs_f64()),
            baseline: format!("{} events/s ({:.1} s)", thousands(drained.per_second()), drained.elapsed.as_secs_f64()),
            ratio: Some(rate / drained.per_second()),
            ..Row::dashes()
        });
    }
    report.rows.push(Row {
        scenario: format!(
            "rebuild of {} events (build and catch-up), {} of {} contacts corrupted, against the drain",
            thousands(number("eventsRead")),
            thousands(corrupted as f64),
            thousands(plan.contacts() as f64)
        ),
        lectern: format!("{} events/s ({:.1} s)", thousands(rebuild_rate), number("buildSeconds")),
        baseline: format!("{} events/s", thousands(drained.per_second())),
        ratio: Some(rebuild_rate / drained.per_second()),
        ..Row::dashes()
    });
    report.rows.push(Row {
        scenario: format!(
            "the rebuild's swap: {} rows corrected in one transaction, writers held",
            thousands(corrupted as f64)
        ),
        lectern: format!("{:.3} s", number("swapSeconds")),
        ..Row::dashes()
    });
    for (index, http) in during.iter().enumerate() {
        report.rows.push(Row {
            scenario: format!(
                "API {SCENARIO} during the rebuild (wrk run {} of {}), against without",
                index + 1,
                during.len()
            ),
            lectern: format!("{} req/s", thousands(http.per_second)),
            baseline: format!("{} req/s", thousands(quiet.per_second)),
            ratio: Some(http.per_second / quiet.per_second),
            p50: format!("{} (without: {})", millis(http.p50), millis(quiet.p50)),
            p99: format!("{} (without: {})", millis(http.p99), millis(quiet.p99)),
            ..Row::dashes()
        });
    }
    let per_million = rounds.iter().map(|verified| verified.wall.as_secs_f64() * 1e6 / verified.events as f64);
    report.notes.push(format!(
        "verify takes {} s per million events here (both rounds), reading the stream with an ordered consumer and \
         writing each event into temporary tables with the projector's own upserts, then comparing the two models \
         in one statement per table.",
        per_million.map(|seconds| format!("{seconds:.0}")).collect::<Vec<_>>().join(" and ")
    ));
    Ok(())
}

/// Runs `lectern-projector verify --output json` to the end.
async fn verify(setup: &Setup, nats: &Nats, database: &Database) -> Result<Verified> {
    let started = Instant::now();
    let (_, verdict) = projector_json(setup, nats, database, "verify").await?;
    Ok(Verified {
        wall: started.elapsed(),
        events: verdict["eventsRead"].as_u64().unwrap_or(0),
        records: verdict["records"].as_u64().unwrap_or(0),
        outcome: verdict["outcome"].as_str().unwrap_or("no outcome").to_owned(),
    })
}

/// Runs `lectern-projector rebuild --output json` to the end; its report.
async fn rebuild(setup: &Setup, nats: &Nats, database: &Database) -> Result<serde_json::Value> {
    let (succeeded, report) = projector_json(setup, nats, database, "rebuild").await?;
    if !succeeded {
        return Err(format!("rebuild failed: {report}").into());
    }
    Ok(report)
}

/// Runs `lectern-projector <command> --output json` against the bench's NATS and
/// database; whether it exited 0, and the JSON it printed.
async fn projector_json(
    setup: &Setup,
    nats: &Nats,
    database: &Database,
    command: &str,
) -> Result<(bool, serde_json::Value)> {
    let output = Command::new(&setup.binaries.projector)
        .args([command, "--output", "json"])
        .env_clear()
        .env("NATS_URL", &nats.urls)
        .env("DATABASE_URL", &database.url)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .context(format!("run lectern-projector {command}"))?;
    let printed = serde_json::from_slice(&output.stdout).context(format!(
        "{command}'s JSON (exit {:?}): {}",
        output.status.code(),
        String::from_utf8_lossy(&output.stderr)
    ))?;
    Ok((output.status.success(), printed))
}
