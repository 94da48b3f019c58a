//! Rule 4's hard part, made deterministic: a transaction writes its change and then
//! stays open (held by the test) while a later writer of the same workspace commits, and
//! a client polls in between. The change written first must reach the client once it
//! commits. Were rows served as soon as they are visible, the later writer's change
//! would be served first, the client's token would move past the open transaction's
//! place in the order, and its change would never be served.

use std::time::Duration;

use lectern_read_model::{contacts, Commit};
use lectern_schema::contact::ContactData;
use lectern_tests::app::TestApp;
use lectern_tests::seed::{base_time, seed_key, ContactSeed};
use lectern_tests::TestDatabase;
use serde_json::Value;
use uuid::Uuid;

use super::{follow, ids};

const CONTACTS: &str = "/v1/contacts/changes";

/// A batch of one active contact, as the projector writes it.
fn one_contact(workspace: Uuid, id: Uuid, name: &str) -> contacts::Batch {
    let mut batch = contacts::Batch::default();
    batch.push(seed_key(workspace, id, "active"), Some(&ContactData::new(name.to_owned(), base_time().into())));
    batch
}

#[tokio::test]
async fn a_change_written_first_is_served_once_it_commits_whatever_committed_meanwhile() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    ContactSeed::named("Already there").insert(&db.pool, workspace).await;
    let (mut mirror, mut since) = follow(&app, &key, CONTACTS, None, 100).await;

    let (slow, fast) = (Uuid::new_v4(), Uuid::new_v4());
    let mut held = db.pool.begin().await.expect("begin the slow transaction");
    one_contact(workspace, slow, "Slow").write(&mut held, Commit::WithTheTransaction).await.expect("slow write");
    let later_pool = db.pool.clone();
    let later = tokio::spawn(async move {
        let mut connection = later_pool.acquire().await.expect("a connection");
        one_contact(workspace, fast, "Fast").write(&mut connection, Commit::OnItsOwnBeforeFlush).await
    });
    let waiting = lectern_tests::projector::eventually(Duration::from_secs(10), || async {
        db.sessions_waiting_on_a_lock().await > 0 || later.is_finished()
    })
    .await;
    assert!(waiting, "the later writer neither committed nor waited");

    // The client polls while the slow transaction is open, as often as it likes.
    for _ in 0..5 {
        let reply = app.get(&key, &format!("{CONTACTS}?since={since}&limit=1")).await;
        let (entries, token) = (reply.data().clone(), super::token(&reply));
        mirror.extend(entries);
        since = token;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    held.commit().await.expect("commit the slow transaction");
    later.await.expect("the later writer").expect("the later write");
    let (entries, _) = follow(&app, &key, CONTACTS, Some(&since), 1).await;
    mirror.extend(entries);

    let seen = ids(&mirror);
    assert!(seen.contains(&slow.to_string()), "the slow transaction's change was skipped: {seen:?}");
    assert!(seen.contains(&fast.to_string()), "the later change was skipped: {seen:?}");
    let position = |id: Uuid| seen.iter().position(|seen| *seen == id.to_string());
    assert!(position(slow) < position(fast), "served out of commit order: {seen:?}");
    assert!(mirror.iter().all(|entry| entry["record"] != Value::Null));
}

#[tokio::test]
async fn a_writer_of_another_workspace_is_not_held_by_an_open_transaction() {
    let db = TestDatabase::create().await;
    let (workspace, other) = (Uuid::new_v4(), Uuid::new_v4());
    let mut held = db.pool.begin().await.expect("begin the slow transaction");
    one_contact(workspace, Uuid::new_v4(), "Slow").write(&mut held, Commit::WithTheTransaction).await.expect("write");
    let mut connection = db.pool.acquire().await.expect("a connection");
    let elsewhere = one_contact(other, Uuid::new_v4(), "Elsewhere");
    let other_write = elsewhere.write(&mut connection, Commit::WithTheTransaction);
    tokio::time::timeout(Duration::from_secs(5), other_write)
        .await
        .expect("another workspace's writer waited for the open transaction")
        .expect("the other write");
    held.rollback().await.expect("rollback");
}
