//! The apply rule, through the real run loop: an event takes effect only when its
//! version is above the stored one; archived and deleted leave tombstones; restored
//! brings a record back; workspaces never touch each other; items' money stays exact.

use std::time::Duration;

use async_nats::jetstream;
use lectern_projector::stream::{CONSUMER, STREAM};
use lectern_tests::nats::TestNats;
use lectern_tests::projector::{contact_event, contact_row, eventually, publish, RunningProjector};
use lectern_tests::{TestApp, TestDatabase};
use serde_json::{json, Value};
use sqlx::PgPool;
use uuid::Uuid;

/// How long the projector may take to catch up with what was published.
const CATCH_UP: Duration = Duration::from_secs(10);

/// Whether every message published so far was applied, committed and acknowledged
/// (the projector acknowledges only after its transaction commits).
async fn all_acknowledged(client: &async_nats::Client) -> bool {
    let Ok(mut stream) = jetstream::new(client.clone()).get_stream(STREAM).await else { return false };
    let Ok(last_sequence) = stream.info().await.map(|info| info.state.last_sequence) else { return false };
    let Ok(consumer) = stream.consumer_info(CONSUMER).await else { return false };
    consumer.num_pending == 0 && consumer.num_ack_pending == 0 && consumer.ack_floor.stream_sequence == last_sequence
}

/// Waits until the projector has caught up with everything published so far.
async fn caught_up(client: &async_nats::Client) {
    assert!(
        eventually(CATCH_UP, || all_acknowledged(client)).await,
        "the projector did not catch up within {CATCH_UP:?}"
    );
}

/// Publishes each event and waits for it to be applied before the next, so each one
/// meets the stored row rather than its neighbours in a batch.
async fn publish_one_at_a_time(client: &async_nats::Client, events: &[Value]) {
    for event in events {
        publish(client, event).await;
        caught_up(client).await;
    }
}

/// An item event; `data` for created/updated/restored, none for archived/deleted.
fn item_event(kind: &str, workspace: Uuid, id: Uuid, version: i64, data: Option<Value>) -> Value {
    let mut event = json!({
        "eventId": Uuid::new_v4(),
        "type": format!("item.{kind}"),
        "workspaceId": workspace,
        "entityId": id,
        "version": version,
        "occurredAt": "2026-11-21T10:15:30.120Z",
    });
    if let Some(data) = data {
        event["data"] = data;
    }
    event
}

/// A complete item `data` with the given prices.
fn item_data(name: &str, sale_price: Value, purchase_price: Value) -> Value {
    json!({
        "name": name, "sku": "SKU-1", "description": null, "type": "product", "unit": "piece",
        "salePrice": sale_price, "purchasePrice": purchase_price,
        "createdAt": "2025-03-01T08:00:00.000Z"
    })
}

/// An item's id, then sale amount and currency, then purchase amount and currency, as text.
type Prices = (Uuid, Option<String>, Option<String>, Option<String>, Option<String>);

/// (status, version) of one item row, if any.
async fn item_status(pool: &PgPool, workspace: Uuid, id: Uuid) -> Option<(String, i64)> {
    sqlx::query_as("select status, version from items where workspace_id = $1 and id = $2")
        .bind(workspace)
        .bind(id)
        .fetch_optional(pool)
        .await
        .expect("read item row")
}

/// Every data column of a contact row as text (null stays `None`).
async fn contact_data(pool: &PgPool, workspace: Uuid, id: Uuid) -> Vec<Option<String>> {
    sqlx::query_scalar(
        "select array[name collate \"default\", email, phone, address, tin, is_customer::text,
                      is_supplier::text, created_at::text]
         from contacts where workspace_id = $1 and id = $2",
    )
    .bind(workspace)
    .bind(id)
    .fetch_one(pool)
    .await
    .expect("read contact data")
}

fn row(status: &str, version: i64, name: Option<&str>) -> Option<(String, i64, Option<String>)> {
    Some((status.to_owned(), version, name.map(str::to_owned)))
}

// ------------------------------------------------------------------ versions

#[tokio::test]
async fn an_older_version_arriving_after_a_newer_one_has_no_effect() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let projector = RunningProjector::start_consuming(&nats.url, db.pool.clone()).await;
    let client = nats.client().await;
    let (workspace, id) = (Uuid::new_v4(), Uuid::new_v4());

    publish_one_at_a_time(
        &client,
        &[contact_event("created", workspace, id, 3, "Third"), contact_event("updated", workspace, id, 2, "Second")],
    )
    .await;

    assert_eq!(contact_row(&db.pool, workspace, id).await, row("active", 3, Some("Third")));
    projector.stop().await;
}

#[tokio::test]
async fn a_repeated_version_is_applied_once_whether_its_event_id_is_the_same_or_not() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let projector = RunningProjector::start_consuming(&nats.url, db.pool.clone()).await;
    let client = nats.client().await;
    let (workspace, id) = (Uuid::new_v4(), Uuid::new_v4());
    let original = contact_event("created", workspace, id, 1, "Original");
    let same_version_other_event = contact_event("updated", workspace, id, 1, "Impostor");

    publish_one_at_a_time(&client, &[original.clone(), original, same_version_other_event]).await;

    assert_eq!(contact_row(&db.pool, workspace, id).await, row("active", 1, Some("Original")));
    projector.stop().await;
}

#[tokio::test]
async fn a_repeated_version_within_one_batch_is_applied_once() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let client = nats.client().await;
    let (workspace, id) = (Uuid::new_v4(), Uuid::new_v4());
    let original = contact_event("created", workspace, id, 1, "Original");
    // Published before the projector starts, so its first pull takes all three at once.
    for event in [original.clone(), original, contact_event("updated", workspace, id, 1, "Impostor")] {
        publish(&client, &event).await;
    }

    let projector = RunningProjector::start_consuming(&nats.url, db.pool.clone()).await;
    caught_up(&client).await;

    assert_eq!(contact_row(&db.pool, workspace, id).await, row("active", 1, Some("Original")));
    projector.stop().await;
}

/// Versions 5, 1, 3, 4, 2 of one contact, each named after its version.
fn out_of_order_history(workspace: Uuid, id: Uuid) -> Vec<Value> {
    [5, 1, 3, 4, 2]
        .map(|version| {
            let kind = if version == 1 { "created" } else { "updated" };
            contact_event(kind, workspace, id, version, &format!("Version {version}"))
        })
        .to_vec()
}

#[tokio::test]
async fn out_of_order_delivery_one_event_at_a_time_ends_at_the_highest_version() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let projector = RunningProjector::start_consuming(&nats.url, db.pool.clone()).await;
    let client = nats.client().await;
    let (workspace, id) = (Uuid::new_v4(), Uuid::new_v4());

    publish_one_at_a_time(&client, &out_of_order_history(workspace, id)).await;

    assert_eq!(contact_row(&db.pool, workspace, id).await, row("active", 5, Some("Version 5")));
    projector.stop().await;
}

#[tokio::test]
async fn out_of_order_delivery_within_one_batch_ends_at_the_highest_version() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let client = nats.client().await;
    let (workspace, id) = (Uuid::new_v4(), Uuid::new_v4());
    for event in out_of_order_history(workspace, id) {
        publish(&client, &event).await;
    }

    let projector = RunningProjector::start_consuming(&nats.url, db.pool.clone()).await;
    caught_up(&client).await;

    assert_eq!(contact_row(&db.pool, workspace, id).await, row("active", 5, Some("Version 5")));
    projector.stop().await;
}

// ---------------------------------------------------------------- tombstones

#[tokio::test]
async fn an_archived_contact_stays_archived_when_an_older_update_arrives() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let projector = RunningProjector::start_consuming(&nats.url, db.pool.clone()).await;
    let client = nats.client().await;
    let (workspace, key) = app.workspace_with_key().await;
    let id = Uuid::new_v4();
    publish_one_at_a_time(
        &client,
        &[contact_event("created", workspace, id, 1, "Acme"), contact_event("archived", workspace, id, 3, "")],
    )
    .await;

    publish_one_at_a_time(&client, &[contact_event("updated", workspace, id, 2, "Late update")]).await;

    let (status, version, _) = contact_row(&db.pool, workspace, id).await.expect("the tombstone stays");
    assert_eq!((status.as_str(), version), ("archived", 3));
    app.get(&key, &format!("/v1/contacts/{id}")).await.assert_error(404, "NOT_FOUND");
    let list = app.get(&key, "/v1/contacts").await;
    list.assert_ok();
    assert!(list.data().is_empty(), "an archived contact is listed: {}", list.text);
    projector.stop().await;
}

#[tokio::test]
async fn a_deleted_contact_stays_deleted_when_an_older_create_arrives() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let projector = RunningProjector::start_consuming(&nats.url, db.pool.clone()).await;
    let client = nats.client().await;
    let (workspace, key) = app.workspace_with_key().await;
    let id = Uuid::new_v4();
    publish_one_at_a_time(
        &client,
        &[contact_event("created", workspace, id, 1, "Acme"), contact_event("deleted", workspace, id, 4, "")],
    )
    .await;

    publish_one_at_a_time(&client, &[contact_event("created", workspace, id, 2, "Revived")]).await;

    assert_eq!(contact_row(&db.pool, workspace, id).await, row("deleted", 4, None));
    assert!(
        contact_data(&db.pool, workspace, id).await.iter().all(Option::is_none),
        "a deleted contact keeps only its tombstone"
    );
    app.get(&key, &format!("/v1/contacts/{id}")).await.assert_error(404, "NOT_FOUND");
    projector.stop().await;
}

#[tokio::test]
async fn a_restore_after_an_archive_serves_the_contact_again_with_the_restored_data() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let projector = RunningProjector::start_consuming(&nats.url, db.pool.clone()).await;
    let client = nats.client().await;
    let (workspace, key) = app.workspace_with_key().await;
    let id = Uuid::new_v4();
    publish_one_at_a_time(
        &client,
        &[contact_event("created", workspace, id, 1, "Old name"), contact_event("archived", workspace, id, 2, "")],
    )
    .await;
    app.get(&key, &format!("/v1/contacts/{id}")).await.assert_error(404, "NOT_FOUND");
    let mut restored = contact_event("restored", workspace, id, 3, "Restored name");
    restored["data"]["email"] = json!("restored@acme.example");
    restored["data"]["isSupplier"] = json!(true);

    publish(&client, &restored).await;

    let served =
        eventually(CATCH_UP, || async { app.get(&key, &format!("/v1/contacts/{id}")).await.status == 200 }).await;
    assert!(served, "the restored contact is not served");
    let reply = app.get(&key, &format!("/v1/contacts/{id}")).await;
    reply.assert_ok();
    assert_eq!(reply.body["data"]["name"], "Restored name");
    assert_eq!(reply.body["data"]["email"], "restored@acme.example");
    assert_eq!(reply.body["data"]["isSupplier"], true);
    assert_eq!(contact_row(&db.pool, workspace, id).await, row("active", 3, Some("Restored name")));
    projector.stop().await;
}

#[tokio::test]
async fn a_delete_before_any_create_leaves_a_tombstone_that_an_older_create_cannot_revive() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let projector = RunningProjector::start_consuming(&nats.url, db.pool.clone()).await;
    let client = nats.client().await;
    let (workspace, key) = app.workspace_with_key().await;
    let id = Uuid::new_v4();
    publish_one_at_a_time(&client, &[contact_event("deleted", workspace, id, 5, "")]).await;
    assert_eq!(contact_row(&db.pool, workspace, id).await, row("deleted", 5, None));

    publish_one_at_a_time(&client, &[contact_event("created", workspace, id, 1, "Too late")]).await;

    assert_eq!(contact_row(&db.pool, workspace, id).await, row("deleted", 5, None));
    app.get(&key, &format!("/v1/contacts/{id}")).await.assert_error(404, "NOT_FOUND");
    projector.stop().await;
}

// --------------------------------------------------------------------- items

#[tokio::test]
async fn item_money_lands_as_exactly_the_amounts_sent_with_their_currencies() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let projector = RunningProjector::start_consuming(&nats.url, db.pool.clone()).await;
    let client = nats.client().await;
    let workspace = Uuid::new_v4();
    let (small, huge) = (Uuid::new_v4(), Uuid::new_v4());
    let small_data =
        item_data("Screw", json!({"amount": "0.10", "currency": "EUR"}), json!({"amount": "-0.05", "currency": "CHF"}));
    let huge_data = item_data("Factory", json!({"amount": "12345678901234.5678", "currency": "USD"}), Value::Null);

    publish(&client, &item_event("created", workspace, small, 1, Some(small_data))).await;
    publish(&client, &item_event("created", workspace, huge, 1, Some(huge_data))).await;
    caught_up(&client).await;

    let prices: Vec<Prices> = sqlx::query_as(
        "select id, sale_price_amount::text, sale_price_currency, purchase_price_amount::text, purchase_price_currency
         from items where workspace_id = $1",
    )
    .bind(workspace)
    .fetch_all(&db.pool)
    .await
    .expect("read prices");
    let price_of = |id: Uuid| prices.iter().find(|price| price.0 == id).cloned().expect("the item landed");
    let text = |value: &str| Some(value.to_owned());
    assert_eq!(price_of(small), (small, text("0.10"), text("EUR"), text("-0.05"), text("CHF")));
    assert_eq!(price_of(huge), (huge, text("12345678901234.5678"), text("USD"), None, None));
    let exact: bool = sqlx::query_scalar(
        "select bool_and(sale_price_amount in (0.10, 12345678901234.5678)) from items where workspace_id = $1",
    )
    .bind(workspace)
    .fetch_one(&db.pool)
    .await
    .expect("compare amounts");
    assert!(exact, "amounts are not numerically exact");
    projector.stop().await;
}

#[tokio::test]
async fn an_archived_item_is_hidden_behind_an_archived_tombstone() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let projector = RunningProjector::start_consuming(&nats.url, db.pool.clone()).await;
    let client = nats.client().await;
    let (workspace, id) = (Uuid::new_v4(), Uuid::new_v4());
    let data = item_data("Screw", json!({"amount": "0.10", "currency": "EUR"}), Value::Null);
    publish_one_at_a_time(&client, &[item_event("created", workspace, id, 1, Some(data.clone()))]).await;
    assert_eq!(item_status(&db.pool, workspace, id).await, Some(("active".to_owned(), 1)));

    publish_one_at_a_time(&client, &[item_event("archived", workspace, id, 2, None)]).await;
    publish_one_at_a_time(&client, &[item_event("updated", workspace, id, 1, Some(data))]).await;

    assert_eq!(item_status(&db.pool, workspace, id).await, Some(("archived".to_owned(), 2)));
    projector.stop().await;
}

// ---------------------------------------------------------------- workspaces

#[tokio::test]
async fn an_event_for_one_workspace_never_touches_the_same_id_in_another() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let projector = RunningProjector::start_consuming(&nats.url, db.pool.clone()).await;
    let client = nats.client().await;
    let (workspace_a, key_a) = app.workspace_with_key().await;
    let (workspace_b, key_b) = app.workspace_with_key().await;
    let id = Uuid::new_v4();
    publish_one_at_a_time(
        &client,
        &[
            contact_event("created", workspace_b, id, 7, "B's contact"),
            contact_event("created", workspace_a, id, 1, "A's contact"),
        ],
    )
    .await;

    publish_one_at_a_time(
        &client,
        &[contact_event("updated", workspace_a, id, 2, "A renamed"), contact_event("deleted", workspace_a, id, 3, "")],
    )
    .await;

    assert_eq!(contact_row(&db.pool, workspace_a, id).await, row("deleted", 3, None));
    assert_eq!(contact_row(&db.pool, workspace_b, id).await, row("active", 7, Some("B's contact")));
    app.get(&key_a, &format!("/v1/contacts/{id}")).await.assert_error(404, "NOT_FOUND");
    let reply = app.get(&key_b, &format!("/v1/contacts/{id}")).await;
    reply.assert_ok();
    assert_eq!(reply.body["data"]["name"], "B's contact");
    projector.stop().await;
}

// -------------------------------------------------------------- type mapping

#[tokio::test]
async fn created_updated_and_restored_are_active_archived_is_archived_and_deleted_is_deleted() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let projector = RunningProjector::start_consuming(&nats.url, db.pool.clone()).await;
    let client = nats.client().await;
    let workspace = Uuid::new_v4();
    let expected = [
        ("created", "active"),
        ("updated", "active"),
        ("restored", "active"),
        ("archived", "archived"),
        ("deleted", "deleted"),
    ];
    let data = item_data("Item", Value::Null, Value::Null);
    let mut records = Vec::new();
    for (kind, status) in expected {
        let (contact, item) = (Uuid::new_v4(), Uuid::new_v4());
        publish(&client, &contact_event("created", workspace, contact, 1, "Before")).await;
        publish(&client, &contact_event(kind, workspace, contact, 2, "After")).await;
        publish(&client, &item_event("created", workspace, item, 1, Some(data.clone()))).await;
        let item_data = (kind != "archived" && kind != "deleted").then(|| data.clone());
        publish(&client, &item_event(kind, workspace, item, 2, item_data)).await;
        records.push((kind, status, contact, item));
    }

    caught_up(&client).await;

    for (kind, status, contact, item) in records {
        let contact_status =
            contact_row(&db.pool, workspace, contact).await.map(|(status, version, _)| (status, version));
        assert_eq!(contact_status, Some((status.to_owned(), 2)), "contact.{kind}");
        assert_eq!(item_status(&db.pool, workspace, item).await, Some((status.to_owned(), 2)), "item.{kind}");
    }
    projector.stop().await;
}
