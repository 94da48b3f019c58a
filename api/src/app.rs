//! The application's state: each feature's own state, and what they share, built once
//! by one constructor. `serve` and the tests' harness both go through [`AppState::new`],
//! so no test can pass on a state the service never builds.

use std::sync::Arc;
use std::time::Duration;

use secrecy::SecretString;
use sqlx::PgPool;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::feed::token::SyncTokens;
use crate::feed::Feeds;
use crate::keys::{Authenticator, Environment, Pepper, Peppers};
use crate::listing::cursor::CursorSigner;
use crate::listing::workspace_sizes::WalkSettings;
use crate::listing::Listing;
use crate::rate_limit::{Policy, RateLimits};
use crate::reads::change::Follower;
use crate::reads::connections::ReadConnections;
use crate::reads::history::ServerHistory;
use crate::reads::notifications::{self, ListenerHealth};
use crate::reads::replicas::{Reads, ReplicaTarget};
use crate::reads::PoolSettings;
use crate::retrieve::Retrieves;
use crate::signing::SigningSecrets;
use crate::webhooks::{Deliverer, WebhookSettings};

/// Everything a request needs.
pub struct AppState {
    /// Key checks, retrieves, the feed's bound and readiness.
    pub pool: PgPool,
    /// Listings, searches, retrieves and feeds: on the primary's connections and the
    /// replicas' (see [`crate::reads`]).
    pub reads: Arc<Reads>,
    pub authenticator: Arc<Authenticator>,
    pub rate_limits: RateLimits,
    /// Whether the change listener that keeps every cache fresh is up.
    pub change_listener: Arc<ListenerHealth>,
    /// Which history of the database the process talks to; every follower is told when it
    /// changes under the same address.
    pub history: Arc<ServerHistory>,
    pub listing: Listing,
    pub feeds: Arc<Feeds>,
    pub retrieves: Retrieves,
    /// Webhook deliveries for the endpoints this process holds.
    pub webhooks: Arc<Deliverer>,
    /// Cancelled when the server begins to shut down: long polls answer at once.
    pub shutdown: CancellationToken,
}

/// The settings a state is built from (`serve` reads them from its command line).
#[derive(Debug)]
pub struct AppSettings {
    /// The listing connections' size, timeouts and per-workspace share.
    pub reads: PoolSettings,
    /// Streaming replicas that serve reads, by name (`host:port/database`).
    pub replicas: Vec<ReplicaTarget>,
    /// How far behind the primary a replica may be and still serve.
    pub max_replica_lag: Duration,
    /// The pepper key secrets are hashed under.
    pub pepper: Pepper,
    /// Retired peppers whose keys still authenticate, and are hashed again under `pepper`.
    pub previous_peppers: Vec<Pepper>,
    /// Which keys this deployment serves.
    pub environment: Environment,
    /// What signs cursors and sync tokens, and how long cursors stay valid.
    pub cursor_secret: SecretString,
    /// Retired cursor secrets whose cursors and sync tokens still open.
    pub previous_cursor_secrets: Vec<SecretString>,
    pub cursor_lifetime: Duration,
    /// Sync tokens in the format the release before this one reads (no history): while
    /// processes of both serve side by side.
    pub sync_tokens_in_previous_format: bool,
    /// Each key's bucket.
    pub per_key: Policy,
    /// Each client address's bucket of failed key lookups.
    pub lookups_per_address: Policy,
    /// When searches walk a workspace.
    pub walks: WalkSettings,
    /// How webhook deliveries are made.
    pub webhooks: WebhookSettings,
}

impl AppState {
    /// The state of an API on `pool`: nothing is connected yet (the pool and the
    /// listing connections connect on first use, so the API starts while PostgreSQL is
    /// down). The listing connections go to `pool`'s server, as its options say.
    pub fn new(pool: PgPool, settings: AppSettings) -> Self {
        let history = Arc::new(ServerHistory::default());
        let primary = ReadConnections::new((*pool.connect_options()).clone(), &settings.reads).seeing(history.clone());
        let replicas = settings
            .replicas
            .into_iter()
            .map(|target| (target.name, ReadConnections::new(target.options, &settings.reads)))
            .collect();
        let reads = Reads::new(primary, replicas, settings.max_replica_lag);
        let peppers = Peppers::new(settings.pepper, settings.previous_peppers);
        // The deliverer opens the endpoints' sealed secrets with the same peppers.
        let webhook_peppers = peppers.clone();
        let authenticator = Arc::new(Authenticator::new(pool.clone(), peppers, settings.environment));
        let shutdown = CancellationToken::new();
        let signing = SigningSecrets::new(settings.cursor_secret, settings.previous_cursor_secrets);
        let tokens = SyncTokens::new(signing.clone()).in_previous_format(settings.sync_tokens_in_previous_format);
        let feeds = Arc::new(Feeds::new(
            pool.clone(),
            reads.clone(),
            tokens,
            authenticator.clone(),
            history.clone(),
            shutdown.clone(),
        ));
        let webhooks = Arc::new(Deliverer::new(&pool, webhook_peppers, settings.webhooks, feeds.bound.clone()));
        let state = Self {
            listing: Listing::new(reads.clone(), CursorSigner::new(signing, settings.cursor_lifetime), settings.walks),
            feeds,
            webhooks,
            retrieves: Retrieves::new(&pool, &reads),
            rate_limits: RateLimits::new(settings.per_key, settings.lookups_per_address),
            change_listener: Arc::default(),
            authenticator,
            shutdown,
            reads,
            pool,
            history,
        };
        state.history.tell(&state.followers());
        state
    }

    /// Everything the change listener keeps fresh. The replicas' fences first: a page
    /// read again after a cache is evicted must already find its workspace fenced.
    pub fn followers(&self) -> Vec<Arc<dyn Follower>> {
        vec![
            self.reads.clone(),
            self.authenticator.clone(),
            self.listing.first_pages.clone(),
            self.feeds.heads.clone(),
            self.feeds.bound.clone(),
            self.webhooks.clone(),
        ]
    }

    /// Starts the tasks that keep the state fresh while the process serves: the change
    /// listener, the feed's bound sampler, the replica monitor, the writer of key last-used
    /// times and re-hashed keys, the rate limits' sweeper and the webhook deliverer. They stop when the returned
    /// handles are dropped.
    pub fn start_background_tasks(self: &Arc<Self>) -> BackgroundTasks {
        let state = self.clone();
        let sweeper = async move {
            let mut every_minute = tokio::time::interval(Duration::from_secs(60));
            loop {
                every_minute.tick().await;
                state.rate_limits.forget_idle();
            }
        };
        BackgroundTasks(vec![
            tokio::spawn(notifications::follow(
                self.pool.clone(),
                self.followers(),
                self.change_listener.clone(),
                self.history.clone(),
            )),
            tokio::spawn(self.feeds.bound.clone().keep(self.pool.clone())),
            tokio::spawn(self.reads.clone().watch()),
            tokio::spawn(self.authenticator.clone().flush_periodically()),
            tokio::spawn(sweeper),
            tokio::spawn(self.webhooks.clone().run(self.shutdown.clone())),
        ])
    }
}

/// The state's background tasks, aborted when dropped.
pub struct BackgroundTasks(Vec<JoinHandle<()>>);

impl Drop for BackgroundTasks {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}
