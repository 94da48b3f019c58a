//! Workspace isolation under random traffic. Six workspaces hold contacts and items
//! seeded from one random seed: the same names, e-mails and search terms everywhere,
//! and some records under the same UUID in several workspaces (the primary key is
//! `(workspace_id, id)`, so upstream systems may do that), each copy marked with its
//! owner. Every workspace has keys of every kind: both scopes, one scope, none,
//! revoked and expired.
//!
//! Random requests of every route and parameter (lists with `limit`, `sort`, `type`,
//! `search` and cursors taken from any key's or workspace's responses; retrieves of
//! the caller's, other workspaces', shared, unknown and malformed ids) are held to one
//! rule above all: no response ever contains another workspace's record. Besides, a
//! foreign id is a 404, a foreign cursor a 400, a missing scope a 403, a revoked or
//! expired key a 401, and following the cursors to the end yields exactly the
//! workspace's active records.
//!
//! `LECTERN_ISOLATION_SEED` chooses another seeded world; `PROPTEST_CASES` the number
//! of random requests.

use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;

use chrono::{DateTime, Duration as Span, Utc};
use lectern_api::keys::{store, Environment, Scope};
use lectern_tests::app::urlencode;
use lectern_tests::seed::{base_time, create_key_with};
use lectern_tests::{ContactSeed, Reply, TestApp, TestDatabase};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, FileFailurePersistence, RngAlgorithm, TestRng};
use serde_json::Value;
use tokio::runtime::Runtime;
use uuid::Uuid;

use crate::items::ItemSeed;

const WORKSPACES: usize = 6;
const DEFAULT_SEED: u64 = 0x1500_1a7e;

// The model.

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Resource {
    Contacts,
    Items,
}

impl Resource {
    const ALL: [Self; 2] = [Self::Contacts, Self::Items];

    fn path(self) -> &'static str {
        match self {
            Self::Contacts => "/v1/contacts",
            Self::Items => "/v1/items",
        }
    }

    /// `type` values, `all` first.
    fn types(self) -> &'static [&'static str] {
        match self {
            Self::Contacts => &["all", "customer", "supplier"],
            Self::Items => &["all", "product", "service"],
        }
    }

    /// The field holding the owner marker; never searched.
    fn marker_field(self) -> &'static str {
        match self {
            Self::Contacts => "address",
            Self::Items => "unit",
        }
    }
}

/// The keys every workspace has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum KeyKind {
    Both,
    /// A second key with both scopes: cursors pass between keys of one workspace.
    Second,
    ContactsOnly,
    ItemsOnly,
    NoScope,
    Revoked,
    Expired,
}

impl KeyKind {
    const ALL: [Self; 7] =
        [Self::Both, Self::Second, Self::ContactsOnly, Self::ItemsOnly, Self::NoScope, Self::Revoked, Self::Expired];

    /// `Err(status)` when this key may not read `resource`.
    fn admits(self, resource: Resource) -> Result<(), u16> {
        match (self, resource) {
            (Self::Revoked | Self::Expired, _) => Err(401),
            (Self::Both | Self::Second, _)
            | (Self::ContactsOnly, Resource::Contacts)
            | (Self::ItemsOnly, Resource::Items) => Ok(()),
            _ => Err(403),
        }
    }

    fn scopes(self) -> &'static [Scope] {
        match self {
            Self::ContactsOnly => &[Scope::ContactsRead],
            Self::ItemsOnly => &[Scope::ItemsRead],
            Self::NoScope => &[],
            _ => &[Scope::ContactsRead, Scope::ItemsRead],
        }
    }
}

/// One seeded record, as the model knows it.
#[derive(Clone, Debug)]
struct Record {
    id: Uuid,
    active: bool,
    /// The `type` values besides `all` that list it.
    kinds: Vec<&'static str>,
    created_at: DateTime<Utc>,
    /// The searchable fields, lower-cased.
    searchable: Vec<String>,
    /// `w<workspace>/<resource initial><n>`, in the marker field.
    marker: String,
}

struct Workspace {
    id: Uuid,
    keys: HashMap<KeyKind, String>,
    records: HashMap<Resource, Vec<Record>>,
}

impl Workspace {
    fn active(&self, resource: Resource) -> impl Iterator<Item = &Record> {
        self.records[&resource].iter().filter(|record| record.active)
    }

    fn owns_active(&self, resource: Resource, id: Uuid) -> Option<&Record> {
        self.active(resource).find(|record| record.id == id)
    }
}

/// What a listing's cursor is bound to besides workspace and resource.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Binding {
    search: Option<&'static str>,
    kind: &'static str,
    sort: &'static str,
}

impl Binding {
    /// The query for this binding; `spell_defaults` writes `type=all` and
    /// `sort=createdAt` out, which must make no difference.
    fn query(&self, spell_defaults: bool) -> Vec<String> {
        let mut pairs = Vec::new();
        if let Some(search) = self.search {
            pairs.push(format!("search={}", urlencode(search)));
        }
        if spell_defaults || self.kind != "all" {
            pairs.push(format!("type={}", self.kind));
        }
        if spell_defaults || self.sort != "createdAt" {
            pairs.push(format!("sort={}", self.sort));
        }
        pairs
    }

    fn selects(&self, record: &Record) -> bool {
        let kind = self.kind == "all" || record.kinds.contains(&self.kind);
        let search = self.search.is_none_or(|text| {
            let needle = text.to_lowercase();
            record.searchable.iter().any(|field| field.contains(&needle))
        });
        record.active && kind && search
    }
}

/// Search terms every workspace's data contains in some records: LIKE metacharacters
/// included.
const SEARCHES: &[&str] =
    &["acme", "ACME", "gmbh", "beta", "%", "_", "\\", "zoë", "shared.example", "sku-1", "50%", "x"];

const NAMES: &[&str] = &[
    "Acme GmbH",
    "acme gmbh",
    "ACME",
    "Beta Ltd",
    "Zoë & Söhne",
    "ZOË",
    "50% Rabatt",
    "a_b_c",
    "back\\slash",
    "日本の会社",
    "Omega",
    "x",
];

/// A cursor one of the workspaces was given, and the first page it followed.
#[derive(Debug)]
struct Issued {
    workspace: usize,
    resource: Resource,
    binding: Binding,
    token: String,
    first_page: Vec<Uuid>,
}

struct World {
    runtime: Runtime,
    _db: TestDatabase,
    app: TestApp,
    seed: u64,
    workspaces: Vec<Workspace>,
    cursors: Vec<Issued>,
}

static WORLD: OnceLock<World> = OnceLock::new();

fn world() -> &'static World {
    WORLD.get_or_init(|| {
        let seed =
            std::env::var("LECTERN_ISOLATION_SEED").ok().and_then(|text| text.parse().ok()).unwrap_or(DEFAULT_SEED);
        let runtime =
            tokio::runtime::Builder::new_multi_thread().worker_threads(4).enable_all().build().expect("runtime");
        let (db, app, workspaces, cursors) = runtime.block_on(build(seed));
        World { runtime, _db: db, app, seed, workspaces, cursors }
    })
}

fn bindings(resource: Resource) -> Vec<Binding> {
    let [_, first, second] = resource.types() else { unreachable!("three types") };
    let binding = |search, kind, sort| Binding { search, kind, sort };
    vec![
        binding(None, "all", "createdAt"),
        binding(None, "all", "name"),
        binding(None, first, "createdAt"),
        binding(None, second, "name"),
        binding(Some("acme"), "all", "createdAt"),
        binding(Some("%"), "all", "name"),
        binding(Some("_"), first, "createdAt"),
        binding(Some("shared.example"), "all", "createdAt"),
    ]
}

async fn build(seed: u64) -> (TestDatabase, TestApp, Vec<Workspace>, Vec<Issued>) {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let mut seed_bytes = [0u8; 32];
    seed_bytes[..8].copy_from_slice(&seed.to_be_bytes());
    let mut rng = TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes);
    let shared: Vec<Uuid> = (0..5).map(|_| Uuid::from_u128(rng.random())).collect();

    let mut workspaces = Vec::new();
    for index in 0..WORKSPACES {
        let id = Uuid::from_u128(rng.random());
        let mut keys = HashMap::new();
        for kind in KeyKind::ALL {
            let expires = (kind == KeyKind::Expired).then(|| Utc::now() - Span::hours(1));
            let (key_id, key) = create_key_with(&app.pool, id, kind.scopes(), Environment::Live, expires).await;
            if kind == KeyKind::Revoked {
                store::revoke(&app.pool, &key_id).await.expect("revoke");
            }
            keys.insert(kind, key);
        }
        let mut records = HashMap::new();
        for resource in Resource::ALL {
            records.insert(resource, seed_records(&app, &mut rng, index, id, resource, &shared).await);
        }
        workspaces.push(Workspace { id, keys, records });
    }

    let mut cursors = Vec::new();
    for (index, workspace) in workspaces.iter().enumerate() {
        for resource in Resource::ALL {
            for binding in bindings(resource) {
                let mut query = binding.query(false);
                query.push("limit=1".to_owned());
                let reply =
                    app.get(&workspace.keys[&KeyKind::Both], &format!("{}?{}", resource.path(), query.join("&"))).await;
                reply.assert_ok();
                if let Some(token) = reply.body["page"]["nextCursor"].as_str() {
                    let first_page = ids(&reply);
                    cursors.push(Issued { workspace: index, resource, binding, token: token.to_owned(), first_page });
                }
            }
        }
    }
    (db, app, workspaces, cursors)
}

/// Seeds 8 to 28 records of `resource` in workspace `index`, some under shared ids.
async fn seed_records(
    app: &TestApp,
    rng: &mut TestRng,
    index: usize,
    workspace: Uuid,
    resource: Resource,
    shared: &[Uuid],
) -> Vec<Record> {
    let count = rng.random_range(8..=28);
    let mut records: Vec<Record> = Vec::new();
    for n in 0..count {
        let mut id = Uuid::from_u128(rng.random());
        if rng.random_bool(0.2) {
            id = shared[rng.random_range(0..shared.len())];
        }
        if records.iter().any(|record| record.id == id) {
            id = Uuid::from_u128(rng.random());
        }
        let name = NAMES[rng.random_range(0..NAMES.len())];
        let status = match rng.random_range(0..20) {
            0..=2 => "archived",
            3..=4 => "deleted",
            _ => "active",
        };
        let created_at = base_time() + Span::seconds(rng.random_range(0..12));
        let marker = format!("w{index}/{}{n}", if resource == Resource::Contacts { 'c' } else { 'i' });
        let email = ["billing@acme.example", "info@shared.example", "x_y@beta.example", "50%off@shared.example"]
            [rng.random_range(0..4)];
        let code = ["SKU-1", "sku-12", "DE_%\\", "ZOË-9"][rng.random_range(0..4)];
        let record = match resource {
            Resource::Contacts => {
                let (customer, supplier) = (rng.random_bool(0.6), rng.random_bool(0.5));
                let mut seed = ContactSeed::named(name).roles(customer, supplier).address(&marker).status(status);
                seed.id = id;
                seed.created_at = created_at;
                if rng.random_bool(0.7) {
                    seed = seed.email(email);
                }
                if rng.random_bool(0.5) {
                    seed = seed.tin(code);
                }
                if rng.random_bool(0.3) {
                    seed = seed.phone("+49 30 1234");
                }
                seed.insert(&app.pool, workspace).await;
                let kinds = [("customer", customer), ("supplier", supplier)];
                Record {
                    id,
                    active: status == "active",
                    kinds: kinds.iter().filter(|(_, yes)| *yes).map(|(kind, _)| *kind).collect(),
                    created_at,
                    searchable: [Some(&seed.name), seed.email.as_ref(), seed.phone.as_ref(), seed.tin.as_ref()]
                        .into_iter()
                        .flatten()
                        .map(|field| field.to_lowercase())
                        .collect(),
                    marker,
                }
            }
            Resource::Items => {
                let kind = if rng.random_bool(0.5) { "product" } else { "service" };
                let mut seed = ItemSeed::named(name).kind(kind).unit(&marker).status(status);
                seed.id = id;
                seed.created_at = created_at;
                if rng.random_bool(0.6) {
                    seed = seed.sku(code);
                }
                if rng.random_bool(0.6) {
                    seed = seed.description(email);
                }
                seed.insert(&app.pool, workspace).await;
                Record {
                    id,
                    active: status == "active",
                    kinds: vec![kind],
                    created_at,
                    searchable: [Some(&seed.name), seed.sku.as_ref(), seed.description.as_ref()]
                        .into_iter()
                        .flatten()
                        .map(|field| field.to_lowercase())
                        .collect(),
                    marker,
                }
            }
        };
        records.push(record);
    }
    records
}

// Checks.

fn ids(reply: &Reply) -> Vec<Uuid> {
    reply.data().iter().map(record_id).collect()
}

fn record_id(record: &Value) -> Uuid {
    record["id"].as_str().and_then(|id| Uuid::parse_str(id).ok()).unwrap_or_else(|| panic!("no UUID id: {record}"))
}

impl World {
    fn get(&self, key: &str, path: &str) -> Reply {
        self.runtime.block_on(self.app.get(key, path))
    }

    /// The leak check, on any answer: every record in a 200 is an active record of
    /// workspace `caller` (its id and its owner marker); nothing else is ever served.
    fn assert_only_own_records(&self, caller: usize, resource: Resource, reply: &Reply, what: &str) {
        assert!(reply.status < 500, "{what}: {} {}", reply.status, reply.text);
        if reply.status != 200 {
            return;
        }
        let records: Vec<&Value> = match &reply.body["data"] {
            Value::Array(records) => records.iter().collect(),
            record @ Value::Object(_) => vec![record],
            other => panic!("{what}: a 200 without data: {other}"),
        };
        for record in records {
            let id = record_id(record);
            let marker = record[resource.marker_field()].as_str().unwrap_or_default();
            let owner = self.workspaces.iter().position(|workspace| {
                workspace.records[&resource].iter().any(|own| own.id == id && own.marker == marker)
            });
            assert_eq!(owner, Some(caller), "{what}: LEAK: record {id} ({marker}) served to workspace {caller}");
            let own = self.workspaces[caller].owns_active(resource, id);
            assert!(own.is_some_and(|own| own.marker == marker), "{what}: an inactive or stale record {id} ({marker})");
        }
    }

    /// The caller's records a binding selects, in (createdAt, id) order.
    fn selection(&self, caller: usize, resource: Resource, binding: &Binding) -> Vec<&Record> {
        let mut records: Vec<&Record> =
            self.workspaces[caller].records[&resource].iter().filter(|record| binding.selects(record)).collect();
        records.sort_by_key(|record| (record.created_at, record.id));
        records
    }

    /// A page of `expected` (in createdAt order; compared as a set under `sort=name`).
    fn assert_page(&self, reply: &Reply, expected: &[&Record], limit: usize, binding: &Binding, what: &str) {
        reply.assert_ok();
        let served = ids(reply);
        let has_more = expected.len() > limit;
        assert_eq!(served.len(), expected.len().min(limit), "{what}: page size of {} selected", expected.len());
        assert_eq!(reply.body["page"]["hasMore"], has_more, "{what}");
        assert_eq!(reply.body["page"]["nextCursor"].is_string(), has_more, "{what}");
        let expected_ids: Vec<Uuid> = expected.iter().map(|record| record.id).collect();
        if binding.sort == "createdAt" {
            assert_eq!(served, expected_ids[..served.len()], "{what}: not the next records in (createdAt, id) order");
        } else {
            assert!(served.iter().all(|id| expected_ids.contains(id)), "{what}: a record outside the selection");
            assert_eq!(served.iter().collect::<HashSet<_>>().len(), served.len(), "{what}: a record twice");
        }
    }
}

/// What random listings may ask for: the cursor bindings and every search term.
fn list_bindings(resource: Resource) -> Vec<Binding> {
    let mut all = bindings(resource);
    for (index, search) in SEARCHES.iter().enumerate() {
        let kind = resource.types()[index % 3];
        let sort = if index % 2 == 0 { "createdAt" } else { "name" };
        all.push(Binding { search: Some(search), kind, sort });
    }
    all
}

// Random traffic.

/// One request of the random traffic.
#[derive(Clone, Debug)]
enum Request {
    /// A listing, maybe with any cursor from the pool (valid or not for it).
    List {
        caller: Index,
        key: KeyKind,
        resource: Resource,
        binding: Index,
        spell: bool,
        limit: Option<u8>,
        cursor: Option<Index>,
    },
    /// A listing that continues one of the caller's own cursors (another key may have got it).
    Continue { caller: Index, key: KeyKind, cursor: Index, spell: bool, limit: Option<u8> },
    /// A cursor of another workspace, with exactly the binding it was issued for.
    Foreign { caller: Index, key: KeyKind, cursor: Index },
    /// A retrieve.
    Get { caller: Index, key: KeyKind, resource: Resource, target: Target },
}

#[derive(Clone, Debug)]
enum Target {
    /// One of the caller's records, active or not.
    Own(Index),
    /// A record of another workspace (possibly under an id the caller shares).
    Foreign(Index, Index),
    Unknown(u128),
    Malformed(Index),
}

fn key_kind() -> impl Strategy<Value = KeyKind> {
    prop_oneof![
        6 => Just(KeyKind::Both),
        3 => Just(KeyKind::Second),
        2 => Just(KeyKind::ContactsOnly),
        2 => Just(KeyKind::ItemsOnly),
        1 => Just(KeyKind::NoScope),
        1 => Just(KeyKind::Revoked),
        1 => Just(KeyKind::Expired),
    ]
}

fn resource() -> impl Strategy<Value = Resource> {
    prop_oneof![Just(Resource::Contacts), Just(Resource::Items)]
}

fn limit() -> impl Strategy<Value = Option<u8>> {
    prop::option::of(prop_oneof![4 => 1u8..=5, 1 => 6u8..=100])
}

fn request() -> impl Strategy<Value = Request> {
    prop_oneof![
        3 => (any::<Index>(), key_kind(), resource(), any::<Index>(), any::<bool>(), limit(), prop::option::weighted(0.3, any::<Index>()))
            .prop_map(|(caller, key, resource, binding, spell, limit, cursor)| Request::List {
                caller, key, resource, binding, spell, limit, cursor
            }),
        2 => (any::<Index>(), key_kind(), any::<Index>(), any::<bool>(), limit())
            .prop_map(|(caller, key, cursor, spell, limit)| Request::Continue { caller, key, cursor, spell, limit }),
        1 => (any::<Index>(), key_kind(), any::<Index>())
            .prop_map(|(caller, key, cursor)| Request::Foreign { caller, key, cursor }),
        3 => (any::<Index>(), key_kind(), resource(), prop_oneof![
                3 => any::<Index>().prop_map(Target::Own),
                3 => (any::<Index>(), any::<Index>()).prop_map(|(owner, record)| Target::Foreign(owner, record)),
                1 => any::<u128>().prop_map(Target::Unknown),
                1 => any::<Index>().prop_map(Target::Malformed),
            ])
            .prop_map(|(caller, key, resource, target)| Request::Get { caller, key, resource, target }),
    ]
}

fn with_limit(mut pairs: Vec<String>, limit: Option<u8>) -> Vec<String> {
    if let Some(limit) = limit {
        pairs.push(format!("limit={limit}"));
    }
    pairs
}

fn path(resource: Resource, pairs: &[String]) -> String {
    if pairs.is_empty() {
        resource.path().to_owned()
    } else {
        format!("{}?{}", resource.path(), pairs.join("&"))
    }
}

impl World {
    /// Sends `request` and holds the answer to the model.
    fn run(&self, request: &Request) {
        match request {
            Request::List { caller, key, resource, binding, spell, limit, cursor } => {
                let caller = caller.index(WORKSPACES);
                let bindings = list_bindings(*resource);
                let binding = &bindings[binding.index(bindings.len())];
                let issued = cursor.map(|cursor| &self.cursors[cursor.index(self.cursors.len())]);
                let mut pairs = with_limit(binding.query(*spell), *limit);
                if let Some(issued) = issued {
                    pairs.push(format!("cursor={}", urlencode(&issued.token)));
                }
                let valid_cursor = issued.map(|issued| {
                    issued.workspace == caller && issued.resource == *resource && issued.binding == *binding
                });
                self.check_list(caller, *key, *resource, binding, &pairs, *limit, issued.zip(valid_cursor));
            }
            Request::Continue { caller, key, cursor, spell, limit } => {
                let caller = caller.index(WORKSPACES);
                let own: Vec<&Issued> = self.cursors.iter().filter(|issued| issued.workspace == caller).collect();
                let Some(issued) = own.get(cursor.index(own.len().max(1))) else { return };
                let mut pairs = with_limit(issued.binding.query(*spell), *limit);
                pairs.push(format!("cursor={}", urlencode(&issued.token)));
                self.check_list(caller, *key, issued.resource, &issued.binding, &pairs, *limit, Some((issued, true)));
            }
            Request::Foreign { caller, key, cursor } => {
                let caller = caller.index(WORKSPACES);
                let foreign: Vec<&Issued> = self.cursors.iter().filter(|issued| issued.workspace != caller).collect();
                let issued = foreign[cursor.index(foreign.len())];
                let mut pairs = issued.binding.query(false);
                pairs.push(format!("cursor={}", urlencode(&issued.token)));
                self.check_list(caller, *key, issued.resource, &issued.binding, &pairs, None, Some((issued, false)));
            }
            Request::Get { caller, key, resource, target } => {
                let caller = caller.index(WORKSPACES);
                let own = &self.workspaces[caller].records[resource];
                let segment = match target {
                    Target::Own(record) => own[record.index(own.len())].id.to_string(),
                    Target::Foreign(owner, record) => {
                        let others: Vec<usize> = (0..WORKSPACES).filter(|other| *other != caller).collect();
                        let theirs = &self.workspaces[others[owner.index(others.len())]].records[resource];
                        theirs[record.index(theirs.len())].id.to_string()
                    }
                    Target::Unknown(id) => Uuid::from_u128(*id).to_string(),
                    Target::Malformed(index) => {
                        ["not-a-uuid", "123", "%7B%7D", "1ec7e4a1-0000-4000-8000"][index.index(4)].to_owned()
                    }
                };
                self.check_get(caller, *key, *resource, &segment);
            }
        }
    }

    /// Sends `path` with the caller's `key` and checks what every answer must satisfy:
    /// only the caller's records, and the key's own refusal (401, 403) when it cannot
    /// read `resource`. `None` when that refusal was the answer.
    fn send(&self, caller: usize, key: KeyKind, resource: Resource, path: &str) -> Option<(Reply, String)> {
        let what = self.describe(caller, key, path);
        let reply = self.get(&self.workspaces[caller].keys[&key], path);
        self.assert_only_own_records(caller, resource, &reply, &what);
        if let Err(status) = key.admits(resource) {
            reply.assert_error(status, if status == 401 { "UNAUTHORIZED" } else { "FORBIDDEN" });
            return None;
        }
        Some((reply, what))
    }

    fn describe(&self, caller: usize, key: KeyKind, path: &str) -> String {
        let workspace = self.workspaces[caller].id;
        format!("seed {}: workspace {caller} ({workspace}) with its {key:?} key: GET {path}", self.seed)
    }

    #[expect(
        clippy::too_many_arguments,
        reason = "each argument is one dimension the randomized requests vary; a struct would only rename them"
    )]
    fn check_list(
        &self,
        caller: usize,
        key: KeyKind,
        resource: Resource,
        binding: &Binding,
        pairs: &[String],
        limit: Option<u8>,
        cursor: Option<(&Issued, bool)>,
    ) {
        let path = path(resource, pairs);
        let Some((reply, what)) = self.send(caller, key, resource, &path) else { return };
        let limit = limit.map_or(50, usize::from);
        let mut expected = self.selection(caller, resource, binding);
        match cursor {
            None => {}
            Some((issued, true)) => expected.retain(|record| !issued.first_page.contains(&record.id)),
            Some((_, false)) => {
                reply.assert_error(400, "VALIDATION_ERROR");
                let details = reply.details();
                assert!(details.len() == 1 && details[0].starts_with("cursor:"), "{what}: {details:?}");
                return;
            }
        }
        self.assert_page(&reply, &expected, limit, binding, &what);
    }

    fn check_get(&self, caller: usize, key: KeyKind, resource: Resource, segment: &str) {
        let path = format!("{}/{segment}", resource.path());
        let Some((reply, what)) = self.send(caller, key, resource, &path) else { return };
        let Ok(id) = Uuid::try_parse(&segment.replace("%7B", "{").replace("%7D", "}")) else {
            reply.assert_error(400, "VALIDATION_ERROR");
            assert!(reply.details().first().is_some_and(|detail| detail.starts_with("id:")), "{what}");
            return;
        };
        match self.workspaces[caller].owns_active(resource, id) {
            Some(own) => {
                reply.assert_ok();
                assert_eq!(reply.body["data"][resource.marker_field()], own.marker.as_str(), "{what}");
            }
            None => reply.assert_error(404, "NOT_FOUND"),
        }
    }
}

fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|text| text.parse().ok()).unwrap_or(default)
}

proptest! {
    #![proptest_config(Config {
        cases: cases(512),
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/proptest-regressions/api/isolation.txt"
        )))),
        ..Config::default()
    })]

    #[test]
    fn isolation_random_requests_never_serve_another_workspaces_record(request in request()) {
        world().run(&request);
    }
}

// Sweeps.

/// The seeded world is worth testing: ids shared by workspaces where both copies are
/// active, inactive records, and cursors in every workspace.
#[test]
fn isolation_the_seeded_world_has_collisions_worth_testing() {
    let world = world();
    for resource in Resource::ALL {
        let mut owners: HashMap<Uuid, usize> = HashMap::new();
        for workspace in &world.workspaces {
            for record in workspace.active(resource) {
                *owners.entry(record.id).or_default() += 1;
            }
        }
        assert!(
            owners.values().any(|count| *count >= 2),
            "seed {}: no {resource:?} id active in two workspaces",
            world.seed
        );
        let inactive =
            world.workspaces.iter().flat_map(|workspace| &workspace.records[&resource]).filter(|r| !r.active);
        assert!(inactive.count() > 0, "seed {}: no inactive {resource:?}", world.seed);
    }
    for caller in 0..WORKSPACES {
        assert!(
            world.cursors.iter().any(|issued| issued.workspace == caller),
            "seed {}: no cursor of {caller}",
            world.seed
        );
    }
}

#[test]
fn isolation_every_foreign_id_is_a_404_unless_the_caller_holds_the_same_id() {
    let world = world();
    for caller in 0..WORKSPACES {
        for resource in Resource::ALL {
            let foreign: HashSet<Uuid> = (0..WORKSPACES)
                .filter(|owner| *owner != caller)
                .flat_map(|owner| world.workspaces[owner].records[&resource].iter().map(|record| record.id))
                .collect();
            for id in foreign {
                world.check_get(caller, KeyKind::Both, resource, &id.to_string());
            }
        }
    }
}

#[test]
fn isolation_every_foreign_cursor_is_a_400() {
    let world = world();
    for caller in 0..WORKSPACES {
        for issued in world.cursors.iter().filter(|issued| issued.workspace != caller) {
            let mut pairs = issued.binding.query(false);
            pairs.push(format!("cursor={}", urlencode(&issued.token)));
            let one_scope =
                if issued.resource == Resource::Contacts { KeyKind::ContactsOnly } else { KeyKind::ItemsOnly };
            for key in [KeyKind::Second, one_scope] {
                world.check_list(caller, key, issued.resource, &issued.binding, &pairs, None, Some((issued, false)));
            }
        }
    }
}

#[test]
fn isolation_scopes_revocation_and_expiry_hold_on_every_route() {
    let world = world();
    for caller in 0..WORKSPACES {
        for key in KeyKind::ALL {
            for resource in Resource::ALL {
                world.check_list(caller, key, resource, &bindings(resource)[0], &[], None, None);
                for record in world.workspaces[caller].records[&resource].iter().take(4) {
                    world.check_get(caller, key, resource, &record.id.to_string());
                }
            }
        }
    }
}

/// Following `nextCursor` from the first page to the last, with a page size that
/// changes from page to page, yields each selected active record of the workspace
/// exactly once (in order under `sort=createdAt`) and nothing else, for every key
/// that may list.
#[test]
fn isolation_following_the_cursors_to_the_end_yields_exactly_the_workspaces_active_records() {
    let world = world();
    let mut rng = TestRng::from_seed(RngAlgorithm::ChaCha, &[7; 32]);
    for caller in 0..WORKSPACES {
        for resource in Resource::ALL {
            let keys = match resource {
                Resource::Contacts => [KeyKind::Both, KeyKind::Second, KeyKind::ContactsOnly],
                Resource::Items => [KeyKind::Both, KeyKind::Second, KeyKind::ItemsOnly],
            };
            for binding in bindings(resource) {
                let key = keys[rng.random_range(0..keys.len())];
                let expected = world.selection(caller, resource, &binding);
                let what = format!("seed {}: workspace {caller}, {key:?} key, {resource:?} {binding:?}", world.seed);
                let mut served: Vec<Uuid> = Vec::new();
                let mut cursor: Option<String> = None;
                loop {
                    let mut pairs = with_limit(binding.query(rng.random_bool(0.3)), Some(rng.random_range(1..=4)));
                    if let Some(token) = &cursor {
                        pairs.push(format!("cursor={}", urlencode(token)));
                    }
                    let reply = world.get(&world.workspaces[caller].keys[&key], &path(resource, &pairs));
                    world.assert_only_own_records(caller, resource, &reply, &what);
                    reply.assert_ok();
                    served.extend(ids(&reply));
                    cursor = reply.body["page"]["nextCursor"].as_str().map(str::to_owned);
                    assert_eq!(reply.body["page"]["hasMore"], cursor.is_some(), "{what}");
                    if cursor.is_none() {
                        break;
                    }
                    assert!(served.len() <= expected.len(), "{what}: more records than the workspace holds");
                }
                let expected_ids: Vec<Uuid> = expected.iter().map(|record| record.id).collect();
                if binding.sort == "createdAt" {
                    assert_eq!(served, expected_ids, "{what}");
                } else {
                    let mut sorted = served.clone();
                    sorted.sort();
                    let mut wanted = expected_ids.clone();
                    wanted.sort();
                    assert_eq!(sorted, wanted, "{what}");
                }
            }
        }
    }
}
