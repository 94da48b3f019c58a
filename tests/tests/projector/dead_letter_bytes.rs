//! A message that breaks the contract ends as a dead letter whatever bytes its subject,
//! payload or reason hold, PostgreSQL's `text` notwithstanding, so it never holds up the
//! events pulled with it; `dead-letters list` and `retry` work from what is stored,
//! exactly as it came. The one exception, a subject that is not UTF-8, never reaches the
//! projector (async-nats cannot read it), but does not stop what follows either.

use std::time::Duration;

use lectern_projector::daemon::consumer::RunSettings;
use lectern_tests::nats::TestNats;
use lectern_tests::projector::{
    contact_event, contact_row, eventually, item_created, item_data, publish, publish_raw, RunningProjector,
};
use lectern_tests::TestDatabase;
use serde_json::Value;
use sqlx::PgPool;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use uuid::Uuid;

use crate::dead_letters::{contact_subject, dead_letter_count, dead_letters_cli};

/// How long the projector may take to apply or dead-letter what was published.
const CATCH_UP: Duration = Duration::from_secs(20);

/// A dead letter's stored columns.
#[derive(Debug, sqlx::FromRow)]
struct Stored {
    subject: String,
    subject_bytes: Option<Vec<u8>>,
    payload: Vec<u8>,
    reason: String,
}

async fn stored(pool: &PgPool) -> Vec<Stored> {
    sqlx::query_as("select subject, subject_bytes, payload, reason from dead_letters order by id")
        .fetch_all(pool)
        .await
        .expect("read dead letters")
}

/// Publishes, on its own subject, an `item.created` whose `data.type` is a NUL: serde
/// quotes it, NUL and all, into the reason it gives. Returns the payload.
async fn publish_an_item_with_a_nul_type(client: &async_nats::Client) -> Vec<u8> {
    let (workspace, id) = (Uuid::new_v4(), Uuid::new_v4());
    let mut event = item_created(workspace, id, item_data("Screw", Value::Null, Value::Null));
    event["data"]["type"] = Value::String("\u{0}".to_owned());
    let payload = event.to_string().into_bytes();
    publish_raw(client, &format!("changes.{workspace}.items.{id}"), payload.clone()).await;
    payload
}

/// A valid contact event published on its own subject with `tail` appended to the
/// subject: a contract violation whose subject holds whatever `tail` holds.
async fn publish_on_a_subject_ending_in(client: &async_nats::Client, tail: &str) -> (String, Vec<u8>) {
    let (workspace, id) = (Uuid::new_v4(), Uuid::new_v4());
    let subject = format!("{}{tail}", contact_subject(workspace, id));
    let payload = contact_event("created", workspace, id, 1, "Acme").to_string().into_bytes();
    publish_raw(client, &subject, payload.clone()).await;
    (subject, payload)
}

/// Waits until `letters` dead letters are stored and every contact of `good` is applied.
async fn settle(pool: &PgPool, letters: i64, good: &[(Uuid, Uuid)]) -> bool {
    eventually(CATCH_UP, || async {
        let mut all = dead_letter_count(pool).await == letters;
        for (workspace, id) in good {
            all &= contact_row(pool, *workspace, *id).await.is_some();
        }
        all
    })
    .await
}

/// Publishes a good contact of a workspace of its own; returns (workspace, id).
async fn publish_good(client: &async_nats::Client, name: &str) -> (Uuid, Uuid) {
    let (workspace, id) = (Uuid::new_v4(), Uuid::new_v4());
    publish(client, &contact_event("created", workspace, id, 1, name)).await;
    (workspace, id)
}

#[tokio::test]
async fn a_reason_quoting_a_nul_is_stored_escaped_and_the_other_workspaces_events_of_its_batch_apply() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let client = nats.client().await;
    let before = publish_good(&client, "Before").await;
    let bad_payload = publish_an_item_with_a_nul_type(&client).await;
    let after = publish_good(&client, "After").await;

    // Started after publishing, so the three arrive in one batch.
    let projector = RunningProjector::start_consuming(&nats.url, db.pool.clone()).await;

    assert!(settle(&db.pool, 1, &[before, after]).await, "the batch never committed: {:#?}", stored(&db.pool).await);
    let letters = stored(&db.pool).await;
    assert_eq!(letters[0].payload, bad_payload, "the payload is kept exactly");
    assert!(letters[0].reason.contains("\\u{0}"), "the reason's NUL is escaped: {:?}", letters[0].reason);
    assert_eq!(letters[0].subject_bytes, None, "an ordinary subject is exact in `subject`");
    projector.stop().await;
}

#[tokio::test]
async fn four_bad_messages_in_as_many_batches_at_once_leave_room_for_the_events_after_them() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let client = nats.client().await;
    for _ in 0..4 {
        publish_an_item_with_a_nul_type(&client).await;
    }
    let good = publish_good(&client, "After four bad ones").await;

    // One message per batch, four batches at once: each bad message has a batch slot.
    let settings = RunSettings { batch_size: 1, concurrent_batches: 4, ..RunSettings::default() };
    let projector = RunningProjector::start_consuming_with(&nats.url, db.pool.clone(), settings).await;

    assert!(settle(&db.pool, 4, &[good]).await, "dead letters {:#?}", stored(&db.pool).await);
    projector.stop().await;
}

#[tokio::test]
async fn a_message_on_a_subject_holding_a_nul_is_stored_with_its_exact_subject() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let client = nats.client().await;
    // NATS takes the NUL: the client checks subjects for whitespace only, and the server
    // stores the message like any other.
    let (subject, payload) = publish_on_a_subject_ending_in(&client, "\u{0}x").await;
    let good = publish_good(&client, "After").await;

    let projector = RunningProjector::start_consuming(&nats.url, db.pool.clone()).await;

    assert!(settle(&db.pool, 1, &[good]).await, "the batch never committed: {:#?}", stored(&db.pool).await);
    let letters = stored(&db.pool).await;
    assert_eq!(letters[0].subject_bytes.as_deref(), Some(subject.as_bytes()), "the exact subject is kept");
    assert_eq!(letters[0].subject, subject.replace('\u{0}', "\\u{0}"), "`subject` holds it escaped for reading");
    assert_eq!(letters[0].payload, payload);
    projector.stop().await;
}

#[tokio::test]
async fn dead_letters_list_shows_a_subject_holding_a_nul_exactly_in_json_and_escaped_in_text() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let client = nats.client().await;
    let (subject, _) = publish_on_a_subject_ending_in(&client, "\u{0}\u{1b}[2J").await;
    let projector = RunningProjector::start_consuming(&nats.url, db.pool.clone()).await;
    assert!(settle(&db.pool, 1, &[]).await, "no dead letter");

    let json = dead_letters_cli(&db, &["list", "--output", "json"]).await;
    let text = dead_letters_cli(&db, &["list"]).await;

    json.assert_success();
    assert_eq!(json.json()[0]["subject"], subject.as_str(), "{}", json.stdout);
    text.assert_success();
    assert!(text.stdout.contains(&subject.replace('\u{0}', "\\u{0}").replace('\u{1b}', "\\u{1b}")), "{}", text.stdout);
    assert!(!text.stdout.contains(['\u{0}', '\u{1b}']), "control characters reach the terminal: {:?}", text.stdout);
    projector.stop().await;
}

#[tokio::test]
async fn retry_of_a_dead_letter_whose_reason_quotes_a_nul_keeps_it_and_says_why() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let client = nats.client().await;
    publish_an_item_with_a_nul_type(&client).await;
    let projector = RunningProjector::start_consuming(&nats.url, db.pool.clone()).await;
    assert!(settle(&db.pool, 1, &[]).await, "no dead letter");
    sqlx::query("update dead_letters set reason = 'refused by an older projector'")
        .execute(&db.pool)
        .await
        .expect("forget the reason");

    let run = dead_letters_cli(&db, &["retry", "--all"]).await;

    assert_eq!(run.code, Some(1), "the letter still fails, so the retry does too: {run:#?}");
    assert!(run.stdout.contains("0 applied") && run.stdout.contains("still fails"), "{run:#?}");
    let letters = stored(&db.pool).await;
    assert_eq!(letters.len(), 1, "the dead letter stays");
    assert!(letters[0].reason.contains("\\u{0}"), "the new reason is stored, escaped: {:?}", letters[0].reason);
    projector.stop().await;
}

#[tokio::test]
async fn a_dead_letter_the_databases_encoding_cannot_hold_is_stored_in_ascii_beside_its_exact_subject() {
    let nats = TestNats::start().await;
    // LATIN1 has no emoji: neither the subject nor the reason quoting it fits in `text`.
    let db = TestDatabase::create_with_encoding("LATIN1").await;
    let client = nats.client().await;
    let (subject, payload) = publish_on_a_subject_ending_in(&client, "\u{1f600}").await;
    let good = publish_good(&client, "After").await;

    let projector = RunningProjector::start_consuming(&nats.url, db.pool.clone()).await;

    assert!(settle(&db.pool, 1, &[good]).await, "the batch never committed: {:#?}", stored(&db.pool).await);
    let letters = stored(&db.pool).await;
    assert_eq!(letters[0].subject, subject.replace('\u{1f600}', "\\u{1f600}"), "`subject` is printable ASCII");
    assert_eq!(letters[0].subject_bytes.as_deref(), Some(subject.as_bytes()), "the exact subject is kept");
    assert_eq!(letters[0].payload, payload);
    assert!(letters[0].reason.contains("escaped to ASCII"), "the reason says why: {}", letters[0].reason);
    let listed = dead_letters_cli(&db, &["list", "--output", "json"]).await;
    listed.assert_success();
    assert_eq!(listed.json()[0]["subject"], subject.as_str(), "listed exactly as it came: {}", listed.stdout);
    projector.stop().await;
}

/// Publishes `payload` on `subject` over the bare protocol: NATS stores a subject that is
/// not UTF-8, which no Rust client can send.
async fn publish_bytes(nats: &TestNats, subject: &[u8], payload: &[u8]) {
    let mut connection = tokio::net::TcpStream::connect(("127.0.0.1", nats.port)).await.expect("connect to NATS");
    let mut reader = BufReader::new(&mut connection);
    let mut info = String::new();
    reader.read_line(&mut info).await.expect("the server's INFO");
    let mut publish = b"CONNECT {\"verbose\":false,\"pedantic\":false}\r\nPUB ".to_vec();
    publish.extend_from_slice(subject);
    publish.extend_from_slice(format!(" {}\r\n", payload.len()).as_bytes());
    publish.extend_from_slice(payload);
    publish.extend_from_slice(b"\r\nPING\r\n");
    connection.write_all(&publish).await.expect("publish");
    let mut pong = String::new();
    BufReader::new(&mut connection).read_line(&mut pong).await.expect("the server's answer");
    assert_eq!(pong.trim(), "PONG", "the server refused the publish");
}

/// Such a message never becomes a dead letter: async-nats drops its connection on
/// reading it, so it cannot reach the projector. It must not stop what follows, though.
#[tokio::test]
async fn a_message_whose_subject_is_not_utf8_does_not_stop_the_events_after_it() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let client = nats.client().await;
    let projector = RunningProjector::start_consuming(&nats.url, db.pool.clone()).await;

    let mut subject = format!("changes.{}.contacts.", Uuid::new_v4()).into_bytes();
    subject.extend_from_slice(&[0xFF, 0xFE]);
    publish_bytes(&nats, &subject, b"{}").await;
    let good = publish_good(&client, "After").await;

    assert!(settle(&db.pool, 0, &[good]).await, "the event after a subject that is not UTF-8 was never applied");
    projector.stop().await;
}
