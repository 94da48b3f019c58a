//! `dev` over its life: run again on the same database and NATS, stopped with SIGTERM
//! after it serves or while the demo is still being projected, and started without NATS.

use std::collections::BTreeMap;

use lectern_fixtures::demo::{demo_events, record_counts, DEMO_WORKSPACE};
use lectern_schema::events::EntityKind;
use lectern_tests::binaries::Run;
use lectern_tests::nats::{free_port, TestNats};
use lectern_tests::projector::eventually;
use lectern_tests::TestDatabase;
use sqlx::{Executor, PgPool};

use crate::support::{
    connect, dead_letters, dev, final_states, missing_database, state_after, stored_states, stream_state, Dev,
    PROCESS_TIMEOUT, STARTUP,
};

#[tokio::test]
async fn running_dev_twice_on_the_same_database_and_nats_adds_no_duplicates_and_prints_a_new_valid_key() {
    let nats = TestNats::start().await;
    let (url, _) = missing_database();
    let first = Dev::start(&url, &nats.url).await;
    let first_key = first.printed.key.clone();
    first.stop().await;

    let second = Dev::start(&url, &nats.url).await;
    let pool = connect(&url).await;
    let app = second.printed.app(pool.clone());

    let events = demo_events(DEMO_WORKSPACE);
    let records = record_counts(&events);
    assert_eq!(second.printed.demo, "already published by an earlier run", "{:?}", second.printed);
    assert_eq!(stored_states(&pool, "contacts").await.len(), records.contacts, "contact rows");
    assert_eq!(stored_states(&pool, "items").await.len(), records.items, "item rows");
    let (messages, _, _, _) = stream_state(&nats.url).await;
    assert_eq!(messages, u64::try_from(events.len()).expect("count"), "JetStream holds each demo event once");
    assert_eq!(dead_letters(&pool).await, 0);
    assert_ne!(second.printed.key, first_key, "each run prints a fresh key");
    for key in [&first_key, &second.printed.key] {
        app.get(key, "/v1/contacts?limit=1").await.assert_ok();
        app.get(key, "/v1/items?limit=1").await.assert_ok();
    }
    second.stop().await;
}

#[tokio::test]
async fn dev_on_a_fresh_database_sends_the_demo_again_when_the_kept_stream_already_acknowledged_it() {
    let nats = TestNats::start().await;
    let (first_url, _) = missing_database();
    Dev::start(&first_url, &nats.url).await.stop().await;
    let events = demo_events(DEMO_WORKSPACE);

    // The stream and its durable consumer survive; the read model is a new database.
    let (url, _) = missing_database();
    let dev = Dev::start(&url, &nats.url).await;
    let pool = connect(&url).await;

    assert_eq!(dev.printed.demo, "published again: the read model did not have it", "{:?}", dev.printed);
    assert_eq!(stored_states(&pool, "contacts").await, final_states(EntityKind::Contact));
    assert_eq!(stored_states(&pool, "items").await, final_states(EntityKind::Item));
    assert_eq!(dead_letters(&pool).await, 0, "the second copy is ignored by the version guard, not dead-lettered");
    let (messages, _, _, _) = stream_state(&nats.url).await;
    assert_eq!(messages, 2 * u64::try_from(events.len()).expect("count"), "sent once more, without dedup ids");
    dev.stop().await;
}

#[tokio::test]
async fn sigterm_stops_dev_api_and_projector_with_exit_0_leaving_every_record_at_its_final_version() {
    let nats = TestNats::start().await;
    let (url, _) = missing_database();
    let dev = Dev::start(&url, &nats.url).await;
    let (api, operations) = (dev.printed.api.clone(), dev.printed.operations.clone());

    let ended = dev.stop().await;

    assert!(ended.stderr.contains("lectern-api stopped"), "the API stopped:\n{}", ended.stderr);
    assert!(ended.stderr.contains("projector stopped"), "the projector stopped:\n{}", ended.stderr);
    assert!(!ended.stderr.contains("panicked"), "{}", ended.stderr);
    for address in [api, operations] {
        assert!(tokio::net::TcpStream::connect(&address).await.is_err(), "{address} still accepts connections");
    }
    let pool = connect(&url).await;
    assert_eq!(stored_states(&pool, "contacts").await, final_states(EntityKind::Contact));
    assert_eq!(stored_states(&pool, "items").await, final_states(EntityKind::Item));
    let (_, last_sequence, ack_floor, pending) = stream_state(&nats.url).await;
    assert_eq!((ack_floor, pending), (last_sequence, 0), "every event was acknowledged");
}

/// The projector's sessions on `database` waiting for a lock: a batch blocked mid-transaction.
async fn projector_sessions_waiting_on_a_lock(pool: &PgPool, database: &str) -> i64 {
    sqlx::query_scalar(
        "select count(*) from pg_locks l join pg_stat_activity a on a.pid = l.pid
         where not l.granted and a.datname = $1 and a.application_name = 'lectern-projector'",
    )
    .bind(database)
    .fetch_one(pool)
    .await
    .expect("count sessions waiting on a lock")
}

#[tokio::test]
async fn sigterm_while_the_demo_is_being_projected_exits_0_with_the_batch_in_hand_committed_and_nothing_half_applied() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    // The projector's first batch waits on this lock, so SIGTERM lands with it in hand.
    let mut lock = db.pool.begin().await.expect("begin the lock transaction");
    lock.execute("lock table contacts in access exclusive mode").await.expect("lock contacts");
    let mut service = dev(&db.url, &nats.url).json_logs().spawn();
    let in_hand =
        eventually(STARTUP, || async { projector_sessions_waiting_on_a_lock(&db.pool, &db.name).await > 0 }).await;
    assert!(in_hand, "the projector never started writing a batch:\n{}", service.stderr());

    service.signal("TERM");
    service
        .wait_for_log(PROCESS_TIMEOUT, |record| {
            record["fields"]["message"] == "shutting down: finishing in-flight work"
        })
        .await;
    lock.rollback().await.expect("release the lock");
    let ended = service.wait(PROCESS_TIMEOUT).await;

    assert_eq!(ended.code, Some(0), "SIGTERM mid-projection did not end dev with exit 0:\n{}", ended.stderr);
    assert!(!ended.stderr.contains("panicked"), "{}", ended.stderr);
    let events = demo_events(DEMO_WORKSPACE);
    let mut stored = BTreeMap::new();
    for (table, entity) in [("contacts", EntityKind::Contact), ("items", EntityKind::Item)] {
        for (id, state) in stored_states(&db.pool, table).await {
            let event = events
                .iter()
                .find(|event| event.event_type.entity == entity && event.entity_id == id && event.version == state.0)
                .unwrap_or_else(|| panic!("{table} {id} holds version {}, which no demo event has", state.0));
            assert_eq!(state, state_after(event), "{table} {id} is not the state its version {} left", state.0);
            stored.insert(id, state.0);
        }
    }
    // Acknowledged means committed; the batch in hand was both. The demo is published
    // in order on one connection, so event i has stream sequence i + 1.
    let (_, _, ack_floor, _) = stream_state(&nats.url).await;
    assert!(ack_floor > 0, "the batch in hand was not finished and acknowledged:\n{}", ended.stderr);
    for (sequence, event) in (1..=ack_floor).zip(&events) {
        let held = stored.get(&event.entity_id).copied().unwrap_or(0);
        assert!(
            held >= event.version,
            "stream sequence {sequence} was acknowledged but its record holds version {held}"
        );
    }
    // A rerun finishes the work.
    let again = Dev::start(&db.url, &nats.url).await;
    assert_eq!(stored_states(&db.pool, "contacts").await, final_states(EntityKind::Contact));
    assert_eq!(stored_states(&db.pool, "items").await, final_states(EntityKind::Item));
    again.stop().await;
}

/// `lectern-dev` run to its end against `nats_url` (and a database it creates).
async fn dev_with_nats_at(nats_url: &str) -> Run {
    let (url, _) = missing_database();
    dev(&url, nats_url).run(PROCESS_TIMEOUT).await
}

#[tokio::test]
async fn dev_without_reachable_nats_ends_at_once_with_one_line_naming_nats_url() {
    let nats_url = format!("nats://127.0.0.1:{}", free_port());

    let run = dev_with_nats_at(&nats_url).await;

    run.assert_one_line_error(Some(1), &["NATS_URL", "--nats-url", &nats_url]);
    assert!(run.stdout.is_empty(), "nothing promised on stdout: {}", run.stdout);
}

#[tokio::test]
async fn dev_without_reachable_nats_names_the_server_but_never_its_credentials() {
    let port = free_port();
    let nats_url = format!("nats://lectern:not-a-real-password@127.0.0.1:{port}");

    let run = dev_with_nats_at(&nats_url).await;

    run.assert_one_line_error(Some(1), &[&format!("nats://REDACTED@127.0.0.1:{port}")]);
    for output in [&run.stdout, &run.stderr] {
        assert!(!output.contains("not-a-real-password"), "the password reached the output: {output}");
    }
}
