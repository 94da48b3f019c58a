//! The change listener under failure: a LISTEN connection that goes silent without
//! closing (its PostgreSQL backend frozen with SIGSTOP, as a NAT or firewall that
//! forgot the connection would leave it), truncated tables, and the key lookups of
//! many integrations behind one address while the caches are bypassed.

use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use lectern_api::keys::Scope;
use lectern_api::rate_limit::Policy;
use lectern_api::reads::notifications::{LISTENER_APPLICATION, SILENT_FAILURE_NOTICED_WITHIN};
use lectern_tests::app::AppOptions;
use lectern_tests::process::signal;
use lectern_tests::seed::create_key;
use lectern_tests::{ContactSeed, TestApp, TestDatabase};
use sqlx::PgPool;
use uuid::Uuid;

/// Slack on top of a stated bound: the machine is small and shared.
const MARGIN: Duration = Duration::from_secs(3);

/// The app's LISTEN backend, stopped (SIGSTOP): its connection stays open and carries
/// nothing. Continued when dropped, so the database can be dropped after the test.
struct FrozenListener {
    pid: i32,
}

impl FrozenListener {
    async fn freeze(pool: &PgPool) -> Self {
        let pid: i32 = sqlx::query_scalar(
            "select pid from pg_stat_activity where application_name = $1 and datname = current_database()",
        )
        .bind(LISTENER_APPLICATION)
        .fetch_one(pool)
        .await
        .expect("the app's listener backend");
        signal(pid, "STOP");
        Self { pid }
    }
}

impl Drop for FrozenListener {
    fn drop(&mut self) {
        signal(self.pid, "CONT");
    }
}

/// Asks `ask` every 10 ms until it says yes; returns how long that took, or fails
/// after `bound` plus the margin, naming `what`. Often: a listener that failed is
/// back within a few hundred milliseconds, and a check of its outage must not miss it.
async fn within(bound: Duration, what: &str, mut ask: impl AsyncFnMut() -> bool) -> Duration {
    let started = Instant::now();
    loop {
        if ask().await {
            return started.elapsed();
        }
        assert!(started.elapsed() < bound + MARGIN, "{what} still not so after {:?}", started.elapsed());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_key_revoked_while_the_listener_is_silently_dead_is_refused_within_the_stated_bound() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (key_id, key) = create_key(&db.pool, Uuid::new_v4(), &[Scope::ContactsRead]).await;
    app.get(&key, "/v1/contacts").await.assert_ok();
    let frozen = FrozenListener::freeze(&db.pool).await;

    sqlx::query("update api_keys set revoked_at = now() where id = $1").bind(&key_id).execute(&db.pool).await.unwrap();

    // Readiness says so while the listener is down (it reconnects soon after).
    let outage_seen =
        within(SILENT_FAILURE_NOTICED_WITHIN, "readiness degraded by the listener's outage", async || {
            let readiness = app.get_operations("/readyz").await;
            assert_eq!(readiness.status, 200, "a bypassed cache is degraded, not unready: {}", readiness.text);
            readiness.body["degraded"].to_string().contains("change listener down")
        });
    let revoked_refused = within(SILENT_FAILURE_NOTICED_WITHIN, "the revoked key refused", async || {
        app.get(&key, "/v1/contacts").await.status == 401
    });
    tokio::join!(outage_seen, revoked_refused);
    drop(frozen);
}

#[tokio::test]
async fn a_first_page_changed_while_the_listener_is_silently_dead_is_fresh_within_the_stated_bound() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    ContactSeed::named("Before").insert(&db.pool, workspace).await;
    assert_eq!(app.get(&key, "/v1/contacts").await.names().len(), 1);
    let frozen = FrozenListener::freeze(&db.pool).await;

    ContactSeed::named("During the silence").insert(&db.pool, workspace).await;

    within(SILENT_FAILURE_NOTICED_WITHIN, "the new contact on the first page", async || {
        app.get(&key, "/v1/contacts").await.names().len() == 2
    })
    .await;
    drop(frozen);
}

#[tokio::test]
async fn truncating_api_keys_refuses_every_cached_key_and_truncating_contacts_empties_cached_first_pages() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    ContactSeed::named("Acme").insert(&db.pool, workspace).await;
    assert_eq!(app.get(&key, "/v1/contacts").await.names(), ["Acme"]);

    sqlx::query("truncate contacts").execute(&db.pool).await.unwrap();
    within(Duration::from_secs(1), "the truncated contacts gone from the first page", async || {
        app.get(&key, "/v1/contacts").await.names().is_empty()
    })
    .await;

    sqlx::query("truncate api_keys").execute(&db.pool).await.unwrap();
    within(Duration::from_secs(1), "a key of the truncated table refused", async || {
        app.get(&key, "/v1/contacts").await.status == 401
    })
    .await;
}

#[tokio::test]
async fn valid_keys_sharing_one_address_are_never_refused_by_the_lookup_limit_even_while_the_cache_is_bypassed() {
    let db = TestDatabase::create().await;
    let two_a_minute = Policy { per_minute: NonZeroU32::MIN, burst: NonZeroU32::new(2).unwrap() };
    let app =
        TestApp::spawn_with(db.pool.clone(), AppOptions { lookups_per_address: two_a_minute, ..AppOptions::default() })
            .await;
    let mut keys = Vec::new();
    for _ in 0..6 {
        keys.push(create_key(&db.pool, Uuid::new_v4(), &[Scope::ContactsRead]).await.1);
    }
    // Six integrations behind one proxy, each seen for the first time.
    for key in &keys {
        app.get(key, "/v1/contacts").await.assert_ok();
    }

    let frozen = FrozenListener::freeze(&db.pool).await;
    within(SILENT_FAILURE_NOTICED_WITHIN, "the listener's failure noticed", async || {
        app.get_operations("/readyz").await.body["degraded"].is_array()
    })
    .await;
    for round in 0..3 {
        for key in &keys {
            let reply = app.get(key, "/v1/contacts").await;
            assert_eq!(
                reply.status, 200,
                "round {round}: a valid key was refused while the cache is bypassed: {}",
                reply.text
            );
        }
    }

    // Made-up keys from the same address still meet the limit.
    let statuses: Vec<u16> = {
        let mut statuses = Vec::new();
        for index in 0..4 {
            let made_up = format!("lk_live_{:016}_{}", index, "A".repeat(43));
            statuses.push(app.get(&made_up, "/v1/contacts").await.status);
        }
        statuses
    };
    assert_eq!(statuses.last(), Some(&429), "made-up keys past the burst must be refused: {statuses:?}");
    for key in &keys {
        app.get(key, "/v1/contacts").await.assert_ok();
    }
    drop(frozen);
}
