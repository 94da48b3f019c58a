//! Signing secrets through a key-pepper rotation, as the operations guide runs it on a
//! fleet of two `serve` processes restarted one by one: sealed again under the new pepper
//! by the process delivering for the endpoint, so that retiring the old pepper stops no
//! delivery; and an endpoint a process cannot sign for is visible where operators look.

use std::time::{Duration, Instant};

use lectern_tests::seed::{ContactSeed, TEST_PEPPER};
use lectern_tests::serve::Serve;
use lectern_tests::webhooks::{verify_with_standardwebhooks, Receiver};
use lectern_tests::TestDatabase;
use serde_json::Value;
use uuid::Uuid;

use crate::endpoints::{register, webhooks};

const OLD: &str = TEST_PEPPER;
const NEW: &str = "the key pepper after the webhook rotation test's swap: 32+ bytes";
const WITHIN: Duration = Duration::from_secs(20);

/// A `serve` process with the peppers of one step of the rotation.
async fn start(database_url: &str, current: &str, previous: Option<&str>) -> Serve {
    let mut options = Serve::on(database_url)
        .private_webhook_targets()
        .webhook_lease_ms(600)
        .env("LECTERN_SHUTDOWN_GRACE_MS", "0")
        .env("LECTERN_KEY_PEPPER", current);
    if let Some(previous) = previous {
        options = options.env("LECTERN_PREVIOUS_KEY_PEPPERS", previous);
    }
    options.start().await
}

/// One step of the rotation: each process stopped and started again with the step's
/// peppers, the second only once the first runs again.
async fn restart_one_by_one(
    running: [Serve; 2],
    database_url: &str,
    current: &str,
    previous: Option<&str>,
) -> [Serve; 2] {
    let [first, second] = running;
    first.stop().await;
    let first = start(database_url, current, previous).await;
    second.stop().await;
    let second = start(database_url, current, previous).await;
    [first, second]
}

/// `webhooks list --output json` run with `env`'s peppers, filtered by `--pepper`.
async fn listed(database_url: &str, env: &[(&str, &str)], peppers: &[&str]) -> Vec<Value> {
    let mut args = vec!["list", "--output", "json"];
    for pepper in peppers {
        args.extend_from_slice(&["--pepper", pepper]);
    }
    let run = webhooks(database_url, &args, env).await;
    run.assert_success();
    run.json().as_array().cloned().unwrap_or_default()
}

/// Rule: during a key-pepper rotation run by a fleet restarted one by one, the secrets of an
/// endpoint sealed under the old pepper are sealed again under the new one without anyone
/// asking (`webhooks list --pepper previous` empties), and once the old pepper is retired
/// deliveries go on, signed with the endpoint's unchanged secret.
#[tokio::test]
async fn an_endpoint_sealed_under_the_old_pepper_keeps_receiving_deliveries_after_it_is_retired() {
    let db = TestDatabase::create().await;
    let workspace = Uuid::new_v4();
    let receiver = Receiver::start().await;
    let endpoint = register(&db.url, workspace, &receiver.url, &["contacts"]).await;
    let swapped = [("LECTERN_KEY_PEPPER", NEW), ("LECTERN_PREVIOUS_KEY_PEPPERS", OLD)];
    assert_eq!(listed(&db.url, &swapped, &["previous"]).await.len(), 1, "registered under the old pepper");

    // Step 1: the new pepper accepted everywhere; step 2: the swap.
    let running = [start(&db.url, OLD, Some(NEW)).await, start(&db.url, OLD, Some(NEW)).await];
    let running = restart_one_by_one(running, &db.url, NEW, Some(OLD)).await;
    // Step 3: watch the endpoints still sealed under the old pepper.
    let deadline = Instant::now() + WITHIN;
    loop {
        let previous = listed(&db.url, &swapped, &["previous", "unknown"]).await;
        if previous.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "still sealed under the old pepper after {WITHIN:?}: {previous:#?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let shown = listed(&db.url, &swapped, &[]).await;
    assert_eq!(shown[0]["pepper"], "current", "{shown:#?}");
    // Step 4: the old pepper retired.
    let running = restart_one_by_one(running, &db.url, NEW, None).await;

    ContactSeed::named("After The Rotation Ltd").insert(&db.pool, workspace).await;

    let deliveries = receiver
        .wait_for(WITHIN, "a delivery after the old pepper was retired", |deliveries| !deliveries.is_empty())
        .await;
    verify_with_standardwebhooks(&deliveries, &[&endpoint.secret]).await;
    for process in running {
        let cannot_sign = process.metrics().await.value("lectern_api_webhook_endpoints_cannot_sign", &[]);
        assert_eq!(cannot_sign, Some(0.0), "every process can sign for the endpoint");
        process.stop().await;
    }
}

/// Rule: an enabled endpoint whose secrets are sealed under a pepper a process does not
/// have is counted in `lectern_api_webhook_endpoints_cannot_sign`, named with what to do in
/// the operations listener's readiness (never the public one's), and listed by
/// `webhooks list --pepper unknown`; the gauge is 0 from the start where all is well.
#[tokio::test]
async fn an_endpoint_no_listed_pepper_opens_shows_in_a_metric_readiness_and_webhooks_list() {
    let db = TestDatabase::create().await;
    let workspace = Uuid::new_v4();
    let receiver = Receiver::start().await;
    let endpoint = register(&db.url, workspace, &receiver.url, &["contacts"]).await;
    let well = Serve::on(&db.url).private_webhook_targets().webhook_lease_ms(600).start().await;
    assert_eq!(well.metrics().await.value("lectern_api_webhook_endpoints_cannot_sign", &[]), Some(0.0));
    well.stop().await;

    let lacking =
        Serve::on(&db.url).private_webhook_targets().webhook_lease_ms(600).env("LECTERN_KEY_PEPPER", NEW).start().await;
    let deadline = Instant::now() + WITHIN;
    let ready = loop {
        let ready = lacking.get_operations("/readyz").await;
        if ready.text.contains(&endpoint.id.to_string()) {
            break ready;
        }
        assert!(Instant::now() < deadline, "readiness never named the endpoint: {}", ready.text);
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(ready.status, 200, "a receiver's endpoint does not make serve unready: {}", ready.text);
    assert!(ready.text.contains("LECTERN_PREVIOUS_KEY_PEPPERS"), "readiness says what to do: {}", ready.text);
    assert_eq!(lacking.metrics().await.value("lectern_api_webhook_endpoints_cannot_sign", &[]), Some(1.0));
    let public = lacking.get(None, "/readyz").await;
    assert!(!public.text.contains(&endpoint.id.to_string()), "the public port names the endpoint: {}", public.text);
    let unknown = listed(&db.url, &[("LECTERN_KEY_PEPPER", NEW)], &["unknown"]).await;
    assert_eq!(unknown.len(), 1, "{unknown:#?}");
    assert_eq!(unknown[0]["id"], endpoint.id.to_string());
    lacking.stop().await;
}
