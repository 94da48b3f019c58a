//! The projector's one error type. Each variant says whether it is worth retrying.

/// What can go wrong outside the contract (contract violations are dead letters).
#[derive(Debug, thiserror::Error)]
pub enum ProjectorError {
    /// PostgreSQL refused or could not be reached.
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    /// NATS or JetStream refused or could not be reached.
    #[error("NATS: {0}")]
    Nats(String),
    /// A setting is unusable.
    #[error("{setting}: {problem}")]
    Config { setting: &'static str, problem: String },
    /// A command was given something it cannot use.
    #[error("{0}")]
    Usage(String),
    /// A listen address could not be bound.
    #[error("{setting} {address}: {source}")]
    Listen {
        setting: &'static str,
        address: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
    /// `healthcheck` found the projector unhealthy or unreachable.
    #[error("unhealthy: {0}")]
    Unhealthy(#[source] lectern_runtime::probe::ProbeError),
    /// Writing the command's output failed.
    #[error("writing output: {0}")]
    Output(#[from] std::io::Error),
}

impl ProjectorError {
    pub fn nats(error: impl std::fmt::Display) -> Self {
        Self::Nats(error.to_string())
    }

    /// Worth retrying: the service may come back. Anything else is a bug or a refusal.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Database(error) => is_transient_database_error(error),
            Self::Nats(_) => true,
            _ => false,
        }
    }
}

pub use lectern_runtime::is_transient_database_error;
