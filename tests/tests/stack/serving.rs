//! What `dev` brings up: a migrated database, the demo data served over HTTP with the
//! key it prints, health and readiness on both addresses, a passing `healthcheck`.

use std::collections::BTreeSet;
use std::time::Duration;

use lectern_api::reads::MIGRATOR;
use lectern_fixtures::demo::{demo_events, expected_active_counts, DEMO_WORKSPACE};
use lectern_schema::events::EntityKind;
use lectern_tests::nats::{free_port, TestNats};
use lectern_tests::process::Launch;
use lectern_tests::Reply;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::support::{
    active_ids, connect, database_exists, ids, inactive_ids, missing_database, served, Dev, PROCESS_TIMEOUT,
};

#[tokio::test]
async fn dev_creates_the_database_when_it_is_missing_and_applies_every_migration() {
    let nats = TestNats::start().await;
    let (url, name) = missing_database();
    assert!(!database_exists(&name).await, "the database must not exist before dev runs");

    let dev = Dev::start(&url, &nats.url).await;

    assert!(database_exists(&name).await, "dev did not create {name}");
    let applied: Vec<i64> = sqlx::query_scalar("select version from _sqlx_migrations where success order by version")
        .fetch_all(&connect(&url).await)
        .await
        .expect("read the applied migrations");
    let known: Vec<i64> = MIGRATOR.iter().map(|migration| migration.version).collect();
    assert_eq!(applied, known);
    dev.stop().await;
}

#[tokio::test]
async fn dev_serves_every_active_demo_record_and_no_archived_one_to_the_key_it_prints() {
    let nats = TestNats::start().await;
    let (url, _) = missing_database();
    let dev = Dev::start(&url, &nats.url).await;
    let app = dev.printed.app(connect(&url).await);
    let key = dev.printed.key.clone();
    let expected = expected_active_counts(&demo_events(DEMO_WORKSPACE));

    let contacts = served(&app, &key, "/v1/contacts?limit=100").await;
    let items = served(&app, &key, "/v1/items?limit=100").await;

    assert_eq!(dev.printed.demo, "published now", "{:?}", dev.printed);
    assert_eq!((dev.printed.contacts, dev.printed.items), (expected.contacts, expected.items), "printed counts");
    assert_eq!((contacts.len(), items.len()), (expected.contacts, expected.items), "served counts");
    assert_eq!(ids(&contacts), active_ids(EntityKind::Contact), "the active demo contacts, each once");
    assert_eq!(ids(&items), active_ids(EntityKind::Item), "the active demo items, each once");
    let archived_contacts = inactive_ids(EntityKind::Contact);
    let archived_items = inactive_ids(EntityKind::Item);
    assert!(!archived_contacts.is_empty() && !archived_items.is_empty(), "the demo archives and deletes records");
    for id in &archived_contacts {
        app.get(&key, &format!("/v1/contacts/{id}")).await.assert_error(404, "NOT_FOUND");
    }
    for id in &archived_items {
        app.get(&key, &format!("/v1/items/{id}")).await.assert_error(404, "NOT_FOUND");
    }
    dev.stop().await;
}

#[tokio::test]
async fn dev_demo_records_are_realistic_with_items_priced_in_several_currencies() {
    let nats = TestNats::start().await;
    let (url, _) = missing_database();
    let dev = Dev::start(&url, &nats.url).await;
    let app = dev.printed.app(connect(&url).await);

    let items = served(&app, &dev.printed.key, "/v1/items?limit=100").await;
    let contacts = served(&app, &dev.printed.key, "/v1/contacts?limit=100").await;

    let currencies: BTreeSet<&str> = items
        .iter()
        .flat_map(|item| [&item["salePrice"], &item["purchasePrice"]])
        .filter_map(|price| price["currency"].as_str())
        .collect();
    assert!(currencies.len() >= 3, "items are priced in several currencies: {currencies:?}");
    let types: BTreeSet<&str> = items.iter().filter_map(|item| item["type"].as_str()).collect();
    assert_eq!(types, BTreeSet::from(["product", "service"]));
    let names: BTreeSet<&str> = contacts.iter().filter_map(|contact| contact["name"].as_str()).collect();
    assert!(names.len() * 10 >= contacts.len() * 9, "contact names are varied: {} of {}", names.len(), contacts.len());
    assert!(contacts.iter().any(|contact| contact["email"].is_string()), "some contacts have an email");
    assert!(contacts.iter().any(|contact| contact["isSupplier"] == true), "some contacts are suppliers");
    dev.stop().await;
}

#[tokio::test]
async fn dev_answers_healthz_and_readyz_on_the_public_and_the_operations_address() {
    let nats = TestNats::start().await;
    let (url, _) = missing_database();
    let dev = Dev::start(&url, &nats.url).await;
    let http = reqwest::Client::new();

    for base in [dev.printed.api_url(""), dev.printed.operations_url("")] {
        let live = Reply::read(http.get(format!("{base}/healthz")).send().await.expect("healthz")).await;
        let ready = Reply::read(http.get(format!("{base}/readyz")).send().await.expect("readyz")).await;

        assert_eq!((live.status, &live.body), (200, &json!({ "status": "alive" })), "{base}");
        assert_eq!((ready.status, &ready.body), (200, &json!({ "status": "ready" })), "{base}");
    }
    dev.stop().await;
}

#[tokio::test]
async fn dev_operations_address_serves_the_metrics_of_both_the_api_and_the_projector() {
    let nats = TestNats::start().await;
    let (url, _) = missing_database();
    let dev = Dev::start(&url, &nats.url).await;
    let app = dev.printed.app(connect(&url).await);
    app.get(&dev.printed.key, "/v1/contacts?limit=1").await.assert_ok();

    let metrics =
        reqwest::get(dev.printed.operations_url("/metrics")).await.expect("scrape").text().await.expect("text");

    assert!(metrics.contains("lectern_http_requests_total"), "{metrics}");
    assert!(metrics.contains("lectern_projector_events_applied_total"), "{metrics}");
    dev.stop().await;
}

#[tokio::test]
async fn healthcheck_exits_0_against_dev_readyz_and_non_zero_against_a_closed_port() {
    let nats = TestNats::start().await;
    let (url, _) = missing_database();
    let dev = Dev::start(&url, &nats.url).await;
    let healthcheck =
        |url: String| async move { Launch::api().args(["healthcheck", "--url", &url]).run(PROCESS_TIMEOUT).await };

    let public = healthcheck(dev.printed.api_url("/readyz")).await;
    let operations = healthcheck(dev.printed.operations_url("/readyz")).await;
    let closed = healthcheck(format!("http://127.0.0.1:{}/readyz", free_port())).await;

    public.assert_success();
    operations.assert_success();
    closed.assert_one_line_error(Some(1), &["127.0.0.1"]);
    dev.stop().await;
}

#[tokio::test]
async fn dev_shows_its_key_only_on_stdout_never_in_its_logs() {
    let nats = TestNats::start().await;
    let (url, _) = missing_database();
    let dev = Dev::start(&url, &nats.url).await;
    let key = dev.printed.key.clone();
    let app = dev.printed.app(connect(&url).await);
    app.get(&key, "/v1/contacts?limit=1").await.assert_ok();

    let ended = dev.stop().await;

    let secret = key.rsplit('_').next().expect("the key's secret");
    assert!(ended.stdout.contains(&key), "the newcomer is shown the key");
    assert!(!ended.stderr.contains(secret), "the key's secret is in the logs:\n{}", ended.stderr);
}

#[tokio::test]
async fn dev_warns_once_about_each_public_development_secret_it_uses() {
    let nats = TestNats::start().await;
    let (url, _) = missing_database();
    let dev = Dev::start(&url, &nats.url).await;

    let ended = dev.stop().await;

    for setting in ["LECTERN_KEY_PEPPER", "LECTERN_CURSOR_SECRET"] {
        let warnings = ended.stderr.matches(&format!("{setting} is not set")).count();
        assert_eq!(warnings, 1, "{setting} warned {warnings} times:\n{}", ended.stderr);
    }
}

#[tokio::test]
async fn dev_serves_the_demo_history_in_the_changes_feed_and_a_published_change_to_a_waiting_request() {
    let nats = TestNats::start().await;
    let (url, _) = missing_database();
    let dev = Dev::start(&url, &nats.url).await;
    let app = dev.printed.app(connect(&url).await);
    let key = dev.printed.key.clone();

    // The whole history from the beginning: each demo contact once, as it ends.
    let mut upserted = Vec::new();
    let mut removed = Vec::new();
    let mut since = String::new();
    loop {
        let query = if since.is_empty() { String::new() } else { format!("&since={since}") };
        let reply = app.get(&key, &format!("/v1/contacts/changes?limit=100{query}")).await;
        reply.assert_ok();
        for entry in reply.data() {
            let id: Uuid = entry["id"].as_str().and_then(|id| id.parse().ok()).expect("an id");
            match entry["change"].as_str() {
                Some("upserted") => upserted.push(id),
                _ => removed.push(id),
            }
        }
        since = reply.body["syncToken"].as_str().expect("a token").to_owned();
        if reply.body["hasMore"] == false {
            break;
        }
    }
    upserted.sort_unstable();
    removed.sort_unstable();
    assert_eq!(upserted, active_ids(EntityKind::Contact), "every active demo contact, once");
    assert_eq!(removed, inactive_ids(EntityKind::Contact), "every archived or deleted demo contact, once");

    // The README's tour: a request waiting on the feed, then `lectern-projector publish`.
    let waiting =
        app.http.get(app.url(&format!("/v1/contacts/changes?since={since}&wait=30"))).header("X-API-Key", &key);
    let waiting = tokio::spawn(async move { Reply::read(waiting.send().await.expect("the waiting request")).await });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../schema/events/examples/contact.updated.json");
    let published =
        Launch::projector().args(["publish", example]).env("NATS_URL", &nats.url).run(PROCESS_TIMEOUT).await;
    published.assert_success();
    let reply = waiting.await.expect("the waiting request");
    reply.assert_ok();
    let entries = reply.data();
    assert_eq!(entries.len(), 1, "{}", reply.text);
    assert_eq!(entries[0]["id"], "b3c6a1d2-2f0e-4c1b-9a9e-7e3d5c2b1a00", "{}", reply.text);
    assert_eq!(entries[0]["change"], "upserted");
    dev.stop().await;
}

#[tokio::test]
async fn the_webhook_command_dev_prints_registers_a_local_receiver_that_dev_then_delivers_to() {
    let nats = TestNats::start().await;
    let (url, _) = missing_database();
    let dev = Dev::start(&url, &nats.url).await;
    let receiver = lectern_tests::webhooks::Receiver::start().await;
    let stdout = dev.service.stdout();
    let printed = stdout
        .lines()
        .skip_while(|line| !line.contains("webhooks create"))
        .take_while(|line| !line.trim().is_empty() && !line.starts_with("It prints"))
        .map(|line| line.trim().trim_end_matches('\\').trim())
        .collect::<Vec<_>>()
        .join(" ");
    let arguments: Vec<&str> = printed.split_whitespace().skip_while(|word| *word != "webhooks").skip(1).collect();
    assert!(arguments.starts_with(&["create"]), "no webhooks command printed:\n{stdout}");
    // The printed command as a newcomer runs it, with this test's receiver and database.
    let mut arguments: Vec<String> = arguments.iter().map(|word| (*word).to_owned()).collect();
    let url_at = arguments.iter().position(|word| word == "--url").expect("the printed command names --url") + 1;
    arguments[url_at] = receiver.url.clone();
    arguments.extend(["--output".to_owned(), "json".to_owned()]);
    let run = Launch::api().arg("webhooks").args(&arguments).env("DATABASE_URL", &url).run(PROCESS_TIMEOUT).await;
    run.assert_success();
    let secret: Value = serde_json::from_str(run.stdout.trim()).expect("create prints JSON");

    lectern_tests::seed::ContactSeed::named("Hooked Ltd").insert(&connect(&url).await, DEMO_WORKSPACE).await;

    let deliveries =
        receiver.wait_for(Duration::from_secs(30), "dev's delivery", |deliveries| !deliveries.is_empty()).await;
    assert_eq!(deliveries[0].json()["data"]["workspaceId"], DEMO_WORKSPACE.to_string());
    lectern_tests::webhooks::verify_with_standardwebhooks(&deliveries, &[secret["secret"].as_str().expect("secret")])
        .await;
    dev.stop().await;
}
