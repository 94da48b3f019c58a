//! The consumer's short ack wait: what a killed projector had in hand comes back within
//! seconds, what a live projector holds for longer than the ack wait stays its own, and
//! a consumer created by an earlier version gets the short ack wait too.

use std::time::{Duration, Instant};

use async_nats::jetstream::consumer::{self, AckPolicy};
use lectern_projector::stream::{ensure_consumer, ACK_WAIT, CONSUMER, STREAM, SUBJECTS};
use lectern_tests::nats::TestNats;
use lectern_tests::projector::{eventually, ProjectorProcess, RunningProjector};
use lectern_tests::TestDatabase;
use sqlx::Executor;

use crate::process::{
    admin, allow_connections, changes, consumer_info, publish_all, terminate_sessions, Fleet, CATCH_UP,
};

/// How soon after a restart the batch a killed projector had in hand must be visible:
/// a few seconds past the ack wait, where with JetStream's default it took half a minute.
const REDELIVERED_WITHIN: Duration = Duration::from_secs(12);

#[tokio::test]
async fn after_kill_9_the_batch_the_projector_had_in_hand_is_visible_within_seconds_of_the_restart() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let fleet = Fleet::new(50);
    publish_all(&changes(&nats).await, &fleet.events(1..=1)).await;
    // The database refuses the projector: it pulls the batch and holds it, retrying.
    let mut admin = admin().await;
    allow_connections(&mut admin, &db.name, false).await;
    terminate_sessions(&mut admin, &db.name).await;
    let first = ProjectorProcess::on(&nats.url, &db.url).spawn();
    let in_hand = eventually(CATCH_UP, || async {
        unacknowledged(&nats).await == 50 && first.log().contains("applying a batch failed")
    })
    .await;
    assert!(
        in_hand,
        "the projector never held the batch; {:#?}\nits log:\n{}",
        consumer_info(&nats).await,
        first.log()
    );

    first.kill().await;
    allow_connections(&mut admin, &db.name, true).await;
    let restarted = Instant::now();
    let second = ProjectorProcess::on(&nats.url, &db.url).spawn();
    fleet.assert_all_reach(&db.pool, 1, &second).await;
    let took = restarted.elapsed();

    assert!(
        took < REDELIVERED_WITHIN,
        "the killed projector's batch became visible {took:?} after the restart, not within {REDELIVERED_WITHIN:?}"
    );
    eprintln!("after kill -9, the batch in hand was visible {took:?} after the restart");
    second.stop().await;
}

/// Messages delivered and not acknowledged; none before the projector creates its consumer.
async fn unacknowledged(nats: &TestNats) -> usize {
    let Ok(stream) = changes(nats).await.get_stream(STREAM).await else { return 0 };
    stream.consumer_info(CONSUMER).await.map_or(0, |info| info.num_ack_pending)
}

#[tokio::test]
async fn a_batch_held_up_longer_than_the_ack_wait_stays_in_hand_and_is_not_redelivered() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let fleet = Fleet::new(10);
    publish_all(&changes(&nats).await, &fleet.events(1..=1)).await;
    let mut lock = db.pool.begin().await.expect("begin the lock transaction");
    lock.execute("lock table contacts in access exclusive mode").await.expect("lock contacts");
    // Started after publishing, so its first pull takes all ten in one batch, and it has
    // room to pull again: whatever is redelivered meanwhile is delivered to it.
    let projector = RunningProjector::start_consuming(&nats.url, db.pool.clone()).await;
    let held = eventually(CATCH_UP, || async { db.sessions_waiting_on_a_lock().await > 0 }).await;
    assert!(held, "the projector never started writing its batch");

    tokio::time::sleep(ACK_WAIT * 3).await;
    lock.rollback().await.expect("release the lock");

    let applied = eventually(CATCH_UP, || async { fleet.at_version(&db.pool, 1).await == 10 }).await;
    assert!(applied, "the batch was not applied once the lock was released");
    let consumer = consumer_info(&nats).await;
    assert_eq!(consumer.delivered.consumer_sequence, 10, "each message delivered once: {consumer:#?}");
    projector.stop().await;
}

#[tokio::test]
async fn a_consumer_left_by_an_earlier_version_gets_the_short_ack_wait_and_keeps_its_other_settings() {
    let nats = TestNats::start().await;
    let stream = changes(&nats).await.get_stream(STREAM).await.expect("the CHANGES stream");
    let earlier = consumer::pull::Config {
        durable_name: Some(CONSUMER.to_owned()),
        ack_policy: AckPolicy::Explicit,
        ack_wait: Duration::from_secs(30),
        filter_subject: SUBJECTS.to_owned(),
        max_ack_pending: 20_000,
        max_deliver: 50,
        description: Some("tuned by an operator".to_owned()),
        ..Default::default()
    };
    let _: consumer::PullConsumer = stream.create_consumer(earlier).await.expect("the earlier consumer");

    let returned = ensure_consumer(&stream).await.expect("ensure the consumer");

    let config = stream.consumer_info(CONSUMER).await.expect("consumer info").config;
    assert_eq!(config.ack_wait, ACK_WAIT, "the server's consumer");
    assert_eq!(returned.cached_info().config.ack_wait, ACK_WAIT, "the consumer the projector pulls from");
    assert_eq!((config.max_deliver, config.description.as_deref()), (50, Some("tuned by an operator")));
}
