//! Batches commit without waiting for their WAL flush, so their messages are
//! acknowledged only after a flush barrier on the connection that was open before the
//! batch began (`lectern_projector::daemon::durable_acks`). Without that witness the barrier
//! proves nothing (a crash in between may have lost the commit), and the messages must
//! come back for redelivery instead.

use std::time::Duration;

use async_nats::jetstream::{self, consumer::PullConsumer};
use futures_util::StreamExt;
use lectern_projector::daemon::durable_acks::{DurableAcks, Witness};
use lectern_projector::daemon::in_hand::InHand;
use lectern_projector::stream::{ensure_consumer, ensure_stream, ACK_WAIT};
use lectern_tests::nats::TestNats;
use lectern_tests::projector::{contact_event, eventually, publish};
use lectern_tests::TestDatabase;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

const WITHIN: Duration = Duration::from_secs(10);
/// The name the barrier's sessions carry, so the test can find and end them.
const BARRIER_SESSIONS: &str = "durable-acks-under-test";

/// A pool for the barrier alone, its sessions named for [`end_barrier_sessions`].
fn barrier_pool(db: &TestDatabase) -> PgPool {
    let options: PgConnectOptions = db.url.parse().expect("test database URL");
    PgPoolOptions::new().max_connections(1).connect_lazy_with(options.application_name(BARRIER_SESSIONS))
}

/// What a crash does to the barrier's connection, without crashing the shared server.
async fn end_barrier_sessions(db: &TestDatabase) {
    let ended: i64 = sqlx::query_scalar(
        "select count(*) from (select pg_terminate_backend(pid) from pg_stat_activity \
         where datname = current_database() and application_name = $1) ended",
    )
    .bind(BARRIER_SESSIONS)
    .fetch_one(&db.pool)
    .await
    .expect("terminate the barrier's session");
    assert_eq!(ended, 1, "expected exactly one barrier session to end");
}

/// The projector's consumer, with `count` contact events published to it.
async fn consumer_with_events(nats: &TestNats, count: usize) -> PullConsumer {
    let client = nats.client().await;
    let jetstream = jetstream::new(client.clone());
    let consumer = ensure_consumer(
        &ensure_stream(&jetstream, lectern_projector::stream::DEFAULT_STREAM_REPLICAS).await.expect("stream"),
    )
    .await
    .expect("consumer");
    let workspace = Uuid::new_v4();
    for index in 0..count {
        publish(&client, &contact_event("created", workspace, Uuid::new_v4(), 1, &format!("Contact {index}"))).await;
    }
    consumer
}

/// Pulls `count` messages, waiting for redeliveries if need be.
async fn pull(consumer: &PullConsumer, count: usize) -> Vec<jetstream::Message> {
    pull_within(consumer, count, WITHIN).await
}

/// Pulls `count` messages redelivered at once, not after the ack wait.
async fn pull_redelivered(consumer: &PullConsumer, count: usize) -> Vec<jetstream::Message> {
    pull_within(consumer, count, ACK_WAIT / 2).await
}

async fn pull_within(consumer: &PullConsumer, count: usize, within: Duration) -> Vec<jetstream::Message> {
    let mut pulled = Vec::new();
    let deadline = tokio::time::Instant::now() + within;
    while pulled.len() < count && tokio::time::Instant::now() < deadline {
        let mut messages = consumer
            .batch()
            .max_messages(count - pulled.len())
            .expires(Duration::from_millis(500))
            .messages()
            .await
            .expect("pull");
        while let Some(message) = messages.next().await {
            pulled.push(message.expect("message"));
        }
    }
    assert_eq!(pulled.len(), count, "messages pulled within {within:?}");
    pulled
}

/// Messages delivered and not yet acknowledged, and the stream sequence of the ack floor.
async fn ack_state(consumer: &PullConsumer) -> (usize, u64) {
    let info = consumer.get_info().await.expect("consumer info");
    (info.num_ack_pending, info.ack_floor.stream_sequence)
}

async fn witness_once_connected(acks: &DurableAcks) -> Witness {
    let deadline = tokio::time::Instant::now() + WITHIN;
    loop {
        if let Some(witness) = acks.witness() {
            return witness;
        }
        assert!(tokio::time::Instant::now() < deadline, "the barrier connection did not open within {WITHIN:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `DurableAcks::run` on a pool of its own, as the projector runs it.
struct Barriers {
    acks: DurableAcks,
    finish: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Barriers {
    fn start(db: &TestDatabase) -> Self {
        let acks = DurableAcks::default();
        let finish = CancellationToken::new();
        let task = tokio::spawn(acks.clone().run(barrier_pool(db), finish.clone()));
        Self { acks, finish, task }
    }

    /// Asks the barriers to finish, and waits until they have.
    async fn finish(self) {
        self.finish.cancel();
        tokio::time::timeout(WITHIN, self.task).await.expect("the barriers finish").expect("barrier task");
    }
}

fn deliveries(messages: &[jetstream::Message]) -> Vec<i64> {
    messages.iter().map(|message| message.info().expect("JetStream message").delivered).collect()
}

#[tokio::test]
async fn handed_over_batches_are_acknowledged_after_the_barrier_and_all_of_them_before_the_barriers_finish() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let consumer = consumer_with_events(&nats, 6).await;
    let barriers = Barriers::start(&db);
    let acks = &barriers.acks;
    let witness = witness_once_connected(acks).await;

    let first = pull(&consumer, 3).await;
    acks.acknowledge_after_flush(witness, InHand::new(first));
    let acknowledged = eventually(WITHIN, || async { ack_state(&consumer).await == (0, 3) }).await;
    assert!(acknowledged, "after the barrier: {:?} (pending, floor), expected (0, 3)", ack_state(&consumer).await);

    // Handed over and finished at once: the last barrier still runs before `run` returns.
    let second = pull(&consumer, 3).await;
    acks.acknowledge_after_flush(witness, InHand::new(second));
    barriers.finish().await;
    // The task is over, so nothing acknowledges after this point: whatever the server
    // counts now was sent before `run` returned. The server applies acknowledgements
    // apart from answering the consumer's info, so it is asked until it has.
    let all_acknowledged = eventually(WITHIN, || async { ack_state(&consumer).await == (0, 6) }).await;
    assert!(
        all_acknowledged,
        "every handed-over message acknowledged at finish: {:?} (pending, floor), expected (0, 6)",
        ack_state(&consumer).await
    );
}

#[tokio::test]
async fn a_batch_whose_witness_connection_is_gone_is_handed_back_for_redelivery_and_never_acknowledged() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let consumer = consumer_with_events(&nats, 3).await;
    let barriers = Barriers::start(&db);
    let acks = &barriers.acks;
    let lost = witness_once_connected(acks).await;

    // The connection that witnessed the "commit" ends before the barrier: the barrier
    // fails, and the batch must come back, not be acknowledged.
    end_barrier_sessions(&db).await;
    let batch = pull(&consumer, 3).await;
    assert_eq!(deliveries(&batch), vec![1, 1, 1]);
    acks.acknowledge_after_flush(lost, InHand::new(batch));
    let redelivered = pull_redelivered(&consumer, 3).await;
    assert_eq!(deliveries(&redelivered), vec![2, 2, 2], "redelivered at once, well inside the ack wait");
    assert_eq!(ack_state(&consumer).await.1, 0, "nothing acknowledged");

    // A barrier on the new connection proves nothing about a commit the old one
    // witnessed: handed over with the stale witness, the batch comes back again.
    let current = witness_once_connected(acks).await;
    assert_ne!(current, lost, "a new barrier connection has a new generation");
    acks.acknowledge_after_flush(lost, InHand::new(redelivered));
    let again = pull_redelivered(&consumer, 3).await;
    assert_eq!(deliveries(&again), vec![3, 3, 3], "a stale witness means redelivery");
    assert_eq!(ack_state(&consumer).await.1, 0, "nothing acknowledged");

    // Witnessed by the connection that runs the barrier: acknowledged.
    acks.acknowledge_after_flush(current, InHand::new(again));
    let acknowledged = eventually(WITHIN, || async { ack_state(&consumer).await == (0, 3) }).await;
    assert!(acknowledged, "with a live witness: {:?} (pending, floor), expected (0, 3)", ack_state(&consumer).await);
    barriers.finish().await;
}
