//! Coalescing: an endpoint has at most one pending delivery per resource, so changes made
//! while an attempt is in flight raise it instead of queueing one delivery each; every
//! change is still announced; a resource's delivery announces that resource; and another
//! workspace's writes never reach an endpoint.
//!
//! Endpoints are registered before the in-process app starts, so that its deliverer
//! claims them at its first round instead of a third of a lease later.

use std::time::{Duration, Instant};

use lectern_api::keys::Scope;
use lectern_tests::webhooks::{verify_with_standardwebhooks, Answer, Receiver};
use lectern_tests::{database::TestDatabase, TestApp};
use uuid::Uuid;

use crate::announced::{of, wait_until_announced};
use crate::endpoints::register;
use crate::feed_copy::FeedCopy;
use crate::writes::{write_contact, write_contacts, write_item};

const ANNOUNCED_WITHIN: Duration = Duration::from_secs(15);
/// How long the receiver holds the first delivery.
const HANG: Duration = Duration::from_secs(2);
/// How long a test watches for a delivery that must not come, once the deliverer has
/// shown (with a delivery it must make) that it has looked since the write.
const QUIET_FOR: Duration = Duration::from_millis(500);

#[tokio::test]
async fn five_hundred_writes_during_a_hanging_delivery_raise_one_pending_delivery_and_the_feed_holds_them_all() {
    let db = TestDatabase::create().await;
    let workspace = Uuid::new_v4();
    let receiver = Receiver::start().await;
    receiver.then([Answer::Hang(HANG)]);
    let endpoint = register(&db.url, workspace, &receiver.url, &["contacts"]).await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let key = app.key(workspace, &[Scope::ContactsRead]).await;
    let mut copy = FeedCopy::new("contacts", &key);
    let api = app.url("");
    copy.pull(&api).await;

    write_contact(&db.pool, workspace, Uuid::new_v4(), "First Ltd").await;
    let first = receiver.wait_for(ANNOUNCED_WITHIN, "the first delivery", |deliveries| !deliveries.is_empty()).await;
    let hang_began = first[0].arrived;
    // 500 writes in 125 transactions while the receiver holds the first delivery.
    let written = write_contacts(&db.pool, workspace, "Coalesced", 500, 4).await;
    let last_commit = Instant::now();
    let writes_took = last_commit - hang_began;

    let deliveries = wait_until_announced(&receiver, &db.pool, "contacts", workspace, ANNOUNCED_WITHIN).await;
    let after_first = deliveries.len() - 1;
    println!("500 writes in 125 transactions took {writes_took:?} of the {HANG:?} hang; {after_first} more deliveries");
    // One attempt at a time: nothing more is sent while the first is held, however many
    // writes wake the worker meanwhile.
    let during_hang = deliveries[1..].iter().filter(|delivery| delivery.arrived < hang_began + HANG).count();
    assert_eq!(during_hang, 0, "deliveries were sent while the first was in flight: {deliveries:#?}");
    // After the last commit: at most the one in flight then, and the one announcing it.
    let after_last = deliveries.iter().filter(|delivery| delivery.arrived > last_commit).count();
    assert!(after_last <= 2, "{after_last} deliveries after the last write: {deliveries:#?}");
    // Writes that outlast the hang (a starved CI) are announced as they come, a delivery a
    // look, so the total is bounded only when they fit inside it.
    if writes_took < HANG {
        assert!(after_first <= 2, "500 writes during one attempt made {after_first} more deliveries: {deliveries:#?}");
    }
    let last = deliveries.last().expect("deliveries");
    assert!(last.arrived > last_commit, "no delivery came after the last write committed: {deliveries:#?}");

    copy.pull(&api).await;
    for id in &written {
        assert!(copy.held.contains_key(&id.to_string()), "the feed from the receiver's token lacks {id}");
    }
    assert_eq!(copy.held.len(), 501, "the copy holds the first write and the 500");
    verify_with_standardwebhooks(&deliveries, &[&endpoint.secret]).await;
}

#[tokio::test]
async fn an_endpoint_for_contacts_and_items_gets_a_delivery_per_resource_each_announcing_only_its_own() {
    let db = TestDatabase::create().await;
    let workspace = Uuid::new_v4();
    let receiver = Receiver::start().await;
    let endpoint = register(&db.url, workspace, &receiver.url, &["contacts", "items"]).await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let key = app.key(workspace, &[Scope::ContactsRead, Scope::ItemsRead]).await;
    let api = app.url("");
    let (mut contacts, mut items) = (FeedCopy::new("contacts", &key), FeedCopy::new("items", &key));
    contacts.pull(&api).await;
    items.pull(&api).await;

    let contact = Uuid::new_v4();
    write_contact(&db.pool, workspace, contact, "Contact Ltd").await;
    let deliveries = wait_until_announced(&receiver, &db.pool, "contacts", workspace, ANNOUNCED_WITHIN).await;
    assert!(of(&deliveries, workspace, "items").is_empty(), "a contact write announced items: {deliveries:#?}");
    let contact_deliveries = of(&deliveries, workspace, "contacts").len();

    let item = write_item(&db.pool, workspace, "Consulting hour").await;
    wait_until_announced(&receiver, &db.pool, "items", workspace, ANNOUNCED_WITHIN).await;
    tokio::time::sleep(QUIET_FOR).await;
    let deliveries = receiver.deliveries();
    let item_deliveries = of(&deliveries, workspace, "items");
    assert!(!item_deliveries.is_empty(), "no items delivery: {deliveries:#?}");
    assert_eq!(
        of(&deliveries, workspace, "contacts").len(),
        contact_deliveries,
        "an item write announced contacts again: {deliveries:#?}"
    );
    for delivery in &item_deliveries {
        assert_eq!(delivery.json()["type"], "items.changed", "{}", delivery.body);
        assert!(
            of(&deliveries, workspace, "contacts").iter().all(|other| other.id() != delivery.id()),
            "one webhook-id announced both resources: {deliveries:#?}"
        );
    }

    contacts.pull(&api).await;
    items.pull(&api).await;
    assert_eq!(contacts.held.keys().collect::<Vec<_>>(), [&contact.to_string()]);
    assert_eq!(items.held.keys().collect::<Vec<_>>(), [&item.to_string()]);
    verify_with_standardwebhooks(&deliveries, &[&endpoint.secret]).await;
}

#[tokio::test]
async fn another_workspaces_writes_never_reach_this_endpoint() {
    let db = TestDatabase::create().await;
    let (workspace, other) = (Uuid::new_v4(), Uuid::new_v4());
    let (receiver, other_receiver) = (Receiver::start().await, Receiver::start().await);
    let endpoint = register(&db.url, workspace, &receiver.url, &["contacts", "items"]).await;
    let other_endpoint = register(&db.url, other, &other_receiver.url, &["contacts", "items"]).await;
    let _app = TestApp::spawn(db.pool.clone()).await;

    write_contact(&db.pool, workspace, Uuid::new_v4(), "Ours Ltd").await;
    wait_until_announced(&receiver, &db.pool, "contacts", workspace, ANNOUNCED_WITHIN).await;
    let ours = of(&receiver.deliveries(), workspace, "contacts").len();

    // The other workspace's writes, contacts and items, in transactions of their own and
    // together; its own endpoint is told of them (so the deliverer has looked since).
    write_contacts(&db.pool, other, "Theirs", 50, 5).await;
    write_item(&db.pool, other, "Their item").await;
    wait_until_announced(&other_receiver, &db.pool, "contacts", other, ANNOUNCED_WITHIN).await;
    let theirs = wait_until_announced(&other_receiver, &db.pool, "items", other, ANNOUNCED_WITHIN).await;
    // An item of ours makes this endpoint's worker look (as would its sweep, later): its
    // contacts must still show nothing new.
    write_item(&db.pool, workspace, "Our item").await;
    wait_until_announced(&receiver, &db.pool, "items", workspace, ANNOUNCED_WITHIN).await;
    tokio::time::sleep(QUIET_FOR).await;

    let deliveries = receiver.deliveries();
    assert_eq!(
        of(&deliveries, workspace, "contacts").len(),
        ours,
        "this endpoint was told of contacts again after only the other workspace's were written: {deliveries:#?}"
    );
    assert_eq!(of(&deliveries, workspace, "items").len(), 1, "one items delivery for our one item: {deliveries:#?}");
    for delivery in &deliveries {
        assert_eq!(delivery.json()["data"]["workspaceId"], workspace.to_string(), "{}", delivery.body);
    }
    for delivery in &theirs {
        assert_eq!(delivery.json()["data"]["workspaceId"], other.to_string(), "{}", delivery.body);
    }
    verify_with_standardwebhooks(&deliveries, &[&endpoint.secret]).await;
    verify_with_standardwebhooks(&other_receiver.deliveries(), &[&other_endpoint.secret]).await;
}
