//! `lectern-projector rebuild`: the read model built again from the stream beside the
//! live one and folded in, as an operator runs it. Each test has its own nats-server and
//! database; the API runs in the test's process on the same database.

use std::collections::HashMap;
use std::time::Duration;

use lectern_api::keys::Scope;
use lectern_tests::app::{urlencode, TestApp};
use lectern_tests::nats::TestNats;
use lectern_tests::projector::{contact_event, eventually, projector_command, ProjectorProcess};
use lectern_tests::TestDatabase;
use serde_json::Value;
use sqlx::Connection;
use uuid::Uuid;

use crate::process::{
    acknowledged_everything, changes, publish_all, run_command, stream_with_early_events_dropped, tamper, CATCH_UP,
};

async fn rebuild(nats: &TestNats, db: &TestDatabase) -> (Option<i32>, Value, String) {
    let run = run_command(&nats.url, &db.url, &["rebuild", "--output", "json"], &[], None).await;
    let report = serde_json::from_str(run.stdout.trim()).unwrap_or(Value::Null);
    (run.code, report, run.stderr)
}

/// Starts `rebuild` on the database at `url` and kills it (`kill -9`) once it has recorded a
/// position.
async fn kill_a_rebuild_midway(nats_url: &str, url: &str, pool: &sqlx::PgPool) {
    let rebuild = projector_command(nats_url, url).arg("rebuild").spawn();
    let midway = eventually(Duration::from_secs(60), || async {
        let through: Option<i64> = sqlx::query_scalar("select through_sequence from read_model_rebuild")
            .fetch_optional(pool)
            .await
            .unwrap_or(None);
        through.is_some_and(|through| through > 0)
    })
    .await;
    assert!(midway, "the rebuild never recorded a position");
    rebuild.kill(CATCH_UP).await;
}

async fn verify_agrees(nats: &TestNats, db: &TestDatabase) {
    let run = run_command(&nats.url, &db.url, &["verify", "--wait-for-projector", "20"], &[], None).await;
    assert_eq!(run.code, Some(0), "verify after the rebuild:\n{}{}", run.stdout, run.stderr);
}

/// A client's copy of one feed: id → record, and what the last pages said of each id.
struct Follower {
    token: Option<String>,
    mirror: HashMap<String, Value>,
    received: Vec<(String, String)>,
}

impl Follower {
    /// Follows the contacts feed to its end; returns the changes received on the way.
    async fn follow(&mut self, app: &TestApp, key: &str) -> Vec<(String, String)> {
        app.heard_every_commit().await;
        let mut received = Vec::new();
        loop {
            let mut query = "/v1/contacts/changes?limit=50".to_owned();
            if let Some(token) = &self.token {
                query.push_str(&format!("&since={}", urlencode(token)));
            }
            let reply = app.get(key, &query).await;
            assert_eq!(reply.status, 200, "{}", reply.text);
            for change in reply.data() {
                let id = change["id"].as_str().expect("an id").to_owned();
                let kind = change["change"].as_str().expect("a change").to_owned();
                match kind.as_str() {
                    "upserted" => self.mirror.insert(id.clone(), change["record"].clone()),
                    _ => self.mirror.remove(&id),
                };
                received.push((id, kind));
            }
            self.token = reply.body["syncToken"].as_str().map(str::to_owned);
            if reply.body["hasMore"] != true {
                self.received.extend(received.iter().cloned());
                return received;
            }
        }
    }
}

#[tokio::test]
async fn a_rebuild_corrects_exactly_the_drifted_records_and_a_client_following_the_feed_from_before_receives_only_them()
{
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let workspace = Uuid::new_v4();
    let projector = ProjectorProcess::on(&nats.url, &db.url).spawn();
    let ids: Vec<Uuid> = (0..30).map(|_| Uuid::new_v4()).collect();
    let mut events: Vec<Value> =
        ids.iter().enumerate().map(|(n, id)| contact_event("created", workspace, *id, 1, &format!("C{n}"))).collect();
    events.extend(ids.iter().take(10).map(|id| contact_event("updated", workspace, *id, 2, "Updated")));
    publish_all(&changes(&nats).await, &events).await;
    acknowledged_everything(&nats, &projector).await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let key = app.key(workspace, &[Scope::ContactsRead]).await;
    let mut client = Follower { token: None, mirror: HashMap::new(), received: Vec::new() };
    client.follow(&app, &key).await;
    assert_eq!(client.mirror.len(), 30);

    // Behind the projector's back: a name, a row removed, a row no event wrote.
    tamper(&db.pool, "update contacts set name = 'Tampered' where workspace_id = $1 and id = $2", workspace, ids[3])
        .await;
    tamper(&db.pool, "delete from contacts where workspace_id = $1 and id = $2", workspace, ids[20]).await;
    let smuggled = Uuid::new_v4();
    tamper(
        &db.pool,
        "insert into contacts (workspace_id, id, version, status, name, is_customer, is_supplier, created_at) \
         values ($1, $2, 1, 'active', 'Smuggled', true, false, now())",
        workspace,
        smuggled,
    )
    .await;
    let tampered = client.follow(&app, &key).await;
    assert_eq!(tampered.len(), 2, "the client saw the tampering itself: {tampered:?}");

    let (code, report, stderr) = rebuild(&nats, &db).await;

    assert_eq!(code, Some(0), "{report}\n{stderr}");
    assert_eq!((report["corrected"].as_u64(), report["removed"].as_u64()), (Some(2), Some(1)), "{report}");
    let corrections = client.follow(&app, &key).await;
    let mut received: Vec<(String, String)> = corrections.clone();
    received.sort();
    let mut expected = vec![
        (ids[3].to_string(), "upserted".to_owned()),
        (ids[20].to_string(), "upserted".to_owned()),
        (smuggled.to_string(), "removed".to_owned()),
    ];
    expected.sort();
    assert_eq!(received, expected, "the feed after the rebuild gave exactly the corrections");
    assert_eq!(client.mirror[&ids[3].to_string()]["name"], "Updated");
    let listed: HashMap<String, Value> = app
        .traverse(&key, "/v1/contacts?limit=100")
        .await
        .iter()
        .flat_map(|page| page["data"].as_array().cloned().unwrap_or_default())
        .map(|record| (record["id"].as_str().unwrap_or_default().to_owned(), record))
        .collect();
    assert_eq!(client.mirror, listed, "the client's mirror is the listing");
    verify_agrees(&nats, &db).await;
    projector.stop().await;
}

#[tokio::test]
async fn a_rebuild_refuses_while_another_runs_and_when_the_stream_dropped_early_events_touching_nothing() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    stream_with_early_events_dropped(&nats, 3, 5).await;

    let (code, _, stderr) = rebuild(&nats, &db).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("from sequence 3 on") && stderr.contains("nothing was done"), "{stderr}");

    // Another rebuild holds the lock.
    let mut holder = sqlx::PgConnection::connect(&db.url).await.expect("connect");
    sqlx::query("select pg_advisory_lock($1)")
        .bind(lectern_projector::repair::rebuild::REBUILD_LOCK)
        .execute(&mut holder)
        .await
        .expect("take the rebuild lock");
    let (code, _, stderr) = rebuild(&nats, &db).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("another rebuild is running"), "{stderr}");
    let shadows: i64 = sqlx::query_scalar("select count(*) from pg_class where relname like 'rebuild_%'")
        .fetch_one(&db.pool)
        .await
        .expect("count shadow tables");
    assert_eq!(shadows, 0, "a refused rebuild created shadow tables");
}

#[tokio::test]
async fn a_rebuild_killed_midway_leaves_the_live_model_untouched_and_the_next_run_resumes_and_finishes() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let workspace = Uuid::new_v4();
    let projector = ProjectorProcess::on(&nats.url, &db.url).spawn();
    let ids: Vec<Uuid> = (0..4_000).map(|_| Uuid::new_v4()).collect();
    let mut events: Vec<Value> = Vec::new();
    for version in 1..=5 {
        let kind = if version == 1 { "created" } else { "updated" };
        events.extend(ids.iter().map(|id| contact_event(kind, workspace, *id, version, &format!("v{version}"))));
    }
    publish_all(&changes(&nats).await, &events).await;
    acknowledged_everything(&nats, &projector).await;
    tamper(&db.pool, "update contacts set name = 'Tampered' where workspace_id = $1 and id = $2", workspace, ids[7])
        .await;

    kill_a_rebuild_midway(&nats.url, &db.url, &db.pool).await;
    let through: i64 = sqlx::query_scalar("select through_sequence from read_model_rebuild")
        .fetch_one(&db.pool)
        .await
        .expect("the killed rebuild's position");
    assert!(through < 20_000, "the rebuild finished before it was killed (through {through})");
    let name: String = sqlx::query_scalar("select name from contacts where workspace_id = $1 and id = $2")
        .bind(workspace)
        .bind(ids[7])
        .fetch_one(&db.pool)
        .await
        .expect("the tampered row");
    assert_eq!(name, "Tampered", "the killed rebuild touched the live model");
    let shown = &crate::process::status(&nats.url, &db.url).await["rebuild"];
    assert_eq!(shown["throughSequence"].as_i64(), Some(through), "status shows the unfinished rebuild: {shown}");

    let (code, report, stderr) = rebuild(&nats, &db).await;

    assert_eq!(code, Some(0), "{report}\n{stderr}");
    assert!(report["resumedFrom"].as_u64().is_some_and(|from| from > 0), "it started over: {report}");
    assert_eq!(report["corrected"], 1, "{report}");
    assert_eq!(crate::process::status(&nats.url, &db.url).await["rebuild"], Value::Null, "a finished rebuild");
    verify_agrees(&nats, &db).await;
    projector.stop().await;
}

#[tokio::test]
async fn during_a_rebuild_under_load_every_api_request_succeeds_and_every_event_published_meanwhile_is_in_the_model() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let workspace = Uuid::new_v4();
    let projector = ProjectorProcess::on(&nats.url, &db.url).spawn();
    let jetstream = changes(&nats).await;
    let ids: Vec<Uuid> = (0..2_000).map(|_| Uuid::new_v4()).collect();
    let created: Vec<Value> = ids.iter().map(|id| contact_event("created", workspace, *id, 1, "v1")).collect();
    publish_all(&jetstream, &created).await;
    acknowledged_everything(&nats, &projector).await;
    tamper(&db.pool, "update contacts set name = 'Tampered' where workspace_id = $1 and id = $2", workspace, ids[5])
        .await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let key = app.key(workspace, &[Scope::ContactsRead]).await;

    let stop = tokio_util::sync::CancellationToken::new();
    // Every record updated again and again while the rebuild runs.
    let writer = {
        let (jetstream, ids, stop) = (jetstream.clone(), ids.clone(), stop.clone());
        tokio::spawn(async move {
            let mut version = 1;
            while !stop.is_cancelled() {
                version += 1;
                let updates: Vec<Value> = ids
                    .iter()
                    .map(|id| contact_event("updated", workspace, *id, version, &format!("v{version}")))
                    .collect();
                publish_all(&jetstream, &updates).await;
            }
            version
        })
    };
    // Listings, retrieves and the feed, one after another, throughout.
    let reader = async {
        let mut statuses: HashMap<u16, usize> = HashMap::new();
        let paths = [
            "/v1/contacts?limit=50".to_owned(),
            format!("/v1/contacts/{}", ids[9]),
            "/v1/contacts/changes?limit=100".to_owned(),
        ];
        let mut index = 0;
        while !stop.is_cancelled() {
            let reply = app.get(&key, &paths[index % paths.len()]).await;
            *statuses.entry(reply.status).or_default() += 1;
            index += 1;
        }
        statuses
    };
    let rebuilding = async {
        let rebuilt = rebuild(&nats, &db).await;
        stop.cancel();
        rebuilt
    };
    let (statuses, (code, report, stderr)) = tokio::join!(reader, rebuilding);
    let last_version = writer.await.expect("the writer");

    assert_eq!(code, Some(0), "{report}\n{stderr}");
    assert_eq!(statuses.keys().copied().collect::<Vec<u16>>(), [200], "answers during the rebuild: {statuses:?}");
    eprintln!("{} requests during the rebuild; {report}", statuses.values().sum::<usize>());
    let at_last = eventually(CATCH_UP, || async {
        let behind: i64 = sqlx::query_scalar("select count(*) from contacts where workspace_id = $1 and version <> $2")
            .bind(workspace)
            .bind(last_version)
            .fetch_one(&db.pool)
            .await
            .expect("count records behind");
        behind == 0
    })
    .await;
    if !at_last {
        let versions: Vec<(i64, i64)> =
            sqlx::query_as("select version, count(*) from contacts where workspace_id = $1 group by 1 order by 1")
                .bind(workspace)
                .fetch_all(&db.pool)
                .await
                .expect("versions held");
        let status = crate::process::status(&nats.url, &db.url).await;
        let sessions: Vec<String> = sqlx::query_scalar(
            "select concat_ws(' | ', application_name, state, wait_event_type || ':' || wait_event, \
                    (now() - xact_start)::text, left(query, 200)) \
             from pg_stat_activity where datname = current_database() and pid <> pg_backend_pid()",
        )
        .fetch_all(&db.pool)
        .await
        .expect("sessions");
        panic!(
            "records did not all reach version {last_version}: versions held {versions:?}; status {status}; \
             sessions {sessions:#?}; log:\n{}",
            projector.log()
        );
    }
    verify_agrees(&nats, &db).await;
    projector.stop().await;
}

#[tokio::test]
async fn a_column_a_migration_adds_to_the_read_model_is_filled_for_every_record_by_a_rebuild() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let workspace = Uuid::new_v4();
    let projector = ProjectorProcess::on(&nats.url, &db.url).spawn();
    let ids: Vec<Uuid> = (0..50).map(|_| Uuid::new_v4()).collect();
    let mut events: Vec<Value> =
        ids.iter().enumerate().map(|(n, id)| contact_event("created", workspace, *id, 1, &format!("c{n}"))).collect();
    events.push(contact_event("archived", workspace, ids[0], 2, ""));
    publish_all(&changes(&nats).await, &events).await;
    acknowledged_everything(&nats, &projector).await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let key = app.key(workspace, &[Scope::ContactsRead]).await;
    let mut client = Follower { token: None, mirror: HashMap::new(), received: Vec::new() };
    client.follow(&app, &key).await;

    // A release's migration (test-only here): a column the writes fill, empty in the rows
    // written before it.
    for statement in [
        "alter table contacts add column name_initial text",
        "create function fill_name_initial() returns trigger language plpgsql as $$ \
         begin new.name_initial := upper(left(new.name, 1)); return new; end $$",
        "create trigger contacts_name_initial before insert or update on contacts \
         for each row execute function fill_name_initial()",
    ] {
        sqlx::query(statement).execute(&db.pool).await.expect("the test-only migration");
    }

    let (code, report, stderr) = rebuild(&nats, &db).await;

    assert_eq!(code, Some(0), "{report}\n{stderr}");
    let unfilled: i64 =
        sqlx::query_scalar("select count(*) from contacts where name_initial is distinct from upper(left(name, 1))")
            .fetch_one(&db.pool)
            .await
            .expect("count unfilled rows");
    assert_eq!(unfilled, 0, "rows the rebuild left without the new column's value");
    let filled: i64 = sqlx::query_scalar("select count(*) from contacts where name_initial = 'C'")
        .fetch_one(&db.pool)
        .await
        .expect("count filled rows");
    assert_eq!(filled, 49, "every active record has it");
    assert_eq!(report["corrected"], 49, "the active rows differ; the tombstone, all null, does not: {report}");
    let resent = client.follow(&app, &key).await;
    assert_eq!(resent.len(), 49, "each changed record reaches the feed once");
    verify_agrees(&nats, &db).await;
    projector.stop().await;
}

/// The rule: a rebuild never trusts shadow tables a restart can empty. Its shadow tables
/// are unlogged, so a crash of PostgreSQL empties them while the position it recorded
/// survives; the rebuild run after the crash starts again instead of folding an empty
/// shadow (which would remove every record it lost), and removes nothing.
#[tokio::test]
async fn a_rebuild_resumed_after_a_database_crash_starts_again_and_removes_nothing() {
    let nats = TestNats::start().await;
    let mut server = lectern_tests::postgres::TestPostgres::start_new().await;
    let url = server.url();
    lectern_api::reads::create_and_migrate(&url).await.expect("migrate");
    let pool = sqlx::postgres::PgPoolOptions::new().max_connections(2).connect(&url).await.expect("connect");
    let workspace = Uuid::new_v4();
    let projector = ProjectorProcess::on(&nats.url, &url).spawn();
    // The first 1,000 events are the only ones of their records: a shadow that lost them
    // and went on from where it had been would remove those records.
    let only_early: Vec<Uuid> = (0..1_000).map(|_| Uuid::new_v4()).collect();
    let later: Vec<Uuid> = (0..3_000).map(|_| Uuid::new_v4()).collect();
    let mut events: Vec<Value> =
        only_early.iter().map(|id| contact_event("created", workspace, *id, 1, "early")).collect();
    for version in 1..=3 {
        let kind = if version == 1 { "created" } else { "updated" };
        events.extend(later.iter().map(|id| contact_event(kind, workspace, *id, version, &format!("v{version}"))));
    }
    let ids: Vec<Uuid> = only_early.iter().chain(&later).copied().collect();
    publish_all(&changes(&nats).await, &events).await;
    acknowledged_everything(&nats, &projector).await;
    projector.stop().await;
    tamper(&pool, "update contacts set name = 'Tampered' where workspace_id = $1 and id = $2", workspace, ids[7]).await;

    kill_a_rebuild_midway(&nats.url, &url, &pool).await;
    // What was committed is on disk (the test server does not wait for flushes); the
    // unlogged shadow tables are not, whatever is flushed.
    sqlx::query("select read_model_flush('test')").execute(&pool).await.expect("flush the WAL");
    pool.close().await;
    server.stop().await;
    server.start().await;
    let pool = sqlx::postgres::PgPoolOptions::new().max_connections(2).connect(&url).await.expect("connect");
    let recorded: i64 = sqlx::query_scalar("select through_sequence from read_model_rebuild")
        .fetch_one(&pool)
        .await
        .expect("the killed rebuild's position survives the crash");
    assert!(recorded > 0);

    let run = run_command(&nats.url, &url, &["rebuild", "--output", "json"], &[], None).await;
    let report: Value = serde_json::from_str(run.stdout.trim()).unwrap_or(Value::Null);

    assert_eq!(run.code, Some(0), "{report}\n{}", run.stderr);
    assert_eq!(report["resumedFrom"], 0, "it resumed shadow tables the crash had emptied: {report}");
    assert_eq!((report["corrected"].as_u64(), report["removed"].as_u64()), (Some(1), Some(0)), "{report}");
    let active: i64 = sqlx::query_scalar("select count(*) from contacts where workspace_id = $1 and status = 'active'")
        .bind(workspace)
        .fetch_one(&pool)
        .await
        .expect("count the active contacts");
    assert_eq!(active, 4_000);
}

/// The rule: no fold removes a large share of a workspace's records without `--force`.
/// Rows no event wrote are removals; more than a tenth of a workspace's (and more than
/// ten) stops the rebuild before it changes anything, saying which and why; `--force`
/// removes them.
#[tokio::test]
async fn a_rebuild_that_would_remove_more_than_a_tenth_of_a_workspace_stops_unless_forced() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let workspace = Uuid::new_v4();
    let projector = ProjectorProcess::on(&nats.url, &db.url).spawn();
    let ids: Vec<Uuid> = (0..40).map(|_| Uuid::new_v4()).collect();
    let events: Vec<Value> =
        ids.iter().enumerate().map(|(n, id)| contact_event("created", workspace, *id, 1, &format!("C{n}"))).collect();
    publish_all(&changes(&nats).await, &events).await;
    acknowledged_everything(&nats, &projector).await;
    for index in 0..15 {
        tamper(
            &db.pool,
            &format!(
                "insert into contacts (workspace_id, id, version, status, name, is_customer, is_supplier, created_at) \
                 values ($1, $2, 1, 'active', 'Written by hand {index}', true, false, now())"
            ),
            workspace,
            Uuid::new_v4(),
        )
        .await;
    }
    let active = || async {
        sqlx::query_scalar::<_, i64>("select count(*) from contacts where workspace_id = $1 and status = 'active'")
            .bind(workspace)
            .fetch_one(&db.pool)
            .await
            .expect("count the active contacts")
    };

    let (code, report, stderr) = rebuild(&nats, &db).await;

    assert_eq!(code, Some(1), "{report}\n{stderr}");
    assert!(
        stderr.contains(&format!("15 of the 55 active contacts of workspace {workspace}"))
            && stderr.contains("--force"),
        "the refusal names what it would remove and how to go on: {stderr}"
    );
    assert_eq!(active().await, 55, "a refused rebuild changed the live model");

    let run = run_command(&nats.url, &db.url, &["rebuild", "--force", "--output", "json"], &[], None).await;
    let report: Value = serde_json::from_str(run.stdout.trim()).unwrap_or(Value::Null);
    assert_eq!(run.code, Some(0), "{report}\n{}", run.stderr);
    assert_eq!(report["removed"], 15, "{report}");
    assert_eq!(active().await, 40);
    projector.stop().await;
}
