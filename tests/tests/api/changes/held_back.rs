//! What may hold the feed back, and what that costs. A change is served once every older
//! writer of the read model has ended (the feed's bound): only transactions writing
//! `contacts` or `items` hold it, never one in another database, a console session writing
//! other tables, or an index build; and while a writer holds it, the requests waiting for
//! the change cost the database nothing of their own: one sampler per process watches the
//! bound for all of them.

use std::time::Duration;

use lectern_read_model::Commit;
use lectern_tests::seed::ContactSeed;
use lectern_tests::TestApp;
use lectern_tests::TestDatabase;
use sqlx::{Connection, PgConnection};

use super::{changes, follow};

const CONTACTS: &str = "/v1/contacts/changes";
/// How long the transactions are held open: far longer than a change takes to reach the
/// feed when nothing holds it.
const HELD_FOR: Duration = Duration::from_secs(10);

/// Transactions committed and rolled back in the test's database so far, as PostgreSQL's
/// statistics count them.
async fn transactions(db: &TestDatabase) -> i64 {
    sqlx::query_scalar(
        "select (xact_commit + xact_rollback)::int8 from pg_stat_database where datname = current_database()",
    )
    .fetch_one(&db.pool)
    .await
    .expect("read the database's statistics")
}

/// The rule: transactions that write no row of the read model never hold the feed back. A
/// writing transaction in another database of the server, a console session writing another
/// table, and a transaction holding an index build's lock on `contacts` are all open while a
/// change commits; a request waiting for it gets it at once, not when they end.
#[tokio::test]
async fn transactions_that_do_not_write_the_read_model_never_hold_the_feed_back() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    let (_, since) = follow(&app, &key, CONTACTS, None, 100).await;

    let server = db.url.rsplit_once('/').map(|(server, _)| server.to_owned()).expect("a database URL");
    let mut elsewhere = PgConnection::connect(&format!("{server}/postgres")).await.expect("connect to `postgres`");
    let mut console = PgConnection::connect(&db.url).await.expect("connect as a console would");
    let mut index_build = PgConnection::connect(&db.url).await.expect("connect as an index build would");
    let holds = [
        (&mut elsewhere, "begin; create temporary table scratch (n int); insert into scratch values (1)"),
        (&mut console, "begin; create temporary table notes (n int); insert into notes values (1)"),
        (&mut index_build, "begin; lock table contacts in share update exclusive mode; select pg_current_xact_id()"),
    ];
    for (connection, statements) in holds {
        sqlx::raw_sql(statements).execute(connection).await.expect("open a transaction that writes");
    }

    let waiting = tokio::spawn({
        let request = app.http.get(app.url(&format!("{CONTACTS}?since={since}&wait=10"))).header("X-API-Key", &key);
        async move { lectern_tests::Reply::read(request.send().await.expect("the request")).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let new = ContactSeed::named("Committed while others held transactions open")
        .write(&db.pool, workspace, Commit::OnItsOwnBeforeFlush)
        .await;
    let reply = tokio::time::timeout(HELD_FOR, waiting).await;

    for connection in [&mut elsewhere, &mut console, &mut index_build] {
        sqlx::raw_sql("rollback").execute(connection).await.expect("end the held transaction");
    }
    let reply = reply.expect("the change waited for transactions that do not write the read model").expect("request");
    assert_eq!(changes(&reply), [(new.to_string(), "upserted".to_owned())], "{}", reply.text);
}

/// The rules: a writer of the read model holds the feed back only while it runs (a change
/// committed behind it is served once it ends, with its own), and the requests waiting
/// meanwhile run no statement of their own: 32 long polls cost the database a dozen
/// transactions a second, not the thousands they did when each one's look woke all the
/// others.
#[tokio::test]
async fn while_a_writer_holds_the_feed_back_waiting_requests_cost_the_database_nothing_of_their_own() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    let (_, since) = follow(&app, &key, CONTACTS, None, 100).await;

    // A writer of the read model that stays open, and a change committed behind it.
    let slow = ContactSeed::named("Written by a slow writer");
    let mut writer = db.pool.begin().await.expect("begin the slow writer");
    slow.write_in(&mut writer, workspace).await;
    let behind = ContactSeed::named("Committed behind it").insert(&db.pool, workspace).await;

    let waiting: Vec<_> = (0..32)
        .map(|_| {
            let request = app.http.get(app.url(&format!("{CONTACTS}?since={since}&wait=25"))).header("X-API-Key", &key);
            tokio::spawn(async move { lectern_tests::Reply::read(request.send().await.expect("the request")).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = transactions(&db).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let during = transactions(&db).await - before;
    assert!(waiting.iter().all(|request| !request.is_finished()), "a request was answered while the writer ran");

    writer.commit().await.expect("the slow writer commits");
    for request in waiting {
        let reply = tokio::time::timeout(Duration::from_secs(20), request).await.expect("answered").expect("request");
        let mut received: Vec<String> = changes(&reply).into_iter().map(|(id, _)| id).collect();
        received.sort();
        let mut expected = vec![slow.id.to_string(), behind.to_string()];
        expected.sort();
        assert_eq!(received, expected, "{}", reply.text);
    }
    eprintln!("{during} transactions in 5 s while 32 requests waited");
    // Before, each waiting request looked every 20 ms and each look woke all the others:
    // over 9,000 a second here.
    assert!(during < 5 * 300, "{during} transactions in 5 s while 32 requests waited: more than 300 a second");
}
