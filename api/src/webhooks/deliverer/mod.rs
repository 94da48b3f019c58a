//! Deliveries in `serve`. Every process runs a [`Deliverer`]; each endpoint is delivered
//! for by one process at a time, the one holding its lease in `webhook_endpoints`
//! (renewed every third of the lease, on a connection of its own; a process killed
//! mid-delivery loses it when it lapses, and another takes over). Each process holds its
//! share of the endpoints ([`store::hold_share`]), and its looks take the connections in
//! turns, round-robin by workspace ([`turns`]), so that no workspace's wave of looks holds
//! back another's. The holder runs one task per endpoint, woken by the
//! change listener when the endpoint's workspace is written (and all at once when the
//! listener was down, since notifications may have been missed), and at least every
//! [`IDLE_SWEEP`] besides, or every [`SWEEP_EVERY`] while the listener is down.
//!
//! Coalescing: an endpoint has at most one pending delivery per resource. Each look
//! compares the feed's newest transaction below the feed's bound (what a receiver pulling
//! now would see) with the newest one a delivery answered 2xx announced; when the feed is
//! ahead, the pending delivery is created or raised to it. So a receiver is told again
//! about every change it was not told about, and thousands of changes during one attempt
//! or one back-off make one delivery, not thousands.
//!
//! At least once: a delivery leaves the pending state only when the receiver answered
//! 2xx (and the lease was still held), so a delivery in flight when its process dies is
//! sent again by the next holder, with the same `webhook-id`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use chrono::Utc;
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::attempt;
use super::secret::{SealError, SigningSecret};
use super::store::{self, ClaimedEndpoint, FailingEndpoint, HeldEndpoint};
use super::{Resource, WebhookSettings};
use crate::feed::bound::FeedBound;
use crate::feed::query;
use crate::keys::Peppers;
use crate::metric_names::{WEBHOOK_ENDPOINTS_CANNOT_SIGN, WEBHOOK_ENDPOINTS_FAILING};
use crate::reads::change::{Change, Channel, Follower};
use crate::reads::freshness::Trust;

mod outcome;
mod pepper;
mod turns;

/// The longest an endpoint goes unlooked at while the change listener is down.
pub const SWEEP_EVERY: Duration = Duration::from_secs(5);
/// The longest an endpoint goes unlooked at while the listener is up: a write wakes its
/// endpoints at once, so this only bounds what a lost notification could delay.
pub const IDLE_SWEEP: Duration = Duration::from_secs(60);
/// Delivered and failed deliveries are kept this long for `webhooks deliveries`.
const LOG_KEPT_FOR: Duration = Duration::from_secs(30 * 24 * 3600);
/// How often the delivery log is pruned (by whichever processes run).
const PRUNE_EVERY: Duration = Duration::from_secs(3600);
/// Looks again this soon when a notified change is not yet below the feed's bound (an
/// older writer still runs), doubling up to [`SWEEP_EVERY`].
const HELD_RECHECK: Duration = Duration::from_millis(20);
/// The deliverer's own connections.
const CONNECTIONS: u32 = 4;
/// How its sessions are named in `pg_stat_activity`.
pub const APPLICATION: &str = "lectern-api-webhooks";
/// Most due deliveries one look sends (one per resource is the most there can be).
const DUE_PER_LOOK: i64 = 4;
/// Most endpoints disabled by failures that readiness names (all are counted).
const FAILING_SHOWN: i64 = 20;

/// One endpoint this process delivers for.
struct Worker {
    workspace_id: Uuid,
    wake: Arc<Wake>,
    task: JoinHandle<()>,
}

/// What wakes a worker: a change of its workspace, and the newest notified transaction
/// of each resource, which the feed must show before the look counts as done.
#[derive(Default)]
struct Wake {
    notify: Notify,
    notified: [AtomicI64; 2],
}

/// Webhook deliveries of one process.
pub struct Deliverer {
    /// The looks' and attempts' connections, used only with a [`turns::Turn`].
    pool: PgPool,
    turns: Arc<turns::Turns>,
    /// The lease connection: claims and renewals never wait behind looks, and its name
    /// counts this process among those delivering ([`store::hold_share`]).
    leases: PgPool,
    peppers: Peppers,
    settings: WebhookSettings,
    bound: Arc<FeedBound>,
    client: Option<reqwest::Client>,
    /// This process's name in the leases.
    owner: Uuid,
    workers: Mutex<HashMap<Uuid, Worker>>,
    /// Endpoints disabled after their deliveries failed for too long, and enabled ones it
    /// cannot sign for, for readiness.
    failing: Mutex<Vec<String>>,
    trust: Trust,
}

/// Why a look failed (it is tried again after [`SWEEP_EVERY`]).
#[derive(Debug, thiserror::Error)]
enum LookError {
    #[error("reading or writing the endpoint's deliveries")]
    Database(#[from] sqlx::Error),
    #[error(transparent)]
    Secret(#[from] SealError),
}

impl Deliverer {
    /// A deliverer beside the API on `pool`'s server, with connections of its own: a burst
    /// of looks (a write in every workspace at once) queues on them, never on the
    /// connections that key checks and retrieves use.
    pub fn new(pool: &PgPool, peppers: Peppers, settings: WebhookSettings, bound: Arc<FeedBound>) -> Self {
        let owner = Uuid::new_v4();
        let options = (*pool.connect_options()).clone().application_name(APPLICATION);
        let looks = PgPoolOptions::new()
            .max_connections(CONNECTIONS)
            .acquire_timeout(Duration::from_secs(10))
            .connect_lazy_with(options);
        let name = format!("{} {}", store::LEASES_APPLICATION, owner.simple());
        let leases = PgPoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            .acquire_timeout(Duration::from_secs(10))
            .connect_lazy_with((*pool.connect_options()).clone().application_name(&name));
        // Alerting rules need the series before the first count.
        metrics::gauge!(WEBHOOK_ENDPOINTS_FAILING).set(0.0);
        metrics::gauge!(WEBHOOK_ENDPOINTS_CANNOT_SIGN).set(0.0);
        let client = match attempt::client(settings.policy, settings.timeout) {
            Ok(client) => Some(client),
            Err(error) => {
                tracing::error!(error = %lectern_runtime::with_causes(&error), "no HTTP client for webhook deliveries; none will be made");
                None
            }
        };
        Self {
            pool: looks,
            turns: turns::Turns::new(CONNECTIONS as usize),
            leases,
            peppers,
            settings,
            bound,
            client,
            owner,
            workers: Mutex::default(),
            failing: Mutex::default(),
            trust: Trust::default(),
        }
    }

    /// What readiness reports: endpoints disabled after their deliveries kept failing, and
    /// endpoints whose secrets this process cannot open.
    pub fn problems(&self) -> Vec<String> {
        self.failing.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Claims endpoints and delivers for them until `stopping`; then gives up its leases so
    /// that another process takes over at once.
    pub async fn run(self: Arc<Self>, stopping: CancellationToken) {
        let mut ticker = tokio::time::interval(self.settings.lease / 3);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut pruned = Instant::now();
        loop {
            tokio::select! {
                () = stopping.cancelled() => break,
                _ = ticker.tick() => {}
            }
            match self.claim().await {
                Ok(held) => {
                    self.keep_workers(held);
                    // What the command line made due (`redeliver`) wakes nobody else.
                    if let Err(error) = self.wake_due().await {
                        tracing::debug!(error = %crate::error::chain(&error), "looking for due webhook deliveries failed");
                    }
                }
                Err(error) => {
                    tracing::warn!(error = %crate::error::chain(&error), "claiming webhook endpoints failed; trying again");
                }
            }
            if let Err(error) = self.count_failing().await {
                tracing::debug!(error = %crate::error::chain(&error), "counting failing webhook endpoints failed");
            }
            if pruned.elapsed() >= PRUNE_EVERY {
                pruned = Instant::now();
                if let Err(error) = store::prune_delivery_log(&self.leases, LOG_KEPT_FOR).await {
                    tracing::debug!(error = %crate::error::chain(&error), "pruning the webhook delivery log failed");
                }
            }
        }
        self.keep_workers(Vec::new());
        if let Err(error) = store::release_leases(&self.leases, self.owner).await {
            tracing::warn!(error = %crate::error::chain(&error), "releasing webhook leases failed; another process takes over when they lapse");
        }
    }

    /// Renews this process's leases and holds its share of the endpoints.
    async fn claim(&self) -> Result<Vec<ClaimedEndpoint>, sqlx::Error> {
        store::hold_share(&self.leases, self.owner, self.settings.lease).await
    }

    /// Starts a worker for each endpoint newly held and stops those of endpoints no
    /// longer held (disabled, deleted, or taken over after a lapse).
    fn keep_workers(self: &Arc<Self>, held: Vec<ClaimedEndpoint>) {
        let mut workers = self.workers.lock().unwrap_or_else(PoisonError::into_inner);
        let held: HashMap<Uuid, Uuid> = held.into_iter().map(|endpoint| (endpoint.id, endpoint.workspace_id)).collect();
        workers.retain(|endpoint, worker| {
            let keep = held.contains_key(endpoint);
            if !keep {
                worker.task.abort();
            }
            keep
        });
        for (endpoint, workspace_id) in held {
            // A worker that found its endpoint disabled or taken over has ended; one held
            // again (enabled, or its lease back) gets a new one, which looks at once.
            if workers.get(&endpoint).is_some_and(|worker| worker.task.is_finished()) {
                workers.remove(&endpoint);
            }
            workers.entry(endpoint).or_insert_with(|| {
                let wake = Arc::new(Wake::default());
                let task = tokio::spawn(self.clone().deliver_for(endpoint, workspace_id, wake.clone()));
                Worker { workspace_id, wake, task }
            });
        }
    }

    /// Wakes the workers of this process's endpoints that have a delivery due.
    async fn wake_due(&self) -> Result<(), sqlx::Error> {
        let due = store::endpoints_with_due_deliveries(&self.leases, self.owner).await?;
        let workers = self.workers.lock().unwrap_or_else(PoisonError::into_inner);
        for endpoint in due {
            if let Some(worker) = workers.get(&endpoint) {
                worker.wake.notify.notify_one();
            }
        }
        Ok(())
    }

    async fn count_failing(&self) -> Result<(), sqlx::Error> {
        let failing = store::endpoints_disabled_by_failures(&self.leases, FAILING_SHOWN).await?;
        let count = store::count_endpoints_disabled_by_failures(&self.leases).await?;
        metrics::gauge!(WEBHOOK_ENDPOINTS_FAILING).set(count as f64);
        let problems = failing
            .into_iter()
            .map(|FailingEndpoint { id, workspace_id, disabled_reason }| {
                format!(
                    "webhook endpoint {id} (workspace {workspace_id}) was disabled: {}; fix the receiver, then run \
                     `lectern-api webhooks enable {id}`",
                    disabled_reason.unwrap_or_default()
                )
            })
            .chain(self.endpoints_that_cannot_sign().await?)
            .collect();
        *self.failing.lock().unwrap_or_else(PoisonError::into_inner) = problems;
        Ok(())
    }

    /// One endpoint's worker: looks, then sleeps until woken, a retry is due, or the sweep;
    /// ends when its endpoint is no longer enabled and this process's.
    async fn deliver_for(self: Arc<Self>, endpoint: Uuid, workspace_id: Uuid, wake: Arc<Wake>) {
        let mut held_recheck = HELD_RECHECK;
        loop {
            let woken = wake.notify.notified();
            let wait = match self.look(endpoint, workspace_id, &wake).await {
                Ok(Look { gone: true, .. }) => return,
                Ok(Look { next_due, behind_notified, .. }) => {
                    let sweep = if self.trust.get() { IDLE_SWEEP } else { SWEEP_EVERY };
                    let mut wait = next_due.unwrap_or(sweep).min(sweep);
                    if behind_notified {
                        wait = wait.min(held_recheck);
                        held_recheck = (held_recheck * 2).min(SWEEP_EVERY);
                    } else {
                        held_recheck = HELD_RECHECK;
                    }
                    wait
                }
                Err(error) => {
                    tracing::warn!(%endpoint, error = %crate::error::chain(&error), "a webhook look failed; trying again");
                    SWEEP_EVERY
                }
            };
            tokio::select! {
                () = woken => {}
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// Creates or raises the endpoint's pending deliveries to what its feeds show, and
    /// sends those that are due.
    async fn look(&self, endpoint_id: Uuid, workspace_id: Uuid, wake: &Wake) -> Result<Look, LookError> {
        let notified: Vec<i64> = wake.notified.iter().map(|position| position.load(Ordering::Acquire)).collect();
        // The database work in a turn of the workspace's; the attempts, which wait on the
        // receiver, outside it.
        let turn = self.turns.take(workspace_id).await;
        let endpoint = store::held_endpoint(&self.pool, endpoint_id, self.owner).await?;
        // Disabled, deleted or taken over: this worker ends; the claimer starts another if
        // the endpoint is this process's again.
        let Some(mut endpoint) = endpoint else {
            return Ok(Look { next_due: None, behind_notified: false, gone: true });
        };
        self.follow_the_pepper(endpoint_id, &mut endpoint).await?;
        let bound = self.bound.sampled_since(&self.pool, Instant::now()).await?;
        let mut behind_notified = false;
        for resource in endpoint.resources.iter().filter_map(|name| Resource::named(name)) {
            let head = query::newest_below(&self.pool, resource.as_str(), workspace_id, bound.position).await?;
            behind_notified |= notified[resource as usize] > head;
            store::raise_pending_delivery(&self.pool, endpoint_id, resource, head).await?;
        }
        let due = store::due_deliveries(&self.pool, endpoint_id, DUE_PER_LOOK).await?;
        drop(turn);
        if !due.is_empty() {
            let secrets = self.secrets(endpoint_id, &endpoint)?;
            for delivery in due {
                self.attempt(endpoint_id, workspace_id, &endpoint.url, &secrets, &delivery).await?;
            }
        }
        let _turn = self.turns.take(workspace_id).await;
        let next_due = store::next_due_in(&self.pool, endpoint_id).await?;
        Ok(Look { next_due, behind_notified, gone: false })
    }

    /// The secrets a delivery is signed with: the current one, and the one before the
    /// last rotation while its overlap lasts.
    fn secrets(&self, endpoint_id: Uuid, endpoint: &HeldEndpoint) -> Result<Vec<SigningSecret>, SealError> {
        let fingerprint = &endpoint.pepper_fingerprint;
        let mut secrets = vec![SigningSecret::open(&endpoint.secret_sealed, fingerprint, &self.peppers, endpoint_id)?];
        if let (Some(previous), Some(until)) = (&endpoint.previous_secret_sealed, endpoint.previous_secret_until) {
            if until > Utc::now() {
                secrets.push(SigningSecret::open(previous, fingerprint, &self.peppers, endpoint_id)?);
            }
        }
        Ok(secrets)
    }
}

/// What a look found.
struct Look {
    /// When the next pending delivery is due.
    next_due: Option<Duration>,
    /// A notified change is not below the feed's bound yet.
    behind_notified: bool,
    /// The endpoint is no longer enabled and held by this process.
    gone: bool,
}

impl Follower for Deliverer {
    fn channel(&self) -> Channel {
        Channel::ReadModel
    }

    fn changed(&self, change: &Change) {
        let workers = self.workers.lock().unwrap_or_else(PoisonError::into_inner);
        for worker in workers.values() {
            match change {
                Change::Rows { workspace_id, resource, position } if *workspace_id == worker.workspace_id => {
                    if let (Some(resource), Some(position)) = (Resource::named(resource), position) {
                        worker.wake.notified[resource as usize].fetch_max(*position, Ordering::AcqRel);
                    }
                    worker.wake.notify.notify_one();
                }
                Change::Rows { .. } => {}
                _ => worker.wake.notify.notify_one(),
            }
        }
    }

    fn forget_everything(&self) {
        let workers = self.workers.lock().unwrap_or_else(PoisonError::into_inner);
        for worker in workers.values() {
            worker.wake.notify.notify_one();
        }
    }

    /// Positions announced by another history are not this one's: kept, a position of the
    /// standby that served before would keep every look rechecking for a change the old
    /// primary, back, never had.
    fn new_history(&self) {
        let workers = self.workers.lock().unwrap_or_else(PoisonError::into_inner);
        for worker in workers.values() {
            for notified in &worker.wake.notified {
                notified.store(0, Ordering::Release);
            }
            worker.wake.notify.notify_one();
        }
    }

    fn trust(&self) -> &Trust {
        &self.trust
    }
}
