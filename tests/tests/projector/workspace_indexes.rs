//! A workspace that grows large gets a search index of its own, built beside the
//! projection, and loses it when it shrinks; searches in it are planned on that index.

use std::time::Duration;

use lectern_projector::daemon::consumer::RunSettings;
use lectern_projector::daemon::workspace_indexes::{self, index_name, OwnIndexSettings, ROUND_LOCK};
use lectern_tests::nats::TestNats;
use lectern_tests::projector::{contact_event, eventually, item_created, item_data, publish, RunningProjector};
use lectern_tests::TestDatabase;
use serde_json::Value;
use sqlx::PgPool;
use uuid::Uuid;

const WITHIN: Duration = Duration::from_secs(20);

/// Small enough for a test to cross, with a look every fraction of a second.
fn settings(from_rows: i64) -> RunSettings {
    RunSettings {
        own_indexes: OwnIndexSettings { from_rows, check_every: Duration::from_millis(200) },
        ..RunSettings::default()
    }
}

/// Whether `name` exists, and is valid.
async fn index_state(pool: &PgPool, name: &str) -> Option<bool> {
    workspace_indexes::validity(pool, name).await.expect("read pg_index")
}

async fn active(pool: &PgPool, table: &str, workspace: Uuid) -> i64 {
    sqlx::query_scalar(&format!("select count(*) from {table} where workspace_id = $1 and status = 'active'"))
        .bind(workspace)
        .fetch_one(pool)
        .await
        .expect("count")
}

/// Publishes `count` contacts into `workspace`, each with a name no other contact has.
async fn publish_contacts(nats: &TestNats, workspace: Uuid, count: usize) -> Vec<Uuid> {
    let client = nats.client().await;
    let mut ids = Vec::with_capacity(count);
    for index in 0..count {
        let id = Uuid::new_v4();
        publish(&client, &contact_event("created", workspace, id, 1, &format!("Kontor {index:04} {}", id.simple())))
            .await;
        ids.push(id);
    }
    ids
}

/// Waits until `workspace` has `count` active contacts, then refreshes the planner's
/// statistics, where the projector looks for large workspaces (autovacuum does this in
/// production, after 2 % of a table changes).
async fn applied_and_analysed(pool: &PgPool, workspace: Uuid, count: i64) {
    let applied = eventually(WITHIN, || async { active(pool, "contacts", workspace).await == count }).await;
    assert!(applied, "{count} contacts were not applied");
    sqlx::query("analyze contacts, items").execute(pool).await.expect("analyze");
}

#[tokio::test]
async fn a_workspace_reaching_the_threshold_gets_its_own_search_index_and_searches_in_it_take_that_index() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let projector = RunningProjector::start_consuming_with(&nats.url, db.pool.clone(), settings(30)).await;
    let (large, small) = (Uuid::new_v4(), Uuid::new_v4());
    let ids = publish_contacts(&nats, large, 40).await;
    publish_contacts(&nats, small, 10).await;
    let client = nats.client().await;
    for index in 0..30 {
        let item = item_data(&format!("Beratung {index}"), Value::Null, Value::Null);
        publish(&client, &item_created(large, Uuid::new_v4(), item)).await;
    }
    applied_and_analysed(&db.pool, large, 40).await;
    let items_applied = eventually(WITHIN, || async { active(&db.pool, "items", large).await == 30 }).await;
    assert!(items_applied, "the items were not applied");
    sqlx::query("analyze items").execute(&db.pool).await.expect("analyze");

    let own = [index_name("contacts", large), index_name("items", large)];
    let built = eventually(WITHIN, || async {
        index_state(&db.pool, &own[0]).await == Some(true) && index_state(&db.pool, &own[1]).await == Some(true)
    })
    .await;
    assert!(built, "large workspace's own indexes: {:?}", [&own[0], &own[1]]);
    assert_eq!(index_state(&db.pool, &index_name("contacts", small)).await, None, "a workspace of 10 got one");

    projector.stop().await;

    // The API's search shape (listing/query.rs), planned for this execution's workspace and
    // pattern as the API's search connections do. At a test's few rows any scan would do,
    // so the other paths are set aside (in a transaction rolled back at the end): the
    // choice left is between the shared trigram index and the workspace's own.
    let mut connection = db.pool.begin().await.expect("transaction");
    for setting in [
        "set local plan_cache_mode = force_custom_plan",
        "set local enable_seqscan = off",
        "drop index contacts_by_created",
        "drop index contacts_by_name",
        "drop index contacts_changes",
        "alter table contacts drop constraint contacts_pkey",
    ] {
        sqlx::query(setting).execute(&mut *connection).await.expect(setting);
    }
    let rare = ids[7].simple().to_string();
    let plan: Vec<String> = sqlx::query_scalar(
        "explain select id from contacts where workspace_id = $1 and status = 'active' \
         and search_text like '%' || (lower($2 collate \"und-x-icu\") collate \"default\") || '%' \
         order by created_at, id limit 51",
    )
    .bind(large)
    .bind(&rare)
    .fetch_all(&mut *connection)
    .await
    .expect("explain");
    let plan = plan.join("\n");
    assert!(plan.contains(&own[0]), "the search did not take the workspace's own index:\n{plan}");
    let found: Vec<Uuid> = sqlx::query_scalar(
        "select id from contacts where workspace_id = $1 and status = 'active' \
         and search_text like '%' || (lower($2 collate \"und-x-icu\") collate \"default\") || '%'",
    )
    .bind(large)
    .bind(&rare)
    .fetch_all(&mut *connection)
    .await
    .expect("search");
    assert_eq!(found, vec![ids[7]], "the search through the own index found other rows");
    connection.rollback().await.expect("rollback");
}

#[tokio::test]
async fn a_workspace_that_shrinks_below_half_the_threshold_loses_its_own_index() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let projector = RunningProjector::start_consuming_with(&nats.url, db.pool.clone(), settings(30)).await;
    let large = Uuid::new_v4();
    let ids = publish_contacts(&nats, large, 40).await;
    applied_and_analysed(&db.pool, large, 40).await;
    let own = index_name("contacts", large);
    assert!(eventually(WITHIN, || async { index_state(&db.pool, &own).await == Some(true) }).await, "{own} not built");

    // 16 active rows: below the threshold, not below half of it; the index stays.
    let client = nats.client().await;
    for id in &ids[..24] {
        publish(&client, &contact_event("archived", large, *id, 2, "")).await;
    }
    applied_and_analysed(&db.pool, large, 16).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(index_state(&db.pool, &own).await, Some(true), "dropped at 16 active rows of a threshold of 30");

    for id in &ids[24..26] {
        publish(&client, &contact_event("archived", large, *id, 2, "")).await;
    }
    applied_and_analysed(&db.pool, large, 14).await;
    let dropped = eventually(WITHIN, || async { index_state(&db.pool, &own).await.is_none() }).await;
    assert!(dropped, "{own} outlived its workspace's shrinking to 14 active rows");
    projector.stop().await;
}

#[tokio::test]
async fn an_own_index_left_invalid_by_a_failed_build_is_dropped_and_built_again() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let loader = RunningProjector::start_consuming_with(&nats.url, db.pool.clone(), settings(i64::MAX)).await;
    let large = Uuid::new_v4();
    publish_contacts(&nats, large, 40).await;
    applied_and_analysed(&db.pool, large, 40).await;
    loader.stop().await;

    // A concurrent build that fails (here on duplicates) leaves an invalid index behind,
    // under the name the projector would use.
    let own = index_name("contacts", large);
    let failed = sqlx::raw_sql(&format!("create unique index concurrently {own} on contacts (is_customer)"))
        .execute(&db.pool)
        .await;
    assert!(failed.is_err(), "the unique build should have failed");
    assert_eq!(index_state(&db.pool, &own).await, Some(false), "no invalid index to start from");

    let projector = RunningProjector::start_consuming_with(&nats.url, db.pool.clone(), settings(30)).await;
    let rebuilt = eventually(WITHIN, || async { index_state(&db.pool, &own).await == Some(true) }).await;
    let definition: String = sqlx::query_scalar("select indexdef from pg_indexes where indexname = $1")
        .bind(&own)
        .fetch_one(&db.pool)
        .await
        .expect("index definition");
    projector.stop().await;
    assert!(rebuilt, "{own} was not rebuilt");
    assert!(definition.contains("USING gin") && definition.contains(&large.to_string()), "rebuilt as {definition}");
}

#[tokio::test]
async fn a_workspaces_own_index_has_its_pending_list_merged_beside_the_commits() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    sqlx::query("create extension if not exists pgstattuple").execute(&db.pool).await.expect("pgstattuple");
    let projector = RunningProjector::start_consuming_with(&nats.url, db.pool.clone(), settings(30)).await;
    let large = Uuid::new_v4();
    publish_contacts(&nats, large, 40).await;
    applied_and_analysed(&db.pool, large, 40).await;
    let own = index_name("contacts", large);
    assert!(eventually(WITHIN, || async { index_state(&db.pool, &own).await == Some(true) }).await, "{own} not built");

    publish_contacts(&nats, large, 10).await;
    applied_and_analysed(&db.pool, large, 50).await;
    let pending = || async {
        sqlx::query_scalar::<_, i64>("select pending_tuples from pgstatginindex($1::regclass)")
            .bind(&own)
            .fetch_one(&db.pool)
            .await
            .expect("read the GIN index's metapage")
    };
    let merged = eventually(WITHIN, || async { pending().await == 0 }).await;
    let left = pending().await;
    projector.stop().await;
    assert!(merged, "{left} entries still pending in {own}");
}

#[tokio::test]
async fn no_projector_looks_while_another_holds_the_round_lock() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    // This session stands in for another projector in the middle of its round.
    let mut other = db.pool.acquire().await.expect("connection");
    sqlx::query("select pg_advisory_lock($1)").bind(ROUND_LOCK).execute(&mut *other).await.expect("lock");
    let projector = RunningProjector::start_consuming_with(&nats.url, db.pool.clone(), settings(30)).await;
    let large = Uuid::new_v4();
    publish_contacts(&nats, large, 40).await;
    applied_and_analysed(&db.pool, large, 40).await;
    let own = index_name("contacts", large);

    // Several looks' worth of time (one every 200 ms).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let while_locked = index_state(&db.pool, &own).await;
    sqlx::query("select pg_advisory_unlock($1)").bind(ROUND_LOCK).execute(&mut *other).await.expect("unlock");
    let built = eventually(WITHIN, || async { index_state(&db.pool, &own).await == Some(true) }).await;
    projector.stop().await;
    assert_eq!(while_locked, None, "a projector built {own} during another's round");
    assert!(built, "{own} not built once the lock was free");
}
