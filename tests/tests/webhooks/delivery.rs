//! What a delivery is: signed as Standard Webhooks says, thin (no record), announcing a
//! change the feed shows from the receiver's own token.

use std::time::Duration;

use lectern_api::keys::Scope;
use lectern_tests::seed::ContactSeed;
use lectern_tests::webhooks::{verify_with_standardwebhooks, Receiver};
use lectern_tests::{database::TestDatabase, TestApp};
use uuid::Uuid;

use crate::endpoints::{self, list, register, webhooks};
use crate::feed_copy::FeedCopy;

const DELIVERED_WITHIN: Duration = Duration::from_secs(10);

#[tokio::test]
async fn a_commit_is_announced_by_a_signed_thin_delivery_and_the_feed_from_the_receivers_token_shows_it() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let workspace = Uuid::new_v4();
    let key = app.key(workspace, &[Scope::ContactsRead]).await;
    let receiver = Receiver::start().await;
    let endpoint = register(&db.url, workspace, &receiver.url, &["contacts"]).await;
    let mut follower = FeedCopy::new("contacts", &key);
    follower.pull(&app.url("")).await;
    assert!(follower.held.is_empty());

    let id = ContactSeed::named("Announced Ltd").insert(&db.pool, workspace).await;

    let deliveries = receiver.wait_for(DELIVERED_WITHIN, "a delivery", |deliveries| !deliveries.is_empty()).await;
    let body = deliveries[0].json();
    assert_eq!(body["type"], "contacts.changed", "{body}");
    assert_eq!(body["data"]["workspaceId"], workspace.to_string(), "{body}");
    assert_eq!(body["data"]["resource"], "contacts", "{body}");
    assert!(body["timestamp"].as_str().is_some_and(|at| chrono::DateTime::parse_from_rfc3339(at).is_ok()), "{body}");
    assert!(!deliveries[0].body.contains("Announced"), "a delivery carries no record: {}", deliveries[0].body);
    assert!(deliveries[0].id().starts_with("msg_"), "{:?}", deliveries[0].headers);
    assert_eq!(deliveries[0].headers.get("content-type").map(String::as_str), Some("application/json"));
    follower.pull(&app.url("")).await;
    assert!(follower.held.contains_key(&id.to_string()), "the announced change is in the feed: {:?}", follower.held);
    verify_with_standardwebhooks(&deliveries, &[&endpoint.secret]).await;
}

#[tokio::test]
async fn the_delivery_log_records_each_attempt_and_no_listing_ever_shows_the_secret() {
    let db = TestDatabase::create().await;
    let _app = TestApp::spawn(db.pool.clone()).await;
    let workspace = Uuid::new_v4();
    let receiver = Receiver::start().await;
    let endpoint = register(&db.url, workspace, &receiver.url, &["contacts", "items"]).await;

    ContactSeed::named("Logged Ltd").insert(&db.pool, workspace).await;
    let deliveries = receiver.wait_for(DELIVERED_WITHIN, "a delivery", |deliveries| !deliveries.is_empty()).await;

    let logged = endpoints::deliveries(&db.url, endpoint.id).await;
    let entry = logged.iter().find(|entry| entry["id"] == deliveries[0].id()).expect("the delivery is in the log");
    assert_eq!(entry["state"], "delivered", "{entry}");
    assert_eq!(entry["attempts"], 1, "{entry}");
    assert_eq!(entry["lastStatus"], 204, "{entry}");
    assert_eq!(entry["resource"], "contacts", "{entry}");
    let listed = list(&db.url).await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["id"], endpoint.id.to_string());
    assert_eq!(listed[0]["enabled"], true);
    assert_eq!(listed[0]["resources"], serde_json::json!(["contacts", "items"]));
    let secret_body = endpoint.secret.trim_start_matches("whsec_");
    for args in [vec!["list"], vec!["list", "--output", "json"], vec!["deliveries", &endpoint.id.to_string()]] {
        let run = webhooks(&db.url, &args, &[]).await;
        run.assert_success();
        assert!(!run.stdout.contains(secret_body) && !run.stderr.contains(secret_body), "{args:?} shows the secret");
    }
    let stored: Vec<u8> =
        sqlx::query_scalar("select secret_sealed from webhook_endpoints").fetch_one(&db.pool).await.expect("row");
    let decoded =
        base64::Engine::decode(&base64::engine::general_purpose::STANDARD, secret_body).expect("base64 secret");
    assert!(!stored.windows(decoded.len()).any(|window| window == decoded.as_slice()), "the secret is stored in clear");
}
