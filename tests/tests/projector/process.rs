//! `lectern-projector run` as a real process under failure: killed with SIGKILL in the
//! middle of a large publish, stopped with SIGTERM with a batch in hand, and cut off from
//! NATS or from PostgreSQL. Each test has its own nats-server and database.
//!
//! The helpers here (commands run to their end, the stream, a fleet of contacts and what
//! the read model holds of it) are shared with the other process tests.

use std::collections::HashMap;
use std::ops::RangeInclusive;
use std::time::{Duration, Instant};

use async_nats::jetstream;
use lectern_tests::binaries::Run;
use lectern_tests::database::admin_url;
use lectern_tests::nats::TestNats;
use lectern_tests::projector::{contact_event, eventually, projector_command, ProjectorProcess};
use lectern_tests::TestDatabase;
use serde_json::Value;
use sqlx::{Connection, Executor, PgConnection, PgPool};
use uuid::Uuid;

/// How long any one process may take to finish before the test fails instead of hanging:
/// a guard, not a speed check. A rebuild of tens of thousands of events under a load of
/// writers, beside the whole suite on two cores, was seen to take over 30 s.
pub(crate) const PROCESS_TIMEOUT: Duration = Duration::from_secs(90);
/// How long the read model may take to catch up with what was published.
pub(crate) const CATCH_UP: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------------------
// Processes
// ---------------------------------------------------------------------------------------

/// Runs `lectern-projector <args>` to completion, with `env` added and `stdin` fed in.
pub(crate) async fn run_command(
    nats_url: &str,
    database_url: &str,
    args: &[&str],
    env: &[(&str, &str)],
    stdin: Option<&str>,
) -> Run {
    let command = projector_command(nats_url, database_url).args(args).envs(env);
    match stdin {
        Some(text) => command.stdin(text),
        None => command,
    }
    .run(PROCESS_TIMEOUT)
    .await
}

/// `lectern-projector status --output json`, which must succeed with one JSON object.
pub(crate) async fn status(nats_url: &str, database_url: &str) -> Value {
    let run = run_command(nats_url, database_url, &["status", "--output", "json"], &[], None).await;
    run.assert_success();
    let status: Value = serde_json::from_str(run.stdout.trim())
        .unwrap_or_else(|error| panic!("status is not one JSON document ({error}): {}", run.stdout));
    assert!(status.is_object(), "status is not a JSON object: {status}");
    status
}

/// One numeric field of a status document.
pub(crate) fn number(status: &Value, field: &str) -> u64 {
    status[field].as_u64().unwrap_or_else(|| panic!("status has no number {field:?}: {status}"))
}

// ---------------------------------------------------------------------------------------
// Events and the read model
// ---------------------------------------------------------------------------------------

/// The subject an event's envelope names.
pub(crate) fn subject_of(event: &Value) -> String {
    format!(
        "changes.{}.contacts.{}",
        event["workspaceId"].as_str().expect("workspaceId"),
        event["entityId"].as_str().expect("entityId")
    )
}

/// Publishes `events` in order, a window of them in flight at a time, and returns the
/// stream sequence JetStream gave each.
pub(crate) async fn publish_all(jetstream: &jetstream::Context, events: &[Value]) -> Vec<u64> {
    let mut sequences = Vec::with_capacity(events.len());
    for window in events.chunks(250) {
        let mut acks = Vec::with_capacity(window.len());
        for event in window {
            let ack = jetstream.publish(subject_of(event), event.to_string().into()).await.expect("publish an event");
            acks.push(ack);
        }
        for ack in acks {
            sequences.push(ack.await.expect("JetStream stores the event").sequence);
        }
    }
    sequences
}

/// A JetStream context on the test's own nats-server, with the stream in place.
pub(crate) async fn changes(nats: &TestNats) -> jetstream::Context {
    let jetstream = jetstream::new(nats.client().await);
    lectern_projector::stream::ensure_stream(&jetstream, lectern_projector::stream::DEFAULT_STREAM_REPLICAS)
        .await
        .expect("the CHANGES stream");
    jetstream
}

/// Waits until the projector has acknowledged every message the stream holds (the
/// consumer is there once the projector has started).
pub(crate) async fn acknowledged_everything(nats: &TestNats, projector: &ProjectorProcess) {
    let jetstream = jetstream::new(nats.client().await);
    let caught_up = eventually(CATCH_UP, || async {
        let Ok(mut stream) = jetstream.get_stream("CHANGES").await else { return false };
        let last = stream.info().await.map(|info| info.state.last_sequence).unwrap_or(u64::MAX);
        let consumer = stream.consumer_info(lectern_projector::stream::CONSUMER).await;
        consumer.is_ok_and(|info| info.ack_floor.stream_sequence >= last)
    })
    .await;
    assert!(caught_up, "the projector did not apply the stream; log:\n{}", projector.log());
}

/// A `CHANGES` stream created by an operator with a limit of `max_messages`, before any
/// projector ran, holding `published` contacts of one workspace: its first ones dropped.
pub(crate) async fn stream_with_early_events_dropped(nats: &TestNats, max_messages: i64, published: usize) {
    let jetstream = jetstream::new(nats.client().await);
    let config = jetstream::stream::Config {
        name: "CHANGES".to_owned(),
        subjects: vec!["changes.>".to_owned()],
        max_messages,
        ..Default::default()
    };
    jetstream.create_stream(config).await.expect("a stream with a limit");
    let workspace = Uuid::new_v4();
    let events: Vec<Value> = (0..published)
        .map(|n| lectern_tests::projector::contact_event("created", workspace, Uuid::new_v4(), 1, &format!("C{n}")))
        .collect();
    publish_all(&jetstream, &events).await;
}

/// Runs `statement` (binding a workspace and an id) behind the projector's back; it must
/// change exactly one row.
pub(crate) async fn tamper(pool: &PgPool, statement: &str, workspace: Uuid, id: Uuid) {
    let done = sqlx::query(statement).bind(workspace).bind(id).execute(pool).await.expect("tamper with the read model");
    assert_eq!(done.rows_affected(), 1, "{statement}");
}

/// The shared durable consumer as JetStream sees it.
pub(crate) async fn consumer_info(nats: &TestNats) -> jetstream::consumer::Info {
    jetstream::new(nats.client().await)
        .get_stream("CHANGES")
        .await
        .expect("the CHANGES stream")
        .consumer_info(lectern_projector::stream::CONSUMER)
        .await
        .expect("the projector's consumer")
}

/// Contacts of one workspace whose every version `v` is named "v{v}", so a row's name
/// tells which event wrote it.
pub(crate) struct Fleet {
    workspace: Uuid,
    ids: Vec<Uuid>,
}

impl Fleet {
    pub(crate) fn new(contacts: usize) -> Self {
        Self { workspace: Uuid::new_v4(), ids: (0..contacts).map(|_| Uuid::new_v4()).collect() }
    }

    /// `versions` of every contact, version by version: each contact's versions in
    /// increasing order, interleaved with every other contact's.
    pub(crate) fn events(&self, versions: RangeInclusive<i64>) -> Vec<Value> {
        versions
            .flat_map(|version| {
                self.ids.iter().map(move |&id| {
                    let kind = if version == 1 { "created" } else { "updated" };
                    contact_event(kind, self.workspace, id, version, &format!("v{version}"))
                })
            })
            .collect()
    }

    /// Contacts whose row holds `version`, written by that very event.
    pub(crate) async fn at_version(&self, pool: &PgPool, version: i64) -> usize {
        let count: i64 = sqlx::query_scalar(
            "select count(*) from contacts
             where workspace_id = $1 and status = 'active' and version = $2 and name = 'v' || $2::text",
        )
        .bind(self.workspace)
        .bind(version)
        .fetch_one(pool)
        .await
        .expect("count contacts at a version");
        usize::try_from(count).expect("a count")
    }

    /// Waits until every contact is at `version`.
    pub(crate) async fn assert_all_reach(&self, pool: &PgPool, version: i64, projector: &ProjectorProcess) {
        let reached = eventually(CATCH_UP, || async { self.at_version(pool, version).await == self.ids.len() }).await;
        assert!(
            reached,
            "only {} of {} contacts reached version {version}; projector log:\n{}",
            self.at_version(pool, version).await,
            self.ids.len(),
            projector.log()
        );
    }

    /// Each contact's stored version.
    async fn versions(&self, pool: &PgPool) -> HashMap<Uuid, i64> {
        sqlx::query_as::<_, (Uuid, i64)>("select id, version from contacts where workspace_id = $1")
            .bind(self.workspace)
            .fetch_all(pool)
            .await
            .expect("read contact versions")
            .into_iter()
            .collect()
    }
}

/// Applied versions so far, summed over every contact (0 before the first commit).
async fn applied_versions(pool: &PgPool) -> i64 {
    sqlx::query_scalar("select coalesce(sum(version), 0)::int8 from contacts")
        .fetch_one(pool)
        .await
        .expect("sum contact versions")
}

/// Rows whose name is not the one their version's event carries: a half-applied event.
async fn half_applied_rows(pool: &PgPool) -> i64 {
    sqlx::query_scalar("select count(*) from contacts where name is distinct from 'v' || version::text")
        .fetch_one(pool)
        .await
        .expect("count half-applied rows")
}

/// Sessions on `database` waiting for a lock: a write blocked mid-transaction.
async fn dead_letter_count(pool: &PgPool) -> i64 {
    sqlx::query_scalar("select count(*) from dead_letters").fetch_one(pool).await.expect("count dead letters")
}

/// Acknowledged means committed: every event at or below `ack_floor` must have its
/// effect (its version or a later one) in `stored`.
fn assert_acknowledged_events_are_committed(
    events: &[Value],
    sequences: &[u64],
    ack_floor: u64,
    stored: &HashMap<Uuid, i64>,
) {
    for (event, &sequence) in events.iter().zip(sequences).filter(|(_, &sequence)| sequence <= ack_floor) {
        let id: Uuid = event["entityId"].as_str().and_then(|id| id.parse().ok()).expect("entityId");
        let version = event["version"].as_i64().expect("version");
        let held = stored.get(&id).copied().unwrap_or(0);
        assert!(
            held >= version,
            "stream sequence {sequence} (contact {id} version {version}) was acknowledged (ack floor {ack_floor}) \
             but its row holds version {held}: acknowledged before committed"
        );
    }
}

// ---------------------------------------------------------------------------------------
// PostgreSQL outages, made on the test's own database only
// ---------------------------------------------------------------------------------------

pub(crate) async fn admin() -> PgConnection {
    PgConnection::connect(&admin_url()).await.expect("connect to the admin database")
}

/// Ends every session on `database` but the caller's; returns how many it ended.
pub(crate) async fn terminate_sessions(admin: &mut PgConnection, database: &str) -> i64 {
    sqlx::query_scalar(
        "select count(*) from (select pg_terminate_backend(pid) as ended from pg_stat_activity
                               where datname = $1 and pid <> pg_backend_pid()) terminated
         where ended",
    )
    .bind(database)
    .fetch_one(admin)
    .await
    .expect("terminate the database's sessions")
}

/// Makes `database` refuse every new connection (`false`) or accept them again (`true`).
pub(crate) async fn allow_connections(admin: &mut PgConnection, database: &str, allow: bool) {
    admin
        .execute(format!(r#"alter database "{database}" allow_connections {allow}"#).as_str())
        .await
        .expect("alter the database's allow_connections");
}

// ---------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn kill_9_in_the_middle_of_a_large_publish_then_a_restart_ends_with_every_record_at_its_last_version() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let fleet = Fleet::new(200);
    let events = fleet.events(1..=100);
    let total = events.len();
    let jetstream = changes(&nats).await;
    let first = ProjectorProcess::on(&nats.url, &db.url).spawn();
    let (killed, after_kill) = tokio::sync::oneshot::channel::<()>();
    let publisher = tokio::spawn({
        let events = events.clone();
        async move {
            // The second half is published only after the kill, so the kill always lands mid-publish.
            let (before, after) = events.split_at(events.len() / 2);
            let mut sequences = publish_all(&jetstream, before).await;
            after_kill.await.expect("the test signals the kill");
            sequences.extend(publish_all(&jetstream, after).await);
            sequences
        }
    });

    let consuming = eventually(CATCH_UP, || async { applied_versions(&db.pool).await > 0 }).await;
    assert!(consuming, "the first projector applied nothing; its log:\n{}", first.log());
    first.kill().await;
    let ack_floor_at_kill = consumer_info(&nats).await.ack_floor.stream_sequence;
    let stored_at_kill = fleet.versions(&db.pool).await;
    killed.send(()).expect("the publisher waits for the kill");
    let mut second = ProjectorProcess::on(&nats.url, &db.url).spawn();
    let sequences = tokio::time::timeout(CATCH_UP, publisher)
        .await
        .expect("the publish finishes within a minute")
        .expect("the publisher task");

    assert_eq!(sequences, (1..=u64::try_from(total).expect("total")).collect::<Vec<_>>(), "one sequence per event");
    assert_acknowledged_events_are_committed(&events, &sequences, ack_floor_at_kill, &stored_at_kill);
    fleet.assert_all_reach(&db.pool, 100, &second).await;
    assert_eq!(half_applied_rows(&db.pool).await, 0);
    assert_eq!(dead_letter_count(&db.pool).await, 0, "no event was dead-lettered");
    let status = status(&nats.url, &db.url).await;
    assert_eq!(number(&status, "lastSequence"), u64::try_from(total).expect("total"), "{status}");
    assert_eq!(number(&status, "pending"), 0, "{status}");
    assert_eq!(number(&status, "deadLetters"), 0, "{status}");
    second.service.assert_running("after catching up");
    second.stop().await;
}

/// Starts a projector whose first batch waits on a lock on `contacts`, sends it SIGTERM
/// once that batch is in hand, then releases the lock; returns how it ended.
async fn stop_with_a_batch_in_hand(nats: &TestNats, db: &TestDatabase) -> Run {
    let mut lock = db.pool.begin().await.expect("begin the lock transaction");
    lock.execute("lock table contacts in access exclusive mode").await.expect("lock contacts");
    // Two batches of 1,000 at most per stop, whatever the default, so that three stops
    // leave events for the last projector.
    let settings = [("LECTERN_PROJECTOR_BATCH_SIZE", "1000"), ("LECTERN_PROJECTOR_CONCURRENT_BATCHES", "2")];
    let projector = ProjectorProcess::on(&nats.url, &db.url).envs(&settings).spawn();
    let in_hand = eventually(CATCH_UP, || async { db.sessions_waiting_on_a_lock().await > 0 }).await;
    assert!(in_hand, "the projector never started writing a batch; its log:\n{}", projector.log());
    projector.service.signal("TERM");
    let noticed = eventually(PROCESS_TIMEOUT, || async { projector.log().contains("shutting down") }).await;
    assert!(noticed, "the projector did not notice SIGTERM; its log:\n{}", projector.log());
    lock.rollback().await.expect("release the lock");
    projector.service.wait(PROCESS_TIMEOUT).await
}

#[tokio::test]
async fn sigterm_finishes_the_batch_in_hand_commits_acknowledges_and_exits_0() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let fleet = Fleet::new(100);
    let events = fleet.events(1..=61);
    let total = u64::try_from(events.len()).expect("total");
    let sequences = publish_all(&changes(&nats).await, &events).await;

    // Three stops (each one a chance for the race to show), each with the batches it
    // pulled in hand: at most two of 1,000 events, so some are left for the last projector.
    let mut before = 0;
    for stop in 1..=3 {
        let ended = stop_with_a_batch_in_hand(&nats, &db).await;
        let log = ended.stderr;

        assert_eq!(ended.code, Some(0), "stop {stop}: SIGTERM did not end in exit 0; log:\n{log}");
        let consumer = consumer_info(&nats).await;
        let delivered = consumer.delivered.stream_sequence;
        assert!(delivered > before, "stop {stop}: no batch was in hand: {consumer:#?}");
        assert_eq!(half_applied_rows(&db.pool).await, 0, "a row holds a name its version never carried");
        // The batches in hand were committed: every delivered event has its effect.
        assert_acknowledged_events_are_committed(&events, &sequences, delivered, &fleet.versions(&db.pool).await);
        // Acknowledgements the server has not read yet get a moment; lost ones never come.
        let acknowledged = eventually(Duration::from_secs(5), || async {
            let consumer = consumer_info(&nats).await;
            consumer.ack_floor.stream_sequence == delivered && consumer.num_ack_pending == 0
        })
        .await;
        let consumer = consumer_info(&nats).await;
        assert!(
            acknowledged,
            "stop {stop}: the committed batch in hand (stream sequences {}..={delivered}) was not all \
             acknowledged before exit: ack floor {}, {} unacknowledged; log:\n{log}",
            before + 1,
            consumer.ack_floor.stream_sequence,
            consumer.num_ack_pending
        );
        before = delivered;
    }

    let last = ProjectorProcess::on(&nats.url, &db.url).spawn();
    fleet.assert_all_reach(&db.pool, 61, &last).await;
    let status = status(&nats.url, &db.url).await;
    assert_eq!((number(&status, "lastSequence"), number(&status, "pending")), (total, 0), "{status}");
    last.stop().await;
}

#[tokio::test]
async fn after_a_nats_outage_the_projector_reconnects_by_itself_and_applies_what_follows() {
    let mut nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let fleet = Fleet::new(10);
    let mut projector = ProjectorProcess::on(&nats.url, &db.url).spawn();
    publish_all(&changes(&nats).await, &fleet.events(1..=1)).await;
    fleet.assert_all_reach(&db.pool, 1, &projector).await;

    nats.stop();
    tokio::time::sleep(Duration::from_secs(1)).await;
    projector.service.assert_running("while NATS was down");
    nats.restart().await;
    publish_all(&changes(&nats).await, &fleet.events(2..=3)).await;

    fleet.assert_all_reach(&db.pool, 3, &projector).await;
    projector.service.assert_running("after NATS came back");
    projector.stop().await;
}

#[tokio::test]
async fn postgres_connections_cut_again_and_again_lose_nothing_and_dead_letter_nothing() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let fleet = Fleet::new(100);
    let mut projector = ProjectorProcess::on(&nats.url, &db.url).spawn();
    let jetstream = changes(&nats).await;
    let mut admin = admin().await;

    // For three seconds, every 50 ms, end the projector's sessions, while versions arrive.
    let cutting = tokio::spawn({
        let database = db.name.clone();
        async move {
            let until = Instant::now() + Duration::from_secs(3);
            let mut ended = 0;
            while Instant::now() < until {
                ended += terminate_sessions(&mut admin, &database).await;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            ended
        }
    });
    for version in 1..=20 {
        publish_all(&jetstream, &fleet.events(version..=version)).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let ended = tokio::time::timeout(PROCESS_TIMEOUT, cutting).await.expect("the cuts end").expect("cutting task");
    projector.service.assert_running("during the database outage");

    assert!(ended > 0, "no session was ever cut: the test did not make an outage");
    fleet.assert_all_reach(&db.pool, 20, &projector).await;
    assert_eq!(half_applied_rows(&db.pool).await, 0);
    assert_eq!(dead_letter_count(&db.pool).await, 0, "an outage is not a contract violation");
    let acknowledged = eventually(CATCH_UP, || async {
        let status = status(&nats.url, &db.url).await;
        number(&status, "ackFloor") == 2_000 && number(&status, "pending") == 0
    })
    .await;
    assert!(acknowledged, "status after the outage: {}", status(&nats.url, &db.url).await);
    projector.service.assert_running("after the database outage");
    projector.stop().await;
}

#[tokio::test]
async fn events_are_not_acknowledged_while_the_database_refuses_connections_and_apply_once_it_is_back() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let fleet = Fleet::new(50);
    let events = fleet.events(1..=2);
    let total = u64::try_from(events.len()).expect("total");
    let mut projector = ProjectorProcess::on(&nats.url, &db.url).spawn();
    let jetstream = changes(&nats).await;
    let mut admin = admin().await;
    allow_connections(&mut admin, &db.name, false).await;
    terminate_sessions(&mut admin, &db.name).await;

    publish_all(&jetstream, &events).await;
    let tried = eventually(CATCH_UP, || async { projector.log().contains("applying a batch failed") }).await;
    assert!(tried, "the projector never tried to apply the batch; its log:\n{}", projector.log());
    let during = consumer_info(&nats).await;

    assert_eq!(during.ack_floor.stream_sequence, 0, "acknowledged without a database: {during:#?}");
    assert_eq!(
        during.num_pending + u64::try_from(during.num_ack_pending).expect("count"),
        total,
        "every event is still pending or unacknowledged: {during:#?}"
    );
    projector.service.assert_running("while the database refused connections");

    allow_connections(&mut admin, &db.name, true).await;
    fleet.assert_all_reach(&db.pool, 2, &projector).await;
    let acknowledged = eventually(CATCH_UP, || async {
        let status = status(&nats.url, &db.url).await;
        number(&status, "ackFloor") == total && number(&status, "pending") == 0
    })
    .await;
    assert!(acknowledged, "status after the outage: {}", status(&nats.url, &db.url).await);
    assert_eq!(dead_letter_count(&db.pool).await, 0);
    projector.stop().await;
}
