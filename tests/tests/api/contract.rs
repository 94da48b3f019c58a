//! The HTTP contract around the operations: the order of checks, unknown paths and
//! methods, request ids, the exact JSON shapes and the status ↔ code table.

use chrono::Duration;
use lectern_api::keys::Scope;
use lectern_tests::app::{is_millisecond_instant, is_request_id, keys_of};
use lectern_tests::seed::base_time;
use lectern_tests::{ContactSeed, Reply, TestApp, TestDatabase};
use serde_json::Value;

/// A query with two problems, so a 400 would have something to say about it.
const BAD_QUERY: &str = "/v1/contacts?limit=0&colour=red";

/// A GET without an API key.
async fn get_without_key(app: &TestApp, path_and_query: &str) -> Reply {
    app.send(app.http.get(app.url(path_and_query))).await
}

/// A GET with an API key and an `X-Request-Id`.
async fn get_with_request_id(app: &TestApp, key: &str, path_and_query: &str, request_id: &[u8]) -> Reply {
    app.send(app.http.get(app.url(path_and_query)).header("X-API-Key", key).header("X-Request-Id", request_id)).await
}

// Order of checks: authenticate (401) → scope (403) → validate (400).

#[tokio::test]
async fn a_request_without_a_key_is_a_401_even_when_its_parameters_are_bad() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;

    let reply = get_without_key(&app, BAD_QUERY).await;

    reply.assert_error(401, "UNAUTHORIZED");
    assert!(reply.body["error"].get("details").is_none(), "{}", reply.text);
    assert!(!reply.text.contains("limit") && !reply.text.contains("colour"), "{}", reply.text);
}

#[tokio::test]
async fn a_key_without_contacts_read_is_a_403_even_when_its_parameters_are_bad() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, _) = app.workspace_with_key().await;
    let items_only = app.key(workspace, &[Scope::ItemsRead]).await;

    let reply = app.get(&items_only, BAD_QUERY).await;

    reply.assert_error(403, "FORBIDDEN");
    assert!(reply.body["error"].get("details").is_none(), "{}", reply.text);
}

#[tokio::test]
async fn a_valid_key_with_bad_parameters_is_a_400() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (_, key) = app.workspace_with_key().await;

    let reply = app.get(&key, BAD_QUERY).await;

    reply.assert_error(400, "VALIDATION_ERROR");
    assert_eq!(reply.details().len(), 2, "{:?}", reply.details());
}

#[tokio::test]
async fn get_contact_without_a_key_is_a_401_even_for_a_malformed_id() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;

    let reply = get_without_key(&app, "/v1/contacts/not-a-uuid").await;

    reply.assert_error(401, "UNAUTHORIZED");
    assert!(reply.body["error"].get("details").is_none(), "{}", reply.text);
}

// Unknown paths and wrong methods.

#[tokio::test]
async fn an_unknown_path_is_a_404_not_found_in_the_error_shape() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (_, key) = app.workspace_with_key().await;

    for path in ["/v1/nope", "/nope", "/", "/v2/contacts", "/v1/contacts/a/b"] {
        let reply = app.get(&key, path).await;

        reply.assert_error(404, "NOT_FOUND");
        assert_eq!(keys_of(&reply.body["error"]), ["code", "message"], "{path}: {}", reply.text);
    }
}

#[tokio::test]
async fn a_wrong_method_is_a_405_request_failed_in_the_error_shape() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (_, key) = app.workspace_with_key().await;

    for method in [reqwest::Method::POST, reqwest::Method::DELETE, reqwest::Method::PUT, reqwest::Method::PATCH] {
        let request = app.http.request(method.clone(), app.url("/v1/contacts")).header("X-API-Key", &key);

        let reply = app.send(request).await;

        reply.assert_error(405, "REQUEST_FAILED");
        assert_eq!(keys_of(&reply.body["error"]), ["code", "message"], "{method}: {}", reply.text);
    }
}

// Request ids.

#[tokio::test]
async fn every_response_carries_its_own_request_id_in_header_and_body() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    let items_only = app.key(workspace, &[Scope::ItemsRead]).await;

    let replies = [
        app.get(&key, "/v1/contacts").await,
        app.get(&key, "/v1/contacts?limit=0").await,
        get_without_key(&app, "/v1/contacts").await,
        app.get(&items_only, "/v1/contacts").await,
        app.get(&key, "/v1/nope").await,
        app.send(app.http.post(app.url("/v1/contacts")).header("X-API-Key", &key)).await,
    ];

    let mut ids = Vec::new();
    for reply in &replies {
        let header = reply.header("x-request-id").unwrap_or_else(|| panic!("no X-Request-Id: {reply:?}"));
        assert!(is_request_id(header), "{header:?} does not match the pattern");
        assert_eq!(reply.body["requestId"], header, "{}", reply.text);
        ids.push(header.to_owned());
    }
    let statuses: Vec<u16> = replies.iter().map(|reply| reply.status).collect();
    assert_eq!(statuses, [200, 400, 401, 403, 404, 405]);
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), replies.len(), "request ids repeat: {ids:?}");
}

#[tokio::test]
async fn a_well_formed_client_request_id_is_reused_on_success_validation_error_and_not_found() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (_, key) = app.workspace_with_key().await;
    let longest = format!("Z{}", "9._:-".repeat(26)).chars().take(128).collect::<String>();

    for (path, status, sent) in [
        ("/v1/contacts", 200, "req-1.2:3_4".to_owned()),
        ("/v1/contacts", 200, "a".to_owned()),
        ("/v1/contacts", 200, longest),
        ("/v1/contacts?limit=0", 400, "Order.42:retry-1".to_owned()),
        ("/v1/nope", 404, "9f3c_trace:span".to_owned()),
    ] {
        let reply = get_with_request_id(&app, &key, path, sent.as_bytes()).await;

        assert_eq!(reply.status, status, "{path}: {}", reply.text);
        assert_eq!(reply.header("x-request-id"), Some(sent.as_str()), "{path}");
        assert_eq!(reply.body["requestId"], sent.as_str(), "{path}: {}", reply.text);
    }
}

#[tokio::test]
async fn a_client_request_id_outside_the_pattern_is_replaced_by_a_fresh_one() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (_, key) = app.workspace_with_key().await;
    let too_long = "a".repeat(129);

    for sent in
        ["_abc".as_bytes(), b"has space", too_long.as_bytes(), b"", b"-abc", b".abc", b"a/b", "caf\u{e9}".as_bytes()]
    {
        let reply = get_with_request_id(&app, &key, "/v1/contacts", sent).await;

        reply.assert_ok();
        let header = reply.header("x-request-id").unwrap_or_default();
        assert_ne!(header.as_bytes(), sent, "the malformed id was reused");
        assert!(is_request_id(header), "{header:?} does not match the pattern");
        assert!(!header.contains('_'), "generated id {header:?} contains an underscore");
        assert_eq!(reply.body["requestId"], header);
    }
}

// Exact JSON shapes.

#[tokio::test]
async fn a_list_body_has_exactly_data_page_and_request_id() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    ContactSeed::named("Acme").insert(&app.pool, workspace).await;

    let reply = app.get(&key, "/v1/contacts").await;

    reply.assert_ok();
    assert_eq!(keys_of(&reply.body), ["data", "page", "requestId"]);
    assert_eq!(keys_of(&reply.body["page"]), ["hasMore", "nextCursor"]);
}

#[tokio::test]
async fn the_last_page_has_has_more_false_and_a_null_next_cursor() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (_, key) = app.workspace_with_key().await;

    let reply = app.get(&key, "/v1/contacts").await;

    reply.assert_ok();
    assert_eq!(reply.body["page"], serde_json::json!({ "hasMore": false, "nextCursor": null }));
    assert_eq!(reply.body["data"], serde_json::json!([]));
}

#[tokio::test]
async fn a_page_with_more_to_come_has_a_non_empty_next_cursor() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    ContactSeed::named("First").at(0).insert(&app.pool, workspace).await;
    ContactSeed::named("Second").at(1).insert(&app.pool, workspace).await;

    let reply = app.get(&key, "/v1/contacts?limit=1").await;

    reply.assert_ok();
    assert_eq!(keys_of(&reply.body["page"]), ["hasMore", "nextCursor"]);
    assert_eq!(reply.body["page"]["hasMore"], true);
    let cursor = reply.body["page"]["nextCursor"].as_str().unwrap_or_default();
    assert!(!cursor.is_empty(), "{}", reply.text);
}

#[tokio::test]
async fn a_contact_has_exactly_the_nine_contract_fields() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    let id = ContactSeed::named("Acme GmbH")
        .email("billing@acme.example")
        .phone("+49 30 1234")
        .address("Hauptstr. 1, Berlin")
        .tin("DE123456789")
        .roles(true, true)
        .insert(&app.pool, workspace)
        .await;

    let listed = app.get(&key, "/v1/contacts").await;
    let retrieved = app.get(&key, &format!("/v1/contacts/{id}")).await;

    listed.assert_ok();
    retrieved.assert_ok();
    let expected = serde_json::json!({
        "id": id.to_string(),
        "name": "Acme GmbH",
        "email": "billing@acme.example",
        "phone": "+49 30 1234",
        "address": "Hauptstr. 1, Berlin",
        "tin": "DE123456789",
        "isCustomer": true,
        "isSupplier": true,
        "createdAt": "2025-02-03T08:00:00.000Z",
    });
    assert_eq!(listed.data()[0], expected);
    assert_eq!(retrieved.body["data"], expected);
    assert_eq!(keys_of(&retrieved.body), ["data", "requestId"]);
}

#[tokio::test]
async fn nullable_contact_fields_are_present_as_null() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    let id = ContactSeed::named("Bare").roles(false, true).insert(&app.pool, workspace).await;

    let listed = app.get(&key, "/v1/contacts").await;
    let retrieved = app.get(&key, &format!("/v1/contacts/{id}")).await;

    listed.assert_ok();
    retrieved.assert_ok();
    for contact in [&listed.data()[0], &retrieved.body["data"]] {
        assert_eq!(keys_of(contact).len(), 9, "{contact}");
        for field in ["email", "phone", "address", "tin"] {
            assert_eq!(contact.get(field), Some(&Value::Null), "{field} must be present as null: {contact}");
        }
        assert_eq!(contact["isCustomer"], false);
        assert_eq!(contact["isSupplier"], true);
    }
}

#[tokio::test]
async fn created_at_always_has_three_fraction_digits_and_a_z_suffix() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    let mut precise = ContactSeed::named("Precise");
    precise.created_at = base_time() + Duration::microseconds(123_456) + Duration::seconds(1);
    let precise = precise.insert(&app.pool, workspace).await;
    let whole = ContactSeed::named("Whole").insert(&app.pool, workspace).await;

    let listed = app.get(&key, "/v1/contacts").await;
    let retrieved = app.get(&key, &format!("/v1/contacts/{precise}")).await;

    listed.assert_ok();
    retrieved.assert_ok();
    for contact in listed.data().iter().chain([&retrieved.body["data"]]) {
        let created = contact["createdAt"].as_str().unwrap_or_default();
        assert!(is_millisecond_instant(created), "createdAt {created:?} is not YYYY-MM-DDTHH:MM:SS.mmmZ");
    }
    assert_eq!(retrieved.body["data"]["createdAt"], "2025-02-03T08:00:01.123Z");
    let whole_contact = listed.data().iter().find(|contact| contact["id"] == whole.to_string());
    assert_eq!(whole_contact.map(|contact| &contact["createdAt"]), Some(&Value::from("2025-02-03T08:00:00.000Z")));
}

#[tokio::test]
async fn a_validation_error_has_exactly_code_message_and_details() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (_, key) = app.workspace_with_key().await;

    let reply = app.get(&key, "/v1/contacts?limit=0").await;

    reply.assert_error(400, "VALIDATION_ERROR");
    assert_eq!(keys_of(&reply.body), ["error", "requestId"]);
    assert_eq!(keys_of(&reply.body["error"]), ["code", "details", "message"]);
}

#[tokio::test]
async fn an_authentication_error_has_exactly_code_and_message() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;

    let reply = get_without_key(&app, "/v1/contacts").await;

    reply.assert_error(401, "UNAUTHORIZED");
    assert_eq!(keys_of(&reply.body), ["error", "requestId"]);
    assert_eq!(keys_of(&reply.body["error"]), ["code", "message"]);
}

#[tokio::test]
async fn a_contact_the_key_may_not_see_is_a_404_not_found_with_code_and_message() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (_, key) = app.workspace_with_key().await;

    let reply = app.get(&key, &format!("/v1/contacts/{}", uuid::Uuid::new_v4())).await;

    reply.assert_error(404, "NOT_FOUND");
    assert_eq!(keys_of(&reply.body["error"]), ["code", "message"]);
}
