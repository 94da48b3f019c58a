//! Driving the projector: in-process (its real run loop), as a `lectern-projector run`
//! process, and publishing events.

use std::time::{Duration, Instant};

use async_nats::jetstream;
use async_nats::jetstream::context::PublishErrorKind;
use lectern_projector::daemon::consumer::{self, RunSettings};
use serde_json::{json, Value};
use sqlx::PgPool;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::binaries::Run;
use crate::process::{Launch, Metrics, Service, Starting};
use crate::Reply;

const CONSUMER_CREATED_WITHIN: Duration = Duration::from_secs(30);

/// The projector's real run loop in this process; stopped like SIGTERM stops it.
pub struct RunningProjector {
    shutdown: CancellationToken,
    task: JoinHandle<Result<(), lectern_projector::error::ProjectorError>>,
}

impl RunningProjector {
    pub async fn start(nats_url: &str, pool: PgPool) -> Self {
        Self::start_with(nats_url, pool, RunSettings::default()).await
    }

    pub async fn start_with(nats_url: &str, pool: PgPool, settings: RunSettings) -> Self {
        let client = lectern_projector::stream::connect(nats_url).await.expect("connect projector");
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(consumer::run(client, pool, settings, shutdown.clone()));
        Self { shutdown, task }
    }

    /// Starts the run loop and waits until it consumes (its stream and consumer exist),
    /// so what a test publishes next is certain to reach it.
    pub async fn start_consuming(nats_url: &str, pool: PgPool) -> Self {
        Self::start_consuming_with(nats_url, pool, RunSettings::default()).await
    }

    /// [`Self::start_consuming`] with settings of the test's choosing.
    pub async fn start_consuming_with(nats_url: &str, pool: PgPool, settings: RunSettings) -> Self {
        let projector = Self::start_with(nats_url, pool, settings).await;
        let client = lectern_projector::stream::connect_once(nats_url).await.expect("connect to the test nats-server");
        // Generous: with the whole suite starting nats-servers at once on two cores,
        // creating a file-backed stream once took longer than 10 s in CI.
        let consuming = eventually(CONSUMER_CREATED_WITHIN, || async {
            let Ok(stream) = jetstream::new(client.clone()).get_stream(lectern_projector::stream::STREAM).await else {
                return false;
            };
            stream.consumer_info(lectern_projector::stream::CONSUMER).await.is_ok()
        })
        .await;
        assert!(consuming, "the projector did not create its consumer within {CONSUMER_CREATED_WITHIN:?}");
        projector
    }

    /// Whether the run loop is still going: it has neither returned nor panicked.
    pub fn is_running(&self) -> bool {
        !self.task.is_finished()
    }

    /// Graceful stop: the batch in hand is finished, committed and acknowledged.
    pub async fn stop(self) {
        self.shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(30), self.task)
            .await
            .expect("projector stops within 30 s")
            .expect("projector task")
            .expect("projector run");
    }
}

/// How long a `lectern-projector run` process may take to start or to stop before the test
/// fails instead of hanging: a guard, not a speed check (a stop finishes the batches in
/// hand, which beside the whole suite on two cores once took over 30 s).
pub const PROJECTOR_WITHIN: Duration = Duration::from_secs(90);

/// How a [`ProjectorProcess`] is started: [`ProjectorProcess::on`], then settings, then
/// [`ProjectorOptions::spawn`] or [`ProjectorOptions::start`].
pub type ProjectorOptions = Starting<ProjectorProcess>;

impl ProjectorOptions {
    /// Starts the process and returns at once; it logs plain text.
    pub fn spawn(self) -> ProjectorProcess {
        ProjectorProcess { service: self.launch.spawn(), operations: None, http: operations_client() }
    }

    /// Starts the process with JSON logs and waits until its operations listener (health,
    /// readiness, metrics) is ready, at the address it logged.
    pub async fn start(self) -> ProjectorProcess {
        let mut service = self.launch.json_logs().spawn();
        let operations = service.logged_field(PROJECTOR_WITHIN, "operations listener ready", "metrics").await;
        ProjectorProcess { service, operations: Some(operations), http: operations_client() }
    }
}

fn operations_client() -> reqwest::Client {
    reqwest::Client::builder().timeout(Duration::from_secs(20)).build().expect("an HTTP client")
}

/// A running `lectern-projector run`.
pub struct ProjectorProcess {
    pub service: Service,
    /// `host:port` of its operations listener, once [`ProjectorOptions::start`] read it.
    operations: Option<String>,
    http: reqwest::Client,
}

/// `lectern-projector` against `nats_url` and `database_url`, its operations listener (for
/// the commands that have one) on a free loopback port: tests run in parallel, and the
/// default port would be fought over. Arguments follow.
pub fn projector_command(nats_url: &str, database_url: &str) -> Launch {
    Launch::projector().runner_path().envs(&[
        ("NATS_URL", nats_url),
        ("DATABASE_URL", database_url),
        ("LECTERN_PROJECTOR_METRICS_LISTEN", "127.0.0.1:0"),
    ])
}

impl ProjectorProcess {
    /// `run` as [`projector_command`] has it.
    pub fn on(nats_url: &str, database_url: &str) -> ProjectorOptions {
        ProjectorOptions::new(projector_command(nats_url, database_url).arg("run"))
    }

    /// What the process has logged so far.
    pub fn log(&self) -> String {
        self.service.stderr()
    }

    /// `host:port` of the operations listener.
    pub fn operations(&self) -> &str {
        self.operations.as_deref().expect("the operations address: start the projector with `start`")
    }

    /// `http://<operations address><path>`.
    pub fn operations_url(&self, path: &str) -> String {
        format!("http://{}{path}", self.operations())
    }

    /// GET `path` on the operations address; `None` while it does not answer.
    pub async fn try_get_operations(&self, path: &str) -> Option<Reply> {
        match self.http.get(self.operations_url(path)).send().await {
            Ok(response) => Some(Reply::read(response).await),
            Err(_) => None,
        }
    }

    /// GET `path` on the operations address, which must answer.
    pub async fn get_operations(&self, path: &str) -> Reply {
        self.try_get_operations(path)
            .await
            .unwrap_or_else(|| panic!("{} does not answer\n{}", self.operations_url(path), self.log()))
    }

    /// `/metrics` of the operations address, which must answer 200.
    pub async fn metrics(&self) -> Metrics {
        let reply = self.get_operations("/metrics").await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        Metrics::parse(&reply.text)
    }

    /// Waits until `/readyz` answers `status`; returns that answer.
    pub async fn wait_for_readiness(&self, status: u16) -> Reply {
        let reached = eventually(PROJECTOR_WITHIN, || async {
            self.try_get_operations("/readyz").await.is_some_and(|reply| reply.status == status)
        })
        .await;
        let last = self.try_get_operations("/readyz").await;
        assert!(reached, "/readyz never answered {status}; last answer {last:?}\nlog:\n{}", self.log());
        last.expect("/readyz answers")
    }

    /// SIGTERM, and exit 0: the batches in hand finished, committed and acknowledged.
    pub async fn stop(self) -> Run {
        self.service.stop(PROJECTOR_WITHIN).await
    }

    /// SIGKILL: no chance to finish, commit or acknowledge anything.
    pub async fn kill(self) {
        self.service.kill(PROJECTOR_WITHIN).await;
    }
}

/// Publishes `event` to the subject its envelope names, and waits for JetStream's ack.
pub async fn publish(client: &async_nats::Client, event: &Value) {
    publish_raw(client, &subject_of(event), event.to_string().into_bytes()).await;
}

/// The subject an upstream publishes `event` on: `changes.<workspace>.<resource>.<entity>`.
pub fn subject_of(event: &Value) -> String {
    format!(
        "changes.{}.{}.{}",
        event["workspaceId"].as_str().unwrap_or_default(),
        if event["type"].as_str().unwrap_or_default().starts_with("item.") { "items" } else { "contacts" },
        event["entityId"].as_str().unwrap_or_default()
    )
}

/// Publishes raw bytes to any subject (for contract violations), creating the stream if needed.
pub async fn publish_raw(client: &async_nats::Client, subject: &str, payload: Vec<u8>) {
    let jetstream = jetstream::new(client.clone());
    lectern_projector::stream::ensure_stream(&jetstream, lectern_projector::stream::DEFAULT_STREAM_REPLICAS)
        .await
        .expect("stream");
    // Just after a stream is created (by this call or a projector starting beside it), the
    // server may not yet route its subjects to it: the publish gets "no responders", which
    // async-nats reports as StreamNotFound, and nothing was stored. Publish again then.
    for attempt in 1.. {
        let acked = jetstream.publish(subject.to_owned(), payload.clone().into()).await.expect("publish").await;
        match acked {
            Ok(_) => return,
            Err(error) if error.kind() == PublishErrorKind::StreamNotFound && attempt < STREAM_ROUTED_ATTEMPTS => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(error) => panic!("publish ack on {subject}: {error}"),
        }
    }
}

/// Publishes a new stream may answer "no responders" to before it takes them.
const STREAM_ROUTED_ATTEMPTS: u32 = 50;

/// A contact event; `data` for created/updated/restored, none for archived/deleted.
pub fn contact_event(kind: &str, workspace: Uuid, id: Uuid, version: i64, name: &str) -> Value {
    let mut event = json!({
        "eventId": Uuid::new_v4(),
        "type": format!("contact.{kind}"),
        "workspaceId": workspace,
        "entityId": id,
        "version": version,
        "occurredAt": "2026-11-21T10:15:30.120Z",
    });
    if matches!(kind, "created" | "updated" | "restored") {
        event["data"] = json!({
            "name": name, "email": null, "phone": null, "address": null, "tin": null,
            "isCustomer": true, "isSupplier": false, "createdAt": "2025-02-03T08:00:00.000Z"
        });
    }
    event
}

/// An `item.created` event, version 1, carrying `data`.
pub fn item_created(workspace: Uuid, id: Uuid, data: Value) -> Value {
    json!({
        "eventId": Uuid::new_v4(),
        "type": "item.created",
        "workspaceId": workspace,
        "entityId": id,
        "version": 1,
        "occurredAt": "2026-11-21T10:15:30.120Z",
        "data": data,
    })
}

/// The `data` of an item event, complete, with the given prices.
pub fn item_data(name: &str, sale_price: Value, purchase_price: Value) -> Value {
    json!({
        "name": name, "sku": null, "description": null, "type": "product", "unit": null,
        "salePrice": sale_price, "purchasePrice": purchase_price,
        "createdAt": "2025-03-01T08:00:00.000Z",
    })
}

/// Polls `check` until it holds or `within` passes; returns whether it held.
pub async fn eventually<F, Fut>(within: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    loop {
        if check().await {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// (status, version, name) of one contact row, if any.
pub async fn contact_row(pool: &PgPool, workspace: Uuid, id: Uuid) -> Option<(String, i64, Option<String>)> {
    sqlx::query_as("select status, version, name from contacts where workspace_id = $1 and id = $2")
        .bind(workspace)
        .bind(id)
        .fetch_optional(pool)
        .await
        .expect("read contact row")
}
