//! Authentication and authorisation: which keys are refused (always the same 401
//! shape, never echoing the key), scopes, the workspace taken from the key, revocation
//! and expiry reaching every cache, one-way storage and background last-used times.

use std::time::{Duration, Instant};

use base64::Engine;
use chrono::{DateTime, Utc};
use lectern_api::keys::{store, Environment, IssuedKey, Scope};
use lectern_tests::app::AppOptions;
use lectern_tests::seed::{create_key, create_key_with, test_pepper};
use lectern_tests::{ContactSeed, Reply, TestApp, TestDatabase};
use secrecy::ExposeSecret;
use sqlx::PgPool;
use uuid::Uuid;

/// The part of a key after its last `_`.
fn secret_of(key: &str) -> &str {
    key.rsplit('_').next().unwrap_or_default()
}

/// `key` with its last character replaced by another base62 character.
fn with_last_char_changed(key: &str) -> String {
    let (head, last) = key.split_at(key.len() - 1);
    format!("{head}{}", if last == "A" { "B" } else { "A" })
}

/// A 401 `UNAUTHORIZED` that repeats neither `presented` nor its secret part.
fn assert_refused_without_echo(reply: &Reply, presented: &str) {
    reply.assert_error(401, "UNAUTHORIZED");
    let mut echoed: Vec<&str> = vec![presented, secret_of(presented)];
    echoed.retain(|text| text.len() >= 8);
    for text in echoed {
        assert!(!reply.text.contains(text), "the body repeats the presented key: {}", reply.text);
        for (name, value) in &reply.headers {
            let value = String::from_utf8_lossy(value.as_bytes());
            assert!(!value.contains(text), "header {name} repeats the presented key: {value}");
        }
    }
}

async fn last_used_at(pool: &PgPool, key_id: &str) -> Result<Option<DateTime<Utc>>, sqlx::Error> {
    sqlx::query_scalar("select last_used_at from api_keys where id = $1").bind(key_id).fetch_one(pool).await
}

/// Polls `app` every 50 ms with `key` until it answers 401; returns how long after
/// `since` that was, or `None` if it did not within `limit`.
async fn time_until_refused(app: &TestApp, key: &str, since: Instant, limit: Duration) -> Option<Duration> {
    loop {
        let reply = app.get(key, "/v1/contacts").await;
        if reply.status == 401 {
            reply.assert_error(401, "UNAUTHORIZED");
            return Some(since.elapsed());
        }
        assert_eq!(reply.status, 200, "{}", reply.text);
        if since.elapsed() > limit {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// Refused keys.

#[tokio::test]
async fn a_request_without_an_api_key_is_a_401() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;

    let reply = app.send(app.http.get(app.url("/v1/contacts"))).await;

    reply.assert_error(401, "UNAUTHORIZED");
    assert_eq!(
        reply.header("www-authenticate"),
        Some(r#"ApiKey realm="lectern", header="X-API-Key""#),
        "a 401 names the scheme that would succeed"
    );
}

#[tokio::test]
async fn two_api_key_headers_are_a_401_even_when_both_are_valid() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (_, key) = app.workspace_with_key().await;
    let (_, other) = app.workspace_with_key().await;

    for second in [&key, &other] {
        let request = app.http.get(app.url("/v1/contacts")).header("X-API-Key", &key).header("X-API-Key", second);
        let reply = app.send(request).await;

        reply.assert_error(401, "UNAUTHORIZED");
        assert!(reply.text.contains("exactly one X-API-Key"), "{}", reply.text);
        assert!(reply.header("www-authenticate").is_some(), "a 401 without WWW-Authenticate");
    }
}

#[tokio::test]
async fn an_empty_api_key_header_is_a_401() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;

    let reply = app.get("", "/v1/contacts").await;

    reply.assert_error(401, "UNAUTHORIZED");
}

#[tokio::test]
async fn a_malformed_api_key_is_a_401_that_does_not_repeat_it() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (_, key) = app.workspace_with_key().await;
    let secret = secret_of(&key).to_owned();
    let malformed = [
        key.replacen("lk_", "pk_", 1),
        key.replacen("lk_live_", "lk_prod_", 1),
        key.replacen("lk_live_", "", 1),
        format!("{key}x"),
        key[..key.len() - 1].to_owned(),
        format!("{}-{}", &key[..key.len() - secret.len()], &secret[1..]),
        format!("{}!{}", &key[..key.len() - secret.len()], &secret[1..]),
        key.replace('_', "-"),
        format!("Bearer {key}"),
        secret.clone(),
        "not a key at all".to_owned(),
    ];

    for presented in &malformed {
        let reply = app.get(presented, "/v1/contacts").await;

        assert_refused_without_echo(&reply, presented);
    }
}

#[tokio::test]
async fn a_key_whose_id_is_unknown_is_a_401_that_does_not_repeat_it() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let never_stored = IssuedKey::generate(Environment::Live, &test_pepper());
    let presented = never_stored.key.expose_secret();

    let reply = app.get(presented, "/v1/contacts").await;

    assert_refused_without_echo(&reply, presented);
}

#[tokio::test]
async fn the_right_key_id_with_a_wrong_secret_is_a_401_that_does_not_repeat_it() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (_, key) = app.workspace_with_key().await;
    let forged = with_last_char_changed(&key);

    let reply = app.get(&forged, "/v1/contacts").await;

    assert_refused_without_echo(&reply, &forged);
    app.get(&key, "/v1/contacts").await.assert_ok();
}

#[tokio::test]
async fn a_revoked_key_is_a_401_that_does_not_repeat_it() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (key_id, key) = create_key(&app.pool, Uuid::new_v4(), &[Scope::ContactsRead]).await;
    store::revoke(&app.pool, &key_id).await.expect("revoke");

    let reply = app.get(&key, "/v1/contacts").await;

    assert_refused_without_echo(&reply, &key);
}

#[tokio::test]
async fn an_expired_key_is_a_401_that_does_not_repeat_it() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let expired_at = Utc::now() - chrono::Duration::minutes(1);
    let (_, key) =
        create_key_with(&app.pool, Uuid::new_v4(), &[Scope::ContactsRead], Environment::Live, Some(expired_at)).await;

    let reply = app.get(&key, "/v1/contacts").await;

    assert_refused_without_echo(&reply, &key);
}

#[tokio::test]
async fn a_test_key_on_a_live_deployment_is_a_401_that_does_not_repeat_it() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (_, key) = create_key_with(&app.pool, Uuid::new_v4(), &[Scope::ContactsRead], Environment::Test, None).await;

    let reply = app.get(&key, "/v1/contacts").await;

    assert_refused_without_echo(&reply, &key);
}

#[tokio::test]
async fn a_live_key_on_a_test_deployment_is_a_401_that_does_not_repeat_it() {
    let db = TestDatabase::create().await;
    let options = AppOptions { environment: Environment::Test, ..Default::default() };
    let app = TestApp::spawn_with(db.pool.clone(), options).await;
    let (_, key) = create_key_with(&app.pool, Uuid::new_v4(), &[Scope::ContactsRead], Environment::Live, None).await;

    let reply = app.get(&key, "/v1/contacts").await;

    assert_refused_without_echo(&reply, &key);
}

#[tokio::test]
async fn a_test_key_is_accepted_on_a_test_deployment() {
    let db = TestDatabase::create().await;
    let options = AppOptions { environment: Environment::Test, ..Default::default() };
    let app = TestApp::spawn_with(db.pool.clone(), options).await;
    let (_, key) = create_key_with(&app.pool, Uuid::new_v4(), &[Scope::ContactsRead], Environment::Test, None).await;

    let reply = app.get(&key, "/v1/contacts").await;

    reply.assert_ok();
}

// Scopes and workspaces.

#[tokio::test]
async fn a_key_with_both_scopes_can_read_contacts() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let workspace = Uuid::new_v4();
    let id = ContactSeed::named("Acme").insert(&app.pool, workspace).await;
    let key = app.key(workspace, &[Scope::ContactsRead, Scope::ItemsRead]).await;

    let listed = app.get(&key, "/v1/contacts").await;
    let retrieved = app.get(&key, &format!("/v1/contacts/{id}")).await;

    listed.assert_ok();
    assert_eq!(listed.names(), ["Acme"]);
    retrieved.assert_ok();
    assert_eq!(retrieved.body["data"]["name"], "Acme");
}

#[tokio::test]
async fn a_key_without_contacts_read_is_a_403_naming_the_missing_scope() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let workspace = Uuid::new_v4();
    let id = ContactSeed::named("Acme").insert(&app.pool, workspace).await;
    let items_only = app.key(workspace, &[Scope::ItemsRead]).await;

    for path in ["/v1/contacts".to_owned(), format!("/v1/contacts/{id}")] {
        let reply = app.get(&items_only, &path).await;

        reply.assert_error(403, "FORBIDDEN");
        let message = reply.body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("contacts:read"), "{path}: {message:?}");
        assert!(!reply.text.contains("Acme"), "{path}: {}", reply.text);
    }
}

#[tokio::test]
async fn each_key_lists_only_its_own_workspaces_contacts() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (first, first_key) = app.workspace_with_key().await;
    let (second, second_key) = app.workspace_with_key().await;
    ContactSeed::named("First One").at(0).insert(&app.pool, first).await;
    ContactSeed::named("First Two").at(1).insert(&app.pool, first).await;
    ContactSeed::named("Second One").at(0).insert(&app.pool, second).await;

    let first_list = app.get(&first_key, "/v1/contacts").await;
    let second_list = app.get(&second_key, "/v1/contacts").await;

    first_list.assert_ok();
    assert_eq!(first_list.names(), ["First One", "First Two"]);
    second_list.assert_ok();
    assert_eq!(second_list.names(), ["Second One"]);
}

#[tokio::test]
async fn each_key_retrieves_only_its_own_workspaces_contacts() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (first, first_key) = app.workspace_with_key().await;
    let (second, second_key) = app.workspace_with_key().await;
    let first_contact = ContactSeed::named("First").insert(&app.pool, first).await;
    let second_contact = ContactSeed::named("Second").insert(&app.pool, second).await;

    let own = app.get(&first_key, &format!("/v1/contacts/{first_contact}")).await;
    let foreign = app.get(&first_key, &format!("/v1/contacts/{second_contact}")).await;
    let reverse = app.get(&second_key, &format!("/v1/contacts/{first_contact}")).await;

    own.assert_ok();
    assert_eq!(own.body["data"]["name"], "First");
    foreign.assert_error(404, "NOT_FOUND");
    assert!(!foreign.text.contains("Second"), "{}", foreign.text);
    reverse.assert_error(404, "NOT_FOUND");
}

// Revocation, expiry and caches.

#[tokio::test]
async fn revocation_reaches_every_running_api_process_within_one_second() {
    let db = TestDatabase::create().await;
    let first = TestApp::spawn(db.pool.clone()).await;
    let second = TestApp::spawn(db.pool.clone()).await;
    let (key_id, key) = create_key(&db.pool, Uuid::new_v4(), &[Scope::ContactsRead]).await;
    for app in [&first, &second] {
        app.get(&key, "/v1/contacts").await.assert_ok();
        app.get(&key, "/v1/contacts").await.assert_ok();
    }

    let revoked = Instant::now();
    store::revoke(&db.pool, &key_id).await.expect("revoke");
    let first_refused = time_until_refused(&first, &key, revoked, Duration::from_secs(1)).await;
    let second_refused = time_until_refused(&second, &key, revoked, Duration::from_secs(1)).await;

    assert!(first_refused.is_some_and(|after| after <= Duration::from_secs(1)), "first: {first_refused:?}");
    assert!(second_refused.is_some_and(|after| after <= Duration::from_secs(1)), "second: {second_refused:?}");
}

#[tokio::test]
async fn a_cached_key_set_to_expire_in_the_past_is_refused_within_one_second() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (key_id, key) = create_key(&db.pool, Uuid::new_v4(), &[Scope::ContactsRead]).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    app.get(&key, "/v1/contacts").await.assert_ok();
    app.get(&key, "/v1/contacts").await.assert_ok();

    let expired = Instant::now();
    sqlx::query("update api_keys set expires_at = now() - interval '1 minute' where id = $1")
        .bind(&key_id)
        .execute(&db.pool)
        .await
        .expect("expire the key");
    let refused = time_until_refused(&app, &key, expired, Duration::from_secs(1)).await;

    assert!(refused.is_some_and(|after| after <= Duration::from_secs(1)), "refused after {refused:?}");
}

#[tokio::test]
async fn a_cached_key_is_refused_once_its_expiry_time_passes() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let expires_at = Utc::now() + chrono::Duration::milliseconds(1_500);
    let (_, key) =
        create_key_with(&db.pool, Uuid::new_v4(), &[Scope::ContactsRead], Environment::Live, Some(expires_at)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    app.get(&key, "/v1/contacts").await.assert_ok();

    let until_expiry = (expires_at - Utc::now()).to_std().unwrap_or_default();
    tokio::time::sleep(until_expiry + Duration::from_millis(50)).await;
    let reply = app.get(&key, "/v1/contacts").await;

    assert_refused_without_echo(&reply, &key);
}

// Storage.

#[tokio::test]
async fn the_key_is_never_stored_in_clear() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (key_id, key) = create_key(&db.pool, Uuid::new_v4(), &[Scope::ContactsRead, Scope::ItemsRead]).await;
    app.get(&key, "/v1/contacts").await.assert_ok();
    let secret = secret_of(&key);
    let hex = |text: &str| text.bytes().map(|byte| format!("{byte:02x}")).collect::<String>();
    let base64 = base64::engine::general_purpose::STANDARD.encode(secret);
    let forbidden = [key.clone(), secret.to_owned(), hex(secret), hex(&key), base64];

    let tables: Vec<(String, String)> = sqlx::query_as(
        "select table_schema::text, table_name::text from information_schema.tables
         where table_type = 'BASE TABLE' and table_schema not in ('pg_catalog', 'information_schema')",
    )
    .fetch_all(&db.pool)
    .await
    .expect("list tables");
    let mut dump = String::new();
    for (schema, table) in &tables {
        let rows: Vec<String> = sqlx::query_scalar(&format!(r#"select to_jsonb(t)::text from "{schema}"."{table}" t"#))
            .fetch_all(&db.pool)
            .await
            .expect("read table");
        dump.push_str(&rows.join("\n"));
    }

    assert!(tables.iter().any(|(_, table)| table == "api_keys"), "{tables:?}");
    assert!(dump.contains(&key_id), "the scan must see the key's row");
    for text in &forbidden {
        assert!(!dump.to_lowercase().contains(&text.to_lowercase()), "the database holds {text:?}");
    }
}

#[tokio::test]
async fn last_used_times_are_written_in_the_background_not_on_the_request_path() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (key_id, key) = create_key(&db.pool, Uuid::new_v4(), &[Scope::ContactsRead]).await;
    let before = Utc::now();
    // While writes to api_keys are blocked, a request that wrote on its path would hang.
    let mut lock = db.pool.begin().await.expect("begin");
    sqlx::query("lock table api_keys in exclusive mode").execute(&mut *lock).await.expect("lock api_keys");

    let reply = tokio::time::timeout(Duration::from_secs(3), app.get(&key, "/v1/contacts")).await;
    lock.rollback().await.expect("release the lock");
    let deadline = Instant::now() + Duration::from_secs(7);
    let mut recorded = last_used_at(&db.pool, &key_id).await.expect("read last_used_at");
    while recorded.is_none() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        recorded = last_used_at(&db.pool, &key_id).await.expect("read last_used_at");
    }

    reply.expect("the request waited for a write to api_keys").assert_ok();
    assert!(recorded.is_some_and(|at| at >= before - chrono::Duration::seconds(1)), "last_used_at: {recorded:?}");
}
