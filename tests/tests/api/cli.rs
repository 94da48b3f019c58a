//! The `lectern-api` binary itself: `keys create | list | revoke`, `migrate`, and
//! `serve`'s configuration, each run as a real process against a real database.

// The helpers below fail the test on a broken set-up, as the tests themselves do.
#![expect(clippy::expect_used, reason = "test helpers panic with the reason, like the tests")]

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use lectern_api::keys::{Environment, ParsedKey};
use lectern_tests::app::AppOptions;
use lectern_tests::binaries::Run;
use lectern_tests::database::admin_url;
use lectern_tests::nats::free_port;
use lectern_tests::process::Launch;
use lectern_tests::seed::{test_pepper, TEST_PEPPER};
use lectern_tests::{TestApp, TestDatabase};
use serde_json::Value;
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection, Executor, PgConnection, PgPool};
use uuid::Uuid;

/// A secret long enough for production (over 32 bytes).
const LONG_SECRET: &str = "a production-grade secret of more than thirty-two bytes";
/// How long any one process may take before the test fails instead of hanging.
const PROCESS_TIMEOUT: Duration = Duration::from_secs(30);

/// `lectern-api args` with an environment holding nothing but `env` (and plain-text logs).
fn lectern(args: &[&str], env: &[(&str, &str)]) -> Launch {
    Launch::api()
        .args(args)
        // Tests run in parallel: the operations listener must not fight over its default port.
        .env("LECTERN_METRICS_LISTEN", "127.0.0.1:0")
        .envs(env)
}

/// Runs `lectern-api args` to its end (at most [`PROCESS_TIMEOUT`]).
async fn run(args: &[&str], env: &[(&str, &str)]) -> Run {
    lectern(args, env).run(PROCESS_TIMEOUT).await
}

/// Runs a `keys` command against `db` with the harness's pepper.
async fn keys(db: &TestDatabase, args: &[&str]) -> Run {
    keys_with(db, args, &[("LECTERN_KEY_PEPPER", TEST_PEPPER)]).await
}

/// Runs a `keys` command against `db` with the secrets `env` holds.
async fn keys_with(db: &TestDatabase, args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut full = vec!["keys"];
    full.extend_from_slice(args);
    let mut full_env = vec![("DATABASE_URL", db.url.as_str())];
    full_env.extend_from_slice(env);
    run(&full, &full_env).await
}

/// `keys create --output json` for `workspace` with `extra` arguments; the JSON printed.
async fn create_key_json(db: &TestDatabase, workspace: Uuid, extra: &[&str]) -> Value {
    let workspace = workspace.to_string();
    let mut args = vec!["create", "--workspace", &workspace, "--output", "json"];
    args.extend_from_slice(extra);
    let run = keys(db, &args).await;
    run.assert_success();
    run.json()
}

/// The `<secret>` of `lk_<environment>_<key id>_<secret>`.
fn secret_of(key: &str) -> &str {
    key.rsplit('_').next().unwrap_or_default()
}

fn is_base62(text: &str) -> bool {
    text.bytes().all(|byte| byte.is_ascii_alphanumeric())
}

/// Asserts `key` reads `lk_<environment>_<16 base62>_<43+ base62>`; returns the key id.
fn assert_key_format(key: &str, environment: &str) -> String {
    let parts: Vec<&str> = key.split('_').collect();
    assert_eq!(parts.len(), 4, "key {key:?} is not lk_<env>_<id>_<secret>");
    assert_eq!((parts[0], parts[1]), ("lk", environment), "key {key:?}");
    assert!(parts[2].len() == 16 && is_base62(parts[2]), "key id of {key:?} is not 16 base62 characters");
    assert!(parts[3].len() >= 43 && is_base62(parts[3]), "secret of {key:?} is not 43+ base62 characters");
    parts[2].to_owned()
}

async fn key_count(pool: &PgPool) -> i64 {
    sqlx::query_scalar("select count(*) from api_keys").fetch_one(pool).await.expect("count keys")
}

/// Every row of every table in the database, as text.
async fn every_row_as_text(pool: &PgPool) -> Vec<String> {
    let tables: Vec<String> = sqlx::query_scalar(
        "select quote_ident(table_schema) || '.' || quote_ident(table_name) from information_schema.tables
         where table_schema not in ('pg_catalog', 'information_schema') and table_type = 'BASE TABLE'",
    )
    .fetch_all(pool)
    .await
    .expect("list tables");
    let mut rows = Vec::new();
    for table in tables {
        let text: Vec<String> = sqlx::query_scalar(&format!("select t::text from {table} t"))
            .fetch_all(pool)
            .await
            .expect("read table as text");
        rows.extend(text);
    }
    rows
}

/// Waits until `key` gets `status` on listContacts, for at most `within`.
async fn wait_for_status(app: &TestApp, key: &str, status: u16, within: Duration) -> u16 {
    let deadline = Instant::now() + within;
    loop {
        let got = app.get(key, "/v1/contacts").await.status;
        if got == status || Instant::now() >= deadline {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// ---------------------------------------------------------------- keys create

#[tokio::test]
async fn keys_create_json_prints_one_object_with_a_key_that_the_api_accepts() {
    let db = TestDatabase::create().await;
    let workspace = Uuid::new_v4();

    let created =
        create_key_json(&db, workspace, &["--scope", "contacts:read", "--scope", "items:read", "--name", "x"]).await;

    let object = created.as_object().expect("one JSON object");
    for field in ["id", "key", "workspaceId", "scopes", "environment", "createdAt"] {
        assert!(object.contains_key(field), "no {field} in {created}");
    }
    let key = created["key"].as_str().expect("key is a string");
    let key_id = assert_key_format(key, "live");
    assert_eq!(created["id"], key_id.as_str());
    assert_eq!(created["workspaceId"], workspace.to_string());
    assert_eq!(created["scopes"], serde_json::json!(["contacts:read", "items:read"]));
    assert_eq!(created["environment"], "live");
    assert_eq!(created["name"], "x");
    let created_at = created["createdAt"].as_str().expect("createdAt is a string");
    assert!(DateTime::parse_from_rfc3339(created_at).is_ok(), "createdAt {created_at:?} is not RFC 3339");

    let app = TestApp::spawn(db.pool.clone()).await;
    app.get(key, "/v1/contacts").await.assert_ok();
}

#[tokio::test]
async fn keys_create_json_is_a_single_line_on_stdout_and_the_key_is_not_on_stderr() {
    let db = TestDatabase::create().await;
    let workspace = Uuid::new_v4().to_string();

    let run = keys(&db, &["create", "--workspace", &workspace, "--scope", "contacts:read", "--output", "json"]).await;

    run.assert_success();
    assert_eq!(run.stdout.trim_end().lines().count(), 1, "{}", run.stdout);
    let key = run.json()["key"].as_str().expect("key").to_owned();
    assert!(!run.stderr.contains(secret_of(&key)), "the key's secret is on stderr: {}", run.stderr);
}

#[tokio::test]
async fn keys_create_with_environment_test_makes_an_lk_test_key_for_a_test_deployment() {
    let db = TestDatabase::create().await;

    let created = create_key_json(&db, Uuid::new_v4(), &["--scope", "contacts:read", "--environment", "test"]).await;

    let key = created["key"].as_str().expect("key");
    assert_key_format(key, "test");
    assert_eq!(created["environment"], "test");
    let test_deployment =
        TestApp::spawn_with(db.pool.clone(), AppOptions { environment: Environment::Test, ..AppOptions::default() })
            .await;
    test_deployment.get(key, "/v1/contacts").await.assert_ok();
    let live_deployment = TestApp::spawn(db.pool.clone()).await;
    live_deployment.get(key, "/v1/contacts").await.assert_error(401, "UNAUTHORIZED");
}

#[tokio::test]
async fn keys_create_stores_an_rfc3339_expiry() {
    let db = TestDatabase::create().await;
    let expected: DateTime<Utc> = "2031-05-06T05:08:09Z".parse().expect("instant");

    let created = create_key_json(
        &db,
        Uuid::new_v4(),
        &["--scope", "contacts:read", "--expires-at", "2031-05-06T07:08:09+02:00"],
    )
    .await;

    let printed: DateTime<Utc> =
        created["expiresAt"].as_str().expect("expiresAt is printed").parse().expect("expiresAt is RFC 3339");
    assert_eq!(printed, expected);
    let stored: Option<DateTime<Utc>> = sqlx::query_scalar("select expires_at from api_keys where id = $1")
        .bind(created["id"].as_str().expect("id"))
        .fetch_one(&db.pool)
        .await
        .expect("read key");
    assert_eq!(stored, Some(expected));
}

#[tokio::test]
async fn keys_create_refuses_an_expiry_that_is_not_rfc3339_with_exit_2() {
    let db = TestDatabase::create().await;
    let workspace = Uuid::new_v4().to_string();

    let run =
        keys(&db, &["create", "--workspace", &workspace, "--scope", "contacts:read", "--expires-at", "next tuesday"])
            .await;

    run.assert_one_line_error(Some(2), &["--expires-at"]);
    assert!(run.stderr.contains("RFC 3339"), "{}", run.stderr);
    assert_eq!(key_count(&db.pool).await, 0, "a key was inserted");
}

#[tokio::test]
async fn keys_create_text_output_shows_the_key_once_and_its_id() {
    let db = TestDatabase::create().await;
    let workspace = Uuid::new_v4().to_string();

    let run = keys(&db, &["create", "--workspace", &workspace, "--scope", "contacts:read"]).await;

    run.assert_success();
    let shown: Vec<&str> = run.stdout.split_whitespace().filter(|word| word.starts_with("lk_")).collect();
    assert_eq!(shown.len(), 1, "the key must be shown exactly once: {}", run.stdout);
    let key_id = assert_key_format(shown[0], "live");
    assert_eq!(run.stdout.matches(secret_of(shown[0])).count(), 1, "{}", run.stdout);
    assert!(
        run.stdout.lines().any(|line| line.starts_with("id:") && line.contains(&key_id)),
        "the key id is not shown: {}",
        run.stdout
    );
}

#[tokio::test]
async fn keys_create_refuses_an_unknown_scope_with_exit_2_naming_the_accepted_scopes() {
    let db = TestDatabase::create().await;
    let workspace = Uuid::new_v4().to_string();

    let run = keys(&db, &["create", "--workspace", &workspace, "--scope", "contacts:write"]).await;

    run.assert_one_line_error(Some(2), &["contacts:write", "--scope"]);
    assert!(
        run.stderr.contains("contacts:read") && run.stderr.contains("items:read"),
        "the accepted scopes are not named: {}",
        run.stderr
    );
    assert!(run.stdout.trim().is_empty(), "{}", run.stdout);
    assert_eq!(key_count(&db.pool).await, 0, "a key was inserted");
}

#[tokio::test]
async fn keys_create_stores_only_a_peppered_hash_never_the_key() {
    let db = TestDatabase::create().await;

    let created = create_key_json(&db, Uuid::new_v4(), &["--scope", "contacts:read", "--name", "billing"]).await;

    let key = created["key"].as_str().expect("key");
    let secret = secret_of(key);
    for row in every_row_as_text(&db.pool).await {
        assert!(!row.contains(secret), "the key's secret is stored in clear: {row}");
    }
    let stored: Vec<u8> = sqlx::query_scalar("select secret_hmac from api_keys where id = $1")
        .bind(created["id"].as_str().expect("id"))
        .fetch_one(&db.pool)
        .await
        .expect("read hash");
    let parsed = ParsedKey::parse(key).expect("the key parses");
    assert_eq!(stored, parsed.secret_hmac(&test_pepper()).to_vec(), "stored hash is not HMAC(pepper, secret)");
}

// ---------------------------------------------------------------- keys list

#[tokio::test]
async fn keys_list_json_shows_every_key_of_the_workspace_and_never_a_secret() {
    let db = TestDatabase::create().await;
    let workspace = Uuid::new_v4();
    let first = create_key_json(&db, workspace, &["--scope", "contacts:read", "--name", "one"]).await;
    let second = create_key_json(&db, workspace, &["--scope", "items:read", "--environment", "test"]).await;
    let foreign = create_key_json(&db, Uuid::new_v4(), &["--scope", "contacts:read"]).await;

    let run = keys(&db, &["list", "--workspace", &workspace.to_string(), "--output", "json"]).await;

    run.assert_success();
    let listed = run.json();
    let listed = listed.as_array().expect("a JSON array");
    let ids: BTreeSet<&str> = listed.iter().map(|key| key["id"].as_str().expect("id")).collect();
    let expected: BTreeSet<&str> = [&first, &second].iter().map(|key| key["id"].as_str().expect("id")).collect();
    assert_eq!(ids, expected);
    for key in listed {
        let object = key.as_object().expect("each key is an object");
        for field in ["id", "name", "scopes", "environment", "createdAt", "expiresAt", "revokedAt", "lastUsedAt"] {
            assert!(object.contains_key(field), "no {field} in {key}");
        }
        for field in object.keys() {
            let lower = field.to_lowercase();
            let secret_like = lower == "key" || ["secret", "hmac", "hash"].iter().any(|word| lower.contains(word));
            assert!(!secret_like, "keys list shows a secret-like field {field:?}: {key}");
        }
    }
    for created in [&first, &second, &foreign] {
        let key = created["key"].as_str().expect("key");
        assert!(!run.stdout.contains(secret_of(key)), "keys list shows a secret: {}", run.stdout);
        assert!(!run.stderr.contains(secret_of(key)), "keys list logs a secret: {}", run.stderr);
    }
}

#[tokio::test]
async fn keys_list_text_shows_ids_and_never_a_secret() {
    let db = TestDatabase::create().await;
    let workspace = Uuid::new_v4();
    let created = create_key_json(&db, workspace, &["--scope", "contacts:read", "--name", "billing"]).await;

    let run = keys(&db, &["list", "--workspace", &workspace.to_string()]).await;

    run.assert_success();
    assert!(run.stdout.contains(created["id"].as_str().expect("id")), "{}", run.stdout);
    assert!(run.stdout.contains("billing"), "{}", run.stdout);
    assert!(!run.stdout.contains(secret_of(created["key"].as_str().expect("key"))), "{}", run.stdout);
}

/// Peppers of a rotation, each over 32 bytes (and without the list's comma).
const OLD_PEPPER: &str = "the pepper being rotated out: over thirty-two bytes";
const NEW_PEPPER: &str = "the pepper being rotated in: over thirty-two bytes";
const OTHER_PEPPER: &str = "a pepper this deployment never listed: over 32 bytes";

#[tokio::test]
async fn keys_list_tells_keys_of_the_current_pepper_from_those_of_a_previous_an_unrecorded_or_an_unknown_one() {
    let db = TestDatabase::create().await;
    let workspace = Uuid::new_v4();
    let create_under = |pepper: &'static str, workspace: Uuid| {
        let db = &db;
        async move {
            let workspace = workspace.to_string();
            let args = ["create", "--workspace", &workspace, "--scope", "contacts:read", "--output", "json"];
            let run = keys_with(db, &args, &[("LECTERN_KEY_PEPPER", pepper)]).await;
            run.assert_success();
            let created = run.json();
            (created["id"].as_str().expect("id").to_owned(), created["key"].as_str().expect("key").to_owned())
        }
    };
    let (current, current_key) = create_under(NEW_PEPPER, workspace).await;
    let (previous, previous_key) = create_under(OLD_PEPPER, workspace).await;
    let (unknown, unknown_key) = create_under(OTHER_PEPPER, workspace).await;
    let (unrecorded, unrecorded_key) = create_under(NEW_PEPPER, workspace).await;
    let (foreign, _) = create_under(OLD_PEPPER, Uuid::new_v4()).await;
    // As a key made before the migration that added fingerprints.
    sqlx::query("update api_keys set pepper_fingerprint = null where id = $1")
        .bind(&unrecorded)
        .execute(&db.pool)
        .await
        .expect("forget the fingerprint");
    let rotating = [("LECTERN_KEY_PEPPER", NEW_PEPPER), ("LECTERN_PREVIOUS_KEY_PEPPERS", OLD_PEPPER)];
    let workspace = workspace.to_string();

    let json = keys_with(&db, &["list", "--workspace", &workspace, "--output", "json"], &rotating).await;
    let text = keys_with(&db, &["list", "--workspace", &workspace], &rotating).await;
    let filtered = keys_with(&db, &["list", "--pepper", "previous", "--output", "json"], &rotating).await;

    let expected: BTreeSet<(&str, &str)> = [
        (current.as_str(), "current"),
        (previous.as_str(), "previous"),
        (unknown.as_str(), "unknown"),
        (unrecorded.as_str(), "unrecorded"),
    ]
    .into();
    json.assert_success();
    let listed = json.json();
    let listed: BTreeSet<(&str, &str)> = listed
        .as_array()
        .expect("a JSON array")
        .iter()
        .map(|key| (key["id"].as_str().expect("id"), key["pepper"].as_str().expect("pepper")))
        .collect();
    assert_eq!(listed, expected, "{}", json.stdout);
    text.assert_success();
    let blocks: Vec<&str> = text.stdout.split("\n\n").collect();
    for (id, pepper) in &expected {
        let block = blocks.iter().find(|block| block.contains(id)).unwrap_or_else(|| panic!("{id} not listed"));
        assert!(block.contains(&format!("pepper:       {pepper}")), "{id} is not shown as {pepper}: {block}");
    }
    // Without --workspace, every workspace's; --pepper keeps those depending on it.
    filtered.assert_success();
    let filtered = filtered.json();
    let ids: BTreeSet<&str> =
        filtered.as_array().expect("a JSON array").iter().map(|key| key["id"].as_str().expect("id")).collect();
    assert_eq!(ids, [previous.as_str(), foreign.as_str()].into(), "{filtered}");
    for run in [&json, &text] {
        for secret in [OLD_PEPPER, NEW_PEPPER, OTHER_PEPPER]
            .into_iter()
            .chain([&current_key, &previous_key, &unknown_key, &unrecorded_key].map(|key| secret_of(key)))
        {
            assert!(!run.stdout.contains(secret) && !run.stderr.contains(secret), "a secret is shown: {run:#?}");
        }
    }
}

// ---------------------------------------------------------------- keys revoke

#[tokio::test]
async fn keys_revoke_makes_a_working_key_a_401_within_a_second() {
    let db = TestDatabase::create().await;
    let created = create_key_json(&db, Uuid::new_v4(), &["--scope", "contacts:read"]).await;
    let key = created["key"].as_str().expect("key");
    let app = TestApp::spawn(db.pool.clone()).await;
    app.get(key, "/v1/contacts").await.assert_ok();

    let run = keys(&db, &["revoke", created["id"].as_str().expect("id")]).await;

    run.assert_success();
    let status = wait_for_status(&app, key, 401, Duration::from_millis(1_500)).await;
    assert_eq!(status, 401, "the revoked key still works");
    app.get(key, "/v1/contacts").await.assert_error(401, "UNAUTHORIZED");
    let revoked_at: Option<DateTime<Utc>> = sqlx::query_scalar("select revoked_at from api_keys where id = $1")
        .bind(created["id"].as_str().expect("id"))
        .fetch_one(&db.pool)
        .await
        .expect("read key");
    assert!(revoked_at.is_some(), "revoked_at is not stored");
}

#[tokio::test]
async fn keys_revoke_twice_says_the_key_was_already_revoked() {
    let db = TestDatabase::create().await;
    let created = create_key_json(&db, Uuid::new_v4(), &["--scope", "contacts:read"]).await;
    let id = created["id"].as_str().expect("id");
    keys(&db, &["revoke", id]).await.assert_success();

    let again = keys(&db, &["revoke", id]).await;

    again.assert_success();
    assert!(again.stdout.contains("already revoked"), "{}", again.stdout);
}

#[tokio::test]
async fn keys_revoke_of_an_unknown_id_fails_with_a_one_line_error() {
    let db = TestDatabase::create().await;

    let run = keys(&db, &["revoke", "NoSuchKey0000000"]).await;

    run.assert_one_line_error(None, &["NoSuchKey0000000"]);
}

// ---------------------------------------------------------------- migrate

#[tokio::test]
async fn migrate_creates_a_missing_database_and_applies_the_migrations() {
    let admin = admin_url();
    let now = chrono::Utc::now().timestamp();
    // The harness's prefix, so a crashed run's database is swept like the others.
    let name = format!("lectern_test_{now}_{}_migrate", Uuid::new_v4().simple());
    let options: PgConnectOptions = admin.parse().expect("admin URL");
    let url = options.clone().database(&name).to_url_lossy().to_string();

    let run = run(&["migrate"], &[("DATABASE_URL", &url)]).await;

    run.assert_success();
    let mut connection = PgConnection::connect_with(&options.database(&name)).await.expect("the database exists");
    let contacts: bool = sqlx::query_scalar("select to_regclass('public.contacts') is not null")
        .fetch_one(&mut connection)
        .await
        .expect("look up contacts");
    let applied: i64 = sqlx::query_scalar("select count(*) from _sqlx_migrations where success")
        .fetch_one(&mut connection)
        .await
        .expect("count migrations");
    connection.close().await.expect("close");
    let mut admin_connection = PgConnection::connect(&admin).await.expect("connect to admin");
    admin_connection
        .execute(format!(r#"drop database if exists "{name}" with (force)"#).as_str())
        .await
        .expect("drop database");
    assert!(contacts, "migrate did not create the contacts table");
    assert_eq!(applied, lectern_api::reads::MIGRATOR.migrations.len() as i64);
}

#[tokio::test]
async fn migrate_on_an_up_to_date_database_changes_nothing_and_succeeds() {
    let db = TestDatabase::create().await;

    let run = run(&["migrate"], &[("DATABASE_URL", &db.url)]).await;

    run.assert_success();
}

// ---------------------------------------------------------------- configuration

#[tokio::test]
async fn production_mode_refuses_to_serve_without_a_key_pepper() {
    let db = TestDatabase::create().await;

    let run = run(
        &["serve", "--listen", "127.0.0.1:0"],
        &[("DATABASE_URL", &db.url), ("LECTERN_PRODUCTION", "1"), ("LECTERN_CURSOR_SECRET", LONG_SECRET)],
    )
    .await;

    run.assert_one_line_error(None, &["LECTERN_KEY_PEPPER"]);
}

#[tokio::test]
async fn production_mode_refuses_a_key_pepper_shorter_than_32_bytes() {
    let db = TestDatabase::create().await;

    let run = run(
        &["serve", "--listen", "127.0.0.1:0"],
        &[
            ("DATABASE_URL", &db.url),
            ("LECTERN_PRODUCTION", "1"),
            ("LECTERN_KEY_PEPPER", "too short"),
            ("LECTERN_CURSOR_SECRET", LONG_SECRET),
        ],
    )
    .await;

    run.assert_one_line_error(None, &["LECTERN_KEY_PEPPER", "32"]);
    assert!(!run.stderr.contains("too short"), "the secret is echoed: {}", run.stderr);
}

#[tokio::test]
async fn production_mode_holds_every_previous_cursor_secret_to_the_current_ones_rules() {
    let db = TestDatabase::create().await;
    let previous = format!("{LONG_SECRET},short previous");

    let run = run(
        &["serve", "--listen", "127.0.0.1:0"],
        &[
            ("DATABASE_URL", &db.url),
            ("LECTERN_PRODUCTION", "1"),
            ("LECTERN_KEY_PEPPER", LONG_SECRET),
            ("LECTERN_CURSOR_SECRET", LONG_SECRET),
            ("LECTERN_PREVIOUS_CURSOR_SECRETS", &previous),
        ],
    )
    .await;

    run.assert_one_line_error(None, &["LECTERN_PREVIOUS_CURSOR_SECRETS", "32"]);
    assert!(!run.stderr.contains("short previous"), "the secret is echoed: {}", run.stderr);
}

#[tokio::test]
async fn production_mode_holds_every_previous_key_pepper_to_the_current_ones_rules() {
    let db = TestDatabase::create().await;
    let previous = format!("{LONG_SECRET},short previous");
    let env = [
        ("DATABASE_URL", db.url.as_str()),
        ("LECTERN_PRODUCTION", "1"),
        ("LECTERN_KEY_PEPPER", LONG_SECRET),
        ("LECTERN_CURSOR_SECRET", LONG_SECRET),
        ("LECTERN_PREVIOUS_KEY_PEPPERS", &previous),
    ];

    // `keys list` first: a `serve` that wrongly starts ends only by the runner's timeout.
    for args in [&["keys", "list"][..], &["serve", "--listen", "127.0.0.1:0"]] {
        let refused = run(args, &env).await;
        refused.assert_one_line_error(None, &["LECTERN_PREVIOUS_KEY_PEPPERS", "32"]);
        assert!(!refused.stderr.contains("short previous"), "the secret is echoed: {}", refused.stderr);
    }
}

/// A pepper or cursor secret in use must hold no comma: rotated out, it goes into a
/// comma-separated list, where it would be split into two values that match nothing, and
/// every key (or token) under it would be refused at once. Refused at start, in any mode,
/// naming the setting and never echoing the value.
#[tokio::test]
async fn a_key_pepper_or_cursor_secret_holding_a_comma_is_refused_at_start() {
    let db = TestDatabase::create().await;
    let with_a_comma = "a secret of more than thirty-two bytes, with a comma";
    for (setting, other) in
        [("LECTERN_KEY_PEPPER", "LECTERN_CURSOR_SECRET"), ("LECTERN_CURSOR_SECRET", "LECTERN_KEY_PEPPER")]
    {
        let env = [("DATABASE_URL", db.url.as_str()), (setting, with_a_comma), (other, LONG_SECRET)];
        for args in [&["keys", "list"][..], &["serve", "--listen", "127.0.0.1:0"]] {
            if setting == "LECTERN_CURSOR_SECRET" && args[0] == "keys" {
                continue;
            }
            let refused = run(args, &env).await;
            refused.assert_one_line_error(None, &[setting, "comma"]);
            assert!(!refused.stderr.contains("with a comma"), "the secret is echoed: {}", refused.stderr);
        }
    }
}

#[tokio::test]
async fn a_listen_flag_that_is_not_an_address_is_exit_2_naming_listen() {
    let db = TestDatabase::create().await;

    let run = run(&["serve", "--listen", "not-an-address"], &[("DATABASE_URL", &db.url)]).await;

    run.assert_one_line_error(Some(2), &["--listen", "not-an-address"]);
}

#[tokio::test]
async fn a_lectern_listen_variable_that_is_not_an_address_is_refused_naming_the_setting() {
    let db = TestDatabase::create().await;

    let run = run(&["serve"], &[("DATABASE_URL", &db.url), ("LECTERN_LISTEN", "bogus")]).await;

    run.assert_one_line_error(None, &["bogus"]);
    let line = run.error_lines()[0];
    assert!(line.contains("--listen") && line.contains("LECTERN_LISTEN"), "flag and variable not both named: {line}");
}

#[tokio::test]
async fn a_pool_size_of_zero_is_refused_naming_the_setting() {
    let db = TestDatabase::create().await;

    let run =
        run(&["serve", "--listen", "127.0.0.1:0"], &[("DATABASE_URL", &db.url), ("LECTERN_DB_POOL_SIZE", "0")]).await;

    run.assert_one_line_error(None, &[]);
    let line = run.error_lines()[0];
    assert!(
        line.contains("--db-pool-size") && line.contains("LECTERN_DB_POOL_SIZE"),
        "flag and variable not both named: {line}"
    );
}

// ---------------------------------------------------------------- serve

/// Starts `serve` on a free port, waits until it answers the OpenAPI document, sends
/// SIGTERM, and returns how it ended.
async fn serve_then_terminate(env: &[(&str, &str)]) -> Run {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut serve = lectern(&["serve", "--listen", &listen], env).spawn();
    let url = format!("http://{listen}/v1/openapi.json");
    let http = reqwest::Client::builder().timeout(Duration::from_secs(2)).build().expect("client");
    let deadline = Instant::now() + PROCESS_TIMEOUT;
    loop {
        if let Ok(response) = http.get(&url).send().await {
            assert_eq!(response.status().as_u16(), 200, "GET /v1/openapi.json");
            break;
        }
        serve.assert_running("before answering");
        assert!(Instant::now() < deadline, "serve did not answer on {listen} within {PROCESS_TIMEOUT:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    serve.terminate(Duration::from_secs(10)).await
}

#[tokio::test]
async fn serve_without_secrets_starts_with_a_loud_development_warning_and_stops_on_sigterm() {
    let db = TestDatabase::create().await;

    let run = serve_then_terminate(&[("DATABASE_URL", &db.url)]).await;

    run.assert_success();
    assert!(run.stderr.contains("DEVELOPMENT"), "no development warning on stderr: {}", run.stderr);
    assert!(run.stderr.contains("LECTERN_KEY_PEPPER"), "the warning does not name the pepper: {}", run.stderr);
    assert!(run.stderr.contains("LECTERN_CURSOR_SECRET"), "the warning does not name the secret: {}", run.stderr);
}

#[tokio::test]
async fn production_mode_with_real_secrets_serves_without_the_development_warning() {
    let db = TestDatabase::create().await;

    let run = serve_then_terminate(&[
        ("DATABASE_URL", &db.url),
        ("LECTERN_PRODUCTION", "1"),
        ("LECTERN_KEY_PEPPER", LONG_SECRET),
        ("LECTERN_CURSOR_SECRET", "another production-grade secret: over thirty-two bytes"),
    ])
    .await;

    run.assert_success();
    assert!(!run.stderr.contains("DEVELOPMENT"), "development defaults used in production: {}", run.stderr);
}
