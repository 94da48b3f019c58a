//! The `CHANGES` stream and the durable pull consumer all projectors share.

use std::time::Duration;

use async_nats::jetstream::consumer::{self, FromConsumer};
use async_nats::jetstream::{self, stream};

use crate::error::ProjectorError;

/// The stream upstream systems publish to (decisions.md).
pub const STREAM: &str = "CHANGES";
/// Every change subject: `changes.<workspace>.<contacts|items>.<id>`.
pub const SUBJECTS: &str = "changes.>";
/// The durable consumer every projector process pulls from, so they share the work.
pub const CONSUMER: &str = "lectern-projector";
/// How long a delivered message may go without an ack or a progress ack before JetStream
/// redelivers it. Short, so that what a killed projector had in hand comes back within
/// seconds rather than after JetStream's default half minute; what a live projector has
/// in hand is kept alive with progress acks ([`crate::in_hand`]).
pub const ACK_WAIT: Duration = Duration::from_secs(5);

/// Connects to NATS; the client reconnects by itself for as long as the process lives.
pub async fn connect(url: &str) -> Result<async_nats::Client, ProjectorError> {
    async_nats::ConnectOptions::new()
        .name("lectern-projector")
        .retry_on_initial_connect()
        .connect(url)
        .await
        .map_err(ProjectorError::nats_connect(url))
}

/// Creates the stream if it is missing (an existing one is left as its operators set it).
pub async fn ensure_stream(jetstream: &jetstream::Context) -> Result<stream::Stream, ProjectorError> {
    match create_stream(jetstream).await {
        Ok(stream) => Ok(stream),
        // Two processes starting together both see no stream and both create it; the
        // loser's create fails, and the stream it wanted now exists. Otherwise the
        // create's error is the one that explains the missing stream.
        Err(error) => jetstream.get_stream(STREAM).await.map_err(|_| error),
    }
}

async fn create_stream(jetstream: &jetstream::Context) -> Result<stream::Stream, ProjectorError> {
    jetstream
        .get_or_create_stream(stream::Config {
            name: STREAM.to_owned(),
            subjects: vec![SUBJECTS.to_owned()],
            storage: stream::StorageType::File,
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
                filter_subject: SUBJECTS.to_owned(),
                max_ack_pending: 20_000,
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
