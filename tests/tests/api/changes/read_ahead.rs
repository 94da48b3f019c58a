//! The page after a full one is read before its client asks (`docs/architecture.md`,
//! "Reading the next page ahead"): served without a statement of its own, and only while
//! no change of its feed has been announced since it was read.

use std::time::Duration;

use lectern_tests::app::{urlencode, TestApp};
use lectern_tests::seed::ContactSeed;
use lectern_tests::TestDatabase;

use super::{follow, ids, token};

const CONTACTS: &str = "/v1/contacts/changes";

/// Waits until `reads` reads ahead have finished in `app`.
async fn read_ahead_finished(app: &TestApp, reads: u64) {
    let state = app.state.as_ref().expect("an in-process app");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while state.feeds.read_ahead.finished() < reads {
        assert!(tokio::time::Instant::now() < deadline, "no page was read ahead within 10 s");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn the_page_after_a_full_one_is_read_ahead_and_served_without_a_statement() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    for index in 0..4 {
        ContactSeed::named(&format!("Contact {index}")).insert(&db.pool, workspace).await;
    }
    let (everything, _) = follow(&app, &key, CONTACTS, None, 100).await;

    let first = app.get(&key, &format!("{CONTACTS}?limit=2")).await;
    assert_eq!(ids(first.data()), ids(&everything[..2]), "{}", first.text);
    assert_eq!(first.body["hasMore"], true);
    read_ahead_finished(&app, 1).await;

    // Any statement on the table would now wait for the lock, far longer than this test.
    let mut locker = db.pool.begin().await.expect("begin");
    sqlx::query("lock table contacts in access exclusive mode")
        .execute(&mut *locker)
        .await
        .expect("lock the feed's table");
    let second = tokio::time::timeout(
        Duration::from_secs(5),
        app.get(&key, &format!("{CONTACTS}?limit=2&since={}", urlencode(&token(&first)))),
    )
    .await
    .expect("the page read ahead waited for the database");
    locker.rollback().await.expect("unlock");
    assert_eq!(ids(second.data()), ids(&everything[2..]), "{}", second.text);
    assert_eq!(second.data()[0]["record"], everything[2]["record"], "the same entries as a read now");
    assert_eq!(second.body["hasMore"], false);
}

#[tokio::test]
async fn a_page_read_ahead_is_not_served_once_a_change_of_its_feed_is_announced() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    let mut contacts: Vec<ContactSeed> = (0..4).map(|index| ContactSeed::named(&format!("Contact {index}"))).collect();
    for contact in &contacts {
        contact.insert(&db.pool, workspace).await;
    }
    app.heard_every_commit().await;

    let first = app.get(&key, &format!("{CONTACTS}?limit=2")).await;
    assert_eq!(ids(first.data()), [contacts[0].id, contacts[1].id].map(|id| id.to_string()), "{}", first.text);
    read_ahead_finished(&app, 1).await;
    // A record of the page read ahead changes after the read: it now belongs at the end.
    contacts[2].name = "Contact 2, renamed after the read ahead".to_owned();
    contacts[2].insert(&db.pool, workspace).await;
    app.heard_every_commit().await;

    let second = app.get(&key, &format!("{CONTACTS}?limit=2&since={}", urlencode(&token(&first)))).await;
    assert_eq!(
        ids(second.data()),
        [contacts[3].id, contacts[2].id].map(|id| id.to_string()),
        "the page as a read finds it now: {}",
        second.text
    );
    assert_eq!(second.data()[1]["record"]["name"], "Contact 2, renamed after the read ahead");
}
