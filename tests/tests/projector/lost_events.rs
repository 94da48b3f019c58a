//! Acknowledged events the database lost and the stream no longer holds: never lost
//! silently. The real `lectern-projector run` with its operations listener, a private
//! nats-server whose `CHANGES` stream ages events out, and private PostgreSQL servers; a
//! database loses acknowledged events by being restored from a dump (`pg_dump`,
//! `pg_restore` into a fresh server) or failing over to a standby that missed them.

use std::time::Duration;

use async_nats::jetstream;
use lectern_projector::stream::{STREAM, SUBJECTS};
use lectern_tests::nats::TestNats;
use lectern_tests::postgres::TestPostgres;
use lectern_tests::projector::{contact_event, eventually, publish, ProjectorProcess};
use serde_json::Value;
use uuid::Uuid;

use crate::operations::all_acknowledged;
use crate::process::{number, run_command, status};

/// How long the projector may take to start, compare its ledger and catch up.
const WITHIN: Duration = Duration::from_secs(60);
/// How long the test's stream keeps an event.
const KEPT_FOR: Duration = Duration::from_secs(3);

const LOST_NOW: &str = "lectern_projector_lost_events";
const LOST_TOTAL: &str = "lectern_projector_events_lost_total";

/// Publishes version `version` of each contact and waits until all are acknowledged.
async fn publish_acknowledged(client: &async_nats::Client, workspace: Uuid, ids: &[Uuid], version: i64) {
    let kind = if version == 1 { "created" } else { "updated" };
    for id in ids {
        publish(client, &contact_event(kind, workspace, *id, version, &format!("{id} v{version}"))).await;
    }
    assert!(eventually(WITHIN, || all_acknowledged(client)).await, "the projector did not acknowledge every event");
}

/// The `degraded` entries of a `/readyz` answer.
fn degraded(readiness: &Value) -> Vec<String> {
    readiness["degraded"]
        .as_array()
        .map(|entries| entries.iter().filter_map(Value::as_str).map(str::to_owned).collect())
        .unwrap_or_default()
}

/// The rules: acknowledged events a restore made the database forget, which the stream
/// aged out meanwhile, are (1) recorded as lost, not as held: `status` says `lostEvents`
/// and no longer `acknowledgedNotHeld`; (2) named in an ERROR line; (3) counted by the
/// metrics; (4) shown by readiness, degraded but ready; (5) named by `verify`, which cannot
/// tell without them; until (6) an operator accepts them with `lost-events accept`, after
/// `lost-events list` named them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_events_the_stream_aged_out_raise_the_lost_events_alarm_until_accepted() {
    let original = TestPostgres::start_new().await;
    lectern_api::reads::create_and_migrate(&original.url()).await.expect("migrate");
    let nats = TestNats::start().await;
    let client = nats.client().await;
    // The projector keeps a stream it finds as its operators made it.
    let jetstream = jetstream::new(client.clone());
    jetstream
        .create_stream(jetstream::stream::Config {
            name: STREAM.to_owned(),
            subjects: vec![SUBJECTS.to_owned()],
            max_age: KEPT_FOR,
            ..Default::default()
        })
        .await
        .expect("create the stream");
    let projector = ProjectorProcess::on(&nats.url, &original.url()).start().await;
    let workspace = Uuid::new_v4();
    let contacts: Vec<Uuid> = (0..20).map(|_| Uuid::new_v4()).collect();
    publish_acknowledged(&client, workspace, &contacts, 1).await;
    let dump = original.dump().await;
    publish_acknowledged(&client, workspace, &contacts[..10], 2).await;
    projector.stop().await;

    // The stream ages every event out; the database is restored from the dump.
    let aged_out = eventually(WITHIN, || async {
        let Ok(mut stream) = jetstream.get_stream(STREAM).await else { return false };
        stream.info().await.is_ok_and(|info| info.state.messages == 0)
    })
    .await;
    assert!(aged_out, "the stream kept its events past {KEPT_FOR:?}");
    let restored = TestPostgres::start_new().await;
    restored.restore(&dump).await;
    let mut projector = ProjectorProcess::on(&nats.url, &restored.url()).start().await;

    let alarm = projector
        .service
        .wait_for_log(WITHIN, |record| {
            record["level"] == "ERROR"
                && record["fields"]["message"].as_str().is_some_and(|message| message.contains("events are lost"))
        })
        .await;
    assert_eq!(alarm["fields"]["events"], 10, "{alarm}");
    let readiness = projector.wait_for_readiness(200).await;
    assert!(
        degraded(&readiness.body).iter().any(|entry| entry.contains("10 acknowledged event(s) are lost")),
        "readiness does not say events are lost: {}",
        readiness.text
    );
    let metrics = projector.metrics().await;
    assert_eq!(metrics.value(LOST_NOW, &[]), Some(10.0), "the lost-events gauge");
    assert_eq!(metrics.value(LOST_TOTAL, &[]), Some(10.0), "the lost-events counter");
    let before = status(&nats.url, &restored.url()).await;
    assert_eq!(number(&before, "lostEvents"), 10, "{before}");
    assert_eq!(number(&before, "acknowledgedNotHeld"), 0, "{before}");
    let listed = run_command(&nats.url, &restored.url(), &["lost-events", "list", "--output", "json"], &[], None).await;
    listed.assert_success();
    let listed: Value = serde_json::from_str(listed.stdout.trim()).expect("a JSON list");
    assert_eq!(listed[0]["events"], 10, "{listed}");
    assert_eq!(listed[0]["sequences"], "{[21,31)}", "{listed}");

    // verify cannot compare what the stream no longer holds, and says what was lost.
    let verify = run_command(&nats.url, &restored.url(), &["verify"], &[], None).await;
    assert_eq!(verify.code, Some(2), "{}\n{}", verify.stdout, verify.stderr);
    assert!(
        format!("{}{}", verify.stdout, verify.stderr).contains("10 acknowledged event(s) are recorded as lost"),
        "verify does not name the lost events: {}\n{}",
        verify.stdout,
        verify.stderr
    );

    let accepted = run_command(&nats.url, &restored.url(), &["lost-events", "accept"], &[], None).await;
    accepted.assert_success();
    assert!(accepted.stdout.contains("10 lost event(s) accepted"), "{}", accepted.stdout);
    let cleared =
        eventually(WITHIN, || async { projector.wait_for_readiness(200).await.body["degraded"].is_null() }).await;
    assert!(cleared, "readiness stayed degraded after the lost events were accepted");
    assert_eq!(number(&status(&nats.url, &restored.url()).await, "lostEvents"), 0);
    projector.stop().await;
}

/// The rule: a stream deleted and created again numbers its events from 1 again, and the
/// ledger tells them from the old stream's. The running projector follows the new stream;
/// the primary applies 10 of its events, which a standby misses; after a failover to that
/// standby, those 10 are applied again from the new stream, not taken as held because the
/// old stream's sequences 1 to 20 were; and the ledger says it saw the stream replaced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_failover_a_recreated_streams_events_the_standby_missed_are_applied_again() {
    let mut primary = TestPostgres::start_primary().await;
    lectern_api::reads::create_and_migrate(&primary.url()).await.expect("migrate");
    let nats = TestNats::start().await;
    let client = nats.client().await;
    let projector = ProjectorProcess::on(&nats.url, &primary.url()).start().await;
    let workspace = Uuid::new_v4();
    let old_streams: Vec<Uuid> = (0..20).map(|_| Uuid::new_v4()).collect();
    publish_acknowledged(&client, workspace, &old_streams, 1).await;
    let mut standby = primary.start_standby(None).await;

    let written = primary.current_lsn().await;
    let on_the_standby = sqlx::PgPool::connect(&standby.url()).await.expect("connect to the standby");
    let replayed = eventually(WITHIN, || async {
        sqlx::query_scalar::<_, bool>("select pg_last_wal_replay_lsn() >= $1::pg_lsn")
            .bind(&written)
            .fetch_one(&on_the_standby)
            .await
            .unwrap_or(false)
    })
    .await;
    assert!(replayed, "the standby did not replay the old stream's events");
    on_the_standby.close().await;
    standby.stop().await;

    // The stream is deleted and created again; the running projector makes its consumer again.
    jetstream::new(client.clone()).delete_stream(STREAM).await.expect("delete the stream");
    let new_streams: Vec<Uuid> = (0..10).map(|_| Uuid::new_v4()).collect();
    publish_acknowledged(&client, workspace, &new_streams, 1).await;

    // A failover to the standby, which missed the new stream's events.
    projector.stop().await;
    primary.stop().await;
    standby.start().await;
    standby.promote().await;
    let mut projector = ProjectorProcess::on(&nats.url, &standby.url()).start().await;
    projector
        .service
        .wait_for_log(WITHIN, |record| {
            record["fields"]["message"].as_str().is_some_and(|message| message.contains("deleted and created again"))
        })
        .await;
    let on_standby = sqlx::PgPool::connect(&standby.url()).await.expect("connect to the new primary");
    let every_one = eventually(WITHIN, || async {
        let held: i64 = sqlx::query_scalar("select count(*) from contacts where workspace_id = $1 and id = any($2)")
            .bind(workspace)
            .bind(&new_streams)
            .fetch_one(&on_standby)
            .await
            .unwrap_or(0);
        held == 10
    })
    .await;
    assert!(every_one, "events of the new stream the standby missed were not applied again");
    assert_eq!(number(&status(&nats.url, &standby.url()).await, "acknowledgedNotHeld"), 0);
    projector.stop().await;
}
