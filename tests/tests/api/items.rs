//! What only items have: Money that travels from an upstream event to both endpoints
//! as exact decimal strings with their currency, events whose money breaks the contract
//! becoming dead letters, and the item's own fields (`type`, nullable `sku`,
//! `description` and `unit`). The rules items share with contacts are in `resources`.

use std::time::Duration;

use chrono::{DateTime, Utc};
use lectern_api::keys::Scope;
use lectern_read_model::{items, Commit};
use lectern_schema::events::ItemType;
use lectern_schema::item::ItemData;
use lectern_schema::money::{Amount, Currency, Money};
use lectern_tests::nats::TestNats;
use lectern_tests::projector::{eventually, item_created, item_data, publish, RunningProjector};
use lectern_tests::seed::{base_time, seed_key};
use lectern_tests::{Reply, TestApp, TestDatabase};
use serde_json::{json, Value};
use sqlx::PgPool;
use uuid::Uuid;

/// How long the projector may take to apply or dead-letter what was published.
const CATCH_UP: Duration = Duration::from_secs(15);

/// An item row; `ItemSeed::named("x")` gives a complete active product without
/// optional fields, written through the projector's own batch.
#[derive(Clone, Debug)]
pub struct ItemSeed {
    pub id: Uuid,
    pub name: String,
    pub sku: Option<String>,
    pub description: Option<String>,
    /// `product` or `service`.
    pub kind: &'static str,
    pub unit: Option<String>,
    /// (amount, currency)
    pub sale_price: Option<(String, String)>,
    /// (amount, currency)
    pub purchase_price: Option<(String, String)>,
    pub created_at: DateTime<Utc>,
    pub status: &'static str,
}

impl ItemSeed {
    pub fn named(name: &str) -> Self {
        Self {
            id: Uuid::new_v4(),
            name: name.to_owned(),
            sku: None,
            description: None,
            kind: "product",
            unit: None,
            sale_price: None,
            purchase_price: None,
            created_at: base_time(),
            status: "active",
        }
    }

    /// Created `seconds` after the fixed base instant, so orders are predictable.
    pub fn at(mut self, seconds: i64) -> Self {
        self.created_at = base_time() + chrono::Duration::seconds(seconds);
        self
    }

    pub fn status(mut self, status: &'static str) -> Self {
        self.status = status;
        self
    }

    pub fn kind(mut self, kind: &'static str) -> Self {
        self.kind = kind;
        self
    }

    pub fn sku(mut self, sku: &str) -> Self {
        self.sku = Some(sku.to_owned());
        self
    }

    pub fn description(mut self, description: &str) -> Self {
        self.description = Some(description.to_owned());
        self
    }

    pub fn unit(mut self, unit: &str) -> Self {
        self.unit = Some(unit.to_owned());
        self
    }

    pub fn sale_price(mut self, amount: &str, currency: &str) -> Self {
        self.sale_price = Some((amount.to_owned(), currency.to_owned()));
        self
    }

    pub fn purchase_price(mut self, amount: &str, currency: &str) -> Self {
        self.purchase_price = Some((amount.to_owned(), currency.to_owned()));
        self
    }

    /// Writes the row through the projector's own batch, as a newer version of it when
    /// the id exists.
    pub async fn insert(&self, pool: &PgPool, workspace_id: Uuid) -> Uuid {
        let kind = ItemType::parse(self.kind).unwrap_or_else(|| panic!("no item type {:?}", self.kind));
        let money = |price: &Option<(String, String)>| {
            price.as_ref().map(|(amount, currency)| Money {
                amount: Amount::parse(amount).expect("a seeded amount"),
                currency: Currency::parse(currency).expect("a seeded currency"),
            })
        };
        let mut data = ItemData::new(self.name.clone(), kind, self.created_at.into());
        data.sku.clone_from(&self.sku);
        data.description.clone_from(&self.description);
        data.unit.clone_from(&self.unit);
        data.sale_price = money(&self.sale_price);
        data.purchase_price = money(&self.purchase_price);
        let mut batch = items::Batch::default();
        batch.push(seed_key(workspace_id, self.id, self.status), Some(&data));
        let mut connection = pool.acquire().await.expect("a connection to seed with");
        batch.write(&mut connection, Commit::WithTheTransaction).await.expect("insert item");
        self.id
    }
}

/// A fresh workspace and an `items:read` key for it.
async fn workspace_with_items_key(app: &TestApp) -> (Uuid, String) {
    let workspace = Uuid::new_v4();
    (workspace, app.key(workspace, &[Scope::ItemsRead]).await)
}

fn money(amount: &str, currency: &str) -> Value {
    json!({ "amount": amount, "currency": currency })
}

/// NATS, the projector, the app and an `items:read` key of a fresh workspace.
struct Pipeline {
    db: TestDatabase,
    nats: TestNats,
    projector: RunningProjector,
    app: TestApp,
    client: async_nats::Client,
    workspace: Uuid,
    key: String,
}

impl Pipeline {
    async fn start() -> Self {
        let db = TestDatabase::create().await;
        let nats = TestNats::start().await;
        let projector = RunningProjector::start(&nats.url, db.pool.clone()).await;
        let app = TestApp::spawn(db.pool.clone()).await;
        let client = nats.client().await;
        let (workspace, key) = workspace_with_items_key(&app).await;
        Self { db, nats, projector, app, client, workspace, key }
    }

    /// Waits until `GET path` answers 200.
    async fn served(&self, path: &str) -> Reply {
        let served = eventually(CATCH_UP, || async { self.app.get(&self.key, path).await.status == 200 }).await;
        assert!(served, "{path} was not served within {CATCH_UP:?}");
        self.app.get(&self.key, path).await
    }

    /// Stops the projector before its nats-server goes away.
    async fn stop(self) {
        let Self { projector, nats, .. } = self;
        projector.stop().await;
        drop(nats);
    }
}

// Money, from event to response.

#[tokio::test]
async fn money_amounts_and_currencies_round_trip_exactly_from_event_to_list_and_retrieve() {
    let pipeline = Pipeline::start().await;
    // (sale price, purchase price): small fractions, more digits than a double holds,
    // credits, zero, and three currencies.
    let cases = [
        (money("0.10", "EUR"), money("12345678901234.5678", "USD")),
        (money("-5.00", "EUR"), money("0", "JPY")),
        (money("12345678901234.5678", "JPY"), money("-5.00", "USD")),
        (money("0", "USD"), money("0.10", "EUR")),
    ];
    let mut expected = Vec::new();
    for (index, (sale, purchase)) in cases.iter().enumerate() {
        let id = Uuid::new_v4();
        let data = item_data(&format!("priced {index}"), sale.clone(), purchase.clone());
        publish(&pipeline.client, &item_created(pipeline.workspace, id, data)).await;
        expected.push((id, sale, purchase));
    }

    let mut retrieved = Vec::new();
    for (id, _, _) in &expected {
        retrieved.push(pipeline.served(&format!("/v1/items/{id}")).await);
    }
    let listed = pipeline.app.get(&pipeline.key, "/v1/items?sort=name").await;

    listed.assert_ok();
    assert_eq!(listed.data().len(), cases.len(), "{}", listed.text);
    for ((id, sale, purchase), reply) in expected.iter().zip(&retrieved) {
        reply.assert_ok();
        let in_list = listed.data().iter().find(|item| item["id"] == id.to_string());
        let in_list = in_list.unwrap_or_else(|| panic!("{id} is not listed: {}", listed.text));
        for item in [in_list, &reply.body["data"]] {
            assert_eq!(&item["salePrice"], *sale, "{item}");
            assert_eq!(&item["purchasePrice"], *purchase, "{item}");
            assert!(item["salePrice"]["amount"].is_string(), "amount must be a string: {item}");
            assert!(item["purchasePrice"]["amount"].is_string(), "amount must be a string: {item}");
        }
    }
    pipeline.stop().await;
}

#[tokio::test]
async fn a_null_price_in_the_event_is_served_as_null() {
    let pipeline = Pipeline::start().await;
    let no_prices = Uuid::new_v4();
    let sale_only = Uuid::new_v4();
    let events = [
        item_created(pipeline.workspace, no_prices, item_data("no prices", Value::Null, Value::Null)),
        item_created(pipeline.workspace, sale_only, item_data("sale only", money("9.99", "EUR"), Value::Null)),
    ];
    for event in &events {
        publish(&pipeline.client, event).await;
    }

    let bare = pipeline.served(&format!("/v1/items/{no_prices}")).await;
    let half = pipeline.served(&format!("/v1/items/{sale_only}")).await;
    let listed = pipeline.app.get(&pipeline.key, "/v1/items").await;

    listed.assert_ok();
    assert_eq!(listed.data().len(), 2, "{}", listed.text);
    let in_list = |id: Uuid| listed.data().iter().find(|item| item["id"] == id.to_string()).cloned();
    for item in [&bare.body["data"], &in_list(no_prices).unwrap_or_default()] {
        assert_eq!(item.get("salePrice"), Some(&Value::Null), "{item}");
        assert_eq!(item.get("purchasePrice"), Some(&Value::Null), "{item}");
    }
    for item in [&half.body["data"], &in_list(sale_only).unwrap_or_default()] {
        assert_eq!(item["salePrice"], money("9.99", "EUR"), "{item}");
        assert_eq!(item.get("purchasePrice"), Some(&Value::Null), "{item}");
    }
    pipeline.stop().await;
}

#[tokio::test]
async fn an_item_event_is_served_by_both_endpoints_with_exactly_the_item_fields() {
    let pipeline = Pipeline::start().await;
    let id = Uuid::new_v4();
    let data = json!({
        "name": "Consulting hour", "sku": "SRV-001", "description": "Senior consultant, billed per started hour",
        "type": "service", "unit": "hour",
        "salePrice": { "amount": "120.00", "currency": "EUR" },
        "purchasePrice": null,
        "createdAt": "2025-03-01T08:00:00.000Z",
    });
    publish(&pipeline.client, &item_created(pipeline.workspace, id, data)).await;

    let retrieved = pipeline.served(&format!("/v1/items/{id}")).await;
    let listed = pipeline.app.get(&pipeline.key, "/v1/items").await;

    let expected = json!({
        "id": id.to_string(), "name": "Consulting hour", "sku": "SRV-001",
        "description": "Senior consultant, billed per started hour", "type": "service", "unit": "hour",
        "salePrice": { "amount": "120.00", "currency": "EUR" }, "purchasePrice": null,
        "createdAt": "2025-03-01T08:00:00.000Z",
    });
    retrieved.assert_ok();
    assert_eq!(retrieved.body["data"], expected);
    listed.assert_ok();
    assert_eq!(listed.body["data"], json!([expected]));
    pipeline.stop().await;
}

// Money that breaks the contract.

/// Publishes `bad`, then a valid item after it on the same stream; once the valid one is
/// served, the bad one has been handled: it must be a dead letter and nowhere served.
async fn assert_dead_lettered_and_not_served(bad_sale_price: Value) {
    let pipeline = Pipeline::start().await;
    let bad = Uuid::new_v4();
    let good = Uuid::new_v4();
    let bad_event = item_created(pipeline.workspace, bad, item_data("bad money", bad_sale_price.clone(), Value::Null));
    publish(&pipeline.client, &bad_event).await;
    let good_event = item_created(pipeline.workspace, good, item_data("good money", money("1.00", "EUR"), Value::Null));
    publish(&pipeline.client, &good_event).await;

    pipeline.served(&format!("/v1/items/{good}")).await;
    let bad_subject = format!("changes.{}.items.{bad}", pipeline.workspace);
    let dead_lettered = eventually(CATCH_UP, || async {
        let count: i64 = sqlx::query_scalar("select count(*) from dead_letters where subject = $1")
            .bind(&bad_subject)
            .fetch_one(&pipeline.db.pool)
            .await
            .expect("count dead letters");
        count == 1
    })
    .await;
    let retrieved = pipeline.app.get(&pipeline.key, &format!("/v1/items/{bad}")).await;
    let listed = pipeline.app.get(&pipeline.key, "/v1/items").await;
    let rows: i64 = sqlx::query_scalar("select count(*) from items where id = $1")
        .bind(bad)
        .fetch_one(&pipeline.db.pool)
        .await
        .expect("count item rows");

    assert!(dead_lettered, "the event with salePrice {bad_sale_price} is not a dead letter");
    retrieved.assert_error(404, "NOT_FOUND");
    listed.assert_ok();
    assert_eq!(listed.names(), ["good money"], "salePrice {bad_sale_price}");
    assert_eq!(rows, 0, "the event with salePrice {bad_sale_price} reached the read model");
    pipeline.stop().await;
}

#[tokio::test]
async fn an_item_event_with_a_float_amount_is_a_dead_letter_and_not_served() {
    assert_dead_lettered_and_not_served(json!({ "amount": 12.5, "currency": "EUR" })).await;
}

#[tokio::test]
async fn an_item_event_with_a_lower_case_currency_is_a_dead_letter_and_not_served() {
    assert_dead_lettered_and_not_served(json!({ "amount": "12.50", "currency": "eur" })).await;
}

#[tokio::test]
async fn an_item_event_with_an_exponent_amount_is_a_dead_letter_and_not_served() {
    assert_dead_lettered_and_not_served(json!({ "amount": "1e3", "currency": "EUR" })).await;
}

// The item's own fields.

#[tokio::test]
async fn item_type_is_served_as_product_or_service() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = workspace_with_items_key(&app).await;
    let product = ItemSeed::named("Widget").kind("product").at(0).insert(&app.pool, workspace).await;
    let service = ItemSeed::named("Consulting").kind("service").at(1).insert(&app.pool, workspace).await;

    let listed = app.get(&key, "/v1/items").await;
    let retrieved_product = app.get(&key, &format!("/v1/items/{product}")).await;
    let retrieved_service = app.get(&key, &format!("/v1/items/{service}")).await;

    listed.assert_ok();
    let types: Vec<&Value> = listed.data().iter().map(|item| &item["type"]).collect();
    assert_eq!(types, [&json!("product"), &json!("service")]);
    retrieved_product.assert_ok();
    assert_eq!(retrieved_product.body["data"]["type"], "product");
    retrieved_service.assert_ok();
    assert_eq!(retrieved_service.body["data"]["type"], "service");
}

#[tokio::test]
async fn absent_sku_description_unit_and_prices_are_present_as_null() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = workspace_with_items_key(&app).await;
    let id = ItemSeed::named("Bare").kind("service").insert(&app.pool, workspace).await;

    let listed = app.get(&key, "/v1/items").await;
    let retrieved = app.get(&key, &format!("/v1/items/{id}")).await;

    listed.assert_ok();
    retrieved.assert_ok();
    let expected = json!({
        "id": id.to_string(), "name": "Bare", "sku": null, "description": null, "type": "service",
        "unit": null, "salePrice": null, "purchasePrice": null, "createdAt": "2025-02-03T08:00:00.000Z",
    });
    assert_eq!(listed.body["data"], json!([expected]));
    assert_eq!(retrieved.body["data"], expected);
}

#[tokio::test]
async fn a_complete_item_is_served_with_every_field_filled() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = workspace_with_items_key(&app).await;
    let id = ItemSeed::named("Widget")
        .sku("W-1")
        .description("A widget")
        .unit("pcs")
        .sale_price("19.90", "EUR")
        .purchase_price("7.5", "USD")
        .insert(&app.pool, workspace)
        .await;

    let listed = app.get(&key, "/v1/items").await;
    let retrieved = app.get(&key, &format!("/v1/items/{id}")).await;

    listed.assert_ok();
    retrieved.assert_ok();
    let expected = json!({
        "id": id.to_string(), "name": "Widget", "sku": "W-1", "description": "A widget", "type": "product",
        "unit": "pcs", "salePrice": { "amount": "19.90", "currency": "EUR" },
        "purchasePrice": { "amount": "7.5", "currency": "USD" }, "createdAt": "2025-02-03T08:00:00.000Z",
    });
    assert_eq!(listed.body["data"], json!([expected]));
    assert_eq!(retrieved.body["data"], expected);
}

#[tokio::test]
async fn an_item_archived_by_an_event_leaves_both_endpoints() {
    let pipeline = Pipeline::start().await;
    let kept = Uuid::new_v4();
    let archived = Uuid::new_v4();
    for (id, name) in [(kept, "kept"), (archived, "archived")] {
        publish(&pipeline.client, &item_created(pipeline.workspace, id, item_data(name, Value::Null, Value::Null)))
            .await;
    }
    pipeline.served(&format!("/v1/items/{archived}")).await;
    pipeline.served(&format!("/v1/items/{kept}")).await;

    let archive = json!({
        "eventId": Uuid::new_v4(), "type": "item.archived", "workspaceId": pipeline.workspace,
        "entityId": archived, "version": 2, "occurredAt": "2026-11-21T10:16:00.000Z",
    });
    publish(&pipeline.client, &archive).await;
    let gone = eventually(CATCH_UP, || async {
        pipeline.app.get(&pipeline.key, &format!("/v1/items/{archived}")).await.status == 404
    })
    .await;
    let listed = pipeline.app.get(&pipeline.key, "/v1/items").await;

    assert!(gone, "the archived item is still served");
    listed.assert_ok();
    assert_eq!(listed.names(), ["kept"]);
    pipeline.stop().await;
}
