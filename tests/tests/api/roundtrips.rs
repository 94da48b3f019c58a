//! The hot path costs one SQL round trip: once a key is cached, a request sends exactly
//! one statement to PostgreSQL and never reads the key table.

use lectern_tests::{ContactSeed, TestApp, TestDatabase};

use crate::statements::{record_statements, Statements};

/// Requests `path` until one is served without a key lookup. Creating the key notifies
/// every API process; that notification may reach the app after a first request
/// cached the key, and evict it once more.
async fn until_key_is_cached(app: &TestApp, key: &str, path: &str, statements: &Statements) {
    for _ in 0..50 {
        statements.take();
        app.get(key, path).await.assert_ok();
        if statements.take_key_lookups().is_empty() {
            return;
        }
    }
    panic!("the key was looked up on each of 50 requests: it is never cached");
}

#[tokio::test]
async fn each_request_sends_exactly_one_statement_once_its_key_is_cached() {
    let (statements, _guard) = record_statements();
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    let id = ContactSeed::named("Acme GmbH").insert(&app.pool, workspace).await;
    lectern_tests::seed::insert_contacts(&app.pool, workspace, "Contact", 5).await;
    let first = app.get(&key, "/v1/contacts?limit=2").await;
    first.assert_ok();
    let cursor = lectern_tests::app::urlencode(first.body["page"]["nextCursor"].as_str().unwrap());
    until_key_is_cached(&app, &key, "/v1/contacts?limit=2", &statements).await;
    // The first search in a workspace counts its records, to choose how to search it.
    app.get(&key, "/v1/contacts?search=acme").await.assert_ok();
    statements.take();

    for path in [
        "/v1/contacts".to_owned(),
        format!("/v1/contacts?limit=2&cursor={cursor}"),
        "/v1/contacts?search=acme&sort=name&type=customer".to_owned(),
        "/v1/contacts?search=acme".to_owned(),
        format!("/v1/contacts/{id}"),
    ] {
        app.get(&key, &path).await.assert_ok();

        let sent = statements.take();
        assert_eq!(sent.len(), 1, "{path} sent {} statements: {sent:#?}", sent.len());
        assert!(!sent[0].contains("api_keys"), "{path} read the key table: {sent:?}");
    }
}

#[tokio::test]
async fn a_request_refused_for_its_parameters_sends_no_statement() {
    let (statements, _guard) = record_statements();
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (_, key) = app.workspace_with_key().await;
    until_key_is_cached(&app, &key, "/v1/contacts", &statements).await;

    app.get(&key, "/v1/contacts?limit=0&cursor=forged").await.assert_error(400, "VALIDATION_ERROR");

    assert_eq!(statements.take(), Vec::<String>::new());
}
