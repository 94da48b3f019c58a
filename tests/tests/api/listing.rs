//! listContacts: defaults, orders, page bounds, type filter, keyset traversal under
//! change, workspace isolation, cursor refusals and the exact shape of a page.

use std::collections::HashSet;
use std::time::Duration;

use chrono::Duration as Span;
use lectern_tests::app::{id_of, id_strings, urlencode, AppOptions};
use lectern_tests::projector::eventually;
use lectern_tests::seed::{base_time, insert_contacts};
use lectern_tests::{ContactSeed, Reply, TestApp, TestDatabase};
use serde_json::Value;
use uuid::Uuid;

/// `seed` with a chosen id, so an expected id order can be written down.
fn with_id(mut seed: ContactSeed, id: u128) -> ContactSeed {
    seed.id = Uuid::from_u128(id);
    seed
}

/// A 400 VALIDATION_ERROR naming `cursor` and telling the client to start over.
fn assert_start_over(reply: &Reply) {
    reply.assert_error(400, "VALIDATION_ERROR");
    let details = reply.details();
    assert_eq!(details.len(), 1, "{details:?}");
    assert!(details[0].starts_with("cursor:"), "{details:?}");
    assert!(details[0].contains("start a new traversal"), "{details:?}");
    let message = reply.body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("start a new traversal"), "{message}");
}

fn sorted_keys(value: &Value) -> Vec<String> {
    let mut keys: Vec<String> =
        value.as_object().unwrap_or_else(|| panic!("not an object: {value}")).keys().cloned().collect();
    keys.sort_unstable();
    keys
}

// Defaults.

#[tokio::test]
async fn default_limit_is_50_with_has_more_when_more_exist() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    let inserted = insert_contacts(&app.pool, workspace, "contact", 51).await;

    let reply = app.get(&key, "/v1/contacts").await;

    reply.assert_ok();
    assert_eq!(reply.ids(), id_strings(&inserted[..50]));
    assert_eq!(reply.body["page"]["hasMore"], true);
    assert!(!reply.next_cursor().is_empty());
}

#[tokio::test]
async fn default_sort_is_created_at_ascending() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    // Name order and id order both run against creation order.
    let oldest = with_id(ContactSeed::named("zulu").at(10), 3).insert(&app.pool, workspace).await;
    let middle = with_id(ContactSeed::named("mike").at(20), 2).insert(&app.pool, workspace).await;
    let newest = with_id(ContactSeed::named("alpha").at(30), 1).insert(&app.pool, workspace).await;

    let reply = app.get(&key, "/v1/contacts").await;

    reply.assert_ok();
    assert_eq!(reply.ids(), id_strings(&[oldest, middle, newest]));
}

#[tokio::test]
async fn created_at_ties_are_broken_by_id_ascending() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    for (id, name) in [(4, "a"), (2, "b"), (5, "c"), (1, "d"), (3, "e")] {
        with_id(ContactSeed::named(name).at(0), id).insert(&app.pool, workspace).await;
    }

    let reply = app.get(&key, "/v1/contacts").await;

    reply.assert_ok();
    assert_eq!(reply.ids(), id_strings(&(1..=5).map(Uuid::from_u128).collect::<Vec<_>>()));
}

#[tokio::test]
async fn default_type_is_all() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    let customer = ContactSeed::named("customer").roles(true, false).at(1).insert(&app.pool, workspace).await;
    let supplier = ContactSeed::named("supplier").roles(false, true).at(2).insert(&app.pool, workspace).await;
    let both = ContactSeed::named("both").roles(true, true).at(3).insert(&app.pool, workspace).await;
    let neither = ContactSeed::named("neither").roles(false, false).at(4).insert(&app.pool, workspace).await;

    let reply = app.get(&key, "/v1/contacts").await;

    reply.assert_ok();
    assert_eq!(reply.ids(), id_strings(&[customer, supplier, both, neither]));
    assert_eq!(reply.body["data"], app.get(&key, "/v1/contacts?type=all").await.body["data"]);
}

// Name order.

#[tokio::test]
async fn sort_by_name_is_a_human_case_insensitive_order() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    for (index, name) in ["Zulu", "cherry", "Arzt", "Banana", "apple", "Ärger", "zebra"].into_iter().enumerate() {
        ContactSeed::named(name).at(index as i64).insert(&app.pool, workspace).await;
    }

    let reply = app.get(&key, "/v1/contacts?sort=name").await;

    reply.assert_ok();
    // Byte order would give Arzt, Banana, Zulu, apple, cherry, zebra, Ärger.
    assert_eq!(reply.names(), ["apple", "Ärger", "Arzt", "Banana", "cherry", "zebra", "Zulu"]);
}

#[tokio::test]
async fn name_ties_are_broken_by_id_ascending() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    // Creation order runs against id order, so a created_at tie-break would show.
    for (seconds, id) in [(0, 4), (1, 3), (2, 2), (3, 1)] {
        with_id(ContactSeed::named("Acme").at(seconds), id).insert(&app.pool, workspace).await;
    }
    let before = with_id(ContactSeed::named("Aardvark").at(9), 9).insert(&app.pool, workspace).await;

    let reply = app.get(&key, "/v1/contacts?sort=name").await;

    reply.assert_ok();
    let mut expected = vec![before];
    expected.extend((1..=4).map(Uuid::from_u128));
    assert_eq!(reply.ids(), id_strings(&expected));
}

// Page bounds.

#[tokio::test]
async fn limit_1_gives_one_contact_and_a_cursor() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    let inserted = insert_contacts(&app.pool, workspace, "contact", 3).await;

    let reply = app.get(&key, "/v1/contacts?limit=1").await;

    reply.assert_ok();
    assert_eq!(reply.ids(), id_strings(&inserted[..1]));
    assert_eq!(reply.body["page"]["hasMore"], true);
    assert!(!reply.next_cursor().is_empty());
}

#[tokio::test]
async fn limit_100_gives_a_hundred_contacts() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    let inserted = insert_contacts(&app.pool, workspace, "contact", 101).await;

    let reply = app.get(&key, "/v1/contacts?limit=100").await;

    reply.assert_ok();
    assert_eq!(reply.ids(), id_strings(&inserted[..100]));
    assert_eq!(reply.body["page"]["hasMore"], true);
}

#[tokio::test]
async fn a_page_that_holds_the_last_contact_has_no_more_and_a_null_cursor() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    let inserted = insert_contacts(&app.pool, workspace, "contact", 3).await;

    // Exactly `limit` records left: the extra row fetched must not invent a next page.
    let reply = app.get(&key, "/v1/contacts?limit=3").await;

    reply.assert_ok();
    assert_eq!(reply.ids(), id_strings(&inserted));
    assert_eq!(reply.body["page"]["hasMore"], false);
    assert!(reply.body["page"]["nextCursor"].is_null(), "{}", reply.text);
}

#[tokio::test]
async fn the_page_reached_by_the_last_cursor_has_no_more_and_a_null_cursor() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    let inserted = insert_contacts(&app.pool, workspace, "contact", 3).await;
    let first = app.get(&key, "/v1/contacts?limit=2").await;

    let reply = app.get(&key, &format!("/v1/contacts?limit=2&cursor={}", urlencode(&first.next_cursor()))).await;

    reply.assert_ok();
    assert_eq!(reply.ids(), id_strings(&inserted[2..]));
    assert_eq!(reply.body["page"]["hasMore"], false);
    assert!(reply.body["page"]["nextCursor"].is_null(), "{}", reply.text);
}

#[tokio::test]
async fn an_empty_workspace_gives_an_empty_last_page() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (_, key) = app.workspace_with_key().await;
    insert_contacts(&app.pool, Uuid::new_v4(), "elsewhere", 3).await;

    let reply = app.get(&key, "/v1/contacts").await;

    reply.assert_ok();
    assert_eq!(reply.body["data"], serde_json::json!([]));
    assert_eq!(reply.body["page"], serde_json::json!({ "hasMore": false, "nextCursor": null }));
}

// Active only.

#[tokio::test]
async fn archived_and_deleted_contacts_are_never_listed() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    let mut active = Vec::new();
    for index in 0..6 {
        let status = ["active", "archived", "deleted"][index % 3];
        let seed = ContactSeed::named(&format!("contact {index}")).roles(true, true).at(index as i64).status(status);
        let id = seed.insert(&app.pool, workspace).await;
        if status == "active" {
            active.push(id.to_string());
        }
    }

    for query in ["", "?sort=name", "?type=customer", "?type=supplier", "?limit=1"] {
        let listed = app.traversal_ids(&key, &format!("/v1/contacts{query}")).await;

        assert_eq!(listed, active, "{query}");
    }
}

#[tokio::test]
async fn a_contact_archived_after_listing_disappears_from_the_listing() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    let keep = ContactSeed::named("keep").at(0);
    let archive = ContactSeed::named("archive").at(1);
    keep.insert(&app.pool, workspace).await;
    archive.insert(&app.pool, workspace).await;
    assert_eq!(app.get(&key, "/v1/contacts").await.data().len(), 2);

    archive.clone().status("archived").insert(&app.pool, workspace).await;

    // The first page above was cached; the archive reaches the cache by NOTIFY, which
    // PostgreSQL delivers after the commit, so the page is fresh within moments, not
    // necessarily on the very next request.
    let fresh = eventually(NOTIFY_DELIVERY, || async {
        let reply = app.get(&key, "/v1/contacts").await;
        reply.assert_ok();
        reply.ids() == [keep.id.to_string()]
    })
    .await;
    assert!(fresh, "the archived contact is still listed after {NOTIFY_DELIVERY:?}");
}

/// Ample for a notification to reach the API's listener on a loaded machine.
const NOTIFY_DELIVERY: Duration = Duration::from_secs(5);

// Type filter.

/// Four contacts, one per role combination, created in this order.
async fn one_per_role(app: &TestApp, workspace: Uuid) -> [String; 4] {
    let mut ids = Vec::new();
    for (index, (name, customer, supplier)) in
        [("customer", true, false), ("supplier", false, true), ("both", true, true), ("neither", false, false)]
            .into_iter()
            .enumerate()
    {
        let seed = ContactSeed::named(name).roles(customer, supplier).at(index as i64);
        ids.push(seed.insert(&app.pool, workspace).await.to_string());
    }
    ids.try_into().unwrap_or_else(|ids| panic!("not four ids: {ids:?}"))
}

#[tokio::test]
async fn type_customer_lists_the_contacts_that_are_customers() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    let [customer, _supplier, both, _neither] = one_per_role(&app, workspace).await;

    let reply = app.get(&key, "/v1/contacts?type=customer").await;

    reply.assert_ok();
    assert_eq!(reply.ids(), [customer, both]);
}

#[tokio::test]
async fn type_supplier_lists_the_contacts_that_are_suppliers() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    let [_customer, supplier, both, _neither] = one_per_role(&app, workspace).await;

    let reply = app.get(&key, "/v1/contacts?type=supplier").await;

    reply.assert_ok();
    assert_eq!(reply.ids(), [supplier, both]);
}

#[tokio::test]
async fn type_all_lists_every_contact_whatever_its_roles() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    let all = one_per_role(&app, workspace).await;

    let reply = app.get(&key, "/v1/contacts?type=all").await;

    reply.assert_ok();
    assert_eq!(reply.ids(), all);
}

// Traversal.

#[tokio::test]
async fn a_created_at_traversal_returns_every_active_contact_once_in_order() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    let inserted = insert_contacts(&app.pool, workspace, "contact", 23).await;
    ContactSeed::named("archived").at(5).status("archived").insert(&app.pool, workspace).await;

    let listed = app.traversal_ids(&key, "/v1/contacts?limit=5").await;

    assert_eq!(listed, id_strings(&inserted));
}

#[tokio::test]
async fn a_created_at_traversal_through_ties_returns_each_contact_once() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    // Three groups of equal created_at; pages of 2 cut through every group.
    let mut expected = Vec::new();
    for group in 0..3_i64 {
        for id in (1..=5_u128).rev() {
            let seed = with_id(ContactSeed::named("tied").at(group), group as u128 * 100 + id);
            seed.insert(&app.pool, workspace).await;
        }
        expected.extend((1..=5_u128).map(|id| Uuid::from_u128(group as u128 * 100 + id)));
    }

    let listed = app.traversal_ids(&key, "/v1/contacts?limit=2").await;

    assert_eq!(listed, id_strings(&expected));
}

#[tokio::test]
async fn a_created_at_traversal_keeps_microsecond_precision_between_pages() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    // All within one millisecond, ids running against time: a cursor cut to
    // milliseconds would skip or repeat records.
    let mut expected = Vec::new();
    for micros in 1..=6_i64 {
        let mut seed = with_id(ContactSeed::named("same millisecond"), 100 - micros as u128);
        seed.created_at = base_time() + Span::microseconds(micros);
        expected.push(seed.insert(&app.pool, workspace).await);
    }

    let listed = app.traversal_ids(&key, "/v1/contacts?limit=1").await;

    assert_eq!(listed, id_strings(&expected));
}

#[tokio::test]
async fn a_name_traversal_returns_every_active_contact_once_in_order() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    // Lower-case ASCII letters only, so the human order is plain string order here;
    // repeated names make id tie-breaks fall on page boundaries.
    let names = ["delta", "alpha", "charlie", "bravo", "echo", "alphabet"];
    let mut expected = Vec::new();
    for index in 0..23 {
        let name = names[index % names.len()];
        let id = ContactSeed::named(name).at(index as i64).insert(&app.pool, workspace).await;
        expected.push((name, id));
    }
    ContactSeed::named("bravo").status("deleted").insert(&app.pool, workspace).await;
    expected.sort();

    let listed = app.traversal_ids(&key, "/v1/contacts?sort=name&limit=4").await;

    assert_eq!(listed, expected.iter().map(|(_, id)| id.to_string()).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_name_traversal_through_case_and_accent_variants_returns_each_once() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    let names = ["ACME", "acme", "Acme", "Ärger", "ärger", "Arger", "arger", "Zoë & Co. ✓", "zoe", "東京"];
    for (index, name) in names.into_iter().enumerate() {
        ContactSeed::named(name).at(index as i64).insert(&app.pool, workspace).await;
    }
    let whole = app.get(&key, "/v1/contacts?sort=name&limit=100").await.ids();

    let listed = app.traversal_ids(&key, "/v1/contacts?sort=name&limit=1").await;

    assert_eq!(listed, whole);
    assert_eq!(listed.iter().collect::<HashSet<_>>().len(), names.len());
}

#[tokio::test]
async fn a_traversal_with_a_type_filter_returns_every_matching_contact_once_in_order() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    let mut suppliers = Vec::new();
    for index in 0..20 {
        let (customer, supplier) = [(true, false), (false, true), (true, true)][index % 3];
        let seed = ContactSeed::named(&format!("contact {index:02}")).roles(customer, supplier).at(index as i64);
        let id = seed.insert(&app.pool, workspace).await;
        if supplier {
            suppliers.push(id);
        }
    }

    let listed = app.traversal_ids(&key, "/v1/contacts?type=supplier&limit=3").await;

    assert_eq!(listed, id_strings(&suppliers));
}

#[tokio::test]
async fn limit_may_change_between_pages_of_one_traversal() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    let inserted = insert_contacts(&app.pool, workspace, "contact", 12).await;
    let mut listed = Vec::new();
    let mut cursor: Option<String> = None;

    for limit in [2, 5, 1, 100] {
        let query = match &cursor {
            Some(cursor) => format!("/v1/contacts?limit={limit}&cursor={}", urlencode(cursor)),
            None => format!("/v1/contacts?limit={limit}"),
        };
        let reply = app.get(&key, &query).await;
        reply.assert_ok();
        assert!(reply.data().len() <= limit, "limit {limit}: {}", reply.text);
        listed.extend(reply.ids());
        cursor = reply.body["page"]["nextCursor"].as_str().map(str::to_owned);
    }

    assert_eq!(listed, id_strings(&inserted));
    assert!(cursor.is_none(), "the last page has no cursor");
}

#[tokio::test]
async fn a_cursor_is_accepted_when_default_parameters_are_spelled_out() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    let inserted = insert_contacts(&app.pool, workspace, "contact", 3).await;
    let first = app.get(&key, "/v1/contacts?limit=1").await;

    let query = format!("/v1/contacts?type=all&sort=createdAt&search=&cursor={}", urlencode(&first.next_cursor()));
    let reply = app.get(&key, &query).await;

    reply.assert_ok();
    assert_eq!(reply.ids(), id_strings(&inserted[1..]));
}

#[tokio::test]
async fn a_cursor_works_with_another_key_of_the_same_workspace() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    let other_key = app.key(workspace, &[lectern_api::keys::Scope::ContactsRead]).await;
    let inserted = insert_contacts(&app.pool, workspace, "contact", 3).await;
    let first = app.get(&key, "/v1/contacts?limit=1").await;

    let reply = app.get(&other_key, &format!("/v1/contacts?cursor={}", urlencode(&first.next_cursor()))).await;

    reply.assert_ok();
    assert_eq!(reply.ids(), id_strings(&inserted[1..]));
}

// Traversal while records change.

#[tokio::test]
async fn contacts_unchanged_for_a_whole_created_at_traversal_are_returned_once_while_others_come_and_go() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    // Ten seconds apart, so new records can be slotted in anywhere.
    let mut seeds = Vec::new();
    for index in 0..12_i64 {
        let seed = ContactSeed::named(&format!("stable {index:02}")).at(index * 10);
        seed.insert(&app.pool, workspace).await;
        seeds.push(seed);
    }
    let first = app.get(&key, "/v1/contacts?limit=4").await;
    first.assert_ok();
    let mut listed = first.ids();

    // Behind the cursor: one new record, one served record removed.
    let behind = ContactSeed::named("inserted behind").at(15).insert(&app.pool, workspace).await;
    seeds[1].clone().status("deleted").insert(&app.pool, workspace).await;
    // Ahead of the cursor: one record removed before it could be served.
    let removed_ahead = seeds[6].clone().status("archived").insert(&app.pool, workspace).await;
    let second = app.get(&key, &format!("/v1/contacts?limit=4&cursor={}", urlencode(&first.next_cursor()))).await;
    second.assert_ok();
    listed.extend(second.ids());
    // Ahead again: one more new record, and a removal after the second page.
    let ahead = ContactSeed::named("inserted ahead").at(95).insert(&app.pool, workspace).await;
    seeds[10].clone().status("deleted").insert(&app.pool, workspace).await;
    listed.extend(app.ids_after(&key, "/v1/contacts?limit=4", second.next_cursor()).await);

    let stable: Vec<String> = [0, 2, 3, 4, 5, 7, 8, 9, 11].iter().map(|&index| seeds[index].id.to_string()).collect();
    let served_stable: Vec<String> = listed.iter().filter(|id| stable.contains(id)).cloned().collect();
    assert_eq!(served_stable, stable, "every stable contact once, in order: {listed:?}");
    assert_eq!(listed.iter().collect::<HashSet<_>>().len(), listed.len(), "duplicates: {listed:?}");
    assert!(!listed.contains(&behind.to_string()), "a record inserted behind the cursor was served");
    assert!(!listed.contains(&removed_ahead.to_string()), "a removed record was served after its removal");
    assert!(!listed.contains(&seeds[10].id.to_string()), "a removed record was served after its removal");
    assert!(listed.contains(&ahead.to_string()), "a record inserted ahead of the cursor was skipped");
}

#[tokio::test]
async fn contacts_unchanged_for_a_whole_name_traversal_are_returned_once_while_others_come_and_go() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    let names = ["bb", "dd", "ff", "hh", "jj", "ll", "nn", "pp"];
    let mut seeds = Vec::new();
    for (index, name) in names.into_iter().enumerate() {
        let seed = ContactSeed::named(name).at(index as i64);
        seed.insert(&app.pool, workspace).await;
        seeds.push(seed);
    }
    let first = app.get(&key, "/v1/contacts?sort=name&limit=3").await;
    first.assert_ok();
    let mut listed = first.ids();

    let behind = ContactSeed::named("cc").insert(&app.pool, workspace).await;
    // The very record the cursor points at goes away.
    seeds[2].clone().status("deleted").insert(&app.pool, workspace).await;
    let removed_ahead = seeds[5].clone().status("archived").insert(&app.pool, workspace).await;
    listed.extend(app.ids_after(&key, "/v1/contacts?sort=name&limit=3", first.next_cursor()).await);

    let stable: Vec<String> = [0, 1, 3, 4, 6, 7].iter().map(|&index| seeds[index].id.to_string()).collect();
    let served_stable: Vec<String> = listed.iter().filter(|id| stable.contains(id)).cloned().collect();
    assert_eq!(served_stable, stable, "every stable contact once, in order: {listed:?}");
    assert_eq!(listed.iter().collect::<HashSet<_>>().len(), listed.len(), "duplicates: {listed:?}");
    assert!(!listed.contains(&behind.to_string()), "a record inserted behind the cursor was served");
    assert!(!listed.contains(&removed_ahead.to_string()), "a removed record was served after its removal");
}

// Workspace isolation.

#[tokio::test]
async fn each_key_traverses_only_its_own_workspace() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (red, red_key) = app.workspace_with_key().await;
    let (blue, blue_key) = app.workspace_with_key().await;
    // Interleaved in time and in name, so a leak would land mid-page.
    let mut red_ids = Vec::new();
    let mut blue_ids = Vec::new();
    for index in 0..15_i64 {
        red_ids.push(ContactSeed::named("shared name").at(index * 2).insert(&app.pool, red).await);
        blue_ids.push(ContactSeed::named("shared name").at(index * 2 + 1).insert(&app.pool, blue).await);
    }
    let by_name = |ids: &[Uuid]| {
        let mut ids = ids.to_vec();
        ids.sort();
        id_strings(&ids)
    };

    for (key, own) in [(&red_key, &red_ids), (&blue_key, &blue_ids)] {
        assert_eq!(app.traversal_ids(key, "/v1/contacts?limit=4").await, id_strings(own));
        assert_eq!(app.traversal_ids(key, "/v1/contacts?sort=name&limit=4").await, by_name(own));
    }
}

// Cursor refusals.

#[tokio::test]
async fn a_tampered_cursor_is_a_400_that_says_start_over() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    insert_contacts(&app.pool, workspace, "contact", 3).await;
    let cursor = app.get(&key, "/v1/contacts?limit=1").await.next_cursor();
    let mut chars: Vec<char> = cursor.chars().collect();
    let middle = chars.len() / 2;
    chars[middle] = if chars[middle] == 'A' { 'B' } else { 'A' };
    let tampered: String = chars.into_iter().collect();

    let reply = app.get(&key, &format!("/v1/contacts?limit=1&cursor={}", urlencode(&tampered))).await;

    assert_start_over(&reply);
}

#[tokio::test]
async fn garbage_cursor_text_is_a_400_that_says_start_over() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    insert_contacts(&app.pool, workspace, "contact", 3).await;

    for garbage in ["not-a-cursor", "!!!", "a", &"A".repeat(200), "eyJ0eXAiOiJKV1QifQ", "ä€𝄞"] {
        let reply = app.get(&key, &format!("/v1/contacts?cursor={}", urlencode(garbage))).await;

        assert_start_over(&reply);
    }
}

#[tokio::test]
async fn an_empty_cursor_is_a_400_that_says_start_over() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    insert_contacts(&app.pool, workspace, "contact", 3).await;

    let reply = app.get(&key, "/v1/contacts?cursor=").await;

    assert_start_over(&reply);
}

#[tokio::test]
async fn a_cursor_from_another_workspace_is_a_400_that_says_start_over() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    let (other, other_key) = app.workspace_with_key().await;
    insert_contacts(&app.pool, workspace, "mine", 3).await;
    insert_contacts(&app.pool, other, "theirs", 3).await;
    let foreign = app.get(&other_key, "/v1/contacts?limit=1").await.next_cursor();

    let reply = app.get(&key, &format!("/v1/contacts?limit=1&cursor={}", urlencode(&foreign))).await;

    assert_start_over(&reply);
}

/// A cursor issued for `issued_with`, replayed with `used_with`.
async fn replayed_cursor(issued_with: &str, used_with: &str) -> Reply {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    for index in 0..4 {
        ContactSeed::named(&format!("acme {index}")).roles(true, true).at(index).insert(&app.pool, workspace).await;
    }
    let first = app.get(&key, &format!("/v1/contacts?limit=1{issued_with}")).await;
    first.assert_ok();
    app.get(&key, &format!("/v1/contacts?limit=1{used_with}&cursor={}", urlencode(&first.next_cursor()))).await
}

#[tokio::test]
async fn a_cursor_used_with_a_different_search_is_a_400_that_says_start_over() {
    for (issued_with, used_with) in
        [("&search=acme", "&search=acm"), ("&search=acme", "&search=ACME"), ("&search=acme", ""), ("", "&search=acme")]
    {
        let reply = replayed_cursor(issued_with, used_with).await;

        assert_start_over(&reply);
    }
}

#[tokio::test]
async fn a_cursor_used_with_a_different_type_is_a_400_that_says_start_over() {
    for (issued_with, used_with) in
        [("&type=customer", "&type=supplier"), ("&type=customer", ""), ("", "&type=supplier")]
    {
        let reply = replayed_cursor(issued_with, used_with).await;

        assert_start_over(&reply);
    }
}

#[tokio::test]
async fn a_cursor_used_with_a_different_sort_is_a_400_that_says_start_over() {
    for (issued_with, used_with) in [("&sort=name", "&sort=createdAt"), ("&sort=name", ""), ("", "&sort=name")] {
        let reply = replayed_cursor(issued_with, used_with).await;

        assert_start_over(&reply);
    }
}

#[tokio::test]
async fn expired_cursor_is_a_400_that_says_start_over() {
    let db = TestDatabase::create().await;
    let options = AppOptions { cursor_lifetime: Duration::from_secs(1), ..Default::default() };
    let app = TestApp::spawn_with(db.pool.clone(), options).await;
    let (workspace, key) = app.workspace_with_key().await;
    insert_contacts(&app.pool, workspace, "contact", 3).await;
    let cursor = app.get(&key, "/v1/contacts?limit=1").await.next_cursor();
    tokio::time::sleep(Duration::from_millis(2_200)).await;

    let reply = app.get(&key, &format!("/v1/contacts?limit=1&cursor={}", urlencode(&cursor))).await;

    assert_start_over(&reply);
    assert!(reply.details()[0].contains("expired"), "{:?}", reply.details());
}

// Shape.

#[tokio::test]
async fn each_contact_has_exactly_the_contract_fields_with_nulls_present() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    let bare = ContactSeed::named("Bare").roles(false, true).at(0).insert(&app.pool, workspace).await;
    let full = ContactSeed::named("Full")
        .email("billing@full.example")
        .phone("+49 30 1234567")
        .address("Hauptstr. 1, Berlin")
        .tin("DE123456789")
        .at(1)
        .insert(&app.pool, workspace)
        .await;

    let reply = app.get(&key, "/v1/contacts").await;

    reply.assert_ok();
    let expected_keys = ["address", "createdAt", "email", "id", "isCustomer", "isSupplier", "name", "phone", "tin"];
    for record in reply.data() {
        assert_eq!(sorted_keys(record), expected_keys, "{record}");
    }
    assert_eq!(
        reply.data()[0],
        serde_json::json!({
            "id": bare.to_string(), "name": "Bare", "email": null, "phone": null, "address": null,
            "tin": null, "isCustomer": false, "isSupplier": true, "createdAt": "2025-02-03T08:00:00.000Z",
        })
    );
    assert_eq!(
        reply.data()[1],
        serde_json::json!({
            "id": full.to_string(), "name": "Full", "email": "billing@full.example", "phone": "+49 30 1234567",
            "address": "Hauptstr. 1, Berlin", "tin": "DE123456789", "isCustomer": true, "isSupplier": false,
            "createdAt": "2025-02-03T08:00:01.000Z",
        })
    );
}

#[tokio::test]
async fn created_at_is_cut_to_milliseconds_in_utc_with_a_z_suffix() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    let mut seed = ContactSeed::named("Micro");
    seed.created_at = base_time() + Span::microseconds(123_987);
    seed.insert(&app.pool, workspace).await;

    let reply = app.get(&key, "/v1/contacts").await;

    reply.assert_ok();
    assert_eq!(reply.data()[0]["createdAt"], "2025-02-03T08:00:00.123Z");
}

#[tokio::test]
async fn created_at_always_has_exactly_three_fraction_digits() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    for (index, micros) in [0_i64, 1, 1_000, 100_000, 999_999, 500_000_000].into_iter().enumerate() {
        let mut seed = ContactSeed::named(&format!("contact {index}"));
        seed.created_at = base_time() + Span::microseconds(micros);
        seed.insert(&app.pool, workspace).await;
    }

    let reply = app.get(&key, "/v1/contacts").await;

    reply.assert_ok();
    assert_eq!(reply.data().len(), 6);
    for record in reply.data() {
        let text = record["createdAt"].as_str().expect("createdAt is a string");
        let bytes = text.as_bytes();
        let shape_ok = bytes.len() == 24
            && bytes.iter().enumerate().all(|(index, &byte)| match index {
                4 | 7 => byte == b'-',
                10 => byte == b'T',
                13 | 16 => byte == b':',
                19 => byte == b'.',
                23 => byte == b'Z',
                _ => byte.is_ascii_digit(),
            });
        assert!(shape_ok, "createdAt {text:?} is not YYYY-MM-DDTHH:MM:SS.mmmZ");
    }
}

#[tokio::test]
async fn the_list_body_has_exactly_data_page_and_request_id() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    insert_contacts(&app.pool, workspace, "contact", 2).await;

    for query in ["/v1/contacts?limit=1", "/v1/contacts?limit=2"] {
        let reply = app.get(&key, query).await;

        reply.assert_ok();
        assert_eq!(sorted_keys(&reply.body), ["data", "page", "requestId"], "{query}");
        assert_eq!(sorted_keys(&reply.body["page"]), ["hasMore", "nextCursor"], "{query}");
    }
}

/// Pages and retrieves are written straight from the rows PostgreSQL sends, a cached
/// first page, a fresh page (a search, or one after a cursor) and a retrieve each by a
/// path of its own: whatever the text, every path serves it exactly as stored.
#[tokio::test]
async fn text_that_json_must_escape_is_served_exactly_as_stored_by_every_path() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    let awkward = [
        "quote \" and backslash \\",
        "line\nbreak\ttab\rreturn",
        "control \u{1} \u{1f} \u{7f}",
        "separators \u{2028}\u{2029}",
        "Grüße ☕ 𝄞 日本語",
    ];
    let mut expected = Vec::new();
    for (index, text) in awkward.iter().enumerate() {
        let (phone, address, tin) = (format!("phone {text}"), format!("address {text}"), format!("tin {text}"));
        let seed = ContactSeed::named(&format!("awkward {text}"))
            .email(&format!("a{index}@example.com"))
            .phone(&phone)
            .address(&address)
            .tin(&tin)
            .roles(index % 2 == 0, index % 3 == 0)
            .at(index as i64);
        let id = seed.insert(&app.pool, workspace).await;
        expected.push(serde_json::json!({
            "id": id.to_string(), "name": seed.name, "email": seed.email, "phone": phone, "address": address,
            "tin": tin, "isCustomer": index % 2 == 0, "isSupplier": index % 3 == 0,
            "createdAt": format!("2025-02-03T08:00:0{index}.000Z"),
        }));
    }

    let cached_first_page = app.get(&key, "/v1/contacts").await;
    let searched = app.get(&key, "/v1/contacts?search=awkward").await;
    let traversed: Vec<Value> = app
        .traverse(&key, "/v1/contacts?limit=2")
        .await
        .iter()
        .flat_map(|page| page["data"].as_array().cloned().unwrap_or_default())
        .collect();

    cached_first_page.assert_ok();
    assert_eq!(cached_first_page.data(), &expected, "first page");
    searched.assert_ok();
    assert_eq!(searched.data(), &expected, "search");
    assert_eq!(traversed, expected, "pages after cursors");
    for record in &expected {
        let retrieved = app.get(&key, &format!("/v1/contacts/{}", id_of(record))).await;
        retrieved.assert_ok();
        assert_eq!(&retrieved.body["data"], record, "retrieve");
    }
}
