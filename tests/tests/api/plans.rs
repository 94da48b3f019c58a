//! The plans PostgreSQL really picks for the SQL the API sends: every listing is an
//! index range scan within the workspace (under the generic plan a prepared statement
//! gets); a search picks its page of ids from the order index alone where that is
//! cheap (a small workspace, a common term) and from the per-workspace trigram index
//! for a rare term in a large workspace, and reads no more rows than its page; a walk
//! (a search in a small workspace) does the former under one generic plan.

use lectern_api::listing::query::{list_sql, SearchShape};
use lectern_api::listing::{Limit, ListRequest, Position, SearchText, SortKey};
use lectern_api::resources::contacts::{ContactType, Contacts};
use lectern_tests::TestDatabase;
use serde_json::Value;
use sqlx::{Execute, PgPool};
use uuid::Uuid;

/// Fills one large and one small workspace, then refreshes statistics.
pub(crate) async fn seed_volume(pool: &PgPool) -> (Uuid, Uuid) {
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

/// EXPLAIN of exactly the statement the API would send for `request` (a search as a
/// planned one).
async fn plan(pool: &PgPool, request: &ListRequest<ContactType>, generic: bool) -> String {
    let mut builder = list_sql::<Contacts>(request, SearchShape::Planned);
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

/// EXPLAIN ANALYZE of the statement the API sends for a search, planned as the API's
/// unnamed statements are (with the real values), after a vacuum has made every page
/// all-visible as autovacuum keeps them; and every node of its plan.
async fn analyzed(pool: &PgPool, request: &ListRequest<ContactType>) -> Vec<Value> {
    sqlx::query("vacuum analyze contacts").execute(pool).await.expect("vacuum");
    explained(pool, request).await
}

/// EXPLAIN ANALYZE of the statement the API sends for `request` (a search as a planned
/// one), with the statistics as they are; every node of its plan.
async fn explained(pool: &PgPool, request: &ListRequest<ContactType>) -> Vec<Value> {
    explained_as(pool, request, SearchShape::Planned, "force_custom_plan").await
}

/// As [`explained`], for a search of `shape` planned under `plan_cache_mode`.
async fn explained_as(
    pool: &PgPool,
    request: &ListRequest<ContactType>,
    shape: SearchShape,
    plan_cache_mode: &str,
) -> Vec<Value> {
    let mut builder = list_sql::<Contacts>(request, shape);
    let sql = format!("explain (analyze, format json) {}", builder.sql());
    let arguments = builder.build().take_arguments().expect("arguments").expect("bound arguments");
    let mut connection = pool.acquire().await.expect("connection");
    sqlx::query(&format!("set plan_cache_mode = {plan_cache_mode}")).execute(&mut *connection).await.expect("set");
    let explained: Value = sqlx::query_scalar_with(&sql, arguments).fetch_one(&mut *connection).await.expect("explain");
    sqlx::query("reset plan_cache_mode").execute(&mut *connection).await.expect("reset");
    let mut nodes = vec![explained[0]["Plan"].clone()];
    let mut next = 0;
    while let Some(node) = nodes.get(next) {
        let children = node["Plans"].as_array().cloned().unwrap_or_default();
        nodes.extend(children);
        next += 1;
    }
    nodes
}

/// The plan node scanning `index`, if any.
fn scan_of<'a>(nodes: &'a [Value], index: &str) -> Option<&'a Value> {
    nodes.iter().find(|node| node["Index Name"] == index)
}

/// The scan of `index`, which must be an index-only scan.
fn index_only_scan<'a>(nodes: &'a [Value], index: &str) -> &'a Value {
    let node = scan_of(nodes, index).unwrap_or_else(|| panic!("{index} is not scanned: {nodes:#?}"));
    assert_eq!(node["Node Type"], "Index Only Scan", "{node:#}");
    node
}

/// The count `field` of a plan node. A field the plan lacks fails the test: read as 0, a
/// renamed or misspelt field would pass every assertion that expects none.
fn count(node: &Value, field: &str) -> u64 {
    node[field].as_u64().unwrap_or_else(|| panic!("the plan node has no count {field:?}: {node:#}"))
}

#[tokio::test]
async fn a_search_in_a_small_workspace_filters_its_order_index_range_and_reads_only_its_page() {
    let db = TestDatabase::create().await;
    let (_, small) = seed_volume(&db.pool).await;

    // Ten of the small workspace's emails (contact20790@ … contact20799@) and one of the large one's.
    let nodes = analyzed(&db.pool, &request(small, SortKey::CreatedAt, Some("contact2079"), None)).await;

    assert_only_the_small_workspaces_entries_decide_and_only_its_ten_matches_are_read(&nodes);
}

/// The page of `contact2079` in the small workspace: its 800 entries of the order index
/// examined without reading a row, no trigram index, and only the 10 matches read.
fn assert_only_the_small_workspaces_entries_decide_and_only_its_ten_matches_are_read(nodes: &[Value]) -> &Value {
    let picked = index_only_scan(nodes, "contacts_by_created");
    assert_eq!(count(picked, "Heap Fetches"), 0, "no row is read to decide the page: {picked:#}");
    assert_eq!(
        count(picked, "Actual Rows") + count(picked, "Rows Removed by Filter"),
        800,
        "exactly the small workspace's entries are examined: {picked:#}"
    );
    assert!(scan_of(nodes, "contacts_search").is_none(), "no trigram posting list is decoded: {nodes:#?}");
    let read = scan_of(nodes, "contacts_pkey").unwrap_or_else(|| panic!("{nodes:#?}"));
    assert_eq!(count(read, "Actual Rows") * count(read, "Actual Loops"), 10, "only the matches are read: {read:#}");
    picked
}

#[tokio::test]
async fn a_walk_under_its_generic_plan_filters_the_small_workspaces_order_index_range_and_reads_only_its_page() {
    let db = TestDatabase::create().await;
    let (_, small) = seed_volume(&db.pool).await;
    sqlx::query("vacuum analyze contacts").execute(&db.pool).await.expect("vacuum");
    let walk = request(small, SortKey::CreatedAt, Some("contact2079"), None);

    let nodes = explained_as(&db.pool, &walk, SearchShape::Walk, "force_generic_plan").await;

    let picked = assert_only_the_small_workspaces_entries_decide_and_only_its_ten_matches_are_read(&nodes);
    let filter = picked["Filter"].as_str().unwrap_or_default();
    assert!(filter.starts_with("(strpos(search_text, $"), "the term is lower-cased once, not per entry: {filter}");
}

#[tokio::test]
async fn a_common_term_in_a_large_workspace_stops_reading_the_order_index_once_its_page_is_full() {
    let db = TestDatabase::create().await;
    let (large, _) = seed_volume(&db.pool).await;

    // Every name is "Company …": the first 51 entries fill the page.
    let nodes = analyzed(&db.pool, &request(large, SortKey::CreatedAt, Some("company"), None)).await;

    let picked = index_only_scan(&nodes, "contacts_by_created");
    let examined = count(picked, "Actual Rows") + count(picked, "Rows Removed by Filter");
    assert!(examined <= 51, "examined {examined} of the workspace's 20,000 entries: {picked:#}");
}

#[tokio::test]
async fn a_search_with_a_type_filter_is_still_decided_in_the_order_index() {
    let db = TestDatabase::create().await;
    let (_, small) = seed_volume(&db.pool).await;
    let customers =
        ListRequest { kind: ContactType::Customer, ..request(small, SortKey::CreatedAt, Some("contact2079"), None) };

    let nodes = analyzed(&db.pool, &customers).await;

    let picked = index_only_scan(&nodes, "contacts_by_created");
    assert_eq!(count(picked, "Heap Fetches"), 0, "{picked:#}");
}

#[tokio::test]
async fn once_statistics_show_most_rows_changed_a_small_workspace_search_stops_walking_the_order_index() {
    let db = TestDatabase::create().await;
    let (_, small) = seed_volume(&db.pool).await;
    sqlx::query("vacuum analyze contacts").execute(&db.pool).await.expect("vacuum");
    // Every row changes after the vacuum: no page is all-visible any more, so the order
    // index alone can no longer decide a row. Autoanalyze (2 % of rows) tells the planner.
    sqlx::query("update contacts set phone = coalesce(phone, '') || '1', version = version + 1")
        .execute(&db.pool)
        .await
        .expect("update every row");
    sqlx::query("analyze contacts").execute(&db.pool).await.expect("analyze");

    let nodes = explained(&db.pool, &request(small, SortKey::CreatedAt, Some("contact2079"), None)).await;

    assert!(scan_of(&nodes, "contacts_search").is_some(), "the trigram index decides the page: {nodes:#?}");
    assert!(nodes.iter().all(|node| node["Node Type"] != "Index Only Scan"), "{nodes:#?}");
}

#[tokio::test]
async fn contacts_and_items_are_analyzed_once_two_percent_of_their_rows_change() {
    let db = TestDatabase::create().await;

    let options: Vec<(String, Vec<String>)> = sqlx::query_as(
        "select relname::text, coalesce(reloptions, '{}') from pg_class \
         where relname in ('contacts', 'items') and relkind = 'r' order by relname",
    )
    .fetch_all(&db.pool)
    .await
    .expect("table options");

    assert_eq!(options.len(), 2, "{options:?}");
    for (table, options) in &options {
        assert!(options.contains(&"autovacuum_analyze_scale_factor=0.02".to_owned()), "{table}: {options:?}");
    }
}
