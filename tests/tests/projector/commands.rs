//! The `lectern-projector` commands as an operator runs them: `status`, `publish`, the
//! set-up `run` does on JetStream, and `run`'s settings. Each test has its own
//! nats-server and database.

use std::time::Duration;

use async_nats::jetstream;
use lectern_tests::nats::{free_port, TestNats};
use lectern_tests::projector::{contact_event, contact_row, eventually, publish_raw, ProjectorProcess};
use lectern_tests::TestDatabase;
use serde_json::Value;
use uuid::Uuid;

use crate::process::{changes, number, publish_all, run_command, status, subject_of};

/// The example every upstream team starts from (schema/events/examples).
const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../schema/events/examples/contact.created.json");
const EXAMPLE_SUBJECT: &str =
    "changes.6d1f0b7e-3c55-4a3b-8f9f-5d1f0e2a7c11.contacts.b3c6a1d2-2f0e-4c1b-9a9e-7e3d5c2b1a00";
const WITHIN: Duration = Duration::from_secs(30);

/// The stream's subjects in sequence order, or none if the stream does not exist.
async fn stored_subjects(nats: &TestNats) -> Vec<String> {
    let jetstream = jetstream::new(nats.client().await);
    let Ok(stream) = jetstream.get_stream("CHANGES").await else { return Vec::new() };
    let last = stream.cached_info().state.last_sequence;
    let mut subjects = Vec::new();
    for sequence in 1..=last {
        let message = stream.get_raw_message(sequence).await.expect("a stored message");
        subjects.push(message.subject.to_string());
    }
    subjects
}

fn created(workspace: Uuid, name: &str) -> Value {
    contact_event("created", workspace, Uuid::new_v4(), 1, name)
}

#[tokio::test]
async fn status_json_is_one_object_with_last_sequence_ack_floor_pending_and_dead_letters() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let workspace = Uuid::new_v4();
    let projector = ProjectorProcess::on(&nats.url, &db.url).spawn();
    let events: Vec<Value> = (0..20).map(|n| created(workspace, &format!("Contact {n}"))).collect();
    publish_all(&changes(&nats).await, &events).await;
    publish_raw(&nats.client().await, &format!("changes.{workspace}.contacts.{}", Uuid::new_v4()), b"{".to_vec()).await;
    let settled = eventually(WITHIN, || async { number(&status(&nats.url, &db.url).await, "ackFloor") == 21 }).await;
    assert!(settled, "the projector never acknowledged all 21 messages; log:\n{}", projector.log());

    let run = run_command(&nats.url, &db.url, &["status", "--output", "json"], &[], None).await;

    run.assert_success();
    assert_eq!(run.stdout.trim_end().lines().count(), 1, "one line of JSON: {}", run.stdout);
    let status: Value = serde_json::from_str(&run.stdout).expect("status JSON");
    assert_eq!(number(&status, "lastSequence"), 21, "{status}");
    assert_eq!(number(&status, "ackFloor"), 21, "{status}");
    assert_eq!(number(&status, "pending"), 0, "{status}");
    assert_eq!(number(&status, "deadLetters"), 1, "{status}");
    projector.stop().await;
}

#[tokio::test]
async fn status_text_states_the_same_numbers_in_words() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let workspace = Uuid::new_v4();
    let events: Vec<Value> = (0..3).map(|n| created(workspace, &format!("Contact {n}"))).collect();
    publish_all(&changes(&nats).await, &events).await;

    let run = run_command(&nats.url, &db.url, &["status"], &[], None).await;

    run.assert_success();
    for words in ["last sequence 3", "acknowledged through 0", "pending (lag) 3", "dead letters 0"] {
        assert!(run.stdout.contains(words), "status text does not say {words:?}:\n{}", run.stdout);
    }
}

#[tokio::test]
async fn publish_sends_an_event_file_to_its_own_subject_and_a_running_projector_applies_it() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let projector = ProjectorProcess::on(&nats.url, &db.url).spawn();

    let run = run_command(&nats.url, &db.url, &["publish", EXAMPLE], &[], None).await;

    run.assert_success();
    assert!(run.stdout.contains("published 1 event"), "stdout: {}", run.stdout);
    assert_eq!(stored_subjects(&nats).await, [EXAMPLE_SUBJECT]);
    let (workspace, id) = (
        "6d1f0b7e-3c55-4a3b-8f9f-5d1f0e2a7c11".parse().unwrap(),
        "b3c6a1d2-2f0e-4c1b-9a9e-7e3d5c2b1a00".parse().unwrap(),
    );
    let applied = eventually(WITHIN, || async { contact_row(&db.pool, workspace, id).await.is_some() }).await;
    assert!(applied, "the published example never reached contacts; log:\n{}", projector.log());
    assert_eq!(
        contact_row(&db.pool, workspace, id).await,
        Some(("active".to_owned(), 1, Some("Acme GmbH".to_owned())))
    );
    projector.stop().await;
}

#[tokio::test]
async fn publish_without_files_publishes_each_json_line_of_stdin_to_its_subject() {
    let nats = TestNats::start().await;
    let workspace = Uuid::new_v4();
    let events: Vec<Value> = (0..3).map(|n| created(workspace, &format!("Contact {n}"))).collect();
    let lines: String = events.iter().map(|event| format!("{event}\n")).collect();

    let run = run_command(&nats.url, "postgres://unused", &["publish"], &[], Some(&lines)).await;

    run.assert_success();
    assert!(run.stdout.contains("published 3 event"), "stdout: {}", run.stdout);
    assert_eq!(stored_subjects(&nats).await, events.iter().map(subject_of).collect::<Vec<_>>());
}

#[tokio::test]
async fn publishing_an_invalid_event_exits_non_zero_with_one_error_line_and_publishes_nothing() {
    let nats = TestNats::start().await;
    let mut event = created(Uuid::new_v4(), "Acme GmbH");
    event["data"]["name"] = Value::from("");

    let run = run_command(&nats.url, "postgres://unused", &["publish"], &[], Some(&format!("{event}\n"))).await;

    assert!(run.code.is_some_and(|code| code != 0), "expected a failure exit: {run:#?}");
    assert!(!run.stderr.contains("panicked"), "the binary panicked: {}", run.stderr);
    assert_eq!(run.error_lines().len(), 1, "one error line: {}", run.stderr);
    assert!(run.stdout.is_empty(), "nothing reported as published: {}", run.stdout);
    assert_eq!(stored_subjects(&nats).await, Vec::<String>::new(), "nothing was published");
}

#[tokio::test]
async fn an_invalid_line_on_stdin_fails_the_publish_before_any_line_is_published() {
    let nats = TestNats::start().await;
    let workspace = Uuid::new_v4();
    let valid = created(workspace, "Acme GmbH");
    let mut invalid = created(workspace, "Beta AG");
    invalid["data"]["name"] = Value::from("");

    let run =
        run_command(&nats.url, "postgres://unused", &["publish"], &[], Some(&format!("{valid}\n{invalid}\n"))).await;

    assert!(run.code.is_some_and(|code| code != 0), "expected a failure exit: {run:#?}");
    assert_eq!(run.error_lines().len(), 1, "one error line: {}", run.stderr);
    assert_eq!(
        stored_subjects(&nats).await,
        Vec::<String>::new(),
        "the valid line before the invalid one was published although the command failed: {run:#?}"
    );
}

#[tokio::test]
async fn run_creates_the_changes_stream_and_its_durable_pull_consumer_when_missing() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let jetstream = jetstream::new(nats.client().await);
    assert!(jetstream.get_stream("CHANGES").await.is_err(), "a fresh nats-server has no CHANGES stream");

    let projector = ProjectorProcess::on(&nats.url, &db.url).spawn();

    let set_up = eventually(WITHIN, || async {
        match jetstream.get_stream("CHANGES").await {
            Ok(stream) => stream.consumer_info(lectern_projector::stream::CONSUMER).await.is_ok(),
            Err(_) => false,
        }
    })
    .await;
    assert!(set_up, "no stream and consumer after starting; log:\n{}", projector.log());
    let stream = jetstream.get_stream("CHANGES").await.expect("the stream");
    assert_eq!(stream.cached_info().config.subjects, ["changes.>"]);
    let consumer = stream.consumer_info(lectern_projector::stream::CONSUMER).await.expect("the consumer");
    assert_eq!(consumer.config.durable_name.as_deref(), Some(lectern_projector::stream::CONSUMER), "durable");
    assert_eq!(consumer.config.ack_policy, jetstream::consumer::AckPolicy::Explicit);
    assert_eq!(consumer.config.deliver_subject, None, "a pull consumer has no deliver subject");
    projector.stop().await;
}

#[tokio::test]
async fn run_keeps_retrying_while_nats_is_unreachable_and_exits_0_on_sigterm() {
    let nowhere = format!("nats://127.0.0.1:{}", free_port());
    let db = TestDatabase::create().await;
    let mut projector = ProjectorProcess::on(&nowhere, &db.url).spawn();

    tokio::time::sleep(Duration::from_secs(2)).await;

    projector.service.assert_running("with NATS unreachable");
    let log = projector.stop().await.stderr;
    // A stop before the consumer exists is logged as any other: operators wait for the line.
    assert!(log.contains("projector stopped"), "no line says the projector stopped:\n{log}");
}

#[tokio::test]
async fn an_own_search_index_setting_of_zero_exits_2_with_one_error_line_naming_it() {
    let nowhere = format!("nats://127.0.0.1:{}", free_port());
    for (variable, flag) in [
        ("LECTERN_PROJECTOR_OWN_SEARCH_INDEX_FROM", "--own-search-index-from"),
        ("LECTERN_PROJECTOR_OWN_SEARCH_INDEX_EVERY", "--own-search-index-every"),
    ] {
        let run = run_command(&nowhere, "postgres://unused", &["run"], &[(variable, "0")], None).await;

        assert_eq!(run.code, Some(2), "{variable}=0: {run:#?}");
        let lines = run.error_lines();
        assert_eq!(lines.len(), 1, "one error line: {}", run.stderr);
        assert!(lines[0].contains(variable) || lines[0].contains(flag), "{variable} is not named: {}", lines[0]);
    }
}

#[tokio::test]
async fn a_batch_size_of_zero_exits_2_with_one_error_line_naming_the_setting() {
    let nowhere = format!("nats://127.0.0.1:{}", free_port());

    let run =
        run_command(&nowhere, "postgres://unused", &["run"], &[("LECTERN_PROJECTOR_BATCH_SIZE", "0")], None).await;

    assert_eq!(run.code, Some(2), "{run:#?}");
    let lines = run.error_lines();
    assert_eq!(lines.len(), 1, "one error line: {}", run.stderr);
    assert!(
        lines[0].contains("LECTERN_PROJECTOR_BATCH_SIZE") || lines[0].contains("--batch-size"),
        "the setting is not named: {}",
        lines[0]
    );
}
