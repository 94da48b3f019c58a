//! `lectern-projector verify`: the read model against the stream, as an operator runs it
//! beside a live projector. Each test has its own nats-server and database.

use std::time::Duration;

use async_nats::jetstream;
use lectern_tests::nats::TestNats;
use lectern_tests::projector::{contact_event, item_created, item_data, publish_raw, ProjectorProcess};
use lectern_tests::TestDatabase;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::process::{acknowledged_everything, changes, run_command, status, stream_with_early_events_dropped, tamper};

/// A verify's run: its exit code, and its JSON verdict.
struct Verified {
    code: Option<i32>,
    verdict: Value,
    stderr: String,
}

async fn verify(nats: &TestNats, db: &TestDatabase, extra: &[&str]) -> Verified {
    let mut args = vec!["verify", "--output", "json"];
    if !extra.contains(&"--wait-for-projector") {
        args.extend(["--wait-for-projector", "20"]);
    }
    args.extend_from_slice(extra);
    let run = run_command(&nats.url, &db.url, &args, &[], None).await;
    let verdict = serde_json::from_str(run.stdout.trim())
        .unwrap_or_else(|error| panic!("verify printed no JSON verdict ({error}): {}\n{}", run.stdout, run.stderr));
    Verified { code: run.code, verdict, stderr: run.stderr }
}

/// The subject an event belongs on, contact or item.
fn subject(event: &Value) -> String {
    let resource =
        if event["type"].as_str().is_some_and(|kind| kind.starts_with("item.")) { "items" } else { "contacts" };
    format!(
        "changes.{}.{resource}.{}",
        event["workspaceId"].as_str().expect("a workspace"),
        event["entityId"].as_str().expect("an id")
    )
}

async fn publish(jetstream: &jetstream::Context, events: &[Value]) -> u64 {
    let mut last = 0;
    for window in events.chunks(200) {
        let mut acks = Vec::new();
        for event in window {
            acks.push(jetstream.publish(subject(event), event.to_string().into()).await.expect("publish"));
        }
        for ack in acks {
            last = ack.await.expect("stored").sequence;
        }
    }
    last
}

/// Two workspaces' contacts and items over several versions, removals included, and a
/// message that breaks the contract.
fn history(watched: Uuid, other: Uuid) -> (Vec<Value>, Vec<Uuid>, Vec<Uuid>) {
    let contacts: Vec<Uuid> = (0..6).map(|_| Uuid::new_v4()).collect();
    let items: Vec<Uuid> = (0..4).map(|_| Uuid::new_v4()).collect();
    let mut events = Vec::new();
    for workspace in [watched, other] {
        for (index, id) in contacts.iter().enumerate() {
            events.push(contact_event("created", workspace, *id, 1, &format!("Contact {index}")));
            events.push(contact_event("updated", workspace, *id, 2, &format!("Contact {index} v2")));
            match index {
                0 => events.push(contact_event("archived", workspace, *id, 3, "")),
                1 => events.push(contact_event("deleted", workspace, *id, 3, "")),
                _ => {}
            }
        }
        for (index, id) in items.iter().enumerate() {
            let price = json!({ "amount": format!("{index}.10"), "currency": "EUR" });
            events.push(item_created(workspace, *id, item_data(&format!("Item {index}"), price, Value::Null)));
        }
    }
    (events, contacts, items)
}

fn drifted_ids(verdict: &Value) -> Vec<(String, String, String)> {
    let mut found: Vec<(String, String, String)> = verdict["firstDrifted"]
        .as_array()
        .expect("firstDrifted")
        .iter()
        .map(|drift| {
            let text = |field: &str| drift[field].as_str().unwrap_or_default().to_owned();
            (text("resource"), text("id"), text("kind"))
        })
        .collect();
    found.sort();
    found
}

#[tokio::test]
async fn a_clean_model_agrees_and_each_row_changed_deleted_or_inserted_by_sql_is_reported_by_id() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let (watched, other) = (Uuid::new_v4(), Uuid::new_v4());
    let projector = ProjectorProcess::on(&nats.url, &db.url).spawn();
    let (events, contacts, items) = history(watched, other);
    let jetstream = changes(&nats).await;
    publish(&jetstream, &events).await;
    publish_raw(&nats.client().await, &format!("changes.{watched}.contacts.{}", Uuid::new_v4()), b"{".to_vec()).await;
    acknowledged_everything(&nats, &projector).await;

    let clean = verify(&nats, &db, &[]).await;
    assert_eq!(clean.code, Some(0), "a clean model: {}\n{}", clean.verdict, clean.stderr);
    assert_eq!(clean.verdict["outcome"], "agreed");
    assert_eq!(clean.verdict["records"], 20, "6 contacts and 4 items in each of two workspaces: {}", clean.verdict);
    assert_eq!(clean.verdict["eventsSetAside"], 1, "the message that breaks the contract: {}", clean.verdict);

    // Behind the projector's back: a field, a row removed, a row added, a version lowered,
    // an archive turned into a delete.
    tamper(&db.pool, "update contacts set name = 'Tampered' where workspace_id = $1 and id = $2", watched, contacts[2])
        .await;
    tamper(&db.pool, "delete from contacts where workspace_id = $1 and id = $2", watched, contacts[3]).await;
    let inserted = Uuid::new_v4();
    tamper(
        &db.pool,
        "insert into items (workspace_id, id, version, status, name, type, created_at) \
         values ($1, $2, 1, 'active', 'Smuggled', 'service', now())",
        watched,
        inserted,
    )
    .await;
    tamper(&db.pool, "update items set version = 0 where workspace_id = $1 and id = $2", watched, items[1]).await;
    tamper(&db.pool, "update contacts set status = 'deleted' where workspace_id = $1 and id = $2", other, contacts[0])
        .await;

    let drift = verify(&nats, &db, &[]).await;
    assert_eq!(drift.code, Some(1), "drift: {}\n{}", drift.verdict, drift.stderr);
    assert_eq!(drift.verdict["outcome"], "drifted");
    assert_eq!(drift.verdict["drifted"], 5, "{}", drift.verdict);
    let mut expected = vec![
        ("contacts".to_owned(), contacts[2].to_string(), "changed".to_owned()),
        ("contacts".to_owned(), contacts[3].to_string(), "missing".to_owned()),
        ("items".to_owned(), inserted.to_string(), "unexpected".to_owned()),
        ("items".to_owned(), items[1].to_string(), "behind".to_owned()),
        ("contacts".to_owned(), contacts[0].to_string(), "changed".to_owned()),
    ];
    expected.sort();
    assert_eq!(drifted_ids(&drift.verdict), expected, "{}", drift.verdict);
    let renamed = drift.verdict["firstDrifted"]
        .as_array()
        .and_then(|drifts| drifts.iter().find(|drift| drift["id"] == contacts[2].to_string()))
        .expect("the renamed contact");
    assert_eq!(renamed["columns"], json!(["name"]), "only the name differs: {renamed}");
    assert_eq!(renamed["expected"]["name"], "Contact 2 v2");
    assert_eq!(renamed["stored"]["name"], "Tampered");

    // One workspace at a time: the other's single drift is all it reports.
    let narrowed = verify(&nats, &db, &["--workspace", &other.to_string()]).await;
    assert_eq!(narrowed.code, Some(1));
    assert_eq!(
        drifted_ids(&narrowed.verdict),
        [("contacts".to_owned(), contacts[0].to_string(), "changed".to_owned())]
    );
    assert_eq!(narrowed.verdict["records"], 10, "{}", narrowed.verdict);

    // The text says the same to a person, and status remembers the last verify.
    let text = run_command(&nats.url, &db.url, &["verify", "--wait-for-projector", "20"], &[], None).await;
    assert_eq!(text.code, Some(1), "{}", text.stderr);
    for id in [contacts[2], contacts[3], inserted, items[1]] {
        assert!(text.stdout.contains(&id.to_string()), "the text does not name {id}:\n{}", text.stdout);
    }
    assert!(text.stdout.contains("name: expected \"Contact 2 v2\", stored \"Tampered\""), "{}", text.stdout);
    let last = &status(&nats.url, &db.url).await["lastVerify"];
    assert_eq!((last["outcome"].as_str(), last["drifted"].as_i64()), (Some("drifted"), Some(5)), "{last}");
    projector.stop().await;
}

#[tokio::test]
async fn events_published_and_applied_while_a_verify_runs_are_not_drift() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let workspace = Uuid::new_v4();
    let projector = ProjectorProcess::on(&nats.url, &db.url).spawn();
    let jetstream = changes(&nats).await;
    let ids: Vec<Uuid> = (0..400).map(|_| Uuid::new_v4()).collect();
    let created: Vec<Value> = ids.iter().map(|id| contact_event("created", workspace, *id, 1, "First")).collect();
    publish(&jetstream, &created).await;
    acknowledged_everything(&nats, &projector).await;

    // Every record updated again and again, and new ones created, throughout the verify.
    let writer = {
        let jetstream = jetstream.clone();
        let ids = ids.clone();
        tokio::spawn(async move {
            for version in 2..=40 {
                let mut events: Vec<Value> = ids
                    .iter()
                    .map(|id| contact_event("updated", workspace, *id, version, &format!("v{version}")))
                    .collect();
                events.push(contact_event("created", workspace, Uuid::new_v4(), 1, "New"));
                publish(&jetstream, &events).await;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    let mut verdicts = Vec::new();
    while !writer.is_finished() {
        verdicts.push(verify(&nats, &db, &[]).await);
    }
    writer.await.expect("the writer");

    assert!(!verdicts.is_empty());
    for verified in &verdicts {
        assert_eq!(verified.code, Some(0), "drift reported under load: {}\n{}", verified.verdict, verified.stderr);
    }
    let written_since: u64 = verdicts.iter().filter_map(|verified| verified.verdict["writtenSince"].as_u64()).sum();
    eprintln!("{} verifies under load; {written_since} rows written since their histories were read", verdicts.len());
    projector.stop().await;
}

#[tokio::test]
async fn a_stream_that_dropped_early_events_cannot_tell_and_says_from_which_sequence_it_holds_them() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    stream_with_early_events_dropped(&nats, 5, 8).await;

    let verified = verify(&nats, &db, &[]).await;

    assert_eq!(verified.code, Some(2), "{}", verified.verdict);
    assert_eq!(verified.verdict["outcome"], "undecided");
    let reason = verified.verdict["reason"].as_str().expect("a reason");
    assert!(reason.contains("from sequence 4 on"), "{reason}");
}

#[tokio::test]
async fn a_verify_cannot_tell_before_a_projector_has_applied_what_it_read_nor_when_an_event_was_deleted() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let workspace = Uuid::new_v4();
    let jetstream = changes(&nats).await;
    let events: Vec<Value> =
        (0..4).map(|index| contact_event("created", workspace, Uuid::new_v4(), 1, &format!("C{index}"))).collect();
    publish(&jetstream, &events).await;

    let nobody = verify(&nats, &db, &["--wait-for-projector", "0"]).await;
    assert_eq!(nobody.code, Some(2), "{}", nobody.verdict);
    assert!(
        nobody.verdict["reason"].as_str().is_some_and(|reason| reason.contains("no projector")),
        "{}",
        nobody.verdict
    );

    // A projector that applied the first four and stopped: the three after are not drift,
    // and the verify cannot tell them from drift.
    let projector = ProjectorProcess::on(&nats.url, &db.url).spawn();
    acknowledged_everything(&nats, &projector).await;
    projector.stop().await;
    let more: Vec<Value> =
        (4..7).map(|index| contact_event("created", workspace, Uuid::new_v4(), 1, &format!("C{index}"))).collect();
    publish(&jetstream, &more).await;
    let behind = verify(&nats, &db, &["--wait-for-projector", "1"]).await;
    assert_eq!(behind.code, Some(2), "{}", behind.verdict);
    let reason = behind.verdict["reason"].as_str().expect("a reason");
    assert!(reason.contains("through sequence 4 of 7"), "{reason}");

    let stream = jetstream.get_stream("CHANGES").await.expect("the stream");
    stream.delete_message(2).await.expect("delete event 2");
    let gap = verify(&nats, &db, &[]).await;
    assert_eq!(gap.code, Some(2), "{}", gap.verdict);
    let reason = gap.verdict["reason"].as_str().expect("a reason");
    assert!(reason.contains("1 event(s) between sequences 1 and 7 were deleted"), "{reason}");
}
