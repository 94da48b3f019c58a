//! The demo data set (`lectern-dev publish-demo`): published through the real contract, it
//! reaches the read model exactly once however often it is published. Each test has its
//! own nats-server and database.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use async_nats::jetstream;
use lectern_dev::publish::{publish_demo, DemoOutcome};
use lectern_fixtures::demo::{demo_events, expected_active_counts, record_counts, DemoEvent, DEMO_WORKSPACE};
use lectern_schema::events::{ChangeKind, EntityKind};
use lectern_tests::nats::TestNats;
use lectern_tests::projector::{eventually, RunningProjector};
use lectern_tests::TestDatabase;
use sqlx::PgPool;
use uuid::Uuid;

use lectern_tests::binaries::Run;
use lectern_tests::process::Launch;

const WITHIN: Duration = Duration::from_secs(60);

/// `lectern-dev publish-demo <args>` against `nats`, run to its end.
async fn publish_demo_command(nats: &TestNats, args: &[&str]) -> Run {
    Launch::dev().arg("publish-demo").args(args).env("NATS_URL", &nats.url).run(WITHIN).await
}

/// How many messages the `CHANGES` stream holds.
async fn stored_messages(nats: &TestNats) -> u64 {
    let mut stream = jetstream::new(nats.client().await).get_stream("CHANGES").await.expect("the CHANGES stream");
    stream.info().await.expect("stream info").state.messages
}

/// Each record's status once its highest version is applied, worked out from the events
/// themselves (not by the function under test).
fn final_statuses(events: &[DemoEvent], entity: EntityKind) -> BTreeMap<Uuid, &'static str> {
    let mut latest: BTreeMap<Uuid, (i64, ChangeKind)> = BTreeMap::new();
    for event in events.iter().filter(|event| event.event_type.entity == entity) {
        let entry = latest.entry(event.entity_id).or_insert((0, ChangeKind::Created));
        if event.version > entry.0 {
            *entry = (event.version, event.event_type.change);
        }
    }
    latest
        .into_iter()
        .map(|(id, (_, change))| {
            let status = match change {
                ChangeKind::Archived => "archived",
                ChangeKind::Deleted => "deleted",
                _ => "active",
            };
            (id, status)
        })
        .collect()
}

/// Every row of `table` in `workspace`, with its status.
async fn stored_statuses(pool: &PgPool, table: &str, workspace: Uuid) -> BTreeMap<Uuid, String> {
    sqlx::query_as(&format!("select id, status from {table} where workspace_id = $1"))
        .bind(workspace)
        .fetch_all(pool)
        .await
        .expect("read the read model")
        .into_iter()
        .collect()
}

fn owned(statuses: BTreeMap<Uuid, &'static str>) -> BTreeMap<Uuid, String> {
    statuses.into_iter().map(|(id, status)| (id, status.to_owned())).collect()
}

#[tokio::test]
async fn publishing_the_demo_twice_projects_every_record_once_with_the_archived_ones_inactive() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let projector = RunningProjector::start_consuming(&nats.url, db.pool.clone()).await;
    let workspace = Uuid::new_v4();
    let events = demo_events(workspace);
    let (contacts, items) =
        (owned(final_statuses(&events, EntityKind::Contact)), owned(final_statuses(&events, EntityKind::Item)));
    let jetstream = jetstream::new(nats.client().await);

    let first = publish_demo(&jetstream, workspace).await.expect("the first publish");
    let second = publish_demo(&jetstream, workspace).await.expect("the second publish");

    assert!(
        matches!(first, DemoOutcome::Published { events: sent, duplicates: 0, .. } if sent == events.len()),
        "{first:?}"
    );
    assert_eq!(second, DemoOutcome::AlreadyPublished { workspace, events: events.len() });
    assert_eq!(stored_messages(&nats).await, events.len() as u64, "the stream holds each event once");
    let projected = eventually(WITHIN, || async {
        stored_statuses(&db.pool, "contacts", workspace).await == contacts
            && stored_statuses(&db.pool, "items", workspace).await == items
    })
    .await;
    assert!(projected, "the read model never matched the demo's final statuses");
    let active = |statuses: &BTreeMap<Uuid, String>| statuses.values().filter(|status| *status == "active").count();
    let expected = expected_active_counts(&events);
    assert_eq!((active(&contacts), active(&items)), (expected.contacts, expected.items));
    assert!(contacts.values().any(|status| status == "archived") && items.values().any(|status| status == "archived"));
    projector.stop().await;
}

#[tokio::test]
async fn a_demo_publish_cut_short_is_completed_by_the_next_and_each_event_is_stored_once() {
    let nats = TestNats::start().await;
    let workspace = Uuid::new_v4();
    let events = demo_events(workspace);
    let jetstream = jetstream::new(nats.client().await);
    lectern_projector::stream::ensure_stream(&jetstream, lectern_projector::stream::DEFAULT_STREAM_REPLICAS)
        .await
        .expect("the CHANGES stream");
    for event in &events[..100] {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Nats-Msg-Id", event.event_id.to_string().as_str());
        let ack = jetstream.publish_with_headers(event.subject.clone(), headers, event.json.clone().into()).await;
        ack.expect("publish").await.expect("JetStream stores the event");
    }

    let outcome = publish_demo(&jetstream, workspace).await.expect("the publish that completes the demo");

    assert!(
        matches!(outcome, DemoOutcome::Published { events: sent, duplicates: 100, .. } if sent == events.len()),
        "{outcome:?}"
    );
    assert_eq!(stored_messages(&nats).await, events.len() as u64);
}

#[tokio::test]
async fn the_demo_command_prints_its_summary_and_a_second_run_publishes_nothing() {
    let nats = TestNats::start().await;
    let events = demo_events(DEMO_WORKSPACE);
    let records = record_counts(&events);

    let first = publish_demo_command(&nats, &[]).await;
    let second = publish_demo_command(&nats, &[]).await;

    first.assert_success();
    assert_eq!(first.stdout.lines().count(), 1, "one summary line: {}", first.stdout);
    let summary =
        format!("published {} demo events ({} contacts, {} items;", events.len(), records.contacts, records.items);
    assert!(first.stdout.starts_with(&summary), "expected {summary:?}…, got {}", first.stdout);
    assert!(first.stdout.contains(&DEMO_WORKSPACE.to_string()), "{}", first.stdout);
    second.assert_success();
    assert_eq!(
        second.stdout.trim_end(),
        format!(
            "demo data for workspace {DEMO_WORKSPACE} is already published ({} events); nothing to do",
            events.len()
        )
    );
    assert_eq!(stored_messages(&nats).await, events.len() as u64);
}

#[tokio::test]
async fn the_demo_command_publishes_into_the_workspace_it_is_given() {
    let nats = TestNats::start().await;
    let workspace = Uuid::new_v4();
    let events = demo_events(workspace);

    let run = publish_demo_command(&nats, &["--workspace", &workspace.to_string()]).await;

    run.assert_success();
    assert!(run.stdout.contains(&format!("for workspace {workspace}")), "{}", run.stdout);
    let stream = jetstream::new(nats.client().await).get_stream("CHANGES").await.expect("the CHANGES stream");
    let mut subjects = BTreeSet::new();
    for sequence in 1..=events.len() as u64 {
        let message = stream.get_raw_message(sequence).await.expect("a stored message");
        subjects.insert(message.subject.to_string());
    }
    assert_eq!(subjects, events.iter().map(|event| event.subject.clone()).collect::<BTreeSet<_>>());
}

/// The rule: `lectern-dev` takes `NATS_URL` as the projector does, a comma-separated list of
/// servers, and connects to one that answers: the first here is a port nobody listens on.
#[tokio::test]
async fn publish_demo_takes_a_comma_separated_nats_url_as_the_projector_does() {
    let nats = TestNats::start().await;
    let nobody = format!("nats://127.0.0.1:{}", lectern_tests::nats::free_port());
    let servers = format!("{nobody},{}", nats.url);

    let run = Launch::dev().arg("publish-demo").env("NATS_URL", &servers).run(WITHIN).await;

    run.assert_success();
    assert_eq!(stored_messages(&nats).await, u64::try_from(demo_events(DEMO_WORKSPACE).len()).expect("a count"));
}
