//! listContacts' `search`: a case-insensitive, literal substring match over name,
//! email, phone and tin, at most 120 characters.

use std::collections::HashSet;

use lectern_tests::app::{id_of, urlencode};
use lectern_tests::{ContactSeed, Reply, TestApp, TestDatabase};
use uuid::Uuid;

/// A running app, a workspace's key, and `seeds` inserted one second apart.
async fn app_with(seeds: Vec<ContactSeed>) -> (TestDatabase, TestApp, String, Vec<Uuid>) {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    let mut ids = Vec::new();
    for (index, seed) in seeds.into_iter().enumerate() {
        ids.push(seed.at(index as i64).insert(&app.pool, workspace).await);
    }
    (db, app, key, ids)
}

async fn search(app: &TestApp, key: &str, text: &str) -> Reply {
    let reply = app.get(key, &format!("/v1/contacts?limit=100&search={}", urlencode(text))).await;
    reply.assert_ok();
    reply
}

/// The names a search finds, in order.
async fn found(app: &TestApp, key: &str, text: &str) -> Vec<String> {
    search(app, key, text).await.names()
}

/// A 400 VALIDATION_ERROR whose details name `search`.
fn assert_names_search(reply: &Reply) {
    reply.assert_error(400, "VALIDATION_ERROR");
    assert!(reply.details().iter().any(|detail| detail.starts_with("search:")), "{:?}", reply.details());
}

/// Every id a traversal from `first` serves, in order.
async fn traversal_ids(app: &TestApp, key: &str, first: &str) -> Vec<String> {
    let pages = app.traverse(key, first).await;
    pages
        .iter()
        .flat_map(|page| page["data"].as_array().unwrap_or_else(|| panic!("no data array: {page}")).iter())
        .map(id_of)
        .collect()
}

// Fields.

#[tokio::test]
async fn search_matches_a_substring_of_the_name_ignoring_case() {
    let (_db, app, key, _) =
        app_with(vec![ContactSeed::named("Acme Trading GmbH"), ContactSeed::named("Other Ltd")]).await;

    for text in ["trading", "TRADING", "e tRa", "acme trading gmbh"] {
        assert_eq!(found(&app, &key, text).await, ["Acme Trading GmbH"], "{text}");
    }
}

#[tokio::test]
async fn search_matches_a_substring_of_the_email_ignoring_case() {
    let (_db, app, key, _) = app_with(vec![
        ContactSeed::named("Billing").email("Billing@Northwind.example"),
        ContactSeed::named("Other").email("someone@else.example"),
    ])
    .await;

    assert_eq!(found(&app, &key, "NORTHWIND.EX").await, ["Billing"]);
}

#[tokio::test]
async fn search_matches_a_substring_of_the_phone() {
    let (_db, app, key, _) = app_with(vec![
        ContactSeed::named("Berlin").phone("+49 30 1234567"),
        ContactSeed::named("Munich").phone("+49 89 7654321"),
    ])
    .await;

    assert_eq!(found(&app, &key, "+49 30 12").await, ["Berlin"]);
}

#[tokio::test]
async fn search_matches_a_substring_of_the_tin_ignoring_case() {
    let (_db, app, key, _) =
        app_with(vec![ContactSeed::named("Taxed").tin("DE123456789"), ContactSeed::named("Other").tin("FR987654321")])
            .await;

    assert_eq!(found(&app, &key, "de1234").await, ["Taxed"]);
}

#[tokio::test]
async fn search_does_not_match_the_address() {
    let (_db, app, key, _) = app_with(vec![
        ContactSeed::named("Addressed").address("Hauptstraße 1, Zauberberg"),
        ContactSeed::named("Zauberberg AG"),
    ])
    .await;

    assert_eq!(found(&app, &key, "zauberberg").await, ["Zauberberg AG"]);
}

#[tokio::test]
async fn search_lists_only_active_contacts() {
    let (_db, app, key, _) = app_with(vec![
        ContactSeed::named("Acme active"),
        ContactSeed::named("Acme archived").status("archived"),
        ContactSeed::named("Acme deleted").status("deleted"),
    ])
    .await;

    assert_eq!(found(&app, &key, "acme").await, ["Acme active"]);
}

#[tokio::test]
async fn search_lists_only_the_keys_workspace() {
    let (_db, app, key, _) = app_with(vec![ContactSeed::named("Acme mine")]).await;
    ContactSeed::named("Acme theirs").insert(&app.pool, Uuid::new_v4()).await;

    assert_eq!(found(&app, &key, "acme").await, ["Acme mine"]);
}

// Literal wildcards.

#[tokio::test]
async fn a_percent_sign_in_search_is_literal() {
    let (_db, app, key, _) =
        app_with(vec![ContactSeed::named("50% off"), ContactSeed::named("500 off"), ContactSeed::named("50 off")])
            .await;

    assert_eq!(found(&app, &key, "50%").await, ["50% off"]);
    assert_eq!(found(&app, &key, "%").await, ["50% off"]);
}

#[tokio::test]
async fn an_underscore_in_search_is_literal() {
    let (_db, app, key, _) = app_with(vec![ContactSeed::named("a_b"), ContactSeed::named("axb")]).await;

    assert_eq!(found(&app, &key, "a_b").await, ["a_b"]);
    assert_eq!(found(&app, &key, "_").await, ["a_b"]);
}

#[tokio::test]
async fn a_backslash_in_search_matches_only_a_literal_backslash() {
    let (_db, app, key, _) = app_with(vec![
        ContactSeed::named(r"back\slash"),
        ContactSeed::named("backslash"),
        ContactSeed::named(r"100\% sure"),
        ContactSeed::named("100% sure"),
    ])
    .await;

    assert_eq!(found(&app, &key, r"k\s").await, [r"back\slash"]);
    assert_eq!(found(&app, &key, r"\").await, [r"back\slash", r"100\% sure"]);
    assert_eq!(found(&app, &key, r"0\%").await, [r"100\% sure"]);
}

// Non-ASCII.

#[tokio::test]
async fn a_lower_case_umlaut_search_matches_the_capital() {
    let (_db, app, key, _) = app_with(vec![ContactSeed::named("Ärger AG"), ContactSeed::named("Arger AG")]).await;

    assert_eq!(found(&app, &key, "ärger").await, ["Ärger AG"]);
}

#[tokio::test]
async fn a_capital_accented_search_matches_lower_case() {
    let (_db, app, key, _) = app_with(vec![ContactSeed::named("école du nord"), ContactSeed::named("ecole")]).await;

    assert_eq!(found(&app, &key, "ÉCOLE").await, ["école du nord"]);
}

#[tokio::test]
async fn a_sharp_s_search_matches() {
    let (_db, app, key, _) =
        app_with(vec![ContactSeed::named("Straße 1 GmbH"), ContactSeed::named("Strasse 2 GmbH")]).await;

    assert_eq!(found(&app, &key, "straße").await, ["Straße 1 GmbH"]);
    assert_eq!(found(&app, &key, "STRAßE").await, ["Straße 1 GmbH"]);
}

#[tokio::test]
async fn emoji_and_cjk_substrings_match() {
    let (_db, app, key, _) = app_with(vec![
        ContactSeed::named("Café ☕ Club"),
        ContactSeed::named("東京商事株式会社"),
        ContactSeed::named("Party 🎉 GmbH").email("🎉@party.example"),
    ])
    .await;

    assert_eq!(found(&app, &key, "☕").await, ["Café ☕ Club"]);
    assert_eq!(found(&app, &key, "商事").await, ["東京商事株式会社"]);
    assert_eq!(found(&app, &key, "京").await, ["東京商事株式会社"]);
    assert_eq!(found(&app, &key, "🎉@PARTY").await, ["Party 🎉 GmbH"]);
}

// Empty, short and long.

#[tokio::test]
async fn an_empty_search_is_no_filter() {
    let (_db, app, key, _) =
        app_with(vec![ContactSeed::named("One"), ContactSeed::named("Two"), ContactSeed::named("Three")]).await;
    let unfiltered = app.get(&key, "/v1/contacts?limit=100").await;

    let reply = search(&app, &key, "").await;

    assert_eq!(reply.body["data"], unfiltered.body["data"]);
    assert_eq!(reply.names(), ["One", "Two", "Three"]);
}

#[tokio::test]
async fn a_one_character_search_works() {
    let (_db, app, key, _) =
        app_with(vec![ContactSeed::named("Xylophon"), ContactSeed::named("Boxer"), ContactSeed::named("Other")]).await;

    assert_eq!(found(&app, &key, "x").await, ["Xylophon", "Boxer"]);
}

#[tokio::test]
async fn a_two_character_search_works() {
    let (_db, app, key, _) =
        app_with(vec![ContactSeed::named("Quark"), ContactSeed::named("Aqua"), ContactSeed::named("Quiet")]).await;

    assert_eq!(found(&app, &key, "QU").await, ["Quark", "Aqua", "Quiet"]);
    assert_eq!(found(&app, &key, "ua").await, ["Quark", "Aqua"]);
}

#[tokio::test]
async fn a_search_over_120_characters_is_a_400_naming_search() {
    let (_db, app, key, _) = app_with(vec![ContactSeed::named("Acme")]).await;

    for text in ["a".repeat(121), "ä".repeat(121)] {
        let reply = app.get(&key, &format!("/v1/contacts?search={}", urlencode(&text))).await;

        assert_names_search(&reply);
    }
}

#[tokio::test]
async fn a_search_of_exactly_120_characters_is_accepted_whatever_their_byte_length() {
    let long_name = format!("x{}x", "ä".repeat(120));
    let (_db, app, key, _) = app_with(vec![ContactSeed::named(&long_name), ContactSeed::named("Acme")]).await;

    assert_eq!(found(&app, &key, &"ä".repeat(120)).await, [long_name]);
    assert!(found(&app, &key, &"😀".repeat(120)).await.is_empty());
    assert!(found(&app, &key, &"a".repeat(120)).await.is_empty());
}

#[tokio::test]
async fn a_nul_character_in_search_is_a_400_naming_search() {
    let (_db, app, key, _) = app_with(vec![ContactSeed::named("Acme")]).await;

    let reply = app.get(&key, "/v1/contacts?search=ac%00me").await;

    assert_names_search(&reply);
}

// Newlines: the search document joins fields with newlines.

#[tokio::test]
async fn a_search_with_a_newline_does_not_match_across_two_fields() {
    let (_db, app, key, _) = app_with(vec![
        ContactSeed::named("foo").email("bar@x").phone("+1 555").tin("TIN9"),
        ContactSeed::named("foo\nbar"),
    ])
    .await;

    assert_eq!(found(&app, &key, "foo\nbar").await, ["foo\nbar"]);
    assert_eq!(found(&app, &key, "foo\n").await, ["foo\nbar"]);
    assert!(found(&app, &key, "bar@x\n+1").await.is_empty());
    assert!(found(&app, &key, "555\ntin").await.is_empty());
}

#[tokio::test]
async fn a_search_of_just_a_newline_matches_only_fields_that_contain_one() {
    let (_db, app, key, _) = app_with(vec![
        ContactSeed::named("plain").email("plain@x.example"),
        ContactSeed::named("bare"),
        ContactSeed::named("phoned").phone("+1\n555"),
        ContactSeed::named("addressed").address("line 1\nline 2"),
    ])
    .await;

    assert_eq!(found(&app, &key, "\n").await, ["phoned"]);
    assert!(found(&app, &key, "\n\n").await.is_empty());
}

// Traversal.

/// Matches named from `names`, interleaved with as many non-matches.
fn matches_and_others(names: &[&str]) -> Vec<ContactSeed> {
    names.iter().flat_map(|name| [ContactSeed::named(&format!("acme {name}")), ContactSeed::named(name)]).collect()
}

const NAMES: [&str; 14] = [
    "kilo", "alpha", "juliet", "bravo", "india", "charlie", "hotel", "delta", "golf", "echo", "foxtrot", "alpha",
    "kilo", "lima",
];

#[tokio::test]
async fn a_search_traversal_by_name_returns_every_match_once_in_order() {
    let (_db, app, key, _) = app_with(matches_and_others(&NAMES)).await;
    let whole = search(&app, &key, "acme").await;
    let mut expected_names: Vec<String> = NAMES.iter().map(|name| format!("acme {name}")).collect();
    expected_names.sort();
    let mut single_page = whole.names();
    single_page.sort();
    assert_eq!(single_page, expected_names);

    let listed = traversal_ids(&app, &key, "/v1/contacts?search=acme&sort=name&limit=3").await;

    let in_name_order = app.get(&key, "/v1/contacts?search=acme&sort=name&limit=100").await.ids();
    assert_eq!(listed, in_name_order);
    assert_eq!(listed.iter().collect::<HashSet<_>>().len(), NAMES.len());
}

#[tokio::test]
async fn a_search_traversal_by_created_at_returns_every_match_once_in_order() {
    let (_db, app, key, inserted) = app_with(matches_and_others(&NAMES)).await;
    let matches: Vec<String> = inserted.iter().step_by(2).map(Uuid::to_string).collect();

    let listed = traversal_ids(&app, &key, "/v1/contacts?search=ACME&limit=4").await;

    assert_eq!(listed, matches);
}

#[tokio::test]
async fn a_short_search_traversal_returns_every_match_once() {
    let (_db, app, key, inserted) = app_with(matches_and_others(&NAMES)).await;
    // "e " occurs only in the "acme …" names.
    let matches: Vec<String> = inserted.iter().step_by(2).map(Uuid::to_string).collect();

    let listed = traversal_ids(&app, &key, &format!("/v1/contacts?search={}&limit=2", urlencode("e "))).await;

    assert_eq!(listed, matches);
}

#[tokio::test]
async fn a_search_traversal_with_a_type_filter_returns_every_match_once() {
    let seeds: Vec<ContactSeed> = (0..12)
        .map(|index| {
            let name = if index % 2 == 0 { format!("acme {index}") } else { format!("other {index}") };
            ContactSeed::named(&name).roles(index % 3 != 0, index % 3 != 1)
        })
        .collect();
    let expected: Vec<usize> = (0..12).filter(|index| index % 2 == 0 && index % 3 != 1).collect();
    let (_db, app, key, inserted) = app_with(seeds).await;

    let listed = traversal_ids(&app, &key, "/v1/contacts?search=acme&type=supplier&limit=2").await;

    assert_eq!(listed, expected.iter().map(|&index| inserted[index].to_string()).collect::<Vec<_>>());
}
