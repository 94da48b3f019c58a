//! Searches in small workspaces walk the workspace's order index on one generic plan
//! (`SearchShape::Walk`); elsewhere they are planned for each term. Both shapes find the
//! same records; the API picks by the workspace's counted size, and counts again once
//! the count is old.

use std::time::Duration;

use lectern_api::listing::query::{fetch_page, SearchShape};
use lectern_api::listing::workspace_sizes::WalkSettings;
use lectern_api::listing::Keyed;
use lectern_api::listing::{Limit, ListRequest, SearchText, SortKey};
use lectern_api::reads::connections::{PlanMode, ReadConnections};
use lectern_api::resources::contacts::{ContactType, Contacts};
use lectern_api::resources::Resource;
use lectern_tests::app::AppOptions;
use lectern_tests::seed::insert_contacts;
use lectern_tests::{ContactSeed, TestApp, TestDatabase};
use sqlx::Row;
use uuid::Uuid;

use crate::connections::read_connections;
use crate::statements::{record_statements, Statements};

fn search(workspace_id: Uuid, term: &str, limit: &str) -> ListRequest<ContactType> {
    ListRequest {
        workspace_id,
        search: Some(term.parse::<SearchText>().expect("search text")),
        kind: ContactType::All,
        sort: SortKey::CreatedAt,
        limit: limit.parse::<Limit>().expect("limit"),
        after: None,
    }
}

/// Every id a search of `shape` finds, following its pages of two.
async fn found(connections: &ReadConnections, mut request: ListRequest<ContactType>, shape: SearchShape) -> Vec<Uuid> {
    let mut ids = Vec::new();
    loop {
        let rows = fetch_page::<Contacts>(connections, &request, shape).await.expect("search");
        let page = &rows[..rows.len().min(2)];
        ids.extend(page.iter().map(|row| Contacts::record(row).expect("a contact").id));
        match page.last() {
            Some(last) if rows.len() > 2 => {
                request.after =
                    Some(Contacts::record(last).expect("a contact").position(SortKey::CreatedAt).expect("a position"));
            }
            _ => return ids,
        }
    }
}

#[tokio::test]
async fn a_walk_finds_exactly_what_a_planned_search_finds_for_every_kind_of_term() {
    let db = TestDatabase::create().await;
    let workspace = Uuid::new_v4();
    let other = Uuid::new_v4();
    let texts = [
        "100% Bio_Markt \\ GmbH",
        "ACME Straße",
        "İstanbul Ticaret",
        "ΣΟΦΙΑ ΟΔΟΣ",
        "Café ☕ 日本語",
        "o'Brien & Söhne",
        "percent%sign",
        "under_score",
    ];
    for (index, text) in texts.iter().enumerate() {
        ContactSeed::named(text)
            .email(&format!("Mail{index}@Example.COM"))
            .tin(&format!("DE{index}0{index}"))
            .at(index as i64)
            .insert(&db.pool, workspace)
            .await;
        // The same text in another workspace: neither shape may find it.
        ContactSeed::named(text).at(index as i64).insert(&db.pool, other).await;
    }
    let connections = read_connections(&db, 1);

    for term in [
        "gmbh",
        "ACME",
        "Σοφια",
        "%",
        "_",
        "\\",
        "0%",
        "o_",
        "straße",
        "STRASSE",
        "istanbul",
        "i̇stanbul",
        "σοφια",
        "οδος",
        "☕",
        "日本",
        "example.com",
        "de101",
        "mail",
        "'",
        " & ",
        "nothing matches this",
    ] {
        let walked = found(&connections, search(workspace, term, "2"), SearchShape::Walk).await;
        let planned = found(&connections, search(workspace, term, "2"), SearchShape::Planned).await;

        assert_eq!(walked, planned, "{term:?}");
    }
}

#[tokio::test]
async fn a_walk_keeps_one_generic_plan_for_every_term() {
    let db = TestDatabase::create().await;
    let workspace = Uuid::new_v4();
    insert_contacts(&db.pool, workspace, "Contact", 30).await;
    let connections = read_connections(&db, 1);

    for term in ["contact", "00", "01", "02", "03", "1", "2", "3", "zz", "act"] {
        fetch_page::<Contacts>(&connections, &search(workspace, term, "50"), SearchShape::Walk).await.expect("walk");
    }
    let query = sqlx::query(
        "select generic_plans, custom_plans from pg_prepared_statements \
         where statement like '%strpos(search_text%' and statement not like '%pg_prepared_statements%'",
    );
    let rows = connections.fetch_all(PlanMode::Generic, query).await.expect("pg_prepared_statements");

    assert_eq!(rows.len(), 1, "one walk statement for every term");
    let (generic, custom): (i64, i64) = (rows[0].get(0), rows[0].get(1));
    assert_eq!((generic, custom), (10, 0), "(generic, custom) plans of the walk");
}

/// The searches (and counts) among `statements`: which shape each search took.
fn shapes(statements: &Statements) -> Vec<&'static str> {
    statements
        .take()
        .iter()
        .filter_map(|text| {
            // The size count's own statement, not the batch upsert that seeds rows (which
            // counts rows per workspace for the changes feed's positions).
            if text.contains("select count(*) from (select from") {
                Some("count")
            } else if text.contains("strpos(search_text") {
                Some("walk")
            } else if text.contains("search_text like") {
                Some("planned")
            } else {
                None
            }
        })
        .collect()
}

#[tokio::test]
async fn the_api_walks_workspaces_below_the_threshold_and_counts_again_once_the_count_is_old() {
    let (statements, _guard) = record_statements();
    let db = TestDatabase::create().await;
    let walks = WalkSettings { below_rows: 5, recount_after: Duration::from_secs(1) };
    let app = TestApp::spawn_with(db.pool.clone(), AppOptions { walks, ..AppOptions::default() }).await;
    let (small, small_key) = app.workspace_with_key().await;
    let (large, large_key) = app.workspace_with_key().await;
    insert_contacts(&app.pool, small, "Contact", 4).await;
    insert_contacts(&app.pool, large, "Contact", 5).await;
    for key in [&small_key, &large_key] {
        app.get(key, "/v1/contacts").await.assert_ok();
    }
    statements.take();

    app.get(&small_key, "/v1/contacts?search=contact").await.assert_ok();
    let first_in_small = shapes(&statements);
    app.get(&small_key, "/v1/contacts?search=contact").await.assert_ok();
    let again_in_small = shapes(&statements);
    app.get(&large_key, "/v1/contacts?search=contact").await.assert_ok();
    let in_large = shapes(&statements);
    app.get(&small_key, "/v1/contacts?search=contact&sort=name").await.assert_ok();
    let by_name_in_small = shapes(&statements);
    insert_contacts(&app.pool, small, "Later", 1).await;
    app.get(&small_key, "/v1/contacts?search=contact").await.assert_ok();
    let grown_within_a_second = shapes(&statements);
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    app.get(&small_key, "/v1/contacts?search=contact").await.assert_ok();
    let grown_and_counted_again = shapes(&statements);

    assert_eq!(first_in_small, ["count", "walk"], "4 contacts: below 5, walked");
    assert_eq!(again_in_small, ["walk"], "the count is remembered");
    assert_eq!(in_large, ["count", "planned"], "5 contacts: not below 5");
    assert_eq!(by_name_in_small, ["planned"], "a walk keeps the createdAt order; nothing to count");
    assert_eq!(grown_within_a_second, ["walk"], "a fresh count still decides");
    assert_eq!(grown_and_counted_again, ["count", "planned"], "an old count is taken again");
}

#[tokio::test]
async fn a_threshold_of_zero_walks_no_workspace_and_counts_nothing() {
    let (statements, _guard) = record_statements();
    let db = TestDatabase::create().await;
    let walks = WalkSettings { below_rows: 0, ..WalkSettings::default() };
    let app = TestApp::spawn_with(db.pool.clone(), AppOptions { walks, ..AppOptions::default() }).await;
    let (workspace, key) = app.workspace_with_key().await;
    insert_contacts(&app.pool, workspace, "Contact", 3).await;
    app.get(&key, "/v1/contacts").await.assert_ok();
    statements.take();

    app.get(&key, "/v1/contacts?search=contact").await.assert_ok();

    assert_eq!(shapes(&statements), ["planned"]);
}

#[test]
fn a_term_too_short_for_trigrams_is_walked_even_in_a_large_workspace() {
    let workspace = Uuid::new_v4();
    for short in ["a", "ab", "öß"] {
        assert_eq!(SearchShape::choose(&search(workspace, short, "50"), false), SearchShape::Walk, "{short:?}");
    }
    assert_eq!(SearchShape::choose(&search(workspace, "abc", "50"), false), SearchShape::Planned);
    let mut by_name = search(workspace, "ab", "50");
    by_name.sort = SortKey::Name;
    assert_eq!(SearchShape::choose(&by_name, false), SearchShape::Planned, "the name index carries no document");
}
