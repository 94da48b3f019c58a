//! What every request needs, built once, by one constructor: `serve` and the tests'
//! harness both go through [`AppState::new`], so no test can pass on a state the
//! service never builds.

use std::sync::Arc;
use std::time::Duration;

use secrecy::SecretString;
use sqlx::PgPool;

use crate::db::connections::ReadConnections;
use crate::db::contacts::Contacts;
use crate::db::first_pages::FirstPages;
use crate::db::items::Items;
use crate::db::lookups::Lookups;
use crate::db::notifications::ListenerHealth;
use crate::db::replicas::{Reads, ReplicaTarget};
use crate::db::workspace_sizes::{WalkSettings, WorkspaceSizes};
use crate::db::PoolSettings;
use crate::feed::bound::FeedBound;
use crate::feed::heads::FeedHeads;
use crate::feed::read_ahead::ReadAhead;
use crate::feed::token::SyncTokens;
use crate::keys::{Authenticator, Environment, Pepper};
use crate::listing::cursor::CursorSigner;
use crate::rate_limit::{Policy, RateLimits};

/// Everything a request needs.
pub struct AppState {
    /// Key checks, retrieves and readiness.
    pub pool: PgPool,
    /// Listings, searches, retrieves and feeds: on the primary's connections (see
    /// [`crate::db::connections`]) and the replicas' (see [`crate::db::replicas`]).
    pub reads: Arc<Reads>,
    pub authenticator: Arc<Authenticator>,
    pub cursors: CursorSigner,
    /// Signs the changes feed's tokens, with the cursor secret.
    pub sync_tokens: SyncTokens,
    /// Each feed's newest position, kept by the same notifications as the first pages.
    pub feed_heads: Arc<FeedHeads>,
    /// The position below which feed pages serve rows, sampled by one task.
    pub feed_bound: Arc<FeedBound>,
    /// Feed pages read before their clients ask for them.
    pub read_ahead: ReadAhead,
    /// Cancelled when the server begins to shut down: long polls answer at once.
    pub shutdown: tokio_util::sync::CancellationToken,
    pub rate_limits: RateLimits,
    /// Unchanged first pages, evicted by the read model's change notifications.
    pub first_pages: Arc<FirstPages>,
    /// Which workspaces a search walks (see [`crate::db::workspace_sizes`]).
    pub workspace_sizes: WorkspaceSizes,
    /// Whether the change listener that keeps both caches fresh is up.
    pub change_listener: Arc<ListenerHealth>,
    /// Retrieves by id, answered in batches.
    pub contacts: Arc<Lookups<Contacts>>,
    pub items: Arc<Lookups<Items>>,
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
    /// Which keys this deployment serves.
    pub environment: Environment,
    /// What signs cursors, and how long they stay valid.
    pub cursor_secret: SecretString,
    pub cursor_lifetime: Duration,
    /// Each key's bucket.
    pub per_key: Policy,
    /// Each client address's bucket of failed key lookups.
    pub lookups_per_address: Policy,
    /// When searches walk a workspace.
    pub walks: WalkSettings,
}

impl AppState {
    /// The state of an API on `pool`: nothing is connected yet (the pool and the
    /// listing connections connect on first use, so the API starts while PostgreSQL is
    /// down). The listing connections go to `pool`'s server, as its options say.
    pub fn new(pool: PgPool, settings: AppSettings) -> Self {
        let primary = ReadConnections::new((*pool.connect_options()).clone(), &settings.reads);
        let replicas = settings
            .replicas
            .into_iter()
            .map(|target| (target.name, ReadConnections::new(target.options, &settings.reads)))
            .collect();
        let reads = Reads::new(primary, replicas, settings.max_replica_lag);
        Self {
            reads: reads.clone(),
            authenticator: Arc::new(Authenticator::new(pool.clone(), settings.pepper, settings.environment)),
            sync_tokens: SyncTokens::new(settings.cursor_secret.clone()),
            cursors: CursorSigner::new(settings.cursor_secret, settings.cursor_lifetime),
            feed_heads: Arc::default(),
            feed_bound: Arc::default(),
            read_ahead: ReadAhead::default(),
            shutdown: tokio_util::sync::CancellationToken::new(),
            rate_limits: RateLimits::new(settings.per_key, settings.lookups_per_address),
            first_pages: Arc::default(),
            workspace_sizes: WorkspaceSizes::new(settings.walks),
            change_listener: Arc::default(),
            contacts: Lookups::new(pool.clone(), reads.clone()),
            items: Lookups::new(pool.clone(), reads),
            pool,
        }
    }
}
