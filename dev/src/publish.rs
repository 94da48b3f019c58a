//! Publishing the demo workspace's events ([`lectern_fixtures::demo`]) through
//! JetStream, as an upstream system would: pipelined, each acknowledged, each once.

use std::fmt;

use async_nats::jetstream::{self, stream::LastRawMessageErrorKind};
use lectern_fixtures::demo::{demo_events, expected_active_counts, record_counts, DemoCounts, DemoEvent};
use lectern_projector::stream::{ensure_stream, DEFAULT_STREAM_REPLICAS};
use lectern_schema::events::ChangeEvent;
use uuid::Uuid;

use crate::error::DevError;

/// Publishes in flight before their acks are awaited: enough to keep the connection
/// busy, far below async-nats' limit of pending acks (5 000).
const PIPELINE: usize = 256;

/// What [`publish_demo`] did, as `publish-demo` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DemoOutcome {
    /// Every event was sent and acknowledged.
    Published {
        /// The workspace the demo records belong to.
        workspace: Uuid,
        /// Events sent.
        events: usize,
        /// Of those, how many JetStream already held (an earlier run was cut short).
        duplicates: usize,
        /// Records the events describe.
        records: DemoCounts,
        /// Records the read model serves once every event is projected.
        active: DemoCounts,
    },
    /// The stream already holds the demo's final event: nothing was sent.
    AlreadyPublished {
        /// The workspace the demo records belong to.
        workspace: Uuid,
        /// Events the demo consists of.
        events: usize,
    },
}

impl fmt::Display for DemoOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Published { workspace, events, duplicates, records, active } => {
                write!(
                    f,
                    "published {events} demo events ({} contacts, {} items; {} and {} active once projected) \
                     for workspace {workspace}",
                    records.contacts, records.items, active.contacts, active.items
                )?;
                if *duplicates > 0 {
                    write!(f, "; JetStream already held {duplicates} of them")?;
                }
                Ok(())
            }
            Self::AlreadyPublished { workspace, events } => {
                write!(f, "demo data for workspace {workspace} is already published ({events} events); nothing to do")
            }
        }
    }
}

/// Publishes the demo for `workspace` (creating the stream if missing) and waits until
/// JetStream has acknowledged every event. Does nothing when the stream already holds
/// the demo's final event; an earlier run cut short is completed, its events stored once.
#[tracing::instrument(skip_all, fields(%workspace))]
pub async fn publish_demo(jetstream: &jetstream::Context, workspace: Uuid) -> Result<DemoOutcome, DevError> {
    let events = demo_events(workspace);
    let stream = ensure_stream(jetstream, DEFAULT_STREAM_REPLICAS).await.map_err(DevError::Stream)?;
    if let Some(last) = events.last() {
        if holds(&stream, last).await? {
            return Ok(DemoOutcome::AlreadyPublished { workspace, events: events.len() });
        }
    }
    let duplicates = send(jetstream, &events, Deduplicate::ByEventId).await?;
    tracing::info!(events = events.len(), duplicates, "demo published");
    Ok(DemoOutcome::Published {
        workspace,
        events: events.len(),
        duplicates,
        records: record_counts(&events),
        active: expected_active_counts(&events),
    })
}

/// Publishes the demo's events again even though the stream holds them, for a read
/// model that lost what the durable consumer had already acknowledged (a database
/// reset under a kept stream). Sent without `Nats-Msg-Id`, or JetStream would drop them
/// as repeats within its duplicate window; the projector's version guard makes the
/// second copy harmless wherever the first was applied. Returns the events sent.
#[tracing::instrument(skip_all, fields(%workspace))]
pub async fn resend_demo(jetstream: &jetstream::Context, workspace: Uuid) -> Result<usize, DevError> {
    let events = demo_events(workspace);
    ensure_stream(jetstream, DEFAULT_STREAM_REPLICAS).await.map_err(DevError::Stream)?;
    send(jetstream, &events, Deduplicate::No).await?;
    tracing::info!(events = events.len(), "demo sent again");
    Ok(events.len())
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Deduplicate {
    ByEventId,
    No,
}

/// Sends `events` pipelined and awaits every acknowledgement; returns how many
/// JetStream reported as duplicates.
async fn send(
    jetstream: &jetstream::Context,
    events: &[DemoEvent],
    deduplicate: Deduplicate,
) -> Result<usize, DevError> {
    let total = events.len();
    let mut duplicates = 0;
    for (chunk, batch) in events.chunks(PIPELINE).enumerate() {
        let mut acks = Vec::with_capacity(batch.len());
        for (offset, event) in batch.iter().enumerate() {
            let number = chunk * PIPELINE + offset + 1;
            let failed = move |error: Box<dyn std::error::Error + Send + Sync>| DevError::Nats {
                doing: format!("publishing demo event {number} of {total} to {}", event.subject),
                source: error,
            };
            let mut headers = async_nats::HeaderMap::new();
            if deduplicate == Deduplicate::ByEventId {
                headers.insert(async_nats::header::NATS_MESSAGE_ID, event.event_id.to_string().as_str());
            }
            let ack = jetstream
                .publish_with_headers(event.subject.clone(), headers, event.json.clone().into())
                .await
                .map_err(|error| failed(error.into()))?;
            acks.push((ack, failed));
        }
        for (ack, failed) in acks {
            if ack.await.map_err(|error| failed(error.into()))?.duplicate {
                duplicates += 1;
            }
        }
    }
    Ok(duplicates)
}

/// Whether the last message on `event`'s subject is `event` (compared decoded, so a
/// different JSON rendering of the same event still counts).
async fn holds(stream: &jetstream::stream::Stream, event: &DemoEvent) -> Result<bool, DevError> {
    match stream.get_last_raw_message_by_subject(&event.subject).await {
        Ok(stored) => {
            let ours = ChangeEvent::decode(event.json.as_bytes()).ok();
            Ok(ours.is_some() && ChangeEvent::decode(&stored.payload).ok() == ours)
        }
        Err(error) if error.kind() == LastRawMessageErrorKind::NoMessageFound => Ok(false),
        Err(error) => Err(DevError::Nats {
            doing: format!("reading the last message on {} to see whether the demo is published", event.subject),
            source: error.into(),
        }),
    }
}
