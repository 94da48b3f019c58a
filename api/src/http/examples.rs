//! A response example for each operation's 200, so that the document shows integrators
//! what they will receive: a listing page with its cursor, a record, and a feed page with
//! an upserted and a removed entry. Each is checked against the document's own schema by
//! the tests.

use serde_json::{json, Value};

const CONTACT_ID: &str = "3f2b8c1e-9a4d-4e7b-8c21-5d6e7f8a9b0c";
const REMOVED_CONTACT_ID: &str = "8a1c2d3e-4f50-4a6b-9c7d-8e9f0a1b2c3d";
const ITEM_ID: &str = "b7e6d5c4-3b2a-4190-8f7e-6d5c4b3a2918";
const REMOVED_ITEM_ID: &str = "0c1d2e3f-4a5b-4c6d-8e7f-9a0b1c2d3e4f";
const REQUEST_ID: &str = "d73584b8978c64c069d0d4db47660a29";
const SYNC_TOKEN: &str = "AwAAAAAAAAMT_____________________wAAAAADAFoAtkXAqgx7Xyv_qJwG3shuDe_ePQCDgP5tdWRP2oKIrJg";
const NEXT_CURSOR: &str = "AQAAAZNwoHqAAD8rjB6aTU57jCFdbn-Kmwzw0d0CeDsRyWg3rlUsVq9Yv8tVrbmSGk2bN3Xz0zcGp8x";

fn contact() -> Value {
    json!({
        "id": CONTACT_ID,
        "name": "Acme GmbH",
        "email": "billing@acme.example",
        "phone": "+49 30 1234567",
        "address": "Hauptstr. 1, 10115 Berlin",
        "tin": "DE123456789",
        "isCustomer": true,
        "isSupplier": false,
        "createdAt": "2025-02-03T08:00:00.000Z",
    })
}

fn item() -> Value {
    json!({
        "id": ITEM_ID,
        "name": "Consulting hour",
        "sku": "CONS-1H",
        "description": null,
        "type": "service",
        "unit": "hour",
        "salePrice": { "amount": "120.00", "currency": "EUR" },
        "purchasePrice": null,
        "createdAt": "2025-03-01T08:00:00.000Z",
    })
}

/// The 200 example of the operation `operation_id`, if it has one.
pub fn success(operation_id: &str) -> Option<Value> {
    let (record, removed) = match operation_id {
        "listContacts" | "getContact" | "listContactChanges" => (contact(), REMOVED_CONTACT_ID),
        "listItems" | "getItem" | "listItemChanges" => (item(), REMOVED_ITEM_ID),
        _ => return None,
    };
    Some(match operation_id {
        "listContacts" | "listItems" => json!({
            "data": [record],
            "page": { "hasMore": true, "nextCursor": NEXT_CURSOR },
            "requestId": REQUEST_ID,
        }),
        "getContact" | "getItem" => json!({ "data": record, "requestId": REQUEST_ID }),
        _ => json!({
            "data": [
                { "id": record["id"], "change": "upserted", "record": record },
                { "id": removed, "change": "removed", "record": null },
            ],
            "hasMore": false,
            "syncToken": SYNC_TOKEN,
            "requestId": REQUEST_ID,
        }),
    })
}
