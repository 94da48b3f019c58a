//! Unchanged first pages are served from memory, and any committed change to a
//! workspace's records (by the projector or anyone else) evicts that workspace's pages
//! through the read model's `lectern_changes` notifications.

use std::time::{Duration, Instant};

use lectern_tests::{ContactSeed, Reply, TestApp, TestDatabase};
use uuid::Uuid;

use crate::statements::{record_statements, Statements};

const WITHIN: Duration = Duration::from_secs(10);

/// Repeats `path` until a request sends no statement (the page came from the cache, which
/// needs the change listener connected first); returns that reply.
async fn until_served_from_cache(app: &TestApp, key: &str, path: &str, statements: &Statements) -> Reply {
    let deadline = Instant::now() + WITHIN;
    loop {
        statements.take();
        let reply = app.get(key, path).await;
        reply.assert_ok();
        if statements.take().is_empty() {
            return reply;
        }
        assert!(Instant::now() < deadline, "{path} was never served from the cache");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn names(reply: &Reply) -> Vec<String> {
    reply.data().iter().map(|record| record["name"].as_str().unwrap().to_owned()).collect()
}

#[tokio::test]
async fn an_unchanged_first_page_is_served_again_without_a_statement_and_identical_records() {
    let (statements, _guard) = record_statements();
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    lectern_tests::seed::insert_contacts(&app.pool, workspace, "Contact", 5).await;
    let from_database = app.get(&key, "/v1/contacts?limit=3").await;

    let from_cache = until_served_from_cache(&app, &key, "/v1/contacts?limit=3", &statements).await;

    assert_eq!(from_cache.body["data"], from_database.body["data"]);
    assert_eq!(from_cache.body["page"]["hasMore"], true);
    assert_ne!(from_cache.body["requestId"], from_database.body["requestId"], "each response has its own id");
    // The cursor of a cached page still leads on.
    let cursor = lectern_tests::app::urlencode(from_cache.body["page"]["nextCursor"].as_str().unwrap());
    let next = app.get(&key, &format!("/v1/contacts?limit=3&cursor={cursor}")).await;
    next.assert_ok();
    assert_eq!(next.data().len(), 2);
}

#[tokio::test]
async fn a_change_written_directly_in_sql_evicts_the_workspaces_cached_first_page() {
    let (statements, _guard) = record_statements();
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    ContactSeed::named("Later").at(100).insert(&app.pool, workspace).await;
    until_served_from_cache(&app, &key, "/v1/contacts", &statements).await;

    ContactSeed::named("Earlier").at(1).insert(&app.pool, workspace).await;

    let deadline = Instant::now() + WITHIN;
    loop {
        let reply = app.get(&key, "/v1/contacts").await;
        if names(&reply) == ["Earlier", "Later"] {
            break;
        }
        assert!(Instant::now() < deadline, "the cached first page was never evicted: {:?}", names(&reply));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn archiving_a_record_removes_it_from_the_cached_first_page() {
    let (statements, _guard) = record_statements();
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    let gone = ContactSeed::named("Soon archived").at(1).insert(&app.pool, workspace).await;
    ContactSeed::named("Stays").at(2).insert(&app.pool, workspace).await;
    until_served_from_cache(&app, &key, "/v1/contacts?sort=name", &statements).await;

    sqlx::query("update contacts set status = 'archived', version = version + 1 where workspace_id = $1 and id = $2")
        .bind(workspace)
        .bind(gone)
        .execute(&app.pool)
        .await
        .unwrap();

    let deadline = Instant::now() + WITHIN;
    while names(&app.get(&key, "/v1/contacts?sort=name").await) != ["Stays"] {
        assert!(Instant::now() < deadline, "the archived contact is still served from the cache");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn another_workspaces_change_leaves_a_first_page_cached() {
    let (statements, _guard) = record_statements();
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    ContactSeed::named("Mine").insert(&app.pool, workspace).await;
    until_served_from_cache(&app, &key, "/v1/contacts", &statements).await;

    ContactSeed::named("Theirs").insert(&app.pool, Uuid::new_v4()).await;
    // Give the notification time to arrive, then expect the page still cached.
    tokio::time::sleep(Duration::from_millis(300)).await;
    statements.take();
    let reply = app.get(&key, "/v1/contacts").await;

    assert_eq!(names(&reply), ["Mine"]);
    assert_eq!(statements.take(), Vec::<String>::new(), "another workspace's change evicted this page");
}
