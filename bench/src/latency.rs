//! Publish→visible latency at a steady rate: `contact.updated` events (a new version of
//! distinct contacts, 2 after the load) published on a fixed schedule while a poller asks PostgreSQL,
//! every few milliseconds, which of the outstanding rows already show that version. An
//! event counts as visible at the start of the first poll that sees it (the poll's
//! snapshot was taken then), so the figure is an upper bound within one poll period.
//!
//! Each poll asks only about the oldest outstanding events (the projector applies in
//! stream order, so newer ones cannot be visible before them, batch boundaries aside):
//! asking about every outstanding row made the poll itself heavier the further the
//! projector fell behind, slowing the projector it measures.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sqlx::PgPool;
use uuid::Uuid;

use super::publish::Publisher;
use super::Result;
use lectern_fixtures::generator::plan::{Entity, Plan, Record};
use lectern_fixtures::generator::records::contact;
use lectern_fixtures::prng::Prng;

/// Published, not yet seen: by publishing order, the record and when it was published.
type Outstanding = Arc<Mutex<BTreeMap<u64, ((Uuid, Uuid), Instant)>>>;
/// Outstanding events asked about per poll: about half a second's worth at 2,000/s.
const WINDOW: usize = 1_000;
type Seen = Vec<(Instant, Duration)>;

pub struct Latency {
    /// (published, ms after the start; visible, ms after publishing) per event seen.
    pub samples: Vec<(f64, f64)>,
    pub sent: usize,
    pub seen: usize,
    pub rate: f64,
    pub p50: Duration,
    pub p99: Duration,
    pub max: Duration,
}

const TICK: Duration = Duration::from_millis(5);

/// Publishes `version` of distinct contacts (2 after the load; a later measurement of the
/// same run publishes a higher one, so every event is new) and polls `pool` for it.
pub async fn measure(
    plan: &Plan,
    nats_url: &str,
    pool: &PgPool,
    rate: u32,
    run_for: Duration,
    version: i64,
) -> Result<Latency> {
    let outstanding: Outstanding = Arc::default();
    let publishing_done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let poller = tokio::spawn(poll(pool.clone(), outstanding.clone(), publishing_done.clone(), version));
    let started = Instant::now();
    let mut order = 0_u64;
    let published = publish_updates(plan, nats_url, rate, run_for, version, |key| {
        order += 1;
        outstanding.lock().unwrap_or_else(|p| p.into_inner()).insert(order, (key, Instant::now()));
    })
    .await?;
    publishing_done.store(true, std::sync::atomic::Ordering::SeqCst);
    let seen = poller.await.map_err(|error| format!("the poller failed: {error}"))??;
    let samples = seen
        .iter()
        .map(|(published, latency)| {
            (published.saturating_duration_since(started).as_secs_f64() * 1e3, latency.as_secs_f64() * 1e3)
        })
        .collect();
    let mut latencies: Vec<Duration> = seen.into_iter().map(|(_, latency)| latency).collect();
    latencies.sort();
    let at = |quantile: f64| {
        latencies.get(((latencies.len() as f64 * quantile) as usize).min(latencies.len().saturating_sub(1))).copied()
    };
    Ok(Latency {
        samples,
        sent: published.sent,
        seen: latencies.len(),
        rate: published.rate(),
        p50: at(0.50).unwrap_or_default(),
        p99: at(0.99).unwrap_or_default(),
        max: latencies.last().copied().unwrap_or_default(),
    })
}

/// What [`publish_updates`] sent.
pub struct Published {
    pub sent: usize,
    pub elapsed: Duration,
}

impl Published {
    pub fn rate(&self) -> f64 {
        self.sent as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Publishes `contact.updated` events (`version` of distinct contacts) at `rate` for
/// `run_for`, every 5 ms a tick's worth, all acknowledged; `sending` hears each
/// (workspace, contact) just before it is sent.
pub async fn publish_updates(
    plan: &Plan,
    nats_url: &str,
    rate: u32,
    run_for: Duration,
    version: i64,
    mut sending: impl FnMut((Uuid, Uuid)),
) -> Result<Published> {
    let mut publisher = Publisher::connect(nats_url).await?;
    let targets = distinct_contacts(plan, (f64::from(rate) * run_for.as_secs_f64()) as usize);
    let per_tick = (f64::from(rate) * TICK.as_secs_f64()).round().max(1.0) as usize;
    let mut ticks = tokio::time::interval(TICK);
    let started = Instant::now();
    for chunk in targets.chunks(per_tick) {
        ticks.tick().await;
        for record in chunk {
            let mut updated = contact(plan, *record);
            updated.phone = Some(format!("+49 30 {}", 1_000_000 + record.index));
            let now = chrono::Utc::now().timestamp_millis();
            let event = updated.event(record.workspace, record.index, version, "updated", now);
            sending((updated.workspace_id, updated.id));
            publisher.send(event).await?;
        }
    }
    let elapsed = started.elapsed();
    publisher.flush().await?;
    Ok(Published { sent: targets.len(), elapsed })
}

/// `count` different contacts spread over all workspaces by size.
pub fn distinct_contacts(plan: &Plan, count: usize) -> Vec<Record> {
    let total = plan.contacts() as usize;
    let mut rng = Prng::new(&[0x1a7e, count as u64]);
    let mut chosen = HashSet::new();
    let mut records = Vec::with_capacity(count);
    while records.len() < count.min(total) {
        let mut global = rng.below(total) as u64;
        if !chosen.insert(global) {
            continue;
        }
        let workspace = plan
            .workspaces
            .iter()
            .find(|workspace| {
                let inside = global < u64::from(workspace.contacts);
                if !inside {
                    global -= u64::from(workspace.contacts);
                }
                inside
            })
            .map_or(0, |workspace| workspace.number);
        records.push(Record { workspace, entity: Entity::Contact, index: global as u32 });
    }
    records
}

/// Polls until publishing is over and every event was seen, or ten seconds more passed.
async fn poll(
    pool: PgPool,
    outstanding: Outstanding,
    done: Arc<std::sync::atomic::AtomicBool>,
    version: i64,
) -> Result<Seen> {
    let mut latencies: Seen = Vec::new();
    let mut deadline = None;
    loop {
        let oldest: HashMap<(Uuid, Uuid), (u64, Instant)> = outstanding
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .take(WINDOW)
            .map(|(order, (key, published))| (*key, (*order, *published)))
            .collect();
        if done.load(std::sync::atomic::Ordering::SeqCst) {
            let deadline = *deadline.get_or_insert_with(|| Instant::now() + Duration::from_secs(10));
            if oldest.is_empty() || Instant::now() > deadline {
                return Ok(latencies);
            }
        }
        if !oldest.is_empty() {
            let snapshot = Instant::now();
            let (workspaces, ids): (Vec<Uuid>, Vec<Uuid>) = oldest.keys().copied().unzip();
            let visible: Vec<(Uuid, Uuid)> = sqlx::query_as(
                "select workspace_id, id from contacts
                 where (workspace_id, id) in (select * from unnest($1::uuid[], $2::uuid[])) and version >= $3",
            )
            .bind(&workspaces)
            .bind(&ids)
            .bind(version)
            .fetch_all(&pool)
            .await?;
            let mut outstanding = outstanding.lock().unwrap_or_else(|p| p.into_inner());
            for key in visible {
                if let Some((order, published)) = oldest.get(&key) {
                    outstanding.remove(order);
                    latencies.push((*published, snapshot.saturating_duration_since(*published)));
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}
