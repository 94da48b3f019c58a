//! Push and pull agree: a delivery only says "pull", so a receiver that pulls the feed from
//! its own token when told ends with exactly the source's records, whether it refuses
//! every delivery (it is told again, with the same `webhook-id`, until it acknowledges)
//! or follows a steady stream of changes (it stays close behind, and the last change is
//! announced).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lectern_api::keys::Scope;
use lectern_tests::seed::ContactSeed;
use lectern_tests::webhooks::{verify_with_standardwebhooks, Answer, Receiver};
use lectern_tests::{database::TestDatabase, TestApp};
use uuid::Uuid;

use crate::announced::wait_until_announced;
use crate::clock::quantile_ms;
use crate::endpoints::register;
use crate::feed_copy::FeedCopy;
use crate::writes::write_contact;

const WITHIN: Duration = Duration::from_secs(20);

#[tokio::test]
async fn a_receiver_that_refuses_every_delivery_is_told_again_with_the_same_id_and_converges_by_its_token() {
    let db = TestDatabase::create().await;
    let workspace = Uuid::new_v4();
    let receiver = Receiver::start().await;
    receiver.otherwise(Some(Answer::Status(500)));
    let endpoint = register(&db.url, workspace, &receiver.url, &["contacts"]).await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let key = app.key(workspace, &[Scope::ContactsRead]).await;
    let api = app.url("");
    let mut copy = FeedCopy::new("contacts", &key);
    copy.pull(&api).await;

    let first = Uuid::new_v4();
    write_contact(&db.pool, workspace, first, "First Ltd").await;
    let refused = receiver.wait_for(WITHIN, "the first attempt", |deliveries| !deliveries.is_empty()).await;
    // The receiver drops the delivery (500), but pulls the feed on it.
    copy.pull(&api).await;
    // Changes after the refused attempt: new contacts, an update, and a removal.
    let mut written = Vec::new();
    for index in 0..20 {
        let id = Uuid::new_v4();
        write_contact(&db.pool, workspace, id, &format!("Later {index:02}")).await;
        written.push(id);
    }
    write_contact(&db.pool, workspace, first, "First Ltd, renamed").await;
    let mut archived = ContactSeed::named("Later 00");
    archived.id = written[0];
    archived.status("archived").insert(&db.pool, workspace).await;

    let deliveries =
        receiver.wait_for(WITHIN, "the attempt after the refused one", |deliveries| deliveries.len() >= 2).await;
    copy.pull(&api).await;
    assert_eq!(deliveries[1].id(), refused[0].id(), "a refused delivery is retried, not replaced: {deliveries:#?}");
    assert!(deliveries.iter().all(|delivery| delivery.id() == refused[0].id()), "{deliveries:#?}");
    let listing = copy.listing(&api).await;
    assert_eq!(copy.held, listing, "the copy pulled on the retry differs from the listing");
    assert_eq!(listing.len(), 20, "the first, renamed, and 19 of the later ones");
    assert_eq!(copy.held[&first.to_string()]["name"], "First Ltd, renamed");
    let logged: (String, i32) = sqlx::query_as("select state, attempts from webhook_deliveries where id = $1")
        .bind(refused[0].id())
        .fetch_one(&db.pool)
        .await
        .expect("the delivery is logged");
    assert_eq!(logged.0, "pending", "a delivery never acknowledged stays pending");
    assert!(logged.1 >= 2, "{logged:?}");
    verify_with_standardwebhooks(&deliveries, &[&endpoint.secret]).await;
}

/// One write of the steady stream: the contact, the name it was given (`None`: archived)
/// and when its commit returned.
struct Write {
    id: Uuid,
    name: Option<String>,
    committed: Instant,
}

#[tokio::test]
async fn a_receiver_pulling_on_each_delivery_keeps_up_with_a_steady_stream_and_ends_equal_to_the_source() {
    const STREAM_FOR: Duration = Duration::from_secs(4);
    let db = TestDatabase::create().await;
    let workspace = Uuid::new_v4();
    let receiver = Receiver::start().await;
    let endpoint = register(&db.url, workspace, &receiver.url, &["contacts"]).await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let key = app.key(workspace, &[Scope::ContactsRead]).await;
    let api = app.url("");
    let mut copy = FeedCopy::new("contacts", &key);
    copy.pull(&api).await;

    // New contacts, renames and removals, one a transaction, every 20 ms.
    let writes: Arc<Mutex<Vec<Write>>> = Arc::default();
    let writer = {
        let (pool, writes) = (db.pool.clone(), writes.clone());
        tokio::spawn(async move {
            let began = Instant::now();
            let mut ids: Vec<Uuid> = Vec::new();
            let mut turn = 0_usize;
            while began.elapsed() < STREAM_FOR {
                let (id, name) = match turn % 10 {
                    3 | 7 if !ids.is_empty() => (ids[turn * 7 % ids.len()], Some(format!("Renamed {turn:04}"))),
                    9 if ids.len() > 1 => (ids.swap_remove(turn * 3 % ids.len()), None),
                    _ => {
                        let id = Uuid::new_v4();
                        ids.push(id);
                        (id, Some(format!("Steady {turn:04}")))
                    }
                };
                let mut seed = ContactSeed::named(name.as_deref().unwrap_or("Archived"));
                seed.id = id;
                if name.is_none() {
                    seed = seed.status("archived");
                }
                seed.insert(&pool, workspace).await;
                writes.lock().expect("writes").push(Write { id, name, committed: Instant::now() });
                turn += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };

    // commit → in the receiver's copy, per write; and how far behind the copy is after each
    // delivery's pull (the oldest write committed before the delivery that it lacks).
    let mut seen_after = Vec::new();
    let mut behind = Vec::new();
    let mut seen: Vec<bool> = Vec::new();
    let mut handled = 0;
    let mut announced = false;
    loop {
        let deliveries = receiver.deliveries();
        if deliveries.len() > handled {
            let arrived = deliveries[deliveries.len() - 1].arrived;
            handled = deliveries.len();
            copy.pull(&api).await;
            let pulled = Instant::now();
            let writes = writes.lock().expect("writes");
            // The newest write of each contact the copy shows; every earlier one is shown too.
            let mut shown_upto: BTreeMap<Uuid, usize> = BTreeMap::new();
            for (index, write) in writes.iter().enumerate() {
                let shows = match &write.name {
                    Some(name) => copy.held.get(&write.id.to_string()).is_some_and(|record| record["name"] == *name),
                    None => !copy.held.contains_key(&write.id.to_string()),
                };
                if shows {
                    shown_upto.insert(write.id, index);
                }
            }
            let mut lagging = Duration::ZERO;
            seen.resize(writes.len(), false);
            for (index, write) in writes.iter().enumerate() {
                if seen[index] {
                    continue;
                }
                if shown_upto.get(&write.id).is_some_and(|upto| *upto >= index) {
                    seen[index] = true;
                    seen_after.push(pulled - write.committed);
                } else if write.committed < arrived {
                    lagging = lagging.max(pulled - write.committed);
                }
            }
            behind.push(lagging);
        } else if announced {
            break;
        } else if writer.is_finished() {
            wait_until_announced(&receiver, &db.pool, "contacts", workspace, WITHIN).await;
            announced = true;
        } else {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    writer.await.expect("the writer");

    let listing = copy.listing(&api).await;
    assert_eq!(copy.held, listing, "after the last delivery, the copy differs from the listing");
    let writes = writes.lock().expect("writes").len();
    let deliveries = receiver.deliveries();
    println!(
        "{writes} writes in {STREAM_FOR:?}, {} deliveries; commit → in the receiver's copy, per write: p50 {:.0} ms, \
         p99 {:.0} ms, max {:.0} ms ({} writes timed); behind after each delivery: p50 {:.0} ms, p99 {:.0} ms, \
         max {:.0} ms",
        deliveries.len(),
        quantile_ms(&mut seen_after, 0.5),
        quantile_ms(&mut seen_after, 0.99),
        quantile_ms(&mut seen_after, 1.0),
        seen_after.len(),
        quantile_ms(&mut behind, 0.5),
        quantile_ms(&mut behind, 0.99),
        quantile_ms(&mut behind, 1.0),
    );
    verify_with_standardwebhooks(&deliveries, &[&endpoint.secret]).await;
}
