//! The changes feed's scenarios (`--feed`), after the same load as the comparisons:
//!
//! - the drain, A/B against the projector before the feed when a baseline build is
//!   given ([`super::drain_ab`]), and against plain SQL;
//! - catch-up: the big workspace's whole contacts feed read at `limit=100` following
//!   sync tokens, against a keyset traversal of its listing at `limit=100`, alternated;
//! - an empty poll (`since` = the latest token) under wrk, against pgbench running the
//!   feed's own statement (`lectern_api::feed::query::changes_sql`) for the same
//!   workspace and position: the API answers it from memory, with no statement;
//! - publish→visible through the feed and a long poll's wake-up ([`super::feed_latency`]).

use std::collections::HashSet;
use std::time::{Duration, Instant};

use lectern_api::feed::params::FeedLimit;
use lectern_api::feed::position::FeedPosition;
use lectern_api::feed::query::changes_sql;
use lectern_api::feed::token::{FeedScope, SyncTokens};
use lectern_api::metric_names::FEED_READ_AHEAD;
use lectern_api::reads::connections::PlanMode;
use lectern_api::resources::contacts::Contacts;
use lectern_api::resources::Resource;
use lectern_api::signing::SigningSecrets;
use lectern_projector::daemon::workspace_indexes::OwnIndexSettings;
use secrecy::SecretString;
use uuid::Uuid;

use super::api::{self, Api, CURSOR_SECRET};
use super::api_side;
use super::cpu_shares::postgres_seconds;
use super::drain_ab::{self, median, Build};
use super::feed_client::poll;
use super::feed_latency::{self, Quantiles};
use super::infra::{Database, Nats};
use super::machine::cpu_seconds;
use super::report::{millis, thousands, Report, Row};
use super::scenarios::{substitute, Scenario};
use super::{drain, plain_sql, publish, Result, Setup};
use lectern_fixtures::generator::plan::Plan;

/// Catch-up and listing traversals, alternated: the median of three of each.
const ROUNDS: usize = 3;
/// As `projector_side`: the projector looks once a minute, the build takes about 11 s.
const OWN_INDEX_WITHIN: Duration = Duration::from_secs(180);

pub async fn measure(setup: &Setup, plan: &Plan, database: &Database, report: &mut Report) -> Result<()> {
    // Checked before the load, so a wrong path costs seconds, not the load.
    let baseline = setup.options.baseline_projector.as_deref().map(drain_ab::Binaries::beside).transpose()?;
    let big = plan.big().id;
    eprintln!(
        "[1/6] publishing {} created events to a private JetStream",
        thousands((plan.contacts() + plan.items()) as f64)
    );
    let nats = Nats::start(&setup.work).await?;
    let (published, _) = publish::backlog(plan, &nats.url).await?;

    eprintln!(
        "[2/6] draining the backlog: {}",
        if baseline.is_some() { "A B A B A (A: this checkout)" } else { "once" }
    );
    let drains = drain_ab::alternate(setup, plan, &nats, database, published, baseline.as_ref()).await?;
    let (head_rates, base_rates) = (drains.rates(Build::A), drains.rates(Build::B));
    let drain_ab::Alternated { runs, mut projector, metrics } = drains;
    if i64::from(plan.big().contacts) >= OwnIndexSettings::default().from_rows {
        // Built before the API's measurements, so the build does not fall into them.
        eprintln!("      waiting for the big workspace's own search index");
        drain::own_index_built(database, big, OWN_INDEX_WITHIN).await?;
    }

    eprintln!("[3/6] the same rows by plain SQL into a second database");
    let written = plain_sql::write_into_second_database(setup, plan).await?;

    eprintln!("[4/6] API: catch-up through the feed against a listing traversal, {ROUNDS} rounds alternated");
    let (mut api, prepared) = api_side::prepare(setup, plan, database).await?;
    let key = prepared.keys[0].clone();
    let (mut listing, mut catch_up) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let cpu = CpuMark::take(api.process.pid);
        let traversal = api::traverse(&api, &key, big).await?;
        listing.push((traversal.records, traversal.elapsed, cpu.since(api.process.pid)));
        let cpu = CpuMark::take(api.process.pid);
        let read = read_feed(&api, &key).await?;
        catch_up.push((read.records, read.elapsed, cpu.since(api.process.pid)));
        let expected = plan.big().contacts as usize;
        if read.records != expected || read.distinct != expected {
            return Err(format!(
                "the feed's catch-up served {} changes of {} distinct contacts; the workspace has {expected}",
                read.records, read.distinct
            )
            .into());
        }
        eprintln!(
            "      listing {} records/s, feed {} records/s",
            thousands(traversal.records as f64 / traversal.elapsed.as_secs_f64()),
            thousands(read.records as f64 / read.elapsed.as_secs_f64())
        );
    }

    let read_ahead = api.samples(FEED_READ_AHEAD).await?;
    let read_ahead = if read_ahead.is_empty() {
        "none".to_owned()
    } else {
        read_ahead
            .iter()
            .map(|(labels, value)| format!("{labels} {}", thousands(*value)))
            .collect::<Vec<_>>()
            .join(", ")
    };

    eprintln!("[5/6] API: an empty poll under wrk, then pgbench running the feed's statement");
    let client = reqwest::Client::new();
    let latest = poll(&client, &api.base, &key, "since=latest").await?;
    let tokens = SyncTokens::new(SigningSecrets::only(SecretString::from(CURSOR_SECRET.to_owned())));
    let scope = FeedScope { resource: Contacts::NAME, workspace_id: big };
    let position =
        tokens.open(&latest.sync_token, scope).map_err(|error| format!("the latest token {error}"))?.position;
    let scenario = empty_poll(&key, &latest.sync_token, big, position)?;
    let empty = api_side::measure_scenario(setup, &mut api, database, &scenario).await?;
    let empty_ratio = empty.http.per_second / empty.tps;
    eprintln!(
        "      {} req/s vs {} tps ({empty_ratio:.2}), p99 {}",
        thousands(empty.http.per_second),
        thousands(empty.tps),
        millis(empty.http.p99)
    );

    eprintln!(
        "[6/6] publish→visible through the feed, and a long poll's wake-up; again with a foreign transaction open"
    );
    let latency = feed_latency::measure(plan, &nats.url, &api.base, &key, &database.url, 0).await?;
    // A writing transaction in another database of the same server, open for the whole
    // round: it must not hold the feed back.
    let foreign = feed_latency::ForeignTransaction::open(&database.url).await?;
    let held = feed_latency::measure(plan, &nats.url, &api.base, &key, &database.url, 1).await;
    foreign.close().await?;
    let held = held?;
    api.process.check_running()?;
    api.process.stop().await;
    projector.check_running()?;
    let batches = drain::Batches::scrape(&metrics).await?;
    projector.stop().await;
    drop(nats);

    // The table.
    let rate = |runs: &[(usize, Duration, Cpu)]| {
        median(&runs.iter().map(|(records, elapsed, _)| *records as f64 / elapsed.as_secs_f64()).collect::<Vec<_>>())
    };
    let (listing_rate, feed_rate) = (rate(&listing), rate(&catch_up));
    let catch_up_ratio = feed_rate / listing_rate;
    let head = median(&head_rates);
    let list = |rates: &[f64]| rates.iter().map(|rate| thousands(*rate)).collect::<Vec<_>>().join(", ");
    if !base_rates.is_empty() {
        let base = median(&base_rates);
        let ratio = head / base;
        report.rows.push(Row {
            scenario: format!(
                "projector: drain {} events, this checkout (A) against the baseline build (B), A B A B A",
                thousands(published as f64)
            ),
            lectern: format!("{} events/s (median of {})", thousands(head), list(&head_rates)),
            baseline: format!("{} events/s (median of {})", thousands(base), list(&base_rates)),
            ratio: Some(ratio),
            ..Row::dashes()
        });
        report.targets.push((
            "drain within 15 % of the projector before the feed (≥ 0.85×)".to_owned(),
            ratio >= 0.85,
            format!("{ratio:.2}× (medians)"),
        ));
    }
    let plain_ratio = head / written.per_second();
    report.rows.push(Row {
        scenario: format!("projector: drain {} events against plain SQL", thousands(published as f64)),
        lectern: format!("{} events/s", thousands(head)),
        baseline: format!("{} rows/s", thousands(written.per_second())),
        ratio: Some(plain_ratio),
        rss: runs.last().map_or_else(|| "–".to_owned(), |run| run.drained.rss.summary()),
        ..Row::dashes()
    });
    report.targets.push(("drain ≥ 0.8× plain SQL".to_owned(), plain_ratio >= 0.8, format!("{plain_ratio:.2}×")));
    report.rows.push(Row {
        scenario: format!(
            "API catch-up: the big workspace's whole contacts feed ({}), limit=100, one client",
            thousands(f64::from(plan.big().contacts))
        ),
        lectern: format!("{} records/s (feed)", thousands(feed_rate)),
        baseline: format!("{} records/s (listing)", thousands(listing_rate)),
        ratio: Some(catch_up_ratio),
        ..Row::dashes()
    });
    report.targets.push((
        "catch-up through the feed ≥ the listing's traversal".to_owned(),
        catch_up_ratio >= 1.0,
        format!("{catch_up_ratio:.2}×"),
    ));
    report.rows.push(Row {
        scenario: "API contacts feed: empty poll (since = the latest token), big workspace".to_owned(),
        lectern: format!("{} req/s", thousands(empty.http.per_second)),
        baseline: format!("{} tps (`changes_sql`)", thousands(empty.tps)),
        ratio: Some(empty_ratio),
        p50: millis(empty.http.p50),
        p99: millis(empty.http.p99),
        rss: empty.http.rss.summary(),
    });
    report.targets.push((
        "empty poll faster than pgbench running the feed's statement (> 1×)".to_owned(),
        empty_ratio > 1.0,
        format!("{empty_ratio:.2}×"),
    ));
    report.breakdown.push([
        "contacts feed: empty poll".to_owned(),
        millis(empty.http.mean),
        millis(empty.inside),
        format!("{:.0} µs", empty.api_cpu_us),
        format!("{:.0} µs", empty.db_cpu_us),
    ]);
    for (name, runs) in [("catch-up: a feed page of 100", &catch_up), ("catch-up: a listing page of 100", &listing)] {
        let (pages, elapsed, cpu) = runs.iter().fold((0.0, 0.0, Cpu::default()), |(pages, seconds, cpu), run| {
            ((run.0 as f64 / 100.0).ceil() + pages, seconds + run.1.as_secs_f64(), cpu.plus(run.2))
        });
        report.breakdown.push([
            name.to_owned(),
            millis(Duration::from_secs_f64(elapsed / pages.max(1.0))),
            "–".to_owned(),
            format!("{:.0} µs", cpu.api * 1e6 / pages.max(1.0)),
            format!(
                "{:.0} µs (all backends); the client {:.0} µs",
                cpu.postgres * 1e6 / pages.max(1.0),
                cpu.client * 1e6 / pages.max(1.0)
            ),
        ]);
    }
    let quantile_row = |scenario: String, measured: String, quantiles: &Quantiles| Row {
        scenario,
        lectern: measured,
        p50: millis(quantiles.p50),
        p99: millis(quantiles.p99),
        ..Row::dashes()
    };
    report.rows.push(quantile_row(
        "feed: publish→visible (an event published, polled from the previous token until served)".to_owned(),
        format!("{} samples, max {}", latency.visible.count, millis(latency.visible.max)),
        &latency.visible,
    ));
    report.targets.push((
        "publish→visible in the feed p99 < 50 ms".to_owned(),
        latency.visible.p99 < Duration::from_millis(50),
        format!("p99 {}", millis(latency.visible.p99)),
    ));
    report.rows.push(quantile_row(
        "feed: publish→visible with a writing transaction open in another database throughout".to_owned(),
        format!("{} samples, max {}", held.visible.count, millis(held.visible.max)),
        &held.visible,
    ));
    report.targets.push((
        "publish→visible in the feed p99 < 50 ms with a foreign transaction open".to_owned(),
        held.visible.p99 < Duration::from_millis(50),
        format!("p99 {} (without: {})", millis(held.visible.p99), millis(latency.visible.p99)),
    ));
    report.rows.push(quantile_row(
        "feed: a long poll's wake-up (wait=30 pending; commit heard by LISTEN → response)".to_owned(),
        format!("{} samples, max {}", latency.wake.count, millis(latency.wake.max)),
        &latency.wake,
    ));
    report.targets.push((
        "long-poll wake-up p99 < 100 ms".to_owned(),
        latency.wake.p99 < Duration::from_millis(100),
        format!("p99 {}", millis(latency.wake.p99)),
    ));

    // How it was measured.
    let pairs: Vec<String> = runs
        .iter()
        .map(|run| {
            let (build, drained) = (run.build, &run.drained);
            format!(
                "{build:?} {} events/s in {:.1} s ({})",
                thousands(drained.per_second()),
                drained.elapsed.as_secs_f64(),
                run.detail
            )
        })
        .collect();
    report.notes.push(format!(
        "Drain: the release projector started on a stream already holding every `created` event, timed until its own \
         counter of applied events reached the total, then the acknowledgements awaited and the read model counted \
         (as in the comparisons). Runs in order: {}. {}Plain SQL: as in the comparisons, one connection, batches of \
         1,000 upserts without the feed's columns. The projector's metrics for the last run and the measurements \
         after it: {}.",
        pairs.join("; "),
        match &setup.options.baseline_projector {
            Some(path) => format!(
                "A is this checkout's projector, B `{}`; each run drains into an empty database migrated by its own \
                 build's `lectern-api migrate` (B's without the feed's migration), the durable consumer deleted \
                 before each run so every run reads the same stream from its first event; the last A run's \
                 database serves the measurements below. ",
                path.display()
            ),
            None => String::new(),
        },
        batches.describe(runs.last().map_or(Duration::ZERO, |run| run.drained.elapsed))
    ));
    report.notes.push(format!(
        "Catch-up: one client (reqwest, JSON parsed per page), `GET /v1/contacts/changes?limit=100` from no `since`, \
         following `syncToken` until `hasMore` is false (every change of the {} contacts served once, checked), \
         against `GET /v1/contacts?limit=100` following `nextCursor` to the end; {ROUNDS} rounds, listing then feed, \
         medians of each (feed {} records/s, listing {} records/s). CPU per page is the API process's, every \
         PostgreSQL process's and the client's (this benchmark's process) over the traversals, from /proc. Feed pages read ahead over the rounds, by outcome \
         (`{FEED_READ_AHEAD}`): {read_ahead}.",
        thousands(f64::from(plan.big().contacts)),
        list(&catch_up.iter().map(|(records, elapsed, _)| *records as f64 / elapsed.as_secs_f64()).collect::<Vec<_>>()),
        list(&listing.iter().map(|(records, elapsed, _)| *records as f64 / elapsed.as_secs_f64()).collect::<Vec<_>>()),
    ));
    report.notes.push(format!(
        "Empty poll: wrk -t2 -c64 -d{s}s (after a 2 s warm-up), every request `GET /v1/contacts/changes?since=<the \
         token of since=latest>` with the big workspace's key, nothing published meanwhile; baseline pgbench -c 16 \
         -j 2 -T {s} -M prepared, `force_generic_plan` as the API's feed connections, running `changes_sql::<Contacts>()` \
         for the same workspace, after transaction {transaction}, {limit} rows (the API asks one more than the page). \
         PostgreSQL CPU per request is the API's pooled backends'.",
        s = setup.options.run_for.as_secs(),
        transaction = position.transaction,
        limit = usize::from(FeedLimit::MAX) + 1
    ));
    report.notes.push(latency.describe());
    report.notes.push(format!(
        "The same round again while a transaction in the server's `postgres` database holds a transaction id \
         (a temporary table written, never committed) for the whole round: {}",
        held.describe()
    ));
    Ok(())
}

/// The feed's empty poll as a wrk scenario, and the feed's statement for pgbench for the
/// same workspace and position.
fn empty_poll(key: &str, token: &str, workspace: Uuid, position: FeedPosition) -> Result<Scenario> {
    let sql = substitute(&changes_sql::<Contacts>(), &[":ws", ":transaction", ":id", ":rows", ":bound"])?;
    Ok(Scenario {
        name: "contacts feed: empty poll, big workspace".to_owned(),
        requests: vec![(key.to_owned(), format!("/v1/contacts/changes?since={token}"))],
        script: format!("{sql};\n"),
        defines: vec![
            ("ws".to_owned(), workspace.to_string()),
            ("transaction".to_owned(), position.transaction.to_string()),
            ("id".to_owned(), position.id.to_string()),
            ("rows".to_owned(), (usize::from(FeedLimit::MAX) + 1).to_string()),
            // The token of `since=latest` is just below the bound.
            ("bound".to_owned(), (position.transaction + 1).to_string()),
        ],
        plan_cache_mode: PlanMode::Generic.setting(),
    })
}

/// A whole feed read from its beginning.
struct Read {
    records: usize,
    distinct: usize,
    elapsed: Duration,
}

/// Reads the key's workspace's contacts feed from the beginning, 100 changes a page,
/// until `hasMore` is false.
async fn read_feed(api: &Api, key: &str) -> Result<Read> {
    let client = reqwest::Client::new();
    let started = Instant::now();
    let mut ids = HashSet::new();
    let mut records = 0;
    let mut page = poll(&client, &api.base, key, "limit=100").await?;
    loop {
        records += page.ids.len();
        ids.extend(page.ids);
        if !page.has_more {
            break;
        }
        page = poll(&client, &api.base, key, &format!("limit=100&since={}", page.sync_token)).await?;
    }
    Ok(Read { records, distinct: ids.len(), elapsed: started.elapsed() })
}

/// CPU seconds spent by the API, by every PostgreSQL process and by this process (the
/// client, which decompresses and parses every page) over a stretch.
#[derive(Clone, Copy, Debug, Default)]
struct Cpu {
    api: f64,
    postgres: f64,
    client: f64,
}

impl Cpu {
    fn plus(self, other: Self) -> Self {
        Self { api: self.api + other.api, postgres: self.postgres + other.postgres, client: self.client + other.client }
    }
}

/// The counters at the start of a stretch.
struct CpuMark(Cpu);

impl CpuMark {
    fn take(api_pid: u32) -> Self {
        Self(Cpu {
            api: cpu_seconds(api_pid).unwrap_or_default(),
            postgres: postgres_seconds(),
            client: cpu_seconds(std::process::id()).unwrap_or_default(),
        })
    }

    fn since(self, api_pid: u32) -> Cpu {
        let now = Self::take(api_pid).0;
        Cpu {
            api: now.api - self.0.api,
            postgres: (now.postgres - self.0.postgres).max(0.0),
            client: now.client - self.0.client,
        }
    }
}
