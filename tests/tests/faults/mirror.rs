//! A client keeping a mirror of a workspace through the changes feed, as the contract tells
//! integrations to, and what the fault tests compare it with: the listing, the rows, the
//! stream's acknowledgements.

use std::collections::BTreeMap;
use std::time::Duration;

use async_nats::jetstream;
use lectern_tests::app::urlencode;
use lectern_tests::nats::TestNats;
use lectern_tests::postgres::TestPostgres;
use lectern_tests::projector::{contact_event, eventually, publish, RunningProjector};
use lectern_tests::TestApp;
use serde_json::Value;
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;
use uuid::Uuid;

/// How long the read model and a client following the feed may take to converge.
pub(crate) const CONVERGES_WITHIN: Duration = Duration::from_secs(60);

/// A client mirroring one resource of a workspace through its feed: upsert on `upserted`,
/// delete on `removed`, keep the token.
pub(crate) struct Mirror {
    /// `contacts` or `items`.
    resource: &'static str,
    pub(crate) token: Option<String>,
    pub(crate) records: BTreeMap<String, Value>,
}

impl Default for Mirror {
    fn default() -> Self {
        Self::of("contacts")
    }
}

impl Mirror {
    /// A client that has not synced `resource` yet: it starts from the beginning.
    pub(crate) fn of(resource: &'static str) -> Self {
        Self { resource, token: None, records: BTreeMap::new() }
    }

    /// The resource it mirrors.
    pub(crate) fn resource(&self) -> &'static str {
        self.resource
    }

    /// Follows the feed from its token until `hasMore` is false.
    pub(crate) async fn follow(&mut self, app: &TestApp, key: &str) {
        if let Err(reply) = self.try_follow(app, key).await {
            panic!("the feed answered {}: {}", reply.status, reply.text);
        }
    }

    /// [`Mirror::follow`], stopping at the first answer that is not a 200 (a 503 while the
    /// database moves), which it returns.
    pub(crate) async fn try_follow(&mut self, app: &TestApp, key: &str) -> Result<(), lectern_tests::Reply> {
        let feed = format!("/v1/{}/changes", self.resource);
        for _ in 0..1_000 {
            let query = match &self.token {
                Some(token) => format!("{feed}?limit=100&since={}", urlencode(token)),
                None => format!("{feed}?limit=100"),
            };
            let reply = app.get(key, &query).await;
            if reply.status != 200 {
                return Err(reply);
            }
            for entry in reply.data() {
                let id = entry["id"].as_str().expect("id").to_owned();
                match entry["change"].as_str() {
                    Some("upserted") => {
                        self.records.insert(id, entry["record"].clone());
                    }
                    _ => {
                        self.records.remove(&id);
                    }
                }
            }
            self.token = Some(reply.body["syncToken"].as_str().expect("syncToken").to_owned());
            if reply.body["hasMore"] == Value::Bool(false) {
                return Ok(());
            }
        }
        panic!("the feed never said hasMore: false");
    }

    /// Follows the feed until the mirror is the listing (a change reaches the feed a moment
    /// after its commit); whether it got there within [`CONVERGES_WITHIN`].
    pub(crate) async fn converges_to_the_listing(&mut self, app: &TestApp, key: &str) -> bool {
        let deadline = tokio::time::Instant::now() + CONVERGES_WITHIN;
        loop {
            self.follow(app, key).await;
            if self.records == listing_of(app, key, self.resource).await {
                return true;
            }
            if tokio::time::Instant::now() > deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// Every contact the listing serves, by id.
pub(crate) async fn listing(app: &TestApp, key: &str) -> BTreeMap<String, Value> {
    listing_of(app, key, "contacts").await
}

/// Every record of `resource` the listing serves, by id.
pub(crate) async fn listing_of(app: &TestApp, key: &str, resource: &str) -> BTreeMap<String, Value> {
    app.traverse(key, &format!("/v1/{resource}?limit=100"))
        .await
        .iter()
        .flat_map(|page| page["data"].as_array().cloned().unwrap_or_default())
        .map(|record| (record["id"].as_str().unwrap_or_default().to_owned(), record))
        .collect()
}

/// (version, name) of every contact row of `workspace`.
pub(crate) async fn rows(pool: &PgPool, workspace: Uuid) -> BTreeMap<Uuid, (i64, Option<String>)> {
    let rows: Vec<(Uuid, i64, Option<String>)> =
        sqlx::query_as("select id, version, name from contacts where workspace_id = $1")
            .bind(workspace)
            .fetch_all(pool)
            .await
            .unwrap_or_default();
    rows.into_iter().map(|(id, version, name)| (id, (version, name))).collect()
}

/// The contacts of `workspace` expected, each at (version, name).
pub(crate) type Expected = BTreeMap<Uuid, (i64, Option<String>)>;

/// Version `version` of each of `ids`, named as [`publish_versions`] names it.
pub(crate) fn expect_versions(expected: &mut Expected, ids: &[Uuid], version: i64) {
    for id in ids {
        expected.insert(*id, (version, Some(format!("{id} v{version}"))));
    }
}

/// Waits until every contact of `workspace` is at its expected version; the error lists
/// those that are not.
pub(crate) async fn reach(pool: &PgPool, workspace: Uuid, expected: &Expected) -> Result<(), String> {
    if eventually(CONVERGES_WITHIN, || async { rows(pool, workspace).await == *expected }).await {
        return Ok(());
    }
    let found = rows(pool, workspace).await;
    let behind: Vec<String> = expected
        .iter()
        .filter(|(id, want)| found.get(*id) != Some(*want))
        .map(|(id, want)| format!("{id}: {:?}, not {want:?}", found.get(id)))
        .collect();
    Err(format!("{} of {} records are not at their last published version: {behind:?}", behind.len(), expected.len()))
}

/// Publishes version `version` of each contact, named after the version.
pub(crate) async fn publish_versions(client: &async_nats::Client, workspace: Uuid, ids: &[Uuid], version: i64) {
    let kind = if version == 1 { "created" } else { "updated" };
    for id in ids {
        publish(client, &contact_event(kind, workspace, *id, version, &format!("{id} v{version}"))).await;
    }
}

/// Waits until JetStream has every message of the stream acknowledged by the projectors.
pub(crate) async fn all_acknowledged(client: &async_nats::Client) {
    let context = jetstream::new(client.clone());
    let acknowledged = eventually(CONVERGES_WITHIN, || async {
        let Ok(mut stream) = context.get_stream(lectern_projector::stream::STREAM).await else { return false };
        let Ok(info) = stream.info().await else { return false };
        let last = info.state.last_sequence;
        let Ok(consumer) = stream.consumer_info(lectern_projector::stream::CONSUMER).await else { return false };
        consumer.ack_floor.stream_sequence == last && consumer.num_ack_pending == 0
    })
    .await;
    assert!(acknowledged, "the projector did not acknowledge every message within {CONVERGES_WITHIN:?}");
}

/// The services on a private primary, as the fault tests start them: the schema migrated, a
/// private nats-server, the projector consuming, the API, one workspace and its key.
pub(crate) struct Stack {
    pub(crate) nats: TestNats,
    pub(crate) client: async_nats::Client,
    pub(crate) pool: PgPool,
    pub(crate) projector: RunningProjector,
    pub(crate) app: TestApp,
    pub(crate) workspace: Uuid,
    pub(crate) key: String,
}

impl Stack {
    /// Everything on `server`, with a `contacts:read` key.
    pub(crate) async fn on(server: &TestPostgres) -> Self {
        lectern_api::reads::create_and_migrate(&server.url()).await.expect("migrate the primary");
        Self::at(&server.url()).await
    }

    /// Everything on the migrated database at `url` (a forwarder's, standing for a stable
    /// address), with a `contacts:read` key.
    pub(crate) async fn at(url: &str) -> Self {
        let nats = TestNats::start().await;
        let client = nats.client().await;
        let pool = pool(url).await;
        let projector = RunningProjector::start_consuming(&nats.url, pool.clone()).await;
        let app = TestApp::spawn(pool.clone()).await;
        let (workspace, key) = app.workspace_with_key().await;
        Self { nats, client, pool, projector, app, workspace, key }
    }
}

pub(crate) async fn pool(url: &str) -> PgPool {
    PgPoolOptions::new().max_connections(8).connect(url).await.expect("connect")
}

/// Waits until `standby` has replayed everything `primary` wrote so far.
pub(crate) async fn replayed(primary: &TestPostgres, standby: &TestPostgres) {
    let written = wal_position(&primary.current_lsn().await);
    let caught_up =
        eventually(CONVERGES_WITHIN, || async { wal_position(&standby.replay_lsn().await) >= written }).await;
    assert!(caught_up, "the standby on port {} did not replay the primary's writes", standby.port);
}

/// An LSN as PostgreSQL prints it (`0/3016060`), as a number.
pub(crate) fn wal_position(lsn: &str) -> u64 {
    let (high, low) = lsn.split_once('/').expect("an LSN is two hex numbers");
    (u64::from_str_radix(high, 16).expect("hex") << 32) | u64::from_str_radix(low, 16).expect("hex")
}
