//! Settings. Every one is a flag with an environment twin; secrets are wrapped so
//! they cannot be printed, and have development defaults only outside production.

use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use clap::Args;
use secrecy::{ExposeSecret, SecretString};

use crate::error::CommandError;
use crate::http::{AppSettings, ServerLimits};
use crate::keys::{Environment, Pepper, Peppers};
use crate::listing::workspace_sizes::WalkSettings;
use crate::rate_limit::Policy;
use crate::reads::replicas::ReplicaTarget;
use crate::reads::PoolSettings;

/// Publicly known values so a local run works with no set-up; refused in production.
const DEV_KEY_PEPPER: &str = "lectern-development-key-pepper-not-secret";
const DEV_CURSOR_SECRET: &str = "lectern-development-cursor-secret-not-secret";
/// How long `serve` stays up, not ready, after SIGTERM, unless told otherwise: enough
/// for a load balancer that checks readiness every second or two to notice.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// Shortest secret accepted in production: 32 bytes.
const MIN_SECRET_LEN: usize = 32;

fn secret(text: &str) -> Result<SecretString, String> {
    Ok(SecretString::from(text.to_owned()))
}

/// Where the read model lives.
#[derive(Clone, Debug, Args)]
pub struct DatabaseArgs {
    /// PostgreSQL connection URL; the database is created by `migrate` and `lectern-dev` if missing.
    #[arg(
        long,
        env = "DATABASE_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/lectern",
        hide_env_values = true
    )]
    pub database_url: String,
}

/// Streaming replicas that serve reads.
#[derive(Clone, Debug, Args)]
pub struct ReplicaArgs {
    /// A PostgreSQL streaming replica that serves listings, retrieves and the changes feed
    /// (repeat for several; comma-separated in the variable). Key checks, notifications
    /// and writes stay on --database-url, as does any read no replica has replayed far
    /// enough for.
    #[arg(
        long = "read-database-url",
        env = "LECTERN_READ_DATABASE_URL",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub read_database_urls: Vec<String>,
    /// Milliseconds a replica may lag behind the primary before it leaves the rotation
    /// (it comes back by itself once it has caught up).
    #[arg(long, env = "LECTERN_MAX_REPLICA_LAG_MS", default_value_t = 5_000, value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    pub max_replica_lag_ms: u64,
}

/// How the API uses the database.
#[derive(Clone, Debug, Args)]
pub struct PoolArgs {
    /// Connections of each of the API's two sets on the primary (listings and searches;
    /// everything else), and of its one set on each replica: at most twice this on the
    /// primary, plus the webhook deliverer's 5 and the change listener's 2.
    #[arg(long, env = "LECTERN_DB_POOL_SIZE", default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub db_pool_size: u32,
    /// Milliseconds a request waits for a free connection before it is answered 503.
    #[arg(long, env = "LECTERN_DB_ACQUIRE_TIMEOUT_MS", default_value_t = 2_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub db_acquire_timeout_ms: u64,
    /// Milliseconds one SQL statement may run before PostgreSQL cancels it (then 503).
    #[arg(long, env = "LECTERN_DB_STATEMENT_TIMEOUT_MS", default_value_t = 5_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub db_statement_timeout_ms: u64,
    /// Listing and search statements one workspace may run at once; its further
    /// requests wait as for a connection, then get a 429 (default: a quarter of
    /// --db-pool-size, at least 1).
    #[arg(long, env = "LECTERN_DB_CONNECTIONS_PER_WORKSPACE", value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub db_connections_per_workspace: Option<u32>,
}

impl ServeArgs {
    /// The connection limits these settings describe.
    pub fn server_limits(&self) -> ServerLimits {
        ServerLimits {
            max_connections: usize::try_from(self.max_connections).unwrap_or(usize::MAX),
            header_read_timeout: Duration::from_millis(self.header_read_timeout_ms),
            shutdown_grace: self.shutdown_grace_ms.map_or(DEFAULT_SHUTDOWN_GRACE, Duration::from_millis),
            ..ServerLimits::default()
        }
    }
}

impl PoolArgs {
    pub fn settings(&self) -> PoolSettings {
        PoolSettings {
            max_connections: self.db_pool_size,
            acquire_timeout: Duration::from_millis(self.db_acquire_timeout_ms),
            statement_timeout: Duration::from_millis(self.db_statement_timeout_ms),
            connections_per_workspace: self
                .db_connections_per_workspace
                .unwrap_or_else(|| PoolSettings::default_share(self.db_pool_size)),
        }
    }
}

/// How many requests a caller may make.
#[derive(Clone, Debug, Args)]
pub struct RateLimitArgs {
    /// Requests per minute one API key may sustain (its bucket's refill rate).
    #[arg(long, env = "LECTERN_RATE_LIMIT_PER_MINUTE", default_value_t = NonZeroU32::new(600).unwrap_or(NonZeroU32::MIN))]
    pub rate_limit_per_minute: NonZeroU32,
    /// Requests one API key may send at once (its bucket's size).
    #[arg(long, env = "LECTERN_RATE_LIMIT_BURST", default_value_t = NonZeroU32::new(100).unwrap_or(NonZeroU32::MIN))]
    pub rate_limit_burst: NonZeroU32,
    /// Key lookups per minute that one client address may make for keys not yet cached
    /// (each one a database query): caps floods of made-up keys.
    #[arg(long, env = "LECTERN_KEY_LOOKUPS_PER_MINUTE", default_value_t = NonZeroU32::new(120).unwrap_or(NonZeroU32::MIN))]
    pub key_lookups_per_minute: NonZeroU32,
    /// Uncached key lookups one client address may make at once.
    #[arg(long, env = "LECTERN_KEY_LOOKUP_BURST", default_value_t = NonZeroU32::new(30).unwrap_or(NonZeroU32::MIN))]
    pub key_lookup_burst: NonZeroU32,
}

impl RateLimitArgs {
    /// Each key's bucket.
    pub fn per_key(&self) -> Policy {
        Policy { per_minute: self.rate_limit_per_minute, burst: self.rate_limit_burst }
    }

    /// Each client address's bucket of failed key lookups.
    pub fn lookups_per_address(&self) -> Policy {
        Policy { per_minute: self.key_lookups_per_minute, burst: self.key_lookup_burst }
    }
}

/// The server's secrets.
#[derive(Clone, Debug, Args)]
pub struct SecretArgs {
    /// Pepper under which key secrets are hashed (HMAC-SHA256); at least 32 bytes in production.
    #[arg(long, env = "LECTERN_KEY_PEPPER", value_parser = secret, hide_env_values = true)]
    pub key_pepper: Option<SecretString>,
    /// Key peppers being rotated out (comma-separated in the variable): a key hashed under
    /// any of them still authenticates, and is hashed again under --key-pepper when used.
    /// Keep a retired pepper here until `keys list` shows no key depending on it.
    #[arg(
        long = "previous-key-peppers",
        env = "LECTERN_PREVIOUS_KEY_PEPPERS",
        value_parser = secret,
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub previous_key_peppers: Vec<SecretString>,
    /// Secret that signs cursors and sync tokens (HMAC-SHA256); at least 32 bytes in production.
    /// Sync tokens never expire: rotate it only as the operations guide says (with
    /// --previous-cursor-secrets), or every integration starts over.
    #[arg(long, env = "LECTERN_CURSOR_SECRET", value_parser = secret, hide_env_values = true)]
    pub cursor_secret: Option<SecretString>,
    /// Cursor secrets being rotated out (comma-separated in the variable): cursors and sync
    /// tokens signed with any of them are still accepted; every new one is signed with
    /// --cursor-secret. Keep a retired secret here until
    /// lectern_api_previous_cursor_secret_verifications_total for it stops moving.
    #[arg(
        long = "previous-cursor-secrets",
        env = "LECTERN_PREVIOUS_CURSOR_SECRETS",
        value_parser = secret,
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub previous_cursor_secrets: Vec<SecretString>,
    /// Production mode: refuse to start without real secrets (set LECTERN_PRODUCTION=1).
    #[arg(long, env = "LECTERN_PRODUCTION", value_parser = clap::builder::BoolishValueParser::new())]
    pub production: bool,
}

impl SecretArgs {
    pub fn pepper(&self) -> Result<Pepper, CommandError> {
        resolve_current(self.key_pepper.as_ref(), "--key-pepper/LECTERN_KEY_PEPPER", DEV_KEY_PEPPER, self.production)
            .map(Pepper::new)
    }

    /// The retired key peppers whose keys still authenticate; each held to the current
    /// pepper's rules.
    pub fn previous_peppers(&self) -> Result<Vec<Pepper>, CommandError> {
        let setting = "--previous-key-peppers/LECTERN_PREVIOUS_KEY_PEPPERS";
        let previous = resolve_previous(&self.previous_key_peppers, setting, DEV_KEY_PEPPER, self.production)?;
        Ok(previous.into_iter().map(Pepper::new).collect())
    }

    /// The current pepper and the previous ones.
    pub fn peppers(&self) -> Result<Peppers, CommandError> {
        Ok(Peppers::new(self.pepper()?, self.previous_peppers()?))
    }

    /// The retired cursor secrets whose cursors and tokens still open; each held to the
    /// current secret's rules.
    pub fn previous_cursor_secrets(&self) -> Result<Vec<SecretString>, CommandError> {
        let setting = "--previous-cursor-secrets/LECTERN_PREVIOUS_CURSOR_SECRETS";
        resolve_previous(&self.previous_cursor_secrets, setting, DEV_CURSOR_SECRET, self.production)
    }

    pub fn cursor_secret(&self) -> Result<SecretString, CommandError> {
        resolve_current(
            self.cursor_secret.as_ref(),
            "--cursor-secret/LECTERN_CURSOR_SECRET",
            DEV_CURSOR_SECRET,
            self.production,
        )
    }
}

/// The secret in use now: [`resolve`]'s rules, and no comma. The list of previous ones is
/// comma-separated, so a secret holding one could never be listed there once rotated out:
/// it would be split into two that match nothing, and every key (or token) under it
/// refused at once.
fn resolve_current(
    given: Option<&SecretString>,
    setting: &'static str,
    development: &str,
    production: bool,
) -> Result<SecretString, CommandError> {
    let secret = resolve(given, setting, development, production)?;
    if secret.expose_secret().contains(',') {
        return Err(CommandError::Config {
            setting,
            problem: "must not contain a comma: the list of previous values it is moved to when rotated out is \
                      comma-separated (generate one with `openssl rand -base64 48`)"
                .to_owned(),
        });
    }
    Ok(secret)
}

/// The secrets a setting lists as being rotated out, each held to the rules of the
/// current one (`resolve`).
fn resolve_previous(
    listed: &[SecretString],
    setting: &'static str,
    development: &str,
    production: bool,
) -> Result<Vec<SecretString>, CommandError> {
    listed
        .iter()
        // An empty variable lists none.
        .filter(|previous| !previous.expose_secret().is_empty())
        .map(|previous| resolve(Some(previous), setting, development, production))
        .collect()
}

fn resolve(
    given: Option<&SecretString>,
    setting: &'static str,
    development: &str,
    production: bool,
) -> Result<SecretString, CommandError> {
    match given {
        Some(value) if production && value.expose_secret() == development => Err(CommandError::Config {
            setting,
            problem: "the public development value cannot be used in production".to_owned(),
        }),
        Some(value) if production && value.expose_secret().len() < MIN_SECRET_LEN => Err(CommandError::Config {
            setting,
            problem: format!("must be at least {MIN_SECRET_LEN} bytes in production"),
        }),
        Some(value) if value.expose_secret().is_empty() => {
            Err(CommandError::Config { setting, problem: "must not be empty".to_owned() })
        }
        Some(value) => Ok(value.clone()),
        None if production => {
            Err(CommandError::Config { setting, problem: "is required when LECTERN_PRODUCTION is set".to_owned() })
        }
        None => {
            if first_warning_for(setting) {
                tracing::warn!(
                    "{setting} is not set: using the PUBLIC DEVELOPMENT DEFAULT. Anyone can forge with it. \
                     Set it (and LECTERN_PRODUCTION=1) in any real deployment."
                );
            }
            Ok(SecretString::from(development.to_owned()))
        }
    }
}

/// `lectern-dev` resolves the pepper twice (for the key it prints, then for serving): one
/// warning per setting is what an operator should read, not one per lookup.
fn first_warning_for(setting: &'static str) -> bool {
    static WARNED: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());
    let mut warned = WARNED.lock().unwrap_or_else(PoisonError::into_inner);
    let first = !warned.contains(&setting);
    if first {
        warned.push(setting);
    }
    first
}

/// Everything `serve` needs.
#[derive(Clone, Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub database: DatabaseArgs,
    #[command(flatten)]
    pub pool: PoolArgs,
    #[command(flatten)]
    pub replicas: ReplicaArgs,
    #[command(flatten)]
    pub secrets: SecretArgs,
    #[command(flatten)]
    pub rate_limits: RateLimitArgs,
    #[command(flatten)]
    pub webhooks: WebhookArgs,
    /// Address the public HTTP API listens on.
    #[arg(long, env = "LECTERN_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Address of the operations listener (/metrics, /healthz, /readyz); keep it private.
    #[arg(long, env = "LECTERN_METRICS_LISTEN", default_value = "127.0.0.1:9464")]
    pub metrics_listen: SocketAddr,
    /// Which keys this deployment serves: `live` or `test` (keys of the other are 401).
    #[arg(long, env = "LECTERN_ENVIRONMENT", value_enum, default_value_t = Environment::Live)]
    pub environment: Environment,
    /// Open client connections at most; past it new ones are closed at once.
    #[arg(long, env = "LECTERN_MAX_CONNECTIONS", default_value_t = 4_096, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max_connections: u32,
    /// Milliseconds a connection has to complete a request head, from its accept and from the end of its last response (silent, slow and idle connections are closed; HTTP/2 is pinged as often).
    #[arg(long, env = "LECTERN_HEADER_READ_TIMEOUT_MS", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(100..=600_000))]
    pub header_read_timeout_ms: u64,
    /// Milliseconds `serve` keeps accepting and serving after SIGTERM while `/readyz`
    /// answers 503, so that load balancers move traffic away before the listener closes;
    /// then it stops accepting and finishes what is in flight. Default 5000 (`lectern-dev`:
    /// 0). Set it above your load balancer's readiness interval times its failure threshold.
    #[arg(long, env = "LECTERN_SHUTDOWN_GRACE_MS", value_parser = clap::value_parser!(u64).range(0..=600_000))]
    pub shutdown_grace_ms: Option<u64>,
    /// Seconds a cursor stays valid after it is issued.
    #[arg(long, env = "LECTERN_CURSOR_LIFETIME_SECS", default_value_t = 86_400, value_parser = clap::value_parser!(u64).range(1..=2_592_000))]
    pub cursor_lifetime_secs: u64,
    /// Issue sync tokens in the format the release before this one reads, without the
    /// database history they were issued in: only while processes of that release still
    /// serve beside this one (a rolling upgrade), which refuse this release's tokens.
    #[arg(long, env = "LECTERN_SYNC_TOKENS_IN_PREVIOUS_FORMAT", value_parser = clap::builder::BoolishValueParser::new())]
    pub sync_tokens_in_previous_format: bool,
    /// Searches in workspaces with fewer active records than this walk them in order on
    /// one generic plan instead of being planned for each term; 0 turns walks off.
    #[arg(long, env = "LECTERN_SEARCH_WALK_BELOW", default_value_t = WalkSettings::default().below_rows)]
    pub search_walk_below: u32,
    /// Seconds a workspace's counted size decides its searches before it is counted again.
    #[arg(long, env = "LECTERN_WORKSPACE_RECOUNT_SECS", default_value_t = WalkSettings::default().recount_after.as_secs(), value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub workspace_recount_secs: u64,
}

impl ServeArgs {
    /// What the application state is built from; fails on a missing or unusable secret.
    pub fn app_settings(&self) -> Result<AppSettings, CommandError> {
        let reads = self.pool.settings();
        let replicas = self
            .replicas
            .read_database_urls
            .iter()
            .map(|url| {
                ReplicaTarget::from_url(url, &reads).map_err(|source| CommandError::Config {
                    setting: "--read-database-url/LECTERN_READ_DATABASE_URL",
                    problem: format!("{} is not a usable PostgreSQL URL: {source}", crate::reads::redacted(url)),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(AppSettings {
            reads,
            replicas,
            max_replica_lag: Duration::from_millis(self.replicas.max_replica_lag_ms),
            pepper: self.secrets.pepper()?,
            previous_peppers: self.secrets.previous_peppers()?,
            environment: self.environment,
            cursor_secret: self.secrets.cursor_secret()?,
            previous_cursor_secrets: self.secrets.previous_cursor_secrets()?,
            cursor_lifetime: Duration::from_secs(self.cursor_lifetime_secs),
            sync_tokens_in_previous_format: self.sync_tokens_in_previous_format,
            per_key: self.rate_limits.per_key(),
            lookups_per_address: self.rate_limits.lookups_per_address(),
            walks: self.walk_settings(),
            webhooks: self.webhooks.settings(),
        })
    }

    /// When searches walk a workspace.
    pub fn walk_settings(&self) -> WalkSettings {
        WalkSettings {
            below_rows: self.search_walk_below,
            recount_after: Duration::from_secs(self.workspace_recount_secs),
        }
    }
}

/// Where webhook deliveries may go (`serve` and `webhooks create` both check).
#[derive(Clone, Copy, Debug, Args)]
pub struct WebhookTargetArgs {
    /// Let webhooks reach loopback, private and link-local addresses, and plain http: for
    /// receivers on this machine or a private network. Off by default, so that a URL
    /// someone asks you to register cannot reach your own network.
    #[arg(
        long = "webhooks-allow-private-targets",
        env = "LECTERN_WEBHOOKS_ALLOW_PRIVATE_TARGETS",
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub allow_private_targets: bool,
}

impl WebhookTargetArgs {
    pub fn policy(self) -> crate::webhooks::TargetPolicy {
        crate::webhooks::TargetPolicy { allow_private: self.allow_private_targets }
    }
}

/// How `serve` delivers webhooks.
#[derive(Clone, Copy, Debug, Args)]
pub struct WebhookArgs {
    #[command(flatten)]
    pub targets: WebhookTargetArgs,
    /// Milliseconds one delivery attempt may take, connecting included, before it counts as failed.
    #[arg(long, env = "LECTERN_WEBHOOK_TIMEOUT_MS", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(100..=60_000))]
    pub webhook_timeout_ms: u64,
    /// Milliseconds before a failed delivery is first retried; each later retry waits twice as long (with jitter), at most an hour.
    #[arg(long, env = "LECTERN_WEBHOOK_FIRST_RETRY_MS", default_value_t = 5_000, value_parser = clap::value_parser!(u64).range(10..=3_600_000))]
    pub webhook_first_retry_ms: u64,
    /// Seconds a delivery is retried before its endpoint is disabled (default three days).
    #[arg(long, env = "LECTERN_WEBHOOK_RETRY_FOR_SECS", default_value_t = 259_200, value_parser = clap::value_parser!(u64).range(1..=2_592_000))]
    pub webhook_retry_for_secs: u64,
    /// Milliseconds a process's claim on an endpoint lasts unrenewed: how soon another
    /// `serve` process takes over the deliveries of one that died.
    #[arg(long, env = "LECTERN_WEBHOOK_LEASE_MS", default_value_t = 15_000, value_parser = clap::value_parser!(u64).range(300..=600_000))]
    pub webhook_lease_ms: u64,
}

impl WebhookArgs {
    pub fn settings(&self) -> crate::webhooks::WebhookSettings {
        crate::webhooks::WebhookSettings {
            policy: self.targets.policy(),
            timeout: Duration::from_millis(self.webhook_timeout_ms),
            first_retry: Duration::from_millis(self.webhook_first_retry_ms),
            retry_for: Duration::from_secs(self.webhook_retry_for_secs),
            lease: Duration::from_millis(self.webhook_lease_ms),
        }
    }
}
