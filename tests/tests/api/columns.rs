//! Each table's columns are defined once (`lectern_read_model`): what a batch writes is
//! what the API reads back, field for field, and no stored column is left out of either.
//! A field bound to the wrong column, a column the batch forgets, or a migration's new
//! column the read model does not know fails here.

use std::collections::BTreeSet;

use chrono::{TimeZone, Utc};
use lectern_api::keys::Scope;
use lectern_read_model::{contacts, items, Commit, Key, Status, CHANGE_TRANSACTION};
use lectern_schema::contact::ContactData;
use lectern_schema::events::ItemType;
use lectern_schema::item::ItemData;
use lectern_schema::money::{Amount, Currency, Money};
use lectern_schema::Timestamp;
use lectern_tests::{TestApp, TestDatabase};
use serde_json::{json, Value};
use sqlx::PgPool;
use uuid::Uuid;

fn created_at() -> Timestamp {
    Utc.with_ymd_and_hms(2024, 7, 9, 10, 11, 12).single().unwrap().into()
}

fn active(workspace_id: Uuid) -> Key {
    Key { workspace_id, id: Uuid::new_v4(), version: 1, status: Status::Active }
}

fn money(amount: &str, currency: &str) -> Money {
    Money { amount: Amount::parse(amount).unwrap(), currency: Currency::parse(currency).unwrap() }
}

/// The table's stored (not generated) columns.
async fn stored_columns(pool: &PgPool, table: &str) -> Vec<String> {
    sqlx::query_scalar(
        "select column_name::text from information_schema.columns
         where table_schema = current_schema() and table_name = $1 and is_generated = 'NEVER'
         order by ordinal_position",
    )
    .bind(table)
    .fetch_all(pool)
    .await
    .unwrap()
}

/// The record `id` of `collection` is `expected`, retrieved by id and as the only one listed.
async fn assert_served_by_retrieve_and_listing(app: &TestApp, key: &str, collection: &str, id: Uuid, expected: Value) {
    let retrieved = app.get(key, &format!("{collection}/{id}")).await;
    retrieved.assert_ok();
    assert_eq!(retrieved.body["data"], expected, "{collection}/{id}");
    let listed = app.get(key, collection).await;
    listed.assert_ok();
    assert_eq!(listed.body["data"], json!([expected]), "{collection}");
}

#[tokio::test]
async fn every_contact_field_a_batch_writes_is_served_back_unchanged_by_retrieve_and_listing() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    // Every text field distinct and the two roles different, so that any two columns
    // swapped anywhere between the batch and the response show.
    let mut data = ContactData::new("Name Nordwind", created_at());
    data.email = Some("email@nordwind.example".to_owned());
    data.phone = Some("+49 30 0000 1111".to_owned());
    data.address = Some("Address 1, Berlin".to_owned());
    data.tin = Some("DE-TIN-123456789".to_owned());
    data.is_customer = true;
    data.is_supplier = false;
    let key_columns = active(workspace);
    let mut batch = contacts::Batch::default();
    batch.push(key_columns, Some(&data));
    batch.write(&mut db.pool.acquire().await.unwrap(), Commit::OnItsOwnBeforeFlush).await.unwrap();

    let expected = json!({
        "id": key_columns.id.to_string(),
        "name": "Name Nordwind",
        "email": "email@nordwind.example",
        "phone": "+49 30 0000 1111",
        "address": "Address 1, Berlin",
        "tin": "DE-TIN-123456789",
        "isCustomer": true,
        "isSupplier": false,
        "createdAt": "2024-07-09T10:11:12.000Z",
    });
    assert_served_by_retrieve_and_listing(&app, &key, "/v1/contacts", key_columns.id, expected).await;
}

#[tokio::test]
async fn every_item_field_a_batch_writes_is_served_back_unchanged_by_retrieve_and_listing() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let workspace = Uuid::new_v4();
    let key = app.key(workspace, &[Scope::ItemsRead]).await;
    // Two prices with different amounts and currencies; `0.10` and `-12.5000` keep
    // their digits only if amounts travel as text both ways.
    let mut data = ItemData::new("Name Lamp", ItemType::Service, created_at());
    data.sku = Some("SKU-42".to_owned());
    data.description = Some("Description of a lamp".to_owned());
    data.unit = Some("hour".to_owned());
    data.sale_price = Some(money("0.10", "EUR"));
    data.purchase_price = Some(money("-12.5000", "JPY"));
    let key_columns = active(workspace);
    let mut batch = items::Batch::default();
    batch.push(key_columns, Some(&data));
    batch.write(&mut db.pool.acquire().await.unwrap(), Commit::WithTheTransaction).await.unwrap();

    let expected = json!({
        "id": key_columns.id.to_string(),
        "name": "Name Lamp",
        "sku": "SKU-42",
        "description": "Description of a lamp",
        "type": "service",
        "unit": "hour",
        "salePrice": { "amount": "0.10", "currency": "EUR" },
        "purchasePrice": { "amount": "-12.5000", "currency": "JPY" },
        "createdAt": "2024-07-09T10:11:12.000Z",
    });
    assert_served_by_retrieve_and_listing(&app, &key, "/v1/items", key_columns.id, expected).await;
}

#[tokio::test]
async fn a_batch_writes_every_stored_column_and_the_api_reads_every_one_but_the_bookkeeping() {
    let db = TestDatabase::create().await;
    // The key's columns the API filters on but does not serve.
    let bookkeeping = ["workspace_id", "version", "status", CHANGE_TRANSACTION];

    for (table, written, selected) in [
        (contacts::TABLE, contacts::written_columns(), contacts::SELECTED),
        (items::TABLE, items::written_columns(), items::SELECTED),
    ] {
        // A column a migration adds comes last in the table, wherever the read model
        // lists it: compared as sets.
        let stored = stored_columns(&db.pool, table).await;
        let stored: BTreeSet<&str> = stored.iter().map(String::as_str).collect();
        // The change's transaction is the column's default, not a value the batch sends.
        let written: BTreeSet<&str> = written.into_iter().chain([CHANGE_TRANSACTION]).collect();
        assert_eq!(written, stored, "{table}: the batch's columns against the table's");
        let served: BTreeSet<&str> = stored.iter().copied().filter(|column| !bookkeeping.contains(column)).collect();
        let selected: BTreeSet<&str> = selected.iter().copied().collect();
        assert_eq!(selected, served, "{table}: the API's columns against the table's");
    }
}
