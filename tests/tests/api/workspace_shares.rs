//! One workspace cannot hold every listing connection: a flood of searches that no
//! index serves, from one key, waits within that workspace's share and is refused
//! there (429), while another workspace's requests are served without an error or a
//! wait for a connection.

use std::time::{Duration, Instant};

use lectern_api::keys::Scope;
use lectern_tests::seed::create_key;
use lectern_tests::{TestApp, TestDatabase};
use sqlx::postgres::PgPoolOptions;
use uuid::Uuid;

/// Connections of the app's set; its default share per workspace is a quarter.
const CONNECTIONS: u32 = 8;
/// How long a request waits for a connection, or for its workspace's share.
const ACQUIRE_TIMEOUT: Duration = Duration::from_millis(500);
/// The flooding key's searches sent at once.
const FLOOD: usize = 100;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_unindexed_searches_from_one_workspace_leaves_another_workspace_served_without_error_or_stall() {
    let db = TestDatabase::create().await;
    let (busy, quiet) = (Uuid::new_v4(), Uuid::new_v4());
    // Enough contacts that a search for a term none of them holds reads for a while.
    sqlx::query(
        "insert into contacts (workspace_id, id, version, status, name, email, is_customer, is_supplier, created_at)
         select $1, gen_random_uuid(), 1, 'active', 'Contact ' || md5(n::text), 'c' || n || '@example.com',
                true, false, now() - n * interval '1 second'
         from generate_series(1, 100000) as n",
    )
    .bind(busy)
    .execute(&db.pool)
    .await
    .expect("seed the busy workspace");
    sqlx::query(
        "insert into contacts (workspace_id, id, version, status, name, is_customer, is_supplier, created_at)
                 values ($1, gen_random_uuid(), 1, 'active', 'Quiet GmbH', true, false, now())",
    )
    .bind(quiet)
    .execute(&db.pool)
    .await
    .expect("seed the quiet workspace");
    sqlx::query("vacuum analyze contacts").execute(&db.pool).await.expect("vacuum");
    let pool = PgPoolOptions::new()
        .max_connections(CONNECTIONS)
        .acquire_timeout(ACQUIRE_TIMEOUT)
        .connect(&db.url)
        .await
        .expect("the app's pool");
    let app = TestApp::spawn(pool).await;
    let (_, busy_key) = create_key(&db.pool, busy, &[Scope::ContactsRead]).await;
    let (_, quiet_key) = create_key(&db.pool, quiet, &[Scope::ContactsRead]).await;

    let flood: Vec<_> = (0..FLOOD)
        .map(|_| {
            let (app_url, http, key) = (app.url("/v1/contacts?search=zq"), app.http.clone(), busy_key.clone());
            tokio::spawn(async move {
                let response = http.get(app_url).header("X-API-Key", key).send().await.expect("a flood request");
                (response.status().as_u16(), response.headers().contains_key("retry-after"))
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut slowest = Duration::ZERO;
    for index in 0..20 {
        let started = Instant::now();
        let reply = app.get(&quiet_key, &format!("/v1/contacts?search=quiet&limit={}", 1 + index % 50)).await;
        slowest = slowest.max(started.elapsed());
        assert_eq!(reply.status, 200, "the quiet workspace got an error during the flood: {}", reply.text);
        assert_eq!(reply.names(), ["Quiet GmbH"]);
    }
    let mut statuses = Vec::new();
    for request in flood {
        statuses.push(request.await.expect("a flood task"));
    }

    assert!(
        slowest < 2 * ACQUIRE_TIMEOUT,
        "the quiet workspace waited {slowest:?}, as if for a connection held by the flood"
    );
    assert!(
        statuses.iter().all(|(status, _)| matches!(status, 200 | 429)),
        "the flood got other answers: {statuses:?}"
    );
    assert!(
        statuses.iter().any(|(status, _)| *status == 429),
        "the flood was never refused within its share: {statuses:?}"
    );
    assert!(statuses.iter().all(|(status, retry_after)| *status != 429 || *retry_after), "a 429 without Retry-After");
}
