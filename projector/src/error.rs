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

/// Errors that mean "PostgreSQL cannot do this now" rather than "never".
pub fn is_transient_database_error(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Io(_) | sqlx::Error::Tls(_) => true,
        sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => db.code().is_some_and(|code| {
            // 08: connection; 53: resources; 57P: shutdown; 57014: timeout; 40: serialization/deadlock.
            code.starts_with("08")
                || code.starts_with("53")
                || code.starts_with("57P")
                || code == "57014"
                || code.starts_with("40")
        }),
        _ => false,
    }
}
