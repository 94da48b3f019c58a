//! Driving the projector: in-process (its real run loop) and publishing events.

use std::time::{Duration, Instant};

use async_nats::jetstream;
use async_nats::jetstream::context::PublishErrorKind;
use lectern_projector::daemon::consumer::{self, RunSettings};
use serde_json::{json, Value};
use sqlx::PgPool;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

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

/// Publishes `event` to the subject its envelope names, and waits for JetStream's ack.
pub async fn publish(client: &async_nats::Client, event: &Value) {
    let subject = format!(
        "changes.{}.{}.{}",
        event["workspaceId"].as_str().unwrap_or_default(),
        if event["type"].as_str().unwrap_or_default().starts_with("item.") { "items" } else { "contacts" },
        event["entityId"].as_str().unwrap_or_default()
    );
    publish_raw(client, &subject, event.to_string().into_bytes()).await;
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
