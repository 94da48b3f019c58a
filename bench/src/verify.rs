//! `--verify`: `lectern-projector verify` over the benchmark's whole backlog, against the
//! drain of the same backlog in the same run. The release binary, as an operator runs it.

use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::Command;

use super::infra::{Database, Nats};
use super::report::{thousands, Report, Row};
use super::{drain, publish, Context, Result, Setup};
use lectern_fixtures::generator::plan::Plan;

/// Verifies run over the same history: the first reads the stream from nats-server's
/// files, the second also from its page cache.
const ROUNDS: usize = 2;

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

    eprintln!("[2/3] lectern-projector draining the backlog into an empty read model");
    let mut projector = drain::start_projector(&setup.binaries.projector, &nats, database, &setup.work)?;
    let metrics = drain::metrics_address(&mut projector).await?;
    let drained = drain::drain(&mut projector, &metrics, &nats.url, published).await?;
    drain::verify(database, plan.contacts(), plan.items()).await?;
    eprintln!("      {:.1} s, {} events/s", drained.elapsed.as_secs_f64(), thousands(drained.per_second()));

    let mut rounds = Vec::with_capacity(ROUNDS);
    for round in 1..=ROUNDS {
        eprintln!("[3/3] lectern-projector verify, round {round} of {ROUNDS}, beside the idle projector");
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
    let output = Command::new(&setup.binaries.projector)
        .args(["verify", "--output", "json"])
        .env_clear()
        .env("NATS_URL", &nats.urls)
        .env("DATABASE_URL", &database.url)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .context("run lectern-projector verify")?;
    let wall = started.elapsed();
    let verdict: serde_json::Value = serde_json::from_slice(&output.stdout).context(format!(
        "verify's JSON verdict (exit {:?}): {}",
        output.status.code(),
        String::from_utf8_lossy(&output.stderr)
    ))?;
    Ok(Verified {
        wall,
        events: verdict["eventsRead"].as_u64().unwrap_or(0),
        records: verdict["records"].as_u64().unwrap_or(0),
        outcome: verdict["outcome"].as_str().unwrap_or("no outcome").to_owned(),
    })
}
