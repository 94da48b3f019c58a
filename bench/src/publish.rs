//! Publishing change events to JetStream the way a fast upstream does: pipelined,
//! every publish acknowledged, `Nats-Msg-Id` set to the event id.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, context::PublishAckFuture};

use super::{Context, Result};
use lectern_fixtures::generator::plan::Plan;
use lectern_fixtures::generator::records::{created_event, Event};

/// Publishes whose acks are still awaited, far below async-nats' limit of 5,000.
const WINDOW: usize = 2_048;

pub struct Publisher {
    jetstream: jetstream::Context,
    in_flight: VecDeque<PublishAckFuture>,
}

impl Publisher {
    /// Connects and makes sure the `CHANGES` stream exists (as the projector would).
    pub async fn connect(nats_url: &str) -> Result<Self> {
        let client = async_nats::connect(nats_url).await.context("connect to the private nats-server")?;
        let jetstream = jetstream::new(client);
        lectern_projector::stream::ensure_stream(&jetstream, lectern_projector::stream::DEFAULT_STREAM_REPLICAS)
            .await
            .context("create the CHANGES stream")?;
        Ok(Self { jetstream, in_flight: VecDeque::with_capacity(WINDOW) })
    }

    pub fn jetstream(&self) -> &jetstream::Context {
        &self.jetstream
    }

    pub async fn send(&mut self, event: Event) -> Result<()> {
        if self.in_flight.len() >= WINDOW {
            self.await_oldest().await?;
        }
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(async_nats::header::NATS_MESSAGE_ID, event.event_id.to_string().as_str());
        let ack = self
            .jetstream
            .publish_with_headers(event.subject, headers, event.json.into())
            .await
            .context("publish an event")?;
        self.in_flight.push_back(ack);
        Ok(())
    }

    async fn await_oldest(&mut self) -> Result<()> {
        if let Some(ack) = self.in_flight.pop_front() {
            ack.await.context("JetStream did not acknowledge a publish")?;
        }
        Ok(())
    }

    /// Waits for every outstanding acknowledgement.
    pub async fn flush(&mut self) -> Result<()> {
        while !self.in_flight.is_empty() {
            self.await_oldest().await?;
        }
        Ok(())
    }
}

/// Publishes every record's `created` event in creation order; returns how long it took.
pub async fn backlog(plan: &Plan, nats_url: &str) -> Result<(u64, Duration)> {
    let mut publisher = Publisher::connect(nats_url).await?;
    let order = plan.creation_order();
    let started = Instant::now();
    for (number, record) in order.iter().enumerate() {
        publisher.send(created_event(plan, *record)).await?;
        if number % 200_000 == 199_999 {
            eprintln!("  published {} of {} events", number + 1, order.len());
        }
    }
    publisher.flush().await?;
    Ok((order.len() as u64, started.elapsed()))
}
