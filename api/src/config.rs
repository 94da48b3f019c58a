//! Settings. Every one is a flag with an environment twin; secrets are wrapped so
//! they cannot be printed, and have development defaults only outside production.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Args;
use secrecy::{ExposeSecret, SecretString};

use crate::db::PoolSettings;
use crate::error::CommandError;
use crate::keys::{Environment, Pepper};

/// Publicly known values so a local run works with no set-up; refused in production.
const DEV_KEY_PEPPER: &str = "lectern-development-key-pepper-not-secret";
const DEV_CURSOR_SECRET: &str = "lectern-development-cursor-secret-not-secret";
/// Shortest secret accepted in production: 32 bytes.
const MIN_SECRET_LEN: usize = 32;

fn secret(text: &str) -> Result<SecretString, String> {
    Ok(SecretString::from(text.to_owned()))
}

/// Where the read model lives.
#[derive(Clone, Debug, Args)]
pub struct DatabaseArgs {
    /// PostgreSQL connection URL; the database is created by `migrate` and `dev` if missing.
    #[arg(
        long,
        env = "DATABASE_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/lectern",
        hide_env_values = true
    )]
    pub database_url: String,
}

/// How the API uses the database.
#[derive(Clone, Debug, Args)]
pub struct PoolArgs {
    /// Most connections the API opens to PostgreSQL.
    #[arg(long, env = "LECTERN_DB_POOL_SIZE", default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub db_pool_size: u32,
    /// Milliseconds a request waits for a free connection before it is answered 503.
    #[arg(long, env = "LECTERN_DB_ACQUIRE_TIMEOUT_MS", default_value_t = 2_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub db_acquire_timeout_ms: u64,
    /// Milliseconds one SQL statement may run before PostgreSQL cancels it (then 503).
    #[arg(long, env = "LECTERN_DB_STATEMENT_TIMEOUT_MS", default_value_t = 5_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub db_statement_timeout_ms: u64,
}

impl PoolArgs {
    pub fn settings(&self) -> PoolSettings {
        PoolSettings {
            max_connections: self.db_pool_size,
            acquire_timeout: Duration::from_millis(self.db_acquire_timeout_ms),
            statement_timeout: Duration::from_millis(self.db_statement_timeout_ms),
        }
    }
}

/// The server's secrets.
#[derive(Clone, Debug, Args)]
pub struct SecretArgs {
    /// Pepper under which key secrets are hashed (HMAC-SHA256); at least 32 bytes in production.
    #[arg(long, env = "LECTERN_KEY_PEPPER", value_parser = secret, hide_env_values = true)]
    pub key_pepper: Option<SecretString>,
    /// Secret that signs cursors (HMAC-SHA256); at least 32 bytes in production.
    #[arg(long, env = "LECTERN_CURSOR_SECRET", value_parser = secret, hide_env_values = true)]
    pub cursor_secret: Option<SecretString>,
    /// Production mode: refuse to start without real secrets (set LECTERN_PRODUCTION=1).
    #[arg(long, env = "LECTERN_PRODUCTION", value_parser = clap::builder::BoolishValueParser::new())]
    pub production: bool,
}

impl SecretArgs {
    pub fn pepper(&self) -> Result<Pepper, CommandError> {
        resolve(self.key_pepper.as_ref(), "--key-pepper/LECTERN_KEY_PEPPER", DEV_KEY_PEPPER, self.production)
            .map(Pepper::new)
    }

    pub fn cursor_secret(&self) -> Result<SecretString, CommandError> {
        resolve(
            self.cursor_secret.as_ref(),
            "--cursor-secret/LECTERN_CURSOR_SECRET",
            DEV_CURSOR_SECRET,
            self.production,
        )
    }
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
            tracing::warn!(
                "{setting} is not set: using the PUBLIC DEVELOPMENT DEFAULT. Anyone can forge with it. \
                 Set it (and LECTERN_PRODUCTION=1) in any real deployment."
            );
            Ok(SecretString::from(development.to_owned()))
        }
    }
}

/// Everything `serve` needs.
#[derive(Clone, Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub database: DatabaseArgs,
    #[command(flatten)]
    pub pool: PoolArgs,
    #[command(flatten)]
    pub secrets: SecretArgs,
    /// Address the public HTTP API listens on.
    #[arg(long, env = "LECTERN_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Which keys this deployment serves: `live` or `test` (keys of the other are 401).
    #[arg(long, env = "LECTERN_ENVIRONMENT", value_enum, default_value_t = Environment::Live)]
    pub environment: Environment,
    /// Seconds a cursor stays valid after it is issued.
    #[arg(long, env = "LECTERN_CURSOR_LIFETIME_SECS", default_value_t = 86_400, value_parser = clap::value_parser!(u64).range(1..=2_592_000))]
    pub cursor_lifetime_secs: u64,
}
