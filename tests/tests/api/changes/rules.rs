//! Rules 1–3, 7 and 8 of the feed, and its parameters: order, content, the beginning,
//! `latest`, isolation, and the listing's strictness.

use lectern_api::keys::Scope;
use lectern_tests::app::TestApp;
use lectern_tests::seed::{insert_contacts, ContactSeed};
use lectern_tests::TestDatabase;
use serde_json::Value;
use uuid::Uuid;

use super::{changes, follow, ids, token};
use crate::items::ItemSeed;

const CONTACTS: &str = "/v1/contacts/changes";
const ITEMS: &str = "/v1/items/changes";

#[tokio::test]
async fn without_since_the_feed_starts_at_the_beginning_with_every_record_the_workspace_ever_had() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    let active = ContactSeed::named("Active").insert(&db.pool, workspace).await;
    let archived = ContactSeed::named("Archived").status("archived").insert(&db.pool, workspace).await;
    let deleted = ContactSeed::named("Deleted").status("deleted").insert(&db.pool, workspace).await;

    let (entries, _) = follow(&app, &key, CONTACTS, None, 100).await;
    let by_id = |id: Uuid| entries.iter().find(|entry| entry["id"] == id.to_string()).cloned();
    assert_eq!(entries.len(), 3, "{entries:?}");
    let active = by_id(active).expect("the active contact");
    assert_eq!(active["change"], "upserted");
    assert_eq!(active["record"]["name"], "Active");
    for removed in [archived, deleted] {
        let removed = by_id(removed).expect("a removed contact");
        assert_eq!(removed["change"], "removed");
        assert_eq!(removed["record"], Value::Null, "a removed record has no data: {removed}");
    }
}

#[tokio::test]
async fn changes_come_in_commit_order_each_record_once_at_its_state_now() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    let mut first = ContactSeed::named("First");
    first.insert(&db.pool, workspace).await;
    let second = ContactSeed::named("Second").insert(&db.pool, workspace).await;
    let third = ContactSeed::named("Third").insert(&db.pool, workspace).await;
    first.name = "First, renamed".to_owned();
    first.insert(&db.pool, workspace).await;

    let (entries, _) = follow(&app, &key, CONTACTS, None, 2).await;
    assert_eq!(ids(&entries), [second, third, first.id].map(|id| id.to_string()), "commit order of last changes");
    assert_eq!(entries[2]["record"]["name"], "First, renamed", "a record at its state now");
}

#[tokio::test]
async fn a_token_resumes_after_its_last_change_and_several_changes_of_a_record_come_out_as_one_entry() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    let mut kept = ContactSeed::named("Kept v1");
    kept.insert(&db.pool, workspace).await;
    let archived = ContactSeed::named("To archive");
    archived.insert(&db.pool, workspace).await;
    let (_, since) = follow(&app, &key, CONTACTS, None, 100).await;

    for version in 2..=4 {
        kept.name = format!("Kept v{version}");
        kept.insert(&db.pool, workspace).await;
    }
    archived.clone().status("archived").insert(&db.pool, workspace).await;

    app.heard_every_commit().await;
    let reply = app.get(&key, &format!("{CONTACTS}?since={since}")).await;
    assert_eq!(
        changes(&reply),
        [(kept.id.to_string(), "upserted".to_owned()), (archived.id.to_string(), "removed".to_owned())],
        "{}",
        reply.text
    );
    assert_eq!(reply.data()[0]["record"]["name"], "Kept v4");
    assert_eq!(reply.body["hasMore"], false);
    let (again, _) = follow(&app, &key, CONTACTS, Some(&token(&reply)), 100).await;
    assert!(again.is_empty(), "changes served twice: {again:?}");
}

#[tokio::test]
async fn latest_returns_no_data_and_a_token_at_the_newest_change() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    insert_contacts(&db.pool, workspace, "Before", 3).await;

    app.heard_every_commit().await;
    let reply = app.get(&key, &format!("{CONTACTS}?since=latest")).await;
    assert!(changes(&reply).is_empty(), "{}", reply.text);
    assert_eq!(reply.body["hasMore"], false);

    // The recipe: `latest`, then the listing, then the feed from the token. A change
    // made during the traversal comes again, which a mirror applies harmlessly.
    let listed = app.traverse(&key, "/v1/contacts?limit=2").await;
    let during = ContactSeed::named("During the traversal").insert(&db.pool, workspace).await;
    let (entries, _) = follow(&app, &key, CONTACTS, Some(&token(&reply)), 100).await;
    assert_eq!(ids(&entries), [during.to_string()], "only what changed after `latest`");
    assert_eq!(listed.iter().map(|page| page["data"].as_array().map_or(0, Vec::len)).sum::<usize>(), 3);
}

/// The rule: `latest` is answered from a bound sampled moments ago and shared, never one
/// sampled (a write committed synchronously) per request. While a writer commits every few
/// milliseconds, 200 `latest` requests take at most a few samples a second between them;
/// each token still repeats, never skips: following it serves the changes made after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latest_under_a_stream_of_writes_shares_recent_samples_instead_of_writing_once_per_request() {
    const REQUESTS: u64 = 200;
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let state = app.state.as_ref().expect("an in-process app");
    let (workspace, key) = app.workspace_with_key().await;
    app.heard_every_commit().await;
    let writing = tokio::spawn({
        let pool = db.pool.clone();
        async move {
            for index in 0.. {
                ContactSeed::named(&format!("Written meanwhile {index}")).insert(&pool, workspace).await;
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
        }
    });
    let before = state.feeds.bound.samples();
    let started = std::time::Instant::now();
    let mut last = None;
    for _ in 0..REQUESTS {
        let reply = app.get(&key, &format!("{CONTACTS}?since=latest")).await;
        reply.assert_ok();
        last = Some(token(&reply));
    }
    let samples = state.feeds.bound.samples() - before;
    let seconds = started.elapsed().as_secs_f64();
    let after_last = ContactSeed::named("After the last latest").insert(&db.pool, workspace).await;
    writing.abort();
    let most = (seconds / lectern_api::feed::bound::LATEST_WITHIN.as_secs_f64()).ceil() as u64 + 2;
    assert!(samples <= most, "{samples} samples for {REQUESTS} `latest` requests in {seconds:.1} s (at most {most})");
    let (entries, _) = follow(&app, &key, CONTACTS, last.as_deref(), 100).await;
    assert!(ids(&entries).contains(&after_last.to_string()), "a change after `latest` was skipped");
}

#[tokio::test]
async fn the_limit_cuts_the_feed_and_has_more_says_more_changes_are_ready() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    let seeded = insert_contacts(&db.pool, workspace, "Paged", 101).await;

    app.heard_every_commit().await;
    let first = app.get(&key, CONTACTS).await;
    assert_eq!(first.data().len(), 100, "the default limit is 100");
    assert_eq!(first.body["hasMore"], true);
    let second = app.get(&key, &format!("{CONTACTS}?since={}", token(&first))).await;
    assert_eq!(changes(&second), [(seeded[100].to_string(), "upserted".to_owned())]);
    assert_eq!(second.body["hasMore"], false);

    let (entries, _) = follow(&app, &key, CONTACTS, None, 7).await;
    assert_eq!(ids(&entries), seeded.iter().map(Uuid::to_string).collect::<Vec<_>>(), "pages of 7 in order");
}

#[tokio::test]
async fn a_record_in_the_feed_is_exactly_what_the_listing_serves() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let workspace = Uuid::new_v4();
    let key = app.key(workspace, &[Scope::ContactsRead, Scope::ItemsRead]).await;
    ContactSeed::named("Zoë & Co. ✓")
        .email("zoe@example.com")
        .phone("+49 30 1234")
        .tin("DE123")
        .address("Hauptstraße 1\nBerlin")
        .roles(true, true)
        .insert(&db.pool, workspace)
        .await;
    ItemSeed::named("Lamp")
        .sku("L-1")
        .unit("piece")
        .sale_price("0.10", "EUR")
        .purchase_price("-12.5000", "JPY")
        .insert(&db.pool, workspace)
        .await;

    for (feed, listing) in [(CONTACTS, "/v1/contacts"), (ITEMS, "/v1/items")] {
        let (entries, _) = follow(&app, &key, feed, None, 100).await;
        let listed = app.get(&key, listing).await;
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0]["record"], listed.data()[0], "{feed}");
        let mut fields: Vec<&str> = entries[0].as_object().expect("object").keys().map(String::as_str).collect();
        fields.sort_unstable();
        assert_eq!(fields, ["change", "id", "record"], "no additional properties");
    }
}

#[tokio::test]
async fn every_parameter_but_since_limit_and_wait_is_refused_and_each_bad_value_is_named() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (_, key) = app.workspace_with_key().await;
    for (query, named) in [
        ("cursor=abc", "cursor"),
        ("search=a", "search"),
        ("type=customer", "type"),
        ("sort=name", "sort"),
        ("page=2", "page"),
        ("limit=0", "limit"),
        ("limit=101", "limit"),
        ("limit=1.5", "limit"),
        ("wait=31", "wait"),
        ("wait=-1", "wait"),
        ("since=", "since"),
        ("since=latest&since=latest", "since"),
    ] {
        let reply = app.get(&key, &format!("{CONTACTS}?{query}")).await;
        reply.assert_error(400, "VALIDATION_ERROR");
        assert!(reply.details().iter().any(|detail| detail.starts_with(named)), "{query}: {}", reply.text);
    }
    let reply = app.get(&key, &format!("{CONTACTS}?limit=0&wait=99&since=nonsense")).await;
    reply.assert_error(400, "VALIDATION_ERROR");
    for named in ["limit", "wait", "since"] {
        assert!(reply.details().iter().any(|detail| detail.starts_with(named)), "{named}: {}", reply.text);
    }
}

#[tokio::test]
async fn each_feed_needs_its_resources_read_scope_and_a_key() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let workspace = Uuid::new_v4();
    let contacts_only = app.key(workspace, &[Scope::ContactsRead]).await;
    let items_only = app.key(workspace, &[Scope::ItemsRead]).await;
    app.get(&contacts_only, ITEMS).await.assert_error(403, "FORBIDDEN");
    app.get(&items_only, CONTACTS).await.assert_error(403, "FORBIDDEN");
    app.get(&contacts_only, CONTACTS).await.assert_ok();
    app.get(&items_only, ITEMS).await.assert_ok();
    let anonymous = app.send(app.http.get(app.url(CONTACTS))).await;
    anonymous.assert_error(401, "UNAUTHORIZED");
}

#[tokio::test]
async fn changes_is_a_path_segment_never_a_record_id() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let workspace = Uuid::new_v4();
    let key = app.key(workspace, &[Scope::ContactsRead, Scope::ItemsRead]).await;
    for path in [CONTACTS, ITEMS] {
        let reply = app.get(&key, path).await;
        reply.assert_ok();
        assert!(reply.body.get("syncToken").is_some(), "{path}: {}", reply.text);
    }
}

#[tokio::test]
async fn another_workspaces_records_never_appear_in_a_feed() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (mine, key) = app.workspace_with_key().await;
    let (theirs, _) = app.workspace_with_key().await;
    let own = insert_contacts(&db.pool, mine, "Mine", 3).await;
    insert_contacts(&db.pool, theirs, "Theirs", 5).await;
    ContactSeed::named("Theirs, archived").status("archived").insert(&db.pool, theirs).await;

    let (entries, _) = follow(&app, &key, CONTACTS, None, 2).await;
    assert_eq!(ids(&entries), own.iter().map(Uuid::to_string).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_change_written_by_hand_in_sql_reaches_the_feed() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    let repaired = ContactSeed::named("Typo").insert(&db.pool, workspace).await;
    let (_, since) = follow(&app, &key, CONTACTS, None, 100).await;

    sqlx::query("update contacts set name = 'Repaired' where workspace_id = $1 and id = $2")
        .bind(workspace)
        .bind(repaired)
        .execute(&db.pool)
        .await
        .expect("repair by hand");
    let inserted = Uuid::new_v4();
    sqlx::query(
        "insert into contacts (workspace_id, id, version, status, name, is_customer, is_supplier, created_at) \
         values ($1, $2, 1, 'active', 'Inserted by hand', true, false, now())",
    )
    .bind(workspace)
    .bind(inserted)
    .execute(&db.pool)
    .await
    .expect("insert by hand");

    let (entries, _) = follow(&app, &key, CONTACTS, Some(&since), 100).await;
    assert_eq!(ids(&entries), [repaired.to_string(), inserted.to_string()]);
    assert_eq!(entries[0]["record"]["name"], "Repaired");
}
