//! The `CHANGES` stream and the durable pull consumer all projectors share.

use std::time::Duration;

use async_nats::jetstream::consumer::{self, FromConsumer};
use async_nats::jetstream::{self, stream};
use async_nats::ServerAddr;
use lectern_runtime::nats_servers_without_credentials;

use crate::error::ProjectorError;

/// The stream upstream systems publish to (`docs/events.md`, "Where to publish").
pub const STREAM: &str = "CHANGES";
/// Every change subject: `changes.<workspace>.<contacts|items>.<id>`.
pub const SUBJECTS: &str = "changes.>";
/// The durable consumer every projector process pulls from, so they share the work.
pub const CONSUMER: &str = "lectern-projector";
/// How long a delivered message may go without an ack or a progress ack before JetStream
/// redelivers it. Short, so that what a killed projector had in hand comes back within
/// seconds rather than after JetStream's default half minute; what a live projector has
/// in hand is kept alive with progress acks ([`crate::daemon::in_hand`]).
pub const ACK_WAIT: Duration = Duration::from_secs(5);

/// Which `CHANGES` stream a sequence is of: the stream's creation time, in nanoseconds
/// since 1970, as JetStream reports it. A stream deleted and created again numbers its
/// messages from 1 again; its creation time tells its sequences from the old one's
/// (`read_model_applied.stream`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamId(i64);

impl StreamId {
    /// The stream the ledger followed before streams were named: what its rows from then say.
    pub const UNNAMED: Self = Self(0);

    /// The stream `info` describes.
    pub fn of(info: &stream::Info) -> Self {
        Self(i64::try_from(info.created.unix_timestamp_nanos()).unwrap_or(i64::MAX))
    }

    pub fn from_nanos(nanos: i64) -> Self {
        Self(nanos)
    }

    pub fn nanos(self) -> i64 {
        self.0
    }
}

impl std::fmt::Display for StreamId {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0 == 0 {
            return write!(formatter, "{STREAM} (before streams were named)");
        }
        let created = chrono::DateTime::from_timestamp_nanos(self.0);
        write!(formatter, "{STREAM} created {}", created.to_rfc3339_opts(chrono::SecondsFormat::Nanos, true))
    }
}

/// The setting that names the NATS servers, for messages.
const NATS_URL_SETTING: &str = "--nats-url/NATS_URL";
/// Copies of `CHANGES` unless told otherwise: one server, one copy.
pub const DEFAULT_STREAM_REPLICAS: usize = 1;
/// Most replicas a JetStream stream may have.
pub const MAX_STREAM_REPLICAS: usize = 5;

/// The servers `urls` names: one NATS URL, or a comma-separated list of a cluster's
/// servers (async-nats reads a string as a single server).
pub fn servers(urls: &str) -> Result<Vec<ServerAddr>, ProjectorError> {
    let servers = urls
        .split(',')
        .map(str::trim)
        .filter(|url| !url.is_empty())
        .map(|url| {
            url.parse::<ServerAddr>().map_err(|error| ProjectorError::Config {
                setting: NATS_URL_SETTING,
                problem: format!("{} is not a NATS server URL: {error}", nats_servers_without_credentials(url)),
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    if servers.is_empty() {
        return Err(ProjectorError::Config { setting: NATS_URL_SETTING, problem: "names no server".to_owned() });
    }
    Ok(servers)
}

/// Connects to the NATS servers `urls` names and keeps reconnecting, to any of them or
/// to the other servers of their cluster, for as long as the process lives; the
/// connection's losses and returns are logged and shown by a gauge.
pub async fn connect(urls: &str) -> Result<async_nats::Client, ProjectorError> {
    let options = crate::connections::watch_nats(async_nats::ConnectOptions::new());
    connect_with(urls, options.retry_on_initial_connect()).await
}

/// Connects once to one of the servers `urls` names, for a command that should say at
/// once when none answers.
pub async fn connect_once(urls: &str) -> Result<async_nats::Client, ProjectorError> {
    connect_with(urls, async_nats::ConnectOptions::new()).await
}

async fn connect_with(urls: &str, options: async_nats::ConnectOptions) -> Result<async_nats::Client, ProjectorError> {
    options.name("lectern-projector").connect(servers(urls)?).await.map_err(ProjectorError::nats_connect(urls))
}

/// Creates the stream with `replicas` copies (one per server, up to the cluster's size)
/// if it is missing. An existing stream is left as its operators set it.
pub async fn ensure_stream(jetstream: &jetstream::Context, replicas: usize) -> Result<stream::Stream, ProjectorError> {
    let stream = match create_stream(jetstream, replicas).await {
        Ok(stream) => stream,
        // Two processes starting together both see no stream and both create it; the
        // loser's create fails, and the stream it wanted now exists. Otherwise the
        // create's error is the one that explains the missing stream.
        Err(error) => jetstream.get_stream(STREAM).await.map_err(|_| error)?,
    };
    let kept = stream.cached_info().config.num_replicas;
    if kept != replicas {
        tracing::warn!(
            stream = STREAM,
            replicas = kept,
            asked = replicas,
            "the stream exists with another replica count, which is kept (change it with `nats stream edit`)"
        );
    }
    Ok(stream)
}

async fn create_stream(jetstream: &jetstream::Context, replicas: usize) -> Result<stream::Stream, ProjectorError> {
    jetstream
        .get_or_create_stream(stream::Config {
            name: STREAM.to_owned(),
            subjects: vec![SUBJECTS.to_owned()],
            storage: stream::StorageType::File,
            num_replicas: replicas,
            // Duplicate publishes of one event (same Nats-Msg-Id = eventId) within
            // this window are stored once.
            duplicate_window: Duration::from_secs(120),
            ..Default::default()
        })
        .await
        .map_err(ProjectorError::nats("creating the CHANGES stream"))
}

/// The durable consumer, created on first use. One that exists already keeps the settings
/// it was created with, operators' changes included, except its ack wait: a consumer
/// created by an earlier version waits 30 s, and the redelivery bound after a crash
/// holds only with [`ACK_WAIT`].
pub async fn ensure_consumer(stream: &stream::Stream) -> Result<consumer::PullConsumer, ProjectorError> {
    let consumer = stream
        .get_or_create_consumer(
            CONSUMER,
            consumer::pull::Config {
                durable_name: Some(CONSUMER.to_owned()),
                ack_policy: consumer::AckPolicy::Explicit,
                ack_wait: ACK_WAIT,
                max_ack_pending: 20_000,
                // No filter subject, though the stream holds only `SUBJECTS`: with one,
                // NATS 2.9 handed a backlog of 10,000 out at 20 to 50 messages a second,
                // nats-server at a full core (a rebuild under load stalled so in 5 of 44
                // test runs with the filter, 0 of 24 without). Why its filtered path is
                // that slow here was seen from outside, not read in the server's code.
                ..Default::default()
            },
        )
        .await
        .map_err(ProjectorError::nats("creating the durable consumer"))?;
    if consumer.cached_info().config.ack_wait == ACK_WAIT {
        return Ok(consumer);
    }
    let mut config = consumer.cached_info().config.clone();
    tracing::info!(from = ?config.ack_wait, to = ?ACK_WAIT, "setting the consumer's ack wait to the one progress acks keep");
    config.ack_wait = ACK_WAIT;
    let config = consumer::pull::Config::try_from_consumer_config(config)
        .map_err(ProjectorError::nats("reading the consumer's settings as a pull consumer's"))?;
    stream.update_consumer(config).await.map_err(ProjectorError::nats("updating the consumer's ack wait"))
}

#[cfg(test)]
mod tests {
    use super::servers;

    #[test]
    fn a_comma_separated_nats_url_names_every_server_of_the_cluster() {
        let listed = servers("nats://10.0.0.1:4222, nats://10.0.0.2:4222,nats://user:pass@10.0.0.3:4222")
            .expect("three servers");
        let hosts: Vec<String> = listed.iter().map(|server| format!("{}:{}", server.host(), server.port())).collect();
        assert_eq!(hosts, ["10.0.0.1:4222", "10.0.0.2:4222", "10.0.0.3:4222"]);
    }

    #[test]
    fn a_nats_url_naming_no_server_or_a_bad_one_is_refused_naming_the_setting_without_credentials() {
        for (urls, expected) in [(" , ", "names no server"), ("nats://user:secret@host:notaport", "REDACTED@")] {
            let error = servers(urls).expect_err("refused").to_string();
            assert!(error.contains("NATS_URL") && error.contains(expected), "{urls}: {error}");
            assert!(!error.contains("secret"), "a password in an error: {error}");
        }
    }
}
