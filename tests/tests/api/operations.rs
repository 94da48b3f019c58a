//! What operators and browsers see of the API besides its data: liveness and
//! readiness, compression, the reference page, the headers on every response, no CORS;
//! and, from the real `serve` binary, the metrics on the operations address, the
//! request log, its memory kept out of huge pages, and a clean stop on SIGTERM.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lectern_api::keys::Scope;
use lectern_api::reads::{lazy_pool, PoolSettings};
use lectern_tests::database::admin_url;
use lectern_tests::nats::free_port;
use lectern_tests::postgres::TestPostgres;
use lectern_tests::process::Metrics;
use lectern_tests::seed::create_key;
use lectern_tests::serve::{Serve, SERVE_WITHIN};
use lectern_tests::{ContactSeed, Reply, TestApp, TestDatabase};
use serde_json::{json, Value};
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection, Executor, PgConnection, PgPool};
use uuid::Uuid;

/// Far longer than any readiness answer may take, far shorter than the hanging
/// database's acquire timeout below.
const READINESS_BOUND: Duration = Duration::from_secs(30);

// ---------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------

/// A GET without an API key.
async fn get(app: &TestApp, path: &str) -> Reply {
    app.send(app.http.get(app.url(path))).await
}

fn pool_settings(acquire_timeout: Duration) -> PoolSettings {
    PoolSettings {
        max_connections: 2,
        acquire_timeout,
        statement_timeout: Duration::from_secs(5),
        connections_per_workspace: PoolSettings::default_share(2),
    }
}

/// A database of its own with no tables at all (named so the harness sweeps it).
async fn unmigrated_database() -> PgPool {
    let admin = admin_url();
    let mut connection = PgConnection::connect(&admin).await.expect("connect to the test PostgreSQL server");
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or_default();
    let name = format!("lectern_test_{now}_{}", Uuid::new_v4().simple());
    connection.execute(format!(r#"create database "{name}""#).as_str()).await.expect("create an empty database");
    let options: PgConnectOptions = admin.parse().expect("admin URL");
    let url = options.database(&name).to_url_lossy().to_string();
    lazy_pool(&url, &pool_settings(Duration::from_secs(10))).expect("pool options")
}

/// A "PostgreSQL" that accepts connections and never says a word: every query hangs.
async fn silent_server() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the silent server");
    let address = listener.local_addr().expect("silent server address");
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    address
}

fn problems(reply: &Reply) -> Vec<String> {
    reply.body["problems"]
        .as_array()
        .unwrap_or_else(|| panic!("no problems array: {}", reply.text))
        .iter()
        .map(|problem| problem.as_str().expect("each problem is a string").to_owned())
        .collect()
}

/// The body without the fields that differ on every request.
fn without_request_id(mut body: Value) -> Value {
    if let Some(object) = body.as_object_mut() {
        object.remove("requestId");
    }
    body
}

/// An app with three contacts and a `contacts:read` key.
async fn app_with_contacts() -> (TestDatabase, TestApp, String) {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    for (index, name) in ["Acme GmbH", "Bäckerei Schmidt", "Café 50% Rabatt"].into_iter().enumerate() {
        ContactSeed::named(name).at(i64::try_from(index).expect("index")).insert(&db.pool, workspace).await;
    }
    (db, app, key)
}

/// A client that never asks for, and never undoes, compression.
fn raw_client() -> reqwest::Client {
    reqwest::Client::builder().no_gzip().no_brotli().build().expect("client")
}

// ---------------------------------------------------------------------------------------
// Liveness and readiness (in-process)
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn healthz_is_200_alive_without_a_key() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;

    let reply = get(&app, "/healthz").await;

    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body, json!({ "status": "alive" }));
}

#[tokio::test]
async fn readyz_is_200_ready_on_a_migrated_database() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;

    let reply = get(&app, "/readyz").await;

    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body, json!({ "status": "ready" }));
}

#[tokio::test]
async fn readyz_is_503_saying_migrate_when_the_database_has_no_schema() {
    let app = TestApp::spawn(unmigrated_database().await).await;

    let reply = app.get_operations("/readyz").await;

    assert_eq!(reply.status, 503, "{}", reply.text);
    assert_eq!(reply.body["status"], "not ready", "{}", reply.text);
    let problems = problems(&reply);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].contains("lectern-api migrate"), "the problem says what to do: {problems:?}");
}

#[tokio::test]
async fn readyz_is_503_naming_a_migration_that_is_not_applied() {
    let db = TestDatabase::create().await;
    let (version, description): (i64, String) =
        sqlx::query_as("delete from _sqlx_migrations where version = (select max(version) from _sqlx_migrations) returning version, description")
            .fetch_one(&db.pool)
            .await
            .expect("forget the latest migration");
    let app = TestApp::spawn(db.pool.clone()).await;

    let reply = app.get_operations("/readyz").await;

    assert_eq!(reply.status, 503, "{}", reply.text);
    assert_eq!(reply.body["status"], "not ready", "{}", reply.text);
    let problems = problems(&reply).join("\n");
    assert!(problems.contains(&version.to_string()), "the missing migration {version} is named: {problems}");
    assert!(problems.contains(&description), "the missing migration {description:?} is named: {problems}");
}

#[tokio::test]
async fn readyz_is_503_naming_postgresql_when_the_database_is_unreachable() {
    let pool = lazy_pool("postgres://postgres@127.0.0.1:9/lectern", &pool_settings(Duration::from_millis(500)))
        .expect("pool options");
    let app = TestApp::spawn_without_database(pool).await;

    let reply = app.get_operations("/readyz").await;

    assert_eq!(reply.status, 503, "{}", reply.text);
    assert_eq!(reply.body["status"], "not ready", "{}", reply.text);
    let problems = problems(&reply);
    assert!(problems.iter().any(|problem| problem.contains("PostgreSQL")), "{problems:?}");
    assert!(!reply.text.contains("password"), "{}", reply.text);
}

#[tokio::test]
async fn readyz_answers_503_within_a_bounded_time_while_the_database_hangs() {
    // The pool would wait two minutes for a connection; the probe must not.
    let address = silent_server().await;
    let pool = lazy_pool(&format!("postgres://postgres@{address}/lectern"), &pool_settings(Duration::from_secs(120)))
        .expect("pool options");
    let app = TestApp::spawn_without_database(pool).await;

    let started = Instant::now();
    let reply = tokio::time::timeout(READINESS_BOUND, app.get_operations("/readyz"))
        .await
        .unwrap_or_else(|_| panic!("/readyz did not answer within {READINESS_BOUND:?} while the database hangs"));

    assert_eq!(reply.status, 503, "{}", reply.text);
    assert_eq!(reply.body["status"], "not ready", "{}", reply.text);
    assert!(!problems(&reply).is_empty(), "{}", reply.text);
    assert!(started.elapsed() < READINESS_BOUND);
}

/// Rule: readiness names the real cause: with every connection slot of PostgreSQL taken,
/// /readyz quotes PostgreSQL's refusal ("too many clients"), not a bare timeout.
#[tokio::test]
async fn readyz_names_postgresqls_refusal_when_its_connections_are_exhausted() {
    // Five slots, all of them superuser-usable, taken by the test before the app asks.
    let server = TestPostgres::start_new_with("max_connections = 5\nsuperuser_reserved_connections = 0\n").await;
    let url = server.url_for("postgres");
    let mut held = Vec::new();
    while let Ok(connection) = PgConnection::connect(&url).await {
        held.push(connection);
        assert!(held.len() <= 5, "PostgreSQL accepted more connections than max_connections");
    }
    // The pool would wait far longer than the probe for a slot to free up.
    let pool = lazy_pool(&url, &pool_settings(Duration::from_secs(60))).expect("pool options");
    let app = TestApp::spawn_without_database(pool).await;

    let reply = tokio::time::timeout(READINESS_BOUND, app.get_operations("/readyz")).await.expect("/readyz answers");

    assert_eq!(reply.status, 503, "{}", reply.text);
    let problems = problems(&reply).join("\n");
    assert!(problems.contains("too many clients"), "PostgreSQL's own refusal is quoted: {problems}");
    drop(held);
}

// ---------------------------------------------------------------------------------------
// Compression
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn a_client_accepting_gzip_gets_a_gzip_body() {
    let (_db, app, key) = app_with_contacts().await;

    let response = raw_client()
        .get(app.url("/v1/contacts"))
        .header("X-API-Key", &key)
        .header("Accept-Encoding", "gzip")
        .send()
        .await
        .expect("request");

    assert_eq!(response.status(), 200);
    assert_eq!(response.headers().get("content-encoding").and_then(|v| v.to_str().ok()), Some("gzip"));
    assert_eq!(response.headers().get("vary").and_then(|v| v.to_str().ok()), Some("accept-encoding"));
    let bytes = response.bytes().await.expect("body");
    assert_eq!(bytes.get(..2), Some(&[0x1f, 0x8b][..]), "a gzip member starts with its magic bytes: {bytes:?}");
}

#[tokio::test]
async fn a_client_accepting_brotli_gets_a_brotli_body() {
    let (_db, app, key) = app_with_contacts().await;

    let response = raw_client()
        .get(app.url("/v1/contacts"))
        .header("X-API-Key", &key)
        .header("Accept-Encoding", "br")
        .send()
        .await
        .expect("request");

    assert_eq!(response.status(), 200);
    assert_eq!(response.headers().get("content-encoding").and_then(|v| v.to_str().ok()), Some("br"));
    let bytes = response.bytes().await.expect("body");
    assert!(!bytes.is_empty());
    assert!(serde_json::from_slice::<Value>(&bytes).is_err(), "the body is compressed, not JSON: {bytes:?}");
    assert!(!bytes.windows(4).any(|window| window == b"Acme"), "the body is compressed: {bytes:?}");
}

#[tokio::test]
async fn a_client_accepting_any_encoding_gets_one_of_the_two_the_api_offers() {
    let (_db, app, key) = app_with_contacts().await;

    let response = raw_client()
        .get(app.url("/v1/contacts"))
        .header("X-API-Key", &key)
        .header("Accept-Encoding", "*")
        .send()
        .await
        .expect("request");

    assert_eq!(response.status(), 200);
    let encoding = response.headers().get("content-encoding").and_then(|v| v.to_str().ok()).map(str::to_owned);
    assert!(
        encoding.is_none() || matches!(encoding.as_deref(), Some("br" | "gzip")),
        "the API compresses with br or gzip only, got {encoding:?}"
    );
}

#[tokio::test]
async fn a_client_asking_for_no_compression_gets_plain_json() {
    let (_db, app, key) = app_with_contacts().await;

    let response = raw_client().get(app.url("/v1/contacts")).header("X-API-Key", &key).send().await.expect("request");

    assert_eq!(response.status(), 200);
    assert!(response.headers().get("content-encoding").is_none(), "{:?}", response.headers());
    assert_eq!(
        response.headers().get("vary").and_then(|v| v.to_str().ok()),
        Some("accept-encoding"),
        "the plain body depends on Accept-Encoding too, for any cache in between"
    );
    let body: Value = response.json().await.expect("plain JSON");
    assert_eq!(body["data"].as_array().map(Vec::len), Some(3), "{body}");
}

#[tokio::test]
async fn a_decompressing_client_sees_the_same_json_as_an_uncompressed_request() {
    let (_db, app, key) = app_with_contacts().await;
    let plain: Value = raw_client()
        .get(app.url("/v1/contacts"))
        .header("X-API-Key", &key)
        .send()
        .await
        .expect("plain request")
        .json()
        .await
        .expect("plain JSON");

    // The default client asks for gzip and br and decompresses what it gets.
    for encoding in ["gzip", "br"] {
        let response = reqwest::Client::new()
            .get(app.url("/v1/contacts"))
            .header("X-API-Key", &key)
            .header("Accept-Encoding", encoding)
            .send()
            .await
            .expect("compressed request");
        assert_eq!(response.status(), 200);
        let decompressed: Value = response.json().await.expect("decompressed JSON");

        assert_eq!(without_request_id(decompressed), without_request_id(plain.clone()), "{encoding}");
    }
}

// ---------------------------------------------------------------------------------------
// The reference page
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn docs_is_an_html_page_embedding_the_served_openapi_document() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let document = get(&app, "/v1/openapi.json").await;
    assert_eq!(document.status, 200, "{}", document.text);

    let page = get(&app, "/docs").await;

    assert_eq!(page.status, 200, "{}", page.text);
    assert!(page.header("content-type").is_some_and(|kind| kind.starts_with("text/html")), "{:?}", page.headers);
    assert!(page.text.to_ascii_lowercase().contains("<html"), "not an HTML page");
    assert!(page.text.contains(&document.text), "the page does not embed the document /v1/openapi.json serves");
}

// ---------------------------------------------------------------------------------------
// Headers on every response, and no CORS
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn every_response_is_no_store_and_nosniff_whether_200_4xx_or_404() {
    let (_db, app, key) = app_with_contacts().await;
    let with_key = |path: &str| app.http.get(app.url(path)).header("X-API-Key", &key);
    let requests = [
        ("200 listing", with_key("/v1/contacts")),
        ("200 healthz", app.http.get(app.url("/healthz"))),
        ("200 readyz", app.http.get(app.url("/readyz"))),
        ("200 docs", app.http.get(app.url("/docs"))),
        ("200 openapi", app.http.get(app.url("/v1/openapi.json"))),
        ("400", with_key("/v1/contacts?limit=0")),
        ("401", app.http.get(app.url("/v1/contacts"))),
        ("404 record", with_key(&format!("/v1/contacts/{}", Uuid::new_v4()))),
        ("404 path", app.http.get(app.url("/no/such/path"))),
        ("405", app.http.post(app.url("/v1/contacts")).header("X-API-Key", &key)),
    ];

    for (what, request) in requests {
        let reply = app.send(request).await;

        let expected_status: u16 = what[..3].parse().expect("status prefix");
        assert_eq!(reply.status, expected_status, "{what}: {}", reply.text);
        assert_eq!(reply.header("cache-control"), Some("no-store"), "{what}: {:?}", reply.headers);
        assert_eq!(reply.header("x-content-type-options"), Some("nosniff"), "{what}: {:?}", reply.headers);
    }
}

#[tokio::test]
async fn a_cross_origin_request_gets_no_cors_grant() {
    let (_db, app, key) = app_with_contacts().await;

    let reply = app
        .send(app.http.get(app.url("/v1/contacts")).header("X-API-Key", &key).header("Origin", "https://evil.example"))
        .await;

    reply.assert_ok();
    for header in ["access-control-allow-origin", "access-control-allow-credentials", "access-control-expose-headers"] {
        assert!(reply.header(header).is_none(), "{header} granted: {:?}", reply.headers);
    }
}

#[tokio::test]
async fn a_cors_preflight_is_not_a_success_and_grants_nothing() {
    let (_db, app, _key) = app_with_contacts().await;

    let reply = app
        .send(
            app.http
                .request(reqwest::Method::OPTIONS, app.url("/v1/contacts"))
                .header("Origin", "https://evil.example")
                .header("Access-Control-Request-Method", "GET")
                .header("Access-Control-Request-Headers", "x-api-key"),
        )
        .await;

    assert!(!(200..300).contains(&reply.status), "a preflight succeeded: {} {}", reply.status, reply.text);
    for header in ["access-control-allow-origin", "access-control-allow-methods", "access-control-allow-headers"] {
        assert!(reply.header(header).is_none(), "{header} granted: {:?}", reply.headers);
    }
}

// ---------------------------------------------------------------------------------------
// The real `serve` binary
// ---------------------------------------------------------------------------------------

const REQUESTS: &str = "lectern_http_requests_total";
const DURATION: &str = "lectern_http_request_duration_seconds";
const KEY_CACHE: &str = "lectern_api_key_cache_lookups_total";

/// Key-cache lookups of every result so far.
fn key_cache_lookups(metrics: &Metrics) -> f64 {
    ["hit", "miss", "bypassed"].iter().filter_map(|result| metrics.value(KEY_CACHE, &[("result", result)])).sum()
}

#[tokio::test]
async fn serve_counts_every_request_by_route_template_method_and_status_on_the_operations_address() {
    let db = TestDatabase::create().await;
    let workspace = Uuid::new_v4();
    let (_, key) = create_key(&db.pool, workspace, &[Scope::ContactsRead]).await;
    let contact = ContactSeed::named("Acme GmbH").insert(&db.pool, workspace).await;
    let serve = Serve::on(&db.url).envs(&[("LECTERN_DB_POOL_SIZE", "7")]).start().await;

    // Listings until the key cache has served a hit (its listener connects in the
    // background; until then lookups bypass the cache).
    let mut listings = 0_u32;
    loop {
        serve.get(Some(&key), "/v1/contacts").await.assert_ok();
        listings += 1;
        if serve.metrics().await.value(KEY_CACHE, &[("result", "hit")]).unwrap_or(0.0) >= 1.0 {
            break;
        }
        assert!(listings < 60, "no key-cache hit after {listings} requests:\n{}", serve.metrics().await.text);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    serve.get(Some(&key), &format!("/v1/contacts/{contact}")).await.assert_ok();
    serve.get(Some(&key), &format!("/v1/contacts/{}", Uuid::new_v4())).await.assert_error(404, "NOT_FOUND");
    serve.get(None, "/v1/contacts").await.assert_error(401, "UNAUTHORIZED");
    serve.get(None, "/no/such/path").await.assert_error(404, "NOT_FOUND");

    let metrics = serve.metrics().await;

    let counted =
        |route: &str, status: &str| metrics.value(REQUESTS, &[("route", route), ("method", "GET"), ("status", status)]);
    assert_eq!(counted("/v1/contacts", "200"), Some(f64::from(listings)), "{}", metrics.text);
    assert_eq!(counted("/v1/contacts/{id}", "200"), Some(1.0), "{}", metrics.text);
    assert_eq!(counted("/v1/contacts/{id}", "404"), Some(1.0), "{}", metrics.text);
    assert_eq!(counted("/v1/contacts", "401"), Some(1.0), "{}", metrics.text);
    assert_eq!(counted("unmatched", "404"), Some(1.0), "{}", metrics.text);
    assert_eq!(metrics.label_sets(REQUESTS).len(), 5, "no other series: {}", metrics.text);
    // The duration histogram: cumulative buckets ending in +Inf, a count per series.
    let buckets = metrics.matching(&format!("{DURATION}_bucket"), &[("route", "/v1/contacts"), ("status", "200")]);
    assert!(buckets.len() > 2, "{}", metrics.text);
    assert!(buckets.windows(2).all(|pair| pair[0].value <= pair[1].value), "buckets are cumulative: {buckets:?}");
    let infinite = buckets.iter().find(|sample| sample.labels["le"] == "+Inf").expect("an +Inf bucket");
    assert_eq!(infinite.value, f64::from(listings));
    assert_eq!(
        metrics.value(&format!("{DURATION}_count"), &[("route", "/v1/contacts"), ("status", "200")]),
        Some(f64::from(listings))
    );
    assert_eq!(metrics.value(&format!("{DURATION}_count"), &[("route", "unmatched"), ("status", "404")]), Some(1.0));
    // The key cache: a lookup per request that presented a key, at least one a hit.
    assert!(metrics.value(KEY_CACHE, &[("result", "hit")]).unwrap_or(0.0) >= 1.0, "{}", metrics.text);
    assert_eq!(key_cache_lookups(&metrics), f64::from(listings + 2), "{}", metrics.text);
    // The pool: its configured size and what it holds now.
    assert_eq!(metrics.value("lectern_db_pool_max_connections", &[]), Some(7.0), "{}", metrics.text);
    // Each of the two sets: key checks use the shared pool, listings the reads.
    for pool in ["shared", "reads"] {
        let gauge = |state| metrics.value("lectern_db_pool_connections", &[("pool", pool), ("state", state)]);
        let (idle, in_use) = (gauge("idle").expect("idle gauge"), gauge("in_use").expect("in_use gauge"));
        assert!((1.0..=7.0).contains(&(idle + in_use)), "{pool}: idle {idle}, in use {in_use}");
    }
    serve.stop().await;
}

#[tokio::test]
async fn serve_answers_404_in_the_error_shape_for_metrics_on_the_public_address() {
    let db = TestDatabase::create().await;
    let serve = Serve::on(&db.url).start().await;

    let public = serve.get(None, "/metrics").await;
    let operations = serve.http.get(serve.operations_url("/metrics")).send().await.expect("scrape");

    public.assert_error(404, "NOT_FOUND");
    assert!(!public.text.contains("lectern_"), "{}", public.text);
    assert_eq!(operations.status(), 200);
    serve.stop().await;
}

#[tokio::test]
async fn serve_answers_healthz_and_readyz_on_both_addresses() {
    let db = TestDatabase::create().await;
    let serve = Serve::on(&db.url).start().await;

    for url in [serve.api_url(""), serve.operations_url("")] {
        let live = Reply::read(serve.http.get(format!("{url}/healthz")).send().await.expect("healthz")).await;
        let ready = Reply::read(serve.http.get(format!("{url}/readyz")).send().await.expect("readyz")).await;

        assert_eq!((live.status, &live.body), (200, &json!({ "status": "alive" })), "{url}");
        assert_eq!((ready.status, &ready.body), (200, &json!({ "status": "ready" })), "{url}");
    }
    serve.stop().await;
}

#[tokio::test]
async fn serve_is_not_ready_on_either_address_while_postgresql_is_unreachable() {
    let serve = Serve::on(&format!("postgres://postgres@127.0.0.1:{}/lectern", free_port())).start().await;

    for url in [serve.api_url("/readyz"), serve.operations_url("/readyz")] {
        let reply = Reply::read(serve.http.get(&url).send().await.expect("readyz")).await;

        assert_eq!(reply.status, 503, "{url}: {}", reply.text);
        assert_eq!(reply.body["status"], "not ready", "{url}: {}", reply.text);
    }
    serve.stop().await;
}

/// Rule: the operations listener's `/readyz` names the dependency that is down; the public
/// port says only "not ready", never a database's error text.
#[tokio::test]
async fn serve_readiness_names_postgresql_to_operators_and_nothing_to_the_public_when_it_is_unreachable() {
    let serve = Serve::on(&format!("postgres://postgres@127.0.0.1:{}/lectern", free_port())).start().await;

    // Several probes on each address: the answer must not depend on which timer wins.
    let mut answers = Vec::new();
    for url in [serve.api_url("/readyz"), serve.operations_url("/readyz")] {
        for _ in 0..4 {
            answers.push(Reply::read(serve.http.get(&url).send().await.expect("readyz")).await);
        }
    }

    let (public, operations) = answers.split_at(4);
    for reply in operations {
        assert_eq!(reply.status, 503, "{}", reply.text);
        let problems = reply.body["problems"].to_string();
        assert!(problems.contains("PostgreSQL"), "an operator must learn which dependency is down: {problems}");
    }
    // An unauthenticated caller learns only that, not the database's error text.
    for reply in public {
        assert_eq!((reply.status, &reply.body), (503, &json!({ "status": "not ready" })), "{}", reply.text);
    }
    serve.stop().await;
}

#[tokio::test]
async fn serve_logs_one_line_per_request_with_its_request_id_route_template_and_key_id_refused_or_not_never_the_key() {
    let db = TestDatabase::create().await;
    let workspace = Uuid::new_v4();
    let (key_id, key) = create_key(&db.pool, workspace, &[Scope::ContactsRead]).await;
    let (unknown_key_id, unknown_key) = {
        // A well-formed key nobody issued: refused, and logged by its id only.
        let other = TestDatabase::create().await;
        create_key(&other.pool, workspace, &[Scope::ContactsRead]).await
    };
    let contact = ContactSeed::named("Acme GmbH").insert(&db.pool, workspace).await;
    let serve = Serve::on(&db.url).start().await;

    let chosen = serve
        .http
        .get(serve.api_url(&format!("/v1/contacts/{contact}")))
        .header("X-API-Key", &key)
        .header("X-Request-Id", "ops-test-request-1")
        .send()
        .await
        .expect("request");
    let chosen = Reply::read(chosen).await;
    chosen.assert_ok();
    let listed = serve.get(Some(&key), "/v1/contacts?limit=1").await;
    listed.assert_ok();
    let refused = serve.get(Some(&unknown_key), "/v1/contacts").await;
    refused.assert_error(401, "UNAUTHORIZED");
    let anonymous = serve.get(None, "/v1/items").await;
    anonymous.assert_error(401, "UNAUTHORIZED");
    assert_eq!(chosen.header("x-request-id"), Some("ops-test-request-1"));

    let mut service = serve.service;
    let mut logged = BTreeMap::new();
    for reply in [&chosen, &listed, &refused, &anonymous] {
        let id = reply.header("x-request-id").expect("X-Request-Id").to_owned();
        let record = service
            .wait_for_log(SERVE_WITHIN, |record| {
                record["fields"]["message"] == "request" && record["fields"]["request_id"] == id.as_str()
            })
            .await;
        logged.insert(id, record["fields"].clone());
    }
    let ended = service.terminate(SERVE_WITHIN).await;

    let field = |reply: &Reply, name: &str| logged[reply.header("x-request-id").expect("id")][name].clone();
    assert_eq!(field(&chosen, "route"), "/v1/contacts/{id}");
    assert_eq!(field(&chosen, "method"), "GET");
    assert_eq!(field(&chosen, "status"), 200);
    assert_eq!(field(&chosen, "key_id"), key_id.as_str());
    assert!(field(&chosen, "latency_ms").is_number(), "{:?}", logged);
    assert_eq!(field(&listed, "route"), "/v1/contacts");
    assert_eq!(field(&listed, "key_id"), key_id.as_str());
    assert_eq!(field(&refused, "status"), 401);
    assert_eq!(field(&refused, "key_id"), unknown_key_id.as_str(), "a refused key's log line names its id");
    assert_eq!(field(&anonymous, "route"), "/v1/items");
    assert_eq!(field(&anonymous, "status"), 401);
    assert_eq!(field(&anonymous, "key_id"), "-");
    let request_lines = ended.stderr.lines().filter(|line| line.contains(r#""message":"request""#)).count();
    assert_eq!(request_lines, 4, "one line per request:\n{}", ended.stderr);
    for (what, presented) in [("the key", key.as_str()), ("the refused key", unknown_key.as_str())] {
        let secret = presented.rsplit('_').next().expect("secret part");
        for (stream, text) in [("stderr", &ended.stderr), ("stdout", &ended.stdout)] {
            assert!(!text.contains(presented), "{what} appears on {stream}:\n{text}");
            assert!(!text.contains(secret), "{what}'s secret appears on {stream}:\n{text}");
        }
    }
    assert_eq!(ended.code, Some(0), "{}", ended.stderr);
}

#[tokio::test]
async fn the_cause_of_a_5xx_is_logged_with_the_request_id_the_client_was_given() {
    // PostgreSQL nowhere: the key cannot be looked up, so the request is a 503.
    let serve = Serve::on("postgres://postgres@127.0.0.1:1/nowhere").start().await;
    let key = format!("lk_live_{}_{}", "A".repeat(16), "B".repeat(43));

    let reply = serve.get(Some(&key), "/v1/contacts").await;
    reply.assert_error(503, "SERVICE_UNAVAILABLE");
    let id = reply.header("x-request-id").expect("X-Request-Id").to_owned();

    let mut service = serve.service;
    let cause = service
        .wait_for_log(SERVE_WITHIN, |record| {
            record["fields"]["message"] == "request failed" && record["fields"]["request_id"] == id.as_str()
        })
        .await;
    assert!(cause["fields"]["error"].as_str().is_some_and(|error| !error.is_empty()), "no cause: {cause}");
    let ended = service.terminate(SERVE_WITHIN).await;
    assert_eq!(ended.code, Some(0), "{}", ended.stderr);
}

/// The 5xx-rate alert of docs/operations.md ("Alerts"): more than this share of requests.
const SERVER_ERROR_ALERT_SHARE: f64 = 0.05;

/// Rule (alert "API answering 5xx"): with PostgreSQL unreachable the API's answers are
/// 503s, and the share of 5xx among the counted requests passes the alert's threshold.
#[tokio::test]
async fn the_5xx_share_passes_its_alert_threshold_while_postgresql_is_unreachable() {
    let serve = Serve::on("postgres://postgres@127.0.0.1:1/nowhere").start().await;
    let key = format!("lk_live_{}_{}", "A".repeat(16), "B".repeat(43));

    for _ in 0..3 {
        serve.get(Some(&key), "/v1/contacts").await.assert_error(503, "SERVICE_UNAVAILABLE");
    }
    let metrics = serve.metrics().await;

    let requests = metrics.matching(REQUESTS, &[]);
    let all: f64 = requests.iter().map(|sample| sample.value).sum();
    let failed: f64 =
        requests.iter().filter(|sample| sample.labels["status"].starts_with('5')).map(|sample| sample.value).sum();
    assert!(failed >= 3.0, "the 503s are counted:\n{}", metrics.text);
    assert!(failed / all > SERVER_ERROR_ALERT_SHARE, "{failed} of {all}:\n{}", metrics.text);
    serve.stop().await;
}

/// With transparent huge pages, every 2 MiB page holding one live object stays resident
/// whole (`lectern_api::memory`): the process opts out, and after serving pages none of
/// its memory is in a huge page.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn serve_keeps_its_memory_out_of_transparent_huge_pages() {
    let db = TestDatabase::create().await;
    let workspace = Uuid::new_v4();
    let (_, key) = create_key(&db.pool, workspace, &[Scope::ContactsRead]).await;
    for n in 0..20 {
        ContactSeed::named(&format!("Contact {n} GmbH")).at(n).insert(&db.pool, workspace).await;
    }
    let serve = Serve::on(&db.url).start().await;
    for _ in 0..50 {
        serve.get(Some(&key), "/v1/contacts?limit=100").await.assert_ok();
        serve.get(Some(&key), "/v1/contacts?search=gmbh").await.assert_ok();
    }

    let proc_file = |name: &str| {
        let path = format!("/proc/{}/{name}", serve.service.pid());
        std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("read {path}: {error}"))
    };
    let (status, rollup) = (proc_file("status"), proc_file("smaps_rollup"));
    // The value of a `name: value` line of a /proc file.
    let field = |text: &str, name: &str| {
        text.lines().find_map(|line| line.strip_prefix(name)?.strip_prefix(':').map(|value| value.trim().to_owned()))
    };

    assert_eq!(field(&status, "THP_enabled").as_deref(), Some("0"), "the process did not opt out:\n{status}");
    assert_eq!(field(&rollup, "AnonHugePages").as_deref(), Some("0 kB"), "memory in huge pages:\n{rollup}");
    serve.stop().await;
}

#[tokio::test]
async fn sigterm_stops_serve_with_exit_0_and_closes_both_addresses() {
    let db = TestDatabase::create().await;
    let serve = Serve::on(&db.url).start().await;
    let reply = serve.get(None, "/healthz").await;
    assert_eq!(reply.status, 200);
    let (api, operations) = (serve.api.clone(), serve.operations.clone());

    let ended = serve.stop().await;

    assert!(ended.stderr.contains("lectern-api stopped"), "{}", ended.stderr);
    assert!(!ended.stderr.contains("panicked"), "{}", ended.stderr);
    for address in [api, operations] {
        assert!(tokio::net::TcpStream::connect(&address).await.is_err(), "{address} still accepts connections");
    }
}
