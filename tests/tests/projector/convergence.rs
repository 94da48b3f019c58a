//! Convergence: whatever the order, duplication and batching of a history, and however
//! many projectors share the consumer, the read model ends where applying the history
//! once, in version order, ends.

use lectern_projector::stream::StreamId;
use std::time::Duration;

use async_nats::jetstream;
use lectern_projector::apply::{apply_batch, CommitMode, Received};
use lectern_projector::stream::{CONSUMER, STREAM};
use lectern_tests::history::{random_contact_data, random_history, HistoryEvent, Rng};
use lectern_tests::nats::TestNats;
use lectern_tests::projector::{contact_event, eventually, publish, RunningProjector};
use lectern_tests::TestDatabase;
use serde_json::Value;
use sqlx::PgPool;
use uuid::Uuid;

/// Every row of `workspace` in both tables, every column but the workspace and the
/// change position, as text. Positions follow the order batches commit in, which
/// arrival changes; the changes feed's tests check them.
async fn rows_of(pool: &PgPool, workspace: Uuid) -> Vec<String> {
    sqlx::query_scalar(
        "select 'contact ' || (to_jsonb(c) - 'workspace_id' - 'change_xid')::text from contacts c
         where workspace_id = $1
         union all
         select 'item ' || (to_jsonb(i) - 'workspace_id' - 'change_xid')::text from items i
         where workspace_id = $1
         order by 1",
    )
    .bind(workspace)
    .fetch_all(pool)
    .await
    .expect("read rows")
}

async fn apply(pool: &PgPool, batch: &[Received], mode: CommitMode, seed: u64) {
    let applied = apply_batch(pool, StreamId::UNNAMED, batch, mode)
        .await
        .unwrap_or_else(|error| panic!("seed {seed}: apply failed: {error}"));
    assert_eq!(applied.dead_letters, 0, "seed {seed}: a generated event was dead-lettered");
}

#[tokio::test]
async fn shuffled_duplicated_and_batched_histories_end_where_the_in_order_history_ends() {
    let db = TestDatabase::create().await;

    for seed in 1..=30 {
        let mut rng = Rng::seeded(seed);
        let history = random_history(&mut rng);
        let (shuffled_workspace, in_order_workspace) = (rng.uuid(), rng.uuid());
        let mut sequence = 0;
        let mut next_sequence = || {
            sequence += 1;
            sequence
        };

        for event in &history {
            apply(&db.pool, &[event.received(in_order_workspace, next_sequence())], CommitMode::Flushed, seed).await;
        }
        let mut arrivals = history.clone();
        for _ in 0..rng.below(history.len() + 1) {
            arrivals.push(rng.pick(&history).clone());
        }
        rng.shuffle(&mut arrivals);
        let mut messages: Vec<Received> =
            arrivals.iter().map(|event| event.received(shuffled_workspace, next_sequence())).collect();
        while !messages.is_empty() {
            let size = (1 + rng.below(8)).min(messages.len());
            let batch: Vec<Received> = messages.drain(..size).collect();
            // Both ways a batch commits: as a single statement or a transaction before
            // the flush (one table's events, or both), and as a flushed transaction.
            let mode = if rng.coin() { CommitMode::BeforeFlush } else { CommitMode::Flushed };
            apply(&db.pool, &batch, mode, seed).await;
        }

        let in_order = rows_of(&db.pool, in_order_workspace).await;
        let shuffled = rows_of(&db.pool, shuffled_workspace).await;
        assert_eq!(in_order.len(), 5, "seed {seed}: every entity has a row");
        let only_shuffled: Vec<&String> = shuffled.iter().filter(|row| !in_order.contains(row)).collect();
        let only_in_order: Vec<&String> = in_order.iter().filter(|row| !shuffled.contains(row)).collect();
        assert!(
            only_shuffled.is_empty() && only_in_order.is_empty(),
            "seed {seed}: shuffled arrival diverged from in-order application\n\
             arrivals (entity@version type): {:?}\nshuffled rows: {only_shuffled:#?}\nin-order rows: {only_in_order:#?}",
            arrivals
                .iter()
                .map(|event| format!("{}@{} {}", &event.entity.to_string()[..8], event.version, event.kind))
                .collect::<Vec<_>>()
        );
    }
}

#[tokio::test]
async fn an_archive_keeps_the_same_data_whether_the_update_before_it_arrives_before_or_after_it() {
    let db = TestDatabase::create().await;
    let mut rng = Rng::seeded(7);
    let entity = rng.uuid();
    let event = |event_id, version, kind, data: Option<Value>| HistoryEvent {
        event_id,
        segment: "contacts",
        entity,
        version,
        kind,
        data,
    };
    let created = event(rng.uuid(), 1, "created", Some(random_contact_data(&mut rng)));
    let updated = event(rng.uuid(), 2, "updated", Some(random_contact_data(&mut rng)));
    let archived = event(rng.uuid(), 3, "archived", None);
    let (in_order_workspace, late_update_workspace) = (rng.uuid(), rng.uuid());

    for (sequence, event) in [&created, &updated, &archived].into_iter().enumerate() {
        apply(&db.pool, &[event.received(in_order_workspace, 1 + sequence as u64)], CommitMode::Flushed, 7).await;
    }
    for (sequence, event) in [&created, &archived, &updated].into_iter().enumerate() {
        apply(&db.pool, &[event.received(late_update_workspace, 10 + sequence as u64)], CommitMode::BeforeFlush, 7)
            .await;
    }

    assert_eq!(
        rows_of(&db.pool, late_update_workspace).await,
        rows_of(&db.pool, in_order_workspace).await,
        "left: v1, v3 archived, then v2; right: v1, v2, v3 archived"
    );
}

// --------------------------------------------------------- two projectors racing

/// Whether `count` pull requests are waiting on the shared consumer at once.
async fn pullers_waiting(client: &async_nats::Client, count: usize) -> bool {
    let Ok(stream) = jetstream::new(client.clone()).get_stream(STREAM).await else { return false };
    stream.consumer_info(CONSUMER).await.is_ok_and(|info| info.num_waiting >= count)
}

#[tokio::test]
async fn two_projectors_on_one_consumer_bring_every_contact_to_its_highest_version() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let first = RunningProjector::start(&nats.url, db.pool.clone()).await;
    let second = RunningProjector::start(&nats.url, db.pool.clone()).await;
    let client = nats.client().await;
    let workspace = Uuid::new_v4();
    let contacts: Vec<Uuid> = (0..50).map(|_| Uuid::new_v4()).collect();
    let mut events: Vec<Value> = contacts
        .iter()
        .enumerate()
        .flat_map(|(index, id)| {
            (1..=40).map(move |version| {
                let kind = if version == 1 { "created" } else { "updated" };
                contact_event(kind, workspace, *id, version, &format!("Contact {index} version {version}"))
            })
        })
        .collect();
    Rng::seeded(2_000).shuffle(&mut events);
    let both_pulling = eventually(Duration::from_secs(10), || pullers_waiting(&client, 2)).await;
    assert!(both_pulling, "the two projectors are not both pulling from the consumer");

    for event in &events {
        publish(&client, event).await;
    }

    let expected: Vec<(Uuid, String, i64, String)> = {
        let mut expected: Vec<_> = contacts
            .iter()
            .enumerate()
            .map(|(index, id)| (*id, "active".to_owned(), 40, format!("Contact {index} version 40")))
            .collect();
        expected.sort();
        expected
    };
    let final_rows = || async {
        sqlx::query_as::<_, (Uuid, String, i64, String)>(
            "select id, status, version, name from contacts where workspace_id = $1 order by id",
        )
        .bind(workspace)
        .fetch_all(&db.pool)
        .await
        .expect("read contacts")
    };
    let converged = eventually(Duration::from_secs(30), || async { final_rows().await == expected }).await;
    let rows = final_rows().await;
    let behind: Vec<_> = rows.iter().filter(|row| !expected.contains(row)).collect();
    assert!(converged, "{} of 50 contacts are not at version 40: {behind:?}", 50 - (rows.len() - behind.len()));
    first.stop().await;
    second.stop().await;
}
