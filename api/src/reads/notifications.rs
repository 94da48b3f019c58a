//! The one LISTEN connection, outside the request pool, that serves every cache of the
//! process: each notification is read once ([`super::change`]) and handed to the caches
//! that follow its channel.
//!
//! A notification can be missed while the connection is down, and a connection can die
//! without closing (a NAT or firewall forgetting it, a failover): it then carries
//! nothing, and nothing says so. So the listener proves it is alive: every
//! [`HEARTBEAT_EVERY`] it sends a notification to a channel of its own, through
//! PostgreSQL, from a second connection, and expects it back within
//! [`HEARTBEAT_DEADLINE`]. A cache is trusted only from the first heartbeat that came
//! back; when one does not, or the connection fails, every cache forgets everything at
//! once and is bypassed until a new connection has proved itself.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use sqlx::postgres::{PgListener, PgNotification, PgPoolOptions};
use sqlx::PgPool;
use tokio::sync::mpsc;

use super::change::{Change, Follower};
use super::history::ServerHistory;
use crate::metric_names::{LISTENER_FAILURES, LISTENER_UP};

/// How often the listener proves it is alive.
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(1);
/// How long a heartbeat may take to come back (or to be sent) before the connection
/// counts as dead.
pub const HEARTBEAT_DEADLINE: Duration = Duration::from_secs(2);
/// The longest a silently dead connection goes unnoticed, so the longest a revoked key
/// or a changed first page can still be served from a cache after a change that was
/// never notified: the next heartbeat leaves within a tick of the last one's return,
/// and its absence is seen at the first tick past its deadline.
pub const SILENT_FAILURE_NOTICED_WITHIN: Duration =
    Duration::from_secs(2 * HEARTBEAT_EVERY.as_secs() + HEARTBEAT_DEADLINE.as_secs());
/// How long connecting and subscribing may take before trying again.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How the listener's sessions are named in `pg_stat_activity`.
pub const LISTENER_APPLICATION: &str = "lectern-api-listener";
pub const HEARTBEAT_APPLICATION: &str = "lectern-api-heartbeat";

/// Whether the listener is up, for readiness and metrics.
#[derive(Debug)]
pub struct ListenerHealth {
    /// Since when and why it is down; `None` while it is up.
    down: Mutex<Option<(Instant, String)>>,
}

impl Default for ListenerHealth {
    fn default() -> Self {
        Self { down: Mutex::new(Some((Instant::now(), "not connected yet".to_owned()))) }
    }
}

impl ListenerHealth {
    /// What an operator should know while the listener is down.
    pub fn problem(&self) -> Option<String> {
        self.lock().as_ref().map(|(since, why)| {
            format!(
                "change listener down for {} s ({why}): API keys and first pages are read from the database",
                since.elapsed().as_secs()
            )
        })
    }

    fn up(&self) {
        *self.lock() = None;
        metrics::gauge!(LISTENER_UP).set(1.0);
    }

    fn down(&self, why: String) {
        let mut down = self.lock();
        let since = down.as_ref().map_or_else(Instant::now, |(since, _)| *since);
        *down = Some((since, why));
        metrics::gauge!(LISTENER_UP).set(0.0);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<(Instant, String)>> {
        // Single assignments: a poisoned lock still holds a consistent value.
        self.down.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Why a listening connection was given up.
#[derive(Debug, thiserror::Error)]
enum ListenerFailure {
    #[error("connecting and subscribing")]
    Connect(#[source] sqlx::Error),
    #[error("receiving notifications")]
    Receive(#[source] sqlx::Error),
    #[error("the connection was closed")]
    Closed,
    #[error("sending a heartbeat")]
    Heartbeat(#[source] sqlx::Error),
    #[error("{0} took longer than its deadline")]
    TimedOut(&'static str),
    #[error("a heartbeat did not come back within {HEARTBEAT_DEADLINE:?}")]
    HeartbeatMissed,
    #[error("asking the server for its history")]
    History(#[source] sqlx::Error),
}

impl ListenerFailure {
    /// The `reason` label of the failures metric.
    fn label(&self) -> &'static str {
        match self {
            Self::Connect(_) => "connect",
            Self::Receive(_) | Self::Closed => "disconnected",
            Self::Heartbeat(_) | Self::TimedOut(_) | Self::History(_) => "heartbeat_unsent",
            Self::HeartbeatMissed => "heartbeat_missed",
        }
    }
}

/// Follows every cache's channel until the process ends, reconnecting with backoff.
pub async fn follow(
    pool: PgPool,
    caches: Vec<Arc<dyn Follower>>,
    health: Arc<ListenerHealth>,
    history: Arc<ServerHistory>,
) {
    let mut backoff = Duration::from_millis(100);
    metrics::gauge!(LISTENER_UP).set(0.0);
    loop {
        let (failure, proved) = listen_until_failed(&pool, &caches, &health, &history).await;
        for cache in &caches {
            cache.reset(false);
        }
        health.down(failure.to_string());
        metrics::counter!(LISTENER_FAILURES, "reason" => failure.label()).increment(1);
        tracing::warn!(
            error = %lectern_runtime::with_causes(&failure),
            "change listener failed; keys and first pages are read from the database until it is back"
        );
        if proved {
            backoff = Duration::from_millis(100);
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

/// One listening connection, from connect to failure; also says whether it ever
/// proved itself alive.
async fn listen_until_failed(
    pool: &PgPool,
    caches: &[Arc<dyn Follower>],
    health: &ListenerHealth,
    history: &ServerHistory,
) -> (ListenerFailure, bool) {
    // Pools of one of their own: the listener holds its connection for good, and a
    // heartbeat must not queue behind a saturated request pool.
    let options = (*pool.connect_options()).clone();
    let own_pool = |application: &str| {
        PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(CONNECT_TIMEOUT)
            .connect_lazy_with(options.clone().application_name(application))
    };
    let (listening, beating) = (own_pool(LISTENER_APPLICATION), own_pool(HEARTBEAT_APPLICATION));
    let mut heartbeat = Heartbeat::new();
    let mut notifications = match subscribe(&listening, caches, &heartbeat.channel).await {
        Ok(notifications) => notifications,
        Err(failure) => return (failure, false),
    };
    let mut proved = false;
    let mut ticker = tokio::time::interval(HEARTBEAT_EVERY);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            received = notifications.receiver.recv() => {
                let notification = match received {
                    Some(Ok(notification)) => notification,
                    Some(Err(failure)) => return (failure, proved),
                    None => return (ListenerFailure::Closed, proved),
                };
                if notification.channel() != heartbeat.channel {
                    // Read once, whatever the number of caches that follow it.
                    let Some(change) = Change::parse(notification.channel(), notification.payload()) else {
                        continue;
                    };
                    for cache in caches.iter().filter(|cache| cache.channel().name() == notification.channel()) {
                        cache.changed(&change);
                    }
                } else if heartbeat.came_back(notification.payload()) && !proved {
                    // The history the listening connection's server is in, before anything is
                    // trusted: what was learnt of another is dropped first.
                    if let Err(failure) = look_at_history(&beating, history).await {
                        return (failure, proved);
                    }
                    // Anything cached before this point may have missed a notification.
                    for cache in caches {
                        cache.reset(true);
                    }
                    proved = true;
                    health.up();
                    tracing::debug!("listening for key and read-model changes");
                }
            }
            _ = ticker.tick() => {
                if let Err(failure) = heartbeat.beat(&beating).await {
                    return (failure, proved);
                }
            }
        }
    }
}

/// Tells `history` which history the listener's server is in, through the heartbeat's
/// connection (to the same server: a connection to another would not carry the heartbeat).
async fn look_at_history(beating: &PgPool, history: &ServerHistory) -> Result<(), ListenerFailure> {
    let look = async {
        let mut connection = beating.acquire().await?;
        history.look(&mut connection, "the change listener").await
    };
    tokio::time::timeout(HEARTBEAT_DEADLINE, look)
        .await
        .map_err(|_| ListenerFailure::TimedOut("asking the server for its history"))?
        .map_err(ListenerFailure::History)?;
    Ok(())
}

/// Notifications as they arrive, from a task that owns the listening connection
/// (aborted, and the connection dropped, with this).
struct Subscription {
    receiver: mpsc::UnboundedReceiver<Result<PgNotification, ListenerFailure>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn subscribe(
    listening: &PgPool,
    caches: &[Arc<dyn Follower>],
    heartbeat_channel: &str,
) -> Result<Subscription, ListenerFailure> {
    let connect = async {
        let mut listener = PgListener::connect_with(listening).await?;
        let mut channels: Vec<&str> = caches.iter().map(|cache| cache.channel().name()).collect();
        // Several caches may follow one channel; one LISTEN serves them all.
        channels.sort_unstable();
        channels.dedup();
        channels.push(heartbeat_channel);
        listener.listen_all(channels).await?;
        Ok(listener)
    };
    let mut listener = tokio::time::timeout(CONNECT_TIMEOUT, connect)
        .await
        .map_err(|_| ListenerFailure::TimedOut("connecting and subscribing"))?
        .map_err(ListenerFailure::Connect)?;
    let (sender, receiver) = mpsc::unbounded_channel();
    let task = tokio::spawn(async move {
        loop {
            let received = match listener.try_recv().await {
                Ok(Some(notification)) => Ok(notification),
                // sqlx would reconnect on the next call, without the heartbeat's proof.
                Ok(None) => Err(ListenerFailure::Closed),
                Err(error) => Err(ListenerFailure::Receive(error)),
            };
            let failed = received.is_err();
            if sender.send(received).is_err() || failed {
                return;
            }
        }
    });
    Ok(Subscription { receiver, task })
}

/// The heartbeats of one listening connection.
struct Heartbeat {
    /// A channel of this connection's own, so no other process's heartbeats (nor an
    /// earlier connection's) count.
    channel: String,
    sent: u64,
    /// When the latest heartbeat left, until it comes back.
    awaiting: Option<Instant>,
}

impl Heartbeat {
    fn new() -> Self {
        Self { channel: format!("lectern_heartbeat_{:016x}", rand::random::<u64>()), sent: 0, awaiting: None }
    }

    /// Sends the next heartbeat, unless one is still on its way; fails when that one
    /// is late or this one cannot be sent in time.
    async fn beat(&mut self, beating: &PgPool) -> Result<(), ListenerFailure> {
        if let Some(left) = self.awaiting {
            return if left.elapsed() >= HEARTBEAT_DEADLINE { Err(ListenerFailure::HeartbeatMissed) } else { Ok(()) };
        }
        self.sent += 1;
        let left = Instant::now();
        let send = sqlx::query("select pg_notify($1, $2)").bind(&self.channel).bind(self.sent.to_string());
        tokio::time::timeout(HEARTBEAT_DEADLINE, send.execute(beating))
            .await
            .map_err(|_| ListenerFailure::TimedOut("sending a heartbeat"))?
            .map_err(ListenerFailure::Heartbeat)?;
        self.awaiting = Some(left);
        Ok(())
    }

    /// Whether `payload` is the heartbeat on its way (older ones were already late).
    fn came_back(&mut self, payload: &str) -> bool {
        let current = payload == self.sent.to_string();
        if current {
            self.awaiting = None;
        }
        current
    }
}
