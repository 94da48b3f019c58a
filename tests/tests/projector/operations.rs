//! What operators see of `lectern-projector run`: its operations listener (liveness,
//! readiness that follows NATS and PostgreSQL, Prometheus metrics of what it applied),
//! the `healthcheck` probe against it, and a clean stop on SIGTERM. Each test runs the
//! real binary against its own nats-server and database.

use std::time::Duration;

use sqlx::{ConnectOptions, Connection, Executor};

use async_nats::jetstream;
use lectern_projector::stream::{CONSUMER, STREAM};
use lectern_tests::binaries::Run;
use lectern_tests::nats::{free_port, TestNats};
use lectern_tests::process::Launch;
use lectern_tests::projector::{
    contact_event, eventually, item_created, item_data, publish, publish_raw, ProjectorProcess,
};
use lectern_tests::TestDatabase;
use serde_json::{json, Value};
use uuid::Uuid;

/// How long the binary may take to start, catch up, notice an outage or stop.
const WITHIN: Duration = Duration::from_secs(60);

const APPLIED: &str = "lectern_projector_events_applied_total";
const DEAD_LETTERED: &str = "lectern_projector_events_dead_lettered_total";
const BATCH_SIZE: &str = "lectern_projector_batch_size";
const APPLY_DURATION: &str = "lectern_projector_apply_duration_seconds";
const LAG: &str = "lectern_projector_consumer_lag";
const FLUSH_WAIT: &str = "lectern_projector_flush_wait_seconds";
const HANDED_BACK: &str = "lectern_projector_messages_handed_back_total";

/// `lectern-projector healthcheck --url <url>`, as a container's health check runs it.
async fn healthcheck(url: &str) -> Run {
    Launch::projector().args(["healthcheck", "--url", url]).run(WITHIN).await
}

/// Whether every message published so far was applied, committed and acknowledged.
pub(crate) async fn all_acknowledged(client: &async_nats::Client) -> bool {
    let Ok(mut stream) = jetstream::new(client.clone()).get_stream(STREAM).await else { return false };
    let Ok(last_sequence) = stream.info().await.map(|info| info.state.last_sequence) else { return false };
    let Ok(consumer) = stream.consumer_info(CONSUMER).await else { return false };
    consumer.num_pending == 0 && consumer.num_ack_pending == 0 && consumer.ack_floor.stream_sequence == last_sequence
}

#[tokio::test]
async fn the_projector_answers_healthz_200_and_readyz_200_once_connected() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let projector = ProjectorProcess::on(&nats.url, &db.url).start().await;

    let ready = projector.wait_for_readiness(200).await;
    let live = projector.get_operations("/healthz").await;

    assert_eq!(ready.body, json!({ "status": "ready" }));
    assert_eq!((live.status, live.body), (200, json!({ "status": "alive" })));
    projector.stop().await;
}

#[tokio::test]
async fn the_projector_counts_applied_events_by_type_dead_letters_by_entity_and_batches_until_lag_is_0() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let projector = ProjectorProcess::on(&nats.url, &db.url).start().await;
    let client = nats.client().await;
    let workspace = Uuid::new_v4();
    let contacts: Vec<Uuid> = (0..3).map(|_| Uuid::new_v4()).collect();

    for (index, id) in contacts.iter().enumerate() {
        publish(&client, &contact_event("created", workspace, *id, 1, &format!("Contact {index}"))).await;
    }
    publish(&client, &contact_event("updated", workspace, contacts[0], 2, "Contact 0, renamed")).await;
    for index in 0..2 {
        let data = item_data(&format!("Item {index}"), json!({ "amount": "120.00", "currency": "EUR" }), Value::Null);
        publish(&client, &item_created(workspace, Uuid::new_v4(), data)).await;
    }
    publish_raw(&client, &format!("changes.{workspace}.contacts.{}", Uuid::new_v4()), b"not json".to_vec()).await;
    let drained = eventually(WITHIN, || all_acknowledged(&client)).await;
    assert!(drained, "the projector did not acknowledge all 7 messages\n{}", projector.service.stderr());
    let lag_is_zero = eventually(WITHIN, || async { projector.metrics().await.value(LAG, &[]) == Some(0.0) }).await;
    let metrics = projector.metrics().await;

    assert!(lag_is_zero, "consumer lag never went back to 0:\n{}", metrics.text);
    assert_eq!(metrics.value(APPLIED, &[("type", "contact.created")]), Some(3.0), "{}", metrics.text);
    assert_eq!(metrics.value(APPLIED, &[("type", "contact.updated")]), Some(1.0), "{}", metrics.text);
    assert_eq!(metrics.value(APPLIED, &[("type", "item.created")]), Some(2.0), "{}", metrics.text);
    assert_eq!(metrics.label_sets(APPLIED).len(), 3, "no other event types: {}", metrics.text);
    assert_eq!(metrics.value(DEAD_LETTERED, &[("entity", "contacts")]), Some(1.0), "{}", metrics.text);
    // The other entities' series exist from the start, at 0 (alerting rules need them).
    assert_eq!(metrics.value(DEAD_LETTERED, &[("entity", "items")]), Some(0.0), "{}", metrics.text);
    assert_eq!(metrics.value(DEAD_LETTERED, &[("entity", "other")]), Some(0.0), "{}", metrics.text);
    assert_eq!(metrics.label_sets(DEAD_LETTERED).len(), 3, "{}", metrics.text);
    // Every message was in exactly one committed batch.
    assert_eq!(metrics.value(&format!("{BATCH_SIZE}_sum"), &[]), Some(7.0), "{}", metrics.text);
    let batches = metrics.value(&format!("{BATCH_SIZE}_count"), &[]).expect("batch size count");
    assert!((1.0..=7.0).contains(&batches), "{}", metrics.text);
    assert!(metrics.matching(&format!("{BATCH_SIZE}_bucket"), &[]).len() > 2, "{}", metrics.text);
    assert_eq!(metrics.value(&format!("{APPLY_DURATION}_count"), &[]), Some(batches), "{}", metrics.text);
    assert!(metrics.matching(&format!("{APPLY_DURATION}_bucket"), &[("le", "+Inf")]).len() == 1, "{}", metrics.text);
    // Batches commit before their flush and are acknowledged after a barrier; only a
    // batch that began before the barrier's connection opened commits synchronously.
    let barriered = metrics.value(&format!("{FLUSH_WAIT}_count"), &[]).unwrap_or_default();
    assert!((1.0..=batches).contains(&barriered), "acknowledged after a barrier: {barriered}\n{}", metrics.text);
    assert_eq!(metrics.value(HANDED_BACK, &[]).unwrap_or_default(), 0.0, "nothing handed back: {}", metrics.text);
    projector.stop().await;
}

#[tokio::test]
async fn the_projector_is_not_ready_while_nats_is_down_and_ready_again_once_it_is_back() {
    let mut nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let projector = ProjectorProcess::on(&nats.url, &db.url).start().await;
    projector.wait_for_readiness(200).await;
    healthcheck(&projector.operations_url("/readyz")).await.assert_success();

    nats.stop();
    let down = projector.wait_for_readiness(503).await;
    let probe_while_down = healthcheck(&projector.operations_url("/readyz")).await;
    let live_while_down = projector.get_operations("/healthz").await;
    nats.restart().await;
    let back = projector.wait_for_readiness(200).await;
    let probe_when_back = healthcheck(&projector.operations_url("/readyz")).await;

    assert_eq!(down.body["status"], "not ready", "{}", down.text);
    let problems = down.body["problems"].to_string();
    assert!(problems.contains("NATS"), "the problem names NATS: {problems}");
    assert!(
        probe_while_down.code.is_some_and(|code| code != 0),
        "healthcheck passed while not ready: {probe_while_down:#?}"
    );
    probe_while_down.assert_no_panic();
    assert_eq!(live_while_down.status, 200, "the process is alive while NATS is down");
    assert_eq!(back.body, json!({ "status": "ready" }));
    probe_when_back.assert_success();
    projector.stop().await;
}

/// A projector whose database is a port where nothing listens.
async fn projector_without_postgresql(nats: &TestNats) -> ProjectorProcess {
    ProjectorProcess::on(&nats.url, &format!("postgres://postgres@127.0.0.1:{}/lectern", free_port())).start().await
}

#[tokio::test]
async fn the_projector_is_not_ready_while_postgresql_is_unreachable() {
    let nats = TestNats::start().await;
    let projector = projector_without_postgresql(&nats).await;

    let reply = projector.wait_for_readiness(503).await;
    let probe = healthcheck(&projector.operations_url("/readyz")).await;

    assert_eq!(reply.body["status"], "not ready", "{}", reply.text);
    assert!(probe.code.is_some_and(|code| code != 0), "healthcheck passed while not ready: {probe:#?}");
    probe.assert_no_panic();
    projector.stop().await;
}

#[tokio::test]
async fn the_projectors_readiness_names_postgresql_as_the_problem_when_it_is_unreachable() {
    let nats = TestNats::start().await;
    let projector = projector_without_postgresql(&nats).await;

    let reply = projector.wait_for_readiness(503).await;

    let problems = reply.body["problems"].to_string();
    assert!(problems.contains("PostgreSQL"), "an operator must learn which dependency is down: {problems}");
    projector.stop().await;
}

/// Rule: a projector started before `lectern-api migrate` is not ready and says to run it;
/// PostgreSQL answers, so it is not called unreachable.
#[tokio::test]
async fn a_projector_started_before_migrate_says_to_migrate_not_that_postgresql_is_unreachable() {
    let nats = TestNats::start().await;
    let admin = lectern_tests::database::admin_url();
    let mut connection = sqlx::PgConnection::connect(&admin).await.expect("connect to the test PostgreSQL server");
    let name = format!("lectern_test_{}_{}", chrono::Utc::now().timestamp(), Uuid::new_v4().simple());
    connection.execute(format!(r#"create database "{name}""#).as_str()).await.expect("create an empty database");
    let options: sqlx::postgres::PgConnectOptions = admin.parse().expect("admin URL");
    let url = options.database(&name).to_url_lossy().to_string();
    let projector = ProjectorProcess::on(&nats.url, &url).start().await;

    let reply = projector.wait_for_readiness(503).await;

    let problems = reply.body["problems"].to_string();
    assert!(problems.contains("lectern-api migrate"), "readiness says what to do: {problems}");
    assert!(!problems.contains("unreachable"), "PostgreSQL answers: {problems}");
    projector.stop().await;
}

#[tokio::test]
async fn the_projector_healthcheck_fails_against_a_closed_port() {
    let url = format!("http://127.0.0.1:{}/readyz", free_port());

    let run = healthcheck(&url).await;

    run.assert_one_line_error(Some(1), &[&url]);
}

/// Rule: SIGTERM stops the projector within seconds even while NATS cannot be reached:
/// nothing can be acknowledged then, and what it held is redelivered once NATS is back. (It
/// waited for NATS for ever, found when a NATS server was stopped before its projectors.)
#[tokio::test]
async fn sigterm_stops_the_projector_within_seconds_while_nats_is_down() {
    let mut nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let projector = ProjectorProcess::on(&nats.url, &db.url).start().await;
    projector.wait_for_readiness(200).await;
    nats.stop();
    projector.wait_for_readiness(503).await;

    let asked = std::time::Instant::now();
    let ended = projector.stop().await;

    assert!(asked.elapsed() < Duration::from_secs(15), "it took {:?} to stop", asked.elapsed());
    assert!(ended.stderr.contains("projector stopped"), "{}", ended.stderr);
}

#[tokio::test]
async fn sigterm_stops_the_projector_with_exit_0_and_closes_its_operations_address() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let projector = ProjectorProcess::on(&nats.url, &db.url).start().await;
    projector.wait_for_readiness(200).await;
    let operations = projector.operations().to_owned();

    let ended = projector.stop().await;

    assert!(ended.stderr.contains("projector stopped"), "{}", ended.stderr);
    assert!(!ended.stderr.contains("panicked"), "{}", ended.stderr);
    assert!(tokio::net::TcpStream::connect(&operations).await.is_err(), "{operations} still accepts connections");
}
