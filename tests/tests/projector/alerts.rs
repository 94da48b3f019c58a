//! Each projector alert of docs/operations.md ("Alerts") seen to fire: the condition
//! brought about for real (a killed nats-server, a locked table, a stopped projector, a
//! drifted read model), and the metric the alert reads crossing the threshold stated
//! there. The real binary, its own nats-server and database per test.

use std::time::{Duration, Instant};

use lectern_tests::nats::TestNats;
use lectern_tests::process::Metrics;
use lectern_tests::projector::{contact_event, eventually, publish, ProjectorProcess};
use lectern_tests::TestDatabase;
use serde_json::Value;
use sqlx::Executor;
use uuid::Uuid;

use crate::operations::all_acknowledged;
use crate::process::run_command;

/// How long the binary may take to start, notice an outage or recover.
const WITHIN: Duration = Duration::from_secs(60);

const NATS_CONNECTED: &str = "lectern_projector_nats_connected";
const BEHIND_SECONDS: &str = "lectern_projector_stream_behind_seconds";
const BEHIND_MESSAGES: &str = "lectern_projector_stream_behind_messages";
const DEAD_LETTERS: &str = "lectern_projector_dead_letters";
const PUBLISH_TO_COMMIT: &str = "lectern_projector_publish_to_commit_seconds";
const LAST_VERIFY_TIME: &str = "lectern_projector_last_verify_timestamp_seconds";
const LAST_VERIFY_DRIFTED: &str = "lectern_projector_last_verify_drifted_records";

/// The thresholds docs/operations.md states.
const STALENESS_ALERT_SECONDS: f64 = 30.0;
const PUBLISH_TO_COMMIT_ALERT_SECONDS: f64 = 5.0;
const VERIFY_TOO_OLD_SECONDS: f64 = 26.0 * 3600.0;

fn value(metrics: &Metrics, name: &str) -> Option<f64> {
    metrics.value(name, &[])
}

/// Whether the projector is connected to NATS and its read model level with the stream.
async fn connected_and_level(projector: &ProjectorProcess) -> bool {
    let metrics = projector.metrics().await;
    value(&metrics, NATS_CONNECTED) == Some(1.0)
        && value(&metrics, BEHIND_MESSAGES) == Some(0.0)
        && value(&metrics, BEHIND_SECONDS).is_some_and(|seconds| seconds < 5.0)
}

async fn publish_three_contacts(client: &async_nats::Client) {
    let workspace = Uuid::new_v4();
    for index in 0..3 {
        publish(client, &contact_event("created", workspace, Uuid::new_v4(), 1, &format!("Contact {index}"))).await;
    }
}

/// Rules (alerts "NATS disconnected" and "read model behind the stream"): with events in
/// the stream that the read model lacks, the staleness gauge rises and keeps rising past
/// its threshold after nats-server is killed, while the connection gauge says 0 and one
/// warning says NATS was lost; once NATS is back and the events applied, the gauges
/// recover and one line says so.
#[tokio::test]
async fn while_nats_is_down_the_connection_gauge_is_0_and_staleness_keeps_rising_past_its_threshold() {
    let mut nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let projector = ProjectorProcess::on(&nats.url, &db.url).start().await;
    projector.wait_for_readiness(200).await;
    let level = eventually(WITHIN, || connected_and_level(&projector)).await;
    assert!(level, "connected and level at first:\n{}", projector.metrics().await.text);
    // Events the read model lacks: the projector pulls them and waits on the lock.
    let mut lock = db.pool.begin().await.expect("begin the lock transaction");
    lock.execute("lock table contacts in access exclusive mode").await.expect("lock contacts");
    let client = nats.client().await;
    publish_three_contacts(&client).await;
    let behind = eventually(WITHIN, || async { value(&projector.metrics().await, BEHIND_MESSAGES) == Some(3.0) }).await;
    assert!(behind, "3 messages behind:\n{}", projector.metrics().await.text);

    nats.stop();
    let cut_at = Instant::now();
    let disconnected =
        eventually(WITHIN, || async { value(&projector.metrics().await, NATS_CONNECTED) == Some(0.0) }).await;
    let at_disconnect = value(&projector.metrics().await, BEHIND_SECONDS).unwrap_or_default();
    let fired = eventually(WITHIN, || async {
        let metrics = projector.metrics().await;
        value(&metrics, NATS_CONNECTED) == Some(0.0)
            && value(&metrics, BEHIND_SECONDS).is_some_and(|seconds| seconds > STALENESS_ALERT_SECONDS)
    })
    .await;
    let down_for = cut_at.elapsed();
    let while_down = projector.metrics().await;
    nats.restart().await;
    lock.rollback().await.expect("release the lock");
    let recovered = eventually(WITHIN, || connected_and_level(&projector)).await;

    assert!(disconnected, "the gauge never said 0:\n{}", while_down.text);
    assert!(fired, "staleness never passed {STALENESS_ALERT_SECONDS} s while NATS was down:\n{}", while_down.text);
    assert!(down_for > Duration::from_secs(25), "the alert fired from time passing during the outage: {down_for:?}");
    assert!(
        value(&while_down, BEHIND_SECONDS).unwrap_or_default() > at_disconnect,
        "staleness kept rising after the disconnect:\n{}",
        while_down.text
    );
    assert_eq!(value(&while_down, BEHIND_MESSAGES), Some(3.0), "the last known count stays:\n{}", while_down.text);
    assert!(recovered, "never connected and level again:\n{}", projector.metrics().await.text);
    let lost = "lost the connection to NATS; reconnecting (nothing is applied meanwhile)";
    assert_eq!(projector.service.logged(lost), 1, "one warning for the loss:\n{}", projector.service.stderr());
    assert_eq!(
        projector.service.logged("connected to NATS again"),
        1,
        "one line when back:\n{}",
        projector.service.stderr()
    );
    projector.stop().await;
}

/// Rule (alert "dead letters stored"): the dead-letters gauge counts the table's rows, so
/// a restarted projector reports the letter it did not store itself, and the gauge goes
/// back to 0 once `dead-letters discard --superseded` removed the letter a corrected
/// event replaced.
#[tokio::test]
async fn the_dead_letters_gauge_counts_the_tables_rows_across_a_restart_until_the_letter_is_discarded() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let client = nats.client().await;
    let (workspace, contact) = (Uuid::new_v4(), Uuid::new_v4());
    publish(&client, &contact_event("created", workspace, contact, 1, "Acme")).await;
    let mut broken = contact_event("updated", workspace, contact, 2, "Acme GmbH");
    broken["data"]["isCustomer"] = Value::from("yes");
    publish(&client, &broken).await;
    let projector = ProjectorProcess::on(&nats.url, &db.url).start().await;
    let counted = eventually(WITHIN, || async { value(&projector.metrics().await, DEAD_LETTERS) == Some(1.0) }).await;
    assert!(counted, "the gauge never counted the letter:\n{}", projector.metrics().await.text);
    projector.stop().await;

    let restarted = ProjectorProcess::on(&nats.url, &db.url).start().await;
    let still = eventually(WITHIN, || async { value(&restarted.metrics().await, DEAD_LETTERS) == Some(1.0) }).await;
    publish(&client, &contact_event("updated", workspace, contact, 2, "Acme GmbH")).await;
    let corrected = eventually(WITHIN, || all_acknowledged(&client)).await;
    let discarded = run_command(&nats.url, &db.url, &["dead-letters", "discard", "--superseded"], &[], None).await;
    let cleared = eventually(WITHIN, || async { value(&restarted.metrics().await, DEAD_LETTERS) == Some(0.0) }).await;

    assert!(still, "a restarted projector reports the stored letter:\n{}", restarted.metrics().await.text);
    assert!(corrected, "the corrected event was not applied");
    discarded.assert_success();
    assert!(discarded.stdout.starts_with("1 superseded dead letter(s) discarded"), "{}", discarded.stdout);
    assert!(cleared, "the gauge never went back to 0:\n{}", restarted.metrics().await.text);
    restarted.stop().await;
}

/// Rule (alert "publish to commit slow"): events that waited in the stream longer than
/// the threshold (published while no projector ran) land above it in the histogram, so
/// its 99th percentile crosses the threshold.
#[tokio::test]
async fn events_that_waited_in_the_stream_land_above_the_publish_to_commit_threshold() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let client = nats.client().await;
    publish_three_contacts(&client).await;
    tokio::time::sleep(Duration::from_secs_f64(PUBLISH_TO_COMMIT_ALERT_SECONDS + 1.0)).await;

    let projector = ProjectorProcess::on(&nats.url, &db.url).start().await;
    let counted = eventually(WITHIN, || async {
        value(&projector.metrics().await, &format!("{PUBLISH_TO_COMMIT}_count")) == Some(3.0)
    })
    .await;
    let metrics = projector.metrics().await;

    assert!(counted, "three events timed:\n{}", metrics.text);
    let threshold = PUBLISH_TO_COMMIT_ALERT_SECONDS.to_string();
    let within_threshold = metrics.value(&format!("{PUBLISH_TO_COMMIT}_bucket"), &[("le", &threshold)]);
    assert_eq!(within_threshold, Some(0.0), "none committed within {threshold} s:\n{}", metrics.text);
    assert!(
        value(&metrics, &format!("{PUBLISH_TO_COMMIT}_sum")).is_some_and(|sum| sum > 3.0 * 6.0),
        "each waited over 6 s:\n{}",
        metrics.text
    );
    projector.stop().await;
}

/// Rules (alerts "last verify drifted", "last verify too old" and "last verify from before
/// a restore"): a verify that found drift shows as drifted records above 0; one recorded as
/// finished two days ago (a verify cannot be made to take 26 hours in a test) shows a
/// timestamp older than the threshold; one recorded in another history of the database
/// (before a restore or a failover) shows as `outcome="before_restore"`, not as what it found;
/// before any verify, the timestamp is 0 (older than any threshold), not absent.
#[tokio::test]
async fn a_drifted_verify_one_too_old_and_one_from_before_a_restore_show_in_the_last_verify_gauges() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let projector = ProjectorProcess::on(&nats.url, &db.url).start().await;
    // No verify ever ran: the timestamp is there, at 0, so "too old" can fire.
    let never = eventually(WITHIN, || async { value(&projector.metrics().await, LAST_VERIFY_TIME) == Some(0.0) }).await;
    assert!(never, "no last-verify timestamp before the first verify:\n{}", projector.metrics().await.text);
    let client = nats.client().await;
    let workspace = Uuid::new_v4();
    publish(&client, &contact_event("created", workspace, Uuid::new_v4(), 1, "Acme")).await;
    assert!(eventually(WITHIN, || all_acknowledged(&client)).await, "the event was not applied");
    sqlx::query("update contacts set name = 'changed by hand'").execute(&db.pool).await.expect("drift a row");

    let verified = run_command(&nats.url, &db.url, &["verify", "--wait-for-projector", "20"], &[], None).await;
    let drifted =
        eventually(WITHIN, || async { value(&projector.metrics().await, LAST_VERIFY_DRIFTED) == Some(1.0) }).await;
    let drifted_metrics = projector.metrics().await;
    sqlx::query("update read_model_verifications set finished_at = now() - interval '2 days'")
        .execute(&db.pool)
        .await
        .expect("age the verify");
    let too_old = eventually(WITHIN, || async {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        value(&projector.metrics().await, LAST_VERIFY_TIME)
            .is_some_and(|finished| now.as_secs_f64() - finished > VERIFY_TOO_OLD_SECONDS)
    })
    .await;

    assert_eq!(verified.code, Some(1), "verify found the drift: {}\n{}", verified.stdout, verified.stderr);
    assert!(drifted, "the drifted gauge never said 1:\n{}", drifted_metrics.text);
    assert_eq!(
        drifted_metrics.value("lectern_projector_last_verify_outcome", &[("outcome", "drifted")]),
        Some(1.0),
        "{}",
        drifted_metrics.text
    );
    assert!(too_old, "the timestamp never aged past the threshold:\n{}", projector.metrics().await.text);

    // As after a restore or a failover: the verify was recorded in another history.
    sqlx::query("update read_model_verifications set timeline = timeline + 1, history_id = history_id + 1")
        .execute(&db.pool)
        .await
        .expect("move the verify into another history");
    let stale = eventually(WITHIN, || async {
        let metrics = projector.metrics().await;
        metrics.value("lectern_projector_last_verify_outcome", &[("outcome", "before_restore")]) == Some(1.0)
            && metrics.value("lectern_projector_last_verify_outcome", &[("outcome", "drifted")]) == Some(0.0)
    })
    .await;
    assert!(stale, "a verify from before a restore still shows its outcome:\n{}", projector.metrics().await.text);
    projector.stop().await;
}
