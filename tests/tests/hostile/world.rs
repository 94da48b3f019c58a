//! One app for the whole binary, seeded once: a caller's workspace full of records with
//! nasty names, a neighbour workspace with the same names (and a few of the same ids),
//! keys of every kind, and real cursors. Properties run many cases against it, so it is
//! built once (on first use) and shared; each property drives it from its own thread.
//!
//! Also here: the contract's checks every hostile answer must pass, the proptest
//! configuration (case count, failure persistence), the corpus reader, and the model of
//! form decoding the strict query gate documents.

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use lectern_api::keys::Scope;
use lectern_tests::app::{urlencode, AppOptions};
use lectern_tests::seed::{base_time, create_key};
use lectern_tests::{ContactSeed, Reply, TestApp, TestDatabase};
use proptest::test_runner::{Config, FileFailurePersistence};
use serde_json::Value;
use sqlx::PgPool;
use tokio::runtime::Runtime;
use uuid::Uuid;

// Proptest configuration.

/// Cases per property: `PROPTEST_CASES` when set, else `default`.
pub fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|text| text.parse().ok()).unwrap_or(default)
}

/// A configuration with `cases` cases whose failures are kept in `persistence`
/// (a path under `tests/proptest-regressions/`), so a found case is replayed first on
/// every later run until it passes.
pub fn config(cases: u32, persistence: &'static str) -> Config {
    Config {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(persistence))),
        // Shrinking an HTTP case is cheap, but an unbounded shrink of a long string is not.
        max_shrink_iters: 2_000,
        ..Config::default()
    }
}

/// `tests/proptest-regressions/<name>`, absolute, as a `&'static str` for proptest.
#[macro_export]
macro_rules! regressions {
    ($name:literal) => {
        concat!(env!("CARGO_MANIFEST_DIR"), "/proptest-regressions/", $name)
    };
}

// The corpus.

/// The corpus directory `tests/corpus/<kind>`.
pub fn corpus_dir(kind: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("corpus").join(kind)
}

/// Every file of `tests/corpus/<kind>` ending in `.<extension>`, sorted, with its bytes.
pub fn corpus_files(kind: &str, extension: &str) -> Vec<(String, Vec<u8>)> {
    let dir = corpus_dir(kind);
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|error| panic!("read {}: {error}", dir.display()))
        .map(|entry| entry.expect("corpus entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == extension))
        .map(|path| {
            let text = std::fs::read(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
            (path.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default(), text)
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no .{extension} files in {}", dir.display());
    files
}

/// The entries of a line-based corpus: every line that is not blank and does not start
/// with `# ` (a comment), as (file:line, text).
pub fn corpus_lines(kind: &str) -> Vec<(String, String)> {
    let mut lines = Vec::new();
    for (file, bytes) in corpus_files(kind, "txt") {
        let text = String::from_utf8(bytes).unwrap_or_else(|_| panic!("{file} is not UTF-8"));
        for (index, line) in text.lines().enumerate() {
            if line.trim().is_empty() || line.starts_with("# ") || line == "#" {
                continue;
            }
            lines.push((format!("{file}:{}", index + 1), line.to_owned()));
        }
    }
    lines
}

/// Runs `check` on every corpus entry, and fails once at the end naming every entry
/// that failed, so one bad entry does not hide the others.
pub fn replay<T>(entries: &[(String, T)], check: impl Fn(&str, &T)) {
    let mut failed = Vec::new();
    for (name, entry) in entries {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(name, entry)));
        if let Err(panic) = outcome {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|text| (*text).to_owned()))
                .unwrap_or_default();
            failed.push(format!("{name}: {}", message.chars().take(600).collect::<String>()));
        }
    }
    assert!(failed.is_empty(), "{} of {} corpus entries failed:\n{}", failed.len(), entries.len(), failed.join("\n"));
}

// Form decoding, as the contract and the strict gate define it.

/// Decodes a query component the way the strict gate documents: `+` is a space, `%XX`
/// is a byte, any other `%` is itself; `None` when the bytes are not UTF-8.
pub fn form_decode(raw: &str) -> Option<String> {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        match bytes[index] {
            b'+' => out.push(b' '),
            b'%' if index + 2 < bytes.len() && hex(bytes[index + 1]).is_some() && hex(bytes[index + 2]).is_some() => {
                out.push(hex(bytes[index + 1]).unwrap_or_default() * 16 + hex(bytes[index + 2]).unwrap_or_default());
                index += 2;
            }
            byte => out.push(byte),
        }
        index += 1;
    }
    String::from_utf8(out).ok()
}

fn hex(byte: u8) -> Option<u8> {
    (byte as char).to_digit(16).and_then(|digit| u8::try_from(digit).ok())
}

// The contract's checks.

/// The error code `docs/api.md` pairs with `status`.
pub fn code_for(status: u16) -> &'static str {
    match status {
        400 => "VALIDATION_ERROR",
        401 => "UNAUTHORIZED",
        402 => "PLAN_LIMIT_REACHED",
        403 => "FORBIDDEN",
        404 => "NOT_FOUND",
        422 => "UNPROCESSABLE_ENTITY",
        423 => "BOOKS_LOCKED",
        429 => "RATE_LIMITED",
        503 => "SERVICE_UNAVAILABLE",
        500 => "INTERNAL_ERROR",
        _ => "REQUEST_FAILED",
    }
}

/// Never a 5xx; an error is in the contract's shape with the code of its status.
pub fn assert_clean(reply: &Reply, what: &str) {
    assert!(reply.status < 500, "{what}: server error {}: {}", reply.status, reply.text);
    if reply.status == 200 {
        reply.assert_ok();
    } else {
        reply.assert_error(reply.status, code_for(reply.status));
    }
}

/// A clean 400 whose only problem is `parameter`.
pub fn assert_only_problem(reply: &Reply, parameter: &str, what: &str) {
    assert_eq!(reply.status, 400, "{what}: expected a 400 naming {parameter}, got {}: {}", reply.status, reply.text);
    reply.assert_error(400, "VALIDATION_ERROR");
    let details = reply.details();
    assert_eq!(details.len(), 1, "{what}: {details:?}");
    assert!(details[0].starts_with(&format!("{parameter}:")), "{what}: {details:?}");
}

// The world.

/// The two listed resources.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Resource {
    Contacts,
    Items,
}

impl Resource {
    pub const ALL: [Self; 2] = [Self::Contacts, Self::Items];

    pub fn path(self) -> &'static str {
        match self {
            Self::Contacts => "/v1/contacts",
            Self::Items => "/v1/items",
        }
    }

    /// Accepted `type` values.
    pub fn types(self) -> &'static [&'static str] {
        match self {
            Self::Contacts => &["all", "customer", "supplier"],
            Self::Items => &["all", "product", "service"],
        }
    }

    /// The field that holds a record's owner marker (never searched).
    pub fn marker_field(self) -> &'static str {
        match self {
            Self::Contacts => "address",
            Self::Items => "unit",
        }
    }
}

/// What a key may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// `contacts:read` and `items:read`.
    Both,
    ContactsOnly,
    ItemsOnly,
    /// A valid key without scopes.
    NoScope,
    /// No key, or one that is not valid.
    Invalid,
}

impl Access {
    pub fn allows(self, resource: Resource) -> bool {
        match self {
            Self::Both => true,
            Self::ContactsOnly => resource == Resource::Contacts,
            Self::ItemsOnly => resource == Resource::Items,
            Self::NoScope | Self::Invalid => false,
        }
    }
}

/// A record of the caller's workspace as the model sees it.
#[derive(Clone, Debug)]
pub struct Record {
    pub id: Uuid,
    pub active: bool,
    /// The `type` values that list it (besides `all`).
    pub kinds: Vec<&'static str>,
    pub created_at: DateTime<Utc>,
    /// Lower-cased searchable fields.
    pub search: Vec<String>,
    /// The owner marker in the record's marker field.
    pub marker: String,
}

/// Where a real cursor came from.
#[derive(Clone, Debug)]
pub struct IssuedCursor {
    pub resource: Resource,
    /// The query it was issued for, without `limit` and `cursor`.
    pub query: String,
    /// Whether it was issued in the caller's workspace.
    pub own: bool,
    pub token: String,
}

pub struct World {
    runtime: Runtime,
    _db: TestDatabase,
    pub app: TestApp,
    /// The same database behind an app whose cursors live zero seconds.
    pub expiring_app: TestApp,
    pub workspace: Uuid,
    pub neighbour: Uuid,
    /// Keys of the caller's workspace with both scopes, handed out in turn so a rate
    /// limit per key is never what a property meets.
    both_keys: Vec<String>,
    next_key: AtomicUsize,
    pub contacts_key: String,
    pub items_key: String,
    pub no_scope_key: String,
    pub neighbour_key: String,
    /// The caller's records, active or not, per resource.
    pub records: HashMap<Resource, Vec<Record>>,
    /// The neighbour's record ids per resource (some equal to the caller's).
    pub neighbour_ids: HashMap<Resource, Vec<Uuid>>,
    /// Ids that both workspaces hold.
    pub shared_ids: Vec<Uuid>,
    /// Real cursors, from both workspaces.
    pub cursors: Vec<IssuedCursor>,
    /// When the cursors were issued (the expiring app refuses them a second later).
    pub cursors_issued: Instant,
}

static WORLD: OnceLock<World> = OnceLock::new();

/// Names that are hard on LIKE patterns, SQL text, collation and encodings; both
/// workspaces use them.
pub const NASTY_NAMES: &[&str] = &[
    "Acme GmbH",
    "acme gmbh",
    "50% Rabatt",
    "100%",
    "%",
    "_",
    "\\",
    "a_b_c",
    "a%b",
    "back\\slash",
    "C:\\Temp\\%_",
    "O'Brien",
    "Robert'); DROP TABLE contacts;--",
    "' OR '1'='1",
    "\" OR \"\"=\"",
    "$1",
    "NULL",
    "null",
    "Zoë & Co. ✓",
    "ZOË",
    "日本語の会社",
    "😀 emoji",
    "tab\there",
    "line\nbreak",
    "  spaced  ",
    "x",
];

impl World {
    /// The shared world, built on first use.
    pub fn shared() -> &'static World {
        WORLD.get_or_init(Self::build)
    }

    /// Runs `future` on the world's runtime.
    pub fn block_on<F: Future>(&self, future: F) -> F::Output {
        self.runtime.block_on(future)
    }

    /// The next key of the caller's workspace with both scopes.
    pub fn key(&self) -> &str {
        let index = self.next_key.fetch_add(1, Ordering::Relaxed);
        &self.both_keys[index % self.both_keys.len()]
    }

    /// A key (or non-key) with `access`; `None` sends no `X-API-Key` header.
    pub fn key_with(&self, access: Access, variant: usize) -> Option<String> {
        match access {
            Access::Both => Some(self.key().to_owned()),
            Access::ContactsOnly => Some(self.contacts_key.clone()),
            Access::ItemsOnly => Some(self.items_key.clone()),
            Access::NoScope => Some(self.no_scope_key.clone()),
            Access::Invalid => match variant % 5 {
                0 => None,
                1 => Some(String::new()),
                2 => Some("lk_live_0000000000000000_0000000000000000000000000000000000000000000".to_owned()),
                3 => Some(format!("{}x", self.both_keys[0])),
                _ => Some("' OR 1=1 --".to_owned()),
            },
        }
    }

    /// GET `path_and_query` with `key` (none when `None`), retried while rate limited.
    pub fn get(&self, key: Option<&str>, path_and_query: &str) -> Reply {
        self.get_on(&self.app, key, path_and_query, &[])
    }

    /// GET on `app` with extra headers; a 429 is retried after its `Retry-After`.
    pub fn get_on(&self, app: &TestApp, key: Option<&str>, path_and_query: &str, headers: &[(&str, &str)]) -> Reply {
        self.block_on(async {
            for _ in 0..5 {
                let mut request = app.http.get(app.url(path_and_query)).timeout(Duration::from_secs(30));
                if let Some(key) = key {
                    request = request.header("X-API-Key", key);
                }
                for (name, value) in headers {
                    request = request.header(*name, *value);
                }
                let reply = app.send(request).await;
                if reply.status != 429 {
                    return reply;
                }
                let wait = reply.header("retry-after").and_then(|secs| secs.parse::<u64>().ok()).unwrap_or(1);
                tokio::time::sleep(Duration::from_secs(wait.min(5))).await;
            }
            panic!("{path_and_query}: still rate limited after five tries");
        })
    }

    /// The caller's active records of `resource`.
    pub fn active(&self, resource: Resource) -> impl Iterator<Item = &Record> {
        self.records[&resource].iter().filter(|record| record.active)
    }

    /// Checks that every record in a 200's `data` is an active record of the caller's
    /// workspace (its id and its owner marker), and returns their ids.
    pub fn assert_own_records(&self, resource: Resource, reply: &Reply, what: &str) -> Vec<Uuid> {
        let records: Vec<&Value> = match &reply.body["data"] {
            Value::Array(items) => items.iter().collect(),
            object @ Value::Object(_) => vec![object],
            other => panic!("{what}: no data in a 200: {other}"),
        };
        let mut ids = Vec::new();
        for record in records {
            let id = record["id"].as_str().and_then(|id| Uuid::parse_str(id).ok());
            let id = id.unwrap_or_else(|| panic!("{what}: a record without a UUID id: {record}"));
            let own = self.records[&resource].iter().find(|own| own.id == id && own.active);
            let own = own.unwrap_or_else(|| panic!("{what}: LEAK or inactive record {id} served: {record}"));
            assert_eq!(
                record[resource.marker_field()].as_str(),
                Some(own.marker.as_str()),
                "{what}: record {id} is another workspace's version: {record}"
            );
            ids.push(id);
        }
        ids
    }

    fn build() -> World {
        let runtime =
            tokio::runtime::Builder::new_multi_thread().worker_threads(4).enable_all().build().expect("tokio runtime");
        let world = runtime.block_on(Seeded::build());
        World {
            runtime,
            _db: world.db,
            app: world.app,
            expiring_app: world.expiring_app,
            workspace: world.workspace,
            neighbour: world.neighbour,
            both_keys: world.both_keys,
            next_key: AtomicUsize::new(0),
            contacts_key: world.contacts_key,
            items_key: world.items_key,
            no_scope_key: world.no_scope_key,
            neighbour_key: world.neighbour_key,
            records: world.records,
            neighbour_ids: world.neighbour_ids,
            shared_ids: world.shared_ids,
            cursors: world.cursors,
            cursors_issued: world.cursors_issued,
        }
    }
}

/// Everything `World::build` makes on the runtime.
struct Seeded {
    db: TestDatabase,
    app: TestApp,
    expiring_app: TestApp,
    workspace: Uuid,
    neighbour: Uuid,
    both_keys: Vec<String>,
    contacts_key: String,
    items_key: String,
    no_scope_key: String,
    neighbour_key: String,
    records: HashMap<Resource, Vec<Record>>,
    neighbour_ids: HashMap<Resource, Vec<Uuid>>,
    shared_ids: Vec<Uuid>,
    cursors: Vec<IssuedCursor>,
    cursors_issued: Instant,
}

/// The caller's workspace. Fixed (every run has a database of its own), so the corpus
/// can hold cursors signed for it.
pub const WORKSPACE: Uuid = Uuid::from_u128(0x1ec7_e4a1_0000_4000_8000_0000_0000_0001);
/// The neighbour's workspace.
pub const NEIGHBOUR: Uuid = Uuid::from_u128(0x1ec7_e4a1_0000_4000_8000_0000_0000_0002);

/// Queries real cursors are taken for (each with `limit=1`).
pub const CURSOR_QUERIES: &[&str] =
    &["", "sort=name", "sort=createdAt", "search=a", "search=%25", "search=a&sort=name", "type=all"];

impl Seeded {
    async fn build() -> Seeded {
        let db = TestDatabase::create().await;
        let app = TestApp::spawn(db.pool.clone()).await;
        let options = AppOptions { cursor_lifetime: Duration::ZERO, ..AppOptions::default() };
        let expiring_app = TestApp::spawn_with(db.pool.clone(), options).await;
        let pool = &db.pool;
        let (workspace, neighbour) = (WORKSPACE, NEIGHBOUR);
        let both = [Scope::ContactsRead, Scope::ItemsRead];

        let mut both_keys = Vec::new();
        for _ in 0..24 {
            both_keys.push(create_key(pool, workspace, &both).await.1);
        }
        let contacts_key = create_key(pool, workspace, &[Scope::ContactsRead]).await.1;
        let items_key = create_key(pool, workspace, &[Scope::ItemsRead]).await.1;
        let no_scope_key = create_key(pool, workspace, &[]).await.1;
        let neighbour_key = create_key(pool, neighbour, &both).await.1;

        let shared_ids: Vec<Uuid> = (0..4).map(|_| Uuid::new_v4()).collect();
        let mut records = HashMap::new();
        let mut neighbour_ids = HashMap::new();
        for resource in Resource::ALL {
            let (own, theirs) = seed(pool, resource, workspace, neighbour, &shared_ids).await;
            records.insert(resource, own);
            neighbour_ids.insert(resource, theirs);
        }

        let mut cursors = Vec::new();
        for resource in Resource::ALL {
            for (own, key) in [(true, &both_keys[0]), (false, &neighbour_key)] {
                for query in CURSOR_QUERIES {
                    let separator = if query.is_empty() { "" } else { "&" };
                    let reply = app.get(key, &format!("{}?limit=1{separator}{query}", resource.path())).await;
                    reply.assert_ok();
                    let token = reply.body["page"]["nextCursor"].as_str();
                    let token = token.unwrap_or_else(|| panic!("no cursor for {query}: {}", reply.text)).to_owned();
                    cursors.push(IssuedCursor { resource, query: (*query).to_owned(), own, token });
                }
            }
        }
        Seeded {
            db,
            app,
            expiring_app,
            workspace,
            neighbour,
            both_keys,
            contacts_key,
            items_key,
            no_scope_key,
            neighbour_key,
            records,
            neighbour_ids,
            shared_ids,
            cursors,
            cursors_issued: Instant::now(),
        }
    }
}

/// Seeds `resource` in both workspaces with the nasty names; returns the caller's
/// records and the neighbour's ids. The shared ids are active in both workspaces,
/// except the last, which the caller has archived.
async fn seed(
    pool: &PgPool,
    resource: Resource,
    workspace: Uuid,
    neighbour: Uuid,
    shared_ids: &[Uuid],
) -> (Vec<Record>, Vec<Uuid>) {
    let mut own = Vec::new();
    let mut theirs = Vec::new();
    for (index, name) in NASTY_NAMES.iter().enumerate() {
        let seconds = i64::try_from(index / 3).unwrap_or_default();
        let status = match index % 9 {
            4 => "archived",
            7 => "deleted",
            _ => "active",
        };
        let mut own_id = Uuid::new_v4();
        let mut their_id = Uuid::new_v4();
        if let Some(shared) = shared_ids.get(index) {
            own_id = *shared;
            their_id = *shared;
        }
        let own_status = if index + 1 == shared_ids.len() { "archived" } else { status };
        own.push(insert(pool, resource, workspace, own_id, name, index, seconds, own_status, "mine").await);
        theirs.push(insert(pool, resource, neighbour, their_id, name, index, seconds, "active", "theirs").await.id);
    }
    (own, theirs)
}

/// One record written the way the projector would; `owner` goes into its marker.
#[expect(
    clippy::too_many_arguments,
    reason = "each argument is one column the callers vary; a struct would only rename them"
)]
async fn insert(
    pool: &PgPool,
    resource: Resource,
    workspace: Uuid,
    id: Uuid,
    name: &str,
    index: usize,
    seconds: i64,
    status: &'static str,
    owner: &str,
) -> Record {
    let marker = format!("{owner} {index}");
    let created_at = base_time() + chrono::Duration::seconds(seconds);
    let email = format!("user{index}@{}.example", if index.is_multiple_of(2) { "acme" } else { "beta" });
    let code = format!("X-{index:03}_%");
    match resource {
        Resource::Contacts => {
            let mut seed =
                ContactSeed::named(name).roles(index % 3 != 1, !index.is_multiple_of(3)).email(&email).tin(&code);
            seed = seed.address(&marker).status(status).at(seconds);
            seed.id = id;
            seed.insert(pool, workspace).await;
            let mut kinds = Vec::new();
            if seed.is_customer {
                kinds.push("customer");
            }
            if seed.is_supplier {
                kinds.push("supplier");
            }
            Record {
                id,
                active: status == "active",
                kinds,
                created_at,
                search: vec![name.to_lowercase(), email.to_lowercase(), code.to_lowercase()],
                marker,
            }
        }
        Resource::Items => {
            let kind = if index.is_multiple_of(2) { "product" } else { "service" };
            sqlx::query(
                "insert into items (workspace_id, id, version, status, name, sku, description, type, unit, created_at)
                 values ($1, $2, 1, $3, $4, $5, $6, $7, $8, $9)",
            )
            .bind(workspace)
            .bind(id)
            .bind(status)
            .bind(name)
            .bind(&code)
            .bind(&email)
            .bind(kind)
            .bind(&marker)
            .bind(created_at)
            .execute(pool)
            .await
            .expect("insert item");
            Record {
                id,
                active: status == "active",
                kinds: vec![kind],
                created_at,
                search: vec![name.to_lowercase(), code.to_lowercase(), email.to_lowercase()],
                marker,
            }
        }
    }
}

/// `value` percent-encoded for a query.
pub fn enc(value: &str) -> String {
    urlencode(value)
}
