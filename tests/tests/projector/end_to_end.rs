//! Events published to NATS are served by the API.

use std::time::Duration;

use lectern_tests::nats::TestNats;
use lectern_tests::projector::{contact_event, eventually, publish, RunningProjector};
use lectern_tests::{TestApp, TestDatabase};
use uuid::Uuid;

#[tokio::test]
async fn a_published_contact_event_is_served_by_list_and_retrieve() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let projector = RunningProjector::start(&nats.url, db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    let id = Uuid::new_v4();

    publish(&nats.client().await, &contact_event("created", workspace, id, 1, "Acme GmbH")).await;

    let served = eventually(Duration::from_secs(10), || async {
        app.get(&key, &format!("/v1/contacts/{id}")).await.status == 200
    })
    .await;
    assert!(served, "the contact never appeared");
    let list = app.get(&key, "/v1/contacts").await;
    list.assert_ok();
    assert_eq!(list.names(), ["Acme GmbH"]);
    assert_eq!(list.data()[0]["createdAt"], "2025-02-03T08:00:00.000Z");
    projector.stop().await;
}
