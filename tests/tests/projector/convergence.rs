//! Convergence: whatever the order, duplication and batching of a history, and however
//! many projectors share the consumer, the read model ends where applying the history
//! once, in version order, ends.

use std::time::Duration;

use async_nats::jetstream;
use lectern_projector::apply::{apply_batch, CommitMode, Received};
use lectern_projector::stream::{CONSUMER, STREAM};
use lectern_tests::nats::TestNats;
use lectern_tests::projector::{contact_event, eventually, publish, RunningProjector};
use lectern_tests::TestDatabase;
use serde_json::{json, Value};
use sqlx::PgPool;
use uuid::Uuid;

/// A small deterministic PRNG (xorshift64*), so every failure names a seed that
/// reproduces it; lectern-tests does not depend on `rand`.
struct Rng(u64);

impl Rng {
    fn seeded(seed: u64) -> Self {
        // Spread small seeds over the state; xorshift's state must never be zero.
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..bound` (`bound` > 0).
    fn below(&mut self, bound: usize) -> usize {
        usize::try_from(self.next() % u64::try_from(bound).expect("bound fits u64")).expect("below bound fits usize")
    }

    fn coin(&mut self) -> bool {
        self.next() & 1 == 1
    }

    fn pick<'a, T>(&mut self, choices: &'a [T]) -> &'a T {
        &choices[self.below(choices.len())]
    }

    fn shuffle<T>(&mut self, items: &mut [T]) {
        for last in (1..items.len()).rev() {
            let other = self.below(last + 1);
            items.swap(last, other);
        }
    }

    /// `Some(make(..))` half of the time.
    fn maybe(&mut self, make: impl FnOnce(&mut Self) -> String) -> Option<String> {
        if self.coin() {
            Some(make(self))
        } else {
            None
        }
    }

    fn uuid(&mut self) -> Uuid {
        Uuid::from_u64_pair(self.next(), self.next())
    }
}

const KINDS: [&str; 5] = ["created", "updated", "archived", "restored", "deleted"];

fn random_contact_data(rng: &mut Rng) -> Value {
    let name = format!("{} {}", rng.pick(&["Acme", "Globex", "Initech", "Umbrella", "Hooli"]), rng.below(1_000));
    json!({
        "name": name,
        "email": rng.maybe(|rng| format!("billing{}@example.com", rng.below(100))),
        "phone": rng.maybe(|rng| format!("+49 30 {}", rng.below(1_000_000))),
        "address": rng.maybe(|rng| format!("Hauptstr. {}, Berlin", rng.below(200))),
        "tin": rng.maybe(|rng| format!("DE{:09}", rng.below(1_000_000_000))),
        "isCustomer": rng.coin(),
        "isSupplier": rng.coin(),
        "createdAt": format!("2025-0{}-1{}T08:{:02}:00.{:03}Z", 1 + rng.below(9), rng.below(10), rng.below(60), rng.below(1_000)),
    })
}

fn random_money(rng: &mut Rng) -> Value {
    if rng.coin() {
        return Value::Null;
    }
    let sign = if rng.below(4) == 0 { "-" } else { "" };
    json!({
        "amount": format!("{sign}{}.{:0width$}", rng.below(100_000), rng.below(100), width = 2),
        "currency": rng.pick(&["EUR", "USD", "CHF"]),
    })
}

fn random_item_data(rng: &mut Rng) -> Value {
    json!({
        "name": format!("{} {}", rng.pick(&["Screw", "Consulting hour", "Bolt", "Licence"]), rng.below(1_000)),
        "sku": rng.maybe(|rng| format!("SKU-{}", rng.below(10_000))),
        "description": rng.maybe(|rng| format!("Description {}", rng.below(10_000))),
        "type": rng.pick(&["product", "service"]),
        "unit": rng.maybe(|rng| rng.pick(&["piece", "hour", "kg"]).to_string()),
        "salePrice": random_money(rng),
        "purchasePrice": random_money(rng),
        "createdAt": format!("2025-03-0{}T1{}:00:00Z", 1 + rng.below(9), rng.below(10)),
    })
}

/// One event of a generated history, before it is given a workspace.
#[derive(Clone, Debug)]
struct HistoryEvent {
    /// Fixed per event, so a duplicate is the very same message again.
    event_id: Uuid,
    segment: &'static str,
    entity: Uuid,
    version: i64,
    kind: &'static str,
    data: Option<Value>,
}

impl HistoryEvent {
    /// The message this event is, published in `workspace` as stream message `sequence`.
    fn received(&self, workspace: Uuid, sequence: u64) -> Received {
        let prefix = if self.segment == "items" { "item" } else { "contact" };
        let mut event = json!({
            "eventId": self.event_id,
            "type": format!("{prefix}.{}", self.kind),
            "workspaceId": workspace,
            "entityId": self.entity,
            "version": self.version,
            "occurredAt": "2026-11-21T10:15:30.120Z",
        });
        if let Some(data) = &self.data {
            event["data"] = data.clone();
        }
        Received {
            subject: format!("changes.{workspace}.{}.{}", self.segment, self.entity),
            stream_sequence: sequence,
            payload: event.to_string().into_bytes(),
        }
    }
}

/// A few contacts and items, each with versions 1..=n of random kinds, in version order.
fn random_history(rng: &mut Rng) -> Vec<HistoryEvent> {
    let mut history = Vec::new();
    for segment in ["contacts", "contacts", "contacts", "items", "items"] {
        let entity = rng.uuid();
        for version in 1..=1 + rng.below(10) {
            let kind = *rng.pick(&KINDS);
            let data = match (kind, segment) {
                ("archived" | "deleted", _) => None,
                (_, "items") => Some(random_item_data(rng)),
                _ => Some(random_contact_data(rng)),
            };
            let version = i64::try_from(version).expect("small version");
            history.push(HistoryEvent { event_id: rng.uuid(), segment, entity, version, kind, data });
        }
    }
    history.sort_by_key(|event| event.version);
    history
}

/// Every row of `workspace` in both tables, every column but the workspace and the
/// change position, as text. Positions follow the order batches commit in, which
/// arrival changes; the changes feed's tests check them.
async fn rows_of(pool: &PgPool, workspace: Uuid) -> Vec<String> {
    sqlx::query_scalar(
        "select 'contact ' || (to_jsonb(c) - 'workspace_id' - 'change_position')::text from contacts c
         where workspace_id = $1
         union all
         select 'item ' || (to_jsonb(i) - 'workspace_id' - 'change_position')::text from items i
         where workspace_id = $1
         order by 1",
    )
    .bind(workspace)
    .fetch_all(pool)
    .await
    .expect("read rows")
}

async fn apply(pool: &PgPool, batch: &[Received], mode: CommitMode, seed: u64) {
    let applied =
        apply_batch(pool, batch, mode).await.unwrap_or_else(|error| panic!("seed {seed}: apply failed: {error}"));
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
