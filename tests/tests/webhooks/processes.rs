//! Real `serve` processes sharing endpoints through their leases: one process delivers
//! for an endpoint at a time; a process SIGKILLed mid-delivery leaves the delivery
//! pending, and the next holder sends it (same `webhook-id`) once the lease lapses; a
//! process told to stop gives its leases back, so another takes over at once.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lectern_api::keys::Scope;
use lectern_tests::seed::create_key;
use lectern_tests::serve::{Serve, ServeOptions};
use lectern_tests::webhooks::{verify_with_standardwebhooks, Answer, Receiver};
use lectern_tests::TestDatabase;
use uuid::Uuid;

use crate::announced::wait_until_announced;
use crate::endpoints::register;
use crate::feed_copy::FeedCopy;
use crate::writes::write_contact;

/// `serve` delivering to the loopback receivers, with leases of `lease_ms`.
fn serve(database_url: &str, lease_ms: u64) -> ServeOptions {
    Serve::on(database_url).private_webhook_targets().webhook_lease_ms(lease_ms)
}

const ANNOUNCED_WITHIN: Duration = Duration::from_secs(20);

#[tokio::test]
async fn a_delivery_in_flight_when_its_process_is_killed_is_sent_again_with_its_id_by_the_next_holder() {
    const LEASE_MS: u64 = 1_500;
    let db = TestDatabase::create().await;
    let workspace = Uuid::new_v4();
    let (_, key) = create_key(&db.pool, workspace, &[Scope::ContactsRead]).await;
    let receiver = Receiver::start().await;
    // The first attempt is still in flight (within its timeout) when its process dies.
    receiver.then([Answer::Hang(Duration::from_secs(60))]);
    let endpoint = register(&db.url, workspace, &receiver.url, &["contacts"]).await;
    let timeout = [("LECTERN_WEBHOOK_TIMEOUT_MS", "30000")];
    let first = serve(&db.url, LEASE_MS).envs(&timeout).start().await;

    let acknowledged = Uuid::new_v4();
    write_contact(&db.pool, workspace, acknowledged, "Before The Kill Ltd").await;
    let in_flight = receiver.wait_for(ANNOUNCED_WITHIN, "the first attempt", |deliveries| !deliveries.is_empty()).await;
    let id = in_flight[0].id().to_owned();
    // Already running, but the first holds the lease.
    let second = serve(&db.url, LEASE_MS).envs(&timeout).start().await;

    first.kill().await;
    let killed = Instant::now();
    // Committed while nobody delivers: rides on the pending delivery.
    let meanwhile = Uuid::new_v4();
    write_contact(&db.pool, workspace, meanwhile, "While Nobody Holds It Ltd").await;

    let deliveries = receiver
        .wait_for(ANNOUNCED_WITHIN, "the killed process's delivery sent again", |deliveries| {
            deliveries.iter().filter(|delivery| delivery.id() == id).count() >= 2
        })
        .await;
    let again = deliveries.iter().filter(|delivery| delivery.id() == id).nth(1).expect("sent again");
    println!("sent again {:?} after the kill (lease {LEASE_MS} ms)", again.arrived - killed);
    let deliveries = wait_until_announced(&receiver, &db.pool, "contacts", workspace, ANNOUNCED_WITHIN).await;

    let mut copy = FeedCopy::new("contacts", &key);
    copy.pull(&second.api_url("")).await;
    for written in [acknowledged, meanwhile] {
        assert!(copy.held.contains_key(&written.to_string()), "the feed lacks {written}: {:?}", copy.held.keys());
    }
    verify_with_standardwebhooks(&deliveries, &[&endpoint.secret]).await;
}

/// One endpoint of the steady test: its workspace, receiver and secret.
struct Watched {
    workspace: Uuid,
    key: String,
    receiver: Receiver,
    secret: String,
}

#[tokio::test]
async fn two_processes_never_deliver_to_one_endpoint_at_once_and_a_stopped_holder_hands_over_at_once() {
    // Long enough that a lease left to lapse shows: the holder renews every 3 s, so an
    // unreleased lease outlives the holder by at least 6 s, and the other process looks
    // for free endpoints every 3 s.
    const LEASE_MS: u64 = 9_000;
    const HANDED_OVER_WITHIN: Duration = Duration::from_secs(5);
    const ENDPOINTS: usize = 4;
    let db = TestDatabase::create().await;
    let mut watched = Vec::new();
    for _ in 0..ENDPOINTS {
        let workspace = Uuid::new_v4();
        let (_, key) = create_key(&db.pool, workspace, &[Scope::ContactsRead]).await;
        let receiver = Receiver::start().await;
        // Slow answers make a second, concurrent delivery likely to overlap one in flight.
        receiver.otherwise(Some(Answer::Hang(Duration::from_millis(150))));
        let endpoint = register(&db.url, workspace, &receiver.url, &["contacts"]).await;
        watched.push(Watched { workspace, key, receiver, secret: endpoint.secret });
    }
    let holder = serve(&db.url, LEASE_MS).start().await;
    let claimed = lectern_tests::projector::eventually(Duration::from_secs(10), || async {
        let leased: i64 = sqlx::query_scalar("select count(*) from webhook_endpoints where lease_until > now()")
            .fetch_one(&db.pool)
            .await
            .expect("read the leases");
        leased == ENDPOINTS as i64
    })
    .await;
    assert!(claimed, "the first process did not claim the endpoints");
    let owners: Vec<Option<Uuid>> = sqlx::query_scalar("select distinct lease_owner from webhook_endpoints")
        .fetch_all(&db.pool)
        .await
        .expect("read the leases");
    let [Some(holder_owner)] = owners[..] else { panic!("the first process did not claim every endpoint: {owners:?}") };
    let other = serve(&db.url, LEASE_MS).start().await;

    // A steady stream of single-row writes, round the workspaces, until told to stop.
    let stop = tokio_util::sync::CancellationToken::new();
    let commits: Arc<Mutex<BTreeMap<Uuid, usize>>> = Arc::default();
    let writer = {
        let (pool, stop, commits) = (db.pool.clone(), stop.clone(), commits.clone());
        let workspaces: Vec<Uuid> = watched.iter().map(|watched| watched.workspace).collect();
        tokio::spawn(async move {
            let mut turn = 0;
            while !stop.is_cancelled() {
                let workspace = workspaces[turn % workspaces.len()];
                write_contact(&pool, workspace, Uuid::new_v4(), &format!("Steady {turn:04}")).await;
                *commits.lock().expect("commits").entry(workspace).or_default() += 1;
                turn += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(3)).await;

    // Quick answers from now on, and the slow ones in flight over, so that an attempt
    // the stopping process abandons cannot overlap its successor's at the receiver.
    for watched in &watched {
        watched.receiver.otherwise(None);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    holder.stop().await;
    let stopped = Instant::now();
    let kept: i64 =
        sqlx::query_scalar("select count(*) from webhook_endpoints where lease_owner = $1 and lease_until > now()")
            .bind(holder_owner)
            .fetch_one(&db.pool)
            .await
            .expect("read the leases");
    assert_eq!(kept, 0, "the stopped process kept leases it no longer uses");
    for watched in &watched {
        let before = watched.receiver.deliveries().len();
        let deliveries = watched
            .receiver
            .wait_for(HANDED_OVER_WITHIN, "the other process's first delivery", |deliveries| deliveries.len() > before)
            .await;
        println!("handed over: a delivery {:?} after the holder stopped", deliveries[before].arrived - stopped);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.cancel();
    writer.await.expect("the writer");

    let commits = commits.lock().expect("commits").clone();
    for watched in &watched {
        let deliveries =
            wait_until_announced(&watched.receiver, &db.pool, "contacts", watched.workspace, ANNOUNCED_WITHIN).await;
        let most = deliveries.iter().map(|delivery| delivery.concurrent).max().unwrap_or(0);
        assert_eq!(most, 1, "one endpoint received {most} deliveries at once: {deliveries:#?}");
        let mut copy = FeedCopy::new("contacts", &watched.key);
        copy.pull(&other.api_url("")).await;
        assert_eq!(copy.held.len(), commits[&watched.workspace], "the feed lacks some of the workspace's writes");
        verify_with_standardwebhooks(&deliveries, &[&watched.secret]).await;
    }
}
