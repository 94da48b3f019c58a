//! Failed attempts: retried with the same `webhook-id` after doubling, jittered delays;
//! a redirect is a failure and is not followed; no misbehaving receiver holds an attempt
//! past the timeout; and an endpoint whose deliveries fail for `retry_for` is disabled,
//! for operators to see, until `enable` (which announces what changed meanwhile).

use std::time::Duration;

use lectern_tests::seed::ContactSeed;
use lectern_tests::serve::Serve;
use lectern_tests::webhooks::{verify_with_standardwebhooks, Answer, Receiver};
use lectern_tests::TestDatabase;
use uuid::Uuid;

use crate::announced::assert_announced_everything;
use crate::clock::{gaps, timestamp, wall_clock};
use crate::endpoints::{entry, listed, register, wait_for_log, webhooks};
use crate::senders::{app, serve, settings};

/// What scheduling, the database and a loaded CI machine may add to a wait.
const SLACK: Duration = Duration::from_millis(400);
/// Long enough for any delivery the tests expect, short enough to fail fast.
const WITHIN: Duration = Duration::from_secs(15);

/// Rule: a failed attempt is retried with the same `webhook-id`, the n-th retry after
/// `first_retry` doubled n-1 times, with equal jitter (between half and all of it).
#[tokio::test]
async fn a_delivery_answered_500_is_retried_with_the_same_webhook_id_after_doubling_jittered_delays() {
    let db = TestDatabase::create().await;
    let first = Duration::from_millis(300);
    let _app = app(&db, settings(first, Duration::from_secs(2))).await;
    let workspace = Uuid::new_v4();
    let receiver = Receiver::start().await;
    // Three failures make three retries, so a delay that does not double (at most
    // `first`) cannot pass for the third (at least twice `first`), whatever the jitter.
    receiver.then([Answer::Status(500), Answer::Status(500), Answer::Status(500)]);
    let endpoint = register(&db.url, workspace, &receiver.url, &["contacts"]).await;

    ContactSeed::named("Retried Ltd").insert(&db.pool, workspace).await;

    let deliveries = receiver.wait_for(WITHIN, "four attempts", |deliveries| deliveries.len() >= 4).await;
    let id = deliveries[0].id();
    assert!(id.starts_with("msg_"), "{:?}", deliveries[0].headers);
    assert!(deliveries.iter().all(|delivery| delivery.id() == id), "one webhook-id for every attempt: {deliveries:#?}");
    for (retry, gap) in gaps(&deliveries[..4]).into_iter().enumerate() {
        let full = first * (1 << retry);
        assert!(gap >= full / 2, "retry {}: {gap:?} is less than half of {full:?}", retry + 1);
        assert!(gap <= full + SLACK, "retry {}: {gap:?} is more than {full:?} (and {SLACK:?} of slack)", retry + 1);
    }
    let log = wait_for_log(&db.url, endpoint.id, WITHIN, "the delivery recorded as delivered", |log| {
        log.first().is_some_and(|entry| entry["state"] == "delivered")
    })
    .await;
    let logged = entry(&log, id);
    assert_eq!(logged["attempts"], 4, "{logged}");
    assert_eq!(logged["lastStatus"], 204, "{logged}");
    assert_eq!(log.len(), 1, "one change, one delivery: {log:#?}");
    tokio::time::sleep(first).await;
    assert_eq!(receiver.deliveries().len(), 4, "nothing is sent after the 2xx");
    verify_with_standardwebhooks(&receiver.deliveries(), &[&endpoint.secret]).await;
}

/// Rule: no redirect is followed; a 3xx is a failed attempt, retried like any other, and
/// the address in its Location is never requested.
#[tokio::test]
async fn a_redirect_is_a_failed_attempt_and_its_location_is_never_requested() {
    let db = TestDatabase::create().await;
    let _app = app(&db, settings(Duration::from_millis(100), Duration::from_secs(2))).await;
    let workspace = Uuid::new_v4();
    let redirecting = Receiver::start().await;
    let elsewhere = Receiver::start().await;
    redirecting.otherwise(Some(Answer::Redirect(elsewhere.url.clone())));
    let endpoint = register(&db.url, workspace, &redirecting.url, &["contacts"]).await;

    ContactSeed::named("Redirected Ltd").insert(&db.pool, workspace).await;

    let log = wait_for_log(&db.url, endpoint.id, WITHIN, "two failed attempts", |log| {
        log.first().is_some_and(|entry| entry["attempts"].as_i64() >= Some(2))
    })
    .await;
    assert_eq!(log[0]["state"], "pending", "{log:#?}");
    assert_eq!(log[0]["lastStatus"], 307, "{log:#?}");
    assert!(log[0]["lastError"].as_str().is_some_and(|error| error.contains("307")), "{log:#?}");
    redirecting.otherwise(None);
    let delivered = wait_for_log(&db.url, endpoint.id, WITHIN, "the delivery", |log| {
        log.first().is_some_and(|entry| entry["state"] == "delivered")
    })
    .await;
    assert_eq!(delivered[0]["lastStatus"], 204, "{delivered:#?}");
    let deliveries = redirecting.deliveries();
    assert!(deliveries.len() >= 3, "{deliveries:#?}");
    assert!(deliveries.iter().all(|delivery| delivery.id() == deliveries[0].id()), "{deliveries:#?}");
    assert!(elsewhere.deliveries().is_empty(), "the redirect was followed: {:#?}", elsewhere.deliveries());
    verify_with_standardwebhooks(&deliveries, &[&endpoint.secret]).await;
}

/// Rule: one attempt lasts at most the timeout, whatever the receiver does: one that
/// hangs is cut at the timeout (a failed attempt, retried), one that resets the
/// connection fails at once, and one that streams a huge body is delivered when its
/// status arrives, its body never read.
#[tokio::test]
async fn no_receiver_holds_an_attempt_past_the_timeout_by_hanging_streaming_a_huge_body_or_resetting() {
    let db = TestDatabase::create().await;
    let (first, timeout) = (Duration::from_millis(200), Duration::from_millis(1500));
    let _app = app(&db, settings(first, timeout)).await;
    let workspace = Uuid::new_v4();
    let hanging = Receiver::start().await;
    hanging.otherwise(Some(Answer::Hang(Duration::from_secs(60))));
    let resetting = Receiver::start().await;
    resetting.otherwise(Some(Answer::Reset));
    let streaming = Receiver::start().await;
    // A gigabyte, sent slowly: minutes to read whole.
    streaming.then([Answer::HugeBody(1 << 30)]);
    let hang = register(&db.url, workspace, &hanging.url, &["contacts"]).await;
    let reset = register(&db.url, workspace, &resetting.url, &["contacts"]).await;
    let huge = register(&db.url, workspace, &streaming.url, &["contacts"]).await;

    ContactSeed::named("Misbehaved Ltd").insert(&db.pool, workspace).await;

    // Hanging: every attempt ends at the timeout, then waits its retry delay.
    let attempts = hanging.wait_for(WITHIN, "two attempts to the hanging receiver", |d| d.len() >= 2).await;
    let gap = gaps(&attempts)[0];
    assert!(gap >= timeout, "the hanging attempt ended before the timeout: {gap:?}");
    assert!(gap <= timeout + first + SLACK, "the hanging attempt was held past the timeout: {gap:?}");
    let log = wait_for_log(&db.url, hang.id, WITHIN, "a timed-out attempt", |log| {
        log.first().is_some_and(|entry| entry["attempts"].as_i64() >= Some(1))
    })
    .await;
    assert_eq!(log[0]["state"], "pending", "{log:#?}");
    assert!(log[0]["lastStatus"].is_null(), "{log:#?}");
    let error = log[0]["lastError"].as_str().unwrap_or_default();
    assert!(error.contains("timed out") || error.contains("timeout"), "the error names the timeout: {log:#?}");

    // Resetting: fails at once, so the retry comes after the retry delay alone.
    let attempts = resetting.wait_for(WITHIN, "two attempts to the resetting receiver", |d| d.len() >= 2).await;
    let gap = gaps(&attempts)[0];
    assert!(gap >= first / 2 && gap <= first + SLACK, "the reset attempt was not retried after its delay: {gap:?}");
    let log = wait_for_log(&db.url, reset.id, WITHIN, "a reset attempt", |log| {
        log.first().is_some_and(|entry| entry["attempts"].as_i64() >= Some(1))
    })
    .await;
    assert_eq!(log[0]["state"], "pending", "{log:#?}");
    assert!(log[0]["lastStatus"].is_null(), "{log:#?}");
    assert!(log[0]["lastError"].as_str().is_some_and(|error| !error.is_empty()), "{log:#?}");

    // Streaming: the 200 is the answer; the attempt ends when it arrives.
    let arrived = streaming.wait_for(WITHIN, "the attempt to the streaming receiver", |d| !d.is_empty()).await;
    let log = wait_for_log(&db.url, huge.id, WITHIN, "the huge-body delivery recorded", |log| {
        log.first().is_some_and(|entry| entry["attempts"].as_i64() >= Some(1))
    })
    .await;
    assert_eq!(log[0]["state"], "delivered", "a 200 is a 2xx, however long its body: {log:#?}");
    assert_eq!(log[0]["attempts"], 1, "{log:#?}");
    assert_eq!(log[0]["lastStatus"], 200, "{log:#?}");
    let held = timestamp(&log[0], "deliveredAt") - wall_clock(arrived[0].arrived);
    assert!(held.to_std().unwrap_or_default() < timeout, "the huge body held the attempt for {held}");

    // Once they behave, both misbehaving receivers get the delivery, with its first id.
    hanging.otherwise(None);
    resetting.otherwise(None);
    for (receiver, endpoint) in [(&hanging, &hang), (&resetting, &reset)] {
        wait_for_log(&db.url, endpoint.id, WITHIN, "the delivery", |log| {
            log.first().is_some_and(|entry| entry["state"] == "delivered")
        })
        .await;
        let deliveries = receiver.deliveries();
        assert!(deliveries.iter().all(|delivery| delivery.id() == deliveries[0].id()), "{deliveries:#?}");
        verify_with_standardwebhooks(&deliveries, &[&endpoint.secret]).await;
    }
    verify_with_standardwebhooks(&streaming.deliveries(), &[&huge.secret]).await;
}

/// Rule: deliveries that keep failing are retried for `retry_for` after the first attempt,
/// then the endpoint is disabled by `failures`: `webhooks list` says so with the reason,
/// `/readyz` of `serve` names it in its detail while still answering 200, the metric of
/// endpoints disabled by failures is 1, and nothing more is sent; `webhooks enable`
/// then announces the changes made meanwhile.
#[tokio::test]
async fn deliveries_failing_for_retry_for_disable_the_endpoint_visibly_until_enable_announces_what_changed() {
    let db = TestDatabase::create().await;
    let workspace = Uuid::new_v4();
    let receiver = Receiver::start().await;
    receiver.otherwise(Some(Answer::Status(503)));
    let endpoint = register(&db.url, workspace, &receiver.url, &["contacts"]).await;
    let serve = serve(&db.url)
        .private_webhook_targets()
        .envs(&[
            ("LECTERN_WEBHOOK_FIRST_RETRY_MS", "100"),
            ("LECTERN_WEBHOOK_RETRY_FOR_SECS", "1"),
            ("LECTERN_WEBHOOK_TIMEOUT_MS", "1000"),
        ])
        .start()
        .await;
    let gauge = "lectern_api_webhook_endpoints_disabled_by_failures";

    ContactSeed::named("Failing Ltd").insert(&db.pool, workspace).await;

    let log = wait_for_log(&db.url, endpoint.id, WITHIN, "the delivery given up", |log| {
        log.first().is_some_and(|entry| entry["state"] == "failed")
    })
    .await;
    let failed = log[0]["id"].as_str().expect("delivery id").to_owned();
    let attempts = receiver.deliveries();
    let tried_for = attempts[attempts.len() - 1].arrived.duration_since(attempts[0].arrived);
    assert!(tried_for >= Duration::from_secs(1), "gave up {tried_for:?} after the first attempt, before retry_for");
    assert_eq!(log[0]["attempts"], attempts.len(), "{log:#?}");
    assert_eq!(log[0]["lastStatus"], 503, "{log:#?}");
    let shown = listed(&db.url, endpoint.id).await;
    assert_eq!(shown["enabled"], false, "{shown}");
    assert_eq!(shown["disabledBy"], "failures", "{shown}");
    let reason = shown["disabledReason"].as_str().unwrap_or_default().to_owned();
    assert!(reason.contains("failed for 1 s") && reason.contains("503"), "the reason says why: {shown}");
    let text = webhooks(&db.url, &["list"], &[]).await;
    text.assert_success();
    assert!(text.stdout.contains(&format!("disabled by failures: {reason}")), "{}", text.stdout);

    // Readiness and the metric follow within a few claim rounds (every 200 ms here).
    let deadline = std::time::Instant::now() + WITHIN;
    let ready = loop {
        let ready = serve.get_operations("/readyz").await;
        if ready.text.contains(&endpoint.id.to_string()) {
            break ready;
        }
        assert!(std::time::Instant::now() < deadline, "/readyz never named the endpoint: {}", ready.text);
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(ready.status, 200, "a receiver's failures do not make serve unready: {}", ready.text);
    let public = serve.http.get(serve.api_url("/readyz")).send().await.expect("the public /readyz answers");
    assert_eq!(public.status(), 200);
    let public = public.text().await.unwrap_or_default();
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&public).ok(),
        Some(serde_json::json!({ "status": "ready" })),
        "the public port names no endpoint, workspace or receiver: {public}"
    );
    assert_eq!(ready.body["status"], "ready", "{}", ready.text);
    let detail: Vec<&str> = ready.body["degraded"]
        .as_array()
        .map(|lines| lines.iter().filter_map(|line| line.as_str()).collect())
        .unwrap_or_default();
    assert!(
        detail.iter().any(|line| line.contains(&endpoint.id.to_string())
            && line.contains(&workspace.to_string())
            && line.contains(&reason)
            && line.contains("webhooks enable")),
        "the detail names the endpoint, why, and what to do: {}",
        ready.text
    );
    let metrics = poll_metric(&serve, gauge, 1.0).await;
    assert_eq!(metrics, 1.0);

    // Disabled: nothing more is sent, however the workspace changes.
    let sent = receiver.deliveries().len();
    ContactSeed::named("Changed Meanwhile Ltd").insert(&db.pool, workspace).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(receiver.deliveries().len(), sent, "a disabled endpoint was sent deliveries");

    receiver.otherwise(None);
    webhooks(&db.url, &["enable", &endpoint.id.to_string()], &[]).await.assert_success();
    let deliveries = receiver.wait_for(WITHIN, "a delivery after enable", |d| d.len() > sent).await;
    let announced = &deliveries[sent];
    assert_ne!(announced.id(), failed, "the given-up delivery stays given up; a new one announces the changes");
    let log = wait_for_log(&db.url, endpoint.id, WITHIN, "the new delivery delivered", |log| {
        log.iter().any(|entry| entry["id"] == announced.id() && entry["state"] == "delivered")
    })
    .await;
    assert_eq!(entry(&log, &failed)["state"], "failed", "{log:#?}");
    assert_announced_everything(&db.pool, endpoint.id, "contacts", workspace, "the change made while disabled").await;
    assert_eq!(listed(&db.url, endpoint.id).await["enabled"], true);
    assert_eq!(poll_metric(&serve, gauge, 0.0).await, 0.0, "enabled again, the endpoint is no longer counted");
    let ready = serve.get_operations("/readyz").await;
    assert!(!ready.text.contains(&endpoint.id.to_string()), "{}", ready.text);
    verify_with_standardwebhooks(&receiver.deliveries(), &[&endpoint.secret]).await;
    serve.stop().await;
}

/// Rule: what a failed attempt leaves for operators (`webhooks deliveries`, the disabled
/// reason, logs) names the receiver by scheme, host and port, never by the URL's path or
/// query, where receivers put tokens.
#[tokio::test]
async fn a_failed_attempt_records_why_without_the_urls_path_or_query() {
    let db = TestDatabase::create().await;
    let _app = app(&db, settings(Duration::from_millis(200), Duration::from_millis(500))).await;
    let workspace = Uuid::new_v4();
    // Nothing listens there: the attempt fails before any status, in the HTTP client.
    let port = lectern_tests::nats::free_port();
    let url = format!("http://127.0.0.1:{port}/hooks/pathtoken-4f1c?token=querytoken-9b2e");
    let endpoint = register(&db.url, workspace, &url, &["contacts"]).await;

    ContactSeed::named("Unreachable Ltd").insert(&db.pool, workspace).await;

    let log = wait_for_log(&db.url, endpoint.id, WITHIN, "a failed attempt recorded", |log| {
        log.first().is_some_and(|entry| entry["lastError"].is_string())
    })
    .await;
    let error = log[0]["lastError"].as_str().unwrap_or_default();
    assert!(error.contains("connect"), "the error says what failed: {error}");
    for secret in ["pathtoken-4f1c", "querytoken-9b2e", "/hooks"] {
        assert!(!error.contains(secret), "the stored error holds {secret:?}: {error}");
    }
}

/// Scrapes `/metrics` until `name` is `expected` (it is refreshed every claim round).
async fn poll_metric(serve: &Serve, name: &str, expected: f64) -> f64 {
    let deadline = std::time::Instant::now() + WITHIN;
    loop {
        let metrics = serve.metrics().await;
        let value = metrics.value(name, &[]);
        if value == Some(expected) {
            return expected;
        }
        assert!(std::time::Instant::now() < deadline, "{name} is {value:?}, not {expected}:\n{}", metrics.text);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
