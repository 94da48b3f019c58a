//! The search indexes' pending lists are merged beside the projector's commits, not in
//! them; without the privilege to merge, the projector applies everything all the same.

use std::time::Duration;

use lectern_tests::nats::TestNats;
use lectern_tests::projector::{contact_event, eventually, item_created, item_data, publish, RunningProjector};
use lectern_tests::TestDatabase;
use serde_json::{json, Value};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;
use uuid::Uuid;

const WITHIN: Duration = Duration::from_secs(10);

/// Entries waiting in `index`'s pending list.
async fn pending_entries(pool: &PgPool, index: &str) -> i64 {
    sqlx::query_scalar("select pending_tuples from pgstatginindex($1::regclass)")
        .bind(index)
        .fetch_one(pool)
        .await
        .expect("read the GIN index's metapage")
}

async fn active_contacts(pool: &PgPool) -> i64 {
    sqlx::query_scalar("select count(*) from contacts where status = 'active'").fetch_one(pool).await.expect("count")
}

/// Publishes `count` contacts and one item in a fresh workspace.
async fn publish_records(nats: &TestNats, count: usize) {
    let client = nats.client().await;
    let workspace = Uuid::new_v4();
    for index in 0..count {
        let name = format!("Müller GmbH {index}");
        publish(&client, &contact_event("created", workspace, Uuid::new_v4(), 1, &name)).await;
    }
    let price = json!({ "amount": "120.00", "currency": "EUR" });
    publish(&client, &item_created(workspace, Uuid::new_v4(), item_data("Consulting hour", price, Value::Null))).await;
}

#[tokio::test]
async fn committed_contacts_and_items_leave_nothing_in_the_search_indexes_pending_lists() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    sqlx::query("create extension if not exists pgstattuple").execute(&db.pool).await.expect("pgstattuple");
    let projector = RunningProjector::start_consuming(&nats.url, db.pool.clone()).await;

    publish_records(&nats, 50).await;
    assert!(eventually(WITHIN, || async { active_contacts(&db.pool).await == 50 }).await, "not all applied");

    // Fifty rows are far below gin_pending_list_limit: PostgreSQL alone would leave
    // every one of their entries pending until some later insert paid for the merge.
    let merged = eventually(WITHIN, || async {
        pending_entries(&db.pool, "contacts_search").await == 0 && pending_entries(&db.pool, "items_search").await == 0
    })
    .await;
    assert!(
        merged,
        "entries still pending: contacts {}, items {}",
        pending_entries(&db.pool, "contacts_search").await,
        pending_entries(&db.pool, "items_search").await
    );
    projector.stop().await;
}

#[tokio::test]
async fn a_projector_that_may_not_merge_pending_lists_still_applies_every_event() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    sqlx::query("create extension if not exists pgstattuple").execute(&db.pool).await.expect("pgstattuple");
    // A role that may write the read model but owns none of it, as a least-privilege
    // deployment would run the projector.
    let role = format!("lectern_test_writer_{}", Uuid::new_v4().simple());
    for statement in [
        format!("create role {role} login"),
        format!("grant select, insert, update, delete on all tables in schema public to {role}"),
        format!("grant usage on all sequences in schema public to {role}"),
    ] {
        sqlx::query(&statement).execute(&db.pool).await.expect("create the writer role");
    }
    let as_writer = db.url.parse::<PgConnectOptions>().expect("test database URL").username(&role);
    let writer = PgPoolOptions::new().max_connections(4).connect_with(as_writer).await.expect("connect as the writer");
    let projector = RunningProjector::start_consuming(&nats.url, writer.clone()).await;

    publish_records(&nats, 20).await;
    let applied = eventually(WITHIN, || async { active_contacts(&db.pool).await == 20 }).await;
    publish_records(&nats, 5).await;
    let applied_after_refusal = eventually(WITHIN, || async { active_contacts(&db.pool).await == 25 }).await;
    let still_pending = pending_entries(&db.pool, "contacts_search").await;

    projector.stop().await;
    writer.close().await;
    for statement in [format!("drop owned by {role}"), format!("drop role {role}")] {
        sqlx::query(&statement).execute(&db.pool).await.expect("drop the writer role");
    }
    assert!(applied && applied_after_refusal, "the projector stopped applying once it could not merge");
    // Proves the merge really was refused, so the test exercised that path.
    assert!(still_pending > 0, "the writer merged pending lists it does not own");
}
