//! The bounded soak of issue 6: after the same load through the real path, the
//! release API takes every scenario's requests mixed (each scenario equally likely)
//! at 64 connections, while `contact.updated` events are published at a steady rate.
//! It passes with no answer outside 2xx (429 included: the limits are raised out of
//! reach, so a 429 would mean the service shed load), no socket error, the API's RSS
//! at the end within 10 % of its RSS after the warm-up, and every event applied
//! exactly once: what the projector could not absorb under the load, it applies after.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::api::Api;
use super::api_side::{self, run_wrk};
use super::infra::{Database, Nats};
use super::machine::rss_kib;
use super::report::{millis, thousands, Report, Row};
use super::scenarios::{self, Scenario};
use super::{drain, latency, publish, Result, Setup};
use lectern_fixtures::generator::plan::Plan;

/// Long enough for the caches, the pools and the allocator to reach their working size.
const WARM_UP: Duration = Duration::from_secs(10);
const EVENTS_PER_SECOND: u32 = 2_000;
/// Requests per scenario in the mixed list, so that each scenario is equally likely.
const LINES_PER_SCENARIO: usize = 1_000;
/// RSS growth allowed between the end of the warm-up and the end of the soak.
const FLAT: f64 = 0.10;

pub async fn measure(
    setup: &Setup,
    plan: &Plan,
    database: &Database,
    soak_for: Duration,
    report: &mut Report,
) -> Result<()> {
    eprintln!(
        "[1/3] publishing {} created events to a private JetStream",
        thousands((plan.contacts() + plan.items()) as f64)
    );
    let nats = Nats::start(&setup.work).await?;
    let (published, _) = publish::backlog(plan, &nats.url).await?;
    eprintln!("[2/3] lectern-projector draining the backlog");
    let mut projector = drain::start_projector(&setup.binaries.projector, &nats, database, &setup.work)?;
    let metrics = drain::metrics_address(&mut projector).await?;
    let drained = drain::drain(&mut projector, &metrics, &nats.url, published).await?;
    let published_before = published;
    drain::verify(database, plan.contacts(), plan.items()).await?;
    eprintln!("      {:.1} s, {} events/s", drained.elapsed.as_secs_f64(), thousands(drained.per_second()));

    eprintln!("[3/3] soak: keys and a traversal, {} s of warm-up, then {} s", WARM_UP.as_secs(), soak_for.as_secs());
    let (mut api, prepared) = api_side::prepare(setup, plan, database).await?;
    let scenarios = scenarios::all(&prepared.inputs(plan))?;
    let mixed = mixed(&scenarios);
    run_wrk(setup, &mut api, &mixed, WARM_UP).await?;
    let statuses_before = statuses(&api).await?;
    let rss_mib = |pid| rss_kib(pid).map_or(0.0, |kib| kib as f64 / 1024.0);
    let (api_warm, projector_warm) = (rss_mib(api.process.pid), rss_mib(projector.pid));
    let started = Instant::now();
    let (http, published) = tokio::join!(
        load_wrk(setup, &api, &mixed, soak_for),
        latency::publish_updates(plan, &nats.url, EVENTS_PER_SECOND, soak_for, 2, |_| {}),
    );
    let (http, published) = (http?, published?);
    let wall = started.elapsed();
    let (api_end, projector_end) = (rss_mib(api.process.pid), rss_mib(projector.pid));
    let answered = since(statuses(&api).await?, &statuses_before);
    let applied_during = drain::applied_events(&metrics).await? - published_before as f64;
    api.process.check_running()?;
    api.process.stop().await;
    // Nothing lost: the projector catches up on what it could not absorb under load,
    // and the read model then holds exactly the updated contacts.
    let total = published_before + published.sent as u64;
    let caught_up = drain::drain(&mut projector, &metrics, &nats.url, total).await?;
    let updated: i64 =
        sqlx::query_scalar("select count(*) from contacts where version = 2").fetch_one(&database.pool).await?;
    let dead_letters: i64 = sqlx::query_scalar("select count(*) from dead_letters").fetch_one(&database.pool).await?;
    projector.check_running()?;
    projector.stop().await;
    drop(nats);

    let not_ok: f64 = answered.iter().filter(|(status, _)| !status.starts_with('2')).map(|(_, count)| count).sum();
    let by_status = answered
        .iter()
        .map(|(status, count)| format!("{status}: {}", thousands(*count)))
        .collect::<Vec<_>>()
        .join(", ");
    let growth = |warm: f64, end: f64| (end - warm) / warm.max(1.0);
    report.rows.push(Row {
        scenario: format!("API: every scenario mixed, 64 connections, {} s", soak_for.as_secs()),
        lectern: format!("{} req/s ({} requests)", thousands(http.per_second), thousands(http.requests as f64)),
        baseline: "–".to_owned(),
        ratio: None,
        p50: millis(http.p50),
        p99: millis(http.p99),
        rss: format!(
            "{api_warm:.0} MiB after warm-up → {api_end:.0} MiB at the end ({:+.1} %)",
            growth(api_warm, api_end) * 100.0
        ),
    });
    report.rows.push(Row {
        scenario: format!("projector: {} events/s published at the same time", thousands(f64::from(EVENTS_PER_SECOND))),
        lectern: format!(
            "{} events/s applied under the load ({} of {}); the rest {:.1} s after it",
            thousands(applied_during / wall.as_secs_f64()),
            thousands(applied_during),
            thousands(published.sent as f64),
            caught_up.elapsed.as_secs_f64()
        ),
        baseline: "–".to_owned(),
        ratio: None,
        p50: "–".to_owned(),
        p99: "–".to_owned(),
        rss: format!(
            "{projector_warm:.0} MiB → {projector_end:.0} MiB ({:+.1} %)",
            growth(projector_warm, projector_end) * 100.0
        ),
    });
    report.targets.push((
        "no answer outside 2xx (429 included), no socket error".to_owned(),
        http.errors == 0 && not_ok == 0.0,
        format!("wrk: {} non-2xx or socket errors of {}; the API's own count: {by_status}", http.errors, http.requests),
    ));
    report.targets.push((
        format!("API RSS at the end within {:.0} % of after the warm-up", FLAT * 100.0),
        growth(api_warm, api_end) <= FLAT,
        format!("{api_warm:.1} → {api_end:.1} MiB"),
    ));
    report.targets.push((
        "every event published during the soak applied exactly once, none dead-lettered".to_owned(),
        usize::try_from(updated).is_ok_and(|updated| updated == published.sent) && dead_letters == 0,
        format!("{updated} contacts at version 2 for {} updates sent, {dead_letters} dead letters", published.sent),
    ));
    report.notes.push(format!(
        "Soak: release `lectern-api serve` (pool 16, rate limits raised out of reach) and `lectern-projector run`, \
         after the backlog was drained ({} events/s). wrk -t2 -c64 with every scenario's (key, path) lines, {} each, \
         picked at random per request; {} s of warm-up, then {} s measured while `contact.updated` events of distinct \
         contacts were published at {} events/s ({:.1} s of wall time for both). Statuses are the API's own \
         `lectern_http_requests_total` over the measured run. RSS is read from /proc at the end of the warm-up and at \
         the end of the run. Events applied under the load are the projector's own counter; after the run the API \
         stops and the projector is timed until it has applied and acknowledged the rest, then the read model is \
         counted (each update moves one distinct contact to version 2).",
        thousands(drained.per_second()),
        LINES_PER_SCENARIO,
        WARM_UP.as_secs(),
        soak_for.as_secs(),
        thousands(f64::from(EVENTS_PER_SECOND)),
        wall.as_secs_f64()
    ));
    report.notes.push(format!(
        "Scenarios in the mix: {}.",
        scenarios.iter().map(|scenario| scenario.name.as_str()).collect::<Vec<_>>().join("; ")
    ));
    Ok(())
}

/// wrk over the mixed requests; the soak judges errors itself, so they are not fatal here.
async fn load_wrk(setup: &Setup, api: &Api, mixed: &Scenario, run_for: Duration) -> Result<super::load::Http> {
    super::load::wrk(&setup.wrk, &setup.work, &api.base, mixed, run_for, api.process.pid).await
}

/// Every scenario's requests, `LINES_PER_SCENARIO` of each (cycled), so a random line
/// is equally likely to come from any scenario whatever its own list's length.
fn mixed(scenarios: &[Scenario]) -> Scenario {
    let requests = scenarios
        .iter()
        .flat_map(|scenario| scenario.requests.iter().cycle().take(LINES_PER_SCENARIO).cloned())
        .collect();
    Scenario {
        name: "every scenario mixed".to_owned(),
        requests,
        script: String::new(),
        defines: Vec::new(),
        plan_cache_mode: "auto",
    }
}

/// Requests answered so far by status, from the API's own counter.
async fn statuses(api: &Api) -> Result<BTreeMap<String, f64>> {
    let text = reqwest::get(format!("http://{}/metrics", api.metrics)).await?.text().await?;
    let mut counts = BTreeMap::new();
    for line in text.lines().filter(|line| line.starts_with("lectern_http_requests_total{")) {
        let status = line.split("status=\"").nth(1).and_then(|rest| rest.split('"').next());
        let count = line.rsplit(' ').next().and_then(|count| count.parse::<f64>().ok());
        if let (Some(status), Some(count)) = (status, count) {
            *counts.entry(status.to_owned()).or_default() += count;
        }
    }
    Ok(counts)
}

fn since(after: BTreeMap<String, f64>, before: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    after
        .into_iter()
        .map(|(status, count)| {
            let earlier = before.get(&status).copied().unwrap_or_default();
            (status, count - earlier)
        })
        .filter(|(_, count)| *count > 0.0)
        .collect()
}
