//! With `--long-polls`: what waiting long polls cost one release API process.
//!
//! A database of its own (no NATS, no load), [`WORKSPACES`] empty workspaces with a key
//! each, and one more, the neighbour, holding [`NEIGHBOUR_CONTACTS`] contacts. Each round
//! opens [`PER_WORKSPACE`] long polls per workspace, every one on a connection of its own
//! (`GET /v1/contacts/changes?since=<token>&wait=30`, HTTP/1.1 written by hand so that
//! the client costs little beside them), waits until the API counts all of them waiting,
//! samples the API's resident memory, times the neighbour's listing meanwhile, then
//! commits one contact per workspace: every long poll must answer 200 with its
//! workspace's new contact. Once every connection is closed the API's memory is sampled
//! again. Baselines, in the same run: the API's memory before the first round, and the
//! neighbour's listing before any long poll.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lectern_api::keys::Scope;
use lectern_read_model::{contacts, Commit, Key, Status};
use lectern_schema::contact::ContactData;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinSet;
use uuid::Uuid;

use super::api::Api;
use super::feed_latency::Quantiles;
use super::infra::Database;
use super::machine::{rss_kib, RssSampler};
use super::report::{millis, thousands, Report, Row};
use super::{Context, Options, Result};

/// Workspaces with long polls waiting.
pub const WORKSPACES: usize = 200;
/// Long polls per workspace (under the API's cap of 64).
pub const PER_WORKSPACE: usize = 50;
/// Rounds of long polls against one process: memory must come back after each.
const ROUNDS: usize = 3;
/// The neighbour's contacts, listed 50 at a time while the long polls wait.
const NEIGHBOUR_CONTACTS: usize = 500;
/// Listing requests timed per sample set.
const LISTINGS: usize = 500;
/// Resident memory the API may reach while every long poll waits.
const TARGET_MIB: f64 = 100.0;
/// What "memory returned" allows above the memory before the first round.
const RETURNED_WITHIN_MIB: f64 = 10.0;
/// How long the API is given to hand memory back after the last connection closed.
const SETTLE: Duration = Duration::from_secs(5);

fn total() -> usize {
    WORKSPACES * PER_WORKSPACE
}

/// A workspace with its key and the sync token its long polls wait from.
struct Waiter {
    workspace: Uuid,
    key: String,
    token: String,
}

/// One round's figures.
struct Round {
    waiting_mib: f64,
    peak_mib: f64,
    after_mib: f64,
    listing: Quantiles,
    /// Last commit → last long poll answered.
    answered_within: Duration,
    opened_in: Duration,
}

/// Measures on the database `name` (created here) with the API `api_binary`, its log in
/// `work`.
pub async fn measure(options: &Options, api_binary: &Path, work: &Path, name: &str) -> Result<Report> {
    let database = Database::migrated_by(api_binary, name).await?;
    let server_version: String =
        sqlx::query_scalar("select current_setting('server_version')").fetch_one(&database.pool).await?;
    let mut keys = Vec::with_capacity(WORKSPACES + 1);
    for _ in 0..=WORKSPACES {
        let workspace = Uuid::new_v4();
        keys.push((workspace, super::api::insert_key(&database, workspace, &[Scope::ContactsRead]).await?));
    }
    let (neighbour, neighbour_key) = keys.pop().ok_or("no neighbour key")?;
    let mut writer = database.pool.acquire().await.context("a connection to write with")?;
    write_contacts(&mut writer, neighbour, NEIGHBOUR_CONTACTS).await?;

    let connections = (total() + 1_000).to_string();
    let api = super::api::start_named(api_binary, &database, work, "api", &[("LECTERN_MAX_CONNECTIONS", connections)])
        .await?;
    let pid = api.process.pid;
    let client = reqwest::Client::new();
    let waiters = latest_tokens(&client, &api, keys).await?;
    let listing_before = listings(&client, &api, &neighbour_key).await?;
    let before_mib = mib(rss_kib(pid).ok_or("the API's memory is unreadable")?);
    eprintln!("[long polls] {} idle connections", thousands(total() as f64));
    let waiters = Arc::new(waiters);
    let idle_mib = idle_connections(&api, &waiters).await?;
    let mut waiters = Arc::into_inner(waiters).ok_or("the idle connections still hold the waiters")?;

    let mut rounds = Vec::with_capacity(ROUNDS);
    for round in 1..=ROUNDS {
        eprintln!("[long polls] round {round}/{ROUNDS}: {} long polls", thousands(total() as f64));
        let shared = Arc::new(waiters);
        rounds.push(one_round(&api, &client, &neighbour_key, &shared, &mut writer, round).await?);
        // The next round waits from after this round's commits.
        let keys = shared.iter().map(|waiter| (waiter.workspace, waiter.key.clone())).collect();
        waiters = latest_tokens(&client, &api, keys).await?;
    }
    api.process.stop().await;
    drop(writer);
    database.pool.close().await;
    Ok(report(options, &server_version, before_mib, idle_mib, &listing_before, &rounds))
}

/// The API's resident memory (MiB) while as many connections as there are long polls are
/// open and idle, each kept alive after one feed request answered at once: what the
/// connections cost without a request waiting on them.
async fn idle_connections(api: &Api, waiters: &Arc<Vec<Waiter>>) -> Result<f64> {
    let pid = api.process.pid;
    let address: SocketAddr = api.base.trim_start_matches("http://").parse().context("the API's address")?;
    // Each connection reports whether it opened; a failure ends the measurement at once.
    let (opened, mut all_opened) = tokio::sync::mpsc::channel::<std::result::Result<(), String>>(total());
    let close = Arc::new(tokio::sync::Notify::new());
    let mut connections = JoinSet::new();
    for index in 0..total() {
        let (waiters, opened, close) = (waiters.clone(), opened.clone(), close.clone());
        connections.spawn(async move {
            let mut stream = match one_answered_request(address, &waiters[index % WORKSPACES]).await {
                Ok(stream) => stream,
                Err(error) => {
                    let _reported = opened.send(Err(format!("idle connection {index}: {error}"))).await;
                    return Ok(());
                }
            };
            let _reported = opened.send(Ok(())).await;
            close.notified().await;
            stream.shutdown().await.context("close an idle connection")
        });
        if index % 200 == 199 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    drop(opened);
    for _ in 0..total() {
        match all_opened.recv().await {
            Some(Ok(())) => {}
            Some(Err(failure)) => {
                connections.abort_all();
                return Err(failure.into());
            }
            None => return Err("the idle connections' tasks ended before reporting".into()),
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle_mib = mib(rss_kib(pid).ok_or("the API's memory is unreadable")?);
    close.notify_waiters();
    while let Some(closed) = connections.join_next().await {
        closed.map_err(|error| format!("an idle connection's task failed: {error}"))??;
    }
    tokio::time::sleep(SETTLE).await;
    Ok(idle_mib)
}

/// A connection of its own on which one feed request (`since=<token>`, no wait) was
/// answered 200, kept alive.
async fn one_answered_request(address: SocketAddr, waiter: &Waiter) -> Result<TcpStream> {
    let mut stream = sent(address, waiter, "", "").await?;
    let mut response = Vec::with_capacity(1_024);
    let mut chunk = [0_u8; 1_024];
    loop {
        let read = stream.read(&mut chunk).await.context("read a feed response")?;
        if read == 0 {
            return Err("the API closed a connection it should keep alive".into());
        }
        response.extend_from_slice(&chunk[..read]);
        if let Some(length) = complete_response(&response)? {
            if !response.starts_with(b"HTTP/1.1 200") {
                return Err(format!("a feed request answered {}", String::from_utf8_lossy(&response[..length])).into());
            }
            return Ok(stream);
        }
    }
}

/// The length of the whole response in `bytes` once its head and body (by
/// `content-length`) have arrived.
fn complete_response(bytes: &[u8]) -> Result<Option<usize>> {
    let Some(head_end) = bytes.windows(4).position(|window| window == b"\r\n\r\n").map(|at| at + 4) else {
        return Ok(None);
    };
    let head = String::from_utf8_lossy(&bytes[..head_end]).to_ascii_lowercase();
    let length = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .and_then(|value| value.trim().parse::<usize>().ok())
        .ok_or("a feed response without a content-length")?;
    Ok((bytes.len() >= head_end + length).then_some(head_end + length))
}

async fn one_round(
    api: &Api,
    client: &reqwest::Client,
    neighbour_key: &str,
    waiters: &Arc<Vec<Waiter>>,
    writer: &mut sqlx::PgConnection,
    round: usize,
) -> Result<Round> {
    let pid = api.process.pid;
    let address: SocketAddr = api.base.trim_start_matches("http://").parse().context("the API's address")?;
    let sampler = RssSampler::start(pid);
    let opening = Instant::now();
    let mut polls = JoinSet::new();
    for index in 0..total() {
        let waiters = waiters.clone();
        polls.spawn(async move {
            let waiter = &waiters[index % WORKSPACES];
            long_poll(address, waiter).await.map(|body| (index % WORKSPACES, body))
        });
        // Connections arrive a few hundred at a time, as clients that are not in lockstep
        // would, and never overflow the listen backlog.
        if index % 200 == 199 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let waiting = wait_until_waiting(api, total()).await?;
    let opened_in = opening.elapsed();
    if waiting < total() {
        return Err(format!("only {waiting} of {} long polls were waiting after {opened_in:?}", total()).into());
    }
    let waiting_mib = mib(rss_kib(pid).ok_or("the API's memory is unreadable")?);
    let listing = listings(client, api, neighbour_key).await?;

    let mut written = Vec::with_capacity(WORKSPACES);
    for waiter in waiters.iter() {
        written.push(write_contacts(writer, waiter.workspace, 1).await?.pop().ok_or("no contact written")?);
    }
    let committed = Instant::now();
    let mut answered = 0;
    while let Some(joined) = polls.join_next().await {
        let (workspace, body) = joined.map_err(|error| format!("a long poll's task failed: {error}"))??;
        let expected = written[workspace].to_string();
        if !body.starts_with(b"HTTP/1.1 200") || !contains(&body, expected.as_bytes()) {
            let shown = String::from_utf8_lossy(&body[..body.len().min(400)]).into_owned();
            return Err(
                format!("round {round}: a long poll did not answer with its new contact {expected}: {shown}").into()
            );
        }
        answered += 1;
    }
    let answered_within = committed.elapsed();
    if answered != total() {
        return Err(format!("round {round}: {answered} of {} long polls answered", total()).into());
    }
    tokio::time::sleep(SETTLE).await;
    let after_mib = mib(rss_kib(pid).ok_or("the API's memory is unreadable")?);
    let open_after = open_files(pid)?;
    eprintln!("[long polls] round {round}: {open_after} files open after, {after_mib:.0} MiB");
    let peak_mib = sampler.stop().peak;
    Ok(Round { waiting_mib, peak_mib, after_mib, listing, answered_within, opened_in })
}

/// Each workspace's key with a token from `since=latest`.
async fn latest_tokens(client: &reqwest::Client, api: &Api, keys: Vec<(Uuid, String)>) -> Result<Vec<Waiter>> {
    let mut waiters = Vec::with_capacity(keys.len());
    for (workspace, key) in keys {
        let page = super::feed_client::poll(client, &api.base, &key, "since=latest").await?;
        waiters.push(Waiter { workspace, key, token: page.sync_token });
    }
    Ok(waiters)
}

/// A connection of its own on which the feed request from `waiter`'s token, with
/// `more_query` and `more_headers` (each line ending in CRLF), has been sent.
async fn sent(address: SocketAddr, waiter: &Waiter, more_query: &str, more_headers: &str) -> Result<TcpStream> {
    let mut stream = TcpStream::connect(address).await.context("connect to the API")?;
    let request = format!(
        "GET /v1/contacts/changes?since={}{more_query} HTTP/1.1\r\nHost: {address}\r\nX-API-Key: {}\r\n{more_headers}\r\n",
        waiter.token, waiter.key
    );
    stream.write_all(request.as_bytes()).await.context("send a feed request")?;
    Ok(stream)
}

/// One long poll on a connection of its own: the whole response, head and body.
async fn long_poll(address: SocketAddr, waiter: &Waiter) -> Result<Vec<u8>> {
    let mut stream = sent(address, waiter, "&wait=30", "Connection: close\r\n").await?;
    let mut response = Vec::with_capacity(1_024);
    stream.read_to_end(&mut response).await.context("read a long poll's response")?;
    Ok(response)
}

/// Polls the API's gauge until `expected` requests wait, for up to 30 s; how many did.
async fn wait_until_waiting(api: &Api, expected: usize) -> Result<usize> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let samples = api.samples("lectern_api_feed_waiting_requests").await?;
        let waiting = samples.iter().map(|(_, value)| *value).sum::<f64>() as usize;
        if waiting >= expected || Instant::now() > deadline {
            return Ok(waiting);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// [`LISTINGS`] first pages of the neighbour's contacts, one after the other.
async fn listings(client: &reqwest::Client, api: &Api, key: &str) -> Result<Quantiles> {
    let mut samples = Vec::with_capacity(LISTINGS);
    for _ in 0..LISTINGS {
        let started = Instant::now();
        let response = client
            .get(format!("{}/v1/contacts?limit=50", api.base))
            .header("X-API-Key", key)
            .send()
            .await
            .context("list the neighbour's contacts")?;
        let status = response.status();
        let body = response.bytes().await.context("read a listing")?;
        samples.push(started.elapsed());
        if !status.is_success() {
            return Err(format!("the neighbour's listing answered {status}: {}", String::from_utf8_lossy(&body)).into());
        }
    }
    Ok(Quantiles::of(samples))
}

/// `count` new contacts in `workspace`, committed together as the projector would.
async fn write_contacts(connection: &mut sqlx::PgConnection, workspace: Uuid, count: usize) -> Result<Vec<Uuid>> {
    let mut batch = contacts::Batch::default();
    let mut ids = Vec::with_capacity(count);
    for index in 0..count {
        let id = Uuid::new_v4();
        let data = ContactData::new(format!("Long poll bench {index:06}"), chrono::Utc::now().into());
        batch.push(Key { workspace_id: workspace, id, version: 1, status: Status::Active }, Some(&data));
        ids.push(id);
    }
    batch.write(connection, Commit::OnItsOwnBeforeFlush).await.context("write contacts")?;
    Ok(ids)
}

/// The file descriptors `pid` holds open (its sockets among them).
fn open_files(pid: u32) -> Result<usize> {
    let folder = format!("/proc/{pid}/fd");
    Ok(std::fs::read_dir(&folder).context(format!("list {folder}"))?.count())
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|window| window == needle)
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn report(
    options: &Options,
    server_version: &str,
    before_mib: f64,
    idle_mib: f64,
    listing_before: &Quantiles,
    rounds: &[Round],
) -> Report {
    let mut report = Report::new("Lectern long polls: memory while 10,000 wait", "Targets (long polls)");
    report.header = vec![
        format!(
            "Machine: {}; PostgreSQL {server_version}, shared by the bench and the API.",
            super::machine::describe()
        ),
        format!(
            "Data: {WORKSPACES} empty workspaces with {PER_WORKSPACE} long polls each ({} in all, a connection each), \
             and a neighbour workspace of {NEIGHBOUR_CONTACTS} contacts; {ROUNDS} rounds against one API process.",
            thousands(total() as f64)
        ),
        format!("Command: `{}`", options.command_line),
    ];
    let per_request_kib = |waiting: f64| (waiting - before_mib) * 1024.0 / total() as f64;
    report.rows.push(Row {
        scenario: format!(
            "API resident memory with {} idle connections, no request waiting",
            thousands(total() as f64)
        ),
        lectern: format!("{idle_mib:.0} MiB"),
        baseline: format!("{before_mib:.0} MiB"),
        ratio: Some(idle_mib / before_mib),
        rss: format!("{:.1} KiB per connection", per_request_kib(idle_mib)),
        ..Row::dashes()
    });
    for (index, round) in rounds.iter().enumerate() {
        let number = index + 1;
        report.rows.push(Row {
            scenario: format!("round {number}: API resident memory while {} wait", thousands(total() as f64)),
            lectern: format!("{:.0} MiB", round.waiting_mib),
            baseline: format!("{before_mib:.0} MiB"),
            ratio: Some(round.waiting_mib / before_mib),
            rss: format!(
                "{:.0} MiB peak, {:.1} KiB per waiting request",
                round.peak_mib,
                per_request_kib(round.waiting_mib)
            ),
            ..Row::dashes()
        });
        report.rows.push(Row {
            scenario: format!("round {number}: API resident memory {} s after the last answered", SETTLE.as_secs()),
            lectern: format!("{:.0} MiB", round.after_mib),
            baseline: format!("{before_mib:.0} MiB"),
            ratio: Some(round.after_mib / before_mib),
            ..Row::dashes()
        });
        report.rows.push(Row {
            scenario: format!("round {number}: the neighbour's first page (limit 50) while they wait"),
            lectern: millis(round.listing.p50),
            baseline: millis(listing_before.p50),
            ratio: Some(round.listing.p50.as_secs_f64() / listing_before.p50.as_secs_f64().max(1e-9)),
            p50: millis(round.listing.p50),
            p99: millis(round.listing.p99),
            ..Row::dashes()
        });
    }
    let worst_waiting = rounds.iter().map(|round| round.waiting_mib.max(round.peak_mib)).fold(0.0, f64::max);
    let worst_after = rounds.iter().map(|round| round.after_mib).fold(0.0, f64::max);
    report.targets.push((
        format!("at most {TARGET_MIB:.0} MiB while {} long polls wait", thousands(total() as f64)),
        worst_waiting <= TARGET_MIB,
        format!(
            "{worst_waiting:.0} MiB at most over {ROUNDS} rounds (peak of 100 ms samples), {before_mib:.0} MiB before"
        ),
    ));
    report.targets.push((
        format!("memory returned after: within {RETURNED_WITHIN_MIB:.0} MiB of before"),
        worst_after <= before_mib + RETURNED_WITHIN_MIB,
        format!("{worst_after:.0} MiB at most after a round, {before_mib:.0} MiB before"),
    ));
    report.notes = vec![
        format!(
            "Resident memory is the API's VmRSS from /proc: \"while they wait\" once the API's \
             `lectern_api_feed_waiting_requests` counts every long poll, \"peak\" the highest of samples every 100 ms \
             over the round, \"after\" {} s after the last response. Per waiting request: (while they wait − before) / {}.",
            SETTLE.as_secs(),
            thousands(total() as f64)
        ),
        format!(
            "Idle connections: before the rounds, as many connections as long polls, each kept alive after one \
             feed request (`since=<token>`, no `wait`) answered at once; sampled once all are open, then closed. What \
             a long poll costs beyond its connection is the difference."
        ),
        format!(
            "Each round: every long poll answered 200 with its workspace's new contact; opened and counted waiting in \
             {}; the last answered {} after the last of the {WORKSPACES} commits (one per workspace, one after the other).",
            rounds.iter().map(|round| millis(round.opened_in)).collect::<Vec<_>>().join(", "),
            rounds.iter().map(|round| millis(round.answered_within)).collect::<Vec<_>>().join(", "),
        ),
        format!(
            "The neighbour's listing: {LISTINGS} requests one after the other on a kept-alive reqwest connection, \
             before the first round (baseline: p50 {}, p99 {}) and in each round while every long poll waits.",
            millis(listing_before.p50),
            millis(listing_before.p99)
        ),
    ];
    report
}
