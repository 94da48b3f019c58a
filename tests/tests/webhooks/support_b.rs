//! What the coalescing, process and agreement tests share: real `serve` processes, writes
//! of contacts and items as the projector makes them, an integration's copy of a feed
//! pulled over HTTP from any API, and what the delivery log says a delivery announced.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use lectern_read_model::{items, Commit};
use lectern_schema::events::ItemType;
use lectern_schema::item::ItemData;
use lectern_tests::app::{urlencode, Reply};
use lectern_tests::binaries::lectern_api;
use lectern_tests::process::Service;
use lectern_tests::seed::{base_time, seed_key, ContactSeed, TEST_PEPPER};
use lectern_tests::webhooks::Delivery;
use serde_json::Value;
use sqlx::PgPool;
use uuid::Uuid;

/// How long a `serve` process may take to start or stop.
pub const PROCESS_TIMEOUT: Duration = Duration::from_secs(60);

/// A `lectern-api serve` process delivering webhooks to loopback receivers.
pub struct Serve {
    pub service: Service,
    /// `http://host:port` of its public listener.
    pub base: String,
}

impl Serve {
    /// Starts `serve` on `database_url` with the tests' pepper, private targets allowed,
    /// a lease of `lease_ms` and `extra` settings; returns once it listens.
    pub async fn start(database_url: &str, lease_ms: u64, extra: &[(&str, &str)]) -> Self {
        let lease = lease_ms.to_string();
        let mut env = vec![
            ("DATABASE_URL", database_url),
            ("LECTERN_LISTEN", "127.0.0.1:0"),
            ("LECTERN_METRICS_LISTEN", "127.0.0.1:0"),
            ("LECTERN_KEY_PEPPER", TEST_PEPPER),
            ("LECTERN_WEBHOOKS_ALLOW_PRIVATE_TARGETS", "1"),
            ("LECTERN_WEBHOOK_LEASE_MS", &lease),
        ];
        env.extend_from_slice(extra);
        let mut service = Service::spawn(&lectern_api(), &["serve"], &env);
        let listening = service
            .wait_for_log(PROCESS_TIMEOUT, |record| record["fields"]["message"] == "lectern-api listening")
            .await;
        let address =
            listening["fields"]["address"].as_str().unwrap_or_else(|| panic!("no address in {listening}")).to_owned();
        Self { service, base: format!("http://{address}") }
    }

    /// SIGKILL: no shutdown, no lease given back.
    pub async fn kill(self) {
        let pid = self.service.pid().to_string();
        let killed = std::process::Command::new("kill").args(["-9", &pid]).status().expect("run kill");
        assert!(killed.success(), "kill -9 {pid} failed");
        let ended = self.service.wait(PROCESS_TIMEOUT).await;
        assert_eq!(ended.code, None, "serve was not killed by the signal");
    }
}

/// Writes `count` new contacts to `workspace`, `per_transaction` to a transaction (the
/// projector commits a batch as one); returns their ids.
pub async fn write_contacts(
    pool: &PgPool,
    workspace: Uuid,
    prefix: &str,
    count: usize,
    per_transaction: usize,
) -> Vec<Uuid> {
    let mut ids = Vec::with_capacity(count);
    for chunk in (0..count).collect::<Vec<_>>().chunks(per_transaction.max(1)) {
        let mut transaction = pool.begin().await.expect("begin a write");
        for index in chunk {
            let seed = ContactSeed::named(&format!("{prefix} {index:04}"));
            ids.push(seed.write_in(&mut transaction, workspace).await);
        }
        transaction.commit().await.expect("commit a write");
    }
    ids
}

/// One contact written (or written again, a newer version, when `id` exists) in its own
/// transaction.
pub async fn write_contact(pool: &PgPool, workspace: Uuid, id: Uuid, name: &str) {
    let mut seed = ContactSeed::named(name);
    seed.id = id;
    seed.insert(pool, workspace).await;
}

/// An active service item, committed on its own; returns its id.
pub async fn write_item(pool: &PgPool, workspace: Uuid, name: &str) -> Uuid {
    let id = Uuid::new_v4();
    let data = ItemData::new(name.to_owned(), ItemType::Service, base_time().into());
    let mut batch = items::Batch::default();
    batch.push(seed_key(workspace, id, "active"), Some(&data));
    let mut connection = pool.acquire().await.expect("a connection to write with");
    batch.write(&mut connection, Commit::WithTheTransaction).await.expect("write an item");
    id
}

/// The newest feed position of `resource` (`contacts` or `items`) in `workspace`.
pub async fn newest_position(pool: &PgPool, resource: &str, workspace: Uuid) -> i64 {
    sqlx::query_scalar(&format!("select coalesce(max(change_xid), 0) from {resource} where workspace_id = $1"))
        .bind(workspace)
        .fetch_one(pool)
        .await
        .expect("read the feed's newest position")
}

/// The furthest feed position of `resource` that a delivery this receiver was sent and
/// answered 2xx announced, as the delivery log records it (0 when none).
pub async fn announced_to(pool: &PgPool, resource: &str, deliveries: &[Delivery]) -> i64 {
    let ids: Vec<String> = deliveries.iter().map(|delivery| delivery.id().to_owned()).collect();
    sqlx::query_scalar(
        "select coalesce(max(through), 0) from webhook_deliveries \
         where state = 'delivered' and resource = $1 and id = any($2)",
    )
    .bind(resource)
    .bind(&ids)
    .fetch_one(pool)
    .await
    .expect("read the delivery log")
}

/// Waits until a delivery the receiver got announced every change of `resource` in
/// `workspace` committed so far (every change is announced, however they coalesce), or
/// panics after `within`. Returns the deliveries then.
pub async fn wait_until_announced(
    receiver: &lectern_tests::webhooks::Receiver,
    pool: &PgPool,
    resource: &str,
    workspace: Uuid,
    within: Duration,
) -> Vec<Delivery> {
    let newest = newest_position(pool, resource, workspace).await;
    let deadline = Instant::now() + within;
    loop {
        let deliveries = receiver.deliveries();
        let announced = announced_to(pool, resource, &deliveries).await;
        if announced >= newest {
            return deliveries;
        }
        assert!(
            Instant::now() < deadline,
            "the {resource} of workspace {workspace} up to position {newest} were not announced within {within:?} \
             (announced through {announced}); deliveries: {deliveries:#?}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Deliveries whose body names `workspace` and `resource`.
pub fn of(deliveries: &[Delivery], workspace: Uuid, resource: &str) -> Vec<Delivery> {
    deliveries
        .iter()
        .filter(|delivery| {
            let body = delivery.json();
            body["data"]["workspaceId"] == workspace.to_string() && body["data"]["resource"] == resource
        })
        .cloned()
        .collect()
}

/// An integration's copy of one feed, pulled over HTTP from any API (in process or a
/// `serve`): the records it holds by id, and its token.
pub struct FeedCopy {
    pub resource: &'static str,
    pub key: String,
    pub token: Option<String>,
    pub held: BTreeMap<String, Value>,
    http: reqwest::Client,
}

impl FeedCopy {
    pub fn new(resource: &'static str, key: &str) -> Self {
        Self { resource, key: key.to_owned(), token: None, held: BTreeMap::new(), http: reqwest::Client::new() }
    }

    async fn get(&self, base: &str, path: &str) -> Reply {
        let response = self
            .http
            .get(format!("{base}{path}"))
            .header("X-API-Key", &self.key)
            .send()
            .await
            .expect("the request reaches the API");
        let reply = Reply::read(response).await;
        reply.assert_ok();
        reply
    }

    /// Pulls the feed from its token until it has no more, applying each entry.
    pub async fn pull(&mut self, base: &str) {
        loop {
            let path = match &self.token {
                Some(token) => format!("/v1/{}/changes?limit=100&since={}", self.resource, urlencode(token)),
                None => format!("/v1/{}/changes?limit=100", self.resource),
            };
            let reply = self.get(base, &path).await;
            for entry in reply.data() {
                let id = entry["id"].as_str().expect("an entry's id").to_owned();
                if entry["change"] == "upserted" {
                    self.held.insert(id, entry["record"].clone());
                } else {
                    self.held.remove(&id);
                }
            }
            self.token = reply.body["syncToken"].as_str().map(str::to_owned);
            if reply.body["hasMore"] != Value::Bool(true) {
                return;
            }
        }
    }

    /// The source: every active record of the listing, by id.
    pub async fn listing(&self, base: &str) -> BTreeMap<String, Value> {
        let mut records = BTreeMap::new();
        let mut path = format!("/v1/{}?limit=100", self.resource);
        loop {
            let reply = self.get(base, &path).await;
            for record in reply.data() {
                records.insert(record["id"].as_str().expect("a record's id").to_owned(), record.clone());
            }
            match reply.body["page"]["nextCursor"].as_str() {
                Some(cursor) => path = format!("/v1/{}?limit=100&cursor={}", self.resource, urlencode(cursor)),
                None => return records,
            }
        }
    }
}

/// The `q`-quantile of `samples` (sorted here), in milliseconds.
pub fn quantile_ms(samples: &mut [Duration], q: f64) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    samples.sort_unstable();
    let index = ((samples.len() as f64 - 1.0) * q).round() as usize;
    samples[index.min(samples.len() - 1)].as_secs_f64() * 1000.0
}
