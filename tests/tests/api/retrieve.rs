//! getContact: one active contact of the key's workspace, or the same 404 for every
//! id the key may not see.

use lectern_tests::{ContactSeed, TestApp, TestDatabase};
use uuid::Uuid;

#[tokio::test]
async fn an_active_contact_is_returned_as_data_with_a_request_id() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    let id = ContactSeed::named("Acme GmbH").email("billing@acme.example").insert(&app.pool, workspace).await;

    let reply = app.get(&key, &format!("/v1/contacts/{id}")).await;

    reply.assert_ok();
    let mut keys: Vec<&str> = reply.body.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["data", "requestId"]);
    assert_eq!(reply.body["data"]["id"], id.to_string());
    assert_eq!(reply.body["data"]["email"], "billing@acme.example");
}

#[tokio::test]
async fn unknown_inactive_and_foreign_ids_are_the_same_404() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    let archived = ContactSeed::named("Archived").status("archived").insert(&app.pool, workspace).await;
    let deleted = ContactSeed::named("Deleted").status("deleted").insert(&app.pool, workspace).await;
    let foreign = ContactSeed::named("Foreign").insert(&app.pool, Uuid::new_v4()).await;

    let mut bodies = Vec::new();
    for id in [Uuid::new_v4(), archived, deleted, foreign] {
        let reply = app.get(&key, &format!("/v1/contacts/{id}")).await;
        reply.assert_error(404, "NOT_FOUND");
        bodies.push(reply.body["error"].clone());
    }
    assert!(bodies.windows(2).all(|pair| pair[0] == pair[1]), "404s differ: {bodies:?}");
}

#[tokio::test]
async fn a_malformed_id_is_a_400_naming_id() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (_, key) = app.workspace_with_key().await;

    let reply = app.get(&key, "/v1/contacts/not-a-uuid").await;

    reply.assert_error(400, "VALIDATION_ERROR");
    assert!(reply.details().iter().any(|detail| detail.starts_with("id:")), "{:?}", reply.details());
}

#[tokio::test]
async fn retrieve_takes_no_query_parameters() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    let id = ContactSeed::named("Acme").insert(&app.pool, workspace).await;

    let reply = app.get(&key, &format!("/v1/contacts/{id}?workspaceId={}", Uuid::new_v4())).await;

    reply.assert_error(400, "VALIDATION_ERROR");
    assert!(reply.details()[0].starts_with("workspaceId:"), "{:?}", reply.details());
}
