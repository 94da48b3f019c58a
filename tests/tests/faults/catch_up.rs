//! A database that lacks events it once held (a dump restored into a fresh server, a
//! failover to a standby that missed the last commits) takes them back from the stream
//! before anything else is applied to it. The API and the projector reach PostgreSQL
//! through a TCP forwarder standing for a DNS name, so nothing is restarted.
//!
//! Found by the nemesis (seed 2, its first schedule: a projector killed, one dump restored
//! twice): an upstream sent an old event again right after the restore; the restored
//! database held an even older version of the record, so the old event was newer than what
//! it held and was applied before the ledger had applied again the newer versions the
//! dump lacked. Clients following the feed from their tokens were served the record going
//! back to a version older than one they already had.

use std::time::{Duration, Instant};

use lectern_tests::forwarder::Forwarder;
use lectern_tests::postgres::TestPostgres;
use sqlx::{Connection, PgConnection};
use uuid::Uuid;

use crate::mirror::{
    all_acknowledged, expect_versions, listing, publish_versions, reach, replayed, Expected, Mirror, Stack,
};

/// Longer than two turns of the ledger (`RECONCILE_EVERY`, 5 s): the window in which the
/// older version was served.
const WATCHED_FOR: Duration = Duration::from_secs(12);

/// The names of the records in `mirror` that are not at version `version`.
fn not_at(mirror: &Mirror, version: i64) -> Vec<String> {
    let suffix = format!(" v{version}");
    mirror
        .records
        .values()
        .filter_map(|record| record["name"].as_str())
        .filter(|name| !name.ends_with(&suffix))
        .map(str::to_owned)
        .collect()
}

/// The rule: once a client has been served version 3 of a record, it is never served an
/// older one, even when the database behind the address is replaced by a restore of a
/// dump that holds version 1 and the upstream sends version 2 again at that moment. The
/// record ends at version 3 everywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_event_sent_again_after_a_restore_never_takes_a_record_back_to_an_older_version() {
    let original = TestPostgres::start_new().await;
    lectern_api::reads::create_and_migrate(&original.url()).await.expect("migrate the original");
    let address = Forwarder::start(original.port).await;
    let Stack { nats: _running, client, projector, app, workspace, key, .. } =
        Stack::at(&address.url_for("lectern")).await;

    let contacts: Vec<Uuid> = (0..10).map(|_| Uuid::new_v4()).collect();
    publish_versions(&client, workspace, &contacts, 1).await;
    all_acknowledged(&client).await;
    let dump = original.dump().await;
    publish_versions(&client, workspace, &contacts, 2).await;
    publish_versions(&client, workspace, &contacts, 3).await;
    all_acknowledged(&client).await;
    let mut follower = Mirror::default();
    assert!(follower.converges_to_the_listing(&app, &key).await, "the feed before the restore");
    assert_eq!(not_at(&follower, 3), Vec::<String>::new());

    // The dump restored into a fresh server behind the same address; at once the upstream
    // sends version 2 of every record again, as new messages.
    let restored = TestPostgres::start_new().await;
    restored.restore(&dump).await;
    address.point_at(restored.port);
    publish_versions(&client, workspace, &contacts, 2).await;

    let until = Instant::now() + WATCHED_FOR;
    while Instant::now() < until {
        // A 503 while the connections move is allowed; an older version never is.
        let _ = follower.try_follow(&app, &key).await;
        let behind = not_at(&follower, 3);
        assert!(behind.is_empty(), "the client was served older versions after the restore: {behind:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let converged = follower.converges_to_the_listing(&app, &key).await;
    let listed = listing(&app, &key).await;
    assert!(converged, "the feed after the restore: mirrored {:?}, listed {listed:?}", not_at(&follower, 3));
    assert_eq!(listed.len(), contacts.len());
    let names: Vec<&str> = listed.values().filter_map(|record| record["name"].as_str()).collect();
    assert!(names.iter().all(|name| name.ends_with(" v3")), "{names:?}");
    projector.stop().await;
}

/// The rule, when a batch in hand holds the acknowledgement floor back: what was
/// acknowledged past that floor is taken back after a restore too, before the held message
/// is applied. Found by the nemesis (seed 2 replayed on a loaded machine: a projector killed
/// with a batch in hand, one dump restored twice): the ledger took back only what lay below
/// the floor, marked the restored database caught up, and the killed projector's batch,
/// redelivered after the ack wait, took records back to an older version than clients had.
/// Here the test holds a message itself (extending its ack wait) while the projector
/// acknowledges everything after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_was_acknowledged_past_a_batch_in_hand_is_taken_back_before_that_batch_after_a_restore() {
    let original = TestPostgres::start_new().await;
    lectern_api::reads::create_and_migrate(&original.url()).await.expect("migrate the original");
    let address = Forwarder::start(original.port).await;
    let Stack { nats, client, pool, projector, app, workspace, key } = Stack::at(&address.url_for("lectern")).await;
    let contacts: Vec<Uuid> = (0..10).map(|_| Uuid::new_v4()).collect();
    publish_versions(&client, workspace, &contacts, 1).await;
    all_acknowledged(&client).await;
    let dump = original.dump().await;

    // Version 2 of the first contact is held unacknowledged, as by a projector killed with
    // it in hand; the rest of version 2, and version 3, are applied and acknowledged.
    projector.stop().await;
    publish_versions(&client, workspace, &contacts, 2).await;
    let consumer: async_nats::jetstream::consumer::PullConsumer = async_nats::jetstream::new(client.clone())
        .get_stream(lectern_projector::stream::STREAM)
        .await
        .expect("the stream")
        .get_consumer(lectern_projector::stream::CONSUMER)
        .await
        .expect("the projector's consumer");
    let mut fetched = consumer.fetch().max_messages(1).messages().await.expect("fetch one message");
    let held = futures_util::StreamExt::next(&mut fetched).await.expect("a message").expect("a message");
    let release = tokio_util::sync::CancellationToken::new();
    let holder = tokio::spawn({
        let release = release.clone();
        async move {
            while !release.is_cancelled() {
                held.ack_with(async_nats::jetstream::AckKind::Progress).await.expect("extend the ack wait");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            held.ack_with(async_nats::jetstream::AckKind::Nak(None)).await.expect("hand it back");
        }
    });
    let projector = lectern_tests::projector::RunningProjector::start_consuming(&nats.url, pool.clone()).await;
    publish_versions(&client, workspace, &contacts, 3).await;
    let mut expected = Expected::new();
    expect_versions(&mut expected, &contacts, 3);
    reach(&pool, workspace, &expected).await.expect("version 3 everywhere");
    let mut follower = Mirror::default();
    assert!(follower.converges_to_the_listing(&app, &key).await, "the feed before the restore");
    assert_eq!(not_at(&follower, 3), Vec::<String>::new());

    // The dump (version 1) restored behind the address; then the held message comes back.
    let restored = TestPostgres::start_new().await;
    restored.restore(&dump).await;
    address.point_at(restored.port);
    release.cancel();
    holder.await.expect("the holder");

    let until = Instant::now() + WATCHED_FOR;
    while Instant::now() < until {
        let _ = follower.try_follow(&app, &key).await;
        let behind = not_at(&follower, 3);
        assert!(behind.is_empty(), "the client was served older versions after the restore: {behind:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(follower.converges_to_the_listing(&app, &key).await, "the feed after the restore");
    assert_eq!(not_at(&follower, 3), Vec::<String>::new());
    projector.stop().await;
}

/// What the standby misses, in the order it is published.
#[derive(Clone, Copy)]
enum Missed {
    /// Version N of the ten contacts the client follows.
    Contacts(i64),
    /// Version 2 of the contact whose row the test locks.
    Held,
    /// 1,100 new contacts: more than one batch of 1,000 events.
    Fillers,
}

/// What becomes of the promoted standby while the ledger is stopped at the locked row.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Then {
    /// The lock is released and the ledger goes on.
    Released,
    /// Dumped as it is, half caught up, and the dump restored into a fresh server behind
    /// the address; the standby is lost.
    CopiedMidway,
}

/// The rule, for what the ledger applies again: no version of a record is committed after a
/// newer one, so a client that had version 3 is never served an older one on the way. The
/// standby misses `missed` (ten contacts at version 1 are on it). A row lock the test holds
/// on the promoted standby stops the ledger at the commit that writes the locked contact;
/// whatever was committed before it shows, and `then` says what follows.
async fn a_client_never_goes_back_while_what_a_failover_lost_is_applied_again(missed: &[Missed], then: Then) {
    let mut primary = TestPostgres::start_primary().await;
    lectern_api::reads::create_and_migrate(&primary.url()).await.expect("migrate the primary");
    let mut standby = primary.start_standby(None).await;
    let address = Forwarder::start(primary.port).await;
    let Stack { nats: _running, client, projector, app, workspace, key, .. } =
        Stack::at(&address.url_for("lectern")).await;

    let contacts: Vec<Uuid> = (0..10).map(|_| Uuid::new_v4()).collect();
    let held = Uuid::new_v4();
    publish_versions(&client, workspace, &contacts, 1).await;
    publish_versions(&client, workspace, &[held], 1).await;
    all_acknowledged(&client).await;
    replayed(&primary, &standby).await;
    standby.stop().await;
    for step in missed {
        match *step {
            Missed::Contacts(version) => publish_versions(&client, workspace, &contacts, version).await,
            Missed::Held => publish_versions(&client, workspace, &[held], 2).await,
            Missed::Fillers => {
                let fillers: Vec<Uuid> = (0..1_100).map(|_| Uuid::new_v4()).collect();
                publish_versions(&client, workspace, &fillers, 1).await;
            }
        }
    }
    all_acknowledged(&client).await;
    let mut follower = Mirror::default();
    assert!(follower.converges_to_the_listing(&app, &key).await, "the feed before the failover");

    // The failover; the row of `held` locked on the new primary before the address moves.
    primary.stop().await;
    standby.start().await;
    standby.promote().await;
    let mut lock = PgConnection::connect(&standby.url()).await.expect("connect to the promoted standby");
    let mut holding = lock.begin().await.expect("begin");
    sqlx::query("select 1 from contacts where id = $1 for update")
        .bind(held)
        .execute(&mut *holding)
        .await
        .expect("lock the row");
    address.point_at(standby.port);

    let never_behind = |follower: &Mirror| {
        let behind: Vec<String> = contacts
            .iter()
            .filter_map(|id| follower.records.get(&id.to_string()))
            .filter_map(|record| record["name"].as_str())
            .filter(|name| !name.ends_with(" v3"))
            .map(str::to_owned)
            .collect();
        assert!(behind.is_empty(), "the client was served older versions while events were applied again: {behind:?}");
    };
    let until = Instant::now() + WATCHED_FOR;
    while Instant::now() < until {
        let _ = follower.try_follow(&app, &key).await;
        never_behind(&follower);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    match then {
        Then::Released => holding.commit().await.expect("release the row"),
        Then::CopiedMidway => {
            // The first batch applied again (a thousand new contacts, the ten and the locked
            // one were on the standby) is committed; the next waits on the lock.
            let count = "select count(*) from contacts where workspace_id = $1";
            let copied: i64 =
                sqlx::query_scalar(count).bind(workspace).fetch_one(&mut *holding).await.expect("count the contacts");
            assert_eq!(copied, 1_011, "the ledger did not stand at the locked contact after its first batch");
            let dump = standby.dump().await;
            let restored = TestPostgres::start_new().await;
            restored.restore(&dump).await;
            // The locked contact's row locked on the copy too, so that whatever the ledger
            // commits there before it stays in view.
            let mut lock = PgConnection::connect(&restored.url()).await.expect("connect to the copy");
            let mut holding_the_copy = lock.begin().await.expect("begin");
            sqlx::query("select 1 from contacts where id = $1 for update")
                .bind(held)
                .execute(&mut *holding_the_copy)
                .await
                .expect("lock the row on the copy");
            address.point_at(restored.port);
            standby.stop().await;
            drop(holding);
            let until = Instant::now() + WATCHED_FOR;
            while Instant::now() < until {
                let _ = follower.try_follow(&app, &key).await;
                never_behind(&follower);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            holding_the_copy.commit().await.expect("release the row on the copy");
            finish(&mut follower, &app, &key, &contacts).await;
            projector.stop().await;
            return;
        }
    }
    finish(&mut follower, &app, &key, &contacts).await;
    projector.stop().await;
}

/// The follower converges, and the listing holds every contact at version 3.
async fn finish(follower: &mut Mirror, app: &lectern_tests::TestApp, key: &str, contacts: &[Uuid]) {
    assert!(follower.converges_to_the_listing(app, key).await, "the feed after the failover");
    let listed = listing(app, key).await;
    for id in contacts {
        assert_eq!(listed[&id.to_string()]["name"], format!("{id} v3"));
    }
}

/// Version 2 near the start of what was lost, version 3 near its end, the locked contact
/// between them: applied in stream order, batch after batch, version 2 was committed first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_applied_again_after_a_failover_never_take_a_record_back_to_an_older_version() {
    use Missed::{Contacts, Fillers, Held};
    a_client_never_goes_back_while_what_a_failover_lost_is_applied_again(
        &[Contacts(2), Fillers, Held, Contacts(3)],
        Then::Released,
    )
    .await;
}

/// Version 3 and the locked contact near the start of what was lost, and version 2 sent
/// again by the upstream near its end: applied in chunks from the end back, the last chunk
/// committed version 2 first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_version_sent_again_late_in_what_a_failover_lost_is_never_applied_over_a_newer_one() {
    use Missed::{Contacts, Fillers, Held};
    a_client_never_goes_back_while_what_a_failover_lost_is_applied_again(
        &[Contacts(3), Held, Fillers, Contacts(2)],
        Then::Released,
    )
    .await;
}

/// Version 2 near the start of what was lost, version 3 near its end, the locked contact
/// between them; the promoted standby is copied (a dump restored into a fresh server) while
/// the ledger stands at the locked contact, with the first thousand new contacts applied
/// again and recorded: the copy lacks version 2 and version 3 on either side of them, two
/// spans. Found by the nemesis (`--seed 31 --replay '8.190s failover-to-lagging-standby,
/// 10.503s api-kill-9, 14.901s dump-restored-twice'`): applied span by span, each at its own
/// newest, version 2 was committed on the copy before version 3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_taken_while_a_catch_up_was_half_done_never_takes_a_record_back_to_an_older_version() {
    use Missed::{Contacts, Fillers, Held};
    a_client_never_goes_back_while_what_a_failover_lost_is_applied_again(
        &[Contacts(2), Fillers, Held, Contacts(3)],
        Then::CopiedMidway,
    )
    .await;
}
