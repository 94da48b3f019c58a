//! PostgreSQL's own faults under the two promises no other read API makes: the changes
//! feed never skips, and nothing acknowledged is lost. A real primary and a
//! `pg_basebackup` standby of it; a failover is the standby, stopped before the last
//! writes, promoted after the primary crashed (`pg_ctl -m immediate stop`); a crash is the
//! same stop and a start again, on a server that writes its WAL out only every ten seconds.
//! The only step taken after a failover is the one `docs/operations.md` names: the
//! projector and the API are pointed at the new primary.

use lectern_projector::stream::StreamId;
use lectern_read_model::Commit;
use lectern_tests::nats::TestNats;
use lectern_tests::postgres::TestPostgres;
use lectern_tests::projector::{contact_event, RunningProjector};
use lectern_tests::{ContactSeed, TestApp};
use sqlx::Connection;
use uuid::Uuid;

use crate::mirror::{
    all_acknowledged, expect_versions, listing, pool, publish_versions, reach, replayed, rows, Expected, Mirror, Stack,
};

/// The rules: after a failover to an asynchronous standby that missed the last writes,
/// with nothing done but pointing the services at the new primary, (1) every event JetStream
/// saw acknowledged on the old primary is in the read model at its last version, and (2) a
/// client following a token it was handed after the standby's last write converges to the
/// listing, with what is written on the new primary too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_failover_to_a_standby_that_missed_the_last_writes_nothing_acknowledged_is_lost_and_no_change_skipped()
{
    let mut primary = TestPostgres::start_primary().await;
    let Stack { nats, client, projector, app, workspace, key, .. } = Stack::on(&primary).await;

    // What the standby will have: 30 contacts, followed by a client.
    let first: Vec<Uuid> = (0..30).map(|_| Uuid::new_v4()).collect();
    publish_versions(&client, workspace, &first, 1).await;
    all_acknowledged(&client).await;
    let mut standby = primary.start_standby(None).await;
    let mut mirror = Mirror::default();
    assert!(mirror.converges_to_the_listing(&app, &key).await, "the feed before the failover");
    replayed(&primary, &standby).await;
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

    let mut expected = Expected::new();
    expect_versions(&mut expected, &first, 2);
    expect_versions(&mut expected, &second[..10], 2);
    expect_versions(&mut expected, &second[10..], 1);
    expect_versions(&mut expected, &third, 1);
    reach(&on_standby, workspace, &expected).await.unwrap_or_else(|behind| panic!("{behind}"));

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
    apply_batch(&projector_pool, StreamId::UNNAMED, &batch, CommitMode::BeforeFlush).await.expect("the first delivery");

    apply_batch(&projector_pool, StreamId::UNNAMED, &batch, CommitMode::Flushed)
        .await
        .expect("the redelivery, changing nothing");
    // Acknowledged now; the server crashes.
    server.stop().await;
    server.start().await;

    let found = rows(&pool(&server.url()).await, workspace).await;
    assert_eq!(found.len(), ids.len(), "the batch acknowledged after its own commit was not on disk");
}

/// The rule: the history a server's first write registers survives a crash, whatever that
/// write's commit mode. A dump is restored into a fresh server whose WAL writer is slow; the
/// first transaction there that asks for the history (and so registers it) commits without
/// waiting for its flush, as the projector's batches do, and the server crashes a moment
/// later: the history read before the crash is the one read after it. Before, the
/// registration went with the lost commit, the next transaction registered another id, and
/// every token of the first was told to start over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_just_after_a_history_is_registered_keeps_its_id() {
    let original = TestPostgres::start_new().await;
    lectern_api::reads::create_and_migrate(&original.url()).await.expect("migrate");
    let dump = original.dump().await;
    let mut copy = TestPostgres::start_new_with(SLOW_WAL_WRITER).await;
    copy.restore(&dump).await;
    let mut writer = sqlx::PgConnection::connect(&copy.url()).await.expect("connect to the copy");
    let mut registering = writer.begin().await.expect("begin");
    sqlx::query("set local synchronous_commit = off").execute(&mut *registering).await.expect("set");
    let before: Option<i64> =
        sqlx::query_scalar("select read_model_server_history()").fetch_one(&mut *registering).await.expect("read");
    registering.commit().await.expect("commit");
    let original_history: Option<i64> = sqlx::query_scalar("select read_model_server_history()")
        .fetch_one(&pool(&original.url()).await)
        .await
        .expect("read");
    assert!(before.is_some() && before != original_history, "the copy registered no history of its own");
    drop(writer);

    copy.stop().await;
    copy.start().await;
    let after: Option<i64> = sqlx::query_scalar("select read_model_server_history()")
        .fetch_one(&pool(&copy.url()).await)
        .await
        .expect("read");
    assert_eq!(after, before, "the crash took back the history tokens were handed out in");
}
