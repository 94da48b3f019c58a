//! Statements whose plan fits every execution are planned once per connection.
//! Left to choose (`plan_cache_mode = auto`), PostgreSQL planned a keyset page in a
//! large workspace, and every retrieve, again at each execution: the custom plans'
//! estimates came out cheaper than the generic one, though the plan was the same.

use lectern_api::listing::query::{fetch_page, SearchShape};
use lectern_api::listing::Keyed;
use lectern_api::listing::{Limit, ListRequest, SortKey};
use lectern_api::reads::connections::PlanMode;
use lectern_api::reads::replicas::Reads;
use lectern_api::resources::contacts::{ContactType, Contacts};
use lectern_api::resources::Resource;
use lectern_api::retrieve::lookups::Lookups;
use lectern_tests::TestDatabase;
use sqlx::postgres::PgRow;
use sqlx::Row;
use uuid::Uuid;

use crate::connections::{read_connections, settings};
use crate::plans::seed_volume;

/// (generic, custom) plans so far, from rows of [`PREPARED`].
fn plans_of(rows: &[PgRow]) -> Vec<(i64, i64)> {
    rows.iter().map(|row| (row.get::<i64, _>(0), row.get::<i64, _>(1))).collect()
}

/// The session's prepared statements whose text is like `$1`.
const PREPARED: &str = "select generic_plans, custom_plans from pg_prepared_statements \
                        where statement like $1 and statement not like '%pg_prepared_statements%'";

#[tokio::test]
async fn keyset_pages_deep_in_a_large_workspace_are_planned_once_per_connection() {
    let db = TestDatabase::create().await;
    let (workspace, _) = seed_volume(&db.pool).await;
    // One connection, so every statement below runs on the session that is asked.
    let connections = read_connections(&db, 1);
    let mut request = ListRequest {
        workspace_id: workspace,
        search: None,
        kind: ContactType::All,
        sort: SortKey::CreatedAt,
        limit: "100".parse::<Limit>().expect("limit"),
        after: None,
    };
    // The first page, then ten pages after it, each from the last record of the one before.
    for _ in 0..11 {
        let rows = fetch_page::<Contacts>(&connections, &request, SearchShape::Planned).await.expect("page");
        let last = Contacts::record(&rows[99]).expect("a contact");
        request.after = Some(last.position(SortKey::CreatedAt).expect("a position"));
    }

    let query = sqlx::query(PREPARED).bind("%(created_at, id) >%");
    let rows = connections.fetch_all(PlanMode::Generic, query).await.expect("prepared statements");
    assert_eq!(plans_of(&rows), [(10, 0)], "(generic, custom) plans of the page-after-a-cursor statement");
}

#[tokio::test]
async fn retrieves_are_planned_once_per_connection() {
    let db = TestDatabase::create().await;
    let (workspace, _) = seed_volume(&db.pool).await;
    let ids: Vec<Uuid> =
        sqlx::query_scalar("select id from contacts where workspace_id = $1 order by created_at limit 8")
            .bind(workspace)
            .fetch_all(&db.pool)
            .await
            .expect("ids");
    let pool = lectern_api::reads::lazy_pool(&db.url, &settings(1)).expect("options");
    let lookups = Lookups::<Contacts>::new(pool.clone(), Reads::beside(&pool));
    for id in &ids {
        let found = lookups.find(workspace, *id).await.expect("lookup");
        assert!(found.is_some(), "contact {id} is found");
    }

    let rows = sqlx::query(PREPARED).bind("%unnest(%").fetch_all(&pool).await.expect("prepared statements");
    assert_eq!(plans_of(&rows), [(8, 0)], "(generic, custom) plans of the retrieve statement");
}
