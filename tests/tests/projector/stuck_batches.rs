//! A batch in hand that does not commit within the bound is reported where operators
//! look: readiness, the stuck-batches gauge and `lectern-projector status`; and it stops
//! being reported once it commits. The real binary, with a bound of 2 s.

use std::time::Duration;

use lectern_tests::nats::TestNats;
use lectern_tests::projector::{contact_event, eventually, publish, ProjectorProcess};
use lectern_tests::TestDatabase;
use serde_json::{json, Value};
use sqlx::Executor;
use uuid::Uuid;

use crate::process::status;

const STUCK: &str = "lectern_projector_batches_stuck";
/// Long enough for a shared, busy machine; the bound under test is 2 s.
const WITHIN: Duration = Duration::from_secs(60);

/// The stuck batches `status --output json` lists.
async fn stuck_in_status(nats: &TestNats, db: &TestDatabase) -> Value {
    status(&nats.url, &db.url).await["stuckBatches"].clone()
}

#[tokio::test]
async fn a_batch_in_hand_past_the_bound_shows_in_readiness_the_gauges_and_status_until_it_commits() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let client = nats.client().await;
    let workspace = Uuid::new_v4();
    for index in 0..3 {
        publish(&client, &contact_event("created", workspace, Uuid::new_v4(), 1, &format!("Contact {index}"))).await;
    }
    let mut lock = db.pool.begin().await.expect("begin the lock transaction");
    lock.execute("lock table contacts in access exclusive mode").await.expect("lock contacts");
    // Started after publishing, so its one batch holds all three.
    let projector =
        ProjectorProcess::on(&nats.url, &db.url).envs(&[("LECTERN_PROJECTOR_STUCK_AFTER", "2")]).start().await;
    let held = eventually(WITHIN, || async { db.sessions_waiting_on_a_lock().await > 0 }).await;
    assert!(held, "the projector never started writing its batch\n{}", projector.service.stderr());

    let not_ready = projector.wait_for_readiness(503).await;
    let counted = eventually(WITHIN, || async { projector.metrics().await.value(STUCK, &[]) == Some(1.0) }).await;
    let listed =
        eventually(WITHIN, || async { stuck_in_status(&nats, &db).await.as_array().is_some_and(|a| a.len() == 1) })
            .await;
    let stuck = stuck_in_status(&nats, &db).await;
    // Delivered is not applied: the lag counts the three messages the stalled batch holds.
    let lag_while_stuck = projector.metrics().await.value("lectern_projector_consumer_lag", &[]);
    lock.rollback().await.expect("release the lock");

    let problems = not_ready.body["problems"].to_string();
    assert!(problems.contains("1 batch(es) in hand for more than 2 s"), "{problems}");
    assert!(counted, "the gauge never counted the batch:\n{}", projector.metrics().await.text);
    assert!(listed, "status never listed the batch: {stuck}");
    assert_eq!((&stuck[0]["firstSequence"], &stuck[0]["messages"]), (&json!(1), &json!(3)), "{stuck}");
    assert_eq!(lag_while_stuck, Some(3.0), "the consumer lag while three messages are in hand, uncommitted");
    assert_eq!(projector.wait_for_readiness(200).await.body, json!({ "status": "ready" }));
    let cleared = eventually(WITHIN, || async {
        projector.metrics().await.value(STUCK, &[]) == Some(0.0) && stuck_in_status(&nats, &db).await == json!([])
    })
    .await;
    assert!(cleared, "still reported after the commit: {}", stuck_in_status(&nats, &db).await);
    projector.stop().await;
}
