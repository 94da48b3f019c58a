//! Rule 6: a request that finds nothing after `since` and asks to `wait` is answered as
//! soon as a change of its workspace and resource commits, or after its seconds with
//! no data; it holds no database connection meanwhile, and a shutdown answers it. And
//! an empty poll at the head the process knows runs no SQL statement.

use std::time::{Duration, Instant};

use lectern_api::keys::Scope;
use lectern_tests::app::{Reply, TestApp};
use lectern_tests::seed::{create_key, insert_contacts, ContactSeed};
use lectern_tests::TestDatabase;
use uuid::Uuid;

use super::{changes, follow, ids, token};
use crate::items::ItemSeed;

const CONTACTS: &str = "/v1/contacts/changes";

/// A request sent now, answered later.
fn send(app: &TestApp, key: &str, path_and_query: String) -> tokio::task::JoinHandle<(Reply, Duration)> {
    let request = app.http.get(app.url(&path_and_query)).header("X-API-Key", key);
    tokio::spawn(async move {
        let started = Instant::now();
        let reply = Reply::read(request.send().await.expect("request reaches the app")).await;
        (reply, started.elapsed())
    })
}

/// Lets a request sent with [`send`] reach its wait.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(300)).await;
}

#[tokio::test]
async fn a_waiting_request_is_answered_with_its_workspaces_change_once_it_commits() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    insert_contacts(&db.pool, workspace, "Before", 2).await;
    let (_, since) = follow(&app, &key, CONTACTS, None, 100).await;

    let waiting = send(&app, &key, format!("{CONTACTS}?since={since}&wait=25"));
    settle().await;
    assert!(!waiting.is_finished(), "answered before anything changed");
    let new = ContactSeed::named("Committed while it waited").insert(&db.pool, workspace).await;
    let (reply, took) = waiting.await.expect("the request");
    assert_eq!(changes(&reply), [(new.to_string(), "upserted".to_owned())], "{}", reply.text);
    assert!(took < Duration::from_secs(20), "answered after {took:?}, not at the commit");
}

#[tokio::test]
async fn another_workspaces_or_resources_change_never_ends_a_wait_early() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    let other = Uuid::new_v4();
    let (_, since) = follow(&app, &key, CONTACTS, None, 100).await;

    let waiting = send(&app, &key, format!("{CONTACTS}?since={since}&wait=2"));
    settle().await;
    ContactSeed::named("Another workspace's").insert(&db.pool, other).await;
    ItemSeed::named("Same workspace, another resource").insert(&db.pool, workspace).await;
    let (reply, took) = waiting.await.expect("the request");
    assert!(changes(&reply).is_empty(), "{}", reply.text);
    assert!(took >= Duration::from_millis(1_900), "a wait of 2 s ended after {took:?}");
}

#[tokio::test]
async fn a_wait_that_sees_no_change_ends_after_its_seconds_with_no_data_and_the_same_position() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    insert_contacts(&db.pool, workspace, "Before", 1).await;
    let (_, since) = follow(&app, &key, CONTACTS, None, 100).await;

    let (reply, took) = send(&app, &key, format!("{CONTACTS}?since={since}&wait=1")).await.expect("the request");
    assert!(changes(&reply).is_empty(), "{}", reply.text);
    assert_eq!(reply.body["hasMore"], false);
    assert_eq!(token(&reply), since, "nothing new: the token stays where it was");
    assert!(took >= Duration::from_millis(900), "a wait of 1 s ended after {took:?}");
    // From the beginning there is something, so no wait at all.
    let (reply, took) = send(&app, &key, format!("{CONTACTS}?wait=30")).await.expect("the request");
    assert_eq!(reply.data().len(), 1);
    assert!(took < Duration::from_secs(10), "waited with changes ready: {took:?}");
}

#[tokio::test]
async fn a_shutdown_answers_waiting_requests_at_once() {
    let db = TestDatabase::create().await;
    let (app, stop) = TestApp::spawn_stoppable(db.pool.clone()).await;
    let (_, key) = app.workspace_with_key().await;
    let (_, since) = follow(&app, &key, CONTACTS, None, 100).await;

    let waiting = send(&app, &key, format!("{CONTACTS}?since={since}&wait=30"));
    settle().await;
    stop.send(()).expect("the app is running");
    let (reply, took) = waiting.await.expect("the request");
    assert!(changes(&reply).is_empty(), "{}", reply.text);
    assert!(took < Duration::from_secs(5), "a wait of 30 s was answered {took:?} after it began, not at shutdown");
}

#[tokio::test]
async fn waiting_requests_hold_no_database_connection() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    insert_contacts(&db.pool, workspace, "Listed", 3).await;
    let (_, since) = follow(&app, &key, CONTACTS, None, 100).await;

    // Far more than the workspace's share of connections (a quarter of 20), and than
    // the whole pool.
    let waiting: Vec<_> = (0..40).map(|_| send(&app, &key, format!("{CONTACTS}?since={since}&wait=6"))).collect();
    settle().await;
    let listing = app.get(&key, "/v1/contacts?limit=2&sort=name").await;
    listing.assert_ok();
    let from_the_beginning = app.get(&key, CONTACTS).await;
    assert_eq!(from_the_beginning.data().len(), 3, "{}", from_the_beginning.text);
    assert!(waiting.iter().all(|request| !request.is_finished()), "a wait ended early");

    let new = ContactSeed::named("Wakes them all").insert(&db.pool, workspace).await;
    for request in waiting {
        let (reply, _) = request.await.expect("the request");
        assert_eq!(ids(reply.data()), [new.to_string()], "{}", reply.text);
    }
}

#[tokio::test]
async fn an_empty_poll_at_the_known_head_runs_no_statement() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let workspace = Uuid::new_v4();
    let key = app.key(workspace, &[Scope::ContactsRead]).await;
    insert_contacts(&db.pool, workspace, "Seen", 2).await;
    let (_, since) = follow(&app, &key, CONTACTS, None, 100).await;
    let latest = app.get(&key, &format!("{CONTACTS}?since=latest")).await;
    latest.assert_ok();

    // Any statement on the table would now wait for the lock, far longer than this test.
    let mut locker = db.pool.begin().await.expect("begin");
    sqlx::query("lock table contacts in access exclusive mode")
        .execute(&mut *locker)
        .await
        .expect("lock the feed's tables");
    for since in [since.clone(), token(&latest)] {
        let reply = tokio::time::timeout(
            Duration::from_secs(5),
            app.get(&key, &format!("{CONTACTS}?since={}", lectern_tests::app::urlencode(&since))),
        )
        .await
        .expect("an empty poll at the known head waited for the database");
        assert!(changes(&reply).is_empty(), "{}", reply.text);
    }
    // `latest` reads the horizon, a statement on no table: the lock does not hold it.
    let latest_again = tokio::time::timeout(Duration::from_secs(5), app.get(&key, &format!("{CONTACTS}?since=latest")))
        .await
        .expect("`latest` waited for the feed's table");
    latest_again.assert_ok();
    locker.rollback().await.expect("unlock");
}

#[tokio::test]
async fn a_workspace_holds_at_most_its_share_of_waiting_requests_and_the_next_is_a_429_for_it_alone() {
    use lectern_api::feed::heads::WAITING_PER_WORKSPACE;

    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let workspace = Uuid::new_v4();
    let key = app.key(workspace, &[Scope::ContactsRead, Scope::ItemsRead]).await;
    let (other, other_key) = app.workspace_with_key().await;
    let (_, since) = follow(&app, &key, CONTACTS, None, 100).await;
    let (_, other_since) = follow(&app, &other_key, CONTACTS, None, 100).await;

    let waiting: Vec<_> =
        (0..WAITING_PER_WORKSPACE).map(|_| send(&app, &key, format!("{CONTACTS}?since={since}&wait=8"))).collect();
    settle().await;
    // Over both feeds of the workspace.
    let refused = app.get(&key, "/v1/items/changes?wait=8").await;
    refused.assert_error(429, "RATE_LIMITED");
    assert_eq!(refused.header("retry-after"), Some("1"));
    let unheld = app.get(&key, &format!("{CONTACTS}?since={since}")).await;
    assert!(changes(&unheld).is_empty(), "a request without `wait` is still served: {}", unheld.text);

    let elsewhere = send(&app, &other_key, format!("{CONTACTS}?since={other_since}&wait=8"));
    settle().await;
    ContactSeed::named("Elsewhere").insert(&db.pool, other).await;
    let (reply, _) = elsewhere.await.expect("the other workspace's request");
    assert_eq!(reply.data().len(), 1, "another workspace waits as usual: {}", reply.text);

    ContactSeed::named("Wakes them").insert(&db.pool, workspace).await;
    for request in waiting {
        let (reply, _) = request.await.expect("a waiting request");
        assert_eq!(reply.data().len(), 1, "{}", reply.text);
    }
}

/// The rule: a waiting request stays counted among its workspace's waiting ones however
/// often it wakes without an answer (here: keys revoked elsewhere, on which every waiting
/// request checks its own), so the share holds across its wakes; and it gives its place
/// back once answered.
#[tokio::test]
async fn a_waiting_request_woken_without_an_answer_still_holds_its_place_in_the_share() {
    use lectern_api::feed::heads::WAITING_PER_WORKSPACE;

    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    let (_, since) = follow(&app, &key, CONTACTS, None, 100).await;
    let waiting: Vec<_> =
        (0..WAITING_PER_WORKSPACE).map(|_| send(&app, &key, format!("{CONTACTS}?since={since}&wait=10"))).collect();
    settle().await;

    for _ in 0..2 {
        app.revoke_a_key_elsewhere().await;
        settle().await;
    }
    let refused = app.get(&key, &format!("{CONTACTS}?since={since}&wait=10")).await;
    refused.assert_error(429, "RATE_LIMITED");
    assert!(waiting.iter().all(|request| !request.is_finished()), "a waiting request was answered early");

    ContactSeed::named("Wakes them").insert(&db.pool, workspace).await;
    let mut newest = since;
    for request in waiting {
        let (reply, _) = request.await.expect("a waiting request");
        assert_eq!(reply.data().len(), 1, "{}", reply.text);
        newest = token(&reply);
    }
    // Answered, they give their places back: the workspace may wait again.
    let again = app.get(&key, &format!("{CONTACTS}?since={newest}&wait=1")).await;
    assert_eq!(again.status, 200, "{}", again.text);
}

/// The rule: requests waiting on one feed from the same token, woken by one change, read
/// their page together rather than once each, and every one is answered with the change.
#[tokio::test]
async fn requests_woken_by_one_change_read_their_page_together() {
    const WAITING: u64 = 40;
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let state = app.state.as_ref().expect("an in-process app");
    let (workspace, key) = app.workspace_with_key().await;
    let (_, since) = follow(&app, &key, CONTACTS, None, 100).await;
    let waiting: Vec<_> = (0..WAITING).map(|_| send(&app, &key, format!("{CONTACTS}?since={since}&wait=10"))).collect();
    settle().await;
    let started_before = state.feeds.shared_reads.started();

    let change = ContactSeed::named("Wakes them all").insert(&db.pool, workspace).await;
    for request in waiting {
        let (reply, _) = request.await.expect("a waiting request");
        assert_eq!(ids(reply.data()), vec![change.to_string()], "{}", reply.text);
    }
    let reads = state.feeds.shared_reads.started() - started_before;
    assert!(reads <= WAITING / 4, "{reads} reads of the page for {WAITING} requests woken by one change");
}

/// The rule: a long poll that waited is answered whole, with its request id and its key's
/// rate-limit standing, and its connection then closes (`Connection: close`): while it
/// waited, its connection let go of the HTTP state it would be kept alive with.
#[tokio::test]
async fn a_long_poll_that_waited_is_answered_whole_and_its_connection_closed() {
    let (head, body, change) = waited_over_http1("wait=10", "").await;
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(head.contains("\r\nconnection: close"), "{head}");
    assert!(head.contains("\r\nx-request-id: waited-once"), "{head}");
    assert!(head.contains("\r\nratelimit: "), "{head}");
    assert!(head.contains(&format!("\r\ncontent-length: {}", body.len())), "{head}");
    assert!(String::from_utf8_lossy(&body).contains(&change.to_string()), "{head}");
    assert!(String::from_utf8_lossy(&body).contains("\"requestId\":\"waited-once\""), "{head}");
}

/// The rule: whether a request waits is the parsed `wait` parameter's to say, however the
/// query spells it: a percent-encoded name waits parked too, letting go of its connection
/// (answered with `Connection: close`), and its answer is compressed like any other.
#[tokio::test]
async fn a_long_poll_parks_however_its_wait_is_spelled() {
    for spelled in ["%77ait=10", "w%61it=10", "%77%61%69%74=10"] {
        let (head, body, change) = waited_over_http1(spelled, "").await;
        assert!(head.starts_with("http/1.1 200"), "{spelled}: {head}");
        assert!(
            head.contains("\r\nconnection: close"),
            "{spelled} waited without letting go of its connection: {head}"
        );
        assert!(String::from_utf8_lossy(&body).contains(&change.to_string()), "{spelled}: {head}");
    }
    let (head, body, _) = waited_over_http1("%77ait=10", "Accept-Encoding: gzip\r\n").await;
    assert!(head.contains("\r\nconnection: close"), "{head}");
    assert!(head.contains("\r\ncontent-encoding: gzip"), "{head}");
    assert_eq!(body.get(..2), Some(&[0x1f, 0x8b][..]), "a gzip member starts with its magic bytes: {body:?}");
}

/// A long poll sent over HTTP/1.1 on a connection of its own with `wait` spelled as
/// `wait` and `headers` added, answered by a change committed while it waits: its head
/// (lower case) and body, and the change's id.
async fn waited_over_http1(wait: &str, headers: &str) -> (String, Vec<u8>, Uuid) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    let (_, since) = follow(&app, &key, CONTACTS, None, 100).await;
    let mut stream = tokio::net::TcpStream::connect(app.address).await.expect("connect");
    let request = format!(
        "GET {CONTACTS}?since={since}&{wait} HTTP/1.1\r\nHost: lectern\r\nX-API-Key: {key}\r\n\
         X-Request-Id: waited-once\r\n{headers}\r\n"
    );
    stream.write_all(request.as_bytes()).await.expect("send the long poll");
    settle().await;
    let change = ContactSeed::named("After the wait").insert(&db.pool, workspace).await;

    let mut response = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut response))
        .await
        .expect("the connection closes once the long poll is answered")
        .expect("read the response");
    let split = response.windows(4).position(|window| window == b"\r\n\r\n").expect("a head and a body");
    let head = String::from_utf8_lossy(&response[..split]).to_ascii_lowercase();
    (head, response[split + 4..].to_vec(), change)
}

/// A request waiting (`wait=30`) on the contacts feed with a fresh key, its key then
/// revoked: the request, the workspace, and when the revocation landed.
async fn waiting_then_revoked(
    db: &TestDatabase,
    app: &TestApp,
) -> (tokio::task::JoinHandle<(Reply, Duration)>, Uuid, Instant) {
    let workspace = Uuid::new_v4();
    let (key_id, key) = create_key(&db.pool, workspace, &[Scope::ContactsRead]).await;
    let (_, since) = follow(app, &key, CONTACTS, None, 100).await;
    let waiting = send(app, &key, format!("{CONTACTS}?since={since}&wait=30"));
    settle().await;
    lectern_api::keys::store::revoke(&db.pool, &key_id).await.expect("revoke the key");
    (waiting, workspace, Instant::now())
}

/// The rule: a waiting request whose key is revoked is refused within the revocation bound
/// (a second), and never answered with a change committed after the revocation.
#[tokio::test]
async fn a_waiting_request_whose_key_is_revoked_is_refused_and_never_sees_a_later_change() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (waiting, workspace, revoked) = waiting_then_revoked(&db, &app).await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    ContactSeed::named("Committed after the revocation").insert(&db.pool, workspace).await;
    let (reply, _) = waiting.await.expect("the request");
    reply.assert_error(401, "UNAUTHORIZED");
    assert!(reply.text.contains("revoked"), "the refusal should say the key was revoked: {}", reply.text);
    assert!(revoked.elapsed() < Duration::from_secs(15), "refused only when its wait ended");
}

/// The rule: a revocation that lands while a request waits, with no change meanwhile,
/// ends the wait with a 401 within the revocation bound, not when the wait ends.
#[tokio::test]
async fn a_revocation_ends_a_wait_at_once() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (waiting, _, revoked) = waiting_then_revoked(&db, &app).await;
    let (reply, _) = waiting.await.expect("the request");
    let took = revoked.elapsed();
    reply.assert_error(401, "UNAUTHORIZED");
    // The bound is a second; generous here, far below the 30 s the request asked to wait.
    assert!(took < Duration::from_secs(5), "refused {took:?} after the revocation, not at once");
}

/// The rule: a waiting request keeps the feed it waits on. Its key is moved to another
/// workspace while it waits (the key's record changes, which wakes it to check the key
/// again): it is refused with `startOver`, never answered from the other workspace's feed
/// at this one's position.
#[tokio::test]
async fn a_waiting_request_whose_key_moves_to_another_workspace_is_refused_not_served_the_other_feed() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (_, key) = app.workspace_with_key().await;
    let (_, since) = follow(&app, &key, CONTACTS, None, 100).await;
    let waiting = send(&app, &key, format!("{CONTACTS}?since={since}&wait=20"));
    settle().await;

    let other = Uuid::new_v4();
    let key_id = key.split('_').nth(2).expect("lk_<environment>_<key id>_<secret>");
    sqlx::query("update api_keys set workspace_id = $1 where id = $2")
        .bind(other)
        .bind(key_id)
        .execute(&db.pool)
        .await
        .expect("move the key to another workspace");
    ContactSeed::named("In the other workspace").insert(&db.pool, other).await;
    let (reply, _) = waiting.await.expect("the request");
    reply.assert_error(400, "VALIDATION_ERROR");
    assert_eq!(reply.body["error"]["details"]["parameter"], "since", "{}", reply.text);
    assert_eq!(reply.body["error"]["details"]["startOver"], true, "{}", reply.text);
}
