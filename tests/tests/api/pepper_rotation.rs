//! Rotating the key pepper with an overlap (`LECTERN_PREVIOUS_KEY_PEPPERS`): a key hashed
//! under a pepper still listed authenticates and is hashed again under the current one at
//! its use, so that it no longer depends on the old pepper; a key hashed under a pepper
//! neither current nor listed is refused, and the refusal's log line names its id.

use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use lectern_api::keys::store::{self, NewKey};
use lectern_api::keys::{Environment, IssuedKey, ParsedKey, Pepper, Scope};
use lectern_api::rate_limit::Policy;
use lectern_tests::app::{AppOptions, TestApp};
use lectern_tests::seed::{create_key, test_pepper};
use lectern_tests::serve::Serve;
use lectern_tests::TestDatabase;
use secrecy::{ExposeSecret, SecretString};
use sqlx::PgPool;
use uuid::Uuid;

const BEFORE: &str = "the key pepper before the rotation: at least 32 bytes";
const AFTER: &str = "the key pepper after the rotation: at least 32 bytes long";
/// Re-hashes are written with last-used times, every 5 seconds.
const REHASH_WITHIN: Duration = Duration::from_secs(15);

fn pepper(text: &str) -> Pepper {
    Pepper::new(SecretString::from(text.to_owned()))
}

async fn api(db: &TestDatabase, current: &str, previous: &[&str]) -> TestApp {
    let options = AppOptions {
        pepper: current.to_owned(),
        previous_peppers: previous.iter().map(|pepper| (*pepper).to_owned()).collect(),
        ..AppOptions::default()
    };
    TestApp::spawn_with(db.pool.clone(), options).await
}

/// A key stored as `keys create` stores it under `under`; (key id, key).
async fn key_under(pool: &PgPool, under: &str) -> (String, String) {
    let issued = IssuedKey::generate(Environment::Live, &pepper(under));
    let scopes = [Scope::ContactsRead];
    let new = NewKey { workspace_id: Uuid::new_v4(), name: Some("rotation"), scopes: &scopes, expires_at: None };
    store::insert(pool, &issued, &new).await.expect("insert key");
    (issued.key_id.clone(), issued.key.expose_secret().to_owned())
}

/// The key's stored hash and pepper fingerprint.
async fn stored(pool: &PgPool, key_id: &str) -> (Vec<u8>, Option<Vec<u8>>) {
    sqlx::query_as("select secret_hmac, pepper_fingerprint from api_keys where id = $1")
        .bind(key_id)
        .fetch_one(pool)
        .await
        .expect("read the key's row")
}

/// Waits until the key's row records `fingerprint`; returns the row.
async fn until_recorded(pool: &PgPool, key_id: &str, fingerprint: &[u8]) -> (Vec<u8>, Option<Vec<u8>>) {
    let deadline = Instant::now() + REHASH_WITHIN;
    loop {
        let row = stored(pool, key_id).await;
        if row.1.as_deref() == Some(fingerprint) || Instant::now() > deadline {
            return row;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_key_of_a_listed_previous_pepper_authenticates_and_is_hashed_again_under_the_current_one() {
    let db = TestDatabase::create().await;
    let (key_id, key) = key_under(&db.pool, BEFORE).await;
    let (old_hmac, old_fingerprint) = stored(&db.pool, &key_id).await;
    assert_eq!(old_fingerprint.as_deref(), Some(&pepper(BEFORE).fingerprint()[..]), "keys record their pepper");

    // During the rotation: the old pepper listed as previous.
    let during = api(&db, AFTER, &[BEFORE]).await;
    during.get(&key, "/v1/contacts").await.assert_ok();

    let (new_hmac, new_fingerprint) = until_recorded(&db.pool, &key_id, &pepper(AFTER).fingerprint()).await;
    assert_eq!(
        new_fingerprint.as_deref(),
        Some(&pepper(AFTER).fingerprint()[..]),
        "the key was not hashed again under the current pepper"
    );
    assert_ne!(new_hmac, old_hmac, "the hash is still the old pepper's");
    let parsed = ParsedKey::parse(&key).expect("the key parses");
    assert_eq!(
        new_hmac,
        parsed.secret_hmac(&pepper(AFTER)).to_vec(),
        "the new hash is not HMAC(current pepper, secret)"
    );

    // The process that re-hashed it keeps authenticating it (its cache follows the row)...
    during.get(&key, "/v1/contacts").await.assert_ok();
    // ...as does one that knows only the new pepper, and one that knows only the old
    // refuses it: the key no longer depends on the old pepper.
    api(&db, AFTER, &[]).await.get(&key, "/v1/contacts").await.assert_ok();
    api(&db, BEFORE, &[]).await.get(&key, "/v1/contacts").await.assert_error(401, "UNAUTHORIZED");
}

#[tokio::test]
async fn a_re_hashed_key_is_still_known_as_verified_to_the_process_so_the_lookup_limit_never_refuses_it() {
    let db = TestDatabase::create().await;
    let (key_id, key) = key_under(&db.pool, BEFORE).await;
    let two_a_minute = Policy { per_minute: NonZeroU32::MIN, burst: NonZeroU32::new(2).expect("non-zero") };
    let options = AppOptions {
        pepper: AFTER.to_owned(),
        previous_peppers: vec![BEFORE.to_owned()],
        lookups_per_address: two_a_minute,
        ..AppOptions::default()
    };
    let app = TestApp::spawn_with(db.pool.clone(), options).await;
    app.get(&key, "/v1/contacts").await.assert_ok();
    let (_, fingerprint) = until_recorded(&db.pool, &key_id, &pepper(AFTER).fingerprint()).await;
    assert_eq!(fingerprint.as_deref(), Some(&pepper(AFTER).fingerprint()[..]), "the key was not re-hashed");

    // Made-up keys from the same address until its lookups are refused.
    let made_up = IssuedKey::generate(Environment::Live, &pepper(AFTER));
    let mut refused = false;
    for _ in 0..10 {
        let reply = app.get(made_up.key.expose_secret(), "/v1/contacts").await;
        if reply.status == 429 {
            refused = true;
            break;
        }
        reply.assert_error(401, "UNAUTHORIZED");
    }
    assert!(refused, "the address's failed lookups were never limited");

    // The re-hash evicted the key's record: it is read again, and the process still knows
    // the key as verified under its new hash, so the address's limit does not apply.
    app.get(&key, "/v1/contacts").await.assert_ok();
}

#[tokio::test]
async fn a_key_whose_pepper_was_never_recorded_has_it_recorded_at_its_next_use() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (key_id, key) = create_key(&db.pool, Uuid::new_v4(), &[Scope::ContactsRead]).await;
    // As a key made before the migration that added fingerprints.
    sqlx::query("update api_keys set pepper_fingerprint = null where id = $1")
        .bind(&key_id)
        .execute(&db.pool)
        .await
        .expect("forget the fingerprint");
    let (hmac, _) = stored(&db.pool, &key_id).await;

    app.get(&key, "/v1/contacts").await.assert_ok();

    let fingerprint = test_pepper().fingerprint();
    let (recorded_hmac, recorded) = until_recorded(&db.pool, &key_id, &fingerprint).await;
    assert_eq!(recorded.as_deref(), Some(&fingerprint[..]), "the current pepper was not recorded");
    assert_eq!(recorded_hmac, hmac, "a hash already under the current pepper changed");
    app.get(&key, "/v1/contacts").await.assert_ok();
}

#[tokio::test]
async fn a_key_of_a_pepper_no_longer_listed_is_refused_and_its_log_line_names_its_id() {
    let db = TestDatabase::create().await;
    let (key_id, key) = key_under(&db.pool, BEFORE).await;
    let before = stored(&db.pool, &key_id).await;
    let serve = Serve::on(&db.url).env("LECTERN_KEY_PEPPER", AFTER).start().await;

    let refused = serve.get(Some(&key), "/v1/contacts").await;

    refused.assert_error(401, "UNAUTHORIZED");
    let id = refused.header("x-request-id").expect("X-Request-Id").to_owned();
    let mut service = serve.service;
    let line = service
        .wait_for_log(Duration::from_secs(30), |record| {
            record["fields"]["message"] == "request" && record["fields"]["request_id"] == id.as_str()
        })
        .await;
    let ended = service.terminate(Duration::from_secs(30)).await;
    assert_eq!(line["fields"]["status"], 401, "{line}");
    assert_eq!(line["fields"]["key_id"], key_id.as_str(), "the refused key's log line does not name it: {line}");
    assert_eq!(stored(&db.pool, &key_id).await, before, "a refused key's row was changed");
    let secret = key.rsplit('_').next().expect("secret part");
    for text in [&ended.stderr, &ended.stdout] {
        for (what, forbidden) in [("the key's secret", secret), ("the old pepper", BEFORE), ("the pepper", AFTER)] {
            assert!(!text.contains(forbidden), "{what} is logged:\n{text}");
        }
    }
}
