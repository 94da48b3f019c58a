//! The read path: the release API under wrk, scenario by scenario, each followed by
//! pgbench running the statement the API sends, for the same time.

use std::time::Duration;

use super::api::{self, Api};
use super::infra::Database;
use super::latency::distinct_contacts;
use super::load::{self, Http};
use super::machine::cpu_seconds;
use super::report::{millis, thousands, Report, Row};
use super::scenarios::{self, Inputs, Scenario};
use super::{Context, Result, Setup};
use lectern_fixtures::generator::plan::{Plan, Record};

/// Contacts in the retrieve-by-id scenario.
const SAMPLE: usize = 1_000;

pub async fn measure(setup: &Setup, plan: &Plan, database: &Database, report: &mut Report) -> Result<()> {
    eprintln!("[5/5] API: vacuum analyze, keys, a full traversal, then wrk and pgbench per scenario");
    let (mut api, prepared) = prepare(setup, plan, database).await?;
    let traversal = &prepared.traversal;
    let run_for = setup.options.run_for;
    let (mut first_page, mut search_small, mut peak_rss) = (None, None, 0.0_f64);
    for scenario in scenarios::all(&prepared.inputs(plan))? {
        eprintln!("      {}", scenario.name);
        let measured = measure_scenario(setup, &mut api, database, &scenario).await?;
        let (http, ratio) = (&measured.http, measured.http.per_second / measured.tps);
        eprintln!(
            "        {} req/s vs {} tps ({ratio:.2}), p99 {}",
            thousands(http.per_second),
            thousands(measured.tps),
            millis(http.p99)
        );
        if scenario.name.starts_with("contacts: first page") {
            first_page = Some(http.per_second);
        }
        if scenario.name.contains("search") && scenario.name.contains("small") {
            search_small = Some(http.per_second);
        }
        if scenario.name.contains("search") && scenario.name.contains("big") {
            let target = format!("p99 ≤ 50 ms, {}", scenario.name);
            report.targets.push((target, http.p99 <= Duration::from_millis(50), millis(http.p99)));
        }
        report.targets.push((format!("≥ 0.7× pgbench, {}", scenario.name), ratio >= 0.7, format!("{ratio:.2}×")));
        peak_rss = peak_rss.max(http.rss.peak);
        report.rows.push(Row {
            scenario: format!("API {}", scenario.name),
            lectern: format!("{} req/s", thousands(http.per_second)),
            baseline: format!("{} tps", thousands(measured.tps)),
            ratio: Some(ratio),
            p50: millis(http.p50),
            p99: millis(http.p99),
            rss: http.rss.summary(),
        });
        report.breakdown.push([
            scenario.name.clone(),
            millis(http.mean),
            millis(measured.inside),
            format!("{:.0} µs", measured.api_cpu_us),
            format!("{:.0} µs", measured.db_cpu_us),
        ]);
    }
    if let (Some(first_page), Some(search_small)) = (first_page, search_small) {
        report.targets.push((
            "search in a small workspace ≥ 0.5× its first page".to_owned(),
            search_small >= 0.5 * first_page,
            format!("{:.2}×", search_small / first_page),
        ));
    }
    report.targets.push((
        "API RSS under load ≤ 100 MiB".to_owned(),
        peak_rss <= 100.0,
        format!("{peak_rss:.0} MiB at most"),
    ));
    api.process.check_running()?;
    api.process.stop().await;
    report.rows.push(Row {
        scenario: "API full keyset traversal of the big workspace (limit=100, one client)".to_owned(),
        lectern: format!("{} records/s", thousands(traversal.records as f64 / traversal.elapsed.as_secs_f64())),
        baseline: "–".to_owned(),
        ratio: None,
        p50: "–".to_owned(),
        p99: "–".to_owned(),
        rss: "–".to_owned(),
    });
    report.notes.push(format!(
        "API: release `lectern-api serve` (pool 16, JSON logs at info to a file, rate limits raised out of reach), one \
         key per workspace; wrk -t2 -c64 -d{s}s (after a 2 s warm-up), each request a random line of the scenario's \
         (key, path) list; RSS sampled every 100 ms during the run. Baseline: pgbench -c 16 -j 2 -T {s} with the SQL \
         of `lectern_api::listing::query::list_sql` (retrieve: a single primary-key probe, while the API reads concurrent retrieves in batches, one statement each), `-M prepared` \
         throughout, each in the API's `plan_cache_mode` for the statement: `force_custom_plan` for planned \
         searches (so each execution is planned with the real pattern), `force_generic_plan` for listings, retrieves \
         and walked searches (small workspaces, as the API sends them below its default threshold); a random workspace or contact is a scalar subquery on a lookup table where the API binds a \
         parameter. The load generators run on the same CPUs as the API and PostgreSQL.",
        s = run_for.as_secs()
    ));
    report.notes.push(
        "Where the API's time goes: \"inside the API\" is the API's own latency histogram (arrival to response \
         written, database and pool wait included); CPU per request is read from /proc for the API process and for its \
         pooled PostgreSQL backends during the wrk run (0 µs of PostgreSQL: served from the first-page cache)."
            .to_owned(),
    );
    Ok(())
}

/// What the scenarios need once the data is loaded: a key per workspace, a full
/// traversal of the big workspace (which checks every record is served and yields a
/// deep cursor) and the contacts to retrieve.
pub struct Prepared {
    pub keys: Vec<String>,
    pub traversal: api::Traversal,
    pub sample: Vec<Record>,
}

impl Prepared {
    pub fn inputs<'a>(&'a self, plan: &'a Plan) -> Inputs<'a> {
        Inputs {
            plan,
            keys: &self.keys,
            deep_cursor: &self.traversal.deep_cursor,
            deep_position: &self.traversal.deep_position,
            sample: &self.sample,
        }
    }
}

/// Vacuums, starts the release API and prepares the scenarios' inputs.
pub async fn prepare(setup: &Setup, plan: &Plan, database: &Database) -> Result<(Api, Prepared)> {
    // What autovacuum would do soon after a load; done now so it does not run mid-measurement.
    sqlx::raw_sql("vacuum (analyze) contacts, items").execute(&database.pool).await.context("vacuum")?;
    let api = api::start(&setup.binaries.api, database, &setup.work).await?;
    let keys = api::create_keys(&setup.binaries.api, database, plan).await?;
    let traversal = api::traverse(&api, &keys[0], plan.big().id).await?;
    if traversal.records != plan.big().contacts as usize {
        return Err(format!("the traversal served {} contacts, not {}", traversal.records, plan.big().contacts).into());
    }
    let sample = distinct_contacts(plan, SAMPLE);
    scenarios::create_lookups(&database.pool, plan, &sample).await?;
    Ok((api, Prepared { keys, traversal, sample }))
}

pub struct Measured {
    pub http: Http,
    pub tps: f64,
    /// Mean time per request by the API's own histogram.
    pub inside: Duration,
    pub api_cpu_us: f64,
    pub db_cpu_us: f64,
}

/// A warm-up, the measured wrk run with the API's CPU and its backends' CPU read
/// around it, then pgbench for the same time.
pub async fn measure_scenario(
    setup: &Setup,
    api: &mut Api,
    database: &Database,
    scenario: &Scenario,
) -> Result<Measured> {
    // Warms the key cache, the prepared statements and the page cache.
    run_wrk(setup, api, scenario, Duration::from_secs(2)).await?;
    let backends: Vec<i32> = sqlx::query_scalar(
        "select pid from pg_stat_activity where datname = current_database() and application_name = 'lectern-api'",
    )
    .fetch_all(&database.pool)
    .await?;
    let api_pid = api.process.pid;
    let cpu = move || cpu_seconds(api_pid).unwrap_or_default();
    let cpu_backends = || backends.iter().filter_map(|pid| cpu_seconds(*pid as u32)).sum::<f64>();
    let (api_cpu, db_cpu, served) = (cpu(), cpu_backends(), api.served().await?);
    let http = run_wrk(setup, api, scenario, setup.options.run_for).await?;
    let (api_cpu, db_cpu, served) = (cpu() - api_cpu, cpu_backends() - db_cpu, {
        let after = api.served().await?;
        (after.0 - served.0, after.1 - served.1)
    });
    let tps = load::pgbench(&setup.pgbench, &setup.work, &database.name, scenario, setup.options.run_for).await?;
    let per_request = |seconds: f64| seconds * 1e6 / http.requests.max(1) as f64;
    Ok(Measured {
        inside: Duration::from_secs_f64(served.1 / served.0.max(1.0)),
        api_cpu_us: per_request(api_cpu),
        db_cpu_us: per_request(db_cpu),
        http,
        tps,
    })
}

pub async fn run_wrk(setup: &Setup, api: &mut Api, scenario: &Scenario, run_for: Duration) -> Result<Http> {
    let http = load::wrk(&setup.wrk, &setup.work, &api.base, scenario, run_for, api.process.pid).await?;
    api.process.check_running()?;
    if http.errors > 0 {
        return Err(format!(
            "{}: {} of {} requests failed (non-2xx or socket errors); see {}",
            scenario.name,
            http.errors,
            http.requests,
            api.process.log.display()
        )
        .into());
    }
    Ok(http)
}
