//! How far the read model is behind the stream, as operators alert on it
//! (`lectern_projector_stream_behind_seconds`, `lectern_projector_stream_behind_messages`).
//!
//! Every [`LOOK_EVERY`] the projector reads the stream's head and the shared consumer's
//! acknowledgement floor (a message is acknowledged only once its batch committed). When
//! nothing is pending or unacknowledged, the read model holds everything the stream held
//! at that look; otherwise the oldest message it may lack is the one after the floor, and
//! its publication time is read from the stream.
//!
//! The gauge is worked out when scraped, from the last look: the age of the oldest message
//! the read model lacks, or, when the last look found it level, the age of that look. So
//! it keeps rising while NATS cannot be reached (nor the look made): events may be waiting
//! in the stream that this projector cannot see, and the read model is only known to be
//! current up to its last look. While level and connected it stays under
//! [`LOOK_EVERY`] plus a look's round trip.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use async_nats::jetstream::consumer::PullConsumer;
use async_nats::jetstream::stream::Stream;
use tokio_util::sync::CancellationToken;

use crate::error::ProjectorError;

/// How often the stream's head and the acknowledgement floor are read.
pub const LOOK_EVERY: Duration = Duration::from_secs(1);

/// The last look at the stream, shared by the watcher and the scrapes.
#[derive(Clone, Default)]
pub struct Staleness {
    last_look: Arc<Mutex<Option<Look>>>,
}

/// What a look found.
#[derive(Clone, Copy, Debug)]
struct Look {
    /// Up to when the read model is known to hold every event of the stream.
    current_up_to: SystemTime,
    /// Messages of the stream after the acknowledgement floor.
    behind: u64,
}

impl Staleness {
    /// Sets both gauges from the last look, for a scrape; before the first look they are
    /// not set.
    pub fn record_gauges(&self) {
        let Some(look) = *self.last_look.lock().unwrap_or_else(PoisonError::into_inner) else { return };
        let age = SystemTime::now().duration_since(look.current_up_to).unwrap_or_default();
        crate::metrics::record_stream_behind(age, look.behind);
    }

    /// Looks at the stream every [`LOOK_EVERY`] until `shutdown`. A failed look changes
    /// nothing, so the gauge goes on ageing from the last one that worked.
    pub async fn watch(self, mut stream: Stream, consumer: PullConsumer, shutdown: CancellationToken) {
        loop {
            match look(&mut stream, &consumer).await {
                Ok(Some(found)) => *self.last_look.lock().unwrap_or_else(PoisonError::into_inner) = Some(found),
                Ok(None) => {}
                Err(error) => tracing::debug!(%error, "looking at how far the read model is behind the stream"),
            }
            tokio::select! {
                () = tokio::time::sleep(LOOK_EVERY) => {}
                () = shutdown.cancelled() => return,
            }
        }
    }
}

/// One look; `None` when the oldest message the read model lacks is gone from the stream
/// between the two reads (the next look finds the new oldest).
async fn look(stream: &mut Stream, consumer: &PullConsumer) -> Result<Option<Look>, ProjectorError> {
    let looked_at = SystemTime::now();
    let head = stream.info().await.map_err(ProjectorError::nats("reading the stream's head"))?.state.clone();
    let consumer = consumer.get_info().await.map_err(ProjectorError::nats("reading the consumer's progress"))?;
    let floor = consumer.ack_floor.stream_sequence;
    let behind = head.last_sequence.saturating_sub(floor);
    if consumer.num_pending == 0 && consumer.num_ack_pending == 0 {
        return Ok(Some(Look { current_up_to: looked_at, behind: 0 }));
    }
    // The floor may lie before the stream's first message, when older ones were removed.
    let oldest = (floor + 1).max(head.first_sequence);
    let message = match stream.get_raw_message(oldest).await {
        Ok(message) => message,
        Err(error) if error.kind() == async_nats::jetstream::stream::RawMessageErrorKind::NoMessageFound => {
            return Ok(None)
        }
        Err(error) => return Err(ProjectorError::nats("reading the oldest message not yet applied")(error)),
    };
    Ok(Some(Look { current_up_to: system_time(message.time), behind }))
}

/// A JetStream timestamp as a [`SystemTime`].
pub fn system_time(time: async_nats::datetime::DateTime) -> SystemTime {
    let nanos = time.unix_timestamp_nanos();
    let since_epoch = Duration::from_nanos(u64::try_from(nanos.max(0)).unwrap_or(u64::MAX));
    SystemTime::UNIX_EPOCH + since_epoch
}
