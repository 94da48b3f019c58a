//! listContacts' query validation: every bad query is one 400 `VALIDATION_ERROR`
//! whose `details` hold one entry per problem, each starting with `<parameter>:`.

use lectern_tests::seed::insert_contacts;
use lectern_tests::{ContactSeed, Reply, TestApp, TestDatabase};
use uuid::Uuid;

/// Asserts `reply` is a 400 `VALIDATION_ERROR` with exactly one detail, naming `parameter`.
fn assert_one_problem_with(reply: &Reply, parameter: &str, query: &str) {
    reply.assert_error(400, "VALIDATION_ERROR");
    let details = reply.details();
    assert_eq!(details.len(), 1, "{query}: {details:?}");
    assert!(
        details[0].starts_with(&format!("{parameter}:")),
        "{query}: the detail must start with `{parameter}:`, got {details:?}"
    );
}

#[tokio::test]
async fn limit_outside_1_to_100_is_a_400_naming_limit() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (_, key) = app.workspace_with_key().await;

    for value in ["0", "101", "-1", "1000"] {
        let query = format!("/v1/contacts?limit={value}");

        let reply = app.get(&key, &query).await;

        assert_one_problem_with(&reply, "limit", &query);
    }
}

#[tokio::test]
async fn limit_that_is_not_a_plain_decimal_whole_number_is_a_400_naming_limit() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (_, key) = app.workspace_with_key().await;

    // `+5` in a query string is " 5" once form-decoded; `%2B5` is a literal "+5".
    for value in ["1.5", "abc", "", "+5", "%2B5", "1e2", "0x10", "%205", "5%20"] {
        let query = format!("/v1/contacts?limit={value}");

        let reply = app.get(&key, &query).await;

        assert_one_problem_with(&reply, "limit", &query);
    }
}

#[tokio::test]
async fn limit_of_1_and_of_100_are_accepted_and_honoured() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    insert_contacts(&app.pool, workspace, "Contact", 101).await;

    let smallest = app.get(&key, "/v1/contacts?limit=1").await;
    let largest = app.get(&key, "/v1/contacts?limit=100").await;

    smallest.assert_ok();
    assert_eq!(smallest.data().len(), 1);
    assert_eq!(smallest.body["page"]["hasMore"], true);
    largest.assert_ok();
    assert_eq!(largest.data().len(), 100);
    assert_eq!(largest.body["page"]["hasMore"], true);
}

#[tokio::test]
async fn an_unknown_type_is_a_400_listing_the_allowed_types() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (_, key) = app.workspace_with_key().await;

    let reply = app.get(&key, "/v1/contacts?type=partner").await;

    assert_one_problem_with(&reply, "type", "type=partner");
    let detail = &reply.details()[0];
    for allowed in ["all", "customer", "supplier"] {
        assert!(detail.contains(allowed), "{detail:?} does not list {allowed}");
    }
}

#[tokio::test]
async fn an_empty_type_is_a_400_naming_type() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (_, key) = app.workspace_with_key().await;

    let reply = app.get(&key, "/v1/contacts?type=").await;

    assert_one_problem_with(&reply, "type", "type=");
}

#[tokio::test]
async fn type_values_are_case_sensitive() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (_, key) = app.workspace_with_key().await;

    let reply = app.get(&key, "/v1/contacts?type=Customer").await;

    assert_one_problem_with(&reply, "type", "type=Customer");
}

#[tokio::test]
async fn an_unknown_sort_is_a_400_listing_the_allowed_sorts() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (_, key) = app.workspace_with_key().await;

    for value in ["email", "-name", "created_at"] {
        let query = format!("/v1/contacts?sort={value}");

        let reply = app.get(&key, &query).await;

        assert_one_problem_with(&reply, "sort", &query);
        let detail = &reply.details()[0];
        for allowed in ["createdAt", "name"] {
            assert!(detail.contains(allowed), "{detail:?} does not list {allowed}");
        }
    }
}

#[tokio::test]
async fn an_unknown_query_parameter_is_a_400_naming_it() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (_, key) = app.workspace_with_key().await;

    for name in ["page", "Limit", "q", "pageSize"] {
        let query = format!("/v1/contacts?{name}=5");

        let reply = app.get(&key, &query).await;

        assert_one_problem_with(&reply, name, &query);
    }
}

#[tokio::test]
async fn a_parameter_given_twice_is_a_400_naming_it() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (_, key) = app.workspace_with_key().await;

    for (query, parameter) in [
        ("limit=5&limit=6", "limit"),
        ("limit=5&limit=5", "limit"),
        ("sort=name&sort=createdAt", "sort"),
        ("sort=name&sort=name", "sort"),
        ("type=customer&search=a&type=customer", "type"),
    ] {
        let query = format!("/v1/contacts?{query}");

        let reply = app.get(&key, &query).await;

        assert_one_problem_with(&reply, parameter, &query);
    }
}

#[tokio::test]
async fn choosing_a_workspace_in_the_query_is_a_400_saying_the_workspace_comes_from_the_key() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (_, key) = app.workspace_with_key().await;
    let other = Uuid::new_v4();
    ContactSeed::named("Other Workspace Secret Contact").insert(&app.pool, other).await;

    for name in ["workspace", "workspaceId", "workspace_id"] {
        let query = format!("/v1/contacts?{name}={other}");

        let reply = app.get(&key, &query).await;

        assert_one_problem_with(&reply, name, &query);
        let detail = reply.details()[0].to_lowercase();
        assert!(detail.contains("workspace") && detail.contains("key"), "{name}: {detail:?}");
        let message = reply.body["error"]["message"].as_str().unwrap_or_default().to_lowercase();
        assert!(message.contains("workspace") && message.contains("key"), "{name}: {message:?}");
        assert!(!reply.text.contains("Other Workspace Secret Contact"), "{name}: {}", reply.text);
    }
}

#[tokio::test]
async fn a_get_with_a_body_is_a_400_naming_the_body() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (_, key) = app.workspace_with_key().await;
    let other = Uuid::new_v4();
    ContactSeed::named("Other Workspace Secret Contact").insert(&app.pool, other).await;

    let reply = app
        .send(
            app.http
                .get(app.url("/v1/contacts"))
                .header("X-API-Key", &key)
                .header("Content-Type", "application/json")
                .body(format!("{{\"workspaceId\":\"{other}\"}}")),
        )
        .await;

    assert_one_problem_with(&reply, "body", "GET with a JSON body");
    assert!(!reply.text.contains("Other Workspace Secret Contact"), "{}", reply.text);
}

#[tokio::test]
async fn a_get_with_an_explicit_zero_content_length_is_accepted() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    ContactSeed::named("Acme").insert(&app.pool, workspace).await;

    let reply =
        app.send(app.http.get(app.url("/v1/contacts")).header("X-API-Key", &key).header("Content-Length", "0")).await;

    reply.assert_ok();
    assert_eq!(reply.names(), ["Acme"]);
}

#[tokio::test]
async fn several_problems_are_one_400_with_one_detail_per_problem() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (_, key) = app.workspace_with_key().await;
    let query = format!(
        "/v1/contacts?limit=0&type=partner&sort=email&colour=red&workspaceId={}&search={}",
        Uuid::new_v4(),
        "x".repeat(121)
    );

    let reply = app.get(&key, &query).await;

    reply.assert_error(400, "VALIDATION_ERROR");
    let details = reply.details();
    assert_eq!(details.len(), 6, "{details:?}");
    for parameter in ["limit", "type", "sort", "colour", "workspaceId", "search"] {
        let naming = details.iter().filter(|detail| detail.starts_with(&format!("{parameter}:"))).count();
        assert_eq!(naming, 1, "expected one detail for {parameter}: {details:?}");
    }
}

#[tokio::test]
async fn a_bad_cursor_is_reported_together_with_the_other_parameters_problems() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (_, key) = app.workspace_with_key().await;
    let forged = "AQAAAABnZWxsb3dvcmxkAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";

    let reply = app.get(&key, &format!("/v1/contacts?colour=red&cursor={forged}&limit=0")).await;

    reply.assert_error(400, "VALIDATION_ERROR");
    let details = reply.details();
    for parameter in ["colour", "limit", "cursor"] {
        assert!(
            details.iter().any(|detail| detail.starts_with(&format!("{parameter}:"))),
            "no detail for {parameter}: {details:?}"
        );
    }
    assert!(details.iter().any(|detail| detail.contains("start a new traversal")), "{details:?}");
}

#[tokio::test]
async fn a_query_of_thousands_of_problems_is_a_small_400_that_says_how_many_were_left_out() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (_, key) = app.workspace_with_key().await;
    let repeated = vec!["a"; 7_000].join("&");
    let distinct = (0..2_000).map(|index| format!("p{index}")).collect::<Vec<_>>().join("&");

    let repeated = app.get(&key, &format!("/v1/contacts?{repeated}")).await;
    let distinct = app.get(&key, &format!("/v1/contacts?{distinct}")).await;

    repeated.assert_error(400, "VALIDATION_ERROR");
    assert_eq!(repeated.details().len(), 1, "one problem given 7,000 times: {}", repeated.text);
    distinct.assert_error(400, "VALIDATION_ERROR");
    assert_eq!(distinct.details().len(), 20, "the details are cut");
    let message = distinct.body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("2000 problems") && message.contains("1980 left out"), "{message}");
    for reply in [&repeated, &distinct] {
        assert!(reply.text.len() < 4_096, "a {} byte answer to a 14 KiB query", reply.text.len());
    }
}

#[tokio::test]
async fn a_query_value_that_is_not_utf8_is_a_400_naming_its_parameter() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (_, key) = app.workspace_with_key().await;

    for query in ["/v1/contacts?search=%FF", "/v1/contacts?search=abc%C3", "/v1/contacts?sort=%FFname"] {
        let reply = app.get(&key, query).await;

        let parameter = if query.contains("search") { "search" } else { "sort" };
        assert_one_problem_with(&reply, parameter, query);
    }
}

#[tokio::test]
async fn a_query_parameter_name_that_is_not_utf8_is_a_400() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (_, key) = app.workspace_with_key().await;

    let reply = app.get(&key, "/v1/contacts?%FF=1").await;

    reply.assert_error(400, "VALIDATION_ERROR");
    assert_eq!(reply.details().len(), 1, "{:?}", reply.details());
}
