//! Fair deliveries: one workspace with thousands of endpoints must not hold back another
//! workspace's delivery, and the endpoints' leases spread over the `serve` processes.

use std::time::{Duration, Instant};

use lectern_api::keys::{Pepper, Peppers};
use lectern_api::webhooks::store::create_endpoint;
use lectern_api::webhooks::Resource;
use lectern_tests::seed::{ContactSeed, TEST_PEPPER};
use lectern_tests::serve::{Serve, ServeOptions};
use lectern_tests::webhooks::Receiver;
use lectern_tests::TestDatabase;
use secrecy::SecretString;
use sqlx::PgPool;
use uuid::Uuid;

/// Endpoints of the busy workspace, as the issue that found the delay had them.
const WAVE: usize = 2_000;
/// How late another workspace's delivery may be while the wave goes out.
const FAIR_WITHIN: Duration = Duration::from_secs(1);
const WITHIN: Duration = Duration::from_secs(60);

fn serve(database_url: &str) -> ServeOptions {
    Serve::on(database_url).private_webhook_targets().webhook_lease_ms(3_000)
}

/// Registers `count` endpoints of `workspace` for contacts, all to `url`.
async fn endpoints(pool: &PgPool, workspace: Uuid, url: &str, count: usize) {
    let peppers = Peppers::only(Pepper::new(SecretString::from(TEST_PEPPER.to_owned())));
    for _ in 0..count {
        create_endpoint(pool, &peppers, workspace, url, &[Resource::Contacts]).await.expect("register an endpoint");
    }
}

/// Leases held by each live owner, most first.
async fn holdings(pool: &PgPool) -> Vec<i64> {
    sqlx::query_scalar(
        "select count(*) from webhook_endpoints where lease_until > now() group by lease_owner order by 1 desc",
    )
    .fetch_all(pool)
    .await
    .expect("read the leases")
}

async fn wait_until_held(pool: &PgPool, endpoints: i64) {
    let deadline = Instant::now() + WITHIN;
    while holdings(pool).await.iter().sum::<i64>() < endpoints {
        assert!(Instant::now() < deadline, "the endpoints were never all held: {:?}", holdings(pool).await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// How long after its commit a change of `workspace` reaches `receiver`.
async fn delivered_after(pool: &PgPool, receiver: &Receiver, workspace: Uuid, name: &str) -> Duration {
    let before = receiver.count();
    let committed = Instant::now();
    ContactSeed::named(name).insert(pool, workspace).await;
    let deliveries = receiver.wait_for(WITHIN, name, |deliveries| deliveries.len() > before).await;
    deliveries[before].arrived.duration_since(committed)
}

/// Rule: while a write in a workspace with 2,000 endpoints sends its wave of deliveries,
/// another workspace's delivery arrives within a second of its commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workspace_with_two_thousand_endpoints_delays_another_workspaces_delivery_by_under_a_second() {
    let db = TestDatabase::create().await;
    let (busy, quiet) = (Uuid::new_v4(), Uuid::new_v4());
    let (wave_receiver, receiver) = (Receiver::start().await, Receiver::start().await);
    endpoints(&db.pool, busy, &wave_receiver.url, WAVE).await;
    endpoints(&db.pool, quiet, &receiver.url, 1).await;
    let serve = serve(&db.url).start().await;
    wait_until_held(&db.pool, WAVE as i64 + 1).await;
    let alone = delivered_after(&db.pool, &receiver, quiet, "Alone Ltd").await;

    ContactSeed::named("The Wave Ltd").insert(&db.pool, busy).await;
    let during = delivered_after(&db.pool, &receiver, quiet, "During The Wave Ltd").await;
    let waved = wave_receiver.wait_for(WITHIN, "the wave", |deliveries| deliveries.len() >= WAVE).await;

    assert!(
        during < FAIR_WITHIN,
        "another workspace's delivery came {during:?} after its commit during the wave ({alone:?} alone)"
    );
    assert_eq!(waved.len(), WAVE, "each endpoint of the busy workspace was told once");
    serve.stop().await;
}

/// Rule: the endpoints' leases spread over the `serve` processes: a process that starts
/// beside one holding every endpoint soon holds its share.
#[tokio::test]
async fn a_second_process_takes_its_share_of_the_endpoints_from_one_holding_them_all() {
    const ENDPOINTS: usize = 200;
    let db = TestDatabase::create().await;
    let receiver = Receiver::start().await;
    endpoints(&db.pool, Uuid::new_v4(), &receiver.url, ENDPOINTS).await;
    let first = serve(&db.url).start().await;
    wait_until_held(&db.pool, ENDPOINTS as i64).await;
    assert_eq!(holdings(&db.pool).await, [ENDPOINTS as i64], "one process holds them all");

    let second = serve(&db.url).start().await;

    let deadline = Instant::now() + WITHIN;
    loop {
        let held = holdings(&db.pool).await;
        if held.len() == 2
            && held.iter().all(|share| *share >= (ENDPOINTS as i64) * 2 / 5)
            && held.iter().sum::<i64>() == ENDPOINTS as i64
        {
            break;
        }
        assert!(Instant::now() < deadline, "the leases never spread over both processes: {held:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    first.stop().await;
    second.stop().await;
}
