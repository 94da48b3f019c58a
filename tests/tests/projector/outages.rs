//! What the projector tells operators during an outage: one log line when PostgreSQL is
//! lost and one when it is back, however many retries lie between; and `status`, which
//! shows what the dependency still up holds and names the one that is down.

use std::time::Duration;

use lectern_tests::nats::{free_port, TestNats};
use lectern_tests::postgres::TestPostgres;
use lectern_tests::projector::{contact_event, eventually, publish, ProjectorProcess};
use lectern_tests::TestDatabase;
use serde_json::Value;
use sqlx::{Connection, Executor, PgConnection};
use uuid::Uuid;

use crate::process::run_command;

/// How long the binary may take to start, notice an outage or recover.
const WITHIN: Duration = Duration::from_secs(60);

const POSTGRES_LOST: &str = "lost PostgreSQL; retrying (nothing is applied or acknowledged meanwhile)";
const POSTGRES_BACK: &str = "PostgreSQL answers again";
const BATCH_RETRIED: &str = "applying a batch failed; retrying, nothing acknowledged";

/// Rule: a PostgreSQL outage is logged once when a batch first fails to reach it, naming
/// the real cause (the refused connection, not the pool's timeout), and once when it works
/// again, not once per retry.
#[tokio::test]
async fn a_postgresql_outage_is_logged_once_when_lost_and_once_when_back_not_per_retry() {
    let nats = TestNats::start().await;
    let mut server = TestPostgres::start_new().await;
    lectern_api::reads::create_and_migrate(&server.url()).await.expect("migrate");
    // The tests' servers commit without waiting for the WAL: a checkpoint keeps the schema
    // through the immediate stop below.
    let mut admin = PgConnection::connect(&server.url()).await.expect("connect to the private server");
    admin.execute("checkpoint").await.expect("checkpoint");
    drop(admin);
    let projector = ProjectorProcess::on(&nats.url, &server.url()).start().await;
    projector.wait_for_readiness(200).await;
    let client = nats.client().await;

    server.stop().await;
    publish(&client, &contact_event("created", Uuid::new_v4(), Uuid::new_v4(), 1, "Acme")).await;
    let retried = eventually(WITHIN, || async { projector.service.logged(BATCH_RETRIED) >= 3 }).await;
    let lost_while_down = projector.service.logged(POSTGRES_LOST);
    let lost_because = projector
        .service
        .log_records()
        .into_iter()
        .find(|record| record["fields"]["message"] == POSTGRES_LOST)
        .map(|record| record["fields"]["error"].to_string())
        .unwrap_or_default();
    server.start().await;
    let back = eventually(WITHIN, || async { projector.service.logged(POSTGRES_BACK) == 1 }).await;

    assert!(retried, "the batch was retried at least 3 times:\n{}", projector.service.stderr());
    assert_eq!(lost_while_down, 1, "one line for the loss:\n{}", projector.service.stderr());
    assert!(lost_because.contains("Connection refused"), "the real cause, not the pool's timeout: {lost_because}");
    assert!(back, "one line when back:\n{}", projector.service.stderr());
    assert_eq!(projector.service.logged(POSTGRES_LOST), 1, "{}", projector.service.stderr());
    projector.stop().await;
}

/// `status --output json` run to its end, with its exit code and document.
async fn status(nats_url: &str, database_url: &str) -> (Option<i32>, Value, String) {
    let run = run_command(nats_url, database_url, &["status", "--output", "json"], &[], None).await;
    let document = serde_json::from_str(run.stdout.trim())
        .unwrap_or_else(|error| panic!("status printed no JSON ({error}): {}\n{}", run.stdout, run.stderr));
    (run.code, document, run.stderr)
}

/// Rule: with NATS down, `status` still shows what PostgreSQL holds, names NATS and its
/// cause, and exits 1.
#[tokio::test]
async fn status_with_nats_down_shows_the_databases_part_names_nats_and_exits_1() {
    let mut nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    nats.stop();

    let (code, status, stderr) = status(&nats.url, &db.url).await;
    let text = run_command(&nats.url, &db.url, &["status"], &[], None).await;

    assert_eq!(code, Some(1), "{status}\n{stderr}");
    assert_eq!(status["deadLetters"], 0, "{status}");
    assert_eq!(status["lastSequence"], Value::Null, "{status}");
    let why = status["unavailable"]["NATS"].as_str().unwrap_or_default();
    assert!(why.contains(&nats.url), "the cause names the server: {status}");
    assert!(stderr.contains("NATS"), "{stderr}");
    assert!(text.stdout.contains("dead letters 0"), "{}", text.stdout);
    assert!(text.stdout.contains("NATS unavailable, not shown: "), "{}", text.stdout);
}

/// Rule: with PostgreSQL unreachable, `status` still shows the stream and the consumer,
/// names PostgreSQL and its cause, and exits 1.
#[tokio::test]
async fn status_with_postgresql_down_shows_the_streams_part_names_postgresql_and_exits_1() {
    let nats = TestNats::start().await;
    let client = nats.client().await;
    publish(&client, &contact_event("created", Uuid::new_v4(), Uuid::new_v4(), 1, "Acme")).await;
    let nowhere = format!("postgres://postgres@127.0.0.1:{}/lectern", free_port());

    let (code, status, stderr) = status(&nats.url, &nowhere).await;

    assert_eq!(code, Some(1), "{status}\n{stderr}");
    assert_eq!((&status["lastSequence"], &status["pending"]), (&Value::from(1), &Value::from(1)), "{status}");
    assert_eq!(status["deadLetters"], Value::Null, "{status}");
    // What PostgreSQL's address did (refused the connection), not the pool's "timed out".
    let why = status["unavailable"]["PostgreSQL"].as_str().unwrap_or_default();
    assert!(why.contains("refused") && !why.contains("pool timed out"), "{status}");
    assert!(stderr.contains("PostgreSQL"), "{stderr}");
}
