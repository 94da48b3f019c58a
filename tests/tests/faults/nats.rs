//! NATS unreachable while the projector runs: the API, which never talks to NATS,
//! keeps serving the read model; and every event published before and after the
//! outage lands exactly once. (The projector's own reconnection is covered in
//! `tests/projector/process.rs`; what is added here is the API's side and an exact
//! count of rows, versions and dead letters.)

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use async_nats::jetstream;
use lectern_api::keys::Scope;
use lectern_tests::nats::TestNats;
use lectern_tests::projector::{contact_event, eventually, publish, RunningProjector};
use lectern_tests::{TestApp, TestDatabase};
use sqlx::PgPool;
use uuid::Uuid;

/// How long the read model may take to catch up with what was published.
const CATCH_UP: Duration = Duration::from_secs(60);
/// How long NATS stays away while the API is exercised.
const OUTAGE: Duration = Duration::from_secs(3);

/// (id → (version, name)) of every contact row of `workspace`, whatever its status.
async fn rows(pool: &PgPool, workspace: Uuid) -> HashMap<Uuid, (i64, Option<String>)> {
    let rows: Vec<(Uuid, i64, Option<String>)> =
        sqlx::query_as("select id, version, name from contacts where workspace_id = $1")
            .bind(workspace)
            .fetch_all(pool)
            .await
            .expect("read contact rows");
    rows.into_iter().map(|(id, version, name)| (id, (version, name))).collect()
}

/// Ids and names the API lists for the key's workspace, in one full traversal.
async fn listed(app: &TestApp, key: &str) -> Vec<(String, String)> {
    app.traverse(key, "/v1/contacts?limit=100")
        .await
        .iter()
        .flat_map(|page| page["data"].as_array().cloned().unwrap_or_default())
        .map(|record| {
            (
                record["id"].as_str().unwrap_or_default().to_owned(),
                record["name"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// Whether `listed` is exactly the records of `want`, each once, under its name there.
fn names_as_in(listed: &[(String, String)], want: &HashMap<Uuid, (i64, Option<String>)>) -> bool {
    let distinct: HashSet<&str> = listed.iter().map(|(id, _)| id.as_str()).collect();
    listed.len() == want.len()
        && distinct.len() == want.len()
        && listed.iter().all(|(id, name)| {
            let wanted = id.parse::<Uuid>().ok().and_then(|id| want.get(&id)).and_then(|(_, name)| name.as_ref());
            wanted == Some(name)
        })
}

fn expected(ids: &[Uuid], version: i64, label: &str) -> HashMap<Uuid, (i64, Option<String>)> {
    ids.iter().map(|id| (*id, (version, Some(format!("{label} {id}"))))).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_nats_unreachable_the_api_keeps_serving_and_events_from_before_and_after_land_exactly_once() {
    let mut nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let workspace = Uuid::new_v4();
    let key = app.key(workspace, &[Scope::ContactsRead]).await;
    let projector = RunningProjector::start_consuming(&nats.url, db.pool.clone()).await;
    let before: Vec<Uuid> = (0..20).map(|_| Uuid::new_v4()).collect();
    let after: Vec<Uuid> = (0..20).map(|_| Uuid::new_v4()).collect();

    let client = nats.client().await;
    for id in &before {
        publish(&client, &contact_event("created", workspace, *id, 1, &format!("before {id}"))).await;
    }
    let want_before = expected(&before, 1, "before");
    assert!(
        eventually(CATCH_UP, || async { rows(&db.pool, workspace).await == want_before }).await,
        "the events published before the outage did not land: {:?}",
        rows(&db.pool, workspace).await
    );
    drop(client);

    nats.stop();
    let outage_ends = Instant::now() + OUTAGE;
    let mut served = 0;
    while Instant::now() < outage_ends {
        let reply = tokio::time::timeout(Duration::from_secs(15), app.get(&key, "/v1/contacts?limit=100"))
            .await
            .expect("the API hangs while NATS is down");
        reply.assert_ok();
        assert_eq!(reply.data().len(), before.len(), "the API lost records while NATS was down: {}", reply.text);
        app.get(&key, &format!("/v1/contacts/{}", before[0])).await.assert_ok();
        served += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(served > 0, "no request was made during the outage");
    nats.restart().await;

    let client = nats.client().await;
    for id in &before {
        publish(&client, &contact_event("updated", workspace, *id, 2, &format!("updated {id}"))).await;
    }
    for id in &after {
        publish(&client, &contact_event("created", workspace, *id, 1, &format!("after {id}"))).await;
    }
    let mut want = expected(&before, 2, "updated");
    want.extend(expected(&after, 1, "after"));
    assert!(
        eventually(CATCH_UP, || async { rows(&db.pool, workspace).await == want }).await,
        "after the outage the read model is not every event applied once: {:?}",
        rows(&db.pool, workspace).await
    );

    let dead_letters: i64 =
        sqlx::query_scalar("select count(*) from dead_letters").fetch_one(&db.pool).await.expect("count dead letters");
    assert_eq!(dead_letters, 0, "an event became a dead letter across the outage");
    // The API's first-page cache is evicted by the notification that follows each
    // commit, so the page it cached during the outage may still be served for a moment
    // after the rows are there; it must give way to the read model soon after.
    let deadline = Instant::now() + CATCH_UP;
    let listed = loop {
        let listed = listed(&app, &key).await;
        if names_as_in(&listed, &want) || Instant::now() > deadline {
            break listed;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(listed.len(), before.len() + after.len(), "the API lists a record twice or misses one: {listed:?}");
    assert!(names_as_in(&listed, &want), "the API lists a record twice or under a stale name: {listed:?}");
    for (id, name) in &listed {
        let id: Uuid = id.parse().expect("listed id is a uuid");
        assert_eq!(Some(name), want.get(&id).and_then(|(_, name)| name.as_ref()), "record {id} is listed as {name:?}");
    }
    let consumer = jetstream::new(nats.client().await)
        .get_stream(lectern_projector::stream::STREAM)
        .await
        .expect("the stream")
        .consumer_info(lectern_projector::stream::CONSUMER)
        .await
        .expect("the consumer");
    assert_eq!(consumer.num_pending, 0, "events are left unconsumed: {consumer:?}");
    projector.stop().await;
}

/// The projector's sessions waiting for a lock in `pool`'s database.
async fn writes_waiting_on_a_lock(pool: &PgPool) -> i64 {
    sqlx::query_scalar(
        "select count(*) from pg_locks l join pg_stat_activity a on a.pid = l.pid
         where not l.granted and a.datname = current_database()",
    )
    .fetch_one(pool)
    .await
    .expect("count sessions waiting on a lock")
}

/// A pull request sent to a server that then dies without reading it is never
/// answered, and the restarted server has never heard of it. The projector must give
/// up on it and pull again, or it stops for good with events piling up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_lost_with_a_nats_restart_does_not_stop_the_projector() {
    let mut nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let projector = RunningProjector::start_consuming(&nats.url, db.pool.clone()).await;
    let workspace = Uuid::new_v4();
    let first: Vec<Uuid> = (0..5).map(|_| Uuid::new_v4()).collect();
    let second: Vec<Uuid> = (0..5).map(|_| Uuid::new_v4()).collect();

    // The first batch waits on this lock, so the server can be frozen while the
    // projector holds the batch; its next pull then goes to a server that never reads it.
    let mut lock = db.pool.begin().await.expect("begin the lock transaction");
    sqlx::query("lock table contacts in access exclusive mode").execute(&mut *lock).await.expect("lock contacts");
    let client = nats.client().await;
    for id in &first {
        publish(&client, &contact_event("created", workspace, *id, 1, &format!("first {id}"))).await;
    }
    let in_hand = eventually(CATCH_UP, || async { writes_waiting_on_a_lock(&db.pool).await > 0 }).await;
    assert!(in_hand, "the projector never started writing the first batch");
    drop(client);
    nats.freeze();
    lock.rollback().await.expect("release the lock");
    tokio::time::sleep(Duration::from_secs(1)).await;
    nats.restart().await;

    let client = nats.client().await;
    for id in &second {
        publish(&client, &contact_event("created", workspace, *id, 1, &format!("second {id}"))).await;
    }
    let mut want = expected(&first, 1, "first");
    want.extend(expected(&second, 1, "second"));
    assert!(
        eventually(CATCH_UP, || async { rows(&db.pool, workspace).await == want }).await,
        "after a pull lost with the server the projector applied nothing more: {:?}",
        rows(&db.pool, workspace).await
    );
    projector.stop().await;
}
