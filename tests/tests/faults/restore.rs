//! A logical backup restored into a fresh PostgreSQL server: `pg_dump` on the old server,
//! `createdb` and `pg_restore` on a new one, as an operator recovers from the loss of a
//! server, moves to another host or a managed service, or upgrades by dump. The new server
//! keeps every row's stored position but hands out transaction ids from the start again,
//! and the dump lacks every event applied after it. The only step taken after the restore is
//! the one `docs/operations.md` names: the projector and the API are pointed at the new
//! server.

use lectern_api::keys::Scope;
use lectern_read_model::Commit;
use lectern_tests::app::urlencode;
use lectern_tests::binaries::Run;
use lectern_tests::nats::TestNats;
use lectern_tests::postgres::TestPostgres;
use lectern_tests::process::Launch;
use lectern_tests::projector::{item_created, item_data, publish, RunningProjector};
use lectern_tests::{ContactSeed, TestApp};
use serde_json::{json, Value};
use uuid::Uuid;

use crate::mirror::{
    all_acknowledged, expect_versions, listing_of, pool, publish_versions, reach, rows, Expected, Mirror, Stack,
    CONVERGES_WITHIN,
};

/// An `item.archived` event: the item leaves the listing, the feed says `removed`.
fn item_archived(workspace: Uuid, id: Uuid, version: i64) -> Value {
    json!({
        "eventId": Uuid::new_v4(),
        "type": "item.archived",
        "workspaceId": workspace,
        "entityId": id,
        "version": version,
        "occurredAt": "2026-11-21T10:15:30.120Z",
    })
}

/// `lectern-projector <args>` against the given NATS and database, to its end.
async fn projector_command(nats_url: &str, database_url: &str, args: &[&str]) -> Run {
    Launch::projector()
        .args(args)
        .runner_path()
        .env("NATS_URL", nats_url)
        .env("DATABASE_URL", database_url)
        .run(CONVERGES_WITHIN)
        .await
}

/// Both resources of a workspace, mirrored by one integration.
struct Integration {
    contacts: Mirror,
    items: Mirror,
}

impl Integration {
    fn new() -> Self {
        Self { contacts: Mirror::of("contacts"), items: Mirror::of("items") }
    }

    /// Whether both mirrors converge to their listings; the error says which did not and
    /// by how much.
    async fn converges(&mut self, app: &TestApp, key: &str) -> Result<(), String> {
        let mut behind = Vec::new();
        for mirror in [&mut self.contacts, &mut self.items] {
            if !mirror.converges_to_the_listing(app, key).await {
                let listed = listing_of(app, key, mirror.resource()).await.len();
                behind.push(format!("{}: {} mirrored, {listed} listed", mirror.resource(), mirror.records.len()));
            }
        }
        if behind.is_empty() {
            Ok(())
        } else {
            Err(behind.join("; "))
        }
    }
}

/// The rules: after a restore by `pg_dump`/`pg_restore` into a fresh server, with nothing
/// done but pointing the services at it, (1) the projector applies by itself every event
/// JetStream saw acknowledged after the dump, (2) a new integration syncing from the
/// beginning gets every record, (3) an integration holding a token from before the dump
/// and (4) one holding a token from after it (changes the restored database lacks) both
/// converge to the listing by following their tokens, with what is written after the
/// restore too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restore_by_dump_into_a_fresh_server_the_feed_keeps_its_promises_and_nothing_acknowledged_is_lost() {
    let mut old_server = TestPostgres::start_new().await;
    lectern_api::reads::create_and_migrate(&old_server.url()).await.expect("migrate the old server");
    let nats = TestNats::start().await;
    let client = nats.client().await;
    let on_old = pool(&old_server.url()).await;
    let projector = RunningProjector::start_consuming(&nats.url, on_old.clone()).await;
    let app = TestApp::spawn(on_old.clone()).await;
    let workspace = Uuid::new_v4();
    let key = app.key(workspace, &[Scope::ContactsRead, Scope::ItemsRead]).await;

    // What the dump holds: 200 contacts and 100 items, mirrored by two integrations.
    let contacts: Vec<Uuid> = (0..200).map(|_| Uuid::new_v4()).collect();
    let items: Vec<Uuid> = (0..100).map(|_| Uuid::new_v4()).collect();
    publish_versions(&client, workspace, &contacts, 1).await;
    for id in &items {
        let data = item_data(&format!("{id} v1"), json!({"amount": "10.00", "currency": "EUR"}), Value::Null);
        publish(&client, &item_created(workspace, *id, data)).await;
    }
    all_acknowledged(&client).await;
    let mut before_the_dump = Integration::new();
    before_the_dump.converges(&app, &key).await.expect("the feed before the dump");
    let mut after_the_dump = Integration::new();
    after_the_dump.converges(&app, &key).await.expect("the feed before the dump");
    projector_command(&nats.url, &old_server.url(), &["verify"]).await.assert_success();
    let dump = old_server.dump().await;

    // What only the old server gets: 30 contacts renamed, 10 items archived, 20 new
    // contacts, all acknowledged and served to one of the integrations.
    publish_versions(&client, workspace, &contacts[..30], 2).await;
    for id in &items[..10] {
        publish(&client, &item_archived(workspace, *id, 2)).await;
    }
    let later: Vec<Uuid> = (0..20).map(|_| Uuid::new_v4()).collect();
    publish_versions(&client, workspace, &later, 1).await;
    all_acknowledged(&client).await;
    after_the_dump.converges(&app, &key).await.expect("the feed on the old server after the dump");
    assert_eq!(after_the_dump.contacts.records.len(), 220);
    assert_eq!(after_the_dump.items.records.len(), 90);

    // The old server is lost; the dump is restored into a fresh one.
    projector.stop().await;
    old_server.stop().await;
    let new_server = TestPostgres::start_new().await;
    new_server.restore(&dump).await;
    lectern_api::reads::create_and_migrate(&new_server.url()).await.expect("migrate the restored database");

    // Before any projector runs on it, `status` says what the restored database lacks and
    // that the verify it holds ran before the restore.
    let status = projector_command(&nats.url, &new_server.url(), &["status", "--output", "json"]).await;
    status.assert_success();
    let status = status.json();
    assert_eq!(status["acknowledgedNotHeld"], json!(60), "the events applied after the dump: {status}");
    assert_eq!(status["lastVerify"]["inThisHistory"], json!(false), "{status}");
    let text = projector_command(&nats.url, &new_server.url(), &["status"]).await.stdout;
    assert!(text.contains("acknowledged but not in this database 60"), "{text}");
    assert!(text.contains("run `lectern-projector verify`"), "{text}");

    let on_new = pool(&new_server.url()).await;
    let projector = RunningProjector::start_consuming(&nats.url, on_new.clone()).await;
    let app = TestApp::spawn(on_new.clone()).await;

    // Life goes on on the new server.
    publish_versions(&client, workspace, &contacts[30..40], 2).await;

    let mut expected = Expected::new();
    expect_versions(&mut expected, &contacts[..40], 2);
    expect_versions(&mut expected, &contacts[40..], 1);
    expect_versions(&mut expected, &later, 1);
    reach(&on_new, workspace, &expected)
        .await
        .unwrap_or_else(|behind| panic!("after the restore, the projector did not apply the lost events: {behind}"));

    let mut from_the_beginning = Integration::new();
    from_the_beginning.converges(&app, &key).await.unwrap_or_else(|behind| {
        panic!("a new integration syncing from the beginning after the restore did not get every record: {behind}")
    });
    assert_eq!(from_the_beginning.contacts.records.len(), 220);
    assert_eq!(from_the_beginning.items.records.len(), 90);
    before_the_dump.converges(&app, &key).await.unwrap_or_else(|behind| {
        panic!("the integration holding a token from before the dump skipped changes: {behind}")
    });
    after_the_dump.converges(&app, &key).await.unwrap_or_else(|behind| {
        panic!("the integration holding a token from after the dump skipped changes: {behind}")
    });
    assert_eq!(after_the_dump.contacts.records, from_the_beginning.contacts.records);
    assert_eq!(after_the_dump.items.records, from_the_beginning.items.records);
    let renamed_after_the_restore = contacts[35].to_string();
    assert_eq!(
        after_the_dump.contacts.records[&renamed_after_the_restore]["name"],
        json!(format!("{renamed_after_the_restore} v2"))
    );
    let status = projector_command(&nats.url, &new_server.url(), &["status", "--output", "json"]).await.json();
    assert_eq!(status["acknowledgedNotHeld"], json!(0), "the projector applied the lost events again: {status}");
    projector.stop().await;
}

/// The rule: where the feed truly cannot continue from a token, the client is told to start
/// over, in a form it can act on, never answered with empty pages. A copy of the data
/// directory started as it was (no `recovery.signal`) goes back in time without starting a
/// new history, so positions handed out after the copy are handed out again: a client
/// holding one gets a 400 whose `details.startOver` is true; one holding a token from
/// before the copy goes on; starting over converges.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_from_after_a_restored_copy_was_taken_is_refused_with_start_over_never_empty_pages() {
    let mut server = TestPostgres::start_primary().await;
    lectern_api::reads::create_and_migrate(&server.url()).await.expect("migrate");
    let writer = pool(&server.url()).await;
    let app = TestApp::spawn(pool(&server.url()).await).await;
    let (workspace, key) = app.workspace_with_key().await;
    for index in 0..10 {
        ContactSeed::named(&format!("Before the copy {index}"))
            .write(&writer, workspace, Commit::OnItsOwnFlushed)
            .await;
    }
    let mut from_before_the_copy = Mirror::default();
    assert!(from_before_the_copy.converges_to_the_listing(&app, &key).await, "the feed before the copy");
    let mut copy = server.start_copy().await;
    copy.stop().await;

    for index in 0..20 {
        ContactSeed::named(&format!("After the copy {index}")).write(&writer, workspace, Commit::OnItsOwnFlushed).await;
    }
    let mut from_after_the_copy = Mirror::default();
    assert!(from_after_the_copy.converges_to_the_listing(&app, &key).await, "the feed after the copy");
    let token = from_after_the_copy.token.clone().expect("a token");

    // The server is lost and the copy restored as it was.
    server.stop().await;
    copy.start().await;
    let writer = pool(&copy.url()).await;
    let app = TestApp::spawn(pool(&copy.url()).await).await;
    ContactSeed::named("Written on the restored copy").write(&writer, workspace, Commit::OnItsOwnFlushed).await;

    let reply = app.get(&key, &format!("/v1/contacts/changes?since={}", urlencode(&token))).await;
    reply.assert_error(400, "VALIDATION_ERROR");
    assert!(reply.says_start_over(), "a token the database went back past was not told to start over: {}", reply.text);
    assert!(
        reply.details().first().is_some_and(|detail| detail.contains("restored")),
        "the refusal does not say why: {}",
        reply.text
    );

    assert!(
        from_before_the_copy.converges_to_the_listing(&app, &key).await,
        "the client holding a token from before the copy did not converge"
    );
    let mut started_over = Mirror::default();
    assert!(started_over.converges_to_the_listing(&app, &key).await, "starting over did not converge");
    assert_eq!(started_over.records.len(), 11);
}

/// The rules: after a point-in-time restore (a base backup, `recovery.signal`, the WAL
/// archive replayed up to a target, then promotion onto a new timeline), with nothing done
/// but pointing the services at it, the projector applies again every event acknowledged
/// after the target, and a client holding a token from after the target converges to the
/// listing, with what is written after the restore too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_point_in_time_restore_nothing_acknowledged_is_lost_and_no_change_skipped() {
    let mut primary = TestPostgres::start_archiving().await;
    let Stack { nats, client, pool: on_primary, projector, app, workspace, key } = Stack::on(&primary).await;

    let first: Vec<Uuid> = (0..30).map(|_| Uuid::new_v4()).collect();
    publish_versions(&client, workspace, &first, 1).await;
    all_acknowledged(&client).await;
    let mut backup = primary.base_backup().await;

    // Kept by the restore: every contact renamed.
    publish_versions(&client, workspace, &first, 2).await;
    all_acknowledged(&client).await;
    sqlx::query("select read_model_flush('test')").execute(&on_primary).await.expect("flush");
    let target: String =
        sqlx::query_scalar("select pg_current_wal_insert_lsn()::text").fetch_one(&on_primary).await.expect("lsn");

    // Lost by the restore, though acknowledged and served: 20 more contacts.
    let second: Vec<Uuid> = (0..20).map(|_| Uuid::new_v4()).collect();
    publish_versions(&client, workspace, &second, 1).await;
    all_acknowledged(&client).await;
    let mut mirror = Mirror::default();
    assert!(mirror.converges_to_the_listing(&app, &key).await, "the feed before the restore");
    assert_eq!(mirror.records.len(), 50);
    primary.archive_wal().await;

    projector.stop().await;
    primary.stop().await;
    backup.start_recovering_to(&primary, &target).await;
    let on_restored = pool(&backup.url()).await;
    let timeline: i32 =
        sqlx::query_scalar("select read_model_timeline()").fetch_one(&on_restored).await.expect("timeline");
    assert!(timeline > 1, "the restore did not end on a new timeline");
    let restored = rows(&on_restored, workspace).await;
    assert_eq!(
        (restored.len(), restored.values().filter(|(version, _)| *version == 2).count()),
        (30, 30),
        "the restore did not stop at its target"
    );
    let projector = RunningProjector::start_consuming(&nats.url, on_restored.clone()).await;
    let app = TestApp::spawn(on_restored.clone()).await;
    publish_versions(&client, workspace, &second[..5], 2).await;

    let mut expected = Expected::new();
    expect_versions(&mut expected, &first, 2);
    expect_versions(&mut expected, &second[..5], 2);
    expect_versions(&mut expected, &second[5..], 1);
    reach(&on_restored, workspace, &expected)
        .await
        .unwrap_or_else(|behind| panic!("after the point-in-time restore, events acknowledged were lost: {behind}"));
    assert!(
        mirror.converges_to_the_listing(&app, &key).await,
        "the client holding a token from after the restore's target skipped changes: {} mirrored",
        mirror.records.len()
    );
    assert_eq!(mirror.records.len(), 50);
    projector.stop().await;
}
