//! Reads from a real streaming replica that lags on purpose: a private primary, a
//! `pg_basebackup -R` standby of it holding every commit back 30 s
//! (`recovery_min_apply_delay`), and API processes reading from both. Every guarantee
//! the API makes on one server holds: nothing a notification announced, nothing a page
//! already showed, is taken back by a read from the replica, and the replica going away
//! costs no request.

use std::time::{Duration, Instant};

use lectern_api::keys::{store, Scope};
use lectern_api::reads::lazy_pool;
use lectern_api::reads::replicas::{ReplicaTarget, WalPosition};
use lectern_api::reads::PoolSettings;
use lectern_tests::app::{urlencode, AppOptions};
use lectern_tests::postgres::TestPostgres;
use lectern_tests::process::signal;
use lectern_tests::seed::create_key;
use lectern_tests::{ContactSeed, Reply, TestApp};
use serde_json::Value;
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;
use uuid::Uuid;

/// How far behind the replica is made to fall.
const LAG: Duration = Duration::from_secs(30);
/// How long an announced change may take to show through the API.
const ANNOUNCED_WITHIN: Duration = Duration::from_secs(1);
/// How long the replica may take to catch up, or the monitor to notice a change of state.
const SETTLES_WITHIN: Duration = Duration::from_secs(20);

/// A primary, a streaming standby of it, one workspace with contacts and a key.
struct Replicated {
    primary: TestPostgres,
    standby: TestPostgres,
    /// The test's own pool on the primary, for writing and inspecting.
    admin: PgPool,
    workspace: Uuid,
    key: String,
    /// The contacts, in name order.
    contacts: Vec<ContactSeed>,
}

impl Replicated {
    async fn start(contacts: usize) -> Self {
        let primary = TestPostgres::start_primary().await;
        lectern_api::reads::create_and_migrate(&primary.url()).await.expect("create and migrate the primary");
        let admin =
            PgPoolOptions::new().max_connections(2).connect(&primary.url()).await.expect("connect to the primary");
        let workspace = Uuid::new_v4();
        let (_, key) = create_key(&admin, workspace, &[Scope::ContactsRead]).await;
        let mut seeds = Vec::with_capacity(contacts);
        for index in 0..contacts {
            let seed = ContactSeed::named(&format!("Contact {index:02}")).at(i64::try_from(index).unwrap_or(0));
            seed.insert(&admin, workspace).await;
            seeds.push(seed);
        }
        let standby = primary.start_standby(None).await;
        Self { primary, standby, admin, workspace, key, contacts: seeds }
    }

    /// An API process reading from the standby, which it lets lag up to a minute, so that
    /// the 30 s lag of these tests keeps the standby in its rotation.
    async fn api(&self) -> TestApp {
        let settings = PoolSettings {
            max_connections: 8,
            acquire_timeout: Duration::from_secs(5),
            statement_timeout: Duration::from_secs(30),
            connections_per_workspace: 8,
        };
        let replica = ReplicaTarget::from_url(&self.standby.url(), &settings).expect("replica URL");
        let options =
            AppOptions { replicas: vec![replica], max_replica_lag: Duration::from_secs(60), ..AppOptions::default() };
        TestApp::spawn_with(lazy_pool(&self.primary.url(), &settings).expect("pool"), options).await
    }

    /// Waits until `app` knows the standby has replayed everything the primary has
    /// written so far, and keeps it in its rotation.
    async fn caught_up(&self, app: &TestApp) {
        let target = wal_position(&self.primary.current_lsn().await);
        let state = app.state.as_ref().expect("an in-process app");
        let deadline = Instant::now() + SETTLES_WITHIN;
        loop {
            let statuses = state.reads.replica_statuses();
            if statuses.iter().all(|status| status.in_rotation() && status.replayed >= target) {
                return;
            }
            assert!(Instant::now() < deadline, "the app never saw the standby catch up to {target}: {statuses:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Writes `seed` again with `status`, as the projector would apply an event.
    async fn set_status(&self, seed: &ContactSeed, status: &'static str) {
        ContactSeed { status, ..seed.clone() }.insert(&self.admin, self.workspace).await;
    }

    /// Index scans of contacts the standby has run: its own statistics, so they grow only
    /// when a read is served there.
    async fn standby_scans(&self) -> i64 {
        let standby = PgPoolOptions::new().max_connections(1).connect(&self.standby.url()).await.expect("standby");
        let scans = sqlx::query_scalar(
            "select coalesce(sum(idx_scan), 0)::int8 from pg_stat_user_tables where relname = 'contacts'",
        )
        .fetch_one(&standby)
        .await
        .expect("read the standby's statistics");
        standby.close().await;
        scans
    }

    /// Waits for the standby's statistics to show a read. A backend flushes them at most
    /// once a second; one that flushed less than a second before it went idle flushes
    /// again only after 10 s idle (`PGSTAT_IDLE_INTERVAL`), which a loaded run meets.
    async fn standby_served_since(&self, before: i64) -> bool {
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if self.standby_scans().await > before {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        false
    }
}

/// `0/3016060` as bytes from `0/0`.
fn wal_position(lsn: &str) -> WalPosition {
    let (high, low) = lsn.split_once('/').expect("an LSN is two hex numbers");
    let high = i64::from_str_radix(high, 16).expect("hex");
    let low = i64::from_str_radix(low, 16).expect("hex");
    (high << 32) | low
}

/// The rule: while the replica is within its allowed lag and has replayed what a read
/// needs, the read is served there, not by the primary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_are_served_by_a_replica_that_has_replayed_what_they_need() {
    let replicated = Replicated::start(3).await;
    let app = replicated.api().await;
    replicated.caught_up(&app).await;
    let before = replicated.standby_scans().await;
    let page = app.get(&replicated.key, "/v1/contacts?limit=2&sort=name").await;
    page.assert_ok();
    assert_eq!(page.names(), ["Contact 00", "Contact 01"]);
    let retrieve = app.get(&replicated.key, &format!("/v1/contacts/{}", replicated.contacts[2].id)).await;
    retrieve.assert_ok();
    assert!(replicated.standby_served_since(before).await, "the standby served no read");
}

/// The rule: a change announced by the primary's notification is never taken back by a
/// read from a replica that has not replayed it. With the replica 30 s behind, an
/// archived record leaves the first page (which the cache had kept) and its retrieve
/// within a second of the archive, and does not come back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_announced_archive_is_not_served_again_from_a_lagging_replica() {
    let replicated = Replicated::start(5).await;
    let app = replicated.api().await;
    replicated.caught_up(&app).await;
    let first_page = "/v1/contacts?limit=3&sort=name";
    for _ in 0..2 {
        let page = app.get(&replicated.key, first_page).await;
        assert_eq!(page.names(), ["Contact 00", "Contact 01", "Contact 02"], "before the archive");
    }
    let archived = &replicated.contacts[1];
    let retrieve = format!("/v1/contacts/{}", archived.id);
    app.get(&replicated.key, &retrieve).await.assert_ok();

    replicated.standby.set_apply_delay(Some(LAG)).await;
    replicated.set_status(archived, "archived").await;
    let written = Instant::now();
    loop {
        let page = app.get(&replicated.key, first_page).await;
        if !page.names().contains(&archived.name) {
            break;
        }
        assert!(written.elapsed() < ANNOUNCED_WITHIN, "the archived contact was still served: {:?}", page.names());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        let page = app.get(&replicated.key, first_page).await;
        assert_eq!(page.names(), ["Contact 00", "Contact 02", "Contact 03"], "the archive was taken back");
        app.get(&replicated.key, &retrieve).await.assert_error(404, "NOT_FOUND");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The rule: key checks never read a replica, so a revoked key is refused by every API
/// process within a second, however far behind the replica is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_key_is_refused_by_every_process_within_a_second_while_the_replica_lags() {
    let replicated = Replicated::start(1).await;
    let apps = [replicated.api().await, replicated.api().await];
    let (key_id, key) = create_key(&replicated.admin, replicated.workspace, &[Scope::ContactsRead]).await;
    for app in &apps {
        replicated.caught_up(app).await;
        app.get(&key, "/v1/contacts").await.assert_ok();
        app.get(&key, "/v1/contacts").await.assert_ok();
    }
    replicated.standby.set_apply_delay(Some(LAG)).await;

    let revoked = Instant::now();
    store::revoke(&replicated.admin, &key_id).await.expect("revoke");
    for (index, app) in apps.iter().enumerate() {
        loop {
            let reply = app.get(&key, "/v1/contacts").await;
            if reply.status == 401 {
                break;
            }
            reply.assert_ok();
            assert!(revoked.elapsed() < ANNOUNCED_WITHIN, "process {index} still accepts the revoked key");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// A process's change listener, its PostgreSQL backend stopped (`SIGSTOP`) so that the
/// process hears no notification until this is dropped: the gap between a commit and its
/// notification, stretched. Its heartbeats still leave, and the first one missing resets
/// the process (after two seconds), so whatever relies on the gap must happen before.
struct Paused(i32);

impl Paused {
    /// The listener of the process started first.
    async fn oldest_listener(admin: &PgPool) -> Self {
        let pid: i32 = sqlx::query_scalar(
            "select pid from pg_stat_activity where application_name = 'lectern-api-listener' \
             order by backend_start limit 1",
        )
        .fetch_one(admin)
        .await
        .expect("find the listener's backend");
        signal(pid, "STOP");
        Self(pid)
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        signal(self.0, "CONT");
    }
}

/// The rule: a page after the first is never read from a replica behind the page before
/// it: cursors and sync tokens carry the WAL position their page was read at. Process A
/// reads page 1 on the primary after a change; process B, whose notifications are held
/// back (so nothing fences the change for it), serves page 2 with A's cursor and token
/// while the replica is 30 s behind: B must not show the state before the change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_later_page_is_never_read_from_a_replica_behind_the_page_before() {
    let replicated = Replicated::start(6).await;
    let second = replicated.api().await;
    let first = replicated.api().await;
    replicated.caught_up(&first).await;
    replicated.caught_up(&second).await;
    replicated.standby.set_apply_delay(Some(LAG)).await;
    let [_, on_page_one, _, on_page_two, renamed, ..] = &replicated.contacts[..] else { panic!("six contacts") };

    let deaf = Paused::oldest_listener(&replicated.admin).await;
    let written = Instant::now();
    replicated.set_status(on_page_two, "archived").await;
    ContactSeed { name: "Contact 04 renamed".to_owned(), ..renamed.clone() }
        .insert(&replicated.admin, replicated.workspace)
        .await;
    replicated.set_status(on_page_one, "archived").await;

    // The listing: page 1 on the first process, once it shows the last change.
    let first_page = "/v1/contacts?limit=2&sort=name";
    let page_one = loop {
        let page = first.get(&replicated.key, first_page).await;
        if !page.names().contains(&on_page_one.name) {
            break page;
        }
        assert!(written.elapsed() < ANNOUNCED_WITHIN, "the first process never showed the archive");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let cursor = page_one.body["page"]["nextCursor"].as_str().expect("a next page").to_owned();
    let page_two = second.get(&replicated.key, &format!("{first_page}&cursor={}", urlencode(&cursor))).await;
    page_two.assert_ok();

    // The feed: its first page on the first process (read after the changes), the next on
    // the second. In the replica's past, the next change after contact 00 is contact 01's
    // creation; since, contact 01 was archived, and the next change is contact 02's.
    let feed = "/v1/contacts/changes?limit=1";
    let from_first = first.get(&replicated.key, feed).await;
    from_first.assert_ok();
    let token = from_first.body["syncToken"].as_str().expect("a token").to_owned();
    let from_second = second.get(&replicated.key, &format!("{feed}&since={}", urlencode(&token))).await;
    from_second.assert_ok();
    assert!(
        written.elapsed() < Duration::from_millis(1_500),
        "too slow to prove anything: the deaf process may have been reset by its missing heartbeat"
    );
    drop(deaf);

    assert!(
        !page_two.names().contains(&on_page_two.name),
        "page 2 showed a contact archived before page 1 was read: {:?} after {:?}",
        page_two.names(),
        page_one.names()
    );
    let ids = |reply: &Reply| reply.data().iter().map(|entry| entry["id"].clone()).collect::<Vec<_>>();
    assert_eq!(ids(&from_first), [Value::from(replicated.contacts[0].id.to_string())]);
    let went_back = ids(&from_second);
    assert_eq!(
        went_back,
        [Value::from(replicated.contacts[2].id.to_string())],
        "the feed's next page was read in the past: contact 01's creation instead of contact 02's"
    );
}

/// The rule: a replica that goes away costs no request: reads move to the primary
/// (readiness says so, and its lag reads unknown), and back to the replica once it answers
/// again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_stopped_and_started_again_costs_no_request() {
    let mut replicated = Replicated::start(4).await;
    let app = replicated.api().await;
    replicated.caught_up(&app).await;
    // None of them served from a cache: a search, a retrieve, the feed.
    let paths = [
        "/v1/contacts?limit=2&search=contact".to_owned(),
        format!("/v1/contacts/{}", replicated.contacts[0].id),
        "/v1/contacts/changes?limit=2".to_owned(),
    ];
    for path in &paths {
        app.get(&replicated.key, path).await.assert_ok();
    }

    // Requests in flight while the replica goes: some reach it before the monitor has
    // noticed, and must be served all the same.
    let stop_hammering = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let hammer = {
        let (app_url, key, paths, stop) = (app.url(""), replicated.key.clone(), paths.clone(), stop_hammering.clone());
        tokio::spawn(async move {
            let http = reqwest::Client::new();
            let mut answers = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for path in &paths {
                    let response = http.get(format!("{app_url}{path}")).header("X-API-Key", &key).send().await;
                    answers.push(response.map(|response| response.status().as_u16()).unwrap_or(0));
                }
            }
            answers
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    replicated.standby.stop().await;
    let state = app.state.clone().expect("an in-process app");
    let deadline = Instant::now() + SETTLES_WITHIN;
    while state.reads.replica_statuses().iter().any(|status| status.in_rotation()) {
        assert!(Instant::now() < deadline, "the stopped replica stayed in the rotation");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop_hammering.store(true, std::sync::atomic::Ordering::Relaxed);
    let answers = hammer.await.expect("the requests' task");
    let failed: Vec<&u16> = answers.iter().filter(|status| **status != 200).collect();
    assert!(
        failed.is_empty(),
        "{} of {} requests failed while the replica went away: {failed:?}",
        failed.len(),
        answers.len()
    );
    let degraded = lectern_api::http::operations::readiness(&app.pool, &state.change_listener, &state.reads)
        .await
        .expect("ready while the primary serves");
    assert!(
        degraded.iter().any(|line| line.contains("out of the rotation")),
        "readiness does not name the replica: {degraded:?}"
    );
    // Unreachable, its lag is unknown (the gauge NaN), never the last value measured.
    let deadline = Instant::now() + SETTLES_WITHIN;
    while let Some(lag) = state.reads.replica_statuses().into_iter().next().and_then(|status| status.lag) {
        assert!(Instant::now() < deadline, "the unreachable replica's lag still reads {lag:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    replicated.standby.start().await;
    replicated.caught_up(&app).await;
    let before = replicated.standby_scans().await;
    let deadline = Instant::now() + SETTLES_WITHIN;
    loop {
        app.get(&replicated.key, &paths[1]).await.assert_ok();
        if replicated.standby_served_since(before).await {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "reads did not come back to the replica: {:?}",
            state.reads.replica_statuses()
        );
    }
}
