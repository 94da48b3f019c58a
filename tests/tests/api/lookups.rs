//! Retrieves by id that arrive while earlier ones are being read share one statement,
//! and each request still receives only its own workspace's record.
//!
//! An exclusive lock on the contacts table holds the first statements inside
//! PostgreSQL, so requests sent meanwhile are sure to queue behind them.

use std::time::{Duration, Instant};

use lectern_tests::{ContactSeed, Reply, TestApp, TestDatabase};
use sqlx::{Connection, PgConnection};
use uuid::Uuid;

use lectern_api::reads::replicas::Reads;
use lectern_api::resources::contacts::Contacts;
use lectern_api::resources::Resource;
use lectern_api::retrieve::lookups::{Lookups, CONCURRENT_BATCHES};

use crate::statements::record_statements;

async fn lock_contacts(db: &TestDatabase) -> PgConnection {
    let mut locker = PgConnection::connect(&db.url).await.expect("connect the locking session");
    sqlx::raw_sql("begin; lock table contacts in access exclusive mode").execute(&mut locker).await.expect("lock");
    locker
}

/// Waits until `count` statements of the database wait on a lock.
async fn until_waiting_on_the_lock(db: &TestDatabase, count: i64, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while db.sessions_waiting_on_a_lock().await < count {
        assert!(Instant::now() < deadline, "{what} never reached the lock");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Sends every (key, path) so that they are read by one statement, and returns the
/// replies in the same order. First, one lookup at a time is parked on the lock until
/// every batch task the API allows is waiting there; the requests then queue behind
/// them, and the first task to be released takes them all.
async fn in_one_batch_behind_a_lock(
    app: &TestApp,
    db: &TestDatabase,
    key: &str,
    requests: &[(String, String)],
) -> Vec<Reply> {
    let locker = lock_contacts(db).await;
    let send = |key: &str, path: &str| {
        let request = app.http.get(app.url(path)).header("X-API-Key", key);
        tokio::spawn(async move { Reply::read(request.send().await.expect("send")).await })
    };
    let mut parked = Vec::new();
    for waiting in 1..=CONCURRENT_BATCHES {
        parked.push(send(key, &format!("/v1/contacts/{}", Uuid::new_v4())));
        until_waiting_on_the_lock(db, waiting as i64, &format!("parked lookup {waiting}")).await;
    }
    let sent: Vec<_> = requests.iter().map(|(key, path)| send(key, path)).collect();
    // Time for the requests to arrive and queue; a straggler would only make its own batch.
    tokio::time::sleep(Duration::from_secs(1)).await;
    sqlx::raw_sql("rollback").execute(&mut { locker }).await.expect("release the lock");
    for request in parked {
        request.await.expect("parked request").assert_error(404, "NOT_FOUND");
    }
    let mut replies = Vec::new();
    for request in sent {
        replies.push(request.await.expect("request task"));
    }
    replies
}

#[tokio::test]
async fn retrieves_queued_behind_running_lookups_share_one_statement() {
    let (statements, _guard) = record_statements();
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    let ids = lectern_tests::seed::insert_contacts(&app.pool, workspace, "Contact", 24).await;
    app.get(&key, &format!("/v1/contacts/{}", ids[0])).await.assert_ok();
    statements.take();

    let requests: Vec<_> = ids.iter().map(|id| (key.clone(), format!("/v1/contacts/{id}"))).collect();
    let replies = in_one_batch_behind_a_lock(&app, &db, &key, &requests).await;

    for (reply, id) in replies.iter().zip(&ids) {
        reply.assert_ok();
        assert_eq!(reply.body["data"]["id"], id.to_string());
    }
    // The parked statements looked for unknown ids and found nothing.
    let recorded = statements.take_with_rows();
    let reads: Vec<u64> = recorded
        .iter()
        .filter(|statement| statement.text.contains("unnest") && statement.rows_returned > 0)
        .map(|statement| statement.rows_returned)
        .collect();
    assert_eq!(reads, [24], "rows returned by each lookup statement that found records, of {recorded:?}");
}

#[tokio::test]
async fn a_shared_lookup_gives_each_request_only_its_own_workspaces_record() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (ours, our_key) = app.workspace_with_key().await;
    let (theirs, their_key) = app.workspace_with_key().await;
    // The same id in both workspaces (the key is (workspace, id)), with different names.
    let shared = ContactSeed::named("Ours");
    shared.insert(&app.pool, ours).await;
    ContactSeed { name: "Theirs".to_owned(), ..shared.clone() }.insert(&app.pool, theirs).await;
    let only_ours = ContactSeed::named("Only ours").insert(&app.pool, ours).await;
    let their_archived = ContactSeed::named("Archived").status("archived").insert(&app.pool, theirs).await;
    let path = |id: Uuid| format!("/v1/contacts/{id}");

    let replies = in_one_batch_behind_a_lock(
        &app,
        &db,
        &our_key,
        &[
            (our_key.clone(), path(shared.id)),
            (their_key.clone(), path(shared.id)),
            (their_key.clone(), path(only_ours)),
            (our_key.clone(), path(only_ours)),
            (our_key.clone(), path(their_archived)),
            (their_key.clone(), path(their_archived)),
            (their_key.clone(), path(shared.id)),
        ],
    )
    .await;

    assert_eq!(replies[0].body["data"]["name"], "Ours", "{}", replies[0].text);
    assert_eq!(replies[1].body["data"]["name"], "Theirs", "{}", replies[1].text);
    replies[2].assert_error(404, "NOT_FOUND");
    assert_eq!(replies[3].body["data"]["name"], "Only ours", "{}", replies[3].text);
    replies[4].assert_error(404, "NOT_FOUND");
    replies[5].assert_error(404, "NOT_FOUND");
    assert_eq!(replies[6].body["data"]["name"], "Theirs", "{}", replies[6].text);
}

#[tokio::test]
async fn a_retrieve_queued_behind_a_stalled_batch_gets_a_statement_of_its_own() {
    let db = TestDatabase::create().await;
    let lookups =
        Lookups::<Contacts>::with_stalled_after(db.pool.clone(), Reads::beside(&db.pool), Duration::from_millis(200));
    let workspace = Uuid::new_v4();
    let id = ContactSeed::named("Acme").insert(&db.pool, workspace).await;
    let find = || {
        let lookups = lookups.clone();
        tokio::spawn(async move { lookups.find(workspace, id).await.expect("lookup") })
    };
    let locker = lock_contacts(&db).await;

    let stuck = find();
    until_waiting_on_the_lock(&db, 1, "the first lookup").await;
    // Queued well within the 200 ms a batch may run alone; no request comes after it.
    let queued = find();

    until_waiting_on_the_lock(&db, 2, "the lookup queued behind the stalled batch").await;
    sqlx::raw_sql("rollback").execute(&mut { locker }).await.expect("release the lock");
    for lookup in [stuck, queued] {
        let row = lookup.await.expect("lookup task");
        let name = row
            .as_deref()
            .map(|row| Contacts::record(row).expect("a contact row").name.as_str().expect("UTF-8").to_owned());
        assert_eq!(name, Some("Acme".to_owned()));
    }
}
