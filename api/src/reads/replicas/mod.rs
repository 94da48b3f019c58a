//! Reads served by PostgreSQL streaming replicas, never older than what a client was
//! already shown or what a notification already announced.
//!
//! A replica replays the primary's WAL some time after the primary wrote it. Every
//! position here is a WAL position (bytes from `0/0`), which orders the primary's
//! history and every replica's progress through it:
//!
//! - each statement routed here returns the position it read at as its last column
//!   ([`READ_POSITION`]): on a replica the WAL it had replayed, on the primary the WAL
//!   it had inserted, both taken after the statement's snapshot, so an upper bound of
//!   everything the statement saw. Cursors and sync tokens carry it, and the next page
//!   is read only where at least that much is replayed ([`Reads::fetch_for`]'s `seen`);
//! - when a workspace's change is notified, the primary's position read after the
//!   notification is that workspace's fence: until a replica has replayed past it, the
//!   workspace's reads (and so the first-page cache and the feed's head, which they
//!   fill) come from the primary;
//! - a monitor samples the primary's position and each replica's replayed position: a
//!   replica that is down, not in recovery, or more than the allowed lag behind leaves
//!   the rotation, and comes back by itself.
//!
//! Whatever no replica can serve, the primary serves: a replica never makes a read fail.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use sqlx::postgres::PgRow;
use sqlx::Row;
use tokio::sync::Notify;
use uuid::Uuid;

use super::change::{Change, Channel, Follower};
use super::connections::{PlanMode, ReadConnections, ReadError};
use super::freshness::Trust;
use super::history::HistoryId;
use crate::metric_names::{READS, REPLICA_IN_ROTATION, REPLICA_LAG};

mod fences;

use self::fences::{Fence, Fences};

/// A position in the primary's WAL, in bytes from `0/0`.
pub type WalPosition = i64;

/// The column every routed statement ends with: the position it read at.
pub const READ_POSITION: &str = "(select (case when pg_is_in_recovery() then pg_last_wal_replay_lsn() \
     else pg_current_wal_insert_lsn() end - '0/0'::pg_lsn)::int8) as read_position";

/// How often the monitor samples the primary and the replicas.
pub const MONITOR_EVERY: Duration = Duration::from_millis(100);
/// How long one sample may take before the replica counts as down.
const SAMPLE_TIMEOUT: Duration = Duration::from_secs(1);

/// How to reach one replica.
#[derive(Clone)]
pub struct ReplicaTarget {
    /// `host:port/database`, what logs, metrics and readiness show.
    pub name: String,
    pub options: sqlx::postgres::PgConnectOptions,
}

impl std::fmt::Debug for ReplicaTarget {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The options hold the password.
        formatter.debug_struct("ReplicaTarget").field("name", &self.name).finish_non_exhaustive()
    }
}

impl ReplicaTarget {
    /// The replica at `url`, connected as the API connects to the primary.
    pub fn from_url(url: &str, settings: &super::PoolSettings) -> Result<Self, sqlx::Error> {
        Ok(Self { name: replica_name(url), options: super::connect_options(url, settings)? })
    }
}

/// One replica, as the monitor last saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicaStatus {
    /// `host:port/database`, never the password.
    pub name: String,
    /// Replayed at least this far (the newest any sample or statement showed).
    pub replayed: WalPosition,
    /// How long ago the primary had written what the replica has yet to replay.
    pub lag: Option<Duration>,
    /// Why it is out of the rotation, if it is.
    pub problem: Option<String>,
}

impl ReplicaStatus {
    pub fn in_rotation(&self) -> bool {
        self.problem.is_none()
    }
}

struct Replica {
    connections: ReadConnections,
    status: Mutex<ReplicaStatus>,
}

impl Replica {
    fn status(&self) -> MutexGuard<'_, ReplicaStatus> {
        // Single assignments under the lock: a poisoned lock still holds a whole status.
        self.status.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Raises the replayed position: replay only goes forward.
    fn replayed_at_least(&self, position: WalPosition) {
        let mut status = self.status();
        status.replayed = status.replayed.max(position);
    }

    fn take_out(&self, problem: String) {
        self.status().problem = Some(problem);
    }
}

/// The rows of a routed statement, and the position they were read at (none for no rows).
pub struct Read {
    pub rows: Vec<PgRow>,
    pub position: Option<WalPosition>,
}

/// The primary's read connections and the replicas', with what decides between them.
pub struct Reads {
    primary: ReadConnections,
    replicas: Vec<Replica>,
    max_lag: Duration,
    fences: Mutex<Fences>,
    /// Wakes the task that reads the primary's position after announcements.
    announced: Notify,
    /// Set by the change listener while its notifications can be trusted; until then
    /// no fence is known, and only the primary serves.
    listening: Trust,
    /// The primary's position, sampled: the oldest first.
    primary_samples: Mutex<VecDeque<(Instant, WalPosition)>>,
    /// Round robin among the replicas that may serve.
    turn: AtomicUsize,
}

impl Reads {
    /// The primary alone, on connections like `pool`'s (for what reads beside a pool):
    /// every read goes to it, as before replicas existed.
    pub fn beside(pool: &sqlx::PgPool) -> Arc<Self> {
        let settings = super::PoolSettings {
            max_connections: pool.options().get_max_connections(),
            acquire_timeout: pool.options().get_acquire_timeout(),
            statement_timeout: Duration::from_secs(30),
            connections_per_workspace: pool.options().get_max_connections(),
        };
        Self::new(
            ReadConnections::new((*pool.connect_options()).clone(), &settings),
            Vec::new(),
            Duration::from_secs(5),
        )
    }

    /// `replicas` as `(name, connections)`, out of the rotation until first sampled.
    pub fn new(primary: ReadConnections, replicas: Vec<(String, ReadConnections)>, max_lag: Duration) -> Arc<Self> {
        let replicas = replicas
            .into_iter()
            .map(|(name, connections)| Replica {
                connections,
                status: Mutex::new(ReplicaStatus {
                    name,
                    replayed: 0,
                    lag: None,
                    problem: Some("not sampled yet".to_owned()),
                }),
            })
            .collect();
        Arc::new(Self {
            primary,
            replicas,
            max_lag,
            fences: Mutex::default(),
            announced: Notify::new(),
            listening: Trust::default(),
            primary_samples: Mutex::default(),
            turn: AtomicUsize::new(0),
        })
    }

    /// The primary's connections, for what must be fresh or is the service's own.
    pub fn primary(&self) -> &ReadConnections {
        &self.primary
    }

    /// Closes every idle connection, the primary's and the replicas'; for shutdown.
    pub async fn close_idle(&self) {
        self.primary.close_idle().await;
        for replica in &self.replicas {
            replica.connections.close_idle().await;
        }
    }

    /// Whether any replica may serve: without one, every read is the primary's, and where a
    /// reader's WAL position stands makes no difference to it.
    pub fn has_replicas(&self) -> bool {
        !self.replicas.is_empty()
    }

    /// Every replica as last seen.
    pub fn replica_statuses(&self) -> Vec<ReplicaStatus> {
        self.replicas.iter().map(|replica| replica.status().clone()).collect()
    }

    /// Runs `read` for `workspace_id` where at least `seen` is replayed and the
    /// workspace's fence is passed: on a replica in the rotation if one is known to be
    /// that far, else on the primary. A replica that fails is taken out and the primary
    /// runs the read instead. The statement `read` runs must end with [`READ_POSITION`].
    pub async fn fetch_for<'a, F, Reading>(
        &'a self,
        workspace_id: Uuid,
        seen: WalPosition,
        read: F,
    ) -> Result<Read, ReadError>
    where
        F: Fn(&'a ReadConnections) -> Reading,
        Reading: Future<Output = Result<Vec<PgRow>, ReadError>>,
    {
        let needed = self.needed(std::iter::once(workspace_id)).map(|fence| fence.max(seen));
        if let Some(replica) = needed.and_then(|needed| self.replica_at(needed)) {
            match read(&replica.connections).await {
                Ok(rows) => return Ok(self.read_on_replica(replica, rows)),
                Err(ReadError::Database(error)) if super::is_unavailable(&error) => self.failed(replica, &error),
                Err(error) => return Err(error),
            }
        }
        metrics::counter!(READS, "source" => "primary").increment(1);
        let rows = read(&self.primary).await?;
        Ok(Read { position: self.position_worth_carrying(&rows), rows })
    }

    /// The primary's read position, when there are replicas it could matter to. Without
    /// replicas, cursors and tokens keep the format without it, which the release before
    /// replicas also reads: a rolling upgrade never hands a client one its old processes
    /// refuse. Turn replicas on once every process runs this release.
    fn position_worth_carrying(&self, rows: &[PgRow]) -> Option<WalPosition> {
        if self.replicas.is_empty() {
            None
        } else {
            read_position(rows)
        }
    }

    /// For a statement reading several `workspaces` at once: its rows from a replica
    /// that has passed every one's fence, or `None` when the caller should read the
    /// primary.
    pub async fn fetch_across<'a, F, Reading>(
        &'a self,
        workspaces: impl Iterator<Item = Uuid>,
        read: F,
    ) -> Result<Option<Read>, sqlx::Error>
    where
        F: FnOnce(&'a ReadConnections) -> Reading,
        Reading: Future<Output = Result<Vec<PgRow>, sqlx::Error>>,
    {
        if let Some(replica) = self.needed(workspaces).and_then(|needed| self.replica_at(needed)) {
            match read(&replica.connections).await {
                Ok(rows) => return Ok(Some(self.read_on_replica(replica, rows))),
                Err(error) if super::is_unavailable(&error) => self.failed(replica, &error),
                Err(error) => return Err(error),
            }
        }
        metrics::counter!(READS, "source" => "primary").increment(1);
        Ok(None)
    }

    fn read_on_replica(&self, replica: &Replica, rows: Vec<PgRow>) -> Read {
        metrics::counter!(READS, "source" => "replica").increment(1);
        let position = read_position(&rows);
        if let Some(position) = position {
            replica.replayed_at_least(position);
        }
        Read { rows, position }
    }

    fn failed(&self, replica: &Replica, error: &sqlx::Error) {
        let name = replica.status().name.clone();
        tracing::warn!(replica = %name, %error, "a replica failed a read; the primary serves it, and the replica is out of the rotation until it answers again");
        replica.take_out(format!("a read failed: {error}"));
        metrics::gauge!(REPLICA_IN_ROTATION, "replica" => name).set(0.0);
    }

    /// The position every one of `workspaces` needs, or `None` when only the primary
    /// may serve (no replica, no trusted listener, or a fence still being read).
    fn needed(&self, workspaces: impl Iterator<Item = Uuid>) -> Option<WalPosition> {
        if self.replicas.is_empty() || !self.listening.get() {
            return None;
        }
        let fences = self.lock_fences();
        let mut needed = 0;
        for workspace_id in workspaces {
            needed = needed.max(fences.needed(workspace_id)?);
        }
        Some(needed)
    }

    /// A replica in the rotation that has replayed `needed`, taking turns.
    fn replica_at(&self, needed: WalPosition) -> Option<&Replica> {
        let start = self.turn.fetch_add(1, Ordering::Relaxed);
        (0..self.replicas.len()).map(|offset| &self.replicas[(start + offset) % self.replicas.len()]).find(|replica| {
            let status = replica.status();
            status.in_rotation() && status.replayed >= needed
        })
    }

    fn lock_fences(&self) -> MutexGuard<'_, Fences> {
        // Every change to the fences is one assignment: a poisoned lock holds whole ones.
        self.fences.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn fence(&self, workspace_id: Option<Uuid>) {
        {
            let mut fences = self.lock_fences();
            let number = fences.announce();
            match workspace_id {
                Some(workspace_id) => {
                    fences.by_workspace.insert(workspace_id, Fence::Pending(number));
                }
                None => fences.floor = Some(Fence::Pending(number)),
            }
        }
        self.announced.notify_one();
    }

    /// Until the process ends: reads the primary's position after announcements (the
    /// fences), and samples every replica (the rotation).
    pub async fn watch(self: Arc<Self>) {
        if self.replicas.is_empty() {
            return;
        }
        let mut ticker = tokio::time::interval(MONITOR_EVERY);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = self.announced.notified() => self.settle_fences().await,
                _ = ticker.tick() => {
                    self.settle_fences().await;
                    self.sample().await;
                }
            }
        }
    }

    async fn settle_fences(&self) {
        let announcement = {
            let fences = self.lock_fences();
            if !fences.has_pending() {
                return;
            }
            fences.announced
        };
        // Read after the announcements: the changes they announce are below it.
        if let Ok(position) = self.primary_position().await {
            self.lock_fences().settle(announcement, position);
        }
    }

    async fn primary_position(&self) -> Result<WalPosition, String> {
        let query = sqlx::query("select (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::int8");
        let rows = tokio::time::timeout(SAMPLE_TIMEOUT, self.primary.fetch_all(PlanMode::Generic, query))
            .await
            .map_err(|_| format!("no answer within {SAMPLE_TIMEOUT:?}"))?
            .map_err(|error| error.to_string())?;
        let row = rows.first().ok_or("no row")?;
        row.try_get::<i64, _>(0).map_err(|error| error.to_string())
    }

    async fn sample(&self) {
        if let Ok(position) = self.primary_position().await {
            let mut samples = self.primary_samples.lock().unwrap_or_else(PoisonError::into_inner);
            samples.push_back((Instant::now(), position));
            // Enough history to tell any lag up to twice the allowed one.
            let kept_for = self.max_lag * 2 + Duration::from_secs(1);
            while samples.len() > 1 && samples.front().is_some_and(|(at, _)| at.elapsed() > kept_for) {
                samples.pop_front();
            }
        }
        let mut replayed_by_all = WalPosition::MAX;
        let history = self.primary.history().and_then(|history| history.current());
        for replica in &self.replicas {
            let sampled = sample_replica(&replica.connections, history).await;
            let mut status = replica.status();
            match sampled {
                Ok(replayed) => {
                    status.replayed = status.replayed.max(replayed);
                    status.lag = self.lag_behind(status.replayed);
                    status.problem = match status.lag {
                        Some(lag) if lag <= self.max_lag => None,
                        Some(lag) => Some(format!(
                            "{} ms behind the primary, more than the {} ms allowed",
                            lag.as_millis(),
                            self.max_lag.as_millis()
                        )),
                        None => Some("its lag is unknown: the primary cannot be sampled".to_owned()),
                    };
                }
                Err(problem) => {
                    // Unreachable, its lag is unknown, not the last one measured.
                    status.lag = None;
                    status.problem = Some(problem);
                }
            }
            replayed_by_all = replayed_by_all.min(status.replayed);
            let lag = status.lag.map_or(f64::NAN, |lag| lag.as_secs_f64());
            metrics::gauge!(REPLICA_LAG, "replica" => status.name.clone()).set(lag);
            metrics::gauge!(REPLICA_IN_ROTATION, "replica" => status.name.clone()).set(if status.in_rotation() {
                1.0
            } else {
                0.0
            });
        }
        self.lock_fences().prune(replayed_by_all);
    }

    /// How long ago the primary first was past `replayed`, by its samples: zero when
    /// the newest sample is not past it; `None` without samples.
    fn lag_behind(&self, replayed: WalPosition) -> Option<Duration> {
        let samples = self.primary_samples.lock().unwrap_or_else(PoisonError::into_inner);
        samples.back()?;
        Some(samples.iter().find(|(_, position)| *position > replayed).map_or(Duration::ZERO, |(at, _)| at.elapsed()))
    }
}

/// The replayed position of a server that must be a replica of the primary's history
/// `history` (when the primary has one registered): a standby left on the old timeline by a
/// failover, or following another primary, replays WAL whose positions say nothing of the
/// primary's. It holds the primary's history once it has replayed its registration, which
/// comes before anything a bound of that history lets through.
async fn sample_replica(connections: &ReadConnections, history: Option<HistoryId>) -> Result<WalPosition, String> {
    let query = sqlx::query(
        "select pg_is_in_recovery(), (pg_last_wal_replay_lsn() - '0/0'::pg_lsn)::int8, \
                $1::int8 is null or exists (select from read_model_histories where history_id = $1)",
    )
    .bind(history);
    let rows = tokio::time::timeout(SAMPLE_TIMEOUT, connections.fetch_all(PlanMode::Generic, query))
        .await
        .map_err(|_| format!("no answer within {SAMPLE_TIMEOUT:?}"))?
        .map_err(|error| format!("unreachable: {error}"))?;
    let row = rows.first().ok_or("its sample returned no row")?;
    let in_recovery: bool = row.try_get(0).map_err(|error| error.to_string())?;
    let replayed: Option<i64> = row.try_get(1).map_err(|error| error.to_string())?;
    let same_history: bool = row.try_get(2).map_err(|error| error.to_string())?;
    match (in_recovery, replayed) {
        (true, Some(_)) if !same_history => Err("replays another history of the database than the primary's (a \
                                                 standby left behind by a failover, or following another primary)"
            .to_owned()),
        (true, Some(replayed)) => Ok(replayed),
        _ => Err("is not a streaming replica (not in recovery)".to_owned()),
    }
}

/// The position a routed statement's rows were read at: their last column.
fn read_position(rows: &[PgRow]) -> Option<WalPosition> {
    let row = rows.first()?;
    row.try_get::<Option<i64>, _>(row.len().checked_sub(1)?).ok().flatten()
}

impl Follower for Reads {
    fn channel(&self) -> Channel {
        Channel::ReadModel
    }

    fn changed(&self, change: &Change) {
        if !self.replicas.is_empty() {
            // A change that names no workspace fences them all.
            self.fence(change.workspace());
        }
    }

    fn forget_everything(&self) {
        if !self.replicas.is_empty() {
            // Changes made while nobody listened were never announced: every workspace
            // waits for the primary's position read after the listener is back.
            self.fence(None);
        }
    }

    /// WAL positions of another history say nothing of this one's: what each replica was
    /// seen to have replayed, and the primary's positions lags are measured against, are
    /// dropped; the replicas serve again once sampled against the primary now.
    fn new_history(&self) {
        self.primary_samples.lock().unwrap_or_else(PoisonError::into_inner).clear();
        for replica in &self.replicas {
            let mut status = replica.status();
            status.replayed = 0;
            status.lag = None;
            status.problem = Some("not sampled since the primary changed history".to_owned());
        }
        self.forget_everything();
    }

    fn trust(&self) -> &Trust {
        &self.listening
    }
}

/// Replicas as `host:port/database` for metrics and readiness.
pub fn replica_name(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(parsed) => {
            format!("{}:{}{}", parsed.host_str().unwrap_or("?"), parsed.port().unwrap_or(5432), parsed.path())
        }
        Err(_) => "<unparseable replica URL>".to_owned(),
    }
}
