//! PostgreSQL stopped, slowed by a lock, out of connections and crashed under load:
//! the API answers 503 `SERVICE_UNAVAILABLE` with `Retry-After` within a bounded time,
//! never a 500 and never a hang, and recovers by itself when the database does.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lectern_api::reads::PoolSettings;
use sqlx::{Connection, PgConnection, PgPool};

use crate::support::{assert_unavailable, PrivateApi, MARGIN, RECOVERY};

/// The request that warms the API up (its key cached, connections open) before a fault.
const PRIMING: &str = "/v1/contacts?limit=5";
/// A listing never requested before the fault: the answer cannot come from anything
/// the API kept from before (a cache of first pages, say), only from PostgreSQL.
const UNPRIMED: &str = "/v1/contacts?limit=7&sort=name";

fn settings(max_connections: u32, acquire_ms: u64, statement_ms: u64) -> PoolSettings {
    PoolSettings {
        max_connections,
        acquire_timeout: Duration::from_millis(acquire_ms),
        statement_timeout: Duration::from_millis(statement_ms),
        // One workspace may hold the whole set and wait for more, so that what runs out is
        // the database's connections: these tests are about the database.
        connections_per_workspace: max_connections + 1,
    }
}

/// Sessions of the API waiting for a lock right now.
async fn api_sessions_waiting_on_a_lock(admin: &PgPool) -> i64 {
    sqlx::query_scalar(
        "select count(*) from pg_stat_activity
          where application_name = 'lectern-api' and wait_event_type = 'Lock'",
    )
    .fetch_one(admin)
    .await
    .expect("read pg_stat_activity")
}

/// A transaction on its own connection holding `contacts` in access exclusive mode,
/// so every statement that reads contacts queues behind it.
async fn lock_contacts(url: &str) -> PgConnection {
    let mut locker = PgConnection::connect(url).await.expect("connect the locking session");
    sqlx::raw_sql("begin; lock table contacts in access exclusive mode")
        .execute(&mut locker)
        .await
        .expect("lock contacts");
    locker
}

async fn unlock(mut locker: PgConnection) {
    sqlx::raw_sql("rollback").execute(&mut locker).await.expect("release the lock");
    locker.close().await.expect("close the locking session");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_its_database_stopped_the_api_answers_503_with_retry_after_in_bounded_time_and_recovers_by_itself() {
    let mut api = PrivateApi::start(settings(4, 1_000, 2_000)).await;
    api.get(PRIMING).await.0.assert_ok();
    let (list, get) = (UNPRIMED.to_owned(), api.contact_path());

    api.postgres.stop().await;

    // Twice each: once on the pool's dead connections, once on fresh connection attempts.
    for path in [&list, &get, &list, &get] {
        let (reply, took) = api.get(path).await;
        assert_unavailable(&reply, &format!("GET {path} with PostgreSQL stopped (answered in {took:?})"));
    }
    let ready = api.app.send(api.app.http.get(api.app.url("/readyz"))).await;
    assert_eq!(ready.status, 503, "/readyz must be 503 while PostgreSQL is stopped: {}", ready.text);

    api.postgres.start().await;

    api.wait_until_ok(&list, false).await.assert_ok();
    api.wait_until_ok(&get, false).await.assert_ok();
    api.wait_until_ok("/readyz", true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_stuck_behind_a_lock_is_cancelled_by_the_statement_timeout_and_answered_503() {
    let api = PrivateApi::start(settings(4, 1_000, 1_000)).await;
    api.get(PRIMING).await.0.assert_ok();
    let (list, get) = (UNPRIMED.to_owned(), api.contact_path());

    let locker = lock_contacts(&api.postgres.url()).await;

    for path in [&list, &get] {
        let (reply, took) = api.get(path).await;
        assert_unavailable(&reply, &format!("GET {path} behind a lock (answered in {took:?})"));
    }
    // Cancelled in PostgreSQL, not merely abandoned by the API: nothing of it still queues.
    assert_eq!(api_sessions_waiting_on_a_lock(&api.admin).await, 0, "a timed-out statement still waits on the lock");

    unlock(locker).await;

    api.get(&list).await.0.assert_ok();
    api.get(&get).await.0.assert_ok();
}

/// Listings and lookups by id run on two connection sets of `--db-pool-size` each
/// (listings keep their prepared statements on connections of their own). Every
/// connection of the set a request needs is held by a request stuck behind a lock (the
/// statement timeout is long, so they stay stuck); one more request of that kind must
/// get a 503 after the acquire timeout instead of waiting for them.
///
/// As many requests are parked as the set has connections. Should the API keep a
/// LISTEN session inside the set, the parked requests that find no connection give up
/// (503); the set is full once every parked request is either waiting on the lock or
/// has given up.
async fn with_every_connection_held_by_blocked_requests_one_more_is_503_after_the_acquire_timeout(
    kind: &str,
    paths: impl FnOnce(&PrivateApi) -> (Vec<String>, String),
) {
    const POOL: u32 = 3;
    let api = Arc::new(PrivateApi::start(settings(POOL, 1_000, 60_000)).await);
    api.get(PRIMING).await.0.assert_ok();
    let (parked_paths, probe) = paths(&api);
    assert_eq!(parked_paths.len(), POOL as usize, "park one request per connection");

    let locker = lock_contacts(&api.postgres.url()).await;
    // One at a time, each stuck before the next starts: retrieves that arrive together
    // would share one statement, and so one connection.
    let mut parked = Vec::new();
    for path in parked_paths {
        let parker = Arc::clone(&api);
        parked.push(tokio::spawn(async move { parker.get(&path).await.0 }));
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let blocked = usize::try_from(api_sessions_waiting_on_a_lock(&api.admin).await).unwrap_or_default();
            let gave_up = parked.iter().filter(|request| request.is_finished()).count();
            if blocked >= 1 && blocked + gave_up == parked.len() {
                break;
            }
            assert!(Instant::now() < deadline, "the {kind} set never filled up: {blocked} blocked, {gave_up} gave up");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    let (reply, took) = api.get(&probe).await;
    assert_unavailable(&reply, &format!("GET {probe} with the {kind} set exhausted (answered in {took:?})"));
    assert!(
        took < api.settings.acquire_timeout + MARGIN,
        "the 503 took {took:?}: it waited for more than the {kind} set"
    );

    unlock(locker).await;

    let mut statuses = Vec::new();
    for request in parked {
        let reply = request.await.expect("parked request task");
        assert!(matches!(reply.status, 200 | 503), "a parked request was answered {}: {}", reply.status, reply.text);
        statuses.push(reply.status);
    }
    assert!(statuses.contains(&200), "the requests holding connections should finish once unlocked: {statuses:?}");
    api.get(&probe).await.0.assert_ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_every_listing_connection_held_by_a_blocked_listing_another_listing_is_503_after_the_acquire_timeout() {
    with_every_connection_held_by_blocked_requests_one_more_is_503_after_the_acquire_timeout("listing", |_| {
        let parked = (7..10).map(|limit| format!("/v1/contacts?limit={limit}&sort=name")).collect();
        (parked, "/v1/contacts?limit=11&sort=name".to_owned())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_every_lookup_connection_held_by_a_blocked_retrieve_another_retrieve_is_503_after_the_acquire_timeout() {
    with_every_connection_held_by_blocked_requests_one_more_is_503_after_the_acquire_timeout("lookup", |api| {
        let mut paths: Vec<_> = api.contacts[1..5].iter().map(|id| format!("/v1/contacts/{id}")).collect();
        let probe = paths.pop().unwrap_or_default();
        (paths, probe)
    })
    .await;
}

/// `--db-pool-size 1` is a valid setting (the range starts at 1), so one connection
/// must be enough to serve requests, one at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_of_one_connection_serves_requests() {
    let api = PrivateApi::start(settings(1, 1_000, 2_000)).await;
    // Long enough for the API's background tasks (key-change listener) to have started.
    tokio::time::sleep(Duration::from_secs(2)).await;

    for _ in 0..3 {
        let (reply, took) = api.get("/v1/contacts?limit=5").await;
        assert_eq!(reply.status, 200, "a pool of one answered {} after {took:?}: {}", reply.status, reply.text);
    }
}

/// What the load of one client saw.
#[derive(Default)]
struct Observed {
    statuses: BTreeMap<u16, usize>,
    /// Answers that break the rule (not 200 or 503, or a 503 out of shape), for the message.
    wrong: Vec<String>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_postgresql_under_load_yields_only_200s_and_503s_and_the_api_recovers_after_the_restart() {
    const CLIENTS: usize = 6;
    const MAX_REQUESTS_PER_CLIENT: usize = 3_000;
    let mut api = PrivateApi::start(settings(4, 1_000, 2_000)).await;
    let api_address = api.app.address;
    let key = api.key.clone();
    let paths =
        vec!["/v1/contacts?limit=5".to_owned(), api.contact_path(), "/v1/contacts?sort=name&limit=3".to_owned()];
    let bound = api.bound();
    let stop = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicUsize::new(0));
    let observed = Arc::new(Mutex::new(Observed::default()));

    let clients: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let (stop, answered, observed, key, paths) =
                (stop.clone(), answered.clone(), observed.clone(), key.clone(), paths.clone());
            tokio::spawn(async move {
                let http = reqwest::Client::new();
                for turn in 0..MAX_REQUESTS_PER_CLIENT {
                    if stop.load(Ordering::Acquire) {
                        break;
                    }
                    let path = &paths[(client + turn) % paths.len()];
                    let request = http.get(format!("http://{api_address}{path}")).header("X-API-Key", &key).send();
                    let reply = match tokio::time::timeout(bound, request).await {
                        Err(_) => panic!("GET {path} hung for {bound:?} while PostgreSQL crashed"),
                        Ok(Err(error)) => panic!("GET {path} failed at the HTTP level: {error}"),
                        Ok(Ok(response)) => lectern_tests::Reply::read(response).await,
                    };
                    let mut seen = observed.lock().expect("observations");
                    *seen.statuses.entry(reply.status).or_default() += 1;
                    let in_shape = match reply.status {
                        200 => true,
                        503 => {
                            reply.body["error"]["code"] == "SERVICE_UNAVAILABLE"
                                && reply.header("retry-after").is_some_and(|s| s.parse::<u32>().is_ok())
                        }
                        _ => false,
                    };
                    if !in_shape {
                        seen.wrong.push(format!("GET {path} → {} {}", reply.status, reply.text));
                    }
                    drop(seen);
                    answered.fetch_add(1, Ordering::AcqRel);
                }
            })
        })
        .collect();

    let wait_for_answers = |count: usize| {
        let answered = answered.clone();
        async move {
            let target = answered.load(Ordering::Acquire) + count;
            let deadline = Instant::now() + RECOVERY;
            while answered.load(Ordering::Acquire) < target {
                assert!(Instant::now() < deadline, "the load stalled: fewer than {count} answers in {RECOVERY:?}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    wait_for_answers(30).await;
    api.postgres.stop().await;
    wait_for_answers(30).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    api.postgres.start().await;
    let ok_after_restart = {
        let before = observed.lock().expect("observations").statuses.get(&200).copied().unwrap_or_default();
        let deadline = Instant::now() + RECOVERY;
        loop {
            let now = observed.lock().expect("observations").statuses.get(&200).copied().unwrap_or_default();
            if now >= before + 30 || Instant::now() > deadline {
                break now - before;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    stop.store(true, Ordering::Release);
    for client in clients {
        client.await.expect("a load client failed");
    }

    {
        let seen = observed.lock().expect("observations");
        assert!(
            seen.wrong.is_empty(),
            "answers other than 200 or a proper 503 ({:?}):\n{}",
            seen.statuses,
            seen.wrong.join("\n")
        );
        assert!(seen.statuses.contains_key(&503), "the crash was never seen as a 503: {:?}", seen.statuses);
        assert!(ok_after_restart >= 30, "the API did not recover after the restart: {:?}", seen.statuses);
    }
    api.get(&paths[0]).await.0.assert_ok();
}
