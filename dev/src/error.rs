//! `lectern-dev`'s one error type; each failure is printed as one line, exit code 1.

use lectern_api::error::CommandError;
use lectern_projector::error::ProjectorError;

/// Why the local stack, or publishing the demo, failed.
#[derive(Debug, thiserror::Error)]
pub enum DevError {
    /// The API's part: settings, the database, binding, serving.
    #[error(transparent)]
    Api(#[from] CommandError),
    /// NATS could not be reached at `url` (its credentials left out).
    #[error(
        "cannot connect to NATS at {url}: `lectern-dev` needs NATS with JetStream (`nats-server -js`) \
         to publish and project the demo data (--nats-url/NATS_URL)"
    )]
    Connect {
        url: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// `--nats-url`/`NATS_URL` names no server, or one that is no NATS URL.
    #[error(transparent)]
    NatsUrl(ProjectorError),
    /// The `CHANGES` stream could not be found or created (the projector's error says
    /// which, and why).
    #[error(transparent)]
    Stream(ProjectorError),
    /// JetStream refused or dropped what `doing` describes.
    #[error("{doing}")]
    Nats {
        doing: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}
