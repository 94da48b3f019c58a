//! The projector's one error type. Each variant says whether it is worth retrying.

/// What can go wrong outside the contract (contract violations are dead letters).
#[derive(Debug, thiserror::Error)]
pub enum ProjectorError {
    /// PostgreSQL refused or could not be reached.
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    /// NATS or JetStream refused, or could not be reached, while doing `action`.
    #[error("NATS, {action}: {source}")]
    Nats {
        /// What was being done, as "NATS, reading the stream's info: …" reads.
        action: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// No connection to the NATS server at `url` could be made.
    #[error("connecting to NATS at {url}: {source}")]
    NatsConnect {
        /// As configured, any user, password or token redacted.
        url: String,
        #[source]
        source: async_nats::ConnectError,
    },
    /// A setting is unusable.
    #[error("{setting}: {problem}")]
    Config { setting: &'static str, problem: String },
    /// A command was given something it cannot use.
    #[error("{0}")]
    Usage(String),
    /// `dead-letters retry` left letters that still break the contract: a script or an
    /// operator must not read its success as "nothing left to fix".
    #[error("{0} dead letter(s) still break the contract; correct the events upstream and publish them again")]
    DeadLettersStillFail(usize),
    /// `status` could not read what NATS or PostgreSQL holds (it printed the rest).
    #[error("status is incomplete: {0} could not be read (see the output)")]
    StatusIncomplete(String),
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
    /// An input file, or standard input, could not be read.
    #[error("reading {input}: {source}")]
    Input {
        /// The file's path, or "standard input".
        input: String,
        #[source]
        source: std::io::Error,
    },
    /// Writing the command's output failed.
    #[error("writing output: {0}")]
    Output(#[source] std::io::Error),
    /// A value could not be written as JSON.
    #[error("encoding JSON: {0}")]
    Encoding(#[source] serde_json::Error),
}

impl ProjectorError {
    /// The error of NATS failing at `action`, for `map_err`:
    /// `.map_err(ProjectorError::nats("reading the stream's info"))`.
    pub fn nats<E>(action: &'static str) -> impl FnOnce(E) -> Self
    where
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        move |source| Self::Nats { action, source: source.into() }
    }

    /// The error of connecting to the NATS at `url`, for `map_err`.
    pub fn nats_connect(url: &str) -> impl FnOnce(async_nats::ConnectError) -> Self {
        let url = lectern_runtime::nats_servers_without_credentials(url);
        move |source| Self::NatsConnect { url, source }
    }

    /// Worth retrying: the service may come back. Anything else is a bug or a refusal.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Database(error) => is_transient_database_error(error),
            Self::Nats { .. } | Self::NatsConnect { .. } => true,
            _ => false,
        }
    }
}

pub use lectern_runtime::is_transient_database_error;

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::ProjectorError;

    #[test]
    fn a_nats_error_keeps_its_cause_as_its_source_and_names_what_it_was_doing() {
        let cause = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "connection reset by peer");

        let error = ProjectorError::nats("reading the stream's info")(cause);

        let source = error.source().map(ToString::to_string);
        assert_eq!(source.as_deref(), Some("connection reset by peer"), "{error:?}");
        let text = error.to_string();
        assert!(text.contains("reading the stream's info"), "the action is not named: {text}");
        assert!(text.contains("connection reset by peer"), "the cause is not quoted: {text}");
        assert!(error.is_transient(), "NATS may come back: {text}");
    }
}
