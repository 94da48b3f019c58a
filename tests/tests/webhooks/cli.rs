//! The operator's commands: rotating a secret (old and new both sign during the overlap),
//! disabling and enabling, deleting, redelivering, the errors for ids that do not exist,
//! and secrets shown by `create` and `rotate-secret` only, never by anything else.

use std::time::Duration;

use lectern_tests::seed::ContactSeed;
use lectern_tests::webhooks::{verified_by_standardwebhooks, verify_with_standardwebhooks, Answer, Receiver};
use lectern_tests::{TestApp, TestDatabase};
use uuid::Uuid;

use crate::announced::assert_announced_everything;
use crate::endpoints::{deliveries, entry, list, listed, register, wait_for_log, webhooks, Endpoint};
use crate::senders::{app, serve, settings};

const WITHIN: Duration = Duration::from_secs(15);

/// What most command tests act on: a database, the app delivering with quick retries, and
/// an endpoint for a fresh workspace's contacts at a fresh receiver.
struct Delivering {
    db: TestDatabase,
    _app: TestApp,
    workspace: Uuid,
    receiver: Receiver,
    endpoint: Endpoint,
}

impl Delivering {
    async fn start() -> Self {
        let db = TestDatabase::create().await;
        let _app = app(&db, settings(Duration::from_millis(100), Duration::from_secs(2))).await;
        let workspace = Uuid::new_v4();
        let receiver = Receiver::start().await;
        let endpoint = register(&db.url, workspace, &receiver.url, &["contacts"]).await;
        Self { db, _app, workspace, receiver, endpoint }
    }
}
/// Far longer than a delivery takes to follow a change (tens of milliseconds), for
/// checking that none follows.
const NONE_FOLLOWS: Duration = Duration::from_secs(1);

/// The `whsec_` secrets a command printed, each time it printed one.
fn secrets_in(text: &str) -> Vec<String> {
    text.split(|c: char| c.is_whitespace() || c == '"')
        .filter(|word| word.starts_with("whsec_"))
        .map(str::to_owned)
        .collect()
}

/// The signatures a delivery carries.
fn signatures(delivery: &lectern_tests::webhooks::Delivery) -> usize {
    delivery
        .headers
        .get("webhook-signature")
        .map_or(0, |header| header.split(' ').filter(|s| s.starts_with("v1,")).count())
}

/// Rule: `rotate-secret` prints the new secret once; during the overlap every delivery
/// carries two signatures and verifies with the old secret and with the new one alone;
/// with `--overlap-hours 0` the old secret stops signing at once.
#[tokio::test]
async fn rotate_secret_signs_with_old_and_new_during_the_overlap_and_with_the_new_only_after() {
    let Delivering { db, _app, workspace, receiver, endpoint } = Delivering::start().await;
    let id = endpoint.id.to_string();
    ContactSeed::named("Before Rotation Ltd").insert(&db.pool, workspace).await;
    let before = receiver.wait_for(WITHIN, "a delivery", |d| d.len() == 1).await;
    assert_eq!(signatures(&before[0]), 1, "{:?}", before[0].headers);

    let rotated = webhooks(&db.url, &["rotate-secret", &id], &[]).await;
    rotated.assert_success();
    let printed = secrets_in(&rotated.stdout);
    assert_eq!(printed.len(), 1, "the new secret is printed once: {}", rotated.stdout);
    let new = printed[0].clone();
    assert_ne!(new, endpoint.secret);
    assert!(secrets_in(&rotated.stderr).is_empty(), "{}", rotated.stderr);
    assert!(!listed(&db.url, endpoint.id).await["previousSecretUntil"].is_null(), "the overlap is listed");
    ContactSeed::named("During Overlap Ltd").insert(&db.pool, workspace).await;
    let during = receiver.wait_for(WITHIN, "a delivery during the overlap", |d| d.len() == 2).await;
    let overlapping = &during[1..];
    assert_eq!(signatures(&overlapping[0]), 2, "old and new both sign: {:?}", overlapping[0].headers);
    verify_with_standardwebhooks(overlapping, &[&endpoint.secret]).await;
    verify_with_standardwebhooks(overlapping, &[&new]).await;

    let at_once = webhooks(&db.url, &["rotate-secret", &id, "--overlap-hours", "0", "--output", "json"], &[]).await;
    at_once.assert_success();
    let newest = at_once.json()["secret"].as_str().expect("the new secret").to_owned();
    assert_eq!(secrets_in(&at_once.stdout), std::slice::from_ref(&newest), "{}", at_once.stdout);
    assert!(listed(&db.url, endpoint.id).await["previousSecretUntil"].is_null(), "no overlap");
    ContactSeed::named("After Rotation Ltd").insert(&db.pool, workspace).await;
    let after = receiver.wait_for(WITHIN, "a delivery after the overlap", |d| d.len() == 3).await;
    let after = &after[2..];
    assert_eq!(signatures(&after[0]), 1, "only the new secret signs: {:?}", after[0].headers);
    verify_with_standardwebhooks(after, &[&newest]).await;
    assert_eq!(verified_by_standardwebhooks(after, &[&new]).await, 0, "the replaced secret still verifies");
    assert_eq!(verified_by_standardwebhooks(after, &[&endpoint.secret]).await, 0, "the first secret still verifies");
    verify_with_standardwebhooks(&before, &[&endpoint.secret]).await;
}

/// Rule: `disable` stops deliveries at once, retries of a pending one included, and says
/// why in `list`; after `enable`, the changes made meanwhile are announced.
#[tokio::test]
async fn disable_stops_deliveries_and_retries_and_enable_announces_the_changes_made_meanwhile() {
    let Delivering { db, _app, workspace, receiver, endpoint } = Delivering::start().await;
    let id = endpoint.id.to_string();
    ContactSeed::named("Delivered Ltd").insert(&db.pool, workspace).await;
    receiver.wait_for(WITHIN, "a delivery", |d| d.len() == 1).await;
    // A failing receiver: the next delivery is being retried when the endpoint is disabled.
    receiver.otherwise(Some(Answer::Status(500)));
    ContactSeed::named("Retried Ltd").insert(&db.pool, workspace).await;
    receiver.wait_for(WITHIN, "a retry", |d| d.len() >= 3).await;

    let disabled = webhooks(&db.url, &["disable", &id, "--reason", "receiver moving house"], &[]).await;
    disabled.assert_success();
    assert!(disabled.stdout.contains("disabled"), "{}", disabled.stdout);
    let shown = listed(&db.url, endpoint.id).await;
    assert_eq!((&shown["enabled"], &shown["disabledBy"]), (&false.into(), &"operator".into()), "{shown}");
    assert_eq!(shown["disabledReason"], "receiver moving house", "{shown}");
    // An attempt in flight when the command ran may still arrive; none after it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let sent = receiver.deliveries().len();
    ContactSeed::named("Changed While Disabled Ltd").insert(&db.pool, workspace).await;
    tokio::time::sleep(NONE_FOLLOWS).await;
    assert_eq!(receiver.deliveries().len(), sent, "a disabled endpoint was sent deliveries");

    receiver.otherwise(None);
    let enabled = webhooks(&db.url, &["enable", &id], &[]).await;
    enabled.assert_success();
    receiver.wait_for(WITHIN, "a delivery after enable", |d| d.len() > sent).await;
    wait_for_log(&db.url, endpoint.id, WITHIN, "the pending delivery delivered", |log| {
        log.iter().all(|entry| entry["state"] == "delivered")
    })
    .await;
    assert_announced_everything(&db.pool, endpoint.id, "contacts", workspace, "the change made while disabled").await;
    assert_eq!(listed(&db.url, endpoint.id).await["enabled"], true);
    verify_with_standardwebhooks(&receiver.deliveries(), &[&endpoint.secret]).await;
}

/// Rule: `delete` removes the endpoint and its delivery log, and nothing is delivered to
/// it afterwards.
#[tokio::test]
async fn delete_removes_the_endpoint_and_its_delivery_log_and_deliveries_stop() {
    let Delivering { db, _app, workspace, receiver, endpoint } = Delivering::start().await;
    let id = endpoint.id.to_string();
    ContactSeed::named("Logged Ltd").insert(&db.pool, workspace).await;
    receiver.wait_for(WITHIN, "a delivery", |d| d.len() == 1).await;
    wait_for_log(&db.url, endpoint.id, WITHIN, "the delivery logged", |log| log.len() == 1).await;

    let deleted = webhooks(&db.url, &["delete", &id], &[]).await;
    deleted.assert_success();
    assert!(deleted.stdout.contains("deleted"), "{}", deleted.stdout);
    assert!(list(&db.url).await.is_empty(), "the endpoint is still listed");
    assert!(deliveries(&db.url, endpoint.id).await.is_empty(), "its log is still shown");
    let left: i64 = sqlx::query_scalar(
        "select (select count(*) from webhook_deliveries where endpoint_id = $1) \
              + (select count(*) from webhook_announced where endpoint_id = $1)",
    )
    .bind(endpoint.id)
    .fetch_one(&db.pool)
    .await
    .expect("count what is left");
    assert_eq!(left, 0, "rows of the deleted endpoint are left");
    ContactSeed::named("After Delete Ltd").insert(&db.pool, workspace).await;
    tokio::time::sleep(NONE_FOLLOWS).await;
    assert_eq!(receiver.deliveries().len(), 1, "a deleted endpoint was sent a delivery");
    webhooks(&db.url, &["delete", &id], &[])
        .await
        .assert_one_line_error(Some(1), &[&format!("no webhook endpoint with id {id}")]);
    verify_with_standardwebhooks(&receiver.deliveries(), &[&endpoint.secret]).await;
}

/// Rule: `redeliver` sends a delivered delivery again, with the same `webhook-id`; an
/// unknown id, or one whose endpoint and resource has another delivery pending, exits 1
/// with a message saying so.
#[tokio::test]
async fn redeliver_sends_a_delivery_again_with_its_webhook_id_and_refuses_unknown_or_superseded_ones() {
    let Delivering { db, _app, workspace, receiver, endpoint } = Delivering::start().await;
    ContactSeed::named("Redelivered Ltd").insert(&db.pool, workspace).await;
    let first = receiver.wait_for(WITHIN, "a delivery", |d| d.len() == 1).await;
    let id = first[0].id().to_owned();
    wait_for_log(&db.url, endpoint.id, WITHIN, "the delivery delivered", |log| {
        log.first().is_some_and(|entry| entry["state"] == "delivered")
    })
    .await;

    let again = webhooks(&db.url, &["redeliver", &id], &[]).await;
    again.assert_success();
    assert!(again.stdout.contains(&id), "{}", again.stdout);
    let both = receiver.wait_for(WITHIN, "the redelivery", |d| d.len() == 2).await;
    assert_eq!(both[1].id(), id, "a redelivery keeps its webhook-id");
    assert_eq!(both[1].body, both[0].body, "a redelivery says the same");
    let log = wait_for_log(&db.url, endpoint.id, WITHIN, "the redelivery delivered", |log| {
        log.first().is_some_and(|entry| entry["state"] == "delivered" && entry["attempts"] == 1)
    })
    .await;
    assert_eq!(log.len(), 1, "no new delivery was made: {log:#?}");

    webhooks(&db.url, &["redeliver", "msg_nosuchdelivery"], &[])
        .await
        .assert_one_line_error(Some(1), &["no webhook delivery with id msg_nosuchdelivery"]);

    // Another delivery of the same endpoint and resource pending: redelivering the old
    // one would announce nothing more, and says which one to watch instead.
    receiver.otherwise(Some(Answer::Status(500)));
    ContactSeed::named("Pending Ltd").insert(&db.pool, workspace).await;
    let log = wait_for_log(&db.url, endpoint.id, WITHIN, "a pending delivery", |log| {
        log.iter().any(|entry| entry["state"] == "pending" && entry["attempts"].as_i64() >= Some(1))
    })
    .await;
    let pending = log.iter().find(|entry| entry["state"] == "pending").and_then(|entry| entry["id"].as_str());
    let pending = pending.expect("pending id").to_owned();
    let refused = webhooks(&db.url, &["redeliver", &id], &[]).await;
    refused.assert_one_line_error(Some(1), &[&pending, "is pending"]);
    assert!(!refused.stderr.contains("  "), "the message reads as one sentence: {}", refused.stderr);
    assert_eq!(entry(&log, &id)["state"], "delivered");
    verify_with_standardwebhooks(&receiver.deliveries(), &[&endpoint.secret]).await;
}

/// Rule: `enable`, `disable`, `delete` and `rotate-secret` of an endpoint that does not
/// exist exit 1 naming the id, and change nothing.
#[tokio::test]
async fn commands_on_an_unknown_endpoint_exit_1_naming_it() {
    let db = TestDatabase::create().await;
    let workspace = Uuid::new_v4();
    let receiver = Receiver::start().await;
    let existing = register(&db.url, workspace, &receiver.url, &["contacts"]).await;
    let unknown = Uuid::new_v4().to_string();
    for command in [
        vec!["enable", &unknown],
        vec!["disable", &unknown],
        vec!["disable", &unknown, "--reason", "gone"],
        vec!["delete", &unknown],
        vec!["rotate-secret", &unknown],
    ] {
        let run = webhooks(&db.url, &command, &[]).await;
        run.assert_one_line_error(Some(1), &[&format!("no webhook endpoint with id {unknown}")]);
        assert!(run.stdout.is_empty(), "{command:?} printed {}", run.stdout);
    }
    let shown = listed(&db.url, existing.id).await;
    assert_eq!(shown["enabled"], true, "{shown}");
    assert!(shown["previousSecretUntil"].is_null(), "{shown}");
}

/// Rule: a signing secret is printed by `create` and `rotate-secret` (each its own new
/// one, once) and by nothing else: no other command's output, and not the logs of a
/// `serve` process that signs with it, failing and succeeding deliveries included.
#[tokio::test]
async fn secrets_are_printed_only_by_create_and_rotate_secret_never_by_other_commands_or_serve_logs() {
    let db = TestDatabase::create().await;
    let workspace = Uuid::new_v4();
    let receiver = Receiver::start().await;
    // One failure, so that the failure's log lines are written too.
    receiver.then([Answer::Status(500)]);
    let serve = serve(&db.url)
        .private_webhook_targets()
        .envs(&[("LECTERN_WEBHOOK_FIRST_RETRY_MS", "100"), ("RUST_LOG", "debug")])
        .start()
        .await;
    let workspace_text = workspace.to_string();
    let created = webhooks(
        &db.url,
        &["create", "--workspace", &workspace_text, "--url", &receiver.url, "--resource", "contacts"],
        &[],
    )
    .await;
    created.assert_success();
    let printed = secrets_in(&created.stdout);
    assert_eq!(printed.len(), 1, "create prints its secret once: {}", created.stdout);
    let mut secrets = vec![printed[0].clone()];
    let id = created
        .stdout
        .lines()
        .find_map(|line| line.strip_prefix("id:"))
        .map(|id| id.trim().to_owned())
        .expect("create prints the id");
    ContactSeed::named("Signed Ltd").insert(&db.pool, workspace).await;
    let deliveries = receiver.wait_for(WITHIN, "a failed and a good attempt", |d| d.len() == 2).await;
    let delivery = deliveries[0].id().to_owned();
    wait_for_log(&db.url, id.parse().expect("uuid"), WITHIN, "the delivery delivered", |log| {
        log.first().is_some_and(|entry| entry["state"] == "delivered")
    })
    .await;

    let mut outputs = Vec::new();
    for args in [
        vec!["list"],
        vec!["list", "--output", "json"],
        vec!["list", "--workspace", &workspace_text],
        vec!["deliveries", &id],
        vec!["deliveries", &id, "--output", "json"],
        vec!["disable", &id],
        vec!["enable", &id],
        vec!["redeliver", &delivery],
    ] {
        let run = webhooks(&db.url, &args, &[]).await;
        run.assert_success();
        outputs.push((format!("{args:?}"), format!("{}\n{}", run.stdout, run.stderr)));
    }
    // The redelivery made before the next change, or that change rides on it (coalesced).
    receiver.wait_for(WITHIN, "the redelivery", |d| d.len() == 3).await;
    wait_for_log(&db.url, id.parse().expect("uuid"), WITHIN, "the redelivery delivered", |log| {
        log.first().is_some_and(|entry| entry["state"] == "delivered")
    })
    .await;
    for args in [vec!["rotate-secret", &id], vec!["rotate-secret", &id, "--overlap-hours", "0", "--output", "json"]] {
        let run = webhooks(&db.url, &args, &[]).await;
        run.assert_success();
        let printed = secrets_in(&run.stdout);
        assert_eq!(printed.len(), 1, "{args:?} prints its secret once: {}", run.stdout);
        assert!(!secrets.contains(&printed[0]), "{args:?} printed an earlier secret");
        // A rotation shows its new secret only: the earlier ones must not leak here either.
        outputs.push((format!("{args:?}"), format!("{}\n{}", run.stdout.replace(&printed[0], ""), run.stderr)));
        secrets.push(printed[0].clone());
    }
    for args in [vec!["list"], vec!["deliveries", &id]] {
        let run = webhooks(&db.url, &args, &[]).await;
        run.assert_success();
        outputs.push((format!("{args:?} after rotating"), format!("{}\n{}", run.stdout, run.stderr)));
    }
    ContactSeed::named("Signed After Rotation Ltd").insert(&db.pool, workspace).await;
    receiver.wait_for(WITHIN, "a delivery signed with the newest secret", |d| d.len() >= 4).await;
    let ended = serve.stop().await;
    outputs.push(("serve's logs".to_owned(), format!("{}\n{}", ended.stdout, ended.stderr)));

    assert!(ended.stderr.contains("webhook delivery failed; retrying"), "the failure was logged: {}", ended.stderr);
    for (what, text) in &outputs {
        for secret in &secrets {
            // The secret's key material, with or without its prefix.
            let material = secret.trim_start_matches("whsec_");
            assert!(!text.contains(material), "{what} shows a secret:\n{text}");
        }
    }
    let all: Vec<&str> = secrets.iter().map(String::as_str).collect();
    verify_with_standardwebhooks(&receiver.deliveries(), &all).await;
}
