//! With PostgreSQL unreachable the API answers 503 SERVICE_UNAVAILABLE with
//! Retry-After within a bounded time, and never hangs.

use std::time::Duration;

use lectern_api::keys::{Environment, IssuedKey};
use lectern_api::reads::{lazy_pool, PoolSettings};
use lectern_tests::seed::test_pepper;
use lectern_tests::TestApp;
use secrecy::ExposeSecret;

/// A pool aimed at a port where nothing listens.
fn unreachable_pool() -> sqlx::PgPool {
    let settings = PoolSettings {
        max_connections: 2,
        acquire_timeout: Duration::from_millis(500),
        statement_timeout: Duration::from_secs(1),
        connections_per_workspace: 1,
    };
    lazy_pool("postgres://postgres@127.0.0.1:9/lectern", &settings).expect("pool options")
}

#[tokio::test]
async fn an_unreachable_database_is_a_503_with_retry_after_not_a_hang() {
    let app = TestApp::spawn_without_database(unreachable_pool()).await;
    let key = IssuedKey::generate(Environment::Live, &test_pepper());

    let reply = tokio::time::timeout(Duration::from_secs(10), app.get(key.key.expose_secret(), "/v1/contacts"))
        .await
        .expect("the API answers within its acquire timeout instead of hanging");

    reply.assert_error(503, "SERVICE_UNAVAILABLE");
    assert!(reply.header("retry-after").is_some_and(|seconds| seconds.parse::<u32>().is_ok()), "{:?}", reply.headers);
    assert!(!reply.text.contains("127.0.0.1:9"), "the database address must not leak: {}", reply.text);
}

#[tokio::test]
async fn a_malformed_key_is_a_401_even_while_the_database_is_down() {
    let app = TestApp::spawn_without_database(unreachable_pool()).await;

    let reply = app.get("not-a-key", "/v1/contacts").await;

    reply.assert_error(401, "UNAUTHORIZED");
}
