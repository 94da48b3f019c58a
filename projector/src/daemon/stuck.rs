//! Batches that do not commit.
//!
//! A batch is in hand from its pull until its commit. One in hand longer than a bound
//! ([`DEFAULT_STUCK_AFTER`] unless configured) is *stuck*: PostgreSQL keeps failing it,
//! or a lock or an overloaded server holds it. Nothing of it is lost (its messages stay
//! unacknowledged, kept alive and retried), but nothing of it becomes visible either,
//! and the consumer's lag does not show it, since its messages count as delivered. So
//! stuck batches are counted by a gauge, named by readiness, and reported to
//! `lectern-projector status` through a JetStream key-value bucket ([`BUCKET`]): status
//! runs in a process of its own, and PostgreSQL may be the very thing failing.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, kv};
use chrono::{DateTime, Utc};
use futures_util::TryStreamExt;
use tokio_util::sync::CancellationToken;

use crate::error::ProjectorError;

/// How long a batch may be in hand before it counts as stuck, unless configured
/// otherwise: far above a batch's usual milliseconds and the seconds PostgreSQL takes to
/// restart, so that what is reported is a batch that will not commit by itself.
pub const DEFAULT_STUCK_AFTER: Duration = Duration::from_secs(30);

/// The key-value bucket where each projector process with stuck batches reports them.
pub const BUCKET: &str = "lectern-projector-stuck";

/// How often a process with stuck batches refreshes its report.
const REPORT_EVERY: Duration = Duration::from_secs(2);

/// How long a report outlives its last refresh, so that a killed process's report goes
/// away by itself.
const REPORT_LIFETIME: Duration = Duration::from_secs(30);

/// The batches this process has in hand, shared by the batch tasks, readiness, the
/// metrics and the reporter.
#[derive(Clone)]
pub struct Batches {
    shared: Arc<Shared>,
}

struct Shared {
    stuck_after: Duration,
    next_id: AtomicU64,
    in_hand: Mutex<BTreeMap<u64, Pulled>>,
}

/// One batch in hand.
struct Pulled {
    since: Instant,
    pulled_at: DateTime<Utc>,
    first_sequence: u64,
    messages: usize,
    last_error: Option<String>,
}

/// A stuck batch, as readiness and `status` show it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StuckBatch {
    pub pulled_at: DateTime<Utc>,
    /// The stream sequence of its first message, to find it in the stream.
    pub first_sequence: u64,
    pub messages: usize,
    /// Why its last attempt failed; none while its first attempt still runs (held by a
    /// lock, say).
    pub last_error: Option<String>,
}

/// One process's stuck batches, as the bucket holds them.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// Process id and host, so that operators can find the process.
    pub process: String,
    pub reported_at: DateTime<Utc>,
    pub stuck_after_seconds: u64,
    pub batches: Vec<StuckBatch>,
}

impl Default for Batches {
    fn default() -> Self {
        Self::new(DEFAULT_STUCK_AFTER)
    }
}

impl Batches {
    /// Batches in hand longer than `stuck_after` count as stuck.
    pub fn new(stuck_after: Duration) -> Self {
        let shared = Shared { stuck_after, next_id: AtomicU64::new(0), in_hand: Mutex::default() };
        Self { shared: Arc::new(shared) }
    }

    /// Watches a batch from now until the returned guard is dropped (at its commit).
    pub fn track(&self, first_sequence: u64, messages: usize) -> Tracked {
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let pulled =
            Pulled { since: Instant::now(), pulled_at: Utc::now(), first_sequence, messages, last_error: None };
        self.in_hand().insert(id, pulled);
        Tracked { batches: self.clone(), id }
    }

    fn in_hand(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Pulled>> {
        self.shared.in_hand.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The stuck batches, oldest first.
    pub fn stuck(&self) -> Vec<StuckBatch> {
        let mut stuck: Vec<(Instant, StuckBatch)> = self
            .in_hand()
            .values()
            .filter(|pulled| pulled.since.elapsed() > self.shared.stuck_after)
            .map(|pulled| {
                let batch = StuckBatch {
                    pulled_at: pulled.pulled_at,
                    first_sequence: pulled.first_sequence,
                    messages: pulled.messages,
                    last_error: pulled.last_error.clone(),
                };
                (pulled.since, batch)
            })
            .collect();
        stuck.sort_by_key(|(since, _)| *since);
        stuck.into_iter().map(|(_, batch)| batch).collect()
    }

    /// Readiness's line about stuck batches, if there are any.
    pub fn problem(&self) -> Option<String> {
        let stuck = self.stuck();
        let oldest = stuck.first()?;
        let why =
            oldest.last_error.as_deref().unwrap_or("its first attempt has not returned (a lock, or a slow server)");
        Some(format!(
            "{} batch(es) in hand for more than {} s without committing; the oldest, {} message(s) from stream \
             sequence {}, since {}: {why}",
            stuck.len(),
            self.shared.stuck_after.as_secs(),
            oldest.messages,
            oldest.first_sequence,
            oldest.pulled_at.to_rfc3339()
        ))
    }

    /// Messages of every batch in hand (pulled, not yet committed).
    pub fn messages_in_hand(&self) -> u64 {
        self.in_hand().values().map(|pulled| pulled.messages as u64).sum()
    }

    /// Sets the stuck-batches gauge; called before each scrape.
    pub fn record_gauge(&self) {
        crate::metrics::record_stuck_batches(self.stuck().len());
    }

    /// Keeps this process's report in [`BUCKET`] up to date while it has stuck batches,
    /// and removes it once it has none, or at `shutdown`.
    pub async fn report(self, jetstream: jetstream::Context, shutdown: CancellationToken) {
        let key = uuid::Uuid::new_v4().simple().to_string();
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        let process = format!("pid {} on {}", std::process::id(), host.trim());
        let mut reported = false;
        let mut failing = false;
        loop {
            tokio::select! {
                () = tokio::time::sleep(REPORT_EVERY) => {}
                () = shutdown.cancelled() => break,
            }
            let batches = self.stuck();
            if batches.is_empty() && !reported {
                continue;
            }
            let reporting = !batches.is_empty();
            let sent = if reporting {
                let stuck_after_seconds = self.shared.stuck_after.as_secs();
                let report = Report { process: process.clone(), reported_at: Utc::now(), stuck_after_seconds, batches };
                publish(&jetstream, &key, &report).await
            } else {
                withdraw(&jetstream, &key).await
            };
            match sent {
                Ok(()) => {
                    reported = reporting;
                    failing = false;
                }
                Err(error) if !failing => {
                    tracing::warn!(%error, "cannot report stuck batches to {BUCKET}; `status` will not show them");
                    failing = true;
                }
                Err(_) => {}
            }
        }
        if reported {
            // The batches end with the process; their messages go to another one.
            let _ = withdraw(&jetstream, &key).await;
        }
    }
}

async fn publish(jetstream: &jetstream::Context, key: &str, report: &Report) -> Result<(), ProjectorError> {
    let value = serde_json::to_vec(report).map_err(ProjectorError::Encoding)?;
    let store = ensure_bucket(jetstream).await?;
    store.put(key, value.into()).await.map(drop).map_err(ProjectorError::nats("reporting stuck batches"))
}

async fn withdraw(jetstream: &jetstream::Context, key: &str) -> Result<(), ProjectorError> {
    ensure_bucket(jetstream)
        .await?
        .delete(key)
        .await
        .map_err(ProjectorError::nats("withdrawing the stuck-batch report"))
}

/// Watches one batch until dropped.
pub struct Tracked {
    batches: Batches,
    id: u64,
}

impl Tracked {
    /// Notes why the batch's latest attempt failed, for readiness and `status`.
    pub fn failed(&self, error: &dyn std::fmt::Display) {
        if let Some(pulled) = self.batches.in_hand().get_mut(&self.id) {
            pulled.last_error = Some(error.to_string());
        }
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.batches.in_hand().remove(&self.id);
    }
}

/// The bucket, created if missing.
async fn ensure_bucket(jetstream: &jetstream::Context) -> Result<kv::Store, ProjectorError> {
    if let Ok(store) = jetstream.get_key_value(BUCKET).await {
        return Ok(store);
    }
    // The stream a key-value bucket is, as async-nats would make it: its
    // `create_key_value` first reads the account's details in a shape NATS 2.9 does not
    // send, and fails there.
    let config = jetstream::stream::Config {
        name: format!("KV_{BUCKET}"),
        subjects: vec![format!("$KV.{BUCKET}.>")],
        max_messages_per_subject: 1,
        max_age: REPORT_LIFETIME,
        // Reports are worth nothing after a restart of the server.
        storage: jetstream::stream::StorageType::Memory,
        allow_rollup: true,
        deny_delete: true,
        allow_direct: true,
        discard: jetstream::stream::DiscardPolicy::New,
        ..Default::default()
    };
    // Two processes creating it at once: the loser's create fails, and it finds the
    // winner's; the create's error is the one that explains a bucket still missing.
    let created = jetstream.create_stream(config).await.map(drop);
    jetstream.get_key_value(BUCKET).await.map_err(|missing| match created {
        Err(refused) => ProjectorError::nats("creating the stuck-batch bucket")(refused),
        Ok(()) => ProjectorError::nats("opening the stuck-batch bucket")(missing),
    })
}

/// A stuck batch and the process holding it, as `status` lists it.
#[derive(Clone, Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HeldBatch {
    pub process: String,
    #[serde(flatten)]
    pub batch: StuckBatch,
}

/// Every stuck batch the running projectors report, oldest first, for `status`.
pub async fn reported(jetstream: &jetstream::Context) -> Result<Vec<HeldBatch>, ProjectorError> {
    let store = ensure_bucket(jetstream).await?;
    let keys: Vec<String> = store
        .keys()
        .await
        .map_err(ProjectorError::nats("listing the stuck-batch reports"))?
        .try_collect()
        .await
        .map_err(ProjectorError::nats("receiving the stuck-batch reports' keys"))?;
    let mut held = Vec::new();
    for key in keys {
        let Some(value) = store.get(&key).await.map_err(ProjectorError::nats("reading a stuck-batch report"))? else {
            continue;
        };
        match serde_json::from_slice::<Report>(&value) {
            Ok(report) => held
                .extend(report.batches.into_iter().map(|batch| HeldBatch { process: report.process.clone(), batch })),
            Err(error) => tracing::warn!(%error, key, "skipping a stuck-batch report that does not parse"),
        }
    }
    held.sort_by_key(|held| held.batch.pulled_at);
    Ok(held)
}
