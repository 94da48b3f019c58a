//! PostgreSQL's own faults under the two promises no other read API makes: the changes
//! feed never skips, and nothing acknowledged is lost. A real primary and a
//! `pg_basebackup` standby of it; a failover is the standby, stopped before the last
//! writes, promoted after the primary crashed (`pg_ctl -m immediate stop`); a crash is the
//! same stop and a start again, on a server that writes its WAL out only every ten seconds.
//! The only step taken after a failover is the one `docs/operations.md` names: the
//! projector and the API are pointed at the new primary.

use std::collections::BTreeMap;
use std::time::Duration;

use async_nats::jetstream;
use lectern_read_model::Commit;
use lectern_tests::app::urlencode;
use lectern_tests::nats::TestNats;
use lectern_tests::postgres::TestPostgres;
use lectern_tests::projector::{contact_event, eventually, publish, RunningProjector};
use lectern_tests::{ContactSeed, TestApp};
use serde_json::Value;
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;
use uuid::Uuid;

/// How long the read model and a client following the feed may take to converge.
const CONVERGES_WITHIN: Duration = Duration::from_secs(60);
const CONTACTS: &str = "/v1/contacts/changes";

/// A client mirroring a workspace's contacts through the feed, as the contract tells
/// integrations to: upsert on `upserted`, delete on `removed`, keep the token.
#[derive(Default)]
struct Mirror {
    token: Option<String>,
    records: BTreeMap<String, Value>,
}

impl Mirror {
    /// Follows the feed from its token until `hasMore` is false.
    async fn follow(&mut self, app: &TestApp, key: &str) {
        for _ in 0..1_000 {
            let query = match &self.token {
                Some(token) => format!("{CONTACTS}?limit=100&since={}", urlencode(token)),
                None => format!("{CONTACTS}?limit=100"),
            };
            let reply = app.get(key, &query).await;
            reply.assert_ok();
            for entry in reply.data() {
                let id = entry["id"].as_str().expect("id").to_owned();
                match entry["change"].as_str() {
                    Some("upserted") => {
                        self.records.insert(id, entry["record"].clone());
                    }
                    _ => {
                        self.records.remove(&id);
                    }
                }
            }
            self.token = Some(reply.body["syncToken"].as_str().expect("syncToken").to_owned());
            if reply.body["hasMore"] == Value::Bool(false) {
                return;
            }
        }
        panic!("the feed never said hasMore: false");
    }

    /// Follows the feed until the mirror is the listing (a change reaches the feed a moment
    /// after its commit); whether it got there within [`CONVERGES_WITHIN`].
    async fn converges_to_the_listing(&mut self, app: &TestApp, key: &str) -> bool {
        let deadline = tokio::time::Instant::now() + CONVERGES_WITHIN;
        loop {
            self.follow(app, key).await;
            if self.records == listing(app, key).await {
                return true;
            }
            if tokio::time::Instant::now() > deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// Every contact the listing serves, by id.
async fn listing(app: &TestApp, key: &str) -> BTreeMap<String, Value> {
    app.traverse(key, "/v1/contacts?limit=100")
        .await
        .iter()
        .flat_map(|page| page["data"].as_array().cloned().unwrap_or_default())
        .map(|record| (record["id"].as_str().unwrap_or_default().to_owned(), record))
        .collect()
}

/// (version, name) of every contact row of `workspace`.
async fn rows(pool: &PgPool, workspace: Uuid) -> BTreeMap<Uuid, (i64, Option<String>)> {
    let rows: Vec<(Uuid, i64, Option<String>)> =
        sqlx::query_as("select id, version, name from contacts where workspace_id = $1")
            .bind(workspace)
            .fetch_all(pool)
            .await
            .unwrap_or_default();
    rows.into_iter().map(|(id, version, name)| (id, (version, name))).collect()
}

/// Publishes version `version` of each contact, named after the version.
async fn publish_versions(client: &async_nats::Client, workspace: Uuid, ids: &[Uuid], version: i64) {
    let kind = if version == 1 { "created" } else { "updated" };
    for id in ids {
        publish(client, &contact_event(kind, workspace, *id, version, &format!("{id} v{version}"))).await;
    }
}

/// Waits until JetStream has every message of the stream acknowledged by the projectors.
async fn all_acknowledged(client: &async_nats::Client) {
    let context = jetstream::new(client.clone());
    let acknowledged = eventually(CONVERGES_WITHIN, || async {
        let Ok(mut stream) = context.get_stream(lectern_projector::stream::STREAM).await else { return false };
        let Ok(info) = stream.info().await else { return false };
        let last = info.state.last_sequence;
        let Ok(consumer) = stream.consumer_info(lectern_projector::stream::CONSUMER).await else { return false };
        consumer.ack_floor.stream_sequence == last && consumer.num_ack_pending == 0
    })
    .await;
    assert!(acknowledged, "the projector did not acknowledge every message within {CONVERGES_WITHIN:?}");
}

fn wal_position(lsn: &str) -> u64 {
    let (high, low) = lsn.split_once('/').expect("an LSN is two hex numbers");
    (u64::from_str_radix(high, 16).expect("hex") << 32) | u64::from_str_radix(low, 16).expect("hex")
}

async fn pool(url: &str) -> PgPool {
    PgPoolOptions::new().max_connections(8).connect(url).await.expect("connect")
}

/// The rules: after a failover to an asynchronous standby that missed the last writes,
/// with nothing done but pointing the services at the new primary, (1) every event JetStream
/// saw acknowledged on the old primary is in the read model at its last version, and (2) a
/// client following a token it was handed after the standby's last write converges to the
/// listing, with what is written on the new primary too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_failover_to_a_standby_that_missed_the_last_writes_nothing_acknowledged_is_lost_and_no_change_skipped()
{
    let mut primary = TestPostgres::start_primary().await;
    lectern_api::reads::create_and_migrate(&primary.url()).await.expect("migrate the primary");
    let nats = TestNats::start().await;
    let client = nats.client().await;
    let on_primary = pool(&primary.url()).await;
    let projector = RunningProjector::start_consuming(&nats.url, on_primary.clone()).await;
    let app = TestApp::spawn(on_primary.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;

    // What the standby will have: 30 contacts, followed by a client.
    let first: Vec<Uuid> = (0..30).map(|_| Uuid::new_v4()).collect();
    publish_versions(&client, workspace, &first, 1).await;
    all_acknowledged(&client).await;
    let mut standby = primary.start_standby(None).await;
    let mut mirror = Mirror::default();
    assert!(mirror.converges_to_the_listing(&app, &key).await, "the feed before the failover");
    let written = wal_position(&primary.current_lsn().await);
    let replayed =
        eventually(CONVERGES_WITHIN, || async { wal_position(&standby.replay_lsn().await) >= written }).await;
    assert!(replayed, "the standby did not replay the first writes");
    standby.stop().await;

    // What only the old primary gets: every contact renamed, 20 more, all acknowledged, and
    // the client served all of it.
    let second: Vec<Uuid> = (0..20).map(|_| Uuid::new_v4()).collect();
    publish_versions(&client, workspace, &first, 2).await;
    publish_versions(&client, workspace, &second, 1).await;
    all_acknowledged(&client).await;
    assert!(mirror.converges_to_the_listing(&app, &key).await, "the feed on the old primary");
    assert_eq!(mirror.records.len(), 50);

    // The primary is lost; the standby, which missed all of that, is promoted.
    projector.stop().await;
    primary.stop().await;
    standby.start().await;
    standby.promote().await;
    let on_standby = pool(&standby.url()).await;
    let projector = RunningProjector::start_consuming(&nats.url, on_standby.clone()).await;
    let app = TestApp::spawn(on_standby.clone()).await;

    // Life goes on on the new primary.
    publish_versions(&client, workspace, &second[..10], 2).await;
    let third: Vec<Uuid> = (0..5).map(|_| Uuid::new_v4()).collect();
    publish_versions(&client, workspace, &third, 1).await;

    let mut expected: BTreeMap<Uuid, (i64, Option<String>)> = BTreeMap::new();
    for id in &first {
        expected.insert(*id, (2, Some(format!("{id} v2"))));
    }
    for (index, id) in second.iter().enumerate() {
        let version = if index < 10 { 2 } else { 1 };
        expected.insert(*id, (version, Some(format!("{id} v{version}"))));
    }
    for id in &third {
        expected.insert(*id, (1, Some(format!("{id} v1"))));
    }
    let restored = eventually(CONVERGES_WITHIN, || async { rows(&on_standby, workspace).await == expected }).await;
    let found = rows(&on_standby, workspace).await;
    let behind: Vec<String> = expected
        .iter()
        .filter(|(id, want)| found.get(*id) != Some(*want))
        .map(|(id, want)| format!("{id}: {:?}, not {want:?}", found.get(id)))
        .collect();
    assert!(
        restored,
        "{} of {} records are not at their last published version: {behind:?}",
        behind.len(),
        expected.len()
    );

    assert!(
        mirror.converges_to_the_listing(&app, &key).await,
        "the client that followed the old primary skipped changes: {} records in its mirror, {} listed",
        mirror.records.len(),
        listing(&app, &key).await.len()
    );
    assert_eq!(mirror.records.len(), 55);
    projector.stop().await;
}

/// Settings of a server that writes asynchronous commits out only every ten seconds, so
/// that a crash within that time loses them, as a crash of a busy server does.
const SLOW_WAL_WRITER: &str = "wal_writer_delay = '10s'\nwal_writer_flush_after = 0\n";

/// The rule: a crash that loses commits never makes the feed skip. A client is served a
/// change committed without waiting for its flush (as the projector commits); the server
/// crashes before writing it out; whatever is written after the restart still reaches the
/// client, whose token must not be past what the server hands out again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_that_loses_commits_never_makes_a_client_skip_what_is_written_after_it() {
    let mut server = TestPostgres::start_new_with(SLOW_WAL_WRITER).await;
    lectern_api::reads::create_and_migrate(&server.url()).await.expect("migrate");
    let writer = pool(&server.url()).await;
    let app = TestApp::spawn(pool(&server.url()).await).await;
    let (workspace, key) = app.workspace_with_key().await;
    // The key survives the crash: everything so far is written out.
    sqlx::query("select read_model_flush('test')").execute(&writer).await.expect("write the WAL out");
    let mut mirror = Mirror::default();
    mirror.follow(&app, &key).await;

    let before = ContactSeed::named("Written before the crash");
    before.write(&writer, workspace, Commit::OnItsOwnBeforeFlush).await;
    assert!(mirror.converges_to_the_listing(&app, &key).await, "the feed before the crash");
    let served_before = mirror.records.contains_key(&before.id.to_string());

    server.stop().await;
    server.start().await;
    let writer = pool(&server.url()).await;
    let app = TestApp::spawn(pool(&server.url()).await).await;
    let after = ContactSeed::named("Written after the crash");
    after.write(&writer, workspace, Commit::OnItsOwnBeforeFlush).await;

    assert!(
        mirror.converges_to_the_listing(&app, &key).await,
        "the client skipped what was written after the crash: its mirror {:?}",
        mirror.records.keys().collect::<Vec<_>>()
    );
    assert!(mirror.records.contains_key(&after.id.to_string()));
    if served_before {
        assert!(mirror.records.contains_key(&before.id.to_string()), "a change the feed served was lost in the crash");
    }
}

/// The rule: nothing acknowledged is lost in a crash. The projector commits its batches
/// without waiting for their flush and acknowledges them after a flush barrier; on a server
/// that writes asynchronous commits out only every ten seconds, every event JetStream saw
/// acknowledged is still in the read model after a crash straight after the last
/// acknowledgement, before any projector runs again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_event_acknowledged_before_a_crash_is_in_the_read_model_after_it() {
    let mut server = TestPostgres::start_new_with(SLOW_WAL_WRITER).await;
    lectern_api::reads::create_and_migrate(&server.url()).await.expect("migrate");
    let nats = TestNats::start().await;
    let client = nats.client().await;
    let projector = RunningProjector::start_consuming(&nats.url, pool(&server.url()).await).await;
    let workspace = Uuid::new_v4();
    let ids: Vec<Uuid> = (0..40).map(|_| Uuid::new_v4()).collect();
    publish_versions(&client, workspace, &ids, 1).await;
    publish_versions(&client, workspace, &ids, 2).await;
    all_acknowledged(&client).await;
    projector.stop().await;

    server.stop().await;
    server.start().await;
    let found = rows(&pool(&server.url()).await, workspace).await;
    let lost = ids.iter().filter(|id| found.get(*id).map(|(version, _)| *version) != Some(2)).count();
    assert_eq!(lost, 0, "{lost} of {} acknowledged records were lost or behind after the crash", ids.len());
}

/// The rule: a batch acknowledged straight after its own commit (no barrier connection,
/// as after a barrier failed) is on disk when acknowledged, even when it changed nothing
/// and the server is set not to wait for flushes. A batch is committed without waiting for
/// its flush; its messages, handed back, come again and are applied as a batch that
/// changes nothing (the version guard); a crash straight after keeps the first commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redelivered_batch_that_changes_nothing_is_on_disk_when_it_is_acknowledged() {
    use lectern_projector::apply::{apply_batch, CommitMode, Received};

    let mut server = TestPostgres::start_new_with(SLOW_WAL_WRITER).await;
    lectern_api::reads::create_and_migrate(&server.url()).await.expect("migrate");
    let projector_pool = pool(&server.url()).await;
    let workspace = Uuid::new_v4();
    let ids: Vec<Uuid> = (0..10).map(|_| Uuid::new_v4()).collect();
    let batch: Vec<Received> = ids
        .iter()
        .enumerate()
        .map(|(index, id)| Received {
            subject: format!("changes.{workspace}.contacts.{id}"),
            stream_sequence: u64::try_from(index).unwrap_or(0) + 1,
            payload: contact_event("created", workspace, *id, 1, "First").to_string().into_bytes(),
        })
        .collect();
    apply_batch(&projector_pool, &batch, CommitMode::BeforeFlush).await.expect("the first delivery");

    apply_batch(&projector_pool, &batch, CommitMode::Flushed).await.expect("the redelivery, changing nothing");
    // Acknowledged now; the server crashes.
    server.stop().await;
    server.start().await;

    let found = rows(&pool(&server.url()).await, workspace).await;
    assert_eq!(found.len(), ids.len(), "the batch acknowledged after its own commit was not on disk");
}
