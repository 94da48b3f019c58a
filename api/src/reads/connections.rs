//! The connections listings and searches run on: borrowed for one statement, given
//! back without a round trip.
//!
//! sqlx's pool sends a `Sync` and waits for `ReadyForQuery` every time a connection
//! goes back to it, whatever happened while it was out: for a page, whose statement
//! is one round trip, that doubles the round trips and costs PostgreSQL a wake-up.
//! Here a connection whose statement ran to the end goes back as it is. One that comes
//! back any other way (an error, or a client that went away mid-statement) is drained
//! by a task of its own before anyone else gets it, still counted against the limit,
//! and closed if that fails.
//!
//! A workspace's statements take a place in its share first ([`super::workspace_shares`]),
//! so that no workspace can hold every connection.
//!
//! Each connection runs in one of two plan modes. Page statements are prepared once
//! per connection and always take PostgreSQL's generic plan (the keyset range scan). Search
//! statements are prepared too, so that a search is one round trip rather than a
//! `Parse`/`Describe` exchange before it, but on connections that plan every execution
//! for its actual pattern and workspace (`plan_cache_mode = force_custom_plan`):
//! which index a search should use depends on both.

use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use sqlx::postgres::{PgConnectOptions, PgRow};
use sqlx::query::Query;
use sqlx::{ConnectOptions, Connection, PgConnection, Postgres};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use uuid::Uuid;

use super::history::ServerHistory;
use super::workspace_shares::{ShareExhausted, WorkspaceShare, WorkspaceShares};
use super::PoolSettings;

/// Why a workspace's statement did not run.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error(transparent)]
    Database(#[from] sqlx::Error),
    #[error(transparent)]
    ShareExhausted(#[from] ShareExhausted),
}

/// How a connection plans its prepared statements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlanMode {
    /// The generic plan, made once per connection and statement. Left to choose
    /// (`auto`, its default), PostgreSQL compares the generic plan's estimate with the
    /// custom plans' and, for a keyset page in a large workspace, found the custom ones
    /// cheaper and planned every execution again: half of PostgreSQL's CPU for a deep
    /// page went to planning a plan it already had.
    Generic,
    /// A fresh plan for every execution, for the values it runs with.
    PerExecution,
}

impl PlanMode {
    /// The session's `plan_cache_mode` in this mode.
    pub fn setting(self) -> &'static str {
        match self {
            Self::Generic => "force_generic_plan",
            Self::PerExecution => "force_custom_plan",
        }
    }

    /// `options` for connections that start in this mode.
    pub fn connect_options(self, options: &PgConnectOptions) -> PgConnectOptions {
        options.clone().options([("plan_cache_mode", self.setting())])
    }
}

/// Connections are replaced after this long, as sqlx's pool does by default: a
/// backend's caches only grow.
const MAX_LIFETIME: Duration = Duration::from_secs(30 * 60);
/// Connections left idle this long are closed: a burst's extra connections do not
/// stay open for ever.
const IDLE_TIMEOUT: Duration = Duration::from_secs(10 * 60);

/// At most `max_connections` open, each borrowed by one statement at a time.
#[derive(Clone)]
pub struct ReadConnections {
    shared: Arc<Shared>,
}

struct Shared {
    /// How to connect, one per mode: a new connection starts in the mode it is for.
    generic: PgConnectOptions,
    per_execution: PgConnectOptions,
    /// One permit per connection that may be open; a borrow holds one, and so does a
    /// connection being drained.
    permits: Arc<Semaphore>,
    max_connections: usize,
    /// Each workspace's places: at most its share of `max_connections` at once.
    shares: Arc<WorkspaceShares>,
    acquire_timeout: Duration,
    /// How long draining an abandoned statement may take before its connection is
    /// closed instead: the statement timeout, and a little for the network.
    drain_timeout: Duration,
    /// Most recently used last: borrows take from the end, so a light load keeps
    /// reusing a few warm connections and the rest time out.
    idle: Mutex<Vec<Idle>>,
    /// Told the history of the server each new connection reaches (the primary's set only):
    /// behind a stable address the database can change between two connections.
    history: Mutex<Option<Arc<ServerHistory>>>,
}

struct Idle {
    connection: PgConnection,
    mode: PlanMode,
    opened: Instant,
    idle_since: Instant,
}

impl Idle {
    fn expired(&self) -> bool {
        self.opened.elapsed() >= MAX_LIFETIME || self.idle_since.elapsed() >= IDLE_TIMEOUT
    }
}

impl ReadConnections {
    /// Connects nothing yet: the API starts while PostgreSQL is down and connects on
    /// the first request after it is back.
    pub fn new(options: PgConnectOptions, settings: &PoolSettings) -> Self {
        let max_connections = usize::try_from(settings.max_connections.max(1)).unwrap_or(usize::MAX);
        let connections = Self {
            shared: Arc::new(Shared {
                generic: PlanMode::Generic.connect_options(&options),
                per_execution: PlanMode::PerExecution.connect_options(&options),
                permits: Arc::new(Semaphore::new(max_connections)),
                max_connections,
                shares: WorkspaceShares::new(usize::try_from(settings.connections_per_workspace).unwrap_or(1)),
                acquire_timeout: settings.acquire_timeout,
                drain_timeout: settings.statement_timeout + Duration::from_secs(5),
                idle: Mutex::new(Vec::new()),
                history: Mutex::new(None),
            }),
        };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(close_expired_idle(Arc::downgrade(&connections.shared)));
        }
        connections
    }

    /// Tells `history` which history each connection opened from now on reaches.
    pub fn seeing(self, history: Arc<ServerHistory>) -> Self {
        *self.shared.history.lock().unwrap_or_else(PoisonError::into_inner) = Some(history);
        self
    }

    /// What new connections tell which history they reach, if anything.
    pub fn history(&self) -> Option<Arc<ServerHistory>> {
        self.shared.history.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Runs `query` of `workspace_id` to the end on a connection in `mode`, within the
    /// workspace's share, and returns its rows.
    pub async fn fetch_for(
        &self,
        workspace_id: Uuid,
        mode: PlanMode,
        query: Query<'_, Postgres, sqlx::postgres::PgArguments>,
    ) -> Result<Vec<PgRow>, ReadError> {
        let deadline = tokio::time::Instant::now() + self.shared.acquire_timeout;
        let share = match self.shared.shares.enter(workspace_id, self.shared.acquire_timeout).await {
            Ok(share) => share,
            Err(exhausted) => {
                metrics::counter!(crate::metric_names::RATE_LIMITED, "limit" => "workspace_connections").increment(1);
                return Err(exhausted.into());
            }
        };
        let mut borrowed = self.borrow(mode, deadline).await?;
        borrowed.share = Some(share);
        Ok(borrowed.run(query).await?)
    }

    /// Runs `query` to the end on a connection in `mode` and returns its rows, outside
    /// any workspace's share (statements of the service's own, and tests).
    pub async fn fetch_all(
        &self,
        mode: PlanMode,
        query: Query<'_, Postgres, sqlx::postgres::PgArguments>,
    ) -> Result<Vec<PgRow>, sqlx::Error> {
        let deadline = tokio::time::Instant::now() + self.shared.acquire_timeout;
        self.borrow(mode, deadline).await?.run(query).await
    }

    /// Connections open now, and how many of them are idle.
    pub fn usage(&self) -> (u32, u32) {
        let idle = self.shared.idle().len();
        let count = |connections: usize| u32::try_from(connections).unwrap_or(u32::MAX);
        (count(self.shared.permits_held() + idle), count(idle))
    }

    /// Closes the idle connections politely (a `Terminate` each); for shutdown.
    pub async fn close_idle(&self) {
        let idle = std::mem::take(&mut *self.shared.idle());
        for Idle { connection, .. } in idle {
            let _ = connection.close().await;
        }
    }

    async fn borrow(&self, mode: PlanMode, deadline: tokio::time::Instant) -> Result<Borrowed, sqlx::Error> {
        let shared = &self.shared;
        let permit = tokio::time::timeout_at(deadline, shared.permits.clone().acquire_owned())
            .await
            .map_err(|_| sqlx::Error::PoolTimedOut)?
            .map_err(|_| sqlx::Error::PoolClosed)?;
        let (mut connection, current_mode, opened) = match self.take_idle(mode) {
            Some(idle) => (idle.connection, idle.mode, idle.opened),
            None => {
                let options = match mode {
                    PlanMode::Generic => &shared.generic,
                    PlanMode::PerExecution => &shared.per_execution,
                };
                let connecting = options.connect();
                let mut connection =
                    tokio::time::timeout_at(deadline, connecting).await.map_err(|_| sqlx::Error::PoolTimedOut)??;
                let history = shared.history.lock().unwrap_or_else(PoisonError::into_inner).clone();
                if let Some(history) = history {
                    let looked = history.look(&mut connection, "a new read connection");
                    tokio::time::timeout_at(deadline, looked).await.map_err(|_| sqlx::Error::PoolTimedOut)??;
                }
                (connection, mode, Instant::now())
            }
        };
        if current_mode != mode {
            // Only when the set is full and every idle connection is in the other
            // mode: one extra round trip, after which the connection stays in this mode.
            let set = format!("set plan_cache_mode = {}", mode.setting());
            sqlx::query(&set).persistent(false).execute(&mut connection).await?;
        }
        Ok(Borrowed {
            connection: Some(connection),
            mode,
            opened,
            shared: self.shared.clone(),
            permit: Some(permit),
            share: None,
        })
    }

    /// For a borrower holding a permit: the most recently used idle connection in
    /// `mode`; else, when the set may not open another, the most recent in the other
    /// mode; else none (open a new one). Only the connection taken is checked for
    /// expiry (and closed if so); the reaper sweeps the rest.
    fn take_idle(&self, mode: PlanMode) -> Option<Idle> {
        let mut idle = self.shared.idle();
        loop {
            let position = match idle.iter().rposition(|connection| connection.mode == mode) {
                Some(position) => position,
                None => {
                    // Every permit holder but this borrower has a connection (borrowed
                    // or being drained); counted under the lock, so two borrowers
                    // cannot both open the last.
                    let open = idle.len() + self.shared.permits_held().saturating_sub(1);
                    if open < self.shared.max_connections {
                        return None;
                    }
                    idle.len().checked_sub(1)?
                }
            };
            let taken = idle.remove(position);
            if !taken.expired() {
                return Some(taken);
            }
        }
    }
}

impl Shared {
    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<Idle>> {
        // Pushes, removals and takes only: a panic elsewhere cannot leave the list
        // inconsistent.
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Permits are held by borrowed connections and by those being drained.
    fn permits_held(&self) -> usize {
        self.max_connections.saturating_sub(self.permits.available_permits())
    }

    fn put_back(&self, connection: PgConnection, mode: PlanMode, opened: Instant) {
        self.idle().push(Idle { connection, mode, opened, idle_since: Instant::now() });
    }
}

/// One connection out of the set; see the module doc for how it comes back.
struct Borrowed {
    connection: Option<PgConnection>,
    mode: PlanMode,
    opened: Instant,
    shared: Arc<Shared>,
    permit: Option<OwnedSemaphorePermit>,
    /// The workspace's place, held as long as the permit.
    share: Option<WorkspaceShare>,
}

impl Borrowed {
    /// Runs `query` to the end; the connection goes back as it is only if it did.
    async fn run(mut self, query: Query<'_, Postgres, sqlx::postgres::PgArguments>) -> Result<Vec<PgRow>, sqlx::Error> {
        let rows = match self.connection.as_mut() {
            Some(connection) => query.fetch_all(connection).await,
            None => Err(sqlx::Error::PoolClosed),
        };
        if rows.is_ok() {
            self.give_back();
        }
        rows
    }

    /// Its statement ran to the end: nothing is left to read.
    fn give_back(mut self) {
        if let Some(connection) = self.connection.take() {
            self.shared.put_back(connection, self.mode, self.opened);
        }
    }
}

/// Without borrows nothing else would look at the idle list: after a burst its
/// connections would stay open on PostgreSQL for good.
async fn close_expired_idle(shared: Weak<Shared>) {
    let mut every_minute = tokio::time::interval(Duration::from_secs(60));
    loop {
        every_minute.tick().await;
        let Some(shared) = shared.upgrade() else { return };
        shared.idle().retain(|connection| !connection.expired());
    }
}

impl Drop for Borrowed {
    fn drop(&mut self) {
        let Some(mut connection) = self.connection.take() else { return };
        let (shared, mode, opened) = (self.shared.clone(), self.mode, self.opened);
        let (permit, share) = (self.permit.take(), self.share.take());
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        runtime.spawn(async move {
            // `ping` reads whatever the interrupted statement still sends, up to its
            // `ReadyForQuery`; the permit stays taken meanwhile, so PostgreSQL never
            // runs more statements for this set than it has connections.
            if let Ok(Ok(())) = tokio::time::timeout(shared.drain_timeout, connection.ping()).await {
                shared.put_back(connection, mode, opened);
            }
            drop(permit);
            drop(share);
        });
    }
}
