//! Running `lectern-dev`, reading the quick-start block it prints, and what the
//! demo data should look like once it is all projected.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_nats::jetstream;
use lectern_fixtures::demo::{demo_events, DemoEvent, DEMO_WORKSPACE};
use lectern_schema::events::{ChangeKind, EntityKind};
use lectern_tests::binaries::Run;
use lectern_tests::database::admin_url;
use lectern_tests::process::{Launch, Service};
use lectern_tests::TestApp;
use serde_json::Value;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, PgPool};
use uuid::Uuid;

/// Migrating, publishing the demo and projecting it, on a slow machine shared with
/// other test suites: generous, so only a hang fails.
pub const STARTUP: Duration = Duration::from_secs(240);
/// How long stopping, or a failing start, may take before the test fails instead of hanging.
pub const PROCESS_TIMEOUT: Duration = Duration::from_secs(60);

/// A database URL on the test server whose database does not exist yet (named so the
/// harness sweeps it when stale); `dev` must create it.
pub fn missing_database() -> (String, String) {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or_default();
    let name = format!("lectern_test_{now}_{}", Uuid::new_v4().simple());
    let options: PgConnectOptions = admin_url().parse().expect("admin URL");
    (options.database(&name).to_url_lossy().to_string(), name)
}

/// Whether the test server has a database called `name`.
pub async fn database_exists(name: &str) -> bool {
    let admin = PgPoolOptions::new().max_connections(1).connect(&admin_url()).await.expect("connect as admin");
    let exists = sqlx::query_scalar("select exists (select 1 from pg_database where datname = $1)")
        .bind(name)
        .fetch_one(&admin)
        .await
        .expect("look the database up");
    admin.close().await;
    exists
}

pub async fn connect(url: &str) -> PgPool {
    PgPoolOptions::new().max_connections(4).connect(url).await.expect("connect to the dev database")
}

/// What `dev` printed for the newcomer.
#[derive(Debug)]
pub struct QuickStart {
    /// `host:port` of the public API.
    pub api: String,
    /// `host:port` of the operations listener.
    pub operations: String,
    /// "N contacts and M items (…)" as printed: (N, M, what was said in brackets).
    pub contacts: usize,
    pub items: usize,
    pub demo: String,
    /// The fresh key.
    pub key: String,
}

impl QuickStart {
    fn parse(stdout: &str) -> Self {
        let line = |label: &str| {
            stdout
                .lines()
                .map(str::trim)
                .find_map(|line| line.strip_prefix(label))
                .unwrap_or_else(|| panic!("no {label:?} line in:\n{stdout}"))
                .trim()
                .to_owned()
        };
        let address = |url: &str| {
            url.split_whitespace()
                .next()
                .and_then(|url| url.strip_prefix("http://"))
                .map(|rest| rest.split('/').next().unwrap_or_default().to_owned())
                .unwrap_or_else(|| panic!("not an http:// URL: {url:?}\n{stdout}"))
        };
        let demo_line = line("Demo workspace");
        let (workspace, rest) = demo_line.split_once(": ").unwrap_or_else(|| panic!("demo line {demo_line:?}"));
        assert_eq!(workspace, DEMO_WORKSPACE.to_string(), "{stdout}");
        let words: Vec<&str> = rest.split_whitespace().collect();
        let number = |at: usize| -> usize {
            words.get(at).and_then(|word| word.parse().ok()).unwrap_or_else(|| panic!("demo line {demo_line:?}"))
        };
        let demo = rest.split_once('(').and_then(|(_, said)| said.strip_suffix(')')).unwrap_or_default().to_owned();
        let keys: Vec<&str> = stdout.lines().map(str::trim).filter(|line| line.starts_with("lk_")).collect();
        assert_eq!(keys.len(), 1, "one key line:\n{stdout}");
        Self {
            api: address(&line("API")),
            operations: address(&line("Operations")),
            contacts: number(0),
            items: number(3),
            demo,
            key: keys[0].to_owned(),
        }
    }

    /// The printed API as a [`TestApp`] (its helpers speak HTTP; `pool` reads the database).
    pub fn app(&self, pool: PgPool) -> TestApp {
        TestApp {
            address: self.api.parse().expect("the printed API address"),
            pool,
            http: reqwest::Client::builder().timeout(Duration::from_secs(60)).build().expect("client"),
            state: None,
            operations: self.operations.parse().ok(),
        }
    }

    pub fn operations_url(&self, path: &str) -> String {
        format!("http://{}{path}", self.operations)
    }

    pub fn api_url(&self, path: &str) -> String {
        format!("http://{}{path}", self.api)
    }
}

/// A running `lectern-dev` that has printed its quick start.
pub struct Dev {
    pub service: Service,
    pub printed: QuickStart,
}

/// `lectern-dev` on free ports against `database_url` and `nats_url`.
pub fn dev(database_url: &str, nats_url: &str) -> Launch {
    Launch::dev()
        .args(["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"])
        .env("DATABASE_URL", database_url)
        .env("NATS_URL", nats_url)
}

impl Dev {
    /// Starts `dev` and waits for its quick start.
    pub async fn start(database_url: &str, nats_url: &str) -> Self {
        let mut service = dev(database_url, nats_url).json_logs().spawn();
        service.wait_for_stdout(STARTUP, "Stop with Ctrl-C.").await;
        let printed = QuickStart::parse(&service.stdout());
        Self { service, printed }
    }

    /// SIGTERM; the run must end with exit 0.
    pub async fn stop(self) -> Run {
        self.service.stop(PROCESS_TIMEOUT).await
    }
}

/// A record's state as the read model holds it: (version, status, name).
pub type RowState = (i64, String, Option<String>);

/// The demo's records once every event is projected, per entity: id → state.
pub fn final_states(entity: EntityKind) -> BTreeMap<Uuid, RowState> {
    let mut latest: BTreeMap<Uuid, &DemoEvent> = BTreeMap::new();
    let events = demo_events(DEMO_WORKSPACE);
    for event in events.iter().filter(|event| event.event_type.entity == entity) {
        if latest.get(&event.entity_id).is_none_or(|held| held.version < event.version) {
            latest.insert(event.entity_id, event);
        }
    }
    latest.into_iter().map(|(id, event)| (id, state_after(event))).collect()
}

/// The row an event leaves behind when it is the record's highest version.
pub fn state_after(event: &DemoEvent) -> RowState {
    let status = match event.event_type.change {
        ChangeKind::Archived => "archived",
        ChangeKind::Deleted => "deleted",
        _ => "active",
    };
    let body: Value = serde_json::from_str(&event.json).expect("demo event JSON");
    let name = body["data"]["name"].as_str().map(str::to_owned);
    (event.version, status.to_owned(), name)
}

/// Ids of the demo records of `entity` that end `active`.
pub fn active_ids(entity: EntityKind) -> Vec<Uuid> {
    final_states(entity).into_iter().filter(|(_, (_, status, _))| status == "active").map(|(id, _)| id).collect()
}

/// Ids of the demo records of `entity` that end archived or deleted.
pub fn inactive_ids(entity: EntityKind) -> Vec<Uuid> {
    final_states(entity).into_iter().filter(|(_, (_, status, _))| status != "active").map(|(id, _)| id).collect()
}

/// Every row of the demo workspace in `table`: id → (version, status, name).
pub async fn stored_states(pool: &PgPool, table: &str) -> BTreeMap<Uuid, RowState> {
    let rows: Vec<(Uuid, i64, String, Option<String>)> =
        sqlx::query_as(&format!("select id, version, status, name from {table} where workspace_id = $1"))
            .bind(DEMO_WORKSPACE)
            .fetch_all(pool)
            .await
            .expect("read the read model");
    rows.into_iter().map(|(id, version, status, name)| (id, (version, status, name))).collect()
}

pub async fn dead_letters(pool: &PgPool) -> i64 {
    sqlx::query_scalar("select count(*) from dead_letters").fetch_one(pool).await.expect("count dead letters")
}

/// The CHANGES stream's message count and last sequence, and the projector consumer's
/// acknowledged floor and pending count.
pub async fn stream_state(nats_url: &str) -> (u64, u64, u64, u64) {
    let client = async_nats::connect(nats_url).await.expect("connect to the test nats-server");
    let mut stream = jetstream::new(client).get_stream(lectern_projector::stream::STREAM).await.expect("CHANGES");
    let state = stream.info().await.expect("stream info").state.clone();
    let consumer = stream.consumer_info(lectern_projector::stream::CONSUMER).await.expect("consumer info").clone();
    (state.messages, state.last_sequence, consumer.ack_floor.stream_sequence, consumer.num_pending)
}

/// Follows the cursors of `path` with `key`; every record served.
pub async fn served(app: &TestApp, key: &str, path: &str) -> Vec<Value> {
    app.traverse(key, path).await.iter().flat_map(|page| page["data"].as_array().cloned().unwrap_or_default()).collect()
}

/// The ids of `records`.
pub fn ids(records: &[Value]) -> Vec<Uuid> {
    let mut ids: Vec<Uuid> =
        records.iter().map(|record| record["id"].as_str().and_then(|id| id.parse().ok()).expect("an id")).collect();
    ids.sort_unstable();
    ids
}
