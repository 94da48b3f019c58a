//! Rule 5: sync tokens are opaque, integrity-protected, bound to the workspace and the
//! operation, and never expire: valid across restarts and upgrades.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use lectern_api::keys::Scope;
use lectern_tests::app::{urlencode, TestApp};
use lectern_tests::seed::{insert_contacts, ContactSeed};
use lectern_tests::TestDatabase;
use uuid::Uuid;

use super::{follow, ids, token};

const CONTACTS: &str = "/v1/contacts/changes";
const ITEMS: &str = "/v1/items/changes";
/// The migration that gives rows their feed positions.
const FEED_MIGRATION: i64 = 20261126000008;

/// `since` refused as the contract says: a 400 VALIDATION_ERROR whose details name it, and
/// tell the client, in a form it can act on, to start over without `since`.
async fn assert_refused(app: &TestApp, key: &str, path: &str, since: &str) {
    let reply = app.get(key, &format!("{path}?since={}", urlencode(since))).await;
    reply.assert_error(400, "VALIDATION_ERROR");
    assert!(reply.details().iter().any(|detail| detail.starts_with("since")), "{since:?}: {}", reply.text);
    assert!(reply.says_start_over(), "{since:?}: no startOver in the details: {}", reply.text);
}

#[tokio::test]
async fn a_tampered_or_malformed_token_is_a_400_naming_since() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    insert_contacts(&db.pool, workspace, "Seen", 2).await;
    let (_, genuine) = follow(&app, &key, CONTACTS, None, 100).await;

    let bytes = URL_SAFE_NO_PAD.decode(&genuine).expect("a token is URL-safe base64");
    for index in 0..bytes.len() {
        let mut tampered = bytes.clone();
        tampered[index] ^= 0x01;
        assert_refused(&app, &key, CONTACTS, &URL_SAFE_NO_PAD.encode(tampered)).await;
    }
    for malformed in ["x", "AAAA", "Latest", "latest ", "null", &"A".repeat(300), "\u{0}", "é", &genuine[1..]] {
        assert_refused(&app, &key, CONTACTS, malformed).await;
    }
}

#[tokio::test]
async fn a_token_is_bound_to_its_workspace_and_its_operation() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (mine, theirs) = (Uuid::new_v4(), Uuid::new_v4());
    let my_key = app.key(mine, &[Scope::ContactsRead, Scope::ItemsRead]).await;
    let their_key = app.key(theirs, &[Scope::ContactsRead, Scope::ItemsRead]).await;
    ContactSeed::named("Mine").insert(&db.pool, mine).await;
    let (_, contacts_token) = follow(&app, &my_key, CONTACTS, None, 100).await;

    assert_refused(&app, &their_key, CONTACTS, &contacts_token).await;
    assert_refused(&app, &my_key, ITEMS, &contacts_token).await;

    // A listing cursor is not a sync token, even of the same workspace and resource.
    insert_contacts(&app.pool, mine, "Listed", 3).await;
    let listed = app.get(&my_key, "/v1/contacts?limit=1").await;
    let cursor = listed.body["page"]["nextCursor"].as_str().expect("a cursor").to_owned();
    assert_refused(&app, &my_key, CONTACTS, &cursor).await;
}

#[tokio::test]
async fn a_token_stays_valid_after_the_api_restarts() {
    let db = TestDatabase::create().await;
    let before = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = before.workspace_with_key().await;
    insert_contacts(&db.pool, workspace, "Before", 2).await;
    let (_, since) = follow(&before, &key, CONTACTS, None, 100).await;
    let after = ContactSeed::named("After the restart").insert(&db.pool, workspace).await;

    // Another process: a state built from scratch, with the deployment's secret.
    let restarted = TestApp::spawn(db.pool.clone()).await;
    let (entries, _) = follow(&restarted, &key, CONTACTS, Some(&since), 100).await;
    assert_eq!(ids(&entries), [after.to_string()]);
}

#[tokio::test]
async fn an_upgraded_deployment_serves_every_record_it_already_had_and_its_tokens_keep_working() {
    let db = TestDatabase::create_at_version(FEED_MIGRATION - 1).await;
    let workspace = Uuid::new_v4();
    // Rows as the release before the feed wrote them.
    for (name, status, created) in
        [("Old active", "active", 1), ("Old archived", "archived", 2), ("Old two", "active", 3)]
    {
        sqlx::query(
            "insert into contacts (workspace_id, id, version, status, name, is_customer, is_supplier, created_at) \
             values ($1, $2, 1, $3, $4, true, false, timestamptz '2025-01-01' + make_interval(secs => $5))",
        )
        .bind(workspace)
        .bind(Uuid::new_v4())
        .bind(status)
        .bind(name)
        .bind(f64::from(created))
        .execute(&db.pool)
        .await
        .expect("an old row");
    }
    db.migrate_up_to(i64::MAX).await;

    let app = TestApp::spawn(db.pool.clone()).await;
    let key = app.key(workspace, &[Scope::ContactsRead]).await;
    let (entries, since) = follow(&app, &key, CONTACTS, None, 1).await;
    // The rows the upgrade found were all written by its migration: one transaction,
    // whose rows have no order among themselves.
    let mut seen: Vec<(&str, &str)> = entries
        .iter()
        .map(|entry| (entry["change"].as_str().unwrap_or_default(), entry["record"]["name"].as_str().unwrap_or("-")))
        .collect();
    seen.sort_unstable();
    assert_eq!(seen, [("removed", "-"), ("upserted", "Old active"), ("upserted", "Old two")]);

    let new = ContactSeed::named("New").insert(&db.pool, workspace).await;
    app.heard_every_commit().await;
    let reply = app.get(&key, &format!("{CONTACTS}?since={since}")).await;
    assert_eq!(ids(reply.data()), [new.to_string()], "{}", reply.text);
    assert_ne!(token(&reply), since);
}

#[tokio::test]
async fn every_byte_in_since_is_a_400_naming_it_never_a_server_error() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    insert_contacts(&db.pool, workspace, "Seen", 1).await;
    let (_, genuine) = follow(&app, &key, CONTACTS, None, 100).await;
    for byte in 0..=u8::MAX {
        let mut cases = vec![format!("%{byte:02X}")];
        // In place of a token's fifth character, unless that is the character it has.
        if byte != genuine.as_bytes()[4] {
            cases.push(format!("{}%{byte:02X}{}", &genuine[..4], &genuine[5..]));
        }
        for since in cases {
            let reply = app.get(&key, &format!("{CONTACTS}?since={since}")).await;
            reply.assert_error(400, "VALIDATION_ERROR");
            assert!(reply.details().iter().any(|detail| detail.starts_with("since")), "{since}: {}", reply.text);
        }
    }
}
