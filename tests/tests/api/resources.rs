//! The rules every listed resource shares, run over contacts and items alike.
//!
//! Each resource is one [`Resource`] row: its path, its scope, its `type` values and
//! which records each lists, its searchable fields and its record's exact keys. Each
//! rule is one function over a `Resource`; [`shared_rules!`] turns it into one test per
//! resource (`resources::contacts::<rule>`, `resources::items::<rule>`), so a failure
//! names both the rule and the resource. A third resource is one more row and one more
//! line in the macro.

use std::collections::HashSet;

use chrono::{DateTime, Duration as Span, Utc};
use lectern_api::keys::Scope;
use lectern_tests::app::{id_strings, is_millisecond_instant, is_request_id, keys_of, urlencode};
use lectern_tests::seed::base_time;
use lectern_tests::{ContactSeed, Reply, TestApp, TestDatabase};
use serde_json::{json, Value};
use sqlx::PgPool;
use uuid::Uuid;

use crate::items::ItemSeed;

// The table.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Table {
    Contacts,
    Items,
}

/// One listed resource, and what the shared rules need to know about it.
#[derive(Debug)]
struct Resource {
    table: Table,
    /// The collection's path; one record is at `{path}/{id}`.
    path: &'static str,
    /// The scope both operations require.
    scope: Scope,
    /// The scope of the other area, which must not be enough.
    other_scope: Scope,
    /// The accepted `type` values, `all` first.
    types: &'static [&'static str],
    /// The kinds of record (contacts: role combinations; items: their `type`).
    kinds: &'static [&'static str],
    /// Per `type` value, the kinds of record it lists.
    matches: &'static [(&'static str, &'static [&'static str])],
    /// `type` values of the other resource, which are not values here.
    foreign_types: &'static [&'static str],
    /// The fields `search` looks in.
    searchable: &'static [&'static str],
    /// A text field `search` must not look in.
    unsearchable: &'static str,
    /// The keys of a record, sorted.
    keys: &'static [&'static str],
    /// The nullable fields, with a value for each (prices as "amount currency").
    nullable: &'static [(&'static str, &'static str)],
}

static CONTACTS: Resource = Resource {
    table: Table::Contacts,
    path: "/v1/contacts",
    scope: Scope::ContactsRead,
    other_scope: Scope::ItemsRead,
    types: &["all", "customer", "supplier"],
    kinds: &["customer", "supplier", "both", "neither"],
    matches: &[
        ("all", &["customer", "supplier", "both", "neither"]),
        ("customer", &["customer", "both"]),
        ("supplier", &["supplier", "both"]),
    ],
    foreign_types: &["product", "service"],
    searchable: &["name", "email", "phone", "tin"],
    unsearchable: "address",
    keys: &["address", "createdAt", "email", "id", "isCustomer", "isSupplier", "name", "phone", "tin"],
    nullable: &[
        ("email", "billing@acme.example"),
        ("phone", "+49 30 1234567"),
        ("address", "Hauptstr. 1, Berlin"),
        ("tin", "DE123456789"),
    ],
};

static ITEMS: Resource = Resource {
    table: Table::Items,
    path: "/v1/items",
    scope: Scope::ItemsRead,
    other_scope: Scope::ContactsRead,
    types: &["all", "product", "service"],
    kinds: &["product", "service"],
    matches: &[("all", &["product", "service"]), ("product", &["product"]), ("service", &["service"])],
    foreign_types: &["customer", "supplier"],
    searchable: &["name", "sku", "description"],
    unsearchable: "unit",
    keys: &["createdAt", "description", "id", "name", "purchasePrice", "salePrice", "sku", "type", "unit"],
    nullable: &[
        ("sku", "W-100"),
        ("description", "A sturdy widget"),
        ("unit", "pcs"),
        ("salePrice", "19.90 EUR"),
        ("purchasePrice", "7.25 USD"),
    ],
};

/// One test per rule and resource.
macro_rules! shared_rules {
    ($($rule:ident),* $(,)?) => {
        mod contacts {
            $(
                #[tokio::test]
                async fn $rule() {
                    super::$rule(&super::CONTACTS).await;
                }
            )*
        }

        mod items {
            $(
                #[tokio::test]
                async fn $rule() {
                    super::$rule(&super::ITEMS).await;
                }
            )*
        }
    };
}

shared_rules! {
    // Scopes and the order of checks.
    a_key_with_only_the_other_scope_is_a_403_naming_the_needed_scope,
    a_key_with_the_scope_reads_the_list_and_one_record,
    a_request_without_a_valid_key_is_a_401_on_list_and_retrieve,
    checks_run_in_the_order_401_then_403_then_400,
    // Workspace isolation.
    lists_searches_and_traversals_never_show_another_workspaces_records,
    a_foreign_id_is_the_same_404_as_an_unknown_archived_or_deleted_one,
    a_malformed_id_is_a_400_naming_id,
    a_retrieve_with_a_malformed_id_and_an_unknown_parameter_names_both,
    // Defaults, orders, type, active only.
    default_limit_is_50_with_has_more_when_more_exist,
    default_sort_is_created_at_ascending_with_ties_broken_by_id,
    sort_by_name_is_case_insensitive_first_with_ties_broken_by_id,
    each_type_lists_exactly_the_records_it_matches_and_the_default_is_all,
    only_active_records_are_listed,
    // Keyset traversal.
    a_traversal_returns_every_record_once_in_both_sorts,
    records_unchanged_for_a_created_at_traversal_are_returned_once_while_others_come_and_go,
    records_unchanged_for_a_name_traversal_are_returned_once_while_others_come_and_go,
    limit_may_change_between_pages,
    // Cursors.
    a_cursor_from_another_workspace_is_a_400_that_says_start_over,
    a_cursor_used_with_a_different_search_is_a_400_that_says_start_over,
    a_cursor_used_with_a_different_type_is_a_400_that_says_start_over,
    a_cursor_used_with_a_different_sort_is_a_400_that_says_start_over,
    a_tampered_or_made_up_cursor_is_a_400_that_says_start_over,
    a_cursor_of_the_other_resource_is_a_400_that_says_start_over,
    // Search.
    search_matches_each_searchable_field_ignoring_case,
    search_does_not_look_in_the_unsearchable_field,
    percent_underscore_and_backslash_in_search_are_literal_in_every_searchable_field,
    a_search_over_120_characters_is_a_400_naming_search,
    an_empty_search_is_no_filter,
    // Strict parameters.
    an_unknown_query_parameter_is_a_400_naming_it,
    a_parameter_given_twice_is_a_400_naming_it,
    choosing_a_workspace_in_the_query_is_a_400_saying_it_comes_from_the_key,
    a_type_of_the_other_resource_is_a_400_listing_the_allowed_values,
    limit_and_sort_outside_their_values_are_a_400_naming_them,
    a_get_with_a_body_is_a_400_naming_the_body,
    // Shape.
    every_response_carries_its_own_request_id_in_header_and_body,
    errors_have_exactly_the_envelope_keys,
    list_body_page_and_record_have_exactly_the_contract_keys,
    nullable_fields_are_present_as_null,
    created_at_has_exactly_three_fraction_digits_and_a_z,
}

// Records, in the rules' shared vocabulary.

/// A record of either resource: what the rules vary, with everything else defaulted.
#[derive(Clone, Debug)]
struct Record {
    id: Uuid,
    name: String,
    created_at: DateTime<Utc>,
    status: &'static str,
    /// One of the resource's `kinds`; `None` is a kind every `type` value lists, except
    /// items' `service`.
    kind: Option<&'static str>,
    /// Values of other fields, by their JSON name.
    fields: Vec<(&'static str, String)>,
}

impl Record {
    fn named(name: &str) -> Self {
        Self {
            id: Uuid::new_v4(),
            name: name.to_owned(),
            created_at: base_time(),
            status: "active",
            kind: None,
            fields: Vec::new(),
        }
    }

    /// Created `seconds` after the base instant.
    fn at(mut self, seconds: i64) -> Self {
        self.created_at = base_time() + Span::seconds(seconds);
        self
    }

    fn created(mut self, at: DateTime<Utc>) -> Self {
        self.created_at = at;
        self
    }

    fn id(mut self, id: u128) -> Self {
        self.id = Uuid::from_u128(id);
        self
    }

    fn status(mut self, status: &'static str) -> Self {
        self.status = status;
        self
    }

    fn kind(mut self, kind: &'static str) -> Self {
        self.kind = Some(kind);
        self
    }

    fn field(mut self, field: &'static str, value: &str) -> Self {
        self.fields.push((field, value.to_owned()));
        self
    }
}

impl Resource {
    /// Writes `record` (or overwrites the row with its id) in `workspace`.
    async fn insert(&self, pool: &PgPool, workspace: Uuid, record: &Record) -> Uuid {
        match self.table {
            Table::Contacts => {
                let mut seed = ContactSeed::named(&record.name);
                seed.id = record.id;
                seed.created_at = record.created_at;
                seed.status = record.status;
                (seed.is_customer, seed.is_supplier) = match record.kind.unwrap_or("both") {
                    "customer" => (true, false),
                    "supplier" => (false, true),
                    "both" => (true, true),
                    "neither" => (false, false),
                    other => panic!("no contact kind {other:?}"),
                };
                for (field, value) in &record.fields {
                    let value = Some(value.clone());
                    match *field {
                        "email" => seed.email = value,
                        "phone" => seed.phone = value,
                        "address" => seed.address = value,
                        "tin" => seed.tin = value,
                        other => panic!("no contact field {other:?}"),
                    }
                }
                seed.insert(pool, workspace).await
            }
            Table::Items => {
                let mut seed =
                    ItemSeed::named(&record.name).kind(record.kind.unwrap_or("product")).status(record.status);
                seed.id = record.id;
                seed.created_at = record.created_at;
                for (field, value) in &record.fields {
                    seed = match *field {
                        "sku" => seed.sku(value),
                        "description" => seed.description(value),
                        "unit" => seed.unit(value),
                        "salePrice" | "purchasePrice" => {
                            let (amount, currency) =
                                value.split_once(' ').unwrap_or_else(|| panic!("{value:?} is not 'amount currency'"));
                            if *field == "salePrice" {
                                seed.sale_price(amount, currency)
                            } else {
                                seed.purchase_price(amount, currency)
                            }
                        }
                        other => panic!("no item field {other:?}"),
                    };
                }
                seed.insert(pool, workspace).await
            }
        }
    }

    /// The other resource of the table.
    fn other(&self) -> &'static Resource {
        match self.table {
            Table::Contacts => &ITEMS,
            Table::Items => &CONTACTS,
        }
    }

    /// The `type` values other than `all`.
    fn narrowing_types(&self) -> [&'static str; 2] {
        [self.types[1], self.types[2]]
    }
}

/// An app on its own database, and a key with `resource`'s scope for a fresh workspace.
struct Env {
    resource: &'static Resource,
    _db: TestDatabase,
    app: TestApp,
    workspace: Uuid,
    key: String,
}

impl Env {
    async fn start(resource: &'static Resource) -> Self {
        let db = TestDatabase::create().await;
        let app = TestApp::spawn(db.pool.clone()).await;
        let workspace = Uuid::new_v4();
        let key = app.key(workspace, &[resource.scope]).await;
        Self { resource, _db: db, app, workspace, key }
    }

    /// Another workspace and a key for it with the resource's scope.
    async fn other_workspace(&self) -> (Uuid, String) {
        let workspace = Uuid::new_v4();
        (workspace, self.app.key(workspace, &[self.resource.scope]).await)
    }

    async fn insert(&self, record: Record) -> Uuid {
        self.insert_into(self.workspace, record).await
    }

    async fn insert_into(&self, workspace: Uuid, record: Record) -> Uuid {
        self.resource.insert(&self.app.pool, workspace, &record).await
    }

    /// `count` records named `prefix 0000`..., one second apart; their ids in that order.
    async fn insert_many(&self, prefix: &str, count: usize) -> Vec<Uuid> {
        let mut ids = Vec::with_capacity(count);
        for index in 0..count {
            ids.push(self.insert(Record::named(&format!("{prefix} {index:04}")).at(index as i64)).await);
        }
        ids
    }

    /// The collection path with `query` (empty, or starting with `?`).
    fn list_path(&self, query: &str) -> String {
        format!("{}{query}", self.resource.path)
    }

    fn one_path(&self, id: impl std::fmt::Display) -> String {
        format!("{}/{id}", self.resource.path)
    }

    /// The collection with the workspace's key.
    async fn list(&self, query: &str) -> Reply {
        self.app.get(&self.key, &self.list_path(query)).await
    }

    /// One record with the workspace's key.
    async fn retrieve(&self, id: impl std::fmt::Display) -> Reply {
        self.app.get(&self.key, &self.one_path(id)).await
    }

    /// The collection with `query` and `cursor` added.
    async fn list_after(&self, query: &str, cursor: &str) -> Reply {
        let separator = if query.is_empty() { '?' } else { '&' };
        self.list(&format!("{query}{separator}cursor={}", urlencode(cursor))).await
    }

    /// Every id a traversal from `query` serves, in order, checking that every page but
    /// the last says `hasMore` with a cursor and the last does not.
    async fn traversal_ids(&self, key: &str, query: &str) -> Vec<String> {
        self.app.traversal_ids(key, &self.list_path(query)).await
    }

    /// Continues the traversal of `query` from `cursor` to the end; every id served.
    async fn ids_after(&self, query: &str, cursor: String) -> Vec<String> {
        self.app.ids_after(&self.key, &self.list_path(query), cursor).await
    }
}

// Small helpers.

fn message_of(reply: &Reply) -> String {
    reply.body["error"]["message"].as_str().unwrap_or_default().to_owned()
}

/// A 400 VALIDATION_ERROR with exactly one detail, which starts with `parameter:`.
fn assert_one_problem_with(reply: &Reply, parameter: &str, request: &str) {
    reply.assert_error(400, "VALIDATION_ERROR");
    let details = reply.details();
    assert_eq!(details.len(), 1, "{request}: {details:?}");
    assert!(details[0].starts_with(&format!("{parameter}:")), "{request}: expected `{parameter}:`, got {details:?}");
}

/// A 400 VALIDATION_ERROR naming `cursor` and telling the client to start over.
fn assert_start_over(reply: &Reply, context: &str) {
    assert_one_problem_with(reply, "cursor", context);
    let detail = &reply.details()[0];
    assert!(detail.contains("start a new traversal"), "{context}: {detail:?}");
    assert!(message_of(reply).contains("start a new traversal"), "{context}: {}", reply.text);
}

/// A query with two problems, so a 400 would have something to say.
const BAD_QUERY: &str = "?limit=0&colour=red";

// Scopes and the order of checks.

async fn a_key_with_only_the_other_scope_is_a_403_naming_the_needed_scope(resource: &'static Resource) {
    let env = Env::start(resource).await;
    let id = env.insert(Record::named("Secret Record")).await;
    let other_scope_key = env.app.key(env.workspace, &[resource.other_scope]).await;

    for path in [env.list_path(""), env.one_path(id)] {
        let reply = env.app.get(&other_scope_key, &path).await;

        reply.assert_error(403, "FORBIDDEN");
        assert!(message_of(&reply).contains(resource.scope.as_str()), "{path}: {}", reply.text);
        assert!(!reply.text.contains("Secret Record"), "{path}: {}", reply.text);
    }
}

async fn a_key_with_the_scope_reads_the_list_and_one_record(resource: &'static Resource) {
    let env = Env::start(resource).await;
    let id = env.insert(Record::named("Readable")).await;
    let both_scopes = env.app.key(env.workspace, &[Scope::ContactsRead, Scope::ItemsRead]).await;

    for key in [&env.key, &both_scopes] {
        let listed = env.app.get(key, &env.list_path("")).await;
        let retrieved = env.app.get(key, &env.one_path(id)).await;

        listed.assert_ok();
        assert_eq!(listed.names(), ["Readable"]);
        retrieved.assert_ok();
        assert_eq!(retrieved.body["data"]["id"], id.to_string());
    }
}

async fn a_request_without_a_valid_key_is_a_401_on_list_and_retrieve(resource: &'static Resource) {
    let env = Env::start(resource).await;
    let id = env.insert(Record::named("Secret Record")).await;
    let forged = format!("{}x", env.key);

    for path in [env.list_path(""), env.one_path(id)] {
        let without = env.app.send(env.app.http.get(env.app.url(&path))).await;
        let wrong = env.app.get(&forged, &path).await;

        for reply in [without, wrong] {
            reply.assert_error(401, "UNAUTHORIZED");
            assert!(!reply.text.contains("Secret Record"), "{path}: {}", reply.text);
            assert!(!reply.text.contains(&forged), "{path}: the key is echoed: {}", reply.text);
        }
    }
}

async fn checks_run_in_the_order_401_then_403_then_400(resource: &'static Resource) {
    let env = Env::start(resource).await;
    let other_scope_key = env.app.key(env.workspace, &[resource.other_scope]).await;

    // Each request is invalid; a caller without the right key must not learn how.
    let cases: [(String, &[&str]); 3] = [
        (env.list_path(BAD_QUERY), &["limit:", "colour:"]),
        (format!("{}/not-a-uuid?colour=red", resource.path), &["colour:"]),
        (format!("{}/not-a-uuid", resource.path), &["id:"]),
    ];
    for (path, problems) in cases {
        let without = env.app.send(env.app.http.get(env.app.url(&path))).await;
        let other_scope = env.app.get(&other_scope_key, &path).await;
        let with_scope = env.app.get(&env.key, &path).await;

        without.assert_error(401, "UNAUTHORIZED");
        assert!(without.body["error"].get("details").is_none(), "{path}: {}", without.text);
        assert!(!without.text.contains("colour") && !without.text.contains("id:"), "{path}: {}", without.text);
        other_scope.assert_error(403, "FORBIDDEN");
        assert!(other_scope.body["error"].get("details").is_none(), "{path}: {}", other_scope.text);
        with_scope.assert_error(400, "VALIDATION_ERROR");
        for problem in problems {
            assert!(
                with_scope.details().iter().any(|detail| detail.starts_with(problem)),
                "{path}: {}",
                with_scope.text
            );
        }
    }
}

/// The contract: a VALIDATION_ERROR has one `details` entry per problem. A retrieve with
/// a malformed id and an unknown parameter has two.
async fn a_retrieve_with_a_malformed_id_and_an_unknown_parameter_names_both(resource: &'static Resource) {
    let env = Env::start(resource).await;
    let path = format!("{}/not-a-uuid?colour=red", resource.path);

    let reply = env.app.get(&env.key, &path).await;

    reply.assert_error(400, "VALIDATION_ERROR");
    let details = reply.details();
    assert_eq!(details.len(), 2, "{path}: {details:?}");
    for parameter in ["id:", "colour:"] {
        assert!(details.iter().any(|detail| detail.starts_with(parameter)), "{path}: {details:?}");
    }
}

// Workspace isolation.

async fn lists_searches_and_traversals_never_show_another_workspaces_records(resource: &'static Resource) {
    let env = Env::start(resource).await;
    let (other, other_key) = env.other_workspace().await;
    // Interleaved in time and equal in name, so a leak would land mid-page.
    let mut own = Vec::new();
    let mut theirs = Vec::new();
    for index in 0..9_i64 {
        own.push(env.insert(Record::named("shared name").at(index * 2)).await);
        theirs.push(env.insert_into(other, Record::named("shared name").at(index * 2 + 1)).await);
    }
    let by_id = |ids: &[Uuid]| {
        let mut ids = ids.to_vec();
        ids.sort();
        id_strings(&ids)
    };

    for (key, expected) in [(&env.key, &own), (&other_key, &theirs)] {
        assert_eq!(env.traversal_ids(key, "?limit=4").await, id_strings(expected));
        assert_eq!(env.traversal_ids(key, "?sort=name&limit=4").await, by_id(expected));
        assert_eq!(env.traversal_ids(key, "?search=SHARED&limit=4").await, id_strings(expected));
        assert_eq!(env.traversal_ids(key, "").await, id_strings(expected));
    }
}

async fn a_foreign_id_is_the_same_404_as_an_unknown_archived_or_deleted_one(resource: &'static Resource) {
    let env = Env::start(resource).await;
    let (other, other_key) = env.other_workspace().await;
    let own = env.insert(Record::named("Own")).await;
    let archived = env.insert(Record::named("Archived Secret").status("archived")).await;
    let deleted = env.insert(Record::named("Deleted Secret").status("deleted")).await;
    let foreign = env.insert_into(other, Record::named("Foreign Secret")).await;
    env.retrieve(own).await.assert_ok();
    // The foreign record exists and is active: its own workspace reads it.
    env.app.get(&other_key, &env.one_path(foreign)).await.assert_ok();

    let mut errors = Vec::new();
    for id in [Uuid::new_v4(), foreign, archived, deleted] {
        let reply = env.retrieve(id).await;

        reply.assert_error(404, "NOT_FOUND");
        assert!(!reply.text.contains("Secret"), "{id}: {}", reply.text);
        errors.push(reply.body["error"].clone());
    }
    assert!(errors.windows(2).all(|pair| pair[0] == pair[1]), "the 404s differ: {errors:?}");
}

async fn a_malformed_id_is_a_400_naming_id(resource: &'static Resource) {
    let env = Env::start(resource).await;
    let valid = Uuid::new_v4().to_string();

    for id in ["not-a-uuid", "123", &format!("{valid}0"), &valid[..35], "%20"] {
        let reply = env.retrieve(id).await;

        reply.assert_error(400, "VALIDATION_ERROR");
        assert!(reply.details().iter().any(|detail| detail.starts_with("id:")), "{id}: {:?}", reply.details());
    }
}

// Defaults, orders, type and active only.

async fn default_limit_is_50_with_has_more_when_more_exist(resource: &'static Resource) {
    let env = Env::start(resource).await;
    let inserted = env.insert_many("record", 51).await;

    let reply = env.list("").await;

    reply.assert_ok();
    assert_eq!(reply.ids(), id_strings(&inserted[..50]));
    assert_eq!(reply.body["page"]["hasMore"], true);
    assert!(!reply.next_cursor().is_empty());
    let rest = env.list_after("", &reply.next_cursor()).await;
    rest.assert_ok();
    assert_eq!(rest.ids(), id_strings(&inserted[50..]));
    assert_eq!(rest.body["page"], json!({ "hasMore": false, "nextCursor": null }));
}

async fn default_sort_is_created_at_ascending_with_ties_broken_by_id(resource: &'static Resource) {
    let env = Env::start(resource).await;
    // Name order and id order both run against creation order.
    let oldest = env.insert(Record::named("zulu").at(10).id(30)).await;
    let middle = env.insert(Record::named("mike").at(20).id(20)).await;
    let newest = env.insert(Record::named("alpha").at(30).id(10)).await;
    // Created at the same instant, inserted out of id order.
    let mut tied = Vec::new();
    for id in [42, 40, 41] {
        tied.push(env.insert(Record::named(&format!("tied {id}")).at(40).id(id)).await);
    }
    tied.sort();

    let reply = env.list("").await;

    reply.assert_ok();
    let mut expected = vec![oldest, middle, newest];
    expected.extend(tied);
    assert_eq!(reply.ids(), id_strings(&expected));
    assert_eq!(reply.body["data"], env.list("?sort=createdAt").await.body["data"]);
}

async fn sort_by_name_is_case_insensitive_first_with_ties_broken_by_id(resource: &'static Resource) {
    let env = Env::start(resource).await;
    for (index, name) in ["Zulu", "cherry", "Arzt", "Banana", "apple", "Ärger", "zebra"].into_iter().enumerate() {
        env.insert(Record::named(name).at(index as i64)).await;
    }
    // Equal names, created against id order: a created_at tie-break would show.
    let second_mango = env.insert(Record::named("mango").at(20).id(0x20)).await;
    let first_mango = env.insert(Record::named("mango").at(21).id(0x10)).await;

    let reply = env.list("?sort=name").await;

    reply.assert_ok();
    // Byte order would give Arzt, Banana, Zulu, apple, cherry, mango, zebra, Ärger.
    assert_eq!(reply.names(), ["apple", "Ärger", "Arzt", "Banana", "cherry", "mango", "mango", "zebra", "Zulu"]);
    assert_eq!(reply.ids()[5..7], id_strings(&[first_mango, second_mango]));
}

async fn each_type_lists_exactly_the_records_it_matches_and_the_default_is_all(resource: &'static Resource) {
    let env = Env::start(resource).await;
    let mut by_kind = Vec::new();
    for round in 0..2 {
        for (index, kind) in resource.kinds.iter().enumerate() {
            let record = Record::named(&format!("{kind} {round}")).kind(kind).at((round * 10 + index) as i64);
            by_kind.push((*kind, env.insert(record).await.to_string()));
        }
    }

    for (value, kinds) in resource.matches {
        let reply = env.list(&format!("?type={value}")).await;

        reply.assert_ok();
        let expected: Vec<String> =
            by_kind.iter().filter(|(kind, _)| kinds.contains(kind)).map(|(_, id)| id.clone()).collect();
        assert_eq!(reply.ids(), expected, "type={value}");
    }
    let default = env.list("").await;
    default.assert_ok();
    assert_eq!(default.ids(), by_kind.iter().map(|(_, id)| id.clone()).collect::<Vec<_>>());
}

async fn only_active_records_are_listed(resource: &'static Resource) {
    let env = Env::start(resource).await;
    let mut active = Vec::new();
    for index in 0..9 {
        let status = ["active", "archived", "deleted"][index % 3];
        let id = env.insert(Record::named(&format!("record {index}")).at(index as i64).status(status)).await;
        if status == "active" {
            active.push(id.to_string());
        }
    }
    let narrowed = format!("?type={}", resource.narrowing_types()[0]);

    for query in ["", "?sort=name", "?type=all", &narrowed, "?search=record", "?limit=1", "?sort=name&limit=1"] {
        let listed = env.traversal_ids(&env.key, query).await;

        assert_eq!(listed, active, "{query}");
    }
}

// Keyset traversal.

async fn a_traversal_returns_every_record_once_in_both_sorts(resource: &'static Resource) {
    let env = Env::start(resource).await;
    let mut created = Vec::new();
    let mut named = Vec::new();
    // Names in another order than creation, some repeated so ties fall on page edges.
    for index in 0..23_usize {
        let name = format!("record {:02}", (index * 7) % 11);
        let id = env.insert(Record::named(&name).at(index as i64)).await;
        created.push(id);
        named.push((name, id));
    }
    named.sort();

    for limit in [1, 4, 23] {
        let by_created = env.traversal_ids(&env.key, &format!("?limit={limit}")).await;
        let by_name = env.traversal_ids(&env.key, &format!("?sort=name&limit={limit}")).await;

        assert_eq!(by_created, id_strings(&created), "limit {limit}");
        assert_eq!(by_name, named.iter().map(|(_, id)| id.to_string()).collect::<Vec<_>>(), "limit {limit}");
        assert_eq!(by_name.iter().collect::<HashSet<_>>().len(), 23, "limit {limit}");
    }
}

async fn records_unchanged_for_a_created_at_traversal_are_returned_once_while_others_come_and_go(
    resource: &'static Resource,
) {
    let env = Env::start(resource).await;
    // Ten seconds apart, so new records can be slotted in anywhere.
    let mut records = Vec::new();
    for index in 0..12_i64 {
        let record = Record::named(&format!("stable {index:02}")).at(index * 10);
        env.insert(record.clone()).await;
        records.push(record);
    }
    let first = env.list("?limit=4").await;
    first.assert_ok();
    let mut listed = first.ids();

    // Behind the cursor: one new record, one served record removed.
    let behind = env.insert(Record::named("inserted behind").at(15)).await;
    env.insert(records[1].clone().status("deleted")).await;
    // Ahead of the cursor: one record removed before it could be served.
    let removed_ahead = env.insert(records[6].clone().status("archived")).await;
    let second = env.list_after("?limit=4", &first.next_cursor()).await;
    second.assert_ok();
    listed.extend(second.ids());
    // Ahead again: one more new record, and a removal after the second page.
    let ahead = env.insert(Record::named("inserted ahead").at(95)).await;
    let removed_later = env.insert(records[10].clone().status("deleted")).await;
    listed.extend(env.ids_after("?limit=4", second.next_cursor()).await);

    let stable: Vec<String> = [0, 2, 3, 4, 5, 7, 8, 9, 11].iter().map(|&index| records[index].id.to_string()).collect();
    let served_stable: Vec<String> = listed.iter().filter(|id| stable.contains(id)).cloned().collect();
    assert_eq!(served_stable, stable, "every stable record once, in order: {listed:?}");
    assert_eq!(listed.iter().collect::<HashSet<_>>().len(), listed.len(), "duplicates: {listed:?}");
    assert!(!listed.contains(&behind.to_string()), "a record inserted behind the cursor was served");
    assert!(!listed.contains(&removed_ahead.to_string()), "a removed record was served after its removal");
    assert!(!listed.contains(&removed_later.to_string()), "a removed record was served after its removal");
    assert!(listed.contains(&ahead.to_string()), "a record inserted ahead of the cursor was skipped");
}

async fn records_unchanged_for_a_name_traversal_are_returned_once_while_others_come_and_go(
    resource: &'static Resource,
) {
    let env = Env::start(resource).await;
    let mut records = Vec::new();
    for (index, name) in ["bb", "dd", "ff", "hh", "jj", "ll", "nn", "pp"].into_iter().enumerate() {
        let record = Record::named(name).at(index as i64);
        env.insert(record.clone()).await;
        records.push(record);
    }
    let first = env.list("?sort=name&limit=3").await;
    first.assert_ok();
    let mut listed = first.ids();

    let behind = env.insert(Record::named("cc")).await;
    // The very record the cursor points at goes away.
    env.insert(records[2].clone().status("deleted")).await;
    let removed_ahead = env.insert(records[5].clone().status("archived")).await;
    let ahead = env.insert(Record::named("mm")).await;
    listed.extend(env.ids_after("?sort=name&limit=3", first.next_cursor()).await);

    let stable: Vec<String> = [0, 1, 3, 4, 6, 7].iter().map(|&index| records[index].id.to_string()).collect();
    let served_stable: Vec<String> = listed.iter().filter(|id| stable.contains(id)).cloned().collect();
    assert_eq!(served_stable, stable, "every stable record once, in order: {listed:?}");
    assert_eq!(listed.iter().collect::<HashSet<_>>().len(), listed.len(), "duplicates: {listed:?}");
    assert!(!listed.contains(&behind.to_string()), "a record inserted behind the cursor was served");
    assert!(!listed.contains(&removed_ahead.to_string()), "a removed record was served after its removal");
    assert!(listed.contains(&ahead.to_string()), "a record inserted ahead of the cursor was skipped");
}

async fn limit_may_change_between_pages(resource: &'static Resource) {
    let env = Env::start(resource).await;
    let inserted = env.insert_many("record", 12).await;

    for sort in ["", "&sort=name"] {
        let mut listed = Vec::new();
        let mut cursor: Option<String> = None;
        for limit in [2, 5, 1, 100] {
            let query = format!("?limit={limit}{sort}");
            let reply = match &cursor {
                Some(cursor) => env.list_after(&query, cursor).await,
                None => env.list(&query).await,
            };
            reply.assert_ok();
            assert!(reply.data().len() <= limit, "{query}: {}", reply.text);
            listed.extend(reply.ids());
            cursor = reply.body["page"]["nextCursor"].as_str().map(str::to_owned);
        }

        // "record 0000"... sort the same by name as by creation.
        assert_eq!(listed, id_strings(&inserted), "{sort}");
        assert!(cursor.is_none(), "{sort}: the last page has no cursor");
    }
}

// Cursors.

async fn a_cursor_from_another_workspace_is_a_400_that_says_start_over(resource: &'static Resource) {
    let env = Env::start(resource).await;
    let (other, other_key) = env.other_workspace().await;
    env.insert_many("mine", 3).await;
    for index in 0..3 {
        env.insert_into(other, Record::named(&format!("theirs {index}")).at(index)).await;
    }
    let foreign = env.app.get(&other_key, &env.list_path("?limit=1")).await;
    foreign.assert_ok();

    let reply = env.list_after("?limit=1", &foreign.next_cursor()).await;

    assert_start_over(&reply, "a foreign workspace's cursor");
}

/// A cursor issued for `issued_with`, replayed with `used_with`, over records every
/// query here lists.
async fn replayed_cursor(resource: &'static Resource, issued_with: &str, used_with: &str) -> Reply {
    let env = Env::start(resource).await;
    for index in 0..4 {
        env.insert(Record::named(&format!("acme {index}")).at(index)).await;
        // Records of every kind, so each `type` value has more than one page.
        for kind in resource.kinds {
            env.insert(Record::named(&format!("acme {kind} {index}")).kind(kind).at(index)).await;
        }
    }
    let first = env.list(&format!("?limit=1{issued_with}")).await;
    first.assert_ok();
    assert_eq!(first.body["page"]["hasMore"], true, "{issued_with}: {}", first.text);
    // The same cursor is good with the query that issued it.
    env.list_after(&format!("?limit=1{issued_with}"), &first.next_cursor()).await.assert_ok();
    env.list_after(&format!("?limit=1{used_with}"), &first.next_cursor()).await
}

async fn a_cursor_used_with_a_different_search_is_a_400_that_says_start_over(resource: &'static Resource) {
    for (issued_with, used_with) in
        [("&search=acme", "&search=acm"), ("&search=acme", "&search=ACME"), ("&search=acme", ""), ("", "&search=acme")]
    {
        let reply = replayed_cursor(resource, issued_with, used_with).await;

        assert_start_over(&reply, &format!("issued with {issued_with:?}, used with {used_with:?}"));
    }
}

async fn a_cursor_used_with_a_different_type_is_a_400_that_says_start_over(resource: &'static Resource) {
    let [first, second] = resource.narrowing_types();
    for (issued_with, used_with) in [
        (format!("&type={first}"), format!("&type={second}")),
        (format!("&type={first}"), String::new()),
        (String::new(), format!("&type={second}")),
        ("&type=all".to_owned(), format!("&type={first}")),
    ] {
        let reply = replayed_cursor(resource, &issued_with, &used_with).await;

        assert_start_over(&reply, &format!("issued with {issued_with:?}, used with {used_with:?}"));
    }
}

async fn a_cursor_used_with_a_different_sort_is_a_400_that_says_start_over(resource: &'static Resource) {
    for (issued_with, used_with) in
        [("&sort=name", "&sort=createdAt"), ("&sort=name", ""), ("", "&sort=name"), ("&sort=createdAt", "&sort=name")]
    {
        let reply = replayed_cursor(resource, issued_with, used_with).await;

        assert_start_over(&reply, &format!("issued with {issued_with:?}, used with {used_with:?}"));
    }
}

async fn a_tampered_or_made_up_cursor_is_a_400_that_says_start_over(resource: &'static Resource) {
    let env = Env::start(resource).await;
    env.insert_many("record", 3).await;
    let cursor = env.list("?limit=1").await.next_cursor();
    let mut tampered = Vec::new();
    for position in [0, cursor.len() / 2, cursor.len() - 1] {
        let mut chars: Vec<char> = cursor.chars().collect();
        chars[position] = if chars[position] == 'A' { 'B' } else { 'A' };
        tampered.push(chars.into_iter().collect::<String>());
    }
    let made_up = ["not-a-cursor", "!!!", "a", "", &"A".repeat(200), "eyJ0eXAiOiJKV1QifQ", "ä€𝄞"];

    for bad in tampered.iter().map(String::as_str).chain(made_up) {
        let reply = env.list_after("?limit=1", bad).await;

        assert_start_over(&reply, &format!("cursor {bad:?}"));
    }
}

async fn a_cursor_of_the_other_resource_is_a_400_that_says_start_over(resource: &'static Resource) {
    let env = Env::start(resource).await;
    let other = resource.other();
    let both_scopes = env.app.key(env.workspace, &[Scope::ContactsRead, Scope::ItemsRead]).await;
    for index in 0..3 {
        let record = Record::named(&format!("record {index}")).at(index);
        env.insert(record.clone()).await;
        other.insert(&env.app.pool, env.workspace, &record).await;
    }
    let other_page = env.app.get(&both_scopes, &format!("{}?limit=1", other.path)).await;
    other_page.assert_ok();
    let cursor = urlencode(&other_page.next_cursor());
    // Good where it was issued.
    env.app.get(&both_scopes, &format!("{}?limit=1&cursor={cursor}", other.path)).await.assert_ok();

    let reply = env.app.get(&both_scopes, &env.list_path(&format!("?limit=1&cursor={cursor}"))).await;

    assert_start_over(&reply, &format!("a cursor of {} used on {}", other.path, resource.path));
}

// Search.

async fn search_matches_each_searchable_field_ignoring_case(resource: &'static Resource) {
    let env = Env::start(resource).await;
    let mut found_by = Vec::new();
    for (index, field) in resource.searchable.iter().enumerate() {
        let value = format!("Hay NeEdLe-{field} Hay");
        let record = if *field == "name" {
            Record::named(&value)
        } else {
            Record::named(&format!("record {index}")).field(field, &value)
        };
        found_by.push((*field, env.insert(record.at(index as i64)).await.to_string()));
    }
    env.insert(Record::named("haystack").at(99)).await;

    for (field, id) in &found_by {
        for text in [format!("needle-{field}"), format!("NEEDLE-{}", field.to_uppercase()), format!("e-{field} h")] {
            let reply = env.list(&format!("?search={}", urlencode(&text))).await;

            reply.assert_ok();
            assert_eq!(reply.ids(), std::slice::from_ref(id), "{field}: search {text:?}");
        }
    }
    let every = env.list("?search=eEdLe-").await;
    every.assert_ok();
    assert_eq!(every.ids(), found_by.iter().map(|(_, id)| id.clone()).collect::<Vec<_>>());
}

async fn search_does_not_look_in_the_unsearchable_field(resource: &'static Resource) {
    let env = Env::start(resource).await;
    env.insert(Record::named("Hidden").field(resource.unsearchable, "Zauberberg").at(0)).await;
    let named = env.insert(Record::named("Zauberberg AG").at(1)).await;

    let reply = env.list("?search=zauberberg").await;

    reply.assert_ok();
    assert_eq!(reply.ids(), [named.to_string()], "{} must not be searched", resource.unsearchable);
}

async fn percent_underscore_and_backslash_in_search_are_literal_in_every_searchable_field(resource: &'static Resource) {
    let env = Env::start(resource).await;
    let values = ["50% off", "500 off", "a_b", "axb", r"back\slash", "backslash", r"100\% sure"];

    for field in resource.searchable {
        let (workspace, key) = env.other_workspace().await;
        let mut by_value = Vec::new();
        for (index, value) in values.into_iter().enumerate() {
            let record = if *field == "name" {
                Record::named(value)
            } else {
                Record::named(&format!("record {index}")).field(field, value)
            };
            by_value.push((value, env.insert_into(workspace, record.at(index as i64)).await.to_string()));
        }
        let ids_of = |wanted: &[&str]| -> Vec<String> {
            by_value.iter().filter(|(value, _)| wanted.contains(value)).map(|(_, id)| id.clone()).collect()
        };

        for (text, expected) in [
            ("50%", ids_of(&["50% off"])),
            ("%", ids_of(&["50% off", r"100\% sure"])),
            ("a_b", ids_of(&["a_b"])),
            ("_", ids_of(&["a_b"])),
            (r"k\s", ids_of(&[r"back\slash"])),
            (r"\", ids_of(&[r"back\slash", r"100\% sure"])),
            (r"0\%", ids_of(&[r"100\% sure"])),
        ] {
            let reply = env.app.get(&key, &env.list_path(&format!("?search={}", urlencode(text)))).await;

            reply.assert_ok();
            assert_eq!(reply.ids(), expected, "{field}: search {text:?}");
        }
    }
}

async fn a_search_over_120_characters_is_a_400_naming_search(resource: &'static Resource) {
    let env = Env::start(resource).await;
    let long_name = format!("x{}x", "ä".repeat(120));
    let long = env.insert(Record::named(&long_name)).await;

    for text in ["a".repeat(121), "ä".repeat(121)] {
        let reply = env.list(&format!("?search={}", urlencode(&text))).await;

        assert_one_problem_with(&reply, "search", &format!("{} characters", text.chars().count()));
    }
    let at_the_limit = env.list(&format!("?search={}", urlencode(&"ä".repeat(120)))).await;
    at_the_limit.assert_ok();
    assert_eq!(at_the_limit.ids(), [long.to_string()]);
}

async fn an_empty_search_is_no_filter(resource: &'static Resource) {
    let env = Env::start(resource).await;
    let inserted = env.insert_many("record", 3).await;

    let reply = env.list("?search=").await;

    reply.assert_ok();
    assert_eq!(reply.ids(), id_strings(&inserted));
    assert_eq!(reply.body["data"], env.list("").await.body["data"]);
}

// Strict parameters.

async fn an_unknown_query_parameter_is_a_400_naming_it(resource: &'static Resource) {
    let env = Env::start(resource).await;
    let id = env.insert(Record::named("Record")).await;

    for name in ["page", "Limit", "q", "pageSize", "filter"] {
        let query = format!("?{name}=5");

        let reply = env.list(&query).await;

        assert_one_problem_with(&reply, name, &query);
    }
    // Retrieve takes no parameters at all, not even the listing's.
    for name in ["limit", "type", "search"] {
        let path = format!("{}?{name}=5", env.one_path(id));

        let reply = env.app.get(&env.key, &path).await;

        assert_one_problem_with(&reply, name, &path);
    }
}

async fn a_parameter_given_twice_is_a_400_naming_it(resource: &'static Resource) {
    let env = Env::start(resource).await;
    let [kind, _] = resource.narrowing_types();

    for (query, parameter) in [
        ("limit=5&limit=6".to_owned(), "limit"),
        ("limit=5&limit=5".to_owned(), "limit"),
        ("sort=name&sort=createdAt".to_owned(), "sort"),
        (format!("type={kind}&search=a&type={kind}"), "type"),
        ("search=a&search=b".to_owned(), "search"),
    ] {
        let query = format!("?{query}");

        let reply = env.list(&query).await;

        assert_one_problem_with(&reply, parameter, &query);
    }
}

async fn choosing_a_workspace_in_the_query_is_a_400_saying_it_comes_from_the_key(resource: &'static Resource) {
    let env = Env::start(resource).await;
    let (other, _) = env.other_workspace().await;
    let foreign = env.insert_into(other, Record::named("Other Workspace Secret")).await;

    for name in ["workspace", "workspaceId", "workspace_id"] {
        for path in [env.list_path(&format!("?{name}={other}")), format!("{}?{name}={other}", env.one_path(foreign))] {
            let reply = env.app.get(&env.key, &path).await;

            assert_one_problem_with(&reply, name, &path);
            let detail = reply.details()[0].to_lowercase();
            assert!(detail.contains("workspace") && detail.contains("key"), "{path}: {detail:?}");
            assert!(!reply.text.contains("Other Workspace Secret"), "{path}: {}", reply.text);
        }
    }
}

async fn a_type_of_the_other_resource_is_a_400_listing_the_allowed_values(resource: &'static Resource) {
    let env = Env::start(resource).await;

    for value in resource.foreign_types.iter().chain(&["partner", "", "ALL"]) {
        let query = format!("?type={value}");

        let reply = env.list(&query).await;

        assert_one_problem_with(&reply, "type", &query);
        let detail = &reply.details()[0];
        for allowed in resource.types {
            assert!(detail.contains(allowed), "{query}: {detail:?} does not list {allowed}");
        }
    }
}

async fn limit_and_sort_outside_their_values_are_a_400_naming_them(resource: &'static Resource) {
    let env = Env::start(resource).await;

    for (query, parameter) in [
        ("limit=0", "limit"),
        ("limit=101", "limit"),
        ("limit=1.5", "limit"),
        ("limit=abc", "limit"),
        ("limit=", "limit"),
        ("sort=email", "sort"),
        ("sort=-name", "sort"),
        ("sort=created_at", "sort"),
    ] {
        let query = format!("?{query}");

        let reply = env.list(&query).await;

        assert_one_problem_with(&reply, parameter, &query);
    }
}

async fn a_get_with_a_body_is_a_400_naming_the_body(resource: &'static Resource) {
    let env = Env::start(resource).await;
    let (other, _) = env.other_workspace().await;
    let foreign = env.insert_into(other, Record::named("Other Workspace Secret")).await;

    for path in [env.list_path(""), env.one_path(foreign)] {
        let request = env
            .app
            .http
            .get(env.app.url(&path))
            .header("X-API-Key", &env.key)
            .header("Content-Type", "application/json")
            .body(format!("{{\"workspaceId\":\"{other}\"}}"));

        let reply = env.app.send(request).await;

        assert_one_problem_with(&reply, "body", &path);
        assert!(!reply.text.contains("Other Workspace Secret"), "{path}: {}", reply.text);
    }
}

// Shape.

async fn every_response_carries_its_own_request_id_in_header_and_body(resource: &'static Resource) {
    let env = Env::start(resource).await;
    let id = env.insert(Record::named("Record")).await;
    let other_scope_key = env.app.key(env.workspace, &[resource.other_scope]).await;

    let replies = [
        env.list("").await,
        env.retrieve(id).await,
        env.list("?limit=0").await,
        env.retrieve("not-a-uuid").await,
        env.app.send(env.app.http.get(env.app.url(&env.list_path("")))).await,
        env.app.get(&other_scope_key, &env.one_path(id)).await,
        env.retrieve(Uuid::new_v4()).await,
        env.app.send(env.app.http.post(env.app.url(&env.list_path(""))).header("X-API-Key", &env.key)).await,
    ];

    let statuses: Vec<u16> = replies.iter().map(|reply| reply.status).collect();
    assert_eq!(statuses, [200, 200, 400, 400, 401, 403, 404, 405]);
    let mut request_ids = Vec::new();
    for reply in &replies {
        let header = reply.header("x-request-id").unwrap_or_else(|| panic!("no X-Request-Id: {reply:?}"));
        assert!(is_request_id(header), "{header:?} does not match the pattern");
        assert_eq!(reply.body["requestId"], header, "{}", reply.text);
        request_ids.push(header.to_owned());
    }
    request_ids.sort_unstable();
    request_ids.dedup();
    assert_eq!(request_ids.len(), replies.len(), "request ids repeat");
}

async fn errors_have_exactly_the_envelope_keys(resource: &'static Resource) {
    let env = Env::start(resource).await;
    let other_scope_key = env.app.key(env.workspace, &[resource.other_scope]).await;

    let validation = env.list("?limit=0").await;
    let unauthorized = env.app.send(env.app.http.get(env.app.url(&env.list_path("")))).await;
    let forbidden = env.app.get(&other_scope_key, &env.list_path("")).await;
    let not_found = env.retrieve(Uuid::new_v4()).await;

    validation.assert_error(400, "VALIDATION_ERROR");
    unauthorized.assert_error(401, "UNAUTHORIZED");
    forbidden.assert_error(403, "FORBIDDEN");
    not_found.assert_error(404, "NOT_FOUND");
    for reply in [&validation, &unauthorized, &forbidden, &not_found] {
        assert_eq!(keys_of(&reply.body), ["error", "requestId"], "{}", reply.text);
    }
    assert_eq!(keys_of(&validation.body["error"]), ["code", "details", "message"]);
    for reply in [&unauthorized, &forbidden, &not_found] {
        assert_eq!(keys_of(&reply.body["error"]), ["code", "message"], "{}", reply.text);
    }
}

async fn list_body_page_and_record_have_exactly_the_contract_keys(resource: &'static Resource) {
    let env = Env::start(resource).await;
    let bare = env.insert(Record::named("Bare").at(0)).await;
    let mut full = Record::named("Full").at(1);
    for (field, value) in resource.nullable {
        full = full.field(field, value);
    }
    let full = env.insert(full).await;

    let more = env.list("?limit=1").await;
    let last = env.list("").await;

    for reply in [&more, &last] {
        reply.assert_ok();
        assert_eq!(keys_of(&reply.body), ["data", "page", "requestId"], "{}", reply.text);
        assert_eq!(keys_of(&reply.body["page"]), ["hasMore", "nextCursor"], "{}", reply.text);
    }
    assert_eq!(more.body["page"]["hasMore"], true);
    assert!(!more.next_cursor().is_empty());
    assert_eq!(last.body["page"], json!({ "hasMore": false, "nextCursor": null }));
    assert_eq!(last.data().len(), 2);
    for id in [bare, full] {
        let retrieved = env.retrieve(id).await;
        retrieved.assert_ok();
        assert_eq!(keys_of(&retrieved.body), ["data", "requestId"], "{}", retrieved.text);
        let listed = last.data().iter().find(|record| record["id"] == id.to_string());
        assert_eq!(listed, Some(&retrieved.body["data"]), "list and retrieve serve the same record");
        assert_eq!(keys_of(&retrieved.body["data"]), resource.keys, "{}", retrieved.text);
    }
}

async fn nullable_fields_are_present_as_null(resource: &'static Resource) {
    let env = Env::start(resource).await;
    let bare = env.insert(Record::named("Bare").at(0)).await;
    let mut full = Record::named("Full").at(1);
    for (field, value) in resource.nullable {
        full = full.field(field, value);
    }
    let full = env.insert(full).await;

    let listed = env.list("").await;
    let bare_retrieved = env.retrieve(bare).await;
    let full_retrieved = env.retrieve(full).await;

    listed.assert_ok();
    bare_retrieved.assert_ok();
    full_retrieved.assert_ok();
    for record in [&listed.data()[0], &bare_retrieved.body["data"]] {
        for (field, _) in resource.nullable {
            assert_eq!(record.get(*field), Some(&Value::Null), "{field} must be present as null: {record}");
        }
    }
    for record in [&listed.data()[1], &full_retrieved.body["data"]] {
        for (field, _) in resource.nullable {
            assert!(record.get(*field).is_some_and(|value| !value.is_null()), "{field} must be filled: {record}");
        }
    }
}

async fn created_at_has_exactly_three_fraction_digits_and_a_z(resource: &'static Resource) {
    let env = Env::start(resource).await;
    let mut expected = Vec::new();
    for (index, (micros, text)) in [
        (0_i64, "2025-02-03T08:00:00.000Z"),
        (1, "2025-02-03T08:00:00.000Z"),
        (1_000, "2025-02-03T08:00:00.001Z"),
        (123_987, "2025-02-03T08:00:00.123Z"),
        (999_999, "2025-02-03T08:00:00.999Z"),
        (1_123_456, "2025-02-03T08:00:01.123Z"),
        (500_000_000, "2025-02-03T08:08:20.000Z"),
    ]
    .into_iter()
    .enumerate()
    {
        let record = Record::named(&format!("record {index}")).created(base_time() + Span::microseconds(micros));
        expected.push((env.insert(record).await, text));
    }

    let listed = env.list("").await;

    listed.assert_ok();
    assert_eq!(listed.data().len(), expected.len());
    for (id, text) in expected {
        let retrieved = env.retrieve(id).await;
        retrieved.assert_ok();
        let in_list = listed.data().iter().find(|record| record["id"] == id.to_string());
        for record in [in_list.unwrap_or(&Value::Null), &retrieved.body["data"]] {
            let created = record["createdAt"].as_str().unwrap_or_default();
            assert!(is_millisecond_instant(created), "createdAt {created:?} is not YYYY-MM-DDTHH:MM:SS.mmmZ");
            assert_eq!(created, text, "{record}");
        }
    }
}
