//! The connections listings and searches borrow: each statement shape is prepared
//! once per connection, listings keep PostgreSQL's generic plan while searches are
//! planned for every execution, a full set switches an idle connection to the mode
//! a statement needs rather than open another, and a connection whose statement was abandoned
//! half-way is drained before anyone else reads from it, without the set ever
//! running more statements than it has connections.

use std::time::{Duration, Instant};

use lectern_api::listing::query::{fetch_page, SearchShape};
use lectern_api::listing::{Limit, ListRequest, SearchText, SortKey};
use lectern_api::reads::connections::{PlanMode, ReadConnections};
use lectern_api::reads::PoolSettings;
use lectern_api::resources::contacts::{ContactType, Contacts};
use lectern_api::resources::Resource;
use lectern_tests::{ContactSeed, TestDatabase};
use sqlx::postgres::PgRow;
use sqlx::{Connection, PgConnection, Row};
use uuid::Uuid;

/// The API's settings with a set (and pool) of `max_connections`.
pub(crate) fn settings(max_connections: u32) -> PoolSettings {
    PoolSettings {
        max_connections,
        acquire_timeout: Duration::from_secs(10),
        statement_timeout: Duration::from_secs(30),
        connections_per_workspace: max_connections,
    }
}

/// A set of `max_connections` on the test database, as the API opens it.
pub(crate) fn read_connections(db: &TestDatabase, max_connections: u32) -> ReadConnections {
    lectern_api::reads::read_connections(&db.url, &settings(max_connections)).expect("connect options")
}

fn listing(workspace_id: Uuid, search: Option<&str>) -> ListRequest<ContactType> {
    ListRequest {
        workspace_id,
        search: search.map(|text| text.parse::<SearchText>().expect("search text")),
        kind: ContactType::All,
        sort: SortKey::CreatedAt,
        limit: Limit::default(),
        after: None,
    }
}

async fn seeded_workspace(db: &TestDatabase, names: &[&str]) -> Uuid {
    let workspace_id = Uuid::new_v4();
    for (index, name) in names.iter().enumerate() {
        ContactSeed::named(name).at(index as i64).insert(&db.pool, workspace_id).await;
    }
    workspace_id
}

/// How the statements prepared on the (only) connection of `connections` were planned,
/// as (statement, generic plans, custom plans), read on that very connection.
async fn prepared_statements(connections: &ReadConnections, mode: PlanMode) -> Vec<(String, i64, i64)> {
    let query = sqlx::query(
        "select statement, generic_plans, custom_plans from pg_prepared_statements where statement like 'select % from contacts %' \
         and statement not like '%pg_prepared_statements%'",
    );
    let rows = connections.fetch_all(mode, query).await.expect("read pg_prepared_statements");
    rows.iter().map(|row| (row.get(0), row.get(1), row.get(2))).collect()
}

fn names(rows: &[PgRow]) -> Vec<&str> {
    rows.iter().map(|row| Contacts::record(row).expect("a contact row").name.as_str().expect("UTF-8")).collect()
}

#[tokio::test]
async fn listings_reuse_one_prepared_statement_under_its_generic_plan_and_searches_are_planned_every_time() {
    let db = TestDatabase::create().await;
    let workspace_id = seeded_workspace(&db, &["Ada Lovelace", "Alan Turing", "Grace Hopper"]).await;
    let connections = read_connections(&db, 1);

    for _ in 0..10 {
        let page = fetch_page::<Contacts>(&connections, &listing(workspace_id, None), SearchShape::Planned)
            .await
            .expect("listing");
        assert_eq!(names(&page), ["Ada Lovelace", "Alan Turing", "Grace Hopper"]);
    }
    for term in ["ada", "turing", "hopper", "a", "lovelace", "grace", "alan", "ing", "ace", "per"] {
        let page = fetch_page::<Contacts>(&connections, &listing(workspace_id, Some(term)), SearchShape::Planned)
            .await
            .expect("search");
        assert!(!page.is_empty(), "{term} matches a contact");
        assert!(names(&page).iter().all(|name| name.to_lowercase().contains(term)), "{term}: {:?}", names(&page));
    }
    let statements = prepared_statements(&connections, PlanMode::Generic).await;

    let listing_statement = statements.iter().find(|(sql, ..)| !sql.contains("like")).expect("the listing statement");
    let search_statement = statements.iter().find(|(sql, ..)| sql.contains("like")).expect("the search statement");
    assert_eq!(statements.len(), 2, "one statement per shape, prepared once: {statements:?}");
    let (_, generic, custom) = listing_statement;
    assert_eq!((*generic, *custom), (10, 0), "a listing always takes the generic plan: {listing_statement:?}");
    assert_eq!(search_statement.1, 0, "a search is never given a generic plan: {search_statement:?}");
    assert_eq!(search_statement.2, 10, "every search execution is planned for its pattern: {search_statement:?}");
}

/// The plan mode a statement borrowed in `mode` runs under, read on its connection.
async fn plan_cache_mode(connections: &ReadConnections, mode: PlanMode) -> String {
    let query = sqlx::query("select current_setting('plan_cache_mode')");
    let rows = connections.fetch_all(mode, query).await.expect("read plan_cache_mode");
    rows.first().map(|row| row.get(0)).unwrap_or_default()
}

#[tokio::test]
async fn a_full_set_switches_an_idle_connection_to_the_mode_a_statement_needs() {
    let db = TestDatabase::create().await;
    let connections = read_connections(&db, 1);

    // One connection only: every borrow after the first takes it, whatever mode it is in.
    for mode in [PlanMode::PerExecution, PlanMode::Generic, PlanMode::Generic, PlanMode::PerExecution] {
        let expected = match mode {
            PlanMode::Generic => "force_generic_plan",
            PlanMode::PerExecution => "force_custom_plan",
        };
        assert_eq!(plan_cache_mode(&connections, mode).await, expected, "a statement borrowed for {mode:?}");
    }
    assert_eq!(connections.usage(), (1, 1), "the same connection switched; no second one was opened");
    assert_eq!(sessions_of_the_api(&db).await, 1, "one session of the API");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_statement_is_drained_before_its_connection_serves_anyone_else() {
    let db = TestDatabase::create().await;
    let workspace_id = seeded_workspace(&db, &["Ada Lovelace", "Alan Turing"]).await;
    let other_workspace = seeded_workspace(&db, &["Edsger Dijkstra"]).await;
    let connections = read_connections(&db, 1);
    // Opens the set's one connection, so that both statements below must share it.
    fetch_page::<Contacts>(&connections, &listing(other_workspace, None), SearchShape::Planned)
        .await
        .expect("first listing");
    let mut locker = PgConnection::connect(&db.url).await.expect("connect the locking session");
    sqlx::raw_sql("begin; lock table contacts in access exclusive mode").execute(&mut locker).await.expect("lock");

    let abandoned = tokio::spawn({
        let connections = connections.clone();
        async move { fetch_page::<Contacts>(&connections, &listing(workspace_id, None), SearchShape::Planned).await }
    });
    wait_for_lock_waiters(&db, 1).await;
    // The client goes away while its statement is inside PostgreSQL.
    abandoned.abort();
    let next = tokio::spawn({
        let connections = connections.clone();
        async move { fetch_page::<Contacts>(&connections, &listing(other_workspace, None), SearchShape::Planned).await }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let waiting_meanwhile = db.sessions_waiting_on_a_lock().await;
    let next_finished_meanwhile = next.is_finished();
    sqlx::raw_sql("rollback").execute(&mut locker).await.expect("release the lock");
    let next = tokio::time::timeout(Duration::from_secs(10), next).await.expect("the next listing is answered");

    assert_eq!(waiting_meanwhile, 1, "the abandoned statement keeps its connection; no second one is opened");
    assert!(!next_finished_meanwhile, "the next listing waits for the set's one connection");
    let rows = next.expect("listing task").expect("the next listing");
    assert_eq!(names(&rows), ["Edsger Dijkstra"], "the next listing reads its own rows, not the abandoned ones");
    let (open, idle) = connections.usage();
    assert_eq!((open, idle), (1, 1), "the drained connection went back to the set");
    assert_eq!(sessions_of_the_api(&db).await, 1, "and it is the same connection, not a new one");
}

async fn wait_for_lock_waiters(db: &TestDatabase, count: i64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while db.sessions_waiting_on_a_lock().await < count {
        assert!(Instant::now() < deadline, "the statement never reached the lock");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn sessions_of_the_api(db: &TestDatabase) -> i64 {
    sqlx::query_scalar("select count(*) from pg_stat_activity where datname = $1 and application_name = 'lectern-api'")
        .bind(&db.name)
        .fetch_one(&db.pool)
        .await
        .expect("count the API's sessions")
}
