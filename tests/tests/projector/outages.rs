//! What the projector tells operators during an outage: `status` shows what the
//! dependency still up holds and names the one that is down.

use lectern_tests::nats::{free_port, TestNats};
use lectern_tests::projector::{contact_event, publish};
use lectern_tests::TestDatabase;
use serde_json::Value;
use uuid::Uuid;

use crate::process::run_command;

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
    assert!(status["unavailable"]["PostgreSQL"].as_str().is_some_and(|why| !why.is_empty()), "{status}");
    assert!(stderr.contains("PostgreSQL"), "{stderr}");
}
