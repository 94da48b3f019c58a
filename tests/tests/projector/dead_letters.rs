//! Messages that break the contract become dead letters (raw bytes, subject, stream
//! sequence, reason, time), are acknowledged, never block what follows, and can be
//! listed and retried with the real `lectern-projector` binary.

use std::cell::RefCell;
use std::time::Duration;

use chrono::{DateTime, Utc};
use lectern_tests::binaries::Run;
use lectern_tests::nats::TestNats;
use lectern_tests::process::Launch;
use lectern_tests::projector::{
    contact_event, contact_row, eventually, item_created, item_data, publish, publish_raw, RunningProjector,
};
use lectern_tests::TestDatabase;
use serde_json::{json, Value};
use sqlx::PgPool;
use uuid::Uuid;

/// How long the projector may take to apply or dead-letter what was published.
const CATCH_UP: Duration = Duration::from_secs(10);
/// How long one run of the binary may take before the test fails instead of hanging.
const PROCESS_TIMEOUT: Duration = Duration::from_secs(60);

/// One stored dead letter, as the table holds it.
#[derive(Debug, sqlx::FromRow)]
struct StoredDeadLetter {
    id: i64,
    subject: String,
    stream_sequence: i64,
    payload: Vec<u8>,
    reason: String,
    received_at: DateTime<Utc>,
}

async fn dead_letters(pool: &PgPool) -> Vec<StoredDeadLetter> {
    sqlx::query_as("select id, subject, stream_sequence, payload, reason, received_at from dead_letters order by id")
        .fetch_all(pool)
        .await
        .expect("read dead letters")
}

pub(crate) async fn dead_letter_count(pool: &PgPool) -> i64 {
    sqlx::query_scalar("select count(*) from dead_letters").fetch_one(pool).await.expect("count dead letters")
}

async fn record_count(pool: &PgPool) -> i64 {
    sqlx::query_scalar("select (select count(*) from contacts) + (select count(*) from items)")
        .fetch_one(pool)
        .await
        .expect("count records")
}

pub(crate) fn contact_subject(workspace: Uuid, id: Uuid) -> String {
    format!("changes.{workspace}.contacts.{id}")
}

/// Runs the real `lectern-projector` with nothing in its environment but `env`.
async fn projector_cli(args: &[&str], env: &[(&str, &str)]) -> Run {
    Launch::projector()
        .args(args)
        .env("RUST_LOG", "warn")
        .env("LECTERN_PROJECTOR_METRICS_LISTEN", "127.0.0.1:0")
        .envs(env)
        .run(PROCESS_TIMEOUT)
        .await
}

pub(crate) async fn dead_letters_cli(db: &TestDatabase, args: &[&str]) -> Run {
    let mut full = vec!["dead-letters"];
    full.extend_from_slice(args);
    projector_cli(&full, &[("DATABASE_URL", &db.url)]).await
}

/// Publishes `payload` on `subject` first, then two good contacts; asserts the bad
/// message is stored whole as a dead letter while both good ones are applied.
async fn assert_dead_lettered_while_later_events_apply(subject: &str, payload: &[u8], reason_mentions: &str) {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let projector = RunningProjector::start_consuming(&nats.url, db.pool.clone()).await;
    let client = nats.client().await;
    let workspace = Uuid::new_v4();
    let good = [Uuid::new_v4(), Uuid::new_v4()];
    let before = Utc::now();

    publish_raw(&client, subject, payload.to_vec()).await;
    for (index, id) in good.iter().enumerate() {
        publish(&client, &contact_event("created", workspace, *id, 1, &format!("Good {index}"))).await;
    }

    // Batches in flight commit in any order: the good events' batch may land before the
    // dead letter's, so wait for both.
    let settled = eventually(CATCH_UP, || async {
        let mut all = dead_letter_count(&db.pool).await > 0;
        for id in good {
            all &= contact_row(&db.pool, workspace, id).await.is_some();
        }
        all
    })
    .await;
    assert!(settled, "the bad message was not dead-lettered or the good events after it were not applied");
    let letters = dead_letters(&db.pool).await;
    assert_eq!(letters.len(), 1, "expected exactly one dead letter: {letters:#?}");
    let letter = &letters[0];
    assert_eq!(letter.subject, subject);
    assert_eq!(letter.stream_sequence, 1, "the bad message was the stream's first");
    assert_eq!(letter.payload, payload, "the raw bytes are kept exactly as sent");
    assert!(letter.reason.contains(reason_mentions), "reason {:?} does not mention {reason_mentions:?}", letter.reason);
    let skew = chrono::Duration::seconds(5);
    assert!(
        letter.received_at >= before - skew && letter.received_at <= Utc::now() + skew,
        "received_at {} is not the time it was received",
        letter.received_at
    );
    assert_eq!(record_count(&db.pool).await, 2, "the bad message wrote a record");
    projector.stop().await;
}

// ------------------------------------------------------------ kinds of bad messages

#[tokio::test]
async fn bad_json_is_dead_lettered_while_the_events_after_it_apply() {
    let subject = contact_subject(Uuid::new_v4(), Uuid::new_v4());

    assert_dead_lettered_while_later_events_apply(&subject, br#"{"eventId": "0f8e2c1a-"#, "not valid JSON").await;
}

#[tokio::test]
async fn invalid_utf8_is_dead_lettered_while_the_events_after_it_apply() {
    let (workspace, id) = (Uuid::new_v4(), Uuid::new_v4());
    let mut payload = contact_event("created", workspace, id, 1, "Acme").to_string().into_bytes();
    // A lone continuation byte and an overlong encoding inside the name.
    let at = payload.windows(4).position(|window| window == b"Acme").expect("name in payload");
    payload.splice(at..at, [0x80, 0xC0, 0xAF]);

    assert_dead_lettered_while_later_events_apply(&contact_subject(workspace, id), &payload, "UTF-8").await;
}

#[tokio::test]
async fn an_empty_name_is_a_schema_violation_and_is_dead_lettered() {
    let (workspace, id) = (Uuid::new_v4(), Uuid::new_v4());
    let payload = contact_event("created", workspace, id, 1, "").to_string().into_bytes();

    assert_dead_lettered_while_later_events_apply(&contact_subject(workspace, id), &payload, "schema violation").await;
}

/// An item.created whose sale price is `price`.
fn item_created_with_sale_price(workspace: Uuid, id: Uuid, price: Value) -> Vec<u8> {
    item_created(workspace, id, item_data("Screw", price, Value::Null)).to_string().into_bytes()
}

#[tokio::test]
async fn a_float_amount_is_a_schema_violation_and_is_dead_lettered() {
    let (workspace, id) = (Uuid::new_v4(), Uuid::new_v4());
    let payload = item_created_with_sale_price(workspace, id, json!({"amount": 12.5, "currency": "EUR"}));

    assert_dead_lettered_while_later_events_apply(
        &format!("changes.{workspace}.items.{id}"),
        &payload,
        "schema violation",
    )
    .await;
}

#[tokio::test]
async fn a_lower_case_currency_is_a_schema_violation_and_is_dead_lettered() {
    let (workspace, id) = (Uuid::new_v4(), Uuid::new_v4());
    let payload = item_created_with_sale_price(workspace, id, json!({"amount": "12.50", "currency": "eur"}));

    assert_dead_lettered_while_later_events_apply(&format!("changes.{workspace}.items.{id}"), &payload, "currency")
        .await;
}

#[tokio::test]
async fn an_unknown_type_is_dead_lettered_while_the_events_after_it_apply() {
    let (workspace, id) = (Uuid::new_v4(), Uuid::new_v4());
    let mut event = contact_event("created", workspace, id, 1, "Acme");
    event["type"] = json!("contact.merged");
    let payload = event.to_string().into_bytes();

    assert_dead_lettered_while_later_events_apply(&contact_subject(workspace, id), &payload, "unknown event type")
        .await;
}

#[tokio::test]
async fn an_event_on_another_workspaces_subject_is_dead_lettered_and_applied_to_neither() {
    let (workspace_a, workspace_b, id) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    let payload = contact_event("created", workspace_a, id, 1, "Smuggled").to_string().into_bytes();

    // The helper also asserts that only its two good records exist, so neither
    // workspace A nor workspace B got this contact.
    assert_dead_lettered_while_later_events_apply(&contact_subject(workspace_b, id), &payload, "does not match").await;
}

#[tokio::test]
async fn an_event_with_upper_case_ids_on_the_subject_it_names_is_applied_not_dead_lettered() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let projector = RunningProjector::start_consuming(&nats.url, db.pool.clone()).await;
    let client = nats.client().await;
    let (workspace, id) = (Uuid::new_v4(), Uuid::new_v4());
    let (workspace_text, id_text) = (workspace.to_string().to_uppercase(), id.to_string().to_uppercase());
    let mut event = contact_event("created", workspace, id, 1, "Upper case ids");
    // The schema's UUID pattern allows upper-case hex; the subject carries the same text.
    event["workspaceId"] = json!(workspace_text);
    event["entityId"] = json!(id_text);

    publish_raw(&client, &format!("changes.{workspace_text}.contacts.{id_text}"), event.to_string().into_bytes()).await;

    let settled = eventually(CATCH_UP, || async {
        contact_row(&db.pool, workspace, id).await.is_some() || dead_letter_count(&db.pool).await > 0
    })
    .await;
    assert!(settled, "the event was neither applied nor dead-lettered");
    assert_eq!(
        dead_letters(&db.pool).await.iter().map(|letter| letter.reason.as_str()).collect::<Vec<_>>(),
        Vec::<&str>::new()
    );
    assert_eq!(
        contact_row(&db.pool, workspace, id).await,
        Some(("active".to_owned(), 1, Some("Upper case ids".to_owned())))
    );
    projector.stop().await;
}

#[tokio::test]
async fn an_event_the_database_refuses_is_dead_lettered_while_the_rest_of_its_batch_applies() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let client = nats.client().await;
    let workspace = Uuid::new_v4();
    let (before, refused, after) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    // Valid by the schema, but PostgreSQL text cannot hold a NUL character.
    let refused_payload = contact_event("created", workspace, refused, 1, "Nul\u{0}byte").to_string().into_bytes();
    publish(&client, &contact_event("created", workspace, before, 1, "Before")).await;
    publish_raw(&client, &contact_subject(workspace, refused), refused_payload.clone()).await;
    publish(&client, &contact_event("created", workspace, after, 1, "After")).await;

    // Started after publishing, so the three arrive in one batch.
    let projector = RunningProjector::start_consuming(&nats.url, db.pool.clone()).await;

    let applied = eventually(CATCH_UP, || async {
        contact_row(&db.pool, workspace, before).await.is_some()
            && contact_row(&db.pool, workspace, after).await.is_some()
    })
    .await;
    assert!(applied, "the good events of the batch were not applied");
    let letters = dead_letters(&db.pool).await;
    assert_eq!(letters.len(), 1, "{letters:#?}");
    assert_eq!(letters[0].stream_sequence, 2);
    assert_eq!(letters[0].payload, refused_payload);
    assert!(letters[0].reason.contains("database"), "{}", letters[0].reason);
    assert_eq!(contact_row(&db.pool, workspace, refused).await, None);
    projector.stop().await;
}

// ------------------------------------------------------------------ acknowledged

#[tokio::test]
async fn a_dead_letter_is_acknowledged_so_nothing_stays_pending() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let projector = RunningProjector::start_consuming(&nats.url, db.pool.clone()).await;
    let client = nats.client().await;

    publish_raw(&client, &contact_subject(Uuid::new_v4(), Uuid::new_v4()), b"not json at all".to_vec()).await;

    assert!(eventually(CATCH_UP, || async { dead_letter_count(&db.pool).await == 1 }).await, "no dead letter");
    let env = [("NATS_URL", nats.url.as_str()), ("DATABASE_URL", db.url.as_str())];
    let last_status = RefCell::new(Value::Null);
    let settled = eventually(CATCH_UP, || async {
        let run = projector_cli(&["status", "--output", "json"], &env).await;
        run.assert_success();
        let status = run.json();
        let settled = status["pending"] == 0 && status["unacknowledged"] == 0 && status["ackFloor"] == 1;
        *last_status.borrow_mut() = status;
        settled
    })
    .await;
    let last_status = last_status.into_inner();
    assert!(settled, "the dead letter was never acknowledged: {last_status}");
    assert_eq!(last_status["lastSequence"], 1, "{last_status}");
    assert_eq!(last_status["deadLetters"], 1, "{last_status}");
    projector.stop().await;
}

// ------------------------------------------------------------------------ list

#[tokio::test]
async fn dead_letters_list_json_prints_an_array_with_id_subject_reason_and_received_at_of_each() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let projector = RunningProjector::start_consuming(&nats.url, db.pool.clone()).await;
    let client = nats.client().await;
    let subjects = [contact_subject(Uuid::new_v4(), Uuid::new_v4()), contact_subject(Uuid::new_v4(), Uuid::new_v4())];
    publish_raw(&client, &subjects[0], b"{".to_vec()).await;
    publish_raw(&client, &subjects[1], vec![0xFF, 0xFE]).await;
    assert!(eventually(CATCH_UP, || async { dead_letter_count(&db.pool).await == 2 }).await, "no dead letters");

    let run = dead_letters_cli(&db, &["list", "--output", "json"]).await;

    run.assert_success();
    let listed = run.json();
    let listed = listed.as_array().unwrap_or_else(|| panic!("not a JSON array: {}", run.stdout));
    let stored = dead_letters(&db.pool).await;
    assert_eq!(listed.len(), stored.len(), "{}", run.stdout);
    for (letter, row) in listed.iter().zip(&stored) {
        assert_eq!(letter["id"], row.id, "{letter}");
        assert_eq!(letter["subject"], row.subject.as_str(), "{letter}");
        assert_eq!(letter["reason"], row.reason.as_str(), "{letter}");
        let received_at = letter["receivedAt"].as_str().unwrap_or_else(|| panic!("no receivedAt in {letter}"));
        let received_at =
            DateTime::parse_from_rfc3339(received_at).unwrap_or_else(|error| panic!("{received_at}: {error}"));
        assert_eq!(received_at, row.received_at, "{letter}");
    }
    let mut listed_subjects: Vec<&str> = listed.iter().filter_map(|letter| letter["subject"].as_str()).collect();
    listed_subjects.sort_unstable();
    let mut expected: Vec<&str> = subjects.iter().map(String::as_str).collect();
    expected.sort_unstable();
    assert_eq!(listed_subjects, expected);
    projector.stop().await;
}

// ----------------------------------------------------------------------- retry

/// Stores a dead letter by SQL, as an older projector version might have; returns its id.
async fn insert_dead_letter(pool: &PgPool, subject: &str, sequence: i64, payload: &[u8]) -> i64 {
    sqlx::query_scalar(
        "insert into dead_letters (subject, stream_sequence, payload, reason)
         values ($1, $2, $3, 'refused by an older projector') returning id",
    )
    .bind(subject)
    .bind(sequence)
    .bind(payload)
    .fetch_one(pool)
    .await
    .expect("insert dead letter")
}

async fn dead_letter_exists(pool: &PgPool, id: i64) -> bool {
    sqlx::query_scalar("select exists (select 1 from dead_letters where id = $1)")
        .bind(id)
        .fetch_one(pool)
        .await
        .expect("look up dead letter")
}

/// Publishes a message that will always break the contract; returns its dead letter's id.
async fn still_broken_dead_letter(client: &async_nats::Client, pool: &PgPool) -> i64 {
    let (workspace, id) = (Uuid::new_v4(), Uuid::new_v4());
    let payload = contact_event("created", workspace, id, 1, "").to_string().into_bytes();
    publish_raw(client, &contact_subject(workspace, id), payload).await;
    assert!(eventually(CATCH_UP, || async { dead_letter_count(pool).await >= 1 }).await, "no dead letter");
    dead_letters(pool).await.last().map(|letter| letter.id).expect("a dead letter")
}

#[tokio::test]
async fn retry_keeps_a_dead_letter_that_still_breaks_the_contract_and_exits_1() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let projector = RunningProjector::start_consuming(&nats.url, db.pool.clone()).await;
    let id = still_broken_dead_letter(&nats.client().await, &db.pool).await;

    let run = dead_letters_cli(&db, &["retry", &id.to_string()]).await;

    assert_eq!(run.code, Some(1), "a retry that leaves a letter failing must not exit 0: {run:#?}");
    assert!(run.stderr.contains("still break the contract"), "{run:#?}");
    assert!(run.stdout.contains(&format!("{id} still fails")), "{run:#?}");
    assert!(run.stdout.contains("0 applied"), "{run:#?}");
    assert!(dead_letter_exists(&db.pool, id).await, "a still-broken dead letter left the table");
    assert_eq!(record_count(&db.pool).await, 0);
    projector.stop().await;
}

#[tokio::test]
async fn retry_applies_a_dead_letter_that_now_validates_and_removes_it() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let projector = RunningProjector::start_consuming(&nats.url, db.pool.clone()).await;
    let (workspace, contact) = (Uuid::new_v4(), Uuid::new_v4());
    let payload = contact_event("created", workspace, contact, 2, "Fixed").to_string().into_bytes();
    let id = insert_dead_letter(&db.pool, &contact_subject(workspace, contact), 1_000_000, &payload).await;

    let run = dead_letters_cli(&db, &["retry", &id.to_string()]).await;

    run.assert_success();
    assert!(run.stdout.contains("1 applied"), "{run:#?}");
    assert_eq!(
        contact_row(&db.pool, workspace, contact).await,
        Some(("active".to_owned(), 2, Some("Fixed".to_owned())))
    );
    assert!(!dead_letter_exists(&db.pool, id).await, "the applied dead letter is still in the table");
    projector.stop().await;
}

#[tokio::test]
async fn retry_all_applies_the_fixed_dead_letters_and_keeps_the_broken_ones() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let projector = RunningProjector::start_consuming(&nats.url, db.pool.clone()).await;
    let broken = still_broken_dead_letter(&nats.client().await, &db.pool).await;
    let workspace = Uuid::new_v4();
    let mut fixed = Vec::new();
    for (sequence, name) in [(1_000_000, "First fixed"), (1_000_001, "Second fixed")] {
        let contact = Uuid::new_v4();
        let payload = contact_event("created", workspace, contact, 1, name).to_string().into_bytes();
        let id = insert_dead_letter(&db.pool, &contact_subject(workspace, contact), sequence, &payload).await;
        fixed.push((id, contact, name));
    }

    let run = dead_letters_cli(&db, &["retry", "--all"]).await;

    assert_eq!(run.code, Some(1), "one letter still fails: {run:#?}");
    assert!(run.stdout.contains("2 applied"), "{run:#?}");
    assert!(run.stdout.contains(&format!("{broken} still fails")), "{run:#?}");
    for (id, contact, name) in fixed {
        assert_eq!(
            contact_row(&db.pool, workspace, contact).await,
            Some(("active".to_owned(), 1, Some(name.to_owned())))
        );
        assert!(!dead_letter_exists(&db.pool, id).await, "applied dead letter {id} is still in the table");
    }
    assert!(dead_letter_exists(&db.pool, broken).await, "the still-broken dead letter left the table");
    projector.stop().await;
}

#[tokio::test]
async fn retry_of_an_unknown_id_exits_non_zero_and_says_so() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let projector = RunningProjector::start_consuming(&nats.url, db.pool.clone()).await;
    let known = still_broken_dead_letter(&nats.client().await, &db.pool).await;
    let unknown = (known + 1000).to_string();

    let run = dead_letters_cli(&db, &["retry", &unknown]).await;

    assert!(run.code.is_some_and(|code| code != 0), "expected a failure exit: {run:#?}");
    assert!(!run.stderr.contains("panicked"), "the binary panicked: {}", run.stderr);
    assert!(run.stderr.contains(&unknown), "the error does not name the id: {}", run.stderr);
    assert!(dead_letter_exists(&db.pool, known).await, "retrying an unknown id touched another dead letter");
    projector.stop().await;
}

// --------------------------------------------------------------------- discard

/// Rule: `discard <id>` removes that letter, applies nothing and leaves the others.
#[tokio::test]
async fn discard_removes_the_one_letter_named_without_applying_it() {
    let db = TestDatabase::create().await;
    let (workspace, contact) = (Uuid::new_v4(), Uuid::new_v4());
    let payload = contact_event("created", workspace, contact, 1, "Would pass").to_string().into_bytes();
    let discarded = insert_dead_letter(&db.pool, &contact_subject(workspace, contact), 1, &payload).await;
    let other = insert_dead_letter(&db.pool, &contact_subject(workspace, Uuid::new_v4()), 2, b"{").await;

    let run = dead_letters_cli(&db, &["discard", &discarded.to_string()]).await;

    run.assert_success();
    assert!(run.stdout.contains(&format!("dead letter {discarded} discarded")), "{run:#?}");
    assert!(!dead_letter_exists(&db.pool, discarded).await, "the letter is still stored");
    assert!(dead_letter_exists(&db.pool, other).await, "another letter went too");
    assert_eq!(record_count(&db.pool).await, 0, "a discarded letter is not applied");
}

/// Rule: `discard` of an id no letter has exits 1 naming the id.
#[tokio::test]
async fn discard_of_an_unknown_id_exits_1_and_names_it() {
    let db = TestDatabase::create().await;
    let known = insert_dead_letter(&db.pool, &contact_subject(Uuid::new_v4(), Uuid::new_v4()), 1, b"{").await;
    let unknown = (known + 1000).to_string();

    let run = dead_letters_cli(&db, &["discard", &unknown]).await;

    run.assert_one_line_error(Some(1), &[&unknown]);
    assert!(dead_letter_exists(&db.pool, known).await);
}

/// Rule: `discard --superseded` removes exactly the letters whose record the read model
/// holds at their version or later, and keeps a letter of a newer version, one whose
/// record it lacks and one that does not say its version.
#[tokio::test]
async fn discard_superseded_removes_the_letters_a_newer_version_of_their_record_replaced_and_keeps_the_rest() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let projector = RunningProjector::start_consuming(&nats.url, db.pool.clone()).await;
    let (workspace, contact) = (Uuid::new_v4(), Uuid::new_v4());
    publish(&nats.client().await, &contact_event("created", workspace, contact, 2, "Corrected")).await;
    assert!(eventually(CATCH_UP, || async { contact_row(&db.pool, workspace, contact).await.is_some() }).await);
    let subject = contact_subject(workspace, contact);
    let broken = |version| contact_event("updated", workspace, contact, version, "").to_string().into_bytes();
    let same_version = insert_dead_letter(&db.pool, &subject, 1_000_000, &broken(2)).await;
    let older = insert_dead_letter(&db.pool, &subject, 1_000_001, &broken(1)).await;
    let newer = insert_dead_letter(&db.pool, &subject, 1_000_002, &broken(3)).await;
    let no_version = insert_dead_letter(&db.pool, &subject, 1_000_003, b"not json").await;
    let other_record = contact_subject(workspace, Uuid::new_v4());
    let no_record = insert_dead_letter(&db.pool, &other_record, 1_000_004, &broken(1)).await;

    let run = dead_letters_cli(&db, &["discard", "--superseded"]).await;

    run.assert_success();
    assert!(run.stdout.starts_with("2 superseded dead letter(s) discarded"), "{run:#?}");
    assert!(run.stdout.contains("3 kept"), "{run:#?}");
    for (id, kept) in [(same_version, false), (older, false), (newer, true), (no_version, true), (no_record, true)] {
        assert_eq!(dead_letter_exists(&db.pool, id).await, kept, "letter {id}: {run:#?}");
    }
    projector.stop().await;
}
