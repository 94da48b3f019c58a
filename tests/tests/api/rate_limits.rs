//! Rate limits: a bucket per API key (the contract's 429 with `Retry-After`, and the
//! IETF `RateLimit-Policy` / `RateLimit` headers on every authenticated response), the
//! order of checks 401 → 429 → 403 → 400, and a per-address cap on key lookups that
//! reach the database, so a flood of made-up keys cannot flood PostgreSQL.
//!
//! Most tests refill at one request per minute, so nothing refills while a test runs
//! and the counts are exact; only the retry test refills at one per second.
//!
//! Database evidence comes from sqlx's `sqlx::query` tracing events, recorded as in
//! `roundtrips.rs`: `#[tokio::test]` runs the app's tasks on the test's own thread, so
//! the recorder installed for the test sees the app's statements.

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::time::Duration;

use lectern_api::keys::{Environment, IssuedKey, Scope};
use lectern_api::rate_limit::Policy;
use lectern_tests::app::{generous_policy, AppOptions};
use lectern_tests::binaries::Run;
use lectern_tests::process::Launch;
use lectern_tests::seed::test_pepper;
use lectern_tests::{ContactSeed, Reply, TestApp, TestDatabase};
use secrecy::ExposeSecret;
use uuid::Uuid;

use crate::statements::{record_statements, Statements};

// ---------------------------------------------------------------- helpers

/// `burst` requests at once, refilled at `per_minute`.
fn policy(per_minute: u32, burst: u32) -> Policy {
    Policy {
        per_minute: NonZeroU32::new(per_minute).expect("non-zero rate"),
        burst: NonZeroU32::new(burst).expect("non-zero burst"),
    }
}

/// An app whose keys each get `per_key`; key lookups are not limited.
async fn app_limiting_keys(per_key: Policy) -> TestApp {
    let db = TestDatabase::create().await;
    TestApp::spawn_with(db.pool, AppOptions { per_key, ..AppOptions::default() }).await
}

/// A key of the deployment's environment that was never stored: well-formed, unknown.
fn made_up_key() -> String {
    IssuedKey::generate(Environment::Live, &test_pepper()).key.expose_secret().to_owned()
}

/// `key` with its last character (part of the secret) replaced.
fn with_wrong_secret(key: &str) -> String {
    let (head, last) = key.split_at(key.len() - 1);
    format!("{head}{}", if last == "A" { "B" } else { "A" })
}

/// A rate-limit header (`"per-key";q=5;w=300`): its policy name and its parameters.
#[derive(Debug, PartialEq, Eq)]
struct LimitHeader {
    name: String,
    params: BTreeMap<String, u64>,
}

impl LimitHeader {
    fn parse(text: &str) -> Self {
        let mut parts = text.split(';').map(str::trim);
        let name = parts.next().unwrap_or_default();
        assert!(
            name.len() >= 2 && name.starts_with('"') && name.ends_with('"'),
            "the policy name in {text:?} is not a quoted string"
        );
        let params = parts
            .map(|part| {
                let (key, value) = part.split_once('=').unwrap_or_else(|| panic!("parameter {part:?} in {text:?}"));
                let value = value.parse().unwrap_or_else(|_| panic!("{key} in {text:?} is not a whole number"));
                (key.to_owned(), value)
            })
            .collect();
        Self { name: name.trim_matches('"').to_owned(), params }
    }

    fn get(&self, param: &str) -> u64 {
        *self.params.get(param).unwrap_or_else(|| panic!("no {param} in {self:?}"))
    }
}

/// `RateLimit-Policy` and `RateLimit`, both required.
fn limit_headers(reply: &Reply) -> (LimitHeader, LimitHeader) {
    let policy = reply
        .header("ratelimit-policy")
        .unwrap_or_else(|| panic!("no RateLimit-Policy on a {} ({})", reply.status, reply.text));
    let limit =
        reply.header("ratelimit").unwrap_or_else(|| panic!("no RateLimit on a {} ({})", reply.status, reply.text));
    (LimitHeader::parse(policy), LimitHeader::parse(limit))
}

fn assert_no_limit_headers(reply: &Reply) {
    for name in ["ratelimit-policy", "ratelimit"] {
        assert!(
            reply.header(name).is_none(),
            "a {} carries {name}: {:?} ({})",
            reply.status,
            reply.header(name),
            reply.text
        );
    }
}

/// `Retry-After` in whole seconds.
fn retry_after(reply: &Reply) -> u64 {
    let value = reply.header("retry-after").unwrap_or_else(|| panic!("no Retry-After on a {}", reply.status));
    value.parse().unwrap_or_else(|_| panic!("Retry-After {value:?} is not whole seconds"))
}

/// A 429 `RATE_LIMITED` in the error shape, saying to retry in 1..=`at_most` seconds.
fn assert_rate_limited(reply: &Reply, at_most: u64) {
    reply.assert_error(429, "RATE_LIMITED");
    let seconds = retry_after(reply);
    assert!((1..=at_most).contains(&seconds), "Retry-After {seconds} is not within 1..={at_most}");
}

/// Sends `key`'s requests to listContacts until one is refused; returns that 429.
async fn drain(app: &TestApp, key: &str, burst: u32) -> Reply {
    for _ in 0..=burst {
        let reply = app.get(key, "/v1/contacts").await;
        if reply.status == 429 {
            return reply;
        }
        reply.assert_ok();
    }
    panic!("{key} was never refused after {} requests with a burst of {burst}", burst + 1)
}

/// An app that allows `lookup_burst` failed key lookups per address (refilled at one
/// a minute), a valid key already in its cache, and how many lookups are left: all of
/// them, since a valid key's lookups are never charged.
async fn app_with_a_cached_key(statements: &Statements, lookup_burst: u32) -> (TestApp, String, usize) {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn_with(
        db.pool,
        AppOptions {
            per_key: generous_policy(),
            lookups_per_address: policy(1, lookup_burst),
            ..AppOptions::default()
        },
    )
    .await;
    let (_, key) = app.workspace_with_key().await;
    statements.take();
    let mut lookups = 0;
    for _ in 0..5 {
        app.get(&key, "/v1/contacts").await.assert_ok();
        let sent = statements.take_key_lookups().len();
        if sent == 0 {
            return (app, key, usize::try_from(lookup_burst).expect("small"));
        }
        lookups += sent;
    }
    panic!("the key was still looked up in the database after {lookups} requests");
}

// ---------------------------------------------------------------- per key

#[tokio::test]
async fn a_key_gets_exactly_its_burst_then_429_rate_limited_with_retry_after() {
    let app = app_limiting_keys(policy(1, 3)).await;
    let (_, key) = app.workspace_with_key().await;

    let replies = [
        app.get(&key, "/v1/contacts").await,
        app.get(&key, "/v1/contacts").await,
        app.get(&key, "/v1/contacts").await,
        app.get(&key, "/v1/contacts").await,
        app.get(&key, "/v1/contacts").await,
    ];

    let statuses: Vec<u16> = replies.iter().map(|reply| reply.status).collect();
    assert_eq!(statuses, [200, 200, 200, 429, 429], "a burst of 3");
    for reply in &replies[3..] {
        // One request a minute: the next is allowed within 60 s.
        assert_rate_limited(reply, 60);
        assert!(!reply.text.contains(&key), "the 429 repeats the key: {}", reply.text);
    }
}

#[tokio::test]
async fn every_authenticated_response_states_the_policy_and_the_remaining_count_going_down_by_one() {
    let app = app_limiting_keys(policy(1, 5)).await;
    let (workspace, key) = app.workspace_with_key().await;
    let id = ContactSeed::named("Acme GmbH").insert(&app.pool, workspace).await;

    let replies = [
        ("200 list", app.get(&key, "/v1/contacts").await, 200),
        ("200 get", app.get(&key, &format!("/v1/contacts/{id}")).await, 200),
        ("400", app.get(&key, "/v1/contacts?limit=0").await, 400),
        ("403", app.get(&key, "/v1/items").await, 403),
        ("404", app.get(&key, &format!("/v1/contacts/{}", Uuid::new_v4())).await, 404),
        ("429", app.get(&key, "/v1/contacts").await, 429),
    ];

    let mut remaining = Vec::new();
    for (what, reply, status) in &replies {
        assert_eq!(reply.status, *status, "{what}: {}", reply.text);
        let (policy, limit) = limit_headers(reply);
        assert_eq!(policy.name, "per-key", "{what}");
        assert_eq!(policy.params, BTreeMap::from([("q".to_owned(), 5), ("w".to_owned(), 300)]), "{what}");
        assert_eq!(limit.name, "per-key", "{what}");
        assert_eq!(limit.params.keys().collect::<Vec<_>>(), ["r", "t"], "{what}: {limit:?}");
        // Something was spent, so the bucket is full again only after a while, within the window.
        assert!((1..=300).contains(&limit.get("t")), "{what}: t = {}", limit.get("t"));
        remaining.push(limit.get("r"));
    }
    assert_eq!(remaining, [4, 3, 2, 1, 0, 0], "r after 200 list, 200 get, 400, 403, 404, 429");
}

/// The rule: a long poll is one request however often it wakes before its answer (here
/// by keys revoked elsewhere, which make every waiting request check its own): one count
/// against its key's limit, and the request id the client sent.
#[tokio::test]
async fn a_long_poll_woken_again_and_again_before_its_answer_counts_once() {
    let app = app_limiting_keys(policy(1, 10)).await;
    let (workspace, key) = app.workspace_with_key().await;
    let before = app.get(&key, "/v1/contacts/changes?since=latest").await;
    let since = before.body["syncToken"].as_str().expect("a sync token").to_owned();
    let remaining_before = limit_headers(&before).1.get("r");

    let request = app
        .http
        .get(app.url(&format!("/v1/contacts/changes?since={since}&wait=20")))
        .header("X-API-Key", &key)
        .header("X-Request-Id", "one-long-poll");
    let waiting = tokio::spawn(async move { Reply::read(request.send().await.expect("the long poll")).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    for _ in 0..3 {
        app.revoke_a_key_elsewhere().await;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(!waiting.is_finished(), "the long poll was answered before anything of its own changed");
    ContactSeed::named("Ends the wait").insert(&app.pool, workspace).await;
    let reply = waiting.await.expect("the long poll");

    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.data().len(), 1, "{}", reply.text);
    assert_eq!(limit_headers(&reply).1.get("r"), remaining_before - 1, "counted once");
    assert_eq!(reply.header("x-request-id"), Some("one-long-poll"));
    assert_eq!(reply.body["requestId"], "one-long-poll");
}

#[tokio::test]
async fn a_401_carries_no_rate_limit_headers() {
    let app = app_limiting_keys(policy(1, 5)).await;
    let (_, key) = app.workspace_with_key().await;
    app.get(&key, "/v1/contacts").await.assert_ok();

    let replies = [
        app.send(app.http.get(app.url("/v1/contacts"))).await,
        app.get("not-a-key", "/v1/contacts").await,
        app.get(&made_up_key(), "/v1/contacts").await,
        app.get(&with_wrong_secret(&key), "/v1/contacts").await,
    ];

    for reply in &replies {
        reply.assert_error(401, "UNAUTHORIZED");
        assert_no_limit_headers(reply);
    }
}

#[tokio::test]
async fn one_keys_flood_leaves_the_buckets_of_other_keys_full_in_the_same_and_other_workspaces() {
    let app = app_limiting_keys(policy(1, 3)).await;
    let (workspace, flooder) = app.workspace_with_key().await;
    let neighbour = app.key(workspace, &[Scope::ContactsRead]).await;
    let (_, stranger) = app.workspace_with_key().await;

    for _ in 0..10 {
        app.get(&flooder, "/v1/contacts").await;
    }
    assert_rate_limited(&app.get(&flooder, "/v1/contacts").await, 60);

    for (who, key) in [("a key of the same workspace", &neighbour), ("a key of another workspace", &stranger)] {
        let reply = app.get(key, "/v1/contacts").await;
        reply.assert_ok();
        assert_eq!(limit_headers(&reply).1.get("r"), 2, "{who} did not start with a full bucket");
    }
}

// ---------------------------------------------------------------- order of checks

#[tokio::test]
async fn with_its_bucket_empty_a_key_lacking_the_scope_gets_429_not_403() {
    let app = app_limiting_keys(policy(1, 2)).await;
    let items_only = app.key(Uuid::new_v4(), &[Scope::ItemsRead]).await;
    for _ in 0..2 {
        app.get(&items_only, "/v1/items").await.assert_ok();
    }

    let replies = [
        app.get(&items_only, "/v1/contacts").await,
        app.get(&items_only, &format!("/v1/contacts/{}", Uuid::new_v4())).await,
    ];

    for reply in &replies {
        assert_rate_limited(reply, 60);
    }
}

#[tokio::test]
async fn with_its_bucket_empty_bad_parameters_get_429_not_400() {
    let app = app_limiting_keys(policy(1, 2)).await;
    let (_, key) = app.workspace_with_key().await;
    assert_eq!(drain(&app, &key, 2).await.status, 429);

    for path in [
        "/v1/contacts?limit=0",
        "/v1/contacts?limit=abc&sort=nonsense",
        "/v1/contacts?unknown=1",
        "/v1/contacts?workspaceId=6d1f0b7e-3c55-4a3b-8f9f-5d1f0e2a7c11",
        "/v1/contacts?cursor=forged",
        "/v1/contacts/not-a-uuid",
        "/v1/items?limit=101",
    ] {
        let reply = app.get(&key, path).await;
        assert_eq!(reply.status, 429, "{path}: {}", reply.text);
        assert_rate_limited(&reply, 60);
    }
}

#[tokio::test]
async fn a_bad_key_gets_401_even_when_the_bucket_of_its_key_id_is_empty() {
    let app = app_limiting_keys(policy(1, 2)).await;
    let (_, key) = app.workspace_with_key().await;
    assert_eq!(drain(&app, &key, 2).await.status, 429);
    let other_environment = IssuedKey::generate(Environment::Test, &test_pepper()).key.expose_secret().to_owned();

    let replies = [
        ("the right key id with a wrong secret", app.get(&with_wrong_secret(&key), "/v1/contacts").await),
        ("no key", app.send(app.http.get(app.url("/v1/contacts"))).await),
        ("a malformed key", app.get("lk_live_nonsense", "/v1/contacts").await),
        ("an unknown key", app.get(&made_up_key(), "/v1/contacts").await),
        ("a key of the other environment", app.get(&other_environment, "/v1/contacts").await),
    ];

    for (what, reply) in &replies {
        assert_eq!(reply.status, 401, "{what}: {}", reply.text);
        reply.assert_error(401, "UNAUTHORIZED");
        assert_no_limit_headers(reply);
    }
}

// ---------------------------------------------------------------- refill

#[tokio::test]
async fn after_waiting_retry_after_seconds_the_key_is_served_again() {
    let app = app_limiting_keys(policy(60, 3)).await;
    let (_, key) = app.workspace_with_key().await;
    let refused = drain(&app, &key, 3).await;
    assert_rate_limited(&refused, 60);

    tokio::time::sleep(Duration::from_secs(retry_after(&refused))).await;

    app.get(&key, "/v1/contacts").await.assert_ok();
}

// ---------------------------------------------------------------- key lookups per address

#[tokio::test]
async fn a_flood_of_made_up_keys_is_refused_after_the_lookup_burst_without_querying_the_database() {
    let (statements, _guard) = record_statements();
    let (app, _, lookups_left) = app_with_a_cached_key(&statements, 5).await;

    let mut answers = Vec::new();
    for _ in 0..20 {
        let reply = app.get(&made_up_key(), "/v1/contacts").await;
        answers.push((reply, statements.take_key_lookups().len()));
    }

    let statuses: Vec<u16> = answers.iter().map(|(reply, _)| reply.status).collect();
    let mut expected = vec![401; lookups_left];
    expected.resize(20, 429);
    assert_eq!(statuses, expected, "the lookup burst had {lookups_left} lookups left");
    for (reply, lookups) in &answers {
        if reply.status == 401 {
            reply.assert_error(401, "UNAUTHORIZED");
            assert_eq!(*lookups, 1, "a made-up key within the burst is looked up once");
        } else {
            assert_rate_limited(reply, 60);
            assert_eq!(*lookups, 0, "a key lookup reached the database after the address was refused");
        }
    }
}

#[tokio::test]
async fn a_cached_key_is_served_while_its_address_is_refused_key_lookups() {
    let (statements, _guard) = record_statements();
    let (app, key, lookups_left) = app_with_a_cached_key(&statements, 3).await;
    for _ in 0..lookups_left {
        app.get(&made_up_key(), "/v1/contacts").await.assert_error(401, "UNAUTHORIZED");
    }
    assert_eq!(statements.take_key_lookups().len(), lookups_left);

    for _ in 0..5 {
        assert_rate_limited(&app.get(&made_up_key(), "/v1/contacts").await, 60);
        let reply = app.get(&key, "/v1/contacts").await;

        reply.assert_ok();
        assert_eq!(statements.take_key_lookups(), Vec::<String>::new(), "the cached key was looked up");
    }
}

#[tokio::test]
async fn malformed_keys_never_reach_the_database_nor_spend_the_lookup_budget() {
    let (statements, _guard) = record_statements();
    let (app, _, lookups_left) = app_with_a_cached_key(&statements, 3).await;
    let well_formed = made_up_key();
    let malformed = [
        "nonsense".to_owned(),
        "lk_live_".to_owned(),
        "lk_live_short_secret".to_owned(),
        format!("{well_formed}x"),
        well_formed.replacen("lk_live_", "lk_prod_", 1),
        well_formed.replacen("lk_", "xx_", 1),
    ];

    for presented in malformed.iter().cycle().take(30) {
        app.get(presented, "/v1/contacts").await.assert_error(401, "UNAUTHORIZED");
        assert_eq!(statements.take_key_lookups(), Vec::<String>::new(), "{presented:?} was looked up");
    }

    for _ in 0..lookups_left {
        app.get(&made_up_key(), "/v1/contacts").await.assert_error(401, "UNAUTHORIZED");
    }
    assert_eq!(statements.take_key_lookups().len(), lookups_left, "malformed keys spent lookups");
    assert_rate_limited(&app.get(&made_up_key(), "/v1/contacts").await, 60);
}

// ---------------------------------------------------------------- configuration

/// How long the binary may take before the test fails instead of hanging.
const PROCESS_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs `lectern-api args` with an environment holding nothing but `env` (as cli.rs).
async fn run(args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut full_env = vec![
        ("LECTERN_METRICS_LISTEN", "127.0.0.1:0"),
        // Nothing listens on port 1: were the setting accepted, serve would fail on its own.
        ("DATABASE_URL", "postgres://postgres@127.0.0.1:1/lectern"),
    ];
    full_env.extend_from_slice(env);
    Launch::api().args(args).envs(&full_env).run(PROCESS_TIMEOUT).await
}

#[tokio::test]
async fn serve_refuses_a_rate_limit_burst_of_zero_naming_the_flag_and_the_variable() {
    let run = run(&["serve", "--listen", "127.0.0.1:0", "--rate-limit-burst", "0"], &[]).await;

    run.assert_one_line_error(Some(2), &["--rate-limit-burst", "LECTERN_RATE_LIMIT_BURST"]);
}

#[tokio::test]
async fn serve_refuses_a_rate_limit_per_minute_of_zero_naming_the_flag_and_the_variable() {
    let run = run(&["serve", "--listen", "127.0.0.1:0"], &[("LECTERN_RATE_LIMIT_PER_MINUTE", "0")]).await;

    run.assert_one_line_error(Some(2), &["--rate-limit-per-minute", "LECTERN_RATE_LIMIT_PER_MINUTE"]);
}
