//! The plans PostgreSQL really picks for the SQL the API sends: every listing is an
//! index range scan within the workspace (under the generic plan a prepared statement
//! gets), and search can use the per-workspace trigram index.

use lectern_api::db::contacts::{ContactType, Contacts};
use lectern_api::db::listing::list_sql;
use lectern_api::listing::{Limit, ListRequest, Position, SearchText, SortKey};
use lectern_tests::TestDatabase;
use sqlx::{Execute, PgPool};
use uuid::Uuid;

/// Fills one large and one small workspace, then refreshes statistics.
async fn seed_volume(pool: &PgPool) -> (Uuid, Uuid) {
    let (large, small) = (Uuid::new_v4(), Uuid::new_v4());
    sqlx::query(
        "insert into contacts (workspace_id, id, version, status, name, email, tin, is_customer, is_supplier, created_at)
         select case when g <= 20000 then $1 else $2 end, gen_random_uuid(), 1, 'active',
                'Company ' || md5(g::text), 'contact' || g || '@example.com', 'DE' || (100000000 + g),
                g % 2 = 0, g % 3 = 0, timestamptz '2020-01-01' + g * interval '1 second'
         from generate_series(1, 20800) g",
    )
    .bind(large)
    .bind(small)
    .execute(pool)
    .await
    .expect("seed volume");
    sqlx::query("analyze contacts").execute(pool).await.expect("analyze");
    (large, small)
}

fn request(
    workspace_id: Uuid,
    sort: SortKey,
    search: Option<&str>,
    after: Option<Position>,
) -> ListRequest<ContactType> {
    ListRequest {
        workspace_id,
        search: search.map(|text| text.parse::<SearchText>().expect("search text")),
        kind: ContactType::All,
        sort,
        limit: Limit::default(),
        after,
    }
}

/// EXPLAIN of exactly the statement the API would send for `request`.
async fn plan(pool: &PgPool, request: &ListRequest<ContactType>, generic: bool) -> String {
    let mut builder = list_sql::<Contacts>(request);
    let sql = format!("explain (costs off) {}", builder.sql());
    let arguments = builder.build().take_arguments().expect("arguments").expect("bound arguments");
    let mut connection = pool.acquire().await.expect("connection");
    let mode = if generic { "force_generic_plan" } else { "force_custom_plan" };
    sqlx::query(&format!("set plan_cache_mode = {mode}")).execute(&mut *connection).await.expect("set mode");
    let lines: Vec<String> =
        sqlx::query_scalar_with(&sql, arguments).fetch_all(&mut *connection).await.expect("explain");
    sqlx::query("reset plan_cache_mode").execute(&mut *connection).await.expect("reset");
    lines.join("\n")
}

#[tokio::test]
async fn listing_by_created_at_is_a_keyset_index_range_scan_under_the_generic_plan() {
    let db = TestDatabase::create().await;
    let (large, _) = seed_volume(&db.pool).await;
    let after = Position::CreatedAt { at: chrono::Utc::now(), id: Uuid::nil() };

    let first = plan(&db.pool, &request(large, SortKey::CreatedAt, None, None), true).await;
    let deep = plan(&db.pool, &request(large, SortKey::CreatedAt, None, Some(after)), true).await;

    assert!(first.contains("Index Scan using contacts_by_created"), "{first}");
    assert!(deep.contains("Index Scan using contacts_by_created"), "{deep}");
    assert!(deep.contains("ROW(created_at, id) > ROW("), "the cursor must be an index condition:\n{deep}");
    assert!(!deep.contains("Sort"), "keyset order comes from the index:\n{deep}");
}

#[tokio::test]
async fn listing_by_name_is_a_keyset_index_range_scan_under_the_generic_plan() {
    let db = TestDatabase::create().await;
    let (large, _) = seed_volume(&db.pool).await;
    let after = Position::Name { name: "Company 8".to_owned(), id: Uuid::nil() };

    let deep = plan(&db.pool, &request(large, SortKey::Name, None, Some(after)), true).await;

    assert!(deep.contains("Index Scan using contacts_by_name"), "{deep}");
    assert!(deep.contains("ROW(name, id) > ROW("), "the cursor must be an index condition:\n{deep}");
    assert!(!deep.contains("Sort"), "{deep}");
}

#[tokio::test]
async fn a_rare_search_term_in_a_large_workspace_uses_the_workspace_trigram_index() {
    let db = TestDatabase::create().await;
    let (large, _) = seed_volume(&db.pool).await;

    let rare = plan(&db.pool, &request(large, SortKey::CreatedAt, Some("contact12345@"), None), false).await;

    assert!(rare.contains("contacts_search"), "{rare}");
    assert!(
        rare.contains("workspace_id = ") && rare.contains("search_text ~~"),
        "both columns are index conditions:\n{rare}"
    );
}

#[tokio::test]
async fn a_search_in_a_small_workspace_never_scans_other_workspaces() {
    let db = TestDatabase::create().await;
    let (_, small) = seed_volume(&db.pool).await;

    let search = plan(&db.pool, &request(small, SortKey::CreatedAt, Some("company"), None), false).await;

    assert!(!search.contains("Seq Scan"), "{search}");
}
