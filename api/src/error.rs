//! The API's one error type. Each variant's doc names the status and contract code it
//! becomes; [`crate::http::envelope`] renders them all in the contract's error shape.

use std::sync::Arc;

use poem::http::StatusCode;

/// A feature's reason for a refusal, kept as the error's source: features convert their
/// own errors into [`ApiError`], so this type knows none of them.
pub type Refusal = Box<dyn std::error::Error + Send + Sync>;

/// Everything a request can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 400 `VALIDATION_ERROR`: the request is malformed; `details` names each problem.
    #[error("{message}")]
    Validation { message: String, details: Vec<String> },
    /// 400 `VALIDATION_ERROR`: the feed cannot continue from `since`; `details` says so in
    /// a form a client can act on without reading the text: start over without `since`.
    /// The refusal is the feed's (its text completes the sentence).
    #[error("Invalid request: `since` {0}")]
    SinceRefused(#[source] Refusal),
    /// 401 `UNAUTHORIZED`: no usable API key. The text never repeats the key.
    #[error("{0}")]
    Unauthorized(&'static str),
    /// 403 `FORBIDDEN`: a valid key without the route's scope.
    #[error("{0}")]
    Forbidden(String),
    /// 404 `NOT_FOUND`: no such route, or no such record visible to this key.
    #[error("{0}")]
    NotFound(String),
    /// 405, 406, 413, 415 and other 4xx: `REQUEST_FAILED`.
    #[error("{message}")]
    RequestFailed { status: StatusCode, message: String },
    /// 429 `RATE_LIMITED`: the key's bucket (or the client address's key lookups) is
    /// empty; `Retry-After` says when to come back.
    #[error(
        "Too many requests: rate limit exceeded; retry after {retry_after_secs} s (see Retry-After and RateLimit)."
    )]
    RateLimited { retry_after_secs: u64 },
    /// 429 `RATE_LIMITED`: the workspace already runs its share of statements at once
    /// (see `reads::workspace_shares`); `Retry-After` is a second.
    #[error("Too many requests at once for this workspace: its statements use its whole share of the database; retry after 1 s.")]
    WorkspaceBusy,
    /// 429 `RATE_LIMITED`: the workspace already has its most requests waiting on its
    /// changes feeds (see `feed::heads::WAITING_PER_WORKSPACE`); `Retry-After` is a second.
    #[error(
        "Too many requests waiting at once for this workspace: {0} feed requests with `wait` are held already; \
         retry after 1 s, or without `wait`."
    )]
    TooManyWaiting(usize),
    /// 503 `SERVICE_UNAVAILABLE`: the database is unreachable or saturated; retry later.
    /// Shared, because one failed statement may answer a whole batch of lookups.
    #[error("the database is unavailable")]
    Unavailable(#[source] Arc<sqlx::Error>),
    /// 503 `SERVICE_UNAVAILABLE`: a request that would wait arrived while this process
    /// shuts down; `Retry-After` (a second) sends it to a process that stays. Answering it
    /// at once and empty, as waiting requests are, would make a client's loop spin.
    #[error(
        "This server is shutting down and holds no new waiting request; retry after the time in Retry-After \
         (another server answers it)."
    )]
    ShuttingDown,
    /// 500 `INTERNAL_ERROR`: a bug or an unexpected database answer. The cause is
    /// logged, never sent.
    #[error("internal error")]
    Internal(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// The contract's error codes (the description's list, in its order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, poem_openapi::Enum)]
#[oai(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ErrorCode {
    ValidationError,
    Unauthorized,
    Forbidden,
    NotFound,
    Conflict,
    UnprocessableEntity,
    PlanLimitReached,
    BooksLocked,
    IdempotencyConflict,
    RateLimited,
    ServiceUnavailable,
    RequestFailed,
    InternalError,
}

impl ApiError {
    /// A single-problem validation error naming its parameter.
    pub fn invalid(parameter: &str, problem: impl std::fmt::Display) -> Self {
        Self::Validation {
            message: format!("Invalid request: `{parameter}` {problem}"),
            details: vec![format!("{parameter}: {problem}")],
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            Self::Validation { .. } | Self::SinceRefused(_) => StatusCode::BAD_REQUEST,
            Self::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            Self::Forbidden(_) => StatusCode::FORBIDDEN,
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::RateLimited { .. } | Self::WorkspaceBusy | Self::TooManyWaiting(_) => StatusCode::TOO_MANY_REQUESTS,
            Self::RequestFailed { status, .. } => *status,
            Self::Unavailable(_) | Self::ShuttingDown => StatusCode::SERVICE_UNAVAILABLE,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    pub fn code(&self) -> ErrorCode {
        code_for_status(self.status())
    }

    /// What the client is told: never a cause chain, never input echoed back unbounded.
    pub fn public_message(&self) -> String {
        match self {
            Self::Unavailable(_) => {
                "The service is temporarily unavailable; retry after the time in Retry-After.".to_owned()
            }
            Self::Internal(_) => "An unexpected error occurred; it has been logged.".to_owned(),
            other => other.to_string(),
        }
    }

    pub fn details(&self) -> Option<ErrorDetails> {
        match self {
            Self::Validation { details, .. } if !details.is_empty() => Some(ErrorDetails::Problems(details.clone())),
            Self::SinceRefused(problem) => Some(ErrorDetails::RefusedSyncToken(RefusedSyncToken::new(problem))),
            _ => None,
        }
    }
}

/// `details` of an error response: the problems, one per entry, each naming its parameter;
/// or, when the feed cannot continue from a sync token, what the client is to do.
#[derive(Clone, Debug, PartialEq, Eq, poem_openapi::Union)]
#[oai(one_of)]
pub enum ErrorDetails {
    Problems(Vec<String>),
    RefusedSyncToken(RefusedSyncToken),
}

/// The feed cannot continue from `since`: the token is not one of this feed's, or the
/// database no longer holds what it was issued after (a restore to an earlier point).
/// Whatever the cause, the client discards the records it synced and syncs again from the
/// beginning (no `since`); nothing else will make the feed answer it.
#[derive(Clone, Debug, PartialEq, Eq, poem_openapi::Object)]
#[oai(rename_all = "camelCase", deny_unknown_fields)]
pub struct RefusedSyncToken {
    /// Always `since`: the parameter refused.
    pub parameter: String,
    /// Why, in words, and what to do.
    pub problem: String,
    /// Always true: sync again from the beginning, without `since`.
    pub start_over: bool,
}

impl RefusedSyncToken {
    fn new(problem: &Refusal) -> Self {
        Self { parameter: "since".to_owned(), problem: problem.to_string(), start_over: true }
    }
}

/// An error and its causes, for a log line.
pub fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The status ↔ code table of `docs/api.md` ("Statuses and codes"), for errors that only have a status (poem's own).
pub fn code_for_status(status: StatusCode) -> ErrorCode {
    match status.as_u16() {
        400 => ErrorCode::ValidationError,
        401 => ErrorCode::Unauthorized,
        402 => ErrorCode::PlanLimitReached,
        403 => ErrorCode::Forbidden,
        404 => ErrorCode::NotFound,
        409 => ErrorCode::Conflict,
        422 => ErrorCode::UnprocessableEntity,
        423 => ErrorCode::BooksLocked,
        429 => ErrorCode::RateLimited,
        503 => ErrorCode::ServiceUnavailable,
        _ if status.is_client_error() => ErrorCode::RequestFailed,
        _ => ErrorCode::InternalError,
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(error: sqlx::Error) -> Self {
        Arc::new(error).into()
    }
}

impl From<Arc<sqlx::Error>> for ApiError {
    fn from(error: Arc<sqlx::Error>) -> Self {
        if crate::reads::is_unavailable(&error) {
            Self::Unavailable(error)
        } else {
            Self::Internal(Box::new(error))
        }
    }
}

impl From<crate::reads::connections::ReadError> for ApiError {
    fn from(error: crate::reads::connections::ReadError) -> Self {
        match error {
            crate::reads::connections::ReadError::Database(error) => error.into(),
            crate::reads::connections::ReadError::ShareExhausted(_) => Self::WorkspaceBusy,
        }
    }
}

/// Text PostgreSQL sent that is not UTF-8: only a database in another encoding than
/// Lectern's migrations expect could hold it.
impl From<std::str::Utf8Error> for ApiError {
    fn from(error: std::str::Utf8Error) -> Self {
        Self::Internal(Box::new(error))
    }
}

impl poem::error::ResponseError for ApiError {
    fn status(&self) -> StatusCode {
        ApiError::status(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_code_table_matches_the_documented_one() {
        let table = [
            (400, ErrorCode::ValidationError),
            (401, ErrorCode::Unauthorized),
            (402, ErrorCode::PlanLimitReached),
            (403, ErrorCode::Forbidden),
            (404, ErrorCode::NotFound),
            (405, ErrorCode::RequestFailed),
            (406, ErrorCode::RequestFailed),
            (409, ErrorCode::Conflict),
            (413, ErrorCode::RequestFailed),
            (415, ErrorCode::RequestFailed),
            (422, ErrorCode::UnprocessableEntity),
            (423, ErrorCode::BooksLocked),
            (429, ErrorCode::RateLimited),
            (500, ErrorCode::InternalError),
            (503, ErrorCode::ServiceUnavailable),
        ];
        for (status, code) in table {
            assert_eq!(code_for_status(StatusCode::from_u16(status).unwrap()), code, "{status}");
        }
    }

    #[test]
    fn internal_and_unavailable_messages_hide_the_cause() {
        let error = ApiError::Internal("secret connection string".into());
        assert!(!error.public_message().contains("secret"));
        let error = ApiError::Unavailable(Arc::new(sqlx::Error::PoolTimedOut));
        assert!(!error.public_message().contains("pool"));
    }
}

/// Why a command of the `lectern-api` binary failed; printed as one line, exit code 1.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// A setting is missing or unusable.
    #[error("{setting}: {problem}")]
    Config { setting: &'static str, problem: String },
    /// The database could not be reached or refused the work.
    #[error("database {url}: {source}")]
    Database {
        /// Redacted: never contains a password.
        url: String,
        #[source]
        source: sqlx::Error,
    },
    /// Migrations could not be applied.
    #[error("migrating {url}: {source}")]
    Migrate {
        url: String,
        #[source]
        source: sqlx::migrate::MigrateError,
    },
    /// A listen address could not be bound.
    #[error("{setting} {address}: {source}")]
    Listen {
        setting: &'static str,
        address: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
    /// The server at `address` stopped with an I/O error.
    #[error("serving HTTP on {address}: {source}")]
    Serve {
        address: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
    /// `keys revoke` was given an id that does not exist.
    #[error("no API key with id {0}")]
    NoSuchKey(String),
    /// `webhooks` was given an endpoint id that does not exist.
    #[error("no webhook endpoint with id {0}")]
    NoSuchEndpoint(uuid::Uuid),
    /// `webhooks redeliver` was given a delivery id that does not exist.
    #[error("no webhook delivery with id {0}")]
    NoSuchDelivery(String),
    /// `webhooks redeliver` found another delivery of the same endpoint and resource pending.
    #[error(
        "delivery {pending} of the same endpoint and resource is pending and announces the same changes: nothing was scheduled (see `webhooks deliveries`)"
    )]
    DeliveryPending { pending: String },
    /// A command refused its input or the state it found (a webhook URL deliveries may not
    /// go to, a sealed secret the configured peppers do not open): `what` names it.
    #[error("{what}: {source}")]
    Refused {
        what: &'static str,
        #[source]
        source: Refusal,
    },
    /// `healthcheck` found the service unhealthy or unreachable.
    #[error("unhealthy: {0}")]
    Unhealthy(#[source] lectern_runtime::probe::ProbeError),
    /// Writing the command's output failed.
    #[error("writing output: {0}")]
    Output(#[source] std::io::Error),
    /// A value could not be written as JSON.
    #[error("encoding JSON: {0}")]
    Encoding(#[source] serde_json::Error),
}
